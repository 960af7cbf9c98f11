//! Scans read past the cache (`MapOptions::scan_bypass`): a sequential `Mapping::read` stream
//! that has read a quarter of the budget reads what is not resident from the store straight
//! into the caller's memory. Counters only, never time; every byte is checked against the
//! file, on every local store, and whatever is resident or dirty is still read through the
//! cache.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ucache::store::FaultStore;
use ucache::store::{FileStore, Object, Store};
use ucache::{Cache, CacheOptions, Error, MapOptions, Mapping};

mod common;
use common::store::{forward_object, local_stores, tally, WrapStore};
use common::{assert_coalesced_and_overlapped, offset_file, within};

const BS: usize = 4096;
/// 8 MiB of data under a 4 MiB budget: a stream is a scan after 1 MiB.
const BUFFERS: u64 = 2048;
const LEN: u64 = BUFFERS * BS as u64;
const BUDGET: u64 = LEN / 2;
const PIECE: usize = 256 << 10;

/// The word at byte `o` (8-aligned) of the file: its own offset.
fn word(o: u64) -> u64 {
    o
}

fn map(store: Arc<dyn Store>, path: &std::path::Path, o: MapOptions) -> (Cache, Mapping) {
    let cache = Cache::new(CacheOptions::new(BUDGET)).unwrap();
    let m = cache.map(store, path.to_str().unwrap(), o).unwrap();
    (cache, m)
}

/// Checks that `bytes` hold the file from byte `offset`, byte by byte.
fn check(name: &str, offset: u64, bytes: &[u8]) {
    for (k, &b) in bytes.iter().enumerate() {
        let at = offset + k as u64;
        let want = word(at & !7).to_le_bytes()[(at & 7) as usize];
        assert_eq!(b, want, "{name}: byte {at}");
    }
}

/// Reads `[from, to)` in pieces of `piece` bytes into `buf` (at least `piece` long, at any
/// alignment), checking each.
fn scan(name: &str, m: &Mapping, from: u64, to: u64, piece: usize, buf: &mut [u8]) {
    let mut off = from;
    while off < to {
        let n = piece.min((to - off) as usize);
        m.read(off, &mut buf[..n]).unwrap();
        check(name, off, &buf[..n]);
        off += n as u64;
    }
}

/// Memory of `len` bytes starting `skew` bytes past a 4 KiB boundary.
fn skewed(len: usize, skew: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + 8192];
    let at = v.as_ptr().align_offset(4096) + skew;
    (v, at)
}

#[test]
fn a_long_stream_reads_past_the_cache_on_every_local_store() {
    within("scans on every store", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        for (name, store) in local_stores(&path) {
            // Aligned memory (read in place on every store) and memory 8 bytes off (read
            // through staging on `O_DIRECT` stores, in place on the buffered one).
            for skew in [0, 8] {
                let what = format!("{name}, memory {skew} bytes past 4 KiB");
                let (_c, m) = map(store.clone(), &path, MapOptions::new());
                let (mut mem, at) = skewed(PIECE, skew);
                scan(&what, &m, 0, LEN, PIECE, &mut mem[at..]);
                let s = m.stats();
                // The first quarter of the budget and the windows read ahead of it came
                // through the cache; the rest did not, and the cache did not fill.
                assert!(
                    s.bytes_read_past_cache >= LEN - BUDGET / 4 - 2 * (BUDGET / 4),
                    "{what}: {s:#?}"
                );
                assert_eq!(
                    s.bytes_read,
                    (s.misses + s.prefetches) * BS as u64 + s.bytes_read_past_cache,
                    "{what}: {s:#?}"
                );
                assert!(m.resident() * BS as u64 <= BUDGET / 2, "{what}: {s:#?}");
                assert_coalesced_and_overlapped(&what, &s, BUFFERS);

                // Without `scan_bypass` the same stream fills the cache, as before.
                let (_c, m) = map(store.clone(), &path, MapOptions::new().scan_bypass(false));
                scan(&what, &m, 0, LEN, PIECE, &mut mem[at..]);
                assert_eq!(m.stats().bytes_read_past_cache, 0, "{what}");
                assert!(
                    m.resident() * BS as u64 > 3 * BUDGET / 4,
                    "{what}: {:#?}",
                    m.stats()
                );
            }
        }
    });
}

