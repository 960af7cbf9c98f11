//! `prefetch` over more than one IO job: a call is split into runs of 128 KiB, each handed to
//! the IO threads as soon as it is claimed, and never claims more than the budget holds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ucache::policy::{Buffers, Layout, Policy};
use ucache::state::Phase;
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions, Mapping};

const BS: usize = 4096;

/// A cache of `budget` buffers over an object of `buffers` buffers, byte `k` of buffer `i`
/// holding `i` (mod 256).
fn setup(budget: usize, buffers: usize, options: MapOptions) -> (Cache, Mapping) {
    let s = MemoryStore::new();
    s.insert("o", (0..buffers * BS).map(|k| (k / BS) as u8).collect());
    let c = Cache::new(CacheOptions::new((budget * BS) as u64).batch(8)).unwrap();
    let m = c.map(Arc::new(s), "o", options).unwrap();
    (c, m)
}

/// Asked for victims, first lets the IO threads land the first run of 32 buffers, then offers
/// the lowest cached buffers: what a prefetch that outgrew the budget would evict of itself.
#[derive(Default)]
struct LowestAfterFirstRun {
    buffers: u64,
}

impl Policy for LowestAfterFirstRun {
    fn name(&self) -> &str {
        "lowest-after-first-run"
    }
    fn attach(&mut self, layout: Layout) {
        self.buffers = layout.buffers;
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let t = Instant::now();
        while (0..32).any(|i| b.state(i).phase() == Phase::Loading)
            && t.elapsed() < Duration::from_secs(2)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        out.extend((0..self.buffers).filter(|&i| b.is_candidate(i)).take(want));
    }
}

/// Waits until `n` prefetched loads are done and no buffer is loading.
fn settle(c: &Cache, m: &Mapping, n: u64) {
    let t = Instant::now();
    while c.stats().prefetches < n
        || (0..m.buffers()).any(|i| m.state(i).unwrap().phase() == Phase::Loading)
    {
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", c.stats());
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn cached(m: &Mapping) -> Vec<u64> {
    (0..m.buffers())
        .filter(|&i| m.state(i).unwrap().phase() == Phase::Cached)
        .collect()
}

#[test]
fn a_prefetch_of_many_runs_loads_every_buffer() {
    let (c, m) = setup(512, 1024, MapOptions::new());
    // 200 buffers: seven jobs of up to 32, from an offset that is not a run boundary.
    m.prefetch(100 * BS as u64, 200 * BS as u64).unwrap();
    settle(&c, &m, 200);
    assert_eq!(cached(&m), (100..300).collect::<Vec<_>>());
    assert_eq!(c.stats().prefetches, 200);
    for i in 100..300u64 {
        let g = m.pin_shared(i).unwrap();
        assert!(g.iter().all(|&b| b == i as u8), "buffer {i}");
    }
    assert_eq!(c.stats().misses, 0, "every pin hit a prefetched buffer");
}

#[test]
fn a_prefetch_larger_than_the_budget_keeps_its_first_buffers() {
    let policy = Box::new(LowestAfterFirstRun::default());
    let (c, m) = setup(32, 256, MapOptions::new().policy(policy));
    m.prefetch(0, 256 * BS as u64).unwrap();
    settle(&c, &m, 32);
    // Later runs did not evict the first ones, loaded by then.
    assert_eq!(cached(&m), (0..32).collect::<Vec<_>>());
    assert_eq!(c.stats().evictions, 0);
    assert_eq!(c.stats().prefetches, 32);
    assert_eq!(c.used(), 32 * BS as u64);
}
