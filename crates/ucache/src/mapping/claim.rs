//! The load claim: a buffer won `Evicted → Loading` by CAS, as a guard.
//!
//! Every load (a pin's miss, a batch, a stream, a prefetch on the IO threads, a transparent
//! fault) runs the same sequence: claim → take room → fill → publish, or undo. The guard
//! makes the undo impossible to forget: dropped without [`LoadClaim::publish`], it gives back
//! the buffer's memory and room ([`MappingCore::give_room`]), counts a read failure if a read
//! had begun, and moves the word back to `Evicted`, waking whoever waits on it.
//!
//! A claim travels between threads (to the IO workers, through a store's stream) as its bare
//! index: [`LoadClaim::into_raw`] and [`LoadClaim::adopt`].

use super::MappingCore;
use crate::error::Result;
use crate::state::{Pin, Word};
use crate::stats::Counter;
use crate::stopwatch::Stopwatch;

#[must_use = "a claim dropped unpublished undoes the load"]
pub(super) struct LoadClaim<'a> {
    m: &'a MappingCore,
    i: u64,
    /// Room (budget, or a frame) is taken.
    room: bool,
    /// A read or install may have put bytes into the buffer's memory.
    filled: bool,
}

impl MappingCore {
    /// Claims buffer `i`, seen as `seen`, for loading: `None` if it is not evicted and idle,
    /// or another thread won the CAS.
    pub(super) fn claim_load(&self, i: u64, seen: Word) -> Option<LoadClaim<'_>> {
        let l = seen.begin_load()?;
        self.state(i).cas(seen, l).ok()?;
        Some(LoadClaim {
            m: self,
            i,
            room: false,
            filled: false,
        })
    }
}

impl<'a> LoadClaim<'a> {
    /// Takes back a claim handed over with [`LoadClaim::into_raw`], its room taken and its
    /// read begun (a failure drops the buffer's memory and counts a read failure).
    ///
    /// # Safety
    /// Buffer `i` of `m` is `Loading`, claimed with room taken by a [`LoadClaim`] turned into
    /// its index, and the caller is the only one to adopt it.
    pub(super) unsafe fn adopt(m: &'a MappingCore, i: u64) -> LoadClaim<'a> {
        LoadClaim {
            m,
            i,
            room: true,
            filled: true,
        }
    }

    pub(super) fn index(&self) -> u64 {
        self.i
    }

    /// Takes room for the buffer (see [`MappingCore::take_room`]): `Ok(false)` if `wait` is
    /// false and none could be had now. Claim first, room second: a thread that saw the
    /// buffer evicted a moment ago must not evict others for a load it does not make.
    pub(super) fn take_room(&mut self, wait: bool) -> Result<bool> {
        debug_assert!(!self.room);
        self.room = self.m.take_room(self.i, wait)?;
        Ok(self.room)
    }

    /// Where a read of the buffer goes when it goes straight into its home (an in-place
    /// mapping that is not transparent, or a pool mapping): from here on, a failure drops
    /// whatever bytes landed there.
    pub(super) fn dest(&mut self) -> *mut u8 {
        debug_assert!(self.room && !self.m.home.is_transparent());
        self.filled = true;
        self.m.ptr(self.i)
    }

    /// Notes that bytes may have landed in the buffer's memory (an install that failed part
    /// way): a failure drops them.
    pub(super) fn mark_filled(&mut self) {
        self.filled = true;
    }

    /// Notes that nothing reached the buffer's memory after all (a readahead marker whose
    /// bytes were kept aside, `marker.rs`): the undo gives back its room only.
    pub(super) fn mark_unfilled(&mut self) {
        self.filled = false;
    }

    /// Reads the buffer from the store into its home ([`MappingCore::fill`]).
    pub(super) fn fill(&mut self, writable: bool, sw: &mut Stopwatch) -> Result<()> {
        self.m.fill(self.i, writable, &mut self.filled, sw)
    }

    /// Fills the buffer from bytes already read (an async miss's), as
    /// [`MappingCore::fill_with`]: `got` is what [`crate::store::Object::read_owned`] returned.
    #[cfg(feature = "tokio")]
    pub(super) fn fill_from(&mut self, got: std::io::Result<Vec<u8>>) -> Result<()> {
        let copy = |buf: &mut [u8]| {
            let v = got?;
            let n = v.len().min(buf.len());
            buf[..n].copy_from_slice(&v[..n]);
            Ok(v.len())
        };
        self.m.fill_with(
            self.i,
            false,
            &mut self.filled,
            &mut Stopwatch::new(false),
            copy,
        )
    }

    /// Makes the buffer resident as zeros, without a read ([`MappingCore::fill_zeros`]).
    pub(super) fn fill_zeros(&mut self, writable: bool) -> Result<()> {
        self.m.fill_zeros(self.i, writable, &mut self.filled)
    }

    /// `Loading → Cached`, holding `pin`; `dirty` publishes it dirty (a transparent write
    /// miss). The policy learns of the buffer while we still own it.
    pub(super) fn publish(self, pin: Pin, prefetched: bool, dirty: bool) {
        self.publish_with(true, |w| {
            let c = w.finish_load(pin, prefetched);
            if dirty {
                c.mark_dirty()
            } else {
                c
            }
        })
    }

    /// `Loading → f(word)`; `insert` tells the policy of the insert first (not for a
    /// set-aside buffer coming back, which the policy never let go of).
    pub(super) fn publish_with(self, insert: bool, f: impl Fn(Word) -> Word) {
        if insert {
            self.m.policy.on_insert(self.i);
        }
        let r = self.m.state(self.i).update(|w| Some(f(w)));
        debug_assert!(r.is_ok());
        std::mem::forget(self);
    }

    /// The claim as its bare index, to hand to another thread, which adopts it.
    pub(super) fn into_raw(self) -> u64 {
        let i = self.i;
        std::mem::forget(self);
        i
    }
}

impl Drop for LoadClaim<'_> {
    /// The undo: `Loading → Evicted`, memory and room given back, a failed read counted.
    fn drop(&mut self) {
        let m = self.m;
        if self.room {
            m.give_room(self.i, self.filled);
            if self.filled {
                m.stats().add(Counter::ReadFailures, 1);
            }
        }
        let r = m.state(self.i).update(|w| Some(w.abort_load()));
        debug_assert!(r.is_ok());
    }
}
