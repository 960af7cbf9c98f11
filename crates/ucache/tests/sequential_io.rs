//! A cold sequential read on every local store (`FileStore` buffered and `O_DIRECT`,
//! `UringStore`) through `Mapping::read`, `pin_each` and a plain loop of pins: the statistics
//! show that adjacent buffers went to the store as few large requests (coalesced), that more
//! than one request was outstanding at once (overlapped), and that pins read ahead by default
//! and not with `readahead(false)`. Counters only, never time; every byte is checked.

use std::sync::Arc;

use ucache::policy::prefetch::{Callback, WithPrefetch};
use ucache::policy::Clock;
use ucache::store::{FileStore, Store};
use ucache::{Cache, CacheOptions, MapOptions, Mapping, Placement, StatsSnapshot};

mod common;
use common::store::local_stores;
use common::{assert_coalesced_and_overlapped, offset_file, within};

const BS: usize = 4096;
/// 8 MiB of data under a 4 MiB budget: the scan evicts as it goes.
const BUFFERS: u64 = 2048;
const BUDGET: u64 = BUFFERS * BS as u64 / 2;

fn map(store: Arc<dyn Store>, path: &std::path::Path, o: MapOptions) -> (Cache, Mapping) {
    let cache = Cache::new(CacheOptions::new(BUDGET)).unwrap();
    let m = cache.map(store, path.to_str().unwrap(), o).unwrap();
    (cache, m)
}

/// Checks that `bytes` hold the file's words from byte `offset`.
fn check(name: &str, offset: u64, bytes: &[u8]) {
    for (k, w) in bytes.chunks_exact(8).enumerate() {
        let want = offset + 8 * k as u64;
        let got = u64::from_le_bytes(w.try_into().unwrap());
        assert_eq!(got, want, "{name}: word at byte {want}");
    }
}

/// Every buffer was read, in fewer requests than buffers, some of them outstanding together.
/// A read that runs ahead of the reader (sequential `Mapping::read` calls) may see its first
/// window evicted unread when the cache first fills, as pins' readahead may (see
/// `a_loop_of_pins_reads_ahead_by_default_on_every_local_store`): those buffers are read twice,
/// and no more than a window of them.
fn coalesced_and_overlapped(name: &str, what: &str, s: &StatsSnapshot) {
    let window = BUDGET / BS as u64 / 4;
    assert!(s.prefetch_wasted <= window, "{name} {what}: {s:#?}");
    assert_eq!(
        s.misses + s.prefetches - s.prefetch_wasted,
        BUFFERS,
        "{name} {what}: {s:#?}"
    );
    assert!(s.store_reads > 0, "{name} {what}: {s:#?}");
    assert_coalesced_and_overlapped(&format!("{name} {what}"), s, BUFFERS);
}

#[test]
fn a_cold_mapping_read_is_coalesced_and_overlapped_on_every_local_store() {
    within("cold Mapping::read on every store", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), BUFFERS * BS as u64);
        for (name, store) in local_stores(&path) {
            // Through the cache: with the default `scan_bypass`, a pass from the start of a
            // file larger than the budget reads past it from its second piece on, coalesced
            // and overlapped too (tests/scan_bypass.rs), but counted apart.
            let (_c, m) = map(store, &path, MapOptions::new().scan_bypass(false));
            // In 1 MiB pieces, as a program copying the file would, plus one unaligned piece.
            let mut piece = vec![0u8; 1 << 20];
            for off in (0..BUFFERS * BS as u64).step_by(piece.len()) {
                m.read(off, &mut piece).unwrap();
                check(name, off, &piece);
            }
            coalesced_and_overlapped(name, "read", &m.stats());
            let mut odd = vec![0u8; 3 * BS];
            m.read(5 * BS as u64 + 8, &mut odd).unwrap();
            check(name, 5 * BS as u64 + 8, &odd);
        }
    });
}

