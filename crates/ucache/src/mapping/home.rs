//! Where buffer `i`'s bytes live, and how they are filled and dropped: the one file that
//! knows the mapping's placement.
//!
//! | placement | lives at | filled by a load | dropped by an eviction |
//! |---|---|---|---|
//! | in place | `base + i × bs` of the mapping's region | read in place | `madvise(DONTNEED)`, batched |
//! | in place, transparent | the same | read into staging, installed with `UFFDIO_COPY` | the same |
//! | in place, a file view | the same, the file's page-cache pages | made readable and populated by the kernel (`view.rs`) | hidden, then the same, then dropped from the page cache |
//! | pool | frame `frames[i]` of the cache's pool for `bs` | read into the frame | the frame goes back on the pool's free list |
//!
//! Room is budget (in place) or a frame (pool); see [`crate::pool`] for how frames are
//! charged to the budget in chunks.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::{zero_tail, MappingCore};
use crate::error::{Error, Result};
use crate::pool::FramePool;
use crate::region::Region;
use crate::staging::with_staging;
use crate::stats::Counter;
use crate::stopwatch::Stopwatch;
use crate::uffd::Uffd;

pub(super) enum Home {
    /// The mapping's own address range.
    InPlace(Region),
    /// Frames of the cache's pool. `frames[i]` names buffer `i`'s frame while it is resident;
    /// it is written by the buffer's loader before the load is published and never cleared,
    /// so a stale read of it (an optimistic reader's) still names pool memory, which stays
    /// mapped as long as the pool: the reader's version check then fails.
    Pool {
        pool: Arc<FramePool>,
        frames: Box<[AtomicU32]>,
    },
}

impl Home {
    pub(super) fn pool(pool: Arc<FramePool>, buffers: u64) -> Result<Home> {
        let frames = crate::region::huge_table(buffers as usize, || AtomicU32::new(0)).ok_or(
            Error::BadLength {
                len: buffers,
                why: "too many buffers for the frame table",
            },
        )?;
        Ok(Home::Pool { pool, frames })
    }

    pub(super) fn region(&self) -> Option<&Region> {
        match self {
            Home::InPlace(r) => Some(r),
            Home::Pool { .. } => None,
        }
    }
    pub(super) fn is_pool(&self) -> bool {
        matches!(self, Home::Pool { .. })
    }
    pub(super) fn is_transparent(&self) -> bool {
        self.region().is_some_and(Region::is_transparent)
    }
    pub(super) fn uffd(&self) -> Option<&Arc<Uffd>> {
        self.region().and_then(Region::uffd)
    }
    /// The base address of an in-place mapping; null for a pool mapping, which has none.
    pub(super) fn base(&self) -> *mut u8 {
        self.region().map_or(std::ptr::null_mut(), Region::base)
    }
    /// Write protection of a transparent mapping's buffer; a no-op elsewhere.
    pub(super) fn protect(&self, offset: usize, len: usize, protect: bool) -> Result<()> {
        match self.region() {
            Some(r) => r.protect(offset, len, protect),
            None => Ok(()),
        }
    }
}

impl MappingCore {
    /// The address of buffer `i`'s bytes. Meaningful while the caller holds a pin or the
    /// buffer's claim; an optimistic reader may call it at any time and gets mapped memory,
    /// whose bytes it must validate. On a pool mapping this is one load of the frame index
    /// (no shared-memory write): the hit path stays one atomic add on the state word.
    #[inline]
    pub(super) fn ptr(&self, i: u64) -> *mut u8 {
        match &self.home {
            Home::InPlace(r) => r.at((i << self.shift) as usize),
            Home::Pool { pool, frames } => pool.frame(frames[i as usize].load(Ordering::Acquire)),
        }
    }

    /// Starts fetching buffer `i`'s frame index on a pool mapping (in place there is none).
    /// A pin calls this before it touches the state word, so that the two cold lines of a
    /// random buffer are fetched together rather than one after the other.
    #[inline]
    pub(super) fn prefetch_home(&self, i: u64) {
        if let Home::Pool { frames, .. } = &self.home {
            if let Some(f) = frames.get(i as usize) {
                crate::cache_line::prefetch(f);
            }
        }
    }

