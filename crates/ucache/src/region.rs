//! The virtual memory behind a mapping, and the system calls that manage it.
//!
//! A region is reserved once with `MAP_NORESERVE` anonymous memory: untouched pages cost
//! nothing, a page gets a frame when data is read into it, and eviction gives frames back with
//! `MADV_DONTNEED`, after which the range reads as zeros again. Dropping is batched into one
//! `process_madvise` call per batch where the kernel allows it: DESIGN.md measured that batching
//! the unmapping is the largest single step on the eviction path.
//!
//! A file view's region is the file itself, mapped by the kernel `PROT_NONE`: ucache reveals
//! a buffer (`mprotect(PROT_READ)`, then `MADV_POPULATE_READ`, which reads it into the page
//! cache with the kernel's readahead and maps it) and hides it again on eviction (`PROT_NONE`,
//! then the same zap, then `POSIX_FADV_DONTNEED`). See `mapping/view.rs`.
//!
//! All of ucache's `mmap`/`madvise` unsafety lives in this file.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::uffd::{self, Uffd};

/// Most ranges one `process_madvise` call accepts (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;
/// Transparent huge page size on x86-64 and most arm64 kernels.
const HUGE_PAGE: usize = 2 << 20;
/// `madvise` advice that faults a range in for reading (Linux 5.14+), missing from `libc`.
const MADV_POPULATE_READ: libc::c_int = 22;

/// `mprotect`, `madvise` and `posix_fadvise` made as system calls, not through libc: in a
/// process with ucache's LD_PRELOAD shim, libc's are the shim's, which would take ucache's
/// own calls on a shim mapping for the program's (and a view's protection change for one
/// that demotes the mapping). Same arguments and results as the libc functions, errors in
/// `errno`.
mod sys {
    /// # Safety
    /// As `mprotect(2)`.
    pub(super) unsafe fn mprotect(at: *mut u8, len: usize, prot: libc::c_int) -> libc::c_int {
        // SAFETY: forwarded.
        unsafe { libc::syscall(libc::SYS_mprotect, at, len, prot) as libc::c_int }
    }
    /// # Safety
    /// As `madvise(2)`.
    pub(super) unsafe fn madvise(at: *mut u8, len: usize, advice: libc::c_int) -> libc::c_int {
        // SAFETY: forwarded.
        unsafe { libc::syscall(libc::SYS_madvise, at, len, advice) as libc::c_int }
    }
    /// `posix_fadvise(2)`, whose result only advises.
    pub(super) fn fadvise(fd: i32, offset: u64, len: usize, advice: libc::c_int) {
        // SAFETY: no memory is passed.
        unsafe { libc::syscall(libc::SYS_fadvise64, fd, offset as i64, len as i64, advice) };
    }
}

pub(crate) struct Region {
    raw: *mut u8,
    raw_len: usize,
    base: *mut u8,
    len: usize,
    /// Set for transparent mappings: absent pages and writes to clean pages fault into ucache.
    uffd: Option<Arc<Uffd>>,
    /// Set for a file view: the file mapped over the region, and its offset at `base`.
    view: Option<View>,
}

#[derive(Clone, Copy)]
struct View {
    fd: i32,
    file_offset: u64,
}

