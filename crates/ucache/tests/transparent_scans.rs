//! Sequential scans of transparent mappings: readahead windows are read and installed as whole
//! runs (one `UFFDIO_COPY` for many buffers), then published, set dirty and evicted buffer by
//! buffer. Every byte is checked while several scanners fault at once and evictions (the
//! budget's, the background evictor's, explicit ones) race the runs being installed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions, Mapping};

mod common;
use common::{under_tsan, until, within};

const BS: usize = 4096;

/// Word `k` of the object in `round` (0: as stored at first).
fn word(k: usize, round: u64) -> u64 {
    (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ round.wrapping_mul(0xD1B5_4A32_D192_ED03)
}

fn store_of(buffers: usize) -> Arc<MemoryStore> {
    let s = MemoryStore::new();
    let mut v = vec![0u8; buffers * BS];
    for (k, w) in v.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word(k, 0).to_le_bytes());
    }
    s.insert("t", v);
    Arc::new(s)
}

fn words(m: &Mapping) -> &[AtomicU64] {
    // SAFETY: the mapping is valid for its length while `m` lives; atomics make plain loads
    // and stores from several threads sound in Rust's model (they compile to plain movs).
    unsafe { std::slice::from_raw_parts(m.as_ptr() as *const AtomicU64, m.len() as usize / 8) }
}

/// Reads every word of buffers `from..from+n` (wrapping) in order, checking each against
/// `round`.
fn scan(w: &[AtomicU64], buffers: usize, from: usize, n: usize, round: u64) {
    let per = BS / 8;
    for b in (from..from + n).map(|b| b % buffers) {
        for (k, x) in w.iter().enumerate().skip(b * per).take(per) {
            let x = x.load(Relaxed);
            assert_eq!(x, word(k, round), "buffer {b}, word {k}, round {round}");
        }
    }
}

/// One thread scans the mapping: readahead windows grow to their maximum and each goes in
/// with one install call, so installs are far fewer than buffers.
#[test]
fn a_sequential_scan_installs_whole_windows_with_one_call_each() {
    if under_tsan() {
        return;
    }
    let buffers = 4096; // 16 MiB
    let cache = Cache::new(CacheOptions::new(4 << 20)).unwrap();
    let m = cache
        .map(store_of(buffers), "t", MapOptions::new().transparent(true))
        .unwrap();
    let w = words(&m);
    scan(w, buffers, 0, buffers, 0);
    let st = cache.stats();
    let pages = st.installed_bytes / BS as u64;
    assert!(pages >= buffers as u64, "every buffer installed: {st:?}");
    // Windows are 1 MiB (256 buffers) from the first, installed in two calls either side of
    // their marker, which goes in alone. 16 per call on average is far from both ends.
    assert!(
        st.installs * 16 <= pages,
        "{} installs for {pages} pages: runs were not installed whole ({st:?})",
        st.installs
    );
    assert!(st.prefetches > st.misses * 16, "{st:?}");
    // Each window's marker is read with the window and installed on its fault without IO:
    // the demand misses that read are the scan's cold start and little else, where each
    // window's marker used to be one (about 20 here, as many as the windows).
    assert!(st.marker_hits >= 10, "markers read on their faults: {st:?}");
    assert!(
        (st.misses - st.marker_hits) * 4 <= st.marker_hits,
        "{} demand reads for {} markers kept ({st:?})",
        st.misses - st.marker_hits,
        st.marker_hits
    );
    eprintln!("{} pages in {} installs: {st:?}", pages, st.installs);
}

/// A marker's kept bytes are used only if the buffer was not loaded since they were read:
/// here it is loaded another way, changed, written back and evicted, and its next fault must
/// read the new bytes from the store, not install the old ones.
#[test]
fn a_kept_marker_is_not_installed_after_its_buffer_changed() {
    if under_tsan() {
        return;
    }
    within("a stale kept marker", || {
        let buffers = 1024;
        let store = store_of(buffers);
        let cache = Cache::new(CacheOptions::new(16 << 20)).unwrap();
        let m = cache
            .map(
                store.clone(),
                "t",
                MapOptions::new().transparent(true).writable(true),
            )
            .unwrap();
        let w = words(&m);
        let per = BS / 8;
        // The miss at buffer 0 reads the window 1..=256 (1 MiB, a file's first window), whose
        // marker, its middle buffer 129, is kept aside.
        let marker = 129;
        assert_eq!(w[0].load(Relaxed), word(0, 0));
        until(
            "the first window is read",
            || (1..=256).filter(|&i| m.is_resident(i).unwrap()).count() == 255,
            || m.stats(),
        );
        assert!(!m.is_resident(marker).unwrap(), "the marker stays out");
        // Loaded by a batch (which does not use kept bytes), changed, and evicted.
        let at = marker as usize * BS;
        m.ensure_cached(at as u64, BS as u64).unwrap();
        for (k, x) in w.iter().enumerate().skip(at / 8).take(per) {
            x.store(word(k, 1), Relaxed);
        }
        m.evict(at as u64, BS as u64).unwrap();
        assert!(!m.is_resident(marker).unwrap());
        for (k, x) in w.iter().enumerate().skip(at / 8).take(per) {
            assert_eq!(x.load(Relaxed), word(k, 1), "word {k}: old bytes installed");
        }
        assert_eq!(m.stats().marker_hits, 0, "{:?}", m.stats());
        // That miss at the marker read the next window, 257..=512; its marker (385), touched
        // in order, is kept and used.
        for b in 130..400 {
            for (k, x) in w.iter().enumerate().skip(b * per).take(per) {
                assert_eq!(x.load(Relaxed), word(k, 0), "buffer {b}, word {k}");
            }
        }
        assert!(m.stats().marker_hits >= 1, "{:?}", m.stats());
    });
}