#[test]
fn short_streams_random_reads_small_pieces_and_no_readahead_never_read_past_the_cache() {
    within("no scans", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        for (name, store) in local_stores(&path) {
            let mut buf = vec![0u8; PIECE];
            // A stream shorter than a quarter of the budget, twice (the second from the cache).
            let (_c, m) = map(store.clone(), &path, MapOptions::new());
            for _ in 0..2 {
                scan(name, &m, LEN / 2, LEN / 2 + BUDGET / 4, PIECE, &mut buf);
            }
            assert_eq!(
                m.stats().bytes_read_past_cache,
                0,
                "{name}: {:#?}",
                m.stats()
            );
            // Random pieces: 0, 7, 14, ... (mod the piece count), none continuing another.
            let pieces = LEN / PIECE as u64;
            for k in 0..pieces {
                let off = (7 * k % pieces) * PIECE as u64;
                scan(name, &m, off, off + PIECE as u64, PIECE, &mut buf);
            }
            assert_eq!(
                m.stats().bytes_read_past_cache,
                0,
                "{name}: {:#?}",
                m.stats()
            );
            // Pieces under 128 KiB keep the cache and its readahead however long the stream.
            let (_c, m) = map(store.clone(), &path, MapOptions::new());
            scan(name, &m, 0, LEN, 64 << 10, &mut buf);
            let s = m.stats();
            assert_eq!(s.bytes_read_past_cache, 0, "{name}: {s:#?}");
            assert!(s.prefetches * 4 > 3 * BUFFERS, "{name}: {s:#?}");
            // `readahead(false)`: no streams, so no scans.
            let (_c, m) = map(store.clone(), &path, MapOptions::new().readahead(false));
            scan(name, &m, 0, LEN, PIECE, &mut buf);
            let s = m.stats();
            assert_eq!(s.bytes_read_past_cache, 0, "{name}: {s:#?}");
            assert_eq!((s.prefetches, s.misses), (0, BUFFERS), "{name}: {s:#?}");
        }
    });
}

/// A file whose length is not a whole number of buffers, read in pieces that start 8 bytes
/// into a buffer: every piece cuts a buffer at each end (read through staging), and the last
/// piece is short and ends inside the last, partial buffer.
#[test]
fn unaligned_pieces_and_a_partial_last_buffer_read_right() {
    within("unaligned scans", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let len = LEN + 100;
        let path = offset_file(dir.path(), len);
        for (name, store) in local_stores(&path) {
            for piece in [PIECE + 8, PIECE - 4096 + 1] {
                let (_c, m) = map(store.clone(), &path, MapOptions::new());
                let (mut mem, at) = skewed(piece, 3);
                scan(name, &m, 8, len, piece, &mut mem[at..]);
                let s = m.stats();
                assert!(s.bytes_read_past_cache > LEN / 2, "{name} {piece}: {s:#?}");
                // The last buffer (100 bytes of it) was read past the cache, whole.
                assert!(!m.is_resident(BUFFERS).unwrap(), "{name} {piece}: {s:#?}");
            }
        }
    });
}

/// Bytes written through the mapping and not yet written back are read from the cache, and
/// bytes written back and evicted from the store: a long sequential read sees every write
/// that completed before it, through `Mapping::write` and through a pin alike.
#[test]
fn a_scan_reads_dirty_buffers_from_the_cache() {
    within("dirty buffers in a scan", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        for (name, store) in local_stores(&path) {
            offset_file(dir.path(), LEN);
            let cache = Cache::new(CacheOptions::new(BUDGET)).unwrap();
            let m = cache
                .map(
                    store.clone(),
                    path.to_str().unwrap(),
                    MapOptions::new().writable(true),
                )
                .unwrap();
            let mut want = vec![0u8; LEN as usize];
            for (k, w) in want.chunks_exact_mut(8).enumerate() {
                w.copy_from_slice(&word(8 * k as u64).to_le_bytes());
            }
            // Dirty through `write`, part of a buffer, deep in the range a scan reads past.
            let at = 6 * (1 << 20) + 100;
            m.write(at, &[0xAB; 5000]).unwrap();
            want[at as usize..at as usize + 5000].fill(0xAB);
            // Dirty through a pin.
            let i = 1800;
            {
                let mut g = m.pin_exclusive(i).unwrap();
                g[..16].copy_from_slice(&[0xCD; 16]);
            }
            want[i as usize * BS..i as usize * BS + 16].fill(0xCD);
            // Written back and evicted: now in the store only.
            let j = 1500;
            {
                let mut g = m.pin_exclusive(j).unwrap();
                g[4000..4096].copy_from_slice(&[0xEF; 96]);
            }
            want[j as usize * BS + 4000..(j as usize + 1) * BS].fill(0xEF);
            m.evict(j * BS as u64, BS as u64).unwrap();
            assert!(!m.is_resident(j).unwrap());

            let (mut mem, skew) = skewed(PIECE, 0);
            let buf = &mut mem[skew..skew + PIECE];
            let mut off = 0;
            while off < LEN {
                m.read(off, buf).unwrap();
                let w = &want[off as usize..off as usize + PIECE];
                assert!(
                    buf == w,
                    "{name}: piece at {off} differs from what was written"
                );
                off += PIECE as u64;
            }
            let s = m.stats();
            assert!(s.bytes_read_past_cache > LEN / 2, "{name}: {s:#?}");
        }
    });
}

