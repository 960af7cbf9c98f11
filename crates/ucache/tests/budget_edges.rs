//! The budget and eviction machinery at its edges (cache.rs, mapping/evict.rs,
//! mapping/aside.rs, policy/fallback.rs): each case found by review (2026-11-25) and failing
//! before its fix. Whatever the policies say, memory that can be freed is freed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ucache::policy::{Buffers, Clock, GlobalPolicy, Layout, MappingUsage, Policy};
use ucache::Phase;
use ucache::{Cache, CacheOptions, MapOptions};

mod common;
use common::{pattern_store as store, phase, tracked, within};

const BS: usize = 4096;

/// A cache of `budget` bytes that evicts `batch` buffers at a time on the threads that need
/// memory only (no background evictor), so that each test decides when eviction happens.
fn foreground(budget: u64, batch: usize) -> CacheOptions {
    CacheOptions::new(budget)
        .batch(batch)
        .background_eviction(false)
}

/// A tracked mapping left with a few buffers of budget (the rest pinned by another mapping)
/// keeps loading: each load sets buffers aside, which frees their budget, and evicts those
/// aside longest ago, which frees their slots. Once, set-aside buffers kept their budget and
/// were evicted only when the pool ran short of slots: with every buffer of the tracked
/// mapping aside, an eviction round freed nothing, and the next load waited 5 s and failed
/// with `BudgetExhausted` although every resident buffer of it was evictable.
#[test]
fn a_tracked_mapping_keeps_loading_with_the_rest_of_the_budget_pinned() {
    within("eviction", || {
        let cache = Cache::new(foreground(32 * BS as u64, 2)).unwrap();
        let s = store("o", 64);
        let a = cache.map(s.clone(), "o", tracked()).unwrap();
        let pool = cache.used();
        assert!(pool > 0, "a tracked mapping reserves its pool");
        let p = cache.map(s.clone(), "o", MapOptions::new()).unwrap();
        // Pin all of the budget but four buffers in the untracked mapping.
        let room = 4u64;
        let pinned = (32 * BS as u64 - pool) / BS as u64 - room;
        let held: Vec<_> = (0..pinned).map(|i| p.pin_shared(i).unwrap()).collect();
        for round in 0..8 {
            for i in 0..room {
                let k = round * room + i;
                let r = a.pin_shared(k).map(|g| g[0]);
                assert_eq!(r.ok(), Some(k as u8), "round {round}: {:?}", cache.stats());
            }
        }
        drop(held);
    });
}

/// CLOCK with a per-buffer veto the test switches on and off: an application whose pages may
/// not leave for a while (their log records are not durable yet).
struct Veto {
    clock: Clock,
    vetoed: Arc<Mutex<HashSet<u64>>>,
}

impl Policy for Veto {
    fn name(&self) -> &str {
        "veto"
    }
    fn attach(&mut self, layout: Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.clock.choose_eviction_buffers(b, want, out)
    }
    fn on_insert(&self, index: u64) {
        self.clock.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        self.clock.on_evict(index)
    }
    fn is_evictable(&self, index: u64) -> bool {
        !self.vetoed.lock().unwrap().contains(&index)
    }
}

/// A set-aside buffer whose turn comes while `is_evictable` vetoes it goes to the back of the
/// line. It used to lose its queue entry for good (CLOCK and the fallback propose only cached
/// buffers), holding its slot and budget however much the mapping churned.
#[test]
fn a_vetoed_set_aside_buffer_gets_its_turn_again() {
    within("eviction", || {
        let vetoed = Arc::new(Mutex::new(HashSet::new()));
        let cache = Cache::new(foreground(64 * BS as u64, 4)).unwrap();
        let n = 2048u64;
        let m = cache
            .map(
                store("o", n as usize),
                "o",
                tracked().policy(Box::new(Veto {
                    clock: Clock::new(),
                    vetoed: vetoed.clone(),
                })),
            )
            .unwrap();
        // Fill and churn until some buffers are aside.
        let mut next = 0u64;
        let mut load = |k: u64| {
            for _ in 0..k {
                drop(m.pin_shared(next % n).unwrap());
                next += 1;
            }
        };
        load(200);
        // Veto every buffer now aside, and churn so their turns come (the pool runs short).
        let victims: Vec<u64> = (0..n).filter(|&i| phase(&m, i) == Phase::Aside).collect();
        assert!(!victims.is_empty(), "{:?}", cache.stats());
        vetoed.lock().unwrap().extend(victims.iter().copied());
        let first = victims[0];
        drop(victims);
        // Churn through buffers far from the victims (they are all below `next`).
        let mut k = 1000u64;
        let mut churn = |count: u64, m: &ucache::Mapping| {
            for _ in 0..count {
                drop(m.pin_shared(k).unwrap());
                k += 1;
            }
        };
        churn(300, &m);
        // Lift the veto and churn much more: every set-aside buffer's turn comes many times.
        let still: Vec<u64> = vetoed.lock().unwrap().drain().collect();
        churn(600, &m);
        let stuck: Vec<u64> = still
            .iter()
            .copied()
            .filter(|&i| phase(&m, i) == Phase::Aside)
            .collect();
        assert!(
            stuck.is_empty(),
            "buffers {stuck:?} (first victim {first}) stayed aside after 600 loads \
             with the veto lifted: their slots and budget are lost; {:?}",
            cache.stats()
        );
    });
}

