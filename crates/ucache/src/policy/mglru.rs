//! A multi-generational LRU after Linux's MGLRU (Yu Zhao, mm/vmscan.c, Linux 6.1+;
//! Documentation/mm/multigen_lru.rst): buffers belong to generations numbered by a sequence,
//! eviction takes from the oldest generation, and an access moves a buffer to the youngest.
//!
//! Like Linux, an access only records the buffer's new generation (one relaxed store, no lock:
//! Linux sets the page's generation in its flags), and the eviction walk sorts lazily: a
//! buffer found in the oldest list whose recorded generation is younger is moved to that
//! generation's list instead of being evicted. When the oldest generation drains, `min_seq`
//! advances, and when fewer than [`MIN_GENS`] generations remain, aging opens a new youngest
//! one (`max_seq + 1`). New buffers join the generation below the youngest, so a buffer must
//! be used again to outrank data in active use, and a scan ages out first. Suits mixed
//! workloads of the page-cache kind: cheap hits, scan resistance, and a coarse recency order
//! that costs no list move per hit.
//!
//! Simplifications: no tiers or refault-driven PID controller, no separate anon/file types,
//! and no page-table walks (hits report themselves).
//!
//! Concurrency: hits are lock-free; inserts, evictions and the eviction walk take one mutex.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};

use super::advanced::idle;
use super::{Buffers, IndexList, Layout, Policy};

/// Lists in the ring: the most generations alive at once (Linux's MAX_NR_GENS).
const MAX_GENS: usize = 4;
/// Aging keeps at least this many generations: the oldest (evicted from), the one new
/// buffers join, and the youngest (accessed buffers).
pub const MIN_GENS: u64 = 3;

struct Gens {
    lists: [IndexList; MAX_GENS],
    min_seq: u64,
}

impl Gens {
    fn list_of(&self, x: u64) -> Option<usize> {
        (0..MAX_GENS).find(|&g| self.lists[g].contains(x))
    }
}

#[derive(Default)]
pub struct Mglru {
    gens: Option<Mutex<Gens>>,
    /// The generation each buffer belongs to; may be younger than its list (sorted lazily).
    gen: Box<[AtomicU64]>,
    max_seq: AtomicU64,
}

impl Mglru {
    pub fn new() -> Self {
        Self::default()
    }

    fn gens(&self) -> MutexGuard<'_, Gens> {
        self.gens.as_ref().expect("Mglru used before attach").lock()
    }

    /// (min_seq, max_seq): the oldest and youngest live generations.
    pub fn seqs(&self) -> (u64, u64) {
        (self.gens().min_seq, self.max_seq.load(Relaxed))
    }

    /// The generation buffer `index` belongs to (meaningful while it is resident).
    pub fn generation(&self, index: u64) -> u64 {
        self.gen[index as usize].load(Relaxed)
    }
}

impl Policy for Mglru {
    fn name(&self) -> &str {
        "mglru"
    }