// SAFETY: the region is plain memory; which thread may touch which buffer of it is governed by
// the buffer state words, not by the Region value itself.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// Reserves `len` bytes aligned to `align` (a power of two). Alignments of 2 MiB and more
    /// also ask for transparent huge pages, so large buffers can be backed by one TLB entry.
    pub(crate) fn reserve(len: usize, align: usize) -> Result<Region> {
        let page = 4096;
        let align = align.max(page);
        let raw_len = len.checked_add(align).ok_or(Error::BadLength {
            len: len as u64,
            why: "too large for the address space",
        })?;
        // SAFETY: anonymous private mapping at an address of the kernel's choosing; we own it
        // until Drop unmaps it.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                raw_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(Error::last_os("mmap"));
        }
        let raw = raw as *mut u8;
        let pad = (align - (raw as usize) % align) % align;
        // SAFETY: pad < align, so base..base+len lies inside raw..raw+raw_len.
        let base = unsafe { raw.add(pad) };
        if align >= HUGE_PAGE {
            // SAFETY: advice on memory we own; failure only means no huge pages.
            unsafe { sys::madvise(base, len, libc::MADV_HUGEPAGE) };
        }
        Ok(Region {
            raw,
            raw_len,
            base,
            len,
            uffd: None,
            view: None,
        })
    }

    /// Reserves a file view: `len` bytes of file `fd` from `file_offset` (a multiple of the
    /// page size), mapped shared and read-only over an aligned reservation, all hidden
    /// (`PROT_NONE`). A load there raises `SIGSEGV` until [`Region::reveal`] opens its page.
    pub(crate) fn reserve_view(
        len: usize,
        align: usize,
        fd: i32,
        file_offset: u64,
    ) -> Result<Region> {
        let mut r = Region::reserve(len, align.max(4096))?;
        // SAFETY: the range is our own reservation, which the file mapping replaces; Drop
        // unmaps it with the rest. Neither side is read before this returns.
        let p = unsafe {
            libc::syscall(
                libc::SYS_mmap,
                r.base,
                len,
                libc::PROT_NONE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                file_offset as libc::off_t,
            )
        };
        if p == -1 {
            return Err(Error::last_os("mmap"));
        }
        r.view = Some(View { fd, file_offset });
        crate::fork::add_region(r.base as usize, r.len);
        Ok(r)
    }

    /// Whether this region is a file view ([`Region::reserve_view`]).
    pub(crate) fn is_view(&self) -> bool {
        self.view.is_some()
    }

    /// Opens `[offset, offset+len)` of a file view for reading and maps its pages, reading
    /// them into the page cache first. Only the protection change can fail: the populate is
    /// a head start, and a page it could not read (past the end of the file, a device error)
    /// faults on access and gets the kernel's own `SIGBUS`, as under `mmap`.
    pub(crate) fn reveal(&self, offset: usize, len: usize) -> Result<()> {
        debug_assert!(self.view.is_some() && offset + len <= self.len);
        let at = self.at(offset);
        // SAFETY: the range lies in our region; the caller owns its buffers (Loading).
        if unsafe { sys::mprotect(at, len, libc::PROT_READ) } != 0 {
            return Err(Error::last_os("mprotect"));
        }
        // SAFETY: advice on the same range.
        while unsafe { sys::madvise(at, len, MADV_POPULATE_READ) } != 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
        Ok(())
    }

    /// Reserves a region whose faults go to ucache: missing pages, and writes to
    /// write-protected (clean) pages. With `sigbus` they are delivered as `SIGBUS` to the
    /// faulting thread; otherwise they queue on the userfaultfd for a handler thread.
    pub(crate) fn reserve_transparent(len: usize, align: usize, sigbus: bool) -> Result<Region> {
        let mut r = Region::reserve(len, align.max(4096))?;
        let os = |call| move |e| Error::Os { call, source: e };
        let delivery = if sigbus {
            uffd::FEATURE_SIGBUS
        } else {
            uffd::FEATURE_THREAD_ID
        };
        // With SIGBUS delivery kernel-mode faults fail with EFAULT anyway, so a descriptor
        // limited to user faults (all an unprivileged process may open) loses nothing; handler
        // threads exist to serve kernel-mode faults and need the full one.
        let u = Uffd::open(delivery | uffd::FEATURE_PAGEFAULT_FLAG_WP, sigbus)
            .map_err(os("userfaultfd"))?;
        u.register(r.base, r.len).map_err(os("UFFDIO_REGISTER"))?;
        r.uffd = Some(Arc::new(u));
        crate::fork::add_region(r.base as usize, r.len);
        Ok(r)
    }

    /// Asks for transparent huge pages on the whole region (`MADV_HUGEPAGE`), or forbids them
    /// (`MADV_NOHUGEPAGE`). Advice only: a kernel without them ignores it.
    pub(crate) fn advise_huge(&self, huge: bool) {
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: advice on memory we own; failure only means the default stays.
        unsafe { sys::madvise(self.base, self.len, advice) };
    }

    /// The userfaultfd of a transparent region, for its handler threads.
    pub(crate) fn uffd(&self) -> Option<&Arc<Uffd>> {
        self.uffd.as_ref()
    }

    /// Whether plain loads reach ucache: a userfaultfd region or a file view.
    pub(crate) fn is_transparent(&self) -> bool {
        self.uffd.is_some() || self.view.is_some()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Installs a copy of `src` at `offset` (whole pages, all absent) of a transparent region,
    /// write-protected unless `writable`.
    ///
    /// # Safety
    /// `src..src+len` must be readable, and the caller must own the destination buffer
    /// (`Loading`).
    pub(crate) unsafe fn install(
        &self,
        offset: usize,
        src: *const u8,
        len: usize,
        writable: bool,
    ) -> Result<()> {
        if self.view.is_some() {
            // The file's own pages are the bytes: nothing to copy.
            return self.reveal(offset, len);
        }
        let u = self.uffd.as_ref().expect("install on a transparent region");
        debug_assert!(offset + len <= self.len && len.is_multiple_of(4096));
        // SAFETY: forwarded from our caller; the destination lies inside the registered region.
        unsafe { u.copy(self.at(offset), src, len, writable) }.map_err(|e| Error::Os {
            call: "UFFDIO_COPY",
            source: e,
        })
    }

    /// Write-protects (or unprotects) the present pages of `[offset, offset+len)` of a
    /// transparent region; a no-op on a plain region.
    pub(crate) fn protect(&self, offset: usize, len: usize, protect: bool) -> Result<()> {
        match &self.uffd {
            None => Ok(()),
            Some(u) => u
                .write_protect(self.at(offset), len, protect)
                .map_err(|e| Error::Os {
                    call: "UFFDIO_WRITEPROTECT",
                    source: e,
                }),
        }
    }

    /// Takes write permission from `[offset, offset+len)` for the rest of the region's life
    /// (`mprotect(PROT_READ)`); loads and installs still work. For a read-only mapping whose
    /// buffer a write was refused on (see `fault_thread::serve`).
    pub(crate) fn deny_writes(&self, offset: usize, len: usize) -> Result<()> {
        debug_assert!(offset + len <= self.len);
        // SAFETY: the range lies inside this region, which we own; reads stay allowed.
        let r = unsafe { sys::mprotect(self.at(offset), len, libc::PROT_READ) };
        if r == 0 {
            Ok(())
        } else {
            Err(Error::last_os("mprotect"))
        }
    }

    #[inline]
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// The address of byte `offset`.
    #[inline]
    pub(crate) fn at(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.len);
        // SAFETY: offset is within the region (checked by callers against the mapping length).
        unsafe { self.base.add(offset) }
    }

    /// Gives the frames of these `(offset, len)` ranges back to the kernel; they read as zeros
    /// afterwards (a file view's are hidden first, and dropped from the page cache after). The
    /// caller owns every range exclusively (state `Evicting`).
    ///
    /// On failure, returns the indices of the ranges whose memory may still be there, with the
    /// error; every other range was dropped. A batched call that fails part way tells nothing
    /// of which ranges it reached, so each range of that batch is then dropped on its own
    /// (dropping one again is harmless), and only those whose own call fails are reported.
    pub(crate) fn drop_ranges(
        &self,
        ranges: &[(usize, usize)],
    ) -> std::result::Result<(), (Vec<usize>, Error)> {
        let mut failed = Vec::new();
        let mut first_error = None;
        if self.view.is_some() {
            // Hidden before the zap, so that no load maps a page back in between. A range that
            // stays open stays cached: its bytes are the file's, valid either way.
            for (k, &(off, len)) in ranges.iter().enumerate() {
                // SAFETY: the range lies in our region and is the caller's (Evicting).
                let r = unsafe { sys::mprotect(self.at(off), len, libc::PROT_NONE) };
                if r != 0 {
                    failed.push(k);
                    first_error.get_or_insert(Error::last_os("mprotect"));
                }
            }
        }
        for (c, chunk) in ranges.chunks(IOV_MAX).enumerate() {
            let batched = process_madvise_dontneed(self, chunk);
            if matches!(batched, Ok(true)) {
                continue;
            }
            let refused = matches!(&batched, Err(Error::Os { source, .. })
                if source.raw_os_error() == Some(libc::EINVAL));
            let failed_before = failed.len();
            for (k, &(off, len)) in chunk.iter().enumerate() {
                // SAFETY: the range lies in our region and nobody accesses it (Evicting).
                let r = unsafe { sys::madvise(self.at(off), len, libc::MADV_DONTNEED) };
                if r != 0 {
                    failed.push(c * IOV_MAX + k);
                    first_error.get_or_insert(Error::last_os("madvise"));
                }
            }
            if refused && failed.len() == failed_before {
                // Every range dropped on its own: it was the batched call this kernel refuses.
                NO_PROCESS_MADVISE.store(true, Ordering::Relaxed);
            } else if let Err(e) = batched {
                first_error.get_or_insert(e);
            }
        }
        if let Some(v) = self.view {
            for &(off, len) in ranges {
                // Advice only: a page another mapping maps stays.
                sys::fadvise(
                    v.fd,
                    v.file_offset + off as u64,
                    len,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
        failed.sort_unstable();
        failed.dedup();
        match first_error {
            Some(e) if !failed.is_empty() => Err((failed, e)),
            _ => Ok(()),
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.is_transparent() {
            crate::fork::remove_region(self.base as usize);
        }
        // SAFETY: raw/raw_len is exactly what mmap returned; no references into it outlive the
        // mapping core that owns this region.
        unsafe { libc::munmap(self.raw as *mut libc::c_void, self.raw_len) };
    }
}

static PIDFD: AtomicI32 = AtomicI32::new(-1);
static NO_PROCESS_MADVISE: AtomicBool = AtomicBool::new(false);

/// A per-buffer table of `n` entries made by `entry`, on transparent huge pages where the
/// kernel allows them (`MADV_HUGEPAGE` on the 2 MiB-aligned part of the allocation, before
/// any of it is written). Tables such as the state words are read at random, one cold line
/// per miss; on 4 KiB pages each of those lines also costs a page walk, which in a virtual
/// machine is a walk of two page tables. `None` if the memory cannot be had.
pub(crate) fn huge_table<T>(n: usize, entry: impl FnMut() -> T) -> Option<Box<[T]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    let start = v.as_ptr() as usize;
    let end = start + n * std::mem::size_of::<T>();
    let (lo, hi) = (
        start.next_multiple_of(HUGE_PAGE),
        end / HUGE_PAGE * HUGE_PAGE,
    );
    if lo < hi && !cfg!(miri) {
        // SAFETY: advice on memory this vector owns; failure only means no huge pages.
        unsafe { sys::madvise(lo as *mut u8, hi - lo, libc::MADV_HUGEPAGE) };
    }
    v.extend(std::iter::repeat_with(entry).take(n));
    Some(v.into_boxed_slice())
}

fn self_pidfd() -> Option<i32> {
    let fd = PIDFD.load(Ordering::Relaxed);
    if fd >= 0 {
        return Some(fd);
    }
    // SAFETY: plain syscall returning a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) } as i32;
    if fd < 0 {
        return None;
    }
    match PIDFD.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(fd),
        Err(existing) => {
            // SAFETY: fd is ours and unused.
            unsafe { libc::close(fd) };
            Some(existing)
        }
    }
}

/// One `process_madvise(MADV_DONTNEED)` on ourselves for the whole chunk. Returns false when
/// the kernel does not support it (before Linux 6.13 only some advice was allowed), after which
/// the caller falls back to one `madvise` per range.
fn process_madvise_dontneed(region: &Region, ranges: &[(usize, usize)]) -> Result<bool> {
    if NO_PROCESS_MADVISE.load(Ordering::Relaxed) {
        return Ok(false);
    }
    let Some(pidfd) = self_pidfd() else {
        NO_PROCESS_MADVISE.store(true, Ordering::Relaxed);
        return Ok(false);
    };
    let iov: Vec<libc::iovec> = ranges
        .iter()
        .map(|&(off, len)| libc::iovec {
            iov_base: region.at(off) as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    let total: usize = ranges.iter().map(|r| r.1).sum();
    let mut done_bytes = 0usize;
    let mut first = 0usize;
    let mut iov = iov;
    while first < iov.len() {
        // SAFETY: every iovec names memory inside our region that the caller owns exclusively.
        let r = unsafe {
            libc::syscall(
                libc::SYS_process_madvise,
                pidfd,
                iov[first..].as_ptr(),
                iov.len() - first,
                libc::MADV_DONTNEED,
                0,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if done_bytes == 0 && matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
                NO_PROCESS_MADVISE.store(true, Ordering::Relaxed);
                return Ok(false);
            }
            if done_bytes == 0 && e.raw_os_error() == Some(libc::EINVAL) {
                // Either this kernel refuses MADV_DONTNEED here (before 6.13) or a range
                // refuses it (a locked page): the caller's range-by-range retry tells which.
                return Err(Error::Os {
                    call: "process_madvise",
                    source: e,
                });
            }
            return Err(Error::Os {
                call: "process_madvise",
                source: e,
            });
        }
        // A partial result covers whole iovecs from the front, possibly one in part.
        let mut n = r as usize;
        done_bytes += n;
        while first < iov.len() && n >= iov[first].iov_len {
            n -= iov[first].iov_len;
            first += 1;
        }
        if n > 0 {
            iov[first].iov_base = (iov[first].iov_base as usize + n) as *mut libc::c_void;
            iov[first].iov_len -= n;
        }
    }
    debug_assert_eq!(done_bytes, total);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_ranges_read_as_zero() {
        let r = Region::reserve(64 << 10, 4096).unwrap();
        assert_eq!(r.base() as usize % 4096, 0);
        // SAFETY: the region is ours and 64 KiB long.
        unsafe { std::ptr::write_bytes(r.base(), 0xAB, 64 << 10) };
        r.drop_ranges(&[(0, 4096), (8192, 8192)]).unwrap();
        // SAFETY: as above.
        let s = unsafe { std::slice::from_raw_parts(r.base(), 64 << 10) };
        assert!(s[..4096].iter().all(|&b| b == 0));
        assert!(s[4096..8192].iter().all(|&b| b == 0xAB));
        assert!(s[8192..16384].iter().all(|&b| b == 0));
        assert!(s[16384..].iter().all(|&b| b == 0xAB));
    }

    /// The VmFlags of the mapping of this process that holds `addr`.
    fn vm_flags_at(addr: usize) -> String {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((a, b)) = range.split_once('-') {
                    if let (Ok(a), Ok(b)) =
                        (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                    {
                        inside = (a..b).contains(&addr);
                        continue;
                    }
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.to_string();
                }
            }
        }
        panic!("no mapping holds {addr:#x}")
    }

    #[test]
    fn a_large_table_is_advised_huge_and_built_by_its_entry_function() {
        let mut next = 0u64;
        let t = huge_table(1 << 20, || {
            next += 1;
            next
        })
        .unwrap();
        assert_eq!(t.len(), 1 << 20);
        assert!(t.iter().enumerate().all(|(i, &v)| v == i as u64 + 1));
        let inner = (t.as_ptr() as usize).next_multiple_of(HUGE_PAGE);
        assert!(
            vm_flags_at(inner).split_whitespace().any(|f| f == "hg"),
            "8 MiB table not advised for huge pages: {}",
            vm_flags_at(inner)
        );
        // Small and empty tables are plain vectors.
        assert_eq!(*huge_table(3, || 7u8).unwrap(), [7, 7, 7]);
        assert!(huge_table(0, || 7u8).unwrap().is_empty());
        assert!(huge_table(usize::MAX / 2, || 7u64).is_none());
    }

    #[test]
    fn huge_alignment() {
        let r = Region::reserve(4 << 20, 2 << 20).unwrap();
        assert_eq!(r.base() as usize % (2 << 20), 0);
        assert_eq!(r.len, 4 << 20);
    }
}
