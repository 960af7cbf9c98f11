//! Pins: the hit path (one atomic add on the state word) and the miss path (one thread
//! claims the buffer, reads it into place and publishes it; the others wait on its word
//! alone), plus the optimistic read that validates a version instead of pinning.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::claim::LoadClaim;
use super::MappingCore;
use crate::error::{Error, Result};
use crate::guard::{ExclusiveGuard, OptimisticView, SharedGuard};
use crate::policy::prefetch::Prefetcher;
use crate::state::{BufferState, Phase, Pin, Word};
use crate::stats::Counter;
use crate::stopwatch::Stopwatch;

/// What a pin must do next after [`MappingCore::pin_step`] (the word it saw, where it is not
/// done).
pub(super) enum Step {
    /// The pin is taken (or, for `Pin::None`, the buffer is cached).
    Pinned,
    /// The buffer is evicted and idle: try to claim and load it.
    Load(Word),
    /// The buffer is set aside and idle: try to bring it back.
    Restore(Word),
    /// Another thread moves the buffer (loads, evicts, writes or holds it): wait for a change.
    Wait(Word),
}

impl MappingCore {
    pub(crate) fn pin_shared(self: &Arc<Self>, i: u64) -> Result<SharedGuard<'_>> {
        self.pin_shared_with(i, true)
    }

    /// [`MappingCore::pin_shared`]; `read_ahead`: a miss may start the mapping's readahead
    /// (not for a caller that reads ahead itself, as the landing iterator does).
    pub(super) fn pin_shared_with(
        self: &Arc<Self>,
        i: u64,
        read_ahead: bool,
    ) -> Result<SharedGuard<'_>> {
        let s = self.slot(i)?;
        self.pin(s, i, Pin::Shared, read_ahead)?;
        // SAFETY: we hold a shared pin: the buffer is Cached and nobody writes it until unpin.
        Ok(unsafe { SharedGuard::new(self.state(i), i, self.ptr(i), self.valid(i)) })
    }

    /// Pins buffer `i` shared if it is cached and free of an exclusive pin now; never waits
    /// and never loads. For callers that hold claims of their own and so must not wait.
    pub(super) fn try_pin_shared(self: &Arc<Self>, i: u64) -> Option<SharedGuard<'_>> {
        let s = self.state(i);
        let mut w = s.load();
        loop {
            match s.cas(w, w.pin_shared()?) {
                Ok(()) => break,
                Err(cur) => w = cur,
            }
        }
        self.count_access(Counter::Hits, 1);
        self.on_hit(i, w);
        // SAFETY: we hold a shared pin: the buffer is Cached and nobody writes it until unpin.
        Some(unsafe { SharedGuard::new(self.state(i), i, self.ptr(i), self.valid(i)) })
    }

    pub(crate) fn pin_exclusive(self: &Arc<Self>, i: u64) -> Result<ExclusiveGuard<'_>> {
        let s = self.slot(i)?;
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        self.pin(s, i, Pin::Exclusive, true)?;
        self.exclusive_guard(i)
    }

    /// Lifts the write protection of a clean buffer just pinned exclusively, and marks it
    /// dirty. With handler threads, the holder's writes through its guard would fault to a
    /// thread that cannot tell the holder from any other writer, and so would wait for the pin
    /// to be released: the holder would wait on itself. The faulting thread itself can tell
    /// (`crate::held`), so the default mode lifts the protection only on a write.
    #[cold]
    pub(super) fn open_for_holder(&self, s: &BufferState, i: u64) -> Result<()> {
        if s.load().dirty() {
            return Ok(());
        }
        if let Err(e) = self
            .home
            .protect((i << self.shift) as usize, self.bs, false)
        {
            let r = s.update(|w| Some(w.unpin_exclusive(false)));
            debug_assert!(r.is_ok());
            return Err(e);
        }
        // We hold X, so no write-back can begin before the bit is set.
        let r = s.update(|w| Some(w.mark_dirty()));
        debug_assert!(r.is_ok());
        Ok(())
    }

    /// Pins buffer `i`, loading it if needed. The heart of the hit and miss paths.
    #[inline]
    fn pin(self: &Arc<Self>, s: &BufferState, i: u64, pin: Pin, read_ahead: bool) -> Result<()> {
        self.prefetch_home(i);
        if pin == Pin::Shared && self.pin_hit(s, i) {
            return Ok(());
        }
        let mut waited = false;
        loop {
            match self.pin_step(s, i, pin, waited) {
                Step::Pinned => return Ok(()),
                Step::Load(w) => {
                    if self.load_one(i, w, pin, false, &mut Stopwatch::new(false))? {
                        if read_ahead {
                            self.after_miss(i);
                        }
                        return Ok(());
                    }
                }
                Step::Restore(w) => {
                    if self.restore(i, w, pin, false, &mut Stopwatch::new(false))? {
                        return Ok(());
                    }
                }
                Step::Wait(w) => {
                    self.self_wait(i)?;
                    waited = true;
                    s.wait_change(w);
                }
            }
        }
    }

    /// The hit path of a shared pin: one atomic add, and the hit's hooks.
    #[inline]
    pub(super) fn pin_hit(&self, s: &BufferState, i: u64) -> bool {
        match s.pin_shared_fast() {
            Some(old) => {
                self.count_access(Counter::Hits, 1);
                self.on_hit(i, old);
                true
            }
            None => false,
        }
    }

    /// One look at buffer `i`'s word for a pin (`Pin::None`: for the buffer to be cached):
    /// takes the pin if it can be had now, else says what the caller must do next. The loop
    /// around it is the blocking pin's or the async pin's (`pin_async.rs`); `waited` counts a
    /// pin taken after a wait as a wait, not a hit.
    pub(super) fn pin_step(&self, s: &BufferState, i: u64, pin: Pin, waited: bool) -> Step {
        let mut w = s.load();
        loop {
            let next = match pin {
                Pin::Shared => w.pin_shared(),
                Pin::Exclusive => w.pin_exclusive(),
                // Cached is all the caller wants: nothing to take.
                Pin::None if w.phase() == Phase::Cached => {
                    self.note_unpinned_hit(s, i);
                    self.count_access(Counter::Hits, 1);
                    return Step::Pinned;
                }
                Pin::None => None,
            };
            if let Some(n) = next {
                match s.cas(w, n) {
                    Ok(()) => {
                        let c = if waited {
                            Counter::Waits
                        } else {
                            Counter::Hits
                        };
                        self.count_access(c, 1);
                        self.on_hit(i, w);
                        return Step::Pinned;
                    }
                    Err(cur) => {
                        w = cur;
                        continue;
                    }
                }
            }
            return if w.phase() == Phase::Evicted && w.idle() {
                Step::Load(w)
            } else if w.phase() == Phase::Aside && w.idle() {
                Step::Restore(w)
            } else {
                Step::Wait(w)
            };
        }
    }

    /// The hooks of a pin that found the buffer cached (`old` is the word before the pin).
    #[inline]
    fn on_hit(&self, i: u64, old: Word) {
        if old.prefetched() {
            self.stats().add(Counter::PrefetchUsed, 1);
        }
        if self.policy_hits {
            self.policy.on_hit(i);
        }
    }

    /// Tries to become the loader of buffer `i` (seen as `seen`) and load it, keeping `pin`;
    /// `dirty` publishes it dirty and writable (a transparent write miss). Returns false if
    /// another thread won the claim. `sw` times the phases of a fault.
    pub(super) fn load_one(
        &self,
        i: u64,
        seen: Word,
        pin: Pin,
        dirty: bool,
        sw: &mut Stopwatch,
    ) -> Result<bool> {
        let Some(mut claim) = self.claim_load(i, seen) else {
            return Ok(false);
        };
        sw.skip();
        self.policy.on_miss(i);
        // The miss's latency starts here: making room is part of what the caller waits for.
        let t0 = sw
            .lap(self.stats(), Counter::FaultBookkeepingNs)
            .unwrap_or_else(Instant::now);
        claim.take_room(true)?;
        sw.lap(self.stats(), Counter::FaultEvictNs);
        // A readahead marker's bytes were read with its window (counted then).
        let read = !self.install_kept(&mut claim, seen, dirty)?;
        if read {
            claim.fill(dirty, sw)?;
        }
        self.publish_miss(claim, pin, dirty, read, sw.since(t0));
        sw.lap(self.stats(), Counter::FaultBookkeepingNs);
        Ok(true)
    }

    /// The end of a demand miss, blocking or async: counted (its bytes if `read` from the
    /// store now), then published holding `pin`.
    pub(super) fn publish_miss(
        &self,
        claim: LoadClaim<'_>,
        pin: Pin,
        dirty: bool,
        read: bool,
        latency: std::time::Duration,
    ) {
        self.stats().record_miss_latency(latency);
        self.count_access(Counter::Misses, 1);
        if read {
            self.stats().add(Counter::BytesRead, self.bs as u64);
        }
        claim.publish(pin, false, dirty);
    }

    pub(super) fn check_read(&self, i: u64, got: io::Result<usize>) -> Result<()> {
        let off = self.object_offset(i);
        match got {
            Ok(n) if n >= self.valid(i) => Ok(()),
            Ok(n) => Err(Error::ShortIo {
                op: "read",
                object: self.object.name().to_string(),
                offset: off,
                got: n,
                want: self.valid(i),
            }),
            Err(e) => Err(Error::io("read", self.object.name(), off, e)),
        }
    }

    /// The prefetch hook after a demand miss.
    pub(super) fn after_miss(self: &Arc<Self>, i: u64) {
        if !self.prefetching {
            return;
        }
        let mut want = Vec::new();
        match &self.readahead {
            Some(ra) => ra.on_miss(i, &mut want),
            None => self.policy.choose_prefetch_buffers(i, &mut want),
        }
        want.retain(|&j| j < self.buffers());
        if let Some(kept) = &self.kept {
            kept.read_with_window(&mut want);
        }
        if !want.is_empty() {
            let _ = MappingCore::prefetch_on(self, &want, self.readahead_inline);
        }
    }

    pub(crate) fn read_optimistic<R>(
        self: &Arc<Self>,
        i: u64,
        mut f: impl FnMut(&OptimisticView<'_>) -> R,
    ) -> Result<R> {
        let s = self.slot(i)?;
        let valid = self.valid(i);
        let mut loaded = false;
        loop {
            let w = s.load();
            if w.phase() == Phase::Cached && !w.exclusive() {
                // After the word: on a pool mapping the frame is the one this version lives
                // in (or, if the buffer moved since, a frame the version check will reject).
                let ptr = self.ptr(i);
                crate::sync::model_switch_point();
                // SAFETY: the view only performs reads; their results are discarded unless the
                // version check below proves the buffer was neither evicted nor written.
                let view = unsafe { OptimisticView::new(ptr, valid) };
                let r = f(&view);
                crate::sync::fence(Ordering::Acquire);
                let v = s.load();
                if v.phase() == Phase::Cached && !v.exclusive() && v.version() == w.version() {
                    if !loaded {
                        self.count_access(Counter::Hits, 1);
                        s.touch_if_unreferenced(v);
                    }
                    if v.prefetched() && s.take_prefetched() {
                        self.stats().add(Counter::PrefetchUsed, 1);
                    }
                    return Ok(r);
                }
                continue;
            }
            // Not readable optimistically: load it (or wait for the writer) with a pin, which
            // counts the access as a miss or a hit itself.
            drop(self.pin_shared(i)?);
            loaded = true;
        }
    }
}
