//! CLOCK (second chance), the default policy: Corbató, "A Paging Experiment with the Multics
//! System", 1968; the lock-free variant follows vmcache (Leis et al., SIGMOD'23).
//!
//! The referenced bit lives in the buffer's state word and is set by every pin at no extra
//! cost, so hits never call into the policy. Victim search sweeps a [`ResidentSet`] with a
//! shared hand; concurrent evictors sweep disjoint slots. The ring's order is the set's slot
//! order (a hash of the index), not insertion order; otherwise this is the textbook algorithm.

use super::{Buffers, Layout, Policy, ResidentSet};
use crate::state::Phase;

/// Slots claimed per step of the hand. Their buffers' state words are prefetched together
/// (each is a random access, and a sweep that waits for them one at a time is memory-bound),
/// so a step is small enough that most of them are looked at.
const SWEEP: u64 = 16;
/// Resident sets of fewer slots than this keep their buffers' state words in the CPU cache
/// anyway (a line each), so the sweep does not spend instructions prefetching them.
const PREFETCH_FROM_SLOTS: u64 = 1 << 14;

#[derive(Default)]
pub struct Clock {
    resident: Option<ResidentSet>,
}

impl Clock {
    pub fn new() -> Self {
        Self::default()
    }

    fn set(&self) -> &ResidentSet {
        self.resident.as_ref().expect("Clock used before attach")
    }
}

impl Policy for Clock {
    fn name(&self) -> &str {
        "clock"
    }

    fn attach(&mut self, layout: Layout) {
        self.resident = Some(ResidentSet::new(layout.capacity.min(layout.buffers)));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let set = self.set();
        let start = out.len();
        // Two full sweeps clear every referenced bit once, so anything idle is found by then.
        let mut budget = 2 * set.slots();
        let prefetch = set.slots() >= PREFETCH_FROM_SLOTS;
        while out.len() - start < want && budget > 0 {
            // The sweep stops at the last victim wanted and hands the rest of its slots back:
            // a slot past the last victim would lose its referenced bit for nothing. With one
            // victim wanted this is the textbook clock.
            let looked = set.clock_sweep(
                SWEEP,
                |k| {
                    if prefetch {
                        buffers.prefetch(k)
                    }
                },
                |i| {
                    let w = buffers.state(i);
                    if w.phase() == Phase::Cached
                        && w.idle()
                        && !buffers.test_and_clear_referenced(i)
                        // A hand that went all the way round meets this call's victims again
                        // (a linear check, but only per victim, and batches are small).
                        && !out[start..].contains(&i)
                    {
                        out.push(i);
                    }
                    out.len() - start >= want
                },
            );
            budget = budget.saturating_sub(looked);
        }
    }

    fn on_insert(&self, index: u64) {
        self.set().insert(index);
    }

    fn on_evict(&self, index: u64) {
        self.set().remove(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::hit_pattern;

    /// Textbook second chance, with referenced bits set on load. With capacity 3 the ring has
    /// 8 slots and buffers 0, 1, 2, 4 hash to slots 0, 2, 4, 1: each newcomer lands where the
    /// textbook's frame order would put it on this string, so the outcome is the textbook's
    /// (checked against a frame-array model). It differs from both FIFO and LRU.
    #[test]
    fn clock_textbook_sequence() {
        let t = [4, 4, 2, 1, 1, 1, 4, 0, 2, 4, 4, 1, 1, 2];
        let clock = hit_pattern(Box::new(Clock::new()), 3, &t);
        assert_eq!(clock, "MHMMHHHMHMHMHM");
        assert_ne!(
            clock,
            hit_pattern(Box::new(super::super::Fifo::new()), 3, &t)
        );
        assert_ne!(
            clock,
            hit_pattern(Box::new(super::super::Lru::new()), 3, &t)
        );
    }
}
