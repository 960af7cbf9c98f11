//! The handler-thread mode of transparent mappings (`FaultHandling::HandlerThreads`) where it
//! meets pins and failed write-backs. Anything that can hang runs under a watchdog: the work
//! runs on a detached thread and the test waits for it with a timeout (a hung thread is left
//! behind; the process exit ends it).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use ucache::store::{FaultStore, MemoryStore};
use ucache::{Cache, CacheOptions, Error, FaultHandling, MapOptions, Mapping};

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
    within("first store", move || unsafe { *(p as *mut u8) = 1 });
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

/// The first plain store to a clean buffer is served by a handler thread that takes the
/// buffer's `X` bit for the moment it lifts the write protection. Lifting it used to wake the
/// storing thread at once, before the handler dropped `X`: the program's store had returned
/// and nobody it knew pinned the buffer, yet an `msync` from a thread holding an exclusive pin
/// of another buffer was refused with `WouldDeadlock` for it. Now the handler wakes the thread
/// once the word says the store may go on.
#[test]
fn a_served_store_leaves_no_phantom_exclusive_pin() {
    within("stores", || {
        let store = MemoryStore::new();
        store.insert("t", vec![0; 2 * 4096]);
        let cache = Cache::new(CacheOptions::new(16 * 4096).batch(1)).unwrap();
        let m = cache
            .map(
                Arc::new(store),
                "t",
                MapOptions::new()
                    .transparent(true)
                    .writable(true)
                    .fault_handling(FaultHandling::HandlerThreads(1)),
            )
            .unwrap();
        let p = m.as_mut_ptr();
        let mut phantom = 0;
        let mut seen_x = 0;
        for round in 0..1000u32 {
            // Clean and write-protected again, so the next store faults to the handler.
            m.msync(0, m.len()).unwrap();
            // SAFETY: inside a writable transparent mapping.
            unsafe { std::ptr::write_volatile(p, round as u8) };
            if m.state(0).unwrap().exclusive() {
                seen_x += 1;
            }
            let g = m.pin_exclusive(1).unwrap();
            let r = m.msync(0, 4096);
            drop(g);
            match r {
                Ok(()) => {}
                Err(Error::WritebackFailed { first, .. })
                    if matches!(*first, Error::WouldDeadlock { index: 0, .. }) =>
                {
                    phantom += 1
                }
                Err(e) => panic!("round {round}: {e:?}"),
            }
        }
        m.unmap().unwrap();
        assert_eq!(
            (phantom, seen_x),
            (0, 0),
            "after its plain store returned, buffer 0 was still pinned exclusively by the handler \
         thread ({seen_x} times seen, {phantom} msyncs refused with WouldDeadlock)"
        );
    });
}
