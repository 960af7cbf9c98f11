//! W-TinyLFU: Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission
//! Policy", ACM ToS 2017, §4 (the W-TinyLFU of Caffeine).
//!
//! New buffers enter a small LRU window (1% of the capacity). A buffer leaving the window is
//! a candidate for the main cache, a segmented LRU (20% probation, 80% protected), and is
//! admitted only if the count-min sketch says it is more frequent than the main cache's own
//! victim; otherwise the candidate itself goes. One-hit wonders therefore never displace
//! frequent buffers, while the window still catches bursts. Suits skewed (Zipf) workloads
//! with churn, the usual key-value lookup pattern; the sketch's aging keeps it adaptive.
//! Every access (hit or demand miss) is counted in the sketch.
//!
//! Simplification: no doorkeeper Bloom filter in front of the sketch (it only saves memory),
//! and a fixed 1% window rather than Caffeine's hill-climbing window size.
//!
//! Concurrency: admission moves buffers between four lists and consults the sketch, so all
//! sit behind one mutex; every hook is O(1) under it.

use parking_lot::{Mutex, MutexGuard};

use super::advanced::idle;
use super::config::{check_share, parse_value, share};
use super::count_min::CountMin;
use super::{Buffers, IndexList, Layout, Policy, PolicyConfig, PolicyConfigError};

/// W-TinyLFU's parameter: the admission window's share of the capacity (libCacheSim's name
/// and default, the paper's 1%).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WTinyLfuConfig {
    /// The window LRU's share, in (0, 1).
    pub window_size: f64,
}

impl Default for WTinyLfuConfig {
    fn default() -> Self {
        WTinyLfuConfig { window_size: 0.01 }
    }
}

impl PolicyConfig for WTinyLfuConfig {
    fn policy_name(&self) -> &'static str {
        "w-tinylfu"
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![("window_size", self.window_size.to_string())]
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), PolicyConfigError> {
        match key {
            "window_size" => {
                self.window_size = parse_value("w-tinylfu", "window_size", value, "a number")?
            }
            _ => return Err(self.unknown_parameter(key)),
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), PolicyConfigError> {
        check_share(
            "w-tinylfu",
            "window_size",
            self.window_size,
            "the main cache",
        )
    }

    fn build_unchecked(&self) -> Box<dyn Policy> {
        Box::new(WTinyLfu::with_config(*self))
    }
}

struct State {
    window: IndexList,
    /// Window overflow not yet admitted or rejected (only while the main cache is full and no
    /// eviction has run since).
    candidates: IndexList,
    probation: IndexList,
    protected: IndexList,
    sketch: CountMin,
    window_max: u64,
    main_max: u64,
    /// `main_max` for the whole capacity, the most it can be.
    main_cap: u64,
    protected_max: u64,
}

impl State {
    fn main_len(&self) -> u64 {
        self.probation.len() + self.protected.len()
    }

    /// Sizes the main cache to what this mapping holds now, which the cache asking for
    /// victims says is all it gets (other mappings share the budget, the background evictor
    /// keeps some free). Sized for the whole capacity instead, the main cache would never be
    /// full, and every candidate would be admitted without a comparison.
    fn fit_to_resident(&mut self) {
        let resident =
            self.window.len() + self.candidates.len() + self.probation.len() + self.protected.len();
        self.main_max = resident
            .saturating_sub(self.window_max)
            .clamp(1, self.main_cap.max(1));
        self.protected_max = self.main_max * 4 / 5;
    }

    fn main_victim(&self, from: Option<u64>) -> Option<u64> {
        match from {
            None => self.probation.back().or_else(|| self.protected.back()),
            Some(v) if self.probation.contains(v) => self
                .probation
                .towards_front(v)
                .or_else(|| self.protected.back()),
            Some(v) => self.protected.towards_front(v),
        }
    }
}

#[derive(Default)]
pub struct WTinyLfu {
    config: WTinyLfuConfig,
    state: Option<Mutex<State>>,
}

impl WTinyLfu {
    pub fn new() -> Self {
        Self::default()
    }

    /// W-TinyLFU with these parameters (validate them first: see [`PolicyConfig::build`]).
    pub fn with_config(config: WTinyLfuConfig) -> Self {
        WTinyLfu {
            config,
            state: None,
        }
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state
            .as_ref()
            .expect("WTinyLfu used before attach")
            .lock()
    }
}

impl Policy for WTinyLfu {
    fn name(&self) -> &str {
        "w-tinylfu"
    }

