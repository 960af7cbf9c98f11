//! Model checking of the buffer protocol with shuttle: the real mapping code, with its state
//! word atomics replaced by shuttle's, under thousands of randomized and PCT-prioritized
//! schedules. Run with `cargo test -p ucache --features shuttle --test model`.
#![cfg(feature = "shuttle")]

use std::sync::Arc;

use shuttle::thread;
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const ITERATIONS: usize = 3000;

/// A cache that holds one buffer at a time, over `n` buffers whose first byte is their index.
fn setup(n: usize) -> (MemoryStore, Cache, Arc<ucache::Mapping>) {
    let store = MemoryStore::new();
    store.insert("o", (0..n * BS).map(|i| (i / BS) as u8).collect());
    let cache = Cache::new(CacheOptions::new(BS as u64).batch(1)).unwrap();
    let m = cache
        .map(
            Arc::new(store.clone()),
            "o",
            MapOptions::new().writable(true),
        )
        .unwrap();
    (store, cache, Arc::new(m))
}

fn check(f: impl Fn() + Send + Sync + 'static) {
    let f = Arc::new(f);
    let g = f.clone();
    shuttle::check_random(move || g(), ITERATIONS);
    shuttle::check_pct(move || f(), ITERATIONS, 3);
}

/// Concurrent misses on one buffer: one load, everyone sees the data.
#[test]
fn racing_misses_load_once() {
    check(|| {
        let (_, cache, m) = setup(2);
        let ts: Vec<_> = (0..3)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || assert_eq!(m.pin_shared(1).unwrap()[0], 1))
            })
            .collect();
        ts.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(cache.stats().misses, 1);
    });
}

/// Insertion racing eviction with writers: with room for one buffer, every access to one
/// buffer evicts the other, dirty ones through write-back. No update may be lost and no
/// reader may see evicted (zeroed) memory.
#[test]
fn insertion_eviction_and_writes_lose_nothing() {
    check(|| {
        let (store, cache, m) = setup(2);
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || {
                    let mut g = m.pin_exclusive(0).unwrap();
                    g[1] += 1;
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || {
                    let g = m.pin_shared(1).unwrap();
                    assert_eq!(g[0], 1, "a pinned buffer is never dropped");
                    assert_eq!(g[BS - 1], 1, "a pinned buffer is never dropped");
                })
            })
            .collect();
        writers.into_iter().for_each(|t| t.join().unwrap());
        readers.into_iter().for_each(|t| t.join().unwrap());
        assert!(cache.used() <= cache.budget());
        assert_eq!(m.pin_shared(0).unwrap()[1], 2, "lost update");
        m.msync(0, m.len()).unwrap();
        assert_eq!(store.get("o").unwrap()[1], 2);
    });
}

/// Optimistic readers racing a writer and an eviction only ever validate a consistent buffer.
#[test]
fn optimistic_reads_validate_only_consistent_data() {
    check(|| {
        let (_, _, m) = setup(2);
        let writer = {
            let m = m.clone();
            thread::spawn(move || {
                let mut g = m.pin_exclusive(0).unwrap();
                g[8] = 7;
                g[BS - 1] = 7;
            })
        };
        let evictor = {
            let m = m.clone();
            thread::spawn(move || drop(m.pin_shared(1).unwrap()))
        };
        let reader = {
            let m = m.clone();
            thread::spawn(move || {
                let (a, b, z) = m
                    .read_optimistic(0, |v| {
                        let mut x = [0u8; 1];
                        v.copy_to(8, &mut x);
                        let mut y = [0u8; 1];
                        v.copy_to(BS - 1, &mut y);
                        let mut z = [0u8; 1];
                        v.copy_to(0, &mut z);
                        (x[0], y[0], z[0])
                    })
                    .unwrap();
                assert_eq!(a, b, "torn read validated");
                assert_eq!(z, 0, "buffer 0 starts with its index");
                assert!(a == 0 || a == 7);
            })
        };
        for t in [writer, evictor, reader] {
            t.join().unwrap();
        }
    });
}

/// Explicit eviction never drops a pinned or dirty buffer's data.
#[test]
fn explicit_evict_respects_pins() {
    check(|| {
        let (_, _, m) = setup(2);
        let pinner = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.pin_shared(0).unwrap();
                thread::yield_now();
                assert_eq!(g[0], 0);
                assert_eq!(g[BS - 1], 0);
            })
        };
        let evictor = {
            let m = m.clone();
            thread::spawn(move || m.evict(0, m.len()).unwrap())
        };
        pinner.join().unwrap();
        evictor.join().unwrap();
    });
}

