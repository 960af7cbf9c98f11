//! LHD, Least Hit Density: Beckmann, Chen and Cidon, "LHD: Improving Cache Hit Rate by
//! Maximizing Hit Density", NSDI'18.
//!
//! Each buffer is ranked by its expected hit density: the probability that it is hit again
//! divided by the cache space-time it will occupy until then, estimated from what happened to
//! buffers of the same class at the same age. Eviction samples a few resident buffers and
//! evicts the one with the least hit density. Unlike LRU or LFU it needs no assumption about
//! the access pattern; it learns, for example, that buffers surviving past the loop length
//! are worth nothing, or that buffers hit twice are worth keeping. Suits workloads whose
//! pattern is unknown or changes (caches shared by many tenants, traces with loops and scans).
//!
//! How it follows the paper: per class, histograms of hit and eviction events by age; a
//! periodic reconfiguration (§4.2) turns them into hit density by age with one backward pass,
//! density(a) = Σ_{x≥a} hits(x) / Σ_{x≥a} (x − a + 1)·events(x), and decays the histograms
//! (EWMA) so the model tracks the workload; eviction samples 32 candidates (§5).
//!
//! Like the paper, a few explorers (at most 1% of the capacity) are exempt from eviction until
//! they reach the oldest age, so classes are observed at every age.
//!
//! Simplifications: all buffers have one size, so the size term drops out; the classes are
//! only the number of hits so far (0, 1, 2, 3+: the paper's "reused" classes, without
//! application ids); age is coarsened by a fixed factor derived from the capacity instead of
//! being adapted.
//!
//! Concurrency: the histograms, the per-buffer metadata and the sample set sit behind one
//! mutex. Hits and misses are O(1); reconfiguration is O(classes × ages) every few thousand
//! accesses; choosing a victim costs one sample of 32.

use parking_lot::{Mutex, MutexGuard};

use super::advanced::idle;
use super::{Buffers, Layout, Policy};

/// Coarsened ages tracked; older buffers share the last bucket.
const AGES: usize = 128;
/// Classes by hits so far.
const CLASSES: usize = 4;
/// Candidates sampled per victim (the paper's associativity).
const SAMPLE: usize = 32;
/// One in this many inserts and class changes becomes an explorer (while the budget lasts).
const EXPLORE_ODDS: u64 = 64;
/// Histogram decay per reconfiguration.
const DECAY: f64 = 0.9;
const NOT_RESIDENT: u32 = u32::MAX;

struct State {
    /// When each buffer was last accessed, in accesses.
    last: Box<[u64]>,
    /// Each buffer's class: hits since it was loaded, capped.
    class: Box<[u8]>,
    /// Explorers are never chosen before they reach the last age bucket, so that every class
    /// is observed at every age (the paper's explorers): a class whose members were all evicted young would
    /// otherwise never record a hit and stay at density 0 forever.
    explorer: Box<[bool]>,
    explorers: u64,
    explorers_max: u64,
    /// Resident buffers, densely, for uniform sampling; `pos` is each one's slot.
    resident: Vec<u64>,
    pos: Box<[u32]>,
    hits: [[f64; AGES]; CLASSES],
    evictions: [[f64; AGES]; CLASSES],
    density: [[f64; AGES]; CLASSES],
    now: u64,
    coarsen: u64,
    reconfigure_at: u64,
    reconfigure_every: u64,
    rng: u64,
}

impl State {
    #[inline]
    fn age(&self, i: u64) -> usize {
        (((self.now - self.last[i as usize]) / self.coarsen) as usize).min(AGES - 1)
    }

    fn tick(&mut self) {
        self.now += 1;
        if self.now >= self.reconfigure_at {
            self.reconfigure();
            self.reconfigure_at = self.now + self.reconfigure_every;
        }
    }

