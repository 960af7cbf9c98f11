//! Cache statistics, readable at any time.
//!
//! Counters are sharded per thread (each shard on its own cache line) so that counting a hit
//! costs an uncontended relaxed add: a shared counter would bounce one line between all cores
//! on every access and cap hit throughput. Reading sums the shards.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crossbeam_utils::CachePadded;

/// Shards owned by one thread each: the first threads of the process to count.
const SHARDS: usize = 64;
/// Shards shared, with atomic adds, by the threads after those.
const SHARED_SHARDS: usize = 16;
/// [`StatsSnapshot::LATENCY_BUCKETS`].
pub(crate) const LATENCY_BUCKETS: usize = 32;

impl StatsSnapshot {
    /// Miss latency buckets (`miss_latency.len()`): bucket i holds latencies in
    /// [2^i, 2^(i+1)) ns; the last also holds everything above 2 s.
    pub const LATENCY_BUCKETS: usize = LATENCY_BUCKETS;
}

macro_rules! counters {
    ($($name:ident: $doc:literal),* $(,)?) => {
        #[derive(Default)]
        struct Shard {
            $($name: AtomicU64,)*
            miss_ns: [AtomicU64; LATENCY_BUCKETS],
        }

        /// A point-in-time sum of the counters.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct StatsSnapshot {
            $(#[doc = $doc] pub $name: u64,)*
            /// Miss latency histogram: `miss_latency[i]` counts misses that took
            /// [2^i, 2^(i+1)) ns, from the claim of the buffer to its publication: making
            /// room (an eviction the miss does itself, or waiting for the evictor) and the
            /// read, as the thread that missed waited for them. Prefetches are not misses.
            pub miss_latency: Vec<u64>,
        }

        impl Stats {
            /// Sums every shard.
            pub fn snapshot(&self) -> StatsSnapshot {
                let mut s = StatsSnapshot {
                    miss_latency: vec![0; LATENCY_BUCKETS],
                    ..Default::default()
                };
                self.add_to(&mut s);
                s
            }

        }

        impl StatsSnapshot {
            /// Adds `o`'s counts to these.
            fn absorb(&mut self, o: &StatsSnapshot) {
                $(self.$name += o.$name;)*
                self.miss_latency.resize(LATENCY_BUCKETS, 0);
                for (a, b) in self.miss_latency.iter_mut().zip(&o.miss_latency) {
                    *a += b;
                }
            }
        }

        impl Stats {
            /// Adds every shard to `s`.
            fn add_to(&self, s: &mut StatsSnapshot) {
                s.miss_latency.resize(LATENCY_BUCKETS, 0);
                for sh in self.shards.iter() {
                    $(s.$name += sh.$name.load(Relaxed);)*
                    for (i, b) in sh.miss_ns.iter().enumerate() {
                        s.miss_latency[i] += b.load(Relaxed);
                    }
                }
            }
        }
    };
}

counters! {
    hits: "Pins and accesses that found the buffer cached.",
    misses: "Loads from the store on demand (not prefetches).",
    waits: "Accesses that waited for another thread's load or eviction of the same buffer.",
    evictions: "Buffers evicted, by the budget or explicitly.",
    evictions_ahead: "Of `evictions`, those done by the background evictor before a loader needed the room.",
    eviction_cancels: "Eviction candidates skipped because they were pinned, dirty or vetoed.",
    writebacks: "Dirty buffers written back successfully.",
    writeback_failures: "Write-backs that failed; those buffers stayed dirty and resident.",
    read_failures: "Loads that failed; those buffers stayed evicted.",
    budget_stalls: "Loads that found the budget full and nothing evictable (every resident buffer pinned, loading or vetoed), and so waited for memory; after `CacheOptions::budget_wait` without progress such a load fails with `BudgetExhausted`.",
    bytes_read: "Bytes read from stores.",
    bytes_written: "Bytes written to stores.",
    bytes_read_past_cache: "Of `bytes_read`, bytes that sequential `Mapping::read` scans read from the store straight into the caller's memory, never cached (`MapOptions::scan_bypass`).",
    prefetches: "Buffers loaded by prefetch.",
    prefetch_used: "Prefetched buffers pinned or read optimistically before their eviction. Plain loads are invisible to the cache, so on a transparent mapping (whose readahead is prefetching too) this stays 0 however well readahead works: judge it there by `misses` falling.",
    prefetch_wasted: "Prefetched buffers evicted without such a use. Not counted on transparent mappings, whose plain loads the cache cannot see.",
    bypasses: "Missing buffers the policy refused to admit: read around the cache by `Mapping::read`, or dropped from a prefetch.",
    faults: "Faults served on transparent mappings (misses and first writes).",
    write_faults: "First writes to clean buffers of transparent mappings (dirty tracking).",
    faults_timed: "With `profile_faults`: the faults whose phases were timed (about one in 16, drawn at random), the count the `fault_*_ns` totals belong to.",
    fault_ns: "With `profile_faults`: time the timed faults took, in total.",
    fault_evict_ns: "With `profile_faults`: of that, making room (eviction).",
    fault_io_ns: "With `profile_faults`: of that, reading from the store.",
    fault_install_ns: "With `profile_faults`: of that, installing pages (UFFDIO_COPY).",
    fault_bookkeeping_ns: "With `profile_faults`: of that, bookkeeping: the policy's hooks (on_miss, on_insert, choosing prefetches) and publishing the buffer. The rest of `fault_ns` is checks (state words, claims, waits).",
    set_aside: "Buffers of transparent mappings set aside as eviction candidates (copied into the pool, pages dropped).",
    restores: "Set-aside buffers touched again and brought back without IO (soft faults).",
    installs: "`UFFDIO_COPY` calls that installed buffers of transparent mappings. A readahead run of adjacent buffers goes in with one call, so `installed_bytes / installs` is the pages per call times 4 KiB.",
    installed_bytes: "Bytes those calls installed.",
    store_reads: "Read requests handed to stores: one per run of adjacent buffers read together, so `bytes_read` over this (against the buffer size) says how well reads were coalesced.",
    store_reads_overlapped: "Of `store_reads`, those handed over while another read of the same batch or stream was still outstanding, which a store can keep in flight together (io_uring, or `FileStore`'s IO threads). 0 means every read waited for the one before it.",
    marker_hits: "Of `misses`, faults on a transparent mapping's readahead marker served from bytes read with its window, without IO (the marker is left out of the mapping so that its touch starts the next window).",
}