/// A global policy that offers only the mappings over a quota of 8 buffers (a tenant under
/// its quota keeps what it has).
struct OverQuotaOnly;

impl GlobalPolicy for OverQuotaOnly {
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        out.extend((0..usage.len()).filter(|&k| usage[k].resident > 8));
    }
}

/// The global policy only orders mappings, as a mapping's policy only proposes buffers: the
/// mappings it leaves out are walked after the others, so a policy costs throughput, never
/// progress. Offered too few, `reserve` used to spin for 5 s and fail with `BudgetExhausted`
/// while the other mappings' buffers were all evictable.
#[test]
fn a_global_policy_that_offers_too_few_mappings_does_not_exhaust_the_budget() {
    within("eviction", || {
        let cache =
            Cache::new(foreground(16 * BS as u64, 2).global_policy(Arc::new(OverQuotaOnly)))
                .unwrap();
        let s = store("o", 64);
        let a = cache.map(s.clone(), "o", MapOptions::new()).unwrap();
        let b = cache.map(s.clone(), "o", MapOptions::new()).unwrap();
        for i in 0..8 {
            drop(a.pin_shared(i).unwrap());
            drop(b.pin_shared(i).unwrap());
        }
        assert_eq!(cache.used(), 16 * BS as u64);
        let t = Instant::now();
        let r = a.pin_shared(8).map(drop);
        assert!(
            r.is_ok(),
            "16 idle, clean buffers resident, yet the load failed after {:?}: {r:?}",
            t.elapsed()
        );
    });
}

/// When the policy proposes fewer than `want` (here CLOCK, because most buffers are pinned),
/// the fallback sweep tops the list up with other buffers. It used to propose the very ones
/// CLOCK had just proposed, each then counted as a cancelled eviction and taking a place in
/// the batch that a distinct victim could fill.
#[test]
fn duplicate_candidates_are_not_counted_as_cancelled_evictions() {
    within("eviction", || {
        let cache = Cache::new(foreground(8 * BS as u64, 4)).unwrap();
        let m = cache.map(store("o", 64), "o", MapOptions::new()).unwrap();
        let pinned: Vec<_> = (0..6).map(|i| m.pin_shared(i).unwrap()).collect();
        drop(m.pin_shared(6).unwrap());
        drop(m.pin_shared(7).unwrap());
        let before = cache.stats();
        // Needs room: CLOCK finds the two idle buffers 6 and 7, the fallback adds them again.
        drop(m.pin_shared(8).unwrap());
        let after = cache.stats();
        drop(pinned);
        let evicted = after.evictions - before.evictions;
        let cancels = after.eviction_cancels - before.eviction_cancels;
        assert_eq!(evicted, 2, "{after:?}");
        assert_eq!(
            cancels, 0,
            "no candidate was pinned, dirty or vetoed, yet {cancels} evictions were counted \
             as cancelled (the same buffers proposed twice)"
        );
    });
}

/// A global policy that keeps half the budget free: it asks to evict early, which the
/// contract allows ("early, never late").
struct HalfHeadroom;

impl GlobalPolicy for HalfHeadroom {
    fn need_to_evict(&self, used: u64, want: u64, budget: u64) -> bool {
        used + want > budget / 2
    }
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>) {
        ucache::policy::ProportionalGlobal.choose_eviction_mappings(usage, out)
    }
}

