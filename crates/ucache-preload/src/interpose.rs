//! The exported functions that stand in front of libc's.
//!
//! Each one sends the call straight on (the real function) unless the shim is on, has live
//! mappings (or, for `mmap`, may make one) and the thread is not inside the shim already.
//! Otherwise it runs the shim's part under `catch_unwind`: no panic crosses into C, and a
//! panic falls back to the real call.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicUsize;

use libc::{off_t, size_t, ssize_t};

use crate::reads;
use crate::real;
use crate::shim::{self, active, enter};
use crate::stdio;

/// Runs `body` inside the shim (flag raised, panics caught); `None` from it, a panic, or a
/// thread already inside the shim run `real` instead.
fn inside<R>(body: impl FnOnce() -> Option<R>, real: impl FnOnce() -> R) -> R {
    let Some(_in) = enter() else {
        return real();
    };
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Some(r)) => r,
        _ => real(),
    }
}

/// [`inside`] for a call the shim has nothing to do with while it has no live mappings: then
/// `real` runs straight away.
fn when_active<R>(body: impl FnOnce() -> Option<R>, real: impl FnOnce() -> R) -> R {
    if !active() {
        return real();
    }
    inside(body, real)
}

/// Exported functions that only pass their arguments on to another function of this file:
/// `"what they stand for" fn name(arguments) -> result => the call;`.
macro_rules! forward {
    ($( $what:literal fn $name:ident($($a:ident: $t:ty),*) -> $r:ty => $to:expr; )*) => {
        $(
            #[doc = concat!("# Safety\nAs `", $what, "`.")]
            #[no_mangle]
            pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
                // SAFETY: forwarded.
                unsafe { $to }
            }
        )*
    };
}

/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::mmap(addr, len, prot, flags, fd, off) };
    if !shim::ENABLED.load(std::sync::atomic::Ordering::Relaxed) {
        return kernel();
    }
    if flags & libc::MAP_FIXED != 0 {
        // Over a shim mapping: it goes first (or becomes a kernel mapping), then the kernel.
        if active() && crate::table::find_addr(addr as usize, len).is_some() {
            inside(
                || {
                    shim::unmap_range(addr as usize, len);
                    None::<()>
                },
                || (),
            );
        }
        return kernel();
    }
    if fd < 0 || flags & libc::MAP_ANONYMOUS != 0 {
        return kernel();
    }
    inside(|| shim::map_fd(len, prot, flags, fd, off), kernel)
}

forward! {
    "mmap64" fn mmap64(
        addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off_t
    ) -> *mut c_void => mmap(addr, len, prot, flags, fd, off);
}

/// # Safety
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::munmap(addr, len) };
    when_active(|| shim::unmap_range(addr as usize, len), kernel)
}

/// `mremap(2)`. Variadic in C; on x86-64 the optional fifth argument arrives in its register
/// either way, and is read only with `MREMAP_FIXED`, when the caller passed it.
///
/// # Safety
/// As `mremap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let new_addr = if flags & libc::MREMAP_FIXED != 0 {
        new_addr
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::mremap(old, old_len, new_len, flags, new_addr) };
    when_active(
        || shim::remap(old as usize, old_len, new_len, flags),
        kernel,
    )
}

/// # Safety
/// As `mprotect(2)`.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::mprotect(addr, len, prot) };
    when_active(
        || {
            shim::protect(addr as usize, len, prot);
            None
        },
        kernel,
    )
}

/// # Safety
/// As `madvise(2)`.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::madvise(addr, len, advice) };
    when_active(|| shim::advise(addr as usize, len, advice), kernel)
}

/// # Safety
/// As `msync(2)`.
#[no_mangle]
pub unsafe extern "C" fn msync(addr: *mut c_void, len: size_t, flags: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::msync(addr, len, flags) };
    if !(addr as usize).is_multiple_of(4096) {
        return kernel();
    }
    when_active(|| shim::sync_range(addr as usize, len), kernel)
}

