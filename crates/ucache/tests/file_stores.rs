//! The cache over real files through the pread and io_uring stores: reads larger than the
//! budget, write-back, prefetch, and batched misses, with every byte checked against the file.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::store::{FileStore, Store, UringOptions, UringStore};
use ucache::{Cache, CacheOptions, MapOptions, Mapping};

mod common;
use common::{offset_file, within};

const BS: usize = 4096;
const BUFFERS: u64 = 2048;

fn stores() -> Vec<(&'static str, Arc<dyn Store>)> {
    let mut v: Vec<(&str, Arc<dyn Store>)> = vec![
        ("pread", Arc::new(FileStore::new())),
        ("pread-direct", Arc::new(FileStore::direct())),
    ];
    match UringStore::new(UringOptions::default()) {
        Ok(u) => v.push(("uring", Arc::new(u))),
        Err(e) => eprintln!("io_uring unavailable, skipping it: {e}"),
    }
    v
}

#[test]
fn random_reads_out_of_memory_match_the_file() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    for (name, store) in stores() {
        let cache = Cache::new(CacheOptions::new(BUFFERS * BS as u64 / 8).batch(32)).unwrap();
        let m = cache
            .map(store, path.to_str().unwrap(), MapOptions::new())
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let m = &m;
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    for _ in 0..5000 {
                        let i = rng.gen_range(0..BUFFERS);
                        let w = rng.gen_range(0..BS / 8);
                        let g = m.pin_shared(i).unwrap();
                        let v = u64::from_le_bytes(g[w * 8..w * 8 + 8].try_into().unwrap());
                        assert_eq!(v, i * BS as u64 + w as u64 * 8, "{name}");
                    }
                });
            }
        });
        let st = cache.stats();
        assert!(st.evictions > 0 && st.misses > 0, "{name}: {st:?}");
        // Batched misses and prefetch through the same store.
        let idx: Vec<u64> = (0..64).map(|k| k * 17 % BUFFERS).collect();
        m.ensure_cached_buffers(&idx).unwrap();
        let cached = idx
            .iter()
            .filter(|&&i| m.state(i).unwrap().phase() == ucache::Phase::Cached)
            .count();
        assert!(
            cached >= 60,
            "{name}: only {cached} of 64 cached after ensure_cached"
        );
        m.prefetch(100 * BS as u64, 32 * BS as u64).unwrap();
        for i in 100..132 {
            let g = m.pin_shared(i).unwrap();
            assert_eq!(
                u64::from_le_bytes(g[..8].try_into().unwrap()),
                i * BS as u64,
                "{name}"
            );
        }
        assert!(cache.stats().prefetches > 0, "{name}");
        m.unmap().unwrap();
        assert_eq!(cache.used(), 0);
    }
}

#[test]
fn writes_reach_the_file_after_msync_and_eviction() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    for (name, store) in stores() {
        let cache = Cache::new(CacheOptions::new(128 * BS as u64).batch(16)).unwrap();
        let m = cache
            .map(
                store,
                path.to_str().unwrap(),
                MapOptions::new().writable(true),
            )
            .unwrap();
        for i in (0..BUFFERS).step_by(3) {
            let mut g = m.pin_exclusive(i).unwrap();
            g[..8].copy_from_slice(&(!i).to_le_bytes());
        }
        m.writeback(0, m.len()).unwrap();
        m.msync(0, m.len()).unwrap();
        let file = std::fs::read(&path).unwrap();
        for i in 0..BUFFERS {
            let o = i as usize * BS;
            let v = u64::from_le_bytes(file[o..o + 8].try_into().unwrap());
            let want = if i % 3 == 0 { !i } else { i * BS as u64 };
            assert_eq!(v, want, "{name}: buffer {i}");
            // Restore for the next store.
            if i % 3 == 0 {
                m.pin_exclusive(i).unwrap()[..8].copy_from_slice(&(i * BS as u64).to_le_bytes());
            }
        }
        assert!(cache.stats().writebacks >= BUFFERS / 3, "{name}");
        m.unmap().unwrap();
    }
}

