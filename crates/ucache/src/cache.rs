//! The cache's public face: [`CacheOptions`], and [`Cache`], the handle that makes mappings and
//! serves the raw-address calls.
//!
//! This is the top of the core's module graph: it is the one module that both makes mappings
//! and names the shared core below them ([`crate::shared`]: the budget, the eviction round,
//! the IO threads), which never names a mapping. See docs/design.md, "Module layers".

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::mapping::{check_buffer_size, MapOptions, Mapping, MappingCore};
use crate::policy::{GlobalPolicy, ProportionalGlobal};
use crate::reclaim::{Batch, MAX_BATCH};
use crate::shared::{CacheCore, CoreOptions};
use crate::stats::StatsSnapshot;
use crate::store::Store;

/// [`CacheOptions::DEFAULT_BATCH_BYTES`], which documents it.
const DEFAULT_BATCH_BYTES: u64 = 256 << 10;
/// One IO thread per CPU, at most 4.
fn default_io_threads() -> usize {
    crate::ordinal::cpus().min(4)
}

/// [`CacheOptions::BACKGROUND_EVICTION_BATCHES`].
const BACKGROUND_EVICTION_BATCHES: u64 = 64;

/// [`CacheOptions::DEFAULT_BUDGET_WAIT`].
const DEFAULT_BUDGET_WAIT: Duration = Duration::from_secs(5);

/// How to build a [`Cache`].
#[derive(Clone)]
pub struct CacheOptions {
    memory_bytes: u64,
    /// `None`: [`DEFAULT_BATCH_BYTES`], or an eighth of a smaller budget.
    batch: Option<Batch>,
    global: Arc<dyn GlobalPolicy>,
    profile: bool,
    io_threads: usize,
    background_eviction: bool,
    budget_wait: Duration,
    pool_huge_pages: bool,
}

/// The cache's tuning constants: the defaults and limits its options are checked against.
impl CacheOptions {
    /// Default bytes per eviction batch ([`CacheOptions::batch_bytes`]): 64 buffers of 4 KiB,
    /// as vmcache (the paper uses 64–512). One `process_madvise` and its TLB shootdown are
    /// spread over the batch. Larger batches measured no faster here and trade the 99th
    /// percentile for the 99.9th (docs/design.md); counting bytes keeps a batch of 2 MiB
    /// buffers from holding a large part of the budget.
    pub const DEFAULT_BATCH_BYTES: u64 = DEFAULT_BATCH_BYTES;
    /// The most buffers one eviction batch takes ([`CacheOptions::batch`]).
    pub const MAX_BATCH: usize = MAX_BATCH;
    /// The background evictor ([`CacheOptions::background_eviction`]) engages where the
    /// budget holds at least this many batches.
    pub const BACKGROUND_EVICTION_BATCHES: u64 = BACKGROUND_EVICTION_BATCHES;
    /// How long a loader keeps trying to free memory before it reports the budget exhausted,
    /// by default ([`CacheOptions::budget_wait`]).
    pub const DEFAULT_BUDGET_WAIT: Duration = DEFAULT_BUDGET_WAIT;
}

