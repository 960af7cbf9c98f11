//! The buffer state word: ucache's software page-table entry.
//!
//! Every buffer has one `AtomicU64`. All coordination between threads that touch the same buffer
//! (loaders, pinners, writers, evictors) happens through compare-and-swap on this word alone, so
//! there is no lock shared between buffers on the hit or the miss path.
//!
//! ```text
//!  63                         25 24  23  22  21  20  19..17  16  15..0
//! +-----------------------------+---+---+---+---+---+-------+---+------+
//! |          version            | W | WB| P | R | D | phase | X | pins |
//! +-----------------------------+---+---+---+---+---+-------+---+------+
//! ```
//!
//! - `pins`: shared pin count; `X`: exclusive pin.
//! - `phase`: [`Phase::Evicted`] → [`Phase::Loading`] → [`Phase::Cached`] → [`Phase::Evicting`]
//!   → [`Phase::Evicted`]; on transparent mappings also `Cached → Evicting → Aside`, then
//!   `Aside → Loading → Cached` (touched: restored without IO) or `Aside → Evicting → Evicted`. Exactly one thread wins each of the `Evicted → Loading` and
//!   `Cached → Evicting` CASes, and that thread alone moves the buffer on to the next phase.
//! - `D` dirty, `R` referenced (set by every pin, cleared by CLOCK-like policies), `P` loaded by
//!   a prefetch and not used yet, `WB` a write-back is in flight (it holds a shared pin so the
//!   data cannot change under the IO), `W` some thread is parked on this word.
//! - `version`: bumped on every exclusive unpin and every eviction, so an optimistic reader that
//!   saw the same version before and after its read knows the bytes it read were stable.
//!
//! The functions on [`Word`] are pure: they compute the next word or refuse. [`BufferState`]
//! applies them with CAS and wakes parked waiters when a transition clears `W`.

use std::sync::atomic::Ordering;

use crate::sync::{self, AtomicU64};

// The async `wait_change`, on `crate::wakers`' table of tasks.
#[cfg(feature = "tokio")]
mod changed;

/// Where a buffer is in its life cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Not resident; the memory behind it holds no data.
    Evicted = 0,
    /// One thread is reading it from the store; everyone else waits.
    Loading = 1,
    /// Resident and valid.
    Cached = 2,
    /// One thread is dropping its memory (or setting it aside); it cannot be cancelled any more.
    Evicting = 3,
    /// Resident, but its bytes wait in a slot and its pages are gone from the mapping
    /// (transparent mappings only), so the next access faults: the accessed bit userspace
    /// cannot read. A touch brings it back without IO; an eviction frees the slot.
    Aside = 4,
}

const PIN_MASK: u64 = 0xFFFF;
/// Most shared pins one buffer can carry at once (the CAS paths stop here). Half the field:
/// the hit path adds first and checks after, at any count, so the other half is headroom for
/// that many threads adding at the same instant before their adds are undone. With the limit
/// at the field's top, two such adds on a buffer at the limit carried into `X` (review,
/// 2026-11-25).
pub(crate) const MAX_PINS: u64 = 1 << 15;
/// Above this many pins, pins take the CAS path.
const FAST_PIN_LIMIT: u64 = 1 << 14;
const X: u64 = 1 << 16;
const PHASE_SHIFT: u32 = 17;
const PHASE_MASK: u64 = 0b111 << PHASE_SHIFT;
const DIRTY: u64 = 1 << 20;
const REFERENCED: u64 = 1 << 21;
const PREFETCHED: u64 = 1 << 22;
const WRITING: u64 = 1 << 23;
const WAITERS: u64 = 1 << 24;
const VERSION_SHIFT: u32 = 25;
const VERSION_ONE: u64 = 1 << VERSION_SHIFT;
const FLAGS_CLEARED_ON_EVICT: u64 = DIRTY | REFERENCED | PREFETCHED | WRITING;