/// `need_to_evict` may only ask to evict early. When nothing can be evicted (every resident
/// buffer pinned), a load that fits the budget proceeds; the early request used to act as a
/// hard limit, failing it after 5 s with `BudgetExhausted` at half the budget.
#[test]
fn an_early_eviction_request_does_not_fail_a_load_that_fits_the_budget() {
    within("eviction", || {
        let cache = Cache::new(foreground(16 * BS as u64, 2).global_policy(Arc::new(HalfHeadroom)))
            .unwrap();
        // Pins in order would read ahead into the budget this test measures.
        let m = cache
            .map(store("o", 64), "o", MapOptions::new().readahead(false))
            .unwrap();
        let pins: Vec<_> = (0..8).map(|i| m.pin_shared(i).unwrap()).collect();
        assert_eq!(cache.used(), 8 * BS as u64);
        let r = m.pin_shared(8).map(drop);
        drop(pins);
        assert!(
            r.is_ok(),
            "9 of 16 buffers would fit the budget, yet: {r:?}"
        );
    });
}

/// All set-aside pools together hold at most a quarter of the budget: each tracked mapping
/// reserved its own, so enough of them could reserve the whole budget away from the data.
#[test]
fn set_aside_pools_share_a_quarter_of_the_budget() {
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(2)).unwrap();
    let s = store("o", 256);
    let maps: Vec<_> = (0..8)
        .map(|_| cache.map(s.clone(), "o", tracked()).unwrap())
        .collect();
    assert!(
        cache.used() > 0 && cache.used() <= 16 * BS as u64,
        "{}",
        cache.used()
    );
    // Every mapping still loads, pools or no pools.
    for m in &maps {
        // SAFETY: inside the mapping, which outlives the read.
        let b = unsafe { std::ptr::read_volatile(m.as_ptr().add(3 * BS)) };
        assert_eq!(b, 3);
    }
    drop(maps);
    assert_eq!(cache.used(), 0, "pools given back");
    // And the quarter is free again for new mappings.
    let m = cache.map(s.clone(), "o", tracked()).unwrap();
    assert!(cache.used() > 0);
    drop(m);
}

/// A set-aside buffer's bytes live in a slot its pool has already paid for, so the buffer gives
/// its own budget back. It used to keep it: a full pool then left its share of the budget
/// unused (counted once for the slot, once for the buffer in it), and a tracked mapping held at
/// most the budget less its pool, aside buffers included.
#[test]
fn set_aside_buffers_are_not_charged_twice() {
    within("eviction", || {
        let budget = 64 * BS as u64;
        let cache = Cache::new(foreground(budget, 2)).unwrap();
        let m = cache.map(store("o", 512), "o", tracked()).unwrap();
        let pool = cache.used();
        assert!(pool > 0, "a tracked mapping reserves its pool");
        for i in 0..512u64 {
            assert_eq!(m.pin_shared(i).unwrap()[0], i as u8);
            assert!(cache.used() <= budget, "over budget at {i}");
        }
        let aside = (0..512).filter(|&i| phase(&m, i) == Phase::Aside).count() as u64;
        assert!(aside > 0, "{:?}", cache.stats());
        assert!(
            m.resident() * BS as u64 > budget - pool,
            "{} buffers held ({aside} of them aside): no more than the budget less the pool",
            m.resident()
        );
        // Touching the aside buffers brings each back with budget of its own: still within it.
        for i in (0..512u64).filter(|&i| phase(&m, i) == Phase::Aside) {
            assert_eq!(m.pin_shared(i).unwrap()[0], i as u8);
            assert!(cache.used() <= budget);
        }
        m.unmap().unwrap();
        assert_eq!(cache.used(), 0, "every byte of the budget given back");
    });
}

