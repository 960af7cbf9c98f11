//! The page cache through a shared read-only file mapping with plain loads: the baseline ucache
//! wants to beat while keeping its surface. Runs inside the memory cgroup.

use std::fs::File;
use std::os::fd::AsRawFd;

use super::{Params, System};
use crate::bench::worker::ThreadCtx;

pub struct Mmap {
    base: *const u8,
    len: usize,
    _file: File,
}

// SAFETY: the mapping is read-only and lives as long as the struct; sharing loads from it
// between threads is what a MAP_SHARED mapping is for.
unsafe impl Sync for Mmap {}
// SAFETY: as above.
unsafe impl Send for Mmap {}

impl Mmap {
    pub fn open(p: &Params) -> Result<Self, String> {
        let file = File::open(&p.path).map_err(|e| format!("open {}: {e}", p.path.display()))?;
        let len = p.data_bytes as usize;
        // SAFETY: mapping a file we opened read-only; checked for MAP_FAILED below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        // Random lookups would otherwise fault in readahead windows of neighbours they never
        // use, spending the cgroup's budget on them; scans keep the kernel's readahead.
        if p.workload.is_random() {
            // SAFETY: advice on the range we just mapped.
            if unsafe { libc::madvise(base, len, libc::MADV_RANDOM) } != 0 {
                return Err(format!("madvise: {}", std::io::Error::last_os_error()));
            }
        }
        Ok(Mmap {
            base: base as *const u8,
            len,
            _file: file,
        })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmapping what open() mapped.
        unsafe { libc::munmap(self.base as *mut _, self.len) };
    }
}

impl System for Mmap {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let bs = ctx.params().buffer_size;
        while ctx.running() {
            let t = ctx.sample();
            let idx = ctx.next_index();
            let off = idx as usize * bs;
            assert!(off + bs <= self.len);
            // SAFETY: in bounds of a live read-only mapping of a file nobody truncates.
            let buf = unsafe { std::slice::from_raw_parts(self.base.add(off), bs) };
            ctx.touch(buf, idx);
            ctx.done(1, t);
        }
        Ok(())
    }
}