impl CacheOptions {
    /// A cache that keeps at most `memory_bytes` of buffers resident.
    pub fn new(memory_bytes: u64) -> Self {
        CacheOptions {
            memory_bytes,
            batch: None,
            global: Arc::new(ProportionalGlobal),
            profile: false,
            io_threads: default_io_threads(),
            background_eviction: true,
            budget_wait: DEFAULT_BUDGET_WAIT,
            pool_huge_pages: true,
        }
    }
    /// Whether the frame pools of pool mappings ([`crate::Placement::Pool`]) ask the kernel
    /// for transparent huge pages (`MADV_HUGEPAGE`; on by default). Their chunks are 2 MiB and
    /// 2 MiB aligned, so each can be one huge page and one TLB entry. Off, they are advised
    /// `MADV_NOHUGEPAGE` (for measuring what huge pages buy).
    pub fn pool_huge_pages(mut self, on: bool) -> Self {
        self.pool_huge_pages = on;
        self
    }
    /// How long a load that needs memory waits when nothing can be evicted (every resident
    /// buffer pinned, loading, or vetoed by its policy) before it fails with
    /// [`Error::BudgetExhausted`] (default [`CacheOptions::DEFAULT_BUDGET_WAIT`], 5 s), or with
    /// [`Error::WritebackFailed`] where what kept memory from being freed was dirty buffers
    /// whose write-backs failed (a full disk, a store that is down). The wait restarts
    /// whenever an eviction frees something; each load that has to wait at all counts once
    /// in the `budget_stalls` statistic. A program whose pins are short can shorten it to
    /// learn of a leaked pin sooner; one that holds many pins across slow work can lengthen it.
    pub fn budget_wait(mut self, wait: Duration) -> Self {
        self.budget_wait = wait;
        self
    }
    /// Threads that run asynchronous prefetches and write-backs (default: one per CPU, at most
    /// 4). Each keeps its own stream of reads in flight and they share one queue of jobs, so a
    /// prefetcher whose windows cost CPU (installing pages, decompressing zram) is not held to
    /// one core. Started on first use, or when a transparent mapping is made.
    pub fn io_threads(mut self, n: usize) -> Self {
        self.io_threads = n;
        self
    }
    /// Whether a background thread keeps one to four eviction batches of the budget free, so
    /// that loaders rarely evict themselves (on by default). It engages only where the budget
    /// holds at least [`CacheOptions::BACKGROUND_EVICTION_BATCHES`] batches, so that the room it keeps free
    /// costs the cache at most a sixteenth of its budget. Loaders that find the budget full
    /// still evict themselves, so it is never waited for. See docs/design.md for what it buys.
    pub fn background_eviction(mut self, on: bool) -> Self {
        self.background_eviction = on;
        self
    }
    /// Time the phases of misses on transparent mappings (eviction, IO, install; the
    /// `fault_*_ns` statistics), for about one fault in 16 drawn at random (`faults_timed`
    /// counts them): nine clock reads per timed fault.
    pub fn profile_faults(mut self, on: bool) -> Self {
        self.profile = on;
        self
    }
    /// Buffers evicted per batch (1..=[`CacheOptions::MAX_BATCH`]), whatever their size. The budget must
    /// hold one batch of every mapping's buffers.
    pub fn batch(mut self, buffers: usize) -> Self {
        self.batch = Some(Batch::Buffers(buffers));
        self
    }
    /// Bytes evicted per batch: a mapping of `bs`-byte buffers evicts `bytes / bs` of them
    /// (at least one, at most [`CacheOptions::MAX_BATCH`]). The default is
    /// [`CacheOptions::DEFAULT_BATCH_BYTES`], or an
    /// eighth of the budget if that is smaller. A larger batch spreads one `process_madvise`
    /// and its TLB shootdown over more misses, and makes the rarer miss that evicts wait
    /// longer: it moves the stall from the 99th percentile to the 99.9th (docs/design.md).
    ///
    /// ```
    /// use ucache::{Cache, CacheOptions};
    ///
    /// let cache = Cache::new(CacheOptions::new(512 << 20).batch_bytes(1 << 20)).unwrap();
    /// assert_eq!(cache.batch_buffers(4096).unwrap(), 256);
    /// assert_eq!(cache.batch_buffers(2 << 20).unwrap(), 1, "never less than one buffer");
    /// ```
    pub fn batch_bytes(mut self, bytes: u64) -> Self {
        self.batch = Some(Batch::Bytes(bytes));
        self
    }
    /// The cache-wide policy (when to evict, from which mappings).
    pub fn global_policy(mut self, p: Arc<dyn GlobalPolicy>) -> Self {
        self.global = p;
        self
    }
}

