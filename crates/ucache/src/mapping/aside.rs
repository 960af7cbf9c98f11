//! Access information for transparent mappings: eviction candidates are set aside before they
//! are dropped.
//!
//! Plain loads and stores of a cached buffer never reach ucache, and userspace cannot read
//! the hardware accessed bit, so a CLOCK-like policy on a transparent mapping would see no
//! accesses at all and degrade to FIFO. Instead, a buffer the policy picks is first *set
//! aside*: its bytes are copied into a slot of a small pool and its pages are dropped from the
//! mapping, so the next access to it faults. A touch brings it back from the slot without IO
//! and sets its referenced bit, as a pin would; a buffer still aside when its turn in the
//! queue comes is evicted, which only frees its slot. It is CLOCK's second chance, with a soft
//! fault standing in for the accessed bit.
//!
//! Why copy instead of moving the pages (`UFFDIO_MOVE`)? A move is one call per buffer and
//! each one flushes the TLBs of every core running the process. Measured on this VM: 1.2 µs per
//! 4 KiB move with one thread, but with two busy threads the eviction share of a fault rose from
//! 2.6 to 25 µs, against one batched drop for a whole eviction batch here. A 4 KiB copy into a
//! slot whose pages stay allocated is a memcpy.
//!
//! The pool is reserved from the cache's budget when the mapping is made (about a sixteenth of
//! the budget), so memory never exceeds the budget; all pools of a cache together take at most
//! a quarter of it, and a mapping made when that is spoken for tracks no access. A buffer set
//! aside gives its own budget back, since its bytes now live in a slot the pool has paid for,
//! and a restore reserves it again; otherwise a full pool would leave its share of the budget
//! unused (counted once for the slot and once for the buffer in it). Only clean buffers are set
//! aside; dirty candidates are written back and evicted as before. A set-aside buffer is
//! evicted when its turn in the queue comes (policies propose cached buffers only), which frees
//! its slot; holding no budget, it never stands in the way of a load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::claim::LoadClaim;
use super::MappingCore;
use crate::budget::Budget;
use crate::error::Result;
use crate::policy::Buffers;
use crate::region::Region;
use crate::state::{Phase, Pin, Word};
use crate::stats::Counter;
use crate::stopwatch::Stopwatch;

const NO_SLOT: u32 = u32::MAX;

/// The slots set-aside buffers live in, and the queue that gives each its turn.
pub(super) struct AsidePool {
    slots: Region,
    bs: usize,
    /// Free slots.
    free: Mutex<Vec<u32>>,
    /// Set-aside buffers, oldest first.
    queue: Mutex<VecDeque<u64>>,
    /// The slot of each set-aside buffer (`NO_SLOT` otherwise). Written only by the thread
    /// that owns the buffer (`Evicting` or `Loading`), read by the next owner.
    slot_of: Box<[AtomicU32]>,
    /// Buffers aside now, whose budget the pool carries: resident to the policy and the
    /// mapping, but not charged to the cache's budget.
    carried: AtomicU64,
    /// The pool's budget went back to the cache (at unmap, or when the mapping is dropped).
    given_back: AtomicBool,
}

impl AsidePool {
    /// How many slots a mapping with `buffers` buffers gets under a budget of `budget_buffers`
    /// (0: too small a budget to spare any). A sixteenth of the budget, but at least four
    /// eviction batches so a buffer stays aside for a few rounds, and at most a quarter.
    pub(super) fn slots_for(budget_buffers: u64, buffers: u64, batch: usize) -> u64 {
        let quarter = budget_buffers / 4;
        let n = (budget_buffers / 16).max((4 * batch as u64).min(quarter));
        if n < 2 {
            0
        } else {
            n.min(buffers)
        }
    }

    pub(super) fn new(slots: u64, bs: usize, buffers: u64) -> Result<AsidePool> {
        Ok(AsidePool {
            slots: Region::reserve(slots as usize * bs, 4096)?,
            bs,
            free: Mutex::new((0..slots as u32).rev().collect()),
            queue: Mutex::new(VecDeque::with_capacity(slots as usize)),
            slot_of: (0..buffers).map(|_| AtomicU32::new(NO_SLOT)).collect(),
            carried: AtomicU64::new(0),
            given_back: AtomicBool::new(false),
        })
    }

    /// Gives the pool's budget back to `budget`, once, and its slots' pages to the kernel: at
    /// unmap, since the mapping itself may outlive it (an eviction round on another thread may
    /// still hold it), and at drop otherwise.
    pub(super) fn give_back(&self, budget: &Budget) {
        if self.given_back.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = self.slots.drop_ranges(&[(0, self.slots.len())]);
        budget.release(self.bytes());
        budget.release_aside(self.bytes());
    }

    /// Buffers aside now (their budget carried by the pool).
    pub(super) fn carried(&self) -> u64 {
        self.carried.load(Ordering::Relaxed)
    }

