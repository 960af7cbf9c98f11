//! S3-FIFO: a small probationary FIFO, a main FIFO and a ghost FIFO.
//!
//! Yang et al., "FIFO queues are all you need for cache eviction", SOSP'23; cache_ext ports it
//! to the page cache (SOSP'25 §5.1). Most objects in key-value and block traces are one-hit
//! wonders; the small queue (10% of the capacity) lets them leave after one short stay, and only
//! buffers hit while in it move to the main queue (90%), where a 2-bit counter gives a few more
//! laps (lazy promotion, quick demotion). Buffers evicted from the small queue leave a ghost
//! (their index; nothing else): a miss on a ghost goes straight to the main queue. Use it for
//! skewed traces with scans and churn, where it matches or beats LRU with FIFO-cheap hits.
//!
//! Rules, as in the paper's algorithm: a miss inserts at the head of the small queue, or of the
//! main queue if the buffer is a ghost; a hit raises the counter (max 3). A victim comes from the
//! small queue while it holds at least its 10%, else from the main queue. At the small queue's
//! tail a buffer hit at least once since insertion moves to the main queue with its counter
//! reset, otherwise it is the victim (and becomes a ghost when it leaves). At the main queue's
//! tail a buffer with a nonzero counter is reinserted at the head with the counter decremented,
//! otherwise it is the victim. The ghost queue remembers as many buffers as the main queue holds.
//!
//! Parameters ([`S3FifoConfig`], libCacheSim's names): `small_size_ratio` (0.1),
//! `ghost_size_ratio` (unset: as many as the main queue holds), `move_to_main_threshold` (1:
//! one hit in the small queue promotes; libCacheSim uses 2) and `rules`. `rules=libcachesim`
//! follows libCacheSim 0.3.5's `S3FIFO.c` where it departs from the paper's pseudo-code: a
//! miss on a ghost is decided at the miss (before the eviction it causes can push the ghost
//! out), a miss that finds the small queue full before the first eviction goes to the main
//! queue, and an eviction from the small queue keeps promoting until one buffer leaves. The
//! preset `libcachesim` sets all four to libCacheSim's defaults; the conformance test
//! (crates/ucache-py/tests/test_libcachesim.py) requires identical miss ratios with it.
//!
//! Synchronization: hits store the buffer's relaxed `AtomicU8` counter, no lock; the three
//! queues share one [`IndexQueues`] (a buffer is in at most one, and moving between them then
//! touches one cache line) behind one `parking_lot` mutex taken on the miss path.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use parking_lot::Mutex;

use super::config::{
    check_range, check_ratio, check_share, default_or_libcachesim, parse_value, share,
};
use super::{Buffers, IndexQueues, Layout, Policy, PolicyConfig, PolicyConfigError};

const MAX_FREQ: u8 = 3;
const SMALL: usize = 0;
const MAIN: usize = 1;
const GHOST: usize = 2;
/// Misses on a ghost whose insert goes to the main queue (`rules=libcachesim`: decided at the
/// miss). A queue of its own so that a buffer is still in exactly one place.
const TO_MAIN: usize = 3;

/// Which reading of S3-FIFO to follow where the paper and libCacheSim's code differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum S3FifoRules {
    /// The paper's pseudo-code, as ucache ran it before it had parameters.
    #[default]
    Ucache,
    /// libCacheSim 0.3.5's `S3FIFO.c` (see the module docs for the three differences).
    LibCacheSim,
}

/// S3-FIFO's parameters. The default is the policy as it always ran.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct S3FifoConfig {
    /// The small queue's share of the capacity, in (0, 1).
    pub small_size_ratio: f64,
    /// Ghosts remembered, as a share of the capacity (0 to 10); `None`: as many as the main
    /// queue holds.
    pub ghost_size_ratio: Option<f64>,
    /// Hits in the small queue that promote a buffer to the main queue (1 to 3).
    pub move_to_main_threshold: u8,
    pub rules: S3FifoRules,
}

impl Default for S3FifoConfig {
    fn default() -> Self {
        S3FifoConfig {
            small_size_ratio: 0.1,
            ghost_size_ratio: None,
            move_to_main_threshold: 1,
            rules: S3FifoRules::Ucache,
        }
    }
}

