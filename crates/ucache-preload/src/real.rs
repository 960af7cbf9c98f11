//! The functions the shim stands in front of, and the raw system calls it uses itself.
//!
//! File-descriptor calls go to the next definition in the lookup order (`dlsym(RTLD_NEXT)`,
//! resolved once by the library's constructor), so another interposer loaded after this one
//! keeps working and glibc's cancellation points stay what they were. Until the constructor
//! has run (another library's constructor may call `read` first), and whenever a lookup
//! failed, they are raw system calls. The memory calls (`mmap`, `munmap`, `mremap`,
//! `mprotect`, `madvise`, `msync`) are always raw system calls: the allocator calls `mmap`
//! while `dlsym` runs, and ucache's own regions must never come back through the shim.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{off_t, size_t, ssize_t};

macro_rules! real_fns {
    ($( $slot:ident, $name:literal, fn $f:ident($($a:ident: $t:ty),*) -> $r:ty, $sys:expr; )*) => {
        $( static $slot: AtomicUsize = AtomicUsize::new(0); )*

        /// Looks every function up; called once, from the constructor.
        pub(crate) fn resolve() {
            $(
                // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the definition
                // after this library's (glibc's, or another interposer's).
                let p = unsafe {
                    libc::dlsym(libc::RTLD_NEXT, CStr::from_bytes_with_nul($name).unwrap().as_ptr())
                };
                $slot.store(p as usize, Ordering::Release);
            )*
        }

        $(
            /// The real function: the next definition, or the raw system call.
            #[allow(clippy::missing_safety_doc)]
            pub(crate) unsafe fn $f($($a: $t),*) -> $r {
                let p = $slot.load(Ordering::Acquire);
                if p != 0 {
                    // SAFETY: p is the address of the libc function of this very signature.
                    let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
                    // SAFETY: forwarded from our caller, who passes the program's arguments.
                    unsafe { f($($a),*) }
                } else {
                    // SAFETY: the same call as a raw system call.
                    unsafe { $sys }
                }
            }
        )*
    };
}

real_fns! {
    READ, b"read\0", fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t,
        libc::syscall(libc::SYS_read, fd, buf, n) as ssize_t;
    WRITE, b"write\0", fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t,
        libc::syscall(libc::SYS_write, fd, buf, n) as ssize_t;
    PREAD, b"pread64\0", fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t,
        libc::syscall(libc::SYS_pread64, fd, buf, n, off) as ssize_t;
    PWRITE, b"pwrite64\0", fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t,
        libc::syscall(libc::SYS_pwrite64, fd, buf, n, off) as ssize_t;
    READV, b"readv\0", fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t,
        libc::syscall(libc::SYS_readv, fd, iov, cnt) as ssize_t;
    WRITEV, b"writev\0", fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t,
        libc::syscall(libc::SYS_writev, fd, iov, cnt) as ssize_t;
    FTRUNCATE, b"ftruncate64\0", fn ftruncate(fd: c_int, len: off_t) -> c_int,
        libc::syscall(libc::SYS_ftruncate, fd, len) as c_int;
    FSYNC, b"fsync\0", fn fsync(fd: c_int) -> c_int,
        libc::syscall(libc::SYS_fsync, fd) as c_int;
    FDATASYNC, b"fdatasync\0", fn fdatasync(fd: c_int) -> c_int,
        libc::syscall(libc::SYS_fdatasync, fd) as c_int;
    SEND, b"send\0", fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t,
        libc::syscall(libc::SYS_sendto, fd, buf, n, flags, 0usize, 0usize) as ssize_t;
}

/// Functions that are always the raw system call `nr`: `fn name(arguments) -> result = nr;`.
macro_rules! raw_fns {
    ($( fn $f:ident($($a:ident: $t:ty),*) -> $r:ty = $nr:ident; )*) => {
        $(
            #[doc = concat!("`", stringify!($f), "(2)` as a system call.")]
            pub(crate) unsafe fn $f($($a: $t),*) -> $r {
                // SAFETY: forwarded from our caller.
                unsafe { libc::syscall(libc::$nr, $($a),*) as $r }
            }
        )*
    };
}