    /// `n` set-aside buffers left the pool: evicted, or restored with budget of their own.
    pub(super) fn uncarry(&self, n: u64) {
        let prev = self.carried.fetch_sub(n, Ordering::Relaxed);
        debug_assert!(prev >= n, "set-aside count underflow");
    }

    /// Bytes of budget the pool holds.
    pub(super) fn bytes(&self) -> u64 {
        self.slots.len() as u64
    }

    fn slot_addr(&self, slot: u32) -> *mut u8 {
        self.slots.at(slot as usize * self.bs)
    }

    fn take_slot(&self, i: u64) -> Option<u32> {
        let s = self.free.lock().pop()?;
        self.slot_of[i as usize].store(s, Ordering::Relaxed);
        Some(s)
    }

    /// Frees the slot of buffer `i`, owned by the caller.
    pub(super) fn release(&self, i: u64) {
        let s = self.slot_of[i as usize].swap(NO_SLOT, Ordering::Relaxed);
        if s != NO_SLOT {
            self.free.lock().push(s);
        }
    }

    fn free_slots(&self) -> usize {
        self.free.lock().len()
    }

    /// Whether no slot is taken (for checks at unmap).
    pub(super) fn all_free(&self) -> bool {
        self.free_slots() as u64 * self.bs as u64 == self.bytes()
    }

    /// Queues buffers just set aside. Entries of buffers restored meanwhile stay in the
    /// queue until popped; a hot set that is set aside and restored over and over would grow
    /// it without end, so past twice the slots it is compacted to the buffers still aside,
    /// each once, in their latest order.
    fn enqueue(&self, set: Vec<u64>) {
        let mut q = self.queue.lock();
        q.extend(set);
        let slots = self.slots.len() / self.bs;
        if q.len() > 2 * slots.max(1) {
            let mut seen = std::collections::HashSet::with_capacity(slots);
            let mut kept: Vec<u64> = q
                .iter()
                .rev()
                .copied()
                .filter(|&i| {
                    self.slot_of[i as usize].load(Ordering::Relaxed) != NO_SLOT && seen.insert(i)
                })
                .collect();
            kept.reverse();
            *q = kept.into();
        }
    }

    fn pop(&self, n: usize) -> Vec<u64> {
        let mut q = self.queue.lock();
        let n = n.min(q.len());
        q.drain(..n).collect()
    }
}

impl MappingCore {
    /// One eviction round with second chances: when the pool is short of slots, evicts the
    /// buffers set aside longest ago (those not touched since), which frees slots but no
    /// budget, then sets the policy's next candidates aside, which frees theirs. Whenever that
    /// freed nothing (no slot free, every candidate dirty or vetoed), the policy's choice is
    /// evicted directly, so a thread needing memory never waits for a buffer's turn. Returns
    /// how many buffers' budget the round freed.
    pub(super) fn evict_some_tracked(&self, pool: &AsidePool, want: usize) -> u64 {
        if pool.free_slots() < want {
            self.evict_aside(pool, want);
        }
        let mut cands = Vec::with_capacity(want);
        self.policy
            .choose_eviction_buffers(&Buffers::new(&self.states), want, &mut cands);
        let n = self.set_aside(pool, &cands);
        if n == 0 {
            self.evict_chosen(want)
        } else {
            n
        }
    }

    /// Evicts up to `want` of the buffers set aside longest ago. Entries of buffers touched
    /// since are stale: those buffers earned their place. One touched and set aside again
    /// leaves a little early (by its older entry), losing part of its second chance. Buffers
    /// still aside afterwards (vetoed by the policy's `is_evictable`) go to the back of the
    /// line: off it, nothing would ever evict them, and they would hold their slots for good.
    fn evict_aside(&self, pool: &AsidePool, want: usize) {
        let mut old = pool.pop(want);
        old.retain(|&i| self.state(i).load().phase() == Phase::Aside);
        self.evict_indices(&old, false);
        old.retain(|&i| self.state(i).load().phase() == Phase::Aside);
        if !old.is_empty() {
            pool.enqueue(old);
        }
    }