    /// Makes room for claimed (`Loading`) buffer `i`: budget, and on a pool mapping a frame.
    /// Waits for memory if `wait`, else gives up at once (`Ok(false)`).
    pub(super) fn take_room(&self, i: u64, wait: bool) -> Result<bool> {
        let frame = match &self.home {
            Home::InPlace(_) if wait => {
                self.cache.budget.reserve(self.bs as u64)?;
                None
            }
            Home::InPlace(_) if self.cache.budget.try_reserve(self.bs as u64) => None,
            Home::InPlace(_) => return Ok(false),
            Home::Pool { pool, .. } => match self.cache.budget.reserve_frame(pool, wait)? {
                Some(f) => Some(f),
                None => return Ok(false),
            },
        };
        self.resident.add(1);
        // After the count's locked add: the frame index's line is usually cold, and its
        // store then completes during the read instead of holding up that add.
        if let (Some(f), Home::Pool { frames, .. }) = (frame, &self.home) {
            // Published to other threads by the CAS that publishes the load.
            frames[i as usize].store(f, Ordering::Relaxed);
        }
        Ok(true)
    }

    /// Gives back the room of claimed buffer `i` whose load failed: its memory (if a read
    /// went into it) and its budget or frame.
    pub(super) fn give_room(&self, i: u64, filled: bool) {
        match &self.home {
            Home::InPlace(r) => {
                if filled {
                    let _ = r.drop_ranges(&[((i << self.shift) as usize, self.bs)]);
                }
                self.cache.budget.release(self.bs as u64);
            }
            Home::Pool { pool, frames } => {
                let f = frames[i as usize].load(Ordering::Relaxed);
                self.cache.budget.put_frames(pool, &[f]);
            }
        }
        self.resident.sub(1);
    }

    /// Reads claimed buffer `i` from the store into its home: straight into the region or
    /// the frame, or, on a transparent mapping, into staging memory that is then installed
    /// (`writable` installs it without write protection). `filled` is set once memory of the
    /// buffer may hold bytes, so a failure drops them.
    pub(super) fn fill(
        &self,
        i: u64,
        writable: bool,
        filled: &mut bool,
        sw: &mut Stopwatch,
    ) -> Result<()> {
        let off = self.object_offset(i);
        self.fill_with(i, writable, filled, sw, |buf| self.object.read_at(buf, off))
    }

    /// [`MappingCore::fill`] with the bytes from `read`, which fills the buffer-sized slice
    /// it is given as [`crate::store::Object::read_at`] would (the async miss copies in bytes
    /// it already has).
    pub(super) fn fill_with(
        &self,
        i: u64,
        writable: bool,
        filled: &mut bool,
        sw: &mut Stopwatch,
        read: impl FnOnce(&mut [u8]) -> std::io::Result<usize>,
    ) -> Result<()> {
        // One buffer, one request, nothing else of it outstanding.
        self.count_store_read(0);
        if self.is_view() {
            // The kernel reads the file's page; `read`'s bytes, if any, are the same.
            *filled = true;
            let region = self.home.region().expect("a view has a region");
            let r = region.reveal((i << self.shift) as usize, self.bs);
            sw.lap(self.stats(), Counter::FaultIoNs);
            return r;
        }
        if !self.home.is_transparent() {
            *filled = true;
            // SAFETY: buffer i is Loading and ours, and its room taken: no other thread
            // touches its memory until we publish it.
            let buf = unsafe { std::slice::from_raw_parts_mut(self.ptr(i), self.bs) };
            return self.check_read(i, read(buf));
        }
        with_staging(self.bs, |p| {
            // SAFETY: the staging area is this thread's and at least bs long.
            let buf = unsafe { std::slice::from_raw_parts_mut(p, self.bs) };
            let got = read(buf);
            sw.lap(self.stats(), Counter::FaultIoNs);
            self.check_read(i, got.map(|n| zero_tail(buf, n)))?;
            *filled = true;
            // SAFETY: buf is readable; buffer i is Loading and ours.
            let r = unsafe { self.install(i, p, self.bs, writable) };
            sw.lap(self.stats(), Counter::FaultInstallNs);
            r
        })?
    }

    /// Makes claimed buffer `i` resident as zeros without reading the store, for a caller
    /// that overwrites it whole (a page just allocated): [`MappingCore::fill`] without the
    /// read. A reused pool frame or a transparent page must not show old bytes, so the
    /// zeros are written, not assumed.
    pub(super) fn fill_zeros(&self, i: u64, writable: bool, filled: &mut bool) -> Result<()> {
        if self.is_view() {
            // Only a store overwrites a buffer whole, and a view takes none.
            return Err(Error::ReadOnly);
        }
        *filled = true;
        if !self.home.is_transparent() {
            // SAFETY: buffer i is Loading and ours, and its room taken: no other thread
            // touches its memory until we publish it.
            unsafe { std::ptr::write_bytes(self.ptr(i), 0, self.bs) };
            return Ok(());
        }
        with_staging(self.bs, |p| {
            // SAFETY: the staging area is this thread's and at least bs long; buffer i is
            // Loading and ours.
            unsafe {
                std::ptr::write_bytes(p, 0, self.bs);
                self.install(i, p, self.bs, writable)
            }
        })?
    }