    fn reconfigure(&mut self) {
        for c in 0..CLASSES {
            let (mut hits, mut events, mut lifetime) = (0.0, 0.0, 0.0);
            for a in (0..AGES).rev() {
                hits += self.hits[c][a];
                events += self.hits[c][a] + self.evictions[c][a];
                lifetime += events;
                self.density[c][a] = if lifetime > 0.0 { hits / lifetime } else { 0.0 };
                self.hits[c][a] *= DECAY;
                self.evictions[c][a] *= DECAY;
            }
        }
    }

    #[inline]
    fn rand(&mut self) -> u64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    #[inline]
    fn density_of(&self, i: u64) -> f64 {
        let a = self.age(i);
        if self.explorer[i as usize] && a < AGES - 1 {
            return f64::INFINITY;
        }
        self.density[self.class[i as usize] as usize][a]
    }

    /// Maybe makes `i` an explorer of its (new) class.
    fn explore(&mut self, i: u64) {
        if !self.explorer[i as usize]
            && self.explorers < self.explorers_max
            && self.rand().is_multiple_of(EXPLORE_ODDS)
        {
            self.explorer[i as usize] = true;
            self.explorers += 1;
        }
    }
}

#[derive(Default)]
pub struct Lhd {
    state: Option<Mutex<State>>,
}

impl Lhd {
    pub fn new() -> Self {
        Self::default()
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.as_ref().expect("Lhd used before attach").lock()
    }
}

impl Policy for Lhd {
    fn name(&self) -> &str {
        "lhd"
    }

    fn attach(&mut self, layout: Layout) {
        let n = layout.buffers;
        let c = layout.capacity.min(n).max(1);
        assert!(
            n < NOT_RESIDENT as u64,
            "Lhd supports up to 2^32 - 1 buffers"
        );
        // Until the first reconfiguration, rank by age alone (LRU-like), more hits first.
        let mut density = [[0.0; AGES]; CLASSES];
        for (k, row) in density.iter_mut().enumerate() {
            for (a, d) in row.iter_mut().enumerate() {
                *d = (k + 1) as f64 / (a + 1) as f64;
            }
        }
        let every = (4 * c).max(1024);
        self.state = Some(Mutex::new(State {
            last: vec![0; n as usize].into_boxed_slice(),
            class: vec![0; n as usize].into_boxed_slice(),
            explorer: vec![false; n as usize].into_boxed_slice(),
            explorers: 0,
            explorers_max: (c / 100).max(1),
            resident: Vec::with_capacity(c as usize),
            pos: vec![NOT_RESIDENT; n as usize].into_boxed_slice(),
            hits: [[0.0; AGES]; CLASSES],
            evictions: [[0.0; AGES]; CLASSES],
            density,
            now: 0,
            // Ages span 16 × the capacity in accesses: long enough to see a loop over the
            // whole cache come around several times.
            coarsen: (16 * c).div_ceil(AGES as u64).max(1),
            reconfigure_at: every,
            reconfigure_every: every,
            rng: 0x9e37_79b9_7f4a_7c15,
        }));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut st = self.st();
        let start = out.len();
        let n = st.resident.len();
        if n == 0 {
            return;
        }
        // Each victim from its own sample; a bounded number of tries skips pinned buffers.
        let mut tries = 4 * want + 4;
        while out.len() - start < want && tries > 0 {
            tries -= 1;
            let mut best: Option<(f64, u64)> = None;
            for _ in 0..SAMPLE.min(n) {
                let r = (st.rand() % n as u64) as usize;
                let i = st.resident[r];
                if !idle(buffers, i) || out[start..].contains(&i) {
                    continue;
                }
                let d = st.density_of(i);
                if best.is_none_or(|(bd, _)| d < bd) {
                    best = Some((d, i));
                }
            }
            if let Some((_, i)) = best {
                out.push(i);
            }
        }
        // Samples can miss the few idle buffers among many pinned ones: then look at them all
        // (rare, and O(resident) only then), so a policy never proposes nothing while
        // something could go.
        if out.len() == start {
            let best = st
                .resident
                .iter()
                .copied()
                .filter(|&i| idle(buffers, i))
                .map(|i| (st.density_of(i), i))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            if let Some((_, i)) = best {
                out.push(i);
            }
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, x: u64) {
        let Some(mut st) = self.state.as_ref().and_then(|m| m.try_lock()) else {
            return; // contended: a lossy hit (see advanced.rs)
        };
        if st.pos[x as usize] != NOT_RESIDENT {
            let (c, a) = (st.class[x as usize] as usize, st.age(x));
            st.hits[c][a] += 1.0;
            st.class[x as usize] = (c as u8 + 1).min(CLASSES as u8 - 1);
            st.last[x as usize] = st.now;
            if c + 1 < CLASSES {
                st.explore(x);
            }
        }
        st.tick();
    }

    fn on_miss(&self, _: u64) {
        self.st().tick();
    }

    fn on_insert(&self, x: u64) {
        let mut st = self.st();
        if st.pos[x as usize] != NOT_RESIDENT {
            return;
        }
        st.last[x as usize] = st.now;
        st.class[x as usize] = 0;
        st.pos[x as usize] = st.resident.len() as u32;
        st.resident.push(x);
        st.explore(x);
    }

    fn on_evict(&self, x: u64) {
        let mut st = self.st();
        let p = st.pos[x as usize];
        if p == NOT_RESIDENT {
            return;
        }
        let (c, a) = (st.class[x as usize] as usize, st.age(x));
        st.evictions[c][a] += 1.0;
        if std::mem::take(&mut st.explorer[x as usize]) {
            st.explorers -= 1;
        }
        st.resident.swap_remove(p as usize);
        if let Some(&moved) = st.resident.get(p as usize) {
            st.pos[moved as usize] = p;
        }
        st.pos[x as usize] = NOT_RESIDENT;
    }
}

#[cfg(test)]
impl super::advanced::Audit for Lhd {
    fn tracked(&self) -> Vec<u64> {
        self.st().resident.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Clock, Simulator};

