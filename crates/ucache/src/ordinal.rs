//! A small number per thread, in the order threads first ask: how sharded structures (the
//! statistics' counters, the frame pools' free lists) give each thread a shard of its own.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

static NEXT: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    static ORDINAL: usize = NEXT.fetch_add(1, Relaxed);
}

/// This thread's ordinal: 0 for the first thread that asked, 1 for the next, and so on. Never
/// shared by two threads (the statistics rely on it). The key has no destructor, so it can
/// be read at any time, thread exit included.
#[inline]
pub(crate) fn thread_ordinal() -> usize {
    ORDINAL.with(|o| *o)
}

/// The CPUs this process may run on, asked once: how many shards a sharded structure keeps
/// and how many IO threads a cache starts. Asking reads cgroup files, and a program under the
/// preload shim makes a mapping, and so a sharded count, for every file it maps.
pub(crate) fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_distinct_ordinals_and_keep_theirs() {
        let mine = thread_ordinal();
        assert_eq!(thread_ordinal(), mine, "a thread keeps its ordinal");
        let others: Vec<usize> = (0..4)
            .map(|_| std::thread::spawn(thread_ordinal).join().unwrap())
            .collect();
        let mut all = others.clone();
        all.push(mine);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 5, "distinct: {others:?} and {mine}");
    }
}
