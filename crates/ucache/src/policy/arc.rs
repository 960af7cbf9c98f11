//! ARC: Megiddo and Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST'03
//! (Fig. 4, exact: T1/T2 resident, B1/B2 ghosts, adaptive target p).
//!
//! ARC balances recency (T1, seen once) against frequency (T2, seen twice or more) by learning
//! from its own mistakes: a miss on a ghost in B1 says T1 was too small and grows p, one in B2
//! shrinks it. Suits workloads whose mix of recency and frequency shifts over time, and needs
//! no tuning. Ghost entries are keyed by buffer index, so the ghosts cost no allocation.
//!
//! The paper's single `REQUEST(x)` is split over the hooks: the ghost cases (adapting p,
//! trimming B1/B2) run in [`Policy::on_miss`], before the manager evicts for the miss;
//! `REPLACE` is [`Policy::choose_eviction_buffers`] and the move to a ghost list is
//! [`Policy::on_evict`]; where x lands (T1 or T2) is [`Policy::on_insert`]. Under concurrent
//! misses, `REPLACE` sees the most recent miss's "x ∈ B2", an approximation the paper's
//! sequential model does not have.
//!
//! Concurrency: a buffer moves between four lists and p, so all sit behind one mutex; every
//! hook is O(1) under it.

use parking_lot::{Mutex, MutexGuard};

use super::advanced::idle;
use super::{Buffers, IndexList, Layout, Policy};

struct Lists {
    t1: IndexList,
    t2: IndexList,
    b1: IndexList,
    b2: IndexList,
    /// Misses that hit a ghost: their insert goes to T2.
    to_t2: IndexList,
    c: u64,
    p: u64,
    /// The last miss was a ghost hit in B2 (REPLACE's tie-break).
    miss_in_b2: bool,
    /// Case IV(a): the next T1 eviction leaves no ghost (the paper deletes it outright).
    drop_t1: bool,
}

impl Lists {
    fn trim(&mut self) {
        // The paper's invariants, which only an eviction ARC did not choose can break.
        while self.t1.len() + self.b1.len() > self.c && self.b1.pop_back().is_some() {}
        while self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len() > 2 * self.c {
            if self.b2.pop_back().is_none() && self.b1.pop_back().is_none() {
                break;
            }
        }
    }
}

#[derive(Default)]
pub struct ArcPolicy {
    lists: Option<Mutex<Lists>>,
}

impl ArcPolicy {
    pub fn new() -> Self {
        Self::default()
    }

    fn lists(&self) -> MutexGuard<'_, Lists> {
        self.lists
            .as_ref()
            .expect("ArcPolicy used before attach")
            .lock()
    }

    /// The adaptive target size of T1.
    pub fn target(&self) -> u64 {
        self.lists().p
    }
}

impl Policy for ArcPolicy {
    fn name(&self) -> &str {
        "arc"
    }

