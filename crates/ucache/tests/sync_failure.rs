//! A failed sync loses nothing ("fsyncgate"). The store here fails one sync and, as Linux may
//! after a failed `fsync`, throws away every write since the last good sync. Whatever the
//! path that wrote the data (msync itself, eviction, `writeback`), no later call may report
//! it durable unless it is: either the cache still holds it dirty and writes it again, or the
//! mapping is poisoned until the application clears it.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use ucache::store::{FaultStore, MemoryStore};
use ucache::{Cache, CacheOptions, Error, MapOptions, Mapping};

const BS: usize = 4096;

/// A store of object "o" (`buffers` zeroed buffers) whose failed syncs lose unsynced writes,
/// the memory store under it (what is durable), and its fault switches.
fn lossy(buffers: usize) -> (FaultStore, MemoryStore) {
    let mem = MemoryStore::new();
    mem.insert("o", vec![0u8; buffers * BS]);
    let store = FaultStore::new(Arc::new(mem.clone()));
    store
        .config()
        .lose_unsynced_on_failed_sync
        .store(true, Relaxed);
    (store, mem)
}

/// Writes `v` over every byte of buffers `range` through exclusive pins.
fn fill(m: &Mapping, range: std::ops::Range<u64>, v: u8) {
    for i in range {
        m.pin_exclusive(i).unwrap().fill(v);
    }
}

fn durable(mem: &MemoryStore, i: u64) -> u8 {
    let d = mem.get("o").unwrap();
    let b = &d[i as usize * BS..(i as usize + 1) * BS];
    assert!(b.iter().all(|&x| x == b[0]), "buffer {i} torn");
    b[0]
}

/// What msync wrote stays claimed until its sync returns: after a failed sync those buffers
/// are dirty again and a retry writes them again. Before, they were left clean, so the retry
/// returned Ok with the store still holding the old bytes.
#[test]
fn a_failed_sync_leaves_what_msync_wrote_dirty_and_a_retry_makes_it_durable() {
    for &transparent in common::transparent_modes() {
        let (store, mem) = lossy(8);
        let cfg = store.config().clone();
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(4)).unwrap();
        let options = MapOptions::new().writable(true).transparent(transparent);
        let m = cache.map(Arc::new(store), "o", options).unwrap();
        fill(&m, 0..8, 0xA1);
        cfg.fail_next_sync.store(true, Relaxed);
        let e = m.msync(0, m.len()).unwrap_err();
        assert!(matches!(e, Error::Io { op: "sync", .. }), "{e}");
        assert_eq!(durable(&mem, 3), 0, "the failed sync lost the writes");
        assert!(
            (0..8).all(|i| m.state(i).unwrap().dirty()),
            "transparent {transparent}"
        );
        assert_eq!(cache.stats().writeback_failures, 8);
        // Still writable: a store after the failure lands and is written by the retry.
        fill(&m, 7..8, 0xB2);
        m.msync(0, m.len()).unwrap();
        assert!(
            (0..7).all(|i| durable(&mem, i) == 0xA1),
            "transparent {transparent}"
        );
        assert_eq!(durable(&mem, 7), 0xB2);
        assert!((0..8).all(|i| !m.state(i).unwrap().dirty()));
        m.unmap().unwrap();
    }
}

