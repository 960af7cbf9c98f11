//! Write-back: dirty buffers are claimed (`WB`, which keeps writers out, and write
//! protection on a transparent mapping), written in one store batch, and left clean, or dirty
//! and resident when the write failed.

use std::sync::Arc;

use super::sync_ledger::SyncError;
use super::{take_result, MappingCore};
use crate::error::{Error, Result};
use crate::io_worker::Job;
use crate::state::Word;
use crate::stats::Counter;
use crate::store::IoBuf;

impl MappingCore {
    /// Begins write-back of `i` if it is dirty and no writer holds it. On a transparent
    /// mapping the buffer is then write-protected, so a store during the IO faults and waits
    /// for it, and a store after it marks the buffer dirty again; stores that landed between
    /// the claim and the protection are in memory before the IO reads it, so none is lost.
    pub(super) fn claim_writeback(&self, i: u64) -> bool {
        matches!(self.try_claim_writeback(i), Ok(true))
    }

    /// As [`MappingCore::claim_writeback`], telling a failed protection (an error: the buffer
    /// stays dirty) from a buffer that is not claimable now (`Ok(false)`).
    fn try_claim_writeback(&self, i: u64) -> Result<bool> {
        if self.state(i).update(|w| w.begin_writeback()).is_err() {
            return Ok(false);
        }
        if let Err(e) = self.home.protect((i << self.shift) as usize, self.bs, true) {
            // Unprotected pages would take stores unnoticed: keep the buffer dirty instead.
            let r = self.state(i).update(|w| Some(w.finish_writeback(false)));
            debug_assert!(r.is_ok());
            return Err(e);
        }
        Ok(true)
    }

    /// Writes claimed buffers in one store batch and ends their write-back: those written are
    /// clean, the failures dirty again and resident. Returns the failures. Used where the
    /// write is not followed by a sync (eviction, [`crate::Mapping::writeback`]): what it
    /// wrote is counted as written but not yet durable, for [`MappingCore::msync_buffers`].
    pub(crate) fn write_claimed(&self, claimed: &[u64]) -> Vec<Error> {
        let n = claimed.len() as u64;
        self.sync_ledger.begin_clean_writes(n);
        let mut written = self.write_held(claimed);
        self.sync_ledger.end_clean_writes(n);
        self.finish_held(claimed, &mut written, true)
    }

    /// Writes claimed buffers in one store batch, keeping them claimed: the outcome of each.
    fn write_held(&self, claimed: &[u64]) -> Vec<Result<()>> {
        if claimed.is_empty() {
            return Vec::new();
        }
        // The hook first: a buffer it refuses is not written, and stays dirty.
        let refused = self.run_before_writeback(claimed);
        let reqs: Vec<IoBuf> = claimed
            .iter()
            .filter(|&&i| !refused.iter().any(|(j, _)| *j == i))
            .map(|&i| {
                // SAFETY: the write-back pin keeps writers out; the store only reads.
                unsafe { IoBuf::new(self.ptr(i), self.valid(i), self.object_offset(i)) }
            })
            .collect();
        let mut out = Vec::with_capacity(reqs.len());
        if !reqs.is_empty() {
            self.object.write_batch(&reqs, &mut out);
        }
        drop(reqs);
        let mut refused = refused.into_iter().peekable();
        let mut k = 0;
        claimed
            .iter()
            .map(|&i| {
                if refused.peek().is_some_and(|(j, _)| *j == i) {
                    return Err(refused.next().unwrap().1);
                }
                k += 1;
                take_result(&mut out, k - 1)
                    .map(drop)
                    .map_err(|e| Error::io("write", self.object.name(), self.object_offset(i), e))
            })
            .collect()
    }

    /// Ends the write-back of claimed buffers, `outcome[k]` telling buffer `claimed[k]`'s
    /// write: clean after a success if `synced` (the object was synced after it, or no sync
    /// was asked for), dirty again (and writable) otherwise. Returns the write failures, with
    /// any refusal to lift write protection.
    fn finish_held(&self, claimed: &[u64], outcome: &mut [Result<()>], synced: bool) -> Vec<Error> {
        let mut errors = Vec::new();
        let mut ok = 0u64;
        let mut bytes = 0u64;
        for (&i, r) in claimed.iter().zip(outcome.iter_mut()) {
            let good = r.is_ok() && synced;
            if good {
                ok += 1;
                bytes += self.valid(i) as u64;
            } else if let Err(e) = std::mem::replace(r, Ok(())) {
                errors.push(e);
            }
            if !good && self.home.is_transparent() {
                // Dirty again, so writable again: a dirty buffer is never write-protected,
                // which an exclusive pin in handler-thread mode relies on (it lifts the
                // protection of clean buffers only), as does any store, which then need not
                // fault. Still ours (WB and a pin), so no store can race this. Should the
                // kernel refuse, the buffer stays dirty and protected: a store then lifts the
                // protection through its write fault, and the refusal is reported with the
                // write's own failure.
                if let Err(e) = self
                    .home
                    .protect((i << self.shift) as usize, self.bs, false)
                {
                    errors.push(e);
                }
            }
            let r = self.state(i).update(|w| Some(w.finish_writeback(good)));
            debug_assert!(r.is_ok());
        }
        let st = self.stats();
        st.add(Counter::Writebacks, ok);
        st.add(Counter::BytesWritten, bytes);
        st.add(Counter::WritebackFailures, claimed.len() as u64 - ok);
        errors
    }

