//! Eviction: optimistic and batched. Candidates are claimed by CAS (a pinned or touched one
//! fails and is skipped, never waited for), dirty ones written back in one batch, and the
//! memory of the rest dropped with one `process_madvise`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};
use crate::policy::Buffers;
use crate::reclaim::Evictable;
use crate::state::Phase;
use crate::stats::Counter;

/// The victims of one eviction, by the step they are at.
#[derive(Default)]
struct Victims {
    /// Claimed `Evicting`, with pages (or a frame) to drop.
    clean: Vec<u64>,
    /// Claimed `Evicting` from `Aside`: only a slot to free.
    aside: Vec<u64>,
    /// Claimed for write-back, to claim for eviction once written.
    dirty: Vec<u64>,
    /// Candidates that failed a claim or were vetoed.
    cancels: u64,
}

/// A mapping as the cache's eviction round sees it ([`crate::reclaim`]): the narrow interface
/// through which the budget, which names no mapping, takes memory back.
impl Evictable for MappingCore {
    fn id(&self) -> u64 {
        MappingCore::id(self)
    }
    fn resident(&self) -> u64 {
        MappingCore::resident(self)
    }
    fn buffer_size(&self) -> usize {
        MappingCore::buffer_size(self)
    }
    fn weight(&self) -> u32 {
        MappingCore::weight(self)
    }
    /// A transparent mapping is never idle: its hits are plain loads, unseen.
    fn idle(&self, clock: u64, horizon: u64) -> bool {
        !self.is_transparent() && self.activity.idle(clock, horizon)
    }
    /// Asks the policy for up to `want` victims and evicts those that validate; if none do,
    /// the manager's own sweep picks the victims instead.
    fn evict_some(&self, want: usize) -> u64 {
        match &self.aside {
            Some(q) => self.evict_some_tracked(q, want),
            None => self.evict_chosen(want),
        }
    }
}

impl MappingCore {
    /// Evicts the policy's choice now, without a second chance.
    pub(super) fn evict_chosen(&self, want: usize) -> u64 {
        let mut cands = Vec::with_capacity(want);
        let buffers = Buffers::new(&self.states);
        self.policy
            .choose_eviction_buffers(&buffers, want, &mut cands);
        let n = self.evict_indices(&cands, false).0;
        if n > 0 {
            return n;
        }
        cands.clear();
        self.policy.fallback_victims(&buffers, want, &mut cands);
        self.evict_indices(&cands, false).0
    }

    pub(crate) fn evict_range(&self, offset: u64, len: u64) -> Result<()> {
        let v: Vec<u64> = self.range(offset, len)?.collect();
        let (_, errors) = self.evict_indices(&v, true);
        match errors.into_iter().next() {
            None => Ok(()),
            Some((n, first)) => Err(Error::WritebackFailed {
                failed: n,
                first: Box::new(first),
            }),
        }
    }

    /// Evicts the candidates that validate: cached, idle, and (unless `explicit`) not vetoed by
    /// the policy. Dirty ones are written back first in one batch. Returns the number of
    /// evicted buffers whose budget this freed (set-aside buffers had handed theirs to their
    /// pool already; a pool mapping's count the frames it gave back) and, if write-backs
    /// failed, their count and the first error: returned when `explicit`, else noted for the
    /// `reserve` that ran this round ([`crate::budget::note_writeback_failure`]). A failure to
    /// drop pages is returned either way.
    ///
    /// The steps, as vmcache's `evict()`: [claim](MappingCore::claim_victims), [write back
    /// the dirty ones](MappingCore::write_back_victims), [drop](MappingCore::drop_victims),
    /// [finish](MappingCore::finish_victims).
    pub(super) fn evict_indices(
        &self,
        cands: &[u64],
        explicit: bool,
    ) -> (u64, Option<(usize, Error)>) {
        if explicit {
            // An explicit eviction is how a program invalidates what it wrote around the
            // mapping (the shim after a `pwrite`): kept marker bytes go too.
            self.forget_kept(cands);
        }
        let mut v = self.claim_victims(cands, explicit);
        let mut failure = self.write_back_victims(&mut v, explicit);
        self.stats().add(Counter::EvictionCancels, v.cancels);
        if let Some(e) = self.drop_victims(&mut v) {
            failure = failure.or(Some((0, e)));
        }
        (self.finish_victims(v), failure)
    }

