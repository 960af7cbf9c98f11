//! The advanced policy library (issue #4, part 2): ghost-based, frequency-based,
//! hit-density, generational and application-directed policies, by name.
//!
//! Each policy lives in its own file with its source and when it suits; this file only names
//! them for the registry and holds what they share.
//!
//! Locking: most of these policies move a buffer between several lists on one event (ARC's
//! T1 → T2 on a hit, LIRS's promote, demote and prune), and the moves must happen together,
//! so each keeps its lists behind one per-mapping `parking_lot` mutex held for O(1) work.
//! Misses, inserts and evictions always take it: the policy must track exactly the resident
//! buffers. Hits only *try* it: a hit that finds the lock held is dropped, as Caffeine's
//! lossy read buffer drops reads, because a lost recency update costs a little hit ratio
//! while a hit that waits for a lock costs every hit. Single-threaded (the simulator, the
//! textbook tests) nothing is dropped, so the policies behave exactly as their papers say.
//! MGLRU needs no lock on hits at all.

use super::{Buffers, Policy};
use crate::state::Phase;

/// Names accepted by [`advanced_policy_by_name`].
pub const ADVANCED_POLICY_NAMES: &[&str] = &[
    "2q",
    "arc",
    "lirs",
    "w-tinylfu",
    "lhd",
    "mglru",
    "get-scan",
    "priority",
];

/// A fresh policy of the named kind, or `None` if the name is not one of
/// [`ADVANCED_POLICY_NAMES`].
pub fn advanced_policy_by_name(name: &str) -> Option<Box<dyn Policy>> {
    Some(match name {
        "2q" => Box::new(super::TwoQ::new()),
        "arc" => Box::new(super::ArcPolicy::new()),
        "lirs" => Box::new(super::Lirs::new()),
        "w-tinylfu" => Box::new(super::WTinyLfu::new()),
        "lhd" => Box::new(super::Lhd::new()),
        "mglru" => Box::new(super::Mglru::new()),
        "get-scan" => Box::new(super::GetScan::new()),
        // By name there is no handle to protect with, so only `Hint::PRIORITY` loads are
        // protected; applications construct `Priority` themselves to get a handle.
        "priority" => Box::new(super::Priority::new()),
        _ => return None,
    })
}

/// Whether buffer `i` could be evicted right now (cached, unpinned, no IO). Policies skip the
/// others when proposing, so a pinned buffer at the tail of a queue costs a step, not a
/// rejected proposal and a fallback eviction.
#[inline]
pub(super) fn idle(buffers: &Buffers<'_>, i: u64) -> bool {
    let w = buffers.state(i);
    w.phase() == Phase::Cached && w.idle()
}

/// Test access to what a policy believes is resident.
#[cfg(test)]
pub(super) trait Audit {
    /// Every buffer the policy tracks as resident, each once.
    fn tracked(&self) -> Vec<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{
        ArcPolicy, GetScan, Hint, Layout, Lhd, Lirs, Mglru, Priority, PriorityHandle, TwoQ,
        WTinyLfu,
    };
    use crate::state::{BufferState, Phase, Pin};
    use proptest::prelude::*;

    const N: u64 = 24;