    /// A hot set hit over and over beside a stream of one-off buffers: LHD learns that
    /// buffers with hits have high density and that unhit ones past a short age have none.
    #[test]
    fn learns_to_keep_reused_buffers() {
        let run = |p: Box<dyn Policy>| {
            let mut sim = Simulator::new(p, 100_000, 200);
            let mut fresh = 1000;
            for r in 0..40_000u64 {
                if r % 2 == 0 {
                    sim.access((r / 2) % 150);
                } else {
                    sim.access(fresh);
                    fresh += 1;
                }
            }
            sim.stats().miss_ratio()
        };
        let lhd = run(Box::new(Lhd::new()));
        let clock = run(Box::new(Clock::new()));
        // Half the accesses are one-off misses whatever the policy; LHD serves the hot half.
        assert!(lhd < 0.55, "lhd {lhd}");
        assert!(lhd < clock, "lhd {lhd} clock {clock}");
    }

    #[test]
    fn density_is_computed_from_the_histograms() {
        let mut sim = Simulator::new(Box::new(Lhd::new()), 16, 4);
        sim.access(0);
        let p = sim.policy() as *const dyn Policy as *const Lhd;
        // SAFETY: built from an `Lhd` above.
        let mut st = unsafe { &*p }.st();
        st.hits = [[0.0; AGES]; CLASSES];
        st.evictions = [[0.0; AGES]; CLASSES];
        // Class 0: one hit at age 2, one eviction at age 4.
        st.hits[0][2] = 1.0;
        st.evictions[0][4] = 1.0;
        st.reconfigure();
        // At age 0: hits above = 1; lifetime = (2-0+1)·1 + (4-0+1)·1 = 8.
        assert!((st.density[0][0] - 1.0 / 8.0).abs() < 1e-12);
        // At age 3: only the eviction is ahead: density 0.
        assert_eq!(st.density[0][3], 0.0);
        // At age 2: 1 / ((1)·1 + (3)·1) = 1/4.
        assert!((st.density[0][2] - 0.25).abs() < 1e-12);
    }
}
