//! The budget: the bytes a cache may keep resident, and the wait for room when they are used up.
//!
//! The budget counts resident buffers in bytes with one atomic. A loader first claims its
//! buffer (`Evicted → Loading`), then reserves its bytes, so a thread that lost the claim evicts
//! nothing for it; when the budget is full, that same thread evicts one batch
//! (there is no eviction thread to wait for and no eviction lock: concurrent evictors sweep
//! disjoint parts of the resident sets and race only through per-buffer CASes). Reservation
//! never overshoots, so resident memory never exceeds the budget. A background evictor
//! ([`crate::evictor`]) keeps a few batches free ahead of the loaders where the budget is large
//! enough, so that the loaders rarely find it full; it is one more such evictor, not a thread
//! anyone waits for.
//!
//! The budget knows nothing of mappings: it makes room by running an eviction round over the
//! members of its [`Registry`] ([`crate::reclaim`]), each seen only as an
//! [`Evictable`](crate::reclaim::Evictable). It also owns the frame pools of pool mappings
//! (charged to it a chunk at a time) and the grants of set-aside pools, both counted in bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::error::{Error, Result};
use crate::evictor::Evictor;
use crate::policy::{GlobalPolicy, GuardedGlobal};
use crate::pool::FramePool;
use crate::reclaim::{Batch, Registry};
use crate::stats::{Counter, Stats};

/// Eviction rounds in a row that freed nothing and met failed write-backs, after which a load
/// gives up with [`Error::WritebackFailed`] instead of waiting out `budget_wait`. Two, not
/// one: the second round tries other candidates (the policy's hand and the sweep move on), so
/// one unwritable batch beside clean buffers does not fail a load.
const FAILED_WRITEBACK_ROUNDS: u32 = 2;

pub(crate) struct Budget {
    bytes: u64,
    batch: Batch,
    used: AtomicU64,
    /// Budget the set-aside pools of tracked mappings hold, within `used`: a quarter of the
    /// budget at most, so that tracked mappings cannot reserve it away from the data.
    aside: AtomicU64,
    global: GuardedGlobal,
    /// The cache-wide counters (the budget's stalls); each mapping keeps its own.
    pub(crate) stats: Stats,
    /// What eviction rounds take from.
    mappings: Registry,
    evictor: Evictor,
    budget_wait: Duration,
    /// Eviction rounds that freed something, ever. A load waiting for memory counts its wait
    /// from the last one ([`waited_out`]): it gives up after `budget_wait` in which nothing
    /// was freed anywhere, not after `budget_wait` in which others took what was freed (256
    /// async pins over a 64-buffer budget starved one that way while evictions went on).
    rounds_freed: AtomicU64,
    /// The frame pools of pool mappings, one per buffer size, made by the first pool
    /// mapping of that size and kept as long as the cache (and every mapping holding one).
    pools: ArcSwap<Vec<Arc<FramePool>>>,
    pool_huge: bool,
}

impl Budget {
    /// `bytes` of budget, freed `batch` at a time under `global`'s choices; `evictor` keeps
    /// some of it free ahead of the loaders.
    pub(crate) fn new(
        bytes: u64,
        batch: Batch,
        global: Arc<dyn GlobalPolicy>,
        budget_wait: Duration,
        pool_huge: bool,
        evictor: Evictor,
    ) -> Self {
        Budget {
            bytes,
            batch,
            used: AtomicU64::new(0),
            aside: AtomicU64::new(0),
            global: GuardedGlobal::new(global),
            stats: Stats::default(),
            mappings: Registry::default(),
            evictor,
            budget_wait,
            rounds_freed: AtomicU64::new(0),
            pools: ArcSwap::from_pointee(Vec::new()),
            pool_huge,
        }
    }

    /// The members eviction rounds take from: map adds a mapping, unmap removes it.
    pub(crate) fn mappings(&self) -> &Registry {
        &self.mappings
    }

    /// Bytes in use now: buffers resident or being loaded, set-aside pools, pool chunks.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes the frame pools hold now, within [`Budget::used`].
    pub(crate) fn pool_bytes(&self) -> u64 {
        self.pools.load().iter().map(|p| p.charged()).sum()
    }

    pub(crate) fn batch(&self) -> Batch {
        self.batch
    }

    pub(crate) fn budget_bytes(&self) -> u64 {
        self.bytes
    }

