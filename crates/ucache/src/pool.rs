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
//! Frames are handed out lowest chunk first, so the highest chunks are the ones that empty
//! when the pool's share of the budget shrinks.
//!
//! The pool asks for transparent huge pages on its range (`MADV_HUGEPAGE`) unless the cache
//! was told not to ([`crate::CacheOptions::pool_huge_pages`]): a chunk is 2 MiB and 2 MiB
//! aligned, so the kernel can back it with one huge page and hits miss the TLB less.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::region::Region;

/// Bytes per chunk (for buffers up to this size).
pub(crate) const CHUNK: usize = 2 << 20;

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

struct Free {
    /// Free frames of each chunk.
    lists: Vec<Vec<u32>>,
    state: Vec<ChunkState>,
    /// Chunks with free frames, so the lowest is found at once.
    nonempty: BTreeSet<u32>,
    /// Free frames in all.
    frames: usize,
}

/// The frames of one buffer size.
pub(crate) struct FramePool {
    bs: usize,
    chunk: usize,
    per_chunk: u32,
    region: Region,
    free: Mutex<Free>,
    /// Bytes of live chunks (charged to the budget). Changed only under `free`'s lock, with
    /// the lists, so readers never see a count run ahead of (or wrap below) the lists.
    charged: AtomicU64,
    /// Bytes of free frames, for the cache's view of what is really free; as `charged`.
    free_bytes: AtomicU64,
    /// Frames to keep free before a fully free chunk is given back.
    keep: usize,
}

impl FramePool {
    /// Bytes per chunk for buffers of `bs` bytes.
    pub(crate) fn chunk_for(bs: usize) -> usize {
        CHUNK.max(bs)
    }

