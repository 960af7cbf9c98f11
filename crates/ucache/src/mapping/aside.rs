//! Access information for transparent mappings: eviction candidates are set aside before they
//! are dropped.
//!
//! Plain loads and stores of a cached buffer never reach ucache, and userspace cannot read
//! the hardware accessed bit, so a CLOCK-like policy on a transparent mapping would see no
//! accesses at all and degrade to FIFO. Instead, a buffer the policy picks is first *set
//! aside*: its pages move (`UFFDIO_MOVE`, no copy) into a shadow range, so the next access to
//! it faults. A touch brings it back without IO and sets its referenced bit, as a pin would; a
//! buffer still aside when its turn in the queue comes is evicted. It is the second chance of
//! CLOCK, with the fault standing in for the accessed bit (the soft faults Linux itself once
//! used on architectures without one).
//!
//! The queue holds about an eighth of the mapping's resident buffers: long enough for a buffer
//! in use to be touched before its turn, short enough that few accesses pay the soft fault.
//! Only clean buffers are set aside; dirty candidates are written back and evicted as before.

use std::collections::VecDeque;

use parking_lot::Mutex;

use super::MappingCore;
use crate::error::Result;
use crate::policy::Buffers;
use crate::state::{Phase, Pin, Word};
use crate::stats::Counter;
use std::sync::atomic::Ordering;

/// The set-aside window is this fraction of the mapping's resident buffers.
const WINDOW_FRACTION: u64 = 8;

/// The set-aside buffers of one mapping, oldest first. A buffer restored and set aside again
/// appears twice; the stale entry is skipped when popped (its word is no longer `Aside`, or it
/// is and leaves a little early, which only costs it part of its second chance).
#[derive(Default)]
pub(super) struct AsideQueue {
    queue: Mutex<VecDeque<u64>>,
}

impl AsideQueue {
    fn len(&self) -> u64 {
        self.queue.lock().len() as u64
    }

    fn pop(&self, n: usize) -> Vec<u64> {
        let mut q = self.queue.lock();
        let n = n.min(q.len());
        q.drain(..n).collect()
    }

    fn push(&self, v: &[u64]) {
        self.queue.lock().extend(v);
    }
}

impl MappingCore {
    /// One eviction round with second chances: evicts buffers that stayed aside a whole
    /// window, then sets the policy's next candidates aside. Until the window has filled (and
    /// whenever every aside buffer was touched meanwhile), the policy's choice is evicted
    /// directly so that a thread needing memory never waits for a window to pass.
    pub(super) fn evict_some_tracked(&self, q: &AsideQueue, want: usize) -> u64 {
        let window = (self.resident() / WINDOW_FRACTION).max(want as u64);
        let mut n = 0;
        if q.len() >= window {
            n = self.evict_indices(&q.pop(want), false).0;
        }
        let grow = if q.len() < window { want } else { 0 };
        let mut cands = Vec::with_capacity(want + grow);
        self.policy
            .choose_eviction_buffers(&Buffers::new(&self.states), want + grow, &mut cands);
        n += self.set_aside(q, &cands);
        if n == 0 {
            n = self.evict_chosen(want);
        }
        n
    }

    /// Sets the clean, idle, evictable candidates aside. Dirty ones are written back and
    /// evicted now (their bytes cannot move until the store has them). Returns how many
    /// buffers left the cache.
    fn set_aside(&self, q: &AsideQueue, cands: &[u64]) -> u64 {
        let mut set = Vec::with_capacity(cands.len());
        let mut dirty = Vec::new();
        let mut lost = 0u64;
        for &i in cands {
            if i >= self.buffers() || !self.policy.is_evictable(i) {
                continue;
            }
            let s = self.state(i);
            let w = s.load();
            if w.phase() != Phase::Cached {
                continue;
            }
            if w.dirty() {
                dirty.push(i);
                continue;
            }
            let Some(e) = w.begin_evict() else { continue };
            if s.cas(w, e).is_err() {
                continue;
            }
            match self.region.set_aside((i << self.shift) as usize, self.bs) {
                Ok(()) => {
                    let _ = s.update(|w| Some(w.finish_aside()));
                    set.push(i);
                }
                Err(_) => {
                    // The pages are gone from both places; the buffer is clean, so this is
                    // simply an eviction.
                    self.policy.on_evict(i);
                    let _ = s.update(|w| Some(w.finish_evict()));
                    self.resident.fetch_sub(1, Ordering::Relaxed);
                    self.cache.release(self.bs as u64);
                    self.stats().add(Counter::Evictions, 1);
                    lost += 1;
                }
            }
        }
        self.stats().add(Counter::SetAside, set.len() as u64);
        q.push(&set);
        lost + if dirty.is_empty() {
            0
        } else {
            self.evict_indices(&dirty, false).0
        }
    }

    /// Brings set-aside buffer `i` (seen as `seen`) back, keeping `pin`; `dirty` for a write
    /// fault, which publishes it dirty and writable. The touch counts as an access for the
    /// policy. Returns false if another thread won the claim.
    pub(super) fn restore(&self, i: u64, seen: Word, pin: Pin, dirty: bool) -> Result<bool> {
        let Some(claimed) = seen.begin_restore() else {
            return Ok(false);
        };
        let s = self.state(i);
        if s.cas(seen, claimed).is_err() {
            return Ok(false);
        }
        let at = (i << self.shift) as usize;
        let t = self.clock();
        if self.region.restore(at, self.bs, dirty).is_err() {
            // The shadow copy is gone; the budget is still ours, so read it as a miss would.
            if let Err(e) = self.read_claimed(i, dirty) {
                self.fail_load(i);
                return Err(e);
            }
        }
        self.lap(t, Counter::FaultInstallNs);
        self.stats().add(Counter::Restores, 1);
        if self.policy_hits {
            self.policy.on_hit(i);
        }
        let r = s.update(|w| {
            let c = w.finish_load(pin, false);
            let c = c.touch().unwrap_or(c);
            Some(if dirty { c.mark_dirty() } else { c })
        });
        debug_assert!(r.is_ok());
        Ok(true)
    }
}
