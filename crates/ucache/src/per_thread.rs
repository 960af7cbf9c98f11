//! One value per thread shard, each on its own cache line: what a word that many threads
//! write becomes when one shared line would make every write wait for the last writer's core.
//!
//! A thread's shard is its [`crate::ordinal`] masked, so threads beyond the shard count share
//! shards: a user must stay correct when two threads meet in one (the gauge adds atomically;
//! the resident set's fill hints are only hints).

use crossbeam_utils::CachePadded;

/// Shards at most: a power of two, so a thread's shard is its ordinal masked.
const MAX_SHARDS: usize = 16;

pub(crate) struct PerThread<T> {
    shards: Box<[CachePadded<T>]>,
    mask: usize,
}

impl<T> PerThread<T> {
    /// One shard per CPU up to [`MAX_SHARDS`], each made by `make`.
    pub(crate) fn new(make: impl FnMut() -> T) -> Self {
        Self::with_shards(crate::ordinal::cpus(), make)
    }

    /// `shards` shards (rounded up to a power of two, at most [`MAX_SHARDS`]), each made by
    /// `make`: for tests that need threads in different shards on any machine.
    pub(crate) fn with_shards(shards: usize, mut make: impl FnMut() -> T) -> Self {
        let n = shards.clamp(1, MAX_SHARDS).next_power_of_two();
        PerThread {
            shards: (0..n).map(|_| CachePadded::new(make())).collect(),
            mask: n - 1,
        }
    }

    /// The calling thread's shard.
    #[inline]
    pub(crate) fn mine(&self) -> &T {
        &self.shards[self.index()]
    }

    /// The calling thread's shard's number.
    #[inline]
    pub(crate) fn index(&self) -> usize {
        crate::ordinal::thread_ordinal() & self.mask
    }

    /// Every shard, for the rare reader that sums or resets them.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().map(|s| &**s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    #[test]
    fn a_thread_keeps_its_shard_and_the_shards_cover_the_cpus() {
        let p = PerThread::new(|| AtomicUsize::new(0));
        let n = p.iter().count();
        assert!(n.is_power_of_two() && n <= MAX_SHARDS);
        assert_eq!(
            n,
            crate::ordinal::cpus().min(MAX_SHARDS).next_power_of_two()
        );
        assert!(std::ptr::eq(p.mine(), p.mine()));
        p.mine().fetch_add(1, Relaxed);
        std::thread::scope(|s| {
            s.spawn(|| p.mine().fetch_add(10, Relaxed));
        });
        assert_eq!(p.iter().map(|a| a.load(Relaxed)).sum::<usize>(), 11);
    }
}
