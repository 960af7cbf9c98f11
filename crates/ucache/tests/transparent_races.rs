//! Races of transparent mappings with pins, maps and signals, found by review: each test
//! failed before its fix. Tests that can end a process run it as a child (this binary,
//! re-entered through an environment variable).

use std::os::unix::process::ExitStatusExt;
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ucache::store::MemoryStore;
use ucache::Phase;
use ucache::{Cache, CacheOptions, MapOptions};

mod common;
use common::words;

const BS: usize = 4096;
const CHILD: &str = "UCACHE_RACES_CHILD";

fn child(name: &str, mode: &str) -> Output {
    common::rerun_as_child(CHILD, name, mode, &[])
}

fn mode() -> Option<String> {
    std::env::var(CHILD).ok()
}

/// A plain store whose write-protect fault finds the buffer pinned exclusively by another
/// thread (one that only reads under its pin) waits for the pin. Before, it lifted the
/// protection itself: when the pin was dropped clean in between, the buffer ended up clean and
/// writable, the store landed without `D`, and eviction dropped it (within 50 to 5,000 stores).
#[test]
fn store_racing_a_clean_exclusive_unpin_is_not_lost() {
    let store = MemoryStore::new();
    store.insert("t", vec![0u8; 4 * BS]);
    let (_cache, m) = common::writable_transparent(&store, 64, 1);
    let w = words(&m);
    let stop = AtomicBool::new(false);
    let mut lost = None;
    let mut n = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            // Exclusive pins that never write: dropped clean.
            while !stop.load(Ordering::Relaxed) {
                if let Ok(g) = m.pin_exclusive(0) {
                    std::hint::black_box(g[0]);
                }
            }
        });
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            // Clean and write-protected again (this thread is the only one that writes back).
            m.msync(0, BS as u64).unwrap();
            n += 1;
            w[0].store(n, Ordering::Relaxed);
            let st = m.state(0).unwrap();
            if !st.dirty() && !st.writing() && st.phase() == Phase::Cached {
                lost = Some((n, st));
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    if let Some((n, st)) = lost {
        // The store is in memory but the buffer is clean: eviction drops it unwritten.
        m.evict(0, BS as u64).unwrap();
        let now = w[0].load(Ordering::Relaxed);
        panic!(
            "after store {n} buffer 0 was clean ({st:?}); after evict it reads {now} \
             (store lost: {})",
            now != n
        );
    }
    eprintln!("{n} stores, none lost");
}

