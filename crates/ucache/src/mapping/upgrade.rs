//! Optimistic reads as values, and the moves between reads and pins that lock coupling needs:
//! a read that is validated later (after the child it led to was read), a read upgraded to a
//! shared or exclusive pin if nothing changed since it began, pins that never wait, and a pin
//! of a buffer that is about to be overwritten whole, without reading it.
//!
//! An upgrade is one CAS from the word the read saw (same version, still cached) to the pinned
//! word: if the buffer was written or evicted in between the version moved and the upgrade
//! fails, so the caller holds a pin on exactly the bytes it read, or nothing.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Mapping, MappingCore};
use crate::error::Result;
use crate::guard::{ExclusiveGuard, OptimisticView, SharedGuard};
use crate::state::{Phase, Pin, Word};
use crate::stats::Counter;

/// An optimistic read in progress ([`crate::Mapping::optimistic`]): a view of the buffer's
/// bytes, which may be torn or stale, and the version they must still have for the reader to
/// act on them. [`OptimisticRead::validate`] tells whether they do; [`OptimisticRead::upgrade_shared`]
/// and [`OptimisticRead::upgrade_exclusive`] turn the read into a pin if they do.
///
/// Chained reads (lock coupling): read the parent, find the child, begin the child's read,
/// then validate the parent; only then is the child known to be the right one. A read that
/// is never upgraded writes shared memory only to set the buffer's referenced bit when it is
/// clear (once per lap of a CLOCK-like policy's hand, not once per read; see
/// `BufferState::touch_if_unreferenced`): no pin count, no latch.
pub struct OptimisticRead<'a> {
    mapping: &'a MappingCore,
    index: u64,
    seen: Word,
    view: OptimisticView<'a>,
}

impl<'a> OptimisticRead<'a> {
    /// The buffer's bytes, to read without a pin.
    pub fn view(&self) -> &OptimisticView<'a> {
        &self.view
    }
    pub fn index(&self) -> u64 {
        self.index
    }
    /// The version the read began at.
    pub fn version(&self) -> u64 {
        self.seen.version()
    }

    fn unchanged(&self, w: Word) -> bool {
        w.phase() == Phase::Cached && !w.exclusive() && w.version() == self.seen.version()
    }

    /// Whether every byte read through the view so far was stable: the buffer was neither
    /// written nor evicted since the read began, nor is it held exclusively now.
    pub fn validate(&self) -> bool {
        crate::sync::fence(Ordering::Acquire);
        self.unchanged(self.mapping.state(self.index).load())
    }

    /// Takes the pin `pin` makes of the word, in one CAS, if the buffer is unchanged since the
    /// read began: `None` (nothing taken) otherwise.
    fn pin_if_unchanged(&self, pin: fn(Word) -> Option<Word>) -> Option<()> {
        crate::sync::fence(Ordering::Acquire);
        let s = self.mapping.state(self.index);
        s.update(|w| if self.unchanged(w) { pin(w) } else { None })
            .ok()
            .map(drop)
    }

    /// The read as a shared pin, if the buffer is unchanged since it began; `None` otherwise
    /// (the caller restarts its read). Never waits.
    pub fn upgrade_shared(self) -> Option<SharedGuard<'a>> {
        self.pin_if_unchanged(Word::pin_shared)?;
        // SAFETY: we hold a shared pin on a cached buffer.
        Some(unsafe {
            SharedGuard::new(
                self.mapping.state(self.index),
                self.index,
                self.mapping.ptr(self.index),
                self.mapping.valid(self.index),
            )
        })
    }

    /// The read as an exclusive pin, if the buffer is unchanged since it began and nobody else
    /// pins it (a shared pin, a write-back in flight); `None` otherwise. Never waits.
    pub fn upgrade_exclusive(self) -> Option<ExclusiveGuard<'a>> {
        if !self.mapping.writable {
            return None;
        }
        self.pin_if_unchanged(Word::pin_exclusive)?;
        self.mapping.exclusive_guard(self.index).ok()
    }
}

