//! A write batch in progress: the pages it changed, held exclusively until it ends, with their
//! images from before the batch, so that it can be logged (the bytes that changed) or undone
//! (the images put back).
//!
//! Holding every changed page exclusively until the batch is logged is what makes a batch
//! atomic to readers: a reader that reaches a changed page waits for the batch to end (or
//! restarts, reading optimistically), so it sees the page before or after the whole batch.
//! It is also the no-steal rule's first half: a pinned page cannot be evicted. Once logged,
//! the page's entry in the LSN table ([`PageLsns`]) says which log position must be durable
//! before it may be written, which the eviction veto and the before-write-back hook enforce.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use ucache::Mapping;

use crate::error::{KvError, Result};
use crate::meta;
use crate::node;
use crate::pages::Pages;
use crate::wal::Wal;

/// Per page, the LSN of the last logged batch that changed it (`u64::MAX` while a batch that
/// has not been logged yet holds it): the eviction veto's table. Kept beside the cache so the
/// veto never reads a page.
pub type PageLsns = [AtomicU64];

/// Runs of bytes that differ between `before` and `after` (from byte 8: the page LSN is not
/// logged), merging runs closer than 16 bytes.
pub fn diff(before: &[u8], after: &[u8]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut i = 8;
    let n = after.len();
    while i < n {
        if before[i] == after[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < n && before[i] != after[i] {
            i += 1;
        }
        match runs.last_mut() {
            Some((_, e)) if start - *e < 16 => *e = i,
            _ => runs.push((start, i)),
        }
    }
    runs
}

struct Touched {
    page: u64,
    before: Vec<u8>,
    fresh: bool,
    prev_lsn: u64,
}

/// The batch being written, under the store's writer lock.
pub struct WriteTxn<'m, P: Pages> {
    map: &'m P,
    lsns: &'m PageLsns,
    held: HashMap<u64, P::Exclusive<'m>>,
    touched: Vec<Touched>,
}

impl<'m, P: Pages> WriteTxn<'m, P> {
    pub fn new(map: &'m P, lsns: &'m PageLsns) -> Self {
        WriteTxn {
            map,
            lsns,
            held: HashMap::new(),
            touched: Vec::new(),
        }
    }

    pub fn page_size(&self) -> usize {
        self.map.page_size()
    }

    /// Runs `f` on page `id` as it is now: this batch's copy if it changed the page, the
    /// cache's otherwise (pinned shared while `f` runs).
    pub fn read<R>(&self, id: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        if let Some(g) = self.held.get(&id) {
            return Ok(f(&g[..]));
        }
        let g = self.map.pin_shared(id)?;
        Ok(f(&g[..]))
    }

    /// Page `id` for writing, pinned exclusively until the batch ends.
    pub fn write(&mut self, id: u64) -> Result<&mut [u8]> {
        if !self.held.contains_key(&id) {
            let g = self.map.pin_exclusive(id)?;
            self.hold(id, g, false);
        }
        Ok(&mut self.held.get_mut(&id).unwrap()[..])
    }

    fn hold(&mut self, id: u64, g: P::Exclusive<'m>, fresh: bool) {
        let prev_lsn = self.lsns[id as usize].swap(u64::MAX, Ordering::AcqRel);
        self.touched.push(Touched {
            page: id,
            before: g.to_vec(),
            fresh,
            prev_lsn,
        });
        self.held.insert(id, g);
    }

    /// A new page from the allocator (the meta page's high-water mark), zeroed and held.
    pub fn allocate(&mut self) -> Result<u64> {
        let ps = self.page_size();
        let m = self.write(0)?;
        let id = meta::next_page(&m[..]);
        let cap = meta::capacity(&m[..]);
        if id >= cap {
            return Err(KvError::Full {
                pages: cap,
                page_size: ps,
            });
        }
        meta::set_next_page(m, id + 1);
        let g = self.map.pin_overwrite(id)?;
        self.hold(id, g, true);
        Ok(id)
    }

