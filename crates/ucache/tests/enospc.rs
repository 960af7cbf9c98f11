//! A real file system that runs out of space while the cache's whole budget is dirty
//! (issue 23, item 5): a loop-mounted 16 MiB ext4 image and an 8 MiB tmpfs, mounted by the
//! test (as root: without root, or where mounting fails, the test says so and skips, except
//! under `CI=true`, where it fails). The mapped file is grown sparse before the file system is
//! filled, so every write-back into it needs new blocks and fails with ENOSPC.
//!
//! For the buffered, `O_DIRECT` and io_uring stores, explicit and transparent mappings:
//! - a miss fails as soon as the budget's wait ends ([`CacheOptions::budget_wait`], short
//!   here) with the write-back failure that kept memory from being freed: ENOSPC, not an
//!   unexplained `BudgetExhausted`; eviction and msync report ENOSPC too;
//! - on a transparent mapping the fault hook gets that error (and without a hook the process
//!   gets SIGBUS, in a child);
//! - every dirty byte stays dirty and resident through the failures, and once space is freed
//!   msync succeeds and every byte written is in the file.
//!
//! Nothing here is timed: the watchdogs of `common` catch a hang.

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ucache::store::{FileStore, Store, UringOptions, UringStore};
use ucache::{Cache, CacheOptions, Error, FaultAction, MapOptions, Mapping};

mod common;
use common::{until, within};

const BS: usize = 4096;
/// Buffers the budget holds: all of them dirty when the space runs out.
const BUDGET: u64 = 64;
/// Buffers mapped (the file, sparse).
const LEN: u64 = 256;
/// A miss whose budget is full of buffers that cannot be written back.
const MISS: u64 = 100;
/// How long a miss waits for memory here (the default is 5 s).
const WAIT: Duration = Duration::from_millis(100);
const CHILD: &str = "UCACHE_ENOSPC_CHILD";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fs {
    Ext4,
    Tmpfs,
}

/// A small file system mounted under a temporary directory, unmounted on drop (lazily, as a
/// last resort, if something still holds it).
struct Mount {
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    match Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{cmd} {args:?}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{cmd}: {e}")),
    }
}

/// Skips the test with a note, or fails it under CI, where the file systems must be there.
fn unavailable(why: &str) -> Option<Mount> {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true, but the ENOSPC tests cannot mount their file system: {why}");
    }
    eprintln!("skipping: cannot mount a small file system here ({why})");
    None
}

impl Mount {
    fn new(fs: Fs) -> Option<Mount> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return unavailable("not root");
        }
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let m = mnt.to_str().unwrap();
        let mounted = match fs {
            Fs::Ext4 => {
                let img = dir.path().join("fs.img");
                std::fs::File::create(&img)
                    .unwrap()
                    .set_len(16 << 20)
                    .unwrap();
                let i = img.to_str().unwrap();
                // 4 KiB blocks, so a buffer is a block; no blocks reserved for root (who runs
                // this), so "full" is full for the test too.
                run("mkfs.ext4", &["-q", "-F", "-b", "4096", "-m", "0", i])
                    .and_then(|()| run("mount", &["-o", "loop", i, m]))
            }
            Fs::Tmpfs => run("mount", &["-t", "tmpfs", "-o", "size=8m", "tmpfs", m]),
        };
        match mounted {
            Ok(()) => Some(Mount { mnt, _dir: dir }),
            Err(e) => unavailable(&e),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.mnt.join(name)
    }

    /// Fills the file system with a filler file until writes fail with ENOSPC (again after a
    /// sync, which hands back what delayed allocation had reserved). Returns the bytes written.
    fn fill(&self) -> u64 {
        let mut f = std::fs::File::create(self.path("filler")).unwrap();
        let mut total = 0u64;
        for round in 0..3 {
            for chunk in [1usize << 20, BS] {
                let buf = vec![0xEE; chunk];
                loop {
                    match f.write(&buf) {
                        Ok(0) => break,
                        Ok(n) => total += n as u64,
                        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                        Err(e) => panic!("filling: {e}"),
                    }
                }
            }
            if let Err(e) = f.sync_all() {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "sync filler {round}");
            }
        }
        total
    }

    /// Frees the space again, and makes sure the file system knows it.
    fn free(&self) {
        std::fs::remove_file(self.path("filler")).unwrap();
        let d = std::fs::File::open(&self.mnt).unwrap();
        // SAFETY: a valid descriptor.
        assert_eq!(
            unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&d)) },
            0
        );
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let m = self.mnt.to_str().unwrap();
        if let Err(e) = run("umount", &[m]) {
            eprintln!("{e}; unmounting lazily");
            let _ = run("umount", &["-l", m]);
        }
    }
}

