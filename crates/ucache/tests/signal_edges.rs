//! The signal-level code at its edges (sigbus.rs, staging.rs, guard.rs), each case found by
//! review (2026-11-25) and failing before its fix. Tests that can end a process run as a child
//! (this binary, re-entered through an environment variable).

use std::process::Output;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions, Mapping};

const BS: usize = 4096;
mod common;

const CHILD: &str = "UCACHE_REVIEW_SIG_CHILD";

fn child(name: &str, mode: &str) -> Output {
    common::rerun_as_child(CHILD, name, mode, &[])
}

fn mode() -> Option<String> {
    std::env::var(CHILD).ok()
}

fn filled_store(n: usize) -> MemoryStore {
    let s = MemoryStore::new();
    s.insert("t", (0..n * BS).map(|k| (k % 251) as u8).collect());
    s
}

/// A cache of 64 buffers, evicting one at a time, with `options` mapping four buffers of
/// [`filled_store`]: the set-up of the tests that fault.
fn transparent(options: MapOptions) -> (Cache, Mapping) {
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = cache.map(Arc::new(filled_store(4)), "t", options).unwrap();
    (cache, m)
}

fn read(p: *const u8) -> u8 {
    // SAFETY: callers pass addresses inside a live mapping.
    unsafe { std::ptr::read_volatile(p) }
}

fn report(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A SIGBUS sent with kill/raise goes to the previous handler. In every Rust program that is
/// std's stack-overflow handler, which, for a signal that is not a guard-page hit, resets
/// SIGBUS to SIG_DFL (process-wide) and returns. ucache now records that reset as what comes
/// after it and goes back in front; before, the process survived the sent signal but died of
/// the next miss on any transparent mapping.
#[test]
fn sent_sigbus_chained_to_std_handler_keeps_transparent_mappings_served() {
    if mode().as_deref() == Some("sent") {
        // SAFETY: querying the current action into a local struct.
        let before = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut sa);
            sa.sa_sigaction
        };
        println!("previous handler is SIG_DFL: {}", before == libc::SIG_DFL);
        let (_cache, m) = transparent(MapOptions::new().transparent(true));
        assert_eq!(read(m.as_ptr()), 0);
        // SAFETY: raise(3).
        unsafe { libc::raise(libc::SIGBUS) };
        println!("survived the sent signal");
        m.evict(0, BS as u64).unwrap();
        // SAFETY: inside the mapping.
        assert_eq!(read(unsafe { m.as_ptr().add(5) }), 5);
        println!("reread ok");
        std::process::exit(0);
    }
    let out = child(
        "sent_sigbus_chained_to_std_handler_keeps_transparent_mappings_served",
        "sent",
    );
    let r = report(&out);
    assert!(r.contains("previous handler is SIG_DFL: false"), "{r}");
    assert!(r.contains("survived the sent signal"), "{r}");
    assert!(
        r.contains("reread ok") && out.status.success(),
        "ucache's handler was uninstalled by the chained handler: {r}"
    );
}

/// Thread-local destructors run last-registered first, and the staging area is registered at
/// a thread's first fault, so a thread-local registered earlier whose destructor touches a
/// transparent mapping faults after the staging slot is gone. Such a fault is served with a
/// staging area of its own; it used to panic in the handler and die of SIGBUS.
#[test]
fn fault_in_a_thread_local_destructor_is_served() {
    if mode().as_deref() == Some("tlsdtor") {
        struct Toucher(usize);
        impl Drop for Toucher {
            fn drop(&mut self) {
                if self.0 != 0 {
                    let b = read((self.0 + 9) as *const u8);
                    println!("destructor read {b}");
                }
            }
        }
        thread_local! {
            static T: std::cell::RefCell<Toucher> = const { std::cell::RefCell::new(Toucher(0)) };
        }
        let (_cache, m) = transparent(MapOptions::new().transparent(true).readahead(false));
        let base = m.as_ptr() as usize;
        let m = Arc::new(m);
        let mt = m.clone();
        // `join`, not a scope: a scope returns once the thread's closure has, which may be
        // before its thread-local destructors run, and the exit below would cut them short.
        std::thread::spawn(move || {
            // Registered before this thread's first fault, so destroyed after AREA.
            T.with(|t| t.borrow_mut().0 = base);
            // This thread's first fault: registers the staging area.
            assert_eq!(read(base as *const u8), 0);
            mt.evict(0, BS as u64).unwrap();
        })
        .join()
        .unwrap();
        println!("thread exited");
        std::process::exit(0);
    }
    let out = child("fault_in_a_thread_local_destructor_is_served", "tlsdtor");
    let r = report(&out);
    assert!(
        r.contains("destructor read 9") && r.contains("thread exited") && out.status.success(),
        "a fault during thread exit went unserved: {r}"
    );
}

