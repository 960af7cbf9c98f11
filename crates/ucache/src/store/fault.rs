//! A store wrapper that injects failures, for testing how the cache copes with a bad store.
//!
//! Faults are switched at runtime through a shared [`FaultConfig`] of atomics, so a test can
//! let a workload run, make the store "go away" in the middle of it, check that the cache
//! reports errors and keeps dirty data, then bring the store back and check that it recovers.
//! Every request of a batch goes through the same fault logic as a single call.
//!
//! ```
//! use std::sync::atomic::Ordering;
//! use ucache::store::{FaultStore, MemoryStore, Object, OpenOptions, Store};
//!
//! let inner = MemoryStore::new();
//! inner.insert("t", vec![1; 4096]);
//! let store = FaultStore::new(std::sync::Arc::new(inner));
//! let object = store.open("t", OpenOptions::read_only()).unwrap();
//! let mut buf = vec![0u8; 4096];
//! store.config().fail_reads.store(true, Ordering::Relaxed);
//! assert!(object.read_at(&mut buf, 0).is_err());
//! store.config().fail_reads.store(false, Ordering::Relaxed);
//! assert_eq!(object.read_at(&mut buf, 0).unwrap(), 4096);
//! assert_eq!(store.config().reads(), 2);
//! ```

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::{IoBuf, Object, OpenOptions, Store};
use crate::error::{Error, Result};

/// Which faults are on, and how many calls have been seen. Shared by a [`FaultStore`] and every
/// [`FaultObject`] it opens; change it at any time, from any thread.
///
/// Counters count every request that reached the fault layer (one per batch element), whether
/// or not a fault was injected into it.
#[derive(Debug, Default)]
pub struct FaultConfig {
    /// Opening objects fails.
    pub fail_open: AtomicBool,
    /// Every read fails.
    pub fail_reads: AtomicBool,
    /// Every write fails; nothing reaches the inner object.
    pub fail_writes: AtomicBool,
    /// Every sync fails.
    pub fail_sync: AtomicBool,
    /// The next sync fails, once: the flag clears itself as that sync fails.
    pub fail_next_sync: AtomicBool,
    /// A failed sync throws away the writes made since the last good sync, as Linux may after
    /// a failed `fsync` (it marks the pages clean and the data is gone, "fsyncgate"): each
    /// object then reads as it did at its last good sync. Writes are recorded (their previous
    /// bytes, read first) only while this is on.
    pub lose_unsynced_on_failed_sync: AtomicBool,
    /// Reads return only the first half of the requested bytes, though the object is longer: a
    /// contract violation the cache must report as a short read, not treat as end of object.
    pub short_reads: AtomicBool,
    /// When non-zero, the n-th, 2n-th, ... read (counted by `reads`) fails.
    pub fail_every_nth_read: AtomicU64,
    /// Delay before each read call, in microseconds.
    pub read_latency_us: AtomicU64,
    /// Delay before each write call, in microseconds.
    pub write_latency_us: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    delays: AtomicU64,
    delayed_us: AtomicU64,
}

impl FaultConfig {
    /// Switches every fault that makes the store unreachable (open, read, write, sync) on or
    /// off at once: the server going away and coming back.
    pub fn set_unavailable(&self, down: bool) {
        self.fail_open.store(down, Relaxed);
        self.fail_reads.store(down, Relaxed);
        self.fail_writes.store(down, Relaxed);
        self.fail_sync.store(down, Relaxed);
    }

