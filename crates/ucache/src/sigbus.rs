//! The process-wide `SIGBUS` handler that serves faults on transparent mappings, and the
//! registry it finds them in. The same handler takes `SIGSEGV` once a file view exists: a
//! load of a page a view hides raises `SIGSEGV` (`SEGV_ACCERR`), not `SIGBUS`.
//!
//! A transparent mapping's userfaultfd has `UFFD_FEATURE_SIGBUS`, so a plain load or store that
//! misses raises `SIGBUS` in the faulting thread. The handler looks the address up among the
//! registered mappings and resolves the fault right there (load, or mark dirty); returning
//! from the handler re-executes the access, which now succeeds. Anything else — a fault
//! outside every ucache mapping, or one ucache could not resolve — goes to the handler that
//! was installed before ucache's, exactly as if ucache were not there: the application's own
//! handler, or the default action that ends the process, as mmap's `SIGBUS` does.
//!
//! The registry is a fixed array of slots read without locks: a signal handler must not take a
//! lock the interrupted thread might hold. Each slot holds a `Weak` reference, so a mapping
//! that is going away is never resurrected by a late fault, and a per-slot count of handlers
//! inside it lets unregistration wait until no handler still reads the slot.
//!
//! The registry sees a mapping only as a [`FaultTarget`]: this module sits below the
//! mappings that register with it and names none of them. Nor does it name the fork watch
//! ([`crate::fork`]), which sits above it: that hands in which addresses a forked child may
//! not touch ([`set_fence`]) and installs the handler in such a child ([`install_in_child`]).

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Once, OnceLock, Weak};

use crate::error::{Error, Result};

const SLOTS: usize = 1024;

/// A transparent mapping as its fault handlers see it (this module's, and the handler threads
/// of [`crate::fault_thread`]).
pub(crate) trait FaultTarget: Send + Sync {
    /// Bytes per buffer.
    fn buffer_size(&self) -> usize;
    /// Serves a fault at byte `offset` of the mapping (address `addr`), a store if `write`,
    /// as the access's own thread would: a miss is loaded, a first store marks its buffer
    /// dirty. Where that fails, the mapping's fault hook may still say to retry (`Ok`); `Err`
    /// is a fault to deliver as `SIGBUS`, with why.
    fn serve(self: Arc<Self>, offset: usize, addr: usize, write: bool) -> Result<()>;
    /// Takes write permission from the pages of `[start, start+len)` for good (see
    /// `fault_thread::serve`).
    fn deny_writes(&self, start: usize, len: usize) -> Result<()>;
    /// The signal this mapping's faults arrive by: `SIGBUS` (userfaultfd), or `SIGSEGV` (a
    /// file view). A fault by the other signal in its range is not ucache's to serve: the
    /// kernel's own `SIGBUS` past the end of a viewed file, or a store into a
    /// userfaultfd mapping whose pages the program protected.
    fn signal(&self) -> libc::c_int {
        libc::SIGBUS
    }
}

/// What a slot names: the registered mapping, weak, boxed so that one thin pointer holds it.
type Target = Weak<dyn FaultTarget>;

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    core: AtomicPtr<Target>,
    users: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    core: AtomicPtr::new(std::ptr::null_mut()),
    users: AtomicUsize::new(0),
};

static REGISTRY: [Slot; SLOTS] = [EMPTY; SLOTS];
/// The signals ucache's handler may take, in the order of the per-signal tables below:
/// `SIGBUS` from the first transparent mapping on, `SIGSEGV` from the first file view on.
const SIGNALS: [libc::c_int; 2] = [libc::SIGBUS, libc::SIGSEGV];
/// `si_code` of a `SIGSEGV` for an access the page's protection forbids (a hidden page).
const SEGV_ACCERR: libc::c_int = 2;
static INSTALL: [Once; 2] = [const { Once::new() }; 2];
/// Per signal, the actions that came before ours: slot 0 written once, before ours is
/// installed; later slots when a handler we chained to changed the disposition (std's resets
/// it to the default for a signal it does not handle). `PREVIOUS_AT` names the slot in use. A
/// slot is rewritten only after seven more changes, so a handler still copying an older one
/// never meets a write; and a change needs a sent signal reaching a handler that replaces
/// itself.
static mut PREVIOUS: [[std::mem::MaybeUninit<libc::sigaction>; 8]; 2] =
    [[const { std::mem::MaybeUninit::zeroed() }; 8]; 2];