/// The optimistic view's bounds checks do not overflow: `offset + 8 <= len` used to wrap in
/// release builds, so `copy_to(usize::MAX, ..)` read the byte before the buffer through a safe
/// API (debug builds panicked on the addition instead of the bounds check).
#[test]
fn optimistic_view_bounds_checks_do_not_overflow() {
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = cache
        .map(Arc::new(filled_store(4)), "t", MapOptions::new())
        .unwrap();
    let msg = m
        .read_optimistic(1, |v| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut out = [0u8; 1];
                v.copy_to(usize::MAX, &mut out);
                out[0]
            }));
            match r {
                Ok(b) => format!("no panic; read {b:#x} from before the buffer"),
                Err(p) => panic_message(&*p),
            }
        })
        .unwrap();
    assert!(msg.starts_with("copy of 1 at"), "{msg}");
    let msg = m
        .read_optimistic(1, |v| {
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                v.read_u64(usize::MAX - 7)
            })) {
                Ok(x) => format!("no panic; read {x:#x}"),
                Err(p) => panic_message(&*p),
            }
        })
        .unwrap();
    assert!(msg.starts_with("read_u64 at"), "{msg}");
}

/// The text a panic carried.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

static ALT_TARGET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static ALT_READ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

extern "C" fn on_usr1(_: libc::c_int) {
    let p = ALT_TARGET.load(Ordering::SeqCst);
    ALT_READ.store(read(p as *const u8) as usize, Ordering::SeqCst);
}

/// Runs `on_usr1` (SA_ONSTACK) on an alternate stack of `size` bytes with an inaccessible
/// guard page below it, and has it read an evicted byte of a transparent mapping.
fn fault_on_altstack(size: usize) {
    let (_cache, m) = transparent(MapOptions::new().transparent(true));
    // Warm this thread's staging and TLS so the fault on the small stack is a steady-state one.
    assert_eq!(read(m.as_ptr()), 0);
    m.evict(0, BS as u64).unwrap();
    // SAFETY: a fresh anonymous mapping for the stack, its lowest page made inaccessible.
    unsafe {
        let total = size + 4096;
        let mem = libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(mem, libc::MAP_FAILED);
        libc::mprotect(mem, 4096, libc::PROT_NONE);
        let ss = libc::stack_t {
            ss_sp: (mem as *mut u8).add(4096) as *mut libc::c_void,
            ss_flags: 0,
            ss_size: size,
        };
        assert_eq!(libc::sigaltstack(&ss, std::ptr::null_mut()), 0);
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
        ALT_TARGET.store(m.as_ptr().add(33) as usize, Ordering::SeqCst);
        libc::raise(libc::SIGUSR1);
    }
    println!("altstack {size}: read {}", ALT_READ.load(Ordering::SeqCst));
    std::process::exit(0);
}

/// A fault taken inside the program's own SA_ONSTACK handler (a profiler's SIGPROF, a crash
/// reporter) serves the whole miss on that handler's alternate stack. `SIGSTKSZ` (8 KiB) is too
/// small for it (found by review); `MapOptions::transparent` documents 64 KiB, checked here.
#[test]
fn fault_on_a_64_kib_alternate_stack_is_served() {
    if let Some(size) = mode().and_then(|m| m.strip_prefix("altstack=").map(str::to_string)) {
        fault_on_altstack(size.parse().unwrap());
    }
    let out = child(
        "fault_on_a_64_kib_alternate_stack_is_served",
        &format!("altstack={}", 64 << 10),
    );
    let r = report(&out);
    assert!(
        r.contains(&format!("altstack {}: read 33", 64 << 10)) && out.status.success(),
        "a fault on an alternate stack of 64 KiB overflowed it: {r}"
    );
}

/// A program that ignored SIGBUS (SIG_IGN: the kernel discards a sent one) now has it
/// delivered to ucache's handler, which returns; with SA_RESTART a blocking system call it
/// lands in goes on (it used to fail with EINTR: a `read` from a pipe here).
#[test]
fn ignored_sent_sigbus_does_not_interrupt_a_blocking_read() {
    if mode().as_deref() == Some("eintr") {
        // SAFETY: signal(2), pipe(2), read(2), write(2) and pthread_kill(3) on our own fds and
        // threads.
        unsafe {
            libc::signal(libc::SIGBUS, libc::SIG_IGN);
            let (_cache, m) = transparent(MapOptions::new().transparent(true));
            assert_eq!(read(m.as_ptr()), 0);
            let mut fds = [0; 2];
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            let me = libc::pthread_self() as usize;
            let w = fds[1];
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                libc::pthread_kill(me as libc::pthread_t, libc::SIGBUS);
                std::thread::sleep(Duration::from_millis(200));
                libc::write(w, b"x".as_ptr() as *const libc::c_void, 1);
            });
            let mut b = 0u8;
            let r = libc::read(fds[0], &mut b as *mut u8 as *mut libc::c_void, 1);
            let e = std::io::Error::last_os_error();
            t.join().unwrap();
            println!("read returned {r} ({e})");
        }
        std::process::exit(0);
    }
    let out = child(
        "ignored_sent_sigbus_does_not_interrupt_a_blocking_read",
        "eintr",
    );
    let r = report(&out);
    assert!(r.contains("read returned 1"), "{r}");
}
