//! Application stores that break their contract: one that panics (the panic becomes a typed IO
//! error at the store boundary, the buffers it held go back to evicted or stay dirty), and one
//! that ends a read stream early. Nothing waits on their buffers for good.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use ucache::store::{MemoryStore, Object, OpenOptions, Store};
use ucache::{Cache, CacheOptions, Error, FaultAction, MapOptions, Phase};

mod common;
use common::store::{forward_object, WrapStore};
use common::{until, within};

const BS: usize = 4096;

/// Panics on every read or write while its switch is on.
struct Panicky {
    inner: Arc<dyn Object>,
    on: Arc<AtomicBool>,
}

struct PanickyStore(MemoryStore, Arc<AtomicBool>);

impl Store for PanickyStore {
    fn open(&self, object: &str, o: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        if object == "explodes" {
            panic!("open exploded");
        }
        Ok(Arc::new(Panicky {
            inner: self.0.open(object, o)?,
            on: self.1.clone(),
        }))
    }
}

impl Object for Panicky {
    forward_object!(inner: name, len, set_len, sync);
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.on.load(Ordering::Relaxed) {
            panic!("read of {offset} exploded");
        }
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.on.load(Ordering::Relaxed) {
            panic!("write of {offset} exploded");
        }
        self.inner.write_at(buf, offset)
    }
}

fn setup(buffers: usize) -> (MemoryStore, Arc<PanickyStore>, Arc<AtomicBool>) {
    let mem = MemoryStore::new();
    let data: Vec<u8> = (0..buffers * BS).map(|k| (k / BS) as u8).collect();
    mem.insert("o", data);
    let on = Arc::new(AtomicBool::new(false));
    (mem.clone(), Arc::new(PanickyStore(mem, on.clone())), on)
}

fn cache() -> Cache {
    Cache::new(CacheOptions::new(64 * BS as u64).batch_bytes(4 * BS as u64)).unwrap()
}

fn quiet_panics() {
    std::panic::set_hook(Box::new(|_| {}));
}

fn assert_panic_error(e: &Error) {
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(e.to_string().contains("exploded"), "{e}");
}

#[test]
fn a_panicking_open_is_an_error() {
    quiet_panics();
    let (_, s, _) = setup(4);
    let e = cache().map(s, "explodes", MapOptions::new()).unwrap_err();
    assert!(matches!(e, Error::Io { op: "open", .. }), "{e}");
}

#[test]
fn panicking_reads_fail_the_access_and_leave_the_buffer_loadable() {
    quiet_panics();
    within("a buffer was left claimed", || {
        let (_, s, on) = setup(32);
        let c = cache();
        let m = c.map(s, "o", MapOptions::new()).unwrap();
        on.store(true, Ordering::Relaxed);
        assert_panic_error(&m.pin_shared(3).unwrap_err());
        assert_panic_error(&m.ensure_cached(0, 8 * BS as u64).unwrap_err());
        assert_panic_error(&m.pin_each(0..8, 4, |_, _| {}).unwrap_err());
        // Prefetches run on an IO thread, which must survive the panic.
        m.prefetch(8 * BS as u64, 8 * BS as u64).unwrap();
        // The prefetch claimed its buffers (`Loading`) before it returned: wait for the IO
        // thread to meet the panics and give them up, however late it runs (a sleep was not
        // enough on a loaded host, and the budget check below then saw its claims).
        until(
            "the panicking prefetch to give its buffers up",
            || (8..16).all(|i| m.state(i).unwrap().phase() != Phase::Loading),
            || c.stats(),
        );
        assert_panic_error(&m.pin_shared(9).unwrap_err());
        assert_eq!(c.used(), 0, "failed loads give their budget back");
        on.store(false, Ordering::Relaxed);
        for i in 0..16 {
            assert!(m.pin_shared(i).unwrap().iter().all(|&b| b == i as u8));
        }
        m.prefetch(16 * BS as u64, 16 * BS as u64).unwrap();
        for i in 16..32 {
            assert!(m.pin_shared(i).unwrap().iter().all(|&b| b == i as u8));
        }
    });
}

