//! The buffer state protocol at its edges, each case found by review (2026-11-25) and failing
//! before its fix: a drop that fails part way. (The pin count at its limit is a unit test of
//! `state.rs`, where the word's transitions are visible.)

use std::sync::Arc;

use ucache::store::MemoryStore;
use ucache::Phase;
use ucache::{Cache, CacheOptions, MapOptions};

mod common;

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
