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

/// Every mapping of the model reads nothing ahead: readahead loads run on the IO worker, a real
/// thread shuttle does not control, which would then touch shuttle's primitives outside the
/// schedule (shuttle aborts the process when that happens).
fn model_options() -> MapOptions {
    MapOptions::new().readahead(false)
}

/// A cache that holds one buffer at a time, over `n` buffers whose first byte is their index.
fn setup(n: usize) -> (MemoryStore, Cache, Arc<ucache::Mapping>) {
    mapped(n, 1, model_options().writable(true))
}

/// A cache of `budget` buffers evicting one at a time, and a mapping with `options` of `n`
/// buffers whose first byte is their index.
fn mapped(
    n: usize,
    budget: usize,
    options: MapOptions,
) -> (MemoryStore, Cache, Arc<ucache::Mapping>) {
    let store = MemoryStore::new();
    store.insert("o", (0..n * BS).map(|i| (i / BS) as u8).collect());
    let cache = Cache::new(CacheOptions::new((budget * BS) as u64).batch(1)).unwrap();
    let m = cache.map(Arc::new(store.clone()), "o", options).unwrap();
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
        let options = model_options().transparent(true).track_access(true);
        let (_, cache, m) = mapped(N as usize, 8, options);
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
        .map(Arc::new(faults), "o", model_options().writable(true))
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
            matches!(phase, ucache::Phase::Cached | ucache::Phase::Evicted),
            "{phase:?}"
        );
        assert_eq!(cache.used(), m.resident() * BS as u64);
        assert_eq!(m.pin_shared(1).unwrap()[0], 1);
    });
}

/// A store into a transparent mapping, as the hardware runs it: the kernel writes the byte
/// (`process_vm_writev` into this process honours the write protection and the missing pages
/// as a user store does, but fails with `EFAULT` instead of raising a signal), and each time it
/// cannot, the fault is served as the `SIGBUS` handler would serve it and the store runs again.
fn store_byte(m: &ucache::Mapping, offset: usize, value: u8) {
    loop {
        let byte = [value];
        let local = libc::iovec {
            iov_base: byte.as_ptr() as *mut libc::c_void,
            iov_len: 1,
        };
        let remote = libc::iovec {
            // SAFETY (of the address): inside the mapping, which outlives this call.
            iov_base: unsafe { m.as_mut_ptr().add(offset) } as *mut libc::c_void,
            iov_len: 1,
        };
        // SAFETY: one byte from a live local buffer to an address of this process; the kernel
        // checks the destination's permissions and reports EFAULT rather than faulting.
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n == 1 {
            return;
        }
        let err = std::io::Error::last_os_error();
        assert_eq!(
            err.raw_os_error(),
            Some(libc::EFAULT),
            "process_vm_writev: {err}"
        );
        m.model_fault(offset, true).unwrap();
        thread::yield_now();
    }
}

/// Write-protect faults (issue 23, item 9): first stores to clean buffers of a transparent
/// mapping race a thread that pins one of them exclusively and lets go clean, and a reader
/// whose misses evict them (the budget holds two of three buffers). The fault must leave the
/// buffer dirty whenever the store can land, so no store is lost: once the threads are done,
/// an eviction of everything writes both stores to the store.
#[test]
fn write_protect_faults_racing_a_clean_exclusive_unpin_and_eviction_lose_no_store() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static WRITE_FAULTS: AtomicU64 = AtomicU64::new(0);
    static MISSES_WHILE_STORING: AtomicU64 = AtomicU64::new(0);
    check(|| {
        let options = model_options().transparent(true).writable(true);
        let (store, cache, m) = mapped(3, 2, options);
        // Resident and clean, so the first store takes a write-protect fault.
        drop(m.pin_shared(0).unwrap());
        drop(m.pin_shared(1).unwrap());
        let writer = {
            let m = m.clone();
            thread::spawn(move || {
                store_byte(&m, 8, 0xA0);
                store_byte(&m, BS + 8, 0xA1);
            })
        };
        let pinner = {
            let m = m.clone();
            thread::spawn(move || {
                let g = m.pin_exclusive(0).unwrap();
                assert_eq!(g[0], 0);
                drop(g);
            })
        };
        let reader = {
            let m = m.clone();
            thread::spawn(move || assert_eq!(m.pin_shared(2).unwrap()[0], 2))
        };
        for t in [writer, pinner, reader] {
            t.join().unwrap();
        }
        let st = cache.stats();
        WRITE_FAULTS.fetch_add(st.write_faults, Relaxed);
        // A fault that was no write-protect fault: a store found its buffer evicted.
        MISSES_WHILE_STORING.fetch_add(st.faults.saturating_sub(st.write_faults), Relaxed);
        assert!(cache.used() <= cache.budget());
        m.evict(0, m.len()).unwrap();
        let got = store.get("o").unwrap();
        assert_eq!((got[8], got[BS + 8]), (0xA0, 0xA1), "a store was lost");
        assert_eq!((got[0], got[BS]), (0, 1));
    });
    assert!(
        WRITE_FAULTS.load(Relaxed) > 0 && MISSES_WHILE_STORING.load(Relaxed) > 0,
        "the schedules reached write-protect faults and stores whose buffer had been evicted"
    );
}

