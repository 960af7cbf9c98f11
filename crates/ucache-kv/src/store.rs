//! [`Kv`]: the store's public face. Opening (with recovery), reads, write batches with group
//! commit, and checkpoints.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use ucache::policy::{Clock, Veto};
use ucache::store::{FileStore, OpenOptions, Store};
use ucache::{BeforeWriteback, Cache, CacheOptions, MapOptions, Mapping, Placement};

use crate::error::{KvError, Result};
use crate::node;
use crate::recovery::{self, DataState};
use crate::tree::{self, Direction};
use crate::txn::WriteTxn;
use crate::wal::Wal;

/// The placement [`KvOptions::in_dir`] picks: the pool. Measured with `ucache-kv bench`
/// (docs/results/2026-11-26-kv, runs 5 to 7), it was 1.2 to 1.4× in place out of memory on
/// zram, where a miss is cheap and the page fault and zeroing in place are a large share of
/// it, and level with in place in memory and on the virtio disk. Its cost, a budget of at
/// least 2 MiB, is refused with a typed error, never hit silently.
pub const DEFAULT_PLACEMENT: Placement = Placement::Pool;

/// How to open a store.
#[derive(Clone)]
pub struct KvOptions {
    /// Where the data file lives, and the log unless `log_store` names another store: any
    /// ucache store (files, memory, a fault-injecting or recording wrapper).
    pub store: Arc<dyn Store>,
    /// Where the log lives instead, when it differs from `store` (`None`: in `store`). A store
    /// of `O_DIRECT` files ([`FileStore::direct`]) needs one: its reads and writes must be whole
    /// blocks, and log records are not.
    pub log_store: Option<Arc<dyn Store>>,
    /// The data file's object name.
    pub data: String,
    /// The log's object name.
    pub wal: String,
    /// Bytes per page (a power of two from 4 KiB to 64 KiB; a store keeps the size it was
    /// created with).
    pub page_size: usize,
    /// The cache's memory budget.
    pub memory_bytes: u64,
    /// Pages the data file can hold, for a new store (the data file is created at this size,
    /// sparse; the mapping reserves address space for it, not memory).
    pub capacity_pages: u64,
    /// Each commit is durable when `write` returns (true, the default); false: commits are
    /// logged in memory and made durable by the next sync (a later synced commit, a
    /// checkpoint, [`Kv::sync`], or a page write-back), so a crash may lose the latest ones,
    /// never part of one.
    pub sync_commits: bool,
    /// A checkpoint runs once the log holds this many bytes.
    pub checkpoint_bytes: u64,
    /// How long a load waits for memory when every resident page is pinned or vetoed (a batch
    /// larger than the budget): after that it fails with the cache's `BudgetExhausted`.
    pub budget_wait: std::time::Duration,
    /// Where resident pages live (`MapOptions::placement`): `Placement::InPlace`, at their own
    /// address in the mapping, or `Placement::Pool`, in frames of a pool the cache owns and
    /// reuses, so a miss costs a read and no page fault. A pool is charged to the budget in
    /// whole 2 MiB chunks, so it needs `memory_bytes` of at least [`POOL_CHUNK`]; a smaller
    /// budget is refused with [`KvError::BudgetTooSmall`] before any file is touched.
    pub placement: Placement,
}

/// The unit a pool placement charges to the budget (ucache's pool chunk; a page is at most
/// 64 KiB, so never larger than it). A pool store's `memory_bytes` must be at least this.
pub const POOL_CHUNK: u64 = 2 << 20;

/// The smallest budget a store with these options accepts. The store raises a smaller
/// in-place budget to 16 pages itself (so a batch that splits a path of nodes always has
/// room); a pool cannot go below one chunk, and silently quadrupling a budget of, say, 512 KiB
/// would hide from the caller that the store uses more memory than asked, so that is an error.
fn min_budget(o: &KvOptions) -> u64 {
    match o.placement {
        Placement::Pool => POOL_CHUNK.max(16 * o.page_size as u64),
        _ => 0,
    }
}

