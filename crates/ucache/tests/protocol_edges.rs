//! The buffer state protocol at its edges, each case found by review (2026-11-25) and failing
//! before its fix: the pin count at its limit, and a drop that fails part way.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ucache::state::{BufferState, Phase, Pin, Word, MAX_PINS};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

mod common;

/// `pin_shared_fast` adds 1 to the word unconditionally and only then looks at the pin count.
/// With `MAX_PINS` at the field's top (0xFFFE), two racing fast pins on a buffer holding that
/// many carried into `X`: the word read "0 pins, exclusively held". `MAX_PINS` now leaves half
/// the field as headroom for such adds.
#[test]
fn fast_pin_blind_adds_never_carry_out_of_the_pin_field_at_max_pins() {
    common::within("fast pins at MAX_PINS", || {
        let s = Arc::new(BufferState::new());
        let cached = Word::EVICTED
            .begin_load()
            .unwrap()
            .finish_load(Pin::None, false);
        s.cas(Word::EVICTED, cached).unwrap();
        // MAX_PINS shared pins, each taken through the CAS path as `pin_shared` allows.
        let mut w = s.load();
        while let Some(n) = w.pin_shared() {
            s.cas(w, n).unwrap();
            w = n;
        }
        assert_eq!(s.load().pins(), MAX_PINS);

        let stop = Arc::new(AtomicBool::new(false));
        let carried = Arc::new(AtomicU64::new(0));
        let asserts = Arc::new(AtomicU64::new(0));
        let pinners: Vec<_> = (0..4)
            .map(|_| {
                let (s, stop, asserts) = (s.clone(), stop.clone(), asserts.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // Refused (over FAST_PIN_LIMIT) and undone at once.
                        match catch_unwind(AssertUnwindSafe(|| s.pin_shared_fast())) {
                            Ok(r) => assert!(r.is_none(), "fast pin over the limit succeeded"),
                            Err(_) => {
                                asserts.fetch_add(1, Ordering::Relaxed);
                                stop.store(true, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) && carried.load(Ordering::Relaxed) == 0 {
            let w = s.load();
            if w.exclusive() || w.pins() < MAX_PINS {
                eprintln!("carried into X: {w:?}");
                carried.fetch_add(1, Ordering::Relaxed);
            }
            if asserts.load(Ordering::Relaxed) > 0 {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        pinners.into_iter().for_each(|t| t.join().unwrap());
        // Once the transient adds are gone the count is whole again.
        let end = s.load();
        assert_eq!((end.pins(), end.exclusive()), (MAX_PINS, false));
        assert!(
            carried.load(Ordering::Relaxed) == 0 && asserts.load(Ordering::Relaxed) == 0,
            "concurrent fast-pin adds carried out of the pin field into X: seen {} times, \
             'unpin of unpinned buffer' asserted {} times",
            carried.load(Ordering::Relaxed),
            asserts.load(Ordering::Relaxed)
        );
    });
}

/// Pins `len` bytes at `p` in memory, or says why not (then the test cannot run here).
fn mlock(p: *const u8, len: usize) -> bool {
    // SAFETY: p..p+len lies in a live mapping; mlock only changes its vma flags.
    let r = unsafe { libc_mlock(p as *const std::ffi::c_void, len) };
    if r != 0 {
        eprintln!(
            "mlock failed ({}): skipping",
            std::io::Error::last_os_error()
        );
    }
    r == 0
}

extern "C" {
    #[link_name = "mlock"]
    fn libc_mlock(addr: *const std::ffi::c_void, len: usize) -> i32;
}

/// `madvise` walks a range vma by vma and stops at the first one it refuses (EINVAL on a
/// locked vma), after zapping those before. Eviction merges neighbours into one range, so
/// buffer 0's page was zapped, the range reported failed, and buffer 0 went back to `Cached`
/// with its version: it read as zeros to pins and optimistic readers. Now such buffers are
/// evicted (version bumped) and reloaded.
#[test]
fn failed_drop_of_a_merged_range_never_leaves_a_zapped_buffer_cached() {
    const BS: usize = 4096;
    let store = MemoryStore::new();
    store.insert("o", vec![9u8; 2 * BS]);
    let cache = Cache::new(CacheOptions::new(16 * BS as u64)).unwrap();
    let m = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
    m.ensure_cached(0, 2 * BS as u64).unwrap();
    let v0 = m.state(0).unwrap().version();
    // Buffer 1's page locked (an application's mlock, or a guard page of its own).
    if !mlock(m.as_ptr().wrapping_add(BS), BS) {
        return;
    }
    let r = m.evict(0, 2 * BS as u64);
    eprintln!("evict: {r:?}");
    let w = m.state(0).unwrap();
    if w.phase() == Phase::Cached {
        assert_eq!(w.version(), v0, "kept without a new version");
        let opt = m.read_optimistic(0, |v| v.read_u64(0)).unwrap();
        let pinned = m.pin_shared(0).unwrap()[0];
        assert_eq!(
            (pinned, opt),
            (9, u64::from_le_bytes([9; 8])),
            "buffer 0 kept Cached after its pages were zapped by the failed drop"
        );
    }
}

/// The same inside one buffer: a 64 KiB buffer whose last page is locked lost its first
/// 60 KiB to the failed `madvise` and was kept `Cached`.
#[test]
fn failed_drop_never_leaves_a_partly_zapped_buffer_cached() {
    const BS: usize = 64 << 10;
    let store = MemoryStore::new();
    store.insert("o", vec![3u8; BS]);
    let cache = Cache::new(CacheOptions::new(16 * BS as u64)).unwrap();
    let m = cache
        .map(Arc::new(store), "o", MapOptions::new().buffer_size(BS))
        .unwrap();
    m.ensure_cached(0, BS as u64).unwrap();
    if !mlock(m.as_ptr().wrapping_add(BS - 4096), 4096) {
        return;
    }
    let r = m.evict(0, BS as u64);
    eprintln!("evict: {r:?}");
    if m.state(0).unwrap().phase() == Phase::Cached {
        let g = m.pin_shared(0).unwrap();
        assert!(
            g.iter().all(|&b| b == 3),
            "buffer kept Cached after a failed drop zapped {} of its bytes",
            g.iter().filter(|&&b| b == 0).count()
        );
    }
}
