//! CLOCK (second chance), the default policy: Corbató, "A Paging Experiment with the Multics
//! System", 1968; the lock-free variant follows vmcache (Leis et al., SIGMOD'23).
//!
//! The referenced bit lives in the buffer's state word and is set by every pin at no extra
//! cost, so hits never call into the policy. Victim search sweeps a [`ResidentSet`] with a
//! shared hand; concurrent evictors sweep disjoint slots.

use super::{Buffers, Layout, Policy, ResidentSet};
use crate::state::Phase;

/// Slots swept per step of the hand.
const SWEEP: u64 = 64;

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
        while out.len() - start < want && budget > 0 {
            set.clock_batch(SWEEP, |i| {
                let w = buffers.state(i);
                if w.phase() != Phase::Cached || !w.idle() {
                    return;
                }
                if !buffers.test_and_clear_referenced(i) && out.len() - start < want {
                    out.push(i);
                }
            });
            budget = budget.saturating_sub(SWEEP);
        }
    }

    fn on_insert(&self, index: u64) {
        self.set().insert(index);
    }

    fn on_evict(&self, index: u64) {
        self.set().remove(index);
    }
}
