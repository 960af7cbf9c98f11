//! The cache: one memory budget and the eviction driver shared by its mappings.
//!
//! The budget counts resident buffers in bytes with one atomic. A loader first claims its
//! buffer (`Evicted → Loading`), then reserves its bytes, so a thread that lost the claim evicts
//! nothing for it; when the budget is full, that same thread evicts one batch
//! (there is no eviction thread to wait for and no eviction lock: concurrent evictors sweep
//! disjoint parts of the resident sets and race only through per-buffer CASes). Reservation
//! never overshoots, so resident memory never exceeds the budget. A background evictor
//! ([`crate::evictor`]) keeps a few batches free ahead of the loaders where the budget is large
//! enough, so that the loaders rarely find it full; it is one more such evictor, not a thread
//! anyone waits for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::error::{Error, Result};
use crate::evictor::Evictor;
use crate::io_worker::IoWorker;
use crate::mapping::{check_buffer_size, MapOptions, Mapping, MappingCore};
use crate::policy::{GlobalPolicy, GuardedGlobal, MappingUsage, ProportionalGlobal};
use crate::pool::FramePool;
use crate::stats::{Counter, Stats, StatsSnapshot};
use crate::store::Store;

/// [`CacheOptions::DEFAULT_BATCH_BYTES`], which documents it.
const DEFAULT_BATCH_BYTES: u64 = 256 << 10;
/// [`CacheOptions::MAX_BATCH`].
const MAX_BATCH: usize = 1024;

/// How much one eviction round frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Batch {
    Buffers(usize),
    Bytes(u64),
}

impl Batch {
    /// Buffers of `bs` bytes per round (1..=[`MAX_BATCH`]).
    fn buffers_for(self, bs: usize) -> usize {
        match self {
            Batch::Buffers(n) => n,
            Batch::Bytes(b) => (b / bs as u64).clamp(1, MAX_BATCH as u64) as usize,
        }
    }
}

/// One IO thread per CPU, at most 4.
fn default_io_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
}

/// Eviction rounds in a row that freed nothing and met failed write-backs, after which a load
/// gives up with [`Error::WritebackFailed`] instead of waiting out `budget_wait`. Two, not
/// one: the second round tries other candidates (the policy's hand and the sweep move on), so
/// one unwritable batch beside clean buffers does not fail a load.
const FAILED_WRITEBACK_ROUNDS: u32 = 2;

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