static PREVIOUS_AT: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];
/// Held by the handler that is recording a changed disposition.
static REPLACING: [std::sync::atomic::AtomicBool; 2] =
    [const { std::sync::atomic::AtomicBool::new(false) }; 2];

/// The row of the per-signal tables for `sig`, one of [`SIGNALS`].
fn row(sig: libc::c_int) -> usize {
    SIGNALS.iter().position(|&s| s == sig).unwrap_or(0)
}
/// Whether an address lies in a region fenced at a fork, a mapping of the parent's
/// ([`set_fence`]); unset, none does.
/// Read in the handler with `get`, one atomic load: no lock, no allocation.
static FENCE: OnceLock<fn(usize) -> bool> = OnceLock::new();

/// A registered mapping; unregisters on drop.
pub(crate) struct Registration {
    slot: usize,
}

/// A slot claimed by a registration that is still writing its range: skipped by lookups.
/// Never a real pointer (nothing is allocated at the first aligned address).
const CLAIMED: *mut Target = std::ptr::dangling_mut();

/// Makes faults in `[start, start+len)` go to `core`, installing the handler for `sig` (its
/// [`FaultTarget::signal`]) on first use.
pub(crate) fn register(
    core: Target,
    start: usize,
    len: usize,
    sig: libc::c_int,
) -> Result<Registration> {
    install(sig)?;
    // Allocated here, never in the handler, which only borrows it.
    let weak = Box::into_raw(Box::new(core));
    for (k, s) in REGISTRY.iter().enumerate() {
        // Claim the slot before writing its range: two registrations that wrote first and
        // claimed second could both write one slot, and one would publish the other's range.
        if s.core
            .compare_exchange(std::ptr::null_mut(), CLAIMED, SeqCst, SeqCst)
            .is_err()
        {
            continue;
        }
        if s.users.load(SeqCst) != 0 {
            // A handler still reads what the slot held before: leave it be.
            s.core.store(std::ptr::null_mut(), SeqCst);
            continue;
        }
        s.start.store(start, SeqCst);
        s.end.store(start + len, SeqCst);
        s.core.store(weak, SeqCst);
        return Ok(Registration { slot: k });
    }
    // SAFETY: `weak` came from Box::into_raw above and was not published.
    drop(unsafe { Box::from_raw(weak) });
    Err(Error::BadArgument(format!(
        "more than {SLOTS} transparent mappings at once"
    )))
}

