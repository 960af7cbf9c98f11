//! The policy library at its edges, each case found by review (2026-11-25) and failing before
//! its fix: residency beyond what a policy was sized for, batched eviction, victims behind
//! pinned buffers, and a mapping whose share is below the whole budget.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use parking_lot::Mutex;
use ucache::policy::{
    policy_by_name, Buffers, GlobalPolicy, Layout, MappingUsage, Policy, Simulator,
};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;

/// Forwards every hook and records contract violations of the proposals.
struct Check {
    inner: Box<dyn Policy>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Policy for Check {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn attach(&mut self, layout: Layout) {
        self.inner.attach(layout)
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let start = out.len();
        self.inner.choose_eviction_buffers(b, want, out);
        let got = &out[start..];
        let mut seen = HashSet::new();
        let mut log = self.log.lock();
        if got.len() > want {
            log.push(format!("{} proposals for {want}", got.len()));
        }
        for &i in got {
            if i >= b.len() {
                log.push(format!("out of range {i}"));
                continue;
            }
            if !seen.insert(i) {
                log.push(format!("duplicate {i}"));
            }
            if !b.is_candidate(i) {
                log.push(format!("non-candidate {i}"));
            }
        }
        if got.is_empty() && want > 0 {
            let c = (0..b.len()).filter(|&i| b.is_candidate(i)).count();
            if c > 0 {
                log.push(format!("starved: nothing proposed, {c} candidates"));
            }
        }
    }
    fn is_evictable(&self, i: u64) -> bool {
        self.inner.is_evictable(i)
    }
    fn admit(&self, i: u64) -> bool {
        self.inner.admit(i)
    }
    fn has_prefetching(&self) -> bool {
        self.inner.has_prefetching()
    }
    fn choose_prefetch_buffers(&self, i: u64, out: &mut Vec<u64>) {
        self.inner.choose_prefetch_buffers(i, out)
    }
    fn wants_hits(&self) -> bool {
        self.inner.wants_hits()
    }
    fn on_miss(&self, i: u64) {
        self.inner.on_miss(i)
    }
    fn on_hit(&self, i: u64) {
        self.inner.on_hit(i)
    }
    fn on_insert(&self, i: u64) {
        self.inner.on_insert(i)
    }
    fn on_evict(&self, i: u64) {
        self.inner.on_evict(i)
    }
}

fn store(buffers: u64) -> Arc<MemoryStore> {
    let s = MemoryStore::new();
    s.insert("db", vec![1u8; buffers as usize * BS]);
    Arc::new(s)
}

/// Runs `f` on a thread and fails if it makes no step for [`common::HANG`] (it is then left
/// spinning; the test process ends with the harness).
fn within_steps(f: impl FnOnce(&dyn Fn(u64)) + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f(&|i| {
            let _ = tx.send(i);
        })
    });
    let mut last = None;
    loop {
        match rx.recv_timeout(common::HANG) {
            Ok(i) => last = Some(i),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
            Err(_) => panic!(
                "no progress for {:?}; last step done: {last:?}",
                common::HANG
            ),
        }
    }
}

/// A global policy with a soft limit: it would let the cache run over its budget (here up to
/// 4x) before asking for evictions.
struct Overcommit;

impl GlobalPolicy for Overcommit {
    fn need_to_evict(&self, used: u64, want: u64, budget: u64) -> bool {
        used + want > 4 * budget
    }
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        out.extend(0..usage.len());
    }
}

/// CLOCK (the default policy) sizes its resident ring from `Layout::capacity`. A global policy
/// that let residency run past it made the 17th insert into a 16-slot ring spin in `on_insert`
/// with its buffer `Loading`. Now the cache evicts at the budget whatever the global policy
/// answers, and a full ring refuses a key instead of spinning.
#[test]
fn an_overcommitting_global_policy_is_held_to_the_budget() {
    within_steps(|step| {
        let cache = Cache::new(
            CacheOptions::new(8 * BS as u64)
                .batch(1)
                .global_policy(Arc::new(Overcommit)),
        )
        .unwrap();
        let m = cache.map(store(256), "db", MapOptions::new()).unwrap();
        for i in 0..32 {
            drop(m.pin_shared(i).unwrap());
            step(i);
        }
    });
}

/// Every victim of a batch makes room for a newcomer that pushes a window buffer out, so each
/// goes through TinyLFU admission. When only the first did, the rest came straight off the main
/// cache's LRU end, and under batched eviction (the live cache's default: 64 buffers of 4 KiB)
/// W-TinyLFU was LRU: on a loop just larger than the cache it missed every access, against
/// about 20% evicting one at a time.
#[test]
fn w_tinylfu_admits_every_victim_of_a_batch() {
    let run = |batch: usize| {
        let n = 1100;
        let mut sim =
            Simulator::new(policy_by_name("w-tinylfu").unwrap(), n, 1000).with_batch(batch);
        for _ in 0..8 {
            for i in 0..n {
                sim.access(i);
            }
        }
        sim.stats().miss_ratio()
    };
    let one = run(1);
    let four = run(4);
    assert!(one < 0.3, "batch 1: {one}");
    assert!(four < 0.5, "batch 4 misses {four} (batch 1: {one})");
}