fn stores(fs: Fs) -> Vec<(&'static str, Arc<dyn Store>)> {
    let mut v: Vec<(&str, Arc<dyn Store>)> = vec![
        ("pread", Arc::new(FileStore::new())),
        ("pread-direct", Arc::new(FileStore::direct())),
    ];
    match UringStore::new(UringOptions::default()) {
        Ok(u) => v.push(("uring", Arc::new(u))),
        Err(e) => eprintln!("{fs:?}: io_uring unavailable, skipping it: {e}"),
    }
    v
}

/// What buffer `i` holds once written: differs at every 8-byte word and between buffers.
fn pattern(i: u64) -> Vec<u8> {
    (0..BS / 8)
        .flat_map(|w| {
            ((i * BS as u64 + w as u64 * 8) ^ 0x5EED_0000_0000_0000)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .to_le_bytes()
        })
        .collect()
}

fn cache() -> Cache {
    // Batches of 8 buffers; no background evictor at this budget.
    Cache::new(
        CacheOptions::new(BUDGET * BS as u64)
            .batch(8)
            .budget_wait(WAIT),
    )
    .unwrap()
}

/// Maps `path`, grown sparse to `LEN` buffers: `None` where the file system refuses
/// `O_DIRECT` (tmpfs before Linux 6.6), which is said and skipped.
fn map(
    cache: &Cache,
    store: Arc<dyn Store>,
    path: &Path,
    opts: MapOptions,
    what: &str,
) -> Option<Mapping> {
    let opts = opts
        .writable(true)
        .create(true)
        .len(LEN * BS as u64)
        .readahead(false);
    match cache.map(store, path.to_str().unwrap(), opts) {
        Ok(m) => Some(m),
        Err(Error::BadArgument(e)) if e.contains("O_DIRECT") => {
            eprintln!("{what}: skipped, {e}");
            None
        }
        Err(e) => panic!("{what}: map: {e}"),
    }
}

/// Whether `e` is (or wraps) the file system's ENOSPC, from a store's write.
fn is_enospc(e: &Error) -> bool {
    match e {
        Error::Io { op, source, .. } => {
            *op == "write"
                && source.raw_os_error() == Some(libc::ENOSPC)
                && source.kind() == std::io::ErrorKind::StorageFull
        }
        Error::WritebackFailed { first, .. } => is_enospc(first),
        _ => false,
    }
}

/// A failed write-back of the buffers that eviction or msync tried: ENOSPC, each of them kept.
fn assert_writeback_enospc(r: ucache::Result<()>, what: &str, all: bool) -> String {
    match r {
        Err(e @ Error::WritebackFailed { .. }) => {
            let Error::WritebackFailed { failed, first } = &e else {
                unreachable!()
            };
            assert!(is_enospc(first), "{what}: {e}");
            if all {
                assert_eq!(*failed as u64, BUDGET, "{what}: {e}");
            } else {
                assert!(*failed >= 1, "{what}: {e}");
            }
            e.to_string()
        }
        other => panic!("{what}: expected WritebackFailed with ENOSPC, got {other:?}"),
    }
}

