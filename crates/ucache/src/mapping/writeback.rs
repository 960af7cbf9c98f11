//! Write-back: dirty buffers are claimed (`WB`, which keeps writers out, and write
//! protection on a transparent mapping), written in one store batch, and left clean, or dirty
//! and resident when the write failed.

use std::sync::Arc;

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
        if let Err(e) = self
            .region
            .protect((i << self.shift) as usize, self.bs, true)
        {
            // Unprotected pages would take stores unnoticed: keep the buffer dirty instead.
            let r = self.state(i).update(|w| Some(w.finish_writeback(false)));
            debug_assert!(r.is_ok());
            return Err(e);
        }
        Ok(true)
    }

    /// Writes claimed buffers in one store batch. Returns the failures; those buffers are dirty
    /// again and stay resident.
    pub(crate) fn write_claimed(&self, claimed: &[u64]) -> Vec<Error> {
        if claimed.is_empty() {
            return Vec::new();
        }
        let reqs: Vec<IoBuf> = claimed
            .iter()
            .map(|&i| {
                // SAFETY: the write-back pin keeps writers out; the store only reads.
                unsafe {
                    IoBuf::new(
                        self.region.at((i << self.shift) as usize),
                        self.valid(i),
                        self.object_offset(i),
                    )
                }
            })
            .collect();
        let mut out = Vec::with_capacity(reqs.len());
        self.object.write_batch(&reqs, &mut out);
        drop(reqs);
        let mut errors = Vec::new();
        let mut ok = 0u64;
        let mut bytes = 0u64;
        let mut failed = 0u64;
        for (k, &i) in claimed.iter().enumerate() {
            let r = take_result(&mut out, k);
            let good = r.is_ok();
            if let Err(e) = r {
                failed += 1;
                errors.push(Error::io(
                    "write",
                    self.object.name(),
                    self.object_offset(i),
                    e,
                ));
            } else {
                ok += 1;
                bytes += self.valid(i) as u64;
            }
            if !good && self.region.is_transparent() {
                // Dirty again, so writable again: a dirty buffer is never write-protected,
                // which an exclusive pin in handler-thread mode relies on (it lifts the
                // protection of clean buffers only), as does any store, which then need not
                // fault. Still ours (WB and a pin), so no store can race this. Should the
                // kernel refuse, the buffer stays dirty and protected: a store then lifts the
                // protection through its write fault, and the refusal is reported with the
                // write's own failure.
                if let Err(e) = self
                    .region
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
        st.add(Counter::WritebackFailures, failed);
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
    pub(super) fn msync_buffers(&self, r: std::ops::Range<u64>) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut pending: Vec<u64> = r.collect();
        while !pending.is_empty() {
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
            errors.extend(self.write_claimed(&mine));
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
        self.object
            .sync()
            .map_err(|e| Error::io("sync", self.object.name(), 0, e))
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