/// The background evictor (issue 23, item 9): its eviction rounds race two writers and a
/// reader whose misses need the memory (budget: two of four buffers). Every write survives,
/// every pin sees its own buffer, and the budget's accounting matches what is resident.
#[test]
fn background_eviction_rounds_race_writers_and_misses() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static FREED: AtomicU64 = AtomicU64::new(0);
    check(|| {
        let (store, cache, m) = mapped(4, 2, model_options().writable(true));
        let writers: Vec<_> = (0..2u64)
            .map(|i| {
                let m = m.clone();
                thread::spawn(move || {
                    for _ in 0..2 {
                        let mut g = m.pin_exclusive(i).unwrap();
                        assert_eq!(g[0], i as u8, "buffer {i}");
                        g[1] += 1;
                    }
                })
            })
            .collect();
        let reader = {
            let m = m.clone();
            thread::spawn(move || {
                for i in [2u64, 3] {
                    let g = m.pin_shared(i).unwrap();
                    assert_eq!((g[0], g[BS - 1]), (i as u8, i as u8));
                }
            })
        };
        let evictor = {
            let cache = cache.clone();
            thread::spawn(move || {
                for _ in 0..3 {
                    // Keep a whole buffer free, as the evictor keeps its batches.
                    FREED.fetch_add(cache.model_evict_ahead(BS as u64), Relaxed);
                    thread::yield_now();
                }
            })
        };
        writers.into_iter().for_each(|t| t.join().unwrap());
        reader.join().unwrap();
        evictor.join().unwrap();
        assert!(cache.used() <= cache.budget());
        assert_eq!(cache.used(), m.resident() * BS as u64);
        m.evict(0, m.len()).unwrap();
        let got = store.get("o").unwrap();
        assert_eq!((got[1], got[BS + 1]), (2, 3), "a write was lost");
    });
    assert!(
        FREED.load(Relaxed) > 0,
        "the evictor's rounds freed buffers"
    );
}

/// `unmap` racing pins (issue 23, item 9): one mapping is unmapped with a dirty buffer while a
/// second mapping of the same cache misses (its evictions may pick the first's buffers) and a
/// third thread pins the first through the cache's address calls. Those calls either work on
/// the live mapping or fail cleanly once it is gone; unmap writes the dirty buffer; and in
/// the end the cache charges only what the second mapping holds.
#[test]
fn unmap_racing_pins_and_evictions_strands_nothing() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static LIVE: AtomicU64 = AtomicU64::new(0);
    static GONE: AtomicU64 = AtomicU64::new(0);
    check(|| {
        let store = MemoryStore::new();
        store.insert("a", (0..2 * BS).map(|i| (i / BS) as u8).collect());
        store.insert("b", (0..2 * BS).map(|i| 10 + (i / BS) as u8).collect());
        let cache = Cache::new(CacheOptions::new(2 * BS as u64).batch(1)).unwrap();
        let a = cache
            .map(Arc::new(store.clone()), "a", model_options().writable(true))
            .unwrap();
        let b = Arc::new(
            cache
                .map(Arc::new(store.clone()), "b", model_options())
                .unwrap(),
        );
        a.pin_exclusive(0).unwrap()[1] = 0xEE;
        let a_addr = a.as_ptr() as usize;
        let unmapper = thread::spawn(move || a.unmap().map_err(|e| e.error).unwrap());
        let other = {
            let b = b.clone();
            thread::spawn(move || {
                for i in [0u64, 1] {
                    assert_eq!(b.pin_shared(i).unwrap()[0], 10 + i as u8);
                }
            })
        };
        let by_address = {
            let cache = cache.clone();
            thread::spawn(move || {
                let p = (a_addr + BS) as *const u8;
                // The mapping may be gone already: then the address is refused.
                match cache.ensure_cached(p, 1) {
                    Ok(()) => LIVE.fetch_add(1, Relaxed),
                    Err(ucache::Error::OutOfRange(_)) => GONE.fetch_add(1, Relaxed),
                    Err(e) => panic!("ensure_cached racing unmap: {e}"),
                };
                let _ = cache.evict(p, 1);
            })
        };
        for t in [unmapper, other, by_address] {
            t.join().unwrap();
        }
        assert_eq!(
            store.get("a").unwrap()[1],
            0xEE,
            "unmap lost the dirty buffer"
        );
        assert_eq!(
            cache.used(),
            b.resident() * BS as u64,
            "budget left charged to the unmapped mapping"
        );
    });
    assert!(
        LIVE.load(Relaxed) > 0 && GONE.load(Relaxed) > 0,
        "the schedules reached address calls before and after the unmap"
    );
}

