//! Sampled LFU: evict the least frequently used of a few resident buffers picked at random.
//!
//! Frequency beats recency where popularity is skewed and stable (Zipfian key-value lookups,
//! the hot vertices of a graph): one scan cannot flush buffers that were hit thousands of
//! times. Keeping all buffers ordered by count costs a heap update per hit, so, like cache_ext's
//! LFU (SOSP'25 §5) and Redis's approximated LFU, victims are the least frequent of `k` sampled
//! residents; with `k` at least the resident count it is exact LFU. Counts are never aged
//! (textbook LFU), so a once-hot buffer can linger after popularity shifts: prefer S3-FIFO or
//! W-TinyLFU for shifting workloads.
//!
//! Synchronization: a hit is one relaxed load and store of the buffer's own counter, no lock
//! (two racing hits may count once: an approximation, documented). The resident array that
//! sampling draws from sits behind a `parking_lot` mutex taken on insert, evict and choice.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use parking_lot::Mutex;

use super::config::{check_range, parse_value, unknown_preset};
use super::{Buffers, Layout, Policy, PolicyConfig, PolicyConfigError};

/// LFU's parameters: residents sampled per victim, or the exact policy. With at least as many
/// samples as residents the sampled choice is exact too, but ties go to the first found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LfuConfig {
    /// 1 to 64.
    pub samples: usize,
    /// `true`: [`super::ExactLfu`] (every resident ordered; ties to the earliest arrival at
    /// the count, libCacheSim's LFU), and `samples` is unused.
    pub exact: bool,
}

impl Default for LfuConfig {
    fn default() -> Self {
        LfuConfig {
            samples: DEFAULT_SAMPLES,
            exact: false,
        }
    }
}

impl PolicyConfig for LfuConfig {
    fn policy_name(&self) -> &'static str {
        "lfu"
    }

    fn params(&self) -> Vec<(&'static str, String)> {
        vec![
            ("samples", self.samples.to_string()),
            ("exact", self.exact.to_string()),
        ]
    }

    fn set(&mut self, key: &str, value: &str) -> Result<(), PolicyConfigError> {
        match key {
            "samples" => {
                self.samples = parse_value("lfu", "samples", value, "an integer from 1 to 64")?
            }
            "exact" => self.exact = parse_value("lfu", "exact", value, "true or false")?,
            _ => return Err(self.unknown_parameter(key)),
        }
        Ok(())
    }

    fn presets(&self) -> &'static [&'static str] {
        &["libcachesim", "exact"]
    }

    fn preset(&mut self, name: &str) -> Result<(), PolicyConfigError> {
        match name {
            "libcachesim" | "exact" => self.exact = true,
            _ => return Err(unknown_preset(self, name)),
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), PolicyConfigError> {
        check_range("lfu", "samples", self.samples as u64, 1, MAX_SAMPLES as u64)
    }

    fn build_unchecked(&self) -> Box<dyn Policy> {
        if self.exact {
            Box::new(super::ExactLfu::new())
        } else {
            Box::new(Lfu::with_samples(self.samples))
        }
    }
}

/// Residents sampled per victim by default.
pub const DEFAULT_SAMPLES: usize = 16;
/// The most residents sampled per victim.
pub const MAX_SAMPLES: usize = 64;
const ABSENT: u32 = u32::MAX;

struct Residents {
    /// Resident buffers, densely packed so a uniform sample is a uniform index.
    members: Vec<u32>,
    /// Where each buffer sits in `members`, or `ABSENT`.
    pos: Box<[u32]>,
    /// xorshift64 state: sampling needs speed, not quality.
    rng: u64,
}

impl Residents {
    fn swap(&mut self, a: usize, b: usize) {
        self.members.swap(a, b);
        self.pos[self.members[a] as usize] = a as u32;
        self.pos[self.members[b] as usize] = b as u32;
    }

    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

pub struct Lfu {
    samples: usize,
    count: Box<[AtomicU32]>,
    residents: Mutex<Residents>,
}

impl Default for Lfu {
    fn default() -> Self {
        Self::with_samples(DEFAULT_SAMPLES)
    }
}

impl Lfu {
    pub fn new() -> Self {
        Self::default()
    }

