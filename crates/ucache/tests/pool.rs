//! Pool mappings (`Placement::Pool`): every explicit primitive on every store, frames reused
//! rather than freed, memory moving between buffer sizes in whole chunks, and optimistic
//! readers racing the reuse of the frames they read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::policy::Lru;
use ucache::store::{FileStore, MemoryStore, Store, UringOptions, UringStore};
use ucache::{Cache, CacheOptions, MapOptions, Placement};

mod common;
use common::store::forward_object;
use common::{offset_words, until, within};

const BS: usize = 4096;
const CHUNK: u64 = 2 << 20;

fn pool() -> MapOptions {
    MapOptions::new().placement(Placement::Pool)
}

fn word(b: &[u8], k: usize) -> u64 {
    u64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().unwrap())
}

fn stores(dir: &std::path::Path, data: &[u8]) -> Vec<(&'static str, Arc<dyn Store>, String)> {
    let path = dir.join("data");
    std::fs::write(&path, data).unwrap();
    let path = path.to_str().unwrap().to_string();
    let mem = MemoryStore::new();
    mem.insert("data", data.to_vec());
    let mut v: Vec<(&str, Arc<dyn Store>, String)> = vec![
        ("memory", Arc::new(mem), "data".into()),
        ("pread", Arc::new(FileStore::new()), path.clone()),
        ("pread-direct", Arc::new(FileStore::direct()), path.clone()),
    ];
    match UringStore::new(UringOptions::default()) {
        Ok(u) => v.push(("uring", Arc::new(u), path)),
        Err(e) => eprintln!("io_uring unavailable, skipping it: {e}"),
    }
    v
}