    #[derive(Clone, Debug)]
    enum Op {
        /// Access with a hint, as a pin and unpin would.
        Access(u64, u8),
        /// A prefetch: loaded with no demand miss (no `on_miss`).
        Prefetch(u64),
        /// A demand miss whose read fails: `on_miss`, then no insert.
        FailedLoad(u64),
        /// Pin and keep pinned (if resident).
        Pin(u64),
        Unpin(u64),
        /// Explicit eviction (if resident and idle).
        Evict(u64),
        /// Ask for proposals and check them.
        Choose(usize),
        /// Priority: protect (0 unprotects) a range.
        Protect(u64, u64, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..N, 0u8..5).prop_map(|(i, h)| Op::Access(i, h)),
            1 => (0..N).prop_map(Op::Prefetch),
            1 => (0..N).prop_map(Op::FailedLoad),
            1 => (0..N).prop_map(Op::Pin),
            1 => (0..N).prop_map(Op::Unpin),
            1 => (0..N).prop_map(Op::Evict),
            1 => (1usize..6).prop_map(Op::Choose),
            1 => (0..N, 1u64..6, 0u8..4).prop_map(|(i, l, p)| Op::Protect(i, l, p)),
        ]
    }

    /// Drives `p` through the hooks in the order and under the ownership the cache uses,
    /// checking after every step that the policy tracks exactly the resident buffers and
    /// only ever proposes resident, unpinned, distinct buffers in range.
    fn drive(
        mut p: impl Policy + Audit,
        cap: u64,
        ops: &[Op],
        handle: Option<&PriorityHandle>,
    ) -> Result<(), TestCaseError> {
        p.attach(Layout {
            buffers: N,
            capacity: cap,
            buffer_size: 4096,
        });
        let st: Vec<BufferState> = (0..N).map(|_| BufferState::new()).collect();
        let cached = |i: u64| st[i as usize].load().phase() == Phase::Cached;
        let evict = |p: &dyn Policy, i: u64| {
            let s = &st[i as usize];
            let e = s.load().begin_evict().unwrap();
            s.store_exclusive(e);
            p.on_evict(i);
            s.store_exclusive(e.finish_evict());
        };
        let check_proposals = |out: &[u64], want: usize| -> Result<(), TestCaseError> {
            prop_assert!(out.len() <= want, "{} > {want}", out.len());
            let mut seen = std::collections::HashSet::new();
            for &i in out {
                prop_assert!(i < N, "out of range {i}");
                prop_assert!(seen.insert(i), "proposed {i} twice");
                let w = st[i as usize].load();
                prop_assert!(w.phase() == Phase::Cached, "proposed non-resident {i}");
                prop_assert!(w.idle(), "proposed pinned {i}");
            }
            // Priority: a protected buffer only once no unprotected candidate is left out.
            if let Some(h) = handle {
                if out.iter().any(|&i| h.priority(i) > 0) {
                    let spare = (0..N).find(|&j| {
                        let w = st[j as usize].load();
                        w.phase() == Phase::Cached
                            && w.idle()
                            && h.priority(j) == 0
                            && !out.contains(&j)
                    });
                    prop_assert!(spare.is_none(), "protected proposed, {spare:?} spared");
                }
            }
            Ok(())
        };
        let mut resident = 0u64;
        for op in ops {
            match *op {
                Op::Access(i, _) | Op::Prefetch(i) => {
                    let demand = matches!(op, Op::Access(..));
                    let prev = match *op {
                        Op::Access(_, h) => Hint::set(Hint(h)),
                        _ => Hint::set(Hint::NONE),
                    };
                    let w = st[i as usize].load();
                    if w.phase() == Phase::Cached {
                        if demand {
                            if let Some(t) = w.touch() {
                                st[i as usize].store_exclusive(t);
                            }
                            if p.wants_hits() {
                                p.on_hit(i);
                            }
                        }
                    } else {
                        if demand {
                            p.on_miss(i);
                        }
                        let mut room = resident < cap;
                        while !room {
                            let mut out = Vec::new();
                            p.choose_eviction_buffers(&Buffers::new(&st), 1, &mut out);
                            check_proposals(&out, 1)
                                .map_err(|e| TestCaseError::fail(format!("{}: {e}", p.name())))?;
                            // The manager's fallback when the policy proposes nothing.
                            let victim = out.first().copied().or_else(|| {
                                (0..N).find(|&j| cached(j) && st[j as usize].load().idle())
                            });
                            match victim {
                                Some(v) => {
                                    evict(&p, v);
                                    resident -= 1;
                                    room = true;
                                }
                                None => break, // everything pinned
                            }
                        }
                        if room {
                            let s = &st[i as usize];
                            let l = w.begin_load().unwrap();
                            s.store_exclusive(l);
                            p.on_insert(i);
                            s.store_exclusive(l.finish_load(Pin::Shared, !demand).unpin_shared());
                            resident += 1;
                        }
                    }
                    Hint::set(prev);
                }
                Op::FailedLoad(i) => {
                    if !cached(i) {
                        p.on_miss(i);
                    }
                }
                Op::Pin(i) => {
                    let s = &st[i as usize];
                    if let Some(w) = s.load().pin_shared().filter(|_| cached(i)) {
                        s.store_exclusive(w);
                    }
                }
                Op::Unpin(i) => {
                    let s = &st[i as usize];
                    let w = s.load();
                    if w.phase() == Phase::Cached && w.pins() > 0 {
                        s.store_exclusive(w.unpin_shared());
                    }
                }
                Op::Evict(i) => {
                    if cached(i) && st[i as usize].load().idle() {
                        evict(&p, i);
                        resident -= 1;
                    }
                }
                Op::Choose(want) => {
                    let mut out = Vec::new();
                    p.choose_eviction_buffers(&Buffers::new(&st), want, &mut out);
                    check_proposals(&out, want)
                        .map_err(|e| TestCaseError::fail(format!("{}: {e}", p.name())))?;
                }
                Op::Protect(i, len, prio) => {
                    if let Some(h) = handle {
                        h.protect(i..(i + len).min(N), prio);
                    }
                }
            }
            prop_assert!(resident <= cap);
            let mut tracked = p.tracked();
            tracked.sort_unstable();
            let want: Vec<u64> = (0..N).filter(|&i| cached(i)).collect();
            prop_assert_eq!(&tracked, &want, "{} after {:?}", p.name(), op);
        }
        // With nothing pinned, a policy proposes at least one victim when full.
        for i in 0..N {
            let mut w = st[i as usize].load();
            while w.phase() == Phase::Cached && w.pins() > 0 {
                w = w.unpin_shared();
                st[i as usize].store_exclusive(w);
            }
        }
        if resident > 0 {
            let mut out = Vec::new();
            p.choose_eviction_buffers(&Buffers::new(&st), 1, &mut out);
            prop_assert_eq!(
                out.len(),
                1,
                "{}: nothing proposed, {} resident",
                p.name(),
                resident
            );
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn library_invariants(cap in 1u64..10, ops in prop::collection::vec(op(), 1..300)) {
            drive(TwoQ::new(), cap, &ops, None)?;
            drive(ArcPolicy::new(), cap, &ops, None)?;
            drive(Lirs::new(), cap, &ops, None)?;
            drive(WTinyLfu::new(), cap, &ops, None)?;
            drive(Lhd::new(), cap, &ops, None)?;
            drive(Mglru::new(), cap, &ops, None)?;
            drive(GetScan::new(), cap, &ops, None)?;
            let p = Priority::new();
            let h = p.handle();
            drive(p, cap, &ops, Some(&h))?;
        }
    }

    #[test]
    fn every_name_builds() {
        for name in ADVANCED_POLICY_NAMES {
            let p = advanced_policy_by_name(name).unwrap();
            assert_eq!(p.name(), *name);
        }
        assert!(advanced_policy_by_name("nope").is_none());
    }
}