/// Frame reuse on a pool mapping: one frame (a 2 MiB buffer fills the pool's one chunk)
/// serves two buffers, so every miss evicts the frame's buffer and reads the other into the
/// very same memory. Optimistic reads of buffer 0 racing that reuse (a pin of buffer 1 takes
/// the frame, a pin of buffer 0 takes it back) and an explicit eviction must only ever
/// validate buffer 0's own bytes: a reader that read the frame while buffer 1 lived there
/// sees buffer 0 cached again at its check, but with another version. Every pin sees its
/// own buffer. (Without the version check, this finds the reader that validated buffer 1's
/// bytes.)
#[test]
fn pool_frame_reuse_races_optimistic_readers_pins_and_eviction() {
    const PB: usize = 2 << 20;
    // Buffer i's bytes are i + 1: never zero, so a frame read between owners shows. Made
    // once: 4 MiB per schedule would dominate the run.
    let data: Arc<Vec<u8>> = Arc::new((0..2).flat_map(|i| vec![i as u8 + 1; PB]).collect());
    let f = Arc::new(move || {
        let store = MemoryStore::new();
        store.insert("o", data.to_vec());
        let cache = Cache::new(CacheOptions::new(PB as u64).batch(1)).unwrap();
        let opts = model_options()
            .buffer_size(PB)
            .placement(ucache::Placement::Pool);
        let m = Arc::new(cache.map(Arc::new(store), "o", opts).unwrap());
        drop(m.pin_shared(0).unwrap());
        let reader = {
            let m = m.clone();
            thread::spawn(move || {
                for _ in 0..4 {
                    let (a, b) = m
                        .read_optimistic(0, |v| {
                            let (mut x, mut y) = ([0u8; 1], [0u8; 1]);
                            v.copy_to(0, &mut x);
                            v.copy_to(PB - 1, &mut y);
                            (x[0], y[0])
                        })
                        .unwrap();
                    assert_eq!((a, b), (1, 1), "validated another owner's bytes");
                }
            })
        };
        // Buffer 1 takes the frame, buffer 0 takes it back, over and over.
        let pinner = {
            let m = m.clone();
            thread::spawn(move || {
                for i in [1u64, 0, 1, 0] {
                    let g = m.pin_shared(i).unwrap();
                    assert_eq!((g[0], g[PB - 1]), (i as u8 + 1, i as u8 + 1));
                }
            })
        };
        let evictor = {
            let m = m.clone();
            thread::spawn(move || m.evict(0, m.len()).unwrap())
        };
        reader.join().unwrap();
        pinner.join().unwrap();
        evictor.join().unwrap();
        assert_eq!(
            cache.pool_bytes(),
            PB as u64,
            "one chunk, reused, never regrown"
        );
    });
    // A third of the other scenarios' schedules: each one copies megabytes.
    let g = f.clone();
    shuttle::check_random(move || g(), ITERATIONS / 3);
    shuttle::check_pct(move || f(), ITERATIONS / 3, 3);
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
