//! Handler threads for transparent mappings in compatibility mode.
//!
//! In the default mode a fault is served by the faulting thread inside its `SIGBUS` handler,
//! but the kernel cannot do that for its own accesses to user memory (`write(2)` from a
//! mapping): those fail with `EFAULT`. Without `UFFD_FEATURE_SIGBUS` every fault, the kernel's
//! included, blocks its thread and queues a message on the userfaultfd instead; these threads
//! read the messages, serve each fault with the same protocol ([`FaultTarget::serve`]), and wake
//! the blocked thread. Several threads read the same descriptor, so one slow load does not hold
//! up faults on other buffers; duplicate messages for one buffer are harmless, since only one
//! thread can win its load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::error::Error;
use crate::sigbus::FaultTarget;
use crate::uffd::{self, Uffd};

/// How long a handler thread waits for a fault before checking whether it should stop.
const POLL_MS: i32 = 50;

/// The handler threads of one mapping; they stop when this is dropped.
pub(crate) struct FaultThreads {
    stop: Arc<AtomicBool>,
}

impl Drop for FaultThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts `n` handler threads for `core`, whose region starts at `base`. If one cannot be
/// started, those already running are stopped.
pub(crate) fn spawn(
    core: Weak<dyn FaultTarget>,
    u: Arc<Uffd>,
    base: usize,
    n: usize,
) -> std::io::Result<FaultThreads> {
    let threads = FaultThreads {
        stop: Arc::new(AtomicBool::new(false)),
    };
    for k in 0..n.max(1) {
        let (weak, u, stop) = (core.clone(), u.clone(), threads.stop.clone());
        std::thread::Builder::new()
            .name(format!("ucache-fault-{k}"))
            .spawn(move || serve(weak, &u, base, &stop))?;
    }
    Ok(threads)
}

fn serve(weak: Weak<dyn FaultTarget>, u: &Uffd, base: usize, stop: &AtomicBool) {
    // The thread and buffer of the last write refused as read-only.
    let mut last_refused = None;
    while !stop.load(Ordering::Relaxed) {
        let msg = match u.next_msg(POLL_MS) {
            Ok(Some(m)) if m.event == uffd::EVENT_PAGEFAULT => m,
            Ok(_) => continue,
            // The descriptor itself is gone: nothing more can come.
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => return,
            // Anything else (ENOMEM from poll or read) may pass, and a thread that gave up
            // would leave every later fault of the mapping blocked for good.
            Err(_) => {
                std::thread::sleep(std::time::Duration::from_millis(POLL_MS as u64));
                continue;
            }
        };
        let Some(core) = weak.upgrade() else { return };
        let addr = msg.address as usize;
        let write = msg.flags & uffd::PAGEFAULT_FLAG_WRITE != 0;
        let bs = core.buffer_size();
        let start = (addr - base) & !(bs - 1);
        if let Err(e) = core.clone().serve(addr - base, addr, write) {
            if matches!(e, Error::ReadOnly) {
                // A write the kernel makes for the program (read(2) into the mapping)
                // never returns to user mode to take the signal below: it retries the
                // fault, which is refused again, for ever. So a second refused write by
                // the same thread into the same buffer takes write permission from the
                // buffer, and the kernel's next retry fails with EFAULT. (A store from
                // user mode faults twice too when its first SIGBUS went to a handler that
                // returned, such as std's, which resets SIGBUS to the default: it dies of
                // the second one before running the store again.)
                let this = (msg.ptid, start);
                if last_refused == Some(this) {
                    let _ = core.deny_writes(start, bs);
                }
                last_refused = Some(this);
            }
            // As mmap would: SIGBUS to the thread that faulted. It is woken below, takes
            // the signal on its way back to user mode, and dies of it unless it handles it.
            send_sigbus(msg.ptid as libc::c_int);
        }
        // A fault that found its buffer already served changed nothing that wakes the
        // faulting thread: wake the whole buffer explicitly.
        let _ = u.wake((base + start) as *mut u8, bs);
    }
}

/// Sends `SIGBUS` to thread `tid` of this process for its failed fault. Only a thread can
/// queue a signal that looks like the kernel's (a positive `si_code`) to itself, so this one
/// comes from `tgkill` and looks sent; it is marked pending first, so that ucache's `SIGBUS`
/// handler, if installed, treats it as the fault it stands for (`crate::sigbus`).
fn send_sigbus(tid: libc::c_int) {
    crate::sigbus::mark_fault_signal(tid);
    // SAFETY: tgkill(2) to a thread of our own process.
    unsafe {
        libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGBUS);
    }
}
