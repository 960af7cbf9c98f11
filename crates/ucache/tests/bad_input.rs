//! Bad input gets a typed error and corrupts nothing.

mod common;
use common::store::{forward_object, WrapStore};

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ucache::store::{MemoryStore, Object, Store};
use ucache::{Cache, CacheOptions, Error, MapOptions, Placement};

const BS: usize = 4096;

fn store_with(name: &str, len: usize) -> MemoryStore {
    let s = MemoryStore::new();
    s.insert(name, (0..len).map(|i| (i / BS) as u8).collect());
    s
}

fn cache() -> Cache {
    Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap()
}

#[test]
fn buffer_size_must_be_a_power_of_two_of_at_least_4k() {
    let s = Arc::new(store_with("o", 64 * BS));
    for bad in [0, 1, 512, 2048, 4095, 6000, 12288] {
        let r = cache().map(s.clone(), "o", MapOptions::new().buffer_size(bad));
        assert!(
            matches!(r, Err(Error::BadBufferSize(b)) if b == bad),
            "{bad}: {r:?}"
        );
    }
    assert!(cache()
        .map(s, "o", MapOptions::new().buffer_size(8192))
        .is_ok());
}

#[test]
fn zero_length_is_refused() {
    let s = Arc::new(store_with("o", 64 * BS));
    let r = cache().map(s.clone(), "o", MapOptions::new().len(0));
    assert!(matches!(r, Err(Error::BadLength { len: 0, .. })), "{r:?}");
    // An empty object with no length given has nothing to map.
    s.insert("empty", Vec::new());
    let r = cache().map(s, "empty", MapOptions::new());
    assert!(matches!(r, Err(Error::BadLength { .. })), "{r:?}");
}

#[test]
fn read_only_mapping_beyond_the_object_is_refused() {
    let s = Arc::new(store_with("o", 10 * BS));
    let r = cache().map(s.clone(), "o", MapOptions::new().len(11 * BS as u64));
    assert!(
        matches!(r, Err(Error::BeyondObject { object_len, .. }) if object_len == 10 * BS as u64)
    );
    let r = cache().map(
        s.clone(),
        "o",
        MapOptions::new().offset(8 * BS as u64).len(4 * BS as u64),
    );
    assert!(matches!(r, Err(Error::BeyondObject { .. })), "{r:?}");
    let r = cache().map(s.clone(), "o", MapOptions::new().offset(100));
    assert!(matches!(r, Err(Error::BadArgument(_))), "{r:?}");
    let r = cache().map(s.clone(), "o", MapOptions::new().weight(0));
    assert!(matches!(r, Err(Error::BadArgument(_))), "{r:?}");
    for n in [0, 65] {
        let r = Cache::new(CacheOptions::new(64 * BS as u64).io_threads(n));
        assert!(
            matches!(r, Err(Error::BadArgument(_))),
            "io_threads {n}: {r:?}"
        );
    }
    let m = cache().map(s.clone(), "o", MapOptions::new()).unwrap();
    let r = m.pin_each([0, 1], 0, |_, _| panic!("nothing is visited"));
    assert!(matches!(r, Err(Error::BadArgument(_))), "depth 0: {r:?}");
    // A read-write mapping grows the object instead.
    let m = cache()
        .map(
            s.clone(),
            "o",
            MapOptions::new().writable(true).len(12 * BS as u64),
        )
        .unwrap();
    m.unmap().unwrap();
    assert_eq!(s.get("o").unwrap().len(), 12 * BS);
    let r = cache().map(s, "o", MapOptions::new().writable(true).len(100));
    assert!(matches!(r, Err(Error::BadLength { .. })), "{r:?}");
}

#[test]
fn missing_object_is_not_found() {
    let r = cache().map(Arc::new(MemoryStore::new()), "nope", MapOptions::new());
    assert!(
        matches!(r, Err(Error::NotFound { ref object }) if object == "nope"),
        "{r:?}"
    );
}

