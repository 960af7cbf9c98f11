//! Frame pools: the memory of pool-placed mappings ([`crate::MapOptions::placement`]).
//!
//! An in-place mapping pays for a fresh page on every miss: the kernel allocates, zeroes and
//! charges it when the read lands, and the eviction that made room gave one back with
//! `madvise` and a TLB shootdown. A pool mapping instead reads a miss into a *frame*: a
//! buffer-sized slot of memory that was faulted in once and is reused by later misses. A
//! frame goes back to its pool on eviction (a push on a free list, no system call) and the
//! next miss of any pool mapping of that buffer size pops it.
//!
//! One pool per buffer size belongs to the cache. Its memory is one `MAP_NORESERVE` range,
//! as large as the budget, reserved when the first pool mapping of that size is made and
//! unmapped only when the pool itself is dropped, after every mapping that could read it
//! (each holds the pool). It is cut into chunks of 2 MiB (or one buffer, if larger): a chunk is
//! populated (`MADV_POPULATE_WRITE`) and charged to the cache's budget as a whole when the
//! pool grows, and given back (`MADV_DONTNEED`, uncharged) as a whole once every frame of it
//! is free, so memory moves between buffer sizes and between pool and in-place mappings in
//! chunk steps, never per miss. A released chunk's addresses stay mapped (they read as
//! zeros), so an optimistic reader holding a stale frame index reads harmless bytes and
//! fails its version check: frames are never unmapped under a reader.
//!
//! The free lists are sharded: chunk `c` belongs to shard `c % shards`, and a thread takes
//! frames from its own shard first ([`crate::ordinal`]), from the others only when its own
//! is empty. One list behind one lock made every miss of every thread take that lock, and
//! with huge pages it sent concurrent misses into the same huge page, whose one folio the
//! kernel locks and counts for every `O_DIRECT` read into it: on a 16-core machine, 16
//! threads of random lookups spent about a quarter of their time on the lock, its parking,
//! and the folio's lock and reference count (docs/results/2026-11-27-device). A thread now
//! reads into chunks of its own shard. Within a shard, frames are handed out lowest chunk
//! first, so the highest chunks are the ones that empty when the pool's share of the budget
//! shrinks.
//!
//! The pool asks for transparent huge pages on its range (`MADV_HUGEPAGE`) unless the cache
//! was told not to ([`crate::CacheOptions::pool_huge_pages`]): a chunk is 2 MiB and 2 MiB
//! aligned, so the kernel can back it with one huge page and hits miss the TLB less.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::region::Region;

/// Bytes per chunk (for buffers up to this size).
pub(crate) const CHUNK: usize = 2 << 20;

/// Shards at most: more than the threads that miss at once buys nothing.
const MAX_SHARDS: usize = 64;

/// Chunk states.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Not populated, not charged.
    Empty,
    /// Being populated by a grower, charged.
    Growing,
    /// Populated and charged; its frames are in use or on the free lists.
    Live,
}

/// One shard's chunks, `c = j * shards + shard` for local index `j`.
struct Free {
    /// Free frames of each chunk, by local index.
    lists: Vec<Vec<u32>>,
    state: Vec<ChunkState>,
    /// Local indices of chunks with free frames, so the lowest is found at once.
    nonempty: BTreeSet<u32>,
}

/// A shard: its lists, and the count of its free frames, on a cache line of its own.
struct Shard {
    free: Mutex<Free>,
    /// Frames on this shard's lists. Changed only under `free`'s lock, with the lists, so
    /// readers never see a count run ahead of (or wrap below) the lists.
    frames: AtomicU64,
}

/// The frames of one buffer size.
pub(crate) struct FramePool {
    bs: usize,
    chunk: usize,
    per_chunk: u32,
    region: Region,
    shards: Box<[CachePadded<Shard>]>,
    /// Bytes of live chunks (charged to the budget); changed by growing and releasing only.
    charged: AtomicU64,
    /// Frames to keep free in the whole pool before a fully free chunk is given back.
    keep: usize,
}

impl FramePool {
    /// Bytes per chunk for buffers of `bs` bytes.
    pub(crate) fn chunk_for(bs: usize) -> usize {
        CHUNK.max(bs)
    }

    /// A pool of `bs`-byte frames for a budget of `budget` bytes; `keep` frames stay free
    /// before a chunk is given back (one eviction batch). One shard per core, as many as
    /// there are chunks at most.
    pub(crate) fn new(bs: usize, budget: u64, keep: usize, huge: bool) -> Result<FramePool> {
        Self::with_shards(bs, budget, keep, huge, crate::ordinal::cpus())
    }

