//! Transparent mappings and the rest of the process: signals, errors, kernel-mode accesses, C
//! code and durability. Tests that end a process run it as a child (this same test binary,
//! re-entered through an environment variable) and check how it ended.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ucache::store::{FaultStore, FileStore, MemoryStore};
use ucache::{Cache, CacheOptions, FaultAction, FaultHandling, MapOptions};

mod common;

const BS: usize = 4096;
const CHILD: &str = "UCACHE_TRANSPARENT_CHILD";

/// Runs test `name` of this binary as a child with `CHILD=mode`.
fn child(name: &str, mode: &str, extra: &[(&str, &str)]) -> Output {
    common::rerun_as_child(CHILD, name, mode, extra)
}

fn mode() -> Option<String> {
    std::env::var(CHILD).ok()
}

fn memory_mapping(cache: &Cache, store: Arc<dyn ucache::store::Store>) -> ucache::Mapping {
    cache
        .map(store, "t", MapOptions::new().transparent(true))
        .unwrap()
}

fn filled_store(n: usize) -> MemoryStore {
    let s = MemoryStore::new();
    s.insert("t", (0..n * BS).map(|k| (k % 251) as u8).collect());
    s
}

fn read(p: *const u8) -> u8 {
    // SAFETY: callers pass addresses inside a live mapping (or deliberately bad ones, in a
    // child that is expected to die or be rescued by its handler).
    unsafe { std::ptr::read_volatile(p) }
}

#[test]
fn io_error_raises_sigbus_like_mmap() {
    if mode().as_deref() == Some("ioerror") {
        let store = FaultStore::new(Arc::new(filled_store(4)));
        store.config().fail_reads.store(true, Ordering::Relaxed);
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
        let m = memory_mapping(&cache, Arc::new(store));
        println!("about to read");
        read(m.as_ptr());
        println!("survived");
        std::process::exit(0);
    }
    let out = child("io_error_raises_sigbus_like_mmap", "ioerror", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("about to read") && !stdout.contains("survived"),
        "{stdout}"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{:?}", out.status);
}

#[test]
fn write_to_read_only_mapping_raises_sigbus() {
    if mode().as_deref() == Some("readonly") {
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
        let m = memory_mapping(&cache, Arc::new(filled_store(4)));
        assert_eq!(read(m.as_ptr()), 0);
        println!("read ok");
        // SAFETY: deliberately writes a read-only mapping; the process must die of SIGBUS.
        unsafe { std::ptr::write_volatile(m.as_ptr() as *mut u8, 1) };
        println!("survived");
        std::process::exit(0);
    }
    let out = child("write_to_read_only_mapping_raises_sigbus", "readonly", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("read ok") && !stdout.contains("survived"),
        "{stdout}"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGBUS));
}

#[test]
fn error_hook_can_retry_until_the_store_recovers() {
    let store = FaultStore::new(Arc::new(filled_store(4)));
    let config = store.config().clone();
    config.fail_reads.store(true, Ordering::Relaxed);
    let calls = Arc::new(AtomicU64::new(0));
    let (c2, cfg2) = (calls.clone(), config.clone());
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = cache
        .map(
            Arc::new(store),
            "t",
            MapOptions::new()
                .transparent(true)
                .on_fault_error(Arc::new(move |_addr, e| {
                    assert!(matches!(e, ucache::Error::Io { .. }), "{e}");
                    if c2.fetch_add(1, Ordering::Relaxed) == 2 {
                        cfg2.fail_reads.store(false, Ordering::Relaxed);
                    }
                    FaultAction::Retry
                })),
        )
        .unwrap();
    // SAFETY: inside the mapping.
    assert_eq!(
        read(unsafe { m.as_ptr().add(BS + 7) }),
        ((BS + 7) % 251) as u8
    );
    assert_eq!(calls.load(Ordering::Relaxed), 3);
}

/// Bytes of virtual memory the process has now (`VmSize`).
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

fn set_address_space_limit(bytes: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut r), 0);
        r.rlim_cur = bytes;
        assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &r), 0);
    }
}

