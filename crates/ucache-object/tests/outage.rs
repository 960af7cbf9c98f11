//! The server goes away under a read-write mapping: reads fail naming the object, dirty data
//! stays dirty, and once the server is back a retried msync lands the data. The test runs a
//! SeaweedFS of its own (scripts/s3-server.sh) so that stopping it disturbs no other test.

mod common;

use std::sync::Arc;
use std::time::Duration;

use ucache::{Cache, CacheOptions, Error, MapOptions};
use ucache_object::S3Store;

use common::{config, data, endpoint, unique, OwnServer, Plain};

const BS: usize = 16 << 10;

#[test]
fn server_outage_keeps_dirty_data_until_msync_succeeds() {
    // The shared server only tells us whether S3 tests are to run; this one starts its own.
    if endpoint("server_outage_keeps_dirty_data_until_msync_succeeds").is_none() {
        return;
    }
    let server = OwnServer::start();
    let ep = server.endpoint.clone();
    let prefix = unique("outage");
    let want = data(8 * BS, 8);
    let cfg = config(&ep, "")
        .retries(1, Duration::from_secs(2))
        .timeouts(Duration::from_secs(30), Duration::from_secs(5));
    let store = Arc::new(S3Store::chunked(cfg, BS as u64).unwrap());
    let cache = Cache::new(CacheOptions::new(64 * BS as u64)).unwrap();
    let m = cache
        .map(
            store,
            &prefix,
            MapOptions::new()
                .buffer_size(BS)
                .writable(true)
                .create(true)
                .len(16 * BS as u64),
        )
        .unwrap();
    for i in 0..8u64 {
        let off = i as usize * BS;
        m.pin_exclusive(i)
            .unwrap()
            .copy_from_slice(&want[off..off + BS]);
    }

    server.stop();
    // A miss fails with the object's name, and leaves the buffer unloaded.
    match m.pin_shared(12) {
        Err(e) => assert!(e.to_string().contains(&prefix), "{e}"),
        Ok(_) => panic!("a read with the server down succeeded"),
    }
    // The write-back fails, naming the object; the data stays dirty and resident.
    match m.msync(0, m.len()) {
        Err(Error::WritebackFailed { failed, first }) => {
            assert_eq!(failed, 8);
            assert!(first.to_string().contains(&prefix), "{first}");
        }
        other => panic!("expected WritebackFailed, got {other:?}"),
    }
    for i in 0..8u64 {
        assert!(m.state(i).unwrap().dirty(), "buffer {i} must stay dirty");
    }
    assert!(cache.stats().writeback_failures >= 8);

    server.restart();
    // The retried msync writes every dirty buffer.
    m.msync(0, m.len()).unwrap();
    for i in 0..8u64 {
        assert!(!m.state(i).unwrap().dirty(), "buffer {i} clean after msync");
    }
    let plain = Plain::new(&ep);
    for i in 0..8u64 {
        let off = i as usize * BS;
        let got = plain
            .get(&format!("{prefix}/{i:08x}"))
            .expect("chunk written after the restart");
        assert_eq!(&got[..], &want[off..off + BS], "chunk {i}");
    }
    // And the miss that failed during the outage now succeeds (zeros: never written).
    assert!(m.pin_shared(12).unwrap().iter().all(|&b| b == 0));
}
