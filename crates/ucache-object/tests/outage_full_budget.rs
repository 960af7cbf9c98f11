//! The server goes away while the cache's whole budget is dirty (issue 23, item 5): a miss,
//! which can free memory only by writing dirty buffers back, fails once the budget's wait ends
//! with that write-back's failure (naming the object), and so do eviction and msync; every
//! dirty byte stays dirty and resident; once the server is back, msync lands it all, checked
//! byte for byte through a fresh mapping. The test runs a SeaweedFS of its own
//! (scripts/s3-server.sh), as outage.rs does, so that stopping it disturbs no other test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use ucache::{Cache, CacheOptions, Error, MapOptions};

use common::{Outage, OUTAGE_BS as BS};
/// Buffers the budget holds: all dirty when the server stops.
const BUDGET: u64 = 16;
/// Buffers (chunks) in the object.
const LEN: u64 = 48;
/// A buffer never written, missed during the outage.
const MISS: u64 = 40;

/// A write-back failure of the object's chunks, naming the object.
fn assert_writeback_failed(r: ucache::Result<()>, prefix: &str, what: &str) -> String {
    match r {
        Err(e @ Error::WritebackFailed { .. }) => {
            let Error::WritebackFailed { failed, first } = &e else {
                unreachable!()
            };
            assert!(*failed >= 1 && *failed as u64 <= BUDGET, "{what}: {e}");
            assert!(
                matches!(**first, Error::Io { op: "write", .. }),
                "{what}: {e}"
            );
            assert!(first.to_string().contains(prefix), "{what}: {e}");
            e.to_string()
        }
        other => panic!("{what}: expected WritebackFailed naming the object, got {other:?}"),
    }
}

#[test]
fn server_outage_with_the_budget_dirty_keeps_every_byte() {
    // Bound in this order so that they drop in reverse: the mapping first, the server last.
    let Some(Outage {
        server,
        prefix,
        want,
        cache,
        mapping: m,
    }) = Outage::start(
        "server_outage_with_the_budget_dirty_keeps_every_byte",
        CacheOptions::new(BUDGET * BS as u64)
            .batch(4)
            .budget_wait(Duration::from_millis(200)),
        LEN,
        BUDGET,
        23,
    )
    else {
        return;
    };
    assert_eq!(cache.used(), BUDGET * BS as u64, "the budget is all dirty");

    server.stop();
    let mut seen = Vec::new();
    // The miss needs memory, which only a write-back could free: it fails with that
    // write-back's error, not an unexplained BudgetExhausted.
    seen.push(format!(
        "miss: {}",
        assert_writeback_failed(m.pin_shared(MISS).map(drop), &prefix, "miss")
    ));
    seen.push(format!(
        "evict: {}",
        assert_writeback_failed(m.evict(0, m.len()), &prefix, "evict")
    ));
    seen.push(format!(
        "msync: {}",
        assert_writeback_failed(m.msync(0, m.len()), &prefix, "msync")
    ));
    for i in 0..BUDGET {
        let w = m.state(i).unwrap();
        assert!(w.dirty(), "buffer {i} must stay dirty: {w:?}");
    }
    assert_eq!(m.resident(), BUDGET, "every dirty buffer stays resident");
    let failures = cache.stats().writeback_failures;
    assert!(failures >= 2 * BUDGET, "{failures}");

    server.restart();
    m.msync(0, m.len()).unwrap();
    for i in 0..BUDGET {
        assert!(!m.state(i).unwrap().dirty(), "buffer {i} clean after msync");
    }
    // The miss that failed is served now.
    assert!(m.pin_shared(MISS).unwrap().iter().all(|&b| b == 0));
    m.unmap().unwrap();

    // Every byte, through a fresh store, cache and mapping.
    let fresh = Cache::new(CacheOptions::new(64 * BS as u64)).unwrap();
    let again = fresh
        .map(
            Arc::new(Outage::store(&server.endpoint)),
            &prefix,
            MapOptions::new().buffer_size(BS),
        )
        .unwrap();
    assert_eq!(again.len(), LEN * BS as u64);
    let mut got = vec![0u8; LEN as usize * BS];
    again.read(0, &mut got).unwrap();
    assert!(
        got[..want.len()] == want[..],
        "the dirty data, after the restart"
    );
    assert!(
        got[want.len()..].iter().all(|&b| b == 0),
        "the rest, never written"
    );
    eprintln!(
        "S3 outage: dirty held through the outage {} B; verified after restart {} B; \
         write-back failures {failures}",
        want.len(),
        got.len()
    );
    for s in &seen {
        eprintln!("  {s}");
    }
}
