//! What the store's integration tests share: the watchdog (a hang fails the test instead of
//! stalling the suite; it never times the code), and stores in memory.

#![allow(dead_code)] // not every test binary uses every helper

use std::sync::Arc;

use ucache::store::{MemoryStore, Store};
use ucache_kv::{KvOptions, Placement};

/// The core's watchdog, shared by path rather than copied: `within` fails a test that has
/// not finished in `HANG` (minutes), naming it; it never times the code.
#[path = "../../../ucache/tests/common/mod.rs"]
mod core_common;
#[allow(unused_imports)] // not every test binary uses it
pub use core_common::within;

/// Options for a store in `store`, with small pages, a small cache and a small capacity, in
/// place: budgets of a few pages are below a pool's one 2 MiB chunk (the tests that run on the
/// pool set the placement and a budget for it themselves).
pub fn options(store: Arc<dyn Store>, page_size: usize, memory_pages: u64) -> KvOptions {
    let mut o = KvOptions::in_dir("unused");
    o.placement = Placement::InPlace;
    o.store = store;
    o.data = "data".into();
    o.wal = "wal".into();
    o.page_size = page_size;
    o.memory_bytes = memory_pages * page_size as u64;
    o.capacity_pages = 1 << 16;
    o.checkpoint_bytes = 1 << 20;
    o
}

pub fn memory_store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

/// A key of the test's key space: `n` in a fixed width, optionally padded to vary lengths.
pub fn key(n: u64) -> Vec<u8> {
    let mut k = format!("key{n:08}").into_bytes();
    k.extend(std::iter::repeat_n(b'.', (n % 13) as usize));
    k
}

/// A value naming its key and a version, so a value under the wrong key shows.
pub fn value(n: u64, version: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{n}:{version}:").into_bytes();
    v.resize(len.max(v.len()), b'v');
    v
}

/// The (key number, version) a value names.
pub fn parse_value(v: &[u8]) -> (u64, u64) {
    let s = std::str::from_utf8(v).expect("value is text");
    let mut it = s.split(':');
    let n = it.next().unwrap().parse().unwrap();
    let ver = it.next().unwrap().parse().unwrap();
    (n, ver)
}
