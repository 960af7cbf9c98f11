//! The range iterator ([`Kv::range`]) against concurrent writers and eviction.
//!
//! Even keys are loaded first and never deleted, only updated (each update a new version);
//! odd keys are inserted and deleted all the time, so leaves split under the cursors. Readers
//! walk random ranges, forward and backward, yielding between entries so that writers and
//! eviction run in the middle of an iteration, over a tree many times the cache. Every entry
//! is checked byte for byte (a value is a pure function of its key and version), the order is
//! strict, every even key in the range comes back exactly once, and its version is no older
//! than the one committed before the cursor began and no newer than the last one begun.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use rand::{Rng, SeedableRng};
use ucache_kv::{Direction, Kv, Placement, WriteBatch};

const WRITERS: u64 = 2;
const READERS: u64 = 4;
const WRITER_OPS: u64 = 3_000;

/// A value that names its key and version, and whose every byte follows from those two.
fn full_value(n: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{n}:{version}:").into_bytes();
    let head = v.len();
    // Letters, so the value parses as text; which letter depends on key, version and offset.
    let mix = n.wrapping_mul(31) ^ version.wrapping_mul(7);
    v.extend((head..len.max(head)).map(|i| b'a' + ((mix ^ i as u64) % 26) as u8));
    v
}

/// Checks every byte of `v`, the value found under key `n`; returns its version.
fn check_value(n: u64, v: &[u8], len: usize) -> u64 {
    let (named, version) = parse_value(v);
    assert_eq!(named, n, "a value under the wrong key");
    assert_eq!(
        v,
        &full_value(n, version, len)[..],
        "key {n}: a byte differs"
    );
    version
}

/// The key number of a test key (`key(n)`: "key" and 8 digits, padded with dots).
fn number(k: &[u8]) -> u64 {
    std::str::from_utf8(&k[3..11]).unwrap().parse().unwrap()
}

struct Setup {
    placement: Placement,
    memory_pages: u64,
    keys: u64,
    value_len: usize,
}

#[test]
fn cursors_beside_writers_in_place() {
    within("cursors beside writers, in place", || {
        cursors_beside_writers(Setup {
            placement: Placement::InPlace,
            memory_pages: 64,
            keys: 16_000,
            value_len: 150,
        })
    });
}

#[test]
fn cursors_beside_writers_on_the_pool() {
    within("cursors beside writers, pool", || {
        cursors_beside_writers(Setup {
            placement: Placement::Pool,
            memory_pages: ucache_kv::POOL_CHUNK / 4096,
            keys: 16_000,
            value_len: 1024,
        })
    });
}