/// Every dirty buffer still dirty (or being written again by another thread) and resident.
fn assert_kept(m: &Mapping, what: &str) {
    for i in 0..BUDGET {
        let w = m.state(i).unwrap();
        assert!(
            w.dirty() || w.writing(),
            "{what}: buffer {i} lost its dirty bit: {w:?}"
        );
        assert_eq!(w.phase(), ucache::Phase::Cached, "{what}: buffer {i}");
    }
}

/// Every byte of the file: the pattern in each written buffer, zeros elsewhere.
fn verify_file(path: &Path, written: &[u64], what: &str) -> u64 {
    let got = std::fs::read(path).unwrap();
    assert_eq!(got.len() as u64, LEN * BS as u64, "{what}");
    let zero = vec![0u8; BS];
    for i in 0..LEN {
        let want = if written.contains(&i) {
            pattern(i)
        } else {
            zero.clone()
        };
        let o = i as usize * BS;
        assert!(got[o..o + BS] == want[..], "{what}: buffer {i} differs");
    }
    got.len() as u64
}

/// Figures a case reports (for docs/reliability.md).
fn report(what: &str, filled: u64, dirty: u64, verified: u64, errors: &[String], cache: &Cache) {
    let st = cache.stats();
    eprintln!(
        "{what}: filler {filled} B; dirty held through ENOSPC {dirty} B; verified after \
         recovery {verified} B; write-back failures {}; budget stalls {}",
        st.writeback_failures, st.budget_stalls
    );
    for e in errors {
        eprintln!("{what}:   {e}");
    }
}

fn explicit(fs: Fs) {
    let Some(mount) = Mount::new(fs) else { return };
    for (name, store) in stores(fs) {
        let what = format!("{fs:?}/{name}/explicit");
        let path = mount.path(name);
        let c = cache();
        let Some(m) = map(&c, store, &path, MapOptions::new(), &what) else {
            continue;
        };
        let filled = mount.fill();
        for i in 0..BUDGET {
            m.pin_exclusive(i).unwrap().copy_from_slice(&pattern(i));
        }
        assert_eq!(c.used(), BUDGET * BS as u64, "{what}: the budget is full");
        let mut errors = Vec::new();

        // A miss: the budget holds only dirty buffers, and none can be written.
        match m.pin_shared(MISS) {
            Err(e) => {
                assert!(is_enospc(&e), "{what}: the miss names ENOSPC: {e}");
                errors.push(format!("miss: {e}"));
            }
            Ok(_) => panic!("{what}: a miss succeeded with the budget full of unwritable data"),
        }
        assert_kept(&m, &what);
        errors.push(format!(
            "evict: {}",
            assert_writeback_enospc(m.evict(0, m.len()), &what, true)
        ));
        assert_kept(&m, &what);
        errors.push(format!(
            "msync: {}",
            assert_writeback_enospc(m.msync(0, m.len()), &what, true)
        ));
        assert_kept(&m, &what);
        assert_eq!(m.resident(), BUDGET, "{what}");
        assert!(c.stats().writeback_failures >= 2 * BUDGET, "{what}");

        mount.free();
        m.msync(0, m.len()).unwrap();
        let verified = verify_file(&path, &(0..BUDGET).collect::<Vec<_>>(), &what);
        // The miss that failed is served now (by evicting clean buffers).
        assert!(
            m.pin_shared(MISS).unwrap().iter().all(|&b| b == 0),
            "{what}"
        );
        m.unmap().unwrap();
        report(&what, filled, BUDGET * BS as u64, verified, &errors, &c);
        std::fs::remove_file(&path).unwrap();
    }
}