/// Buffers that eviction wrote back left the cache: a failed sync may have lost them and
/// nothing can write them again, so the mapping is poisoned. Every msync and unmap fails with
/// `SyncPoisoned`, even once the store syncs again, until the application clears it.
#[test]
fn a_failed_sync_after_eviction_write_backs_poisons_the_mapping_until_cleared() {
    let (store, mem) = lossy(64);
    let cfg = store.config().clone();
    let cache = Cache::new(CacheOptions::new(8 * BS as u64).batch(2)).unwrap();
    let m = cache
        .map(Arc::new(store), "o", MapOptions::new().writable(true))
        .unwrap();
    fill(&m, 0..64, 0xC3); // eviction writes most of them back
    assert!(cache.stats().writebacks > 0);
    cfg.fail_next_sync.store(true, Relaxed);
    assert!(matches!(
        m.msync(0, m.len()),
        Err(Error::Io { op: "sync", .. })
    ));
    let lost = (0..64).filter(|&i| durable(&mem, i) != 0xC3).count();
    assert!(lost > 0, "the store dropped evicted write-backs");
    // The store syncs again now, but what was lost is not in the cache to write again.
    for _ in 0..2 {
        let e = m.msync(0, m.len()).unwrap_err();
        assert!(matches!(e, Error::SyncPoisoned { .. }), "{e}");
        assert!(e.to_string().contains("injected sync fault"), "{e}");
    }
    let m = match m.unmap() {
        Err(e) if matches!(e.error, Error::SyncPoisoned { .. }) => e.mapping,
        r => panic!("unmap of a poisoned mapping: {r:?}"),
    };
    // The application rewrites what it knows may be lost, then clears the poison.
    fill(&m, 0..64, 0xC3);
    assert!(m.clear_sync_failure().is_some());
    assert!(m.clear_sync_failure().is_none());
    m.msync(0, m.len()).unwrap();
    assert!((0..64).all(|i| durable(&mem, i) == 0xC3));
    m.unmap().unwrap();
}

/// Background write-back (`Mapping::writeback`) leaves buffers clean, unsynced: the same
/// poisoning applies. A failed sync with nothing written outside msync poisons nothing.
#[test]
fn background_write_backs_before_a_failed_sync_poison_and_msync_alone_does_not() {
    let (store, mem) = lossy(16);
    let cfg = store.config().clone();
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(4)).unwrap();
    let m = cache
        .map(Arc::new(store), "o", MapOptions::new().writable(true))
        .unwrap();

    // msync alone: its own writes are dirty again, so no poison.
    fill(&m, 0..4, 0xD4);
    cfg.fail_next_sync.store(true, Relaxed);
    assert!(m.msync(0, m.len()).is_err());
    m.msync(0, m.len()).unwrap();
    assert!((0..4).all(|i| durable(&mem, i) == 0xD4));

    // writeback, then a failed sync: poisoned.
    fill(&m, 4..8, 0xE5);
    m.writeback(0, m.len()).unwrap();
    common::until(
        "the background write-back",
        || (4..8).all(|i| !m.state(i).unwrap().dirty() && !m.state(i).unwrap().writing()),
        || cache.stats(),
    );
    cfg.fail_next_sync.store(true, Relaxed);
    assert!(m.msync(0, m.len()).is_err());
    assert!(matches!(
        m.msync(0, m.len()),
        Err(Error::SyncPoisoned { .. })
    ));
    assert_eq!(
        durable(&mem, 5),
        0,
        "the store lost the background write-back"
    );
    assert!(m.clear_sync_failure().is_some());
    m.msync(0, m.len()).unwrap();
}

/// Many threads write and msync while syncs fail now and then: every msync that returned Ok
/// made what its thread wrote before it durable, and no two msyncs deadlock on each other's
/// claims (they never hold them while they wait).
#[test]
fn concurrent_msyncs_with_failing_syncs_report_only_durable_data() {
    common::within("concurrent msyncs", || {
        let (store, mem) = lossy(32);
        let cfg = store.config().clone();
        let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(4)).unwrap();
        let m = cache
            .map(Arc::new(store), "o", MapOptions::new().writable(true))
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (m, mem, cfg) = (&m, &mem, &cfg);
                s.spawn(move || {
                    // Each thread owns buffers t*8..t*8+8 and writes round numbers into them.
                    for round in 1..=50u8 {
                        fill(m, t * 8..t * 8 + 8, round);
                        if round % 7 == 0 {
                            cfg.fail_next_sync.store(true, Relaxed);
                        }
                        if m.msync(0, m.len()).is_ok() {
                            for i in t * 8..t * 8 + 8 {
                                let d = durable(mem, i);
                                assert!(d >= round, "buffer {i}: msync Ok at {round}, store {d}");
                            }
                        }
                    }
                });
            }
        });
        // Nothing was written outside msync, so nothing is poisoned.
        m.msync(0, m.len()).unwrap();
        assert!((0..32).all(|i| durable(&mem, i) == 50));
        m.unmap().unwrap();
    });
}