/// Pins, optimistic reads, `ensure_cached`, `prefetch`, `pin_each`, `read`, `write`,
/// `evict`, `writeback`, `msync`, a policy of its own and the statistics, on a pool mapping
/// over each store, 8× its budget.
#[test]
fn every_explicit_primitive_works_on_a_pool_mapping() {
    let buffers = 8 * CHUNK / BS as u64;
    let data = offset_words(buffers * BS as u64);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for (name, store, object) in stores(dir.path(), &data) {
        let cache = Cache::new(CacheOptions::new(CHUNK).batch(16)).unwrap();
        let m = cache
            .map(
                store,
                &object,
                pool().writable(true).policy(Box::new(Lru::new())),
            )
            .unwrap();
        assert_eq!(m.policy_name(), "lru");
        let at = |i: u64, k: usize| i * BS as u64 + k as u64 * 8;
        // Pins, exclusive writes and optimistic reads.
        for i in (0..buffers).step_by(97) {
            assert_eq!(word(&m.pin_shared(i).unwrap(), 5), at(i, 5), "{name}");
            let v = m.read_optimistic(i, |v| v.read_u64(16)).unwrap();
            assert_eq!(v, at(i, 2), "{name}");
        }
        m.pin_exclusive(7).unwrap()[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        // Batched loads, prefetch and streams.
        m.ensure_cached(100 * BS as u64, 64 * BS as u64).unwrap();
        for i in 100..164 {
            assert!(m.is_resident(i).unwrap(), "{name}: {i}");
        }
        m.prefetch(300 * BS as u64, 32 * BS as u64).unwrap();
        until(
            "the prefetch to land",
            || (300..332).all(|i| m.is_resident(i).unwrap()),
            || m.stats(),
        );
        let mut seen = 0;
        let picks: Vec<u64> = (0..200).map(|k| (k * 131) % buffers).collect();
        m.pin_each(picks.iter().copied(), 16, |i, b| {
            assert_eq!(word(b, 9), at(i, 9), "{name}");
            seen += 1;
        })
        .unwrap();
        assert_eq!(seen, 200);
        // Copies through the cache, across buffers.
        let mut out = vec![0u8; 3 * BS];
        m.read(40 * BS as u64 + 8, &mut out).unwrap();
        assert_eq!(word(&out, 0), at(40, 1), "{name}");
        m.write(50 * BS as u64, &7u64.to_le_bytes()).unwrap();
        // Write-back, msync and eviction: the store gets both writes.
        m.writeback(0, m.len()).unwrap();
        m.msync(0, m.len()).unwrap();
        m.evict(0, m.len()).unwrap();
        assert_eq!(m.resident(), 0, "{name}");
        assert_eq!(word(&m.pin_shared(7).unwrap(), 0), u64::MAX, "{name}");
        assert_eq!(word(&m.pin_shared(50).unwrap(), 0), 7, "{name}");
        let st = m.stats();
        assert!(
            st.misses > 0 && st.hits > 0 && st.evictions > 0,
            "{name}: {st:?}"
        );
        assert!(st.writebacks >= 2, "{name}: {st:?}");
        assert!(cache.used() <= cache.budget(), "{name}");
        m.unmap().unwrap();
        assert_eq!((cache.used(), cache.pool_bytes()), (0, 0), "{name}");
    }
}

/// Once the pool fills its budget, misses reuse frames: the pool neither grows nor gives a
/// chunk back (which would cost page faults again) however many misses follow, and every
/// byte read is the buffer's own.
#[test]
fn misses_reuse_frames_and_the_pool_stays_put() {
    let buffers = 16 * 2 * CHUNK / BS as u64;
    let s = MemoryStore::new();
    s.insert("o", offset_words(buffers * BS as u64));
    let cache = Cache::new(CacheOptions::new(2 * CHUNK).batch(32)).unwrap();
    let m = cache.map(Arc::new(s), "o", pool()).unwrap();
    let mut rng = SmallRng::seed_from_u64(1);
    for i in 0..2 * CHUNK / BS as u64 {
        drop(m.pin_shared(i).unwrap());
    }
    assert_eq!(cache.pool_bytes(), 2 * CHUNK);
    for _ in 0..20_000 {
        let i = rng.gen_range(0..buffers);
        let g = m.pin_shared(i).unwrap();
        let k = rng.gen_range(0..BS / 8);
        assert_eq!(word(&g, k), i * BS as u64 + k as u64 * 8);
        // A batch of 32 frees at most 32 frames at once: no chunk of 512 is ever wholly
        // free, so none is given back and none regrown.
        assert_eq!(cache.pool_bytes(), 2 * CHUNK);
    }
    assert!(cache.stats().evictions > 15_000);
    assert_eq!(cache.used(), 2 * CHUNK);
}

/// An in-place mapping of 16 KiB buffers takes memory from a full 4 KiB pool: the pool
/// shrinks in whole chunks, the budget holds throughout, and the pool grows back once the
/// in-place mapping is gone.
#[test]
fn memory_moves_between_pool_and_in_place_mappings_in_chunks() {
    let budget = 4 * CHUNK;
    let cache = Cache::new(CacheOptions::new(budget).batch_bytes(128 << 10)).unwrap();
    let small = MemoryStore::new();
    small.insert("o", offset_words(budget / BS as u64 * 2 * BS as u64));
    let big = MemoryStore::new();
    big.insert("o", offset_words(budget / (16 << 10) * 2 * (16 << 10)));
    let p = cache.map(Arc::new(small), "o", pool()).unwrap();
    let q = cache
        .map(Arc::new(big), "o", MapOptions::new().buffer_size(16 << 10))
        .unwrap();
    for i in 0..p.buffers() {
        drop(p.pin_shared(i).unwrap());
        assert!(cache.used() <= budget);
    }
    assert_eq!(cache.pool_bytes(), budget, "the pool took the whole budget");
    let mut pool_sizes = vec![cache.pool_bytes()];
    for i in 0..q.buffers() / 2 {
        let g = q.pin_shared(i).unwrap();
        assert_eq!(word(&g, 3), i * (16 << 10) + 24);
        drop(g);
        assert!(cache.used() <= budget);
        let now = cache.pool_bytes();
        assert_eq!(now % CHUNK, 0, "the pool holds whole chunks");
        if Some(&now) != pool_sizes.last() {
            pool_sizes.push(now);
        }
    }
    assert!(
        *pool_sizes.last().unwrap() < budget && q.resident() > 0,
        "the in-place mapping got memory from the pool: {pool_sizes:?}"
    );
    // The in-place mapping gone, the pool mapping grows back to the whole budget.
    q.unmap().unwrap();
    for i in 0..p.buffers() {
        let g = p.pin_shared(i).unwrap();
        assert_eq!(word(&g, 1), i * BS as u64 + 8);
    }
    assert_eq!(
        cache.pool_bytes(),
        budget,
        "shrunk {pool_sizes:?}, then grew back"
    );
    p.unmap().unwrap();
    assert_eq!((cache.used(), cache.pool_bytes()), (0, 0));
}

/// Optimistic readers of a pool mapping whose frames are reused under them by other
/// buffers' misses: a read that validates always saw its own buffer's bytes, however often
/// the frame it started in changed hands.
#[test]
fn optimistic_readers_never_validate_a_reused_frame() {
    within("optimistic readers racing frame reuse", || {
        // One chunk of frames for 8 chunks of data: every few misses reuse a frame.
        let buffers = 8 * CHUNK / BS as u64;
        let s = MemoryStore::new();
        s.insert("o", offset_words(buffers * BS as u64));
        let cache = Cache::new(CacheOptions::new(CHUNK).batch(8)).unwrap();
        let m = cache.map(Arc::new(s), "o", pool()).unwrap();
        let stop = AtomicBool::new(false);
        let validated = AtomicU64::new(0);
        std::thread::scope(|sc| {
            for t in 0..2 {
                let (m, stop) = (&m, &stop);
                sc.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(100 + t);
                    while !stop.load(Ordering::Relaxed) {
                        drop(m.pin_shared(rng.gen_range(0..buffers)).unwrap());
                    }
                });
            }
            for t in 0..4 {
                let (m, validated) = (&m, &validated);
                sc.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    for _ in 0..20_000 {
                        // Hot buffers, so most reads start on a resident one.
                        let i = rng.gen_range(0..64u64) * 7;
                        let (a, b) = m
                            .read_optimistic(i, |v| (v.read_u64(0), v.read_u64(BS - 8)))
                            .unwrap();
                        assert_eq!(a, i * BS as u64, "buffer {i} validated foreign bytes");
                        assert_eq!(b, (i + 1) * BS as u64 - 8, "buffer {i} torn");
                        validated.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            // Readers first, then the loaders stop.
            while validated.load(Ordering::Relaxed) < 80_000 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::Relaxed);
        });
        assert!(cache.stats().evictions > 0);
    });
}