/// The shim's part of a read of `n` bytes from `fd` at `off` (`None`: the file position)
/// that `io` does: the file's writable mappings first write back what they hold of the range.
fn read_through(
    fd: c_int,
    off: Option<off_t>,
    n: usize,
    io: impl FnOnce() -> ssize_t,
) -> Option<ssize_t> {
    if let Some(v) = shim::file_view(fd) {
        let at = match off {
            Some(o) => o as u64,
            None => real::tell(fd)?,
        };
        v.before(at, at.saturating_add(n as u64));
    }
    Some(io())
}

/// The shim's part of a write of `n` bytes to `fd` at `off` (`None`: the file position, or
/// the end with `O_APPEND`) that `io` does: as a read's, and then the file's mappings drop
/// their copies of what `io` wrote.
fn write_through(
    fd: c_int,
    off: Option<off_t>,
    n: usize,
    io: impl FnOnce() -> ssize_t,
) -> Option<ssize_t> {
    let view = shim::file_view(fd);
    let mut at = 0;
    if let Some(v) = &view {
        at = match off {
            Some(o) => o as u64,
            None if real::getfl(fd)? & libc::O_APPEND != 0 => v.size,
            None => real::tell(fd)?,
        };
        v.before(at, at.saturating_add(n as u64));
    }
    let r = io();
    if let (Some(v), true) = (&view, r > 0) {
        real::keeping_errno(|| v.after_write(at, at + r as u64));
    }
    Some(r)
}

/// A read at `off` (`None`: the file position) into `buf`.
unsafe fn do_read(fd: c_int, buf: *mut c_void, n: size_t, off: Option<off_t>) -> ssize_t {
    if let Some(o) = off {
        // SAFETY: the program's arguments, passed on.
        if let Some(r) = catch_unwind(|| unsafe { reads::pread(fd, buf, n, o) })
            .ok()
            .flatten()
        {
            return r;
        }
    }
    // SAFETY: the program's arguments, passed on.
    let kernel = |p: usize, k: usize, done: usize| unsafe {
        match off {
            Some(o) => real::pread(fd, p as *mut c_void, k, o + done as off_t),
            None => real::read(fd, p as *mut c_void, k),
        }
    };
    when_active(
        || read_through(fd, off, n, || shim::transfer(buf as usize, n, true, kernel)),
        || kernel(buf as usize, n, 0),
    )
}

/// A write at `off` (`None`: the file position, or the end with `O_APPEND`) from `buf`.
unsafe fn do_write(fd: c_int, buf: *const c_void, n: size_t, off: Option<off_t>) -> ssize_t {
    // SAFETY: the program's arguments, passed on.
    let kernel = |p: usize, k: usize, done: usize| unsafe {
        match off {
            Some(o) => real::pwrite(fd, p as *const c_void, k, o + done as off_t),
            None => real::write(fd, p as *const c_void, k),
        }
    };
    let r = when_active(
        || {
            write_through(fd, off, n, || {
                shim::transfer(buf as usize, n, false, kernel)
            })
        },
        || kernel(buf as usize, n, 0),
    );
    written(fd);
    r
}

/// After a write-like call on `fd`: read mode drops the file's cached copy.
fn written(fd: c_int) {
    let _ = catch_unwind(|| reads::after_write(fd));
}

forward! {
    "read(2)" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t
        => do_read(fd, buf, n, None);
    "pread(2)" fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t
        => do_read(fd, buf, n, Some(off));
    "pread64" fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t
        => do_read(fd, buf, n, Some(off));
    "write(2)" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t
        => do_write(fd, buf, n, None);
    "pwrite(2)" fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t
        => do_write(fd, buf, n, Some(off));
    "pwrite64" fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t
        => do_write(fd, buf, n, Some(off));
}

/// # Safety
/// As `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::readv(fd, iov, cnt) };
    when_active(
        || {
            read_through(fd, None, shim::iov_len(iov, cnt), || {
                shim::touch_iov(iov, cnt, true);
                kernel()
            })
        },
        kernel,
    )
}

/// # Safety
/// As `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::writev(fd, iov, cnt) };
    let r = when_active(
        || {
            write_through(fd, None, shim::iov_len(iov, cnt), || {
                shim::touch_iov(iov, cnt, false);
                kernel()
            })
        },
        kernel,
    );
    written(fd);
    r
}

