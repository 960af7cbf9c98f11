//! A count-min sketch with 4-bit counters and periodic halving: TinyLFU's frequency
//! histogram (Einziger, Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission
//! Policy", ACM ToS 2017, §3).
//!
//! Admission only needs to compare two frequencies, and only recent ones: counters saturate at
//! 15 (4 bits are enough to rank), and after every `sample` additions all counters are halved
//! (the paper's "reset"), so an item that was hot long ago fades and yields to a new one.

/// Rows, each with its own hash: the estimate is the minimum over them.
const ROWS: usize = 4;
/// The largest count a counter holds.
pub const MAX_COUNT: u8 = 15;

pub struct CountMin {
    /// `ROWS` rows of `mask + 1` counters each, one byte per counter (the 4-bit packing saves
    /// memory, not accuracy, and is not worth the shifts here).
    counters: Box<[u8]>,
    mask: u64,
    additions: u64,
    sample: u64,
}

/// SplitMix64's finalizer: a cheap, well-mixed hash of a buffer index.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl CountMin {
    /// A sketch with at least `width` counters per row (rounded up to a power of two, at
    /// least 16) that halves itself every `sample` additions (TinyLFU's W; at least 1).
    pub fn new(width: u64, sample: u64) -> Self {
        let w = width.max(16).next_power_of_two();
        CountMin {
            counters: vec![0; ROWS * w as usize].into_boxed_slice(),
            mask: w - 1,
            additions: 0,
            sample: sample.max(1),
        }
    }

    #[inline]
    fn slot(&self, row: usize, key: u64) -> usize {
        let h = mix(key.wrapping_add((row as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        row * (self.mask as usize + 1) + (h & self.mask) as usize
    }

    /// Counts one occurrence of `key`; ages the sketch when the sample is complete.
    pub fn increment(&mut self, key: u64) {
        for r in 0..ROWS {
            let s = self.slot(r, key);
            if self.counters[s] < MAX_COUNT {
                self.counters[s] += 1;
            }
        }
        self.additions += 1;
        if self.additions >= self.sample {
            self.age();
        }
    }

    /// The estimated recent frequency of `key` (never an underestimate between agings).
    pub fn estimate(&self, key: u64) -> u8 {
        (0..ROWS)
            .map(|r| self.counters[self.slot(r, key)])
            .min()
            .unwrap_or(0)
    }

    /// Halves every counter and the addition count: TinyLFU's reset.
    pub fn age(&mut self) {
        for c in self.counters.iter_mut() {
            *c >>= 1;
        }
        self.additions /= 2;
    }

    /// Additions since the last aging (halved by it).
    pub fn additions(&self) -> u64 {
        self.additions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_saturate_and_age() {
        let mut s = CountMin::new(64, 1000);
        for _ in 0..10 {
            s.increment(7);
        }
        assert_eq!(s.estimate(7), 10);
        assert_eq!(s.estimate(8), 0);
        for _ in 0..10 {
            s.increment(7);
        }
        assert_eq!(s.estimate(7), MAX_COUNT);
        s.age();
        assert_eq!(s.estimate(7), MAX_COUNT / 2);
    }

    #[test]
    fn sample_completion_halves() {
        let mut s = CountMin::new(64, 20);
        for _ in 0..12 {
            s.increment(1);
        }
        for k in 0..7 {
            s.increment(100 + k);
        }
        assert_eq!(s.estimate(1), 12);
        s.increment(200); // the 20th addition
        assert_eq!(s.estimate(1), 6);
        assert_eq!(s.additions(), 10);
    }
}