/// A pool hands out a fresh chunk's frames in order, so adjacent misses usually land in
/// adjacent frames: `pin_each` and a prefetch then read such a run as one request, as they do
/// in place, instead of one request per buffer. Every byte is still the buffer's own.
#[test]
fn adjacent_misses_in_adjacent_frames_are_read_as_runs() {
    let buffers = 2 * CHUNK / BS as u64;
    let data = offset_words(buffers * BS as u64);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for (name, store, object) in stores(dir.path(), &data) {
        let cache = Cache::new(CacheOptions::new(4 * CHUNK)).unwrap();
        let m = cache.map(store, &object, pool().readahead(false)).unwrap();
        let half = buffers / 2;
        let mut seen = 0;
        m.pin_each(0..half, 16, |i, b| {
            for k in 0..BS / 8 {
                assert_eq!(word(b, k), i * BS as u64 + k as u64 * 8, "{name}: {i}");
            }
            seen += 1;
        })
        .unwrap();
        assert_eq!(seen, half);
        let streamed = m.stats().store_reads;
        // One request per buffer would be `half` of them; runs of up to 128 KiB make 16.
        assert!(
            streamed > 0 && streamed <= half / 8,
            "{name}: {streamed} reads for {half} buffers"
        );
        m.prefetch(half * BS as u64, half * BS as u64).unwrap();
        until(
            "the prefetch to land",
            || (half..buffers).all(|i| m.is_resident(i).unwrap()),
            || m.stats(),
        );
        let prefetched = m.stats().store_reads - streamed;
        assert!(
            prefetched > 0 && prefetched <= half / 8,
            "{name}: {prefetched} reads for {half} buffers"
        );
        for i in 0..buffers {
            let g = m.pin_shared(i).unwrap();
            for k in (0..BS / 8).step_by(61) {
                assert_eq!(word(&g, k), i * BS as u64 + k as u64 * 8, "{name}: {i}");
            }
        }
        m.unmap().unwrap();
    }
}

