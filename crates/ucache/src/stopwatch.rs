//! Times the phases of one transparent fault for the fault profile
//! ([`crate::CacheOptions::profile_faults`]): eviction, IO, install and bookkeeping, the
//! paper's Table 4.
//!
//! Phases follow one another, so one clock read ends a phase and starts the next. Timing each
//! phase with its own pair of reads took 16 reads per miss, and on zram (2026-11-24, AMD host,
//! `perf record` of transparent lookups) those reads were 5.5% of all CPU. A stopwatch that is
//! off reads no clock at all.
//!
//! Even nine reads were about 3.5% of that CPU, and the profile is an average, so only one
//! fault in [`SAMPLE_EVERY`], drawn at random per thread, is timed ([`sampled`]); the phases'
//! totals are divided by the count of timed faults, not of all faults. Drawing at random
//! rather than every 16th keeps the sample from beating with periodic events such as the
//! miss that evicts a batch.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::stats::{Counter, Stats};

/// One fault in this many is timed, on average.
pub(crate) const SAMPLE_EVERY: u32 = 16;

thread_local! {
    /// xorshift32 state; 0 until the thread's first draw seeds it.
    static DRAW: Cell<u32> = const { Cell::new(0) };
}

/// Seeds for the threads' draws: a Weyl sequence, so every thread starts at a different
/// point. With one seed for all, every thread timed the same positions of its own faults
/// (its 7th, 64th, ...), and a thread that faulted six times or fewer was never timed.
static SEEDS: AtomicU32 = AtomicU32::new(0x9E37_79B9);

/// Whether to time this fault: true about once in [`SAMPLE_EVERY`] calls on each thread.
#[inline]
pub(crate) fn sampled() -> bool {
    DRAW.with(|d| {
        let mut x = d.get();
        if x == 0 {
            // Odd, so xorshift never reaches 0. An atomic add: safe in the SIGBUS handler.
            x = SEEDS.fetch_add(0x9E37_79B9, Ordering::Relaxed) | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        d.set(x);
        x % SAMPLE_EVERY == 0
    })
}

pub(crate) struct Stopwatch {
    start: Option<Instant>,
    last: Option<Instant>,
}

impl Stopwatch {
    /// A stopwatch that reads the clock only if `on`.
    pub(crate) fn new(on: bool) -> Self {
        let t = on.then(Instant::now);
        Stopwatch { start: t, last: t }
    }

    /// Whether this stopwatch reads the clock.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.start.is_some()
    }

    /// Ends the current phase, charging it to `counter`; returns the time read, if on.
    #[inline]
    pub(crate) fn lap(&mut self, stats: &Stats, counter: Counter) -> Option<Instant> {
        let last = self.last?;
        let now = self.skip()?;
        stats.add(counter, (now - last).as_nanos() as u64);
        Some(now)
    }

    /// Ends the current phase without charging it to any phase: what the phases leave of the
    /// whole fault is its checks.
    #[inline]
    pub(crate) fn skip(&mut self) -> Option<Instant> {
        self.last?;
        let now = Instant::now();
        self.last = Some(now);
        Some(now)
    }

    /// The time since `since`, taken from the last lap if on (no clock read), else read now.
    pub(crate) fn since(&self, since: Instant) -> Duration {
        match self.last {
            Some(t) => t.saturating_duration_since(since),
            None => since.elapsed(),
        }
    }

    /// Charges everything since the stopwatch started to `counter`.
    pub(crate) fn total(&self, stats: &Stats, counter: Counter) {
        if let Some(start) = self.start {
            stats.add(counter, start.elapsed().as_nanos() as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_off_stopwatch_charges_nothing() {
        let stats = Stats::default();
        let mut sw = Stopwatch::new(false);
        assert!(sw.skip().is_none());
        assert!(sw.lap(&stats, Counter::FaultIoNs).is_none());
        sw.total(&stats, Counter::FaultNs);
        let s = stats.snapshot();
        assert_eq!((s.fault_io_ns, s.fault_ns), (0, 0));
    }

    #[test]
    fn about_one_fault_in_sample_every_is_drawn() {
        let n = 160_000;
        let drawn = (0..n).filter(|_| sampled()).count();
        let expected = n / SAMPLE_EVERY as usize;
        assert!(
            drawn > expected * 9 / 10 && drawn < expected * 11 / 10,
            "{drawn} of {n}"
        );
    }

    #[test]
    fn laps_partition_the_total() {
        let stats = Stats::default();
        let mut sw = Stopwatch::new(true);
        std::thread::sleep(Duration::from_millis(2));
        let t = sw.skip().unwrap();
        std::thread::sleep(Duration::from_millis(3));
        sw.lap(&stats, Counter::FaultIoNs);
        assert!(sw.since(t) >= Duration::from_millis(3));
        std::thread::sleep(Duration::from_millis(1));
        sw.lap(&stats, Counter::FaultInstallNs);
        sw.total(&stats, Counter::FaultNs);
        let s = stats.snapshot();
        assert!(s.fault_io_ns >= 3_000_000);
        assert!(s.fault_install_ns >= 1_000_000);
        assert!(s.fault_ns >= 6_000_000);
        assert!(s.fault_io_ns + s.fault_install_ns <= s.fault_ns - 2_000_000);
    }
}
