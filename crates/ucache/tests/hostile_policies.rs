//! Policies that fight the cache, with dirty buffers, on explicit and transparent mappings,
//! each run under a watchdog: one that vetoes every eviction, one that is slow in every hook,
//! and one that calls back into its own mapping from its hooks. The cache keeps its budget
//! (or answers `BudgetExhausted`), loses no write, and never deadlocks.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ucache::policy::{Buffers, Clock, Layout, Policy};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, Error, FaultAction, MapOptions, Mapping};

const BS: usize = 4096;
const BUFFERS: u64 = 64;
const BUDGET: u64 = 16;

/// What a hostile policy does on top of CLOCK.
#[derive(Clone, Copy, PartialEq)]
enum Hostility {
    /// `is_evictable` says no while `veto` is set.
    VetoAll,
    /// Every hook sleeps.
    Slow,
    /// Every hook calls back into the mapping.
    Reentrant,
}

struct Hostile {
    how: Hostility,
    clock: Clock,
    veto: Arc<AtomicBool>,
    mapping: Arc<OnceLock<Weak<Mapping>>>,
    reentries: Arc<AtomicU64>,
}

impl Hostile {
    fn act(&self, index: u64) {
        match self.how {
            Hostility::VetoAll => {}
            Hostility::Slow => std::thread::sleep(Duration::from_micros(300)),
            Hostility::Reentrant => {
                // One level deep: the calls below miss and run hooks of their own, and a
                // policy that re-entered from those too would make a tree of loads as deep
                // as the budget.
                if DEPTH.with(|d| d.replace(true)) {
                    return;
                }
                let _out = Leave;
                let Some(m) = self.mapping.get().and_then(Weak::upgrade) else {
                    return;
                };
                self.reentries.fetch_add(1, Relaxed);
                let other = (index + 7) % BUFFERS;
                // Whatever these return, they must return.
                let _ = m.state(other);
                let _ = m.read_optimistic(other, |v| v.read_u64(0));
                let _ = m.pin_shared(other).map(drop);
                let _ = m.prefetch(other * BS as u64, BS as u64);
                let _ = m.writeback(other * BS as u64, BS as u64);
            }
        }
    }
}

std::thread_local! {
    /// Whether this thread is inside a re-entrant hook's calls.
    static DEPTH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Leaves the re-entrant calls, however the hook ends.
struct Leave;

impl Drop for Leave {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(false));
    }
}

impl Policy for Hostile {
    fn name(&self) -> &str {
        "hostile"
    }
    fn attach(&mut self, layout: Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.act(0);
        self.clock.choose_eviction_buffers(b, want, out)
    }
    fn is_evictable(&self, index: u64) -> bool {
        if self.how == Hostility::Slow {
            self.act(index);
        }
        !(self.how == Hostility::VetoAll && self.veto.load(Relaxed))
    }
    fn on_miss(&self, index: u64) {
        self.act(index);
    }
    fn on_insert(&self, index: u64) {
        self.act(index);
        self.clock.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        self.act(index);
        self.clock.on_evict(index)
    }
}

/// A cache of `BUDGET` buffers that gives up on memory after 100 ms, and a writable mapping
/// of a zeroed object of `BUFFERS` buffers under a hostile policy.
struct Setup {
    cache: Cache,
    store: MemoryStore,
    veto: Arc<AtomicBool>,
    reentries: Arc<AtomicU64>,
    m: Arc<Mapping>,
}