/// Scanners at different places fault at once, each into runs another may be installing;
/// the budget (a quarter of the data) evicts behind them, the background evictor ahead of
/// them, and a thread evicts random ranges explicitly, including buffers of runs just
/// installed. Then a writer stores a new round into every word (a write-protect fault on
/// each buffer, installed protected by its run), and the scanners check that round while
/// evictions write the dirty buffers back; at the end the store holds it.
#[test]
fn concurrent_scans_and_evictions_race_multi_page_installs() {
    if under_tsan() {
        return;
    }
    within("scans racing evictions", || {
        let buffers = 2048; // 8 MiB
        let store = store_of(buffers);
        // 2 MiB: 8 batches of 256 KiB, and readahead windows up to capacity / 4 = 128 buffers.
        let cache = Cache::new(CacheOptions::new(2 << 20)).unwrap();
        let m = cache
            .map(
                store.clone(),
                "t",
                MapOptions::new().transparent(true).writable(true),
            )
            .unwrap();
        let w = words(&m);
        let stop = AtomicBool::new(false);
        let evicted = AtomicU64::new(0);
        let scans = if cfg!(debug_assertions) { 2 } else { 6 };
        for round in 0..2u64 {
            if round == 1 {
                // Every buffer gets the new round through plain stores.
                for (k, x) in w.iter().enumerate() {
                    x.store(word(k, 1), Relaxed);
                }
            }
            std::thread::scope(|s| {
                let scanners: Vec<_> = (0..4usize)
                    .map(|t| {
                        s.spawn(move || {
                            for r in 0..scans {
                                scan(w, buffers, (t * 613 + r * 97) % buffers, buffers, round);
                            }
                        })
                    })
                    .collect();
                let (m, stop, evicted) = (&m, &stop, &evicted);
                let evictor = s.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(round);
                    while !stop.load(Relaxed) {
                        let first = rng.gen_range(0..buffers as u64);
                        let n = rng.gen_range(1..=64).min(buffers as u64 - first);
                        m.evict(first * BS as u64, n * BS as u64).unwrap();
                        evicted.fetch_add(1, Relaxed);
                        std::thread::yield_now();
                    }
                });
                for h in scanners {
                    h.join().unwrap();
                }
                stop.store(true, Relaxed);
                evictor.join().unwrap();
                stop.store(false, Relaxed);
            });
        }
        m.msync(0, m.len()).unwrap();
        let stored = store.get("t").unwrap();
        for (k, c) in stored.chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes(c.try_into().unwrap());
            assert_eq!(x, word(k, 1), "the store's word {k}");
        }
        let st = cache.stats();
        let pages = st.installed_bytes / BS as u64;
        assert!(evicted.load(Relaxed) > 0 && st.evictions > 0, "{st:?}");
        assert!(st.writebacks > 0 && st.write_faults > 0, "{st:?}");
        // How many loads are demand misses of one buffer (after the explicit evictions' holes)
        // depends on timing; that runs went in whole is checked without such races above.
        assert!(
            st.installs < pages,
            "{} installs for {pages} pages: no run went in whole ({st:?})",
            st.installs
        );
        assert!(cache.used() <= 2 << 20);
        // Markers were read with their windows and installed from their kept bytes, checked
        // above against the round they were read in.
        assert!(st.marker_hits > 0, "{st:?}");
        eprintln!("{st:?}");
    });
}

/// A program that writes the object around the mapping (the LD_PRELOAD shim after a
/// `pwrite`, here a second mapping) evicts the range to drop the mapping's copies; a kept
/// marker is such a copy, and its next fault must read the new bytes.
#[test]
fn an_explicit_eviction_drops_a_kept_marker() {
    if under_tsan() {
        return;
    }
    within("a kept marker written around", || {
        let buffers = 1024;
        let store = store_of(buffers);
        let cache = Cache::new(CacheOptions::new(16 << 20)).unwrap();
        let m = cache
            .map(store.clone(), "t", MapOptions::new().transparent(true))
            .unwrap();
        let other = cache
            .map(store.clone(), "t", MapOptions::new().writable(true))
            .unwrap();
        let w = words(&m);
        let per = BS / 8;
        // As above: the first window is 1..=256 and its marker, 129, is kept.
        let marker = 129u64;
        assert_eq!(w[0].load(Relaxed), word(0, 0));
        until(
            "the first window is read",
            || (1..=256).filter(|&i| m.is_resident(i).unwrap()).count() == 255,
            || m.stats(),
        );
        let at = marker as usize * BS;
        let new: Vec<u8> = (0..per)
            .flat_map(|k| word(at / 8 + k, 1).to_le_bytes())
            .collect();
        other.write(at as u64, &new).unwrap();
        other.msync(0, other.len()).unwrap();
        m.evict(at as u64, BS as u64).unwrap();
        for (k, x) in w.iter().enumerate().skip(at / 8).take(per) {
            assert_eq!(x.load(Relaxed), word(k, 1), "word {k}: old bytes installed");
        }
        assert_eq!(m.stats().marker_hits, 0, "{:?}", m.stats());
    });
}
