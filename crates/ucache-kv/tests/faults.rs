//! Faults: a torn last log record, a truncated data file, a missing data file, and IO errors
//! from the store. Each is a typed error (or a clean recovery) and loses no committed batch.
//!
//! A crash is simulated by leaking the store (`std::mem::forget`): nothing is written back or
//! checkpointed, so the data file holds only what eviction wrote, and the log everything
//! committed since the last checkpoint.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use common::*;
use ucache::store::{FaultStore, MemoryStore, Store};
use ucache_kv::{Direction, Kv, KvError, WriteBatch};

fn fill(kv: &Kv, from: u64, to: u64, version: u64) {
    for chunk in (from..to).collect::<Vec<_>>().chunks(50) {
        let mut b = WriteBatch::new();
        for &n in chunk {
            b.put(key(n), value(n, version, 100));
        }
        kv.write(&b).unwrap();
    }
}

fn check(kv: &Kv, from: u64, to: u64, version: u64) {
    for n in from..to {
        assert_eq!(
            kv.get(&key(n)).unwrap(),
            Some(value(n, version, 100)),
            "key {n}"
        );
    }
}

#[test]
fn a_torn_last_record_drops_that_batch_whole() {
    let store = memory_store();
    let o = options(store.clone(), 4096, 64);
    let kv = Kv::open(o.clone()).unwrap();
    fill(&kv, 0, 2000, 1);
    // The last batch: updates spread over many leaves.
    let mut b = WriteBatch::new();
    for n in (0..2000).step_by(97) {
        b.put(key(n), value(n, 2, 100));
    }
    kv.write(&b).unwrap();
    std::mem::forget(kv);
    let mut log = store.get("wal").unwrap();
    let n = log.len();
    log.truncate(n - 7); // the last record loses its tail
    store.insert("wal", log);
    let kv = Kv::open(o.clone()).unwrap();
    check(&kv, 0, 2000, 1); // every earlier batch, and none of the torn one
                            // A flipped byte in the middle of the last record does the same.
    kv.write(&b).unwrap();
    std::mem::forget(kv);
    let mut log = store.get("wal").unwrap();
    let n = log.len();
    log[n - 300] ^= 0x40;
    store.insert("wal", log);
    let kv = Kv::open(o).unwrap();
    check(&kv, 0, 2000, 1);
    assert_eq!(
        kv.scan(None, None, Direction::Forward, usize::MAX)
            .unwrap()
            .len(),
        2000
    );
}

#[test]
fn a_truncated_or_missing_data_file_is_refused() {
    let store = memory_store();
    let mut o = options(store.clone(), 4096, 16);
    o.capacity_pages = 4096;
    let kv = Kv::open(o.clone()).unwrap();
    fill(&kv, 0, 1500, 1);
    kv.close().unwrap();
    fill_after_checkpoint_then_crash(&store, &o);
    let whole = store.get("data").unwrap();
    let mut short = whole.clone();
    short.truncate(whole.len() / 2);
    store.insert("data", short);
    assert!(matches!(Kv::open(o.clone()), Err(KvError::Corrupt(m)) if m.contains("truncated")));
    // Nothing was changed by the refusal: with the file back, everything is there.
    assert!(
        store.get("wal").unwrap().len() > 4096,
        "the log holds batches to replay"
    );
    store.insert("data", Vec::new());
    assert!(matches!(Kv::open(o.clone()), Err(KvError::Corrupt(m)) if m.contains("missing")));
    store.insert("data", whole);
    let kv = Kv::open(o).unwrap();
    check(&kv, 0, 1500, 1);
    check(&kv, 1500, 1600, 3);
}

/// A data file of the previous format (8-byte slots, no key heads) is refused with a typed
/// error naming the format, and left as it was; it is not read as format 2.
#[test]
fn a_data_file_of_the_old_format_is_refused() {
    let store = memory_store();
    let o = options(store.clone(), 4096, 16);
    let kv = Kv::open(o.clone()).unwrap();
    fill(&kv, 0, 300, 1);
    kv.close().unwrap();
    let mut data = store.get("data").unwrap();
    assert_eq!(data[8..16], ucache_kv::meta::MAGIC.to_le_bytes());
    data[8..16].copy_from_slice(&ucache_kv::meta::MAGIC_V1.to_le_bytes());
    store.insert("data", data.clone());
    assert!(matches!(Kv::open(o.clone()), Err(KvError::Corrupt(m)) if m.contains("format 1")));
    assert_eq!(
        store.get("data").unwrap(),
        data,
        "the refusal changed nothing"
    );
    data[8..16].copy_from_slice(&ucache_kv::meta::MAGIC.to_le_bytes());
    store.insert("data", data);
    check(&Kv::open(o).unwrap(), 0, 300, 1);
}