/// Second chances on a transparent mapping (pins only: faults would run shuttle's scheduler
/// inside a signal handler). The budget holds eight buffers, two of them the set-aside pool,
/// over nine: after a sequential warm-up pass, every miss sets a buffer aside or evicts one
/// that stayed aside, while pins of set-aside buffers restore them and an explicit eviction
/// drops them. Every pin must still see the buffer's own bytes.
#[test]
fn set_aside_restore_and_evict_race_safely() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static ASIDE: AtomicU64 = AtomicU64::new(0);
    static RESTORED: AtomicU64 = AtomicU64::new(0);
    const N: u64 = 9;
    check(|| {
        let store = MemoryStore::new();
        store.insert("o", (0..N as usize * BS).map(|i| (i / BS) as u8).collect());
        let cache = Cache::new(CacheOptions::new(8 * BS as u64).batch(1)).unwrap();
        let m = Arc::new(
            cache
                .map(
                    Arc::new(store),
                    "o",
                    // No readahead: its loads run on the IO worker, a thread shuttle does
                    // not control.
                    MapOptions::new()
                        .transparent(true)
                        .track_access(true)
                        .readahead(false),
                )
                .unwrap(),
        );
        for i in 0..N {
            drop(m.pin_shared(i).unwrap());
        }
        let readers: Vec<_> = (0..3u64)
            .map(|t| {
                let m = m.clone();
                thread::spawn(move || {
                    for k in 0..2 {
                        let i = (3 * t + 4 * k) % N;
                        let g = m.pin_shared(i).unwrap();
                        assert_eq!((g[0], g[BS - 1]), (i as u8, i as u8), "buffer {i}");
                    }
                })
            })
            .collect();
        let evictor = {
            let m = m.clone();
            thread::spawn(move || m.evict(0, 3 * BS as u64).unwrap())
        };
        readers.into_iter().for_each(|t| t.join().unwrap());
        evictor.join().unwrap();
        assert!(cache.used() <= cache.budget());
        for i in 0..N {
            assert_eq!(m.pin_shared(i).unwrap()[7], i as u8);
        }
        let st = cache.stats();
        // Set-aside buffers hand their budget to the pool: whatever the interleaving, every
        // byte of it comes back once, never twice.
        Arc::try_unwrap(m).ok().unwrap().unmap().unwrap();
        assert_eq!(cache.used(), 0);
        ASIDE.fetch_add(st.set_aside, Relaxed);
        RESTORED.fetch_add(st.restores, Relaxed);
    });
    assert!(
        ASIDE.load(Relaxed) > 0 && RESTORED.load(Relaxed) > 0,
        "the schedules reached both transitions"
    );
}

/// `pin_each` with a budget of one buffer and two reads allowed in flight, racing a pin of
/// the same buffers: the stream pauses for memory instead of exhausting it, every visit sees
/// its buffer's bytes, and the buffer the other thread loads is visited after its load.
#[test]
fn pin_each_races_pins_within_a_one_buffer_budget() {
    check(|| {
        let (_, cache, m) = setup(3);
        let other = {
            let m = m.clone();
            thread::spawn(move || assert_eq!(m.pin_shared(1).unwrap()[0], 1))
        };
        let mut seen = Vec::new();
        m.pin_each([0, 1, 2, 1], 2, |i, b| {
            assert_eq!(b[0] as u64, i);
            assert_eq!(b[BS - 1] as u64, i);
            seen.push(i);
        })
        .unwrap();
        other.join().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, vec![0, 1, 1, 2]);
        assert!(cache.used() <= cache.budget());
    });
}

/// A mapping of `n` buffers (first byte: the index) over a store that fails on demand.
fn setup_faulty(
    n: usize,
) -> (
    MemoryStore,
    Arc<ucache::store::FaultConfig>,
    Cache,
    Arc<ucache::Mapping>,
) {
    let store = MemoryStore::new();
    store.insert("o", (0..n * BS).map(|i| (i / BS) as u8).collect());
    let faults = ucache::store::FaultStore::new(Arc::new(store.clone()));
    let config = faults.config().clone();
    let cache = Cache::new(CacheOptions::new(BS as u64).batch(1)).unwrap();
    let m = cache
        .map(Arc::new(faults), "o", MapOptions::new().writable(true))
        .unwrap();
    (store, config, cache, Arc::new(m))
}

