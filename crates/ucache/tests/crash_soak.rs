//! The crash-and-restart soak on local files: buffered, `O_DIRECT` and io_uring. Many cycles
//! of a child process with eight writer threads, injected faults and a SIGKILL at a random
//! point, each checked against the ledger of acknowledged msyncs (tests/soak/mod.rs says how).
//! `UCACHE_SOAK_CYCLES` or `UCACHE_SOAK_SECONDS` scales it; scripts/soak.sh runs it long.

mod soak;

use std::sync::Arc;

use ucache::store::{FileStore, Store, UringOptions, UringStore};

use soak::Soak;

/// A scratch directory under the target directory (not tmpfs, which refuses `O_DIRECT`).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn soak_files(label: &str, test: &str, make: &dyn Fn() -> Arc<dyn Store>) {
    let dir = scratch();
    let object = dir.path().join("data");
    Soak {
        label,
        test,
        make,
        pace: 1,
        cycles: soak::DEFAULT_CYCLES,
    }
    .run(dir.path(), object.to_str().unwrap());
}

#[test]
fn soak_buffered() {
    soak_files("buffered", "soak_buffered", &|| Arc::new(FileStore::new()));
}

#[test]
fn soak_direct() {
    soak_files("direct", "soak_direct", &|| Arc::new(FileStore::direct()));
}

#[test]
fn soak_uring() {
    if let Err(e) = UringStore::new(UringOptions::default()) {
        eprintln!("skipping soak_uring: io_uring unavailable here: {e}");
        return;
    }
    soak_files("uring", "soak_uring", &|| {
        Arc::new(UringStore::new(UringOptions::default()).unwrap())
    });
}

/// The checker itself: a torn record, a misplaced one and garbage are all caught; zeros are
/// "never written".
#[test]
fn the_record_check_catches_torn_misplaced_and_garbage_buffers() {
    let r = soak::record(9, 4, 2);
    assert_eq!(soak::check_record(9, &r), Ok(Some(4)));
    assert_eq!(soak::check_record(9, &vec![0u8; soak::BS]), Ok(None));
    let mut torn = r.clone();
    torn[soak::BS / 2..].copy_from_slice(&soak::record(9, 5, 2)[soak::BS / 2..]);
    assert!(soak::check_record(9, &torn).unwrap_err().contains("torn"));
    assert!(soak::check_record(17, &r)
        .unwrap_err()
        .contains("misplaced"));
    let mut garbage = vec![0u8; soak::BS];
    garbage[100] = 1;
    assert!(soak::check_record(9, &garbage)
        .unwrap_err()
        .contains("garbage"));
}

/// A ledger line the kill cut short is ignored and cut off, so that the next child's first
/// line does not continue it into a bogus fact.
#[test]
fn a_ledger_line_cut_short_is_dropped() {
    let dir = scratch();
    let path = dir.path().join("ledger");
    std::fs::write(&path, "3 7\n12 3").unwrap();
    let acked = soak::read_ledger(&path);
    assert_eq!(acked.get(&3), Some(&7));
    assert_eq!(acked.get(&12), None);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "3 7\n");
}
