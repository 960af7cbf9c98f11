//! The write-ahead rule, observed from below: a store wrapper records every write and sync of
//! the log and every page write of the data file, and checks at each page write that the log
//! was durable up to the LSN in the page's header (the batch that last changed it) before
//! the page reached the data file.
//!
//! Commits here are not synced (`sync_commits = false`), so the log is durable only where
//! something made it so: page write-backs (eviction, `writeback`, `msync`) must do it through
//! the before-write-back hook.

mod common;

use std::io;
use std::sync::Arc;

use common::*;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use ucache::store::{IoBuf, MemoryStore, Object, OpenOptions, Store};
use ucache::{Cache, CacheOptions, MapOptions};
use ucache_kv::{Kv, WriteBatch};

const LOG_START: u64 = 4096;

#[derive(Default)]
struct Record {
    /// The header's base LSN, as written and as synced.
    base_written: u64,
    base: u64,
    /// End of the log's records in the file, as written and as synced.
    end_written: u64,
    /// The greatest LSN the log has been durable up to.
    durable: u64,
    page_writes: u64,
    logged_page_writes: u64,
    violations: Vec<String>,
}

struct Recorder {
    inner: Arc<dyn Store>,
    page_size: usize,
    rec: Arc<Mutex<Record>>,
}

struct RecObject {
    inner: Arc<dyn Object>,
    is_log: bool,
    page_size: usize,
    rec: Arc<Mutex<Record>>,
}

impl Store for Recorder {
    fn open(&self, object: &str, options: OpenOptions) -> ucache::Result<Arc<dyn Object>> {
        Ok(Arc::new(RecObject {
            inner: self.inner.open(object, options)?,
            is_log: object == "wal",
            page_size: self.page_size,
            rec: self.rec.clone(),
        }))
    }
}

impl RecObject {
    fn check_pages(&self, buf: &[u8], offset: u64) {
        let mut r = self.rec.lock();
        for (k, page) in buf.chunks(self.page_size).enumerate() {
            let lsn = u64::from_le_bytes(page[..8].try_into().unwrap());
            r.page_writes += 1;
            if lsn > 0 {
                r.logged_page_writes += 1;
            }
            if lsn > r.durable {
                let at = offset / self.page_size as u64 + k as u64;
                let d = r.durable;
                r.violations.push(format!(
                    "page {at} with LSN {lsn} written, log durable to {d}"
                ));
            }
        }
    }
}

impl Object for RecObject {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.is_log {
            let mut r = self.rec.lock();
            r.end_written = r.end_written.min(len);
        }
        self.inner.set_len(len)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.is_log {
            let mut r = self.rec.lock();
            if offset < LOG_START {
                r.base_written = u64::from_le_bytes(buf[16..24].try_into().unwrap());
            } else {
                r.end_written = r.end_written.max(offset + buf.len() as u64);
            }
        } else {
            self.check_pages(buf, offset);
        }
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()?;
        if self.is_log {
            let mut r = self.rec.lock();
            r.base = r.base_written;
            let reached = r.base + r.end_written.saturating_sub(LOG_START);
            r.durable = r.durable.max(reached);
        }
        Ok(())
    }
    fn write_batch(&self, reqs: &[IoBuf], out: &mut Vec<io::Result<()>>) {
        out.clear();
        for q in reqs {
            out.push(self.write_at(q.as_slice(), q.offset()));
        }
    }
}

fn recorder(page_size: usize) -> (Arc<Recorder>, Arc<Mutex<Record>>) {
    let rec = Arc::new(Mutex::new(Record::default()));
    let r = Recorder {
        inner: Arc::new(MemoryStore::new()),
        page_size,
        rec: rec.clone(),
    };
    (Arc::new(r), rec)
}

/// The recorder catches a page written ahead of its log: without the store's hook, a page
/// stamped with an LSN the log never reached is flagged.
#[test]
fn the_recorder_catches_a_violation() {
    let (store, rec) = recorder(4096);
    let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    let m = cache
        .map(
            store,
            "data",
            MapOptions::new().len(4 * 4096).writable(true).create(true),
        )
        .unwrap();
    m.pin_exclusive(1).unwrap().write::<u64>(0, 1234u64.to_le());
    m.msync(0, m.len()).unwrap();
    assert_eq!(
        rec.lock().violations.len(),
        1,
        "{:?}",
        rec.lock().violations
    );
}

#[test]
fn no_page_reaches_the_data_file_before_its_log_records() {
    within("write-ahead rule", || {
        let (store, rec) = recorder(4096);
        let mut o = options(store, 4096, 16);
        o.sync_commits = false;
        o.checkpoint_bytes = 256 << 10;
        let kv = Arc::new(Kv::open(o.clone()).unwrap());
        let readers: Vec<_> = (0..2)
            .map(|t| {
                let kv = kv.clone();
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                    for _ in 0..3000 {
                        let n = rng.gen_range(0..4000);
                        if let Some(v) = kv.get(&key(n)).unwrap() {
                            assert_eq!(parse_value(&v).0, n);
                        }
                    }
                })
            })
            .collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        for round in 0..1500u64 {
            let mut b = WriteBatch::new();
            for _ in 0..rng.gen_range(1..6) {
                let n = rng.gen_range(0..4000);
                b.put(key(n), value(n, round, rng.gen_range(10..300)));
            }
            kv.write(&b).unwrap();
            match round % 200 {
                50 => kv.mapping().writeback(0, kv.mapping().len()).unwrap(),
                100 => kv.mapping().msync(0, kv.mapping().len()).unwrap(),
                _ => {}
            }
        }
        for r in readers {
            r.join().unwrap();
        }
        let kv = Arc::into_inner(kv).unwrap();
        kv.close().unwrap();
        let r = rec.lock();
        assert!(
            r.violations.is_empty(),
            "{:?}",
            &r.violations[..r.violations.len().min(5)]
        );
        assert!(
            r.logged_page_writes > 200,
            "pages were written back while their batches were not yet synced: {} of {}",
            r.logged_page_writes,
            r.page_writes
        );
    });
}
