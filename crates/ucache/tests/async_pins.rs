//! The async API (feature `tokio`): many concurrent async pins over mappings larger than the
//! budget, cancellation mid-miss, errors, and async and blocking pins on one mapping. Every
//! byte is checked; nothing is timed (a watchdog catches hangs).
#![cfg(feature = "tokio")]

mod common;

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::{until, within};
use ucache::store::{FaultStore, FileStore, MemoryStore, Object, OpenOptions, ReadOwned, Store};
use ucache::Phase;
use ucache::{Cache, CacheOptions, Error, MapOptions, Mapping};

const BS: usize = 4096;

/// The u64 at word `w` of the test objects.
fn word(w: u64) -> u64 {
    w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5A5A
}

fn content(buffers: u64) -> Vec<u8> {
    (0..buffers * BS as u64 / 8)
        .flat_map(|w| word(w).to_le_bytes())
        .collect()
}

/// Checks every byte of buffer `i` as seen through a guard.
fn check(i: u64, bytes: &[u8]) {
    for (k, c) in bytes.chunks_exact(8).enumerate() {
        let w = i * BS as u64 / 8 + k as u64;
        assert_eq!(
            u64::from_le_bytes(c.try_into().unwrap()),
            word(w),
            "buffer {i} word {k}"
        );
    }
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `tasks` tasks on one current_thread runtime, each pinning `per_task` buffers drawn from
/// all of the mapping and holding each pin across a yield, so many misses and pins overlap.
fn many_tasks(map: Arc<Mapping>, tasks: u64, per_task: u64) {
    let rt = current_thread();
    let local = tokio::task::LocalSet::new();
    let n = map.buffers();
    for t in 0..tasks {
        let map = map.clone();
        local.spawn_local(async move {
            let mut x = t.wrapping_mul(2654435761) | 1;
            for _ in 0..per_task {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = x % n;
                let g = map.pin_shared_async(i).await.unwrap();
                tokio::task::yield_now().await;
                check(i, &g);
            }
        });
    }
    rt.block_on(local);
}

/// Every buffer idle and either cached or evicted, within the budget. Readahead the pins
/// started may still be loading on the IO threads when the tasks end (a background load holds
/// no pin of the test's), so this first waits for every load to finish: the claim is that
/// nothing stays held, not that the IO threads are done at any given instant.
fn assert_settled(cache: &Cache, map: &Mapping, budget: u64) {
    let loading = || (0..map.buffers()).find(|&i| map.state(i).unwrap().phase() == Phase::Loading);
    until(
        "background loads to finish",
        || loading().is_none(),
        loading,
    );
    for i in 0..map.buffers() {
        let w = map.state(i).unwrap();
        assert!(w.idle(), "buffer {i} still held: {w:?}");
        assert!(
            matches!(w.phase(), Phase::Cached | Phase::Evicted),
            "buffer {i}: {w:?}"
        );
    }
    assert!(cache.used() <= budget, "{} > {budget}", cache.used());
}

#[test]
fn many_async_pins_over_a_mapping_larger_than_the_budget() {
    within("many async pins", || {
        let (tasks, per_task, buffers) = (256, 40, 512);
        let budget = 64 * BS as u64;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, content(buffers)).unwrap();
        let mem = Arc::new(MemoryStore::new());
        mem.insert("data", content(buffers));
        let stores: [(Arc<dyn Store>, String); 2] = [
            (
                Arc::new(FileStore::new()),
                path.to_str().unwrap().to_string(),
            ),
            (mem, "data".to_string()),
        ];
        for (store, name) in stores {
            let cache = Cache::new(CacheOptions::new(budget).batch(4)).unwrap();
            let map = Arc::new(cache.map(store, &name, MapOptions::new()).unwrap());
            many_tasks(map.clone(), tasks, per_task);
            let s = map.stats();
            assert_eq!(s.hits + s.misses + s.waits, tasks * per_task, "{s:?}");
            assert!(s.misses >= buffers.min(tasks * per_task) / 2, "{s:?}");
            assert!(s.evictions > 0, "the budget was exceeded: {s:?}");
            assert_eq!(s.read_failures, 0);
            assert_settled(&cache, &map, budget);
        }
    });
}

