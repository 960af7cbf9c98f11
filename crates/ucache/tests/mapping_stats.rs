//! `Mapping::stats`: each mapping's share of the cache's counters. Events land in the mapping
//! they concern (an eviction in the mapping whose buffer went, whoever needed the room), and
//! the mappings' counters sum to the cache's, `budget_stalls` aside (the budget's own).

use std::sync::Arc;

use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions, StatsSnapshot};

const BS: u64 = 4096;

fn sum(a: &StatsSnapshot, b: &StatsSnapshot) -> StatsSnapshot {
    let mut s = a.clone();
    s.hits += b.hits;
    s.misses += b.misses;
    s.waits += b.waits;
    s.evictions += b.evictions;
    s.evictions_ahead += b.evictions_ahead;
    s.eviction_cancels += b.eviction_cancels;
    s.writebacks += b.writebacks;
    s.writeback_failures += b.writeback_failures;
    s.read_failures += b.read_failures;
    s.bytes_read += b.bytes_read;
    s.bytes_written += b.bytes_written;
    s.prefetches += b.prefetches;
    s.prefetch_used += b.prefetch_used;
    s.prefetch_wasted += b.prefetch_wasted;
    s.bypasses += b.bypasses;
    s.store_reads += b.store_reads;
    s.store_reads_overlapped += b.store_reads_overlapped;
    for (x, y) in s.miss_latency.iter_mut().zip(&b.miss_latency) {
        *x += y;
    }
    s
}

#[test]
fn each_mapping_counts_its_own_events_and_they_sum_to_the_cache() {
    let store = Arc::new(MemoryStore::new());
    store.insert("a", vec![1; 16 * BS as usize]);
    store.insert("b", vec![2; 16 * BS as usize]);
    // Synchronous work only, so no IO thread is still counting when the sums are compared.
    let cache = Cache::new(
        CacheOptions::new(16 * BS)
            .batch(4)
            .background_eviction(false),
    )
    .unwrap();
    // Without readahead, every count below is one the test asked for.
    let a = cache
        .map(
            store.clone(),
            "a",
            MapOptions::new().writable(true).readahead(false),
        )
        .unwrap();
    let b = cache
        .map(store, "b", MapOptions::new().readahead(false))
        .unwrap();
    assert_eq!(
        a.stats(),
        StatsSnapshot {
            miss_latency: vec![0; ucache::StatsSnapshot::LATENCY_BUCKETS],
            ..Default::default()
        }
    );

    // a fills the budget, dirtying half of it.
    for i in 0..16 {
        let mut g = a.pin_exclusive(i).unwrap();
        if i % 2 == 0 {
            g.write::<u8>(0, 9);
        }
    }
    for i in 0..16 {
        drop(a.pin_shared(i).unwrap());
    }
    let sa = a.stats();
    assert_eq!((sa.misses, sa.hits), (16, 16));
    assert_eq!(sa.miss_latency.iter().sum::<u64>(), 16);
    assert_eq!(b.stats().misses, 0);

    // b's misses need room: the evictions (and write-backs) are a's, the misses b's.
    for i in 0..8 {
        drop(b.pin_shared(i).unwrap());
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(
        (sb.misses, sb.hits, sb.evictions, sb.writebacks),
        (8, 0, 0, 0)
    );
    assert!(sa.evictions >= 8, "{sa:?}");
    assert!(sa.writebacks >= 1, "{sa:?}");
    assert_eq!(sb.bytes_read, 8 * BS);
    assert_eq!(sb.bytes_written, 0);

    // Summed over both mappings: the cache's counters.
    let mut whole = cache.stats();
    whole.budget_stalls = 0;
    assert_eq!(sum(&sa, &sb), whole);
    // budget_stalls is the budget's, never a mapping's.
    assert_eq!(sa.budget_stalls + sb.budget_stalls, 0);

    // Explicit calls count where they act.
    b.evict(0, 8 * BS).unwrap();
    assert_eq!(b.stats().evictions, 8);
    assert_eq!(a.stats().evictions, sa.evictions);
    assert!(a
        .stats()
        .to_string()
        .starts_with("hit ratio 50.0%: 16 hits, 16 misses"));
}

#[test]
fn a_new_mapping_starts_from_zero() {
    let store = Arc::new(MemoryStore::new());
    store.insert("o", vec![0; 4 * BS as usize]);
    let cache = Cache::new(CacheOptions::new(16 * BS).batch(4)).unwrap();
    let m = cache.map(store.clone(), "o", MapOptions::new()).unwrap();
    m.ensure_cached(0, 4 * BS).unwrap();
    drop(m);
    let m = cache.map(store, "o", MapOptions::new()).unwrap();
    assert_eq!(m.stats().misses, 0);
    assert_eq!(
        cache.stats().misses,
        4,
        "the cache keeps what its mappings counted"
    );
}
