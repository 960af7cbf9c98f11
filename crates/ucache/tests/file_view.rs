//! File views ([`MapOptions::file_view`]): the file mapped by the kernel, its pages revealed
//! and hidden by ucache. Every byte read is checked against the file; the tests that end a
//! process run it as a child (this same test binary, re-entered through an environment
//! variable) and check how it ended.

use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Output;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ucache::store::{FileStore, MemoryStore, Store, UringOptions, UringStore};
use ucache::{Cache, CacheOptions, Error, FaultHandling, MapOptions};

mod common;
use common::{offset_file, within};

const BS: usize = 64 << 10;
const CHILD: &str = "UCACHE_FILE_VIEW_CHILD";

fn view(cache: &Cache, store: Arc<dyn Store>, path: &std::path::Path) -> ucache::Mapping {
    let o = MapOptions::new().buffer_size(BS).file_view(true);
    cache.map(store, path.to_str().unwrap(), o).unwrap()
}

fn word(m: &ucache::Mapping, k: usize) -> u64 {
    // SAFETY: k * 8 lies inside the live mapping; a view is plain memory to its loads.
    unsafe { std::ptr::read_volatile((m.as_ptr() as *const u64).add(k)) }
}

/// Areas of this process's address space inside `[start, start + len)`: the fewer of two
/// reads of `/proc/self/maps` in a row, since one read is not atomic and may see an area
/// split and merged at once while other threads change protections.
fn areas_within(start: usize, len: usize) -> usize {
    let count = || {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (a, _) = l.split_once('-')?;
                usize::from_str_radix(a, 16).ok()
            })
            .filter(|&a| a >= start && a < start + len)
            .count()
    };
    count().min(count())
}

/// Four threads scan a view of 16× the budget from different places, twice, checking every
/// word; eviction runs all along. The budget holds, the areas of the mapping stay within
/// what its resident runs allow, and nothing was copied into ucache's own memory.
#[test]
fn scanners_read_every_byte_of_a_view_under_eviction() {
    for store in [
        Arc::new(FileStore::new()) as Arc<dyn Store>,
        Arc::new(UringStore::new(UringOptions::default()).unwrap()),
    ] {
        within("scanners over a view", move || {
            let dir = tempfile::tempdir().unwrap();
            let budget = 32 * BS as u64;
            let len = 16 * budget;
            let path = offset_file(dir.path(), len);
            let cache = Cache::new(CacheOptions::new(budget).batch(4)).unwrap();
            let m = Arc::new(view(&cache, store, &path));
            assert!(m.is_transparent());
            let words = (len / 8) as usize;
            let max_areas = AtomicU64::new(0);
            std::thread::scope(|s| {
                for t in 0..4 {
                    let (m, max_areas) = (m.clone(), &max_areas);
                    s.spawn(move || {
                        for round in 0..2 {
                            let start = t * words / 4;
                            for j in 0..words {
                                let k = (start + j) % words;
                                assert_eq!(word(&m, k), k as u64 * 8, "thread {t} round {round}");
                                if j % (words / 8) == 0 {
                                    let a = areas_within(m.as_ptr() as usize, len as usize);
                                    max_areas.fetch_max(a as u64, Ordering::Relaxed);
                                }
                            }
                        }
                    });
                }
            });
            let st = cache.stats();
            assert!(st.evictions > 0, "{st:?}");
            assert!(cache.used() <= budget, "{} > {budget}", cache.used());
            assert_eq!(st.installs, 0, "a view copies nothing: {st:?}");
            // Each resident run is at most two areas (itself and the hidden gap after it), and
            // the resident buffers are the budget's and, for a moment, an eviction batch more.
            // Twice that again: the bound is there to catch areas that pile up without end
            // (a comb of pieces), not to count them exactly.
            let bound = 4 * (budget / BS as u64 + 4) + 1;
            let seen = max_areas.load(Ordering::Relaxed);
            assert!(seen <= bound, "{seen} areas, at most {bound} expected");
        });
    }
}

