//! LIRS: Jiang and Zhang, "LIRS: An Efficient Low Inter-reference Recency Set Replacement
//! Policy to Improve Buffer Cache Performance", SIGMETRICS'02 (§3: the LIRS stack S, the
//! resident-HIR queue Q, stack pruning).
//!
//! LIRS ranks a buffer by its inter-reference recency (the distinct buffers seen between its
//! last two accesses) rather than by its recency alone. Buffers with a small IRR hold the LIR
//! set, which only a buffer with an even smaller IRR can enter; the rest (HIR) share a small
//! resident queue, 1% of the capacity as the paper suggests. Suits loops larger than the
//! cache, scans and mixed-locality traces where LRU thrashes. Non-resident HIR entries
//! ("ghosts") in S are keyed by buffer index.
//!
//! Simplification: the paper lets S hold any number of non-resident HIR entries; like
//! practical implementations, this bounds them to twice the capacity, forgetting the oldest
//! ghost first (tracked in a FIFO so the bound costs O(1)).
//!
//! Concurrency: one hit can move a buffer, demote another and prune S, so the structures sit
//! behind one mutex. Pruning is amortized O(1): each entry is pushed once and popped once.

use parking_lot::{Mutex, MutexGuard};

use super::advanced::idle;
use super::config::{check_ratio, parse_value, share};
use super::{Buffers, IndexList, Layout, Policy, PolicyConfig, PolicyConfigError};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Status {
    Untracked,
    Lir,
    HirResident,
    /// A ghost: in S, not resident.
    HirGhost,
    /// A ghost that just missed; its insert makes it LIR.
    Pending,
}

struct State {
    status: Box<[Status]>,
    /// The LIRS stack; front is the top.
    s: IndexList,
    /// Resident HIR buffers; front is the end new ones join, back is the next victim.
    q: IndexList,
    /// Ghosts in the order they became ghosts, for the bound.
    ghosts: IndexList,
    lir: u64,
    lir_max: u64,
    /// `lir_max` for the whole capacity, the most it can be.
    lir_cap: u64,
    ghost_max: u64,
    /// L_hirs's share of the resident buffers.
    hir_ratio: f64,
}

impl State {
    /// Removes HIR entries from the bottom of S until an LIR buffer is there.
    fn prune(&mut self) {
        while let Some(b) = self.s.back() {
            match self.status[b as usize] {
                Status::Lir => break,
                Status::HirResident => {}
                _ => {
                    self.ghosts.remove(b);
                    self.status[b as usize] = Status::Untracked;
                }
            }
            self.s.remove(b);
        }
    }

    /// While the LIR set is over its size, its bottom buffer becomes resident HIR.
    fn demote_excess(&mut self) {
        while self.lir > self.lir_max {
            let Some(b) = self.s.back() else { break };
            debug_assert_eq!(self.status[b as usize], Status::Lir);
            self.status[b as usize] = Status::HirResident;
            self.lir -= 1;
            self.s.remove(b);
            self.q.push_front(b);
            self.prune();
        }
    }

    /// Sizes the LIR set to what this mapping holds now, which the cache asking for victims
    /// says is all it gets: other mappings share the budget, and the background evictor keeps
    /// some of it free. Sized for the whole capacity instead, the LIR set would never fill, Q
    /// would stay empty, and every victim would come from S's bottom: plain LRU.
    fn fit_to_resident(&mut self) {
        let resident = self.lir + self.q.len();
        let hir = share(resident, self.hir_ratio);
        self.lir_max = resident.saturating_sub(hir).clamp(1, self.lir_cap.max(1));
        self.demote_excess();
    }

    fn make_lir(&mut self, x: u64) {
        self.status[x as usize] = Status::Lir;
        self.lir += 1;
        self.s.move_to_front(x);
        self.demote_excess();
    }
}

/// LIRS's parameter: the share of the capacity kept for resident HIR blocks (the paper's
/// L_hirs, 1%).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LirsConfig {
    /// L_hirs as a share of the capacity, in (0, 0.5].
    pub hir_ratio: f64,
}

impl Default for LirsConfig {
    fn default() -> Self {
        LirsConfig { hir_ratio: 0.01 }
    }
}

