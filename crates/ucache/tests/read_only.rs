//! Read-only transparent mappings refuse every write: a plain store (first touch, or into a
//! resident buffer), and a write the kernel makes on the program's behalf (`read(2)` from a
//! pipe into the mapping), with faults served on the faulting thread or by handler threads.
//! A refused store is `SIGBUS` after the error hook saw `Error::ReadOnly`; a refused kernel
//! write is `EFAULT` (or that `SIGBUS`). Never a silent write: the file behind the mapping and
//! the mapping's bytes stay as they were.
//!
//! Each case runs as a child (this binary, re-entered through an environment variable) that
//! is expected to die, under a watchdog of minutes.

mod common;

use std::io::Read as _;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use ucache::store::FileStore;
use ucache::{Cache, CacheOptions, Error, FaultAction, FaultHandling, MapOptions};

const BS: usize = 4096;
const BUFFERS: usize = 4;
const CHILD: &str = "UCACHE_READ_ONLY_CHILD";
const FILE: &str = "UCACHE_READ_ONLY_FILE";
/// Where the child writes: inside buffer 1, so buffer 0 stays untouched.
const AT: usize = BS + 100;

fn pattern() -> Vec<u8> {
    (0..BUFFERS * BS).map(|k| (k % 251) as u8).collect()
}

/// Writes `s` to stdout with write(2): the hook runs inside a signal handler.
fn say(s: &str) {
    // SAFETY: write(2) of a live buffer to stdout.
    unsafe { libc::write(1, s.as_ptr() as *const libc::c_void, s.len()) };
}

/// The child: maps the file read-only, puts buffer 1 in `placement`, then writes into it by
/// `access`. Prints what happened; a refused store kills it.
fn run_child(spec: &str) -> ! {
    let parts: Vec<&str> = spec.split(':').collect();
    let [handling, access, placement] = parts[..] else {
        panic!("bad child spec {spec}")
    };
    let handling = match handling {
        "thread" => FaultHandling::OnFaultingThread,
        _ => FaultHandling::HandlerThreads(1),
    };
    let path = std::env::var(FILE).unwrap();
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = cache
        .map(
            Arc::new(FileStore::new()),
            &path,
            MapOptions::new()
                .transparent(true)
                .writable(false)
                .fault_handling(handling)
                .on_fault_error(Arc::new(|_addr, e: &Error| {
                    say(if matches!(e, Error::ReadOnly) {
                        "hook:ReadOnly\n"
                    } else {
                        "hook:other\n"
                    });
                    FaultAction::Signal
                })),
        )
        .unwrap();
    let p = m.as_ptr() as *mut u8;
    match placement {
        "cold" => {}
        // SAFETY: a load inside the mapping.
        "loaded" => assert_eq!(unsafe { p.add(AT).read_volatile() }, (AT % 251) as u8),
        "ensured" => m.ensure_cached(AT as u64, 1).unwrap(),
        "prefetched" => {
            m.prefetch(AT as u64, 1).unwrap();
            common::until("the prefetch", || m.resident() > 0, || m.resident());
        }
        other => panic!("placement {other}"),
    }
    say("about to write\n");
    match access {
        "store" => {
            // SAFETY: deliberately stores into a read-only mapping: must not survive.
            unsafe { p.add(AT).write_volatile(0xEE) };
            say("survived the store\n");
        }
        _ => {
            let mut fds = [0; 2];
            // SAFETY: pipe(2) into a two-element array; write(2) of a local buffer.
            unsafe {
                assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
                assert_eq!(libc::write(fds[1], [0xEEu8; 64].as_ptr().cast(), 64), 64);
            }
            // SAFETY: the kernel writes into the read-only mapping: must fail.
            let r = unsafe { libc::read(fds[0], p.add(AT).cast(), 64) };
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            say(&format!("read returned {r} errno {errno}\n"));
            if r > 0 {
                say("WROTE\n");
            }
        }
    }
    // What the mapping shows now, and once evicted and loaded again.
    for _ in 0..2 {
        let mut view = vec![0u8; 64];
        m.read(AT as u64, &mut view).unwrap();
        if view[..] != pattern()[AT..AT + 64] {
            say("VIEW CHANGED\n");
            std::process::exit(0)
        }
        m.evict(0, m.len()).unwrap();
    }
    say("view intact\n");
    std::process::exit(0)
}

struct Ended {
    signal: Option<i32>,
    code: Option<i32>,
    stdout: String,
}

/// Runs the child for `spec` on a fresh file; returns how it ended, after checking the file
/// is unchanged.
fn child(test: &str, spec: &str) -> Ended {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.dat");
    std::fs::write(&path, pattern()).unwrap();
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, spec)
        .env(FILE, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The watchdog: a child still running after minutes is hung (before the fix, a kernel
    // write in handler-thread mode retried its refused fault for ever).
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > common::HANG {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{spec}: the child hung for {:?}", common::HANG);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let mut stdout = String::new();
    c.stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert!(
        std::fs::read(&path).unwrap() == pattern(),
        "{spec}: the file behind a read-only mapping changed\n{stdout}"
    );
    Ended {
        signal: status.signal(),
        code: status.code(),
        stdout,
    }
}

const HANDLINGS: [&str; 2] = ["thread", "handlers"];
const PLACEMENTS: [&str; 4] = ["cold", "loaded", "ensured", "prefetched"];

/// A plain store, first touch or into a resident buffer, in either fault-handling mode: the
/// hook sees `ReadOnly`, then `SIGBUS`.
#[test]
fn a_store_into_a_read_only_mapping_is_refused() {
    const NAME: &str = "a_store_into_a_read_only_mapping_is_refused";
    if let Ok(spec) = std::env::var(CHILD) {
        run_child(&spec);
    }
    for h in HANDLINGS {
        for p in PLACEMENTS {
            let spec = format!("{h}:store:{p}");
            let e = child(NAME, &spec);
            assert!(e.stdout.contains("about to write"), "{spec}: {}", e.stdout);
            assert!(!e.stdout.contains("survived"), "{spec}: {}", e.stdout);
            assert!(e.stdout.contains("hook:ReadOnly"), "{spec}: {}", e.stdout);
            assert_eq!(e.signal, Some(libc::SIGBUS), "{spec}: {}", e.stdout);
        }
    }
}

/// `read(2)` from a pipe into the mapping: `EFAULT` (or the store's `SIGBUS`, where a handler
/// thread serves the kernel's fault), never a write.
#[test]
fn a_kernel_write_into_a_read_only_mapping_is_refused() {
    const NAME: &str = "a_kernel_write_into_a_read_only_mapping_is_refused";
    if let Ok(spec) = std::env::var(CHILD) {
        run_child(&spec);
    }
    for h in HANDLINGS {
        for p in PLACEMENTS {
            let spec = format!("{h}:kernel:{p}");
            let e = child(NAME, &spec);
            assert!(e.stdout.contains("about to write"), "{spec}: {}", e.stdout);
            assert!(!e.stdout.contains("WROTE"), "{spec}: {}", e.stdout);
            assert!(!e.stdout.contains("VIEW CHANGED"), "{spec}: {}", e.stdout);
            let efault = e
                .stdout
                .contains(&format!("read returned -1 errno {}", libc::EFAULT));
            let refused = e.signal == Some(libc::SIGBUS) && e.stdout.contains("hook:ReadOnly");
            assert!(
                (efault && e.code == Some(0) && e.stdout.contains("view intact")) || refused,
                "{spec}: signal {:?} code {:?}\n{}",
                e.signal,
                e.code,
                e.stdout
            );
        }
    }
}
