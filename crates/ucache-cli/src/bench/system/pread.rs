//! The page cache through buffered pread: what a program gets that copies buffers out of the
//! kernel instead of mapping them. Runs inside the memory cgroup, so the kernel's LRU, not the
//! machine's free memory, decides what stays cached.

use std::fs::File;

use super::residency::Residency;
use super::{Params, System};
use crate::bench::role::Role;
use crate::bench::worker::ThreadCtx;
use crate::bench::workload::Workload;

pub struct Pread {
    file: File,
    residency: Residency,
    /// `getscan`'s scan threads read through a descriptor of their own, without
    /// `POSIX_FADV_RANDOM`: the advice belongs to an open file, and scans keep the kernel's
    /// readahead.
    scan_file: Option<File>,
}

impl Pread {
    pub fn open(p: &Params) -> Result<Self, String> {
        let open = || File::open(&p.path).map_err(|e| format!("open {}: {e}", p.path.display()));
        let file = open()?;
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
        let scan_file = match p.workload {
            Workload::Getscan => Some(open()?),
            _ => None,
        };
        let residency = Residency::new(&file, p.data_bytes, p.memory_bytes)?;
        Ok(Pread {
            file,
            residency,
            scan_file,
        })
    }
}

impl System for Pread {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let file = match (ctx.role(), &self.scan_file) {
            (Role::Scan, Some(f)) => f,
            _ => &self.file,
        };
        super::raw_psync::read_loop(file, ctx, false)
    }

    fn warm(&self) -> bool {
        self.residency.warm()
    }
}
