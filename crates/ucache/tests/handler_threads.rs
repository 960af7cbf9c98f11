//! The handler-thread mode of transparent mappings (`FaultHandling::HandlerThreads`) where it
//! meets pins and failed write-backs. Anything that can hang runs under a watchdog: the work
//! runs on a detached thread and the test waits for it with a timeout (a hung thread is left
//! behind; the process exit ends it).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ucache::store::{FaultStore, MemoryStore};
use ucache::{Cache, CacheOptions, FaultHandling, MapOptions, Mapping};

mod common;
use common::within;

const BS: usize = 4096;

/// A write-back that fails makes its buffer dirty and writable again. It used to leave it
/// write-protected (the claim protected it), while `pin_exclusive` in handler-thread mode
/// lifts the protection of clean buffers only: the holder's first store then faulted to a
/// handler thread that cannot tell the holder from another writer and waited for its pin,
/// while the holder waited for the handler, forever (found by review, 2026-11-25).
#[test]
fn exclusive_write_after_a_failed_writeback_does_not_deadlock() {
    let inner = MemoryStore::new();
    inner.insert("t", vec![0u8; 4 * BS]);
    let store = FaultStore::new(Arc::new(inner.clone()));
    let config = store.config().clone();
    let cache: &'static Cache = Box::leak(Box::new(
        Cache::new(CacheOptions::new(64 * BS as u64).batch(1)).unwrap(),
    ));
    let m: &'static Mapping = Box::leak(Box::new(
        cache
            .map(
                Arc::new(store),
                "t",
                MapOptions::new()
                    .transparent(true)
                    .writable(true)
                    .fault_handling(FaultHandling::HandlerThreads(1)),
            )
            .unwrap(),
    ));
    let p = m.as_mut_ptr() as usize;
    // A plain store: a missing write fault, served dirty and writable.
    within(10, "first store", move || unsafe { *(p as *mut u8) = 1 });
    assert!(
        m.state(0).unwrap().dirty(),
        "{:?} {:?}",
        m.state(0).unwrap(),
        cache.stats()
    );
    // The store goes away: the write-back fails, the buffer stays dirty (and protected).
    config.fail_writes.store(true, Ordering::Relaxed);
    assert!(m.msync(0, BS as u64).is_err());
    config.fail_writes.store(false, Ordering::Relaxed);
    let st = m.state(0).unwrap();
    assert!(st.dirty() && !st.writing(), "{st:?}");
    // Now a write through an exclusive guard.
    within(
        10,
        "a store through an exclusive guard of a dirty buffer whose write-back failed: the \
         handler thread waits for the holder's pin, the holder for the handler",
        move || {
            let mut g = m.pin_exclusive(0).unwrap();
            g[1] = 2;
        },
    );
    m.msync(0, BS as u64).unwrap();
    assert_eq!(&inner.get("t").unwrap()[..2], &[1, 2]);
}