/// A mapping that would create its object but not write it is refused before anything is
/// created (it used to create the object and then fail as beyond the object's end): whether
/// `writable(false)` is said or left as the default, in either order, and the message says
/// what to add.
#[test]
fn create_without_write_is_refused_before_creating() {
    let store = MemoryStore::new();
    let tries = [
        ("default", MapOptions::new().create(true).len(4 * BS as u64)),
        (
            "after",
            MapOptions::new()
                .create(true)
                .writable(false)
                .len(4 * BS as u64),
        ),
        (
            "before",
            MapOptions::new()
                .writable(false)
                .create(true)
                .len(4 * BS as u64),
        ),
    ];
    for (name, o) in tries {
        let r = cache().map(Arc::new(store.clone()), name, o);
        match r {
            Err(Error::BadArgument(ref why)) => {
                assert!(why.contains("`create` needs `writable`"), "{name}: {why}")
            }
            _ => panic!("{name}: {r:?}"),
        }
        assert!(store.get(name).is_none(), "{name}: nothing was created");
    }
    // Even on an object that exists: `create` never makes a mapping writable by itself.
    store.insert("old", vec![7; 2 * BS]);
    let r = cache().map(
        Arc::new(store.clone()),
        "old",
        MapOptions::new().create(true),
    );
    assert!(matches!(r, Err(Error::BadArgument(_))), "{r:?}");
}

/// A mapping that would create its object is refused for its length before anything is
/// created: with no length (a new object is empty), a read-write length that is not whole
/// pages, one that overflows the offset range. Each used to create the object first.
#[test]
fn a_create_refused_for_its_length_creates_nothing() {
    let store = MemoryStore::new();
    let c = cache();
    let tries = [
        ("none", MapOptions::new().writable(true).create(true)),
        (
            "partial",
            MapOptions::new().writable(true).create(true).len(100),
        ),
        (
            "overflow",
            MapOptions::new()
                .writable(true)
                .create(true)
                .offset(4096)
                .len(u64::MAX - 4095),
        ),
    ];
    for (name, o) in tries {
        let r = c.map(Arc::new(store.clone()), name, o);
        assert!(matches!(r, Err(Error::BadLength { .. })), "{name}: {r:?}");
        assert!(
            store.get(name).is_none(),
            "{name}: the refused mapping created it"
        );
    }
    // An existing object needs no length, created or not.
    store.insert("old", vec![7; 2 * BS]);
    let m = c
        .map(
            Arc::new(store.clone()),
            "old",
            MapOptions::new().writable(true).create(true),
        )
        .unwrap();
    assert_eq!(m.len(), 2 * BS as u64);
}

/// `writable` and `create` are plain booleans: the last call of each wins, `writable`
/// defaults to false, and `create` never changes whether a mapping is writable.
#[test]
fn create_and_writable_are_plain_booleans() {
    let c = cache();
    let s = Arc::new(store_with("o", 4 * BS));
    let m = c.map(s.clone(), "o", MapOptions::new()).unwrap();
    assert!(!m.is_writable(), "read-only by default");
    let m = c
        .map(s.clone(), "o", MapOptions::new().create(true).create(false))
        .unwrap();
    assert!(
        !m.is_writable(),
        "create(false) after create(true) maps read-only"
    );
    let m = c
        .map(
            s.clone(),
            "o",
            MapOptions::new().writable(true).create(false),
        )
        .unwrap();
    assert!(m.is_writable(), "an explicit writable(true) stays");
    let m = c
        .map(
            s.clone(),
            "o",
            MapOptions::new().writable(true).writable(false),
        )
        .unwrap();
    assert!(!m.is_writable(), "the last writable() wins");
    let m = c
        .map(s, "o", MapOptions::new().create(true).writable(true))
        .unwrap();
    assert!(
        m.is_writable(),
        "create then writable, in that order, is fine"
    );
}