/// The transparent case: a writer thread dirties the budget through the pointer, then stores
/// into a buffer that is not resident. The fault hook gets the miss's error and asks for a
/// retry; meanwhile eviction and msync fail with ENOSPC and keep the data; then the space is
/// freed, the retried store lands, and everything is written.
fn transparent(fs: Fs) {
    let Some(mount) = Mount::new(fs) else { return };
    for (name, store) in stores(fs) {
        let what = format!("{fs:?}/{name}/transparent");
        let path = mount.path(name);
        let c = cache();
        let calls = Arc::new(AtomicUsize::new(0));
        let enospc = Arc::new(AtomicBool::new(true));
        let first = Arc::new(Mutex::new(None::<String>));
        let hook = {
            let (calls, enospc, first) = (calls.clone(), enospc.clone(), first.clone());
            Arc::new(move |_addr: usize, e: &Error| {
                if !is_enospc(e) {
                    enospc.store(false, Ordering::SeqCst);
                }
                if let Ok(mut f) = first.try_lock() {
                    f.get_or_insert_with(|| e.to_string());
                }
                calls.fetch_add(1, Ordering::SeqCst);
                FaultAction::Retry
            })
        };
        let opts = MapOptions::new().transparent(true).on_fault_error(hook);
        let Some(m) = map(&c, store, &path, opts, &what) else {
            continue;
        };
        let m = Arc::new(m);
        let filled = mount.fill();
        let dirtied = Arc::new(AtomicBool::new(false));
        let writer = {
            let (m, dirtied) = (m.clone(), dirtied.clone());
            std::thread::spawn(move || {
                let base = m.as_mut_ptr();
                for i in (0..BUDGET).chain([MISS]) {
                    if i == MISS {
                        dirtied.store(true, Ordering::SeqCst);
                    }
                    let p = pattern(i);
                    // SAFETY: inside the live mapping; a miss faults into ucache.
                    unsafe {
                        std::ptr::copy_nonoverlapping(p.as_ptr(), base.add(i as usize * BS), BS)
                    };
                }
            })
        };
        until(
            "the writer to dirty the budget and miss",
            || dirtied.load(Ordering::SeqCst) && calls.load(Ordering::SeqCst) > 0,
            || (calls.load(Ordering::SeqCst), c.used()),
        );
        let mut errors = vec![format!(
            "fault hook: {}",
            first.lock().unwrap().clone().unwrap()
        )];
        assert!(
            enospc.load(Ordering::SeqCst),
            "{what}: the hook got another error than ENOSPC: {errors:?}"
        );
        assert_kept(&m, &what);
        // The faulting thread's retries evict too, so some buffers may be its, not ours.
        errors.push(format!(
            "evict: {}",
            assert_writeback_enospc(m.evict(0, BUDGET * BS as u64), &what, false)
        ));
        assert_kept(&m, &what);
        errors.push(format!(
            "msync: {}",
            assert_writeback_enospc(m.msync(0, m.len()), &what, false)
        ));
        assert_kept(&m, &what);

        mount.free();
        within("the retried store after space came back", move || {
            writer.join().unwrap()
        });
        let hook_calls = calls.load(Ordering::SeqCst);
        m.msync(0, m.len()).unwrap();
        let written: Vec<u64> = (0..BUDGET).chain([MISS]).collect();
        let verified = verify_file(&path, &written, &what);
        let m = Arc::into_inner(m).unwrap();
        m.unmap().unwrap();
        errors.push(format!("fault hook calls: {hook_calls}"));
        report(&what, filled, BUDGET * BS as u64, verified, &errors, &c);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn ext4_explicit() {
    within("ext4, explicit mappings", || explicit(Fs::Ext4));
}

#[test]
fn ext4_transparent() {
    within("ext4, transparent mappings", || transparent(Fs::Ext4));
}

#[test]
fn tmpfs_explicit() {
    within("tmpfs, explicit mappings", || explicit(Fs::Tmpfs));
}

#[test]
fn tmpfs_transparent() {
    within("tmpfs, transparent mappings", || transparent(Fs::Tmpfs));
}

/// Without a fault hook, a transparent store whose miss cannot get memory because the dirty
/// budget cannot be written back ends the process with SIGBUS, as mmap does for an IO error.
/// Run in a child (this binary again); the parent mounts, grows the file and fills the disk.
#[test]
fn ext4_transparent_without_a_hook_raises_sigbus() {
    if let Ok(path) = std::env::var(CHILD) {
        let c = cache();
        let m = c
            .map(
                Arc::new(FileStore::new()),
                &path,
                MapOptions::new()
                    .transparent(true)
                    .writable(true)
                    .readahead(false),
            )
            .unwrap();
        for i in 0..BUDGET {
            let p = pattern(i);
            // SAFETY: inside the live mapping.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr(), m.as_mut_ptr().add(i as usize * BS), BS)
            };
        }
        println!("budget dirty; about to miss");
        // SAFETY: inside the mapping; the miss cannot be served, so SIGBUS ends the process.
        unsafe { std::ptr::write_volatile(m.as_mut_ptr().add(MISS as usize * BS), 1) };
        println!("survived");
        std::process::exit(0);
    }
    let Some(mount) = Mount::new(Fs::Ext4) else {
        return;
    };
    let path = mount.path("child");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(LEN * BS as u64)
        .unwrap();
    mount.fill();
    let out = within("the child", move || {
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "ext4_transparent_without_a_hook_raises_sigbus",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, &path)
            .output()
            .unwrap()
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("about to miss") && !stdout.contains("survived"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.signal(), Some(libc::SIGBUS), "{:?}", out.status);
    eprintln!(
        "child ended by {:?}; its stderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    // The child's dirty data died with it, as under mmap; the file holds no torn buffer.
    let size = std::fs::metadata(mount.path("child")).unwrap().size();
    assert_eq!(size, LEN * BS as u64);
}

/// The regression behind the cases above that needs no mount: a store whose writes all fail,
/// a budget full of dirty buffers, a miss. The miss used to fail after `budget_wait` with
/// "cache budget exhausted: 262144 bytes in use and none evictable", as if pins had leaked;
/// it now names the write-back failure that kept memory from being freed. On plain and
/// tracked (set-aside) mappings, whose eviction rounds differ. Runs everywhere.
#[test]
fn a_miss_behind_unwritable_dirty_data_names_the_write_failure() {
    within("a miss behind unwritable dirty data", || {
        // No readahead (the tracked options have none either): the miss is the only load.
        let plain = MapOptions::new().readahead(false);
        for (what, opts) in [("plain", plain), ("tracked", common::tracked())] {
            let mem = common::pattern_store("o", LEN as usize);
            let store = ucache::store::FaultStore::new(mem.clone());
            let fail = store.config().clone();
            let c = cache();
            let m = c.map(Arc::new(store), "o", opts.writable(true)).unwrap();
            for i in 0..BUDGET {
                m.pin_exclusive(i).unwrap().copy_from_slice(&pattern(i));
            }
            // A tracked mapping's pool holds part of the budget: fewer of them are resident.
            let dirty: Vec<u64> = (0..BUDGET)
                .filter(|&i| m.state(i).unwrap().dirty())
                .collect();
            assert!(dirty.len() as u64 >= BUDGET / 2, "{what}: {dirty:?}");
            fail.fail_writes.store(true, Ordering::SeqCst);
            let e = m.pin_shared(MISS).map(drop).unwrap_err();
            match &e {
                Error::WritebackFailed { failed, first } => {
                    assert!(*failed >= 1, "{what}: {e}");
                    assert!(
                        matches!(**first, Error::Io { op: "write", .. }),
                        "{what}: {e}"
                    );
                }
                _ => panic!("{what}: expected the write-back failure, got {e:?}"),
            }
            for &i in &dirty {
                assert!(m.state(i).unwrap().dirty(), "{what}: buffer {i} kept dirty");
            }
            fail.fail_writes.store(false, Ordering::SeqCst);
            assert!(m.pin_shared(MISS).unwrap().iter().all(|&b| b == MISS as u8));
            m.msync(0, m.len()).unwrap();
            let got = mem.get("o").unwrap();
            for i in 0..BUDGET {
                let o = i as usize * BS;
                assert!(got[o..o + BS] == pattern(i)[..], "{what}: buffer {i}");
            }
            m.unmap().unwrap();
        }
    });
}
