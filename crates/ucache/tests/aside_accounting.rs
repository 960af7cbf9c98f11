//! The budget that set-aside buffers hand to their pool (mapping/aside.rs, mapping/evict.rs):
//! `Cache::used` stays exact across set-aside, restore and eviction under concurrency, every
//! byte comes back at unmap or drop, and the counters keep their meaning. Found by review
//! (2026-11-25), each failing before its fix.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::store::{FaultStore, MemoryStore};
use ucache::Phase;
use ucache::{Cache, CacheOptions, FaultHandling, MapOptions};

mod common;
use common::{pattern_store as store, phase, tracked, until, within};

const BS: usize = 4096;

/// Pins, writes, explicit evictions and plain loads racing on a tracked writable mapping, with
/// the background evictor on; at unmap every byte of the budget must come back.
fn churn(handling: FaultHandling, secs: u64, background: bool) {
    let budget_buffers = 128u64;
    let n = 1024u64;
    let cache = Cache::new(
        CacheOptions::new(budget_buffers * BS as u64)
            .batch(2)
            .background_eviction(background),
    )
    .unwrap();
    let s = store("o", n as usize);
    let m = Arc::new(
        cache
            .map(
                s.clone(),
                "o",
                tracked().writable(true).fault_handling(handling),
            )
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let m = m.clone();
            let cache = cache.clone();
            sc.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t);
                while Instant::now() < deadline {
                    let i = if rng.gen_bool(0.5) {
                        rng.gen_range(0..96)
                    } else {
                        rng.gen_range(0..n)
                    };
                    match rng.gen_range(0..10) {
                        0 => {
                            let mut g = m.pin_exclusive(i).unwrap();
                            g[1] = g[1].wrapping_add(1);
                        }
                        1 => {
                            let _ = m.evict(i * BS as u64, 4 * BS as u64).ok();
                        }
                        2 => {
                            // A plain load through the pointer: a fault restores or loads.
                            let p = unsafe { m.as_ptr().add(i as usize * BS) };
                            let v = unsafe { std::ptr::read_volatile(p) };
                            assert_eq!(v, i as u8);
                        }
                        3 => {
                            // A plain store: a write fault restores a set-aside buffer dirty.
                            let p = unsafe { m.as_ptr().add(i as usize * BS + 2) } as *mut u8;
                            unsafe { std::ptr::write_volatile(p, 7) };
                        }
                        _ => {
                            let g = m.pin_shared(i).unwrap();
                            assert_eq!(g[0], i as u8);
                        }
                    }
                    assert!(cache.used() <= cache.budget());
                }
            });
        }
    });
    let st = cache.stats();
    assert!(st.set_aside > 0 && st.restores > 0, "{st:?}");
    Arc::try_unwrap(m).ok().unwrap().unmap().unwrap();
    assert_eq!(cache.used(), 0, "budget left after unmap: {st:?}");
}

#[test]
fn churn_on_faulting_thread_gives_every_byte_back() {
    within("churn", || churn(FaultHandling::OnFaultingThread, 4, true));
}

#[test]
fn churn_with_handler_threads_gives_every_byte_back() {
    within("churn", || churn(FaultHandling::HandlerThreads(2), 4, true));
}

/// A mapping whose write-back fails cannot be unmapped; dropped, it gives back the budget of
/// whatever it still holds, set-aside buffers included (whose budget the pool carries).
#[test]
fn a_dropped_mapping_with_aside_buffers_gives_every_byte_back() {
    within("drop", || {
        let cache = Cache::new(
            CacheOptions::new(64 * BS as u64)
                .batch(2)
                .background_eviction(false),
        )
        .unwrap();
        let fs = Arc::new(FaultStore::new(store("o", 512)));
        let m = cache
            .map(fs.clone(), "o", tracked().writable(true))
            .unwrap();
        for i in 0..256u64 {
            drop(m.pin_shared(i).unwrap());
        }
        let aside = (0..256).filter(|&i| phase(&m, i) == Phase::Aside).count();
        assert!(aside > 0);
        m.pin_exclusive(255).unwrap()[1] = 9;
        fs.config().fail_writes.store(true, Relaxed);
        let e = m.unmap().unwrap_err();
        drop(e);
        assert_eq!(cache.used(), 0);
    });
}

/// CLOCK whose `on_evict` spins while `slow` is set: holds an evicting thread between its claim
/// of a buffer and `finish_evict`.
struct SlowEvict {
    clock: ucache::policy::Clock,
    slow: Arc<AtomicBool>,
}