/// The live counters of one cache.
pub struct Stats {
    shards: Box<[CachePadded<Shard>]>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            shards: (0..SHARDS + SHARED_SHARDS)
                .map(|_| CachePadded::new(Shard::default()))
                .collect(),
        }
    }
}

thread_local! {
    /// This thread's shard, and whether it is the shard's only writer. The first `SHARDS`
    /// threads own a shard each and count with plain load + store (no locked instruction on
    /// the hit path); later threads share the `SHARED_SHARDS` after them and count with atomic
    /// adds. An owned shard is never shared: one plain store racing an atomic add would lose
    /// the add.
    static SHARD: (usize, bool) = {
        let n = crate::ordinal::thread_ordinal();
        if n < SHARDS {
            (n, true)
        } else {
            (SHARDS + n % SHARED_SHARDS, false)
        }
    };
}

/// Names the counter an event increments.
#[derive(Clone, Copy)]
pub(crate) enum Counter {
    Hits,
    Misses,
    Waits,
    Evictions,
    EvictionsAhead,
    EvictionCancels,
    Writebacks,
    WritebackFailures,
    ReadFailures,
    BudgetStalls,
    BytesRead,
    BytesWritten,
    BytesReadPastCache,
    Prefetches,
    PrefetchUsed,
    PrefetchWasted,
    Bypasses,
    Faults,
    WriteFaults,
    FaultsTimed,
    FaultNs,
    FaultEvictNs,
    FaultIoNs,
    FaultInstallNs,
    FaultBookkeepingNs,
    SetAside,
    Restores,
    Installs,
    InstalledBytes,
    StoreReads,
    StoreReadsOverlapped,
    MarkerHits,
}

impl Stats {
    #[inline]
    fn shard(&self) -> (&Shard, bool) {
        let (i, owned) = SHARD.with(|s| *s);
        (&self.shards[i], owned)
    }

    #[inline]
    fn bump(a: &AtomicU64, n: u64, owned: bool) {
        if owned {
            a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
        } else {
            a.fetch_add(n, Relaxed);
        }
    }

    #[inline]
    pub(crate) fn add(&self, c: Counter, n: u64) {
        let (s, owned) = self.shard();
        let a = match c {
            Counter::Hits => &s.hits,
            Counter::Misses => &s.misses,
            Counter::Waits => &s.waits,
            Counter::Evictions => &s.evictions,
            Counter::EvictionsAhead => &s.evictions_ahead,
            Counter::EvictionCancels => &s.eviction_cancels,
            Counter::Writebacks => &s.writebacks,
            Counter::WritebackFailures => &s.writeback_failures,
            Counter::ReadFailures => &s.read_failures,
            Counter::BudgetStalls => &s.budget_stalls,
            Counter::BytesRead => &s.bytes_read,
            Counter::BytesWritten => &s.bytes_written,
            Counter::BytesReadPastCache => &s.bytes_read_past_cache,
            Counter::Prefetches => &s.prefetches,
            Counter::PrefetchUsed => &s.prefetch_used,
            Counter::PrefetchWasted => &s.prefetch_wasted,
            Counter::Bypasses => &s.bypasses,
            Counter::Faults => &s.faults,
            Counter::WriteFaults => &s.write_faults,
            Counter::FaultsTimed => &s.faults_timed,
            Counter::FaultNs => &s.fault_ns,
            Counter::FaultEvictNs => &s.fault_evict_ns,
            Counter::FaultIoNs => &s.fault_io_ns,
            Counter::FaultInstallNs => &s.fault_install_ns,
            Counter::FaultBookkeepingNs => &s.fault_bookkeeping_ns,
            Counter::SetAside => &s.set_aside,
            Counter::Restores => &s.restores,
            Counter::Installs => &s.installs,
            Counter::InstalledBytes => &s.installed_bytes,
            Counter::StoreReads => &s.store_reads,
            Counter::StoreReadsOverlapped => &s.store_reads_overlapped,
            Counter::MarkerHits => &s.marker_hits,
        };
        Self::bump(a, n, owned);
    }