    /// The log record of the batch: per changed page, its number, whether it is new (replay
    /// zeroes it first), and the runs of bytes that changed.
    fn record(&self) -> Vec<u8> {
        let mut rec = Vec::new();
        let mut pages = 0u32;
        rec.extend_from_slice(&0u32.to_le_bytes());
        for t in &self.touched {
            let now = &self.held[&t.page][..];
            let runs = diff(&t.before, now);
            if runs.is_empty() && !t.fresh {
                continue;
            }
            pages += 1;
            rec.extend_from_slice(&t.page.to_le_bytes());
            rec.push(t.fresh as u8);
            rec.extend_from_slice(&(runs.len() as u32).to_le_bytes());
            for (s, e) in runs {
                rec.extend_from_slice(&(s as u32).to_le_bytes());
                rec.extend_from_slice(&((e - s) as u32).to_le_bytes());
                rec.extend_from_slice(&now[s..e]);
            }
        }
        rec[..4].copy_from_slice(&pages.to_le_bytes());
        rec
    }

    /// Logs the batch (in memory: the caller makes it durable) and lets go of its pages,
    /// stamped with the record's LSN. Returns that LSN, or `None` if nothing changed.
    pub fn commit(self, wal: &Wal) -> Result<Option<u64>> {
        self.commit_with(|rec| wal.append(rec))
    }

    /// As [`WriteTxn::commit`], with `log` appending the record (and returning its LSN).
    pub fn commit_with(mut self, log: impl FnOnce(&[u8]) -> Result<u64>) -> Result<Option<u64>> {
        let rec = self.record();
        if u32::from_le_bytes(rec[..4].try_into().unwrap()) == 0 {
            self.restore_lsns();
            return Ok(None);
        }
        let lsn = match log(&rec) {
            Ok(l) => l,
            Err(e) => {
                self.abort();
                return Err(e);
            }
        };
        for t in &self.touched {
            let g = self.held.get_mut(&t.page).unwrap();
            node::set_lsn(&mut g[..], lsn);
            self.lsns[t.page as usize].store(lsn, Ordering::Release);
        }
        Ok(Some(lsn))
    }

    fn restore_lsns(&mut self) {
        for t in &self.touched {
            self.lsns[t.page as usize].store(t.prev_lsn, Ordering::Release);
        }
    }

    /// Puts every changed page back as it was before the batch.
    pub fn abort(mut self) {
        for t in &self.touched {
            let g = self.held.get_mut(&t.page).unwrap();
            g.copy_from_slice(&t.before);
        }
        self.restore_lsns();
    }
}

/// Applies one logged batch to the pages (recovery's redo): new pages are zeroed first, then
/// each run of changed bytes is written. Idempotent, and correct on a page holding any mix of
/// states since the last checkpoint (a torn write), since every byte changed since then is in
/// some run of the log.
pub fn redo(map: &Mapping, rec: &[u8]) -> Result<()> {
    let bad = |why: &str| KvError::Corrupt(format!("log record: {why}"));
    let mut at = 0usize;
    let mut take = move |n: usize| -> Result<&[u8]> {
        let s = rec.get(at..at + n).ok_or_else(|| bad("truncated"))?;
        at += n;
        Ok(s)
    };
    let pages = u32::from_le_bytes(take(4)?.try_into().unwrap());
    for _ in 0..pages {
        let id = u64::from_le_bytes(take(8)?.try_into().unwrap());
        let fresh = take(1)?[0] != 0;
        let runs = u32::from_le_bytes(take(4)?.try_into().unwrap());
        if id >= map.buffers() {
            return Err(bad("page past the data file's capacity"));
        }
        let mut g = if fresh {
            map.pin_overwrite(id)?
        } else {
            map.pin_exclusive(id)?
        };
        for _ in 0..runs {
            let off = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
            let len = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
            let bytes = take(len)?;
            let dst = g
                .get_mut(off..off + len)
                .ok_or_else(|| bad("run outside the page"))?;
            dst.copy_from_slice(bytes);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::diff;

    #[test]
    fn diff_covers_every_changed_byte_but_the_lsn() {
        let before = vec![0u8; 256];
        let mut after = before.clone();
        after[0] = 1; // the LSN: not logged
        after[20] = 1;
        after[30] = 1; // within 16 of 20: merged
        after[100] = 1;
        after[255] = 1;
        assert_eq!(
            diff(&before, &after),
            vec![(20, 31), (100, 101), (255, 256)]
        );
        let mut replay = before.clone();
        for (s, e) in diff(&before, &after) {
            replay[s..e].copy_from_slice(&after[s..e]);
        }
        assert_eq!(replay[8..], after[8..]);
    }
}
