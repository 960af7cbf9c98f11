//! Eviction: optimistic and batched. Candidates are claimed by CAS (a pinned or touched one
//! fails and is skipped, never waited for), dirty ones written back in one batch, and the
//! memory of the rest dropped with one `process_madvise`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};
use crate::policy::Buffers;
use crate::state::Phase;
use crate::stats::Counter;

impl MappingCore {
    /// Asks the policy for up to `want` victims and evicts those that validate; if none do,
    /// the manager's own sweep picks the victims instead.
    pub(crate) fn evict_some(&self, want: usize) -> u64 {
        match &self.aside {
            Some(q) => self.evict_some_tracked(q, want),
            None => self.evict_chosen(want),
        }
    }

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
    /// pool already) and, if write-backs failed, their count and the first error: returned
    /// when `explicit`, else noted for the `reserve` that ran this round
    /// ([`crate::cache::note_writeback_failure`]). A failure to drop pages is returned either way.
    pub(super) fn evict_indices(
        &self,
        cands: &[u64],
        explicit: bool,
    ) -> (u64, Option<(usize, Error)>) {
        let mut clean = Vec::with_capacity(cands.len());
        let mut aside = Vec::new();
        let mut dirty = Vec::new();
        let mut cancels = 0u64;
        for &i in cands {
            let s = self.state(i);
            if s.load().phase() == Phase::Evicted {
                // Nothing to evict (an explicit range, or unmap's pass over every buffer): no
                // candidate, so no cancelled eviction either.
                continue;
            }
            if !explicit && !self.policy.is_evictable(i) {
                cancels += 1;
                continue;
            }
            let w = s.load();
            if w.dirty() {
                if self.writable && self.claim_writeback(i) {
                    dirty.push(i);
                } else {
                    cancels += 1;
                }
            } else if let Some(e) = w.begin_evict() {
                if s.cas(w, e).is_ok() {
                    if w.phase() == Phase::Aside {
                        aside.push(i);
                    } else {
                        clean.push(i);
                    }
                } else {
                    cancels += 1;
                }
            } else {
                cancels += 1;
            }
        }
        let mut failure = None;
        if !dirty.is_empty() {
            let errors = self.write_claimed(&dirty);
            if let Some(first) = errors.into_iter().next() {
                let failed = dirty
                    .iter()
                    .filter(|&&i| self.state(i).load().dirty())
                    .count();
                if explicit {
                    failure = Some((failed, first));
                } else {
                    // A round on behalf of a load (or the background evictor): should the
                    // load run out of patience, this is why no memory could be freed.
                    crate::cache::note_writeback_failure(failed, first);
                }
            }
            for &i in &dirty {
                // Written and not touched since: claim it like any clean buffer. Clean now, it
                // may have been set aside meanwhile by another round, and then leaves as one.
                let s = self.state(i);
                let mut was = Phase::Cached;
                let claimed = s.update(|w| {
                    was = w.phase();
                    w.begin_evict()
                });
                match claimed {
                    Ok(_) if was == Phase::Aside => aside.push(i),
                    Ok(_) => clean.push(i),
                    Err(_) => cancels += 1,
                }
            }
        }
        self.stats().add(Counter::EvictionCancels, cancels);
        if let Some(pool) = &self.aside {
            // Set-aside buffers have no pages in the mapping: freeing the slot is all.
            aside.iter().for_each(|&i| pool.release(i));
        }
        if !clean.is_empty() {
            // Neighbours (a scan's buffers) go as one range: one zap instead of many.
            clean.sort_unstable();
            let mut ranges: Vec<(usize, usize)> = Vec::with_capacity(clean.len());
            for &i in &clean {
                let off = (i << self.shift) as usize;
                match ranges.last_mut() {
                    Some((o, l)) if *o + *l == off => *l += self.bs,
                    _ => ranges.push((off, self.bs)),
                }
            }
            if let Err((kept, e)) = self.region.drop_ranges(&ranges) {
                // Those ranges could not be dropped whole, but `madvise` stops at the first
                // page it refuses (a locked one) after zapping those before it, so their bytes
                // cannot be trusted as cached. On a plain mapping the buffers are clean and the
                // next load reads every byte in place, so they go on to `Evicted` with the rest
                // (that load reuses their leftover pages). A transparent mapping's load
                // installs into absent pages only, so there they stay resident: locked pages
                // are not supported on transparent mappings (`MapOptions::transparent`).
                if self.region.is_transparent() {
                    let kept: Vec<(usize, usize)> = kept.iter().map(|&k| ranges[k]).collect();
                    let in_kept = |i: u64| {
                        let off = (i << self.shift) as usize;
                        kept.iter().any(|&(o, l)| off >= o && off < o + l)
                    };
                    clean.retain(|&i| {
                        if in_kept(i) {
                            let _ = self.state(i).update(|w| Some(w.cancel_evict()));
                            false
                        } else {
                            true
                        }
                    });
                }
                failure = failure.or(Some((0, e)));
            }
        }
        let carried = aside.len() as u64;
        if let Some(pool) = self.aside.as_ref().filter(|_| carried > 0) {
            // Before their words say `Evicted`: `unmap` may be waiting on them, and once it
            // sees every buffer evicted it expects the pool to carry none.
            pool.uncarry(carried);
        }
        clean.append(&mut aside);
        if clean.is_empty() {
            return (0, failure);
        }
        // Plain loads of a transparent mapping are invisible (access tracking sees a touch only
        // after the buffer was set aside, which drops the mark): a prefetch used by loads alone
        // would look wasted, so none is counted there.
        let seen = !self.region.is_transparent();
        let mut wasted = 0;
        for &i in &clean {
            self.policy.on_evict(i);
            let s = self.state(i);
            if seen && s.load().prefetched() {
                wasted += 1;
            }
            let r = s.update(|w| Some(w.finish_evict()));
            debug_assert!(r.is_ok());
        }
        let n = clean.len() as u64;
        self.resident.fetch_sub(n, Ordering::Relaxed);
        self.cache.release((n - carried) * self.bs as u64);
        let st = self.stats();
        st.add(Counter::Evictions, n);
        if crate::evictor::on_evictor_thread() {
            st.add(Counter::EvictionsAhead, n);
        }
        st.add(Counter::PrefetchWasted, wasted);
        (n - carried, failure)
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
        self.cache.remove_mapping(self.id);
        self.unmapped.store(true, Ordering::Release);
        let r = self.write_back_and_evict_all();
        if r.is_err() {
            self.unmapped.store(false, Ordering::Release);
            self.cache.add_mapping(self.clone());
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
                    pool.give_back(&self.cache);
                }
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