impl Drop for Registration {
    fn drop(&mut self) {
        let s = &REGISTRY[self.slot];
        let p = s.core.swap(CLAIMED, SeqCst);
        // A handler that saw the pointer before the swap holds `users`; wait for it to finish
        // upgrading (or failing to upgrade) before giving the weak reference back. The slot
        // stays claimed meanwhile, so no registration reuses it under that handler.
        while s.users.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        s.core.store(std::ptr::null_mut(), SeqCst);
        if !p.is_null() && p != CLAIMED {
            // SAFETY: p came from Box::into_raw in `register` and is no longer published.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// The live mapping whose registered range contains `addr`, and the range's start.
fn lookup(addr: usize) -> Option<(Arc<dyn FaultTarget>, usize)> {
    for s in REGISTRY.iter() {
        let p = s.core.load(SeqCst);
        if p.is_null() || p == CLAIMED {
            continue;
        }
        s.users.fetch_add(1, SeqCst);
        let p = s.core.load(SeqCst);
        let start = s.start.load(SeqCst);
        let live = !p.is_null() && p != CLAIMED;
        let found = if live && addr >= start && addr < s.end.load(SeqCst) {
            // SAFETY: while `users` is raised and the pointer is still published, the slot's
            // box is alive (`Registration::drop` frees it only once `users` is 0); we borrow it.
            let weak: &Target = unsafe { &*p };
            weak.upgrade().map(|c| (c, start))
        } else {
            None
        };
        s.users.fetch_sub(1, SeqCst);
        // A mapping going away may still name a range that a new one now holds: look on.
        if found.is_some() {
            return found;
        }
    }
    None
}

/// `SA_NODEFER`: a fault inside the handler (a policy hook touching memory) is served too.
/// `SA_RESTART`: a sent `SIGBUS` that the program ignored (and so never interrupted anything
/// before ucache) does not make a blocking system call fail with `EINTR`; a fault is never
/// inside a system call, so it changes nothing there.
const OUR_FLAGS: libc::c_int = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_RESTART;

fn install(sig: libc::c_int) -> Result<()> {
    let mut err = None;
    INSTALL[row(sig)].call_once(|| {
        // SAFETY: sigaction with a zeroed struct naming our handler; PREVIOUS is written here,
        // once, before our handler can run, and only read afterwards.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_fault;
            sa.sa_sigaction = handler as usize;
            sa.sa_flags = OUR_FLAGS;
            libc::sigemptyset(&mut sa.sa_mask);
            let prev = std::ptr::addr_of_mut!(PREVIOUS[row(sig)]) as *mut libc::sigaction;
            if libc::sigaction(sig, &sa, prev) != 0 {
                err = Some(Error::last_os("sigaction"));
            }
        }
    });
    err.map_or(Ok(()), Err)
}

/// Whether the faulting access was a write, where the architecture tells us. Elsewhere a write
/// miss is served as a read and then takes one more (write-protect) fault.
fn is_write(ctx: *mut libc::c_void) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a ucontext_t to SA_SIGINFO handlers; on x86-64 the page
        // fault error code is in REG_ERR, bit 1 set for writes.
        unsafe {
            let uc = ctx as *const libc::ucontext_t;
            (*uc).uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ctx;
        false
    }
}

extern "C" fn on_fault(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: errno is thread-local; we restore it so the interrupted code never sees ours.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A SIGBUS sent by kill(2), raise(3) or sigqueue(3) (si_code <= 0) names no address:
    // it is not a fault, and goes to whoever handled SIGBUS before ucache. One that a handler
    // thread sent for a failed fault stands for that fault.
    let fault = code > 0 || (sig == libc::SIGBUS && take_fault_signal());
    if code > 0 && FENCE.get().is_some_and(|fenced| fenced(addr)) {
        report_forked(addr);
        chain(sig, info, ctx, true);
        return;
    }
    // A SIGSEGV is ours only where a view hides the page: a bad pointer (`SEGV_MAPERR`) is
    // the program's, and goes on at once.
    let ours = code > 0 && (sig == libc::SIGBUS || code == SEGV_ACCERR);
    let found = if ours {
        lookup(addr).filter(|(core, _)| core.signal() == sig)
    } else {
        None
    };
    let served = match found {
        Some((core, start)) => {
            let write = is_write(ctx);
            // A panic must not unwind into the interrupted frame.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                core.serve(addr - start, addr, write)
            }));
            matches!(r, Ok(Ok(())))
        }
        None => false,
    };
    if !served {
        chain(sig, info, ctx, fault);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Makes a fault at an address `fenced` accepts the touch of a forked child on a mapping of
/// its parent: reported ([`report_forked`]) and handed on as unserved, before any lookup.
/// `fenced` must accept only the regions the process had at its fork, not those it
/// registered since (the registry holds both: a child's own mappings are served as usual),
/// and must itself be fit for a signal handler: atomics only.
/// Called once, by the fork watch as it starts ([`crate::fork`]: before it installs its fork
/// handler, so that every child in which regions can be fenced has the check); a second call
/// changes nothing.
pub(crate) fn set_fence(fenced: fn(usize) -> bool) {
    let _ = FENCE.set(fenced);
}

/// Installs the handler in a forked child whose transparent regions were fenced
/// ([`crate::fork`]), so that a touch is reported before the default action.
pub(crate) fn install_in_child() {
    let _ = install(libc::SIGBUS);
}

/// Tells a forked child why it dies (write(2) of a stack buffer: nothing that could need a
/// lock another thread of the parent held at the fork).
fn report_forked(addr: usize) {
    const HEAD: &[u8] = b"ucache: SIGBUS: a forked child touched a transparent mapping of its \
parent at 0x";
    const TAIL: &[u8] = b"; ucache mappings are not served after fork (exec, or make a new \
cache in the child)\n";
    let mut msg = [0u8; HEAD.len() + 16 + TAIL.len()];
    msg[..HEAD.len()].copy_from_slice(HEAD);
    for k in 0..16 {
        let nibble = (addr >> (60 - 4 * k)) & 0xf;
        msg[HEAD.len() + k] = b"0123456789abcdef"[nibble];
    }
    msg[HEAD.len() + 16..].copy_from_slice(TAIL);
    // SAFETY: write(2) of a buffer we own.
    unsafe { libc::write(2, msg.as_ptr() as *const libc::c_void, msg.len()) };
}

/// Threads that a handler thread sent `SIGBUS` for a failed fault, and that have not taken it
/// yet (0: free). A handler thread has more than a few of these pending only if many faults
/// fail at once; a thread left unmarked then takes its signal as a sent one.
static FAULT_SIGNALS: [AtomicUsize; 64] = [const { AtomicUsize::new(0) }; 64];

/// Marks thread `tid` as about to receive `SIGBUS` for a failed fault (see [`FAULT_SIGNALS`]).
pub(crate) fn mark_fault_signal(tid: libc::c_int) {
    if !INSTALL[0].is_completed() {
        return;
    }
    for s in FAULT_SIGNALS.iter() {
        if s.compare_exchange(0, tid as usize, SeqCst, SeqCst).is_ok() {
            return;
        }
    }
}

/// Whether this thread was marked by [`mark_fault_signal`]; clears the mark.
fn take_fault_signal() -> bool {
    // SAFETY: gettid(2) has no failure mode.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as usize;
    FAULT_SIGNALS
        .iter()
        .any(|s| s.compare_exchange(tid, 0, SeqCst, SeqCst).is_ok())
}

/// Hands the signal to whatever handled `sig` before ucache. `fault` says it came from a
/// faulting access, which runs again when the handler returns.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void, fault: bool) {
    let r = row(sig);
    // SAFETY: the slot in use was fully written before it was published (slot 0 before our
    // handler was installed, later ones before PREVIOUS_AT named them).
    let prev = unsafe {
        (*std::ptr::addr_of!(PREVIOUS))[r][PREVIOUS_AT[r].load(SeqCst) % 8].assume_init()
    };
    let h = prev.sa_sigaction;
    if h == libc::SIG_IGN && !fault {
        // A sent signal the program chose to ignore.
        return;
    }
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // The default action, which ends the process. A fault gets it by running again with
        // the default restored (a synchronous fault cannot be ignored); a sent signal is
        // raised again, at once, rather than left for some later fault.
        // SAFETY: plain sigaction with a zeroed struct (SIG_DFL), then raise(3).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
            if !fault {
                libc::raise(sig);
            }
        }
        return;
    }
    // SAFETY: the previous handler was installed for `sig` with these flags, so calling it
    // with the arguments the kernel gave us is what the kernel would have done.
    unsafe {
        if prev.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(h);
            f(sig, info, ctx);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
            f(sig);
        }
    }
    if !fault {
        stay_in_front(sig);
    }
}

