//! Caches: options, creation, statistics and the address forms of the primitives.

use std::ffi::c_void;

use ucache_core::{Cache, CacheOptions, StatsSnapshot};

use crate::handle::{arg, Out, Registry};
use crate::status::{call, ucache_status, Fail};

/// A cache: one memory budget shared by its mappings. Opaque; created by
/// `ucache_cache_new`, released by `ucache_cache_free`.
pub struct ucache_cache {
    _private: (),
}

pub(crate) static CACHES: Registry<Cache> =
    Registry::new(1, "ucache_cache", ucache_status::UCACHE_ERR_BAD_HANDLE);

/// The cache a handle names.
pub(crate) fn cache_of(cache: *const ucache_cache) -> Result<Cache, Fail> {
    Ok((*CACHES.get(cache as usize)?).clone())
}

/// How to build a cache. Fill it with `ucache_cache_options_init`, then change fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ucache_cache_options {
    /// The budget: the most bytes of buffers resident at once.
    pub memory_bytes: u64,
    /// Buffers evicted per batch (1 to 1024, whatever their size); 0: decided by
    /// `batch_bytes`. At most one of the two may be set.
    pub batch_buffers: usize,
    /// Bytes evicted per batch; 0 (with `batch_buffers` 0): 256 KiB, or an eighth of a smaller
    /// budget.
    pub batch_bytes: u64,
    /// Threads that run prefetches and write-backs (1 to 64); 0: one per CPU, at most 4.
    pub io_threads: usize,
    /// Keep a few eviction batches free in the background (default true).
    pub background_eviction: bool,
    /// Time the phases of faults on transparent mappings (the `fault_*_ns` statistics;
    /// default false).
    pub profile_faults: bool,
    /// Milliseconds a load waits for memory when nothing can be evicted before it fails with
    /// `UCACHE_ERR_BUDGET_EXHAUSTED` (default 5000).
    pub budget_wait_ms: u64,
}

/// Fills `options` with the defaults for a cache of `memory_bytes`.
///
/// Ownership: `options` is the caller's; only written. Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_cache_options_init(
    options: *mut ucache_cache_options,
    memory_bytes: u64,
) -> ucache_status {
    call(|| {
        Out::new(options, "options")?.set(ucache_cache_options {
            memory_bytes,
            batch_buffers: 0,
            batch_bytes: 0,
            io_threads: 0,
            background_eviction: true,
            profile_faults: false,
            budget_wait_ms: ucache_core::CacheOptions::DEFAULT_BUDGET_WAIT.as_millis() as u64,
        });
        Ok(())
    })
}

/// Creates a cache and stores its handle in `*out`.
///
/// Ownership: `options` is only read (NULL is refused). The new handle belongs to the
/// caller, who releases it with `ucache_cache_free`. Thread safety: any thread; the handle
/// may be used from any thread, concurrently.
#[no_mangle]
pub extern "C" fn ucache_cache_new(
    options: *const ucache_cache_options,
    out: *mut *mut ucache_cache,
) -> ucache_status {
    call(|| {
        let out = Out::new(out, "out")?;
        let o = arg(options, "options")?;
        let mut co = CacheOptions::new(o.memory_bytes)
            .background_eviction(o.background_eviction)
            .profile_faults(o.profile_faults)
            .budget_wait(std::time::Duration::from_millis(o.budget_wait_ms));
        match (o.batch_buffers, o.batch_bytes) {
            (0, 0) => {}
            (n, 0) => co = co.batch(n),
            (0, b) => co = co.batch_bytes(b),
            _ => return Err(Fail::bad("set batch_buffers or batch_bytes, not both")),
        }
        if o.io_threads != 0 {
            co = co.io_threads(o.io_threads);
        }
        let cache = Cache::new(co)?;
        out.set(CACHES.insert(cache) as *mut ucache_cache);
        Ok(())
    })
}

/// Releases a cache handle. Mappings made from it keep working (each holds the cache) until
/// they are unmapped; the budget's memory goes when the last of them does.
///
/// Ownership: consumes the handle; using it afterwards returns `UCACHE_ERR_BAD_HANDLE`.
/// Thread safety: any thread; calls already running on the handle finish normally.
#[no_mangle]
pub extern "C" fn ucache_cache_free(cache: *mut ucache_cache) -> ucache_status {
    call(|| CACHES.remove(cache as usize).map(drop))
}

