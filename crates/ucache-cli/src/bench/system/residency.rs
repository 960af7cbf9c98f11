//! How much of the data file the page cache holds: the warm-up test of mmap and pread when no
//! memory cgroup reports their usage (`--no-cgroup`, or a machine without one). Without it
//! they were measured right after the warm-up seconds however cold, while ucache waited for
//! its budget to fill, which flattered ucache wherever the data fits in memory.

use std::fs::File;
use std::os::fd::AsRawFd;

/// A read-only mapping of the data file that is never touched, only asked `mincore`.
pub struct Residency {
    base: *mut libc::c_void,
    len: usize,
    /// Bytes resident at which the cache counts as warm.
    target: u64,
}

// SAFETY: the mapping is only passed to mincore(2), from any thread; nothing reads through it.
unsafe impl Send for Residency {}
// SAFETY: as above.
unsafe impl Sync for Residency {}

/// Maps the first `len` bytes of `file` read-only and shared; the caller unmaps them.
pub fn map_read_only(file: &File, len: usize) -> Result<*mut libc::c_void, String> {
    // SAFETY: mapping a file we opened, read-only; checked for MAP_FAILED below.
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
    Ok(base)
}

impl Residency {
    /// Warm within one eviction batch of the smaller of the memory budget and the data, as
    /// ucache's own test is.
    pub fn new(file: &File, data_bytes: u64, memory_bytes: u64) -> Result<Self, String> {
        let len = data_bytes as usize;
        let base = map_read_only(file, len)?;
        Ok(Residency {
            base,
            len,
            target: memory_bytes
                .min(data_bytes)
                .saturating_sub(crate::bench::worker::FULL_SLACK),
        })
    }

    /// Bytes of the file in the page cache now.
    pub fn resident(&self) -> u64 {
        let page = 4096usize;
        let mut vec = vec![0u8; self.len.div_ceil(page)];
        // SAFETY: base/len is our mapping, and vec has one byte per page of it.
        if unsafe { libc::mincore(self.base, self.len, vec.as_mut_ptr()) } != 0 {
            return u64::MAX;
        }
        vec.iter().filter(|&&b| b & 1 != 0).count() as u64 * page as u64
    }

    pub fn warm(&self) -> bool {
        self.resident() >= self.target
    }
}

impl Drop for Residency {
    fn drop(&mut self) {
        // SAFETY: unmapping what new() mapped.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn counts_what_was_read_into_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
        let f = File::open(&path).unwrap();
        // SAFETY: advisory calls on a valid fd: write the file out, then drop its clean pages.
        unsafe {
            libc::fdatasync(f.as_raw_fd());
            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
        }
        let r = Residency::new(&f, 1 << 20, 1 << 30).unwrap();
        let cold = r.resident();
        assert!(!r.warm(), "cold: {cold}");
        let mut buf = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut buf).unwrap();
        assert_eq!(r.resident(), 1 << 20, "cold: {cold}");
        assert!(r.warm());
    }
}
