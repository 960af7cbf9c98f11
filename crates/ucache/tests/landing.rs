//! `Mapping::landing`: shared pins in the order buffers land, with reads in flight on the IO
//! threads. Every byte is checked against the object, the bound on reads ahead is checked
//! through the counters, and an early drop must leave nothing pinned or in flight.

mod common;

use common::store::{forward_object, WrapStore};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use ucache::store::{FaultStore, Object, Store};
use ucache::{Bounds, Cache, CacheOptions, Error, MapOptions, Mapping, Phase, Placement};

const BS: usize = 4096;

fn cache(buffers: u64) -> Cache {
    Cache::new(
        CacheOptions::new(buffers * BS as u64)
            .batch(4)
            .background_eviction(false),
    )
    .unwrap()
}

/// Buffer `i` of the pattern object holds `i` (mod 256) in every byte.
fn check(g: &ucache::SharedGuard<'_>) {
    let i = g.index();
    assert_eq!(g.len(), BS, "buffer {i}");
    assert!(g.iter().all(|&b| b == i as u8), "buffer {i} differs");
}

/// Nothing of `m` is loading or pinned.
fn quiet(m: &Mapping) -> bool {
    (0..m.buffers()).all(|i| {
        let w = m.state(i).unwrap();
        w.phase() != Phase::Loading && w.pins() == 0 && !w.exclusive()
    })
}

/// Every listed index comes out as often as listed, with its bytes, on every kind of mapping
/// (in place, transparent, pool); duplicates and cached buffers included.
#[test]
fn every_listed_buffer_comes_out_with_its_bytes() {
    common::within("landing: every buffer", || {
        let list: Vec<u64> = (0..64).chain([3, 3, 60]).collect();
        let mut kinds = vec![("in place", MapOptions::new())];
        if common::transparent_modes().contains(&true) {
            kinds.push(("transparent", MapOptions::new().transparent(true)));
        }
        kinds.push(("pool", MapOptions::new().placement(Placement::Pool)));
        for (name, o) in kinds {
            let c = Cache::new(CacheOptions::new(4 << 20).batch(4)).unwrap();
            let m = c.map(common::pattern_store("p", 64), "p", o).unwrap();
            drop(m.pin_shared(7).unwrap()); // one cached before
            let mut seen = vec![0usize; 64];
            for g in m.landing(list.iter().copied(), 8).unwrap() {
                let g = g.unwrap_or_else(|e| panic!("{name}: {e}"));
                check(&g);
                seen[g.index() as usize] += 1;
            }
            let mut want = vec![1usize; 64];
            want[3] = 3;
            want[60] = 2;
            assert_eq!(seen, want, "{name}");
            assert!(quiet(&m), "{name}: a pin or a load is left");
        }
    });
}

/// A read that blocks until the test opens the gate: reads covering buffer `slow` wait.
struct Gated {
    inner: Arc<dyn Object>,
    slow: u64,
    open: Arc<(Mutex<bool>, Condvar)>,
}

impl Object for Gated {
    forward_object!(inner: name, len, set_len, write_at, sync);
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let first = offset / BS as u64;
        let last = (offset + buf.len() as u64 - 1) / BS as u64;
        if (first..=last).contains(&self.slow) {
            let (lock, cv) = &*self.open;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
        }
        self.inner.read_at(buf, offset)
    }
}

/// A buffer that is resident comes out before one listed earlier whose read has not landed:
/// the order is the order of landing, not of the list.
#[test]
fn a_landed_buffer_comes_out_before_an_earlier_one_in_flight() {
    common::within("landing: order", || {
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let gate = open.clone();
        let st = WrapStore::new(common::pattern_store("p", 16), move |inner| {
            Arc::new(Gated {
                inner,
                slow: 0,
                open: gate.clone(),
            }) as Arc<dyn Object>
        });
        let c = cache(16);
        let m = c.map(Arc::new(st), "p", MapOptions::new()).unwrap();
        {
            // Buffer 5 is cached first (its read does not touch the gate).
            drop(m.pin_shared(5).unwrap());
            let mut it = m.landing([0, 5], 4).unwrap();
            // Buffer 0's read cannot have landed: the gate is shut.
            let g = it.next().unwrap().unwrap();
            assert_eq!(g.index(), 5, "the resident buffer first");
            assert_eq!(m.state(0).unwrap().phase(), Phase::Loading);
            *open.0.lock().unwrap() = true;
            open.1.notify_all();
            let g0 = it.next().unwrap().unwrap();
            check(&g0);
            assert_eq!(g0.index(), 0);
            assert!(it.next().is_none());
        }
        assert!(quiet(&m));
    });
}