/// A stream store that takes one read and then ends its stream without asking for another or
/// answering it (a broken ring, a user store that returns early), while `quit` is set.
struct Quitter {
    inner: Arc<dyn ucache::store::Object>,
    quit: Arc<AtomicBool>,
}

impl ucache::store::Object for Quitter {
    forward_object!(inner: name, len, set_len, read_at, write_at, sync);
    fn read_stream<'a>(
        &self,
        depth: usize,
        next: &mut dyn FnMut() -> Option<ucache::store::IoBuf<'a>>,
        done: &mut dyn FnMut(ucache::store::IoBuf<'a>, std::io::Result<usize>),
    ) {
        if !self.quit.load(Ordering::Relaxed) {
            return self.inner.read_stream(depth, next, done);
        }
        let _taken = next();
    }
}

/// `pin_each` over a pool mapping claims the next buffer while it builds a run, and keeps the
/// claim for the next read when that buffer's frame does not follow the run's. A store that
/// ends the stream right then must not leave the claim behind: the buffer goes back to
/// `Evicted`, idle, and loads normally later (it stayed `Loading` for good, with its frame
/// and budget, before).
#[test]
fn a_stream_that_ends_early_leaves_no_claim_carried_for_the_next_run() {
    within("pool: a stream that ends early", || {
        let buffers = 64u64;
        let quit = Arc::new(AtomicBool::new(false));
        let q = quit.clone();
        let store = common::store::WrapStore::new(
            Arc::new({
                let s = MemoryStore::new();
                s.insert("o", offset_words(buffers * BS as u64));
                s
            }),
            move |inner| {
                Arc::new(Quitter {
                    inner,
                    quit: q.clone(),
                }) as Arc<dyn ucache::store::Object>
            },
        );
        let cache = Cache::new(CacheOptions::new(CHUNK)).unwrap();
        let m = cache
            .map(Arc::new(store), "o", pool().readahead(false))
            .unwrap();
        // Frames of a fresh chunk go out in order; evicting 0 and then 2 puts theirs on top
        // of the free list, so the next two misses get frames 2 and 0: not adjacent.
        for i in 0..4 {
            drop(m.pin_shared(i).unwrap());
        }
        m.evict_buffers(&[0]).unwrap();
        m.evict_buffers(&[2]).unwrap();
        quit.store(true, Ordering::Relaxed);
        assert!(m.pin_each([10, 11], 4, |_, _| {}).is_err());
        for i in [10, 11] {
            let w = m.state(i).unwrap();
            assert!(
                w.phase() == ucache::Phase::Evicted && w.idle(),
                "buffer {i} left as {w:?}"
            );
        }
        quit.store(false, Ordering::Relaxed);
        let mut seen = Vec::new();
        m.pin_each([10, 11], 4, |i, b| {
            assert_eq!(word(b, 1), i * BS as u64 + 8);
            seen.push(i);
        })
        .unwrap();
        seen.sort();
        assert_eq!(seen, [10, 11]);
        m.unmap().unwrap();
    });
}