/// A memory budget shared by mappings. Cheap to clone (a handle).
///
/// ```
/// use std::sync::Arc;
/// use ucache::{Cache, CacheOptions, MapOptions};
/// use ucache::store::MemoryStore;
///
/// let store = MemoryStore::new();
/// store.insert("data", (0..64 * 4096).map(|i| (i / 4096) as u8).collect());
/// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
/// let m = cache.map(Arc::new(store), "data", MapOptions::new()).unwrap();
/// for i in 0..64 {
///     let g = m.pin_shared(i).unwrap();
///     assert!(g.iter().all(|&b| b == i as u8));
/// }
/// assert!(cache.stats().evictions > 0, "64 buffers do not fit in 16");
/// m.unmap().unwrap();
/// ```
#[derive(Clone)]
pub struct Cache {
    pub(crate) core: Arc<CacheCore>,
}

impl Cache {
    pub fn new(options: CacheOptions) -> Result<Cache> {
        if options.io_threads == 0 || options.io_threads > 64 {
            return Err(Error::BadArgument(format!(
                "io_threads {} must be between 1 and 64",
                options.io_threads
            )));
        }
        let default = || Batch::Bytes(DEFAULT_BATCH_BYTES.min(options.memory_bytes / 8).max(4096));
        let batch = match options.batch.unwrap_or_else(default) {
            Batch::Buffers(n) if n == 0 || n > MAX_BATCH => {
                return Err(Error::BadArgument(format!(
                    "eviction batch {n} must be between 1 and {MAX_BATCH} buffers"
                )));
            }
            Batch::Bytes(b) if b < 4096 => {
                return Err(Error::BadArgument(format!(
                    "eviction batch of {b} bytes is under one 4 KiB buffer"
                )));
            }
            b => b,
        };
        crate::fork::watch();
        let min = batch.buffers_for(4096) as u64 * 4096;
        if options.memory_bytes < min {
            return Err(Error::BudgetTooSmall {
                budget: options.memory_bytes,
                batch: min,
            });
        }
        Ok(Cache {
            core: CacheCore::new(CoreOptions {
                budget: options.memory_bytes,
                batch,
                global: options.global,
                io_threads: options.io_threads,
                background_eviction: options.background_eviction,
                budget_wait: options.budget_wait,
                profile: options.profile,
                pool_huge_pages: options.pool_huge_pages,
            }),
        })
    }

    /// Maps `object` of `store`. See [`MapOptions`] for the buffer size, length, access mode
    /// and policy.
    pub fn map(&self, store: Arc<dyn Store>, object: &str, options: MapOptions) -> Result<Mapping> {
        if crate::fork::is_foreign(self.core.pid()) {
            return Err(Error::Forked);
        }
        let bs = check_buffer_size(options.buffer_size_or_default())?;
        let batch_bytes = self.core.budget.batch_buffers(bs) as u64 * bs as u64;
        let budget = self.core.budget.budget_bytes();
        if budget < batch_bytes {
            return Err(Error::BudgetTooSmall {
                budget,
                batch: batch_bytes,
            });
        }
        let id = self.core.next_id.fetch_add(1, Ordering::Relaxed);
        let core = Arc::new(MappingCore::new(
            self.core.clone(),
            id,
            store,
            object,
            options,
        )?);
        if core.is_transparent() {
            // Its readahead submits IO jobs from the SIGBUS handler: no thread may start there.
            self.core.io.start().map_err(|source| Error::Os {
                call: "spawn ucache-io thread",
                source,
            })?;
        }
        core.register_faults()?;
        // Not under the model checker: its threads are shuttle's, and the evictor's would not be.
        if self.core.background_eviction
            && !cfg!(feature = "shuttle")
            && budget >= BACKGROUND_EVICTION_BATCHES * batch_bytes
        {
            self.core.budget.evictor().keep_free(batch_bytes);
        }
        self.core.budget.mappings().add(core.clone());
        Ok(Mapping::new(core))
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.core.budget.budget_bytes()
    }