/// Sequential `Mapping::read` calls read ahead across calls, as `read(2)` does: in pieces of
/// 64 KiB, most of the file arrives as prefetches loaded on the IO threads while earlier pieces
/// were read, and they are used, not evicted unread. `readahead(false)` reads every piece
/// itself, and reads that continue no earlier read never read ahead.
#[test]
fn sequential_mapping_reads_read_ahead_across_calls_on_every_local_store() {
    within("Mapping::read streams on every store", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), BUFFERS * BS as u64);
        let mut piece = vec![0u8; 64 << 10];
        let pieces = BUFFERS * BS as u64 / piece.len() as u64;
        for (name, store) in local_stores(&path) {
            let (_c, m) = map(store.clone(), &path, MapOptions::new());
            for k in 0..pieces {
                let off = k * piece.len() as u64;
                m.read(off, &mut piece).unwrap();
                check(name, off, &piece);
            }
            let s = m.stats();
            assert!(s.prefetches * 4 > 3 * BUFFERS, "{name}: {s:#?}");
            assert!(s.prefetch_used * 4 > 3 * BUFFERS, "{name}: {s:#?}");
            assert!(s.misses * 4 < BUFFERS, "{name}: {s:#?}");

            let (_c, m) = map(store.clone(), &path, MapOptions::new().readahead(false));
            for k in 0..pieces {
                let off = k * piece.len() as u64;
                m.read(off, &mut piece).unwrap();
                check(name, off, &piece);
            }
            let s = m.stats();
            assert_eq!((s.prefetches, s.misses), (0, BUFFERS), "{name}: {s:#?}");

            // Pieces 0, 7, 14, ... (mod the piece count): no read starts where one of the
            // last few ended.
            let (_c, m) = map(store, &path, MapOptions::new());
            for k in 0..pieces {
                let off = (7 * k % pieces) * piece.len() as u64;
                m.read(off, &mut piece).unwrap();
                check(name, off, &piece);
            }
            assert_eq!(m.stats().prefetches, 0, "{name}: {:#?}", m.stats());
        }
    });
}

#[test]
fn a_cold_pin_each_is_coalesced_and_overlapped_on_every_local_store() {
    within("cold pin_each on every store", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), BUFFERS * BS as u64);
        for (name, store) in local_stores(&path) {
            let (_c, m) = map(store, &path, MapOptions::new());
            let mut seen = vec![false; BUFFERS as usize];
            m.pin_each(0..BUFFERS, 64, |i, bytes| {
                check(name, i * BS as u64, bytes);
                assert!(
                    !std::mem::replace(&mut seen[i as usize], true),
                    "{name}: {i} twice"
                );
            })
            .unwrap();
            assert!(seen.iter().all(|&v| v), "{name}: a buffer was not visited");
            coalesced_and_overlapped(name, "pin_each", &m.stats());
        }
    });
}

#[test]
fn ensure_cached_batches_are_coalesced_and_overlapped_on_every_local_store() {
    within("cold ensure_cached on every store", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), BUFFERS * BS as u64);
        for (name, store) in local_stores(&path) {
            let (_c, m) = map(store, &path, MapOptions::new());
            let chunk = 256u64;
            for first in (0..BUFFERS).step_by(chunk as usize) {
                m.ensure_cached(first * BS as u64, chunk * BS as u64)
                    .unwrap();
                for i in first..first + chunk {
                    check(name, i * BS as u64, &m.pin_shared(i).unwrap());
                }
            }
            coalesced_and_overlapped(name, "ensure_cached", &m.stats());
        }
    });
}

/// A plain loop of pins over a cold file, twice (the budget holds half of it): the mapping
/// reads ahead in the background, so most buffers arrive as prefetches, in runs, and are
/// used; in every placement. The windows stay within the budget: what readahead loads and
/// evicts unread is at most one window (the cache's first fill), however long the scan.
#[test]
fn a_loop_of_pins_reads_ahead_by_default_on_every_local_store() {
    within("pin loop with readahead", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), BUFFERS * BS as u64);
        let window = BUDGET / BS as u64 / 4;
        for placement in [Placement::InPlace, Placement::Pool] {
            for (name, store) in local_stores(&path) {
                let (_c, m) = map(store, &path, MapOptions::new().placement(placement));
                for _pass in 0..2 {
                    for i in 0..BUFFERS {
                        check(name, i * BS as u64, &m.pin_shared(i).unwrap());
                    }
                }
                let s = m.stats();
                let what = format!("{name} {placement:?}");
                assert!(
                    s.misses * 8 < 2 * BUFFERS,
                    "{what}: {} of {} pins missed: no readahead: {s:#?}",
                    s.misses,
                    2 * BUFFERS
                );
                assert!(s.prefetch_used * 8 > 7 * 2 * BUFFERS, "{what}: {s:#?}");
                assert!(
                    s.prefetch_wasted < window,
                    "{what}: readahead evicted more than a window unread: {s:#?}"
                );
                if placement == Placement::InPlace {
                    assert!(
                        s.store_reads * 4 <= 2 * BUFFERS,
                        "{what}: readahead not coalesced: {s:#?}"
                    );
                }
            }
        }
    });
}