    /// Sets the clean, idle, evictable candidates aside, dropping their pages in one batch and
    /// handing their budget to the pool. Dirty ones are written back and evicted now. Returns
    /// how many buffers' budget this freed.
    fn set_aside(&self, pool: &AsidePool, cands: &[u64]) -> u64 {
        let mut set = Vec::with_capacity(cands.len());
        let mut dirty = Vec::new();
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
            let Some(slot) = pool.take_slot(i) else {
                let _ = s.update(|w| Some(w.cancel_evict()));
                break;
            };
            // SAFETY: buffer i is Cached-then-Evicting and ours: its pages are all present
            // (transparent buffers are installed whole) and no store can change them (it is
            // clean, so write-protected, and a write fault waits while it is Evicting); the
            // slot is ours until released.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr(i), pool.slot_addr(slot), self.bs) };
            set.push(i);
        }
        let mut freed = 0;
        let ranges: Vec<(usize, usize)> = set
            .iter()
            .map(|&i| ((i << self.shift) as usize, self.bs))
            .collect();
        if !set.is_empty() {
            // Ranges that could not be dropped keep their buffers cached (their pages are
            // still there); the others are set aside.
            let region = self.home.region().expect("set-aside buffers are in place");
            let kept = match region.drop_ranges(&ranges) {
                Ok(()) => Vec::new(),
                Err((kept, _)) => kept,
            };
            let mut aside = Vec::with_capacity(set.len());
            for (k, &i) in set.iter().enumerate() {
                if kept.contains(&k) {
                    pool.release(i);
                    let _ = self.state(i).update(|w| Some(w.cancel_evict()));
                } else {
                    // The pool carries it before anyone can see it aside (and restore or evict
                    // it, which uncarries it).
                    pool.carried.fetch_add(1, Ordering::Relaxed);
                    self.cache.budget.release(self.bs as u64);
                    let _ = self.state(i).update(|w| Some(w.finish_aside()));
                    aside.push(i);
                }
            }
            freed = aside.len() as u64;
            self.stats().add(Counter::SetAside, freed);
            pool.enqueue(aside);
        }
        if !dirty.is_empty() {
            freed += self.evict_indices(&dirty, false).0;
        }
        freed
    }

    /// Brings set-aside buffer `i` (seen as `seen`) back, keeping `pin`; `dirty` for a write
    /// fault, which publishes it dirty and writable. The touch counts as an access for the
    /// policy. Returns false if another thread won the claim.
    pub(super) fn restore(
        &self,
        i: u64,
        seen: Word,
        pin: Pin,
        dirty: bool,
        sw: &mut Stopwatch,
    ) -> Result<bool> {
        let Some(claimed_word) = seen.begin_restore() else {
            return Ok(false);
        };
        let s = self.state(i);
        if s.cas(seen, claimed_word).is_err() {
            return Ok(false);
        }
        let pool = self
            .aside
            .as_ref()
            .expect("set-aside buffer without a pool");
        // Back in the mapping, the buffer needs budget of its own again. Without any, it is
        // evicted for good (it is clean: nothing is lost) and the fault fails as a miss would.
        sw.skip();
        if let Err(e) = self.cache.budget.reserve(self.bs as u64) {
            pool.release(i);
            pool.uncarry(1);
            self.policy.on_evict(i);
            let r = s.update(|w| Some(w.abort_load()));
            debug_assert!(r.is_ok());
            self.resident.sub(1);
            self.stats().add(Counter::Evictions, 1);
            return Err(e);
        }
        pool.uncarry(1);
        // From here on a load claim with its room (the budget just reserved; the buffer was
        // counted resident all along), undone as any load's if it fails.
        // SAFETY: buffer i is Loading and ours, its budget reserved; adopted once, here.
        let mut claim = unsafe { LoadClaim::adopt(self, i) };
        sw.lap(self.stats(), Counter::FaultEvictNs);
        let slot = pool.slot_of[i as usize].load(Ordering::Relaxed);
        // SAFETY: the slot holds the buffer's bytes and is ours (the buffer is Loading and
        // ours); the buffer's pages in the mapping are absent, as install requires.
        let r = unsafe { self.install(i, pool.slot_addr(slot), self.bs, dirty) };
        pool.release(i);
        if r.is_err() {
            // Installing failed (out of memory?); read it as a miss would, budget still held.
            if let Err(e) = claim.fill(dirty, sw) {
                // Evicted for good now: the policy, which still held it (a set-aside buffer
                // stays resident to the policy), lets go of it as of any eviction.
                self.policy.on_evict(i);
                return Err(e);
            }
        }
        sw.lap(self.stats(), Counter::FaultInstallNs);
        self.stats().add(Counter::Restores, 1);
        if self.policy_hits {
            self.policy.on_hit(i);
        }
        claim.publish_with(false, |w| {
            let c = w.finish_load(pin, false);
            let c = c.touch().unwrap_or(c);
            if dirty {
                c.mark_dirty()
            } else {
                c
            }
        });
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hot set set aside and restored over and over, with the pool never short of slots (so
    /// nothing pops the queue): the queue stays bounded and keeps the buffers still aside.
    #[test]
    fn queue_stays_bounded_when_restores_outrun_evictions() {
        let pool = AsidePool::new(4, 4096, 100).unwrap();
        // Buffer 7 stays aside throughout.
        assert!(pool.take_slot(7).is_some());
        pool.enqueue(vec![7]);
        for round in 0..10_000u64 {
            let i = round % 50 + 10;
            assert!(pool.take_slot(i).is_some());
            pool.enqueue(vec![i]);
            pool.release(i); // touched: restored
            assert!(pool.queue.lock().len() <= 2 * 4 + 1);
        }
        // Oldest first; the rest are stale entries (restored since), which callers skip.
        let popped = pool.pop(10);
        assert_eq!(popped[0], 7);
        assert!(popped[1..]
            .iter()
            .all(|&i| pool.slot_of[i as usize].load(Ordering::Relaxed) == NO_SLOT));
    }
}