impl KvOptions {
    /// A store in directory `dir` (files `data` and `wal`), 4 KiB pages, 64 MiB of cache on
    /// the pool placement ([`DEFAULT_PLACEMENT`]), room for 16 GiB of pages, synced commits,
    /// checkpoints every 64 MiB of log.
    pub fn in_dir(dir: impl AsRef<Path>) -> Self {
        let d = dir.as_ref();
        KvOptions {
            store: Arc::new(FileStore::new()),
            log_store: None,
            data: d.join("data").to_string_lossy().into_owned(),
            wal: d.join("wal").to_string_lossy().into_owned(),
            page_size: 4096,
            memory_bytes: 64 << 20,
            capacity_pages: 4 << 20,
            sync_commits: true,
            checkpoint_bytes: 64 << 20,
            budget_wait: std::time::Duration::from_secs(5),
            placement: DEFAULT_PLACEMENT,
        }
    }

    /// Like [`KvOptions::in_dir`], with the data file read and written `O_DIRECT` and the log
    /// through the page cache. Pages are then held once, in the store's budget, instead of
    /// also in the kernel's page cache, and a miss reads straight into its frame: no page-cache
    /// page to allocate, charge, copy from and reclaim for every miss
    /// (docs/results/2026-11-26-kv-direct). On a file system without `O_DIRECT`, opening
    /// fails with `KvError::Cache(ucache::Error::BadArgument(..))`.
    pub fn in_dir_direct(dir: impl AsRef<Path>) -> Self {
        KvOptions {
            store: Arc::new(FileStore::direct()),
            log_store: Some(Arc::new(FileStore::new())),
            ..Self::in_dir(dir)
        }
    }
}

/// One operation of a [`WriteBatch`].
#[derive(Clone, Debug)]
pub enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

/// Puts and deletes applied atomically by [`Kv::write`], in order.
#[derive(Clone, Debug, Default)]
pub struct WriteBatch {
    pub ops: Vec<Op>,
}

impl WriteBatch {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(Op::Put(key.into(), value.into()));
        self
    }
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(Op::Delete(key.into()));
        self
    }
}

/// A read-write transaction in progress ([`Kv::update`]): its writes, kept aside until it
/// commits, and its reads, which see them.
pub struct Txn<'a> {
    kv: &'a Kv,
    batch: WriteBatch,
    /// This transaction's writes by key: the last value put, or `None` for a delete.
    own: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Txn<'_> {
    /// `key`'s value as this transaction sees it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.own.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.kv.get(key),
        }
    }

    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        self.batch.put(key, value);
        self.own.insert(key.to_vec(), Some(value.to_vec()));
    }

    pub fn delete(&mut self, key: &[u8]) {
        self.batch.delete(key);
        self.own.insert(key.to_vec(), None);
    }

    /// As [`Kv::scan`], with this transaction's own writes merged in.
    pub fn scan(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        use std::ops::Bound;
        let bounds = (
            from.map_or(Bound::Unbounded, Bound::Included),
            to.map_or(Bound::Unbounded, Bound::Excluded),
        );
        if matches!((from, to), (Some(f), Some(t)) if f >= t) || limit == 0 {
            return Ok(Vec::new());
        }
        let own = self.own.range::<[u8], _>(bounds);
        let mut own: Box<dyn Iterator<Item = _>> = match dir {
            Direction::Forward => Box::new(own),
            Direction::Backward => Box::new(own.rev()),
        };
        let mut stored = self.kv.range(from, to, dir);
        // "a comes before b" in the scan's direction.
        let before = |a: &[u8], b: &[u8]| match dir {
            Direction::Forward => a < b,
            Direction::Backward => a > b,
        };
        let mut out = Vec::new();
        let (mut o, mut s) = (own.next(), stored.next().transpose()?);
        while out.len() < limit {
            match (&o, &s) {
                (None, None) => break,
                (Some((ok, ov)), sv) if sv.as_ref().is_none_or(|(sk, _)| !before(sk, ok)) => {
                    // Ours wins: it shadows a stored entry of the same key.
                    if sv.as_ref().is_some_and(|(sk, _)| sk == *ok) {
                        s = stored.next().transpose()?;
                    }
                    if let Some(v) = ov {
                        out.push((ok.to_vec(), v.clone()));
                    }
                    o = own.next();
                }
                _ => {
                    out.push(s.take().expect("a stored entry"));
                    s = stored.next().transpose()?;
                }
            }
        }
        Ok(out)
    }
}

