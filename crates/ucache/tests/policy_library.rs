//! The advanced policy library and the prefetchers in a live cache: four threads over a
//! mapping eight times the budget, every byte checked, and the policy never switched off
//! (a panic inside a policy would be caught and hidden by the fallback).

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::policy::prefetch::{ReadAhead, Stride, WithPrefetch};
use ucache::policy::{
    advanced_policy_by_name, Clock, Hint, Policy, Priority, WTinyLfu, ADVANCED_POLICY_NAMES,
};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const BUDGET: u64 = 64;
const BUFFERS: u64 = BUDGET * 8;

fn data() -> Vec<u8> {
    (0..BUFFERS as usize * BS)
        .map(|k| (k / BS) as u8 ^ (k % 251) as u8)
        .collect()
}

/// Runs a mixed workload (skewed point lookups, tagged scans, explicit prefetch and
/// ensure_cached, explicit evictions) and checks every byte read.
fn run(policy: Box<dyn Policy>, setup: impl FnOnce(&ucache::Mapping)) {
    let name = policy.name().to_string();
    let store = MemoryStore::new();
    let data = data();
    store.insert("db", data.clone());
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(8)).unwrap();
    let m = cache
        .map(Arc::new(store), "db", MapOptions::new().policy(policy))
        .unwrap();
    setup(&m);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (m, data, cache) = (&m, &data, &cache);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                let check = |i: u64| {
                    let g = m.pin_shared(i).unwrap();
                    let off = i as usize * BS;
                    assert!(g[..] == data[off..off + BS], "{i} has wrong bytes");
                    assert!(cache.used() <= BUDGET * BS as u64);
                };
                for round in 0..2000u64 {
                    match round % 50 {
                        // A scan of 20 buffers, tagged.
                        0 => {
                            let from = rng.gen_range(0..BUFFERS - 20);
                            Hint::SCAN.scoped(|| (from..from + 20).for_each(check));
                        }
                        10 => {
                            let i = rng.gen_range(0..BUFFERS - 4);
                            m.prefetch_buffers(&[i, i + 1, i + 2, i + 3]).unwrap();
                        }
                        20 => {
                            let i = rng.gen_range(0..BUFFERS - 2);
                            m.ensure_cached_buffers(&[i, i + 1]).unwrap();
                            check(i);
                        }
                        30 => {
                            let i = rng.gen_range(0..BUFFERS);
                            let _ = m.evict(i * BS as u64, BS as u64);
                        }
                        _ => {
                            // Skewed: low indices far more often.
                            let x: f64 = rng.gen();
                            check(((x * x * x) * BUFFERS as f64) as u64 % BUFFERS);
                        }
                    }
                }
            });
        }
    });
    assert_eq!(m.policy_name(), name, "the policy was switched off");
    let st = cache.stats();
    assert!(st.evictions > 0 && st.hits > 0, "{name}: {st:?}");
}

#[test]
fn every_advanced_policy_serves_correct_bytes() {
    for name in ADVANCED_POLICY_NAMES {
        run(advanced_policy_by_name(name).unwrap(), |_| {});
    }
}

#[test]
fn priority_with_a_handle_keeps_protected_buffers() {
    let p = Priority::new();
    let h = p.handle();
    h.protect(0..16, 3);
    run(Box::new(p), |m| {
        m.ensure_cached_buffers(&(0..16).collect::<Vec<_>>())
            .unwrap();
    });
}

#[test]
fn wrapped_policies_prefetch_and_serve_correct_bytes() {
    run(
        Box::new(WithPrefetch::new(WTinyLfu::new(), ReadAhead::new(2, 16))),
        |_| {},
    );
    run(
        Box::new(WithPrefetch::new(Clock::new(), Stride::new(4, 8))),
        |_| {},
    );
}

/// A sequential scan with readahead: after the first few windows, almost every access finds
/// its buffer already read (or being read) by the prefetcher.
#[test]
fn readahead_turns_a_sequential_scan_into_hits() {
    let store = MemoryStore::new();
    let n: u64 = 4096;
    let data: Vec<u8> = (0..n as usize * BS)
        .map(|k| (k / BS) as u8 ^ (k % 13) as u8)
        .collect();
    store.insert("log", data.clone());
    let cache = Cache::new(CacheOptions::new(256 * BS as u64)).unwrap();
    let policy = WithPrefetch::new(Clock::new(), ReadAhead::new(4, 64));
    let m = cache
        .map(
            Arc::new(store),
            "log",
            MapOptions::new().policy(Box::new(policy)),
        )
        .unwrap();
    for i in 0..n {
        let g = m.pin_shared(i).unwrap();
        let off = i as usize * BS;
        assert!(g[..] == data[off..off + BS], "{i} has wrong bytes");
    }
    let st = cache.stats();
    eprintln!(
        "readahead scan of {n}: misses {} hits {} waits {} prefetches {} used {} wasted {}",
        st.misses, st.hits, st.waits, st.prefetches, st.prefetch_used, st.prefetch_wasted
    );
    // Windows grow 4, 8, .., 64: about one demand miss per 65 buffers once at full size.
    assert!(st.misses * 20 < n, "misses {}", st.misses);
    assert!(st.prefetch_used * 10 > n * 9, "used {}", st.prefetch_used);
    assert_eq!(st.misses + st.prefetches, st.bytes_read / BS as u64);
}