    /// Step 1, claim: `Cached → Evicting` by CAS for the clean, idle candidates (`Aside →
    /// Evicting` for set-aside ones), the write-back claim for the dirty ones. A candidate
    /// that is pinned, locked or vetoed is cancelled, never waited for.
    fn claim_victims(&self, cands: &[u64], explicit: bool) -> Victims {
        let mut v = Victims::default();
        for &i in cands {
            let s = self.state(i);
            if s.load().phase() == Phase::Evicted {
                // Nothing to evict (an explicit range, or unmap's pass over every buffer): no
                // candidate, so no cancelled eviction either.
                continue;
            }
            if !explicit && !self.policy.is_evictable(i) {
                v.cancels += 1;
                continue;
            }
            let w = s.load();
            if w.dirty() {
                if self.writable && self.claim_writeback(i) {
                    v.dirty.push(i);
                } else {
                    v.cancels += 1;
                }
            } else if let Some(e) = w.begin_evict() {
                // One try for the policy's victims: a word that moved was accessed, and keeps
                // its second chance. An explicit eviction (the application's own command, how
                // the shim drops bytes a `pwrite` changed) tries again while the buffer stays
                // clean and idle: an optimistic read setting the referenced bit, or a pin that
                // came and went, must not make it skip the buffer.
                let mut from = w;
                let claimed = if explicit {
                    s.update(|cur| {
                        from = cur;
                        if cur.dirty() {
                            None
                        } else {
                            cur.begin_evict()
                        }
                    })
                    .is_ok()
                } else {
                    s.cas(w, e).is_ok()
                };
                if claimed {
                    if from.phase() == Phase::Aside {
                        v.aside.push(i);
                    } else {
                        v.clean.push(i);
                    }
                } else {
                    v.cancels += 1;
                }
            } else {
                v.cancels += 1;
            }
        }
        v
    }

    /// Step 2, write back the dirty victims in one batch, then claim those written and not
    /// touched since like clean ones. Returns the failure to report (see
    /// [`MappingCore::evict_indices`]).
    fn write_back_victims(&self, v: &mut Victims, explicit: bool) -> Option<(usize, Error)> {
        if v.dirty.is_empty() {
            return None;
        }
        let mut failure = None;
        let errors = self.write_claimed(&v.dirty);
        if let Some(first) = errors.into_iter().next() {
            let failed = v
                .dirty
                .iter()
                .filter(|&&i| self.state(i).load().dirty())
                .count();
            if explicit {
                failure = Some((failed, first));
            } else {
                // A round on behalf of a load (or the background evictor): should the
                // load run out of patience, this is why no memory could be freed.
                crate::budget::note_writeback_failure(failed, first);
            }
        }
        for i in std::mem::take(&mut v.dirty) {
            // Written and not touched since: claim it like any clean buffer. Clean now, it
            // may have been set aside meanwhile by another round, and then leaves as one.
            let s = self.state(i);
            let mut was = Phase::Cached;
            let claimed = s.update(|w| {
                was = w.phase();
                w.begin_evict()
            });
            match claimed {
                Ok(_) if was == Phase::Aside => v.aside.push(i),
                Ok(_) => v.clean.push(i),
                Err(_) => v.cancels += 1,
            }
        }
        failure
    }

    /// Step 3, drop: the claimed victims' memory goes ([`MappingCore::drop_homes`]: pages
    /// to the kernel, or frames to the pool), and set-aside ones free their slots. Returns
    /// a failure to drop pages.
    fn drop_victims(&self, v: &mut Victims) -> Option<Error> {
        if let Some(pool) = &self.aside {
            // Set-aside buffers have no pages in the mapping: freeing the slot is all.
            v.aside.iter().for_each(|&i| pool.release(i));
        }
        self.drop_homes(&mut v.clean)
    }