pub(crate) struct CacheCore {
    budget: u64,
    batch: Batch,
    used: AtomicU64,
    /// Budget the set-aside pools of tracked mappings hold, within `used`: a quarter of the
    /// budget at most, so that tracked mappings cannot reserve it away from the data.
    aside: AtomicU64,
    global: GuardedGlobal,
    pub(crate) stats: Stats,
    /// Every mapping's own counters, which [`Cache::stats`] adds to `stats`.
    pub(crate) stats_registry: crate::stats::Registry,
    /// Changed only by map and unmap; read by evictors and address lookups without locking.
    mappings: ArcSwap<Vec<Arc<MappingCore>>>,
    next_id: AtomicU64,
    pub(crate) io: IoWorker,
    evictor: Evictor,
    background_eviction: bool,
    budget_wait: Duration,
    pub(crate) profile: bool,
    /// The frame pools of pool mappings, one per buffer size, made by the first pool
    /// mapping of that size and kept as long as the cache (and every mapping holding one).
    pools: ArcSwap<Vec<Arc<FramePool>>>,
    pool_huge: bool,
    /// The process that made the cache: a forked child may not use it ([`crate::fork`]).
    pid: u32,
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
            core: Arc::new_cyclic(|weak| CacheCore {
                budget: options.memory_bytes,
                batch,
                used: AtomicU64::new(0),
                aside: AtomicU64::new(0),
                global: GuardedGlobal::new(options.global),
                stats: Stats::default(),
                stats_registry: Default::default(),
                mappings: ArcSwap::from_pointee(Vec::new()),
                next_id: AtomicU64::new(0),
                io: IoWorker::new(options.io_threads),
                evictor: Evictor::new(weak.clone()),
                background_eviction: options.background_eviction,
                budget_wait: options.budget_wait,
                profile: options.profile,
                pools: ArcSwap::from_pointee(Vec::new()),
                pool_huge: options.pool_huge_pages,
                pid: std::process::id(),
            }),
        })
    }

    /// Maps `object` of `store`. See [`MapOptions`] for the buffer size, length, access mode
    /// and policy.
    pub fn map(&self, store: Arc<dyn Store>, object: &str, options: MapOptions) -> Result<Mapping> {
        if crate::fork::is_foreign(self.core.pid) {
            return Err(Error::Forked);
        }
        let bs = check_buffer_size(options.buffer_size_or_default())?;
        let batch_bytes = self.core.batch_buffers(bs) as u64 * bs as u64;
        if self.core.budget < batch_bytes {
            return Err(Error::BudgetTooSmall {
                budget: self.core.budget,
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
            && self.core.budget >= BACKGROUND_EVICTION_BATCHES * batch_bytes
        {
            self.core.evictor.keep_free(batch_bytes);
        }
        self.core.add_mapping(core.clone());
        Ok(Mapping::new(core))
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.core.budget
    }

    /// Buffers of `buffer_size` bytes that one eviction round frees; `BadBufferSize` for a
    /// size no mapping can have.
    pub fn batch_buffers(&self, buffer_size: usize) -> Result<usize> {
        Ok(self.core.batch_buffers(check_buffer_size(buffer_size)?))
    }

    /// Bytes of the budget in use now: buffers resident or being loaded, and the set-aside
    /// pools of tracked mappings (whose buffers' bytes live in those pools).
    pub fn used(&self) -> u64 {
        self.core.used.load(Ordering::Relaxed)
    }

    /// Bytes of the budget that the frame pools of pool mappings hold now (whole chunks,
    /// their frames in use or free), within [`Cache::used`].
    pub fn pool_bytes(&self) -> u64 {
        self.core.pools.load().iter().map(|p| p.charged()).sum()
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.core.stats_registry.snapshot(&self.core.stats)
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
        let (m, off) = self.core.find(addr, len)?;
        m.ensure_cached_range(off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::prefetch`] (index list: [`Mapping::prefetch_buffers`]);
    /// the range rules of [`Cache::ensure_cached`].
    pub fn prefetch(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.core.find(addr, len)?;
        MappingCore::prefetch_range(&m, off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::evict`] (index list: [`Mapping::evict_buffers`]); the
    /// range rules of [`Cache::ensure_cached`].
    pub fn evict(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.core.find(addr, len)?;
        m.evict_range(off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::writeback`] (index list:
    /// [`Mapping::writeback_buffers`]); the range rules of [`Cache::ensure_cached`].
    pub fn writeback(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.core.find(addr, len)?;
        MappingCore::writeback_range(&m, off, len as u64)
    }

    /// Raw-pointer form of [`Mapping::msync`] (index list: [`Mapping::msync_buffers`]), with
    /// its failure rules; the range rules of [`Cache::ensure_cached`].
    pub fn msync(&self, addr: *const u8, len: usize) -> Result<()> {
        let (m, off) = self.core.find(addr, len)?;
        m.msync_range(off, len as u64)
    }
}

impl Drop for CacheCore {
    fn drop(&mut self) {
        self.evictor.stop();
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("budget", &self.core.budget)
            .field("used", &self.used())
            .field("batch", &self.core.batch)
            .finish()
    }
}

impl CacheCore {
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn budget_bytes(&self) -> u64 {
        self.budget
    }

    /// Grants a set-aside pool up to `slots` slots of `bs` bytes within the quarter of the
    /// budget all pools share; 0 if fewer than two fit. The caller reserves the bytes from
    /// the budget itself and gives the grant back with [`CacheCore::release_aside`].
    pub(crate) fn claim_aside(&self, slots: u64, bs: usize) -> u64 {
        let cap = self.budget / 4;
        let mut got = 0;
        let _ = self
            .aside
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                got = slots.min(cap.saturating_sub(held) / bs as u64);
                if got < 2 {
                    got = 0;
                    return None;
                }
                Some(held + got * bs as u64)
            });
        got
    }

    pub(crate) fn release_aside(&self, bytes: u64) {
        self.aside.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Buffers of `bs` bytes evicted per round.
    pub(crate) fn batch_buffers(&self, bs: usize) -> usize {
        self.batch.buffers_for(bs)
    }

    /// The mapping whose range contains `[addr, addr+len)`, and the offset in it.
    fn find(&self, addr: *const u8, len: usize) -> Result<(Arc<MappingCore>, u64)> {
        let a = addr as usize;
        let list = self.mappings.load();
        for m in list.iter().filter(|m| !m.is_pool()) {
            let base = m.base() as usize;
            if a >= base
                && a.checked_add(len)
                    .is_some_and(|end| end <= base + m.len() as usize)
            {
                return Ok((m.clone(), (a - base) as u64));
            }
        }
        Err(Error::OutOfRange(crate::error::Bounds::Address {
            addr: a,
            len,
        }))
    }

    pub(crate) fn add_mapping(&self, m: Arc<MappingCore>) {
        self.mappings.rcu(|list| {
            let mut l = Vec::clone(list);
            l.push(m.clone());
            l
        });
    }

    pub(crate) fn remove_mapping(&self, id: u64) {
        self.mappings.rcu(|list| {
            list.iter()
                .filter(|m| m.id() != id)
                .cloned()
                .collect::<Vec<_>>()
        });
    }

    /// Reserves `bytes` of the budget, evicting as needed. If nothing could be freed for
    /// `budget_wait` and the rounds met write-backs that failed, the last such failure is the
    /// error ([`Error::WritebackFailed`]: those buffers stay dirty and resident); otherwise
    /// [`Error::BudgetExhausted`].
    pub(crate) fn reserve(&self, bytes: u64) -> Result<()> {
        self.acquire(true, |strict| self.take(bytes, strict).then_some(()))
            .map(drop)
    }

    /// Takes `bytes` of the budget: if the global policy says they fit without evicting, or,
    /// `strict`, if they fit the budget itself.
    fn take(&self, bytes: u64, strict: bool) -> bool {
        if strict {
            self.take_within_budget(bytes)
        } else {
            self.take_if_fits(bytes)
        }
    }

    /// The frame of `pool` a pool mapping's load reads into: a free one, or one of a chunk
    /// the pool grows by, charged to the budget as a whole (evicting as needed, as
    /// [`CacheCore::reserve`]). With `wait` false, gives up (`None`) as soon as an eviction
    /// round frees nothing, as [`CacheCore::try_reserve`].
    pub(crate) fn reserve_frame(&self, pool: &FramePool, wait: bool) -> Result<Option<u32>> {
        let chunk = pool.chunk_bytes();
        self.acquire(wait, |strict| {
            if let Some(f) = pool.pop() {
                let low = self.evictor.low();
                if low > 0 && self.short_of(low) {
                    self.evictor.kick();
                }
                return Some(f);
            }
            if !self.take(chunk, strict) {
                return None;
            }
            let f = pool.grow();
            if f.is_none() {
                self.release(chunk);
            }
            f
        })
    }

    /// Gives back what a pool handed back of its chunks (see [`FramePool::put`]).
    pub(crate) fn put_frames(&self, pool: &FramePool, frames: &[u32]) {
        let released = pool.put(frames);
        if released > 0 {
            self.release(released);
        }
    }

    /// Gives back every wholly free chunk of `pool` (see [`FramePool::trim`]).
    pub(crate) fn put_frames_trim(&self, pool: &FramePool) {
        let released = pool.trim();
        if released > 0 {
            self.release(released);
        }
    }

    /// The frame pool of `bs`-byte buffers, made on first use. A budget smaller than one
    /// chunk is [`Error::BudgetTooSmall`].
    pub(crate) fn pool_for(&self, bs: usize) -> Result<Arc<FramePool>> {
        if let Some(p) = self.pools.load().iter().find(|p| p.buffer_size() == bs) {
            return Ok(p.clone());
        }
        let keep = self.batch_buffers(bs);
        let made = Arc::new(FramePool::new(bs, self.budget, keep, self.pool_huge)?);
        let mut out = made.clone();
        // Two threads may make one at once: the first in the list wins, the other's
        // (uncharged, unpopulated) is dropped.
        self.pools.rcu(|list| {
            if let Some(p) = list.iter().find(|p| p.buffer_size() == bs) {
                out = p.clone();
                return Vec::clone(list);
            }
            out = made.clone();
            let mut l = Vec::clone(list);
            l.push(made.clone());
            l
        });
        Ok(out)
    }

    /// Bytes of the pools' free frames: charged to the budget, yet free for pool loads.
    fn pools_free(&self) -> u64 {
        self.pools.load().iter().map(|p| p.free_bytes()).sum()
    }

    /// Waits for `take` to succeed, evicting as needed: the loop of [`CacheCore::reserve`]
    /// and [`CacheCore::reserve_frame`]. `take(strict)` tries to take what the caller
    /// needs; `strict` asks it to take it if it fits the budget itself, whatever the global
    /// policy would rather keep free. If nothing could be freed for `budget_wait` and the
    /// rounds met write-backs that failed, the last such failure is the error.
    fn acquire<T>(&self, wait: bool, mut take: impl FnMut(bool) -> Option<T>) -> Result<Option<T>> {
        if wait {
            take_writeback_failure();
        }
        let mut stuck_since: Option<Instant> = None;
        let mut stalled = false;
        let mut spins = 0u32;
        // Rounds in a row that freed nothing because the write-backs they tried failed.
        let mut failed_rounds = 0u32;
        loop {
            if let Some(t) = take(false) {
                return Ok(Some(t));
            }
            if self.evict_round() > 0 {
                stuck_since = None;
                spins = 0;
                failed_rounds = 0;
                // A failure beside the progress is not what this load waits on.
                take_writeback_failure();
                continue;
            }
            if wait {
                if let Some((failed, first)) = take_writeback_failure() {
                    // Unwritable dirty data (a full disk, a store that is down) does not
                    // come free by waiting, unlike a pin: after rounds of failed write-backs
                    // only, say so now rather than retry the same writes for all of
                    // `budget_wait`. The buffers stay dirty and resident.
                    failed_rounds += 1;
                    if failed_rounds >= FAILED_WRITEBACK_ROUNDS {
                        return Err(Error::WritebackFailed {
                            failed,
                            first: Box::new(first),
                        });
                    }
                    note_writeback_failure(failed, first);
                }
            }
            // A global policy may ask for eviction before the budget is full; with nothing
            // evictable, that early request must not refuse what the budget still holds.
            if let Some(t) = take(true) {
                return Ok(Some(t));
            }
            if !wait {
                return Ok(None);
            }
            // Nothing evictable right now: other evictors may hold the candidates, or every
            // buffer is pinned. Back off, and give up only after a long time without progress.
            if !stalled {
                stalled = true;
                self.stats.add(Counter::BudgetStalls, 1);
            }
            let since = *stuck_since.get_or_insert_with(Instant::now);
            if since.elapsed() > self.budget_wait {
                return Err(self.gave_up());
            }
            spins += 1;
            if spins < 4 || !crate::sync::CAN_PARK {
                crate::sync::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50 * spins.min(20) as u64));
            }
        }
    }

    /// The error of a load that found no memory for `budget_wait`. Dirty buffers that could
    /// not be written back (ENOSPC, a store that is down) are the cause to report, not the
    /// full budget they hold.
    fn gave_up(&self) -> Error {
        self.gave_up_with(take_writeback_failure())
    }

    /// [`CacheCore::gave_up`] with the write-back failure the caller collected.
    fn gave_up_with(&self, failure: Option<(usize, Error)>) -> Error {
        if let Some((failed, first)) = failure {
            return Error::WritebackFailed {
                failed,
                first: Box::new(first),
            };
        }
        Error::BudgetExhausted {
            used: self.used.load(Ordering::Relaxed),
        }
    }

    /// For a load that must not block while it waits for memory (the async miss, which
    /// sleeps between tries instead), called right after each eviction round that freed too
    /// little, on that round's thread: counts the stall on the first call and fails as
    /// [`CacheCore::reserve`] would once `budget_wait` has passed since then. The round's
    /// write-back failure is moved from the thread into `wait`, because the task may resume
    /// on another thread after its sleep.
    #[cfg(feature = "tokio")]
    pub(crate) fn still_waiting(&self, wait: &mut RoomWait) -> Result<()> {
        if let Some(f) = take_writeback_failure() {
            wait.failure = Some(f);
        }
        let t = *wait.since.get_or_insert_with(|| {
            self.stats.add(Counter::BudgetStalls, 1);
            Instant::now()
        });
        if t.elapsed() > self.budget_wait {
            return Err(self.gave_up_with(wait.failure.take()));
        }
        Ok(())
    }

    /// As [`CacheCore::reserve`], but gives up as soon as an eviction round frees nothing.
    pub(crate) fn try_reserve(&self, bytes: u64) -> bool {
        matches!(
            self.acquire(false, |strict| self.take(bytes, strict).then_some(())),
            Ok(Some(()))
        )
    }

    /// Adds `bytes` to the budget in use if they fit the budget itself, whatever the global
    /// policy would rather keep free.
    fn take_within_budget(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                (used + bytes <= self.budget).then_some(used + bytes)
            })
            .is_ok()
    }

    /// Adds `bytes` to the budget in use if the global policy says they fit without evicting,
    /// and wakes the background evictor if that leaves less than its share free.
    fn take_if_fits(&self, bytes: u64) -> bool {
        loop {
            let used = self.used.load(Ordering::Relaxed);
            if self.global.need_to_evict(used, bytes, self.budget) {
                return false;
            }
            if self
                .used
                .compare_exchange_weak(used, used + bytes, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let low = self.evictor.low();
                if low > 0 && self.global.need_to_evict(used + bytes, low, self.budget) {
                    self.evictor.kick();
                }
                return true;
            }
        }
    }

    pub(crate) fn evictor(&self) -> &Evictor {
        &self.evictor
    }

    /// Whether the global policy would evict before `bytes` more could be loaded.
    /// The pools' free frames count as free here: they are what a pool load takes first.
    pub(crate) fn short_of(&self, bytes: u64) -> bool {
        let used = self.used.load(Ordering::SeqCst);
        self.global
            .need_to_evict(used.saturating_sub(self.pools_free()), bytes, self.budget)
    }

    /// One eviction round on the background evictor's behalf; returns how many buffers'
    /// budget it freed (buffers set aside included, so its evictions are counted where they
    /// happen: [`crate::evictor::on_evictor_thread`]).
    pub(crate) fn evict_ahead(&self) -> u64 {
        self.evict_round()
    }

    /// Gives back `bytes` of the budget (after an eviction or a failed load).
    pub(crate) fn release(&self, bytes: u64) {
        let prev = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(prev >= bytes, "budget underflow");
    }

    /// Evicts up to one batch, asking the global policy where from. Returns buffers evicted.
    /// The batch is counted in bytes across mappings, in the first chosen mapping's buffers
    /// when it was given as a count.
    fn evict_round(&self) -> u64 {
        let list = self.mappings.load();
        let usage: Vec<MappingUsage> = list
            .iter()
            .map(|m| MappingUsage {
                resident: m.resident(),
                buffer_size: m.buffer_size(),
                weight: m.weight(),
            })
            .collect();
        let mut order = Vec::with_capacity(list.len());
        self.global.choose_eviction_mappings(&usage, &mut order);
        let mut evicted = 0;
        let mut left: Option<u64> = None;
        for i in order {
            let Some(m) = list.get(i) else { continue };
            let bs = m.buffer_size() as u64;
            let bytes =
                *left.get_or_insert_with(|| self.batch.buffers_for(bs as usize) as u64 * bs);
            if bytes == 0 {
                break;
            }
            let n = m.evict_some(bytes.div_ceil(bs) as usize);
            evicted += n;
            left = Some(bytes.saturating_sub(n * bs));
        }
        evicted
    }
}

#[cfg(not(feature = "shuttle"))]
std::thread_local! {
    /// The last write-back failure that an eviction round of this thread met: the count of
    /// buffers it left dirty and the first error. `reserve` reports it if it gives up.
    static WRITEBACK_FAILURE: std::cell::RefCell<Option<(usize, Error)>> =
        const { std::cell::RefCell::new(None) };
}

// The model checker runs its threads on one OS thread: each needs its own record.
#[cfg(feature = "shuttle")]
shuttle::thread_local! {
    static WRITEBACK_FAILURE: std::cell::RefCell<Option<(usize, Error)>> =
        std::cell::RefCell::new(None);
}

/// Records that an eviction round's write-back of `failed` buffers failed (they stay dirty),
/// for the `reserve` of this thread that ran the round.
pub(crate) fn note_writeback_failure(failed: usize, first: Error) {
    let _ = WRITEBACK_FAILURE.try_with(|f| {
        if let Ok(mut f) = f.try_borrow_mut() {
            *f = Some((failed, first));
        }
    });
}

/// What an async load has waited for memory so far ([`CacheCore::still_waiting`]).
#[cfg(feature = "tokio")]
#[derive(Default)]
pub(crate) struct RoomWait {
    since: Option<Instant>,
    /// The last write-back failure of its eviction rounds.
    failure: Option<(usize, Error)>,
}

fn take_writeback_failure() -> Option<(usize, Error)> {
    WRITEBACK_FAILURE
        .try_with(|f| f.try_borrow_mut().ok().and_then(|mut f| f.take()))
        .ok()
        .flatten()
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
