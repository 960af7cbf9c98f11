//! Opening a store: checking its files, creating a new one, and replaying the log.
//!
//! Recovery is physical redo of committed batches. Each log record is one whole batch (the
//! runs of bytes it changed, per page), written only when the batch is complete, so a batch
//! is committed exactly when its record is whole in the log; a torn last record is a batch
//! whose commit never returned, and is dropped. Replaying the records since the last
//! checkpoint, in order, onto the data file brings every page to its last committed state:
//! - the data file holds each page as of the checkpoint or later (a checkpoint syncs every
//!   page; later write-backs wrote committed states only, the eviction veto and the pins of
//!   a batch in progress keep uncommitted ones in memory);
//! - every byte changed since the checkpoint is in some run of the log, so replay overwrites
//!   it with its last committed value, whatever state (or mix of states, after a torn page
//!   write) the data file held. Bytes no run covers did not change since the checkpoint.
//!
//! Replay goes through the cache like any write, and ends with a checkpoint (the pages are
//! synced and the log emptied), so a crash during recovery recovers again from the same log.
//!
//! Why not logical redo (replaying puts and deletes)? It needs a tree that is consistent on
//! disk, which a data file holding pages from different moments is not.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use ucache::store::{OpenOptions, Store};
use ucache::Mapping;

use crate::error::{KvError, Result};
use crate::meta;
use crate::node::{self, Kind};
use crate::txn::redo;
use crate::wal::Wal;

/// What the data file says before it is mapped.
pub enum DataState {
    /// No store yet (no file, an empty file, or a meta page never written).
    New,
    /// A store with this many pages of capacity.
    Existing { capacity: u64 },
}

/// The unit of an `O_DIRECT` read: the largest logical block size of common devices.
const BLOCK: usize = 4096;

/// Reads the data file's meta page straight from the store and checks it against the page size
/// asked for and the file's length.
pub fn inspect(store: &Arc<dyn Store>, name: &str, page_size: usize) -> Result<DataState> {
    let obj = match store.open(name, OpenOptions::read_only()) {
        Ok(o) => o,
        Err(ucache::Error::NotFound { .. }) => return Ok(DataState::New),
        Err(e) => return Err(e.into()),
    };
    let len = obj
        .len()
        .map_err(|source| KvError::Io { op: "stat", source })?;
    if len == 0 {
        return Ok(DataState::New);
    }
    // One whole block at a 4 KiB-aligned address, so `O_DIRECT` files read it too.
    let mut block = vec![0u8; 2 * BLOCK];
    let at = block.as_ptr().align_offset(BLOCK);
    let first = &mut block[at..at + BLOCK];
    let n = obj
        .read_at(first, 0)
        .map_err(|source| KvError::Io { op: "read", source })?;
    let first = &first[..n.min(64)];
    if first.iter().all(|&b| b == 0) {
        return Ok(DataState::New);
    }
    if meta::magic(first) == meta::MAGIC_V1 {
        return Err(KvError::Corrupt(format!(
            "{name} is a ucache-kv data file of format 1 (nodes without key heads); this \
             version reads format 2 only: load the data into a new store"
        )));
    }
    if meta::magic(first) != meta::MAGIC {
        return Err(KvError::Corrupt(format!(
            "{name} is not a ucache-kv data file"
        )));
    }
    if meta::page_size(first) != page_size {
        return Err(KvError::BadPageSize(page_size));
    }
    let capacity = meta::capacity(first);
    let want = capacity * page_size as u64;
    if len < want {
        return Err(KvError::Corrupt(format!(
            "{name} is truncated: {len} bytes, its {capacity} pages need {want}"
        )));
    }
    Ok(DataState::Existing { capacity })
}

/// Writes a new store's meta page and empty root leaf.
pub fn create(map: &Mapping) -> Result<()> {
    let mut m = map.pin_overwrite(0)?;
    meta::init(&mut m, map.buffers());
    drop(m);
    let mut root = map.pin_overwrite(1)?;
    node::init(&mut root, Kind::Leaf);
    drop(root);
    // The root before the meta page that names it: a crash between leaves a file whose meta
    // page is still zero, which opens as a new store.
    map.msync_buffers(&[1])?;
    map.msync_buffers(&[0])?;
    Ok(())
}

/// Replays the log's records onto the mapped data file; returns how many there were.
pub fn replay(map: &Mapping, wal: &Wal) -> Result<usize> {
    let n = wal.replay(&mut |rec| redo(map, rec))?;
    let m = map.pin_shared(0)?;
    if meta::magic(&m[..]) != meta::MAGIC || meta::root(&m[..]) == 0 {
        return Err(KvError::Corrupt(
            "the meta page is broken after replay".into(),
        ));
    }
    Ok(n)
}

/// A fresh table of page LSNs, all zero (every page's changes durable: it was just opened).
pub fn page_lsns(pages: u64) -> Arc<[AtomicU64]> {
    (0..pages).map(|_| AtomicU64::new(0)).collect()
}

/// Checks that a new data file is not paired with a log that has records (the data file was
/// lost or replaced): refuse rather than replay into nothing.
pub fn check_pairing(state: &DataState, records: usize) -> Result<()> {
    if matches!(state, DataState::New) && records > 0 {
        return Err(KvError::Corrupt(
            "the data file is missing or empty but the log holds committed batches".into(),
        ));
    }
    Ok(())
}