    fn attach(&mut self, layout: Layout) {
        let n = layout.buffers;
        self.gens = Some(Mutex::new(Gens {
            lists: std::array::from_fn(|_| IndexList::new(n)),
            min_seq: 0,
        }));
        self.gen = (0..n).map(|_| AtomicU64::new(0)).collect();
        self.max_seq = AtomicU64::new(MIN_GENS - 1);
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut g = self.gens();
        let start = out.len();
        if g.lists.iter().all(|l| l.is_empty()) {
            return; // nothing to age towards
        }
        let mut seq = g.min_seq;
        while out.len() - start < want && seq <= self.max_seq.load(Relaxed) {
            let slot = (seq % MAX_GENS as u64) as usize;
            let mut next = g.lists[slot].back();
            while let Some(i) = next {
                if out.len() - start >= want {
                    return;
                }
                next = g.lists[slot].towards_front(i);
                let young = self.gen[i as usize].load(Relaxed);
                if young > seq {
                    // Accessed since it was listed here: sort it into its generation.
                    g.lists[slot].remove(i);
                    g.lists[(young % MAX_GENS as u64) as usize].push_front(i);
                } else if idle(buffers, i) {
                    out.push(i);
                }
            }
            if g.lists[slot].is_empty() && seq == g.min_seq && seq < self.max_seq.load(Relaxed) {
                // The oldest generation drained: retire it, and age if too few are left.
                g.min_seq += 1;
                let max = self.max_seq.load(Relaxed);
                if max + 1 - g.min_seq < MIN_GENS {
                    self.max_seq.store(max + 1, Relaxed);
                }
            }
            seq += 1;
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, x: u64) {
        self.gen[x as usize].store(self.max_seq.load(Relaxed), Relaxed);
    }

    fn on_insert(&self, x: u64) {
        let mut g = self.gens();
        let seq = (self.max_seq.load(Relaxed) - 1).max(g.min_seq);
        self.gen[x as usize].store(seq, Relaxed);
        g.lists[(seq % MAX_GENS as u64) as usize].push_front(x);
    }

    fn on_evict(&self, x: u64) {
        let mut g = self.gens();
        if let Some(l) = g.list_of(x) {
            g.lists[l].remove(x);
        }
    }
}

#[cfg(test)]
impl super::advanced::Audit for Mglru {
    fn tracked(&self) -> Vec<u64> {
        let g = self.gens();
        g.lists.iter().flat_map(|l| l.iter_from_back()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Simulator;

    fn mglru(sim: &Simulator) -> &Mglru {
        let p = sim.policy() as *const dyn Policy as *const Mglru;
        // SAFETY: the simulator was built from an `Mglru` in these tests.
        unsafe { &*p }
    }

    /// Capacity 4, worked by hand: generations age as the oldest drains, and accessed
    /// buffers are sorted into the youngest generation instead of being evicted.
    #[test]
    fn generations_age() {
        let mut sim = Simulator::new(Box::new(Mglru::new()), 16, 4);
        for id in 0..4 {
            sim.access(id);
        }
        assert_eq!(mglru(&sim).seqs(), (0, 2));
        assert!((0..4).all(|i| mglru(&sim).generation(i) == 1));
        sim.access(0);
        sim.access(2);
        assert_eq!(mglru(&sim).generation(0), 2);
        // Generation 0 is empty: retired, and aging opens generation 3. In generation 1, 0 is
        // sorted into generation 2 and 1 is evicted.
        assert!(!sim.access(4));
        assert_eq!(mglru(&sim).seqs(), (1, 3));
        assert!(!sim.is_resident(1));
        assert_eq!(mglru(&sim).generation(4), 2);
        // 2 is sorted too, 3 goes.
        assert!(!sim.access(5));
        assert!(!sim.is_resident(3));
        // 0 used again: youngest generation.
        sim.access(0);
        assert_eq!(mglru(&sim).generation(0), 3);
        // Generation 1 drained: retired, aging opens 4; in generation 2 (oldest first: 0, 4,
        // 2, 5) 0 is sorted into 3 and 4 goes.
        assert!(!sim.access(6));
        assert_eq!(mglru(&sim).seqs(), (2, 4));
        assert!(!sim.is_resident(4));
        for id in [0, 2, 5, 6] {
            assert!(sim.is_resident(id), "{id}");
        }
        assert_eq!(mglru(&sim).generation(6), 3);
        assert_eq!(sim.stats().fallback_evictions, 0);
    }

    #[test]
    fn scan_ages_out_before_used_buffers() {
        let mut sim = Simulator::new(Box::new(Mglru::new()), 10_000, 100);
        for _ in 0..3 {
            for id in 0..50 {
                sim.access(id);
            }
        }
        for id in 1000..1200 {
            sim.access(id);
            if id % 20 == 0 {
                for h in 0..50 {
                    sim.access(h);
                }
            }
        }
        assert!((0..50).all(|i| sim.is_resident(i)));
    }
}
