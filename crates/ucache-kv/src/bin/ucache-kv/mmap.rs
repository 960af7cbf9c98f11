//! `kv-mmap`: the same B+tree code over a plain file `mmap` (`MAP_SHARED`), the kernel deciding
//! what stays in memory, as LMDB does. Each page has a version word as in vmcache (bit 0: held
//! exclusively), so the tree's optimistic reads validate as on ucache. There is no log: this
//! system is for speed comparisons of the page access alone, not a durable store.

use std::fs::OpenOptions;
use std::ops::{Deref, DerefMut};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use parking_lot::Mutex;
use ucache_kv::error::Result;
use ucache_kv::page::PageBytes;
use ucache_kv::pages::{Pages, ReadPage};
use ucache_kv::txn::WriteTxn;
use ucache_kv::{meta, node, tree};

pub struct MmapPages {
    base: *mut u8,
    pages: u64,
    page_size: usize,
    versions: Box<[AtomicU64]>,
}

// SAFETY: the mapping is shared memory; every access goes through the version protocol
// (exclusive holders write, optimistic readers read volatile and validate).
unsafe impl Send for MmapPages {}
// SAFETY: as above.
unsafe impl Sync for MmapPages {}

impl MmapPages {
    pub fn open(path: &Path, pages: u64, page_size: usize) -> std::io::Result<MmapPages> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = pages * page_size as u64;
        if f.metadata()?.len() < len {
            f.set_len(len)?;
        }
        // SAFETY: a fresh shared mapping of the whole file; unmapped in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: advice on our own mapping: random access, no read-ahead (as LMDB's NORDAHEAD).
        unsafe { libc::madvise(base, len as usize, libc::MADV_RANDOM) };
        Ok(MmapPages {
            base: base as *mut u8,
            pages,
            page_size,
            versions: (0..pages).map(|_| AtomicU64::new(0)).collect(),
        })
    }
    fn at(&self, i: u64) -> *mut u8 {
        // SAFETY: callers pass i < pages (checked by the tree against `pages()`).
        unsafe { self.base.add(i as usize * self.page_size) }
    }
    fn lock(&self, i: u64) -> u64 {
        let v = &self.versions[i as usize];
        loop {
            let cur = v.load(Ordering::Acquire);
            if cur & 1 == 0
                && v.compare_exchange(cur, cur | 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                fence(Ordering::Release);
                return cur;
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for MmapPages {
    fn drop(&mut self) {
        // SAFETY: our mapping, no guard outlives self.
        unsafe { libc::munmap(self.base as *mut _, self.pages as usize * self.page_size) };
    }
}

pub struct RawView {
    ptr: *const u8,
    len: usize,
}

impl PageBytes for RawView {
    fn page_len(&self) -> usize {
        self.len
    }
    fn word(&self, off: usize) -> u64 {
        if off.checked_add(8).is_none_or(|e| e > self.len) || !off.is_multiple_of(8) {
            // Pages are whole words long and the tree asks for aligned words only.
            return 0;
        }
        // SAFETY: in range and 8-byte aligned (the page is page-aligned); volatile because a
        // writer may race (validation discards what was read then).
        u64::from_le(unsafe { std::ptr::read_volatile(self.ptr.add(off) as *const u64) })
    }
}

pub struct MmapRead<'a> {
    pages: &'a MmapPages,
    index: u64,
    seen: u64,
    view: RawView,
}

impl ReadPage for MmapRead<'_> {
    type View = RawView;
    fn view(&self) -> &RawView {
        &self.view
    }
    fn validate(&self) -> bool {
        fence(Ordering::Acquire);
        self.pages.versions[self.index as usize].load(Ordering::Acquire) == self.seen
    }
    fn index(&self) -> u64 {
        self.index
    }
}

/// The writer's read access (it is the only writer, so its reads are stable).
pub struct MmapShared<'a>(&'a [u8]);
impl Deref for MmapShared<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0
    }
}

