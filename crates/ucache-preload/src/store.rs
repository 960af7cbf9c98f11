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
    fn size(&self) -> io::Result<u64> {
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
