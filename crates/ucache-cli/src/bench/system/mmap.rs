//! The page cache through a shared read-only file mapping with plain loads: the baseline ucache
//! wants to beat while keeping its surface. Runs inside the memory cgroup.

use std::fs::File;

use super::residency::{map_read_only, Residency};
use super::{Params, System};
use crate::bench::role::Role;
use crate::bench::worker::ThreadCtx;
use crate::bench::workload::Workload;

pub struct Mmap {
    base: *const u8,
    /// `getscan`'s scan threads read through a mapping of their own, without `MADV_RANDOM`:
    /// the advice belongs to a mapping, and scans keep the kernel's readahead.
    scan_base: Option<*const u8>,
    len: usize,
    residency: Residency,
    _file: File,
}

// SAFETY: the mappings are read-only and live as long as the struct; sharing loads from them
// between threads is what a MAP_SHARED mapping is for.
unsafe impl Sync for Mmap {}
// SAFETY: as above.
unsafe impl Send for Mmap {}

/// Maps `len` bytes of `file` read-only and shared, with `MADV_RANDOM` if `random`.
fn map(file: &File, len: usize, random: bool) -> Result<*const u8, String> {
    let base = map_read_only(file, len)?;
    // Random lookups would otherwise fault in readahead windows of neighbours they never
    // use, spending the cgroup's budget on them; scans keep the kernel's readahead.
    // SAFETY: advice on the range we just mapped.
    if random && unsafe { libc::madvise(base, len, libc::MADV_RANDOM) } != 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: unmapping what we just mapped.
        unsafe { libc::munmap(base, len) };
        return Err(format!("madvise: {e}"));
    }
    Ok(base as *const u8)
}

impl Mmap {
    pub fn open(p: &Params) -> Result<Self, String> {
        let file = File::open(&p.path).map_err(|e| format!("open {}: {e}", p.path.display()))?;
        let len = p.data_bytes as usize;
        let base = map(&file, len, p.workload.is_random())?;
        let scan_base = match p.workload {
            Workload::Getscan => match map(&file, len, false) {
                Ok(b) => Some(b),
                Err(e) => {
                    // SAFETY: unmapping the first mapping, which nothing else uses yet.
                    unsafe { libc::munmap(base as *mut _, len) };
                    return Err(e);
                }
            },
            _ => None,
        };
        let residency = match Residency::new(&file, p.data_bytes, p.memory_bytes) {
            Ok(r) => r,
            Err(e) => {
                // SAFETY: unmapping what was mapped above, which nothing uses yet.
                unsafe { libc::munmap(base as *mut _, len) };
                if let Some(b) = scan_base {
                    // SAFETY: as above.
                    unsafe { libc::munmap(b as *mut _, len) };
                }
                return Err(e);
            }
        };
        Ok(Mmap {
            base,
            scan_base,
            len,
            residency,
            _file: file,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmapping what open() mapped.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
        if let Some(b) = self.scan_base {
            // SAFETY: as above.
            unsafe { libc::munmap(b as *mut _, self.len) };
        }
    }
}

impl System for Mmap {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let bs = ctx.params().buffer_size;
        let base = match (ctx.role(), self.scan_base) {
            (Role::Scan, Some(b)) => b,
            _ => self.base,
        };
        while ctx.running() {
            let t = ctx.sample();
            let idx = ctx.next_index();
            let off = idx as usize * bs;
            assert!(off + bs <= self.len);
            // SAFETY: in bounds of a live read-only mapping of a file nobody truncates.
            let buf = unsafe { std::slice::from_raw_parts(base.add(off), bs) };
            ctx.touch(buf, idx);
            ctx.done(1, t);
        }
        Ok(())
    }

    fn warm(&self) -> bool {
        self.residency.warm()
    }
}
