//! The server goes away under a read-write mapping: reads fail naming the object, dirty data
//! stays dirty, and once the server is back a retried msync lands the data. The test runs a
//! SeaweedFS of its own (scripts/s3-server.sh) so that stopping it disturbs no other test.

mod common;

use ucache::{CacheOptions, Error};

use common::{Outage, Plain, OUTAGE_BS as BS};

#[test]
fn server_outage_keeps_dirty_data_until_msync_succeeds() {
    // Bound in this order so that they drop in reverse: the mapping first, the server last.
    let Some(Outage {
        server,
        prefix,
        want,
        cache,
        mapping: m,
    }) = Outage::start(
        "server_outage_keeps_dirty_data_until_msync_succeeds",
        CacheOptions::new(64 * BS as u64),
        16,
        8,
        8,
    )
    else {
        return;
    };

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
    let plain = Plain::new(&server.endpoint);
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
