//! The index-list forms of the range primitives (`evict`, `writeback`, `msync`): the same
//! operations over the buffers a program names, for callers that think in buffers (a hash
//! index's buckets, a graph frontier) rather than byte ranges. Every index is checked before
//! anything happens, and a repeated index counts once.

use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};
use crate::io_worker::Job;

impl MappingCore {
    /// `indices` sorted and without repeats, or the error for the first one past the end.
    pub(super) fn distinct(&self, indices: &[u64]) -> Result<Vec<u64>> {
        for &i in indices {
            self.check_index(i)?;
        }
        let mut v = indices.to_vec();
        v.sort_unstable();
        v.dedup();
        Ok(v)
    }

    pub(crate) fn evict_indices_explicit(&self, indices: &[u64]) -> Result<()> {
        let v = self.distinct(indices)?;
        match self.evict_indices(&v, true).1 {
            None => Ok(()),
            Some((failed, first)) => Err(Error::WritebackFailed {
                failed,
                first: Box::new(first),
            }),
        }
    }

    pub(crate) fn writeback_indices(self: &Arc<Self>, indices: &[u64]) -> Result<()> {
        let v = self.distinct(indices)?;
        if !self.writable {
            return Ok(());
        }
        let claimed: Vec<u64> = v.into_iter().filter(|&i| self.claim_writeback(i)).collect();
        if !claimed.is_empty() {
            self.cache.io.submit(Job::Writeback {
                mapping: self.clone(),
                indices: claimed,
            });
        }
        Ok(())
    }

    /// Distinct indices matter here: msync waits for buffers claimed by others, and a repeat
    /// would find the buffer claimed by this very call.
    pub(crate) fn msync_indices(&self, indices: &[u64]) -> Result<()> {
        let v = self.distinct(indices)?;
        self.msync_buffers(v)
    }
}