    pub(crate) fn record_miss_latency(&self, d: Duration) {
        self.record_miss_latencies(d, 1);
    }

    /// Records `n` misses that each took `d`: the buffers of one batch, which its caller
    /// waited for together.
    pub(crate) fn record_miss_latencies(&self, d: Duration, n: u64) {
        let ns = d.as_nanos().max(1) as u64;
        let b = (63 - ns.leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        let (s, owned) = self.shard();
        Self::bump(&s.miss_ns[b], n, owned);
    }
}

/// Every mapping's own counters, for the cache's sum. A mapping counts its events in its own
/// [`Stats`] only, so the hit path bumps one counter, as it did before mappings had
/// statistics of their own; the cache's figures are its own counters (the budget's stalls)
/// plus every mapping's, summed when asked. The counters of a mapping that is gone stay here
/// until a snapshot folds them into `retired`: its IO threads may still count for a moment
/// after the unmap, and nothing counted is ever lost or counted twice.
#[derive(Default)]
pub(crate) struct Registry {
    inner: parking_lot::Mutex<RegistryInner>,
}

#[derive(Default)]
struct RegistryInner {
    live: Vec<std::sync::Arc<Stats>>,
    retired: Option<StatsSnapshot>,
}

impl Registry {
    /// Counters for a new mapping, part of every later sum.
    pub(crate) fn register(&self) -> std::sync::Arc<Stats> {
        let s = std::sync::Arc::new(Stats::default());
        self.inner.lock().live.push(s.clone());
        s
    }

    /// `own` (the cache's counters) plus every mapping's, past and present.
    pub(crate) fn snapshot(&self, own: &Stats) -> StatsSnapshot {
        let mut total = own.snapshot();
        let mut g = self.inner.lock();
        let g = &mut *g;
        let retired = g.retired.get_or_insert_with(|| StatsSnapshot {
            miss_latency: vec![0; LATENCY_BUCKETS],
            ..Default::default()
        });
        g.live.retain(|m| {
            if std::sync::Arc::strong_count(m) == 1 {
                // The mapping is gone, and nobody can count here any more.
                m.add_to(retired);
                false
            } else {
                true
            }
        });
        for m in &g.live {
            m.add_to(&mut total);
        }
        total.absorb(retired);
        total
    }
}

impl StatsSnapshot {
    /// The miss latency below which `q` (0..=1) of misses fall, as the upper edge of its bucket.
    pub fn miss_latency_quantile(&self, q: f64) -> Option<Duration> {
        let total: u64 = self.miss_latency.iter().sum();
        if total == 0 {
            return None;
        }
        let target = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.miss_latency.iter().enumerate() {
            seen += n;
            if seen >= target {
                return Some(Duration::from_nanos(1u64 << (i + 1)));
            }
        }
        None
    }

    /// Hits over all accesses, 0 when there were none.
    pub fn hit_ratio(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            self.hits as f64 / all as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_keeps_what_mappings_that_are_gone_counted() {
        let r = Registry::default();
        let own = Stats::default();
        own.add(Counter::BudgetStalls, 1);
        let a = r.register();
        a.add(Counter::Hits, 2);
        {
            let b = r.register();
            b.add(Counter::Hits, 3);
            b.record_miss_latency(Duration::from_micros(5));
            assert_eq!(r.snapshot(&own).hits, 5);
        }
        let s = r.snapshot(&own);
        assert_eq!((s.hits, s.budget_stalls), (5, 1));
        assert_eq!(s.miss_latency.iter().sum::<u64>(), 1);
        assert_eq!(
            r.inner.lock().live.len(),
            1,
            "the gone mapping's counters were folded"
        );
        assert_eq!(r.snapshot(&own), s, "and are counted once");
    }

    #[test]
    fn sums_across_threads() {
        let s = std::sync::Arc::new(Stats::default());
        let ts: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        s.add(Counter::Hits, 1);
                    }
                    s.record_miss_latency(Duration::from_micros(10));
                })
            })
            .collect();
        ts.into_iter().for_each(|t| t.join().unwrap());
        let snap = s.snapshot();
        assert_eq!(snap.hits, 4000);
        let p = snap.miss_latency_quantile(0.99).unwrap();
        assert!(
            p >= Duration::from_micros(10) && p <= Duration::from_micros(20),
            "{p:?}"
        );
    }
}