    fn attach(&mut self, layout: Layout) {
        let n = layout.buffers;
        self.lists = Some(Mutex::new(Lists {
            t1: IndexList::new(n),
            t2: IndexList::new(n),
            b1: IndexList::new(n),
            b2: IndexList::new(n),
            to_t2: IndexList::new(n),
            c: layout.capacity.min(n).max(1),
            p: 0,
            miss_in_b2: false,
            drop_t1: false,
        }));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let l = self.lists();
        let start = out.len();
        let mut t1_len = l.t1.len();
        let mut a = l.t1.back();
        let mut b = l.t2.back();
        while out.len() - start < want {
            // REPLACE(x, p), or case IV(a)'s deletion from T1.
            let from_t1 = a.is_some()
                && (l.drop_t1 || b.is_none() || t1_len > l.p || (l.miss_in_b2 && t1_len == l.p));
            let pick = if from_t1 {
                let i = a.unwrap();
                a = l.t1.towards_front(i);
                t1_len -= 1;
                i
            } else if let Some(i) = b {
                b = l.t2.towards_front(i);
                i
            } else {
                break;
            };
            if idle(buffers, pick) {
                out.push(pick);
            }
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    /// Case I: a hit in T1 or T2 moves x to T2's MRU end.
    fn on_hit(&self, index: u64) {
        let Some(mut l) = self.lists.as_ref().and_then(|m| m.try_lock()) else {
            return; // contended: a lossy hit (see advanced.rs)
        };
        if l.t1.remove(index) {
            l.t2.push_front(index);
        } else if l.t2.contains(index) {
            l.t2.move_to_front(index);
        }
    }

    fn on_miss(&self, x: u64) {
        let mut l = self.lists();
        let l = &mut *l;
        if l.to_t2.contains(x) {
            return; // a repeated miss on a load that has not landed yet
        }
        let (b1, b2) = (l.b1.len(), l.b2.len());
        if l.b1.remove(x) {
            // Case II: grow T1's target.
            let d = if b1 >= b2 { 1 } else { b2 / b1 };
            l.p = (l.p + d).min(l.c);
            l.to_t2.push_front(x);
            l.miss_in_b2 = false;
        } else if l.b2.remove(x) {
            // Case III: shrink it.
            let d = if b2 >= b1 { 1 } else { b1 / b2 };
            l.p = l.p.saturating_sub(d);
            l.to_t2.push_front(x);
            l.miss_in_b2 = true;
        } else {
            // Case IV: a true miss; keep |L1| <= c and |L1| + |L2| <= 2c.
            l.miss_in_b2 = false;
            let l1 = l.t1.len() + l.b1.len();
            let total = l1 + l.t2.len() + l.b2.len();
            if l1 >= l.c {
                if l.t1.len() < l.c {
                    l.b1.pop_back();
                } else {
                    l.drop_t1 = true;
                }
            } else if total >= 2 * l.c {
                l.b2.pop_back();
            }
        }
    }

    fn on_insert(&self, index: u64) {
        let mut l = self.lists();
        if l.to_t2.remove(index) {
            l.t2.push_front(index);
        } else {
            // An insert without a demand miss (a prefetch) is no re-reference: forget the
            // ghost, if any, rather than adapt p.
            l.b1.remove(index);
            l.b2.remove(index);
            l.t1.push_front(index);
        }
        l.trim();
    }

    fn on_evict(&self, index: u64) {
        let mut l = self.lists();
        if l.t1.remove(index) {
            if std::mem::take(&mut l.drop_t1) {
                // Case IV(a): T1 alone fills the cache; its LRU page is forgotten.
            } else {
                l.b1.push_front(index);
            }
        } else if l.t2.remove(index) {
            l.b2.push_front(index);
        }
        l.trim();
    }
}

#[cfg(test)]
impl super::advanced::Audit for ArcPolicy {
    fn tracked(&self) -> Vec<u64> {
        let l = self.lists();
        l.t1.iter_from_back().chain(l.t2.iter_from_back()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Simulator;

    fn lists(sim: &Simulator) -> [Vec<u64>; 4] {
        // Front (MRU) first, as the paper draws them.
        let p = sim.policy() as *const dyn Policy as *const ArcPolicy;
        // SAFETY: the simulator was built from an `ArcPolicy` in these tests.
        let l = unsafe { &*p }.lists();
        let f = |x: &IndexList| {
            let mut v: Vec<u64> = x.iter_from_back().collect();
            v.reverse();
            v
        };
        [f(&l.t1), f(&l.t2), f(&l.b1), f(&l.b2)]
    }

    fn target(sim: &Simulator) -> u64 {
        let p = sim.policy() as *const dyn Policy as *const ArcPolicy;
        // SAFETY: as above.
        unsafe { &*p }.target()
    }

    /// c = 2, worked by hand from Fig. 4 of the paper; lists are [T1, T2, B1, B2], MRU first.
    #[test]
    fn textbook_sequence() {
        let mut sim = Simulator::new(Box::new(ArcPolicy::new()), 16, 2);
        #[rustfmt::skip]
        let trace: &[(u64, bool, [&[u64]; 4], u64)] = &[
            (1, false, [&[1], &[], &[], &[]], 0),
            (2, false, [&[2, 1], &[], &[], &[]], 0),
            (1, true, [&[2], &[1], &[], &[]], 0),
            // IV(b): REPLACE, |T1| = 1 > p = 0: T1's LRU to B1.
            (3, false, [&[3], &[1], &[2], &[]], 0),
            // II: p = 1; REPLACE: |T1| = 1 is not > 1: T2's LRU to B2.
            (2, false, [&[3], &[2], &[], &[1]], 1),
            // III: p = 0; REPLACE takes T1's LRU.
            (1, false, [&[], &[1, 2], &[3], &[]], 0),
            // IV(b): |T1| = 0, so T2's LRU.
            (4, false, [&[4], &[1], &[3], &[2]], 0),
            // II: |B1| = |B2|, delta 1: p = 1; T2's LRU goes.
            (3, false, [&[4], &[3], &[], &[1, 2]], 1),
            // IV(b) with |L1| + |L2| = 2c: B2's LRU is dropped first.
            (5, false, [&[5, 4], &[], &[], &[3, 1]], 1),
            (4, true, [&[5], &[4], &[], &[3, 1]], 1),
            (6, false, [&[6, 5], &[], &[], &[4, 3]], 1),
            // III: p = 0; REPLACE with x in B2 takes T1's LRU.
            (3, false, [&[6], &[3], &[5], &[4]], 0),
        ];
        for (k, (id, hit, want, p)) in trace.iter().enumerate() {
            assert_eq!(sim.access(*id), *hit, "step {k}: access {id}");
            let got = lists(&sim);
            for (g, w) in got.iter().zip(want) {
                assert_eq!(g.as_slice(), *w, "step {k}: lists {got:?}");
            }
            assert_eq!(target(&sim), *p, "step {k}: p");
        }
        assert_eq!(sim.stats().fallback_evictions, 0);
    }

    /// Case IV(a): T1 alone holds c pages, so its LRU page is deleted without a ghost and a
    /// later miss on it is an ordinary miss (it lands in T1, not T2).
    #[test]
    fn full_t1_forgets_without_ghost() {
        let mut sim = Simulator::new(Box::new(ArcPolicy::new()), 16, 2);
        for id in [1, 2, 3, 1, 4] {
            assert!(!sim.access(id));
        }
        assert_eq!(lists(&sim), [vec![4, 1], vec![], vec![], vec![]]);
        assert_eq!(target(&sim), 0);
    }
}