/// A set-aside buffer touched while the whole budget is pinned elsewhere cannot get budget of
/// its own back: the access fails as a miss would (`BudgetExhausted`), the buffer is evicted
/// (clean, so nothing is lost) and the accounting stays exact.
#[test]
fn a_restore_without_room_fails_as_a_miss_and_loses_nothing() {
    within("eviction", || {
        let budget = 64 * BS as u64;
        let cache = Cache::new(foreground(budget, 2)).unwrap();
        let s = store("o", 512);
        let m = cache.map(s.clone(), "o", tracked()).unwrap();
        for i in 0..256u64 {
            drop(m.pin_shared(i).unwrap());
        }
        let victim = (0..256)
            .find(|&i| phase(&m, i) == Phase::Aside)
            .expect("some buffer aside");
        // Evict the rest of the tracked mapping, then pin every byte of budget left elsewhere.
        for i in (0..256).filter(|&i| phase(&m, i) == Phase::Cached) {
            m.evict(i * BS as u64, BS as u64).unwrap();
        }
        let p = cache.map(s.clone(), "o", MapOptions::new()).unwrap();
        let free = (budget - cache.used()) / BS as u64;
        let held: Vec<_> = (0..free).map(|i| p.pin_shared(i).unwrap()).collect();
        assert_eq!(cache.used(), budget);

        let r = m.pin_shared(victim).map(|g| g[0]);
        assert!(
            matches!(r, Err(ucache::Error::BudgetExhausted { .. })),
            "{r:?}"
        );
        assert_eq!(phase(&m, victim), Phase::Evicted);
        assert_eq!(cache.used(), budget, "the failed restore took nothing");

        drop(held);
        assert_eq!(m.pin_shared(victim).unwrap()[0], victim as u8);
        p.unmap().unwrap();
        m.unmap().unwrap();
        assert_eq!(cache.used(), 0, "every byte of the budget given back");
    });
}

/// A miss behind a budget that is all dirty while every write-back fails (a full disk, a
/// store that is down) should fail at once with the write-back's error, once each dirty
/// buffer's write-back has been tried and failed, instead of retrying write-backs for the
/// whole `budget_wait` (issue 23, item 5: "misses fail fast"). Checked by counting the
/// write-backs the miss attempts, not by timing it: at most one per dirty buffer. Nothing is
/// lost either way: once writes work, msync writes it all.
///
/// Before the fix `CacheCore::reserve` retried eviction rounds until `budget_wait` passed,
/// each round trying the same dirty buffers again (11,704 write attempts for these 16 buffers
/// in 2 s; 1,024 to 1,648 per miss in docs/reliability.md's ENOSPC runs). It now gives up
/// after a few rounds whose write-backs all failed.
#[test]
fn a_miss_behind_unwritable_dirty_data_fails_after_one_try_of_each_write_back() {
    use std::sync::atomic::Ordering::Relaxed;
    use ucache::store::FaultStore;
    use ucache::Error;
    within("miss", || {
        let mem = store("o", 64);
        let faults = FaultStore::new(mem.clone());
        let cfg = faults.config().clone();
        let cache = Cache::new(
            foreground(16 * BS as u64, 4).budget_wait(std::time::Duration::from_secs(2)),
        )
        .unwrap();
        // Without readahead: the sequential pins below would prefetch clean buffers on the
        // IO threads, which take budget the dirty ones then lose to an eviction (written back
        // while writes still work), and the miss evicts a clean one and succeeds. Whether it
        // did depended on the order the resident set met them in.
        let m = cache
            .map(
                Arc::new(faults),
                "o",
                MapOptions::new().writable(true).readahead(false),
            )
            .unwrap();
        for i in 0..16 {
            m.pin_exclusive(i).unwrap().fill(0xD0 + i as u8);
        }
        assert_eq!(cache.used(), 16 * BS as u64);
        for i in 0..16 {
            assert!(m.state(i).unwrap().dirty(), "the budget is all dirty: {i}");
        }
        cfg.fail_writes.store(true, Relaxed);
        cfg.reset_counters();
        let e = m.pin_shared(40).map(drop).unwrap_err();
        assert!(matches!(e, Error::WritebackFailed { .. }), "{e}");
        let tries = cfg.writes();
        assert!(
            tries <= 16,
            "the miss tried {tries} write-backs of 16 dirty buffers before it failed"
        );
        cfg.fail_writes.store(false, Relaxed);
        m.msync(0, m.len()).unwrap();
        let got = mem.get("o").unwrap();
        for i in 0..16 {
            assert!(
                got[i * BS..(i + 1) * BS]
                    .iter()
                    .all(|&b| b == 0xD0 + i as u8),
                "buffer {i}"
            );
        }
    });
}
