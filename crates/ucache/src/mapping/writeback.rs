//! Write-back: dirty buffers are claimed (`WB`, which keeps writers out, and write
//! protection on a transparent mapping), written in one store batch, and left clean, or dirty
//! and resident when the write failed.

use std::sync::Arc;

use super::{take_result, MappingCore};
use crate::error::{Error, Result};
use crate::io_worker::Job;
use crate::stats::Counter;
use crate::store::IoBuf;

impl MappingCore {
    /// Begins write-back of `i` if it is dirty and no writer holds it. On a transparent
    /// mapping the buffer is then write-protected, so a store during the IO faults and waits
    /// for it, and a store after it marks the buffer dirty again; stores that landed between
    /// the claim and the protection are in memory before the IO reads it, so none is lost.
    pub(super) fn claim_writeback(&self, i: u64) -> bool {
        if self.state(i).update(|w| w.begin_writeback()).is_err() {
            return false;
        }
        if let Err(e) = self
            .region
            .protect((i << self.shift) as usize, self.bs, true)
        {
            // Unprotected pages would take stores unnoticed: keep the buffer dirty instead.
            let r = self.state(i).update(|w| Some(w.finish_writeback(false)));
            debug_assert!(r.is_ok(), "{e}");
            return false;
        }
        true
    }

    /// Writes claimed buffers in one store batch. Returns the failures; those buffers are dirty
    /// again and stay resident.
    pub(crate) fn write_claimed(&self, claimed: &[u64]) -> Vec<Error> {
        if claimed.is_empty() {
            return Vec::new();
        }
        let mut reqs: Vec<IoBuf> = claimed
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
        self.object.write_batch(&mut reqs, &mut out);
        drop(reqs);
        let mut errors = Vec::new();
        let mut ok = 0u64;
        let mut bytes = 0u64;
        for (k, &i) in claimed.iter().enumerate() {
            let r = take_result(&mut out, k);
            let good = r.is_ok();
            if let Err(e) = r {
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
            let r = self.state(i).update(|w| Some(w.finish_writeback(good)));
            debug_assert!(r.is_ok());
        }
        let st = self.stats();
        st.add(Counter::Writebacks, ok);
        st.add(Counter::BytesWritten, bytes);
        st.add(Counter::WritebackFailures, errors.len() as u64);
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

    /// Writes back every dirty buffer in the range and syncs the object. Buffers another
    /// thread is writing back are waited for; buffers held exclusively are being changed now
    /// and belong to a later msync.
    pub(crate) fn msync_range(&self, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        if !self.writable {
            return Ok(());
        }
        let mut mine = Vec::new();
        let mut theirs = Vec::new();
        for i in r {
            let w = self.state(i).load();
            if w.writing() {
                theirs.push(i);
            } else if w.dirty() && self.claim_writeback(i) {
                mine.push(i);
            } else if self.state(i).load().writing() {
                theirs.push(i);
            }
        }
        let mut errors = self.write_claimed(&mine);
        for i in theirs {
            let s = self.state(i);
            loop {
                let w = s.load();
                if !w.writing() {
                    break;
                }
                s.wait_change(w);
            }
            // Their write failed: the buffer is dirty again, so it is ours to retry now.
            if s.load().dirty() && self.claim_writeback(i) {
                errors.extend(self.write_claimed(&[i]));
            }
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
}
