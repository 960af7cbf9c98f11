//! One thread against a model: puts, updates, deletes and scans over a tree many times the
//! cache, on several page sizes; reopening after close and after a drop without close.

mod common;

use std::collections::BTreeMap;

use common::*;
use rand::{Rng, SeedableRng};
use ucache_kv::{Direction, Kv, KvError, Placement, WriteBatch, POOL_CHUNK};

const PLACEMENTS: [Placement; 2] = [Placement::InPlace, Placement::Pool];

fn check_scans(kv: &Kv, model: &BTreeMap<Vec<u8>, Vec<u8>>, rng: &mut impl Rng) {
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(
        kv.scan(None, None, Direction::Forward, usize::MAX).unwrap(),
        all
    );
    let mut rev = all.clone();
    rev.reverse();
    assert_eq!(
        kv.scan(None, None, Direction::Backward, usize::MAX)
            .unwrap(),
        rev
    );
    for _ in 0..20 {
        let a = key(rng.gen_range(0..3000));
        let b = key(rng.gen_range(0..3000));
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let limit = rng.gen_range(1..200);
        let want: Vec<_> = model
            .range(lo.clone()..hi.clone())
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let got = kv
            .scan(Some(&lo), Some(&hi), Direction::Forward, limit)
            .unwrap();
        assert_eq!(got, want, "forward {lo:?}..{hi:?} limit {limit}");
        let want: Vec<_> = model
            .range(lo.clone()..hi.clone())
            .rev()
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let got = kv
            .scan(Some(&lo), Some(&hi), Direction::Backward, limit)
            .unwrap();
        assert_eq!(got, want, "backward {lo:?}..{hi:?} limit {limit}");
    }
}