#[test]
fn failed_and_short_reads_past_the_cache_are_the_typed_errors_of_a_miss() {
    within("errors in a scan", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        let faults = Arc::new(FaultStore::new(Arc::new(FileStore::new())));
        let (_c, m) = map(faults.clone(), &path, MapOptions::new());
        let mut buf = vec![0u8; PIECE];
        scan("faults", &m, 0, LEN / 2, PIECE, &mut buf);
        let before = m.stats().bytes_read_past_cache;
        assert!(before > 0, "{:#?}", m.stats());

        let cfg = faults.config();
        cfg.fail_reads.store(true, Ordering::Relaxed);
        let e = m.read(LEN / 2, &mut buf).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        cfg.fail_reads.store(false, Ordering::Relaxed);
        cfg.short_reads.store(true, Ordering::Relaxed);
        // The stream goes on where the failed call ended.
        let e = m.read(LEN / 2 + PIECE as u64, &mut buf).unwrap_err();
        assert!(matches!(e, Error::ShortIo { .. }), "{e:?}");
        cfg.short_reads.store(false, Ordering::Relaxed);
        scan(
            "faults",
            &m,
            LEN / 2 + 2 * PIECE as u64,
            LEN,
            PIECE,
            &mut buf,
        );
        // Nothing that failed was counted (of the short reads, the buffers that came whole
        // were), and nothing that failed was cached.
        let s = m.stats();
        let rest = before + LEN / 2 - 2 * PIECE as u64;
        assert!(
            (rest..rest + PIECE as u64).contains(&s.bytes_read_past_cache),
            "{s:#?}"
        );
        assert!(!m.is_resident(BUFFERS / 2).unwrap());
    });
}

