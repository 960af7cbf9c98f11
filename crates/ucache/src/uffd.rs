//! A thin, faithful wrapper of the userfaultfd ioctls that transparent mappings use.
//!
//! Transparent mappings let plain loads and stores miss: the kernel raises a fault for a page
//! that is not there (missing mode) or a write to a page that is write-protected (WP mode),
//! and ucache resolves it. With `UFFD_FEATURE_SIGBUS` the fault is delivered as `SIGBUS` to
//! the faulting thread itself, which then does the IO: DESIGN.md measured about 5–7 µs per
//! fault that way against about 28 µs through a separate handler thread.
//!
//! The constants and structs mirror `<linux/userfaultfd.h>`; the crate `userfaultfd` would
//! need libclang at build time for the same dozen definitions. All of ucache's userfaultfd
//! unsafety lives in this file.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const UFFD_API: u64 = 0xAA;

pub(crate) const FEATURE_PAGEFAULT_FLAG_WP: u64 = 1 << 0;
pub(crate) const FEATURE_SIGBUS: u64 = 1 << 7;
pub(crate) const FEATURE_THREAD_ID: u64 = 1 << 8;

/// `UFFD_EVENT_PAGEFAULT`: the only event a registration without event features reports.
pub(crate) const EVENT_PAGEFAULT: u8 = 0x12;
/// Set in a page-fault message for a write access.
pub(crate) const PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;

const REGISTER_MODE_MISSING: u64 = 1 << 0;
const REGISTER_MODE_WP: u64 = 1 << 1;
/// `UFFD_USER_MODE_ONLY`: faults from user mode only (Linux 5.11).
const USER_MODE_ONLY: libc::c_int = 1;
const COPY_MODE_DONTWAKE: u64 = 1 << 0;
const COPY_MODE_WP: u64 = 1 << 1;
const WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const WRITEPROTECT_MODE_DONTWAKE: u64 = 1 << 1;

#[repr(C)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
struct WriteProtect {
    range: Range,
    mode: u64,
}

/// `struct uffd_msg` as a page fault fills it (32 bytes; other events share the layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Msg {
    pub event: u8,
    _reserved1: u8,
    _reserved2: u16,
    _reserved3: u32,
    pub flags: u64,
    pub address: u64,
    /// The faulting thread, with `FEATURE_THREAD_ID`.
    pub ptid: u32,
    _pad: u32,
}

const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (UFFD_API << 8) | nr
}
const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | (UFFD_API << 8) | nr
}

const UFFDIO_API: u64 = iowr(0x3F, std::mem::size_of::<Api>());
const UFFDIO_REGISTER: u64 = iowr(0x00, std::mem::size_of::<Register>());
const UFFDIO_WAKE: u64 = ior(0x02, std::mem::size_of::<Range>());
const UFFDIO_COPY: u64 = iowr(0x03, std::mem::size_of::<Copy>());
const UFFDIO_WRITEPROTECT: u64 = iowr(0x06, std::mem::size_of::<WriteProtect>());

/// One userfaultfd, registered over one region.
pub(crate) struct Uffd {
    fd: OwnedFd,
}