/// Threads map, touch and unmap transparent mappings, so the kernel hands one thread's freed
/// addresses to another's new mapping. The registry entry of a mapping going away must not
/// hide the new one. Before, the range was unmapped before its entry was cleared, and a fault
/// that met the stale entry first went unserved: the process died of SIGBUS within 0.1 s.
/// Maps are serialized here, so `register`'s own race (next test) is excluded.
#[test]
fn map_racing_unmap_of_a_reused_range_is_served() {
    if mode().as_deref() == Some("maps") {
        let store = Arc::new(MemoryStore::new());
        store.insert("t", vec![7u8; BS]);
        let cache = Cache::new(CacheOptions::new(1024 * BS as u64).batch(1)).unwrap();
        let progress = AtomicU64::new(0);
        let finished = AtomicU64::new(0);
        let serial = std::env::var("PARALLEL_MAPS").is_err();
        install_reporting_sigbus_handler();
        let map_lock = std::sync::Mutex::new(());
        let nt: u64 = std::env::var("NT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3);
        std::thread::scope(|s| {
            for _ in 0..nt {
                s.spawn(|| {
                    let t0 = Instant::now();
                    while t0.elapsed() < Duration::from_secs(4) {
                        let g = serial.then(|| map_lock.lock().unwrap());
                        let m = cache
                            .map(store.clone(), "t", MapOptions::new().transparent(true))
                            .unwrap();
                        drop(g);
                        if std::env::var("VERBOSE").is_ok() {
                            println!(
                                "map at {:p} by {:?}",
                                m.as_ptr(),
                                std::thread::current().id()
                            );
                        }
                        // SAFETY: inside the live mapping.
                        let b = unsafe { std::ptr::read_volatile(m.as_ptr()) };
                        assert_eq!(b, 7);
                        m.unmap().unwrap();
                        progress.fetch_add(1, Ordering::Relaxed);
                    }
                    finished.fetch_add(1, Ordering::Relaxed);
                });
            }
            // Watchdog: a fault served by the wrong mapping spins forever. Each map takes
            // microseconds, so `HANG` without one is a hang, not a slow machine.
            let (mut last, mut since) = (0, Instant::now());
            while finished.load(Ordering::Relaxed) < nt {
                std::thread::sleep(Duration::from_millis(100));
                let p = progress.load(Ordering::Relaxed);
                if p != last {
                    (last, since) = (p, Instant::now());
                } else if since.elapsed() > common::HANG {
                    println!("HANG after {p} maps");
                    std::process::exit(3);
                }
            }
        });
        println!("DONE {} maps", progress.load(Ordering::Relaxed));
        std::process::exit(0);
    }
    assert_child_done("map_racing_unmap_of_a_reused_range_is_served", "maps");
}

/// Two threads map at once. Each registration must claim its registry slot before writing its
/// range there: before, both could write one slot, and one mapping was published with the
/// other's range, so its faults went unserved (SIGBUS) or were served by the wrong mapping
/// forever (a hang). Address reuse is excluded: every mapping of a round stays mapped until
/// all threads have mapped and touched theirs.
#[test]
fn concurrent_maps_without_address_reuse_register_the_right_ranges() {
    if mode().as_deref() == Some("noreuse") {
        let store = Arc::new(MemoryStore::new());
        store.insert("t", vec![7u8; BS]);
        install_reporting_sigbus_handler();
        watchdog(300);
        let cache = Cache::new(CacheOptions::new(1024 * BS as u64).batch(1)).unwrap();
        let nt: usize = std::env::var("NT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2);
        let barrier = std::sync::Barrier::new(nt);
        let rounds = AtomicU64::new(0);
        // One clock and one decision for all threads: each deciding on a clock of its own,
        // one could leave while another, a moment behind, waited at the next barrier for ever.
        let t0 = Instant::now();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..nt {
                s.spawn(|| {
                    loop {
                        barrier.wait();
                        let mut ms = Vec::new();
                        for _ in 0..100 {
                            let m = cache
                                .map(store.clone(), "t", MapOptions::new().transparent(true))
                                .unwrap();
                            // SAFETY: inside the live mapping.
                            assert_eq!(unsafe { std::ptr::read_volatile(m.as_ptr()) }, 7);
                            ms.push(m);
                        }
                        barrier.wait();
                        for m in ms {
                            m.unmap().unwrap();
                        }
                        rounds.fetch_add(1, Ordering::Relaxed);
                        if barrier.wait().is_leader() {
                            stop.store(t0.elapsed() >= Duration::from_secs(4), Ordering::Relaxed);
                        }
                        barrier.wait();
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                });
            }
        });
        println!("DONE {} rounds", rounds.load(Ordering::Relaxed));
        std::process::exit(0);
    }
    assert_child_done(
        "concurrent_maps_without_address_reuse_register_the_right_ranges",
        "noreuse",
    );
}

/// A SIGBUS handler installed before ucache's, so ucache chains to it: it reports the address
/// that ucache could not serve and ends the process with status 99.
fn install_reporting_sigbus_handler() {
    extern "C" fn report(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: SA_SIGINFO handler; the kernel passes a valid siginfo.
        let addr = unsafe { (*info).si_addr() } as usize;
        let msg = format!("UNSERVED SIGBUS at {addr:#x}\n");
        // SAFETY: write(2) of a buffer we own, then _exit.
        unsafe {
            libc::write(1, msg.as_ptr() as *const libc::c_void, msg.len());
            libc::_exit(99);
        }
    }
    // SAFETY: plain sigaction.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = report;
        sa.sa_sigaction = h as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

/// Ends the process with status 3 after `secs` seconds: a fault served by the wrong mapping
/// spins forever.
fn watchdog(secs: u64) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(secs));
        println!("HANG");
        std::process::exit(3);
    });
}

/// Runs test `name` as a child in `mode` and asserts that it exited cleanly after printing
/// `DONE`; the failure quotes its report lines.
fn assert_child_done(name: &str, mode: &str) {
    let out = child(name, mode);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("DONE"),
        "child ended with {:?} (signal {:?}): {}",
        out.status,
        out.status.signal(),
        stdout
            .lines()
            .filter(|l| !l.starts_with("running") && !l.is_empty())
            .collect::<Vec<_>>()
            .join(" | ")
    );
}

/// A transparent mapping of four buffers of 7s, without readahead, whose first buffer has
/// been loaded by a miss: ucache's SIGBUS handler is installed and has served a fault.
fn mapped_after_one_miss() -> (Cache, ucache::Mapping) {
    let store = Arc::new(MemoryStore::new());
    store.insert("t", vec![7u8; 4 * BS]);
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = cache
        .map(
            store,
            "t",
            MapOptions::new().transparent(true).readahead(false),
        )
        .unwrap();
    // SAFETY: inside the live mapping.
    assert_eq!(unsafe { std::ptr::read_volatile(m.as_ptr()) }, 7);
    println!("first miss served");
    (cache, m)
}