/// Writers rewrite whole buffers with rising generations while readers scan the file from end
/// to end, under a budget that keeps evicting (and so writing back) dirty buffers: every word a
/// reader sees holds its own offset and a generation no older than the last write of its
/// buffer that completed before the read began, and no newer than the last one begun.
#[test]
fn concurrent_writers_and_scans_stress_every_word_verified() {
    within("writers and scans", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        const GEN_SHIFT: u32 = 40;
        for (name, store) in local_stores(&path) {
            // Each store starts from the file as made: the last one's writes were written back.
            offset_file(dir.path(), LEN);
            let cache = Cache::new(CacheOptions::new(BUDGET)).unwrap();
            let m = Arc::new(
                cache
                    .map(
                        store,
                        path.to_str().unwrap(),
                        MapOptions::new().writable(true),
                    )
                    .unwrap(),
            );
            let begun: Arc<Vec<AtomicU64>> =
                Arc::new((0..BUFFERS).map(|_| AtomicU64::new(0)).collect());
            let done: Arc<Vec<AtomicU64>> =
                Arc::new((0..BUFFERS).map(|_| AtomicU64::new(0)).collect());
            let stop = Arc::new(AtomicBool::new(false));
            const WRITERS: u64 = 2;
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let (m, begun, done, stop) =
                        (m.clone(), begun.clone(), done.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ w;
                        let mut data = vec![0u8; BS];
                        let mut writes = 0;
                        while !stop.load(Ordering::Relaxed) || writes < 64 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            // Each writer owns the buffers i with i % WRITERS == w.
                            let i = (x % (BUFFERS / WRITERS)) * WRITERS + w;
                            let g = begun[i as usize].load(Ordering::Relaxed) + 1;
                            begun[i as usize].store(g, Ordering::SeqCst);
                            for (k, wd) in data.chunks_exact_mut(8).enumerate() {
                                let o = i * BS as u64 + 8 * k as u64;
                                wd.copy_from_slice(&(o | g << GEN_SHIFT).to_le_bytes());
                            }
                            m.write(i * BS as u64, &data).unwrap();
                            done[i as usize].store(g, Ordering::SeqCst);
                            writes += 1;
                        }
                    })
                })
                .collect();
            let readers: Vec<_> = (0..2)
                .map(|r| {
                    let (m, begun, done) = (m.clone(), begun.clone(), done.clone());
                    std::thread::spawn(move || {
                        let mut buf = vec![0u8; PIECE];
                        // Three passes, and on until the writers' misses have evicted a dirty
                        // buffer: a fast build's readers finished three passes before the
                        // writers filled the budget, and nothing was written back under them.
                        let mut pass = 0;
                        while pass < 3 || m.stats().writebacks == 0 {
                            pass += 1;
                            let mut off = 0;
                            while off < LEN {
                                let first = off / BS as u64;
                                let n = (PIECE / BS) as u64;
                                let floor: Vec<u64> = (first..first + n)
                                    .map(|i| done[i as usize].load(Ordering::SeqCst))
                                    .collect();
                                m.read(off, &mut buf).unwrap();
                                for (k, wd) in buf.chunks_exact(8).enumerate() {
                                    let o = off + 8 * k as u64;
                                    let i = o / BS as u64;
                                    let v = u64::from_le_bytes(wd.try_into().unwrap());
                                    let g = v >> GEN_SHIFT;
                                    let lo = floor[(i - first) as usize];
                                    let hi = begun[i as usize].load(Ordering::SeqCst);
                                    assert_eq!(v & ((1 << GEN_SHIFT) - 1), o, "reader {r}: word at {o}");
                                    assert!(
                                        (lo..=hi).contains(&g),
                                        "reader {r}: word at {o} of generation {g}, not in {lo}..={hi}"
                                    );
                                }
                                off += PIECE as u64;
                            }
                        }
                    })
                })
                .collect();
            for r in readers {
                r.join().unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            for w in writers {
                w.join().unwrap();
            }
            let s = m.stats();
            assert!(s.bytes_read_past_cache > 0, "{name}: {s:#?}");
            assert!(
                s.writebacks > 0,
                "{name}: no dirty buffer was evicted: {s:#?}"
            );
            // Everything written is seen by a read that begins after the writes.
            let mut buf = vec![0u8; PIECE];
            let mut off = 0;
            while off < LEN {
                m.read(off, &mut buf).unwrap();
                for (k, wd) in buf.chunks_exact(8).enumerate() {
                    let o = off + 8 * k as u64;
                    let g = done[(o / BS as u64) as usize].load(Ordering::SeqCst);
                    let v = u64::from_le_bytes(wd.try_into().unwrap());
                    assert_eq!(
                        v,
                        o | g << GEN_SHIFT,
                        "{name}: word at {o} after the writers"
                    );
                }
                off += PIECE as u64;
            }
        }
    });
}

/// On a store that does not read ahead itself, a scan reads its next windows on the IO
/// threads (its ring) while the caller copies the last ones; on one that does, every call
/// reads its own bytes on the caller's thread.
#[test]
fn a_scan_reads_ahead_into_its_ring_unless_the_store_reads_ahead_itself() {
    within("scan rings", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        for (name, inner) in local_stores(&path) {
            let (store, counts) = tally(inner.clone(), false);
            let (_c, m) = map(store, &path, MapOptions::new());
            let mut buf = vec![0u8; PIECE];
            scan(name, &m, 0, LEN, PIECE, &mut buf);
            let s = m.stats();
            let (io, caller) = counts.get();
            // Before the scan, the cache read ahead on the IO threads and the first pieces
            // missed on the caller's; once it is a scan, only its first call reads for itself.
            assert!(
                io >= LEN - BUDGET / 4 - PIECE as u64,
                "{name}: {io} {caller} {s:#?}"
            );
            assert!(
                caller <= BUDGET / 4 + PIECE as u64,
                "{name}: {io} {caller} {s:#?}"
            );
            assert!(s.bytes_read_past_cache > LEN / 2, "{name}: {s:#?}");

            let (store, counts) = tally(inner, true);
            let (_c, m) = map(store, &path, MapOptions::new());
            scan(name, &m, 0, LEN, PIECE, &mut buf);
            let s = m.stats();
            let (io, caller) = counts.get();
            assert!(io <= BUDGET / 2, "{name}: {io} {caller} {s:#?}");
            assert!(caller >= LEN - BUDGET / 2, "{name}: {io} {caller} {s:#?}");
            assert!(s.bytes_read_past_cache > LEN / 2, "{name}: {s:#?}");
        }
    });
}