impl S3FifoConfig {
    /// libCacheSim 0.3.5's defaults for its S3FIFO.
    pub fn libcachesim() -> Self {
        S3FifoConfig {
            small_size_ratio: 0.1,
            ghost_size_ratio: Some(0.9),
            move_to_main_threshold: 2,
            rules: S3FifoRules::LibCacheSim,
        }
    }
}

impl PolicyConfig for S3FifoConfig {
    fn policy_name(&self) -> &'static str {
        "s3fifo"
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("small_size_ratio", self.small_size_ratio.to_string()),
            (
                "ghost_size_ratio",
                self.ghost_size_ratio
                    .map_or("main".to_string(), |r| r.to_string()),
            ),
            (
                "move_to_main_threshold",
                self.move_to_main_threshold.to_string(),
            ),
            (
                "rules",
                match self.rules {
                    S3FifoRules::Ucache => "ucache",
                    S3FifoRules::LibCacheSim => "libcachesim",
                }
                .to_string(),
            ),
        ]
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), PolicyConfigError> {
        const N: &str = "s3fifo";
        match key {
            "small_size_ratio" => {
                self.small_size_ratio = parse_value(N, "small_size_ratio", value, "a number")?
            }
            "ghost_size_ratio" => {
                self.ghost_size_ratio = if value == "main" {
                    None
                } else {
                    Some(parse_value(
                        N,
                        "ghost_size_ratio",
                        value,
                        "a number, or 'main'",
                    )?)
                }
            }
            "move_to_main_threshold" => {
                self.move_to_main_threshold =
                    parse_value(N, "move_to_main_threshold", value, "an integer from 1 to 3")?
            }
            "rules" => {
                self.rules = match value {
                    "ucache" => S3FifoRules::Ucache,
                    "libcachesim" => S3FifoRules::LibCacheSim,
                    _ => {
                        return Err(PolicyConfigError::InvalidValue {
                            policy: N,
                            key: "rules",
                            value: value.to_string(),
                            expected: "ucache or libcachesim".to_string(),
                        })
                    }
                }
            }
            _ => return Err(self.unknown_parameter(key)),
        }
        Ok(())
    }

    fn presets(&self) -> &'static [&'static str] {
        &["libcachesim"]
    }

    fn preset(&mut self, name: &str) -> Result<(), PolicyConfigError> {
        default_or_libcachesim(self, name, Self::libcachesim)
    }

    fn validate(&self) -> Result<(), PolicyConfigError> {
        let n = "s3fifo";
        check_share(
            n,
            "small_size_ratio",
            self.small_size_ratio,
            "the main queue",
        )?;
        if let Some(g) = self.ghost_size_ratio {
            check_ratio(n, "ghost_size_ratio", g, false, 10.0)?;
        }
        check_range(
            n,
            "move_to_main_threshold",
            self.move_to_main_threshold as u64,
            1,
            MAX_FREQ as u64,
        )
    }

    fn build_unchecked(&self) -> Box<dyn Policy> {
        Box::new(S3Fifo::with_config(*self))
    }
}

struct Queues {
    q: IndexQueues,
    small_target: u64,
    ghost_capacity: u64,
    /// Whether anything was evicted yet (`rules=libcachesim` fills the main queue before).
    evicted: bool,
}

pub struct S3Fifo {
    config: S3FifoConfig,
    freq: Box<[AtomicU8]>,
    queues: Mutex<Queues>,
}

impl Default for S3Fifo {
    fn default() -> Self {
        Self::with_config(S3FifoConfig::default())
    }
}

/// Where a buffer is, for tests and diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum S3Queue {
    Small,
    Main,
    Ghost,
    None,
}

impl S3Fifo {
    pub fn new() -> Self {
        Self::default()
    }

    /// S3-FIFO with these parameters (validate them first: see [`PolicyConfig::build`]).
    pub fn with_config(config: S3FifoConfig) -> Self {
        S3Fifo {
            config,
            freq: Box::new([]),
            queues: Mutex::new(Queues {
                q: IndexQueues::new(0, 4),
                small_target: 1,
                ghost_capacity: 1,
                evicted: false,
            }),
        }
    }

    fn libcachesim_rules(&self) -> bool {
        self.config.rules == S3FifoRules::LibCacheSim
    }

    /// Which queue buffer `index` is in.
    pub fn queue_of(&self, index: u64) -> S3Queue {
        match self.queues.lock().q.queue_of(index) {
            Some(SMALL) => S3Queue::Small,
            Some(MAIN) => S3Queue::Main,
            Some(_) => S3Queue::Ghost,
            None => S3Queue::None,
        }
    }