    pub(crate) fn writeback_range(self: &Arc<Self>, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        if !self.writable {
            return Ok(());
        }
        let claimed: Vec<u64> = r.filter(|&i| self.claim_writeback(i)).collect();
        if !claimed.is_empty() {
            self.cache.io.submit(Job::Writeback {
                mapping: self.clone(),
                indices: claimed,
            });
        }
        Ok(())
    }

    /// Writes back every dirty buffer in the range and syncs the object.
    pub(crate) fn msync_range(&self, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        self.msync_buffers(r)
    }

    /// Writes back every buffer of `r` that is dirty when the call begins, and syncs the
    /// object. A buffer another thread is writing back is waited for (and written again if
    /// that write failed); a dirty buffer held exclusively is waited for too, since the data it
    /// held before the pin must be durable when msync returns. That wait is refused with
    /// [`Error::WouldDeadlock`] where it could deadlock: the buffer is this thread's own, or
    /// this thread holds exclusive pins that the buffer's holder may be waiting for.
    ///
    /// A buffer msync writes stays claimed until the sync after its write has returned, and
    /// is clean only if both succeeded: after a failed sync (whose writes the kernel may have
    /// dropped, "fsyncgate") it is dirty again, so a retried msync writes it again. Writes
    /// made before, by eviction or `writeback`, left their buffers clean or gone: if a sync
    /// fails after such writes, the mapping is poisoned ([`super::sync_ledger`]).
    pub(super) fn msync_buffers(&self, r: impl IntoIterator<Item = u64>) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut sync_error = None;
        let mark = self.sync_ledger.poison_mark();
        let mut pending: Vec<u64> = r.into_iter().collect();
        loop {
            let mut mine = Vec::new();
            let mut busy = Vec::new();
            for i in pending.drain(..) {
                match self.claim_for_sync(i) {
                    Ok(SyncClaim::Claimed) => mine.push(i),
                    Ok(SyncClaim::Busy(w)) => busy.push((i, w)),
                    Ok(SyncClaim::Clean) => {}
                    Err(e) => errors.push(e),
                }
            }
            let epoch = self.sync_ledger.epoch();
            let mut written = self.write_held(&mine);
            // The last round always syncs, for writes made before this call; another round
            // syncs what it wrote before letting go of it, since its claims must not be held
            // while it waits for other writers (two msyncs would wait on each other).
            let mut synced = true;
            if busy.is_empty() || written.iter().any(|w| w.is_ok()) {
                if let Err(e) = self.sync_object(epoch) {
                    synced = false;
                    sync_error.get_or_insert(e);
                }
            }
            errors.extend(self.finish_held(&mine, &mut written, synced));
            if busy.is_empty() {
                break;
            }
            // Wait for the other writer or the pin, then look again: a successful write-back
            // left the buffer clean, a failed one left it dirty for us to write.
            for &(i, seen) in &busy {
                self.state(i).wait_change(seen);
            }
            pending = busy.into_iter().map(|(i, _)| i).collect();
        }
        if !errors.is_empty() {
            let failed = errors.len();
            return Err(Error::WritebackFailed {
                failed,
                first: Box::new(errors.swap_remove(0)),
            });
        }
        if let Some(e) = sync_error {
            return Err(e);
        }
        match self.sync_ledger.poisoned_since(mark) {
            Some(first) => Err(Error::SyncPoisoned {
                object: self.object.name().to_string(),
                first,
            }),
            None => Ok(()),
        }
    }

    /// Syncs the object, vouching for writes begun after `epoch`
    /// ([`super::sync_ledger::SyncLedger::sync`]).
    fn sync_object(&self, epoch: u64) -> Result<()> {
        let sync_error = |e| Error::io("sync", self.object.name(), 0, e);
        self.sync_ledger
            .sync(epoch, || self.object.sync())
            .map_err(|e| match e {
                SyncError::Failed(e) => sync_error(e),
                SyncError::Overtaken => sync_error(std::io::Error::other(
                    "another sync of this mapping failed after these writes began; they are \
                     dirty again",
                )),
            })
    }

    /// Lifts a poisoned mapping's poison ([`Error::SyncPoisoned`]), returning it.
    pub(crate) fn clear_sync_failure(&self) -> Option<String> {
        self.sync_ledger.clear()
    }

    /// msync's claim of buffer `i`.
    fn claim_for_sync(&self, i: u64) -> Result<SyncClaim> {
        let s = self.state(i);
        loop {
            let w = s.load();
            if w.writing() {
                return Ok(SyncClaim::Busy(w));
            }
            if !w.dirty() {
                return Ok(SyncClaim::Clean);
            }
            if w.exclusive() {
                self.self_wait(i)?;
                if crate::held::holds_exclusive() {
                    // Its holder may be waiting for one of ours: msync takes buffers in no
                    // order the application chose, so it must not wait crosswise.
                    return Err(Error::WouldDeadlock {
                        index: i,
                        why: "pinned exclusively by another thread while this one holds \
                              exclusive pins too",
                    });
                }
                return Ok(SyncClaim::Busy(w));
            }
            if self.try_claim_writeback(i)? {
                return Ok(SyncClaim::Claimed);
            }
            if s.load() == w {
                // Dirty, unlocked, not written, and still not claimable (every pin slot
                // taken): wait for the word to change.
                return Ok(SyncClaim::Busy(w));
            }
        }
    }
}

/// What msync found when it tried to claim a buffer.
enum SyncClaim {
    /// Claimed for write-back by this msync.
    Claimed,
    /// Another thread writes it back or holds it exclusively (the word as seen): wait for
    /// the word to change and look again.
    Busy(Word),
    /// Not dirty: nothing to write.
    Clean,
}
