//! `policy::Veto`: any policy plus an application veto in one line; vetoed buffers stay
//! resident through a scan that evicts everything else, whatever the wrapped policy.

use std::sync::Arc;

use ucache::policy::{policy_by_name, Clock, Policy, Veto};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: u64 = 4096;

fn scan_keeps_vetoed(policy: Box<dyn Policy>, name: &str) {
    let store = MemoryStore::new();
    store.insert("o", vec![3; 64 * BS as usize]);
    let cache = Cache::new(CacheOptions::new(16 * BS).batch(4)).unwrap();
    let m = cache
        .map(Arc::new(store), "o", MapOptions::new().policy(policy))
        .unwrap();
    assert_eq!(m.policy_name(), name, "the wrapped policy's name");
    m.ensure_cached_buffers(&[0, 1, 2, 3]).unwrap();
    for round in 0..3 {
        for i in 4..64 {
            assert_eq!(m.pin_shared(i).unwrap()[0], 3);
        }
        for i in 0..4 {
            assert!(
                m.is_resident(i).unwrap(),
                "{name} round {round}: buffer {i}"
            );
        }
    }
    assert!(cache.stats().evictions >= 40, "the scan evicted the rest");
    // Explicit eviction is the program's own call: the veto does not stop it.
    m.evict_buffers(&[0]).unwrap();
    assert!(!m.is_resident(0).unwrap());
}

#[test]
fn vetoed_buffers_survive_a_scan() {
    scan_keeps_vetoed(Box::new(Veto::new(Clock::new(), |i| i >= 4)), "clock");
    for name in ["lru", "s3fifo", "sieve"] {
        let inner = policy_by_name(name).unwrap();
        let p = Veto::new(inner, |i| i >= 4);
        let n = p.name().to_string();
        scan_keeps_vetoed(Box::new(p), &n);
    }
}

#[test]
fn the_veto_and_the_inner_policy_must_both_agree() {
    struct NoThree;
    impl Policy for NoThree {
        fn name(&self) -> &str {
            "no-three"
        }
        fn choose_eviction_buffers(
            &self,
            _: &ucache::policy::Buffers<'_>,
            _: usize,
            _: &mut Vec<u64>,
        ) {
        }
        fn is_evictable(&self, i: u64) -> bool {
            i != 3
        }
    }
    let v = Veto::new(NoThree, |i| i != 5);
    assert!(v.is_evictable(0));
    assert!(!v.is_evictable(3), "the inner policy's veto stands");
    assert!(!v.is_evictable(5), "the wrapper's veto");
    assert_eq!(v.inner().name(), "no-three");
}