    /// Finds one victim, promoting and reinserting on the way. `proposed` are this call's
    /// earlier victims, which sit at the heads of their queues until they are evicted: meeting
    /// one again means that queue has gone all the way round. `steps` bounds the work.
    fn one_victim(
        &self,
        q: &mut Queues,
        buffers: &Buffers<'_>,
        proposed: &[u64],
        from_small: &mut u64,
        steps: &mut u64,
    ) -> Option<u64> {
        let mut small_done = false;
        let mut main_done = false;
        // Buffers passed over in a row because they are pinned: a full lap of them means that
        // queue has nothing to give now.
        let (mut skipped_small, mut skipped_main) = (0, 0);
        // `rules=libcachesim`: once an eviction starts on the small queue it stays there.
        let mut stay_small = false;
        while *steps > 0 && !(small_done && main_done) {
            *steps -= 1;
            let small_left = q.q.len(SMALL) - *from_small;
            let use_small = !small_done
                && (stay_small || small_left >= q.small_target || main_done || q.q.is_empty(MAIN));
            if use_small {
                let Some(t) = q.q.back(SMALL) else {
                    small_done = true;
                    continue;
                };
                if proposed.contains(&t) {
                    small_done = true;
                    continue;
                }
                if !buffers.is_candidate(t) {
                    q.q.move_to_front(SMALL, t);
                    skipped_small += 1;
                    small_done = skipped_small >= q.q.len(SMALL);
                    continue;
                }
                skipped_small = 0;
                if self.freq[t as usize].load(Relaxed) >= self.config.move_to_main_threshold {
                    q.q.move_to_front(MAIN, t);
                    self.freq[t as usize].store(0, Relaxed);
                    stay_small = self.libcachesim_rules();
                } else {
                    q.q.move_to_front(SMALL, t);
                    *from_small += 1;
                    return Some(t);
                }
            } else {
                let Some(t) = q.q.back(MAIN) else {
                    main_done = true;
                    continue;
                };
                if proposed.contains(&t) {
                    main_done = true;
                    continue;
                }
                let f = self.freq[t as usize].load(Relaxed);
                q.q.move_to_front(MAIN, t);
                if !buffers.is_candidate(t) {
                    skipped_main += 1;
                    main_done = skipped_main >= q.q.len(MAIN);
                    continue;
                }
                skipped_main = 0;
                if f > 0 {
                    self.freq[t as usize].store(f - 1, Relaxed);
                } else {
                    return Some(t);
                }
            }
        }
        None
    }
}

impl Policy for S3Fifo {
    fn name(&self) -> &str {
        "s3fifo"
    }

