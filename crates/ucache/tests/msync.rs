//! `msync` and `unmap` under concurrency and failing stores: what was written before the call
//! is durable when it returns Ok, and a failure leaves every dirty byte in the cache.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use ucache::store::{FaultStore, MemoryStore, Object, OpenOptions, Store};
use ucache::{Cache, CacheOptions, Error, MapOptions};

mod common;
use common::store::forward_object;

const BS: usize = 4096;

fn store_with(name: &str, len: usize) -> MemoryStore {
    let s = MemoryStore::new();
    s.insert(name, (0..len).map(|i| (i / BS) as u8).collect());
    s
}

#[test]
fn msync_waits_for_another_threads_exclusive_pin_and_writes_what_was_there_before() {
    let mem = store_with("o", 4 * BS);
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let m = cache
        .map(Arc::new(mem.clone()), "o", MapOptions::new().writable(true))
        .unwrap();
    m.pin_exclusive(0).unwrap().fill(0xEE); // written and unpinned: dirty
    std::thread::scope(|s| {
        let (pinned_tx, pinned) = mpsc::channel();
        let (release_tx, release) = mpsc::channel::<()>();
        let m2 = &m;
        s.spawn(move || {
            // Another thread holds it exclusively for a while and changes nothing.
            let g = m2.pin_exclusive(0).unwrap();
            pinned_tx.send(()).unwrap();
            release.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            drop(g);
        });
        pinned.recv().unwrap();
        release_tx.send(()).unwrap();
        m.msync(0, m.len()).unwrap();
        assert_eq!(
            mem.get("o").unwrap()[0],
            0xEE,
            "msync returned Ok before the data written ahead of it was in the store"
        );
    });
    assert!(!m.state(0).unwrap().dirty());
}

#[test]
fn msync_over_a_buffer_the_caller_holds_exclusively_is_refused_not_a_hang() {
    let mem = store_with("o", 4 * BS);
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let m = cache
        .map(Arc::new(mem.clone()), "o", MapOptions::new().writable(true))
        .unwrap();
    m.pin_exclusive(1).unwrap().fill(0x11);
    m.pin_exclusive(0).unwrap().fill(0xEE);
    let g = m.pin_exclusive(0).unwrap();
    match m.msync(0, m.len()) {
        Err(Error::WritebackFailed { failed: 1, first }) => {
            assert!(
                matches!(*first, Error::WouldDeadlock { index: 0, .. }),
                "{first}"
            )
        }
        other => panic!("expected a refusal for buffer 0, got {other:?}"),
    }
    // The other buffer was written all the same; buffer 0 is still dirty.
    assert_eq!(mem.get("o").unwrap()[BS], 0x11);
    assert!(m.state(0).unwrap().dirty());
    drop(g);
    m.msync(0, m.len()).unwrap();
    assert_eq!(mem.get("o").unwrap()[0], 0xEE);
}

/// Thread A holds buffer 1 exclusively and calls msync over buffer 0, which thread B holds
/// exclusively while it waits for buffer 1. Waiting for B would deadlock: msync reports it.
#[test]
fn msync_does_not_wait_crosswise_for_an_exclusive_pin() {
    let mem = store_with("o", 4 * BS);
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let m = cache
        .map(Arc::new(mem.clone()), "o", MapOptions::new().writable(true))
        .unwrap();
    m.pin_exclusive(0).unwrap().fill(0xEE);
    let mine = m.pin_exclusive(1).unwrap();
    std::thread::scope(|s| {
        let (pinned_tx, pinned) = mpsc::channel();
        let m2 = &m;
        let b = s.spawn(move || {
            let g0 = m2.pin_exclusive(0).unwrap();
            pinned_tx.send(()).unwrap();
            // Waits for A's pin of buffer 1, still holding buffer 0.
            let g1 = m2.pin_shared(1).unwrap();
            drop((g0, g1));
        });
        pinned.recv().unwrap();
        let r = m.msync(0, BS as u64);
        assert!(
            matches!(&r, Err(Error::WritebackFailed { first, .. })
                if matches!(**first, Error::WouldDeadlock { index: 0, .. })),
            "{r:?}"
        );
        drop(mine);
        b.join().unwrap();
    });
    m.msync(0, m.len()).unwrap();
    assert_eq!(mem.get("o").unwrap()[0], 0xEE);
}