/// A SIGBUS sent by `raise` (not a fault) in a program that ignores SIGBUS is ignored, and
/// ucache's handler stays: the next miss is served. Before, ucache took every unserved SIGBUS
/// for a fault, reset the disposition to the default, and the next miss killed the process.
#[test]
fn a_sent_sigbus_does_not_uninstall_the_fault_handler() {
    if mode().as_deref() == Some("sigign") {
        // SAFETY: plain signal(2).
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_IGN) };
        let (_cache, m) = mapped_after_one_miss();
        // SAFETY: raise(3); the program ignores SIGBUS.
        unsafe { libc::raise(libc::SIGBUS) };
        println!("sent SIGBUS ignored");
        // SAFETY: inside the live mapping.
        assert_eq!(
            unsafe { std::ptr::read_volatile(m.as_ptr().add(2 * BS)) },
            7
        );
        println!("DONE second miss served");
        std::process::exit(0);
    }
    assert_child_done(
        "a_sent_sigbus_does_not_uninstall_the_fault_handler",
        "sigign",
    );
}

/// A SIGBUS sent by `raise` in a program with the default disposition ends it at once, as it
/// would without ucache. Before, ucache swallowed it and the process died later, at its next
/// miss.
#[test]
fn a_sent_sigbus_with_the_default_action_ends_the_process_at_once() {
    if mode().as_deref() == Some("sigdfl") {
        // As a C program starts (Rust's runtime installs a SIGBUS handler of its own, for
        // stack overflows, which ucache would chain to).
        // SAFETY: plain signal(2).
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        let (_cache, _m) = mapped_after_one_miss();
        // SAFETY: raise(3) with the default disposition: the process ends here.
        unsafe { libc::raise(libc::SIGBUS) };
        println!("survived the signal");
        std::process::exit(0);
    }
    let out = child(
        "a_sent_sigbus_with_the_default_action_ends_the_process_at_once",
        "sigdfl",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{stdout}");
    assert!(stdout.contains("first miss served") && !stdout.contains("survived"));
}

/// With handler threads, a write through an exclusive guard of a clean buffer faults to a
/// handler thread, which cannot tell the holder from any other writer: the pin lifts the
/// protection itself, so the write does not wait on its own pin.
#[test]
fn exclusive_guards_write_with_handler_threads() {
    let store = MemoryStore::new();
    store.insert("t", vec![0u8; 4 * BS]);
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = cache
        .map(
            Arc::new(store.clone()),
            "t",
            MapOptions::new()
                .transparent(true)
                .writable(true)
                .fault_handling(ucache::FaultHandling::HandlerThreads(1)),
        )
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            for k in 0..4u8 {
                let mut g = m.pin_exclusive(1).unwrap();
                g[5] = k + 1;
                drop(g);
                m.msync(0, m.len()).unwrap();
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(common::HANG)
            .expect("a write through the guard waited on its own pin");
    });
    assert_eq!(store.get("t").unwrap()[BS + 5], 4);
}

/// Whether this process is test `name`'s child in `mode` (with a watchdog started); if not,
/// runs that child and asserts that it printed `DONE`.
fn as_child(name: &str, mode_: &str) -> bool {
    if mode().as_deref() == Some(mode_) {
        watchdog(300);
        return true;
    }
    assert_child_done(name, mode_);
    false
}

/// The address range of a mapping is free when `unmap` returns: a program may map something
/// there at once (the LD_PRELOAD shim puts the kernel's mapping in its place). Before, the
/// range was unmapped when the last reference to the mapping went, which an IO thread
/// finishing a readahead job, or an eviction round over an older list of mappings, could
/// still hold: the shim's `MAP_FIXED_NOREPLACE` failed about once in 150 runs of its test,
/// and a program's `MAP_FIXED` mapping made there could have been unmapped under it.
///
/// Run as a child, alone: another test's transparent mapping could take the freed range. The
/// check is that nothing registered with userfaultfd is left in the range (any other thread,
/// the cache's own included, may map something else there once it is free).
#[test]
fn unmap_leaves_the_address_range_free_when_it_returns() {
    if !as_child(
        "unmap_leaves_the_address_range_free_when_it_returns",
        "unmapfree",
    ) {
        return;
    }
    const BUFFERS: usize = 256;
    let store = Arc::new(MemoryStore::new());
    store.insert("t", vec![3; BUFFERS * BS]);
    let cache = Cache::new(CacheOptions::new(32 * BS as u64).io_threads(2)).unwrap();
    for round in 0..300 {
        let m = cache
            .map(store.clone(), "t", MapOptions::new().transparent(true))
            .unwrap();
        let (p, len) = (m.as_ptr() as usize, m.len() as usize);
        assert!(
            userfaultfd_area_within(p, len),
            "the check sees the mapping"
        );
        // Sequential loads, so that readahead jobs run on the IO threads, and a budget of an
        // eighth, so that the evictor runs too.
        for i in (0..(round % BUFFERS + 1) * BS).step_by(BS) {
            // SAFETY: inside the transparent mapping; the load faults into ucache.
            assert_eq!(unsafe { std::ptr::read_volatile((p + i) as *const u8) }, 3);
        }
        m.unmap().unwrap();
        if userfaultfd_area_within(p, len) {
            println!("round {round}: the range is still mapped by ucache");
            return;
        }
    }
    println!("DONE");
}

