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
