//! ucache over a real S3 server (SeaweedFS from scripts/s3-server.sh): every byte read through
//! the cache matches what an independent client uploaded or reads back.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use ucache::store::Store;
use ucache::{Cache, CacheOptions, Error, MapOptions};
use ucache_object::{S3Config, S3Object, S3Store};

use common::{config, data, endpoint, unique, Plain};

const BS: usize = 16 << 10;

#[test]
fn pinned_reads_match_an_independent_upload() {
    let Some(ep) = endpoint("pinned_reads_match_an_independent_upload") else {
        return;
    };
    let key = unique("pinned");
    // Not a whole number of buffers: the last buffer is partial.
    let len = 64 * BS + 1000;
    let want = data(len, 1);
    Plain::new(&ep).put(&key, want.clone());

    let store = Arc::new(S3Store::new(config(&ep, "")).unwrap());
    // A quarter of the object fits: loads, evictions and reloads all happen.
    let cache = Cache::new(CacheOptions::new(16 * BS as u64).batch(4)).unwrap();
    let m = cache
        .map(store, &key, MapOptions::new().buffer_size(BS))
        .unwrap();
    assert_eq!(m.len(), len as u64);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for _ in 0..300 {
        let i = rng.gen_range(0..m.buffers());
        let g = m.pin_shared(i).unwrap();
        let off = i as usize * BS;
        let n = (len - off).min(BS);
        assert_eq!(&g[..n], &want[off..off + n], "buffer {i}");
    }
    // A batch of adjacent misses (one coalesced GET) and a scattered one.
    m.evict(0, m.len()).unwrap();
    m.ensure_cached_buffers(&(8..16).collect::<Vec<_>>())
        .unwrap();
    m.ensure_cached_buffers(&[1, 3, 5, 40, 64]).unwrap();
    for i in [1u64, 3, 5, 8, 9, 15, 40, 64] {
        let g = m.pin_shared(i).unwrap();
        let off = i as usize * BS;
        let n = (len - off).min(BS);
        assert_eq!(&g[..n], &want[off..off + n], "buffer {i}");
    }
    let st = cache.stats();
    assert!(st.evictions > 0 && st.misses > 0, "{st:?}");
}

/// Reads buffers `order` of `key` (each `BS`, at its own index) as one batch through `cfg`;
/// returns the object's request counts and the memory read into (buffers not asked for left
/// zero).
fn read_one_batch(
    cfg: S3Config,
    key: &str,
    order: &[u64],
) -> (ucache::store::StoreRequests, Vec<u8>) {
    use ucache::store::{IoBuf, Object};
    let store = S3Store::new(cfg).unwrap();
    let o = store.open_object(key).unwrap();
    let mut mem = vec![0u8; 16 * BS];
    let base = mem.as_mut_ptr();
    let mut reqs: Vec<IoBuf> = order
        .iter()
        .map(|&i| {
            // SAFETY: disjoint BS-sized slots of `mem`, untouched until read_batch returns.
            unsafe { IoBuf::new(base.add(i as usize * BS), BS, i * BS as u64) }
        })
        .collect();
    let mut out = Vec::new();
    o.read_batch(&mut reqs, &mut out);
    drop(reqs);
    assert!(
        out.iter().all(|r| matches!(r, Ok(n) if *n == BS)),
        "{out:?}"
    );
    let counted = o.requests().unwrap();
    assert_eq!(counted.reads, o.gets());
    (counted, mem)
}

#[test]
fn misses_of_a_batch_share_gets_across_small_gaps() {
    let Some(ep) = endpoint("misses_of_a_batch_share_gets_across_small_gaps") else {
        return;
    };
    let key = unique("coalesce");
    let want = data(16 * BS, 9);
    Plain::new(&ep).put(&key, want.clone());
    // Buffers 2..10 out of order, plus 12 and 14.
    let order = [5u64, 2, 9, 3, 4, 12, 8, 6, 7, 14];
    let check = |mem: &[u8]| {
        for i in 0..16u64 {
            let at = i as usize * BS;
            if order.contains(&i) {
                assert_eq!(&mem[at..at + BS], &want[at..at + BS], "buffer {i}");
            } else {
                // A gap read through is dropped, never written where nobody asked.
                assert!(mem[at..at + BS].iter().all(|&b| b == 0), "buffer {i}");
            }
        }
    };
    // Only misses that touch: runs 2..10, 12, 14 are three GETs of exactly their bytes.
    let (adjacent, mem) = read_one_batch(config(&ep, "").coalesce_gap(0), &key, &order);
    assert_eq!(adjacent.reads, 3);
    assert_eq!(adjacent.bytes_read, 10 * BS as u64);
    check(&mem);
    // Gaps up to one buffer read through: 2..10, and 12..15 with 13 read and dropped.
    let (one, mem) = read_one_batch(config(&ep, "").coalesce_gap(BS), &key, &order);
    assert_eq!((one.reads, one.bytes_read), (2, 11 * BS as u64));
    check(&mem);
    // Up to two: one GET of 2..15, gaps 10, 11 and 13 included.
    let (two, mem) = read_one_batch(config(&ep, "").coalesce_gap(2 * BS), &key, &order);
    assert_eq!((two.reads, two.bytes_read), (1, 13 * BS as u64));
    check(&mem);
    // The default gap (1 MiB) reads through them too.
    let (default, _) = read_one_batch(config(&ep, ""), &key, &order);
    assert_eq!(default.reads, 1);
}