/// With the default batch, counted in bytes, a bad buffer size is refused before the batch is
/// divided by it.
#[test]
fn bad_buffer_sizes_are_refused_under_the_default_batch() {
    let c = Cache::new(CacheOptions::new(64 * BS as u64)).unwrap();
    let s = Arc::new(store_with("o", 64 * BS));
    for bad in [0, 1, 6000, 2usize << 30] {
        let r = c.map(s.clone(), "o", MapOptions::new().buffer_size(bad));
        assert!(
            matches!(r, Err(Error::BadBufferSize(b)) if b == bad),
            "{bad}: {r:?}"
        );
        let r = c.batch_buffers(bad);
        assert!(
            matches!(r, Err(Error::BadBufferSize(b)) if b == bad),
            "{bad}: {r:?}"
        );
    }
    assert_eq!(
        c.batch_buffers(4096).unwrap(),
        8,
        "an eighth of a small budget"
    );
}

#[test]
fn budget_smaller_than_one_batch_is_refused() {
    let r = Cache::new(CacheOptions::new(4 * BS as u64).batch(8));
    assert!(matches!(r, Err(Error::BudgetTooSmall { .. })), "{r:?}");
    assert!(matches!(
        Cache::new(CacheOptions::new(1 << 20).batch(0)),
        Err(Error::BadArgument(_))
    ));
    // The batch is counted in buffers of the mapping: big buffers need a bigger budget.
    let c = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let s = Arc::new(store_with("o", 1 << 20));
    let r = c.map(s, "o", MapOptions::new().buffer_size(64 * 1024));
    assert!(matches!(r, Err(Error::BudgetTooSmall { .. })), "{r:?}");
}

#[test]
fn addresses_outside_every_mapping_are_refused() {
    let c = cache();
    let s = Arc::new(store_with("o", 16 * BS));
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    let base = m.as_ptr();
    let local = [0u8; 16];
    assert!(matches!(
        c.ensure_cached(local.as_ptr(), 16),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        c.evict(base.wrapping_add(15 * BS), 2 * BS),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(m.pin_shared(16), Err(Error::OutOfRange { .. })));
    assert!(matches!(
        m.ensure_cached(16 * BS as u64, 1),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        m.msync(u64::MAX, 2),
        Err(Error::OutOfRange { .. })
    ));
    // The address forms work inside the mapping.
    c.ensure_cached(base.wrapping_add(3 * BS + 5), 10).unwrap();
    assert_eq!(m.resident(), 1);
    c.evict(base, 16 * BS).unwrap();
    assert_eq!(m.resident(), 0);
}

#[test]
fn writes_through_a_read_only_mapping_are_refused() {
    let c = cache();
    let s = Arc::new(store_with("o", 16 * BS));
    let m = c.map(s.clone(), "o", MapOptions::new()).unwrap();
    assert!(matches!(m.pin_exclusive(0), Err(Error::ReadOnly)));
    assert!(m.pin_shared(0).unwrap().iter().all(|&b| b == 0));
    m.unmap().unwrap();
    assert_eq!(
        s.get("o").unwrap(),
        store_with("o", 16 * BS).get("o").unwrap()
    );
}

/// An application-defined store whose reads and writes can be made to fail or come up short.
struct Flaky {
    inner: Arc<dyn Object>,
    fail_reads: Arc<AtomicBool>,
    short_reads: Arc<AtomicBool>,
    fail_writes: Arc<AtomicBool>,
}

impl Object for Flaky {
    forward_object!(inner: name, len, set_len, sync);
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if self.fail_reads.load(Ordering::Relaxed) {
            return Err(io::Error::other("device gone"));
        }
        let n = self.inner.read_at(buf, offset)?;
        Ok(if self.short_reads.load(Ordering::Relaxed) {
            n / 2
        } else {
            n
        })
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.fail_writes.load(Ordering::Relaxed) {
            return Err(io::Error::other("disk full"));
        }
        self.inner.write_at(buf, offset)
    }
}

fn flaky(len: usize) -> (MemoryStore, Arc<dyn Store>, [Arc<AtomicBool>; 3]) {
    let mem = store_with("o", len);
    let flags = [(); 3].map(|_| Arc::new(AtomicBool::new(false)));
    let [fail_reads, short_reads, fail_writes] = flags.clone();
    let st = WrapStore::new(Arc::new(mem.clone()), move |inner| {
        Arc::new(Flaky {
            inner,
            fail_reads: fail_reads.clone(),
            short_reads: short_reads.clone(),
            fail_writes: fail_writes.clone(),
        })
    });
    (mem, Arc::new(st), flags)
}