fn cursors_beside_writers(s: Setup) {
    let (keys, len) = (s.keys, s.value_len);
    let mut o = options(memory_store(), 4096, s.memory_pages);
    o.placement = s.placement;
    o.sync_commits = false;
    o.checkpoint_bytes = 4 << 20;
    let kv = Arc::new(Kv::open(o).unwrap());
    for chunk in (0..keys).step_by(2).collect::<Vec<_>>().chunks(200) {
        let mut b = WriteBatch::new();
        for &n in chunk {
            b.put(key(n), full_value(n, 0, len));
        }
        kv.write(&b).unwrap();
    }
    // The half loaded is already several times the cache; the odd keys double it.
    let pages = kv.pages_used().unwrap();
    assert!(pages >= 4 * s.memory_pages, "{pages} pages");
    let evictions0 = kv.mapping().stats().evictions;

    // Per even key: the last version begun (set before its write) and the last committed.
    let begun: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let writing = Arc::new(AtomicU64::new(WRITERS));
    let writers: Vec<_> = (0..WRITERS)
        .map(|t| {
            let (kv, begun, done, writing) =
                (kv.clone(), begun.clone(), done.clone(), writing.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(100 + t);
                for _ in 0..WRITER_OPS {
                    // Each writer owns the keys n with (n / 2) % WRITERS == t.
                    let n = (rng.gen_range(0..keys / 2 / WRITERS) * WRITERS + t) * 2;
                    match rng.gen_range(0..3) {
                        0 => {
                            let v = begun[n as usize].load(Ordering::Relaxed) + 1;
                            begun[n as usize].store(v, Ordering::SeqCst);
                            kv.put(&key(n), &full_value(n, v, len)).unwrap();
                            done[n as usize].store(v, Ordering::SeqCst);
                        }
                        1 => kv.put(&key(n + 1), &full_value(n + 1, 1, len)).unwrap(),
                        _ => {
                            kv.delete(&key(n + 1)).unwrap();
                        }
                    }
                }
                writing.fetch_sub(1, Ordering::SeqCst);
            })
        })
        .collect();

    let walked = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|t| {
            let (kv, begun, done, writing, walked) = (
                kv.clone(),
                begun.clone(),
                done.clone(),
                writing.clone(),
                walked.clone(),
            );
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(200 + t);
                let mut cursors = 0u64;
                // At least 20 cursors each, and on until the writers are done.
                while cursors < 20 || writing.load(Ordering::SeqCst) > 0 {
                    cursors += 1;
                    let a = rng.gen_range(0..keys);
                    let b = (a + rng.gen_range(1..keys / 8)).min(keys);
                    let (lo, hi) = match rng.gen_range(0..4) {
                        0 => (None, None),
                        1 => (Some(a), None),
                        2 => (None, Some(b)),
                        _ => (Some(a), Some(b)),
                    };
                    let dir = if rng.gen_bool(0.5) {
                        Direction::Forward
                    } else {
                        Direction::Backward
                    };
                    let (first, end) = (lo.unwrap_or(0), hi.unwrap_or(keys));
                    let floor: Vec<u64> = (first..end)
                        .map(|n| done[n as usize].load(Ordering::SeqCst))
                        .collect();
                    let (from, to) = (lo.map(key), hi.map(key));
                    let mut evens = Vec::new();
                    let mut last: Option<Vec<u8>> = None;
                    for (i, e) in kv.range(from.as_deref(), to.as_deref(), dir).enumerate() {
                        let (k, v) = e.unwrap();
                        let n = number(&k);
                        assert_eq!(k, key(n), "a malformed key");
                        assert!(n >= first && n < end, "key {n} outside [{first}, {end})");
                        if let Some(l) = &last {
                            match dir {
                                Direction::Forward => assert!(*l < k, "out of order"),
                                Direction::Backward => assert!(*l > k, "out of order"),
                            }
                        }
                        let version = check_value(n, &v, len);
                        if n.is_multiple_of(2) {
                            assert!(
                                version >= floor[(n - first) as usize],
                                "key {n}: version {version} older than one committed before"
                            );
                            assert!(
                                version <= begun[n as usize].load(Ordering::SeqCst),
                                "key {n}: version {version} never written"
                            );
                            evens.push(n);
                        } else {
                            assert_eq!(version, 1);
                        }
                        last = Some(k);
                        walked.fetch_add(1, Ordering::Relaxed);
                        if i % 64 == 63 {
                            std::thread::yield_now();
                        }
                    }
                    if dir == Direction::Backward {
                        evens.reverse();
                    }
                    let want: Vec<u64> = (first..end).filter(|n| n % 2 == 0).collect();
                    assert_eq!(evens, want, "the even keys of [{first}, {end}), once each");
                }
                cursors
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let cursors: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(cursors >= 20 * READERS);
    assert!(walked.load(Ordering::Relaxed) > 0);
    // The cursors ran over a tree the cache could not hold: pages came and went under them.
    let evictions = kv.mapping().stats().evictions - evictions0;
    assert!(evictions > 0, "no evictions during the run");

    // Afterwards, one full walk each way agrees with the writers' record.
    let fwd: Vec<_> = kv
        .range(None, None, Direction::Forward)
        .map(|e| e.unwrap())
        .collect();
    let mut bwd: Vec<_> = kv
        .range(None, None, Direction::Backward)
        .map(|e| e.unwrap())
        .collect();
    bwd.reverse();
    assert_eq!(fwd, bwd);
    for (k, v) in &fwd {
        let n = number(k);
        let version = check_value(n, v, len);
        if n.is_multiple_of(2) {
            assert_eq!(version, done[n as usize].load(Ordering::SeqCst));
        }
    }
    assert_eq!(
        fwd.iter()
            .filter(|(k, _)| number(k).is_multiple_of(2))
            .count() as u64,
        keys / 2
    );
}

#[test]
fn limits_bounds_and_empty_ranges() {
    let kv = Kv::open(options(memory_store(), 4096, 64)).unwrap();
    for chunk in (0..2_000u64).collect::<Vec<_>>().chunks(500) {
        let mut b = WriteBatch::new();
        for &n in chunk {
            b.put(key(n), full_value(n, 0, 100));
        }
        kv.write(&b).unwrap();
    }
    let nums = |from: Option<u64>, to: Option<u64>, dir| -> Vec<u64> {
        let (f, t) = (from.map(key), to.map(key));
        kv.range(f.as_deref(), t.as_deref(), dir)
            .map(|e| number(&e.unwrap().0))
            .collect()
    };
    assert_eq!(
        nums(Some(5), Some(5), Direction::Forward),
        Vec::<u64>::new()
    );
    assert_eq!(
        nums(Some(9), Some(5), Direction::Backward),
        Vec::<u64>::new()
    );
    assert_eq!(
        nums(Some(1990), None, Direction::Forward),
        (1990..2000).collect::<Vec<_>>()
    );
    assert_eq!(
        nums(None, Some(10), Direction::Backward),
        (0..10).rev().collect::<Vec<_>>()
    );
    assert_eq!(
        nums(Some(700), Some(1300), Direction::Forward),
        (700..1300).collect::<Vec<_>>()
    );
    assert_eq!(
        nums(Some(700), Some(1300), Direction::Backward),
        (700..1300).rev().collect::<Vec<_>>()
    );
    // scan's limit stops the cursor after exactly that many, across leaves.
    let got = kv
        .scan(Some(&key(100)), None, Direction::Forward, 250)
        .unwrap();
    assert_eq!(got.len(), 250);
    assert_eq!(number(&got[249].0), 349);
    // An iterator dropped half way leaves nothing held: a write afterwards goes through.
    let mut it = kv.range(None, None, Direction::Forward);
    assert_eq!(number(&it.next().unwrap().unwrap().0), 0);
    kv.put(&key(0), &full_value(0, 1, 100)).unwrap();
    assert_eq!(number(&it.next().unwrap().unwrap().0), 1);
    drop(it);
    assert_eq!(kv.get(&key(0)).unwrap().unwrap(), full_value(0, 1, 100));
}