    /// [`FramePool::new`] with `shards` shards (fewer if there are fewer chunks).
    fn with_shards(
        bs: usize,
        budget: u64,
        keep: usize,
        huge: bool,
        shards: usize,
    ) -> Result<FramePool> {
        let chunk = Self::chunk_for(bs);
        let chunks = (budget / chunk as u64) as usize;
        if chunks == 0 {
            return Err(Error::BudgetTooSmall {
                budget,
                batch: chunk as u64,
            });
        }
        let len = chunks.checked_mul(chunk).ok_or(Error::BadLength {
            len: budget,
            why: "too large for the address space",
        })?;
        let region = Region::reserve(len, CHUNK)?;
        region.advise_huge(huge);
        let n = shards.clamp(1, MAX_SHARDS).min(chunks);
        let shards = (0..n)
            .map(|s| {
                // Chunks s, s + n, s + 2n, ... below `chunks`.
                let mine = (chunks - s).div_ceil(n);
                CachePadded::new(Shard {
                    free: Mutex::new(Free {
                        lists: vec![Vec::new(); mine],
                        state: vec![ChunkState::Empty; mine],
                        nonempty: BTreeSet::new(),
                    }),
                    frames: AtomicU64::new(0),
                })
            })
            .collect();
        Ok(FramePool {
            bs,
            chunk,
            per_chunk: (chunk / bs) as u32,
            region,
            shards,
            charged: AtomicU64::new(0),
            keep,
        })
    }

    pub(crate) fn buffer_size(&self) -> usize {
        self.bs
    }

    pub(crate) fn chunk_bytes(&self) -> u64 {
        self.chunk as u64
    }

    /// The address of frame `f`. Every index below the pool's capacity names mapped memory.
    #[inline]
    pub(crate) fn frame(&self, f: u32) -> *mut u8 {
        self.region.at(f as usize * self.bs)
    }