/// Counters of a cache, summed over its threads when `ucache_cache_stats` was called.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ucache_stats {
    /// Pins and accesses that found the buffer cached.
    pub hits: u64,
    /// Loads from the store on demand (not prefetches).
    pub misses: u64,
    /// Accesses that waited for another thread's load or eviction of the same buffer.
    pub waits: u64,
    /// Buffers evicted, by the budget or explicitly.
    pub evictions: u64,
    /// Of `evictions`, those done by the background evictor.
    pub evictions_ahead: u64,
    /// Eviction candidates skipped because they were pinned, dirty or vetoed.
    pub eviction_cancels: u64,
    /// Dirty buffers written back successfully.
    pub writebacks: u64,
    /// Write-backs that failed; those buffers stayed dirty and resident.
    pub writeback_failures: u64,
    /// Loads that failed; those buffers stayed evicted.
    pub read_failures: u64,
    /// Loads that found the budget full and nothing evictable, and so waited for memory.
    pub budget_stalls: u64,
    /// Bytes read from stores.
    pub bytes_read: u64,
    /// Bytes written to stores.
    pub bytes_written: u64,
    /// Of `bytes_read`, bytes that sequential reads' scans read past the cache.
    pub bytes_read_past_cache: u64,
    /// Buffers loaded by prefetch.
    pub prefetches: u64,
    /// Prefetched buffers used before their eviction.
    pub prefetch_used: u64,
    /// Prefetched buffers evicted unused.
    pub prefetch_wasted: u64,
    /// Missing buffers the policy refused to admit.
    pub bypasses: u64,
    /// Faults served on transparent mappings (misses and first writes).
    pub faults: u64,
    /// First writes to clean buffers of transparent mappings.
    pub write_faults: u64,
    /// With `profile_faults`: faults whose phases were timed.
    pub faults_timed: u64,
    /// With `profile_faults`: time the timed faults took, in total.
    pub fault_ns: u64,
    /// With `profile_faults`: of that, making room.
    pub fault_evict_ns: u64,
    /// With `profile_faults`: of that, reading from the store.
    pub fault_io_ns: u64,
    /// With `profile_faults`: of that, installing pages.
    pub fault_install_ns: u64,
    /// With `profile_faults`: of that, bookkeeping.
    pub fault_bookkeeping_ns: u64,
    /// Buffers of transparent mappings set aside as eviction candidates.
    pub set_aside: u64,
    /// Set-aside buffers touched again and brought back without IO.
    pub restores: u64,
    /// Install calls (`UFFDIO_COPY`) of transparent mappings; a readahead run of adjacent
    /// buffers is one call.
    pub installs: u64,
    /// Bytes those calls installed.
    pub installed_bytes: u64,
    /// Read requests handed to stores (one per run of adjacent buffers read together).
    pub store_reads: u64,
    /// Of those, the ones handed over while another read of the same batch or stream was
    /// outstanding.
    pub store_reads_overlapped: u64,
    /// Of `misses`, readahead markers installed from bytes read with their window.
    pub marker_hits: u64,
    /// Miss latency histogram: entry i counts misses that took [2^i, 2^(i+1)) ns.
    pub miss_latency: [u64; UCACHE_LATENCY_BUCKETS],
}

/// Entries of `ucache_stats.miss_latency`.
pub const UCACHE_LATENCY_BUCKETS: usize = 32;
const _: () = assert!(UCACHE_LATENCY_BUCKETS == ucache_core::StatsSnapshot::LATENCY_BUCKETS);

/// `From<StatsSnapshot>` for `ucache_stats`, given the counters both have (every field but
/// `miss_latency`), each named once. `StatsSnapshot` is destructured without `..`: a counter
/// added to the Rust library fails to compile here until it is added to the C struct and to
/// this list too.
macro_rules! stats_from_snapshot {
    ($($counter:ident),* $(,)?) => {
        impl From<StatsSnapshot> for ucache_stats {
            fn from(s: StatsSnapshot) -> Self {
                let StatsSnapshot {
                    $($counter,)*
                    miss_latency: latency,
                } = s;
                let mut miss_latency = [0; UCACHE_LATENCY_BUCKETS];
                for (to, from) in miss_latency.iter_mut().zip(latency) {
                    *to = from;
                }
                ucache_stats {
                    $($counter,)*
                    miss_latency,
                }
            }
        }
    };
}