/// A range iterator of a [`Kv`] ([`Kv::range`]).
pub type Cursor<'a> = tree::Cursor<'a, Mapping>;

/// A B+tree key-value store on a ucache mapping. Share it between threads by reference (it is
/// `Sync`): reads run in parallel with each other and with the one writer.
pub struct Kv {
    // Declared first so it is dropped (written back, with the log flushed first by its hook)
    // before the log it depends on.
    map: Mapping,
    wal: Arc<Wal>,
    lsns: Arc<[AtomicU64]>,
    writer: Mutex<()>,
    sync_commits: bool,
    checkpoint_bytes: u64,
    _cache: Cache,
}

impl Kv {
    /// Opens the store, creating it if its data file is missing or empty, and recovers it:
    /// every batch whose `write` returned (with synced commits) is there, and no part of any
    /// other.
    pub fn open(o: KvOptions) -> Result<Kv> {
        if !o.page_size.is_power_of_two() || !(4096..=65536).contains(&o.page_size) {
            return Err(KvError::BadPageSize(o.page_size));
        }
        let min = min_budget(&o);
        if o.memory_bytes < min {
            return Err(KvError::BudgetTooSmall {
                budget: o.memory_bytes,
                min,
            });
        }
        let state = recovery::inspect(&o.store, &o.data, o.page_size)?;
        let wal_obj = o
            .log_store
            .as_ref()
            .unwrap_or(&o.store)
            .open(&o.wal, OpenOptions::create())?;
        let (wal, records) = Wal::open(wal_obj)?;
        recovery::check_pairing(&state, records)?;
        let wal = Arc::new(wal);
        let capacity = match state {
            DataState::New => o.capacity_pages.max(2),
            DataState::Existing { capacity } => capacity,
        };
        let lsns = recovery::page_lsns(capacity);
        let cache = Cache::new(
            CacheOptions::new(o.memory_bytes.max(16 * o.page_size as u64))
                .batch(8)
                .budget_wait(o.budget_wait),
        )?;
        // The eviction veto: a page may go only once the batch that last changed it is
        // logged (no-steal of uncommitted changes; a batch in progress marks its pages
        // u64::MAX). The hook: before any write-back, the log is durable up to the page's LSN.
        let (veto_lsns, veto_wal) = (lsns.clone(), wal.clone());
        let policy = Veto::new(Clock::new(), move |i| {
            veto_lsns[i as usize].load(Ordering::Acquire) <= veto_wal.appended()
        });
        let hook_wal = wal.clone();
        let hook: BeforeWriteback = Arc::new(move |_, bytes: &[u8]| {
            hook_wal
                .flush_to(node::page_lsn(bytes))
                .map_err(std::io::Error::other)
        });
        let map = cache.map(
            o.store.clone(),
            &o.data,
            MapOptions::new()
                .buffer_size(o.page_size)
                .placement(o.placement)
                .len(capacity * o.page_size as u64)
                .writable(true)
                .create(true)
                .policy(Box::new(policy))
                // A descent's misses are index-driven, but leaves written in key order sit
                // side by side in the file, so a scan's next leaf looked like a sequential
                // stream and set off readahead windows of up to a quarter of the budget:
                // YCSB E out of memory on zram ran at 0.26× LMDB with a p99 of 3.7 ms, and at
                // 0.57× with 0.34 ms without it (docs/results/2026-11-26-kv-zram).
                .readahead(false)
                .before_writeback(hook),
        )?;
        let kv = Kv {
            map,
            wal,
            lsns,
            writer: Mutex::new(()),
            sync_commits: o.sync_commits,
            checkpoint_bytes: o.checkpoint_bytes,
            _cache: cache,
        };
        match state {
            DataState::New => recovery::create(&kv.map)?,
            DataState::Existing { .. } => {
                if recovery::replay(&kv.map, &kv.wal)? > 0 {
                    kv.checkpoint()?;
                }
            }
        }
        Ok(kv)
    }

