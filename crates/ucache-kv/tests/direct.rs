//! A store whose data file is read and written `O_DIRECT` (`KvOptions::in_dir_direct`), on a
//! real file system: every value comes back after a reopen that replays the buffered log, the
//! meta page is read as one aligned block, and the data file's pages stay out of the kernel's
//! page cache (the point of the option), where the buffered store's do not.

mod common;

use common::within;
use ucache_cli::bench::system::Residency;
use ucache_kv::{Kv, KvOptions, Placement, WriteBatch, POOL_CHUNK};

const KEYS: u64 = 12_000;

fn key(n: u64) -> Vec<u8> {
    format!("key{n:08}").into_bytes()
}

/// 200 bytes naming the key and its round, so a value under the wrong key shows.
fn value(n: u64, round: u64) -> Vec<u8> {
    let mut v = format!("value {n} round {round} ").into_bytes();
    v.resize(200, b'0' + (n % 10) as u8);
    v
}

/// Pages of `path` in the kernel's page cache (`mincore` over a mapping of the file that
/// nothing reads through).
fn page_cache_pages(path: &std::path::Path) -> u64 {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len();
    Residency::new(&f, len, len).unwrap().resident() / 4096
}

fn on_tmpfs(path: &str) -> bool {
    let c = std::ffi::CString::new(path).unwrap();
    // SAFETY: `struct statfs` is plain integers, so all-zero bytes are a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid out-pointer.
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    r == 0 && st.f_type == libc::TMPFS_MAGIC
}

fn options(dir: &std::path::Path, direct: bool, placement: Placement) -> KvOptions {
    let mut o = if direct {
        KvOptions::in_dir_direct(dir)
    } else {
        KvOptions::in_dir(dir)
    };
    o.placement = placement;
    // The pool's one chunk, or 64 pages in place: both far below the data.
    o.memory_bytes = match placement {
        Placement::Pool => POOL_CHUNK,
        _ => 64 * 4096,
    };
    o.capacity_pages = 1 << 14;
    o.checkpoint_bytes = 1 << 20;
    o
}

/// Loads `KEYS` values, updates every third one in a later round (left in the log, not
/// checkpointed), drops the store, reopens it and reads every key back, twice over the budget.
/// Returns the data file's pages in the page cache at the end.
fn round_trip(direct: bool, placement: Placement) -> u64 {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    {
        let kv = Kv::open(options(dir.path(), direct, placement)).unwrap();
        for chunk in (0..KEYS).collect::<Vec<_>>().chunks(500) {
            let mut b = WriteBatch::new();
            for &n in chunk {
                b.put(key(n), value(n, 0));
            }
            kv.write(&b).unwrap();
        }
        kv.checkpoint().unwrap();
        for n in (0..KEYS).step_by(3) {
            kv.put(&key(n), &value(n, 1)).unwrap();
        }
        let st = kv.mapping().stats();
        assert!(st.evictions > 0, "the data outgrew the budget: {st:?}");
    }
    // Reopen: the meta page is read straight from the store, then the log replayed.
    let kv = Kv::open(options(dir.path(), direct, placement)).unwrap();
    for _ in 0..2 {
        for n in 0..KEYS {
            let want = value(n, u64::from(n % 3 == 0));
            assert_eq!(kv.get(&key(n)).unwrap(), Some(want), "key {n}");
        }
    }
    assert!(kv.mapping().stats().misses > 0);
    drop(kv);
    page_cache_pages(&dir.path().join("data"))
}

#[test]
fn a_direct_store_reads_back_every_value_and_leaves_no_page_cache() {
    within("direct store round trip", || {
        for placement in [Placement::Pool, Placement::InPlace] {
            let direct = round_trip(true, placement);
            if on_tmpfs(env!("CARGO_TARGET_TMPDIR")) {
                // tmpfs accepts O_DIRECT but its files live in the page cache.
                eprintln!("target/tmp is a tmpfs: page-cache residency not checked");
                continue;
            }
            assert_eq!(direct, 0, "{placement:?}: data pages in the page cache");
            // The control: the same run through the page cache leaves pages there, so the
            // assertion above can fail.
            let buffered = round_trip(false, placement);
            assert!(buffered > 0, "{placement:?}: buffered run left none");
        }
    });
}

/// A direct store in a directory that does not exist is refused with the cache's typed error,
/// and nothing is created.
#[test]
fn a_direct_store_in_a_missing_directory_is_a_typed_error() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let missing = dir.path().join("no-such-dir");
    let r = Kv::open(options(&missing, true, Placement::Pool));
    assert!(
        matches!(
            r,
            Err(ucache_kv::KvError::Cache(
                ucache::Error::DirectoryNotFound { .. }
            ))
        ),
        "{:?}",
        r.err()
    );
    assert!(!missing.exists());
}