    /// Read requests seen so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Relaxed)
    }

    /// Write requests seen so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Relaxed)
    }

    /// Sync calls seen so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Relaxed)
    }

    /// Latency delays applied so far (one per read or write call, or per batch, that found its
    /// latency non-zero). Tests check that latency was injected through this, never through a
    /// clock: a sleep's length is up to the scheduler.
    pub fn delays(&self) -> u64 {
        self.delays.load(Relaxed)
    }

    /// The total of the delays applied so far, in microseconds, as requested (the time
    /// actually slept may be longer).
    pub fn delayed_us(&self) -> u64 {
        self.delayed_us.load(Relaxed)
    }

    pub fn reset_counters(&self) {
        self.reads.store(0, Relaxed);
        self.writes.store(0, Relaxed);
        self.syncs.store(0, Relaxed);
        self.delays.store(0, Relaxed);
        self.delayed_us.store(0, Relaxed);
    }

    /// Counts one read and decides its fault.
    fn next_read(&self) -> ReadFault {
        let n = self.reads.fetch_add(1, Relaxed) + 1;
        let every = self.fail_every_nth_read.load(Relaxed);
        if self.fail_reads.load(Relaxed) || n.checked_rem(every) == Some(0) {
            ReadFault::Fail
        } else if self.short_reads.load(Relaxed) {
            ReadFault::Short
        } else {
            ReadFault::None
        }
    }

    /// Counts one write and decides whether it fails.
    fn next_write_fails(&self) -> bool {
        self.writes.fetch_add(1, Relaxed);
        self.fail_writes.load(Relaxed)
    }

    fn read_delay(&self) {
        self.delay(&self.read_latency_us);
    }

    fn write_delay(&self) {
        self.delay(&self.write_latency_us);
    }

    /// Sleeps for the latency in `us`, if any, and counts it.
    fn delay(&self, us: &AtomicU64) {
        let us = us.load(Relaxed);
        if us > 0 {
            self.delays.fetch_add(1, Relaxed);
            self.delayed_us.fetch_add(us, Relaxed);
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadFault {
    None,
    Fail,
    Short,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected {what} fault"))
}

/// Wraps another store; every object it opens is a [`FaultObject`] sharing its config.
#[derive(Clone)]
pub struct FaultStore {
    inner: Arc<dyn Store>,
    config: Arc<FaultConfig>,
}

impl FaultStore {
    /// With every fault off.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self::with_config(inner, Arc::default())
    }

    /// With a config the test already holds (or shares with other wrappers).
    pub fn with_config(inner: Arc<dyn Store>, config: Arc<FaultConfig>) -> Self {
        FaultStore { inner, config }
    }

    pub fn config(&self) -> &Arc<FaultConfig> {
        &self.config
    }
}

impl Store for FaultStore {
    fn open(&self, object: &str, options: OpenOptions) -> Result<Arc<dyn Object>> {
        if self.config.fail_open.load(Relaxed) {
            return Err(Error::io("open", object, 0, injected("open")));
        }
        let inner = self.inner.open(object, options)?;
        Ok(Arc::new(FaultObject::new(inner, self.config.clone())))
    }
}

/// Wraps another object, injecting the faults its [`FaultConfig`] asks for. `name`, `len` and
/// `set_len` pass straight through.
pub struct FaultObject {
    inner: Arc<dyn Object>,
    config: Arc<FaultConfig>,
    /// With [`FaultConfig::lose_unsynced_on_failed_sync`]: the bytes each write since the last
    /// good sync replaced, oldest first, to be put back when a sync fails.
    unsynced: parking_lot::Mutex<Vec<(u64, Saved)>>,
}

/// A page of memory aligned as `O_DIRECT` needs it.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Page([u8; 4096]);

/// The bytes a write replaced, kept in 4 KiB-aligned memory: an `O_DIRECT` object (a direct
/// `FileStore`, a `UringStore`) refuses to read into or write from unaligned memory, so with a
/// plain `Vec<u8>` the old bytes could not be read and a failed sync lost nothing there.
struct Saved {
    pages: Vec<Page>,
    len: usize,
}

impl Saved {
    fn new(len: usize) -> Saved {
        Saved {
            pages: vec![Page([0; 4096]); len.div_ceil(4096)],
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `pages` holds at least `len` initialised bytes (`len` only ever shrinks).
        unsafe { std::slice::from_raw_parts(self.pages.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.pages.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

impl FaultObject {
    pub fn new(inner: Arc<dyn Object>, config: Arc<FaultConfig>) -> Self {
        FaultObject {
            inner,
            config,
            unsynced: parking_lot::Mutex::new(Vec::new()),
        }
    }

    /// Records what a write of `len` bytes at `offset` is about to replace, if failed syncs
    /// are to lose unsynced writes.
    fn remember(&self, offset: u64, len: usize) {
        if !self.config.lose_unsynced_on_failed_sync.load(Relaxed) {
            return;
        }
        let mut old = Saved::new(len);
        let mut got = 0;
        while got < len {
            match self
                .inner
                .read_at(&mut old.bytes_mut()[got..], offset + got as u64)
            {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        old.len = got;
        self.unsynced.lock().push((offset, old));
    }

    /// Puts back what the writes since the last good sync replaced, newest first.
    fn lose_unsynced(&self) {
        let undo = std::mem::take(&mut *self.unsynced.lock());
        for (offset, old) in undo.into_iter().rev() {
            let _ = self.inner.write_at(old.bytes(), offset);
        }
        let _ = self.inner.sync();
    }

    pub fn config(&self) -> &Arc<FaultConfig> {
        &self.config
    }
}

impl Object for FaultObject {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }

    fn accepts_unaligned(&self) -> bool {
        self.inner.accepts_unaligned()
    }

    fn reads_ahead(&self) -> bool {
        self.inner.reads_ahead()
    }

    fn requests(&self) -> Option<super::StoreRequests> {
        self.inner.requests()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.config.read_delay();
        match self.config.next_read() {
            ReadFault::Fail => Err(injected("read")),
            ReadFault::Short => {
                let half = buf.len() / 2;
                self.inner.read_at(&mut buf[..half], offset)
            }
            ReadFault::None => self.inner.read_at(buf, offset),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.config.write_delay();
        if self.config.next_write_fails() {
            return Err(injected("write"));
        }
        self.remember(offset, buf.len());
        self.inner.write_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.config.syncs.fetch_add(1, Relaxed);
        if self.config.fail_sync.load(Relaxed) || self.config.fail_next_sync.swap(false, Relaxed) {
            if self.config.lose_unsynced_on_failed_sync.load(Relaxed) {
                self.lose_unsynced();
            }
            return Err(injected("sync"));
        }
        self.inner.sync()?;
        self.unsynced.lock().clear();
        Ok(())
    }

    /// Decides each request's fault, then passes the survivors to the inner object as one batch
    /// so that its own batching still happens. The delay applies once: a batch's requests are in
    /// flight together, so it pays one round trip, not one per request.
    fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
        out.clear();
        if reqs.is_empty() {
            return;
        }
        self.config.read_delay();
        let mut pass = Vec::with_capacity(reqs.len());
        let mut pass_at = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            let len = match self.config.next_read() {
                ReadFault::Fail => {
                    out.push(Err(injected("read")));
                    continue;
                }
                ReadFault::Short => r.len() / 2,
                ReadFault::None => r.len(),
            };
            // Until the inner store answers: a store that returns too few results must not
            // turn into reads that seem to have succeeded.
            out.push(Err(missing_result()));
            // SAFETY: a prefix of `r`'s memory, which the caller lent us until this call
            // returns; `r` itself is not touched while the inner batch runs.
            pass.push(unsafe { IoBuf::new(r.ptr(), len, r.offset()) });
            pass_at.push(i);
        }
        let mut inner_out = Vec::with_capacity(pass.len());
        self.inner.read_batch(&mut pass, &mut inner_out);
        for (i, result) in pass_at.into_iter().zip(inner_out) {
            out[i] = result;
        }
    }

    /// As [`FaultObject::read_batch`], for writes.
    fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
        out.clear();
        if reqs.is_empty() {
            return;
        }
        self.config.write_delay();
        let mut pass = Vec::with_capacity(reqs.len());
        let mut pass_at = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            if self.config.next_write_fails() {
                out.push(Err(injected("write")));
                continue;
            }
            out.push(Err(missing_result()));
            self.remember(r.offset(), r.len());
            // SAFETY: the same memory as `r`, lent to us until this call returns; `r` itself is
            // not touched while the inner batch runs.
            pass.push(unsafe { IoBuf::new(r.ptr(), r.len(), r.offset()) });
            pass_at.push(i);
        }
        let mut inner_out = Vec::with_capacity(pass.len());
        self.inner.write_batch(&pass, &mut inner_out);
        for (i, result) in pass_at.into_iter().zip(inner_out) {
            out[i] = result;
        }
    }
}

fn missing_result() -> io::Error {
    io::Error::other("the wrapped store returned too few batch results")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    fn setup() -> (FaultStore, Arc<dyn Object>, MemoryStore) {
        let mem = MemoryStore::new();
        mem.insert("obj", (0..16384u32).map(|i| i as u8).collect());
        let store = FaultStore::new(Arc::new(mem.clone()));
        let obj = store.open("obj", OpenOptions::read_write()).unwrap();
        (store, obj, mem)
    }

    fn batch(buf: &mut [u8]) -> Vec<IoBuf<'_>> {
        buf.chunks_mut(4096)
            .enumerate()
            // SAFETY: disjoint chunks of `buf`, untouched while the batch runs.
            .map(|(i, c)| unsafe { IoBuf::new(c.as_mut_ptr(), c.len(), i as u64 * 4096) })
            .collect()
    }

    #[test]
    fn faults_switch_on_and_off() {
        let (store, obj, mem) = setup();
        let cfg = store.config().clone();
        let mut buf = vec![0u8; 4096];

        assert_eq!(obj.read_at(&mut buf, 0).unwrap(), 4096);
        cfg.fail_reads.store(true, Relaxed);
        let e = obj.read_at(&mut buf, 0).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert!(e.to_string().contains("injected read fault"));
        cfg.fail_reads.store(false, Relaxed);
        assert_eq!(obj.read_at(&mut buf, 4096).unwrap(), 4096);
        assert_eq!(buf[0], 0);
        assert_eq!(buf[1], 1);

        cfg.fail_writes.store(true, Relaxed);
        assert!(obj.write_at(&[0xFF; 4096], 0).is_err());
        assert_eq!(
            mem.get("obj").unwrap()[0],
            0,
            "a failed write must not reach the store"
        );
        cfg.fail_writes.store(false, Relaxed);
        obj.write_at(&[0xFF; 4096], 0).unwrap();
        assert_eq!(mem.get("obj").unwrap()[0], 0xFF);

        cfg.fail_sync.store(true, Relaxed);
        assert!(obj.sync().is_err());
        cfg.fail_sync.store(false, Relaxed);
        obj.sync().unwrap();

        assert_eq!((cfg.reads(), cfg.writes(), cfg.syncs()), (3, 2, 2));
        cfg.reset_counters();
        assert_eq!(cfg.reads(), 0);
    }

    #[test]
    fn server_goes_away_and_comes_back() {
        let (store, obj, _) = setup();
        let cfg = store.config();
        cfg.set_unavailable(true);
        assert!(matches!(
            store.open("obj", OpenOptions::read_only()),
            Err(Error::Io { .. })
        ));
        assert!(obj.read_at(&mut [0u8; 16], 0).is_err());
        assert!(obj.write_at(&[0u8; 16], 0).is_err());
        assert!(obj.sync().is_err());
        cfg.set_unavailable(false);
        assert!(store.open("obj", OpenOptions::read_only()).is_ok());
        assert_eq!(obj.read_at(&mut [0u8; 16], 0).unwrap(), 16);
    }

    /// A failed sync throws away what was written since the last good one, batches included,
    /// and fails only once with `fail_next_sync`.
    #[test]
    fn a_failed_sync_loses_the_unsynced_writes() {
        let (store, obj, mem) = setup();
        let cfg = store.config();
        cfg.lose_unsynced_on_failed_sync.store(true, Relaxed);
        obj.write_at(&[7u8; 16], 0).unwrap();
        obj.sync().unwrap();
        obj.write_at(&[8u8; 16], 0).unwrap();
        obj.write_at(&[9u8; 16], 8).unwrap();
        let mut buf = vec![5u8; 8192];
        let mut out = Vec::new();
        obj.write_batch(&batch(&mut buf), &mut out);
        assert!(out.iter().all(|r| r.is_ok()));
        cfg.fail_next_sync.store(true, Relaxed);
        assert!(obj.sync().is_err());
        let now = mem.get("obj").unwrap();
        assert_eq!(now[..16], [7u8; 16], "back to the last good sync");
        assert_eq!(now[4096], 0, "the batch is lost too");
        assert_eq!(now[4097], 1);
        // Once: the next sync succeeds, and keeps what it syncs.
        obj.write_at(&[6u8; 16], 0).unwrap();
        obj.sync().unwrap();
        assert_eq!(mem.get("obj").unwrap()[..16], [6u8; 16]);
    }

    /// The same over an `O_DIRECT` file, which refuses unaligned memory: the old bytes used to
    /// be read into a plain `Vec`, that read failed, and the failed sync lost nothing (found by
    /// tests/crash_soak.rs, whose direct and io_uring runs could not see a missing rewrite).
    #[test]
    fn a_failed_sync_loses_the_unsynced_writes_of_a_direct_file() {
        let scratch = crate::store::testutil::scratch();
        if !scratch.direct_ok() {
            return;
        }
        let path = scratch.path().join("obj");
        let store = FaultStore::new(Arc::new(crate::store::FileStore::direct()));
        let obj = store
            .open(
                path.to_str().unwrap(),
                OpenOptions {
                    write: true,
                    create: true,
                },
            )
            .unwrap();
        let cfg = store.config();
        cfg.lose_unsynced_on_failed_sync.store(true, Relaxed);
        let mut page = crate::store::testutil::AlignedBuf::new(8192);
        page.fill(7);
        obj.write_at(&page, 0).unwrap();
        obj.sync().unwrap();
        page.fill(8);
        obj.write_at(&page, 0).unwrap();
        cfg.fail_next_sync.store(true, Relaxed);
        assert!(obj.sync().is_err());
        let mut back = crate::store::testutil::AlignedBuf::new(8192);
        assert_eq!(obj.read_at(&mut back, 0).unwrap(), 8192);
        assert!(back.iter().all(|&b| b == 7), "back to the last good sync");
    }

    #[test]
    fn short_reads_return_half() {
        let (store, obj, _) = setup();
        store.config().short_reads.store(true, Relaxed);
        let mut buf = vec![0u8; 4096];
        assert_eq!(obj.read_at(&mut buf, 0).unwrap(), 2048);
        let mut buf = vec![0u8; 16384];
        let mut reqs = batch(&mut buf);
        let mut out = Vec::new();
        obj.read_batch(&mut reqs, &mut out);
        assert!(out.iter().all(|r| matches!(r, Ok(2048))));
    }

    #[test]
    fn every_nth_read_fails_per_batch_element() {
        let (store, obj, _) = setup();
        store.config().fail_every_nth_read.store(2, Relaxed);
        let mut buf = vec![0u8; 16384];
        let mut reqs = batch(&mut buf);
        let mut out = Vec::new();
        obj.read_batch(&mut reqs, &mut out);
        let ok: Vec<bool> = out.iter().map(|r| r.is_ok()).collect();
        assert_eq!(ok, [true, false, true, false]);
        // The surviving requests got their data, in the right places.
        assert_eq!(buf[4], 4);
        assert_eq!(&buf[4096..4100], &[0, 0, 0, 0]);
        assert_eq!(buf[8192 + 7], 7);
        assert_eq!(store.config().reads(), 4);
    }

    #[test]
    fn write_batch_faults_per_element() {
        let (store, obj, mem) = setup();
        let mut buf = vec![0xEEu8; 8192];
        let reqs = batch(&mut buf);
        let mut out = Vec::new();
        store.config().fail_writes.store(true, Relaxed);
        obj.write_batch(&reqs, &mut out);
        assert!(out.iter().all(|r| r.is_err()));
        assert_eq!(mem.get("obj").unwrap()[0], 0);
        store.config().fail_writes.store(false, Relaxed);
        obj.write_batch(&reqs, &mut out);
        assert!(out.iter().all(|r| r.is_ok()));
        assert!(mem.get("obj").unwrap()[..8192].iter().all(|&b| b == 0xEE));
        assert_eq!(store.config().writes(), 4);
    }

    #[test]
    fn latency_is_applied() {
        let (store, obj, _) = setup();
        obj.read_at(&mut [0u8; 16], 0).unwrap();
        assert_eq!(store.config().delays(), 0, "no latency set, no delay");
        store.config().read_latency_us.store(2_000, Relaxed);
        obj.read_at(&mut [0u8; 16], 0).unwrap();
        assert_eq!(store.config().delays(), 1);
        assert_eq!(store.config().delayed_us(), 2_000);
        obj.write_at(&[0u8; 16], 0).unwrap();
        assert_eq!(store.config().delays(), 1, "write latency is separate");
        store.config().write_latency_us.store(500, Relaxed);
        obj.write_at(&[0u8; 16], 0).unwrap();
        let mut buf = vec![0u8; 8192];
        let mut reqs = batch(&mut buf);
        let mut out = Vec::new();
        obj.read_batch(&mut reqs, &mut out);
        assert_eq!(
            store.config().delays(),
            3,
            "one delay per batch, not per element"
        );
        assert_eq!(store.config().delayed_us(), 2_000 + 500 + 2_000);
        store.config().reset_counters();
        assert_eq!(store.config().delayed_us(), 0);
    }

    /// A wrapped store that answers only the first request of a batch.
    struct Forgetful(MemoryStore);
    struct ForgetfulObject(Arc<dyn Object>);

    impl Store for Forgetful {
        fn open(&self, object: &str, o: OpenOptions) -> Result<Arc<dyn Object>> {
            Ok(Arc::new(ForgetfulObject(self.0.open(object, o)?)))
        }
    }

    impl Object for ForgetfulObject {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn len(&self) -> io::Result<u64> {
            self.0.len()
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.0.set_len(len)
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.0.write_at(buf, offset)
        }
        fn sync(&self) -> io::Result<()> {
            self.0.sync()
        }
        fn read_batch(&self, reqs: &mut [IoBuf], out: &mut Vec<io::Result<usize>>) {
            self.0.read_batch(&mut reqs[..1], out);
        }
        fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
            self.0.write_batch(&reqs[..1], out);
        }
    }

    #[test]
    fn requests_the_wrapped_store_never_answered_are_errors() {
        let mem = MemoryStore::new();
        mem.insert("obj", vec![0; 16384]);
        let store = FaultStore::new(Arc::new(Forgetful(mem.clone())));
        let obj = store.open("obj", OpenOptions::read_write()).unwrap();
        let mut buf = vec![0xEEu8; 16384];
        let mut reqs = batch(&mut buf);
        let mut wrote = Vec::new();
        obj.write_batch(&reqs, &mut wrote);
        assert!(wrote[0].is_ok());
        assert!(wrote[1..].iter().all(|r| r.is_err()), "{wrote:?}");
        assert_eq!(mem.get("obj").unwrap()[4096], 0, "never written");
        let mut read = Vec::new();
        obj.read_batch(&mut reqs, &mut read);
        assert!(matches!(read[0], Ok(4096)));
        assert!(read[1..].iter().all(|r| r.is_err()), "{read:?}");
    }
}