    /// Grants a set-aside pool up to `slots` slots of `bs` bytes within the quarter of the
    /// budget all pools share; 0 if fewer than two fit. The caller reserves the bytes from
    /// the budget itself and gives the grant back with [`Budget::release_aside`].
    pub(crate) fn claim_aside(&self, slots: u64, bs: usize) -> u64 {
        let cap = self.bytes / 4;
        let mut got = 0;
        let _ = self
            .aside
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                got = slots.min(cap.saturating_sub(held) / bs as u64);
                if got < 2 {
                    got = 0;
                    return None;
                }
                Some(held + got * bs as u64)
            });
        got
    }

    pub(crate) fn release_aside(&self, bytes: u64) {
        self.aside.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Buffers of `bs` bytes evicted per round.
    pub(crate) fn batch_buffers(&self, bs: usize) -> usize {
        self.batch.buffers_for(bs)
    }

    /// Reserves `bytes` of the budget, evicting as needed. If nothing could be freed for
    /// `budget_wait` and the rounds met write-backs that failed, the last such failure is the
    /// error ([`Error::WritebackFailed`]: those buffers stay dirty and resident); otherwise
    /// [`Error::BudgetExhausted`].
    pub(crate) fn reserve(&self, bytes: u64) -> Result<()> {
        self.acquire(true, |strict| self.take(bytes, strict).then_some(()))
            .map(drop)
    }

    /// Takes `bytes` of the budget: if the global policy says they fit without evicting, or,
    /// `strict`, if they fit the budget itself.
    fn take(&self, bytes: u64, strict: bool) -> bool {
        if strict {
            self.take_within_budget(bytes)
        } else {
            self.take_if_fits(bytes)
        }
    }

    /// The frame of `pool` a pool mapping's load reads into: a free one, or one of a chunk
    /// the pool grows by, charged to the budget as a whole (evicting as needed, as
    /// [`Budget::reserve`]). With `wait` false, gives up (`None`) as soon as an eviction
    /// round frees nothing, as [`Budget::try_reserve`].
    pub(crate) fn reserve_frame(&self, pool: &FramePool, wait: bool) -> Result<Option<u32>> {
        let chunk = pool.chunk_bytes();
        self.acquire(wait, |strict| {
            if let Some((f, free)) = pool.pop() {
                // The pool's estimate first: the exact look sums every shard's count, lines
                // that other threads' misses write, and is for when the pool runs low.
                let low = self.evictor.low();
                if low > 0 && free < low && self.short_of(low) {
                    self.evictor.kick();
                }
                return Some(f);
            }
            if !self.take(chunk, strict) {
                return None;
            }
            let f = pool.grow();
            if f.is_none() {
                self.release(chunk);
            }
            f
        })
    }

    /// Gives back what a pool handed back of its chunks (see [`FramePool::put`]).
    pub(crate) fn put_frames(&self, pool: &FramePool, frames: &[u32]) {
        let released = pool.put(frames);
        if released > 0 {
            self.release(released);
        }
    }

    /// Gives back every wholly free chunk of `pool` (see [`FramePool::trim`]).
    pub(crate) fn put_frames_trim(&self, pool: &FramePool) {
        let released = pool.trim();
        if released > 0 {
            self.release(released);
        }
    }

    /// The frame pool of `bs`-byte buffers, made on first use. A budget smaller than one
    /// chunk is [`Error::BudgetTooSmall`].
    pub(crate) fn pool_for(&self, bs: usize) -> Result<Arc<FramePool>> {
        if let Some(p) = self.pools.load().iter().find(|p| p.buffer_size() == bs) {
            return Ok(p.clone());
        }
        let keep = self.batch_buffers(bs);
        let made = Arc::new(FramePool::new(bs, self.bytes, keep, self.pool_huge)?);
        let mut out = made.clone();
        // Two threads may make one at once: the first in the list wins, the other's
        // (uncharged, unpopulated) is dropped.
        self.pools.rcu(|list| {
            if let Some(p) = list.iter().find(|p| p.buffer_size() == bs) {
                out = p.clone();
                return Vec::clone(list);
            }
            out = made.clone();
            let mut l = Vec::clone(list);
            l.push(made.clone());
            l
        });
        Ok(out)
    }

    /// Bytes of the pools' free frames: charged to the budget, yet free for pool loads.
    fn pools_free(&self) -> u64 {
        self.pools.load().iter().map(|p| p.free_bytes()).sum()
    }

    /// Waits for `take` to succeed, evicting as needed: the loop of [`Budget::reserve`]
    /// and [`Budget::reserve_frame`]. `take(strict)` tries to take what the caller
    /// needs; `strict` asks it to take it if it fits the budget itself, whatever the global
    /// policy would rather keep free. If nothing could be freed for `budget_wait` and the
    /// rounds met write-backs that failed, the last such failure is the error.
    fn acquire<T>(&self, wait: bool, mut take: impl FnMut(bool) -> Option<T>) -> Result<Option<T>> {
        if wait {
            take_writeback_failure();
        }
        let mut stuck_since: Option<Instant> = None;
        let mut seen = 0u64;
        let mut stalled = false;
        let mut spins = 0u32;
        // Rounds in a row that freed nothing because the write-backs they tried failed.
        let mut failed_rounds = 0u32;
        loop {
            if let Some(t) = take(false) {
                return Ok(Some(t));
            }
            if self.evict_round() > 0 {
                stuck_since = None;
                spins = 0;
                failed_rounds = 0;
                // A failure beside the progress is not what this load waits on.
                take_writeback_failure();
                continue;
            }
            if wait {
                if let Some((failed, first)) = take_writeback_failure() {
                    // Unwritable dirty data (a full disk, a store that is down) does not
                    // come free by waiting, unlike a pin: after rounds of failed write-backs
                    // only, say so now rather than retry the same writes for all of
                    // `budget_wait`. The buffers stay dirty and resident.
                    failed_rounds += 1;
                    if failed_rounds >= FAILED_WRITEBACK_ROUNDS {
                        return Err(Error::WritebackFailed {
                            failed,
                            first: Box::new(first),
                        });
                    }
                    note_writeback_failure(failed, first);
                }
            }
            // A global policy may ask for eviction before the budget is full; with nothing
            // evictable, that early request must not refuse what the budget still holds.
            if let Some(t) = take(true) {
                return Ok(Some(t));
            }
            if !wait {
                return Ok(None);
            }
            // Nothing evictable right now: other evictors may hold the candidates, or every
            // buffer is pinned. Back off, and give up only after a long time without progress.
            if !stalled {
                stalled = true;
                self.stats.add(Counter::BudgetStalls, 1);
            }
            if self.waited_out(&mut stuck_since, &mut seen) {
                return Err(self.gave_up());
            }
            spins += 1;
            if spins < 4 || !crate::sync::CAN_PARK {
                crate::sync::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50 * spins.min(20) as u64));
            }
        }
    }

    /// The error of a load that found no memory for `budget_wait`. Dirty buffers that could
    /// not be written back (ENOSPC, a store that is down) are the cause to report, not the
    /// full budget they hold.
    fn gave_up(&self) -> Error {
        self.gave_up_with(take_writeback_failure())
    }

    /// [`Budget::gave_up`] with the write-back failure the caller collected.
    fn gave_up_with(&self, failure: Option<(usize, Error)>) -> Error {
        if let Some((failed, first)) = failure {
            return Error::WritebackFailed {
                failed,
                first: Box::new(first),
            };
        }
        Error::BudgetExhausted {
            used: self.used.load(Ordering::Relaxed),
        }
    }

    /// For a load that must not block while it waits for memory (the async miss, which
    /// sleeps between tries instead), called right after each eviction round that freed too
    /// little, on that round's thread: counts the stall on the first call and fails as
    /// [`Budget::reserve`] would once `budget_wait` has passed since then. The round's
    /// write-back failure is moved from the thread into `wait`, because the task may resume
    /// on another thread after its sleep.
    #[cfg(feature = "tokio")]
    pub(crate) fn still_waiting(&self, wait: &mut RoomWait) -> Result<()> {
        if let Some(f) = take_writeback_failure() {
            wait.failure = Some(f);
        }
        if wait.since.is_none() {
            self.stats.add(Counter::BudgetStalls, 1);
        }
        if self.waited_out(&mut wait.since, &mut wait.seen) {
            return Err(self.gave_up_with(wait.failure.take()));
        }
        Ok(())
    }

    /// As [`Budget::reserve`], but gives up as soon as an eviction round frees nothing.
    pub(crate) fn try_reserve(&self, bytes: u64) -> bool {
        matches!(
            self.acquire(false, |strict| self.take(bytes, strict).then_some(())),
            Ok(Some(()))
        )
    }

    /// Adds `bytes` to the budget in use if they fit the budget itself, whatever the global
    /// policy would rather keep free.
    fn take_within_budget(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                (used + bytes <= self.bytes).then_some(used + bytes)
            })
            .is_ok()
    }

    /// Adds `bytes` to the budget in use if the global policy says they fit without evicting,
    /// and wakes the background evictor if that leaves less than its share free.
    fn take_if_fits(&self, bytes: u64) -> bool {
        loop {
            let used = self.used.load(Ordering::Relaxed);
            if self.global.need_to_evict(used, bytes, self.bytes) {
                return false;
            }
            if self
                .used
                .compare_exchange_weak(used, used + bytes, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let low = self.evictor.low();
                if low > 0 && self.global.need_to_evict(used + bytes, low, self.bytes) {
                    self.evictor.kick();
                }
                return true;
            }
        }
    }

    pub(crate) fn evictor(&self) -> &Evictor {
        &self.evictor
    }

    /// Whether the global policy would evict before `bytes` more could be loaded.
    /// The pools' free frames count as free here: they are what a pool load takes first.
    pub(crate) fn short_of(&self, bytes: u64) -> bool {
        let used = self.used.load(Ordering::SeqCst);
        self.global
            .need_to_evict(used.saturating_sub(self.pools_free()), bytes, self.bytes)
    }

    /// One eviction round on the background evictor's behalf; returns how many buffers'
    /// budget it freed (buffers set aside included, so its evictions are counted where they
    /// happen: [`crate::evictor::on_evictor_thread`]).
    pub(crate) fn evict_ahead(&self) -> u64 {
        self.evict_round()
    }

    /// Gives back `bytes` of the budget (after an eviction or a failed load).
    pub(crate) fn release(&self, bytes: u64) {
        let prev = self.used.fetch_sub(bytes, Ordering::AcqRel);
        debug_assert!(prev >= bytes, "budget underflow");
    }

    /// Evicts up to one batch from the members of [`Budget::mappings`], asking the global
    /// policy where from. Returns buffers evicted.
    fn evict_round(&self) -> u64 {
        let n = self
            .mappings
            .evict_round(&self.global, self.batch, self.bytes);
        if n > 0 {
            self.rounds_freed.fetch_add(1, Ordering::Relaxed);
        }
        n
    }

    /// [`waited_out`] against this budget's rounds and `budget_wait`.
    fn waited_out(&self, since: &mut Option<Instant>, seen: &mut u64) -> bool {
        waited_out(
            self.rounds_freed.load(Ordering::Relaxed),
            self.budget_wait,
            since,
            seen,
        )
    }
}