/// One thread against a model over a tree larger than the cache. A pool's budget is at least
/// one 2 MiB chunk, several times the in-place runs' 64 or 16 pages, so on the pool values are
/// drawn from the top eighth of the allowed range to make the tree outgrow the cache there too.
fn model_run(page_size: usize, placement: Placement, seed: u64) {
    let store = memory_store();
    let (memory_pages, big_values) = match placement {
        Placement::Pool => (POOL_CHUNK / page_size as u64, true),
        _ => (if page_size == 4096 { 64 } else { 16 }, false),
    };
    let mut o = options(store.clone(), page_size, memory_pages);
    o.placement = placement;
    let kv = Kv::open(o.clone()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut model = BTreeMap::new();
    let max_v = kv.max_value_len();
    for round in 0..6000u64 {
        let n = rng.gen_range(0..3000);
        match rng.gen_range(0..10) {
            0..=5 => {
                let len = if rng.gen_bool(0.05) {
                    max_v
                } else if big_values {
                    rng.gen_range(7 * max_v / 8..max_v)
                } else {
                    rng.gen_range(1..200)
                };
                let v = value(n, round, len);
                kv.put(&key(n), &v).unwrap();
                model.insert(key(n), v);
            }
            6 | 7 => {
                assert_eq!(kv.delete(&key(n)).unwrap(), model.remove(&key(n)).is_some());
            }
            _ => {
                let mut b = WriteBatch::new();
                for j in 0..rng.gen_range(1..20) {
                    let m = (n + j * 7) % 3000;
                    if j % 3 == 2 {
                        b.delete(key(m));
                        model.remove(&key(m));
                    } else {
                        let v = value(m, round, 50);
                        b.put(key(m), v.clone());
                        model.insert(key(m), v);
                    }
                }
                kv.write(&b).unwrap();
            }
        }
        if round % 1000 == 999 {
            check_scans(&kv, &model, &mut rng);
        }
    }
    for n in 0..3000 {
        assert_eq!(
            kv.get(&key(n)).unwrap(),
            model.get(&key(n)).cloned(),
            "key {n}"
        );
    }
    let pages = kv.mapping().stats();
    if page_size < 65536 {
        assert!(
            pages.evictions > 0,
            "{placement:?}: the tree outgrew the cache: {pages}, {} pages in use",
            kv.pages_used().unwrap()
        );
    }
    kv.close().unwrap();
    // Reopen after close, then after a drop without close.
    let kv = Kv::open(o.clone()).unwrap();
    check_scans(&kv, &model, &mut rng);
    kv.put(&key(1), b"after reopen").unwrap();
    model.insert(key(1), b"after reopen".to_vec());
    drop(kv);
    let kv = Kv::open(o).unwrap();
    check_scans(&kv, &model, &mut rng);
}

#[test]
fn matches_a_model_on_4k_pages() {
    within("4k", || {
        for p in PLACEMENTS {
            model_run(4096, p, 1)
        }
    });
}

#[test]
fn matches_a_model_on_16k_pages() {
    within("16k", || {
        for p in PLACEMENTS {
            model_run(16384, p, 2)
        }
    });
}

#[test]
fn matches_a_model_on_64k_pages() {
    within("64k", || {
        for p in PLACEMENTS {
            model_run(65536, p, 3)
        }
    });
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let store = memory_store();
    let o = options(store.clone(), 4096, 64);
    let kv = Kv::open(o.clone()).unwrap();
    kv.put(b"a", b"1").unwrap();
    let big_key = vec![b'k'; kv.max_key_len() + 1];
    let big_value = vec![b'v'; kv.max_value_len() + 1];
    assert!(matches!(
        kv.put(&big_key, b"x"),
        Err(KvError::KeyTooLarge { len: 257, max: 256 })
    ));
    assert!(matches!(
        kv.put(b"", b"x"),
        Err(KvError::KeyTooLarge { len: 0, .. })
    ));
    assert!(matches!(
        kv.put(b"b", &big_value),
        Err(KvError::ValueTooLarge {
            len: 1025,
            max: 1024
        })
    ));
    assert!(matches!(kv.get(&big_key), Err(KvError::KeyTooLarge { .. })));
    // A batch with one bad op applies none of its ops.
    let mut b = WriteBatch::new();
    b.put(b"c".to_vec(), b"3".to_vec())
        .put(b"d".to_vec(), big_value.clone());
    assert!(matches!(kv.write(&b), Err(KvError::ValueTooLarge { .. })));
    assert_eq!(kv.get(b"c").unwrap(), None);
    assert_eq!(
        kv.scan(None, None, Direction::Forward, 10).unwrap().len(),
        1
    );
    kv.close().unwrap();
    // Page sizes: out of range, or not the store's.
    let mut bad = o.clone();
    bad.page_size = 2048;
    assert!(matches!(Kv::open(bad), Err(KvError::BadPageSize(2048))));
    let mut other = o.clone();
    other.page_size = 8192;
    assert!(matches!(Kv::open(other), Err(KvError::BadPageSize(8192))));
    assert_eq!(
        Kv::open(o).unwrap().get(b"a").unwrap().as_deref(),
        Some(&b"1"[..])
    );
}

/// A pool is charged in 2 MiB chunks: a smaller budget is a typed error, and nothing is
/// created (no data file, no log).
#[test]
fn a_pool_budget_below_one_chunk_is_refused_before_anything_is_created() {
    let store = memory_store();
    let mut o = options(store.clone(), 4096, 64);
    o.placement = Placement::Pool;
    match Kv::open(o.clone()) {
        Err(KvError::BudgetTooSmall { budget, min }) => {
            assert_eq!((budget, min), (64 * 4096, POOL_CHUNK))
        }
        r => panic!("expected BudgetTooSmall, got {:?}", r.err()),
    }
    assert!(store.get("data").is_none() && store.get("wal").is_none());
    o.memory_bytes = POOL_CHUNK;
    let kv = Kv::open(o).unwrap();
    kv.put(b"a", b"1").unwrap();
    assert_eq!(kv.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}

#[test]
fn a_full_store_refuses_the_batch_whole() {
    let store = memory_store();
    let mut o = options(store.clone(), 4096, 64);
    o.capacity_pages = 8;
    let kv = Kv::open(o).unwrap();
    let mut n = 0;
    let err = loop {
        let mut b = WriteBatch::new();
        b.put(key(n), value(n, 0, 1000))
            .put(key(n + 1), value(n + 1, 0, 1000));
        match kv.write(&b) {
            Ok(()) => n += 2,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, KvError::Full { pages: 8, .. }), "{err}");
    assert_eq!(
        kv.get(&key(n)).unwrap(),
        None,
        "no part of the failed batch"
    );
    for m in 0..n {
        assert_eq!(kv.get(&key(m)).unwrap(), Some(value(m, 0, 1000)));
    }
    // Deletes and in-place updates still work.
    assert!(kv.delete(&key(0)).unwrap());
    kv.put(&key(1), b"small").unwrap();
}