/// # Safety
/// As `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the program's arguments, passed on.
    let kernel =
        |p: usize, k: usize, _done: usize| unsafe { real::send(fd, p as *const c_void, k, flags) };
    when_active(
        || Some(shim::transfer(buf as usize, n, false, kernel)),
        || kernel(buf as usize, n, 0),
    )
}

unsafe fn do_truncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe { real::ftruncate(fd, len) };
    let r = when_active(
        || {
            let v = shim::file_view(fd)?;
            let r = kernel();
            if r == 0 {
                // Past the smaller end, every mapping's copy goes: shrunk, its accesses fault
                // and get SIGBUS; grown, the new bytes are the file's zeros. A dirty buffer
                // there is written back only up to the new end.
                let from = v.size.min(len.max(0) as u64) & !4095;
                real::keeping_errno(|| v.after_write(from, u64::MAX));
            }
            Some(r)
        },
        kernel,
    );
    written(fd);
    r
}

forward! {
    "ftruncate(2)" fn ftruncate(fd: c_int, len: off_t) -> c_int => do_truncate(fd, len);
    "ftruncate64" fn ftruncate64(fd: c_int, len: off_t) -> c_int => do_truncate(fd, len);
}

unsafe fn do_sync(fd: c_int, data_only: bool) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let kernel = || unsafe {
        if data_only {
            real::fdatasync(fd)
        } else {
            real::fsync(fd)
        }
    };
    when_active(
        || {
            let v = shim::file_view(fd)?;
            if !v.sync() {
                real::set_errno(libc::EIO);
                return Some(-1);
            }
            Some(kernel())
        },
        kernel,
    )
}

forward! {
    "fsync(2)" fn fsync(fd: c_int) -> c_int => do_sync(fd, false);
    "fdatasync(2)" fn fdatasync(fd: c_int) -> c_int => do_sync(fd, true);
}

/// Starts a thread with `start`: the cache's own (started inside the shim), after which the
/// standard streams of a program with one thread skip their locks again; or the program's,
/// before which they lock again (see `stdio`).
fn starting_thread(start: impl FnOnce() -> c_int) -> c_int {
    if shim::in_shim() {
        let single = stdio::single_threaded();
        let r = start();
        if r == 0 && single {
            stdio::unlock_std_streams();
        }
        r
    } else {
        stdio::relock_std_streams();
        start()
    }
}

type PthreadStart = extern "C" fn(*mut c_void) -> *mut c_void;

/// # Safety
/// As `pthread_create(3)`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    f: PthreadStart,
    arg: *mut c_void,
) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let p = stdio::next_fn(&NEXT, c"pthread_create");
    if p.is_null() {
        return libc::EAGAIN;
    }
    // SAFETY: p is glibc's pthread_create, of this signature.
    let real: unsafe extern "C" fn(
        *mut libc::pthread_t,
        *const libc::pthread_attr_t,
        PthreadStart,
        *mut c_void,
    ) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller's arguments, passed on.
    starting_thread(|| unsafe { real(thread, attr, f, arg) })
}

/// C11's `thrd_create`: glibc starts the thread without calling `pthread_create` through the
/// symbol, so it is interposed too.
///
/// # Safety
/// As `thrd_create(3)`.
#[no_mangle]
pub unsafe extern "C" fn thrd_create(
    thread: *mut libc::c_ulong,
    f: extern "C" fn(*mut c_void) -> c_int,
    arg: *mut c_void,
) -> c_int {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let p = stdio::next_fn(&NEXT, c"thrd_create");
    if p.is_null() {
        return 2; // thrd_error
    }
    // SAFETY: p is glibc's thrd_create, of this signature.
    let real: unsafe extern "C" fn(
        *mut libc::c_ulong,
        extern "C" fn(*mut c_void) -> c_int,
        *mut c_void,
    ) -> c_int = unsafe { std::mem::transmute(p) };
    // SAFETY: the caller's arguments, passed on.
    starting_thread(|| unsafe { real(thread, f, arg) })
}