/// CLOCK that logs its misses ('m'), inserts ('i') and evictions ('e') in order.
struct Logging {
    clock: Clock,
    log: Arc<std::sync::Mutex<Vec<(char, u64)>>>,
}

impl Policy for Logging {
    fn name(&self) -> &str {
        "logging"
    }
    fn attach(&mut self, layout: ucache::policy::Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(
        &self,
        buffers: &ucache::policy::Buffers<'_>,
        want: usize,
        out: &mut Vec<u64>,
    ) {
        self.clock.choose_eviction_buffers(buffers, want, out);
    }
    fn on_miss(&self, index: u64) {
        self.log.lock().unwrap().push(('m', index));
    }
    fn on_insert(&self, index: u64) {
        self.log.lock().unwrap().push(('i', index));
        self.clock.on_insert(index);
    }
    fn on_evict(&self, index: u64) {
        self.log.lock().unwrap().push(('e', index));
        self.clock.on_evict(index);
    }
}

/// `on_miss` comes before the evictions that make room for the miss, as its docs promise and
/// ghost-list policies need, whichever call missed. `pin_each` used to reserve first.
#[test]
fn on_miss_precedes_the_evictions_it_causes() {
    let store = MemoryStore::new();
    store.insert("db", data());
    let cache = Cache::new(
        CacheOptions::new(8 * BS as u64)
            .batch(1)
            .background_eviction(false),
    )
    .unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let policy = Logging {
        clock: Clock::new(),
        log: log.clone(),
    };
    let m = cache
        .map(
            Arc::new(store),
            "db",
            MapOptions::new().policy(Box::new(policy)),
        )
        .unwrap();
    for i in 0..8 {
        drop(m.pin_shared(i).unwrap());
    }
    let first_after = |what: &str, f: &dyn Fn()| {
        log.lock().unwrap().clear();
        f();
        let l = log.lock().unwrap().clone();
        assert!(l.iter().any(|e| e.0 == 'e'), "{what}: no eviction: {l:?}");
        l[0]
    };
    let streamed = first_after("pin_each", &|| m.pin_each(20..21, 1, |_, _| {}).unwrap());
    assert_eq!(streamed, ('m', 20), "pin_each");
    let pinned = first_after("pin_shared", &|| drop(m.pin_shared(21).unwrap()));
    assert_eq!(pinned, ('m', 21), "pin_shared");
    let ensured = first_after("ensure_cached", &|| m.ensure_cached_buffers(&[22]).unwrap());
    assert_eq!(ensured, ('m', 22), "ensure_cached");
}

/// `on_miss` sees demand misses (pins, ensure_cached), not prefetches.
#[test]
fn on_miss_is_called_for_demand_misses_only() {
    let store = MemoryStore::new();
    store.insert("db", data());
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64)).unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let policy = Logging {
        clock: Clock::new(),
        log: log.clone(),
    };
    let count = |what: char| log.lock().unwrap().iter().filter(|e| e.0 == what).count();
    let m = cache
        .map(
            Arc::new(store),
            "db",
            // Pins in order would read ahead: these are demand misses only.
            MapOptions::new().policy(Box::new(policy)).readahead(false),
        )
        .unwrap();
    for i in 0..10 {
        drop(m.pin_shared(i).unwrap());
    }
    drop(m.pin_shared(3).unwrap()); // a hit
    assert_eq!(count('m'), 10);
    m.ensure_cached_buffers(&[20, 21, 22, 3]).unwrap();
    assert_eq!(count('m'), 13);
    m.prefetch_buffers(&[30, 31]).unwrap();
    // Wait for the IO worker to publish the prefetched buffers.
    while count('i') < 15 {
        std::thread::yield_now();
    }
    assert_eq!(count('m'), 13);
    assert_eq!(cache.stats().misses, 13);
}
