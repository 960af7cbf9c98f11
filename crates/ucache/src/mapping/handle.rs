//! [`Mapping`]: the public handle of a mapping, and what `unmap` reports when it cannot
//! write everything back.

use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};
use crate::guard::{ExclusiveGuard, OptimisticView, SharedGuard};
use crate::state::{Phase, Word};

#[cfg(feature = "shuttle")]
mod model;

/// A mapped object. Dropping it writes back and releases everything, like [`Mapping::unmap`]
/// but without a way to report failure: call `unmap` to learn of it.
pub struct Mapping {
    pub(super) core: Arc<MappingCore>,
}

/// `unmap` could not write everything back. The mapping is handed back intact, dirty data
/// included, so the caller can retry.
#[derive(Debug, thiserror::Error)]
#[error("unmap failed: {error}")]
pub struct UnmapError {
    #[source]
    pub error: Error,
    pub mapping: Mapping,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("object", &self.core.object.name())
            .field("len", &self.core.len)
            .field("buffer_size", &self.core.bs)
            .finish()
    }
}

impl Mapping {
    pub(crate) fn new(core: Arc<MappingCore>) -> Self {
        Mapping { core }
    }

    /// Pins buffer `index` for reading, loading it if needed. Many readers may hold it.
    pub fn pin_shared(&self, index: u64) -> Result<SharedGuard<'_>> {
        self.core.pin_shared(index)
    }

    /// Pins buffer `index` for writing, loading it if needed. Writing through the guard
    /// marks the buffer dirty.
    #[inline]
    pub fn pin_exclusive(&self, index: u64) -> Result<ExclusiveGuard<'_>> {
        self.core.pin_exclusive(index)
    }

    /// Runs `f` on buffer `index` without pinning it, then validates that the buffer was
    /// neither evicted nor written meanwhile; if it was, runs `f` again. `f` must not act on
    /// what it reads before returning (vmcache's optimistic latch). On a transparent mapping a
    /// read racing an eviction faults and is served like a plain load (an IO error there is a
    /// `SIGBUS` or the mapping's hook, not an `Err`).
    pub fn read_optimistic<R>(
        &self,
        index: u64,
        f: impl FnMut(&OptimisticView<'_>) -> R,
    ) -> Result<R> {
        self.core.read_optimistic(index, f)
    }

    /// Brings every buffer overlapping `[offset, offset+len)` into memory, reading the missing
    /// ones in one batch.
    pub fn ensure_cached(&self, offset: u64, len: u64) -> Result<()> {
        self.core.ensure_cached_range(offset, len)
    }

    /// Brings the listed buffers into memory, reading the missing ones in one batch (many
    /// reads in flight on stores that support it).
    pub fn ensure_cached_buffers(&self, indices: &[u64]) -> Result<()> {
        self.core.ensure_cached_indices(indices)
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`, through the cache: each buffer is
    /// pinned shared (and loaded on a miss) and copied. A missing buffer that the policy does
    /// not [admit](crate::policy::Policy::admit) is read straight from the store into `buf`
    /// and not cached (cache_ext's admission filter), so a one-off pass over cold data leaves
    /// the cache as it was. Calls that read on from where an earlier one ended read ahead of
    /// the reader, as `read(2)` does ([`MapOptions::readahead`](crate::MapOptions::readahead)),
    /// and once such a stream is a long scan, its missing buffers are read past the cache
    /// straight into `buf` ([`MapOptions::scan_bypass`](crate::MapOptions::scan_bypass)).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.core.read_into(offset, buf)
    }

    /// Copies `data` into the mapping at `offset`, through the cache: the counterpart of
    /// [`Mapping::read`]. Each buffer the range overlaps is pinned exclusively (loaded first
    /// on a miss, so the bytes of a partly covered buffer outside the range keep the object's
    /// values), written, and left dirty for write-back; [`Mapping::msync`] makes it durable.
    ///
    /// A range past the end is refused with [`Error::OutOfRange`] before anything is written,
    /// and a read-only mapping with [`Error::ReadOnly`]. The write is not atomic: another
    /// thread may see the first buffers written before the last, and if a load fails midway
    /// (the error is returned) the buffers before it hold the new bytes. A buffer this thread
    /// holds exclusively is refused with [`Error::WouldDeadlock`], as a pin would be; like
    /// [`Mapping::pin_exclusive`], it waits for shared pins, so drop this thread's own shared
    /// guards of the range first.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// store.insert("table", vec![0; 4 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(store.clone(), "table", MapOptions::new().writable(true)).unwrap();
    /// map.write(4090, b"spans two buffers").unwrap();
    /// let mut back = [0u8; 17];
    /// map.read(4090, &mut back).unwrap();
    /// assert_eq!(&back, b"spans two buffers");
    /// map.msync(0, map.len()).unwrap();
    /// assert_eq!(&store.get("table").unwrap()[4090..4107], b"spans two buffers");
    /// ```
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.core.write_from(offset, data)
    }

    /// Visits buffers as they become available: pins each of `indices` shared and calls
    /// `f(index, bytes)`, hits at once and misses as soon as their own reads complete, keeping
    /// up to `depth` reads in flight from the calling thread (a graph frontier, a list of
    /// pages to probe). On an io_uring store each completed read is replaced by the next at
    /// once, so the device's queue stays full where [`Mapping::ensure_cached_buffers`] waits
    /// for its slowest read (`depth` 0 is refused with [`Error::BadArgument`]). Buffers another
    /// thread is loading or holds exclusively come last: while its own reads are in flight the
    /// stream waits for nobody, since the holder may be waiting for one of them. Nor does it
    /// wait for memory then: a `depth` larger than the budget allows pauses until a visited
    /// buffer can be evicted. Stops at the first error and returns it.
    /// `f` runs while reads are in flight: it may pin, but should not block for long. A pin
    /// from `f` of a buffer whose read is still in flight in this very call would wait on the
    /// calling thread itself, so it fails with [`Error::WouldDeadlock`]; `pin_each` hands that
    /// buffer to `f` once its read lands. A panic in `f` is resumed once the reads in flight
    /// have landed, so no buffer is left half loaded.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// store.insert("graph", (0..64 * 4096).map(|i| (i / 4096) as u8).collect());
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(Arc::new(store), "graph", MapOptions::new()).unwrap();
    /// let mut sum = 0u64;
    /// map.pin_each([3, 60, 7, 3], 32, |i, bytes| {
    ///     assert_eq!(bytes[0] as u64, i);
    ///     sum += i;
    /// })
    /// .unwrap();
    /// assert_eq!(sum, 73);
    /// ```
    pub fn pin_each(
        &self,
        indices: impl IntoIterator<Item = u64>,
        depth: usize,
        mut f: impl FnMut(u64, &[u8]),
    ) -> Result<()> {
        if depth == 0 {
            return Err(Error::BadArgument(
                "pin_each depth must be at least 1".into(),
            ));
        }
        self.core.pin_each(&mut indices.into_iter(), depth, &mut f)
    }

    /// The buffers of `indices` as shared pins, in the order they land: the iterator form of
    /// [`Mapping::pin_each`], for code that cannot live in a callback (it returns, awaits,
    /// or keeps guards). Up to `depth` buffers are read ahead of the consumer on the IO
    /// threads, as one stream refilled read by read; each `next` yields a buffer that has
    /// landed (the earliest listed first), or else waits for the oldest one still in flight.
    /// Buffers already cached come out at once. Each index comes out as often as it is
    /// listed.
    ///
    /// **Bound.** At most `min(depth, budget / buffer_size / 2)` buffers (the budget less
    /// the room the background evictor keeps free; at least one) are taken ahead of the
    /// consumer: claimed and in flight, or landed and held with a shared pin until their turn
    /// (unpinned, a landed buffer nobody has used yet is what CLOCK-like policies evict first,
    /// and it would be read twice). The other half of the budget is left to the caller's
    /// guards. A read ahead that would have to wait for memory is not issued; that buffer is
    /// loaded by its own pin in its turn, which waits as any miss does
    /// ([`Error::BudgetExhausted`] if the caller's guards hold the whole budget). The iterator
    /// never waits while it holds a pin: it yields every landed buffer first. Like any shared
    /// pin, one it holds makes an exclusive pin of that buffer wait: do not pin exclusively,
    /// on the consuming thread, a listed buffer not yet yielded.
    ///
    /// **Errors** are per item: an index past the end is [`Error::OutOfRange`] in its turn; a
    /// read that failed on the IO threads is retried by the item's own pin, whose error
    /// (such as [`Error::Io`]) is the item's; a buffer this thread holds exclusively is
    /// [`Error::WouldDeadlock`]. The iterator goes on after an error. `depth` 0 is refused
    /// with [`Error::BadArgument`].
    ///
    /// **Dropped early**, it unpins what it holds and waits for the reads it started (at most
    /// its window, already issued), so that afterwards none is in flight and everything it
    /// loaded is evictable.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// store.insert("column", (0..64 * 4096).map(|i| (i / 4096) as u8).collect());
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(Arc::new(store), "column", MapOptions::new()).unwrap();
    /// let mut sum = 0u64;
    /// for g in map.landing(0..64, 8).unwrap() {
    ///     let g = g.unwrap();
    ///     assert_eq!(g[0] as u64, g.index());
    ///     sum += g.index();
    /// }
    /// assert_eq!(sum, (0..64).sum());
    /// // Stopping half-way leaves nothing pinned and nothing in flight.
    /// let first: Vec<u64> = map.landing(0..64, 8).unwrap().take(3).map(|g| g.unwrap().index()).collect();
    /// assert_eq!(first.len(), 3);
    /// map.evict(0, map.len()).unwrap();
    /// assert_eq!(map.resident(), 0);
    /// ```
    pub fn landing<I: IntoIterator<Item = u64>>(
        &self,
        indices: I,
        depth: usize,
    ) -> Result<super::Landing<'_, I::IntoIter>> {
        super::Landing::new(&self.core, indices.into_iter(), depth)
    }

    /// Starts loading the buffers overlapping the range in the background. Missing buffers the
    /// policy does not admit are skipped, and so are those beyond what the budget holds (less
    /// the room the background evictor keeps free), which would only evict the first ones.
    ///
    /// The reads run on the IO threads; the room for them is made here, as a miss makes it.
    /// So where the budget is full of dirty buffers, the call waits for their write-back, as a
    /// miss would. Keep write-back ahead of prefetching (`writeback`, or the background
    /// evictor's free room) where the caller must not wait.
    pub fn prefetch(&self, offset: u64, len: u64) -> Result<()> {
        MappingCore::prefetch_range(&self.core, offset, len)
    }

    /// Starts loading the listed buffers in the background.
    pub fn prefetch_buffers(&self, indices: &[u64]) -> Result<()> {
        MappingCore::prefetch_indices(&self.core, indices)
    }

    /// Evicts the unpinned buffers overlapping the range, writing dirty ones back first.
    /// Pinned buffers are skipped. A failed write-back keeps its buffer and is reported.
    pub fn evict(&self, offset: u64, len: u64) -> Result<()> {
        self.core.evict_range(offset, len)
    }

    /// Evicts the listed buffers, as [`Mapping::evict`] does a range: unpinned ones go (dirty
    /// ones written back first), pinned ones stay. Every index is checked first: one past the
    /// end is [`Error::OutOfRange`] and nothing is evicted.
    pub fn evict_buffers(&self, indices: &[u64]) -> Result<()> {
        self.core.evict_indices_explicit(indices)
    }

    /// Starts writing back the dirty buffers overlapping the range in the background.
    pub fn writeback(&self, offset: u64, len: u64) -> Result<()> {
        MappingCore::writeback_range(&self.core, offset, len)
    }

    /// Starts writing back the listed buffers that are dirty, in the background, as
    /// [`Mapping::writeback`] does a range. Every index is checked first.
    pub fn writeback_buffers(&self, indices: &[u64]) -> Result<()> {
        MappingCore::writeback_indices(&self.core, indices)
    }

    /// Writes back the dirty buffers overlapping the range and makes them durable before it
    /// returns.
    ///
    /// If the store's sync fails, the buffers this call wrote are dirty again (a retry
    /// writes them again), and the sync's error is returned. If buffers written back earlier
    /// by eviction or [`Mapping::writeback`] may have been lost with it, the mapping is also
    /// poisoned: later calls fail with [`Error::SyncPoisoned`] until
    /// [`Mapping::clear_sync_failure`]. An `Ok` always means durable.
    pub fn msync(&self, offset: u64, len: u64) -> Result<()> {
        self.core.msync_range(offset, len)
    }

    /// Writes back the listed buffers that are dirty and makes them durable before it
    /// returns, as [`Mapping::msync`] does a range, with the same failure rules. Every index
    /// is checked first: one past the end is [`Error::OutOfRange`] and nothing is written.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// store.insert("kv", vec![0; 8 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(store.clone(), "kv", MapOptions::new().writable(true)).unwrap();
    /// for bucket in [1u64, 6] {
    ///     map.pin_exclusive(bucket).unwrap().write::<u64>(0, 42 + bucket);
    /// }
    /// map.msync_buffers(&[6, 1]).unwrap();
    /// assert!(map.is_resident(6).unwrap());
    /// map.evict_buffers(&[1, 6]).unwrap();
    /// assert!(!map.is_resident(6).unwrap());
    /// assert_eq!(store.get("kv").unwrap()[6 * 4096], 48);
    /// ```
    pub fn msync_buffers(&self, indices: &[u64]) -> Result<()> {
        self.core.msync_indices(indices)
    }

    /// Lifts the poison a failed sync left (see [`Error::SyncPoisoned`]), once the application
    /// has dealt with the writes that may have been lost: returns the failure it clears, or
    /// `None` if the mapping was not poisoned.
    pub fn clear_sync_failure(&self) -> Option<String> {
        self.core.clear_sync_failure()
    }

    /// Base address of the mapping: buffer `i` lives at `as_ptr() + i × buffer_size()`.
    /// Null for a pool mapping, which has no base address ([`Mapping::try_as_ptr`] says why).
    pub fn as_ptr(&self) -> *const u8 {
        self.core.base()
    }
    /// The base address for plain stores into a writable transparent mapping (hand it to C
    /// like an `mmap` pointer). Other mappings must be written through exclusive pins. Null
    /// for a pool mapping.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.core.base()
    }
    /// The base address, or [`Error::NotInPlace`] for a pool mapping, whose buffers live in
    /// frames of the cache's pool wherever their misses put them.
    pub fn try_as_ptr(&self) -> Result<*const u8> {
        if self.core.is_pool() {
            return Err(Error::NotInPlace {
                what: "the base address",
            });
        }
        Ok(self.core.base())
    }
    /// Where resident buffers live: in place, or in frames of the cache's pool.
    pub fn placement(&self) -> super::Placement {
        if self.core.is_pool() {
            super::Placement::Pool
        } else {
            super::Placement::InPlace
        }
    }
    /// Whether plain loads and stores may use the memory (see [`MapOptions::transparent`](super::MapOptions::transparent)).
    pub fn is_transparent(&self) -> bool {
        self.core.is_transparent()
    }
    /// Whether the mapping is a view of its file (see [`MapOptions::file_view`](super::MapOptions::file_view)):
    /// its bytes are the page cache's, so writes to the file show without an eviction.
    pub fn is_file_view(&self) -> bool {
        self.core.is_view()
    }
    /// The mapping's memory as a slice of `T`, for a read-only transparent mapping: plain
    /// loads, faulting misses in as they come, with no `unsafe` in the program.
    ///
    /// Refused with [`Error::BadArgument`] for a mapping that is not transparent (its memory
    /// holds data only under a pin), one that is writable (an exclusive pin or
    /// [`Mapping::write`] through `&self` could change the values under the slice: use
    /// [`Mapping::as_mut_slice`]), a zero-sized `T`, a base not aligned for `T`, or a length
    /// that is not a whole number of `T`. See `mapping/typed.rs` for why the slice is sound,
    /// and its one caveat, shared with `mmap`: the object must not change behind the cache.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// let column: Vec<u8> = (0..4096u64 * 4).flat_map(|v| v.to_ne_bytes()).collect();
    /// store.insert("column", column);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache
    ///     .map(Arc::new(store), "column", MapOptions::new().transparent(true))
    ///     .unwrap();
    /// let values: &[u64] = map.as_slice().unwrap();
    /// assert_eq!(values.len(), 4096 * 4);
    /// assert_eq!(values.iter().sum::<u64>(), (0..4096u64 * 4).sum());
    /// ```
    pub fn as_slice<T: bytemuck::Pod>(&self) -> Result<&[T]> {
        let (p, n) = self.core.typed_bytes::<T>("as_slice")?;
        if self.core.writable {
            return Err(Error::BadArgument(
                "as_slice needs a read-only mapping: pins and writes through `&self` could \
                 change a writable one under the slice (use as_mut_slice)"
                    .into(),
            ));
        }
        // SAFETY: `typed_bytes` checked alignment and length; the memory is live as long as
        // `self`, reads fault in misses, and a read-only mapping has no writer (module docs
        // of mapping/typed.rs).
        Ok(unsafe { std::slice::from_raw_parts(p, n) })
    }

    /// The mapping's memory as a mutable slice of `T`, for a writable transparent mapping:
    /// plain stores, each first store to a clean buffer marking it dirty, as through
    /// [`Mapping::as_mut_ptr`] but with no `unsafe` in the program.
    ///
    /// It takes `&mut self`, so while the slice lives no pin, read or write of this mapping
    /// can alias it; write-back, eviction and reloads keep the values as stored. Refused as
    /// [`Mapping::as_slice`] is, and with [`Error::ReadOnly`] for a read-only mapping.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// store.insert("counts", vec![0; 4 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let opts = MapOptions::new().transparent(true).writable(true);
    /// let mut map = cache.map(store.clone(), "counts", opts).unwrap();
    /// let counts: &mut [u32] = map.as_mut_slice().unwrap();
    /// counts[1000] += 7;
    /// map.msync(0, map.len()).unwrap();
    /// assert_eq!(store.get("counts").unwrap()[4000..4004], 7u32.to_ne_bytes());
    /// ```
    pub fn as_mut_slice<T: bytemuck::Pod>(&mut self) -> Result<&mut [T]> {
        let (p, n) = self.core.typed_bytes::<T>("as_mut_slice")?;
        if !self.core.writable {
            return Err(Error::ReadOnly);
        }
        // SAFETY: `typed_bytes` checked alignment and length; `&mut self` keeps every other
        // path through this mapping out while the slice lives (module docs of
        // mapping/typed.rs).
        Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
    }

    /// Mapped bytes.
    pub fn len(&self) -> u64 {
        self.core.len
    }
    /// Whether the mapping has no bytes: `len() == 0`. [`crate::Cache::map`] refuses an empty
    /// mapping, so this is always `false`; it is here because a `len` without it reads as an
    /// oversight.
    pub fn is_empty(&self) -> bool {
        self.core.len == 0
    }
    pub fn buffer_size(&self) -> usize {
        self.core.bs
    }
    /// The requests the mapping's object has sent, where its store counts them
    /// ([`crate::store::Object::requests`]): GETs and the bytes they returned, against which
    /// the cache's `store_reads` and `bytes_read` say how its misses were merged.
    pub fn store_requests(&self) -> Option<crate::store::StoreRequests> {
        self.core.object.requests()
    }
    /// Number of buffers (the last may be partial).
    pub fn buffers(&self) -> u64 {
        self.core.buffers()
    }
    /// Buffers resident now.
    pub fn resident(&self) -> u64 {
        self.core.resident()
    }
    /// Bytes of the cache's budget this mapping holds besides its buffers, for as long as it
    /// is mapped: the set-aside pool of a transparent mapping that tracks access, and the slots
    /// of a transparent mapping's kept readahead markers. [`crate::Cache::used`] counts them.
    pub fn reserved_bytes(&self) -> u64 {
        self.core.reserved_bytes()
    }
    pub fn is_writable(&self) -> bool {
        self.core.writable
    }
    /// The buffer holding byte `offset`.
    pub fn buffer_of(&self, offset: u64) -> u64 {
        offset >> self.core.shift
    }
    /// Whether buffer `index` is in memory now, so that a pin of it would not read the store:
    /// cached (pinned or not), or set aside on a transparent mapping. A snapshot: another
    /// thread (or the evictor) may evict or load it right after. An index past the end is
    /// [`Error::OutOfRange`].
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = MemoryStore::new();
    /// store.insert("o", vec![1; 4 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
    /// assert!(!map.is_resident(2).unwrap());
    /// drop(map.pin_shared(2).unwrap());
    /// assert!(map.is_resident(2).unwrap());
    /// assert!(map.is_resident(4).is_err());
    /// ```
    pub fn is_resident(&self, index: u64) -> Result<bool> {
        let w = self.core.slot(index)?.load();
        Ok(matches!(w.phase(), Phase::Cached | Phase::Aside))
    }
    /// The state word of buffer `index`, for diagnostics and tests: a snapshot, read-only. An
    /// index past the end is [`Error::OutOfRange`], as for every buffer call.
    pub fn state(&self, index: u64) -> Result<Word> {
        // Bounds only: a forked child may still look (the preload shim's fault path does).
        match self.core.states.get(index as usize) {
            Some(s) => Ok(s.load()),
            None => Err(self.core.out_of_range(index)),
        }
    }
    /// This mapping's share of [`crate::Cache::stats`]: its hits, misses and their latency,
    /// evictions of its buffers, its write-backs, prefetches and faults. Summed over the
    /// cache's mappings these are the cache's counters, except `budget_stalls`, which belongs
    /// to the cache's budget and stays 0 here. A mapping counts its events in these counters
    /// only (sharded per thread, as the cache's were), and the cache's statistics are their
    /// sum, so a hit still costs one uncontended add.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// store.insert("a", vec![0; 8 * 4096]);
    /// store.insert("b", vec![0; 8 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let a = cache.map(store.clone(), "a", MapOptions::new()).unwrap();
    /// let b = cache.map(store, "b", MapOptions::new()).unwrap();
    /// for _ in 0..3 {
    ///     drop(a.pin_shared(1).unwrap());
    /// }
    /// drop(b.pin_shared(1).unwrap());
    /// assert_eq!((a.stats().misses, a.stats().hits), (1, 2));
    /// assert_eq!((b.stats().misses, b.stats().hits), (1, 0));
    /// assert_eq!(cache.stats().misses, 2);
    /// println!("{}", a.stats());
    /// ```
    pub fn stats(&self) -> crate::StatsSnapshot {
        self.core.own_stats.snapshot()
    }
    /// The name of the policy attached to this mapping.
    pub fn policy_name(&self) -> &str {
        self.core.policy.name()
    }

    /// Writes back everything, releases all memory and leaves the cache. On failure (a
    /// write-back that failed, buffers still pinned after eight passes) the mapping comes back
    /// in the error, whole and in the cache with its dirty data, to retry or inspect; buffers
    /// its passes had already evicted stay evicted.
    ///
    /// As with `munmap`, accesses must have ended: plain loads and stores through a
    /// transparent mapping's pointer by other threads during `unmap` are a use after unmap. A
    /// store that lands after the last write-back pass is lost, and any access after the
    /// range is released faults as on unmapped memory. When it returns `Ok`, the range is
    /// unmapped: the caller may map something else there at once.
    pub fn unmap(self) -> std::result::Result<(), UnmapError> {
        match self.core.release() {
            Ok(()) => {
                self.wait_for_the_last_reference();
                Ok(())
            }
            Err(error) => Err(UnmapError {
                error,
                mapping: self,
            }),
        }
    }

    /// Returns once this handle holds the only reference to the mapping, so that dropping it
    /// unmaps the address range: a caller may map something there as soon as `unmap` (or the
    /// drop) returns. Others hold references only briefly once the mapping has left the cache
    /// (and the registry holds none, `reclaim::Registry`): an IO thread finishing a job of it,
    /// an eviction round evicting from it, a fault thread between two faults.
    fn wait_for_the_last_reference(&self) {
        // Yields first (the usual holder lets go within microseconds), then naps, so that a
        // round held up in a slow policy does not cost a spinning core meanwhile.
        let mut yields = 0u32;
        while Arc::strong_count(&self.core) > 1 {
            if yields < 1000 || !crate::sync::CAN_PARK {
                yields += 1;
                crate::sync::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.core.forked_away() {
            // A forked child's copy: the parent writes back; the child must not. Nor may it
            // unmap the range, which holds what the fork left there (the fence, or what the
            // child put in its place, such as the LD_PRELOAD shim's kernel mapping): the
            // child never drops the core.
            std::mem::forget(Arc::clone(&self.core));
            return;
        }
        match self.core.release() {
            Ok(()) => self.wait_for_the_last_reference(),
            Err(e) => {
                eprintln!(
                    "ucache: mapping of '{}' dropped with data not written back: {e} \
                     (call unmap() to handle this error)",
                    self.core.object.name()
                );
                self.core.cache.budget.mappings().remove(self.core.id);
            }
        }
    }
}