/// After a handler we chained a sent signal to has returned: if it changed `sig`'s
/// disposition (std's handler resets it to the default for any signal that is not its guard
/// page's), what it installed is what now comes after ucache, and ucache's own handler goes
/// back in front. Otherwise one `kill -BUS` would leave every later miss of every transparent
/// mapping unserved. A fault is left alone: it runs again at once, into whatever is installed.
fn stay_in_front(sig: libc::c_int) {
    let r = row(sig);
    // SAFETY: sigaction(2) reads of the current action into a zeroed struct we own.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) } != 0 {
        return;
    }
    let ours: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_fault;
    if cur.sa_sigaction == ours as usize || REPLACING[r].swap(true, SeqCst) {
        return;
    }
    let next = (PREVIOUS_AT[r].load(SeqCst) + 1) % 8;
    // SAFETY: slot `next` is not the one in use, and REPLACING makes us its only writer; it is
    // published (PREVIOUS_AT) only once written. Then our own action goes back in, as install
    // made it.
    unsafe {
        (*std::ptr::addr_of_mut!(PREVIOUS))[r][next].write(cur);
        PREVIOUS_AT[r].store(next, SeqCst);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ours as usize;
        sa.sa_flags = OUR_FLAGS;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
    REPLACING[r].store(false, SeqCst);
}