#[test]
fn io_errors_and_short_reads_are_reported_and_leave_the_buffer_loadable() {
    let (_, s, [fail_reads, short_reads, _]) = flaky(16 * BS);
    let c = cache();
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    fail_reads.store(true, Ordering::Relaxed);
    let e = m.pin_shared(3).unwrap_err();
    assert!(
        matches!(e, Error::Io { op: "read", offset, .. } if offset == 3 * BS as u64),
        "{e}"
    );
    assert!(e.to_string().contains("device gone"), "{e}");
    assert!(matches!(
        m.ensure_cached(0, 4 * BS as u64),
        Err(Error::Io { .. })
    ));
    fail_reads.store(false, Ordering::Relaxed);
    short_reads.store(true, Ordering::Relaxed);
    let e = m.pin_shared(3).unwrap_err();
    assert!(
        matches!(e, Error::ShortIo { got, want, .. } if got == BS / 2 && want == BS),
        "{e}"
    );
    short_reads.store(false, Ordering::Relaxed);
    assert_eq!(c.used(), 0, "failed loads give their budget back");
    let g = m.pin_shared(3).unwrap();
    assert!(
        g.iter().all(|&b| b == 3),
        "a retry after the fault reads the right data"
    );
    assert_eq!(c.stats().read_failures, 1 + 4 + 1);
    // A stream stops at the failure, reports it, and leaves the buffers loadable.
    fail_reads.store(true, Ordering::Relaxed);
    let mut visited = 0;
    let e = m
        .pin_each([3, 5, 6, 7], 4, |_, _| visited += 1)
        .unwrap_err();
    assert!(matches!(e, Error::Io { op: "read", .. }), "{e}");
    assert_eq!(visited, 1, "only the cached buffer 3 is visited");
    fail_reads.store(false, Ordering::Relaxed);
    let mut sum = 0u64;
    m.pin_each([5, 6, 7], 4, |i, b| {
        assert!(b.iter().all(|&x| x as u64 == i));
        sum += i;
    })
    .unwrap();
    assert_eq!(sum, 18);
}

#[test]
fn failed_writeback_keeps_the_data_dirty_and_resident() {
    let (mem, s, [_, _, fail_writes]) = flaky(16 * BS);
    let c = cache();
    let m = c.map(s, "o", MapOptions::new().writable(true)).unwrap();
    m.pin_exclusive(2).unwrap().fill(0xEE);
    fail_writes.store(true, Ordering::Relaxed);
    let e = m.msync(0, m.len()).unwrap_err();
    assert!(matches!(e, Error::WritebackFailed { failed: 1, .. }), "{e}");
    assert!(m.state(2).unwrap().dirty(), "still dirty after the failure");
    assert!(matches!(
        m.evict(0, m.len()),
        Err(Error::WritebackFailed { .. })
    ));
    assert_eq!(
        m.resident(),
        1,
        "a buffer whose write-back failed is not evicted"
    );
    assert!(m.pin_shared(2).unwrap().iter().all(|&b| b == 0xEE));
    // Unmap refuses to drop the data and hands the mapping back.
    let err = m.unmap().unwrap_err();
    let m = err.mapping;
    assert_eq!(
        mem.get("o").unwrap()[2 * BS],
        2,
        "nothing reached the store yet"
    );
    fail_writes.store(false, Ordering::Relaxed);
    m.msync(0, m.len()).unwrap();
    assert!(mem.get("o").unwrap()[2 * BS..3 * BS]
        .iter()
        .all(|&b| b == 0xEE));
    assert!(c.stats().writeback_failures >= 3);
    m.unmap().unwrap();
}

#[test]
fn unpinned_exclusive_write_without_changes_is_clean() {
    let c = cache();
    let s = Arc::new(store_with("o", 16 * BS));
    let m = c.map(s, "o", MapOptions::new().writable(true)).unwrap();
    let g = m.pin_exclusive(1).unwrap();
    assert_eq!(g[0], 1);
    drop(g);
    assert!(
        !m.state(1).unwrap().dirty(),
        "reading through an exclusive guard dirties nothing"
    );
}