/// `pin_each` from several threads at once over data 8× the budget: every listed buffer is
/// visited exactly once with its own bytes, on every store, while the threads' streams evict
/// each other's buffers; and the prefetch stream of the IO worker, fed by many small
/// `prefetch_buffers` calls, delivers the same bytes.
#[test]
fn pin_each_streams_visit_every_buffer_once_with_its_bytes() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    for (name, store) in stores() {
        let cache = Cache::new(CacheOptions::new(BUFFERS * BS as u64 / 8).batch(16)).unwrap();
        let m = cache
            .map(store, path.to_str().unwrap(), MapOptions::new())
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let m = &m;
                s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    let list: Vec<u64> = (0..3000).map(|_| rng.gen_range(0..BUFFERS)).collect();
                    let mut visits = std::collections::HashMap::<u64, u32>::new();
                    m.pin_each(list.iter().copied(), 32, |i, bytes| {
                        for w in (0..BS).step_by(8) {
                            let v = u64::from_le_bytes(bytes[w..w + 8].try_into().unwrap());
                            assert_eq!(v, i * BS as u64 + w as u64, "{name}: buffer {i}");
                        }
                        *visits.entry(i).or_default() += 1;
                    })
                    .unwrap();
                    let mut want = std::collections::HashMap::<u64, u32>::new();
                    for &i in &list {
                        *want.entry(i).or_default() += 1;
                    }
                    assert_eq!(visits, want, "{name}: visits differ from the list");
                    // The IO worker's stream: small announcements, then pins.
                    for chunk in list.chunks(8).take(100) {
                        m.prefetch_buffers(chunk).unwrap();
                    }
                    for &i in list.iter().take(800) {
                        let g = m.pin_shared(i).unwrap();
                        assert_eq!(
                            u64::from_le_bytes(g[..8].try_into().unwrap()),
                            i * BS as u64
                        );
                    }
                });
            }
        });
        let st = cache.stats();
        assert!(st.misses > 0 && st.evictions > 0, "{name}: {st:?}");
        assert!(cache.used() <= cache.budget(), "{name}");
        // Errors stop the stream and come back typed; nothing stays claimed.
        let e = m
            .pin_each([1, 2, BUFFERS + 5, 3], 8, |_, _| {})
            .unwrap_err();
        assert!(matches!(e, ucache::Error::OutOfRange { .. }), "{name}: {e}");
        m.unmap().unwrap();
        assert_eq!(cache.used(), 0, "{name}");
    }
}

/// A stream deeper than the whole budget: with reads in flight it never waits for memory, so
/// it pauses until a visited buffer can be evicted instead of exhausting the budget.
#[test]
fn pin_each_deeper_than_the_budget_pauses_instead_of_failing() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    for (name, store) in stores() {
        let cache = Cache::new(CacheOptions::new(4 * BS as u64).batch(1)).unwrap();
        let m = cache
            .map(store, path.to_str().unwrap(), MapOptions::new())
            .unwrap();
        let list: Vec<u64> = (0..300).map(|k| k * 37 % BUFFERS).collect();
        let mut seen = 0;
        m.pin_each(list.iter().copied(), 32, |i, b| {
            assert_eq!(
                u64::from_le_bytes(b[..8].try_into().unwrap()),
                i * BS as u64
            );
            seen += 1;
        })
        .unwrap();
        assert_eq!(seen, list.len(), "{name}");
        assert!(cache.used() <= cache.budget(), "{name}");
        assert_eq!(
            cache.stats().budget_stalls,
            0,
            "{name}: the stream waited for memory"
        );
    }
}

/// A graph walk: visiting node 0 pins its neighbour 1, whose read the same `pin_each` may
/// still have in flight. That pin would wait on the calling thread itself; it must fail with
/// `WouldDeadlock` (or succeed if the read has landed), and 1 is still visited.
#[test]
fn pin_each_callback_pinning_a_buffer_of_its_own_stream_is_refused_not_a_hang() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    let mem = ucache::store::MemoryStore::new();
    mem.insert(path.to_str().unwrap(), std::fs::read(&path).unwrap());
    let mut all = stores();
    // Its default `read_stream` keeps a whole batch in flight.
    all.push(("memory", Arc::new(mem)));
    for (name, store) in all {
        run_neighbour_walk(name, store, path.clone());
    }
}

fn run_neighbour_walk(name: &'static str, store: Arc<dyn Store>, path: std::path::PathBuf) {
    within(name, move || {
        for _ in 0..20 {
            let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
            let m = cache
                .map(store.clone(), path.to_str().unwrap(), MapOptions::new())
                .unwrap();
            let mut visited = Vec::new();
            let mut refused = 0;
            m.pin_each([0u64, 1, 2, 3], 4, |i, bytes| {
                assert_eq!(bytes[..8], (i * BS as u64).to_le_bytes(), "{name}");
                visited.push(i);
                if i == 0 {
                    match m.pin_shared(1) {
                        Ok(g) => assert_eq!(g[..8], (BS as u64).to_le_bytes()),
                        Err(ucache::Error::WouldDeadlock { index: 1, .. }) => refused += 1,
                        Err(e) => panic!("{name}: {e}"),
                    }
                }
            })
            .unwrap();
            visited.sort_unstable();
            assert_eq!(visited, [0, 1, 2, 3], "{name}");
            assert!(refused <= 1);
            m.unmap().unwrap();
        }
    });
}