#[test]
fn pinning_a_buffer_the_thread_holds_exclusively_is_refused_not_a_hang() {
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let m = cache
        .map(
            Arc::new(store_with("o", 4 * BS)),
            "o",
            MapOptions::new().writable(true),
        )
        .unwrap();
    let g = m.pin_exclusive(2).unwrap();
    assert!(matches!(
        m.pin_shared(2),
        Err(Error::WouldDeadlock { index: 2, .. })
    ));
    assert!(matches!(
        m.pin_exclusive(2),
        Err(Error::WouldDeadlock { index: 2, .. })
    ));
    // Another thread simply waits for the guard.
    std::thread::scope(|s| {
        let t = s.spawn(|| m.pin_shared(2).map(|g| g[0]).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        drop(g);
        assert_eq!(t.join().unwrap(), 2);
    });
    assert_eq!(m.pin_shared(2).unwrap()[0], 2);
}

/// An evictor thread races msync for the write-back of the same dirty buffer while every
/// write fails: whichever claims it, msync must never report success.
#[test]
fn msync_never_returns_ok_while_writes_fail_under_concurrent_eviction() {
    let faults = FaultStore::new(Arc::new(store_with("o", 8 * BS)));
    let cfg = faults.config().clone();
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let m = cache
        .map(Arc::new(faults), "o", MapOptions::new().writable(true))
        .unwrap();
    m.pin_exclusive(0).unwrap().fill(0xAB);
    cfg.fail_writes.store(true, Ordering::SeqCst);
    let stop = AtomicBool::new(false);
    let oks = AtomicU64::new(0);
    let tries = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = m.evict(0, BS as u64);
            }
        });
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(2) {
            tries.fetch_add(1, Ordering::Relaxed);
            if m.msync(0, BS as u64).is_ok() {
                oks.fetch_add(1, Ordering::Relaxed);
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(
        oks.load(Ordering::Relaxed),
        0,
        "msync returned Ok {} times in {} tries while every write failed",
        oks.load(Ordering::Relaxed),
        tries.load(Ordering::Relaxed)
    );
    assert!(m.state(0).unwrap().dirty());
    cfg.fail_writes.store(false, Ordering::SeqCst);
    m.msync(0, BS as u64).unwrap();
}

// ---- unmap ---------------------------------------------------------------------------------

type Hook = Box<dyn FnOnce() + Send>;

/// A memory store whose writes can be switched off, and that runs a hook inside `sync`.
#[derive(Clone)]
struct HookStore {
    mem: MemoryStore,
    fail_writes: Arc<AtomicBool>,
    on_sync: Arc<Mutex<Option<Hook>>>,
}

struct HookObject {
    inner: Arc<dyn Object>,
    store: HookStore,
}

impl Store for HookStore {
    fn open(&self, object: &str, o: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        Ok(Arc::new(HookObject {
            inner: self.mem.open(object, o)?,
            store: self.clone(),
        }))
    }
}

impl Object for HookObject {
    forward_object!(inner: name, len, set_len, read_at);
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.store.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("disk gone"));
        }
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        let hook = self.store.on_sync.lock().unwrap().take();
        if let Some(h) = hook {
            h();
        }
        self.inner.sync()
    }
}

/// Unmap's first pass writes everything back; a plain store then dirties another buffer (one
/// the pass did not write: those it wrote stay claimed until its sync returns) and the device
/// goes away, so its eviction pass fails. Every retry must fail as long as the
/// device is gone, and the data must reach the store once it is back.
#[test]
fn unmap_that_fails_after_its_write_back_pass_can_be_retried_without_loss() {
    let mem = store_with("o", 4 * BS);
    let store = HookStore {
        mem: mem.clone(),
        fail_writes: Arc::new(AtomicBool::new(false)),
        on_sync: Arc::new(Mutex::new(None)),
    };
    let cache = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let m = cache
        .map(
            Arc::new(store.clone()),
            "o",
            MapOptions::new().writable(true).transparent(true),
        )
        .unwrap();
    let base = m.as_mut_ptr() as usize;
    // SAFETY: inside the live mapping; plain stores are how a transparent mapping is written.
    unsafe { std::ptr::write_volatile(base as *mut u8, 0x11) };
    let fail = store.fail_writes.clone();
    *store.on_sync.lock().unwrap() = Some(Box::new(move || {
        // SAFETY: as above; the mapping is live inside unmap.
        unsafe { std::ptr::write_volatile((base + BS) as *mut u8, 0x22) };
        fail.store(true, Ordering::SeqCst);
    }));
    let err = m
        .unmap()
        .expect_err("the eviction pass cannot write buffer 1");
    let mut m = err.mapping;
    assert!(m.state(1).unwrap().dirty());
    for _ in 0..2 {
        let err = m.unmap().expect_err("the device is still gone");
        m = err.mapping;
    }
    // The mapping is whole again: it takes calls, and the cache still finds it.
    assert_eq!(m.pin_shared(1).unwrap()[0], 0x22);
    assert!(cache.msync(m.as_ptr(), 2 * BS).is_err());
    store.fail_writes.store(false, Ordering::SeqCst);
    m.unmap().unwrap();
    let d = mem.get("o").unwrap();
    assert_eq!((d[0], d[BS]), (0x11, 0x22));
    assert_eq!(cache.used(), 0);
}