/// msync racing an exclusive writer and a store whose writes fail for a while: an msync that
/// returns Ok has made durable everything written before it began, the writer's update is
/// never lost, and once the store works again one msync leaves nothing dirty.
#[test]
fn msync_against_an_exclusive_pin_and_a_failing_write_back() {
    use std::sync::atomic::Ordering::Relaxed;
    check(|| {
        let (store, config, _, m) = setup_faulty(2);
        m.pin_exclusive(0).unwrap()[1] = 1;
        let syncer = {
            let (m, store) = (m.clone(), store.clone());
            thread::spawn(move || {
                if m.msync(0, m.len()).is_ok() {
                    assert!(store.get("o").unwrap()[1] >= 1, "Ok before durable");
                }
            })
        };
        let writer = {
            let (m, store) = (m.clone(), store.clone());
            thread::spawn(move || {
                m.pin_exclusive(0).unwrap()[1] = 2;
                if m.msync(0, m.len()).is_ok() {
                    assert_eq!(store.get("o").unwrap()[1], 2, "Ok before durable");
                }
            })
        };
        let outage = {
            let config = config.clone();
            thread::spawn(move || {
                config.fail_writes.store(true, Relaxed);
                thread::yield_now();
                config.fail_writes.store(false, Relaxed);
            })
        };
        for t in [syncer, writer, outage] {
            t.join().unwrap();
        }
        m.msync(0, m.len()).unwrap();
        assert_eq!(store.get("o").unwrap()[1], 2, "lost update");
        assert!(!m.state(0).unwrap().dirty());
    });
}

/// Loads that fail while other threads wait on the same buffer: every waiter gets an error
/// or the right bytes, the buffer never stays `Loading`, the budget of a failed load comes
/// back, and the next pin after the store recovers loads it.
#[test]
fn a_failed_load_with_waiters_strands_nothing() {
    use std::sync::atomic::Ordering::Relaxed;
    check(|| {
        let (_, config, cache, m) = setup_faulty(2);
        config.fail_reads.store(true, Relaxed);
        let pinners: Vec<_> = (0..2)
            .map(|_| {
                let m = m.clone();
                thread::spawn(move || {
                    if let Ok(g) = m.pin_shared(1) {
                        assert_eq!((g[0], g[BS - 1]), (1, 1));
                    }
                })
            })
            .collect();
        let recovery = {
            let config = config.clone();
            thread::spawn(move || config.fail_reads.store(false, Relaxed))
        };
        pinners.into_iter().for_each(|t| t.join().unwrap());
        recovery.join().unwrap();
        let phase = m.state(1).unwrap().phase();
        assert!(
            matches!(
                phase,
                ucache::state::Phase::Cached | ucache::state::Phase::Evicted
            ),
            "{phase:?}"
        );
        assert_eq!(cache.used(), m.resident() * BS as u64);
        assert_eq!(m.pin_shared(1).unwrap()[0], 1);
    });
}

/// Upgrades of optimistic reads and a downgrade, racing each other and an eviction: an
/// upgrade succeeds only on the bytes its read saw (never torn, never stale), and no
/// increment made under an upgraded or downgraded pin is lost.
#[test]
fn upgrades_and_downgrades_keep_reads_and_writes_whole() {
    check(|| {
        let (_, _, m) = setup(2);
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let upgrader = {
            let (m, done) = (m.clone(), done.clone());
            thread::spawn(move || {
                let r = m.optimistic(0).unwrap();
                let a = r.view().read::<u8>(8);
                let b = r.view().read::<u8>(BS - 1);
                if let Some(mut g) = r.upgrade_exclusive() {
                    assert_eq!((a, b), (g[8], g[BS - 1]), "upgraded onto other bytes");
                    g[8] += 1;
                    g[BS - 1] += 1;
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            })
        };
        let downgrader = {
            let (m, done) = (m.clone(), done.clone());
            thread::spawn(move || {
                let mut g = m.pin_exclusive(0).unwrap();
                g[8] += 1;
                g[BS - 1] += 1;
                let s = g.downgrade();
                assert_eq!(s[8], s[BS - 1], "a downgraded pin kept writers out");
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let reader = {
            let m = m.clone();
            thread::spawn(move || {
                let r = m.optimistic(0).unwrap();
                let a = r.view().read::<u8>(8);
                if let Some(g) = r.upgrade_shared() {
                    assert_eq!(a, g[8], "upgraded onto other bytes");
                    assert_eq!(g[8], g[BS - 1], "torn");
                }
            })
        };
        let evictor = {
            let m = m.clone();
            thread::spawn(move || drop(m.pin_shared(1).unwrap()))
        };
        for t in [upgrader, downgrader, reader, evictor] {
            t.join().unwrap();
        }
        let n = done.load(std::sync::atomic::Ordering::SeqCst) as u8;
        let g = m.pin_shared(0).unwrap();
        assert_eq!((g[8], g[BS - 1]), (n, n), "lost update");
    });
}
