//! Fresh memory for the raw `-fresh` systems: what the device gives a cache that reads each
//! miss into a page it faulted in and gives evicted frames back.
//!
//! Reads take the next buffer of a sliding arena. Buffers behind every read in flight are
//! given back 64 at a time with one `MADV_DONTNEED` of a contiguous range, before the arena
//! hands them out again, so every read lands in a newly faulted page (allocation, zeroing,
//! memcg charge, LRU) and every frame is freed once. That is a cache's page lifecycle with
//! the cheapest eviction there is: one range, no policy, no bookkeeping. A cache that frees
//! frames cannot miss for less than the matching `-fresh` system.

use super::aligned::AlignedBuf;

/// Buffers in the arena, and buffers given back per `madvise`.
const ARENA: usize = 4096;
const DROP: usize = 64;

pub struct Arena {
    buf: AlignedBuf,
    bs: usize,
    next: usize,
    dropped: usize,
}

impl Arena {
    /// An arena of `bs`-byte buffers.
    pub fn new(bs: usize) -> Arena {
        Arena {
            buf: AlignedBuf::new(ARENA * bs),
            bs,
            next: 0,
            dropped: 0,
        }
    }

    /// The buffer for the next read and its sequence number, after giving back every whole
    /// group of `DROP` buffers that lies behind all reads in flight (`oldest`, the lowest
    /// sequence still being read into) and that the arena will hand out again.
    pub fn take(&mut self, oldest: usize) -> (*mut u8, usize) {
        let bs = self.bs;
        while self.dropped + DROP <= oldest.min(self.next)
            && self.next + DROP >= self.dropped + ARENA
        {
            let at = (self.dropped % ARENA) * bs;
            // SAFETY: these arena buffers hold no read in flight (all sequences in flight are
            // at or after `oldest`) and nothing refers to them any more.
            unsafe {
                libc::madvise(
                    self.buf.as_mut_ptr().add(at) as *mut libc::c_void,
                    DROP * bs,
                    libc::MADV_DONTNEED,
                )
            };
            self.dropped += DROP;
        }
        let seq = self.next;
        self.next += 1;
        // SAFETY: inside the arena of ARENA buffers.
        (
            unsafe { self.buf.as_mut_ptr().add((seq % ARENA) * bs) },
            seq,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every buffer a read is handed was given back since its last use: it reads as zeros.
    #[test]
    fn reused_buffers_come_back_fresh() {
        let bs = 4096;
        let mut a = Arena::new(bs);
        for seq in 0..3 * ARENA {
            let (p, s) = a.take(seq);
            assert_eq!(s, seq);
            // SAFETY: p is an arena buffer of bs bytes, ours until the next take.
            let b = unsafe { std::slice::from_raw_parts_mut(p, bs) };
            assert!(
                b.iter().all(|&x| x == 0),
                "buffer of sequence {seq} was not fresh"
            );
            b.fill(0xA5);
        }
    }
}