/// Background prefetches travel as runs (one read for adjacent buffers). A failed run and a
/// short one are settled buffer by buffer: the fully read buffers are published, the others
/// go back to evicted with their budget, and once the store recovers every buffer loads with
/// its own bytes.
#[test]
fn failed_and_short_prefetch_runs_are_settled_buffer_by_buffer() {
    use ucache::store::FaultStore;
    let inner = store_with("o", 64 * BS);
    let faults = FaultStore::new(Arc::new(inner));
    let config = faults.config().clone();
    let c = Cache::new(CacheOptions::new(64 * BS as u64).batch(8)).unwrap();
    let m = c.map(Arc::new(faults), "o", MapOptions::new()).unwrap();
    let settled = |failures: u64, prefetches: u64| {
        common::until(
            "the prefetch to settle",
            || c.stats().read_failures >= failures && c.stats().prefetches >= prefetches,
            || c.stats(),
        );
        // Every buffer is out of Loading once its run is settled.
        while (0..32).any(|i| m.state(i).unwrap().phase() == ucache::Phase::Loading) {
            std::thread::yield_now();
        }
    };
    config.fail_reads.store(true, Ordering::Relaxed);
    m.prefetch(0, 32 * BS as u64).unwrap();
    settled(32, 0);
    assert_eq!(c.used(), 0, "failed loads give their budget back");
    config.fail_reads.store(false, Ordering::Relaxed);
    config.short_reads.store(true, Ordering::Relaxed);
    m.prefetch(0, 32 * BS as u64).unwrap();
    settled(32 + 16, 16);
    let cached: Vec<u64> = (0..32)
        .filter(|&i| m.state(i).unwrap().phase() == ucache::Phase::Cached)
        .collect();
    assert_eq!(
        cached,
        (0..16).collect::<Vec<_>>(),
        "the half the short read covered"
    );
    assert_eq!(c.used(), 16 * BS as u64);
    config.short_reads.store(false, Ordering::Relaxed);
    for i in 0..32u64 {
        let g = m.pin_shared(i).unwrap();
        assert!(g.iter().all(|&b| b as u64 == i), "buffer {i}");
    }
}

/// A store whose one object has any length and reads as zeros.
struct Endless(u64);

impl ucache::store::Store for Endless {
    fn open(
        &self,
        _: &str,
        _: ucache::store::OpenOptions,
    ) -> ucache::Result<Arc<dyn ucache::store::Object>> {
        Ok(Arc::new(Endless(self.0)))
    }
}

