//! A policy only proposes: whatever a misbehaving policy does, the cache stays within its
//! budget, keeps serving correct bytes and makes progress (cache_ext's safety rule, issue 4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::policy::{Buffers, Policy};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const BUDGET: u64 = 64;
const BUFFERS: u64 = BUDGET * 8;

#[derive(Clone, Copy)]
enum Misbehaviour {
    ProposesNothing,
    ProposesPinnedAndBogus,
    PanicsInChoose,
    PanicsInInsertAfter(u64),
    PanicsOnHit,
}

struct Bad {
    how: Misbehaviour,
    inserts: AtomicU64,
}

impl Policy for Bad {
    fn name(&self) -> &str {
        "bad"
    }
    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        match self.how {
            Misbehaviour::ProposesPinnedAndBogus => {
                // Buffer 0 is kept pinned by the test; the others do not exist.
                out.extend(std::iter::repeat_n(0, want));
                out.extend([u64::MAX, buffers.len(), buffers.len() + 7]);
            }
            Misbehaviour::PanicsInChoose => panic!("policy bug in choose"),
            _ => {}
        }
    }
    fn wants_hits(&self) -> bool {
        matches!(self.how, Misbehaviour::PanicsOnHit)
    }
    fn on_hit(&self, _: u64) {
        panic!("policy bug on hit");
    }
    fn on_insert(&self, _: u64) {
        let n = self.inserts.fetch_add(1, Ordering::Relaxed);
        if let Misbehaviour::PanicsInInsertAfter(k) = self.how {
            if n >= k {
                panic!("policy bug in insert");
            }
        }
    }
}

fn run(how: Misbehaviour) {
    let store = MemoryStore::new();
    let data: Vec<u8> = (0..BUFFERS as usize * BS)
        .map(|k| (k / BS) as u8 ^ (k % 251) as u8)
        .collect();
    store.insert("db", data.clone());
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(8)).unwrap();
    let policy = Bad {
        how,
        inserts: AtomicU64::new(0),
    };
    let m = cache
        .map(
            Arc::new(store),
            "db",
            MapOptions::new().policy(Box::new(policy)),
        )
        .unwrap();
    let held = m.pin_shared(0).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (m, data, cache) = (&m, &data, &cache);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                for _ in 0..3000 {
                    let i = rng.gen_range(0..BUFFERS);
                    let g = m.pin_shared(i).unwrap();
                    let off = i as usize * BS;
                    assert!(g[..] == data[off..off + BS], "buffer {i} has wrong bytes");
                    assert!(cache.used() <= BUDGET * BS as u64);
                }
            });
        }
    });
    assert_eq!(held[..], data[..BS], "the pinned buffer stayed intact");
    drop(held);
    let st = cache.stats();
    assert!(st.evictions > 0, "the cache made progress by evicting");
    let panics = matches!(
        how,
        Misbehaviour::PanicsInChoose
            | Misbehaviour::PanicsInInsertAfter(_)
            | Misbehaviour::PanicsOnHit
    );
    let want = if panics { "fallback" } else { "bad" };
    assert_eq!(m.policy_name(), want);
}

#[test]
fn policy_that_proposes_nothing() {
    run(Misbehaviour::ProposesNothing);
}

#[test]
fn policy_that_proposes_pinned_and_bogus_buffers() {
    run(Misbehaviour::ProposesPinnedAndBogus);
}

#[test]
fn policy_that_panics_in_choose() {
    run(Misbehaviour::PanicsInChoose);
}

#[test]
fn policy_that_panics_in_insert() {
    run(Misbehaviour::PanicsInInsertAfter(10));
}

#[test]
fn policy_that_panics_on_hit() {
    run(Misbehaviour::PanicsOnHit);
}

/// CLOCK, but buffer 0 must never be evicted by the budget (the application's veto: say its
/// log records are not durable yet), and the first hit on buffer 1 panics: a bug elsewhere in
/// the same policy.
struct VetoZero {
    clock: ucache::policy::Clock,
    panicked: std::sync::atomic::AtomicBool,
}

impl Policy for VetoZero {
    fn name(&self) -> &str {
        "veto-zero"
    }
    fn attach(&mut self, layout: ucache::policy::Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.clock.choose_eviction_buffers(b, want, out)
    }
    fn is_evictable(&self, index: u64) -> bool {
        index != 0
    }
    fn wants_hits(&self) -> bool {
        true
    }
    fn on_hit(&self, index: u64) {
        if index == 1 && !self.panicked.swap(true, Ordering::Relaxed) {
            panic!("a bug in on_hit");
        }
    }
    fn on_insert(&self, index: u64) {
        self.clock.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        self.clock.on_evict(index)
    }
}

/// The veto outlives a panic in another hook: the policy is switched off, but its
/// `is_evictable` is still asked. Before, a broken policy answered "evictable" for every
/// buffer, and the budget evicted the vetoed one.
#[test]
fn veto_survives_a_panic_elsewhere_in_the_policy() {
    let cache = Cache::new(CacheOptions::new(16 * BS as u64).batch(4)).unwrap();
    let store = MemoryStore::new();
    store.insert("o", (0..256 * BS).map(|k| (k / BS) as u8).collect());
    let policy = VetoZero {
        clock: ucache::policy::Clock::new(),
        panicked: std::sync::atomic::AtomicBool::new(false),
    };
    let m = cache
        .map(
            Arc::new(store),
            "o",
            MapOptions::new().policy(Box::new(policy)),
        )
        .unwrap();
    drop(m.pin_shared(0).unwrap());
    drop(m.pin_shared(1).unwrap());
    drop(m.pin_shared(1).unwrap()); // on_hit panics: the policy is switched off
    assert_eq!(m.policy_name(), "fallback");
    for i in 2..256 {
        assert_eq!(m.pin_shared(i).unwrap()[0], i as u8);
    }
    assert!(cache.stats().evictions > 200);
    assert_eq!(
        m.state(0).unwrap().phase(),
        ucache::Phase::Cached,
        "the vetoed buffer was evicted"
    );
}

/// A global policy whose first choice of mappings panics.
struct PanicOnceGlobal(std::sync::atomic::AtomicBool);

impl ucache::policy::GlobalPolicy for PanicOnceGlobal {
    fn choose_eviction_mappings(
        &self,
        usage: &[ucache::policy::MappingUsage],
        out: &mut Vec<usize>,
    ) {
        if !self.0.swap(true, Ordering::Relaxed) {
            panic!("a bug in the global policy");
        }
        ucache::policy::ProportionalGlobal.choose_eviction_mappings(usage, out)
    }
}

/// The global policy's hooks run inside `reserve`, while the caller holds a claimed buffer.
/// A panic there switches the global policy off; before, it unwound out of `reserve` and left
/// that buffer `Loading` forever, so the next pin of it never returned.
#[test]
fn a_panicking_global_policy_is_switched_off_and_strands_nothing() {
    let cache = Cache::new(
        CacheOptions::new(16 * BS as u64)
            .batch(4)
            .background_eviction(false)
            .global_policy(Arc::new(PanicOnceGlobal(Default::default()))),
    )
    .unwrap();
    let store = MemoryStore::new();
    store.insert("o", (0..64 * BS).map(|k| (k / BS) as u8).collect());
    let m = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
    for i in 0..64 {
        assert_eq!(m.pin_shared(i).unwrap()[0], i as u8);
    }
    assert!(cache.used() <= cache.budget());
}