/// At most `depth` buffers are read ahead of the consumer, and never more than the budget
/// holds: a depth far past the budget still scans everything, each guard dropped in turn.
#[test]
fn reads_ahead_are_bounded_by_depth_and_budget() {
    common::within("landing: bound", || {
        let c = cache(64);
        let m = c
            .map(common::pattern_store("p", 256), "p", MapOptions::new())
            .unwrap();
        let depth = 8;
        let mut it = m.landing(0..256, depth).unwrap();
        let mut consumed = 0u64;
        for g in it.by_ref() {
            let g = g.unwrap();
            check(&g);
            consumed += 1;
            // Buffers loaded or taken (room reserved) so far: never past what was consumed
            // plus the window.
            let s = m.stats();
            let loaded = s.misses + s.prefetches;
            assert!(
                loaded <= consumed + depth as u64,
                "{loaded} buffers loaded after {consumed} consumed, depth {depth}"
            );
            assert!(
                m.resident() <= consumed + depth as u64,
                "{} resident after {consumed} consumed, depth {depth}",
                m.resident()
            );
        }
        assert_eq!(consumed, 256);
        drop(it);

        // A depth past the budget: the window is the budget's, and guards kept (a few at a
        // time) leave room for the rest.
        let m2 = c
            .map(common::pattern_store("q", 256), "q", MapOptions::new())
            .unwrap();
        let mut kept = Vec::new();
        for g in m2.landing(0..256, 100_000).unwrap() {
            let g = g.unwrap();
            check(&g);
            kept.push(g);
            if kept.len() == 8 {
                kept.clear();
            }
        }
        drop(kept);
        assert!(quiet(&m2));
    });
}

/// Dropped half-way, with reads in flight on a slow store, the iterator leaves no pin and no
/// load behind: evicting everything right after empties the mapping.
#[test]
fn an_early_drop_leaves_nothing_pinned_or_in_flight() {
    common::within("landing: early drop", || {
        let mem: Arc<dyn Store> = common::pattern_store("p", 64);
        let fs = FaultStore::new(mem);
        fs.config().read_latency_us.store(3000, Ordering::Relaxed);
        let c = cache(64);
        let m = c.map(Arc::new(fs), "p", MapOptions::new()).unwrap();
        for depth in [1, 16, 64] {
            let mut it = m.landing(0..64, depth).unwrap();
            for _ in 0..5 {
                check(&it.next().unwrap().unwrap());
            }
            drop(it);
            assert!(quiet(&m), "depth {depth}: a pin or a load is left");
            m.evict(0, m.len()).unwrap();
            assert_eq!(m.resident(), 0, "depth {depth}: eviction left buffers");
            assert_eq!(c.used(), 0, "depth {depth}: the budget still holds room");
        }
    });
}

/// Reads of buffer `bad` fail.
struct FailOne {
    inner: Arc<dyn Object>,
    bad: u64,
    failed: Arc<AtomicU64>,
}

impl Object for FailOne {
    forward_object!(inner: name, len, set_len, write_at, sync);
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let first = offset / BS as u64;
        let last = (offset + buf.len() as u64 - 1) / BS as u64;
        if (first..=last).contains(&self.bad) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::other("bad sector"));
        }
        self.inner.read_at(buf, offset)
    }
}

