//! [`Mapping`]: the public handle of a mapping, and what `unmap` reports when it cannot
//! write everything back.

use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};
use crate::guard::{ExclusiveGuard, OptimisticView, SharedGuard};
use crate::state::Word;

/// A mapped object. Dropping it writes back and releases everything, like [`Mapping::unmap`]
/// but without a way to report failure: call `unmap` to learn of it.
pub struct Mapping {
    core: Arc<MappingCore>,
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
    /// the cache as it was.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.core.read_into(offset, buf)
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

    /// Starts writing back the dirty buffers overlapping the range in the background.
    pub fn writeback(&self, offset: u64, len: u64) -> Result<()> {
        MappingCore::writeback_range(&self.core, offset, len)
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

    /// Lifts the poison a failed sync left (see [`Error::SyncPoisoned`]), once the application
    /// has dealt with the writes that may have been lost: returns the failure it clears, or
    /// `None` if the mapping was not poisoned.
    pub fn clear_sync_failure(&self) -> Option<String> {
        self.core.clear_sync_failure()
    }

    /// Base address of the mapping.
    pub fn as_ptr(&self) -> *const u8 {
        self.core.base()
    }
    /// The base address for plain stores into a writable transparent mapping (hand it to C
    /// like an `mmap` pointer). Other mappings must be written through exclusive pins.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.core.base()
    }
    /// Whether plain loads and stores may use the memory (see [`MapOptions::transparent`](super::MapOptions::transparent)).
    pub fn is_transparent(&self) -> bool {
        self.core.is_transparent()
    }
    /// Mapped bytes.
    pub fn len(&self) -> u64 {
        self.core.len
    }
    pub fn is_empty(&self) -> bool {
        false
    }
    pub fn buffer_size(&self) -> usize {
        self.core.bs
    }
    /// Number of buffers (the last may be partial).
    pub fn buffers(&self) -> u64 {
        self.core.buffers()
    }
    /// Buffers resident now.
    pub fn resident(&self) -> u64 {
        self.core.resident()
    }
    pub fn is_writable(&self) -> bool {
        self.core.writable
    }
    /// The buffer holding byte `offset`.
    pub fn buffer_of(&self, offset: u64) -> u64 {
        offset >> self.core.shift
    }
    /// The state word of buffer `index`, for diagnostics and tests.
    pub fn state(&self, index: u64) -> Option<Word> {
        self.core.states.get(index as usize).map(|s| s.load())
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
    /// range is released faults as on unmapped memory.
    pub fn unmap(self) -> std::result::Result<(), UnmapError> {
        match self.core.release() {
            Ok(()) => Ok(()),
            Err(error) => Err(UnmapError {
                error,
                mapping: self,
            }),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.core.forked_away() {
            // A forked child's copy: the parent writes back; the child must not.
            return;
        }
        if let Err(e) = self.core.release() {
            eprintln!(
                "ucache: mapping of '{}' dropped with data not written back: {e} \
                 (call unmap() to handle this error)",
                self.core.object.name()
            );
            self.core.cache.remove_mapping(self.core.id);
        }
    }
}
