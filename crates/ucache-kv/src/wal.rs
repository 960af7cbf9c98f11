//! The write-ahead log: one object of the store, written around the cache (plain writes and
//! syncs, never through a mapping).
//!
//! ```text
//! [0, 4096): two header slots (at 0 and 2048), each: magic, sequence, base LSN, checksum
//! [4096, ..): records, back to back: length u32, checksum u64, payload
//! ```
//!
//! An LSN is a position in the log's byte stream since the store was created: the byte at file
//! offset `4096 + k` has LSN `base + k`. A checkpoint empties the log and writes a header whose
//! base is the LSN reached, so LSNs keep growing over the store's life. The header is written
//! to the older slot, so a torn header write leaves the other one valid.
//!
//! A record's checksum covers its length and payload and is seeded with its LSN, so bytes of
//! an older log at the same place never pass for a record of this one. Recovery reads records
//! until the first that is short or fails its checksum (a torn tail) and cuts the log there.
//!
//! Group commit: appends go to a buffer in memory under a short lock; whoever needs the log
//! durable up to an LSN takes the flush lock and writes and syncs everything buffered, so the
//! commits that arrived meanwhile ride on one sync. A failed write or sync poisons the log
//! (the kernel may have dropped what it had not synced): every later append and flush fails.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use ucache::store::Object;

use crate::error::{KvError, Result};

pub const LOG_START: u64 = 4096;
const SLOT_BYTES: u64 = 2048;
const MAGIC: u64 = 0x7563_6b76_2d77_616c; // "uckv-wal"
const RECORD_HEADER: usize = 12;

/// A 64-bit checksum, eight bytes at a time, seeded (with the LSN).
pub fn checksum(seed: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(K);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap());
        h = (h ^ w).wrapping_mul(K).rotate_left(31);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(tail)).wrapping_mul(K);
    h ^ (h >> 29)
}

struct Pending {
    /// Appended records not yet written to the file.
    buf: Vec<u8>,
    /// The LSN of `buf[0]`.
    start: u64,
}

#[derive(Clone, Copy)]
struct Header {
    seq: u64,
    base: u64,
}

/// The log.
pub struct Wal {
    obj: Arc<dyn Object>,
    pending: Mutex<Pending>,
    /// Held by the one thread writing and syncing; the header's sequence and base.
    flush: Mutex<Header>,
    appended: AtomicU64,
    durable: AtomicU64,
    failed: Mutex<Option<String>>,
    /// Nanoseconds callers spent in [`Wal::flush_to`] that had to wait for the log (its lock,
    /// the write, the sync), summed over threads: the time the log costs its callers.
    wait_ns: AtomicU64,
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> KvError {
    move |source| KvError::Io { op, source }
}

impl Wal {
    /// Opens the log in `obj`, creating it if empty. Returns the log, positioned after its
    /// last whole record (a torn tail is cut off), and how many whole records it holds (for
    /// [`Wal::replay`]). Records are read one at a time, so recovery needs memory for the
    /// largest record, not for the log.
    pub fn open(obj: Arc<dyn Object>) -> Result<(Wal, usize)> {
        let len = obj.len().map_err(io_err("stat"))?;
        let header = if len < LOG_START {
            None
        } else {
            let mut h = vec![0u8; LOG_START as usize];
            read_exact(&*obj, &mut h, 0)?;
            [0, SLOT_BYTES as usize]
                .iter()
                .filter_map(|&at| parse_header(&h[at..at + 32]))
                .max_by_key(|h| h.seq)
        };
        let (header, records, end) = match header {
            Some(h) => {
                let (records, valid) = scan(&*obj, h.base, len, &mut |_| Ok(()))?;
                (h, records, h.base + valid)
            }
            None if len > 0 && obj_has_data(&*obj, len)? => {
                return Err(KvError::Corrupt(
                    "the write-ahead log has no valid header".into(),
                ))
            }
            None => (Header { seq: 0, base: 1 }, 0, 1),
        };
        let wal = Wal {
            obj,
            pending: Mutex::new(Pending {
                buf: Vec::new(),
                start: end,
            }),
            flush: Mutex::new(header),
            appended: AtomicU64::new(end),
            durable: AtomicU64::new(end),
            failed: Mutex::new(None),
            wait_ns: AtomicU64::new(0),
        };
        // Cut the torn tail (and anything after it), so a record appended later is never
        // followed by stale bytes that could parse.
        let file_end = {
            let h = wal.flush.lock();
            LOG_START + (end - h.base)
        };
        if len != file_end || len < LOG_START {
            if len < LOG_START {
                let h = wal.flush.lock();
                let (seq, base) = (h.seq, h.base);
                drop(h);
                wal.write_header(seq + 1, base)?;
            }
            wal.obj.set_len(file_end).map_err(io_err("truncate"))?;
            wal.obj.sync().map_err(io_err("sync"))?;
        }
        Ok((wal, records))
    }