    /// Step 4, finish: the policy forgets the victims, their words say `Evicted` (version
    /// bumped, waiters woken), and their budget goes back. Returns how many buffers' budget
    /// this freed (on a pool mapping, how many frames it gave back).
    fn finish_victims(&self, mut v: Victims) -> u64 {
        let carried = v.aside.len() as u64;
        if let Some(pool) = self.aside.as_ref().filter(|_| carried > 0) {
            // Before their words say `Evicted`: `unmap` may be waiting on them, and once it
            // sees every buffer evicted it expects the pool to carry none.
            pool.uncarry(carried);
        }
        let mut gone = v.clean;
        gone.append(&mut v.aside);
        if gone.is_empty() {
            return 0;
        }
        // Plain loads of a transparent mapping are invisible (access tracking sees a touch only
        // after the buffer was set aside, which drops the mark): a prefetch used by loads alone
        // would look wasted, so none is counted there.
        let seen = !self.home.is_transparent();
        let mut wasted = 0;
        for &i in &gone {
            self.policy.on_evict(i);
            let s = self.state(i);
            if seen && s.load().prefetched() {
                wasted += 1;
            }
            let r = s.update(|w| Some(w.finish_evict()));
            debug_assert!(r.is_ok());
        }
        let n = gone.len() as u64;
        self.resident.sub(n);
        self.release_evicted(n - carried);
        let st = self.stats();
        st.add(Counter::Evictions, n);
        if crate::evictor::on_evictor_thread() {
            st.add(Counter::EvictionsAhead, n);
        }
        st.add(Counter::PrefetchWasted, wasted);
        n - carried
    }

    /// Writes back everything, evicts everything and leaves the cache. On a failure the
    /// mapping is whole again and back in the cache, dirty data included, so that `unmap` can
    /// be retried (or `Drop` can report what it could not write).
    pub(super) fn release(self: &Arc<Self>) -> Result<()> {
        if self.unmapped.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.forked_away() {
            return Err(Error::Forked);
        }
        // Out of the cache's list first, and refusing new calls: an address-based call
        // (`Cache::msync(addr)`) must not load buffers behind the passes. A plain load of a
        // transparent mapping is still served; the passes repeat until nothing is resident.
        self.cache.budget.mappings().remove(self.id);
        self.unmapped.store(true, Ordering::Release);
        let r = self.write_back_and_evict_all();
        if r.is_err() {
            self.unmapped.store(false, Ordering::Release);
            self.cache.budget.mappings().add(self.clone());
        }
        r
    }

    /// Passes of write-back and eviction over every buffer until none is resident. A second
    /// pass is only needed for a call that was already inside the mapping when `unmap` began.
    fn write_back_and_evict_all(&self) -> Result<()> {
        const PASSES: usize = 8;
        for pass in 1.. {
            self.msync_buffers(0..self.buffers())?;
            let all: Vec<u64> = (0..self.buffers()).collect();
            for chunk in all.chunks(1024) {
                // Settle buffers that a background load or a concurrent evictor still owns.
                for &i in chunk {
                    let s = self.state(i);
                    loop {
                        let w = s.load();
                        if matches!(w.phase(), Phase::Cached | Phase::Evicted | Phase::Aside)
                            && !w.writing()
                        {
                            break;
                        }
                        s.wait_change(w);
                    }
                }
                let (_, failure) = self.evict_indices(chunk, true);
                if let Some((_, e)) = failure {
                    return Err(e);
                }
            }
            let left = (0..self.buffers())
                .filter(|&i| self.state(i).load().phase() != Phase::Evicted)
                .count() as u64;
            if left == 0 {
                if let Some(pool) = &self.aside {
                    // Every buffer gone, so every slot is free and the pool carries none.
                    debug_assert_eq!(pool.carried(), 0, "set-aside buffers left uncounted");
                    debug_assert!(pool.all_free(), "a set-aside slot leaked");
                    pool.give_back(&self.cache.budget);
                }
                self.give_back_kept();
                self.trim_home();
                return Ok(());
            }
            if pass == PASSES {
                return Err(Error::InUse { resident: left });
            }
            std::thread::yield_now();
        }
        unreachable!()
    }
}
