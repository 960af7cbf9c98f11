//! Conformance of every registered policy to the hook contract, by property test.
//!
//! The harness plays the manager: it owns the state words, pins, loads and evicts buffers
//! through the real transitions and calls the hooks as a mapping does, and checks what the
//! policy proposes. No fallback is involved, so a policy that forgets a buffer, keeps a stale
//! one or proposes a pinned one is caught here rather than papered over in production.

use std::collections::HashSet;

use proptest::prelude::*;

use super::{policy_by_name, Buffers, Layout, Policy, POLICY_NAMES};
use crate::state::{BufferState, Phase, Pin};

const N: u64 = 24;

#[derive(Clone, Debug)]
enum Op {
    Access(u64),
    Pin(u64),
    Unpin(u64),
    Evict(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..N).prop_map(Op::Access),
        1 => (0..N).prop_map(Op::Pin),
        1 => (0..N).prop_map(Op::Unpin),
        1 => (0..N).prop_map(Op::Evict),
    ]
}

struct Harness {
    policy: Box<dyn Policy>,
    states: Vec<BufferState>,
    resident: HashSet<u64>,
    pinned: HashSet<u64>,
    capacity: u64,
    hits: bool,
}

impl Harness {
    fn new(name: &str, capacity: u64) -> Self {
        let mut policy = policy_by_name(name).unwrap();
        policy.attach(Layout {
            buffers: N,
            capacity,
            buffer_size: 4096,
        });
        Harness {
            hits: policy.wants_hits(),
            policy,
            states: (0..N).map(|_| BufferState::new()).collect(),
            resident: HashSet::new(),
            pinned: HashSet::new(),
            capacity,
        }
    }

    fn name(&self) -> &str {
        self.policy.name()
    }

    /// Asks for up to `want` victims and checks every proposal.
    fn propose(&self, want: usize) -> Result<Vec<u64>, TestCaseError> {
        let mut out = Vec::new();
        self.policy
            .choose_eviction_buffers(&Buffers::new(&self.states), want, &mut out);
        prop_assert!(
            out.len() <= want,
            "{}: {} proposals for {want}",
            self.name(),
            out.len()
        );
        let mut seen = HashSet::new();
        for &i in &out {
            prop_assert!(i < N, "{}: proposal {i} out of range", self.name());
            prop_assert!(seen.insert(i), "{}: {i} proposed twice", self.name());
            prop_assert!(
                self.resident.contains(&i),
                "{}: proposed non-resident {i}",
                self.name()
            );
            prop_assert!(
                !self.pinned.contains(&i),
                "{}: proposed pinned {i}",
                self.name()
            );
        }
        let idle = self.resident.iter().any(|i| !self.pinned.contains(i));
        prop_assert!(
            !idle || !out.is_empty() || want == 0,
            "{}: proposed nothing while an idle buffer was resident",
            self.name()
        );
        Ok(out)
    }

    fn evict(&mut self, i: u64) {
        let s = &self.states[i as usize];
        let e = s.load().begin_evict().expect("idle and cached");
        s.store_exclusive(e);
        self.policy.on_evict(i);
        s.store_exclusive(e.finish_evict());
        self.resident.remove(&i);
    }

    /// A miss on `i`: make room with the policy's proposals, then load, keeping `pin`.
    fn load(&mut self, i: u64, pin: Pin, want: usize) -> Result<(), TestCaseError> {
        while self.resident.len() as u64 >= self.capacity {
            let v = self.propose(want)?;
            if v.is_empty() {
                return Ok(()); // everything pinned: the cache would report its budget spent
            }
            for i in v {
                self.evict(i);
            }
        }
        let s = &self.states[i as usize];
        let l = s.load().begin_load().expect("evicted");
        s.store_exclusive(l);
        self.policy.on_insert(i);
        s.store_exclusive(l.finish_load(pin, false));
        self.resident.insert(i);
        if pin == Pin::Shared {
            self.pinned.insert(i);
        }
        Ok(())
    }

    fn hit(&mut self, i: u64) {
        let s = &self.states[i as usize];
        let p = s.load().pin_shared().expect("cached");
        s.store_exclusive(p);
        if self.hits {
            self.policy.on_hit(i);
        }
    }

    fn apply(&mut self, op: &Op, want: usize) -> Result<(), TestCaseError> {
        match *op {
            Op::Access(i) | Op::Pin(i) if self.pinned.contains(&i) => {}
            Op::Access(i) if self.resident.contains(&i) => {
                self.hit(i);
                let s = &self.states[i as usize];
                s.store_exclusive(s.load().unpin_shared());
            }
            Op::Access(i) => {
                // A demand miss tells the policy first; `Pin` below loads without it, as a
                // prefetch does, so both orders are covered.
                self.policy.on_miss(i);
                self.load(i, Pin::Shared, want)?;
                if self.pinned.remove(&i) {
                    let s = &self.states[i as usize];
                    s.store_exclusive(s.load().unpin_shared());
                }
            }
            Op::Pin(i) if self.resident.contains(&i) => {
                self.hit(i);
                self.pinned.insert(i);
            }
            Op::Pin(i) => self.load(i, Pin::Shared, want)?,
            Op::Unpin(i) => {
                if self.pinned.remove(&i) {
                    let s = &self.states[i as usize];
                    s.store_exclusive(s.load().unpin_shared());
                }
            }
            Op::Evict(i) => {
                if self.resident.contains(&i) && !self.pinned.contains(&i) {
                    self.evict(i);
                }
            }
        }
        prop_assert!(self.resident.len() as u64 <= self.capacity);
        for i in 0..N {
            let cached = self.states[i as usize].load().phase() == Phase::Cached;
            prop_assert_eq!(cached, self.resident.contains(&i));
        }
        Ok(())
    }

    /// Unpins everything and evicts it all through the policy's proposals alone: a buffer the
    /// policy lost would never be proposed, a stale one would fail the checks.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for i in std::mem::take(&mut self.pinned) {
            let s = &self.states[i as usize];
            s.store_exclusive(s.load().unpin_shared());
        }
        let mut rounds = 0;
        while !self.resident.is_empty() {
            rounds += 1;
            prop_assert!(rounds <= 4 * N, "{}: drain does not finish", self.name());
            for i in self.propose(2)? {
                self.evict(i);
            }
        }
        Ok(())
    }
}

/// Configurations that build a different policy, or run other rules, than their defaults:
/// held to the same contract.
const CONFIGURED: &[&str] = &[
    "clock:libcachesim",
    "clock:n_bit_counter=3,init_freq=2",
    "s3fifo:libcachesim",
    "s3fifo:small_size_ratio=0.5,move_to_main_threshold=3,ghost_size_ratio=0",
    "lfu:exact",
    "2q:a_in_size_ratio=0.9,a_out_size_ratio=0.1",
    "lirs:hir_ratio=0.5",
    "w-tinylfu:window_size=0.5",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn every_policy_keeps_the_hook_contract(
        ops in prop::collection::vec(op(), 1..300),
        capacity in 1u64..9,
        want in 1usize..4,
    ) {
        for &name in POLICY_NAMES.iter().chain(CONFIGURED) {
            let mut h = Harness::new(name, capacity);
            for op in &ops {
                h.apply(op, want)?;
            }
            h.drain()?;
        }
    }
}