pub struct MmapExclusive<'a> {
    pages: &'a MmapPages,
    index: u64,
    version: u64,
}
impl Deref for MmapExclusive<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: we hold the page's lock.
        unsafe { std::slice::from_raw_parts(self.pages.at(self.index), self.pages.page_size) }
    }
}
impl DerefMut for MmapExclusive<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: we hold the page's lock, and `&mut self` makes this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.pages.at(self.index), self.pages.page_size) }
    }
}
impl Drop for MmapExclusive<'_> {
    fn drop(&mut self) {
        self.pages.versions[self.index as usize].store(self.version + 2, Ordering::Release);
    }
}

impl Pages for MmapPages {
    type Read<'a> = MmapRead<'a>;
    type Shared<'a> = MmapShared<'a>;
    type Exclusive<'a> = MmapExclusive<'a>;
    fn optimistic(&self, i: u64) -> Result<MmapRead<'_>> {
        loop {
            let seen = self.versions[i as usize].load(Ordering::Acquire);
            if seen & 1 == 0 {
                let view = RawView {
                    ptr: self.at(i),
                    len: self.page_size,
                };
                return Ok(MmapRead {
                    pages: self,
                    index: i,
                    seen,
                    view,
                });
            }
            std::thread::yield_now();
        }
    }
    fn pin_shared(&self, i: u64) -> Result<MmapShared<'_>> {
        // SAFETY: only the writer calls this, and only the writer changes pages.
        Ok(MmapShared(unsafe {
            std::slice::from_raw_parts(self.at(i), self.page_size)
        }))
    }
    fn pin_exclusive(&self, i: u64) -> Result<MmapExclusive<'_>> {
        let version = self.lock(i);
        Ok(MmapExclusive {
            pages: self,
            index: i,
            version,
        })
    }
    fn pin_overwrite(&self, i: u64) -> Result<MmapExclusive<'_>> {
        let mut g = self.pin_exclusive(i)?;
        g.fill(0);
        Ok(g)
    }
    fn pages(&self) -> u64 {
        self.pages
    }
    fn page_size(&self) -> usize {
        self.page_size
    }
}

/// The tree over [`MmapPages`], with one writer lock and no log.
pub struct MmapKv {
    pages: MmapPages,
    writer: Mutex<()>,
    lsns: Box<[AtomicU64]>,
}

impl MmapKv {
    pub fn open(path: &Path, pages: u64) -> MmapKv {
        let p = MmapPages::open(path, pages, 4096).expect("mmap the data file");
        let kv = MmapKv {
            lsns: (0..pages).map(|_| AtomicU64::new(0)).collect(),
            pages: p,
            writer: Mutex::new(()),
        };
        let fresh = kv
            .pages
            .pin_shared(0)
            .map(|m| meta::magic(&m[..]) != meta::MAGIC)
            .unwrap();
        if fresh {
            let mut m = kv.pages.pin_overwrite(0).unwrap();
            meta::init(&mut m, pages);
            drop(m);
            node::init(&mut kv.pages.pin_overwrite(1).unwrap(), node::Kind::Leaf);
        }
        kv
    }
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        tree::get(&self.pages, key).unwrap()
    }
    pub fn scan(&self, start: &[u8], len: usize) -> usize {
        tree::Cursor::new(
            &self.pages,
            Some(start),
            None,
            tree::Direction::Forward,
            len,
        )
        .fold(0, |n, e| {
            std::hint::black_box(e.unwrap());
            n + 1
        })
    }
    pub fn write(&self, ops: &[(&[u8], &[u8])]) {
        let _w = self.writer.lock();
        let mut txn = WriteTxn::new(&self.pages, &self.lsns);
        for (k, v) in ops {
            tree::put(&mut txn, k, v).unwrap();
        }
        txn.commit_with(|_| Ok(1)).unwrap();
    }
    pub fn sync(&self) {
        // SAFETY: msync of our own mapping.
        unsafe {
            libc::msync(
                self.pages.base as *mut _,
                self.pages.pages as usize * self.pages.page_size,
                libc::MS_SYNC,
            )
        };
    }
}