#[test]
fn transparent_loads_match_an_independent_upload() {
    let Some(ep) = endpoint("transparent_loads_match_an_independent_upload") else {
        return;
    };
    let key = unique("transparent");
    let len = 48 * BS;
    let want = data(len, 2);
    Plain::new(&ep).put(&key, want.clone());
    let store = Arc::new(S3Store::new(config(&ep, "")).unwrap());
    let cache = Cache::new(CacheOptions::new(8 * BS as u64).batch(2)).unwrap();
    let m = cache
        .map(
            store,
            &key,
            MapOptions::new().buffer_size(BS).transparent(true),
        )
        .unwrap();
    // SAFETY: the mapping's memory is valid for its length while `m` lives; atomics make the
    // plain loads of other threads (the fault path) sound to share with.
    let words = unsafe { std::slice::from_raw_parts(m.as_ptr() as *const AtomicU64, len / 8) };
    for round in 0..2 {
        for (k, w) in words.iter().enumerate() {
            let x = w.load(Ordering::Relaxed).to_le_bytes();
            assert_eq!(&x[..], &want[k * 8..k * 8 + 8], "round {round} word {k}");
        }
    }
    assert!(cache.stats().faults >= 48);
}

#[test]
fn chunked_mapping_round_trips_through_a_fresh_cache_and_a_plain_client() {
    let Some(ep) = endpoint("chunked_mapping_round_trips") else {
        return;
    };
    let prefix = unique("chunked");
    let chunk = 4 * BS as u64;
    let len = 40 * BS;
    let want = data(len, 3);
    let store = Arc::new(S3Store::chunked(config(&ep, ""), chunk).unwrap());
    {
        let cache = Cache::new(CacheOptions::new(8 * BS as u64).batch(2)).unwrap();
        let m = cache
            .map(
                store.clone(),
                &prefix,
                MapOptions::new()
                    .buffer_size(BS)
                    .writable(true)
                    .create(true)
                    .len(len as u64),
            )
            .unwrap();
        // Buffers smaller than chunks: every write-back is a read-modify-write, and evictions
        // write some chunks before msync writes the rest.
        for i in (0..40u64).rev() {
            let mut g = m.pin_exclusive(i).unwrap();
            let off = i as usize * BS;
            g.copy_from_slice(&want[off..off + BS]);
        }
        m.msync(0, m.len()).unwrap();
        m.unmap().unwrap();
    }
    // A fresh cache reads what was written.
    let cache = Cache::new(CacheOptions::new(8 * BS as u64).batch(2)).unwrap();
    let m = cache
        .map(store.clone(), &prefix, MapOptions::new().buffer_size(BS))
        .unwrap();
    assert_eq!(m.len(), len as u64);
    for i in 0..40u64 {
        let off = i as usize * BS;
        assert_eq!(
            &m.pin_shared(i).unwrap()[..],
            &want[off..off + BS],
            "buffer {i}"
        );
    }
    // And so does any other S3 client, chunk by chunk.
    let plain = Plain::new(&ep);
    let obj = store
        .open_chunked(&prefix, ucache::store::OpenOptions::read_only())
        .unwrap();
    for c in 0..(len as u64 / chunk) {
        let got = plain.get(&obj.chunk_key(c)).expect("chunk written");
        let off = (c * chunk) as usize;
        assert_eq!(&got[..], &want[off..off + chunk as usize], "chunk {c}");
    }
    let manifest = String::from_utf8(plain.get(&format!("{prefix}/manifest")).unwrap()).unwrap();
    assert!(manifest.contains(&format!("length {len}")), "{manifest}");
}