    /// A pool of `bs`-byte frames for a budget of `budget` bytes; `keep` frames stay free
    /// before a chunk is given back (one eviction batch).
    pub(crate) fn new(bs: usize, budget: u64, keep: usize, huge: bool) -> Result<FramePool> {
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
        Ok(FramePool {
            bs,
            chunk,
            per_chunk: (chunk / bs) as u32,
            region,
            free: Mutex::new(Free {
                lists: vec![Vec::new(); chunks],
                state: vec![ChunkState::Empty; chunks],
                nonempty: BTreeSet::new(),
                frames: 0,
            }),
            charged: AtomicU64::new(0),
            free_bytes: AtomicU64::new(0),
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

    /// Bytes of free frames now.
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free_bytes.load(Ordering::Relaxed)
    }

    /// Bytes of live chunks now (what the pool holds of the budget).
    pub(crate) fn charged(&self) -> u64 {
        self.charged.load(Ordering::Relaxed)
    }

    /// A free frame, lowest chunk first.
    pub(crate) fn pop(&self) -> Option<u32> {
        let mut fr = self.free.lock();
        let &c = fr.nonempty.first()?;
        let list = &mut fr.lists[c as usize];
        let f = list.pop().expect("a chunk in `nonempty` has a free frame");
        if list.is_empty() {
            fr.nonempty.remove(&c);
        }
        fr.frames -= 1;
        // Under the lock, as every change of the counters: a frame is counted free exactly
        // while it is on a list, so no pop can subtract what a grow has not added yet.
        self.free_bytes.fetch_sub(self.bs as u64, Ordering::Relaxed);
        Some(f)
    }

    /// Adds a chunk, whose bytes the caller has just charged to the budget, and returns one
    /// of its frames; the rest go on the free list. `None` if every chunk is live (the
    /// caller then gives the charge back) or populating failed.
    pub(crate) fn grow(&self) -> Option<u32> {
        let c = {
            let mut fr = self.free.lock();
            let c = fr.state.iter().position(|&s| s == ChunkState::Empty)?;
            fr.state[c] = ChunkState::Growing;
            c
        };
        self.populate(c);
        let first = c as u32 * self.per_chunk;
        let mut fr = self.free.lock();
        fr.state[c] = ChunkState::Live;
        // Highest first on the list, so pops go up from the chunk's start.
        fr.lists[c] = (first + 1..first + self.per_chunk).rev().collect();
        if self.per_chunk > 1 {
            fr.nonempty.insert(c as u32);
        }
        fr.frames += self.per_chunk as usize - 1;
        self.charged.fetch_add(self.chunk as u64, Ordering::Relaxed);
        self.free_bytes.fetch_add(
            (self.per_chunk as u64 - 1) * self.bs as u64,
            Ordering::Relaxed,
        );
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

    /// Puts frames back on the free lists. Chunks that are then wholly free are given back
    /// while the pool keeps `keep` free frames besides: returns the bytes uncharged, which
    /// the caller releases from the budget.
    pub(crate) fn put(&self, frames: &[u32]) -> u64 {
        if frames.is_empty() {
            return 0;
        }
        let mut fr = self.free.lock();
        let mut touched = Vec::new();
        for &f in frames {
            let c = f / self.per_chunk;
            fr.lists[c as usize].push(f);
            fr.nonempty.insert(c);
            touched.push(c);
        }
        fr.frames += frames.len();
        self.free_bytes
            .fetch_add(frames.len() as u64 * self.bs as u64, Ordering::Relaxed);
        touched.sort_unstable();
        touched.dedup();
        self.release_whole(fr, touched, self.keep)
    }

    /// Gives back every wholly free chunk, whatever is kept free otherwise: returns the
    /// bytes uncharged.
    pub(crate) fn trim(&self) -> u64 {
        let fr = self.free.lock();
        let all = (0..fr.lists.len() as u32).collect();
        self.release_whole(fr, all, 0)
    }

    /// Releases the wholly free chunks among `chunks` while `keep` other free frames remain.
    fn release_whole(
        &self,
        mut fr: parking_lot::MutexGuard<'_, Free>,
        chunks: Vec<u32>,
        keep: usize,
    ) -> u64 {
        let mut released = 0u64;
        for c in chunks.into_iter().rev() {
            let whole = fr.state[c as usize] == ChunkState::Live
                && fr.lists[c as usize].len() == self.per_chunk as usize;
            if !whole || fr.frames - (self.per_chunk as usize) < keep {
                continue;
            }
            // SAFETY: every frame of the chunk is free, so no buffer lives there; its
            // addresses stay mapped (they read as zeros afterwards). Under the lock, so no
            // grower populates the chunk while its pages go.
            let r = unsafe {
                libc::madvise(
                    self.region.at(c as usize * self.chunk) as *mut libc::c_void,
                    self.chunk,
                    libc::MADV_DONTNEED,
                )
            };
            if r != 0 {
                continue;
            }
            fr.lists[c as usize].clear();
            fr.nonempty.remove(&c);
            fr.state[c as usize] = ChunkState::Empty;
            fr.frames -= self.per_chunk as usize;
            released += self.chunk as u64;
        }
        if released > 0 {
            self.charged.fetch_sub(released, Ordering::Relaxed);
            self.free_bytes.fetch_sub(released, Ordering::Relaxed);
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
        let p = FramePool::new(4096, 8 << 20, 0, true).unwrap();
        assert!(p.pop().is_none(), "a new pool holds nothing");
        let f0 = p.grow().unwrap();
        assert_eq!(p.charged(), 2 << 20);
        let mut got = vec![f0];
        got.extend((1..512).map(|_| p.pop().unwrap()));
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
        assert_eq!(p.pop(), Some(3), "a freed frame is reused");
        // SAFETY: as above; the frame kept its bytes: it was reused, not refaulted.
        assert_eq!(unsafe { *p.frame(3) }, 0xAB);
        assert_eq!(p.put(&got), 2 << 20, "a wholly free chunk goes back");
        assert_eq!((p.charged(), p.free_bytes()), (0, 0));
        // SAFETY: the address stays mapped and reads as zero.
        assert_eq!(unsafe { std::ptr::read_volatile(p.frame(3)) }, 0);
    }

    #[test]
    fn lowest_chunk_first_and_capacity() {
        let p = FramePool::new(1 << 20, 4 << 20, 0, false).unwrap();
        let a = p.grow().unwrap();
        let b = p.grow().unwrap();
        assert!(p.grow().is_none(), "two chunks fill a 4 MiB budget");
        assert_eq!((a, b), (0, 2));
        assert_eq!(p.pop(), Some(1));
        assert_eq!(p.pop(), Some(3));
        assert!(matches!(
            FramePool::new(4096, 1 << 20, 0, true),
            Err(Error::BudgetTooSmall { .. })
        ));
    }
}