    /// Buffers of `buffer_size` bytes that one eviction round frees; `BadBufferSize` for a
    /// size no mapping can have.
    pub fn batch_buffers(&self, buffer_size: usize) -> Result<usize> {
        Ok(self
            .core
            .budget
            .batch_buffers(check_buffer_size(buffer_size)?))
    }

    /// Bytes of the budget in use now: buffers resident or being loaded, and the set-aside
    /// pools of tracked mappings (whose buffers' bytes live in those pools).
    pub fn used(&self) -> u64 {
        self.core.budget.used()
    }

    /// Bytes of the budget that the frame pools of pool mappings hold now (whole chunks,
    /// their frames in use or free), within [`Cache::used`].
    pub fn pool_bytes(&self) -> u64 {
        self.core.budget.pool_bytes()
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.core.stats_registry.snapshot(&self.core.budget.stats)
    }

    // The address forms. Units across the API: buffer calls take buffer indices, range calls
    // take byte offsets into a mapping, and these five take a raw address, for a caller that
    // holds nothing but a pointer into some mapping (a C library handed an `mmap`-like
    // pointer, the preload shim). Each finds the mapping that holds the whole range and
    // forwards to its byte-range form.

    /// Raw-pointer form of [`Mapping::ensure_cached`]: brings every buffer overlapping
    /// `[addr, addr+len)` into memory. For a caller that holds only a pointer into a mapping;
    /// with the [`Mapping`] at hand, use its byte-range form ([`Mapping::ensure_cached`]) or
    /// its index-list form ([`Mapping::ensure_cached_buffers`]). A range that is not wholly
    /// inside one in-place mapping (across two mappings, in a pool mapping, or outside every
    /// mapping) is [`Error::OutOfRange`] with [`Bounds::Address`](crate::Bounds::Address).
    pub fn ensure_cached(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.find(addr, len)?;
        m.ensure_cached_range(off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::prefetch`] (index list: [`Mapping::prefetch_buffers`]);
    /// the range rules of [`Cache::ensure_cached`].
    pub fn prefetch(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.find(addr, len)?;
        MappingCore::prefetch_range(&m, off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::evict`] (index list: [`Mapping::evict_buffers`]); the
    /// range rules of [`Cache::ensure_cached`].
    pub fn evict(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.find(addr, len)?;
        m.evict_range(off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::writeback`] (index list:
    /// [`Mapping::writeback_buffers`]); the range rules of [`Cache::ensure_cached`].
    pub fn writeback(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.find(addr, len)?;
        MappingCore::writeback_range(&m, off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::msync`] (index list: [`Mapping::msync_buffers`]), with
    /// its failure rules; the range rules of [`Cache::ensure_cached`].
    pub fn msync(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.find(addr, len)?;
        m.msync_range(off, len as u64)
    }

    /// One eviction round of the background evictor (`crate::evictor`), if the budget is
    /// short of `free` bytes; returns the buffers it freed. The round is the evictor's own
    /// (`Budget::evict_ahead`); only the thread and its parking are left out. For the model
    /// checker (tests/model.rs, `--features shuttle`); not an API.
    #[cfg(feature = "shuttle")]
    #[doc(hidden)]
    pub fn model_evict_ahead(&self, free: u64) -> u64 {
        let budget = &self.core.budget;
        if budget.short_of(free) {
            budget.evict_ahead()
        } else {
            0
        }
    }

    /// The in-place mapping whose range contains `[addr, addr+len)`, and the offset in it.
    fn find(&self, addr: *const u8, len: usize) -> Result<(Arc<MappingCore>, u64)> {
        let a = addr as usize;
        let list = self.core.budget.mappings().load();
        let within = |m: &MappingCore| {
            let base = m.base() as usize;
            !m.is_pool()
                && a >= base
                && a.checked_add(len)
                    .is_some_and(|end| end <= base + m.len() as usize)
        };
        for m in list.iter().filter_map(|m| m.get()) {
            // Every member is a mapping this façade made ([`Cache::map`]).
            let Some(core) = (&*m as &dyn std::any::Any).downcast_ref::<MappingCore>() else {
                continue;
            };
            if within(core) {
                let m: Arc<dyn std::any::Any + Send + Sync> = m;
                let core = m.downcast::<MappingCore>().expect("checked above");
                let base = core.base() as usize;
                return Ok((core, (a - base) as u64));
            }
        }
        Err(Error::OutOfRange(crate::error::Bounds::Address {
            addr: a,
            len,
        }))
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("budget", &self.core.budget.budget_bytes())
            .field("used", &self.used())
            .field("batch", &self.core.budget.batch())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn default_batch_is_256_kib_or_an_eighth_of_a_small_budget() {
        let big = Cache::new(CacheOptions::new(512 << 20)).unwrap();
        assert_eq!(big.batch_buffers(4096).unwrap(), 64);
        assert_eq!(big.batch_buffers(64 << 10).unwrap(), 4);
        assert_eq!(
            big.batch_buffers(2 << 20).unwrap(),
            1,
            "never less than one buffer"
        );
        let small = Cache::new(CacheOptions::new(64 * 4096)).unwrap();
        assert_eq!(small.batch_buffers(4096).unwrap(), 8);
        assert_eq!(small.batch_buffers(64 << 10).unwrap(), 1);
        let tiny = Cache::new(CacheOptions::new(4096)).unwrap();
        assert_eq!(tiny.batch_buffers(4096).unwrap(), 1);
    }

    #[test]
    fn explicit_batches_are_checked() {
        let c = Cache::new(CacheOptions::new(1 << 30).batch(MAX_BATCH)).unwrap();
        assert_eq!(
            c.batch_buffers(2 << 20).unwrap(),
            MAX_BATCH,
            "a count is a count"
        );
        let c = Cache::new(CacheOptions::new(1 << 30).batch_bytes(1 << 30)).unwrap();
        assert_eq!(
            c.batch_buffers(4096).unwrap(),
            MAX_BATCH,
            "bytes are capped in buffers"
        );
        for bad in [
            CacheOptions::new(1 << 20).batch(MAX_BATCH + 1),
            CacheOptions::new(1 << 20).batch_bytes(4095),
        ] {
            assert!(matches!(Cache::new(bad), Err(Error::BadArgument(_))));
        }
        let r = Cache::new(CacheOptions::new(1 << 20).batch_bytes(2 << 20));
        assert!(matches!(r, Err(Error::BudgetTooSmall { .. })), "{r:?}");
    }

    /// A round frees one batch of bytes, whatever the buffer size of the mapping it takes
    /// them from.
    #[test]
    fn a_round_frees_the_batch_in_bytes() {
        let store = Arc::new(MemoryStore::new());
        store.insert("o", vec![7u8; 4 << 20]);
        let c = Cache::new(CacheOptions::new(1 << 20).batch_bytes(256 << 10)).unwrap();
        for bs in [4096usize, 64 << 10] {
            let m = c
                // Pins in order would read ahead: this counts the evictions of one miss.
                .map(
                    store.clone(),
                    "o",
                    MapOptions::new().buffer_size(bs).readahead(false),
                )
                .unwrap();
            let fit = (1 << 20) / bs as u64;
            for i in 0..fit {
                drop(m.pin_shared(i).unwrap());
            }
            assert_eq!(c.used(), 1 << 20);
            let before = c.stats().evictions;
            drop(m.pin_shared(fit).unwrap());
            let evicted = c.stats().evictions - before;
            assert_eq!(evicted * bs as u64, 256 << 10, "buffer size {bs}");
            m.unmap().unwrap();
        }
    }
}
