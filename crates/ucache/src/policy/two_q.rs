//! 2Q: Johnson and Shasha, "2Q: A Low Overhead High Performance Buffer Management Replacement
//! Algorithm", VLDB'94 (the "full version" of §2.2, with A1in, A1out and Am).
//!
//! A buffer seen once lives in the FIFO A1in; only a buffer re-referenced after it left A1in
//! (its index still remembered in the ghost FIFO A1out) earns a place in the LRU Am. A scan
//! therefore flows through A1in and never displaces Am. Suits workloads with a hot set plus
//! sequential scans or one-off reads, where plain LRU is flushed by every scan. Parameters are
//! the paper's recommendation: Kin = 25% and Kout = 50% of the capacity ([`TwoQConfig`]:
//! `a_in_size_ratio` and `a_out_size_ratio`, libCacheSim's names and defaults).
//!
//! Concurrency: the three queues must change together (a buffer moves between them), so they
//! sit behind one mutex; every hook does O(1) list work under it.

use parking_lot::Mutex;

use super::advanced::idle;
use super::config::{check_ratio, check_share, parse_value, share, unknown_preset};
use super::{Buffers, IndexList, Layout, Policy, PolicyConfig, PolicyConfigError};

/// 2Q's parameters: A1in's and A1out's shares of the capacity. The defaults are the paper's
/// and libCacheSim's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TwoQConfig {
    /// Kin: the FIFO A1in's share, in (0, 1).
    pub a_in_size_ratio: f64,
    /// Kout: ghosts remembered in A1out, as a share of the capacity (0, 10].
    pub a_out_size_ratio: f64,
}

impl Default for TwoQConfig {
    fn default() -> Self {
        TwoQConfig {
            a_in_size_ratio: 0.25,
            a_out_size_ratio: 0.5,
        }
    }
}

impl PolicyConfig for TwoQConfig {
    fn policy_name(&self) -> &'static str {
        "2q"
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("a_in_size_ratio", self.a_in_size_ratio.to_string()),
            ("a_out_size_ratio", self.a_out_size_ratio.to_string()),
        ]
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), PolicyConfigError> {
        match key {
            "a_in_size_ratio" => {
                self.a_in_size_ratio = parse_value("2q", "a_in_size_ratio", value, "a number")?
            }
            "a_out_size_ratio" => {
                self.a_out_size_ratio = parse_value("2q", "a_out_size_ratio", value, "a number")?
            }
            _ => return Err(self.unknown_parameter(key)),
        }
        Ok(())
    }

    fn presets(&self) -> &'static [&'static str] {
        &["libcachesim"]
    }

    fn preset(&mut self, name: &str) -> Result<(), PolicyConfigError> {
        match name {
            "default" | "libcachesim" => *self = Self::default(),
            _ => return Err(unknown_preset(self, name)),
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), PolicyConfigError> {
        check_share("2q", "a_in_size_ratio", self.a_in_size_ratio, "Am")?;
        check_ratio("2q", "a_out_size_ratio", self.a_out_size_ratio, true, 10.0)
    }

    fn build_unchecked(&self) -> Box<dyn Policy> {
        Box::new(TwoQ::with_config(*self))
    }
}

struct Queues {
    a1in: IndexList,
    a1out: IndexList,
    am: IndexList,
    /// Misses whose index was found in A1out: their insert goes to Am. Decided at the miss, as
    /// the paper does, before the reclaim for that miss can push the ghost out of A1out.
    to_am: IndexList,
    kin: u64,
    kout: u64,
}

#[derive(Default)]
pub struct TwoQ {
    config: TwoQConfig,
    q: Option<Mutex<Queues>>,
}

impl TwoQ {
    pub fn new() -> Self {
        Self::default()
    }

    /// 2Q with these parameters (validate them first: see [`PolicyConfig::build`]).
    pub fn with_config(config: TwoQConfig) -> Self {
        TwoQ { config, q: None }
    }

    fn q(&self) -> parking_lot::MutexGuard<'_, Queues> {
        self.q.as_ref().expect("TwoQ used before attach").lock()
    }
}

impl Policy for TwoQ {
    fn name(&self) -> &str {
        "2q"
    }

