//! MRU: evict the most recently used buffer.
//!
//! Chou and DeWitt ("An evaluation of buffer management strategies for relational database
//! systems", VLDB 1985) showed it optimal for a loop over data larger than the cache: LRU then
//! misses on every access, MRU keeps a fixed part of the loop resident. cache_ext (SOSP'25 §5)
//! uses it for file scans. Use it on mappings read in repeated sequential passes, never on
//! point lookups with locality.
//!
//! Synchronization: one `parking_lot` mutex around an [`IndexList`], taken on hits too (an exact
//! recency order).

use parking_lot::Mutex;

use super::{Buffers, IndexList, Layout, Policy};

pub struct Mru {
    /// Front: most recently used, the next victim.
    list: Mutex<IndexList>,
}

impl Default for Mru {
    fn default() -> Self {
        Mru {
            list: Mutex::new(IndexList::new(0)),
        }
    }
}

impl Mru {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for Mru {
    fn name(&self) -> &str {
        "mru"
    }

    fn attach(&mut self, layout: Layout) {
        *self.list.get_mut() = IndexList::new(layout.buffers);
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut l = self.list.lock();
        let start = out.len();
        let mut cur = l.front();
        let mut left = l.len();
        while let Some(i) = cur {
            if out.len() - start == want || left == 0 {
                break;
            }
            left -= 1;
            cur = l.towards_back(i);
            if buffers.is_candidate(i) {
                out.push(i);
            }
        }
        // Proposed victims move to the far end so that concurrent evictors propose others. A
        // proposal whose eviction is cancelled (pinned meanwhile) is thereby only delayed.
        for &i in &out[start..] {
            l.remove(i);
            l.push_back(i);
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, index: u64) {
        let mut l = self.list.lock();
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

    /// The loop that makes LRU miss every time: MRU keeps two of its four buffers.
    #[test]
    fn mru_textbook_loop() {
        let t: Vec<u64> = [1, 2, 3, 4].repeat(3);
        assert_eq!(hit_pattern(Box::new(Mru::new()), 3, &t), "MMMMHHMHHMHH");
    }

    #[test]
    fn mru_evicts_the_most_recent() {
        // 3 is the most recent when 4 misses; then 1 (just hit) is when 5 misses.
        let t = [1, 2, 3, 4, 1, 5, 2, 3];
        assert_eq!(hit_pattern(Box::new(Mru::new()), 3, &t), "MMMMHMHM");
    }
}