/// A failed read is that item's typed error, naming its offset; the items after it still come
/// out, and nothing is left loading.
#[test]
fn a_failed_read_is_its_items_error_and_the_rest_go_on() {
    common::within("landing: read failure", || {
        let failed = Arc::new(AtomicU64::new(0));
        let f = failed.clone();
        let st = WrapStore::new(common::pattern_store("p", 32), move |inner| {
            Arc::new(FailOne {
                inner,
                bad: 5,
                failed: f.clone(),
            }) as Arc<dyn Object>
        });
        let c = cache(32);
        let m = c.map(Arc::new(st), "p", MapOptions::new()).unwrap();
        let mut ok = Vec::new();
        let mut errors = Vec::new();
        for g in m.landing(0..12, 6).unwrap() {
            match g {
                Ok(g) => {
                    check(&g);
                    ok.push(g.index());
                }
                Err(e) => errors.push(e),
            }
        }
        ok.sort_unstable();
        assert_eq!(ok, [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        match &errors[0] {
            Error::Io { op, offset, .. } => {
                assert_eq!((*op, *offset), ("read", 5 * BS as u64), "{}", errors[0])
            }
            e => panic!("expected a read error, got {e:?}"),
        }
        assert!(failed.load(Ordering::Relaxed) >= 1);
        assert!(quiet(&m));
        assert!(!m.is_resident(5).unwrap());
    });
}

/// Bad input: depth 0 is refused at once; an index past the end is its own item's
/// `OutOfRange`, naming the index and the buffer count, while the others come out; a buffer
/// this thread holds exclusively is `WouldDeadlock`, not a hang.
#[test]
fn bad_input_is_refused_per_item() {
    common::within("landing: bad input", || {
        let c = cache(32);
        let store = common::pattern_store("p", 16);
        let m = c.map(store.clone(), "p", MapOptions::new()).unwrap();
        let r = m.landing(0..4, 0);
        match r {
            Err(Error::BadArgument(why)) => assert!(why.contains("depth"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(m.stats().misses + m.stats().prefetches, 0);

        let items: Vec<_> = m.landing([1, 16, u64::MAX, 2], 4).unwrap().collect();
        assert_eq!(items.len(), 4);
        let mut ok = Vec::new();
        let mut out_of_range = Vec::new();
        for r in items {
            match r {
                Ok(g) => {
                    check(&g);
                    ok.push(g.index());
                }
                Err(Error::OutOfRange(Bounds::Buffer { index, buffers })) => {
                    assert_eq!(buffers, 16);
                    out_of_range.push(index);
                }
                Err(e) => panic!("{e:?}"),
            }
        }
        ok.sort_unstable();
        out_of_range.sort_unstable();
        assert_eq!(ok, [1, 2]);
        assert_eq!(out_of_range, [16, u64::MAX]);

        let w = c.map(store, "p", MapOptions::new().writable(true)).unwrap();
        let held = w.pin_exclusive(3).unwrap();
        let items: Vec<_> = w.landing([3, 4], 2).unwrap().collect();
        // In either order: the refused pin does not wait for the read of 4.
        assert_eq!(items.len(), 2);
        assert!(
            items
                .iter()
                .any(|r| matches!(r, Err(Error::WouldDeadlock { index: 3, .. }))),
            "{items:?}"
        );
        assert!(
            items.iter().any(|r| matches!(r, Ok(g) if g.index() == 4)),
            "{items:?}"
        );
        drop(items);
        drop(held);
        assert!(quiet(&w));
    });
}

/// Guards may outlive the iterator that made them; they borrow the mapping, so it is unmapped
/// once they are gone (that it cannot be before is the compiler's check: a `compile_fail`
/// example on `Landing`).
#[test]
fn guards_outlive_the_iterator_but_not_the_mapping() {
    let c = cache(16);
    let m = c
        .map(common::pattern_store("p", 8), "p", MapOptions::new())
        .unwrap();
    let guards: Vec<_> = m.landing(0..8, 4).unwrap().map(Result::unwrap).collect();
    guards.iter().for_each(check);
    drop(guards);
    m.unmap().unwrap();
}

/// Threads iterate over overlapping lists of one mapping, some dropping their iterators
/// early, while another evicts everything over and over under a budget far smaller than the
/// lists: every byte that comes out is the object's, and nothing is left pinned or loading.
#[test]
fn concurrent_iterators_under_eviction_see_every_byte() {
    common::within("landing: stress", || {
        let c = Arc::new(cache(48));
        let m = Arc::new(
            c.map(common::pattern_store("p", 128), "p", MapOptions::new())
                .unwrap(),
        );
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let evictor = {
            let (m, stop) = (m.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    m.evict(0, m.len()).unwrap();
                    std::thread::yield_now();
                }
            })
        };
        let readers: Vec<_> = (0..4u64)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                    let mut rand = move || {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed
                    };
                    let mut items = 0u64;
                    for round in 0..60 {
                        let list: Vec<u64> = (0..1 + rand() % 40).map(|_| rand() % 128).collect();
                        let depth = 1 + (rand() % 24) as usize;
                        let take = if round % 3 == 0 {
                            (rand() % 8) as usize
                        } else {
                            list.len()
                        };
                        let mut kept = Vec::new();
                        for g in m.landing(list.iter().copied(), depth).unwrap().take(take) {
                            let g = g.unwrap();
                            check(&g);
                            items += 1;
                            kept.push(g);
                            if kept.len() > 4 {
                                kept.remove(0);
                            }
                        }
                    }
                    items
                })
            })
            .collect();
        let items: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        evictor.join().unwrap();
        assert!(items > 0);
        assert!(quiet(&m), "a pin or a load is left");
        m.evict(0, m.len()).unwrap();
        assert_eq!(m.resident(), 0);
    });
}