    fn attach(&mut self, layout: Layout) {
        let n = layout.buffers;
        let c = layout.capacity.min(n).max(1);
        self.q = Some(Mutex::new(Queues {
            a1in: IndexList::new(n),
            a1out: IndexList::new(n),
            am: IndexList::new(n),
            to_am: IndexList::new(n),
            kin: share(c, self.config.a_in_size_ratio),
            kout: share(c, self.config.a_out_size_ratio),
        }));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let q = self.q();
        let start = out.len();
        // reclaimfor: A1in's tail while A1in is over Kin, else Am's tail.
        let mut in_len = q.a1in.len();
        let mut a = q.a1in.back();
        let mut m = q.am.back();
        while out.len() - start < want {
            let from_in = (in_len > q.kin || m.is_none()) && a.is_some();
            let pick = if from_in {
                let i = a.unwrap();
                a = q.a1in.towards_front(i);
                in_len -= 1;
                i
            } else if let Some(i) = m {
                m = q.am.towards_front(i);
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

    fn on_hit(&self, index: u64) {
        let Some(mut q) = self.q.as_ref().and_then(|m| m.try_lock()) else {
            return; // contended: a lossy hit (see advanced.rs)
        };
        // A hit in A1in does nothing: correlated references do not prove a buffer hot.
        if q.am.contains(index) {
            q.am.move_to_front(index);
        }
    }

    fn on_miss(&self, index: u64) {
        let mut q = self.q();
        if q.a1out.remove(index) && !q.to_am.contains(index) {
            q.to_am.push_front(index);
        }
    }

    fn on_insert(&self, index: u64) {
        let mut q = self.q();
        if q.to_am.remove(index) {
            q.am.push_front(index);
        } else {
            // An insert without a demand miss (a prefetch) is no re-reference: the ghost, if
            // any, is simply forgotten.
            q.a1out.remove(index);
            q.a1in.push_front(index);
        }
    }

    fn on_evict(&self, index: u64) {
        let mut q = self.q();
        if q.a1in.remove(index) {
            q.a1out.push_front(index);
            if q.a1out.len() > q.kout {
                q.a1out.pop_back();
            }
        } else {
            q.am.remove(index);
        }
    }
}

#[cfg(test)]
impl super::advanced::Audit for TwoQ {
    fn tracked(&self) -> Vec<u64> {
        let q = self.q();
        q.a1in
            .iter_from_back()
            .chain(q.am.iter_from_back())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Simulator;

    /// Capacity 4: Kin = 1, Kout = 2. Worked by hand from the paper's pseudo-code.
    #[test]
    fn textbook_sequence() {
        let mut sim = Simulator::new(Box::new(TwoQ::new()), 16, 4);
        // step: (access, hit?) with the queues after it (A1in front..back | A1out | Am).
        let trace: &[(u64, bool)] = &[
            (1, false), // A1in 1
            (2, false), // A1in 2 1
            (3, false), // A1in 3 2 1
            (4, false), // A1in 4 3 2 1 (free slots until full)
            (1, true),  // hit in A1in: no change
            (5, false), // full, |A1in|=4>Kin: out 1 -> A1out [1]; A1in 5 4 3 2
            (1, false), // in A1out: reclaim: out 2 -> A1out [2]; Am [1]; A1in 5 4 3
            (6, false), // |A1in|=3>1: out 3 -> A1out [3 2]; A1in 6 5 4
            (2, false), // A1out: out 4 -> A1out [4 3] (2 was taken at the miss); Am [2 1]
            (1, true),  // Am hit: Am [1 2]
            (7, false), // |A1in|=2>1: out 5 -> A1out [5 4] (3 dropped); A1in 7 6
            (3, false), // not in A1out any more: |A1in|=2>1: out 6 -> A1out [6 5]; A1in 3 7
            (2, true),  // Am hit: Am [2 1]
            (8, false), // out 7 -> A1out [7 6]; A1in 8 3
            (9, false), // out 3 -> A1out [3 7]; A1in 9 8
        ];
        for (k, &(id, hit)) in trace.iter().enumerate() {
            assert_eq!(sim.access(id), hit, "step {k}: access {id}");
        }
        for id in [1, 2, 8, 9] {
            assert!(sim.is_resident(id), "{id}");
        }
        assert_eq!(sim.resident(), 4);
        assert_eq!(sim.stats().fallback_evictions, 0);
        assert_eq!(sim.stats().rejected, 0);
    }

    /// A long scan leaves the Am set untouched.
    #[test]
    fn scan_does_not_flush_am() {
        let mut sim = Simulator::new(Box::new(TwoQ::new()), 1000, 8);
        // Make 0..4 hot: seen, pushed to A1out by others, seen again.
        for id in 0..4 {
            sim.access(id);
        }
        for id in 100..108 {
            sim.access(id);
        }
        for id in 0..4 {
            assert!(!sim.access(id));
        }
        for id in 200..900 {
            sim.access(id);
        }
        for id in 0..4 {
            assert!(sim.access(id), "{id} survived the scan");
        }
    }
}
