//! The store behind a shim mapping: the program's file, reopened by the shim, read and written
//! with raw system calls (never through the shim's own `pread`/`pwrite`, which would route
//! the cache's IO back into the cache).
//!
//! It gives the kernel's end-of-file rules: a buffer that starts at or past the end of the
//! file cannot be read (the fault fails and the access gets `SIGBUS`, as a page past EOF
//! does); the buffer holding the end reads as zeros after it; a write-back never writes past
//! the current end (a truncation drops what lay beyond, as the page cache does).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use ucache::store::{Object, OpenOptions, Store};

/// Descriptors the shim owns, closed on drop: the file, and the same file opened with
/// `O_DIRECT` for reads.
///
/// Why the second one: a buffered `pread` copies the bytes twice before ucache installs them
/// (the device into the page cache, the page cache into the staging buffer), and the page
/// cache page is allocated, charged and put on the LRU only to be copied out of. A direct read
/// lands in the staging buffer at once. It is coherent with the buffered descriptor's writes:
/// the kernel writes dirty page-cache pages of the range back before a direct read of it.
pub(crate) struct RawFile {
    pub fd: i32,
    /// `O_DIRECT` descriptor for aligned reads, if the file system allows one.
    pub direct: Option<i32>,
}

impl Drop for RawFile {
    fn drop(&mut self) {
        crate::real::close(self.fd);
        if let Some(d) = self.direct {
            crate::real::close(d);
        }
    }
}

/// Bytes read through direct descriptors, for the statistics printed at exit.
pub(crate) static DIRECT_BYTES: AtomicU64 = AtomicU64::new(0);

/// Alignment a direct read needs of its memory, offset and length here: a page, which every
/// buffer (4 KiB and up, at page-aligned offsets) and staging area has, and which covers
/// every block size a file system on this machine uses.
const DIRECT_ALIGN: usize = 4096;

impl RawFile {
    /// The file behind the shim's own descriptor `fd`, with an `O_DIRECT` twin for aligned
    /// reads when `direct` is asked for and the file system allows one.
    pub(crate) fn new(fd: i32, direct: bool) -> RawFile {
        let direct = direct.then(|| crate::real::reopen_direct(fd)).flatten();
        RawFile { fd, direct }
    }

    pub(crate) fn size(&self) -> io::Result<u64> {
        crate::real::fstat(self.fd)
            .map(|st| st.st_size as u64)
            .ok_or_else(io::Error::last_os_error)
    }

    /// One `pread64` or `pwrite64` (`nr`) of `len` bytes at `buf`, at `offset` of the file,
    /// retried while interrupted: the bytes it moved.
    ///
    /// # Safety
    /// `buf..buf+len` is valid for what `nr` does with it: writes for a read, reads for a
    /// write.
    unsafe fn io_at(
        &self,
        nr: libc::c_long,
        buf: *const u8,
        len: usize,
        offset: u64,
    ) -> io::Result<usize> {
        // SAFETY: forwarded.
        unsafe { io_at(self.fd, nr, buf, len, offset) }
    }

