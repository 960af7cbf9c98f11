//! Hit-path costs: a shared pin + unpin of a cached buffer, an exclusive one (which also
//! records the pin for [`ucache::Error::WouldDeadlock`]), an optimistic read, and random
//! 8-byte lookups on a fully cached mapping against the same loop over a plain array; and the
//! miss path: a pin that claims, reserves (evicting as the budget needs), copies 4 KiB from a
//! memory store and publishes, in place and on a pool mapping.
//! Run: `cargo bench -p ucache --bench pin`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions, Placement};

const BS: usize = 4096;
const BUFFERS: usize = 16 * 1024; // 64 MiB, all cached

fn setup() -> (Cache, ucache::Mapping, Vec<u8>) {
    let data: Vec<u8> = (0..BUFFERS * BS).map(|i| i as u8).collect();
    let store = MemoryStore::new();
    store.insert("o", data.clone());
    let cache = Cache::new(CacheOptions::new((BUFFERS * BS) as u64)).unwrap();
    let m = cache
        .map(Arc::new(store), "o", MapOptions::new().writable(true))
        .unwrap();
    m.ensure_cached(0, m.len()).unwrap();
    (cache, m, data)
}

fn hits(c: &mut Criterion) {
    let (_cache, m, data) = setup();
    let mut g = c.benchmark_group("hit");
    g.throughput(Throughput::Elements(1));
    g.bench_function("pin_shared+unpin", |b| {
        b.iter(|| {
            let p = m.pin_shared(black_box(7)).unwrap();
            black_box(p[0]);
        })
    });
    g.bench_function("pin_exclusive+unpin", |b| {
        b.iter(|| {
            let p = m.pin_exclusive(black_box(7)).unwrap();
            black_box(p[0]);
        })
    });
    g.bench_function("pin_exclusive+write+unpin", |b| {
        let mut k = 0u8;
        b.iter(|| {
            let mut p = m.pin_exclusive(black_box(7)).unwrap();
            k = k.wrapping_add(1);
            p[8] = k;
        })
    });
    g.bench_function("read_optimistic", |b| {
        b.iter(|| black_box(m.read_optimistic(black_box(7), |v| v.read_u64(0)).unwrap()))
    });
    let mut rng = SmallRng::seed_from_u64(1);
    let idx: Vec<(u64, usize)> = (0..1 << 16)
        .map(|_| {
            (
                rng.gen_range(0..BUFFERS as u64),
                rng.gen_range(0..BS / 8) * 8,
            )
        })
        .collect();
    let mut k = 0;
    g.bench_function("lookup/ucache-pin", |b| {
        b.iter(|| {
            let (i, o) = idx[k & 0xFFFF];
            k += 1;
            let p = m.pin_shared(i).unwrap();
            black_box(u64::from_le_bytes(p[o..o + 8].try_into().unwrap()))
        })
    });
    g.bench_function("lookup/ucache-optimistic", |b| {
        b.iter(|| {
            let (i, o) = idx[k & 0xFFFF];
            k += 1;
            black_box(m.read_optimistic(i, |v| v.read_u64(o)).unwrap())
        })
    });
    g.bench_function("lookup/plain-array", |b| {
        b.iter(|| {
            let (i, o) = idx[k & 0xFFFF];
            k += 1;
            let at = i as usize * BS + o;
            black_box(u64::from_le_bytes(data[at..at + 8].try_into().unwrap()))
        })
    });
    g.finish();
}

/// Buffers of the miss benchmarks' mapping, 16 times their budget.
const MISS_BUFFERS: usize = 16 * 1024;

/// Pins that all miss: a cyclic sweep of a mapping 16 times the budget, without readahead,
/// so each pin pays its claim, reservation, share of an eviction round (the loader's own: the
/// background evictor is off, so the round runs on this thread), a 4 KiB copy from a memory
/// store, and the publish. What the CPU spends on a miss when the device costs nothing.
fn misses(c: &mut Criterion) {
    let store = MemoryStore::new();
    store.insert("o", vec![7u8; MISS_BUFFERS * BS]);
    let store = Arc::new(store);
    let mut g = c.benchmark_group("miss");
    g.throughput(Throughput::Elements(1));
    for (name, placement) in [
        ("pin_shared/in-place", Placement::InPlace),
        ("pin_shared/pool", Placement::Pool),
    ] {
        let budget = (MISS_BUFFERS * BS / 16) as u64;
        let cache = Cache::new(CacheOptions::new(budget).background_eviction(false)).unwrap();
        let options = MapOptions::new().placement(placement).readahead(false);
        let m = cache.map(store.clone(), "o", options).unwrap();
        let mut i = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % MISS_BUFFERS as u64;
                let p = m.pin_shared(i).unwrap();
                black_box(p[0]);
            })
        });
        let s = cache.stats();
        assert!(s.misses > s.hits, "the sweep misses: {s:?}");
    }
    g.finish();
}

criterion_group!(benches, hits, misses);
criterion_main!(benches);
