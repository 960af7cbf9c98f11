//! A forked child never sees zeros or stale bytes through its parent's mappings in silence:
//! a touch of a transparent mapping dies of `SIGBUS` with a message naming it, every call on
//! an explicit mapping fails with `Error::Forked`, the child's drops write nothing back, and a
//! cache the child makes itself works, transparent mappings included. Before, a child read zeros from a buffer that was not
//! resident at the fork.
//!
//! Each case runs in a child of the test binary (re-entered through an environment variable)
//! that maps, forks, and reports how its own child ended, so the harness never forks.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};
use std::sync::Arc;

use ucache::store::FileStore;
use ucache::{Cache, CacheOptions, Error, FaultHandling, MapOptions};

const BS: usize = 4096;
const BUFFERS: usize = 64;
const CHILD: &str = "UCACHE_FORK_CHILD";

/// Runs test `name` again in a child process, as the child, and returns its stdout and
/// stderr once it has exited successfully.
fn child(name: &str) -> (String, String) {
    let out: Output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{:?} (signal {:?})\n{stdout}\n{stderr}",
        out.status,
        out.status.signal()
    );
    (stdout, stderr)
}

fn is_child(name: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|v| v == name)
}

/// A file of `BUFFERS` buffers, word `k` of buffer `i` holding `i * 1000 + k + 1` (never 0).
fn data_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("data");
    let words: Vec<u8> = (0..BUFFERS * BS / 8)
        .flat_map(|w| ((w / (BS / 8)) as u64 * 1000 + (w % (BS / 8)) as u64 + 1).to_le_bytes())
        .collect();
    std::fs::write(&path, words).unwrap();
    let p = path.to_str().unwrap().to_string();
    (dir, p)
}

/// A cache of 8 buffers evicting one at a time, and a mapping of `path` in it.
fn small_cache(path: &str, options: MapOptions) -> ucache::Result<(Cache, ucache::Mapping)> {
    let cache = Cache::new(CacheOptions::new(8 * BS as u64).batch(1))?;
    let m = cache.map(Arc::new(FileStore::new()), path, options)?;
    Ok((cache, m))
}

fn word(p: *const u8, buffer: usize) -> u64 {
    // SAFETY: callers pass a live mapping's base; in a forked child the read is expected to
    // raise SIGBUS.
    unsafe { std::ptr::read_volatile((p as *const u64).add(buffer * BS / 8)) }
}