#[test]
fn async_pins_on_a_multi_thread_runtime_and_ensure_cached() {
    within("multi-thread async pins", || {
        let buffers = 256;
        let store = Arc::new(MemoryStore::new());
        store.insert("data", content(buffers));
        let budget = 32 * BS as u64;
        let cache = Cache::new(CacheOptions::new(budget).batch(4)).unwrap();
        // No readahead: the miss counts below are exact, and background loads of the pins'
        // sequential runs would race them.
        let map = Arc::new(
            cache
                .map(store, "data", MapOptions::new().readahead(false))
                .unwrap(),
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut handles = Vec::new();
            for t in 0..64u64 {
                let map = map.clone();
                handles.push(tokio::spawn(async move {
                    for k in 0..32u64 {
                        let i = (t * 7 + k * 13) % buffers;
                        // The guard's scope ends before the next await: the task stays Send.
                        {
                            let g = map.pin_shared_async(i).await.unwrap();
                            check(i, &g);
                        }
                        tokio::task::yield_now().await;
                    }
                }));
            }
            for h in handles {
                h.await.unwrap();
            }
            // ensure_cached over more than fits at once is refused, as the blocking one.
            let e = map
                .ensure_cached_async(0, buffers * BS as u64)
                .await
                .unwrap_err();
            assert!(matches!(e, Error::BadLength { .. }), "{e}");
            map.evict(0, buffers * BS as u64).unwrap();
            let before = map.stats();
            map.ensure_cached_async(10 * BS as u64, 20 * BS as u64)
                .await
                .unwrap();
            map.ensure_cached_buffers_async(&[100, 101, 100, 200])
                .await
                .unwrap();
            let s = map.stats();
            assert_eq!(s.misses - before.misses, 23, "{s:?}");
        });
        for i in (10..30).chain([100, 101, 200]) {
            assert!(map.is_resident(i).unwrap(), "{i}");
            check(i, &map.pin_shared(i).unwrap());
        }
        assert_settled(&cache, &map, budget);
    });
}

/// An object whose async reads wait at a gate the test opens, and count how many began.
struct Gated {
    inner: Arc<dyn Object>,
    gate: Arc<tokio::sync::Semaphore>,
    started: Arc<AtomicU64>,
}

impl Object for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
    fn read_owned(self: Arc<Self>, offset: u64, len: usize) -> ReadOwned {
        self.started.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            let _permit = self.gate.acquire().await.unwrap();
            let mut v = vec![0; len];
            let n = self.inner.read_at(&mut v, offset)?;
            v.truncate(n);
            Ok(v)
        })
    }
}

struct GatedStore(
    Arc<MemoryStore>,
    Arc<tokio::sync::Semaphore>,
    Arc<AtomicU64>,
);

impl Store for GatedStore {
    fn open(&self, object: &str, o: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        Ok(Arc::new(Gated {
            inner: self.0.open(object, o)?,
            gate: self.1.clone(),
            started: self.2.clone(),
        }))
    }
}

