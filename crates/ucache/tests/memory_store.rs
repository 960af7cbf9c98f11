//! `MemoryStore` at its edges, as a store must behave: each case found by review (2026-11-25)
//! and failing before its fix.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;

use ucache::store::{MemoryStore, OpenOptions, Store};

/// An empty write changes nothing, as `pwrite` of zero bytes leaves a file's length alone; it
/// used to grow the object to its offset.
#[test]
fn memory_store_empty_write_past_the_end_does_not_grow_the_object() {
    let mem = MemoryStore::new();
    mem.insert("o", vec![1; 10]);
    let o = mem.open("o", OpenOptions::read_write()).unwrap();
    o.write_at(&[], 100).unwrap();
    assert_eq!(
        o.len().unwrap(),
        10,
        "a zero-length write past the end extended the object"
    );
    assert_eq!(mem.get("o").unwrap(), vec![1; 10]);
}

/// A write whose end does not fit (`offset + len` past `u64`/`usize`) is an IO error, as the
/// store contract has no panics in it; the addition used to overflow and panic.
#[test]
fn memory_store_write_whose_end_overflows_is_an_error_not_a_panic() {
    let mem = MemoryStore::new();
    mem.insert("o", vec![1; 10]);
    let o = mem.open("o", OpenOptions::read_write()).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| o.write_at(&[1, 2], u64::MAX)));
    match r {
        Ok(res) => assert!(res.is_err(), "write at u64::MAX succeeded"),
        Err(_) => panic!("MemoryObject::write_at panicked on an offset whose end overflows"),
    }
    assert_eq!(mem.get("o").unwrap(), vec![1; 10]);
}

const CHILD_ENV: &str = "UCACHE_REVIEW_FILES_CHILD";

/// Runs `name` (a test of this binary) in a child process and returns whether it exited
/// normally; a process abort (SIGABRT) is what this checks for.
fn child_passes(name: &str) -> (bool, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let text = format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The body run in the child: growing a memory object beyond what can be allocated comes back
/// as an `io::Error` (OutOfMemory), not an abort (`Vec::resize` aborted the process, which no
/// panic containment can turn into an error). 2^62 bytes never fits the address space, so
/// nothing is ever actually allocated.
#[test]
fn memory_store_growth_that_cannot_be_allocated_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return; // only meaningful in the child started by the test below
    }
    let mem = MemoryStore::new();
    mem.insert("o", vec![0; 4096]);
    let o = mem.open("o", OpenOptions::read_write()).unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| o.set_len(1 << 62)));
    assert!(
        matches!(r, Ok(Err(_))),
        "set_len(2^62) did not return an error"
    );
    let r = catch_unwind(AssertUnwindSafe(|| o.write_at(&[1], 1 << 62)));
    assert!(
        matches!(r, Ok(Err(_))),
        "write_at(.., 2^62) did not return an error"
    );
    assert_eq!(o.len().unwrap(), 4096);
}

#[test]
fn memory_store_growth_that_cannot_be_allocated_is_an_error_not_an_abort() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let (ok, text) = child_passes("memory_store_growth_that_cannot_be_allocated_child");
    assert!(ok, "the child died or failed:\n{text}");
}