impl ucache::store::Object for Endless {
    fn name(&self) -> &str {
        "endless"
    }
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.0)
    }
    fn set_len(&self, _: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn read_at(&self, buf: &mut [u8], _: u64) -> std::io::Result<usize> {
        buf.fill(0);
        Ok(buf.len())
    }
    fn write_at(&self, _: &[u8], _: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Lengths whose buffers overflow 64 bits, or do not fit the address space, are a typed error.
/// The first once wrapped to a zero-byte region and then aborted allocating 2^34 state words.
#[test]
fn lengths_beyond_the_address_space_are_refused() {
    let cache = Cache::new(CacheOptions::new(4 << 30)).unwrap();
    for (bs, len) in [
        (1usize << 30, u64::MAX - (1 << 30) + 2),
        (4096, u64::MAX),
        (4096, 1 << 62),
    ] {
        let r = cache.map(
            Arc::new(Endless(u64::MAX)),
            "o",
            MapOptions::new().buffer_size(bs).len(len),
        );
        assert!(
            matches!(r, Err(Error::BadLength { .. }) | Err(Error::Os { .. })),
            "{bs} x {len}: {r:?}"
        );
    }
}

/// A pool mapping has no addresses: transparent access, the base address, typed slices and
/// the address-based calls are refused with a typed error, and a refused map leaves nothing
/// allocated.
#[test]
fn pool_mappings_refuse_what_only_in_place_mappings_have() {
    let c = Cache::new(CacheOptions::new(4 << 20)).unwrap();
    let s = Arc::new(store_with("o", 64 * BS));
    let pool = || MapOptions::new().placement(Placement::Pool);
    let r = c.map(s.clone(), "o", pool().transparent(true));
    assert!(
        matches!(
            r,
            Err(Error::NotInPlace {
                what: "transparent access"
            })
        ),
        "{r:?}"
    );
    assert_eq!(
        (c.used(), c.pool_bytes()),
        (0, 0),
        "a refused map holds nothing"
    );
    let m = c.map(s, "o", pool()).unwrap();
    assert_eq!(m.placement(), Placement::Pool);
    assert!(matches!(m.try_as_ptr(), Err(Error::NotInPlace { .. })));
    assert!(m.as_ptr().is_null(), "no base address to hand out");
    assert!(matches!(m.as_slice::<u64>(), Err(Error::NotInPlace { .. })));
    // Loaded, it is still found by no address.
    drop(m.pin_shared(3).unwrap());
    let local = [0u8; 16];
    assert!(matches!(
        c.ensure_cached(local.as_ptr(), 16),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        c.msync(std::ptr::null::<u8>().wrapping_add(3 * BS), 16),
        Err(Error::OutOfRange { .. })
    ));
    m.unmap().unwrap();
    assert_eq!((c.used(), c.pool_bytes()), (0, 0));
}

/// A pool grows in chunks of 2 MiB (or one buffer, if larger): a budget that cannot hold
/// one is refused at `map`, before anything is allocated.
#[test]
fn a_budget_too_small_for_one_pool_chunk_is_refused() {
    let c = Cache::new(CacheOptions::new(1 << 20)).unwrap();
    let s = Arc::new(store_with("o", 64 * BS));
    let r = c.map(s.clone(), "o", MapOptions::new().placement(Placement::Pool));
    assert!(
        matches!(r, Err(Error::BudgetTooSmall { budget, batch }) if budget == 1 << 20 && batch == 2 << 20),
        "{r:?}"
    );
    assert_eq!((c.used(), c.pool_bytes()), (0, 0));
    // The same budget serves in-place mappings.
    let m = c.map(s, "o", MapOptions::new()).unwrap();
    assert_eq!(m.pin_shared(5).unwrap()[0], 5);
}

/// Failed reads into a frame give the frame back to the pool and count the failure; a retry
/// reads the right bytes.
#[test]
fn failed_reads_of_a_pool_mapping_give_their_frames_back() {
    let (_, s, [fail_reads, short_reads, _]) = flaky(64 * BS);
    let c = Cache::new(CacheOptions::new(2 << 20).batch(8)).unwrap();
    // No readahead: every read the test fails is one it asked for.
    let m = c
        .map(
            s,
            "o",
            MapOptions::new()
                .placement(Placement::Pool)
                .readahead(false),
        )
        .unwrap();
    drop(m.pin_shared(0).unwrap());
    assert_eq!(c.used(), 2 << 20, "one chunk, charged whole");
    fail_reads.store(true, Ordering::Relaxed);
    assert!(matches!(m.pin_shared(3), Err(Error::Io { op: "read", .. })));
    assert!(matches!(
        m.ensure_cached(4 * BS as u64, 4 * BS as u64),
        Err(Error::Io { .. })
    ));
    let e = m.pin_each([9, 10], 2, |_, _| ()).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    fail_reads.store(false, Ordering::Relaxed);
    short_reads.store(true, Ordering::Relaxed);
    assert!(matches!(m.pin_shared(3), Err(Error::ShortIo { .. })));
    short_reads.store(false, Ordering::Relaxed);
    assert_eq!(m.resident(), 1, "only buffer 0 is resident");
    // One pin, four in the batch, at least one of the stream, one short read.
    assert!(c.stats().read_failures >= 7, "{:?}", c.stats());
    // Every frame came back: the whole chunk loads without growing the pool.
    m.ensure_cached(0, 64 * BS as u64).unwrap();
    assert_eq!((c.used(), c.pool_bytes()), (2 << 20, 2 << 20));
    for i in 0..64 {
        assert!(m.pin_shared(i).unwrap().iter().all(|&b| b as u64 == i));
    }
    m.unmap().unwrap();
    assert_eq!(c.used(), 0);
}
