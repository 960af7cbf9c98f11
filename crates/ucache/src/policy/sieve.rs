//! SIEVE: a FIFO queue with a visited bit and a hand that retains survivors in place.
//!
//! Zhang et al., "SIEVE is Simpler than LRU: an Efficient Turn-Key Eviction Algorithm for Web
//! Caches", NSDI'24. New buffers enter at the head; the hand moves from the tail towards the
//! head, clearing visited bits and evicting the first unvisited buffer; visited buffers stay
//! where they are, so new buffers pass the hand quickly (lazy promotion, quick demotion). It
//! beats LRU on skewed web and key-value traces with many one-hit wonders, and its hit is a
//! single bit store: no lock, no list move.
//!
//! The visited bit is the policy's own, not the state word's referenced bit: the loader's pin
//! sets that one, while SIEVE inserts unvisited. Synchronization: hits store a relaxed
//! `AtomicBool`; the queue and the hand sit behind a `parking_lot` mutex taken on the miss path.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use parking_lot::Mutex;

use super::{Buffers, IndexList, Layout, Policy};

struct Queue {
    /// Front: head (newest); back: tail (oldest).
    list: IndexList,
    /// The next buffer to examine; `None` means start again from the tail.
    hand: Option<u64>,
}

pub struct Sieve {
    visited: Box<[AtomicBool]>,
    queue: Mutex<Queue>,
}

impl Default for Sieve {
    fn default() -> Self {
        Sieve {
            visited: Box::new([]),
            queue: Mutex::new(Queue {
                list: IndexList::new(0),
                hand: None,
            }),
        }
    }
}

impl Sieve {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether buffer `index` was hit since it was inserted or the hand last passed it.
    pub fn visited(&self, index: u64) -> bool {
        self.visited[index as usize].load(Relaxed)
    }
}

impl Policy for Sieve {
    fn name(&self) -> &str {
        "sieve"
    }

    fn attach(&mut self, layout: Layout) {
        self.visited = (0..layout.buffers)
            .map(|_| AtomicBool::new(false))
            .collect();
        self.queue.get_mut().list = IndexList::new(layout.buffers);
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut q = self.queue.lock();
        let start = out.len();
        // Two laps clear every visited bit once, so anything evictable is found by then.
        let mut steps = 2 * q.list.len() + 1;
        while out.len() - start < want && steps > 0 {
            steps -= 1;
            let Some(i) = q.hand.or_else(|| q.list.back()) else {
                break;
            };
            q.hand = q.list.towards_front(i);
            if !buffers.is_candidate(i) {
                continue;
            }
            if self.visited[i as usize].load(Relaxed) {
                self.visited[i as usize].store(false, Relaxed);
                continue;
            }
            // The hand has moved past it, so the next call (or a concurrent evictor) looks at
            // the following buffer while this one is being evicted.
            if out[start..].contains(&i) {
                break;
            }
            out.push(i);
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, index: u64) {
        let v = &self.visited[index as usize];
        if !v.load(Relaxed) {
            v.store(true, Relaxed);
        }
    }

    fn on_insert(&self, index: u64) {
        self.visited[index as usize].store(false, Relaxed);
        self.queue.lock().list.push_front(index);
    }

    fn on_evict(&self, index: u64) {
        let mut q = self.queue.lock();
        if q.hand == Some(index) {
            q.hand = q.list.towards_front(index);
        }
        q.list.remove(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::hit_pattern;
    use crate::policy::Simulator;

    /// 1 2 3 4 fill the queue; 1 and 2 are visited. The miss on 5 sweeps from the tail,
    /// clearing 1 and 2, and evicts 3; the hand stays at 4. 2 is hit again. The miss on 6 then
    /// evicts 4 where the hand stands, while a hand restarting at the tail would evict 1 (now
    /// unvisited), as FIFO does. 1 is hit; the miss on 7 evicts 5.
    #[test]
    fn sieve_hand_retains_its_position_and_visited_buffers() {
        let t = [1, 2, 3, 4, 1, 2, 5, 2, 6, 1, 7, 1, 2];
        assert_eq!(hit_pattern(Box::new(Sieve::new()), 4, &t), "MMMMHHMHMHMHH");
        let mut sim = Simulator::new(Box::new(Sieve::new()), 8, 4);
        for id in &t[..9] {
            sim.access(*id);
        }
        let resident: Vec<u64> = (0..8).filter(|&i| sim.is_resident(i)).collect();
        assert_eq!(resident, vec![1, 2, 5, 6]);
    }

    /// Visited buffers stay in place and lose the bit when the hand passes.
    #[test]
    fn sieve_clears_visited_bits_as_the_hand_passes() {
        let mut sim = Simulator::new(Box::new(Sieve::new()), 8, 3);
        for id in [0, 1, 2, 0, 1] {
            sim.access(id);
        }
        sim.access(3); // clears 0 and 1, evicts 2
        assert!(!sim.is_resident(2));
        assert!(sim.is_resident(0) && sim.is_resident(1));
    }
}