    /// Reads the aligned front of `buf` at `offset` through the direct descriptor: the bytes
    /// read, which may be fewer than asked (the end of the file; the caller reads the rest,
    /// if any, through the page cache). 0 if there is no direct descriptor, the request is not
    /// aligned, or the file system refused it.
    fn read_direct(&self, buf: &mut [u8], offset: u64) -> usize {
        let Some(d) = self.direct else { return 0 };
        let aligned = (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
            && (offset as usize).is_multiple_of(DIRECT_ALIGN)
            && buf.len().is_multiple_of(DIRECT_ALIGN);
        if !aligned {
            return 0;
        }
        // SAFETY: `buf` is valid for writes.
        let n = unsafe { io_at(d, libc::SYS_pread64, buf.as_mut_ptr(), buf.len(), offset) }
            .unwrap_or(0);
        DIRECT_BYTES.fetch_add(n as u64, Relaxed);
        n
    }
}

/// One `pread64` or `pwrite64` (`nr`) on `fd`, retried while interrupted.
///
/// # Safety
/// As [`RawFile::io_at`].
unsafe fn io_at(
    fd: i32,
    nr: libc::c_long,
    buf: *const u8,
    len: usize,
    offset: u64,
) -> io::Result<usize> {
    loop {
        // SAFETY: per this function's contract.
        let r = unsafe { libc::syscall(nr, fd, buf, len, offset as libc::off_t) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

pub(crate) struct FileObject {
    pub file: Arc<RawFile>,
    pub name: String,
    /// The end of the mapping: reported as the length where the file is shorter, so that a
    /// mapping may reach past the end of its file as `mmap`'s may (LMDB maps its whole map
    /// size over a shorter file).
    pub min_len: u64,
}

impl Object for FileObject {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.size()?.max(self.min_len))
    }
    /// The shim's own buffered descriptor of the file: a view maps it.
    fn page_cache_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.file.fd)
    }
    fn set_len(&self, _len: u64) -> io::Result<()> {
        // Never asked: `len` covers every mapping (a kernel mapping does not grow its file).
        Ok(())
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut done = self.file.read_direct(buf, offset);
        while done < buf.len() {
            let rest = &mut buf[done..];
            // SAFETY: `rest` is valid for writes.
            let r = unsafe {
                self.file.io_at(
                    libc::SYS_pread64,
                    rest.as_mut_ptr(),
                    rest.len(),
                    offset + done as u64,
                )?
            };
            if r == 0 {
                break;
            }
            done += r;
        }
        if done == 0 {
            // Wholly past the end of the file: the fault fails, the access gets SIGBUS.
            return Ok(0);
        }
        buf[done..].fill(0);
        Ok(buf.len())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let size = self.file.size()?;
        if offset >= size {
            return Ok(());
        }
        let n = buf.len().min((size - offset) as usize);
        let mut done = 0usize;
        while done < n {
            let rest = &buf[done..n];
            // SAFETY: `rest` is valid for reads.
            let r = unsafe {
                self.file.io_at(
                    libc::SYS_pwrite64,
                    rest.as_ptr(),
                    rest.len(),
                    offset + done as u64,
                )?
            };
            if r == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            done += r;
        }
        Ok(())
    }
    fn sync(&self) -> io::Result<()> {
        // SAFETY: no pointers.
        if unsafe { libc::syscall(libc::SYS_fdatasync, self.file.fd) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A store of one object: the one the mapping being made opens.
pub(crate) struct OneObject(pub Arc<FileObject>);

impl Store for OneObject {
    fn open(&self, _object: &str, _options: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        Ok(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::os::fd::AsRawFd;

    use super::*;

    const LEN: usize = 3 * 4096 + 100;

    fn pat(i: usize, seed: u8) -> u8 {
        (i * 7 + i / 4096) as u8 ^ seed
    }

    /// Page-aligned memory of `len` bytes, freed on drop.
    struct Aligned(*mut u8, Layout);
    impl Aligned {
        fn new(len: usize) -> Aligned {
            let l = Layout::from_size_align(len, DIRECT_ALIGN).unwrap();
            // SAFETY: a layout of non-zero size.
            Aligned(unsafe { alloc_zeroed(l) }, l)
        }
        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: the allocation made in `new`, owned by self.
            unsafe { std::slice::from_raw_parts_mut(self.0, self.1.size()) }
        }
    }
    impl Drop for Aligned {
        fn drop(&mut self) {
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.0, self.1) };
        }
    }

    /// A file of `LEN` bytes (the end inside a page) on a disk file system, and the object
    /// the shim would make of it.
    fn setup(dir: &std::path::Path) -> (std::fs::File, FileObject) {
        let path = dir.join("f");
        let data: Vec<u8> = (0..LEN).map(|i| pat(i, 0)).collect();
        std::fs::write(&path, data).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        let fd = crate::real::reopen(f.as_raw_fd(), true).unwrap();
        let direct = crate::real::reopen_direct(fd);
        assert!(direct.is_some(), "O_DIRECT refused under {}", dir.display());
        let obj = FileObject {
            file: Arc::new(RawFile { fd, direct }),
            name: "f".into(),
            min_len: 0,
        };
        (f, obj)
    }

    #[test]
    fn aligned_reads_go_around_the_page_cache_and_see_its_writes() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (_f, obj) = setup(dir.path());
        let mut a = Aligned::new(4 * 4096);
        let before = DIRECT_BYTES.load(Relaxed);
        assert_eq!(obj.read_at(a.bytes(), 0).unwrap(), 4 * 4096);
        assert!(
            DIRECT_BYTES.load(Relaxed) - before >= LEN as u64,
            "the read went through the direct descriptor"
        );
        let b = a.bytes();
        assert!((0..LEN).all(|i| b[i] == pat(i, 0)), "the file's bytes");
        assert!(b[LEN..].iter().all(|&x| x == 0), "zeros after the end");
        // A write through the page cache (not synced): the direct read of it sees it.
        let new: Vec<u8> = (4096..8192).map(|i| pat(i, 0x5a)).collect();
        obj.write_at(&new, 4096).unwrap();
        assert_eq!(obj.read_at(&mut a.bytes()[..4096], 4096).unwrap(), 4096);
        assert!(a.bytes()[..4096].iter().zip(&new).all(|(x, y)| x == y));
        // Wholly past the end: nothing, as the kernel's SIGBUS past the end needs.
        assert_eq!(obj.read_at(&mut a.bytes()[..4096], 4 * 4096).unwrap(), 0);
    }

    #[test]
    fn unaligned_reads_go_through_the_page_cache() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let (_f, obj) = setup(dir.path());
        let mut a = Aligned::new(4 * 4096);
        // Memory one byte off a page, then an offset one byte off a page, then a length.
        for (at, off, len) in [(1, 0, 4096), (0, 1, 4096), (0, 0, 100)] {
            let buf = &mut a.bytes()[at..at + len];
            assert_eq!(obj.read_at(buf, off as u64).unwrap(), len);
            assert!(
                buf.iter().enumerate().all(|(k, &x)| x == pat(off + k, 0)),
                "at {at}, offset {off}, len {len}"
            );
        }
    }
}