fn poll_once<F: Future>(f: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn futures_dropped_mid_miss_undo_their_loads() {
    within("cancellation", || {
        let buffers = 16;
        let mem = Arc::new(MemoryStore::new());
        mem.insert("data", content(buffers));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let started = Arc::new(AtomicU64::new(0));
        let store = Arc::new(GatedStore(mem, gate.clone(), started.clone()));
        let budget = 8 * BS as u64;
        let cache = Cache::new(CacheOptions::new(budget).batch(1)).unwrap();
        let map = cache
            // No readahead: every buffer's miss is counted below.
            .map(
                store,
                "data",
                MapOptions::new().writable(true).readahead(false),
            )
            .unwrap();
        let rt = current_thread();
        let _enter = rt.enter();
        // Loaders of buffers 0..6 (shared and exclusive), and a second pin of each that waits
        // on the first's load; all of them stop at the gate.
        let m = &map;
        let mut loaders: Vec<_> = (0..6u64)
            .map(|i| {
                Box::pin(async move {
                    let map = m;
                    if i % 2 == 0 {
                        map.pin_shared_async(i).await.map(drop)
                    } else {
                        map.pin_exclusive_async(i).await.map(drop)
                    }
                })
            })
            .collect();
        let mut waiters: Vec<_> = (0..6u64)
            .map(|i| Box::pin(map.pin_shared_async(i)))
            .collect();
        for f in &mut loaders {
            assert!(poll_once(f.as_mut()).is_pending());
        }
        for f in &mut waiters {
            assert!(poll_once(f.as_mut()).is_pending());
        }
        assert_eq!(started.load(Ordering::SeqCst), 6, "one read per buffer");
        for i in 0..6 {
            let w = map.state(i).unwrap();
            assert_eq!(w.phase(), Phase::Loading, "{i}");
            assert!(w.has_waiters(), "the second pin waits on the word: {w:?}");
        }
        assert_eq!(cache.used(), 6 * BS as u64, "room taken for each claim");
        // Cancel the loaders of the even buffers; their waiters are woken and take over.
        for i in (0..6).step_by(2).rev() {
            drop(loaders.remove(i));
        }
        assert_eq!(
            cache.used(),
            3 * BS as u64,
            "the cancelled claims gave their room back"
        );
        for i in (0..6).step_by(2) {
            let w = map.state(i).unwrap();
            assert_eq!(w.phase(), Phase::Evicted, "{i}: {w:?}");
        }
        // The waiters of the cancelled loads claim them anew; then every future is dropped.
        for f in &mut waiters {
            assert!(poll_once(f.as_mut()).is_pending());
        }
        assert_eq!(started.load(Ordering::SeqCst), 9, "three new reads");
        drop(waiters);
        drop(loaders);
        for i in 0..buffers {
            let w = map.state(i).unwrap();
            assert_eq!(w.phase(), Phase::Evicted, "{i}: {w:?}");
            assert!(w.idle(), "{i}: {w:?}");
        }
        assert_eq!(cache.used(), 0, "every cancelled claim gave its room back");
        assert_eq!(map.resident(), 0);
        let s = map.stats();
        assert_eq!((s.misses, s.read_failures), (0, 0), "{s:?}");
        // Nothing was lost: every buffer loads whole, async and blocking.
        gate.add_permits(1 << 20);
        rt.block_on(async {
            for i in 0..buffers {
                check(i, &map.pin_shared_async(i).await.unwrap());
            }
        });
        assert_eq!(map.stats().misses, buffers);
        drop(_enter);
    });
}

#[test]
fn errors_come_back_typed_and_leave_the_buffer_evicted() {
    within("async errors", || {
        let mem = Arc::new(MemoryStore::new());
        mem.insert("data", content(8));
        let faults = Arc::new(FaultStore::new(mem));
        let config = faults.config().clone();
        let cache = Cache::new(
            CacheOptions::new(4 * BS as u64)
                .batch(1)
                .budget_wait(Duration::from_millis(20)),
        )
        .unwrap();
        let map = cache.map(faults, "data", MapOptions::new()).unwrap();
        let rt = current_thread();
        rt.block_on(async {
            let e = map.pin_shared_async(8).await.unwrap_err();
            assert!(
                matches!(e, Error::OutOfRange(_)) && e.to_string().contains("has 8 buffer"),
                "{e}"
            );
            let e = map.pin_exclusive_async(0).await.unwrap_err();
            assert!(matches!(e, Error::ReadOnly), "{e}");
            config.fail_reads.store(true, Ordering::SeqCst);
            let e = map.pin_shared_async(3).await.unwrap_err();
            assert!(matches!(e, Error::Io { .. }), "{e}");
            let e = map.ensure_cached_async(0, 2 * BS as u64).await.unwrap_err();
            assert!(matches!(e, Error::Io { .. }), "{e}");
            assert_eq!(map.state(3).unwrap().phase(), Phase::Evicted);
            assert_eq!(map.stats().read_failures, 3);
            assert_eq!(cache.used(), 0);
            config.fail_reads.store(false, Ordering::SeqCst);
            // Every resident buffer pinned: a miss fails as BudgetExhausted after budget_wait.
            let held: Vec<_> = {
                let mut v = Vec::new();
                for i in 0..4 {
                    v.push(map.pin_shared_async(i).await.unwrap());
                }
                v
            };
            let e = map.pin_shared_async(5).await.unwrap_err();
            assert!(matches!(e, Error::BudgetExhausted { .. }), "{e}");
            assert_eq!(map.state(5).unwrap().phase(), Phase::Evicted);
            assert!(cache.stats().budget_stalls >= 1);
            drop(held);
            check(5, &map.pin_shared_async(5).await.unwrap());
        });
    });
}

#[test]
fn async_and_blocking_exclusive_pins_share_one_mapping() {
    within("async and blocking", || {
        let buffers = 64u64;
        let mem = Arc::new(MemoryStore::new());
        mem.insert("c", vec![0; buffers as usize * BS]);
        let cache = Cache::new(CacheOptions::new(16 * BS as u64).batch(2)).unwrap();
        let map = Arc::new(
            cache
                .map(mem.clone(), "c", MapOptions::new().writable(true))
                .unwrap(),
        );
        let (threads, tasks, rounds) = (2u64, 32u64, 200u64);
        let bump = |g: &mut ucache::ExclusiveGuard<'_>| {
            let v = g.read::<u64>(0);
            g.write::<u64>(0, v + 1);
        };
        std::thread::scope(|sc| {
            for t in 0..threads {
                let map = &map;
                sc.spawn(move || {
                    for k in 0..rounds {
                        let i = (t * 31 + k * 17) % buffers;
                        bump(&mut map.pin_exclusive(i).unwrap());
                    }
                });
            }
            let rt = current_thread();
            let local = tokio::task::LocalSet::new();
            for t in 0..tasks {
                let map = map.clone();
                local.spawn_local(async move {
                    for k in 0..rounds {
                        let i = (t * 7 + k * 5) % buffers;
                        let mut g = map.pin_exclusive_async(i).await.unwrap();
                        tokio::task::yield_now().await; // held across an await
                        bump(&mut g);
                    }
                });
            }
            rt.block_on(local);
        });
        map.msync(0, buffers * BS as u64).unwrap();
        let total: u64 = mem
            .get("c")
            .unwrap()
            .chunks_exact(BS)
            .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap()))
            .sum();
        assert_eq!(total, (threads + tasks) * rounds, "no increment lost");
        let s = map.stats();
        assert!(s.evictions > 0 && s.waits > 0, "{s:?}");
    });
}