    /// Runs `f` on each whole record since the last checkpoint, in order (recovery's redo;
    /// before anything is appended). Returns how many there were.
    pub fn replay(&self, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<usize> {
        let base = self.flush.lock().base;
        let len = LOG_START + (self.appended() - base);
        Ok(scan(&*self.obj, base, len, f)?.0)
    }

    /// Appends one record; returns the LSN at its end. In memory only: see [`Wal::flush_to`].
    pub fn append(&self, payload: &[u8]) -> Result<u64> {
        self.check()?;
        let mut p = self.pending.lock();
        let lsn = p.start + p.buf.len() as u64;
        let len = (RECORD_HEADER + payload.len()) as u32;
        let mut sum_input = Vec::with_capacity(4 + payload.len());
        sum_input.extend_from_slice(&len.to_le_bytes());
        sum_input.extend_from_slice(payload);
        p.buf.extend_from_slice(&len.to_le_bytes());
        p.buf
            .extend_from_slice(&checksum(lsn, &sum_input).to_le_bytes());
        p.buf.extend_from_slice(payload);
        let end = lsn + len as u64;
        self.appended.store(end, Ordering::Release);
        Ok(end)
    }

    /// The LSN at the end of the last appended record.
    pub fn appended(&self) -> u64 {
        self.appended.load(Ordering::Acquire)
    }
    /// The LSN up to which the log is durable.
    pub fn durable(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }
    /// Bytes of records since the last checkpoint.
    pub fn log_bytes(&self) -> u64 {
        self.appended() - self.flush.lock().base
    }
    /// Bytes appended but not yet written.
    pub fn buffered(&self) -> usize {
        self.pending.lock().buf.len()
    }

    fn check(&self) -> Result<()> {
        match &*self.failed.lock() {
            Some(why) => Err(KvError::LogFailed(why.clone())),
            None => Ok(()),
        }
    }

    fn fail(&self, why: String) -> KvError {
        self.failed.lock().get_or_insert(why.clone());
        KvError::LogFailed(why)
    }

    /// Makes the log durable up to `lsn` (at most what was appended): writes and syncs all
    /// that is buffered, once, for every commit waiting meanwhile.
    pub fn flush_to(&self, lsn: u64) -> Result<()> {
        let lsn = lsn.min(self.appended());
        if self.durable() >= lsn {
            return Ok(());
        }
        let t0 = std::time::Instant::now();
        let r = self.flush_to_slow(lsn);
        self.wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    /// Nanoseconds spent waiting for the log in [`Wal::flush_to`], summed over threads.
    pub fn wait_ns(&self) -> u64 {
        self.wait_ns.load(Ordering::Relaxed)
    }

    fn flush_to_slow(&self, lsn: u64) -> Result<()> {
        let header = self.flush.lock();
        self.check()?;
        if self.durable() >= lsn {
            return Ok(());
        }
        let (data, start) = {
            let p = self.pending.lock();
            (p.buf.clone(), p.start)
        };
        let off = LOG_START + (start - header.base);
        if !data.is_empty() {
            if let Err(e) = self.obj.write_at(&data, off) {
                return Err(self.fail(format!("write at {off}: {e}")));
            }
        }
        if let Err(e) = self.obj.sync() {
            return Err(self.fail(format!("sync: {e}")));
        }
        {
            let mut p = self.pending.lock();
            p.buf.drain(..data.len());
            p.start += data.len() as u64;
        }
        self.durable
            .store(start + data.len() as u64, Ordering::Release);
        Ok(())
    }

    /// Makes everything appended durable.
    pub fn flush_all(&self) -> Result<()> {
        self.flush_to(self.appended())
    }

    /// Empties the log after a checkpoint made every logged change durable in the data file:
    /// cuts the records, then writes a header whose base is the LSN reached. A crash between
    /// the two leaves the old header over no records, which recovers to the same state.
    pub fn reset(&self) -> Result<()> {
        self.flush_all()?;
        let h = self.flush.lock();
        self.check()?;
        let (seq, base) = (h.seq + 1, self.appended());
        drop(h);
        debug_assert_eq!(self.pending.lock().buf.len(), 0);
        if let Err(e) = self.obj.set_len(LOG_START).and_then(|()| self.obj.sync()) {
            return Err(self.fail(format!("truncate: {e}")));
        }
        self.write_header(seq, base)
    }

    fn write_header(&self, seq: u64, base: u64) -> Result<()> {
        let mut h = self.flush.lock();
        let mut b = [0u8; 32];
        b[..8].copy_from_slice(&MAGIC.to_le_bytes());
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        b[16..24].copy_from_slice(&base.to_le_bytes());
        let sum = checksum(seq, &b[..24]);
        b[24..].copy_from_slice(&sum.to_le_bytes());
        let at = (seq % 2) * SLOT_BYTES;
        if let Err(e) = self.obj.write_at(&b, at).and_then(|()| self.obj.sync()) {
            return Err(self.fail(format!("header: {e}")));
        }
        h.seq = seq;
        h.base = base;
        Ok(())
    }
}

fn read_exact(obj: &dyn Object, buf: &mut [u8], off: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match obj.read_at(&mut buf[done..], off + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(KvError::Io {
                    op: "read",
                    source: e,
                })
            }
        }
    }
    buf[done..].fill(0);
    Ok(())
}

/// Whether any byte of the log's header area is set (a log whose headers are both broken,
/// as opposed to a log never written).
fn obj_has_data(obj: &dyn Object, len: u64) -> Result<bool> {
    let mut h = vec![0u8; len.min(LOG_START) as usize];
    read_exact(obj, &mut h, 0)?;
    Ok(h.iter().any(|&b| b != 0))
}

fn parse_header(b: &[u8]) -> Option<Header> {
    let word = |k: usize| u64::from_le_bytes(b[k * 8..k * 8 + 8].try_into().unwrap());
    (word(0) == MAGIC && word(3) == checksum(word(1), &b[..24])).then(|| Header {
        seq: word(1),
        base: word(2),
    })
}

/// Reads the whole records from the start of the log (LSN `base`) up to file offset `len`,
/// one at a time, running `f` on each payload; stops at the first record that is short or
/// fails its checksum. Returns the number of records and the bytes they take.
fn scan(
    obj: &dyn Object,
    base: u64,
    len: u64,
    f: &mut dyn FnMut(&[u8]) -> Result<()>,
) -> Result<(usize, u64)> {
    let mut at = 0u64;
    let mut count = 0;
    let mut rec = Vec::new();
    let body = len.saturating_sub(LOG_START);
    while body - at >= RECORD_HEADER as u64 {
        let mut head = [0u8; RECORD_HEADER];
        read_exact(obj, &mut head, LOG_START + at)?;
        let n = u32::from_le_bytes(head[..4].try_into().unwrap()) as u64;
        if n < RECORD_HEADER as u64 || n > body - at {
            break;
        }
        let sum = u64::from_le_bytes(head[4..12].try_into().unwrap());
        rec.clear();
        rec.resize(n as usize - 8, 0);
        rec[..4].copy_from_slice(&head[..4]);
        read_exact(obj, &mut rec[4..], LOG_START + at + RECORD_HEADER as u64)?;
        if checksum(base + at, &rec) != sum {
            break;
        }
        f(&rec[4..])?;
        count += 1;
        at += n;
    }
    Ok((count, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ucache::store::{MemoryStore, OpenOptions, Store};

    fn log(store: &MemoryStore) -> Arc<dyn Object> {
        store.open("wal", OpenOptions::create()).unwrap()
    }

    /// Opens the log and collects its records.
    fn open(store: &MemoryStore) -> Result<(Wal, Vec<Vec<u8>>)> {
        let (w, n) = Wal::open(log(store))?;
        let mut recs = Vec::new();
        let mut collect = |r: &[u8]| {
            recs.push(r.to_vec());
            Ok(())
        };
        assert_eq!(w.replay(&mut collect)?, n);
        Ok((w, recs))
    }

    #[test]
    fn records_survive_reopen_and_a_torn_tail_is_cut() {
        let store = MemoryStore::new();
        store.insert("wal", Vec::new());
        let (w, recs) = open(&store).unwrap();
        assert!(recs.is_empty());
        let a = w.append(b"first").unwrap();
        let b = w.append(&[7u8; 5000]).unwrap();
        assert!(b > a);
        w.flush_to(a).unwrap();
        assert!(w.durable() >= b, "one flush wrote everything buffered");
        drop(w);
        let mut bytes = store.get("wal").unwrap();
        let (_, recs) = open(&store).unwrap();
        assert_eq!(recs, vec![b"first".to_vec(), vec![7u8; 5000]]);
        // Tear the last record: only the first survives, and the log is cut after it.
        let n = bytes.len();
        bytes[n - 10] ^= 1;
        store.insert("wal", bytes);
        let (w, recs) = open(&store).unwrap();
        assert_eq!(recs, vec![b"first".to_vec()]);
        assert_eq!(store.get("wal").unwrap().len() as u64, LOG_START + 12 + 5);
        let c = w.append(b"after").unwrap();
        w.flush_to(c).unwrap();
        let (_, recs) = open(&store).unwrap();
        assert_eq!(recs, vec![b"first".to_vec(), b"after".to_vec()]);
    }

    #[test]
    fn reset_empties_the_log_and_lsns_keep_growing() {
        let store = MemoryStore::new();
        store.insert("wal", Vec::new());
        let (w, _) = open(&store).unwrap();
        let a = w.append(b"x").unwrap();
        w.reset().unwrap();
        assert_eq!(w.log_bytes(), 0);
        let b = w.append(b"y").unwrap();
        assert!(b > a);
        w.flush_all().unwrap();
        let (w2, recs) = open(&store).unwrap();
        assert_eq!(recs, vec![b"y".to_vec()]);
        assert_eq!(w2.appended(), b);
        // Both header slots torn: a typed error, not an empty log.
        let mut bytes = store.get("wal").unwrap();
        bytes[3] ^= 1;
        bytes[2048 + 3] ^= 1;
        store.insert("wal", bytes);
        assert!(matches!(open(&store), Err(KvError::Corrupt(_))));
    }
}