/// Whether an area of this process that overlaps `[start, start + len)` is registered with
/// userfaultfd for missing pages (`um` among its flags in `/proc/self/smaps`).
fn userfaultfd_area_within(start: usize, len: usize) -> bool {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut overlaps = false;
    for line in smaps.lines() {
        let first = line.split(' ').next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                overlaps = a < start + len && start < b;
                continue;
            }
        }
        if let Some(flags) = line.strip_prefix("VmFlags:") {
            if overlaps && flags.split_whitespace().any(|f| f == "um") {
                return true;
            }
        }
    }
    false
}

/// What the mapping's policy below shares with the test: a round parks in it once armed.
#[derive(Default)]
struct Parking {
    armed: AtomicBool,
    entered: AtomicBool,
    go: AtomicBool,
}

/// CLOCK, whose first choice of victims after arming waits for `go`.
struct ParkingClock(ucache::policy::Clock, Arc<Parking>);

impl ucache::policy::Policy for ParkingClock {
    fn name(&self) -> &str {
        "parking-clock"
    }
    fn attach(&mut self, layout: ucache::policy::Layout) {
        self.0.attach(layout)
    }
    fn choose_eviction_buffers(
        &self,
        b: &ucache::policy::Buffers<'_>,
        want: usize,
        out: &mut Vec<u64>,
    ) {
        if self.1.armed.swap(false, Ordering::SeqCst) {
            self.1.entered.store(true, Ordering::SeqCst);
            while !self.1.go.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        self.0.choose_eviction_buffers(b, want, out)
    }
    fn on_insert(&self, i: u64) {
        self.0.on_insert(i)
    }
    fn on_evict(&self, i: u64) {
        self.0.on_evict(i)
    }
}

/// `unmap` returns only once an eviction round that holds the mapping (here, parked in the
/// mapping's own policy) has let go of it, so the range is gone when it returns. Without the
/// wait, `unmap` returned while the round held the mapping, its range still registered.
#[test]
fn unmap_waits_for_an_eviction_round_that_holds_the_mapping() {
    if !as_child(
        "unmap_waits_for_an_eviction_round_that_holds_the_mapping",
        "unmapround",
    ) {
        return;
    }
    let store = Arc::new(MemoryStore::new());
    store.insert("y", vec![5; 16 * BS]);
    store.insert("x", vec![6; 64 * BS]);
    let cache = Cache::new(
        CacheOptions::new(16 * BS as u64)
            .batch(1)
            .background_eviction(false),
    )
    .unwrap();
    let park = Arc::new(Parking::default());
    let policy = ParkingClock(ucache::policy::Clock::new(), park.clone());
    let y = cache
        .map(
            store.clone(),
            "y",
            MapOptions::new().transparent(true).policy(Box::new(policy)),
        )
        .unwrap();
    let x = cache.map(store, "x", MapOptions::new()).unwrap();
    let (p, len) = (y.as_ptr() as usize, y.len() as usize);
    for i in 0..16 {
        // SAFETY: inside the transparent mapping; the load faults into ucache.
        assert_eq!(
            unsafe { std::ptr::read_volatile((p + i * BS) as *const u8) },
            5
        );
    }
    park.armed.store(true, Ordering::SeqCst);
    let done = AtomicBool::new(false);
    let left = std::thread::scope(|s| {
        // A loader whose eviction round parks in y's policy, holding y.
        s.spawn(|| {
            for i in 0..64 {
                assert_eq!(x.pin_shared(i).unwrap()[0], 6);
            }
        });
        while !park.entered.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let u = s.spawn(|| {
            y.unmap().unwrap();
            let left = userfaultfd_area_within(p, len);
            done.store(true, Ordering::SeqCst);
            left
        });
        // Room for an early return to show (not a bound on anything: with the wait, unmap
        // returns after `go` whenever that comes).
        for _ in 0..2000 {
            if done.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        park.go.store(true, Ordering::SeqCst);
        u.join().unwrap()
    });
    if left {
        println!("unmap returned with the range still mapped by ucache");
        return;
    }
    println!("DONE");
}
