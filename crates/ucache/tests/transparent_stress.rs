//! The stress test of explicit mode, with plain memory loads and stores instead of pins: many
//! threads over a transparent mapping 16× larger than the budget. The application's own
//! concurrency control (a reader-writer lock per buffer) orders its accesses; ucache must never
//! lose a store under eviction, write-back or reload, and never serve stale or torn bytes.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, FaultHandling, MapOptions};

const THREADS: u64 = 8;

fn run(bs: usize, budget_buffers: u64, seconds: u64, handling: FaultHandling) {
    run_batch(bs, budget_buffers, 8, seconds, handling);
}

fn run_batch(bs: usize, budget_buffers: u64, batch: usize, seconds: u64, handling: FaultHandling) {
    let buffers = budget_buffers * 16;
    let words_per = bs / 8;
    let store = MemoryStore::new();
    let mut data = vec![0u8; buffers as usize * bs];
    for (k, w) in data.chunks_exact_mut(16).enumerate() {
        let i = (k * 16 / bs) as u64;
        w[..8].copy_from_slice(&i.to_le_bytes());
    }
    store.insert("db", data);
    let cache = Cache::new(CacheOptions::new(budget_buffers * bs as u64).batch(batch)).unwrap();
    let m = cache
        .map(
            Arc::new(store.clone()),
            "db",
            MapOptions::new()
                .buffer_size(bs)
                .transparent(true)
                .track_access(true)
                .fault_handling(handling)
                .writable(true),
        )
        .unwrap();
    // SAFETY: valid for the mapping's length while `m` lives; atomics make the concurrent
    // plain loads and stores sound in Rust's model (they compile to plain movs).
    let mem: &[AtomicU64] =
        unsafe { std::slice::from_raw_parts(m.as_ptr() as *const AtomicU64, m.len() as usize / 8) };
    let locks: Vec<RwLock<()>> = (0..buffers).map(|_| RwLock::new(())).collect();
    let ledger: Vec<AtomicU64> = (0..buffers).map(|_| AtomicU64::new(0)).collect();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let check = |i: u64| -> u64 {
        let base = i as usize * words_per;
        let c = mem[base + 1].load(Relaxed);
        for k in (0..words_per).step_by(2) {
            let (a, b) = (mem[base + k].load(Relaxed), mem[base + k + 1].load(Relaxed));
            assert_eq!((a, b), (i, c), "buffer {i} torn or stale at word {k}");
        }
        c
    };
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (locks, ledger, check, cache) = (&locks, &ledger, &check, &cache);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                while Instant::now() < deadline {
                    let i = if rng.gen_bool(0.3) {
                        rng.gen_range(0..8)
                    } else {
                        rng.gen_range(0..buffers)
                    };
                    if rng.gen_bool(0.4) {
                        let _w = locks[i as usize].write().unwrap();
                        let c = check(i);
                        assert_eq!(c, ledger[i as usize].load(Relaxed), "lost update on {i}");
                        let base = i as usize * words_per;
                        for k in (1..words_per).step_by(2) {
                            mem[base + k].store(c + 1, Relaxed);
                        }
                        ledger[i as usize].store(c + 1, Relaxed);
                    } else {
                        let _r = locks[i as usize].read().unwrap();
                        let c = check(i);
                        assert_eq!(c, ledger[i as usize].load(Relaxed), "stale read of {i}");
                    }
                    assert!(cache.used() <= budget_buffers * bs as u64);
                }
            });
        }
    });
    // Everything must reach the store through msync, and a fresh read of it must agree.
    m.msync(0, m.len()).unwrap();
    let stored = store.get("db").unwrap();
    for i in 0..buffers {
        let off = i as usize * bs + 8;
        let c = u64::from_le_bytes(stored[off..off + 8].try_into().unwrap());
        assert_eq!(
            c,
            ledger[i as usize].load(Relaxed),
            "store has a stale buffer {i}"
        );
    }
    let st = cache.stats();
    assert!(
        st.evictions > 0 && st.writebacks > 0 && st.write_faults > 0,
        "{st:?}"
    );
    assert!(
        st.set_aside > 0 && st.restores > 0,
        "clean buffers went aside and came back under the same load: {st:?}"
    );
    let ahead = budget_buffers / batch as u64 >= ucache::CacheOptions::BACKGROUND_EVICTION_BATCHES;
    assert_eq!(st.evictions_ahead > 0, ahead, "{st:?}");
    eprintln!("bs {bs}: {st:?}");
}

#[test]
fn plain_stores_stress_4k() {
    run(
        4096,
        64,
        if cfg!(debug_assertions) { 4 } else { 8 },
        FaultHandling::OnFaultingThread,
    );
}

/// The background evictor engaged (64 batches of 2 fit the budget), evicting and setting
/// buffers aside while the threads store.
#[test]
fn plain_stores_stress_background_evictor() {
    run_batch(
        4096,
        128,
        2,
        if cfg!(debug_assertions) { 3 } else { 6 },
        FaultHandling::OnFaultingThread,
    );
}

#[test]
fn plain_stores_stress_handler_threads() {
    run(
        4096,
        64,
        if cfg!(debug_assertions) { 3 } else { 6 },
        FaultHandling::HandlerThreads(2),
    );
}

#[test]
fn plain_stores_stress_multi_page_buffers() {
    run(
        16384,
        32,
        if cfg!(debug_assertions) { 3 } else { 6 },
        FaultHandling::OnFaultingThread,
    );
}
