//! Many threads reading, writing and pinning a mapping 16× larger than the budget. Every buffer
//! carries its index and a write counter in every 8-byte word, and an in-memory ledger holds
//! the counter each buffer must have; any lost update, torn buffer or stale read fails the test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions, Placement};

const BS: usize = 4096;
const BUDGET_BUFFERS: u64 = 256;
const BUFFERS: u64 = BUDGET_BUFFERS * 16;
const THREADS: u64 = 8;

fn stamp(buf: &mut [u8], index: u64, counter: u64) {
    for w in buf.chunks_exact_mut(16) {
        w[..8].copy_from_slice(&index.to_le_bytes());
        w[8..].copy_from_slice(&counter.to_le_bytes());
    }
}

/// Returns the counter if the buffer is uniformly stamped with `index`, panics otherwise.
fn check(buf: &[u8], index: u64) -> u64 {
    let counter = u64::from_le_bytes(buf[8..16].try_into().unwrap());
    for (k, w) in buf.chunks_exact(16).enumerate() {
        let i = u64::from_le_bytes(w[..8].try_into().unwrap());
        let c = u64::from_le_bytes(w[8..].try_into().unwrap());
        assert_eq!((i, c), (index, counter), "buffer {index} torn at word {k}");
    }
    counter
}

/// Loaders evict: the budget holds too few batches of 32 for the background evictor.
#[test]
fn stress_every_byte_verified() {
    let cache = Cache::new(CacheOptions::new(BUDGET_BUFFERS * BS as u64).batch(32)).unwrap();
    stress(
        &cache,
        32 * BS as u64,
        Some(false),
        &[Spec::new(Placement::InPlace, BS, BUFFERS)],
    );
}

/// The background evictor engaged (64 batches of 4 fit the budget) evicts alongside the
/// loaders.
#[test]
fn stress_every_byte_verified_with_the_background_evictor() {
    let batch = 4;
    assert!(BUDGET_BUFFERS / batch as u64 >= ucache::CacheOptions::BACKGROUND_EVICTION_BATCHES);
    let cache = Cache::new(CacheOptions::new(BUDGET_BUFFERS * BS as u64).batch(batch)).unwrap();
    stress(
        &cache,
        (batch * BS) as u64,
        Some(true),
        &[Spec::new(Placement::InPlace, BS, BUFFERS)],
    );
}

/// A pool mapping 16× its budget (two chunks of frames), frames reused by every miss.
#[test]
fn stress_pool_every_byte_verified() {
    let budget = 4u64 << 20;
    let cache = Cache::new(CacheOptions::new(budget).batch(32)).unwrap();
    let buffers = 16 * budget / BS as u64;
    stress(
        &cache,
        32 * BS as u64,
        None,
        &[Spec::new(Placement::Pool, BS, buffers)],
    );
    assert_eq!(cache.pool_bytes(), 0, "unmap gave the pool's chunks back");
}

/// Pool and in-place mappings of different buffer sizes share one budget (16× smaller than
/// their data together): memory moves between them in chunks, and every byte stays right.
#[test]
fn stress_pool_and_in_place_of_different_sizes_share_one_budget() {
    let budget = 8u64 << 20;
    let cache = Cache::new(CacheOptions::new(budget).batch_bytes(128 << 10)).unwrap();
    let bytes = |share: u64| 16 * budget * share / 4;
    stress(
        &cache,
        128 << 10,
        None,
        &[
            Spec::new(Placement::Pool, BS, bytes(2) / BS as u64),
            Spec::new(Placement::InPlace, 16 << 10, bytes(1) / (16 << 10)),
            Spec::new(Placement::Pool, 16 << 10, bytes(1) / (16 << 10)),
        ],
    );
    assert_eq!(cache.pool_bytes(), 0, "unmap gave the pools' chunks back");
}

/// One mapping of a stress run.
struct Spec {
    placement: Placement,
    bs: usize,
    buffers: u64,
}

impl Spec {
    fn new(placement: Placement, bs: usize, buffers: u64) -> Spec {
        Spec {
            placement,
            bs,
            buffers,
        }
    }
}

/// A mapping under stress, its store and the counter each buffer must hold (only an
/// exclusive pin holder changes it).
struct Target {
    m: ucache::Mapping,
    store: MemoryStore,
    bs: usize,
    ledger: Vec<AtomicU64>,
}