impl MappingCore {
    /// The guard of an exclusive pin just taken on buffer `i`, after what a transparent
    /// mapping in handler-thread mode needs (see `open_for_holder`).
    pub(super) fn exclusive_guard(&self, i: u64) -> Result<ExclusiveGuard<'_>> {
        if self.home.is_transparent()
            && self.fault_handling != crate::fault::FaultHandling::OnFaultingThread
        {
            self.open_for_holder(self.state(i), i)?;
        }
        // SAFETY: we hold the exclusive pin on buffer i.
        Ok(unsafe {
            ExclusiveGuard::new(self.addr(), self.state(i), i, self.ptr(i), self.valid(i))
        })
    }

    /// Begins an optimistic read of buffer `i`, loading it first if it is not cached (and
    /// waiting for an exclusive holder to let go).
    pub(crate) fn optimistic(self: &Arc<Self>, i: u64) -> Result<OptimisticRead<'_>> {
        let s = self.slot(i)?;
        loop {
            let w = s.load();
            if w.phase() == Phase::Cached && !w.exclusive() {
                self.count_access(Counter::Hits, 1);
                s.touch_if_unreferenced(w);
                return Ok(OptimisticRead {
                    mapping: self,
                    index: i,
                    seen: w,
                    // SAFETY: the view only reads; the reader acts on what it read only after
                    // `validate` or an upgrade proved the version unchanged.
                    view: unsafe { OptimisticView::new(self.ptr(i), self.valid(i)) },
                });
            }
            drop(self.pin_shared(i)?);
        }
    }

    /// A shared pin if buffer `i` is cached and not held exclusively now; never waits, never
    /// loads.
    pub(crate) fn try_pin_shared_public(
        self: &Arc<Self>,
        i: u64,
    ) -> Result<Option<SharedGuard<'_>>> {
        self.slot(i)?;
        Ok(self.try_pin_shared(i))
    }

    /// An exclusive pin if buffer `i` is cached and idle now; never waits, never loads.
    pub(crate) fn try_pin_exclusive(
        self: &Arc<Self>,
        i: u64,
    ) -> Result<Option<ExclusiveGuard<'_>>> {
        let s = self.slot(i)?;
        if !self.writable {
            return Err(crate::Error::ReadOnly);
        }
        if s.update(|w| w.pin_exclusive()).is_err() {
            return Ok(None);
        }
        self.count_access(Counter::Hits, 1);
        self.exclusive_guard(i).map(Some)
    }

    /// An exclusive pin of buffer `i` for a caller that overwrites it whole (a page just
    /// allocated): a buffer that is not cached is not read, but made resident as zeros, and
    /// any buffer comes back zeroed and dirty.
    pub(crate) fn pin_overwrite(self: &Arc<Self>, i: u64) -> Result<ExclusiveGuard<'_>> {
        let s = self.slot(i)?;
        if !self.writable {
            return Err(crate::Error::ReadOnly);
        }
        loop {
            let w = s.load();
            if let Some(x) = w.pin_exclusive() {
                if s.cas(w, x).is_ok() {
                    self.count_access(Counter::Hits, 1);
                    let mut g = self.exclusive_guard(i)?;
                    g.fill(0);
                    return Ok(g);
                }
                continue;
            }
            if w.phase() == Phase::Evicted && w.idle() {
                let Some(mut claim) = self.claim_load(i, w) else {
                    continue;
                };
                self.policy.on_miss(i);
                claim.take_room(true)?;
                claim.fill_zeros(true)?;
                claim.publish(Pin::Exclusive, false, true);
                self.count_access(Counter::Misses, 1);
                // SAFETY: we hold the exclusive pin on buffer i (published with it).
                return Ok(unsafe {
                    ExclusiveGuard::new(self.addr(), self.state(i), i, self.ptr(i), self.valid(i))
                });
            }
            if w.phase() == Phase::Aside && w.idle() {
                // Its bytes wait in a slot: bring them back as any pin would, then zero.
                let mut g = self.pin_exclusive(i)?;
                g.fill(0);
                return Ok(g);
            }
            self.self_wait(i)?;
            s.wait_change(w);
        }
    }
}

/// The public face of the moves above.
impl Mapping {
    /// Begins an optimistic read of buffer `index` as a value, for reads that must be checked
    /// later or turned into pins: lock-coupled descents read a parent, begin the child's read,
    /// then [validate](OptimisticRead::validate) the parent. A buffer that is not cached is
    /// loaded first (and one held exclusively waited for). For a read whose check can come
    /// at the end, [`Mapping::read_optimistic`] is simpler.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// store.insert("tree", vec![0; 4 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(store, "tree", MapOptions::new().writable(true)).unwrap();
    /// map.pin_exclusive(0).unwrap().write::<u64>(0, 3); // the root points at buffer 3
    /// let root = map.optimistic(0).unwrap();
    /// let child = root.view().read::<u64>(0);
    /// let leaf = map.optimistic(child).unwrap();
    /// assert!(root.validate()); // the child read began while the root still said 3
    /// let mut leaf = leaf.upgrade_exclusive().expect("nobody wrote the leaf");
    /// leaf.write::<u32>(8, 1);
    /// ```
    pub fn optimistic(&self, index: u64) -> Result<OptimisticRead<'_>> {
        self.core.optimistic(index)
    }

    /// Pins buffer `index` shared if it is cached and not held exclusively; `Ok(None)` if it
    /// is not. Never waits and never reads the store.
    pub fn try_pin_shared(&self, index: u64) -> Result<Option<SharedGuard<'_>>> {
        self.core.try_pin_shared_public(index)
    }

    /// Pins buffer `index` exclusively if it is cached and nobody pins it; `Ok(None)` if not.
    /// Never waits and never reads the store.
    pub fn try_pin_exclusive(&self, index: u64) -> Result<Option<ExclusiveGuard<'_>>> {
        self.core.try_pin_exclusive(index)
    }

    /// Pins buffer `index` exclusively for a caller that overwrites all of it (a page just
    /// allocated, or past the end of what was ever written): the buffer comes back zeroed and
    /// dirty, and a buffer that was not cached is not read from the store.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// store.insert("pages", vec![5; 4 * 4096]);
    /// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
    /// let map = cache.map(store, "pages", MapOptions::new().writable(true)).unwrap();
    /// let g = map.pin_overwrite(1).unwrap();
    /// assert!(g.iter().all(|&b| b == 0));
    /// drop(g);
    /// assert_eq!(map.stats().bytes_read, 0);
    /// ```
    pub fn pin_overwrite(&self, index: u64) -> Result<ExclusiveGuard<'_>> {
        self.core.pin_overwrite(index)
    }
}
