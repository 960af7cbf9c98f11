//! Mapping weights under a real cache: a tenant that scans cannot take more than its weighted
//! share from a tenant whose working set is reused.

use std::sync::Arc;

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

/// A loads its working set, then B scans its whole object three times; returns how many of
/// A's buffers are still resident.
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