/// `readahead_inline(true)`: the windows a miss proposes are read by the missing thread before
/// its miss returns, as one stream, and none by the IO threads; without it, the IO threads
/// read them. Pins in both placements, and a transparent mapping's faults (served on the
/// faulting thread), each over a cold file twice the budget, every byte checked.
#[test]
fn inline_readahead_reads_every_window_on_the_missing_thread() {
    within("inline readahead", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), BUFFERS * BS as u64);
        let all = BUFFERS * BS as u64;
        for inline in [true, false] {
            for (what, faults, o) in [
                ("pins in place", false, MapOptions::new()),
                (
                    "pins in a pool",
                    false,
                    MapOptions::new().placement(Placement::Pool),
                ),
                ("faults", true, MapOptions::new().transparent(true)),
            ] {
                let what = format!("{what}, inline {inline}");
                let (store, counts) = common::store::tally(Arc::new(FileStore::new()), false);
                let (_c, m) = map(store, &path, o.readahead_inline(inline));
                if faults {
                    let words = m.as_slice::<u64>().unwrap();
                    for (k, &w) in words.iter().enumerate().step_by(BS / 8) {
                        assert_eq!(w, 8 * k as u64, "{what}: word {k}");
                    }
                } else {
                    for i in 0..BUFFERS {
                        check(&what, i * BS as u64, &m.pin_shared(i).unwrap());
                    }
                }
                let s = m.stats();
                let (io, caller) = counts.get();
                assert!(s.prefetches * 4 > 3 * BUFFERS, "{what}: {s:#?}");
                if inline {
                    assert_eq!((io, caller), (0, s.bytes_read), "{what}: {s:#?}");
                    assert!(caller >= all, "{what}: {s:#?}");
                    // One read per run, not per buffer.
                    assert!(s.store_reads * 8 <= BUFFERS, "{what}: {s:#?}");
                } else {
                    assert!(
                        io * 2 > all,
                        "{what}: {io} of {all} bytes on the IO threads"
                    );
                }
            }
        }
    });
}

#[test]
fn readahead_false_keeps_a_loop_of_pins_from_prefetching() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    for (name, store) in local_stores(&path) {
        let (_c, m) = map(store, &path, MapOptions::new().readahead(false));
        for i in 0..BUFFERS {
            check(name, i * BS as u64, &m.pin_shared(i).unwrap());
        }
        let s = m.stats();
        assert_eq!(s.prefetches, 0, "{name}: {s:#?}");
        assert_eq!(s.misses, BUFFERS, "{name}: {s:#?}");
    }
}

/// A policy that prefetches itself replaces the default readahead: only its own proposals
/// are fetched (here none, then exactly the next buffer), never a second window on top.
#[test]
fn a_prefetching_policy_replaces_the_default_readahead() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = offset_file(dir.path(), BUFFERS * BS as u64);
    let store: Arc<dyn Store> = Arc::new(FileStore::new());
    let silent = WithPrefetch::new(Clock::new(), Callback::new("silent", |_, _| {}));
    let (_c, m) = map(
        store.clone(),
        &path,
        MapOptions::new().policy(Box::new(silent)),
    );
    for i in 0..64 {
        check("silent", i * BS as u64, &m.pin_shared(i).unwrap());
    }
    let s = m.stats();
    assert_eq!((s.misses, s.prefetches), (64, 0), "{s:#?}");
    assert_eq!(m.policy_name(), "clock+silent");

    // Proposes buffer i + 1 on a miss at an even i: half the pins miss, half were prefetched.
    let next = Callback::new("next", |i, out| {
        if i % 2 == 0 {
            out.push(i + 1)
        }
    });
    let (_c, m) = map(
        store,
        &path,
        MapOptions::new().policy(Box::new(WithPrefetch::new(Clock::new(), next))),
    );
    for i in 0..64 {
        check("next", i * BS as u64, &m.pin_shared(i).unwrap());
    }
    common::until(
        "the prefetches to land",
        || m.stats().prefetches == 32,
        || m.stats(),
    );
    let s = m.stats();
    assert_eq!(s.misses + s.waits + s.hits, 64, "{s:#?}");
    assert_eq!(
        s.misses, 32,
        "only the policy's proposals were fetched: {s:#?}"
    );
}