    /// The longest key: a sixteenth of a page.
    pub fn max_key_len(&self) -> usize {
        self.map.buffer_size() / 16
    }
    /// The longest value: a quarter of a page.
    pub fn max_value_len(&self) -> usize {
        self.map.buffer_size() / 4
    }

    fn check_key(&self, k: &[u8]) -> Result<()> {
        let max = self.max_key_len();
        if k.is_empty() || k.len() > max {
            return Err(KvError::KeyTooLarge { len: k.len(), max });
        }
        Ok(())
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_key(key)?;
        tree::get(&self.map, key)
    }

    /// Entries with `from <= key < to` (unbounded where `None`), in key order in direction
    /// `dir`, at most `limit`. Not a snapshot: each leaf is read atomically, but a batch that
    /// commits during the scan may show in the leaves read after it and not in those before.
    pub fn scan(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        dir: Direction,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        tree::scan(&self.map, from, to, dir, limit)
    }

    /// An iterator over the entries with `from <= key < to` (unbounded where `None`) in
    /// direction `dir`, one leaf read at a time: it holds no pin or lock between leaves, so it
    /// may live as long as the caller likes beside writers and eviction. The same isolation as
    /// [`Kv::scan`]: every entry is a committed value of its key, in order, and keys present for
    /// the whole iteration are returned exactly once.
    pub fn range(&self, from: Option<&[u8]>, to: Option<&[u8]>, dir: Direction) -> Cursor<'_> {
        tree::Cursor::new(&self.map, from, to, dir, usize::MAX)
    }

    /// Inserts or replaces one value (a batch of one).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write(&b)
    }

    /// Removes `key` (a batch of one); whether it was there.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut b = WriteBatch::new();
        b.delete(key);
        let mut found = false;
        self.write_with(&b, |f| found = f)?;
        Ok(found)
    }

    /// Applies the batch atomically. Isolation: batches are serialized by one writer lock;
    /// readers see each key before or after a whole batch (the pages a batch changes stay
    /// pinned exclusively until it is logged), and may see a batch before its `write` has
    /// returned (before it is durable: after a crash it is gone, as is its `write`'s `Ok`).
    /// Bad input (a key or value too large) is refused before anything changes; an error in
    /// the middle (an IO error loading a page, a full store) undoes the whole batch.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_with(batch, |_| {})
    }

    fn write_with(&self, batch: &WriteBatch, deleted: impl FnMut(bool)) -> Result<()> {
        self.check_batch(batch)?;
        let lock = self.writer.lock();
        let lsn = self.apply_locked(batch, deleted)?;
        drop(lock);
        self.commit_durable(lsn)
    }

    /// Bad input (a key or value too large), refused before anything changes.
    fn check_batch(&self, batch: &WriteBatch) -> Result<()> {
        for op in &batch.ops {
            match op {
                Op::Put(k, v) => {
                    self.check_key(k)?;
                    let max = self.max_value_len();
                    if v.len() > max {
                        return Err(KvError::ValueTooLarge { len: v.len(), max });
                    }
                }
                Op::Delete(k) => self.check_key(k)?,
            }
        }
        Ok(())
    }

    /// Applies and logs a checked batch, under the writer lock: all of it or, on an error,
    /// none. The log position to make durable, if it logged anything.
    fn apply_locked(
        &self,
        batch: &WriteBatch,
        mut deleted: impl FnMut(bool),
    ) -> Result<Option<u64>> {
        let mut txn = WriteTxn::new(&self.map, &self.lsns);
        for op in &batch.ops {
            let r = match op {
                Op::Put(k, v) => tree::put(&mut txn, k, v),
                Op::Delete(k) => tree::delete(&mut txn, k).map(&mut deleted),
            };
            if let Err(e) = r {
                txn.abort();
                return Err(e);
            }
        }
        let lsn = txn.commit(&self.wal)?;
        if self.wal.log_bytes() >= self.checkpoint_bytes {
            self.checkpoint_locked()?;
        }
        Ok(lsn)
    }

    /// After the writer lock is released (so that commits behind it share the sync: group
    /// commit): makes the commit at `lsn` durable, or, with no-sync commits, keeps the log's
    /// buffer bounded.
    fn commit_durable(&self, lsn: Option<u64>) -> Result<()> {
        match lsn {
            Some(lsn) if self.sync_commits => self.wal.flush_to(lsn),
            Some(_) if self.wal.buffered() >= 4 << 20 => self.wal.flush_all(),
            _ => Ok(()),
        }
    }

    /// Runs `f` as one read-write transaction and commits what it wrote, atomically and (with
    /// synced commits) durably, if it returns `Ok`; an `Err` from `f` writes nothing.
    ///
    /// Isolation: serializable. `f` runs under the writer lock, so no other batch commits
    /// between its reads and its writes; its reads ([`Txn::get`], [`Txn::scan`]) see every
    /// committed batch and its own writes so far. Readers outside see none of its writes until
    /// it commits, and then all of them. Keep `f` short: it holds up every other writer.
    pub fn update<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> Result<R>) -> Result<R> {
        let lock = self.writer.lock();
        let mut t = Txn {
            kv: self,
            batch: WriteBatch::new(),
            own: std::collections::BTreeMap::new(),
        };
        let r = f(&mut t)?;
        self.check_batch(&t.batch)?;
        let lsn = self.apply_locked(&t.batch, |_| {})?;
        drop(lock);
        self.commit_durable(lsn)?;
        Ok(r)
    }

    /// Makes every commit so far durable (for no-sync commits).
    pub fn sync(&self) -> Result<()> {
        self.wal.flush_all()
    }

    /// Writes every changed page to the data file, syncs it and empties the log.
    pub fn checkpoint(&self) -> Result<()> {
        let _lock = self.writer.lock();
        self.checkpoint_locked()
    }

    fn checkpoint_locked(&self) -> Result<()> {
        self.wal.flush_all()?;
        self.map.msync(0, self.map.len())?;
        self.wal.reset()
    }

    /// Checkpoints and closes; errors that a drop would only print are returned.
    pub fn close(self) -> Result<()> {
        self.checkpoint()
    }

    /// The mapping under the store (statistics, residency).
    pub fn mapping(&self) -> &Mapping {
        &self.map
    }

    /// Pages in use (the allocator's high-water mark, meta page included).
    pub fn pages_used(&self) -> Result<u64> {
        Ok(self.map.read_optimistic(0, |v| crate::meta::next_page(v))?)
    }

    /// Nanoseconds threads have spent waiting for the log to be written and synced (commits,
    /// and write-backs held for the write-ahead rule), summed over threads.
    pub fn log_wait_ns(&self) -> u64 {
        self.wal.wait_ns()
    }

    /// Bytes in the log since the last checkpoint.
    pub fn log_bytes(&self) -> u64 {
        self.wal.log_bytes()
    }
}