#[test]
fn panicking_writes_keep_the_data_dirty() {
    quiet_panics();
    within("a buffer was left claimed", || {
        let (mem, s, on) = setup(16);
        let c = cache();
        let m = c.map(s, "o", MapOptions::new().writable(true)).unwrap();
        for i in 0..4 {
            m.pin_exclusive(i).unwrap().fill(0xA0 + i as u8);
        }
        on.store(true, Ordering::Relaxed);
        let e = m.msync(0, m.len()).unwrap_err();
        assert!(matches!(e, Error::WritebackFailed { .. }), "{e}");
        let failed = c.stats().writeback_failures;
        m.writeback(0, m.len()).unwrap();
        // The IO thread counts the failures after it has put the buffers back: wait for all
        // four, however late it runs (after a fixed sleep a late write-back was still in
        // flight, its buffers not yet dirty again, on a loaded host).
        until(
            "the panicking write-back to fail",
            || c.stats().writeback_failures >= failed + 4,
            || c.stats(),
        );
        for i in 0..4 {
            assert!(m.state(i).unwrap().dirty(), "buffer {i} kept dirty");
        }
        on.store(false, Ordering::Relaxed);
        m.msync(0, m.len()).unwrap();
        let got = mem.get("o").unwrap();
        for i in 0..4 {
            assert!(got[i * BS..(i + 1) * BS]
                .iter()
                .all(|&b| b == 0xA0 + i as u8));
        }
    });
}

#[test]
fn a_panicking_read_under_a_transparent_access_goes_to_the_fault_hook() {
    quiet_panics();
    within("a buffer was left claimed", || {
        let (_, s, on) = setup(16);
        let c = cache();
        let calls = Arc::new(AtomicUsize::new(0));
        let hook = {
            let (calls, on) = (calls.clone(), on.clone());
            Arc::new(move |_addr: usize, e: &Error| {
                assert!(e.to_string().contains("exploded"), "{e}");
                calls.fetch_add(1, Ordering::Relaxed);
                on.store(false, Ordering::Relaxed);
                FaultAction::Retry
            })
        };
        let m = c
            .map(
                s,
                "o",
                MapOptions::new().transparent(true).on_fault_error(hook),
            )
            .unwrap();
        on.store(true, Ordering::Relaxed);
        // SAFETY: inside the mapping, which outlives the read.
        let b = unsafe { std::ptr::read_volatile(m.as_ptr().add(5 * BS + 7)) };
        assert_eq!(b, 5);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    });
}

/// Answers one request of each stream, then returns without asking for the rest; or, when
/// `forgetful`, asks for one more and drops it unanswered (a store that gives up on a request,
/// say when its connection drops, and forgets it).
struct Impatient {
    inner: Arc<dyn Object>,
    forgetful: bool,
}

/// A store of `mem`'s objects, each answered by an [`Impatient`].
fn impatient(mem: MemoryStore, forgetful: bool) -> Arc<dyn Store> {
    Arc::new(WrapStore::new(Arc::new(mem), move |inner| {
        Arc::new(Impatient { inner, forgetful })
    }))
}

impl Object for Impatient {
    forward_object!(inner: name, len, set_len, read_at, write_at, sync);
    fn read_stream<'a>(
        &self,
        _depth: usize,
        next: &mut dyn FnMut() -> Option<ucache::store::IoBuf<'a>>,
        done: &mut dyn FnMut(ucache::store::IoBuf<'a>, io::Result<usize>),
    ) {
        if let Some(mut b) = next() {
            let off = b.offset();
            let got = self.inner.read_at(b.as_mut_slice(), off);
            done(b, got);
        }
        if self.forgetful {
            let _forgotten = next();
        }
    }
}

/// Neither a stream ended early nor a request pulled and then dropped leaves a claim: the
/// buffers load later, on a prefetch's IO thread and in `pin_each` alike.
#[test]
fn a_stream_ended_early_leaves_no_claim_behind() {
    for (transparent, forgetful) in [(false, false), (true, false), (false, true), (true, true)] {
        within("a buffer was left claimed", move || {
            let (mem, _, _) = setup(64);
            let c = cache();
            let o = MapOptions::new().transparent(transparent).readahead(false);
            let m = c.map(impatient(mem, forgetful), "o", o).unwrap();
            // Scattered runs, so the stream has many requests to leave behind.
            let want: Vec<u64> = (0..32).map(|k| k * 2).collect();
            m.prefetch_buffers(&want).unwrap();
            for &i in &want {
                assert!(m.pin_shared(i).unwrap().iter().all(|&b| b == i as u8));
            }
        });
    }
}

/// `pin_each` over a store that drops a request it pulled reports that request failed (or
/// visits it), and the buffer loads on the next pin.
#[test]
fn pin_each_over_a_store_that_drops_a_request_leaves_no_claim() {
    within("a buffer was left claimed", || {
        let (mem, _, _) = setup(8);
        let c = cache();
        let m = c.map(impatient(mem, true), "o", MapOptions::new()).unwrap();
        let mut visited = Vec::new();
        let r = m.pin_each([0u64, 2], 4, |i, _| visited.push(i));
        assert!(
            r.is_err() || visited.len() == 2,
            "{r:?}, visited {visited:?}"
        );
        for i in [0u64, 2] {
            assert!(m.pin_shared(i).unwrap().iter().all(|&b| b == i as u8));
        }
    });
}
