//! Sequences of public API calls on an explicit mapping, checked against a model: the
//! object's bytes as a `Vec<u8>` (the smaller sibling of crates/ucache/tests/api_model.rs, with
//! libFuzzer choosing the configuration and the calls).
//!
//! A [`MemoryStore`] behind a [`FaultStore`] whose reads, writes and syncs the input turns on
//! and off. Every successful read (through `read`, a shared pin or `read_optimistic`) must see
//! the model's bytes; a write through an exclusive pin changes the model; a successful `msync`
//! of the whole mapping leaves the store equal to the model; out-of-range calls fail; a
//! read-only mapping refuses exclusive pins. At the end the faults are cleared, `unmap` must
//! succeed and the object must equal the model.
//!
//! Explicit mappings only: a transparent mapping serves faults from a SIGBUS handler or a
//! userfaultfd, and under libFuzzer the sanitizer (AddressSanitizer) and libFuzzer's own
//! crash handlers own SIGSEGV and SIGBUS, so a transparent miss would be reported as a crash
//! (or the cache's handler would hide real ones). The transparent paths are covered by the
//! proptest model (crates/ucache/tests/api_model.rs) and the child-process tests instead.

#![no_main]

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use ucache::store::{FaultConfig, FaultStore, MemoryStore};
use ucache::{Cache, CacheOptions, Error, MapOptions};

/// Bytes of the input, as small numbers; zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u64 {
        u64::from(self.u8()) | u64::from(self.u8()) << 8
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let bs = 4096usize << (b.u8() % 3);
    let obj_len = 1 + b.u16() % (12 * bs as u64 + 100);
    let budget_bufs = 2 + u64::from(b.u8() % 14);
    let flags = b.u8();
    let writable = flags & 1 != 0;
    // A read-write mapping is whole 4 KiB pages (a shorter one is refused at `map`).
    let obj_len = if writable {
        obj_len.div_ceil(4096) * 4096
    } else {
        obj_len
    };
    let background = flags & 2 != 0;

    let mem = Arc::new(MemoryStore::new());
    let initial: Vec<u8> = (0..obj_len).map(|i| (i * 7 + i / 4096) as u8).collect();
    mem.insert("obj", initial.clone());
    let faults = Arc::new(FaultConfig::default());
    let store = Arc::new(FaultStore::with_config(mem.clone(), faults.clone()));
    let cache = match Cache::new(
        CacheOptions::new(budget_bufs * bs as u64)
            .batch(1)
            .io_threads(1)
            .background_eviction(background)
            .budget_wait(Duration::from_millis(20)),
    ) {
        Ok(c) => c,
        Err(e) => panic!("cache of {budget_bufs} buffers of {bs}: {e}"),
    };
    let m = cache
        .map(
            store,
            "obj",
            MapOptions::new().buffer_size(bs).writable(writable),
        )
        .unwrap_or_else(|e| panic!("map: {e}"));
    assert_eq!(m.len(), obj_len);
    let bufs = m.buffers();
    assert_eq!(bufs, obj_len.div_ceil(bs as u64));
    let mut model = initial;

    let mut ops = 0;
    while !b.is_empty() && ops < 64 {
        ops += 1;
        let op = b.u8();
        // Offsets reach a little past the end, so out-of-range calls are made too.
        let off = b.u16() % (obj_len + 2 * bs as u64);
        let len = b.u16() % (3 * bs as u64);
        let index = u64::from(b.u8()) % (bufs + 2);
        let in_range = off.checked_add(len).is_some_and(|e| e <= obj_len);
        match op % 12 {
            0 | 1 => {
                let mut buf = vec![0u8; len as usize];
                match m.read(off, &mut buf) {
                    Ok(()) => {
                        assert!(in_range, "read of {len} at {off} past {obj_len} succeeded");
                        assert!(
                            buf == model[off as usize..(off + len) as usize],
                            "read at {off}"
                        );
                    }
                    Err(e) => assert!(
                        !in_range || faults.fail_reads.load(Relaxed) || budget_error(&e),
                        "read of {len} at {off}: {e}"
                    ),
                }
            }
            2 | 3 => {
                let at = b.u16() as usize;
                let n = 1 + b.u8() as usize;
                let fill = b.u8();
                match m.pin_exclusive(index) {
                    Ok(mut g) => {
                        assert!(writable, "exclusive pin of a read-only mapping");
                        assert!(index < bufs);
                        let start = index as usize * bs;
                        let valid = (obj_len as usize - start).min(bs);
                        assert_eq!(g.len(), valid);
                        assert!(g[..] == model[start..start + valid], "pin {index}");
                        let at = at % valid;
                        let end = (at + n).min(valid);
                        g[at..end].fill(fill);
                        model[start + at..start + end].fill(fill);
                    }
                    Err(e) => assert!(
                        !writable
                            || index >= bufs
                            || faults.fail_reads.load(Relaxed)
                            || budget_error(&e),
                        "pin_exclusive({index}): {e}"
                    ),
                }
            }
            4 => match m.pin_shared(index) {
                Ok(g) => {
                    let start = index as usize * bs;
                    assert!(g[..] == model[start..start + g.len()], "pin_shared {index}");
                }
                Err(e) => assert!(
                    index >= bufs || faults.fail_reads.load(Relaxed) || budget_error(&e),
                    "pin_shared({index}): {e}"
                ),
            },
            5 => {
                let r = m.read_optimistic(index, |v| {
                    let mut out = vec![0u8; v.len()];
                    v.copy_to(0, &mut out);
                    out
                });
                match r {
                    Ok(got) => {
                        let start = index as usize * bs;
                        assert!(got == model[start..start + got.len()], "optimistic {index}");
                    }
                    Err(e) => assert!(
                        index >= bufs || faults.fail_reads.load(Relaxed) || budget_error(&e),
                        "read_optimistic({index}): {e}"
                    ),
                }
            }
            6 => {
                let r = m.evict(off, len);
                if r.is_ok() {
                    assert!(in_range || len == 0, "evict past the end succeeded");
                }
            }
            7 => {
                let _ = m.ensure_cached(off, len);
                let _ = m.prefetch(off, len);
                let _ = m.writeback(off, len);
            }
            8 => {
                if m.msync(0, obj_len).is_ok() && writable {
                    assert!(
                        mem.get("obj").unwrap() == model,
                        "msync returned Ok, store differs"
                    );
                }
            }
            9 => {
                let _ = m.msync(off, len);
            }
            10 => {
                let which = b.u8();
                let on = which & 0x80 != 0;
                match which % 4 {
                    0 => faults.fail_reads.store(on, Relaxed),
                    1 => faults.fail_writes.store(on, Relaxed),
                    2 => faults.fail_sync.store(on, Relaxed),
                    _ => faults.fail_next_sync.store(on, Relaxed),
                }
            }
            _ => {
                m.clear_sync_failure();
            }
        }
    }

    faults.set_unavailable(false);
    faults.fail_next_sync.store(false, Relaxed);
    m.clear_sync_failure();
    if let Err(e) = m.unmap() {
        panic!("unmap with the store healthy: {}", e.error);
    }
    assert!(
        mem.get("obj").unwrap() == model,
        "the object differs from the model after unmap"
    );
});

/// Errors a call may meet without being wrong: memory held by dirty buffers whose write-back
/// the store refuses.
fn budget_error(e: &Error) -> bool {
    matches!(
        e,
        Error::BudgetExhausted { .. } | Error::WritebackFailed { .. } | Error::Io { .. }
    )
}
