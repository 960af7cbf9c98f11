//! What a forked child may do with the caches of its parent: nothing, and it is told so.
//!
//! `fork` copies the parent's memory but not its threads, and the child's copy of a
//! transparent region loses its userfaultfd registration: a page that was not resident reads
//! as zeros, silently, and a resident one is a snapshot the parent may since have changed.
//! The IO threads and the evictor stay in the parent, and the per-thread io_uring rings are
//! shared with it. So a child may not touch a cache made before the fork:
//!
//! - every call on such a cache's mappings fails with [`Error::Forked`] (`slot` and `range`,
//!   which every entry point goes through, ask [`is_foreign`]), and dropping one does no IO;
//! - every transparent region the process has at the fork is fenced, in the child: it is
//!   replaced by a shared mapping of an empty file, so that any load or store raises
//!   `SIGBUS`, and ucache's handler prints which mapping was touched before the default
//!   action ends the child.
//!
//! A cache the child makes itself is its own and works as usual, its transparent mappings
//! included: the fork handler marks the regions it fences, and the `SIGBUS` handler turns
//! away only those, so a region the child registers afterwards (in the same table, maybe at
//! an address the parent once used) is served. A grandchild fences both kinds at its own
//! fork. `exec` replaces the image, so nothing of this survives it.
//!
//! The `SIGBUS` handler ([`crate::sigbus`]) sits below this module and names nothing of it:
//! [`watch`] hands it [`fenced`] once, and the fork handler installs it in the child.
//!
//! [`Error::Forked`]: crate::Error::Forked

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Once;

/// Set in a child, at the fork. Never set in the process that made the first cache, so the
/// check on the hit path is one load of a line nobody writes.
static FORKED: AtomicBool = AtomicBool::new(false);
static WATCH: Once = Once::new();

/// A transparent region of the process, read without locks by the fork handler (which runs
/// in the child, where no other thread exists) and by the `SIGBUS` handler.
struct RegionEntry {
    /// First byte; 0: the entry is free.
    start: AtomicUsize,
    /// Bytes; 0 while the entry is being filled in or emptied.
    len: AtomicUsize,
    /// Set by the fork handler, in the child, on every region the process had at the fork:
    /// those are the parent's. A region the child registers afterwards is the child's own,
    /// served as usual, so only this marks what the `SIGBUS` handler turns away.
    fenced: AtomicBool,
}

const SLOTS: usize = 1024;
#[allow(clippy::declare_interior_mutable_const)]
const FREE: RegionEntry = RegionEntry {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fenced: AtomicBool::new(false),
};
static REGIONS: [RegionEntry; SLOTS] = [FREE; SLOTS];

/// Whether this process is a child forked after a cache of process `pid` was made, and so
/// may not use it.
#[inline]
pub(crate) fn is_foreign(pid: u32) -> bool {
    FORKED.load(SeqCst) && is_foreign_slow(pid)
}

#[cold]
fn is_foreign_slow(pid: u32) -> bool {
    pid != std::process::id()
}

/// Installs the fork handler, once per process, after telling the `SIGBUS` handler which
/// addresses are fenced (first: a child forked once the fork handler is in has the check).
pub(crate) fn watch() {
    WATCH.call_once(|| {
        crate::sigbus::set_fence(fenced);
        // SAFETY: registers a plain `extern "C"` function as the child handler.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

/// Records a transparent region, to be fenced in a forked child. A region that finds every
/// slot taken is left out: its child then reads zeros as before, so there are as many slots
/// as the `SIGBUS` registry has.
pub(crate) fn add_region(start: usize, len: usize) {
    watch();
    for r in REGIONS.iter() {
        if r.start.compare_exchange(0, start, SeqCst, SeqCst).is_ok() {
            // Before the length makes the entry match any address: a child's new region
            // taking the entry of a parent's that it unmapped is not fenced.
            r.fenced.store(false, SeqCst);
            r.len.store(len, SeqCst);
            return;
        }
    }
}

/// Forgets a region recorded by [`add_region`], before it is unmapped.
pub(crate) fn remove_region(start: usize) {
    for r in REGIONS.iter() {
        if r.start.load(SeqCst) == start {
            r.len.store(0, SeqCst);
            r.fenced.store(false, SeqCst);
            r.start.store(0, SeqCst);
            return;
        }
    }
}

/// Whether `addr` lies in a region fenced at a fork: the fault of a child touching a mapping
/// of its parent (not one the child made since, which its own cache serves). The `SIGBUS`
/// handler calls it (handed in by [`watch`]): atomics only.
fn fenced(addr: usize) -> bool {
    FORKED.load(SeqCst)
        && REGIONS.iter().any(|r| {
            let start = r.start.load(SeqCst);
            r.fenced.load(SeqCst)
                && start != 0
                && addr >= start
                && addr < start + r.len.load(SeqCst)
        })
}

/// The fork handler, in the child: only system calls and atomics (the child is a copy of one
/// thread, and the others may have held any lock at the fork). Marks every region of the
/// process as the parent's, and fences each.
extern "C" fn in_child() {
    FORKED.store(true, SeqCst);
    let mut fence = -1;
    for r in REGIONS.iter() {
        let (start, len) = (r.start.load(SeqCst), r.len.load(SeqCst));
        if start == 0 || len == 0 {
            continue;
        }
        // Marked even where no fence can be made below: the region is the parent's either
        // way, and the child's handler must never serve it.
        r.fenced.store(true, SeqCst);
        if fence == -1 {
            // SAFETY: memfd_create with a static NUL-terminated name.
            fence = unsafe { libc::memfd_create(c"ucache-forked".as_ptr(), libc::MFD_CLOEXEC) };
            if fence < 0 {
                // Not again for every region; the rest are only marked.
                fence = -2;
                continue;
            }
            crate::sigbus::install_in_child();
        }
        if fence < 0 {
            continue;
        }
        // SAFETY: replaces the child's copy of a region ucache owns (the parent's is its
        // own) with a shared mapping of an empty file: any access past its end, which is all
        // of it, raises SIGBUS instead of reading zeros. The raw system call, so that a
        // library interposing mmap (an LD_PRELOAD shim built on ucache, whose own fork
        // handler runs after this one) does not take the fence for a mapping of its own.
        unsafe {
            libc::syscall(
                libc::SYS_mmap,
                start,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fence,
                0,
            );
        }
    }
    if fence >= 0 {
        // SAFETY: our own descriptor; the mappings keep the file.
        unsafe { libc::syscall(libc::SYS_close, fence) };
    }
}