/// Pins, `ensure_cached`, `prefetch` and `evict` work on a view as on any transparent
/// mapping, and an evicted buffer is hidden again: the next load faults into ucache.
#[test]
fn explicit_primitives_work_on_a_view() {
    within("primitives on a view", || {
        let dir = tempfile::tempdir().unwrap();
        let path = offset_file(dir.path(), 64 * BS as u64);
        // Nothing is evicted or read ahead behind the test's back: at most 8 of the 16
        // buffers the budget holds are ever loaded.
        let cache = Cache::new(
            CacheOptions::new(16 * BS as u64)
                .batch(2)
                .background_eviction(false),
        )
        .unwrap();
        let o = MapOptions::new()
            .buffer_size(BS)
            .file_view(true)
            .readahead(false);
        let m = cache
            .map(Arc::new(FileStore::new()), path.to_str().unwrap(), o)
            .unwrap();
        for i in [5u64, 40, 0, 63] {
            let g = m.pin_shared(i).unwrap();
            let w = u64::from_le_bytes(g[8..16].try_into().unwrap());
            assert_eq!(w, i * BS as u64 + 8);
        }
        m.ensure_cached(10 * BS as u64, 4 * BS as u64).unwrap();
        for i in 10..14 {
            assert_eq!(common::phase(&m, i), ucache::Phase::Cached);
        }
        let faults = cache.stats().faults;
        assert_eq!(
            word(&m, 11 * BS / 8),
            11 * BS as u64,
            "a cached buffer's load"
        );
        assert_eq!(
            cache.stats().faults,
            faults,
            "a resident buffer is read without a fault"
        );
        m.evict(10 * BS as u64, 4 * BS as u64).unwrap();
        assert_eq!(common::phase(&m, 11), ucache::Phase::Evicted);
        assert_eq!(word(&m, 11 * BS / 8), 11 * BS as u64);
        assert!(
            cache.stats().faults > faults,
            "an evicted buffer is hidden again"
        );
        m.prefetch(30 * BS as u64, 2 * BS as u64).unwrap();
        assert_eq!(word(&m, 31 * BS / 8 + 1), 31 * BS as u64 + 8);
    });
}

/// The bytes are the file's: a write through the file's descriptor shows at once, in a
/// buffer that is resident and in one that is not.
#[test]
fn writes_to_the_file_show_through_a_view() {
    let dir = tempfile::tempdir().unwrap();
    let path = offset_file(dir.path(), 8 * BS as u64);
    let cache = Cache::new(CacheOptions::new(16 * BS as u64).batch(2)).unwrap();
    let m = view(&cache, Arc::new(FileStore::new()), &path);
    assert_eq!(word(&m, 0), 0);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_at(&7u64.to_le_bytes(), 0).unwrap();
    f.write_at(&9u64.to_le_bytes(), 5 * BS as u64).unwrap();
    assert_eq!(word(&m, 0), 7, "resident");
    assert_eq!(word(&m, 5 * BS / 8), 9, "loaded after the write");
}

/// What a view cannot be is refused before anything is mapped, with the reason.
#[test]
fn a_view_is_refused_where_it_cannot_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = offset_file(dir.path(), 8 * BS as u64);
    let name = path.to_str().unwrap();
    let cache = Cache::new(CacheOptions::new(16 * BS as u64).batch(2)).unwrap();
    let memory = MemoryStore::new();
    memory.insert("t", vec![0; 8 * BS]);
    let file = |o: MapOptions| cache.map(Arc::new(FileStore::new()), name, o);
    let view = || MapOptions::new().buffer_size(BS).file_view(true);
    let refused = [
        ("writable", file(view().writable(true))),
        ("4 KiB buffers", file(MapOptions::new().file_view(true))),
        (
            "handler threads",
            file(view().fault_handling(FaultHandling::HandlerThreads(1))),
        ),
        ("not transparent", file(view().transparent(false))),
        ("memory store", cache.map(Arc::new(memory), "t", view())),
    ];
    for (what, r) in refused {
        assert!(
            matches!(r, Err(Error::BadArgument(_))),
            "{what}: {:?}",
            r.err()
        );
    }
    assert_eq!(cache.used(), 0);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8 * BS as u64);
}

