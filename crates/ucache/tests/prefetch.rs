//! `prefetch` over more than one IO job: a call is split into runs of 128 KiB, each handed to
//! the IO threads as soon as it is claimed, and never claims more than the budget holds.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ucache::policy::{Buffers, GlobalPolicy, Layout, MappingUsage, Policy, ProportionalGlobal};
use ucache::store::MemoryStore;
use ucache::Phase;
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
        common::until(
            "the first run's loads",
            || (0..32).all(|i| b.state(i).phase() != Phase::Loading),
            || (),
        );
        out.extend((0..self.buffers).filter(|&i| b.is_candidate(i)).take(want));
    }
}

/// Waits until `n` prefetched loads are done and no buffer is loading.
fn settle(c: &Cache, m: &Mapping, n: u64) {
    common::until(
        "the prefetches to land",
        || {
            c.stats().prefetches >= n
                && (0..m.buffers()).all(|i| m.state(i).unwrap().phase() != Phase::Loading)
        },
        || c.stats(),
    );
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

/// A policy whose `on_miss` sleeps a little, so that two threads' claims interleave.
struct SlowMiss(ucache::policy::Clock);

impl Policy for SlowMiss {
    fn name(&self) -> &str {
        "slow-miss"
    }
    fn attach(&mut self, layout: Layout) {
        self.0.attach(layout);
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.0.choose_eviction_buffers(b, want, out)
    }
    fn on_miss(&self, _: u64) {
        std::thread::sleep(Duration::from_millis(2));
    }
    fn on_insert(&self, index: u64) {
        self.0.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        self.0.on_evict(index)
    }
}

/// Two `ensure_cached` calls whose ranges each fit the budget, but not together. A claimed
/// buffer is `Loading` and cannot be evicted, so a call must not wait for memory while it
/// holds claims: before, each held half the budget in claims and waited for the other, and
/// one failed with `BudgetExhausted` after 5 s.
#[test]
fn concurrent_ensure_cached_calls_do_not_wait_on_each_others_claims() {
    let store = MemoryStore::new();
    store.insert("o", (0..64 * 4096).map(|k| (k / 4096) as u8).collect());
    let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    let m = cache
        .map(
            Arc::new(store),
            "o",
            MapOptions::new().policy(Box::new(SlowMiss(ucache::policy::Clock::new()))),
        )
        .unwrap();
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for first in [0u64, 32] {
            let (m, start) = (&m, &start);
            s.spawn(move || {
                start.wait();
                m.ensure_cached(first * 4096, 12 * 4096).unwrap();
            });
        }
    });
    assert!(cache.used() <= cache.budget());
}

/// More buffers than the budget holds cannot all be resident when `ensure_cached` returns:
/// refused at once rather than after the 5 s that `reserve` waits for memory (a wait would
/// have ended in `BudgetExhausted`, and counted a stall).
#[test]
fn ensure_cached_of_more_than_the_budget_is_refused_at_once() {
    let store = MemoryStore::new();
    store.insert("o", vec![0; 64 * 4096]);
    let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    let m = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
    let r = m.ensure_cached(0, 32 * 4096);
    assert!(matches!(r, Err(ucache::Error::BadLength { .. })), "{r:?}");
    assert_eq!(cache.stats().budget_stalls, 0);
    // Duplicates count once.
    m.ensure_cached_buffers(&[1, 1, 2, 2, 3]).unwrap();
    assert_eq!(cache.used(), 3 * 4096);
}

/// `pin_each` meets cached hits inside the store's `next` callback, while reads it has claimed
/// (buffers `Loading`, not even submitted yet) sit in its stream. A hit held exclusively by a
/// thread that then pins one of those claimed buffers must be visited last, not waited for, or
/// each would wait for the other (found by review: it used to wait).
#[test]
fn pin_each_never_waits_on_a_held_hit_while_its_claims_are_unread() {
    let mem = MemoryStore::new();
    mem.insert("o", (0..4 * BS).map(|k| (k / BS) as u8).collect());
    let cache = Cache::new(CacheOptions::new((64 * BS) as u64).batch(4)).unwrap();
    let m = Arc::new(
        cache
            .map(
                Arc::new(mem),
                "o",
                MapOptions::new().buffer_size(BS).writable(true),
            )
            .unwrap(),
    );
    drop(m.pin_shared(1).unwrap());
    assert_eq!(m.state(0).unwrap().phase(), Phase::Evicted);

    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let mb = m.clone();
    let b = std::thread::spawn(move || {
        // Holds 1 exclusively, then needs 0 (an update of 1 that reads 0).
        let g = mb.pin_exclusive(1).unwrap();
        held_tx.send(()).unwrap();
        let t = Instant::now();
        while mb.state(0).unwrap().phase() == Phase::Evicted {
            if t.elapsed() > Duration::from_secs(5) {
                break;
            }
            std::hint::spin_loop();
        }
        let r = mb.pin_shared(0).map(|g0| g0[0]);
        drop(g);
        r.is_ok()
    });
    held_rx.recv().unwrap();
    let ma = m.clone();
    let visited = finished_within_hang(move || {
        let mut seen = Vec::new();
        ma.pin_each([0u64, 1], 8, |i, bytes| seen.push((i, bytes[0])))
            .map(|()| seen)
    });
    match visited {
        Some(r) => {
            let mut seen = r.unwrap();
            seen.sort();
            assert_eq!(seen, vec![(0, 0), (1, 1)]);
            assert!(b.join().unwrap());
        }
        None => {
            std::mem::forget(m);
            std::mem::forget(cache);
            panic!(
                "pin_each([0, 1]) and a thread holding 1 exclusively that pins 0 deadlock: \
                 pin_each claimed 0 and then waited for 1 before reading 0"
            );
        }
    }
}