    /// Installs `len` staged bytes at `src` as buffers `i..` of a transparent mapping.
    ///
    /// # Safety
    /// `src..src+len` is readable; the buffers are claimed (`Loading`) by the caller.
    pub(super) unsafe fn install(
        &self,
        i: u64,
        src: *const u8,
        len: usize,
        writable: bool,
    ) -> Result<()> {
        let r = self.home.region().expect("install on an in-place mapping");
        self.stats().add(Counter::Installs, 1);
        self.stats().add(Counter::InstalledBytes, len as u64);
        // SAFETY: forwarded from our caller.
        unsafe { r.install((i << self.shift) as usize, src, len, writable) }
    }

    /// The drop step of eviction: frees the homes of the claimed (`Evicting`) buffers in
    /// `victims`. In place, their pages go back to the kernel in one batch; on a pool
    /// mapping, their frames go back on the pool's free list. Returns the error of a drop
    /// that failed; a transparent mapping's buffers whose pages may still be there are
    /// taken out of `victims` and stay cached (see the comment inside).
    pub(super) fn drop_homes(&self, victims: &mut Vec<u64>) -> Option<Error> {
        if victims.is_empty() {
            return None;
        }
        let region = match &self.home {
            Home::Pool { pool, frames } => {
                let fs: Vec<u32> = victims
                    .iter()
                    .map(|&i| frames[i as usize].load(Ordering::Relaxed))
                    .collect();
                self.cache.budget.put_frames(pool, &fs);
                return None;
            }
            Home::InPlace(r) => r,
        };
        // Neighbours (a scan's buffers) go as one range: one zap instead of many.
        victims.sort_unstable();
        let mut ranges: Vec<(usize, usize)> = Vec::with_capacity(victims.len());
        for &i in victims.iter() {
            let off = (i << self.shift) as usize;
            match ranges.last_mut() {
                Some((o, l)) if *o + *l == off => *l += self.bs,
                _ => ranges.push((off, self.bs)),
            }
        }
        let (kept, e) = region.drop_ranges(&ranges).err()?;
        // Those ranges could not be dropped whole, but `madvise` stops at the first page it
        // refuses (a locked one) after zapping those before it, so their bytes cannot be
        // trusted as cached. On a plain mapping the buffers are clean and the next load reads
        // every byte in place, so they go on to `Evicted` with the rest (that load reuses
        // their leftover pages). A transparent mapping's load installs into absent pages only,
        // so there they stay resident: locked pages are not supported on transparent mappings
        // (`MapOptions::transparent`).
        if region.is_transparent() {
            let kept: Vec<(usize, usize)> = kept.iter().map(|&k| ranges[k]).collect();
            let in_kept = |i: u64| {
                let off = (i << self.shift) as usize;
                kept.iter().any(|&(o, l)| off >= o && off < o + l)
            };
            victims.retain(|&i| {
                if in_kept(i) {
                    let _ = self.state(i).update(|w| Some(w.cancel_evict()));
                    false
                } else {
                    true
                }
            });
        }
        Some(e)
    }

    /// Gives the budget of `n` evicted buffers back: in place, their bytes; on a pool mapping
    /// nothing, since their frames went back to the pool, which holds the budget in chunks.
    pub(super) fn release_evicted(&self, n: u64) {
        if !self.home.is_pool() && n > 0 {
            self.cache.budget.release(n * self.bs as u64);
        }
    }

    /// After unmap emptied a pool mapping: the pool gives back every chunk left wholly free,
    /// so a cache whose pool mappings are all gone holds none of the budget.
    pub(super) fn trim_home(&self) {
        if let Home::Pool { pool, .. } = &self.home {
            self.cache.budget.put_frames_trim(pool);
        }
    }

    /// At drop: gives back the room of buffers still resident (a mapping dropped without a
    /// full release): `left` buffers' budget in place, their frames on a pool mapping.
    pub(super) fn give_back_resident(&self, left: u64) {
        match &self.home {
            Home::InPlace(_) if left > 0 => self.cache.budget.release(left * self.bs as u64),
            Home::InPlace(_) => {}
            Home::Pool { pool, frames } => {
                let fs: Vec<u32> = (0..self.buffers())
                    .filter(|&i| self.state(i).load().phase() != crate::state::Phase::Evicted)
                    .map(|i| frames[i as usize].load(Ordering::Relaxed))
                    .collect();
                self.cache.budget.put_frames(pool, &fs);
            }
        }
    }
}