fn checked(
    name: &str,
    budget: u64,
    buffers: u64,
) -> (Cache, ucache::Mapping, Arc<Mutex<Vec<String>>>) {
    let cache = Cache::new(
        CacheOptions::new(budget * BS as u64)
            .batch(4)
            .background_eviction(false),
    )
    .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let p = Check {
        inner: policy_by_name(name).unwrap(),
        log: log.clone(),
    };
    let m = cache
        // No readahead: the check compares the policy's proposals with the resident set, which
        // background loads would change under it.
        .map(
            store(buffers),
            "db",
            MapOptions::new().policy(Box::new(p)).readahead(false),
        )
        .unwrap();
    (cache, m, log)
}

/// Pinned buffers at the main cache's LRU end must not exhaust the victim walk: with its cap at
/// `4 * window_max + 2 * want + 4` steps, W-TinyLFU proposed nothing here although 23 resident
/// buffers were idle (the manager's fallback then picked victims with no regard to it).
#[test]
fn w_tinylfu_proposes_victims_behind_a_pinned_lru_tail() {
    let (_cache, m, log) = checked("w-tinylfu", 64, 256);
    let mut held = Vec::new();
    for i in 0..64 {
        let g = m.pin_shared(i).unwrap();
        if i < 40 || i == 63 {
            held.push(g);
        }
    }
    drop(m.pin_shared(100).unwrap());
    let log = log.lock().clone();
    assert!(log.is_empty(), "{log:?}");
}

/// A victim is the least frequent of 16 sampled residents; when all 16 are pinned, LFU looks at
/// every resident rather than propose nothing (with 56 of 64 pinned, whole calls came back
/// empty).
#[test]
fn lfu_proposes_victims_when_its_sample_is_all_pinned() {
    let (_cache, m, log) = checked("lfu", 64, 1024);
    let mut held = Vec::new();
    for i in 0..64 {
        let g = m.pin_shared(i).unwrap();
        if i < 56 {
            held.push(g);
        }
    }
    for i in 100..400 {
        drop(m.pin_shared(i).unwrap());
    }
    let log = log.lock().clone();
    assert!(
        log.is_empty(),
        "{} violations, e.g. {:?}",
        log.len(),
        &log[..log.len().min(3)]
    );
}

/// The LIR set was sized from the whole budget, and a buffer only becomes HIR once it is full.
/// A mapping that gets less (another mapping holds a quarter of the budget here; or the
/// background evictor's headroom) never filled it: every insert was LIR, Q stayed empty, and
/// victims came from S's bottom, plain LRU, missing every access of a loop the simulator
/// misses 24% of. Now the LIR set is sized to what is resident when the cache asks for
/// victims.
#[test]
fn lirs_keeps_its_hir_queue_when_the_mapping_gets_less_than_the_budget() {
    let budget = 4096u64;
    let cache =
        Cache::new(CacheOptions::new(budget * BS as u64).background_eviction(false)).unwrap();
    let other = cache.map(store(1024), "db", MapOptions::new()).unwrap();
    let held: Vec<_> = (0..1024).map(|i| other.pin_shared(i).unwrap()).collect();
    let n = 3072 + 100;
    let m = cache
        .map(
            store(n),
            "db",
            MapOptions::new().policy(policy_by_name("lirs").unwrap()),
        )
        .unwrap();
    let live = loop_miss_ratio(&cache, &m, n, 6);
    drop(held);
    let mut sim = Simulator::new(policy_by_name("lirs").unwrap(), n, 3072).with_batch(64);
    for _ in 0..6 {
        for i in 0..n {
            sim.access(i);
        }
    }
    let simulated = sim.stats().miss_ratio();
    assert!(simulated < 0.3, "simulated {simulated}");
    assert!(
        live < 0.5,
        "live LIRS misses {live} (simulated: {simulated})"
    );
}

/// The same with one mapping and the default background evictor, whose headroom alone kept
/// the LIR set from filling (measured 63-100% misses before the fix, 21% without the evictor).
#[test]
fn lirs_keeps_its_hir_queue_under_the_background_evictor() {
    let budget = 4096u64;
    let cache = Cache::new(CacheOptions::new(budget * BS as u64)).unwrap();
    let n = budget + 100;
    let m = cache
        .map(
            store(n),
            "db",
            MapOptions::new().policy(policy_by_name("lirs").unwrap()),
        )
        .unwrap();
    for i in 0..n {
        drop(m.pin_shared(i).unwrap());
    }
    let live = loop_miss_ratio(&cache, &m, n, 6);
    assert!(live < 0.5, "live LIRS misses {live}");
}

/// The miss ratio of `rounds` loops over buffers `0..n` of `m`, pinned one at a time.
fn loop_miss_ratio(cache: &Cache, m: &ucache::Mapping, n: u64, rounds: usize) -> f64 {
    let before = cache.stats();
    for _ in 0..rounds {
        for i in 0..n {
            drop(m.pin_shared(i).unwrap());
        }
    }
    let s = cache.stats();
    let (hits, misses) = (s.hits - before.hits, s.misses - before.misses);
    misses as f64 / (hits + misses) as f64
}
