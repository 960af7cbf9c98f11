//! The background evictor: it keeps room free ahead of the loaders where the budget holds
//! enough batches, stays out of the way where it does not or is switched off, and its thread
//! ends with its cache, and a policy that panics on its thread stops neither it nor the
//! cache. One test, because it counts the process's evictor threads.

mod common;

use std::sync::Arc;

use ucache::policy::{Buffers, Clock, Layout, Policy};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;

fn evictor_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == "ucache-evict")
        .count()
}

/// CLOCK, except that it panics when the evictor thread asks it for victims: an application
/// policy with a bug that only the background thread reaches.
struct PanicsInEvictor(Clock);

impl Policy for PanicsInEvictor {
    fn name(&self) -> &str {
        "panics-in-evictor"
    }
    fn attach(&mut self, layout: Layout) {
        self.0.attach(layout);
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        if std::thread::current().name() == Some("ucache-evict") {
            panic!("deliberate panic in the evictor (tests/evictor.rs)");
        }
        self.0.choose_eviction_buffers(b, want, out)
    }
    fn on_insert(&self, index: u64) {
        self.0.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        self.0.on_evict(index)
    }
}

/// Pins every buffer of a mapping four times the budget, once, in order.
fn sweep(cache: &Cache, budget_buffers: u64) -> ucache::Mapping {
    sweep_with(cache, budget_buffers, MapOptions::new())
}

fn sweep_with(cache: &Cache, budget_buffers: u64, options: MapOptions) -> ucache::Mapping {
    let n = budget_buffers * 4;
    let store = MemoryStore::new();
    store.insert("o", (0..n as usize * BS).map(|i| (i / BS) as u8).collect());
    let m = cache.map(Arc::new(store), "o", options).unwrap();
    for i in 0..n {
        assert_eq!(m.pin_shared(i).unwrap()[BS - 1], i as u8);
    }
    m
}

fn until(what: &str, f: impl FnMut() -> bool) {
    common::until(what, f, || ());
}

#[test]
fn the_evictor_frees_room_ahead_and_ends_with_its_cache() {
    // Too few batches in the budget: no evictor, the loaders evict.
    let small = Cache::new(CacheOptions::new(32 * BS as u64).batch(1)).unwrap();
    let m = sweep(&small, 32);
    assert_eq!(small.stats().evictions_ahead, 0);
    assert!(small.stats().evictions > 0);
    m.unmap().unwrap();

    // Switched off: the same.
    let budget = 4 * CacheOptions::BACKGROUND_EVICTION_BATCHES;
    let off = Cache::new(
        CacheOptions::new(budget * BS as u64)
            .batch(1)
            .background_eviction(false),
    )
    .unwrap();
    let m = sweep(&off, budget);
    assert_eq!(off.stats().evictions_ahead, 0);
    m.unmap().unwrap();
    assert_eq!(evictor_threads(), 0, "no evictor was ever started");

    // Engaged: it evicts ahead of the loader until between one and four batches are free
    // (`AHEAD` times the batch), and the budget is never exceeded.
    let on = Cache::new(CacheOptions::new(budget * BS as u64).batch(1)).unwrap();
    let m = sweep(&on, budget);
    let st = on.stats();
    assert!(
        st.evictions_ahead > 0 && st.evictions_ahead <= st.evictions,
        "{st:?}"
    );
    assert_eq!(evictor_threads(), 1);
    let full = budget * BS as u64;
    until("one batch free", || on.used() <= full - BS as u64);
    assert!(
        on.used() >= full - 4 * BS as u64 - BS as u64,
        "{}",
        on.used()
    );

    // Dropping the cache and its mapping ends the thread.
    m.unmap().unwrap();
    drop(on);
    until("the evictor thread to end", || evictor_threads() == 0);

    // A policy that panics on the evictor's thread is switched off like any panicking policy
    // (`policy::Guarded`); the evictor goes on with the fallback sweep, and so does the cache.
    let faulty = Cache::new(CacheOptions::new(budget * BS as u64).batch(1)).unwrap();
    let options = MapOptions::new().policy(Box::new(PanicsInEvictor(Clock::new())));
    let m = sweep_with(&faulty, budget, options);
    until("the policy to be switched off", || {
        m.policy_name() == "fallback"
    });
    until("the evictor to evict with the fallback", || {
        faulty.stats().evictions_ahead > 0
    });
    assert_eq!(evictor_threads(), 1);
    assert!(faulty.used() <= budget * BS as u64);
    for i in (0..4 * budget).rev().step_by(7) {
        assert_eq!(m.pin_shared(i).unwrap()[0], i as u8);
    }
    m.unmap().unwrap();
    drop(faulty);
    until("the evictor thread to end", || evictor_threads() == 0);
}