fn child(name: &str, mode: &str) -> Output {
    common::rerun_as_child(CHILD, name, mode, &[])
}

fn mode() -> Option<String> {
    std::env::var(CHILD).ok()
}

/// A view of a fresh 8-buffer file in `dir`.
fn child_view(dir: &std::path::Path) -> (Cache, ucache::Mapping, std::path::PathBuf) {
    let path = offset_file(dir, 8 * BS as u64);
    let cache = Cache::new(CacheOptions::new(16 * BS as u64).batch(2)).unwrap();
    let m = view(&cache, Arc::new(FileStore::new()), &path);
    (cache, m, path)
}

/// A store into a view ends the process with `SIGSEGV`, as a store into a read-only `mmap`
/// does, whether or not the buffer was resident.
#[test]
fn a_store_into_a_view_gets_sigsegv() {
    if let Some(m) = mode() {
        let dir = tempfile::tempdir().unwrap();
        let (_cache, v, _) = child_view(dir.path());
        let k = if m == "resident" {
            assert_eq!(word(&v, 0), 0);
            0
        } else {
            3 * BS / 8
        };
        println!("about to write");
        // SAFETY: deliberately stores into a read-only view; the process must die of SIGSEGV.
        unsafe { std::ptr::write_volatile((v.as_ptr() as *mut u64).add(k), 1) };
        println!("survived");
        std::process::exit(0);
    }
    for m in ["resident", "hidden"] {
        let out = child("a_store_into_a_view_gets_sigsegv", m);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("about to write") && !stdout.contains("survived"),
            "{m}: {stdout}"
        );
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSEGV),
            "{m}: {:?}",
            out.status
        );
    }
}

/// A page past the end of a file truncated under its view gets the kernel's `SIGBUS`.
#[test]
fn a_page_past_the_end_of_a_truncated_file_gets_sigbus() {
    if mode().as_deref() == Some("truncated") {
        let dir = tempfile::tempdir().unwrap();
        let (_cache, v, path) = child_view(dir.path());
        assert_eq!(word(&v, BS / 8), BS as u64);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(BS as u64)
            .unwrap();
        assert_eq!(word(&v, 0), 0, "inside the file");
        println!("about to read past the end");
        let _ = word(&v, 6 * BS / 8);
        println!("survived");
        std::process::exit(0);
    }
    let out = child(
        "a_page_past_the_end_of_a_truncated_file_gets_sigbus",
        "truncated",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("about to read past the end") && !stdout.contains("survived"),
        "{stdout}"
    );
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{:?}", out.status);
}

static HANDLED: AtomicU64 = AtomicU64::new(0);

extern "C" fn own_handler(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t; mprotect(2) is async-signal-safe.
    unsafe {
        let page = ((*info).si_addr() as usize) & !4095;
        libc::mprotect(page as *mut libc::c_void, 4096, libc::PROT_READ);
    }
    HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// The program's own `SIGSEGV` handler, installed before the first view, still gets the
/// faults that are not ucache's, and views work beside it.
#[test]
fn a_programs_sigsegv_handler_still_gets_its_own_faults() {
    if mode().as_deref() == Some("own") {
        // SAFETY: installs a handler that only fixes protections of its own page.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                own_handler;
            sa.sa_sigaction = h as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(libc::SIGSEGV, &sa, std::ptr::null_mut());
        }
        let dir = tempfile::tempdir().unwrap();
        let (_cache, v, _) = child_view(dir.path());
        // SAFETY: an anonymous page of our own, made inaccessible on purpose.
        let own = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        } as *const u8;
        assert_eq!(word(&v, 2 * BS / 8), 2 * BS as u64);
        // SAFETY: the handler makes the page readable; it reads as zero.
        assert_eq!(unsafe { std::ptr::read_volatile(own) }, 0);
        assert_eq!(word(&v, 5 * BS / 8), 5 * BS as u64);
        println!("handled {}", HANDLED.load(Ordering::SeqCst));
        std::process::exit(0);
    }
    let out = child(
        "a_programs_sigsegv_handler_still_gets_its_own_faults",
        "own",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}: {stdout}", out.status);
    assert!(stdout.contains("handled 1"), "{stdout}");
}
