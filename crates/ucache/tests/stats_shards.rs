//! Statistics stay exact when more threads count than there are owned shards. A test binary
//! of its own, with one test: which shard a thread gets depends on how many threads of the
//! process counted before it.

use std::sync::{Arc, Barrier};

use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;

/// This thread counts first and owns a shard, which it updates with plain stores. Then 63
/// threads count once each, so the next thread is the 65th to count: before the fix it shared
/// this thread's shard, and its atomic adds raced the plain stores (a review run lost 1009 of
/// 6M hits). Both now count at once; every pin of a cached buffer is one hit.
#[test]
fn hits_are_exact_when_threads_outnumber_the_owned_shards() {
    let store = MemoryStore::new();
    store.insert("o", vec![7; 8 * BS]);
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(4)).unwrap();
    let m = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
    m.ensure_cached(0, m.len()).unwrap();
    for _ in 0..63 {
        std::thread::scope(|s| {
            s.spawn(|| drop(m.pin_shared(0).unwrap()));
        });
    }
    let per = 2_000_000u64;
    let before = cache.stats().hits;
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            for k in 0..per {
                drop(m.pin_shared(k % 8).unwrap());
            }
        });
        start.wait();
        for k in 0..per {
            drop(m.pin_shared(k % 8).unwrap());
        }
    });
    let got = cache.stats().hits - before;
    assert_eq!(got, 2 * per, "lost {} hits", 2 * per - got);
}
