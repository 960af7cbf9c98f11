//! The live shim mappings: a fixed array of slots read without locks, since the lookups run
//! inside every interposed call, including `madvise` from ucache's own eviction on the
//! faulting thread's `SIGBUS` handler. A slot holds an `Arc<Entry>` as a raw pointer; a
//! per-slot count of readers lets removal wait until nobody still reads the pointer.

use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use ucache::Mapping;

use crate::store::RawFile;

const SLOTS: usize = 1024;

/// One program mapping served by ucache.
pub(crate) struct Entry {
    pub map: Mapping,
    /// The program's address: the mapping's base.
    pub start: usize,
    /// The program's length rounded up to pages.
    pub len: usize,
    pub file: Arc<RawFile>,
    /// The file's path, for messages.
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub prot: i32,
    /// `MAP_SHARED` or `MAP_PRIVATE`.
    pub kind: i32,
    pub writable: bool,
}

impl Entry {
    /// The file range `[a, b)` as a range of this mapping, if they overlap.
    pub fn rel(&self, a: u64, b: u64) -> Option<(u64, u64)> {
        let lo = a.max(self.offset);
        let hi = b.min(self.offset + self.len as u64);
        (lo < hi).then(|| (lo - self.offset, hi - lo))
    }

    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        addr < self.start + self.len && addr.saturating_add(len.max(1)) > self.start
    }

    /// The phase of the buffer holding `addr`, read without locks.
    pub fn phase_at(&self, addr: usize) -> Option<ucache::Phase> {
        let m = &self.map;
        m.state(m.buffer_of((addr - self.start) as u64))
            .ok()
            .map(|w| w.phase())
    }
}

struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    dev: AtomicU64,
    ino: AtomicU64,
    entry: AtomicPtr<Entry>,
    users: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    dev: AtomicU64::new(0),
    ino: AtomicU64::new(0),
    entry: AtomicPtr::new(std::ptr::null_mut()),
    users: AtomicUsize::new(0),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
/// Entries in the table: 0 lets every interposed call go straight to the kernel.
pub(crate) static LIVE: AtomicUsize = AtomicUsize::new(0);

const CLAIMED: *mut Entry = std::ptr::dangling_mut();

pub(crate) fn live() -> bool {
    LIVE.load(SeqCst) > 0
}

/// Publishes `e`; gives it back if the table is full.
pub(crate) fn insert(e: Arc<Entry>) -> Result<(), Arc<Entry>> {
    let (start, end, dev, ino) = (e.start, e.start + e.len, e.dev, e.ino);
    let p = Arc::into_raw(e) as *mut Entry;
    for s in TABLE.iter() {
        if s.entry
            .compare_exchange(std::ptr::null_mut(), CLAIMED, SeqCst, SeqCst)
            .is_err()
        {
            continue;
        }
        if s.users.load(SeqCst) != 0 {
            s.entry.store(std::ptr::null_mut(), SeqCst);
            continue;
        }
        s.start.store(start, SeqCst);
        s.end.store(end, SeqCst);
        s.dev.store(dev, SeqCst);
        s.ino.store(ino, SeqCst);
        LIVE.fetch_add(1, SeqCst);
        s.entry.store(p, SeqCst);
        return Ok(());
    }
    // SAFETY: p came from Arc::into_raw above and was never published.
    Err(unsafe { Arc::from_raw(p) })
}

/// A counted reference to slot `k`'s entry, if it holds one.
fn get(k: usize) -> Option<Arc<Entry>> {
    let s = &TABLE[k];
    let p = s.entry.load(SeqCst);
    if p.is_null() || p == CLAIMED {
        return None;
    }
    s.users.fetch_add(1, SeqCst);
    let p = s.entry.load(SeqCst);
    let r = if !p.is_null() && p != CLAIMED {
        // SAFETY: while `users` is raised and the pointer is published, the slot's strong
        // count keeps the entry alive; we add one of our own.
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    } else {
        None
    };
    s.users.fetch_sub(1, SeqCst);
    r
}

/// The first entry overlapping `[addr, addr+len)`, with its slot. No allocation.
pub(crate) fn find_addr(addr: usize, len: usize) -> Option<(usize, Arc<Entry>)> {
    if !live() {
        return None;
    }
    let end = addr.saturating_add(len.max(1));
    for (k, s) in TABLE.iter().enumerate() {
        let p = s.entry.load(SeqCst);
        if p.is_null() || p == CLAIMED {
            continue;
        }
        if addr < s.end.load(SeqCst) && end > s.start.load(SeqCst) {
            if let Some(e) = get(k) {
                if e.overlaps(addr, len) {
                    return Some((k, e));
                }
            }
        }
    }
    None
}

/// Every entry overlapping `[addr, addr+len)`, with its slot.
pub(crate) fn find_all_addr(addr: usize, len: usize) -> Vec<(usize, Arc<Entry>)> {
    all(|e| e.overlaps(addr, len))
}

/// Every entry of the file `(dev, ino)`.
pub(crate) fn find_inode(dev: u64, ino: u64) -> Vec<(usize, Arc<Entry>)> {
    let mut out = Vec::new();
    if !live() {
        return out;
    }
    for (k, s) in TABLE.iter().enumerate() {
        let p = s.entry.load(SeqCst);
        if p.is_null() || p == CLAIMED {
            continue;
        }
        if s.ino.load(SeqCst) == ino && s.dev.load(SeqCst) == dev {
            if let Some(e) = get(k) {
                if e.ino == ino && e.dev == dev {
                    out.push((k, e));
                }
            }
        }
    }
    out
}

/// Every entry for which `f` holds.
pub(crate) fn all(f: impl Fn(&Entry) -> bool) -> Vec<(usize, Arc<Entry>)> {
    let mut out = Vec::new();
    if !live() {
        return out;
    }
    for k in 0..SLOTS {
        if let Some(e) = get(k) {
            if f(&e) {
                out.push((k, e));
            }
        }
    }
    out
}

/// Takes `e` out of slot `k` (if it is still there): later lookups no longer find it.
/// Returns whether this call removed it.
pub(crate) fn remove(k: usize, e: &Arc<Entry>) -> bool {
    let s = &TABLE[k];
    let want = Arc::as_ptr(e) as *mut Entry;
    if s.entry
        .compare_exchange(want, CLAIMED, SeqCst, SeqCst)
        .is_err()
    {
        return false;
    }
    while s.users.load(SeqCst) != 0 {
        std::thread::yield_now();
    }
    s.entry.store(std::ptr::null_mut(), SeqCst);
    LIVE.fetch_sub(1, SeqCst);
    // SAFETY: `want` came from Arc::into_raw in `insert` and is no longer published.
    drop(unsafe { Arc::from_raw(want) });
    true
}

/// Calls `f` on every entry, without allocating (for the child side of `fork`).
pub(crate) fn for_each(mut f: impl FnMut(&Entry)) {
    for k in 0..SLOTS {
        if let Some(e) = get(k) {
            f(&e);
        }
    }
}