/// A buffer read into the ring ahead of the reader, then written through the mapping and
/// written back and evicted before the reader gets there, is read again: the ring's bytes are
/// stale, and the word's version says so.
#[test]
fn a_write_after_a_window_was_read_ahead_is_seen() {
    within("stale ring bytes", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        for (name, inner) in local_stores(&path) {
            offset_file(dir.path(), LEN);
            let (store, counts) = tally(inner, false);
            let cache = Cache::new(CacheOptions::new(BUDGET)).unwrap();
            let m = cache
                .map(
                    store,
                    path.to_str().unwrap(),
                    MapOptions::new().writable(true),
                )
                .unwrap();
            let mut buf = vec![0u8; PIECE];
            // A scan from its second MiB on: the ring now holds the two windows of 512 KiB
            // after the reader's 2 MiB (budget / 8 each), and the second holds buffer i.
            let at = 2 << 20;
            scan(name, &m, 0, at, PIECE, &mut buf);
            let i = (at + PIECE as u64) / BS as u64 + 3;
            common::until(
                "the ring's window to land",
                || counts.io_end.load(Ordering::SeqCst) > i * BS as u64,
                || counts.get(),
            );
            // Rewrite the buffer, write it back and evict it.
            m.write(i * BS as u64 + 8, &[0x5A; 16]).unwrap();
            m.evict(i * BS as u64, BS as u64).unwrap();
            assert!(!m.is_resident(i).unwrap());
            let mut off = at;
            while off < LEN {
                m.read(off, &mut buf).unwrap();
                for (k, &b) in buf.iter().enumerate() {
                    let o = off + k as u64;
                    let want = if (i * BS as u64 + 8..i * BS as u64 + 24).contains(&o) {
                        0x5A
                    } else {
                        word(o & !7).to_le_bytes()[(o & 7) as usize]
                    };
                    assert_eq!(b, want, "{name}: byte {o}");
                }
                off += PIECE as u64;
            }
        }
    });
}

/// A file that the budget could hold is a scan only once a stream has read a quarter of the
/// budget: a pass from its start keeps that much cached, and the next pass finds it there. One
/// larger than the budget is a scan from a pass's second call on.
#[test]
fn a_file_the_budget_could_hold_keeps_the_head_of_a_pass_cached() {
    within("the head of a pass", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        for (name, store) in local_stores(&path) {
            let cache = Cache::new(CacheOptions::new(4 * LEN)).unwrap();
            let m = cache
                .map(store.clone(), path.to_str().unwrap(), MapOptions::new())
                .unwrap();
            let mut buf = vec![0u8; PIECE];
            scan(name, &m, 0, LEN, PIECE, &mut buf);
            let s = m.stats();
            // A quarter of the budget is the whole file here: nothing read past the cache.
            assert_eq!(s.bytes_read_past_cache, 0, "{name}: {s:#?}");
            let hits = s.hits;
            scan(name, &m, 0, LEN, PIECE, &mut buf);
            let s = m.stats();
            assert_eq!(
                s.hits - hits,
                BUFFERS,
                "{name}: the second pass missed: {s:#?}"
            );

            // Half the file is a quarter of this budget: the first half stays cached (and what
            // was read ahead of it before the pass became a scan).
            let cache = Cache::new(CacheOptions::new(2 * LEN - 1)).unwrap();
            let m = cache
                .map(store.clone(), path.to_str().unwrap(), MapOptions::new())
                .unwrap();
            scan(name, &m, 0, LEN, PIECE, &mut buf);
            let s = m.stats();
            assert!(s.bytes_read_past_cache > 0, "{name}: {s:#?}");
            assert!(s.bytes_read_past_cache <= LEN / 2, "{name}: {s:#?}");
            let hits = s.hits;
            scan(name, &m, 0, LEN / 2, PIECE, &mut buf);
            let s = m.stats();
            assert_eq!(s.hits - hits, BUFFERS / 2, "{name}: {s:#?}");

            // Larger than the budget: a scan from the second piece.
            let (_c, m) = map(store, &path, MapOptions::new());
            scan(name, &m, 0, LEN, PIECE, &mut buf);
            let s = m.stats();
            assert_eq!(
                s.bytes_read_past_cache,
                LEN - PIECE as u64,
                "{name}: {s:#?}"
            );
        }
    });
}