/// A snapshot of one buffer's state word ([`crate::Mapping::state`],
/// [`crate::policy::Buffers::state`]): its phase, pins, flags and version, read-only. The pure
/// transition functions that compute the next word are the cache's own (crate-private), so a
/// program can read a word but never forge one into a buffer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Word(pub(crate) u64);

impl std::fmt::Debug for Word {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} pins={} x={} d={} r={} p={} wb={} w={} v={}",
            self.phase(),
            self.pins(),
            self.exclusive() as u8,
            self.dirty() as u8,
            self.referenced() as u8,
            self.prefetched() as u8,
            self.writing() as u8,
            self.has_waiters() as u8,
            self.version()
        )
    }
}

impl Word {
    #[cfg(test)]
    pub(crate) const EVICTED: Word = Word(0);

    #[inline]
    pub fn phase(self) -> Phase {
        match (self.0 & PHASE_MASK) >> PHASE_SHIFT {
            0 => Phase::Evicted,
            1 => Phase::Loading,
            2 => Phase::Cached,
            3 => Phase::Evicting,
            _ => Phase::Aside,
        }
    }
    #[inline]
    pub fn pins(self) -> u64 {
        self.0 & PIN_MASK
    }
    #[inline]
    pub fn exclusive(self) -> bool {
        self.0 & X != 0
    }
    #[inline]
    pub fn dirty(self) -> bool {
        self.0 & DIRTY != 0
    }
    #[inline]
    pub fn referenced(self) -> bool {
        self.0 & REFERENCED != 0
    }
    #[inline]
    pub fn prefetched(self) -> bool {
        self.0 & PREFETCHED != 0
    }
    #[inline]
    pub fn writing(self) -> bool {
        self.0 & WRITING != 0
    }
    #[inline]
    pub fn has_waiters(self) -> bool {
        self.0 & WAITERS != 0
    }
    #[inline]
    pub fn version(self) -> u64 {
        self.0 >> VERSION_SHIFT
    }
    /// Unpinned, not locked, not being written: nothing holds the buffer.
    #[inline]
    pub fn idle(self) -> bool {
        self.0 & (PIN_MASK | X | WRITING) == 0
    }

    #[inline]
    fn with_phase(self, p: Phase) -> Word {
        Word((self.0 & !PHASE_MASK) | ((p as u64) << PHASE_SHIFT))
    }
    #[inline]
    fn bump(self) -> Word {
        Word(self.0.wrapping_add(VERSION_ONE))
    }
    #[inline]
    fn without_waiters(self) -> Word {
        Word(self.0 & !WAITERS)
    }

