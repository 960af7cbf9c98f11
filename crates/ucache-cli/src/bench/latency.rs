//! Latency histogram.
//!
//! Log-bucketed (16 sub-buckets per power of two, so any value is within 1/16 of its bucket's
//! bounds) because latencies here span four orders of magnitude, from a cache hit at tens of
//! nanoseconds to a host-cache miss at a millisecond, and a fixed-width histogram would either
//! blur the hits or need megabytes per thread. Each thread keeps its own and they are merged at
//! the end, so recording costs no shared cache line.

use serde::{Deserialize, Serialize};

const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Covers values up to 2^63 ns; the top buckets are never reached in practice.
const BUCKETS: usize = SUB + (64 - SUB_BITS as usize) * SUB;

#[derive(Clone, Debug)]
pub struct Histogram {
    counts: Vec<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The summary that travels from worker to parent and into the JSON.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    pub samples: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let mantissa = ((v >> (e - SUB_BITS)) as usize) & (SUB - 1);
    SUB + (e - SUB_BITS) as usize * SUB + mantissa
}

/// Inclusive lower and exclusive upper bound of a bucket.
fn bounds_of(b: usize) -> (u64, u64) {
    if b < SUB {
        return (b as u64, b as u64 + 1);
    }
    let e = ((b - SUB) / SUB) as u32 + SUB_BITS;
    let m = ((b - SUB) % SUB) as u64;
    let width = 1u64 << (e - SUB_BITS);
    let low = (SUB as u64 + m) * width;
    (low, low.saturating_add(width))
}

impl Histogram {
    pub fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    #[inline]
    pub fn record(&mut self, nanos: u64) {
        self.counts[bucket_of(nanos)] += 1;
        self.count += 1;
        self.sum += nanos as u128;
        self.min = self.min.min(nanos);
        self.max = self.max.max(nanos);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// The value at quantile `q` (0..=1) in nanoseconds: the middle of the bucket holding the
    /// sample of that rank, clamped to the exact min and max seen. 0 when empty.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (lo, hi) = bounds_of(b);
                let mid = if hi - lo == 1 {
                    lo as f64
                } else {
                    (lo as f64 + hi as f64) / 2.0
                };
                return mid.clamp(self.min as f64, self.max as f64);
            }
        }
        self.max as f64
    }

    pub fn summary(&self) -> LatencySummary {
        let us = |ns: f64| ns / 1000.0;
        LatencySummary {
            samples: self.count,
            mean_us: if self.count == 0 {
                0.0
            } else {
                us(self.sum as f64 / self.count as f64)
            },
            p50_us: us(self.quantile(0.50)),
            p90_us: us(self.quantile(0.90)),
            p99_us: us(self.quantile(0.99)),
            p999_us: us(self.quantile(0.999)),
            max_us: if self.count == 0 {
                0.0
            } else {
                us(self.max as f64)
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_contain_their_values() {
        let mut prev_hi = 0;
        for b in 0..BUCKETS - SUB {
            let (lo, hi) = bounds_of(b);
            assert_eq!(lo, prev_hi, "bucket {b}");
            assert!(hi > lo);
            assert_eq!(bucket_of(lo), b);
            assert_eq!(bucket_of(hi - 1), b);
            prev_hi = hi;
        }
    }

    #[test]
    fn relative_error_is_bounded() {
        for v in [17u64, 100, 999, 12_345, 1_000_000, 987_654_321] {
            let (lo, hi) = bounds_of(bucket_of(v));
            assert!(lo <= v && v < hi);
            assert!((hi - lo) as f64 / lo as f64 <= 1.0 / 16.0 + 1e-9);
        }
    }

    #[test]
    fn percentiles_of_uniform_values() {
        let mut h = Histogram::new();
        for v in 1..=10_000u64 {
            h.record(v * 1000); // 1 µs .. 10 ms
        }
        let s = h.summary();
        assert_eq!(s.samples, 10_000);
        for (got, want) in [(s.p50_us, 5000.0), (s.p90_us, 9000.0), (s.p99_us, 9900.0)] {
            assert!((got - want).abs() / want < 0.04, "got {got}, want ~{want}");
        }
        assert_eq!(s.max_us, 10_000.0);
        assert!((s.mean_us - 5000.5).abs() < 0.01);
    }

    #[test]
    fn p99_sees_a_slow_tail() {
        let mut h = Histogram::new();
        for _ in 0..980 {
            h.record(60_000);
        }
        for _ in 0..20 {
            h.record(1_000_000);
        }
        assert!((h.quantile(0.5) - 60_000.0).abs() / 60_000.0 < 0.04);
        assert!((h.quantile(0.99) - 1_000_000.0).abs() / 1_000_000.0 < 0.04);
    }

    #[test]
    fn merge_equals_recording_together() {
        let (mut a, mut b, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
        for v in 0..5000u64 {
            let x = v * 37 % 100_000;
            if v % 2 == 0 {
                a.record(x)
            } else {
                b.record(x)
            }
            all.record(x);
        }
        a.merge(&b);
        assert_eq!(a.summary(), all.summary());
    }

    #[test]
    fn empty_is_zero() {
        let h = Histogram::new();
        assert_eq!(h.summary(), LatencySummary::default());
        assert_eq!(h.quantile(0.99), 0.0);
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::new();
        for v in [3, 3, 3, 7] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 3.0);
        assert_eq!(h.quantile(1.0), 7.0);
    }
}