impl ucache::policy::Policy for SlowEvict {
    fn name(&self) -> &str {
        "slow-evict"
    }
    fn attach(&mut self, layout: ucache::policy::Layout) {
        self.clock.attach(layout);
    }
    fn choose_eviction_buffers(
        &self,
        b: &ucache::policy::Buffers<'_>,
        want: usize,
        out: &mut Vec<u64>,
    ) {
        self.clock.choose_eviction_buffers(b, want, out)
    }
    fn on_insert(&self, index: u64) {
        self.clock.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        if self.slow.load(Relaxed) {
            // Busy, not asleep: the thread keeps its CPU and runs up its time.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(30) {
                std::hint::spin_loop();
            }
        }
        self.clock.on_evict(index)
    }
}

/// Runs the calling thread (and the threads it starts) on CPU 0 alone.
fn one_cpu() {
    // SAFETY: a plain affinity mask for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// `unmap` racing an eviction of a set-aside buffer by another thread (here an explicit
/// `Cache::evict` begun just before; a background evictor or another thread's reservation
/// does the same). The evicting thread used to mark the buffer `Evicted` before the pool let
/// go of it, so the unmapping thread, woken by that very transition, could find every buffer
/// evicted while the pool still carried one, and its check at unmap panicked.
#[test]
fn unmap_racing_the_eviction_of_a_set_aside_buffer_does_not_panic() {
    within("race", || {
        one_cpu();
        for attempt in 0..20 {
            let cache = Cache::new(
                CacheOptions::new(64 * BS as u64)
                    .batch(2)
                    .background_eviction(false),
            )
            .unwrap();
            let slow = Arc::new(AtomicBool::new(false));
            let m = cache
                .map(
                    store("o", 64),
                    "o",
                    tracked().policy(Box::new(SlowEvict {
                        clock: ucache::policy::Clock::new(),
                        slow: slow.clone(),
                    })),
                )
                .unwrap();
            for i in 0..64u64 {
                drop(m.pin_shared(i).unwrap());
            }
            let v = (0..64)
                .find(|&i| phase(&m, i) == Phase::Aside)
                .expect("some buffer aside");
            // Only the victim stays: the unmap has nothing else to do.
            for i in (0..64).filter(|&i| i != v) {
                m.evict(i * BS as u64, BS as u64).unwrap();
            }
            assert_eq!(m.resident(), 1);
            slow.store(true, Relaxed);
            let addr = unsafe { m.as_ptr().add(v as usize * BS) } as usize;
            let c2 = cache.clone();
            let x = std::thread::spawn(move || {
                // The lowest priority: woken, the unmapping thread preempts it at once.
                // SAFETY: sets this thread's own nice value.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
                c2.evict(addr as *const u8, BS).unwrap()
            });
            // Let the evictor claim the victim and enter its slow hook.
            while phase(&m, v) != Phase::Evicting {
                std::thread::yield_now();
            }
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.unmap()));
            x.join().unwrap();
            match r {
                Ok(r) => r.unwrap(),
                Err(p) => {
                    eprintln!("attempt {attempt}: unmap panicked");
                    std::panic::resume_unwind(p);
                }
            }
        }
    });
}

/// `evictions_ahead` is "of `evictions`, those done by the background evictor". It was counted
/// from what an eviction round returns, which counts buffers set aside too (their budget is
/// freed): a working set slightly over the data budget, cycled, is set aside and restored by
/// the evictor over and over with few evictions, and `evictions_ahead` outgrew `evictions`.
#[test]
fn evictions_ahead_are_a_part_of_evictions() {
    within("evictor", || {
        let budget = 128u64;
        let cache = Cache::new(CacheOptions::new(budget * BS as u64).batch(2)).unwrap();
        let m = cache.map(store("o", 1024), "o", tracked()).unwrap();
        let pool = cache.used() / BS as u64;
        // A hot set a little larger than the data budget (less the evictor's headroom).
        let hot = budget - pool + 2;
        for _ in 0..30 {
            for i in 0..hot {
                assert_eq!(m.pin_shared(i).unwrap()[0], i as u8);
            }
        }
        // The evictor engages, however late a loaded host runs it (a 50 ms sleep was not
        // always enough). It may still be mid-round below: a round counts `evictions` before
        // `evictions_ahead`, so `evictions_ahead` read first and `evictions` read after
        // compare whole rounds.
        until(
            "the evictor to engage",
            || cache.stats().evictions_ahead > 0,
            || cache.stats(),
        );
        let ahead = cache.stats().evictions_ahead;
        let st = cache.stats();
        assert!(
            ahead <= st.evictions,
            "evictions_ahead {ahead} > evictions {} (set aside {}, restores {})",
            st.evictions,
            st.set_aside,
            st.restores
        );
        m.unmap().unwrap();
    });
}

