//! A count that goes up and down on many threads, kept in per-thread shards.
//!
//! A mapping's count of resident buffers is bumped by every miss and lowered by every
//! eviction. As one atomic, every miss's locked add had to take its line from the thread of
//! the last one: the add, and the store queued before it, were about 60% of `load_one`'s
//! samples at two threads (docs/results/2026-11-27-metadata-pages). Here each thread adds to
//! its own shard's line, and the rare reader (an eviction round, `Mapping::resident`) sums
//! them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::per_thread::PerThread;

pub(crate) struct ShardedGauge {
    shards: PerThread<AtomicU64>,
}

impl ShardedGauge {
    /// A gauge at zero, with a shard per CPU ([`PerThread`]).
    pub(crate) fn new() -> Self {
        ShardedGauge {
            shards: PerThread::new(|| AtomicU64::new(0)),
        }
    }

    #[inline]
    fn shard(&self) -> &AtomicU64 {
        self.shards.mine()
    }

    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.shard().fetch_add(n, Relaxed);
    }

    /// Lowers the count; a shard may wrap below zero (its thread evicted what another
    /// loaded), which the sum undoes.
    #[inline]
    pub(crate) fn sub(&self, n: u64) {
        self.shard().fetch_sub(n, Relaxed);
    }

    /// The count. Exact when no thread changes it meanwhile; while they do, it may miss
    /// changes made during the sum, and never reads below zero.
    pub(crate) fn get(&self) -> u64 {
        let sum = self
            .shards
            .iter()
            .fold(0u64, |s, a| s.wrapping_add(a.load(Relaxed)));
        // A sum that caught an eviction but not the load before it wrapped below zero.
        if (sum as i64) < 0 {
            0
        } else {
            sum
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_across_threads_that_add_and_sub_in_different_shards() {
        let g = Arc::new(ShardedGauge::new());
        g.add(10);
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let g = g.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        g.add(3);
                    }
                    // Lowers more than this thread added, as an evictor lowers what
                    // loaders added.
                    if t == 0 {
                        g.sub(40_000);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert_eq!(g.get(), 10 + 4 * 30_000 - 40_000);
        g.sub(g.get());
        assert_eq!(g.get(), 0);
    }

    #[test]
    fn a_sum_below_zero_reads_as_zero() {
        let g = ShardedGauge::new();
        g.sub(1);
        assert_eq!(g.get(), 0);
        g.add(2);
        assert_eq!(g.get(), 1);
    }
}