#[test]
fn missing_bucket_and_missing_key_are_told_apart() {
    let Some(ep) = endpoint("missing_bucket_and_missing_key_are_told_apart") else {
        return;
    };
    let cache = Cache::new(CacheOptions::new(1 << 20)).unwrap();
    let store = Arc::new(S3Store::new(config(&ep, "")).unwrap());
    let key = unique("missing");
    match cache.map(store, &key, MapOptions::new()) {
        Err(Error::NotFound { object }) => assert!(object.ends_with(&key), "{object}"),
        other => panic!("expected NotFound, got {:?}", other.err()),
    }
    let cfg = S3Config::from_env("s3://ucache-no-such-bucket/k")
        .unwrap()
        .endpoint(&ep);
    // A missing bucket is told apart from a missing key (NoSuchBucket, not NoSuchKey).
    match S3Object::open(&cfg) {
        Err(Error::BucketNotFound { bucket, object }) => {
            assert_eq!(bucket, "ucache-no-such-bucket");
            assert_eq!(object, "s3://ucache-no-such-bucket/k");
        }
        other => panic!("expected BucketNotFound, got {:?}", other.err()),
    }
    // A chunked prefix that was never created.
    let chunked = S3Store::chunked(config(&ep, ""), 1 << 16).unwrap();
    assert!(matches!(
        chunked.open(
            &unique("nochunks"),
            ucache::store::OpenOptions::read_write()
        ),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn wrong_credentials_are_permission_denied() {
    let Some(ep) = endpoint("wrong_credentials_are_permission_denied") else {
        return;
    };
    let key = unique("creds");
    Plain::new(&ep).put(&key, data(4096, 4));
    let cfg = config(&ep, &key)
        .credentials("ucache-wrong-key", "ucache-wrong-secret")
        .retries(0, std::time::Duration::from_secs(2));
    match S3Object::open(&cfg) {
        Err(Error::Io { object, source, .. }) => {
            assert_eq!(object, cfg.url());
            assert_eq!(
                source.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{source}"
            );
            assert!(!source.to_string().contains("ucache-wrong-secret"));
        }
        other => panic!(
            "expected a PermissionDenied Io error, got {:?}",
            other.err()
        ),
    }
}

#[test]
fn range_past_end_is_refused_naming_the_object() {
    let Some(ep) = endpoint("range_past_end_is_refused_naming_the_object") else {
        return;
    };
    let key = unique("short");
    Plain::new(&ep).put(&key, data(3 * BS, 5));
    let store = Arc::new(S3Store::new(config(&ep, "")).unwrap());
    let cache = Cache::new(CacheOptions::new(1 << 20)).unwrap();
    match cache.map(
        store.clone(),
        &key,
        MapOptions::new().buffer_size(BS).len(4 * BS as u64),
    ) {
        Err(Error::BeyondObject {
            object, object_len, ..
        }) => {
            assert!(object.ends_with(&key));
            assert_eq!(object_len, 3 * BS as u64);
        }
        other => panic!("expected BeyondObject, got {:?}", other.err()),
    }
    // Reading at the end returns nothing rather than an error, like a file.
    let o = store.open_object(&key).unwrap();
    let mut buf = vec![0u8; BS];
    use ucache::store::Object;
    assert_eq!(o.read_at(&mut buf, 3 * BS as u64).unwrap(), 0);
    // A direct ranged GET past the end is refused before it reaches the server.
    let r = o.get_ranges(&[0..BS as u64, 2 * BS as u64..4 * BS as u64]);
    for e in r {
        let e = e.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains(&key), "{e}");
    }
    assert_eq!(o.gets(), 0);
    // A write through a read-only object is refused with the object's name.
    let e = o.write_at(&buf, 0).unwrap_err();
    assert!(e.to_string().contains(&key), "{e}");
}

#[test]
fn overwritten_object_is_object_changed() {
    let Some(ep) = endpoint("overwritten_object_is_object_changed") else {
        return;
    };
    let key = unique("changed");
    let plain = Plain::new(&ep);
    plain.put(&key, data(8 * BS, 6));
    let store = Arc::new(S3Store::new(config(&ep, "")).unwrap());
    let cache = Cache::new(CacheOptions::new(1 << 20)).unwrap();
    // No readahead: buffer 5 must still be unread when the object changes.
    let m = cache
        .map(
            store,
            &key,
            MapOptions::new().buffer_size(BS).readahead(false),
        )
        .unwrap();
    let first = m.pin_shared(0).unwrap()[..16].to_vec();
    plain.put(&key, data(8 * BS, 7));
    match m.pin_shared(5) {
        Err(Error::ObjectChanged { object }) => assert!(object.ends_with(&key), "{object}"),
        other => panic!("expected ObjectChanged, got {:?}", other.err()),
    }
    // What was cached before is still the old version, never a mix.
    assert_eq!(&m.pin_shared(0).unwrap()[..16], &first[..]);
}
