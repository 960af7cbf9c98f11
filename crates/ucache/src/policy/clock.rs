//! CLOCK (second chance), the default policy: Corbató, "A Paging Experiment with the Multics
//! System", 1968; the lock-free variant follows vmcache (Leis et al., SIGMOD'23).
//!
//! The referenced bit lives in the buffer's state word and is set by every pin at no extra
//! cost, so hits never call into the policy. Victim search sweeps a [`ResidentSet`] with a
//! shared hand; concurrent evictors sweep disjoint slots. The ring holds buffers in insertion
//! order, as in the textbook algorithm, so buffers loaded together (a scan, a readahead run)
//! are evicted together and their pages dropped as one range.

use super::config::{check_range, default_or_libcachesim, parse_value};
use super::{Buffers, CounterClock, Layout, Policy, PolicyConfig, PolicyConfigError, ResidentSet};
use crate::state::Phase;

/// CLOCK's parameters (libCacheSim's names). The default, one bit and new buffers referenced
/// under `rules=ucache`, is this file's lock-free CLOCK, whose bit is the state word's
/// referenced bit and whose ring meets a fresh fill newest first; any other setting builds
/// [`CounterClock`], which keeps a counter per buffer and a FIFO (libCacheSim's `Clock.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockConfig {
    /// Bits of the per-buffer counter (1 to 8): a buffer survives up to `2^n - 1` laps.
    pub n_bit_counter: u8,
    /// The counter of a newly loaded buffer (0 to `2^n - 1`).
    pub init_freq: u8,
    /// `true`: always the FIFO-reinsertion [`CounterClock`], as libCacheSim runs CLOCK, even
    /// for one bit and `init_freq` 1.
    pub fifo_reinsertion: bool,
}

impl Default for ClockConfig {
    fn default() -> Self {
        ClockConfig {
            n_bit_counter: 1,
            init_freq: 1,
            fifo_reinsertion: false,
        }
    }
}

impl ClockConfig {
    /// libCacheSim 0.3.5's defaults: one bit, new objects not referenced, FIFO-reinsertion.
    pub fn libcachesim() -> Self {
        ClockConfig {
            n_bit_counter: 1,
            init_freq: 0,
            fifo_reinsertion: true,
        }
    }
}

impl PolicyConfig for ClockConfig {
    fn policy_name(&self) -> &'static str {
        "clock"
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("n_bit_counter", self.n_bit_counter.to_string()),
            ("init_freq", self.init_freq.to_string()),
            ("fifo_reinsertion", self.fifo_reinsertion.to_string()),
        ]
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), PolicyConfigError> {
        match key {
            "n_bit_counter" => {
                self.n_bit_counter =
                    parse_value("clock", "n_bit_counter", value, "an integer from 1 to 8")?
            }
            "init_freq" => {
                self.init_freq = parse_value("clock", "init_freq", value, "a small integer")?
            }
            "fifo_reinsertion" => {
                self.fifo_reinsertion =
                    parse_value("clock", "fifo_reinsertion", value, "true or false")?
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
        check_range("clock", "n_bit_counter", self.n_bit_counter as u64, 1, 8)?;
        let max = (1u64 << self.n_bit_counter) - 1;
        check_range("clock", "init_freq", self.init_freq as u64, 0, max)
    }

    fn build_unchecked(&self) -> Box<dyn Policy> {
        if !self.fifo_reinsertion && self.n_bit_counter == 1 && self.init_freq == 1 {
            Box::new(Clock::new())
        } else {
            Box::new(CounterClock::new(self.n_bit_counter, self.init_freq))
        }
    }
}

/// Slots claimed per step of the hand. Their buffers' state words are prefetched together
/// (each is a random access, and a sweep that waits for them one at a time is memory-bound),
/// so a step is small enough that most of them are looked at.
const SWEEP: u64 = 16;
/// Resident sets of fewer slots than this keep their buffers' state words in the CPU cache
/// anyway (a line each), so the sweep does not spend instructions prefetching them.
const PREFETCH_FROM_SLOTS: u64 = 1 << 14;

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
        self.resident = Some(ResidentSet::new(
            layout.capacity.min(layout.buffers),
            layout.buffers,
        ));
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let set = self.set();
        let start = out.len();
        // Two full sweeps clear every referenced bit once, so anything idle is found by then.
        let mut budget = 2 * set.slots();
        let prefetch = set.slots() >= PREFETCH_FROM_SLOTS;
        while out.len() - start < want && budget > 0 {
            // The sweep stops at the last victim wanted and hands the rest of its slots back:
            // a slot past the last victim would lose its referenced bit for nothing. With one
            // victim wanted this is the textbook clock.
            let looked = set.clock_sweep(
                SWEEP,
                |k| {
                    if prefetch {
                        buffers.prefetch(k);
                        set.prefetch(k);
                    }
                },
                |i| {
                    let w = buffers.state(i);
                    if w.phase() == Phase::Cached
                        && w.idle()
                        && !buffers.test_and_clear_referenced(i)
                        // A hand that went all the way round meets this call's victims again
                        // (a linear check, but only per victim, and batches are small).
                        && !out[start..].contains(&i)
                    {
                        out.push(i);
                    }
                    out.len() - start >= want
                },
            );
            budget = budget.saturating_sub(looked);
        }
    }

    fn on_insert(&self, index: u64) {
        self.set().insert(index);
    }

    fn on_evict(&self, index: u64) {
        self.set().remove(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::hit_pattern;

    /// Second chance over a frame array, referenced bits set on load and on hits: a newcomer
    /// takes its victim's frame and the hand moves past it. While frames are free, each
    /// newcomer enters just behind the hand, so the first lap meets the fill newest first, as
    /// the resident set's ring does (`resident.rs`).
    fn frame_model(capacity: usize, trace: &[u64]) -> String {
        let mut frames: Vec<(u64, bool)> = Vec::new();
        let mut hand = 0;
        let mut access = |page: u64| {
            if let Some(f) = frames.iter_mut().find(|f| f.0 == page) {
                f.1 = true;
                return 'H';
            }
            if frames.len() < capacity {
                frames.insert(0, (page, true));
                return 'M';
            }
            while frames[hand].1 {
                frames[hand].1 = false;
                hand = (hand + 1) % capacity;
            }
            frames[hand] = (page, true);
            hand = (hand + 1) % capacity;
            'M'
        };
        trace.iter().map(|&p| access(p)).collect()
    }

    #[test]
    fn clock_is_second_chance_over_frames() {
        let t = [4, 4, 2, 1, 1, 1, 4, 0, 2, 4, 4, 1, 1, 2];
        let clock = hit_pattern(Box::new(Clock::new()), 3, &t);
        assert_eq!(clock, frame_model(3, &t));
        assert_ne!(
            clock,
            hit_pattern(Box::new(super::super::Fifo::new()), 3, &t)
        );
        assert_ne!(
            clock,
            hit_pattern(Box::new(super::super::Lru::new()), 3, &t)
        );
        // And on skewed pseudo-random traces, at several sizes.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for capacity in [1, 2, 3, 5, 8, 13] {
            let trace: Vec<u64> = (0..400)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 24).min(x % 7 + x % 3)
                })
                .collect();
            assert_eq!(
                hit_pattern(Box::new(Clock::new()), capacity, &trace),
                frame_model(capacity as usize, &trace),
                "capacity {capacity}"
            );
        }
    }
}