/// Forks; the child runs `f` and exits with what it returns. Returns the child's status.
fn in_forked_child(f: impl FnOnce() -> i32) -> libc::c_int {
    // SAFETY: fork(2); the child runs `f` and leaves with _exit, never returning here.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = f();
        // SAFETY: ends the child without running the parent's exit handlers.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

/// Prints how a forked child ended, for the test to read.
fn report(status: libc::c_int) {
    if libc::WIFSIGNALED(status) {
        println!("CHILD SIGNAL {}", libc::WTERMSIG(status));
    } else {
        println!("CHILD EXIT {}", libc::WEXITSTATUS(status));
    }
}

/// A transparent mapping (faults served by SIGBUS, or by handler threads) of a file larger
/// than the budget: the child dies of SIGBUS at its first touch, resident buffer or not,
/// with a message; the parent goes on reading the right bytes.
#[test]
fn a_forked_child_touching_a_transparent_mapping_dies_of_sigbus_with_a_message() {
    const NAME: &str =
        "a_forked_child_touching_a_transparent_mapping_dies_of_sigbus_with_a_message";
    if is_child(NAME) {
        let (_dir, path) = data_file();
        for (mode, handling) in [
            ("sigbus", FaultHandling::OnFaultingThread),
            ("threads", FaultHandling::HandlerThreads(1)),
        ] {
            let options = MapOptions::new().transparent(true).fault_handling(handling);
            let (_cache, m) = small_cache(&path, options).unwrap();
            let p = m.as_ptr();
            assert_eq!(word(p, 0), 1, "resident before the fork");
            for buffer in [0usize, 40] {
                print!("{mode} buffer {buffer}: ");
                report(in_forked_child(|| {
                    let w = word(p, buffer);
                    println!("child read {w}");
                    0
                }));
            }
            assert_eq!(word(p, 40), 40_001, "the parent is served as before");
            m.unmap().unwrap();
        }
        std::process::exit(0);
    }
    let (stdout, stderr) = child(NAME);
    for mode in ["sigbus", "threads"] {
        for buffer in [0, 40] {
            assert!(
                stdout.contains(&format!("{mode} buffer {buffer}: CHILD SIGNAL 7")),
                "{mode}, buffer {buffer}: {stdout}"
            );
        }
    }
    assert!(!stdout.contains("child read"), "{stdout}");
    assert_eq!(
        stderr
            .matches("a forked child touched a transparent mapping of its parent")
            .count(),
        4,
        "{stderr}"
    );
}

/// Explicit mappings in a forked child: every call is refused with `Forked`, dropping the
/// mapping writes nothing back (the parent's dirty buffer is still not in the file after the
/// child ends), and a cache the child makes itself works.
#[test]
fn a_forked_child_gets_forked_errors_from_explicit_mappings_and_can_make_its_own_cache() {
    const NAME: &str =
        "a_forked_child_gets_forked_errors_from_explicit_mappings_and_can_make_its_own_cache";
    if is_child(NAME) {
        let (_dir, path) = data_file();
        let (cache, m) = small_cache(&path, MapOptions::new().writable(true)).unwrap();
        m.pin_exclusive(3).unwrap()[..8].copy_from_slice(&7u64.to_le_bytes());
        let status = in_forked_child(|| {
            let refused = [
                m.pin_shared(3).map(drop),
                m.pin_shared(50).map(drop),
                m.pin_exclusive(3).map(drop),
                m.read_optimistic(3, |v| v.read_u64(0)).map(drop),
                m.ensure_cached(0, BS as u64),
                m.prefetch(0, BS as u64),
                m.evict(0, m.len()),
                m.writeback(0, m.len()),
                m.msync(0, m.len()),
                cache
                    .map(Arc::new(FileStore::new()), &path, MapOptions::new())
                    .map(drop),
            ];
            for (k, r) in refused.iter().enumerate() {
                if !matches!(r, Err(Error::Forked)) {
                    println!("call {k}: {r:?}");
                    return 1;
                }
            }
            // SAFETY: in the forked child, the parent's `m` is the child's own copy, which the
            // child takes over here and the parent's process never sees.
            let mine_copy = unsafe { std::ptr::read(&m) };
            let m2 = match mine_copy.unmap() {
                Err(e) if matches!(e.error, Error::Forked) => e.mapping,
                r => {
                    println!("unmap: {r:?}");
                    return 2;
                }
            };
            drop(m2); // must write nothing
                      // A cache of the child's own is served.
            let (_own, mine) = small_cache(&path, MapOptions::new()).unwrap();
            let w = u64::from_le_bytes(mine.pin_shared(50).unwrap()[..8].try_into().unwrap());
            if w != 50_001 {
                println!("own cache read {w}");
                return 3;
            }
            mine.unmap().unwrap();
            0
        });
        report(status);
        let on_disk = std::fs::read(&path).unwrap();
        println!(
            "FILE AFTER CHILD {}",
            u64::from_le_bytes(on_disk[3 * BS..3 * BS + 8].try_into().unwrap())
        );
        m.msync(0, m.len()).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        println!(
            "FILE AFTER MSYNC {}",
            u64::from_le_bytes(on_disk[3 * BS..3 * BS + 8].try_into().unwrap())
        );
        m.unmap().unwrap();
        std::process::exit(0);
    }
    let (stdout, _) = child(NAME);
    assert!(stdout.contains("CHILD EXIT 0"), "{stdout}");
    assert!(
        stdout.contains("FILE AFTER CHILD 3001"),
        "the child wrote back: {stdout}"
    );
    assert!(stdout.contains("FILE AFTER MSYNC 7"), "{stdout}");
}

/// In a forked child, a transparent mapping of a cache the child made itself: every load and
/// store is served (misses, and evictions, its budget being an eighth of the file), its stores
/// reach the file at `msync`, in both fault-handling modes. Only the parent's regions are
/// fenced: a touch of the parent's mapping still dies with the message afterwards, and a
/// grandchild touching the child's mapping dies too. Before, the child's own mapping with
/// faults served on the faulting thread died at its first miss, taken for the parent's.
#[test]
fn a_forked_child_serves_its_own_transparent_mapping_and_still_dies_on_its_parents() {
    const NAME: &str =
        "a_forked_child_serves_its_own_transparent_mapping_and_still_dies_on_its_parents";
    if is_child(NAME) {
        let (_dir, path) = data_file();
        let (_cache, m) = small_cache(&path, MapOptions::new().transparent(true)).unwrap();
        let parent = m.as_ptr();
        assert_eq!(word(parent, 0), 1, "resident before the fork");
        let status = in_forked_child(|| {
            for (mode, handling) in [
                ("sigbus", FaultHandling::OnFaultingThread),
                ("threads", FaultHandling::HandlerThreads(1)),
            ] {
                if let Err(e) = serve_own_mapping(handling) {
                    println!("{mode}: {e}");
                    return 1;
                }
                println!("{mode}: own mapping served");
            }
            let w = word(parent, 0);
            println!("child read the parent's {w}");
            0
        });
        print!("first child: ");
        report(status);
        assert_eq!(word(parent, 40), 40_001, "the parent is served as before");
        m.unmap().unwrap();
        std::process::exit(0);
    }
    let (stdout, stderr) = child(NAME);
    for mode in ["sigbus", "threads"] {
        assert!(
            stdout.contains(&format!("{mode}: own mapping served")),
            "{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains(&format!("{mode} grandchild: CHILD SIGNAL 7")),
            "{stdout}\n{stderr}"
        );
    }
    assert!(
        stdout.contains("first child: CHILD SIGNAL 7"),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("child read the parent's"), "{stdout}");
    assert_eq!(
        stderr
            .matches("a forked child touched a transparent mapping of its parent")
            .count(),
        3,
        "two grandchildren and the child: {stderr}"
    );
}

/// In a forked child: makes a cache of 8 buffers and a writable transparent mapping (fault
/// handling `handling`) of a fresh 64-buffer file; reads every word of every buffer through
/// plain loads, twice (misses and evictions), stores a word into every fifth buffer, reads
/// the stores back, `msync`s and checks the file; forks a grandchild that touches the mapping
/// and must die of `SIGBUS`. The error names what went wrong.
fn serve_own_mapping(handling: FaultHandling) -> Result<(), String> {
    let (_dir, path) = data_file();
    let options = MapOptions::new()
        .transparent(true)
        .writable(true)
        .fault_handling(handling);
    let (cache, m) = small_cache(&path, options).map_err(|e| e.to_string())?;
    let p = m.as_mut_ptr() as *mut u64;
    let expected = |w: usize| (w / (BS / 8)) as u64 * 1000 + (w % (BS / 8)) as u64 + 1;
    let stored = |buffer: usize| 1_000_000 + buffer as u64;
    let written = |buffer: usize| buffer.is_multiple_of(5);
    for pass in 0..2 {
        for w in 0..BUFFERS * BS / 8 {
            // SAFETY: w is within the mapping of BUFFERS buffers.
            let got = unsafe { std::ptr::read_volatile(p.add(w)) };
            let buffer = w / (BS / 8);
            let want = if pass == 1 && w % (BS / 8) == 0 && written(buffer) {
                stored(buffer)
            } else {
                expected(w)
            };
            if got != want {
                return Err(format!("pass {pass}, word {w}: {got}, not {want}"));
            }
        }
        if pass == 0 {
            for buffer in (0..BUFFERS).filter(|&b| written(b)) {
                // SAFETY: the first word of a buffer of the writable mapping.
                unsafe { std::ptr::write_volatile(p.add(buffer * BS / 8), stored(buffer)) };
            }
        }
    }
    m.msync(0, m.len()).map_err(|e| e.to_string())?;
    let on_disk = std::fs::read(&path).map_err(|e| e.to_string())?;
    for buffer in 0..BUFFERS {
        let at = buffer * BS;
        let got = u64::from_le_bytes(on_disk[at..at + 8].try_into().unwrap());
        let want = if written(buffer) {
            stored(buffer)
        } else {
            expected(buffer * BS / 8)
        };
        if got != want {
            return Err(format!("file, buffer {buffer}: {got}, not {want}"));
        }
    }
    let stats = cache.stats();
    if stats.evictions == 0 {
        return Err(format!("no eviction: {stats:?}"));
    }
    let mode = match handling {
        FaultHandling::OnFaultingThread => "sigbus",
        FaultHandling::HandlerThreads(_) => "threads",
    };
    let base = m.as_ptr();
    print!("{mode} grandchild: ");
    report(in_forked_child(|| {
        let w = word(base, 0);
        println!("grandchild read {w}");
        0
    }));
    m.unmap().map_err(|e| e.to_string())?;
    Ok(())
}