impl Uffd {
    /// Opens a userfaultfd with `features` (`FEATURE_*`), failing if the kernel lacks any.
    /// `user_faults_only`: the descriptor need not see faults the kernel takes on user memory
    /// (`write(2)` from a mapping), which lets an unprivileged process open one where
    /// `vm.unprivileged_userfaultfd` is 0, the usual setting.
    pub(crate) fn open(features: u64, user_faults_only: bool) -> io::Result<Uffd> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: plain syscall; returns a new descriptor or -1.
        let mut fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if fd < 0
            && user_faults_only
            && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
        {
            // SAFETY: as above.
            fd = unsafe { libc::syscall(libc::SYS_userfaultfd, flags | USER_MODE_ONLY) };
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned to us and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        let mut api = Api {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api)?;
        if api.features & features != features {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the kernel lacks a userfaultfd feature transparent mappings need",
            ));
        }
        Ok(Uffd { fd })
    }

    /// Registers `[start, start+len)` for missing and write-protect faults.
    pub(crate) fn register(&self, start: *mut u8, len: usize) -> io::Result<()> {
        let mut r = Register {
            range: Range {
                start: start as u64,
                len: len as u64,
            },
            mode: REGISTER_MODE_MISSING | REGISTER_MODE_WP,
            ioctls: 0,
        };
        ioctl(self.fd.as_raw_fd(), UFFDIO_REGISTER, &mut r)
    }

    /// Atomically fills the absent pages of `[dst, dst+len)` with a copy of `src`, mapped
    /// write-protected unless `writable`. Wakes nobody: with `SIGBUS` delivery no thread is
    /// blocked on a missing page, and handler threads wake the faulting thread once the buffer
    /// is published, so that it never resumes to find its buffer still `Loading`.
    ///
    /// # Safety
    /// `src..src+len` must be readable, and `dst..dst+len` must be page-aligned, inside a
    /// registered region, and owned by the caller (its buffer is `Loading`).
    pub(crate) unsafe fn copy(
        &self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        writable: bool,
    ) -> io::Result<()> {
        let mut done = 0usize;
        while done < len {
            let mut c = Copy {
                dst: dst as u64 + done as u64,
                src: src as u64 + done as u64,
                len: (len - done) as u64,
                mode: COPY_MODE_DONTWAKE | if writable { 0 } else { COPY_MODE_WP },
                copy: 0,
            };
            let r = ioctl(self.fd.as_raw_fd(), UFFDIO_COPY, &mut c);
            if c.copy > 0 {
                done += c.copy as usize;
            }
            match r {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sets or clears write protection of `[start, start+len)` (present pages only), waking
    /// no thread blocked on a fault there.
    pub(crate) fn write_protect(
        &self,
        start: *mut u8,
        len: usize,
        protect: bool,
    ) -> io::Result<()> {
        let mut w = WriteProtect {
            range: Range {
                start: start as u64,
                len: len as u64,
            },
            // Lifting the protection wakes no one: a thread blocked on the fault is woken by
            // its handler thread once the fault is served (`fault_thread.rs`), after the
            // buffer's word says so. Woken here, its store returned while the handler still
            // held the buffer's `X` for the moment of the change, and a pin or `msync` right
            // after it met that phantom exclusive pin.
            mode: if protect {
                WRITEPROTECT_MODE_WP
            } else {
                WRITEPROTECT_MODE_DONTWAKE
            },
        };
        ioctl(self.fd.as_raw_fd(), UFFDIO_WRITEPROTECT, &mut w)
    }
}

impl Uffd {
    /// Wakes threads blocked on faults in `[start, start+len)` without changing the pages.
    pub(crate) fn wake(&self, start: *mut u8, len: usize) -> io::Result<()> {
        let mut r = Range {
            start: start as u64,
            len: len as u64,
        };
        ioctl(self.fd.as_raw_fd(), UFFDIO_WAKE, &mut r)
    }

    /// Waits up to `timeout_ms` for a fault message; `None` if none came.
    pub(crate) fn next_msg(&self, timeout_ms: i32) -> io::Result<Option<Msg>> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one pollfd we own.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            };
        }
        if r == 0 {
            return Ok(None);
        }
        let mut m = Msg::default();
        // SAFETY: reads at most size_of::<Msg>() bytes into a plain-old-data struct we own.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                &mut m as *mut Msg as *mut libc::c_void,
                std::mem::size_of::<Msg>(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(m))
    }
}

fn ioctl<T>(fd: RawFd, req: u64, arg: &mut T) -> io::Result<()> {
    // SAFETY: every request code above is paired with the struct type the kernel expects for
    // it, and `arg` is a valid, exclusively borrowed instance of that struct.
    let r = unsafe { libc::ioctl(fd, req as _, arg as *mut T) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<Api>(), 24);
        assert_eq!(std::mem::size_of::<Register>(), 32);
        assert_eq!(std::mem::size_of::<Copy>(), 40);
        assert_eq!(std::mem::size_of::<WriteProtect>(), 24);
        assert_eq!(std::mem::size_of::<Msg>(), 32);
        assert_eq!(UFFDIO_WAKE, 0x8010_AA02);
        // Values from <linux/userfaultfd.h> as compiled on x86-64.
        assert_eq!(UFFDIO_API, 0xC018_AA3F);
        assert_eq!(UFFDIO_REGISTER, 0xC020_AA00);
        assert_eq!(UFFDIO_COPY, 0xC028_AA03);
        assert_eq!(UFFDIO_WRITEPROTECT, 0xC018_AA06);
    }

    /// An unprivileged process opens a user-faults-only descriptor where
    /// `vm.unprivileged_userfaultfd` is 0 (found by review, 2026-11-25: `ucache demo` failed
    /// for any user but root). Run as root, the check drops to `nobody` in a forked child.
    #[test]
    fn an_unprivileged_process_opens_a_user_faults_only_descriptor() {
        let features = FEATURE_SIGBUS | FEATURE_PAGEFAULT_FLAG_WP;
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            Uffd::open(features, true).unwrap();
            return;
        }
        // SAFETY: the child makes only system calls and leaves with _exit: nothing it does
        // needs a lock another thread of the test process may have held at the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: as above; 65534 is `nobody`.
            unsafe {
                let dropped = libc::setgid(65534) == 0 && libc::setuid(65534) == 0;
                let ok = dropped && Uffd::open(features, true).is_ok();
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        let mut status = 0;
        // SAFETY: waiting for the child just forked.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "an unprivileged open failed (status {status:#x})"
        );
    }
}