    /// Shared pin of a cached buffer that no one holds exclusively.
    #[inline]
    pub(crate) fn pin_shared(self) -> Option<Word> {
        (self.phase() == Phase::Cached && !self.exclusive() && self.pins() < MAX_PINS)
            .then(|| Word((self.0 + 1) & !PREFETCHED | REFERENCED))
    }
    /// Drops one shared pin.
    #[inline]
    pub(crate) fn unpin_shared(self) -> Word {
        debug_assert!(self.pins() > 0, "unpin of unpinned buffer: {self:?}");
        Word(self.0 - 1)
    }
    /// Exclusive pin of a cached buffer that nobody else holds.
    #[inline]
    pub(crate) fn pin_exclusive(self) -> Option<Word> {
        (self.phase() == Phase::Cached && self.idle())
            .then_some(Word((self.0 | X | REFERENCED) & !PREFETCHED))
    }
    /// Drops the exclusive pin; a writer marks the buffer dirty. Bumps the version so optimistic
    /// readers of the old contents fail validation.
    #[inline]
    pub(crate) fn unpin_exclusive(self, dirty: bool) -> Word {
        debug_assert!(self.exclusive(), "exclusive unpin without X: {self:?}");
        let w = Word(self.0 & !X | if dirty { DIRTY } else { 0 });
        w.bump()
    }
    /// Marks an exclusively pinned buffer dirty before its unpin.
    #[inline]
    pub(crate) fn mark_dirty(self) -> Word {
        Word(self.0 | DIRTY)
    }
    /// A plain store hit a clean, write-protected page of a transparent mapping: take X for
    /// the moment it takes to lift the protection, and mark the buffer dirty. Refused while a
    /// write-back is in flight (its bytes must not change under the IO) or someone holds X.
    /// Shared pins may stay: plain stores are not excluded by them, only pins are.
    #[inline]
    pub(crate) fn begin_enable_write(self) -> Option<Word> {
        (self.phase() == Phase::Cached && !self.exclusive() && !self.writing())
            .then_some(Word(self.0 | X | DIRTY | REFERENCED))
    }
    /// The protection is lifted: drop the transient X. No version bump: the stores that follow
    /// are not covered by versions (optimistic readers of transparent mappings race with them
    /// as with any plain memory).
    #[inline]
    pub(crate) fn finish_enable_write(self) -> Word {
        debug_assert!(self.exclusive());
        Word(self.0 & !X)
    }
    /// Step one of insertion: the single winner of this CAS does the IO.
    #[inline]
    pub(crate) fn begin_load(self) -> Option<Word> {
        (self.phase() == Phase::Evicted && self.idle()).then(|| self.with_phase(Phase::Loading))
    }
    /// Step two of insertion: publish the loaded buffer, optionally pinned for the loader.
    #[inline]
    pub(crate) fn finish_load(self, pin: Pin, prefetched: bool) -> Word {
        debug_assert_eq!(self.phase(), Phase::Loading);
        let w = self.with_phase(Phase::Cached);
        let w = match pin {
            Pin::None => w,
            Pin::Shared => Word((w.0 + 1) | REFERENCED),
            Pin::Exclusive => Word(w.0 | X | REFERENCED),
        };
        if prefetched {
            // As new as a demand load, which is published pinned and so referenced: CLOCK
            // gives a readahead window the same first lap, instead of evicting it, unread,
            // before the buffers its reader has already used.
            Word(w.0 | PREFETCHED | REFERENCED)
        } else {
            w
        }
    }
    /// The load failed: back to evicted, with a new version.
    #[inline]
    pub(crate) fn abort_load(self) -> Word {
        debug_assert_eq!(self.phase(), Phase::Loading);
        self.with_phase(Phase::Evicted).bump()
    }
    /// Claims a clean, idle, cached (or set-aside) buffer for eviction or for setting aside. A
    /// pinned, locked or dirty buffer is refused: eviction is cancelled, never waited for.
    #[inline]
    pub(crate) fn begin_evict(self) -> Option<Word> {
        (matches!(self.phase(), Phase::Cached | Phase::Aside) && self.idle() && !self.dirty())
            .then(|| self.with_phase(Phase::Evicting))
    }
    /// The buffer is set aside: it waits for a touch or an eviction. Unreferenced: the touch
    /// that restores it sets the bit again.
    #[inline]
    pub(crate) fn finish_aside(self) -> Word {
        debug_assert_eq!(self.phase(), Phase::Evicting);
        Word(self.0 & !(REFERENCED | PREFETCHED)).with_phase(Phase::Aside)
    }
    /// A set-aside buffer was touched: the single winner of this CAS brings it back.
    #[inline]
    pub(crate) fn begin_restore(self) -> Option<Word> {
        (self.phase() == Phase::Aside && self.idle()).then(|| self.with_phase(Phase::Loading))
    }
    /// The memory is dropped: evicted, flags cleared, new version.
    #[inline]
    pub(crate) fn finish_evict(self) -> Word {
        debug_assert_eq!(self.phase(), Phase::Evicting);
        Word(self.0 & !FLAGS_CLEARED_ON_EVICT)
            .with_phase(Phase::Evicted)
            .bump()
    }
    /// Undoes a claim whose memory could not be dropped: the data is still there.
    #[inline]
    pub(crate) fn cancel_evict(self) -> Word {
        debug_assert_eq!(self.phase(), Phase::Evicting);
        self.with_phase(Phase::Cached)
    }
    /// Starts writing a dirty buffer back: holds a shared pin so no writer can change the bytes
    /// under the IO, clears dirty (a failed write sets it again), sets WB.
    #[inline]
    pub(crate) fn begin_writeback(self) -> Option<Word> {
        (self.phase() == Phase::Cached
            && self.dirty()
            && !self.exclusive()
            && !self.writing()
            && self.pins() < MAX_PINS)
            .then(|| Word((self.0 + 1) & !DIRTY | WRITING))
    }
    /// Ends a write-back: drops its pin and WB; a failed write leaves the buffer dirty.
    #[inline]
    pub(crate) fn finish_writeback(self, ok: bool) -> Word {
        debug_assert!(self.writing() && self.pins() > 0);
        Word((self.0 - 1) & !WRITING | if ok { 0 } else { DIRTY })
    }
    /// Sets the referenced bit of a cached buffer: an access without a pin (`ensure_cached`).
    #[inline]
    pub(crate) fn touch(self) -> Option<Word> {
        (self.phase() == Phase::Cached && !self.referenced()).then_some(Word(self.0 | REFERENCED))
    }
    /// Clears the referenced bit (CLOCK's second chance).
    #[inline]
    pub(crate) fn clear_referenced(self) -> Word {
        Word(self.0 & !REFERENCED)
    }
}

