//! The systems the bench compares, behind one interface: the store on ucache, and LMDB.

use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};
use ucache_kv::{Kv, KvOptions, Placement, WriteBatch};

/// Point operations of a key-value store, callable from many threads.
pub trait System: Sync {
    /// Whether `key` has a value (its bytes are read).
    fn get(&self, key: &[u8]) -> bool;
    /// `key`'s value, copied out.
    fn read(&self, key: &[u8]) -> Option<Vec<u8>>;
    /// Reads up to `len` entries from `start` on, in key order, copying each out; how many.
    fn scan(&self, start: &[u8], len: usize) -> usize;
    /// Replaces `key`'s value, as one transaction.
    fn update(&self, key: &[u8], value: &[u8]);
    /// Loads keys `0..n` (8-byte big-endian) with `value(n)`, in large transactions.
    fn load(&self, n: u64, value: &dyn Fn(u64) -> Vec<u8>, progress: &dyn Fn(u64));
    /// Leaves the data set ready for the next run (after the measurement, not counted).
    fn finish(&self) {}
}

pub fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// ucache-kv, in place (`kv-ucache-inplace`) or on the pool placement (`kv-ucache-pool`),
/// each commit synced to the log before it returns (`sync`, with group commit), or not; its
/// data file read `O_DIRECT` (`direct`) or through the page cache.
pub struct KvUcache(pub Kv);

impl KvUcache {
    pub fn open(
        dir: &Path,
        memory: u64,
        placement: Placement,
        sync: bool,
        direct: bool,
    ) -> KvUcache {
        let mut o = if direct {
            KvOptions::in_dir_direct(dir)
        } else {
            KvOptions::in_dir(dir)
        };
        o.memory_bytes = memory;
        o.placement = placement;
        o.sync_commits = sync;
        // 256 MiB of pages: the per-page tables (states, LSNs) stay small inside the cgroup.
        o.capacity_pages = 1 << 16;
        o.checkpoint_bytes = 256 << 20;
        KvUcache(Kv::open(o).expect("open ucache-kv"))
    }
}

impl System for KvUcache {
    fn get(&self, key: &[u8]) -> bool {
        self.0.get(key).expect("get").is_some()
    }
    fn read(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(key).expect("get")
    }
    fn scan(&self, start: &[u8], len: usize) -> usize {
        self.0
            .range(Some(start), None, ucache_kv::Direction::Forward)
            .take(len)
            .fold(0, |n, e| {
                std::hint::black_box(e.expect("scan"));
                n + 1
            })
    }
    fn update(&self, key: &[u8], value: &[u8]) {
        self.0.put(key, value).expect("put")
    }
    fn load(&self, n: u64, value: &dyn Fn(u64) -> Vec<u8>, progress: &dyn Fn(u64)) {
        let mut b = WriteBatch::new();
        for i in 0..n {
            b.put(key(i).to_vec(), value(i));
            if b.ops.len() == 1000 {
                self.0.write(&b).expect("load");
                b.ops.clear();
                progress(i + 1);
            }
        }
        self.0.write(&b).expect("load");
        self.0.checkpoint().expect("checkpoint");
    }
    fn finish(&self) {
        // Empty the log, so the next run's open does not replay this run's updates.
        self.0.checkpoint().expect("checkpoint");
    }
}

/// LMDB through heed with `MDB_NORDAHEAD`, and its default durability (each commit synced)
/// or `MDB_NOSYNC` (the no-sync mode).
pub struct Lmdb {
    env: Env,
    db: Database<Bytes, Bytes>,
}

impl Lmdb {
    pub fn open(dir: &Path, sync: bool) -> Lmdb {
        std::fs::create_dir_all(dir).unwrap();
        let mut o = EnvOpenOptions::new();
        o.map_size(64 << 30).max_readers(256);
        let flags = if sync {
            EnvFlags::NO_READ_AHEAD
        } else {
            EnvFlags::NO_SYNC | EnvFlags::NO_READ_AHEAD
        };
        // SAFETY: NO_SYNC trades durability of the last commits for speed (the no-sync mode
        // compared here); the environment is opened once per process.
        let env = unsafe {
            o.flags(flags);
            o.open(dir).expect("open lmdb")
        };
        let mut w = env.write_txn().unwrap();
        let db = env.create_database(&mut w, None).unwrap();
        w.commit().unwrap();
        Lmdb { env, db }
    }
}

impl System for Lmdb {
    fn get(&self, key: &[u8]) -> bool {
        let r = self.env.read_txn().unwrap();
        // Copied out, as the store's get returns it.
        let got = self.db.get(&r, key).unwrap().map(<[u8]>::to_vec);
        std::hint::black_box(got).is_some()
    }
    fn read(&self, key: &[u8]) -> Option<Vec<u8>> {
        let r = self.env.read_txn().unwrap();
        self.db.get(&r, key).unwrap().map(<[u8]>::to_vec)
    }
    fn scan(&self, start: &[u8], len: usize) -> usize {
        let r = self.env.read_txn().unwrap();
        let range = (std::ops::Bound::Included(start), std::ops::Bound::Unbounded);
        self.db
            .range(&r, &range)
            .unwrap()
            .take(len)
            // Copied out, as the store's scan returns them.
            .fold(0, |n, e| {
                let (k, v) = e.unwrap();
                std::hint::black_box((k.to_vec(), v.to_vec()));
                n + 1
            })
    }
    fn update(&self, key: &[u8], value: &[u8]) {
        let mut w = self.env.write_txn().unwrap();
        self.db.put(&mut w, key, value).unwrap();
        w.commit().unwrap();
    }
    fn load(&self, n: u64, value: &dyn Fn(u64) -> Vec<u8>, progress: &dyn Fn(u64)) {
        let mut i = 0;
        while i < n {
            let mut w = self.env.write_txn().unwrap();
            let end = (i + 50_000).min(n);
            for j in i..end {
                self.db.put(&mut w, &key(j), &value(j)).unwrap();
            }
            w.commit().unwrap();
            i = end;
            progress(i);
        }
        self.env.force_sync().unwrap();
    }
}

/// The same B+tree over a plain file mmap, no log ([`crate::mmap`]).
pub struct KvMmap(pub crate::mmap::MmapKv);

impl KvMmap {
    pub fn open(dir: &Path) -> KvMmap {
        std::fs::create_dir_all(dir).unwrap();
        KvMmap(crate::mmap::MmapKv::open(&dir.join("data.mmap"), 1 << 16))
    }
}

impl System for KvMmap {
    fn get(&self, key: &[u8]) -> bool {
        self.0.get(key).is_some()
    }
    fn read(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.0.get(key)
    }
    fn scan(&self, start: &[u8], len: usize) -> usize {
        self.0.scan(start, len)
    }
    fn update(&self, key: &[u8], value: &[u8]) {
        self.0.write(&[(key, value)])
    }
    fn load(&self, n: u64, value: &dyn Fn(u64) -> Vec<u8>, progress: &dyn Fn(u64)) {
        let mut i = 0;
        while i < n {
            let end = (i + 1000).min(n);
            let kv: Vec<([u8; 8], Vec<u8>)> = (i..end).map(|j| (key(j), value(j))).collect();
            let ops: Vec<(&[u8], &[u8])> = kv.iter().map(|(k, v)| (&k[..], &v[..])).collect();
            self.0.write(&ops);
            i = end;
            progress(i);
        }
        self.0.sync();
    }
}
