//! glibc's single-thread fast path for the standard streams, kept while the program has no
//! threads of its own.
//!
//! glibc takes a `FILE`'s lock on every stdio call (`putc`, `fwrite`, `printf`, ...) once the
//! process has a second thread, and skips it before. The cache's threads (its IO workers and
//! evictor) are such a second thread, though they never touch stdio, so a program that writes
//! its output a character at a time paid for them: `mdb_dump` spends most of its time in
//! `putc`, and ran at 0.47× plain through the shim for that alone (a thread that only sleeps,
//! preloaded, slows it 8×; docs/results/2026-11-26-preload/README.md).
//!
//! So when the shim's threads are the process's first, the standard streams (`stdin`,
//! `stdout`, `stderr`) are switched to `FSETLOCKING_BYCALLER` (glibc then skips their locks,
//! as for a single-threaded process), and switched back before the program starts a thread of
//! its own through `pthread_create` or `thrd_create` (both interposed). `FSETLOCKING_BYCALLER`
//! alone leaves `putc` on its locking path, which only skips the lock itself: glibc marks every
//! stream `_IO_FLAGS2_NEED_LOCK` at a process's first thread, and `putc` takes its inlined
//! unlocked path only without that mark (4e8 `putc` calls with a thread asleep: 3.4-3.6 s, 2.5-2.9
//! s with the mark cleared as well, 2.6-2.8 s with no thread). So the mark is cleared with the
//! switch and set again with the switch back. Streams the program
//! opens later lock as glibc decides. Threads glibc starts for the program without those calls
//! (a `SIGEV_THREAD` timer or `mq_notify` callback, librt's AIO helpers) are not seen: such a
//! callback that uses the standard streams races with the main thread (README).

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering::SeqCst};

use libc::FILE;

extern "C" {
    static mut stdin: *mut FILE;
    static mut stdout: *mut FILE;
    static mut stderr: *mut FILE;
    fn __fsetlocking(fp: *mut FILE, kind: c_int) -> c_int;
}

const FSETLOCKING_QUERY: c_int = 0;
const FSETLOCKING_INTERNAL: c_int = 1;
const FSETLOCKING_BYCALLER: c_int = 2;

/// The streams the shim switched to `FSETLOCKING_BYCALLER`: bit k for stream k of
/// [`streams`]. Only those go back.
static SWITCHED: AtomicU8 = AtomicU8::new(0);

/// glibc's `_IO_FLAGS2_NEED_LOCK` (libio.h, since 2.27): set on every stream by the process's
/// first `pthread_create`, and on streams opened after it.
const IO_FLAGS2_NEED_LOCK: c_int = 128;

/// The head of glibc's `struct _IO_FILE` (bits/types/struct_FILE.h, a public layout): `_flags`,
/// eleven buffer pointers, `_markers`, `_chain`, `_fileno`, `_flags2`.
#[repr(C)]
struct FileHead {
    flags: c_int,
    pointers: [*mut c_void; 13],
    fileno: c_int,
    flags2: c_int,
}

/// `fp`'s `_flags2`, if the head read through [`FileHead`] is `fp`'s: its `_fileno` is the
/// descriptor `fileno` returns (a layout other than this one is left alone).
///
/// # Safety
/// `fp` is a live stream that no other thread uses meanwhile.
unsafe fn flags2_of(fp: *mut FILE) -> Option<*mut c_int> {
    let head = fp as *mut FileHead;
    // SAFETY (caller's): a live FILE is at least as large as its public head.
    let fd = unsafe { libc::fileno(fp) };
    (fd >= 0 && unsafe { (*head).fileno } == fd).then(|| unsafe { &raw mut (*head).flags2 })
}

fn streams() -> [*mut FILE; 3] {
    // SAFETY: glibc's stream variables, read by value; the program may have reassigned them
    // (freopen keeps the object), in which case the current ones are the ones it writes to.
    unsafe { [stdin, stdout, stderr] }
}

/// Whether the process has had only one thread so far: glibc's `__libc_single_threaded`
/// (glibc 2.32 on), looked up at run time so the shim loads on older ones (there: `false`,
/// the streams are left alone).
pub(crate) fn single_threaded() -> bool {
    static FLAG: AtomicUsize = AtomicUsize::new(0);
    let mut p = FLAG.load(SeqCst);
    if p == 0 {
        // SAFETY: dlsym with a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"__libc_single_threaded".as_ptr()) } as usize;
        if p == 0 {
            return false;
        }
        FLAG.store(p, SeqCst);
    }
    // SAFETY: p is glibc's `char __libc_single_threaded`, which lives as long as the process.
    unsafe { *(p as *const u8) != 0 }
}

/// Called right after the shim started its threads in a process that had one thread before:
/// the standard streams that glibc locks skip their locks again.
pub(crate) fn unlock_std_streams() {
    let mut bits = 0u8;
    for (k, fp) in streams().into_iter().enumerate() {
        // SAFETY: a live stream (or null, skipped); __fsetlocking only reads or sets a flag.
        if !fp.is_null() && unsafe { __fsetlocking(fp, FSETLOCKING_QUERY) } == FSETLOCKING_INTERNAL
        {
            // SAFETY: as above; the program has one thread, which is in the shim right now.
            unsafe {
                __fsetlocking(fp, FSETLOCKING_BYCALLER);
                if let Some(f) = flags2_of(fp) {
                    *f &= !IO_FLAGS2_NEED_LOCK;
                }
            }
            bits |= 1 << k;
        }
    }
    SWITCHED.fetch_or(bits, SeqCst);
}

/// Called before the program starts a thread: the streams the shim switched lock again.
pub(crate) fn relock_std_streams() {
    if SWITCHED.load(SeqCst) == 0 {
        return;
    }
    let bits = SWITCHED.swap(0, SeqCst);
    for (k, fp) in streams().into_iter().enumerate() {
        if bits & (1 << k) != 0 && !fp.is_null() {
            // SAFETY: a live stream; the program still has one thread (it is starting its
            // second), so nobody uses the stream meanwhile. glibc marked its streams at the
            // shim's first thread and will not again: the mark goes back here.
            unsafe {
                __fsetlocking(fp, FSETLOCKING_INTERNAL);
                if let Some(f) = flags2_of(fp) {
                    *f |= IO_FLAGS2_NEED_LOCK;
                }
            }
        }
    }
}

/// The next definition of `name` (glibc's), looked up once into `slot`.
pub(crate) fn next_fn(slot: &AtomicUsize, name: &CStr) -> *mut c_void {
    let mut p = slot.load(SeqCst);
    if p == 0 {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds the definition after
        // this library's.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        slot.store(p, SeqCst);
    }
    p as *mut c_void
}