/// A panic in `pin_each`'s callback while reads are in flight: the panic reaches the caller,
/// and every buffer is settled (cached or evicted), so later pins and `unmap` do not hang.
#[test]
fn pin_each_callback_panic_settles_the_reads_in_flight() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    for (name, store) in stores() {
        let path = path.clone();
        within(name, move || {
            let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
            let m = cache
                .map(store, path.to_str().unwrap(), MapOptions::new())
                .unwrap();
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = m.pin_each(0..8u64, 8, |_, _| panic!("a bug in the visitor"));
            }));
            assert_eq!(
                *r.unwrap_err().downcast::<&str>().unwrap(),
                "a bug in the visitor"
            );
            for i in 0..8 {
                let w = m.state(i).unwrap();
                assert!(
                    matches!(w.phase(), ucache::Phase::Cached | ucache::Phase::Evicted)
                        && w.pins() == 0,
                    "{name}: buffer {i} left {w:?}"
                );
                assert_eq!(m.pin_shared(i).unwrap()[..8], (i * BS as u64).to_le_bytes());
            }
            m.unmap().unwrap();
            assert_eq!(cache.used(), 0);
        });
    }
}

/// A mapping over an io_uring store held in a thread-local (a per-thread table, a pool's
/// worker state) is dropped at thread exit after the thread's rings, which registered their
/// destructor later: its write-back must go to the file without a ring, not fail and lose the
/// dirty data (found by review).
#[test]
fn uring_write_back_works_after_the_threads_rings_are_gone() {
    use std::cell::RefCell;
    use ucache::store::{UringOptions, UringStore};
    let Ok(store) = UringStore::new(UringOptions {
        direct: false,
        ..UringOptions::default()
    }) else {
        eprintln!("no io_uring here: skipped");
        return;
    };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("tls");
    std::fs::write(&path, vec![0u8; 8 * BS]).unwrap();
    thread_local! {
        static HELD: RefCell<Option<(Cache, Mapping)>> = const { RefCell::new(None) };
    }
    let p = path.to_str().unwrap().to_string();
    std::thread::spawn(move || {
        HELD.with(|h| {
            let cache = Cache::new(CacheOptions::new((64 * BS) as u64).batch(4)).unwrap();
            let m = cache
                .map(
                    Arc::new(store),
                    &p,
                    MapOptions::new().buffer_size(BS).writable(true),
                )
                .unwrap();
            for i in 0..8 {
                m.pin_exclusive(i).unwrap().fill(7);
            }
            *h.borrow_mut() = Some((cache, m));
        });
        // The thread exits holding the mapping; its drop writes it back.
    })
    .join()
    .unwrap();
    let got = std::fs::read(&path).unwrap();
    assert!(
        got.iter().all(|&b| b == 7),
        "dirty data dropped at thread exit: the write-back batch had no ring"
    );
}

/// `create` makes the file a path names, as `open(2)` with `O_CREAT` does: through a dangling
/// symlink too, whose target is created, with every store.
#[test]
fn create_makes_new_files_and_symlink_targets() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for (name, store) in stores() {
        let target = dir.path().join(format!("{name}-target"));
        let link = dir.path().join(format!("{name}-link"));
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let fresh = dir.path().join(format!("{name}-fresh"));
        let cache = Cache::new(CacheOptions::new(64 * BS as u64)).unwrap();
        for path in [&link, &fresh] {
            let m = cache
                .map(
                    store.clone(),
                    path.to_str().unwrap(),
                    MapOptions::new()
                        .writable(true)
                        .create(true)
                        .len(4 * BS as u64),
                )
                .unwrap_or_else(|e| panic!("{name}: {}: {e}", path.display()));
            m.pin_exclusive(0).unwrap()[..5].copy_from_slice(b"hello");
            m.msync(0, 4 * BS as u64).unwrap();
        }
        for path in [&target, &fresh] {
            let bytes = std::fs::read(path).unwrap();
            assert_eq!(bytes.len(), 4 * BS, "{name}: {}", path.display());
            assert_eq!(&bytes[..5], b"hello", "{name}: {}", path.display());
        }
    }
}