/// A global policy that parks the first eviction round it sees once armed, so a test can run
/// `unmap` while another thread's round holds the cache's list of mappings.
struct Parking {
    armed: std::sync::atomic::AtomicBool,
    entered: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    release: std::sync::Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl ucache::policy::GlobalPolicy for Parking {
    fn choose_eviction_mappings(
        &self,
        usage: &[ucache::policy::MappingUsage],
        out: &mut Vec<usize>,
    ) {
        if self.armed.swap(false, Relaxed) {
            self.entered
                .lock()
                .unwrap()
                .take()
                .unwrap()
                .send(())
                .unwrap();
            let rx = self.release.lock().unwrap().take().unwrap();
            let _ = rx.recv();
        }
        ucache::policy::ProportionalGlobal.choose_eviction_mappings(usage, out)
    }
}

/// `unmap` of a tracked mapping gives its set-aside pool's budget back before it returns. The
/// pool used to be released only when the mapping's last `Arc` went, and an eviction round on
/// another thread (or an IO thread's job, or a fault handler thread) may still hold one: until
/// it let go, `cache.used()` counted memory of a mapping `unmap` said was released.
#[test]
fn unmap_gives_back_the_set_aside_pool() {
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    let global = Arc::new(Parking {
        armed: std::sync::atomic::AtomicBool::new(false),
        entered: std::sync::Mutex::new(Some(entered_tx)),
        release: std::sync::Mutex::new(Some(release_rx)),
    });
    let cache = Cache::new(
        CacheOptions::new(32 * 4096)
            .batch(1)
            .background_eviction(false)
            .global_policy(global.clone()),
    )
    .unwrap();
    let store = MemoryStore::new();
    store.insert("t", vec![1; 8 * 4096]);
    store.insert("n", vec![2; 64 * 4096]);
    let tracked = cache.map(Arc::new(store.clone()), "t", tracked()).unwrap();
    let other = cache.map(Arc::new(store), "n", MapOptions::new()).unwrap();
    let pool = cache.used();
    assert!(pool > 0, "the tracked mapping holds a set-aside pool");
    // Another thread fills the budget; its first eviction round parks in the global policy.
    global.armed.store(true, Relaxed);
    let loader = std::thread::scope(|s| {
        let h = s.spawn(|| {
            for i in 0..64 {
                drop(other.pin_shared(i).unwrap());
            }
        });
        entered_rx.recv().unwrap();
        tracked.unmap().unwrap();
        let after = cache.used();
        let resident = other.resident() * 4096;
        release_tx.send(()).unwrap();
        h.join().unwrap();
        (after, resident)
    });
    let (after, resident) = loader;
    assert_eq!(
        after,
        resident,
        "after unmap returned, the cache still counted {} bytes of the unmapped mapping's pool",
        after - resident
    );
    other.unmap().unwrap();
    assert_eq!(cache.used(), 0);
}

/// The kept readahead markers of a transparent mapping hold their slots' budget for as long as
/// the mapping is mapped, and `Mapping::reserved_bytes` says so: `Cache::used` is the resident
/// buffers plus that, before and after a scan, and every byte comes back at unmap. (The API
/// model compared `used` with the resident buffers alone and waited forever on a transparent
/// mapping of 33 buffers with readahead, in CI on 2026-11-26.)
#[test]
fn kept_marker_slots_are_reserved_bytes() {
    within("kept marker slots", || {
        let n = 64u64;
        let cache = Cache::new(CacheOptions::new(48 * BS as u64).batch(2)).unwrap();
        let s = store("o", n as usize);
        let m = cache
            .map(s, "o", MapOptions::new().transparent(true))
            .unwrap();
        let reserved = m.reserved_bytes();
        assert!(reserved >= 2 * BS as u64, "no slots kept: {reserved}");
        let accounted = || m.resident() * BS as u64 + m.reserved_bytes();
        assert_eq!(cache.used(), accounted());
        let mut sum = 0u64;
        // SAFETY: a mapped, readable transparent mapping of n buffers.
        let bytes = unsafe { std::slice::from_raw_parts(m.as_ptr(), (n as usize) * BS) };
        for i in (0..bytes.len()).step_by(BS) {
            sum += u64::from(bytes[i]);
        }
        assert_eq!(sum, (0..n).sum::<u64>());
        assert!(m.stats().marker_hits > 0, "the scan used no kept marker");
        until(
            "used to settle",
            || cache.used() == accounted(),
            || (cache.used(), accounted()),
        );
        assert_eq!(m.reserved_bytes(), reserved);
        m.unmap().unwrap();
        assert_eq!(cache.used(), 0);
    });
}