    fn attach(&mut self, layout: Layout) {
        let n = layout.buffers;
        let c = layout.capacity.min(n).max(1);
        let window_max = share(c, self.config.window_size);
        let main_max = c.saturating_sub(window_max);
        self.state = Some(Mutex::new(State {
            window: IndexList::new(n),
            candidates: IndexList::new(n),
            probation: IndexList::new(n),
            protected: IndexList::new(n),
            // The paper's W = 10 × capacity; 4 counters per cached buffer keep collisions rare.
            sketch: CountMin::new(4 * c, 10 * c),
            window_max,
            main_max,
            main_cap: main_max,
            protected_max: main_max * 4 / 5,
        }));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut st = self.st();
        let st = &mut *st;
        st.fit_to_resident();
        let start = out.len();
        let mut cand = st.candidates.back();
        // Each victim makes room for a newcomer, and each newcomer entering the window pushes
        // the window's LRU buffer out: the `want` newcomers this batch makes room for push out
        // this many, each a candidate for the main cache as the overflow above is.
        let window_len = st.window.len();
        let mut pushed_out = (window_len + want as u64)
            .saturating_sub(st.window_max)
            .min(window_len);
        let mut win = st.window.back();
        let mut victim = st.main_victim(None);
        // Every step moves one of the cursors on, so this bounds the walk by the resident
        // buffers however many of them are pinned.
        let max_steps = window_len
            + st.candidates.len()
            + st.probation.len()
            + st.protected.len()
            + want as u64;
        let mut steps = 0u64;
        while out.len() - start < want && steps <= max_steps {
            steps += 1;
            let c = match cand {
                Some(c) => {
                    cand = st.candidates.towards_front(c);
                    Some((c, true))
                }
                None if pushed_out > 0 && win.is_some() => {
                    let w = win.unwrap();
                    win = st.window.towards_front(w);
                    pushed_out -= 1;
                    Some((w, false))
                }
                None => None,
            };
            let Some((c, listed_as_candidate)) = c else {
                // No admission to decide: the main cache's LRU, or the window's if main is empty.
                let Some(v) = victim.or(win) else { break };
                if Some(v) == victim {
                    victim = st.main_victim(Some(v));
                } else {
                    win = st.window.towards_front(v);
                }
                if idle(buffers, v) {
                    out.push(v);
                }
                continue;
            };
            // Admitted into free room (no victim), admitted against a victim, or rejected.
            let admit = if st.main_len() < st.main_max {
                Some(None)
            } else {
                victim
                    .filter(|&v| st.sketch.estimate(c) > st.sketch.estimate(v))
                    .map(Some)
            };
            if let Some(evicts) = admit {
                if listed_as_candidate {
                    st.candidates.remove(c);
                } else {
                    st.window.remove(c);
                }
                st.probation.push_front(c);
                if victim.is_none() {
                    victim = st.main_victim(None);
                }
                if let Some(v) = evicts {
                    victim = st.main_victim(Some(v));
                    if idle(buffers, v) {
                        out.push(v);
                    }
                }
            } else if idle(buffers, c) {
                out.push(c);
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
        st.sketch.increment(x);
        if st.window.contains(x) {
            st.window.move_to_front(x);
        } else if st.probation.remove(x) {
            st.protected.push_front(x);
            if st.protected.len() > st.protected_max {
                let d = st.protected.pop_back().unwrap();
                st.probation.push_front(d);
            }
        } else if st.protected.contains(x) {
            st.protected.move_to_front(x);
        }
    }

    fn on_miss(&self, x: u64) {
        self.st().sketch.increment(x);
    }

    fn on_insert(&self, x: u64) {
        let mut st = self.st();
        st.window.push_front(x);
        while st.window.len() > st.window_max {
            let w = st.window.pop_back().unwrap();
            if st.main_len() < st.main_max {
                st.probation.push_front(w);
            } else {
                st.candidates.push_front(w);
            }
        }
    }

    fn on_evict(&self, x: u64) {
        let mut st = self.st();
        let _ = st.window.remove(x)
            || st.candidates.remove(x)
            || st.probation.remove(x)
            || st.protected.remove(x);
    }
}

#[cfg(test)]
impl super::advanced::Audit for WTinyLfu {
    fn tracked(&self) -> Vec<u64> {
        let st = self.st();
        let mut v: Vec<u64> = st.window.iter_from_back().collect();
        v.extend(st.candidates.iter_from_back());
        v.extend(st.probation.iter_from_back());
        v.extend(st.protected.iter_from_back());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Simulator;

    /// c = 10: window 1, main 9. A buffer seen once loses admission to the frequent main
    /// victims, where LRU would have let it in.
    #[test]
    fn admission_rejects_one_hit_wonder() {
        let mut sim = Simulator::new(Box::new(WTinyLfu::new()), 1000, 10);
        for _ in 0..4 {
            for id in 0..10 {
                sim.access(id);
            }
        }
        assert_eq!(sim.stats().misses, 10);
        // 100 enters the window; the window's 9 (4 accesses) ties the main victim (4) and a
        // tie is not enough to be admitted, so 9 itself leaves.
        assert!(!sim.access(100));
        assert!(!sim.is_resident(9));
        // 101 pushes 100 (seen once) out of the window: rejected against a 4-access victim.
        assert!(!sim.access(101));
        assert!(!sim.is_resident(100));
        for id in 0..9 {
            assert!(sim.is_resident(id), "{id} kept");
        }
        assert!(sim.is_resident(101));
    }

    /// An old hot set saturates its counters; only the sketch's aging lets a new hot set
    /// (which ties at best without it) displace it.
    #[test]
    fn aging_lets_a_new_hot_set_in() {
        let mut sim = Simulator::new(Box::new(WTinyLfu::new()), 1000, 10);
        for _ in 0..20 {
            for id in 0..10 {
                sim.access(id);
            }
        }
        for _ in 0..40 {
            for id in 500..509 {
                sim.access(id);
            }
        }
        let new = (500..509).filter(|&i| sim.is_resident(i)).count();
        assert_eq!(new, 9, "the new hot set took over");
    }
}