/// With `hook_log`, a transparent load the budget cannot hold is counted in it, the vetoes are
/// lifted and the access retried.
fn setup(how: Hostility, transparent: bool, hook_log: Option<Arc<AtomicU64>>) -> Setup {
    let store = MemoryStore::new();
    store.insert("o", vec![0u8; BUFFERS as usize * BS]);
    let cache = Cache::new(
        CacheOptions::new(BUDGET * BS as u64)
            .batch(2)
            .budget_wait(Duration::from_millis(100)),
    )
    .unwrap();
    let veto = Arc::new(AtomicBool::new(false));
    let mapping = Arc::new(OnceLock::new());
    let reentries = Arc::new(AtomicU64::new(0));
    let policy = Hostile {
        how,
        clock: Clock::new(),
        veto: veto.clone(),
        mapping: mapping.clone(),
        reentries: reentries.clone(),
    };
    let mut options = MapOptions::new()
        .writable(true)
        .transparent(transparent)
        .policy(Box::new(policy));
    if let Some(log) = hook_log {
        // A load the budget cannot hold: counted, vetoes lifted, and the access retried.
        let veto = veto.clone();
        options = options.on_fault_error(Arc::new(move |_, e: &Error| {
            assert!(matches!(e, Error::BudgetExhausted { .. }), "{e}");
            log.fetch_add(1, Relaxed);
            veto.store(false, Relaxed);
            FaultAction::Retry
        }));
    }
    let m = Arc::new(cache.map(Arc::new(store.clone()), "o", options).unwrap());
    mapping.set(Arc::downgrade(&m)).unwrap();
    Setup {
        cache,
        store,
        veto,
        reentries,
        m,
    }
}

/// Writes `v` into the first word of buffer `i`, through a pin or a plain store.
fn put(m: &Mapping, i: u64, v: u64) {
    if m.is_transparent() {
        // SAFETY: inside the live mapping; a plain store is how a transparent mapping is
        // written.
        unsafe {
            std::ptr::write_volatile((m.as_mut_ptr() as *mut u64).add(i as usize * BS / 8), v)
        }
    } else {
        retrying(|| {
            m.pin_exclusive(i)
                .map(|mut g| g[..8].copy_from_slice(&v.to_le_bytes()))
        });
    }
}

fn get(m: &Mapping, i: u64) -> u64 {
    if m.is_transparent() {
        // SAFETY: as in `put`.
        unsafe { std::ptr::read_volatile((m.as_ptr() as *const u64).add(i as usize * BS / 8)) }
    } else {
        retrying(|| {
            m.pin_shared(i)
                .map(|g| u64::from_le_bytes(g[..8].try_into().unwrap()))
        })
    }
}