/// Whether a load without memory has waited `wait` since it started waiting (`since`) or
/// since a round last freed memory, whichever is later: `rounds` is the count of rounds that
/// freed any, `seen` the count at the last call. The first call starts the wait.
fn waited_out(rounds: u64, wait: Duration, since: &mut Option<Instant>, seen: &mut u64) -> bool {
    match since {
        Some(t) if rounds == *seen => t.elapsed() > wait,
        _ => {
            *since = Some(Instant::now());
            *seen = rounds;
            false
        }
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        self.evictor.stop();
    }
}

#[cfg(not(feature = "shuttle"))]
std::thread_local! {
    /// The last write-back failure that an eviction round of this thread met: the count of
    /// buffers it left dirty and the first error. `reserve` reports it if it gives up.
    static WRITEBACK_FAILURE: std::cell::RefCell<Option<(usize, Error)>> =
        const { std::cell::RefCell::new(None) };
}

// The model checker runs its threads on one OS thread: each needs its own record.
#[cfg(feature = "shuttle")]
shuttle::thread_local! {
    static WRITEBACK_FAILURE: std::cell::RefCell<Option<(usize, Error)>> =
        std::cell::RefCell::new(None);
}

/// Records that an eviction round's write-back of `failed` buffers failed (they stay dirty),
/// for the `reserve` of this thread that ran the round.
pub(crate) fn note_writeback_failure(failed: usize, first: Error) {
    let _ = WRITEBACK_FAILURE.try_with(|f| {
        if let Ok(mut f) = f.try_borrow_mut() {
            *f = Some((failed, first));
        }
    });
}

/// What an async load has waited for memory so far ([`Budget::still_waiting`]).
#[cfg(feature = "tokio")]
#[derive(Default)]
pub(crate) struct RoomWait {
    since: Option<Instant>,
    /// [`Budget`]'s rounds that freed memory, when the wait last looked.
    seen: u64,
    /// The last write-back failure of its eviction rounds.
    failure: Option<(usize, Error)>,
}

fn take_writeback_failure() -> Option<(usize, Error)> {
    WRITEBACK_FAILURE
        .try_with(|f| f.try_borrow_mut().ok().and_then(|mut f| f.take()))
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait runs out only after `wait` with no round freeing memory; a round that frees
    /// some starts it again.
    #[test]
    fn a_wait_runs_out_only_without_progress() {
        let wait = Duration::from_millis(1);
        let (mut since, mut seen) = (None, 0);
        assert!(
            !waited_out(0, wait, &mut since, &mut seen),
            "the first call starts it"
        );
        std::thread::sleep(2 * wait);
        // A round freed memory meanwhile: the wait starts again.
        assert!(!waited_out(1, wait, &mut since, &mut seen));
        std::thread::sleep(2 * wait);
        assert!(waited_out(1, wait, &mut since, &mut seen), "no round since");
    }
}
