//! Eight threads of gets, puts, deletes, batches and scans over a tree 16 times the cache.
//!
//! Each thread owns the keys `n` with `n % THREADS == t`, so it knows their exact values (its
//! model) and checks every get and every scan of its own keys against it: no lost update, no
//! phantom, nothing missing. Every key a scan returns, whoever owns it, must carry a value
//! naming that key (nothing misplaced), and scans must come back strictly ordered.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use rand::{Rng, SeedableRng};
use ucache_kv::{Direction, Kv, Placement, WriteBatch};

const THREADS: u64 = 8;

/// One run of the test: a placement, its budget, and enough keys and large enough values to
/// make a tree at least 16 times the budget. A pool's budget is at least one 2 MiB chunk,
/// so the pool run uses values of the 1 KiB maximum of a 4 KiB page instead of 150 bytes,
/// and 28,000 keys instead of 24,000.
struct Setup {
    placement: Placement,
    memory_pages: u64,
    keys: u64,
    value_len: usize,
}

fn check_scan(got: &[(Vec<u8>, Vec<u8>)], dir: Direction) {
    for w in got.windows(2) {
        match dir {
            Direction::Forward => assert!(w[0].0 < w[1].0, "scan out of order"),
            Direction::Backward => assert!(w[0].0 > w[1].0, "scan out of order"),
        }
    }
    for (k, v) in got {
        let (n, _) = parse_value(v);
        assert_eq!(&key(n), k, "a value under the wrong key");
    }
}

#[test]
fn eight_threads_against_their_models_in_place() {
    within("eight threads, in place", || {
        eight_threads(Setup {
            placement: Placement::InPlace,
            memory_pages: 64,
            keys: 24_000,
            value_len: 150,
        })
    });
}

#[test]
fn eight_threads_against_their_models_on_the_pool() {
    within("eight threads, pool", || {
        eight_threads(Setup {
            placement: Placement::Pool,
            memory_pages: ucache_kv::POOL_CHUNK / 4096,
            keys: 28_000,
            value_len: 1024,
        })
    });
}

fn eight_threads(setup: Setup) {
    let (keys, value_len) = (setup.keys, setup.value_len);
    let store = memory_store();
    let mut o = options(store, 4096, setup.memory_pages);
    o.placement = setup.placement;
    o.sync_commits = false;
    o.checkpoint_bytes = 4 << 20;
    let kv = Arc::new(Kv::open(o).unwrap());
    // Load every key once so the tree is its full size from the start.
    for chunk in (0..keys).collect::<Vec<_>>().chunks(200) {
        let mut b = WriteBatch::new();
        for &n in chunk {
            b.put(key(n), value(n, 0, value_len));
        }
        kv.write(&b).unwrap();
    }
    let loaded = kv
        .scan(None, None, Direction::Forward, usize::MAX)
        .unwrap()
        .len();
    assert_eq!(loaded as u64, keys);
    let pages = kv.pages_used().unwrap();
    assert!(
        pages >= 16 * setup.memory_pages,
        "the tree ({pages} pages) is at least 16 times the cache"
    );
    let checked = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (kv, checked) = (kv.clone(), checked.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..keys)
                    .filter(|n| n % THREADS == t)
                    .map(|n| (key(n), value(n, 0, value_len)))
                    .collect();
                let mine =
                    |rng: &mut rand::rngs::StdRng| rng.gen_range(0..keys / THREADS) * THREADS + t;
                for round in 1..=1500u64 {
                    let n = mine(&mut rng);
                    match rng.gen_range(0..100) {
                        0..=39 => {
                            assert_eq!(
                                kv.get(&key(n)).unwrap(),
                                model.get(&key(n)).cloned(),
                                "get {n}"
                            );
                            checked.fetch_add(1, Ordering::Relaxed);
                        }
                        40..=64 => {
                            let v = value(n, round, value_len);
                            kv.put(&key(n), &v).unwrap();
                            model.insert(key(n), v);
                        }
                        65..=79 => {
                            assert_eq!(
                                kv.delete(&key(n)).unwrap(),
                                model.remove(&key(n)).is_some(),
                                "delete {n}"
                            );
                        }
                        80..=89 => {
                            let mut b = WriteBatch::new();
                            for _ in 0..rng.gen_range(2..10) {
                                let m = mine(&mut rng);
                                let v = value(m, round, value_len);
                                b.put(key(m), v.clone());
                                model.insert(key(m), v);
                            }
                            kv.write(&b).unwrap();
                        }
                        _ => {
                            let a = key(mine(&mut rng));
                            let len = rng.gen_range(1..400);
                            let dir = if rng.gen_bool(0.5) {
                                Direction::Forward
                            } else {
                                Direction::Backward
                            };
                            let got = match dir {
                                Direction::Forward => kv.scan(Some(&a), None, dir, len).unwrap(),
                                Direction::Backward => kv.scan(None, Some(&a), dir, len).unwrap(),
                            };
                            check_scan(&got, dir);
                            assert!(got.len() <= len, "limit");
                            // This thread's keys in the span the scan covered: exactly the model's.
                            let ours: Vec<_> = got
                                .iter()
                                .filter(|(_, v)| parse_value(v).0 % THREADS == t)
                                .cloned()
                                .collect();
                            if let (Some(first), Some(last)) = (got.first(), got.last()) {
                                let (lo, hi) = match dir {
                                    Direction::Forward => (first.0.clone(), last.0.clone()),
                                    Direction::Backward => (last.0.clone(), first.0.clone()),
                                };
                                let mut want: Vec<_> = model
                                    .range(lo..=hi)
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect();
                                if dir == Direction::Backward {
                                    want.reverse();
                                }
                                assert_eq!(ours, want, "thread {t}: its keys in a scan");
                            }
                            // A scan that stopped short of its limit reached the end: nothing of ours beyond.
                            if got.len() < len {
                                let beyond = match dir {
                                    Direction::Forward => model
                                        .range(
                                            got.last().map(|e| e.0.clone()).unwrap_or(a.clone())..,
                                        )
                                        .filter(|(k, _)| got.last().is_none_or(|l| **k > l.0))
                                        .count(),
                                    Direction::Backward => model
                                        .range(
                                            ..got.last().map(|e| e.0.clone()).unwrap_or(a.clone()),
                                        )
                                        .count(),
                                };
                                assert_eq!(beyond, 0, "thread {t}: a short scan missed keys");
                            }
                            checked.fetch_add(got.len() as u64, Ordering::Relaxed);
                        }
                    }
                }
                for (k, v) in &model {
                    assert_eq!(kv.get(k).unwrap().as_ref(), Some(v));
                }
                model.len()
            })
        })
        .collect();
    let total: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let all = kv.scan(None, None, Direction::Forward, usize::MAX).unwrap();
    check_scan(&all, Direction::Forward);
    assert_eq!(
        all.len(),
        total,
        "every thread's final keys, and nothing else"
    );
    let st = kv.mapping().stats();
    assert!(
        st.evictions > 1000,
        "the tree is far larger than the cache: {st}"
    );
    assert!(checked.load(Ordering::Relaxed) > 10_000);
}