raw_fns! {
    fn mmap(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t)
        -> *mut c_void = SYS_mmap;
    fn munmap(addr: *mut c_void, len: size_t) -> c_int = SYS_munmap;
    fn mremap(old: *mut c_void, old_len: size_t, new_len: size_t, flags: c_int, new_addr: *mut c_void)
        -> *mut c_void = SYS_mremap;
    fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int = SYS_mprotect;
    fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int = SYS_madvise;
    fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int = SYS_msync;
}

/// `fstat(2)` as a system call; `None` on failure.
pub(crate) fn fstat(fd: c_int) -> Option<libc::stat> {
    // SAFETY: a zeroed stat is a valid out-buffer; the kernel fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    (r == 0).then_some(st)
}

/// `fcntl(fd, F_GETFL)` as a system call.
pub(crate) fn getfl(fd: c_int) -> Option<c_int> {
    // SAFETY: F_GETFL takes no pointer.
    let r = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    (r >= 0).then_some(r as c_int)
}

/// `lseek(fd, 0, SEEK_CUR)`: the file position.
pub(crate) fn tell(fd: c_int) -> Option<u64> {
    // SAFETY: no pointers.
    let r = unsafe { libc::syscall(libc::SYS_lseek, fd, 0 as off_t, libc::SEEK_CUR) };
    (r >= 0).then_some(r as u64)
}

/// The path an fd was opened under, from `/proc/self/fd` (as the kernel names it: canonical,
/// with " (deleted)" for an unlinked file).
pub(crate) fn fd_path(fd: c_int) -> Option<String> {
    let link = format!("/proc/self/fd/{fd}\0");
    let mut buf = vec![0u8; 4096];
    // SAFETY: NUL-terminated path, and a buffer of buf.len() bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            link.as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    if n <= 0 || n as usize >= buf.len() {
        return None;
    }
    buf.truncate(n as usize);
    String::from_utf8(buf).ok()
}

/// Opens the file behind `fd` anew (its own file description, so the program's position and
/// `O_APPEND` do not apply), close-on-exec.
pub(crate) fn reopen(fd: c_int, write: bool) -> Option<c_int> {
    reopen_with(fd, if write { libc::O_RDWR } else { libc::O_RDONLY })
}

/// `fd`'s file opened again for reading with `O_DIRECT`, if its file system allows it.
pub(crate) fn reopen_direct(fd: c_int) -> Option<c_int> {
    reopen_with(fd, libc::O_RDONLY | libc::O_DIRECT)
}

fn reopen_with(fd: c_int, mode: c_int) -> Option<c_int> {
    let link = format!("/proc/self/fd/{fd}\0");
    // SAFETY: NUL-terminated path.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            link.as_ptr(),
            mode | libc::O_CLOEXEC,
            0,
        )
    };
    (r >= 0).then_some(r as c_int)
}

pub(crate) fn close(fd: c_int) {
    // SAFETY: closes a descriptor the shim owns.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

pub(crate) fn errno() -> c_int {
    // SAFETY: errno is thread-local and always addressable.
    unsafe { *libc::__errno_location() }
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `f`, then puts back the `errno` it found: for the shim's own work after the real call,
/// whose `errno` the program sees.
pub(crate) fn keeping_errno<R>(f: impl FnOnce() -> R) -> R {
    let e = errno();
    let r = f();
    set_errno(e);
    r
}

/// Writes a message to stderr with one system call (no locks, no allocation besides `msg`).
pub(crate) fn say(msg: &str) {
    let line = format!("ucache-preload: {msg}\n");
    // SAFETY: a valid buffer of line.len() bytes.
    unsafe { libc::syscall(libc::SYS_write, 2, line.as_ptr(), line.len()) };
}
