//! A mapping as the IO threads see it ([`crate::io_worker`]): the three calls a prefetch or
//! write-back job makes, behind a trait so that the worker, which the cache's shared core
//! owns, does not name the mapping.

use super::MappingCore;
use crate::io_worker::IoTarget;

impl IoTarget for MappingCore {
    unsafe fn load_stream(&self, depth: usize, next: &mut dyn FnMut() -> Option<u64>) {
        // SAFETY: forwarded from our caller (each index a claim of this mapping, adopted once).
        unsafe { MappingCore::load_stream(self, depth, next) }
    }

    unsafe fn load_handed(&self, indices: &[u64]) {
        // Failures are counted in the stats and leave the buffers evicted: the next access
        // meets them again and reports them to its caller.
        // SAFETY: forwarded from our caller.
        let _ = unsafe { MappingCore::load_handed(self, indices, None) };
    }

    fn write_claimed(&self, indices: &[u64]) {
        // Failures leave the buffers dirty, counted in the stats, for the next msync to report.
        MappingCore::write_claimed(self, indices);
    }
}