/// Commits more after a checkpoint and crashes, so the log holds batches.
fn fill_after_checkpoint_then_crash(store: &Arc<MemoryStore>, o: &ucache_kv::KvOptions) {
    let kv = Kv::open(o.clone()).unwrap();
    fill(&kv, 1500, 1600, 3);
    std::mem::forget(kv);
    let _ = store;
}

#[test]
fn io_errors_are_typed_and_lose_nothing_committed() {
    let inner = memory_store();
    let faults = Arc::new(FaultStore::new(inner.clone() as Arc<dyn Store>));
    let cfg = faults.config().clone();
    let o = options(faults.clone(), 4096, 16);
    let kv = Kv::open(o.clone()).unwrap();
    fill(&kv, 0, 1500, 1);

    // Reads fail: a get of an evicted page is a typed cache error; nothing changes.
    cfg.fail_reads.store(true, Ordering::SeqCst);
    let mut failed_gets = 0;
    for n in 0..1500 {
        match kv.get(&key(n)) {
            Ok(v) => assert_eq!(v, Some(value(n, 1, 100))),
            Err(KvError::Cache(_)) => failed_gets += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(failed_gets > 0, "some pages had to be read");
    // A batch that needs a page it cannot read is undone whole.
    let mut b = WriteBatch::new();
    for n in (0..1500).step_by(50) {
        b.put(key(n), value(n, 9, 100));
    }
    assert!(matches!(kv.write(&b), Err(KvError::Cache(_))));
    cfg.fail_reads.store(false, Ordering::SeqCst);
    check(&kv, 0, 1500, 1);

    // The log cannot be written: the commit reports it, and the store refuses writes from
    // then on (the pages in memory hold the failed batch; only a reopen forgets it).
    cfg.fail_writes.store(true, Ordering::SeqCst);
    assert!(matches!(
        kv.put(&key(1), b"lost"),
        Err(KvError::LogFailed(_))
    ));
    cfg.fail_writes.store(false, Ordering::SeqCst);
    assert!(matches!(
        kv.put(&key(2), b"refused"),
        Err(KvError::LogFailed(_))
    ));
    std::mem::forget(kv);
    let kv = Kv::open(o.clone()).unwrap();
    check(&kv, 0, 1500, 1); // neither the failed commit nor the refused one

    // The log's sync fails after its write: the commit's outcome is unknown to the caller
    // (the write may have reached the disk), but it is all or nothing after a reopen.
    cfg.fail_next_sync.store(true, Ordering::SeqCst);
    let mut b = WriteBatch::new();
    b.put(key(3), b"both".to_vec())
        .put(key(1400), b"both".to_vec());
    assert!(matches!(kv.write(&b), Err(KvError::LogFailed(_))));
    std::mem::forget(kv);
    let kv = Kv::open(o.clone()).unwrap();
    let (a, z) = (kv.get(&key(3)).unwrap(), kv.get(&key(1400)).unwrap());
    assert_eq!(
        a.as_deref() == Some(b"both"),
        z.as_deref() == Some(b"both"),
        "{a:?} {z:?}"
    );
    let mut b = WriteBatch::new();
    b.put(key(3), value(3, 1, 100))
        .put(key(1400), value(1400, 1, 100));
    kv.write(&b).unwrap();
    check(&kv, 0, 1500, 1);

    // Writes to the data file fail at a checkpoint: a typed error, and the log still has
    // everything, so a crash now loses nothing.
    fill(&kv, 0, 300, 4);
    cfg.fail_writes.store(true, Ordering::SeqCst);
    let e = kv.checkpoint().unwrap_err();
    assert!(
        matches!(e, KvError::Cache(_) | KvError::LogFailed(_)),
        "{e}"
    );
    cfg.fail_writes.store(false, Ordering::SeqCst);
    std::mem::forget(kv);
    let kv = Kv::open(o).unwrap();
    check(&kv, 0, 300, 4);
    check(&kv, 300, 1500, 1);
}