/// Runs `f` on its own thread; `None` if it does not finish within [`common::HANG`].
fn finished_within_hang<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(common::HANG).ok()
}

/// A prefetched buffer is used by a pin or an optimistic read, and wasted if evicted unused; a
/// transparent mapping, whose plain loads are invisible, counts no waste.
#[test]
fn prefetches_are_counted_used_or_wasted() {
    let (c, m) = setup(64, 64, MapOptions::new());
    m.prefetch(0, 16 * BS as u64).unwrap();
    settle(&c, &m, 16);
    for i in 0..4 {
        assert_eq!(
            m.read_optimistic(i, |v| v.read_u64(0) as u8).unwrap(),
            i as u8
        );
        // A second use of the same buffer is a plain hit.
        assert_eq!(
            m.read_optimistic(i, |v| v.read_u64(0) as u8).unwrap(),
            i as u8
        );
    }
    for i in 4..8 {
        drop(m.pin_shared(i).unwrap());
    }
    m.evict(0, 16 * BS as u64).unwrap();
    let s = c.stats();
    assert_eq!((s.prefetch_used, s.prefetch_wasted), (8, 8), "{s:?}");

    let (c, m) = setup(64, 64, MapOptions::new().transparent(true).readahead(false));
    m.prefetch(0, 16 * BS as u64).unwrap();
    settle(&c, &m, 16);
    // SAFETY: inside the mapping, which outlives the reads.
    let sum: u64 = (0..16)
        .map(|i| unsafe { std::ptr::read_volatile(m.as_ptr().add(i * BS)) } as u64)
        .sum();
    assert_eq!(sum, (0..16).sum::<u64>());
    m.evict(0, 16 * BS as u64).unwrap();
    assert_eq!(c.stats().prefetch_wasted, 0);
}

/// The default global policy, except that each budget check takes a few microseconds, so the
/// thread claiming a prefetch is slow next to the IO threads loading it (a busy machine, a slow
/// policy): what the background evictor may then do to that prefetch happens every time.
struct SlowBudgetChecks;

impl GlobalPolicy for SlowBudgetChecks {
    fn need_to_evict(&self, used: u64, want: u64, budget: u64) -> bool {
        std::thread::sleep(Duration::from_micros(20));
        used + want > budget
    }
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        ProportionalGlobal.choose_eviction_mappings(usage, out)
    }
}

/// A prefetch of the whole budget into an empty cache loses none of itself to the background
/// evictor, which its claims wake as they fill the budget: the call leaves the evictor the
/// room it frees.
#[test]
fn a_prefetch_of_the_budget_is_not_evicted_by_the_background_evictor() {
    let budget = 4096u64; // 16 MiB: 64 batches of the default 256 KiB, so the evictor runs
    let s = MemoryStore::new();
    s.insert("o", vec![1u8; 2 * budget as usize * BS]);
    let options = CacheOptions::new(budget * BS as u64).global_policy(Arc::new(SlowBudgetChecks));
    let c = Cache::new(options).unwrap();
    let m = c.map(Arc::new(s), "o", MapOptions::new()).unwrap();
    m.prefetch(0, budget * BS as u64).unwrap();
    common::until(
        "the prefetch to land",
        || (0..m.buffers()).all(|i| m.state(i).unwrap().phase() != Phase::Loading),
        || c.stats(),
    );
    // Let the evictor finish whatever it was woken for.
    std::thread::sleep(Duration::from_millis(200));
    let st = c.stats();
    assert_eq!(
        (st.prefetch_wasted, st.evictions_ahead),
        (0, 0),
        "prefetched buffers evicted unused: {st:?}"
    );
    assert_eq!(cached(&m).len() as u64, st.prefetches);
    assert!(st.prefetches >= budget * 7 / 8, "{st:?}");
}