    fn attach(&mut self, layout: Layout) {
        let n = layout.buffers;
        let cap = layout.capacity.min(n).max(1);
        self.freq = (0..n).map(|_| AtomicU8::new(0)).collect();
        let small_target = share(cap, self.config.small_size_ratio);
        *self.queues.get_mut() = Queues {
            q: IndexQueues::new(n, 4),
            small_target,
            ghost_capacity: match self.config.ghost_size_ratio {
                None => (cap - small_target.min(cap)).max(1),
                Some(r) => (cap as f64 * r) as u64,
            },
            evicted: false,
        };
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut q = self.queues.lock();
        let start = out.len();
        let mut from_small = 0;
        // Each main-queue buffer can be reinserted at most MAX_FREQ times before it is a
        // victim, each small-queue buffer moves at most once: this bounds a call's work.
        let mut steps = 2 * (MAX_FREQ as u64 + 2) * (q.q.len(SMALL) + q.q.len(MAIN)) + 2;
        while out.len() - start < want {
            let Some(v) =
                self.one_victim(&mut q, buffers, &out[start..], &mut from_small, &mut steps)
            else {
                break;
            };
            out.push(v);
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, index: u64) {
        let f = &self.freq[index as usize];
        let v = f.load(Relaxed);
        if v < MAX_FREQ {
            f.store(v + 1, Relaxed);
        }
    }

    fn on_miss(&self, index: u64) {
        if !self.libcachesim_rules() {
            return;
        }
        let mut q = self.queues.lock();
        if q.q.queue_of(index) == Some(GHOST) {
            q.q.remove(index);
            q.q.push_front(TO_MAIN, index);
        }
    }

    fn on_insert(&self, index: u64) {
        self.freq[index as usize].store(0, Relaxed);
        let mut q = self.queues.lock();
        let to = match q.q.remove(index) {
            Some(GHOST) if !self.libcachesim_rules() => MAIN,
            Some(TO_MAIN) => MAIN,
            _ if self.libcachesim_rules() && !q.evicted && q.q.len(SMALL) >= q.small_target => MAIN,
            _ => SMALL,
        };
        q.q.push_front(to, index);
    }

    fn on_evict(&self, index: u64) {
        let mut q = self.queues.lock();
        q.evicted = true;
        if q.q.remove(index) == Some(SMALL) {
            q.q.push_front(GHOST, index);
            while q.q.len(GHOST) > q.ghost_capacity {
                q.q.pop_back(GHOST);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::{hit_pattern, Probe};
    use crate::policy::Simulator;

    /// Capacity 10: the small queue's share is 1 buffer, the ghost remembers 9.
    #[test]
    fn s3fifo_promotes_ghosts_and_filters_one_hit_wonders() {
        let (p, s3) = Probe::wrap(S3Fifo::new());
        let mut sim = Simulator::new(p, 64, 10);
        let q = |i| s3.read().queue_of(i);
        for id in 0..10 {
            assert!(!sim.access(id));
        }
        assert!((0..10).all(|i| q(i) == S3Queue::Small));
        // 0 and 1 are hit while in the small queue.
        assert!(sim.access(0) && sim.access(1));
        // Full: the small queue's tail 0 and then 1 were hit, so they move to main; 2 was not
        // and is the victim, leaving a ghost.
        assert!(!sim.access(10));
        assert_eq!(
            (q(0), q(1), q(2), q(10)),
            (S3Queue::Main, S3Queue::Main, S3Queue::Ghost, S3Queue::Small)
        );
        // A miss on a ghost goes straight to main; 3 leaves the small queue to make room.
        assert!(!sim.access(2));
        assert_eq!((q(2), q(3)), (S3Queue::Main, S3Queue::Ghost));
        // Twenty one-hit wonders pass through the small queue without touching main.
        for id in 20..40 {
            assert!(!sim.access(id));
        }
        assert!(sim.access(0) && sim.access(1) && sim.access(2));
        assert_eq!(sim.stats().fallback_evictions, 0);
    }

    /// The same story as a hit/miss string, next to LRU's, which loses 0, 1 and 2 to the scan.
    #[test]
    fn s3fifo_textbook_sequence() {
        let mut t: Vec<u64> = (0..10).collect();
        t.extend([0, 1, 10, 2]);
        t.extend(20..40);
        t.extend([0, 1, 2]);
        let want = format!("{}HH{}HHH", "M".repeat(10), "M".repeat(22));
        assert_eq!(hit_pattern(Box::new(S3Fifo::new()), 10, &t), want);
        let lru = hit_pattern(Box::new(crate::policy::Lru::new()), 10, &t);
        assert!(lru.ends_with("MMM"));
    }

    /// A main-queue buffer with a nonzero counter is reinserted at the head with the counter
    /// decremented; one with zero is the victim.
    #[test]
    fn s3fifo_main_queue_gives_hit_buffers_more_laps() {
        let (p, s3) = Probe::wrap(S3Fifo::new());
        let mut sim = Simulator::new(p, 64, 10);
        let q = |i| s3.read().queue_of(i);
        for id in 0..10 {
            sim.access(id);
        }
        for id in 0..9 {
            sim.access(id); // hit in small: all of 0..9 will be promoted
        }
        sim.access(10); // promotes 0..8 to main, evicts 9 (ghost)
        assert!((0..9).all(|i| q(i) == S3Queue::Main));
        assert_eq!(q(9), S3Queue::Ghost);
        sim.access(0); // counter of 0 in main: 1
        sim.access(11); // small holds 10: evict it, main untouched
        assert_eq!(q(10), S3Queue::Ghost);
        // Now the small queue holds 11 only. Hit it so it is promoted, forcing main to evict:
        // main's tail is 0 (counter 1): reinserted with 0; then 1 (counter 0) is the victim.
        sim.access(11);
        sim.access(12);
        assert_eq!(q(11), S3Queue::Main);
        assert_eq!(q(0), S3Queue::Main);
        assert!(sim.is_resident(0));
        assert!(!sim.is_resident(1));
        assert_eq!(q(1), S3Queue::None);
    }
}