stats_from_snapshot!(
    hits,
    misses,
    waits,
    evictions,
    evictions_ahead,
    eviction_cancels,
    writebacks,
    writeback_failures,
    read_failures,
    budget_stalls,
    bytes_read,
    bytes_written,
    bytes_read_past_cache,
    prefetches,
    prefetch_used,
    prefetch_wasted,
    bypasses,
    faults,
    write_faults,
    faults_timed,
    fault_ns,
    fault_evict_ns,
    fault_io_ns,
    fault_install_ns,
    fault_bookkeeping_ns,
    set_aside,
    restores,
    installs,
    installed_bytes,
    store_reads,
    store_reads_overlapped,
    marker_hits,
);

/// Copies the cache's counters into `*out`.
///
/// Ownership: `out` is the caller's. Thread safety: any thread, concurrently with any use of
/// the cache; counters of calls in progress may or may not be included.
#[no_mangle]
pub extern "C" fn ucache_cache_stats(
    cache: *const ucache_cache,
    out: *mut ucache_stats,
) -> ucache_status {
    call(|| {
        let out = Out::new(out, "out")?;
        out.set(cache_of(cache)?.stats().into());
        Ok(())
    })
}

/// The cache's budget and the bytes of it in use now. Either pointer may be NULL.
///
/// Thread safety: any thread.
#[no_mangle]
pub extern "C" fn ucache_cache_usage(
    cache: *const ucache_cache,
    budget: *mut u64,
    used: *mut u64,
) -> ucache_status {
    call(|| {
        let c = cache_of(cache)?;
        if let Ok(b) = Out::new(budget, "budget") {
            b.set(c.budget());
        }
        if let Ok(u) = Out::new(used, "used") {
            u.set(c.used());
        }
        Ok(())
    })
}

/// An explicit primitive in address form: the range may lie in any mapping of the cache.
type AddrOp = fn(&Cache, *const u8, usize) -> ucache_core::Result<()>;

fn addr_op(
    cache: *const ucache_cache,
    addr: *const c_void,
    len: usize,
    op: AddrOp,
) -> ucache_status {
    call(|| Ok(op(&cache_of(cache)?, addr as *const u8, len)?))
}

/// `ucache_ensure_cached` for the range `[addr, addr+len)` of any mapping of `cache` (as a
/// transparent mapping's pointers give it). `UCACHE_ERR_OUT_OF_RANGE` outside every mapping.
///
/// Thread safety: any thread. `addr` is only compared, never dereferenced by this call.
#[no_mangle]
pub extern "C" fn ucache_cache_ensure_cached(
    cache: *const ucache_cache,
    addr: *const c_void,
    len: usize,
) -> ucache_status {
    addr_op(cache, addr, len, Cache::ensure_cached)
}

/// `ucache_prefetch` in address form (see `ucache_cache_ensure_cached`).
#[no_mangle]
pub extern "C" fn ucache_cache_prefetch(
    cache: *const ucache_cache,
    addr: *const c_void,
    len: usize,
) -> ucache_status {
    addr_op(cache, addr, len, Cache::prefetch)
}

/// `ucache_evict` in address form (see `ucache_cache_ensure_cached`).
#[no_mangle]
pub extern "C" fn ucache_cache_evict(
    cache: *const ucache_cache,
    addr: *const c_void,
    len: usize,
) -> ucache_status {
    addr_op(cache, addr, len, Cache::evict)
}

/// `ucache_writeback` in address form (see `ucache_cache_ensure_cached`).
#[no_mangle]
pub extern "C" fn ucache_cache_writeback(
    cache: *const ucache_cache,
    addr: *const c_void,
    len: usize,
) -> ucache_status {
    addr_op(cache, addr, len, Cache::writeback)
}

/// `ucache_msync` in address form (see `ucache_cache_ensure_cached`).
#[no_mangle]
pub extern "C" fn ucache_cache_msync(
    cache: *const ucache_cache,
    addr: *const c_void,
    len: usize,
) -> ucache_status {
    addr_op(cache, addr, len, Cache::msync)
}