/// Two scans of one mapping taking turns: the ring stays with the first (the other reads
/// straight into its caller's memory), rather than each call throwing the other's windows
/// away, so nothing is read twice over.
#[test]
fn two_scans_taking_turns_share_the_ring_without_rereading() {
    within("two scans", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        for (name, inner) in local_stores(&path) {
            let (store, counts) = tally(inner, false);
            let (_c, m) = map(store, &path, MapOptions::new());
            let mut buf = vec![0u8; PIECE];
            let half = LEN / 2;
            let mut at = 0;
            while at < half {
                for off in [at, half + at] {
                    m.read(off, &mut buf).unwrap();
                    check(name, off, &buf);
                }
                at += PIECE as u64;
            }
            let (io, caller) = counts.get();
            let s = m.stats();
            assert!(s.bytes_read_past_cache > half, "{name}: {s:#?}");
            // Each byte read once, give or take the windows a scan reads ahead of its end.
            assert!(
                io + caller <= LEN + BUDGET / 2,
                "{name}: {io} + {caller} bytes read for {LEN}: {s:#?}"
            );
        }
    });
}

/// An object that, on its first read covering byte `at` once armed, reads the request, runs
/// `hook` (which rewrites that part of the object through the mapping), then reads the second
/// half of the buffer at `at` again: the first half old, the second new, as a store read may
/// return when it races a write-back of the same range.
struct Tearing {
    inner: Arc<dyn Object>,
    at: u64,
    armed: Arc<AtomicBool>,
    hook: Arc<std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>>,
}

impl Object for Tearing {
    forward_object!(inner: name, len, set_len, write_at, sync);
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let n = self.inner.read_at(buf, offset)?;
        let covers = (offset..offset + n as u64).contains(&self.at);
        if covers && self.armed.swap(false, Ordering::SeqCst) {
            (self.hook.get().expect("hook set"))();
            let half = (self.at - offset) as usize + BS / 2;
            self.inner
                .read_at(&mut buf[half..n], offset + half as u64)?;
        }
        Ok(n)
    }
    fn accepts_unaligned(&self) -> bool {
        true
    }
    fn reads_ahead(&self) -> bool {
        // The scan reads on the caller's thread, past the cache, with no ring.
        true
    }
}

/// A buffer loaded, rewritten and written back while a scan read it past the cache (the
/// store's read returning half of each version) is copied through the cache instead: a read
/// never returns a buffer torn between two versions. Without the word's check after the read,
/// the scan returned the torn bytes.
#[test]
fn a_buffer_written_back_while_a_scan_reads_it_past_the_cache_is_not_torn() {
    within("a torn read", || {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let path = offset_file(dir.path(), LEN);
        let at = 3 * LEN / 4;
        let armed = Arc::new(AtomicBool::new(false));
        let hook: Arc<std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>> = Default::default();
        let (a, h) = (armed.clone(), hook.clone());
        let store = WrapStore::new(Arc::new(FileStore::new()), move |obj| {
            Arc::new(Tearing {
                inner: obj,
                at,
                armed: a.clone(),
                hook: h.clone(),
            }) as Arc<dyn Object>
        });
        let cache = Cache::new(CacheOptions::new(BUDGET)).unwrap();
        let o = MapOptions::new().writable(true);
        let m = Arc::new(
            cache
                .map(Arc::new(store), path.to_str().unwrap(), o)
                .unwrap(),
        );
        let weak = Arc::downgrade(&m);
        let new = [0xC3u8; BS];
        let _ = hook.set(Box::new(move || {
            let m = weak.upgrade().expect("mapping alive");
            // On another thread, as a concurrent writer would be: load, rewrite, write back
            // and evict the buffer while the scan's store read is halfway through it.
            std::thread::scope(|s| {
                s.spawn(|| {
                    m.write(at, &new).unwrap();
                    m.evict(at, BS as u64).unwrap();
                })
                .join()
                .unwrap();
            });
        }));
        let mut buf = vec![0u8; PIECE];
        scan("torn", &m, 0, at - at % PIECE as u64, PIECE, &mut buf);
        armed.store(true, Ordering::SeqCst);
        m.read(at - at % PIECE as u64, &mut buf).unwrap();
        assert!(
            !armed.load(Ordering::SeqCst),
            "the scan did not read the buffer"
        );
        assert!(m.stats().bytes_read_past_cache > 0);
        let k = (at % PIECE as u64) as usize;
        assert!(
            buf[k..k + BS].iter().all(|&b| b == 0xC3),
            "the buffer at {at} came back torn: {:?}...{:?}",
            &buf[k..k + 8],
            &buf[k + BS - 8..k + BS]
        );
    });
}
