//! The async pins over a real S3 server (SeaweedFS from scripts/s3-server.sh): many
//! concurrent misses from one current_thread runtime, each a GET awaited natively, every byte
//! checked against an independent upload; blocking pins of the same mapping beside them.

mod common;

use std::sync::Arc;

use ucache::{Cache, CacheOptions, MapOptions, Mapping};
use ucache_object::S3Store;

use common::{config, data, endpoint, unique, Plain};

const BS: usize = 16 << 10;

fn check(m: &Mapping, want: &[u8], i: u64, got: &[u8]) {
    let off = i as usize * BS;
    let n = (m.len() as usize - off).min(BS);
    assert_eq!(&got[..n], &want[off..off + n], "buffer {i}");
}

#[test]
fn many_async_misses_from_one_thread_match_an_independent_upload() {
    let Some(ep) = endpoint("many_async_misses_from_one_thread_match_an_independent_upload") else {
        return;
    };
    let key = unique("async");
    // Not a whole number of buffers: the last buffer is partial.
    let len = 128 * BS + 1000;
    let want = Arc::new(data(len, 3));
    Plain::new(&ep).put(&key, want.to_vec());
    let store = S3Store::new(config(&ep, "")).unwrap();
    // A quarter of the object fits: loads, evictions and reloads all happen.
    let cache = Cache::new(CacheOptions::new(32 * BS as u64).batch(4)).unwrap();
    let m = Arc::new(
        cache
            .map(Arc::new(store), &key, MapOptions::new().buffer_size(BS))
            .unwrap(),
    );
    let (tasks, per_task) = (64u64, 12u64);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    for t in 0..tasks {
        let (m, want) = (m.clone(), want.clone());
        local.spawn_local(async move {
            for k in 0..per_task {
                let i = (t * 37 + k * 11) % m.buffers();
                let g = m.pin_shared_async(i).await.unwrap();
                tokio::task::yield_now().await;
                check(&m, &want, i, &g);
            }
        });
    }
    // Blocking pins of the same mapping from another thread meanwhile.
    let blocking = {
        let (m, want) = (m.clone(), want.clone());
        std::thread::spawn(move || {
            for k in 0..100u64 {
                let i = (k * 5) % m.buffers();
                check(&m, &want, i, &m.pin_shared(i).unwrap());
            }
        })
    };
    rt.block_on(local);
    blocking.join().unwrap();
    let s = m.stats();
    assert_eq!(s.hits + s.misses + s.waits, tasks * per_task + 100, "{s:?}");
    assert!(
        s.evictions > 0 && s.misses > 0 && s.read_failures == 0,
        "{s:?}"
    );
    // ensure_cached_async: a run of buffers, GETs in flight together.
    m.evict(0, m.len()).unwrap();
    rt.block_on(m.ensure_cached_async(0, 16 * BS as u64))
        .unwrap();
    for i in 0..16 {
        check(&m, &want, i, &m.pin_shared(i).unwrap());
    }
    assert!(cache.used() <= 32 * BS as u64);
}

#[test]
fn a_replaced_object_is_a_typed_error_for_async_pins() {
    let Some(ep) = endpoint("a_replaced_object_is_a_typed_error_for_async_pins") else {
        return;
    };
    let key = unique("async-changed");
    let plain = Plain::new(&ep);
    plain.put(&key, data(8 * BS, 1));
    let store = S3Store::new(config(&ep, "")).unwrap();
    let cache = Cache::new(CacheOptions::new(8 * BS as u64).batch(1)).unwrap();
    let m = cache
        .map(Arc::new(store), &key, MapOptions::new().buffer_size(BS))
        .unwrap();
    plain.put(&key, data(8 * BS, 2));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let e = rt.block_on(m.pin_shared_async(0)).map(drop).unwrap_err();
    assert!(matches!(e, ucache::Error::ObjectChanged { .. }), "{e}");
    assert_eq!(m.stats().read_failures, 1);
    assert_eq!(cache.used(), 0);
}
