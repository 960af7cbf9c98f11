//! Mapping weights under a real cache: a tenant that scans cannot take more than its weighted
//! share from a tenant whose working set is reused, and a tenant nobody uses keeps no share.

use std::sync::Arc;

use ucache::policy::{GlobalPolicy, ProportionalGlobal, ReservedShares};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const BUDGET: u64 = 64;
const BUFFERS: u64 = 256;
/// Tenant A's working set: three quarters of the budget.
const HOT: u64 = 48;

fn store() -> Arc<MemoryStore> {
    let s = MemoryStore::new();
    s.insert("a", vec![1u8; BUFFERS as usize * BS]);
    s.insert("b", vec![2u8; BUFFERS as usize * BS]);
    Arc::new(s)
}

/// A loads its working set, then B scans its whole object three times while A stays in use (a
/// pin of one buffer every sixteenth of a budget that B reads); returns how many of A's
/// buffers are still resident.
fn a_resident_after_b_scans(weight_a: u32, weight_b: u32) -> u64 {
    let cache = Cache::new(CacheOptions::new(BUDGET * BS as u64).batch(4)).unwrap();
    let s = store();
    let a = cache
        .map(s.clone(), "a", MapOptions::new().weight(weight_a))
        .unwrap();
    let b = cache
        .map(s, "b", MapOptions::new().weight(weight_b))
        .unwrap();
    for i in 0..HOT {
        assert_eq!(a.pin_shared(i).unwrap()[0], 1);
    }
    for _ in 0..3 {
        for i in 0..BUFFERS {
            assert_eq!(b.pin_shared(i).unwrap()[0], 2);
            if i % (BUDGET / 16) == 0 {
                assert_eq!(a.pin_shared(0).unwrap()[0], 1);
            }
        }
    }
    assert!(cache.used() <= BUDGET * BS as u64);
    a.resident()
}

#[test]
fn a_heavier_tenant_keeps_its_share_through_a_scan() {
    // 3:1 gives A 48 of the 64 buffers: the scan takes only what is over A's share (at most
    // a batch or two while the two tenants sit at their shares).
    let kept = a_resident_after_b_scans(3, 1);
    assert!(kept >= 40, "weight 3:1 kept {kept} of A's {HOT}");
    // Equal weights: each tenant's share is half, so the scan takes A down to about 32.
    let equal = a_resident_after_b_scans(1, 1);
    assert!(equal <= 36, "weight 1:1 kept {equal}");
    assert!(kept > equal);
}

/// A loads its working set and is never used again; B then loops over a working set larger
/// than its share but within the budget, for up to 20 passes. Returns B's misses per pass
/// (stopping at the first pass without one) and what A holds at the end.
fn b_loops_while_a_sleeps(global: Arc<dyn GlobalPolicy>) -> (Vec<u64>, u64) {
    let cache = Cache::new(
        CacheOptions::new(BUDGET * BS as u64)
            .batch(4)
            .global_policy(global),
    )
    .unwrap();
    let s = store();
    // No readahead: B's loop must not load past its set.
    let opts = |w| MapOptions::new().weight(w).readahead(false);
    let a = cache.map(s.clone(), "a", opts(3)).unwrap();
    let b = cache.map(s, "b", opts(1)).unwrap();
    for i in 0..HOT {
        assert_eq!(a.pin_shared(i).unwrap()[0], 1);
    }
    let mut misses = Vec::new();
    while misses.len() < 20 && misses.last() != Some(&0) {
        let before = b.stats().misses;
        for i in 0..B_SET {
            assert_eq!(b.pin_shared(i).unwrap()[0], 2);
        }
        misses.push(b.stats().misses - before);
    }
    assert!(cache.used() <= BUDGET * BS as u64);
    (misses, a.resident())
}

/// B's loop: 56 buffers, over B's share of 16 (weights 3:1, budget 64).
const B_SET: u64 = 56;

/// Once the cache has evicted half its budget since A's last use, A is idle and its buffers
/// go first, so B's loop stops missing. Before idleness counted, A's 48 buffers stayed under
/// A's share and B's 56 thrashed in B's 16 for ever, as they still do under [`ReservedShares`].
#[test]
fn an_idle_tenant_gives_its_share_to_one_in_use() {
    let (misses, a_holds) = b_loops_while_a_sleeps(Arc::new(ProportionalGlobal));
    assert_eq!(
        misses.last(),
        Some(&0),
        "B missed in every pass: {misses:?}; A still holds {a_holds}"
    );
    assert!(a_holds <= BUDGET - B_SET, "A holds {a_holds}");

    let (misses, a_holds) = b_loops_while_a_sleeps(Arc::new(ReservedShares));
    assert!(
        misses.iter().all(|&m| m > 0),
        "reserved shares: B stopped missing ({misses:?})"
    );
    assert!(a_holds >= 40, "reserved shares: A kept only {a_holds}");
}