/// `THREADS` threads pin, write and read optimistically the buffers of every mapping in
/// `specs` at random; resident memory never exceeds the budget by more than `batch_bytes`;
/// at the end every buffer in memory and in the store holds its ledger's counter. `ahead`:
/// whether the background evictor must (or must not) have engaged, if that is known.
fn stress(cache: &Cache, batch_bytes: u64, ahead: Option<bool>, specs: &[Spec]) {
    let targets: Vec<Target> = specs
        .iter()
        .map(|sp| {
            let store = MemoryStore::new();
            let mut data = vec![0u8; sp.buffers as usize * sp.bs];
            for (i, b) in data.chunks_exact_mut(sp.bs).enumerate() {
                stamp(b, i as u64, 0);
            }
            store.insert("db", data);
            let opts = MapOptions::new()
                .writable(true)
                .buffer_size(sp.bs)
                .placement(sp.placement);
            let m = cache.map(Arc::new(store.clone()), "db", opts).unwrap();
            Target {
                m,
                store,
                bs: sp.bs,
                ledger: (0..sp.buffers).map(|_| AtomicU64::new(0)).collect(),
            }
        })
        .collect();
    let peak = AtomicU64::new(0);
    let seconds = if cfg!(debug_assertions) { 4 } else { 8 };
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let ops = AtomicU64::new(0);
    let min_evictions = cache.budget() / specs.iter().map(|s| s.bs as u64).max().unwrap();

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (targets, peak, ops) = (&targets, &peak, &ops);
            let cache = cache.clone();
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let mut n = 0u64;
                // The time only sets a minimum: a slow run (TSan, valgrind) goes on until it
                // has evicted what the checks below ask for.
                while Instant::now() < deadline
                    || (n.is_multiple_of(64) && cache.stats().evictions <= min_evictions)
                    || !n.is_multiple_of(64)
                {
                    let tg = &targets[rng.gen_range(0..targets.len())];
                    let (m, ledger, bs) = (&tg.m, &tg.ledger, tg.bs);
                    let buffers = ledger.len() as u64;
                    // Skewed choice so some buffers are hot and contended.
                    let i = if rng.gen_bool(0.3) {
                        rng.gen_range(0..16)
                    } else {
                        rng.gen_range(0..buffers)
                    };
                    match rng.gen_range(0..10) {
                        0..=4 => {
                            let g = m.pin_shared(i).unwrap();
                            let c = check(&g, i);
                            assert!(c <= ledger[i as usize].load(Ordering::Acquire));
                        }
                        5..=7 => {
                            let mut g = m.pin_exclusive(i).unwrap();
                            let c = check(&g, i);
                            assert_eq!(
                                c,
                                ledger[i as usize].load(Ordering::Acquire),
                                "lost update on {i}"
                            );
                            stamp(&mut g, i, c + 1);
                            ledger[i as usize].store(c + 1, Ordering::Release);
                        }
                        8 => {
                            // Two pins at once, in index order, as a B-tree descent would.
                            let j = (i + 1 + rng.gen_range(0..64)) % buffers;
                            let (a, b) = (i.min(j), i.max(j));
                            let ga = m.pin_shared(a).unwrap();
                            let gb = m.pin_shared(b).unwrap();
                            check(&ga, a);
                            check(&gb, b);
                        }
                        _ => {
                            let c = m
                                .read_optimistic(i, |v| {
                                    let idx = v.read_u64(0);
                                    let c = v.read_u64(8);
                                    let idx2 = v.read_u64(bs - 16);
                                    let c2 = v.read_u64(bs - 8);
                                    (idx, c, idx2, c2)
                                })
                                .unwrap();
                            assert_eq!((c.0, c.2), (i, i), "optimistic read validated bad data");
                            assert_eq!(c.1, c.3, "optimistic read validated a torn buffer");
                        }
                    }
                    if n.is_multiple_of(64) {
                        peak.fetch_max(cache.used(), Ordering::Relaxed);
                    }
                    n += 1;
                }
                ops.fetch_add(n, Ordering::Relaxed);
            });
        }
    });

    let budget = cache.budget();
    assert!(peak.load(Ordering::Relaxed) <= budget + batch_bytes);
    let st = cache.stats();
    let budget_buffers = budget / specs.iter().map(|s| s.bs as u64).max().unwrap();
    assert!(st.evictions > budget_buffers, "the test must evict: {st:?}");
    if let Some(ahead) = ahead {
        assert_eq!(
            st.evictions_ahead > 0,
            ahead,
            "the background evictor engages only where the budget holds enough batches: {st:?}"
        );
    }
    assert!(
        st.writebacks > 0,
        "dirty buffers must be written back: {st:?}"
    );
    eprintln!(
        "{} ops, {} hits, {} misses, {} evictions ({} ahead), {} writebacks, {} waits",
        ops.load(Ordering::Relaxed),
        st.hits,
        st.misses,
        st.evictions,
        st.evictions_ahead,
        st.writebacks,
        st.waits
    );
    // Everything still in memory is verified, then written back and verified in the store.
    for tg in targets {
        for i in 0..tg.ledger.len() as u64 {
            let g = tg.m.pin_shared(i).unwrap();
            assert_eq!(check(&g, i), tg.ledger[i as usize].load(Ordering::Relaxed));
        }
        tg.m.unmap().unwrap();
        let data = tg.store.get("db").unwrap();
        for (i, b) in data.chunks_exact(tg.bs).enumerate() {
            assert_eq!(check(b, i as u64), tg.ledger[i].load(Ordering::Relaxed));
        }
    }
    assert_eq!(cache.used(), 0, "unmap releases the whole budget");
}

#[test]
fn concurrent_misses_on_one_buffer_load_it_once() {
    let store = MemoryStore::new();
    store.insert("o", vec![9u8; 64 * BS]);
    let cache = Cache::new(CacheOptions::new(32 * BS as u64).batch(8)).unwrap();
    // Rounds go in order: readahead would load the next buffer before its round.
    let m = cache
        .map(Arc::new(store), "o", MapOptions::new().readahead(false))
        .unwrap();
    for round in 0..20u64 {
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let g = m.pin_shared(round).unwrap();
                    assert!(g.iter().all(|&b| b == 9));
                });
            }
        });
    }
    let st = cache.stats();
    assert_eq!(st.misses, 20, "exactly one load per buffer: {st:?}");
    assert_eq!(st.hits + st.waits, 20 * 7, "{st:?}");
}