/// A batched load of a transparent mapping that cannot get staging memory (here: an
/// address-space limit reached right after the mapping was made) fails with a typed error and
/// gives every claimed buffer back: evicted, its budget returned, loadable once memory is
/// there again. Before, the buffers stayed `Loading` and every later pin and `unmap` hung.
#[test]
fn batched_load_without_staging_memory_gives_its_buffers_back() {
    if mode().as_deref() == Some("nostaging") {
        const BIG: usize = 2 << 20;
        let s = MemoryStore::new();
        s.insert("t", (0..16 * BIG).map(|k| (k % 251) as u8).collect());
        let cache = Cache::new(CacheOptions::new(64 << 20).background_eviction(false)).unwrap();
        let m = cache
            .map(
                Arc::new(s),
                "t",
                MapOptions::new().transparent(true).buffer_size(BIG),
            )
            .unwrap();
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // This thread has no staging area yet; its first one needs 16 MiB.
                    let warm = vec![1u8; 4096];
                    set_address_space_limit(vm_size() + (4 << 20));
                    let r = m.ensure_cached(0, m.len());
                    set_address_space_limit(libc::RLIM_INFINITY);
                    drop(warm);
                    println!("ensure_cached: {r:?}");
                    if !matches!(r, Err(ucache::Error::Os { .. })) {
                        std::process::exit(2);
                    }
                })
                .join()
                .unwrap();
        });
        // Checked without panicking: unwinding would drop the mapping, whose unmap waits for
        // buffers stuck in `Loading` forever.
        let stuck: Vec<u64> = (0..m.buffers())
            .filter(|&i| m.state(i).unwrap().phase() != ucache::Phase::Evicted)
            .collect();
        if !stuck.is_empty() || cache.used() != 0 {
            println!("stuck {stuck:?}, {} bytes of budget kept", cache.used());
            std::process::exit(1);
        }
        m.ensure_cached(0, m.len()).unwrap();
        // SAFETY: inside the mapping, now cached.
        assert_eq!(
            read(unsafe { m.as_ptr().add(5 * BIG + 3) }),
            ((5 * BIG + 3) % 251) as u8
        );
        m.unmap().unwrap();
        println!("settled");
        std::process::exit(0);
    }
    let out = child(
        "batched_load_without_staging_memory_gives_its_buffers_back",
        "nostaging",
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("settled"),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

extern "C" fn exit_42(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) }
}

fn install(sig: libc::c_int, f: extern "C" fn(libc::c_int)) {
    // SAFETY: a plain handler installation with a zeroed sigaction.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = f as usize;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

#[test]
fn application_sigbus_handler_is_chained() {
    if mode().as_deref() == Some("chain") {
        install(libc::SIGBUS, exit_42);
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
        let m = memory_mapping(&cache, Arc::new(filled_store(4)));
        assert_eq!(read(m.as_ptr()), 0, "ucache still serves its own faults");
        // A genuine SIGBUS outside ucache: a file mapping past the end of its (empty) file.
        let f = tempfile::tempfile().unwrap();
        // SAFETY: maps one page of an empty file; touching it raises SIGBUS.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        read(p as *const u8);
        std::process::exit(0);
    }
    let out = child("application_sigbus_handler_is_chained", "chain", &[]);
    assert_eq!(out.status.code(), Some(42), "{out:?}");
}

#[test]
fn application_sigsegv_handler_still_gets_its_faults() {
    if mode().as_deref() == Some("segv") {
        install(libc::SIGSEGV, exit_42);
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
        let m = memory_mapping(&cache, Arc::new(filled_store(4)));
        assert_eq!(read(m.as_ptr()), 0);
        read(16 as *const u8);
        std::process::exit(0);
    }
    let out = child(
        "application_sigsegv_handler_still_gets_its_faults",
        "segv",
        &[],
    );
    assert_eq!(out.status.code(), Some(42), "{out:?}");
}

#[test]
fn kernel_mode_access_to_a_missing_buffer_is_efault_until_cached() {
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = memory_mapping(&cache, Arc::new(filled_store(4)));
    let mut fds = [0; 2];
    // SAFETY: pipe(2) into a two-element array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: write(2) from inside the mapping; the kernel reports EFAULT for absent pages.
    let r = unsafe { libc::write(fds[1], m.as_ptr() as *const libc::c_void, 64) };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EFAULT)
    );
    // The documented remedy: make the range resident first.
    m.ensure_cached(0, 64).unwrap();
    // SAFETY: as above; the buffer is resident now.
    let r = unsafe { libc::write(fds[1], m.as_ptr() as *const libc::c_void, 64) };
    assert_eq!(r, 64);
    let mut back = [0u8; 64];
    // SAFETY: read(2) into a local array.
    assert_eq!(
        unsafe { libc::read(fds[0], back.as_mut_ptr() as *mut libc::c_void, 64) },
        64
    );
    assert!(back.iter().enumerate().all(|(k, &b)| b == (k % 251) as u8));
    // SAFETY: closing our own descriptors.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
}

#[test]
fn handler_threads_serve_kernel_mode_accesses() {
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
    let m = cache
        .map(
            Arc::new(filled_store(4)),
            "t",
            MapOptions::new()
                .transparent(true)
                .fault_handling(FaultHandling::HandlerThreads(1)),
        )
        .unwrap();
    let f = tempfile::tempfile().unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    // SAFETY: write(2) straight from a buffer that is not resident: the kernel's own access
    // faults, blocks, and is served by the handler thread.
    let r = unsafe { libc::write(fd, m.as_ptr().add(BS) as *const libc::c_void, 2 * BS) };
    assert_eq!(r, 2 * BS as isize);
    let mut back = vec![0u8; 2 * BS];
    // SAFETY: pread(2) into a local buffer.
    let n = unsafe { libc::pread(fd, back.as_mut_ptr() as *mut libc::c_void, 2 * BS, 0) };
    assert_eq!(n, 2 * BS as isize);
    assert!(back
        .iter()
        .enumerate()
        .all(|(k, &b)| b == ((k + BS) % 251) as u8));
    assert_eq!(read(m.as_ptr()), 0, "user-mode faults are served too");
}