    /// Samples `k` residents per victim (clamped to 1..=`MAX_SAMPLES`).
    pub fn with_samples(k: usize) -> Self {
        Lfu {
            samples: k.clamp(1, MAX_SAMPLES),
            count: Box::new([]),
            residents: Mutex::new(Residents {
                members: Vec::new(),
                pos: Box::new([]),
                rng: 0x2545_F491_4F6C_DD1D,
            }),
        }
    }

    /// Accesses counted for buffer `index` in its current residency.
    pub fn count(&self, index: u64) -> u32 {
        self.count[index as usize].load(Relaxed)
    }
}

impl Policy for Lfu {
    fn name(&self) -> &str {
        "lfu"
    }

    fn attach(&mut self, layout: Layout) {
        assert!(
            layout.buffers < ABSENT as u64,
            "LFU keeps buffer indices in 32 bits: {} buffers are too many",
            layout.buffers
        );
        self.count = (0..layout.buffers).map(|_| AtomicU32::new(0)).collect();
        let r = self.residents.get_mut();
        r.members = Vec::with_capacity(layout.capacity.min(layout.buffers) as usize);
        r.pos = vec![ABSENT; layout.buffers as usize].into_boxed_slice();
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut r = self.residents.lock();
        // Chosen victims are swapped to the end, out of the sampled prefix, so one call never
        // proposes a buffer twice.
        let mut live = r.members.len();
        for _ in 0..want {
            let mut best: Option<(u32, usize)> = None;
            let mut consider = |r: &Residents, p: usize| {
                let i = r.members[p] as u64;
                if !buffers.is_candidate(i) {
                    return false;
                }
                let c = self.count[i as usize].load(Relaxed);
                match best {
                    Some((b, _)) if b <= c => {}
                    _ => best = Some((c, p)),
                }
                true
            };
            let mut any = false;
            if live > self.samples {
                // Draw the sample first and prefetch it: each sampled buffer's state word and
                // count are random accesses, which then overlap instead of queueing.
                let mut picks = [0usize; MAX_SAMPLES];
                for p in picks.iter_mut().take(self.samples) {
                    *p = (r.next() % live as u64) as usize;
                    buffers.prefetch(r.members[*p] as u64);
                }
                for &p in &picks[..self.samples] {
                    any |= consider(&r, p);
                }
            }
            if !any {
                // A small set, or a sample all pinned or busy (as when most residents are):
                // look at them all rather than propose nothing.
                (0..live).for_each(|p| {
                    consider(&r, p);
                });
            }
            let Some((_, p)) = best else { break };
            out.push(r.members[p] as u64);
            live -= 1;
            r.swap(p, live);
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, index: u64) {
        let c = &self.count[index as usize];
        c.store(c.load(Relaxed).saturating_add(1), Relaxed);
    }

    fn on_insert(&self, index: u64) {
        self.count[index as usize].store(1, Relaxed);
        let mut r = self.residents.lock();
        if r.pos[index as usize] == ABSENT {
            let p = r.members.len();
            r.members.push(index as u32);
            r.pos[index as usize] = p as u32;
        }
    }

    fn on_evict(&self, index: u64) {
        let mut r = self.residents.lock();
        let p = r.pos[index as usize];
        if p == ABSENT {
            return;
        }
        let last = r.members.len() - 1;
        r.swap(p as usize, last);
        r.members.pop();
        r.pos[index as usize] = ABSENT;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::hit_pattern;
    use crate::policy::Simulator;

    /// With a sample at least the cache size, sampled LFU is exact LFU: the buffers hit most
    /// stay, the newcomers displace each other.
    #[test]
    fn lfu_exact_when_the_sample_covers_the_cache() {
        let t = [1, 1, 1, 2, 2, 3, 4, 3, 4, 1, 2];
        assert_eq!(
            hit_pattern(Box::new(Lfu::with_samples(64)), 3, &t),
            "MHHMHMMMMHH"
        );
    }

    /// Sampled: hot buffers survive a long stream of one-time buffers.
    #[test]
    fn sampled_lfu_keeps_hot_buffers() {
        let mut sim = Simulator::new(Box::new(Lfu::new()), 10_000, 100);
        for round in 0..50 {
            for hot in 0..20 {
                sim.access(hot);
            }
            for k in 0..100 {
                sim.access(100 + round * 100 + k);
            }
        }
        let hot_resident = (0..20).filter(|&h| sim.is_resident(h)).count();
        assert_eq!(hot_resident, 20);
        assert_eq!(sim.stats().fallback_evictions, 0);
    }
}