impl PolicyConfig for LirsConfig {
    fn policy_name(&self) -> &'static str {
        "lirs"
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("hir_ratio", self.hir_ratio.to_string())]
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), PolicyConfigError> {
        match key {
            "hir_ratio" => self.hir_ratio = parse_value("lirs", "hir_ratio", value, "a number")?,
            _ => return Err(self.unknown_parameter(key)),
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), PolicyConfigError> {
        check_ratio("lirs", "hir_ratio", self.hir_ratio, true, 0.5)
    }

    fn build_unchecked(&self) -> Box<dyn Policy> {
        Box::new(Lirs::with_config(*self))
    }
}

#[derive(Default)]
pub struct Lirs {
    config: LirsConfig,
    state: Option<Mutex<State>>,
}

impl Lirs {
    pub fn new() -> Self {
        Self::default()
    }

    /// LIRS with these parameters (validate them first: see [`PolicyConfig::build`]).
    pub fn with_config(config: LirsConfig) -> Self {
        Lirs {
            config,
            state: None,
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.as_ref().expect("Lirs used before attach").lock()
    }
}

impl Policy for Lirs {
    fn name(&self) -> &str {
        "lirs"
    }

    fn attach(&mut self, layout: Layout) {
        let n = layout.buffers;
        let c = layout.capacity.min(n).max(1);
        let hir = if c < 2 {
            0
        } else {
            share(c, self.config.hir_ratio)
        };
        self.state = Some(Mutex::new(State {
            status: vec![Status::Untracked; n as usize].into_boxed_slice(),
            s: IndexList::new(n),
            q: IndexList::new(n),
            ghosts: IndexList::new(n),
            lir: 0,
            lir_max: c - hir,
            lir_cap: c - hir,
            ghost_max: 2 * c,
            hir_ratio: self.config.hir_ratio,
        }));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut st = self.st();
        st.fit_to_resident();
        let start = out.len();
        // The front of Q; only if Q runs dry (explicit evictions, pins), LIR from S's bottom.
        let mut q = st.q.back();
        while let Some(i) = q {
            if out.len() - start >= want {
                return;
            }
            if idle(buffers, i) {
                out.push(i);
            }
            q = st.q.towards_front(i);
        }
        let mut s = st.s.back();
        while let Some(i) = s {
            if out.len() - start >= want {
                return;
            }
            if st.status[i as usize] == Status::Lir && idle(buffers, i) {
                out.push(i);
            }
            s = st.s.towards_front(i);
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, x: u64) {
        let Some(mut st) = self.state.as_ref().and_then(|m| m.try_lock()) else {
            return; // contended: a lossy hit (see advanced.rs)
        };
        match st.status[x as usize] {
            Status::Lir => {
                let bottom = st.s.back() == Some(x);
                st.s.move_to_front(x);
                if bottom {
                    st.prune();
                }
            }
            Status::HirResident if st.s.contains(x) || st.lir < st.lir_max => {
                // Its IRR beat the oldest LIR buffer's recency: swap them. (Or the LIR set has
                // room, after explicit evictions: as during warm-up, it joins directly.)
                st.q.remove(x);
                st.make_lir(x);
            }
            Status::HirResident => {
                st.s.push_front(x);
                st.q.move_to_front(x);
            }
            _ => {}
        }
    }

    fn on_miss(&self, x: u64) {
        let mut st = self.st();
        if st.status[x as usize] == Status::HirGhost {
            st.ghosts.remove(x);
            st.status[x as usize] = Status::Pending;
        }
    }

    fn on_insert(&self, x: u64) {
        let mut st = self.st();
        if st.status[x as usize] == Status::HirGhost {
            // Inserted without a demand miss (a prefetch): no re-reference, so the ghost's
            // history is dropped (as 2Q and ARC do) and the buffer enters as a new one.
            st.ghosts.remove(x);
            st.s.remove(x);
            st.status[x as usize] = Status::Untracked;
        }
        // A ghost that missed while still in S has the smallest IRR of all; during warm-up
        // every new buffer is LIR until the LIR set is full.
        let ghost = st.status[x as usize] == Status::Pending && st.s.contains(x);
        if ghost || st.lir < st.lir_max {
            st.make_lir(x);
        } else {
            st.status[x as usize] = Status::HirResident;
            st.s.move_to_front(x);
            st.q.push_front(x);
        }
    }

    fn on_evict(&self, x: u64) {
        let mut st = self.st();
        match st.status[x as usize] {
            Status::HirResident => {
                st.q.remove(x);
                if st.s.contains(x) {
                    st.status[x as usize] = Status::HirGhost;
                    st.ghosts.push_front(x);
                    if st.ghosts.len() > st.ghost_max {
                        let g = st.ghosts.pop_back().unwrap();
                        st.status[g as usize] = Status::Untracked;
                        st.s.remove(g);
                        st.prune();
                    }
                } else {
                    st.status[x as usize] = Status::Untracked;
                }
            }
            Status::Lir => {
                st.status[x as usize] = Status::Untracked;
                st.lir -= 1;
                st.s.remove(x);
                st.prune();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
impl super::advanced::Audit for Lirs {
    fn tracked(&self) -> Vec<u64> {
        let st = self.st();
        let lir =
            st.s.iter_from_back()
                .filter(|&i| st.status[i as usize] == Status::Lir);
        lir.chain(st.q.iter_from_back()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Simulator;

    fn view(sim: &Simulator) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
        let p = sim.policy() as *const dyn Policy as *const Lirs;
        // SAFETY: the simulator was built from a `Lirs` in these tests.
        let st = unsafe { &*p }.st();
        let top_first = |l: &IndexList| {
            let mut v: Vec<u64> = l.iter_from_back().collect();
            v.reverse();
            v
        };
        let mut lir: Vec<u64> = (0..st.status.len() as u64)
            .filter(|&i| st.status[i as usize] == Status::Lir)
            .collect();
        lir.sort();
        (top_first(&st.s), top_first(&st.q), lir)
    }

    /// (access, hit, S, Q, LIR set).
    type Step = (u64, bool, &'static [u64], &'static [u64], &'static [u64]);

    /// c = 3: L_hirs = 1, L_lirs = 2. Worked by hand from §3.3 of the paper; S top first,
    /// Q newest first.
    #[test]
    fn textbook_sequence() {
        let mut sim = Simulator::new(Box::new(Lirs::new()), 16, 3);
        #[rustfmt::skip]
        let trace: &[Step] = &[
            (1, false, &[1], &[], &[1]),
            (2, false, &[2, 1], &[], &[1, 2]),
            (3, false, &[3, 2, 1], &[3], &[1, 2]),
            // Q's front (3) goes; it stays in S as a ghost.
            (4, false, &[4, 3, 2, 1], &[4], &[1, 2]),
            // LIR hit at the bottom: moved to the top, nothing to prune (2 is LIR).
            (1, true, &[1, 4, 3, 2], &[4], &[1, 2]),
            // Ghost 3 misses: 4 leaves; 3 becomes LIR, bottom LIR 2 is demoted to Q and the
            // prune drops ghost 4.
            (3, false, &[3, 1], &[2], &[1, 3]),
            // 2 was not in S, so it is forgotten entirely.
            (5, false, &[5, 3, 1], &[5], &[1, 3]),
            (2, false, &[2, 5, 3, 1], &[2], &[1, 3]),
            // Ghost 5 misses: 2 becomes a ghost; 5 LIR, 1 demoted.
            (5, false, &[5, 2, 3], &[1], &[3, 5]),
            // Resident HIR hit outside S: back on top of S and to Q's end.
            (1, true, &[1, 5, 2, 3], &[1], &[3, 5]),
            // LIR hit at the bottom: prune drops ghost 2.
            (3, true, &[3, 1, 5], &[1], &[3, 5]),
            // Resident HIR hit inside S: becomes LIR, bottom LIR 5 demoted.
            (1, true, &[1, 3], &[5], &[1, 3]),
            (6, false, &[6, 1, 3], &[6], &[1, 3]),
        ];
        for (k, &(id, hit, s, q, lir)) in trace.iter().enumerate() {
            assert_eq!(sim.access(id), hit, "step {k}: access {id}");
            let (gs, gq, gl) = view(&sim);
            assert_eq!(
                (gs.as_slice(), gq.as_slice(), gl.as_slice()),
                (s, q, lir),
                "step {k}"
            );
        }
        assert_eq!(sim.stats().fallback_evictions, 0);
    }

    /// A loop one larger than the cache: LRU misses every access, LIRS keeps the LIR set.
    #[test]
    fn loop_beats_lru() {
        let mut sim = Simulator::new(Box::new(Lirs::new()), 200, 100);
        for _ in 0..20 {
            for id in 0..101 {
                sim.access(id);
            }
        }
        assert!(sim.stats().miss_ratio() < 0.1, "{:?}", sim.stats());
    }
}