#[test]
fn handler_threads_deliver_sigbus_on_io_error() {
    if let Some(m) = mode().filter(|m| m.starts_with("thread-ioerror")) {
        let store = FaultStore::new(Arc::new(filled_store(4)));
        store.config().fail_reads.store(true, Ordering::Relaxed);
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap();
        // With a mapping in the default mode too, ucache's SIGBUS handler is installed and
        // sees the handler thread's signal first: it must take it for the fault it is.
        let _installs_the_handler = (m == "thread-ioerror-installed")
            .then(|| memory_mapping(&cache, Arc::new(filled_store(4))));
        let m = cache
            .map(
                Arc::new(store),
                "t",
                MapOptions::new()
                    .transparent(true)
                    .fault_handling(FaultHandling::HandlerThreads(1)),
            )
            .unwrap();
        println!("about to read");
        read(m.as_ptr());
        println!("survived");
        std::process::exit(0);
    }
    for mode in ["thread-ioerror", "thread-ioerror-installed"] {
        let out = child("handler_threads_deliver_sigbus_on_io_error", mode, &[]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("about to read") && !stdout.contains("survived"),
            "{mode}: {stdout}"
        );
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGBUS),
            "{mode}: {:?}",
            out.status
        );
    }
}

const C_SOURCE: &str = r#"
#include <stddef.h>
#include <stdint.h>
/* Unmodified C: sums a buffer and then overwrites it, through a plain pointer. */
uint64_t sum_and_fill(uint8_t *p, size_t len, uint8_t v) {
    uint64_t s = 0;
    for (size_t i = 0; i < len; i++) s += p[i];
    for (size_t i = 0; i < len; i++) p[i] = v;
    return s;
}
"#;

#[test]
fn c_code_reads_and_writes_a_transparent_mapping() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let src = dir.path().join("scan.c");
    let lib = dir.path().join("libscan.so");
    std::fs::write(&src, C_SOURCE).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(cc)
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is needed for this test");
    assert!(st.success());
    let store = filled_store(64);
    let (cache, m) = common::writable_transparent(&store, 8, 2);
    let f = load_sum_and_fill(&lib);
    let len = m.len() as usize;
    let want: u64 = (0..len).map(|k| (k % 251) as u64).sum();
    // SAFETY: the function reads and writes exactly `len` bytes of the mapping.
    assert_eq!(unsafe { f(m.as_mut_ptr(), len, 9) }, want);
    m.msync(0, m.len()).unwrap();
    assert!(store.get("t").unwrap().iter().all(|&b| b == 9));
    assert!(
        cache.stats().evictions > 0,
        "the C scan ran out of memory and evicted"
    );
}

type SumAndFill = unsafe extern "C" fn(*mut u8, usize, u8) -> u64;

fn load_sum_and_fill(lib: &Path) -> SumAndFill {
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: dlopen/dlsym of the library we just built, which exports this symbol with this
    // signature; the handle is leaked so the function stays loaded.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW);
        assert!(!h.is_null(), "dlopen failed");
        let s = libc::dlsym(h, c"sum_and_fill".as_ptr());
        assert!(!s.is_null());
        std::mem::transmute::<*mut libc::c_void, SumAndFill>(s)
    }
}

#[test]
fn msynced_plain_stores_survive_sigkill() {
    const N: u64 = 256;
    if let Some(m) = mode() {
        if m == "durable" {
            let path = std::env::var("UCACHE_DURABLE_PATH").unwrap();
            let cache = Cache::new(CacheOptions::new(32 * BS as u64).batch(4)).unwrap();
            let map = cache
                .map(
                    Arc::new(FileStore::direct()),
                    &path,
                    MapOptions::new()
                        .writable(true)
                        .create(true)
                        .transparent(true)
                        .len(N * BS as u64),
                )
                .unwrap();
            // SAFETY: plain stores into the whole writable mapping.
            unsafe { std::ptr::write_bytes(map.as_mut_ptr(), 0x5A, (N as usize) * BS) };
            map.msync(0, map.len()).unwrap();
            println!("SYNCED");
            // SAFETY: as above; never synced, so the kill may or may not keep them.
            unsafe { std::ptr::write_bytes(map.as_mut_ptr(), 0x77, 8 * BS) };
            // SAFETY: the test kills itself the hard way, with no chance to write back.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("data");
    let out = child(
        "msynced_plain_stores_survive_sigkill",
        "durable",
        &[("UCACHE_DURABLE_PATH", path.to_str().unwrap())],
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("SYNCED"),
        "{out:?}"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGKILL));
    let data = std::fs::read(&path).unwrap();
    assert_eq!(data.len(), N as usize * BS);
    for (i, b) in data.chunks(BS).enumerate() {
        let first = b[0];
        assert!(
            first == 0x5A || (i < 8 && first == 0x77),
            "buffer {i}: {first}"
        );
        assert!(b.iter().all(|&x| x == first), "buffer {i} torn");
    }
}