    /// Bytes of free frames now (a sum over the shards: for the evictor and the statistics,
    /// not for every miss).
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free_frames() * self.bs as u64
    }

    fn free_frames(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.frames.load(Ordering::Relaxed))
            .sum()
    }

    /// Bytes of live chunks now (what the pool holds of the budget).
    pub(crate) fn charged(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    /// This thread's shard.
    fn home(&self) -> usize {
        crate::ordinal::thread_ordinal() % self.shards.len()
    }

    /// The shards in the order a thread of shard `home` tries them: its own first.
    fn from(&self, home: usize) -> impl Iterator<Item = usize> {
        let n = self.shards.len();
        (0..n).map(move |k| (home + k) % n)
    }

    /// Chunk `j` of shard `s`.
    fn chunk_of(&self, s: usize, j: usize) -> usize {
        j * self.shards.len() + s
    }

    /// A free frame, from this thread's shard if it has one, lowest chunk first; and an
    /// estimate of the pool's free bytes after it (the shard's, times the shards), which
    /// costs no look at the other shards.
    pub(crate) fn pop(&self) -> Option<(u32, u64)> {
        self.pop_from(self.home())
    }

    /// [`FramePool::pop`] for a thread of shard `home`.
    fn pop_from(&self, home: usize) -> Option<(u32, u64)> {
        self.from(home).find_map(|s| {
            let sh = &self.shards[s];
            let mut fr = sh.free.lock();
            let &j = fr.nonempty.first()?;
            let list = &mut fr.lists[j as usize];
            let f = list.pop().expect("a chunk in `nonempty` has a free frame");
            if list.is_empty() {
                fr.nonempty.remove(&j);
            }
            // Under the lock, as every change of the count: a frame is counted free exactly
            // while it is on a list, so no pop can subtract what a grow has not added yet.
            let left = sh.frames.fetch_sub(1, Ordering::Relaxed) - 1;
            Some((f, left * self.shards.len() as u64 * self.bs as u64))
        })
    }

    /// Adds a chunk, whose bytes the caller has just charged to the budget, and returns one
    /// of its frames; the rest go on the free list. An empty chunk of this thread's shard is
    /// taken first. `None` if every chunk is live (the caller then gives the charge back).
    pub(crate) fn grow(&self) -> Option<u32> {
        self.grow_from(self.home())
    }

    /// [`FramePool::grow`] for a thread of shard `home`.
    fn grow_from(&self, home: usize) -> Option<u32> {
        let (s, j) = self.from(home).find_map(|s| {
            let mut fr = self.shards[s].free.lock();
            let j = fr.state.iter().position(|&st| st == ChunkState::Empty)?;
            fr.state[j] = ChunkState::Growing;
            Some((s, j))
        })?;
        let c = self.chunk_of(s, j);
        self.populate(c);
        let first = c as u32 * self.per_chunk;
        let sh = &self.shards[s];
        let mut fr = sh.free.lock();
        fr.state[j] = ChunkState::Live;
        // Highest first on the list, so pops go up from the chunk's start.
        fr.lists[j] = (first + 1..first + self.per_chunk).rev().collect();
        if self.per_chunk > 1 {
            fr.nonempty.insert(j as u32);
        }
        sh.frames
            .fetch_add(self.per_chunk as u64 - 1, Ordering::Relaxed);
        self.charged.fetch_add(self.chunk as u64, Ordering::Relaxed);
        Some(first)
    }

    /// Faults chunk `c` in, so no miss pays for a fresh page.
    fn populate(&self, c: usize) {
        let at = self.region.at(c * self.chunk);
        // SAFETY: the chunk lies inside our region and is ours (Growing): nobody reads it yet.
        let r = unsafe {
            libc::madvise(
                at as *mut libc::c_void,
                self.chunk,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if r != 0 {
            // Before Linux 5.14: touch every page instead.
            for p in (0..self.chunk).step_by(4096) {
                // SAFETY: as above.
                unsafe { std::ptr::write_volatile(at.add(p), 0) };
            }
        }
    }

    /// Puts frames back on the free lists of their chunks' shards. Chunks that are then
    /// wholly free are given back while the pool keeps `keep` free frames besides: returns
    /// the bytes uncharged, which the caller releases from the budget.
    pub(crate) fn put(&self, frames: &[u32]) -> u64 {
        if frames.is_empty() {
            return 0;
        }
        let n = self.shards.len();
        let shard_of = |f: u32| (f / self.per_chunk) as usize % n;
        let mut sorted = frames.to_vec();
        sorted.sort_unstable_by_key(|&f| shard_of(f));
        let mut released = 0;
        for group in sorted.chunk_by(|&a, &b| shard_of(a) == shard_of(b)) {
            let s = shard_of(group[0]);
            let sh = &self.shards[s];
            let mut fr = sh.free.lock();
            let mut touched = Vec::new();
            for &f in group {
                let j = (f / self.per_chunk) as usize / n;
                fr.lists[j].push(f);
                fr.nonempty.insert(j as u32);
                touched.push(j as u32);
            }
            sh.frames.fetch_add(group.len() as u64, Ordering::Relaxed);
            touched.sort_unstable();
            touched.dedup();
            released += self.release_whole(s, fr, touched, self.keep);
        }
        released
    }

    /// Gives back every wholly free chunk, whatever is kept free otherwise: returns the
    /// bytes uncharged.
    pub(crate) fn trim(&self) -> u64 {
        (0..self.shards.len())
            .map(|s| {
                let fr = self.shards[s].free.lock();
                let all = (0..fr.lists.len() as u32).collect();
                self.release_whole(s, fr, all, 0)
            })
            .sum()
    }

    /// Releases the wholly free chunks among shard `s`'s `chunks` (local indices) while
    /// `keep` other free frames remain in the pool. The other shards' counts are read
    /// without their locks: two shards releasing at once may leave a little less than
    /// `keep` free, which only means an earlier grow.
    fn release_whole(
        &self,
        s: usize,
        mut fr: MutexGuard<'_, Free>,
        chunks: Vec<u32>,
        keep: usize,
    ) -> u64 {
        let sh = &self.shards[s];
        let per_chunk = self.per_chunk as usize;
        let mut released = 0u64;
        for j in chunks.into_iter().rev() {
            let whole =
                fr.state[j as usize] == ChunkState::Live && fr.lists[j as usize].len() == per_chunk;
            if !whole || (self.free_frames() as usize).saturating_sub(per_chunk) < keep {
                continue;
            }
            let c = self.chunk_of(s, j as usize);
            // SAFETY: every frame of the chunk is free, so no buffer lives there; its
            // addresses stay mapped (they read as zeros afterwards). Under the lock, so no
            // grower populates the chunk while its pages go.
            let r = unsafe {
                libc::madvise(
                    self.region.at(c * self.chunk) as *mut libc::c_void,
                    self.chunk,
                    libc::MADV_DONTNEED,
                )
            };
            if r != 0 {
                continue;
            }
            fr.lists[j as usize].clear();
            fr.nonempty.remove(&j);
            fr.state[j as usize] = ChunkState::Empty;
            sh.frames.fetch_sub(per_chunk as u64, Ordering::Relaxed);
            released += self.chunk as u64;
        }
        if released > 0 {
            self.charged.fetch_sub(released, Ordering::Relaxed);
        }
        drop(fr);
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_reused_and_whole_chunks_given_back() {
        let p = FramePool::with_shards(4096, 8 << 20, 0, true, 1).unwrap();
        assert!(p.pop().is_none(), "a new pool holds nothing");
        let f0 = p.grow().unwrap();
        assert_eq!(p.charged(), 2 << 20);
        let mut got = vec![f0];
        got.extend((1..512).map(|_| p.pop().unwrap().0));
        got.sort_unstable();
        assert_eq!(
            got,
            (0..512).collect::<Vec<u32>>(),
            "one chunk, every frame once"
        );
        assert!(p.pop().is_none());
        // SAFETY: frame 3 is ours (popped) and 4096 bytes long.
        unsafe { std::ptr::write_bytes(p.frame(3), 0xAB, 4096) };
        assert_eq!(p.put(&[3]), 0, "the chunk is not wholly free");
        assert_eq!(p.pop(), Some((3, 0)), "a freed frame is reused");
        // SAFETY: as above; the frame kept its bytes: it was reused, not refaulted.
        assert_eq!(unsafe { *p.frame(3) }, 0xAB);
        assert_eq!(p.put(&got), 2 << 20, "a wholly free chunk goes back");
        assert_eq!((p.charged(), p.free_bytes()), (0, 0));
        // SAFETY: the address stays mapped and reads as zero.
        assert_eq!(unsafe { std::ptr::read_volatile(p.frame(3)) }, 0);
    }

    #[test]
    fn lowest_chunk_first_and_capacity() {
        let p = FramePool::with_shards(1 << 20, 4 << 20, 0, false, 1).unwrap();
        let a = p.grow().unwrap();
        let b = p.grow().unwrap();
        assert!(p.grow().is_none(), "two chunks fill a 4 MiB budget");
        assert_eq!((a, b), (0, 2));
        assert_eq!(p.pop().map(|p| p.0), Some(1));
        assert_eq!(p.pop().map(|p| p.0), Some(3));
        assert!(matches!(
            FramePool::new(4096, 1 << 20, 0, true),
            Err(Error::BudgetTooSmall { .. })
        ));
    }

    /// A thread grows and pops chunks of its own shard, so concurrent misses read into
    /// different chunks; a thread whose shard is empty takes another's frames; frames go back
    /// to their chunk's shard, and a chunk is given back only while the whole pool keeps
    /// `keep` frames free.
    #[test]
    fn threads_take_their_own_shards_chunks_first() {
        let per_chunk = 512u32;
        let p = FramePool::with_shards(4096, 8 << 20, per_chunk as usize, false, 2).unwrap();
        assert_eq!(p.shards.len(), 2);
        let shard_of = |f: u32| (f / per_chunk) % 2;
        let a = p.grow_from(0).unwrap();
        let b = p.grow_from(1).unwrap();
        assert_eq!((shard_of(a), shard_of(b)), (0, 1), "grown in its own shard");
        // A thread of shard 1 drains its own shard's chunk, then takes shard 0's.
        let mut got = Vec::new();
        while let Some((f, _)) = p.pop_from(1) {
            got.push(f);
        }
        let own = got.iter().take_while(|&&f| shard_of(f) == 1).count();
        assert_eq!(own, per_chunk as usize - 1, "its own shard first");
        assert!(got[own..].iter().all(|&f| shard_of(f) == 0));
        assert_eq!(got.len(), 2 * per_chunk as usize - 2);
        // Back on their shards' lists. The first chunk that comes wholly free stays (the
        // pool keeps one chunk's worth free), the second goes.
        got.extend([a, b]);
        let (zero, one): (Vec<u32>, Vec<u32>) = got.iter().partition(|&&f| shard_of(f) == 0);
        assert_eq!(p.put(&zero), 0, "kept: nothing else is free");
        assert_eq!(p.free_bytes(), 2 << 20);
        assert_eq!(p.put(&one), 2 << 20, "one chunk goes, one is kept");
        assert_eq!(p.charged(), 2 << 20);
        assert_eq!(p.trim(), 2 << 20);
        assert_eq!((p.charged(), p.free_bytes()), (0, 0));
        // A pool of more shards than chunks has one per chunk.
        let q = FramePool::with_shards(4096, 8 << 20, 0, false, 16).unwrap();
        assert_eq!(q.shards.len(), 4);
    }
}