/// What pin the loader keeps when it publishes a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pin {
    None,
    Shared,
    Exclusive,
}

/// Spins before a waiter parks. A 4 KiB load from a fast device takes a few µs; a short spin
/// catches hand-offs that are about to happen without burning a core for a whole IO.
const SPINS: u32 = 64;

/// The atomic state word of one buffer.
#[repr(transparent)]
pub(crate) struct BufferState(AtomicU64);

impl Default for BufferState {
    fn default() -> Self {
        Self::new()
    }
}

impl BufferState {
    pub(crate) fn new() -> Self {
        BufferState(AtomicU64::new(0))
    }

    /// Starts fetching the word into the CPU cache: for loops that know which words they will
    /// read next (trace replay, a clock sweep) and would otherwise stall on each. Only a hint.
    #[inline]
    pub(crate) fn prefetch(&self) {
        crate::cache_line::prefetch(self);
    }

    #[inline]
    pub(crate) fn load(&self) -> Word {
        Word(self.0.load(Ordering::Acquire))
    }

    /// Moves from `old` to `new` if the word still equals `old`. Wakes parked waiters when
    /// `old` had some: every successful transition is a change they may be waiting for.
    #[inline]
    pub(crate) fn cas(&self, old: Word, new: Word) -> Result<(), Word> {
        let new = new.without_waiters();
        match self
            .0
            .compare_exchange(old.0, new.0, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                if old.has_waiters() {
                    self.wake();
                }
                Ok(())
            }
            Err(cur) => Err(Word(cur)),
        }
    }

    /// Sets the referenced bit of a cached buffer seen as `seen`, if it is clear: the one
    /// shared-memory write of an optimistic read, made only when a CLOCK-like sweep cleared the
    /// bit since the buffer's last access (as vmcache's optimistic latch clears an eviction
    /// mark). Without it a workload that only reads optimistically never references anything,
    /// and CLOCK degrades to FIFO: hot pages, a B+tree's inner nodes among them, are evicted
    /// in turn with cold ones. One try: if the word moved meanwhile, someone else accessed or
    /// changed the buffer, and a lost bit costs at most one more lap of the hand.
    #[inline]
    pub(crate) fn touch_if_unreferenced(&self, seen: Word) {
        if let Some(t) = seen.touch() {
            let _ = self.cas(seen, t);
        }
    }

    /// Applies `f` until it refuses (returns `None`) or the CAS succeeds.
    #[inline]
    pub(crate) fn update(&self, mut f: impl FnMut(Word) -> Option<Word>) -> Result<Word, Word> {
        let mut cur = self.load();
        loop {
            let Some(new) = f(cur) else { return Err(cur) };
            match self.cas(cur, new) {
                Ok(()) => return Ok(new),
                Err(seen) => cur = seen,
            }
        }
    }

    /// Replaces the word without a CAS. Only for an owner no other thread can race with (the
    /// single-threaded policy simulator); everything shared goes through [`BufferState::cas`].
    #[inline]
    pub(crate) fn store_exclusive(&self, w: Word) {
        self.0.store(w.0, Ordering::Relaxed);
    }

    /// The hit path's shared pin: one atomic add instead of a load + CAS. An add that finds
    /// the buffer not pinnable (not cached, locked, or near the pin limit) is undone at once;
    /// meanwhile the transient pin only makes other transitions (claims, exclusive pins) fail or
    /// wait, which they handle anyway. Returns the word before the pin; the referenced bit is
    /// set and the prefetched bit cleared afterwards, by the rare pin that finds them stale.
    #[inline]
    pub(crate) fn pin_shared_fast(&self) -> Option<Word> {
        let old = Word(self.0.fetch_add(1, Ordering::Acquire));
        if old.phase() == Phase::Cached && !old.exclusive() && old.pins() < FAST_PIN_LIMIT {
            if !old.referenced() {
                self.0.fetch_or(REFERENCED, Ordering::Relaxed);
            }
            if old.prefetched() {
                let before = Word(self.0.fetch_and(!PREFETCHED, Ordering::Relaxed));
                if !before.prefetched() {
                    // Another pin already claimed the first use.
                    return Some(Word(old.0 & !PREFETCHED));
                }
            }
            return Some(old);
        }
        self.unpin_shared();
        None
    }

    /// Clears the prefetched bit; returns whether it was set (this caller has the first use
    /// of a prefetched buffer). For readers that use a buffer without pinning it.
    #[inline]
    pub(crate) fn take_prefetched(&self) -> bool {
        Word(self.0.fetch_and(!PREFETCHED, Ordering::Relaxed)).prefetched()
    }

    /// Drops a shared pin with one atomic subtraction (the hit path's unpin).
    #[inline]
    pub(crate) fn unpin_shared(&self) {
        let old = Word(self.0.fetch_sub(1, Ordering::Release));
        debug_assert!(old.pins() > 0, "unpin of unpinned buffer: {old:?}");
        if old.has_waiters() {
            self.0.fetch_and(!WAITERS, Ordering::AcqRel);
            self.wake();
        }
    }

    /// Waits until the word is no longer `seen`: spins briefly, then parks on this word alone.
    pub(crate) fn wait_change(&self, seen: Word) {
        for i in 0..SPINS {
            if self.load() != seen {
                return;
            }
            if i < SPINS / 2 && sync::CAN_PARK {
                std::hint::spin_loop();
            } else {
                sync::yield_now();
            }
        }
        if !sync::CAN_PARK {
            return;
        }
        if !self.mark_waiters(seen) {
            return;
        }
        let marked = Word(seen.0 | WAITERS);
        let key = self.key();
        // SAFETY: `park` requires that validate and before_sleep do not panic or call park
        // themselves; ours only load an atomic. The key is this word's address, which lives as
        // long as the mapping, and any thread that clears WAITERS calls `unpark_all` on it.
        unsafe {
            parking_lot_core::park(
                key,
                || self.0.load(Ordering::Acquire) == marked.0,
                || {},
                |_, _| {},
                parking_lot_core::DEFAULT_PARK_TOKEN,
                None,
            );
        }
    }

    /// Sets `W` on a word that is still `seen`, before its waiter sleeps: false if the word
    /// has changed since (the waiter looks again instead). Whoever clears `W` wakes it.
    pub(crate) fn mark_waiters(&self, seen: Word) -> bool {
        if seen.has_waiters() {
            return self.load() == seen;
        }
        let marked = Word(seen.0 | WAITERS);
        match self
            .0
            .compare_exchange(seen.0, marked.0, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            // Another waiter marked it first: unchanged all the same.
            Err(cur) => cur == marked.0,
        }
    }

    /// Whether the word is `seen` still, but for `W` (a waiter marking it is no change).
    #[cfg(feature = "tokio")]
    fn unchanged(&self, seen: Word) -> bool {
        (self.0.load(Ordering::Acquire) | WAITERS) == (seen.0 | WAITERS)
    }

    #[cold]
    fn wake(&self) {
        // SAFETY: the key is this word's address; unpark_all only touches parking_lot's queues.
        unsafe {
            parking_lot_core::unpark_all(self.key(), parking_lot_core::DEFAULT_UNPARK_TOKEN);
        }
        // Tasks waiting on the word (the async API) under the same key.
        #[cfg(feature = "tokio")]
        crate::wakers::wake(self.key());
    }

    pub(crate) fn key(&self) -> usize {
        &self.0 as *const AtomicU64 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pin_shared_fast` adds 1 to the word unconditionally and only then looks at the pin
    /// count. With `MAX_PINS` at the field's top (0xFFFE), two racing fast pins on a buffer
    /// holding that many carried into `X`: the word read "0 pins, exclusively held". `MAX_PINS`
    /// now leaves half the field as headroom for such adds. (Moved from tests/protocol_edges.rs:
    /// the word's transitions are crate-private. It spins four OS threads for up to 10 s of the
    /// clock: for the hardware and TSan, not the model checker's atomics nor Miri.)
    #[test]
    #[cfg(not(feature = "shuttle"))]
    #[cfg_attr(miri, ignore)]
    fn fast_pin_blind_adds_never_carry_out_of_the_pin_field_at_max_pins() {
        use std::panic::{catch_unwind, AssertUnwindSafe};
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        {
            let s = Arc::new(BufferState::new());
            let cached = Word::EVICTED
                .begin_load()
                .unwrap()
                .finish_load(Pin::None, false);
            s.cas(Word::EVICTED, cached).unwrap();
            // MAX_PINS shared pins, each taken through the CAS path as `pin_shared` allows.
            let mut w = s.load();
            while let Some(n) = w.pin_shared() {
                s.cas(w, n).unwrap();
                w = n;
            }
            assert_eq!(s.load().pins(), MAX_PINS);

            let stop = Arc::new(AtomicBool::new(false));
            let carried = Arc::new(AtomicU64::new(0));
            let asserts = Arc::new(AtomicU64::new(0));
            let pinners: Vec<_> = (0..4)
                .map(|_| {
                    let (s, stop, asserts) = (s.clone(), stop.clone(), asserts.clone());
                    std::thread::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            // Refused (over FAST_PIN_LIMIT) and undone at once.
                            match catch_unwind(AssertUnwindSafe(|| s.pin_shared_fast())) {
                                Ok(r) => assert!(r.is_none(), "fast pin over the limit succeeded"),
                                Err(_) => {
                                    asserts.fetch_add(1, Ordering::Relaxed);
                                    stop.store(true, Ordering::Relaxed);
                                }
                            }
                        }
                    })
                })
                .collect();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(10) && carried.load(Ordering::Relaxed) == 0 {
                let w = s.load();
                if w.exclusive() || w.pins() < MAX_PINS {
                    eprintln!("carried into X: {w:?}");
                    carried.fetch_add(1, Ordering::Relaxed);
                }
                if asserts.load(Ordering::Relaxed) > 0 {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            pinners.into_iter().for_each(|t| t.join().unwrap());
            // Once the transient adds are gone the count is whole again.
            let end = s.load();
            assert_eq!((end.pins(), end.exclusive()), (MAX_PINS, false));
            assert!(
                carried.load(Ordering::Relaxed) == 0 && asserts.load(Ordering::Relaxed) == 0,
                "concurrent fast-pin adds carried out of the pin field into X: seen {} times, \
                 'unpin of unpinned buffer' asserted {} times",
                carried.load(Ordering::Relaxed),
                asserts.load(Ordering::Relaxed)
            );
        }
    }

    #[test]
    fn load_publish_pin_unpin() {
        let w = Word::EVICTED;
        assert_eq!(w.pin_shared(), None, "cannot pin an evicted buffer");
        let l = w.begin_load().unwrap();
        assert_eq!(l.phase(), Phase::Loading);
        assert_eq!(l.begin_load(), None, "only one loader");
        assert_eq!(l.pin_shared(), None, "cannot pin while loading");
        let c = l.finish_load(Pin::Shared, false);
        assert_eq!(
            (c.phase(), c.pins(), c.referenced()),
            (Phase::Cached, 1, true)
        );
        let c2 = c.pin_shared().unwrap();
        assert_eq!(c2.pins(), 2);
        assert_eq!(c2.pin_exclusive(), None, "exclusive waits for shared pins");
        assert_eq!(c2.begin_evict(), None, "pinned buffers are not evicted");
        let c0 = c2.unpin_shared().unpin_shared();
        assert_eq!(c0.pins(), 0);
        assert_eq!(
            c0.version(),
            c.version(),
            "shared pins do not change the version"
        );
    }

    #[test]
    fn aside_is_restored_once_or_evicted() {
        let c = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::Shared, false)
            .unpin_shared();
        assert!(c.referenced());
        let a = c.begin_evict().unwrap().finish_aside();
        assert_eq!(a.phase(), Phase::Aside);
        assert!(!a.referenced(), "a touch must be what sets the bit again");
        assert_eq!(a.pin_shared(), None, "pins restore first");
        assert_eq!(a.pin_exclusive(), None);
        assert_eq!(a.begin_load(), None, "no IO for a set-aside buffer");
        assert_eq!(a.begin_writeback(), None);
        let r = a.begin_restore().unwrap();
        assert_eq!(r.phase(), Phase::Loading);
        assert_eq!(r.begin_restore(), None, "one restorer");
        assert_eq!(r.begin_evict(), None);
        let back = r.finish_load(Pin::None, false);
        assert_eq!(back.phase(), Phase::Cached);
        assert_eq!(back.version(), c.version(), "the data did not change");
        let e = a.begin_evict().unwrap();
        assert_eq!(
            e.begin_restore(),
            None,
            "an evicting buffer is not restored"
        );
        assert_eq!(e.finish_evict().phase(), Phase::Evicted);
        assert!(c.pin_exclusive().unwrap().begin_restore().is_none());
    }

    #[test]
    fn exclusive_bumps_version_and_dirties() {
        let c = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::None, false);
        let x = c.pin_exclusive().unwrap();
        assert!(x.exclusive());
        assert_eq!(x.pin_shared(), None);
        assert_eq!(x.pin_exclusive(), None);
        let u = x.unpin_exclusive(true);
        assert!(!u.exclusive() && u.dirty());
        assert_eq!(u.version(), c.version() + 1);
        assert_eq!(
            u.begin_evict(),
            None,
            "dirty buffers are written back before eviction"
        );
    }

    #[test]
    fn writeback_holds_a_pin_and_restores_dirty_on_failure() {
        let d = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::Exclusive, false)
            .unpin_exclusive(true);
        let wb = d.begin_writeback().unwrap();
        assert!(wb.writing() && !wb.dirty() && wb.pins() == 1);
        assert_eq!(wb.begin_writeback(), None, "one write-back at a time");
        assert_eq!(wb.pin_exclusive(), None, "no writer during write-back");
        assert!(
            wb.pin_shared().is_some(),
            "readers proceed during write-back"
        );
        let failed = wb.finish_writeback(false);
        assert!(failed.dirty() && !failed.writing() && failed.pins() == 0);
        let ok = failed.begin_writeback().unwrap().finish_writeback(true);
        assert!(!ok.dirty());
        assert!(ok.begin_evict().is_some());
    }

    #[test]
    fn eviction_cycle_bumps_version_and_clears_flags() {
        let c = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::None, true);
        assert!(c.prefetched());
        let e = c.begin_evict().unwrap();
        assert_eq!(e.phase(), Phase::Evicting);
        assert_eq!(e.pin_shared(), None);
        assert_eq!(e.begin_load(), None);
        let ev = e.finish_evict();
        assert_eq!(ev.phase(), Phase::Evicted);
        assert!(!ev.prefetched() && !ev.referenced() && !ev.dirty());
        assert_eq!(ev.version(), c.version() + 1);
        assert!(ev.begin_load().is_some());
    }

    #[test]
    fn aborted_load_returns_to_evicted() {
        let l = Word::EVICTED.begin_load().unwrap();
        let a = l.abort_load();
        assert_eq!(a.phase(), Phase::Evicted);
        assert_eq!(a.version(), 1);
    }

    #[test]
    fn enable_write_marks_dirty_and_excludes_writeback_and_eviction() {
        let c = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::Shared, false);
        let e = c.begin_enable_write().unwrap();
        assert!(e.dirty() && e.exclusive() && e.pins() == 1);
        assert!(e.begin_writeback().is_none() && e.begin_evict().is_none());
        assert!(e.pin_shared().is_none() && e.begin_enable_write().is_none());
        let done = e.finish_enable_write();
        assert!(done.dirty() && !done.exclusive() && done.version() == c.version());
        let wb = done.begin_writeback().unwrap();
        assert!(
            wb.begin_enable_write().is_none(),
            "waits for the write-back"
        );
        assert!(Word::EVICTED.begin_enable_write().is_none());
    }

    #[test]
    fn pin_clears_prefetched_and_sets_referenced() {
        let c = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::None, true);
        let p = c.pin_shared().unwrap();
        assert!(!p.prefetched() && p.referenced());
        assert!(!p.clear_referenced().referenced());
    }

    #[test]
    fn pin_count_saturates() {
        let mut w = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::None, false);
        for _ in 0..MAX_PINS {
            w = w.pin_shared().unwrap();
        }
        assert_eq!(w.pin_shared(), None);
        assert_eq!(w.phase(), Phase::Cached);
    }

    #[test]
    fn fast_pin_only_succeeds_on_cached_unlocked_buffers() {
        let s = BufferState::new();
        assert!(s.pin_shared_fast().is_none(), "evicted");
        assert_eq!(s.load(), Word::EVICTED, "a refused fast pin is undone");
        s.cas(
            Word::EVICTED,
            Word::EVICTED
                .begin_load()
                .unwrap()
                .finish_load(Pin::Exclusive, true),
        )
        .unwrap();
        assert!(s.pin_shared_fast().is_none(), "exclusively held");
        let x = s.load();
        s.cas(x, x.unpin_exclusive(false)).unwrap();
        let before = s.pin_shared_fast().unwrap();
        assert!(
            before.prefetched(),
            "the first pin learns it used a prefetch"
        );
        let w = s.load();
        assert!(w.referenced() && !w.prefetched() && w.pins() == 1);
        assert!(
            !s.pin_shared_fast().unwrap().prefetched(),
            "only the first pin counts it"
        );
        s.unpin_shared();
        s.unpin_shared();
        assert_eq!(s.load().pins(), 0);
    }

    #[test]
    fn waiters_are_woken_by_a_transition() {
        let s = std::sync::Arc::new(BufferState::new());
        let l = Word::EVICTED.begin_load().unwrap();
        s.cas(Word::EVICTED, l).unwrap();
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            let mut w = s2.load();
            while w.phase() == Phase::Loading {
                s2.wait_change(w);
                w = s2.load();
            }
            w.phase()
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        let cur = s.load();
        s.cas(cur, cur.finish_load(Pin::None, false)).unwrap();
        assert_eq!(t.join().unwrap(), Phase::Cached);
        assert!(!s.load().has_waiters());
    }
}
