//! What several integration tests share.

use std::sync::Arc;
use std::time::Duration;

use ucache::store::MemoryStore;

pub mod store;

/// How long a test may go without finishing what it waits for before it is called hung. Far
/// above any plausible run (under valgrind, on a loaded 2-core machine): a watchdog catches
/// hangs, it never times the code (docs/reliability.md, "tests never flake").
#[allow(dead_code)] // not every test binary that shares this module uses it
pub const HANG: Duration = Duration::from_secs(300);

/// Runs `f` on its own thread and returns what it returns, failing the test (naming `what`)
/// if it has not finished within [`HANG`]: a regression in these tests is a hang, which must
/// not stall the suite. The stuck thread is left behind; the process exit ends it. A panic in
/// `f` is the test's own panic.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(HANG) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: hung for {HANG:?}"),
    }
}

/// Runs test `name` of this test binary again, as a child process with `var=mode` and `extra`
/// in its environment, and returns how it ended: how a test checks what a signal or an exit
/// does to a process without ending the test run. The child sees `var` and runs that part.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn rerun_as_child(
    var: &str,
    name: &str,
    mode: &str,
    extra: &[(&str, &str)],
) -> std::process::Output {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(var, mode)
        .envs(extra.iter().copied());
    c.output().unwrap()
}

/// Polls `done` every millisecond until it holds, failing the test (naming `what`, with
/// `detail`'s report) if it still does not after [`HANG`]'s worth of polls. No clock is read:
/// each poll sleeps at least a millisecond, so the polls last at least [`HANG`] (longer on a
/// loaded machine, which only makes the watchdog more patient).
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn until<D: std::fmt::Debug>(
    what: &str,
    mut done: impl FnMut() -> bool,
    detail: impl Fn() -> D,
) {
    const POLL: Duration = Duration::from_millis(1);
    for _ in 0..HANG.as_millis() / POLL.as_millis() {
        if done() {
            return;
        }
        std::thread::sleep(POLL);
    }
    assert!(done(), "timed out waiting for {what}: {:?}", detail());
}

/// The access modes a test that runs in both should cover: explicit (`false`) and transparent
/// (`true`), or explicit alone under ThreadSanitizer (`UCACHE_TSAN=1`, set by scripts/tsan.sh).
/// TSan cannot see the ordering the kernel's write protection gives a transparent mapping's
/// plain stores and the write-back that reads them, so it reports that pair as a race.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn transparent_modes() -> &'static [bool] {
    if under_tsan() {
        &[false]
    } else {
        &[false, true]
    }
}

/// Whether the tests run under ThreadSanitizer (see [`transparent_modes`]): transparent-only
/// tests return early then.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn under_tsan() -> bool {
    std::env::var_os("UCACHE_TSAN").is_some_and(|v| v == "1")
}

/// `len` bytes whose every 8-byte word holds its own byte offset, as in `ucache bench` data
/// files (a tail shorter than a word holds that word's first bytes): a misplaced or stale
/// word shows.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn offset_words(len: u64) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).step_by(8).flat_map(u64::to_le_bytes).collect();
    v.truncate(len as usize);
    v
}

/// A file `dir/data` of [`offset_words`].
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn offset_file(dir: &std::path::Path, len: u64) -> std::path::PathBuf {
    let p = dir.join("data");
    std::fs::write(&p, offset_words(len)).unwrap();
    p
}

/// The reads behind `s` (statistics of a pass over `buffers` buffers) were coalesced (at
/// least four buffers per request on average) and overlapped (some requests outstanding
/// together).
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn assert_coalesced_and_overlapped(what: &str, s: &ucache::StatsSnapshot, buffers: u64) {
    assert!(
        s.store_reads * 4 <= buffers,
        "{what}: {} requests for {buffers} buffers: not coalesced",
        s.store_reads
    );
    assert!(
        s.store_reads_overlapped > 0,
        "{what}: every read waited for the one before: {s:#?}"
    );
}

/// A store holding object `name` of `buffers` 4 KiB buffers, every byte of buffer `i` holding
/// `i` (mod 256), so a misplaced buffer shows.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn pattern_store(name: &str, buffers: usize) -> Arc<MemoryStore> {
    let s = MemoryStore::new();
    s.insert(
        name,
        (0..buffers * 4096)
            .map(|i| (i / 4096) as u8)
            .collect::<Vec<u8>>(),
    );
    Arc::new(s)
}

/// A transparent mapping with access tracking (set-aside buffers) and no readahead, whose
/// loads would run on the IO threads.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn tracked() -> ucache::MapOptions {
    ucache::MapOptions::new()
        .transparent(true)
        .track_access(true)
        .readahead(false)
}

/// A cache of `budget` buffers of 4 KiB that evicts `batch` at a time, and a writable
/// transparent mapping of `store`'s object `t` in it.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn writable_transparent(
    store: &MemoryStore,
    budget: usize,
    batch: usize,
) -> (ucache::Cache, ucache::Mapping) {
    let cache =
        ucache::Cache::new(ucache::CacheOptions::new((budget * 4096) as u64).batch(batch)).unwrap();
    let m = cache
        .map(
            Arc::new(store.clone()),
            "t",
            ucache::MapOptions::new().transparent(true).writable(true),
        )
        .unwrap();
    (cache, m)
}

/// A transparent mapping's memory as 64-bit words, for plain loads and stores from several
/// threads at once (atomics are the sound way to share them; plain movs on x86-64).
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn words(m: &ucache::Mapping) -> &[std::sync::atomic::AtomicU64] {
    // SAFETY: the mapping's memory is valid for its length while `m` lives.
    unsafe {
        std::slice::from_raw_parts(
            m.as_ptr() as *const std::sync::atomic::AtomicU64,
            m.len() as usize / 8,
        )
    }
}

/// Buffer `i`'s phase now.
#[allow(dead_code)] // not every test binary that shares this module uses it
pub fn phase(m: &ucache::Mapping, i: u64) -> ucache::Phase {
    m.state(i).unwrap().phase()
}
