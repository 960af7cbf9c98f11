//! The page cache through buffered pread: what a program gets that copies buffers out of the
//! kernel instead of mapping them. Runs inside the memory cgroup, so the kernel's LRU, not the
//! machine's free memory, decides what stays cached.

use std::fs::File;

use super::{Params, System};
use crate::bench::worker::ThreadCtx;

pub struct Pread {
    file: File,
}

impl Pread {
    pub fn open(p: &Params) -> Result<Self, String> {
        let file = File::open(&p.path).map_err(|e| format!("open {}: {e}", p.path.display()))?;
        // Same as mmap: no readahead for random lookups, the kernel default for scans.
        if p.workload.is_random() {
            // SAFETY: advisory call on a valid fd.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                    0,
                    libc::POSIX_FADV_RANDOM,
                )
            };
        }
        Ok(Pread { file })
    }
}

impl System for Pread {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        super::raw_psync::read_loop(&self.file, ctx, false)
    }
}