/// Runs `f` until it succeeds: a re-entrant policy's nested loads may hold the whole budget
/// for a moment, which a pin is told with `BudgetExhausted`. Any other error fails the test.
fn retrying<T>(mut f: impl FnMut() -> Result<T, Error>) -> T {
    loop {
        match f() {
            Ok(v) => return v,
            Err(Error::BudgetExhausted { .. }) => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Unmaps and checks that the store holds `want[i]` in buffer `i`'s first word.
fn finish(s: Setup, want: &[u64]) {
    let Setup {
        cache, store, m, ..
    } = s;
    // A re-entrant hook upgrades its weak handle for the length of a call, and hooks also run
    // on the IO threads (the pins' readahead): wait until the last such call has returned.
    let mut m = m;
    let m = loop {
        match Arc::try_unwrap(m) {
            Ok(m) => break m,
            Err(shared) => {
                m = shared;
                std::thread::yield_now();
            }
        }
    };
    m.unmap().unwrap();
    assert_eq!(cache.used(), 0);
    let d = store.get("o").unwrap();
    for (i, &w) in want.iter().enumerate() {
        let got = u64::from_le_bytes(d[i * BS..i * BS + 8].try_into().unwrap());
        assert_eq!(got, w, "buffer {i} lost a write");
    }
}

/// Vetoes on dirty buffers filling the budget: a pin that needs memory gets `BudgetExhausted`
/// (the budget is never overrun), msync still makes the data durable, and once the vetoes
/// lift every buffer can be loaded and nothing is lost.
#[test]
fn a_policy_that_vetoes_every_eviction_exhausts_the_budget_and_loses_nothing() {
    common::within("veto, explicit", || {
        let s = setup(Hostility::VetoAll, false, None);
        let mut want = vec![0u64; BUFFERS as usize];
        for i in 0..BUDGET {
            put(&s.m, i, i + 100);
            want[i as usize] = i + 100;
        }
        s.veto.store(true, Relaxed);
        let r = s.m.pin_shared(BUDGET).map(drop);
        assert!(matches!(r, Err(Error::BudgetExhausted { .. })), "{r:?}");
        assert!(s.cache.stats().budget_stalls > 0);
        assert!(s.cache.used() <= s.cache.budget());
        s.m.msync(0, s.m.len()).unwrap();
        for i in 0..BUDGET {
            let d = s.store.get("o").unwrap();
            let w = u64::from_le_bytes(d[i as usize * BS..][..8].try_into().unwrap());
            assert_eq!(w, i + 100, "msync does not ask the veto");
        }
        // An explicit evict is the application's own command: it is not vetoed.
        s.m.evict(0, s.m.len()).unwrap();
        assert_eq!(s.m.resident(), 0);
        s.veto.store(false, Relaxed);
        for i in 0..BUFFERS {
            put(&s.m, i, get(&s.m, i) + 1);
            want[i as usize] += 1;
        }
        finish(s, &want);
    });
}

/// The same on a transparent mapping: the plain load that needs memory reaches the fault hook
/// with `BudgetExhausted`; the hook lifts the vetoes and the retried access is served.
#[test]
fn a_vetoing_policy_on_a_transparent_mapping_reaches_the_fault_hook_and_loses_nothing() {
    if common::under_tsan() {
        return;
    }
    common::within("veto, transparent", || {
        let hooked = Arc::new(AtomicU64::new(0));
        let s = setup(Hostility::VetoAll, true, Some(hooked.clone()));
        let mut want = vec![0u64; BUFFERS as usize];
        for i in 0..BUDGET {
            put(&s.m, i, i + 100);
            want[i as usize] = i + 100;
        }
        s.veto.store(true, Relaxed);
        assert_eq!(get(&s.m, BUDGET), 0);
        assert_eq!(
            hooked.load(Relaxed),
            1,
            "the load waited, failed, and was retried"
        );
        assert!(s.cache.used() <= s.cache.budget());
        for i in 0..BUFFERS {
            put(&s.m, i, get(&s.m, i) + 1);
            want[i as usize] += 1;
        }
        finish(s, &want);
    });
}

/// Four threads write their own buffers through a policy that sleeps in every hook, the
/// mapping four times the budget: every write survives, the budget holds.
///
/// A slow hook may keep every candidate in another thread's hands for longer than the
/// 100 ms `budget_wait` on a loaded machine. That load then fails with `BudgetExhausted`,
/// which is right, so both modes retry it: `retrying` for pins and the fault hook for plain
/// accesses (without a hook a transparent mapping would raise SIGBUS, as CI once saw).
#[test]
fn a_slow_policy_under_concurrent_writers_keeps_the_budget_and_every_write() {
    for &transparent in common::transparent_modes() {
        common::within("slow policy", move || {
            let s = setup(Hostility::Slow, transparent, Some(Default::default()));
            std::thread::scope(|sc| {
                for t in 0..4u64 {
                    let (m, cache) = (&s.m, &s.cache);
                    sc.spawn(move || {
                        for round in 1..=20u64 {
                            for i in (t..BUFFERS).step_by(4) {
                                assert_eq!(get(m, i), round - 1, "buffer {i}");
                                put(m, i, round);
                            }
                            assert!(cache.used() <= cache.budget() + 2 * BS as u64);
                        }
                    });
                }
            });
            finish(s, &[20; BUFFERS as usize]);
        });
    }
}

/// A policy whose hooks call back into the mapping (state, optimistic read, pin, prefetch,
/// write-back of another buffer) from inside loads, evictions and victim choice: every call
/// returns, the data is right, the budget holds.
#[test]
fn a_policy_calling_back_into_its_mapping_never_deadlocks() {
    for &transparent in common::transparent_modes() {
        common::within("re-entrant policy", move || {
            let s = setup(Hostility::Reentrant, transparent, Some(Default::default()));
            std::thread::scope(|sc| {
                for t in 0..2u64 {
                    let (m, cache) = (&s.m, &s.cache);
                    sc.spawn(move || {
                        for round in 1..=10u64 {
                            for i in (t..BUFFERS).step_by(2) {
                                assert_eq!(get(m, i), round - 1, "buffer {i}");
                                put(m, i, round);
                            }
                            assert!(cache.used() <= cache.budget() + 2 * BS as u64);
                        }
                    });
                }
            });
            assert!(s.reentries.load(Relaxed) > 0);
            finish(s, &[10; BUFFERS as usize]);
        });
    }
}