#[test]
fn async_pins_on_pool_and_transparent_mappings() {
    within("async pins, other placements", || {
        let buffers = 2048u64;
        let budget = 4u64 << 20; // a pool chunk is 2 MiB: half the mapping fits
        let mem = Arc::new(MemoryStore::new());
        mem.insert("data", content(buffers));
        let mut options = vec![MapOptions::new().placement(ucache::Placement::Pool)];
        if common::transparent_modes().contains(&true) {
            options.push(MapOptions::new().transparent(true));
        }
        for o in options {
            let cache = Cache::new(CacheOptions::new(budget)).unwrap();
            let map = Arc::new(cache.map(mem.clone(), "data", o).unwrap());
            many_tasks(map.clone(), 128, 40);
            let s = map.stats();
            assert_eq!(s.hits + s.misses + s.waits, 128 * 40, "{s:?}");
            assert!(s.misses > 0 && s.read_failures == 0, "{s:?}");
            assert!(s.evictions > 0, "the budget was exceeded: {s:?}");
            assert_settled(&cache, &map, budget);
        }
    });
}

/// Counts this thread's allocations, for the hit path's check.
struct Counting;

std::thread_local! {
    static ALLOCS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; the counter is a const-initialized
// thread-local Cell, which never allocates.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded with the caller's layout.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        // SAFETY: forwarded with the caller's pointer and layout.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

#[test]
fn an_async_hit_is_ready_at_once_without_allocating() {
    let mem = Arc::new(MemoryStore::new());
    mem.insert("data", content(4));
    let cache = Cache::new(CacheOptions::new(16 * BS as u64).batch(1)).unwrap();
    let map = cache.map(mem, "data", MapOptions::new()).unwrap();
    drop(map.pin_shared(2).unwrap());
    let before = ALLOCS.with(|c| c.get());
    let mut f = std::pin::pin!(map.pin_shared_async(2));
    let Poll::Ready(g) = poll_once(f.as_mut()) else {
        panic!("a hit waited")
    };
    let allocs = ALLOCS.with(|c| c.get()) - before;
    check(2, &g.unwrap());
    assert_eq!(allocs, 0, "the hit allocated");
    assert_eq!(map.stats().hits, 1);
}
