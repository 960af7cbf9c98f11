//! LRU: evict the buffer whose last access is oldest.
//!
//! The classic recency policy (Mattson et al., "Evaluation techniques for storage
//! hierarchies", IBM Systems Journal 1970, where LRU's stack property gives a whole miss-ratio
//! curve from one pass). It suits workloads with temporal locality and a working set that fits,
//! e.g. B-tree inner pages and hot rows; it thrashes on loops and scans larger than the cache
//! (use MRU, SIEVE or S3-FIFO there).
//!
//! Exact, not approximated: every hit moves the buffer to the front of an [`IndexList`] under a
//! `parking_lot` mutex (a few nanoseconds uncontended, O(1) array writes). That lock is on the
//! hit path, so under many threads hitting the same mapping it is the policy's cost; CLOCK (the
//! default) is the lock-free approximation for that case.

use parking_lot::Mutex;

use super::fifo::propose_from_back;
use super::{Buffers, IndexList, Layout, Policy};

pub struct Lru {
    /// Front: most recently used; back: the next victim.
    list: Mutex<IndexList>,
}

impl Default for Lru {
    fn default() -> Self {
        Lru {
            list: Mutex::new(IndexList::new(0)),
        }
    }
}

impl Lru {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for Lru {
    fn name(&self) -> &str {
        "lru"
    }

    fn attach(&mut self, layout: Layout) {
        *self.list.get_mut() = IndexList::new(layout.buffers);
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        propose_from_back(&mut self.list.lock(), buffers, want, out);
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, index: u64) {
        let mut l = self.list.lock();
        // A hit on a buffer that is not listed cannot be: the hitter's pin keeps it resident.
        // Checking anyway keeps a stray call from resurrecting an evicted buffer.
        if l.contains(index) {
            l.move_to_front(index);
        }
    }

    fn on_insert(&self, index: u64) {
        self.list.lock().push_front(index);
    }

    fn on_evict(&self, index: u64) {
        self.list.lock().remove(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::hit_pattern;

    #[test]
    fn lru_textbook_sequences() {
        let t = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];
        assert_eq!(hit_pattern(Box::new(Lru::new()), 3, &t), "MMMMMMMHHMMM");
        assert_eq!(hit_pattern(Box::new(Lru::new()), 4, &t), "MMMMHHMHHMMM");
        // The hit on 1 saves it: 2 is the least recently used when 4 arrives.
        let t = [1, 2, 3, 1, 4, 1, 2];
        assert_eq!(hit_pattern(Box::new(Lru::new()), 3, &t), "MMMHMHM");
    }

    /// A loop one larger than the cache: LRU misses every time.
    #[test]
    fn lru_thrashes_on_a_loop() {
        let t: Vec<u64> = [1, 2, 3, 4].repeat(3);
        assert_eq!(hit_pattern(Box::new(Lru::new()), 3, &t), "M".repeat(12));
    }
}
