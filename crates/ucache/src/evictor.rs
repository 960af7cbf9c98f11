//! The background evictor: one thread per cache that frees the next batch before a loader
//! needs it.
//!
//! Without it, the loader that finds the budget full evicts a whole batch itself (choosing
//! victims, one `process_madvise` with its TLB shootdown), so one miss in 64 waits for 64
//! evictions: that miss is the 99th percentile, and every miss carries its share of the batch
//! on its own critical path. Where the cores idle while reads are in flight (a disk rather
//! than a memory-backed device), that share is latency the device does not need. The evictor
//! keeps one to [`AHEAD`] batches of the budget free; loaders still evict themselves
//! whenever they find it full (the evictor is an aid, never something to wait for), so
//! correctness and the budget's bound do not depend on it.
//!
//! Protocol: a loader whose reservation leaves less than [`Evictor::low`] free sets `kicked`
//! and, if it was clear, unparks the thread. The thread evicts rounds until [`AHEAD`] times
//! that is free, clears `kicked`, and checks the budget once more before parking, so a kick
//! that came while it worked (and found `kicked` set) is normally not lost. The loader reads
//! `kicked` without a fence, to keep the miss path free of one, so a kick can still slip
//! through that window. The next reservation then kicks again, and a loader that finds the
//! budget full evicts for itself. A missed kick therefore delays the evictor by one miss; it
//! never costs correctness.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{OnceLock, Weak};
use std::thread::Thread;

/// Once woken, the evictor frees this many times [`Evictor::low`] before it sleeps again, so
/// that one wake-up (two context switches where the cores are busy) serves several batches:
/// freeing one batch per wake-up cost 2–6% of explicit lookups on zram (docs/design.md).
const AHEAD: u64 = 4;

/// What the evictor's thread works on: the cache, seen only as a budget it can measure and
/// free. A trait, so that this module, below the budget that owns the evictor, names neither
/// the budget nor the mappings.
pub(crate) trait EvictAhead: Send + Sync {
    /// The evictor whose `kicked` and `low` the thread reads.
    fn evictor(&self) -> &Evictor;
    /// Whether fewer than `bytes` are free (as [`crate::budget::Budget::short_of`]).
    fn short_of(&self, bytes: u64) -> bool;
    /// One eviction round; the buffers whose budget it freed.
    fn evict_ahead(&self) -> u64;
}

pub(crate) struct Evictor {
    /// Bytes to keep free: the largest batch of the cache's mappings; 0 while off.
    low: AtomicU64,
    kicked: AtomicBool,
    /// The cache this evictor serves; weak, so the thread does not keep it alive.
    core: Weak<dyn EvictAhead>,
    /// The thread, started by the first [`Evictor::keep_free`]; `None` if it could not be
    /// (the evictor is then off).
    thread: OnceLock<Option<Thread>>,
}

impl Evictor {
    pub(crate) fn new(core: Weak<dyn EvictAhead>) -> Self {
        Evictor {
            low: AtomicU64::new(0),
            kicked: AtomicBool::new(false),
            core,
            thread: OnceLock::new(),
        }
    }

    /// Keeps at least `bytes` free from now on (the largest of every call), starting the
    /// thread on the first call. Called by `Cache::map`, never on a miss: a transparent miss
    /// runs inside a signal handler, where creating a thread is not safe.
    pub(crate) fn keep_free(&self, bytes: u64) {
        let started = self.thread.get_or_init(|| {
            let weak = self.core.clone();
            std::thread::Builder::new()
                .name("ucache-evict".into())
                .spawn(move || run(weak))
                .ok()
                .map(|h| h.thread().clone())
        });
        // Out of threads: loaders evict for themselves, as without the evictor.
        if started.is_some() {
            self.low.fetch_max(bytes, Ordering::Relaxed);
        }
    }

    /// Bytes kept free, 0 if the evictor is off.
    #[inline]
    pub(crate) fn low(&self) -> u64 {
        self.low.load(Ordering::Relaxed)
    }

    /// Wakes the thread unless it is already awake. Only an atomic swap and a futex wake:
    /// safe inside the SIGBUS handler that serves transparent misses.
    pub(crate) fn kick(&self) {
        if self.kicked.load(Ordering::Relaxed) || self.kicked.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Some(Some(t)) = self.thread.get() {
            t.unpark();
        }
    }

    /// Bytes the thread frees once woken, 0 if it is off: the part of the budget a load that
    /// should stay whole (one prefetch call) must leave, or the thread would evict its start.
    pub(crate) fn ahead(&self) -> u64 {
        AHEAD * self.low()
    }

    /// Lets the thread exit: called when its cache is dropped.
    pub(crate) fn stop(&self) {
        if let Some(Some(t)) = self.thread.get() {
            t.unpark();
        }
    }
}

thread_local! {
    /// Set on an evictor's own thread, every eviction of which is made ahead of the loaders.
    static EVICTOR: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is a background evictor: its evictions count as
/// `evictions_ahead` where they happen, since the rounds it runs also set buffers aside.
pub(crate) fn on_evictor_thread() -> bool {
    EVICTOR.with(Cell::get)
}

fn run(core: Weak<dyn EvictAhead>) {
    EVICTOR.with(|e| e.set(true));
    loop {
        std::thread::park();
        // The strong reference lives only while the thread works, so the cache can drop.
        let Some(c) = core.upgrade() else { return };
        let ev = c.evictor();
        while ev.kicked.load(Ordering::SeqCst) {
            let low = ev.low();
            let mut freed = false;
            while c.short_of(AHEAD * low) {
                if c.evict_ahead() == 0 {
                    // Nothing evictable now (all pinned, or other evictors hold the
                    // candidates): loaders will evict or wait themselves, and kick again.
                    break;
                }
                freed = true;
            }
            ev.kicked.store(false, Ordering::SeqCst);
            // A loader that kicked while we worked saw `kicked` set and did not unpark us.
            if freed && c.short_of(low) && !ev.kicked.swap(true, Ordering::SeqCst) {
                continue;
            }
            break;
        }
    }
}
