//! Pins as RAII guards, and the optimistic read view.
//!
//! A guard is proof that its buffer is pinned: the state word keeps eviction and (for a shared
//! guard) writers away until the guard drops, so the guard can hand out plain slices of the
//! mapping's memory. This is the only place where slices into a mapping are made for callers.
//!
//! "Writers" are other pins. On a transparent mapping, plain stores through the mapping's
//! pointer also reach the buffer, and the cache holds them back only while the buffer is clean
//! and write-protected: a store to a dirty buffer, or to one whose exclusive holder has written
//! (which lifts the protection for the whole process), lands at once, as it would under `mmap`.
//! A program that mixes plain stores with guards on the same buffer must order them itself; a
//! plain store racing a live guard is a data race of the program's own pointer code (storing
//! through the pointer is `unsafe`), just as it would be against any other reference.

use std::ops::{Deref, DerefMut};

use crate::held::{self, Hold};
use crate::state::{BufferState, Word};

/// A shared pin: the buffer stays cached, and unchanged by other pins, while this lives (on a
/// transparent mapping plain stores are the program's to order: see the module docs).
///
/// It holds its buffer's state word, not the mapping: a guard is below the mapping that makes
/// it, and unpinning is a change of that word alone.
pub struct SharedGuard<'a> {
    state: &'a BufferState,
    index: u64,
    ptr: *const u8,
    len: usize,
}

impl<'a> SharedGuard<'a> {
    /// # Safety
    /// The caller holds a shared pin on buffer `index`, whose word is `state`, and
    /// `ptr..ptr+len` is its memory.
    pub(crate) unsafe fn new(
        state: &'a BufferState,
        index: u64,
        ptr: *const u8,
        len: usize,
    ) -> Self {
        SharedGuard {
            state,
            index,
            ptr,
            len,
        }
    }
    pub fn index(&self) -> u64 {
        self.index
    }
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }
}

impl Deref for SharedGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the pin keeps the buffer cached and free of writers for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for SharedGuard<'_> {
    fn drop(&mut self) {
        self.state.unpin_shared();
    }
}

/// An exclusive pin: no other pin reads or writes the buffer while this lives (on a
/// transparent mapping plain loads and stores are the program's to order: see the module
/// docs). Any mutable access marks the buffer dirty when the guard drops.
pub struct ExclusiveGuard<'a> {
    /// The mapping's address: who holds the pin in [`crate::held`]'s records.
    owner: usize,
    state: &'a BufferState,
    index: u64,
    ptr: *mut u8,
    len: usize,
    dirty: bool,
}

impl<'a> ExclusiveGuard<'a> {
    /// # Safety
    /// The caller holds the exclusive pin on buffer `index` of the mapping at `owner`, whose
    /// word is `state`, and `ptr..ptr+len` is its memory.
    #[inline]
    pub(crate) unsafe fn new(
        owner: usize,
        state: &'a BufferState,
        index: u64,
        ptr: *mut u8,
        len: usize,
    ) -> Self {
        held::hold(owner, index, Hold::Exclusive);
        after_exclusive_pin();
        ExclusiveGuard {
            owner,
            state,
            index,
            ptr,
            len,
            dirty: false,
        }
    }
    pub fn index(&self) -> u64 {
        self.index
    }
    /// Marks the buffer dirty, for writes made through [`ExclusiveGuard::as_mut_ptr`].
    pub fn mark_dirty(&mut self) {
        self.dirty = true;
    }
    /// Turns the exclusive pin into a shared one without letting go of the buffer: other
    /// readers may pin it from then on, no writer can take it in between. Writes made through
    /// this guard are kept (the buffer is dirty) and the version moves on, so optimistic reads
    /// that began before see the change.
    pub fn downgrade(self) -> SharedGuard<'a> {
        let this = std::mem::ManuallyDrop::new(self);
        held::release(this.owner, this.index, Hold::Exclusive);
        let dirty = this.dirty;
        let r = this
            .state
            .update(|w| Some(Word(w.unpin_exclusive(dirty).0 + 1)));
        debug_assert!(r.is_ok());
        // SAFETY: the CAS above left one shared pin on the buffer, ours from now on.
        unsafe { SharedGuard::new(this.state, this.index, this.ptr, this.len) }
    }

    /// The buffer's address, for code that writes through raw pointers; call
    /// [`ExclusiveGuard::mark_dirty`] if it does.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }
}

impl Deref for ExclusiveGuard<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the exclusive pin gives us sole access for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for ExclusiveGuard<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.dirty = true;
        // SAFETY: as above, and `&mut self` makes this the only live slice.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for ExclusiveGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        held::release(self.owner, self.index, Hold::Exclusive);
        let dirty = self.dirty;
        let r = self.state.update(|w| Some(w.unpin_exclusive(dirty)));
        debug_assert!(r.is_ok());
    }
}

/// Orders a new exclusive holder's stores after the pin that admits them, for optimistic
/// readers. The pin is an acquire CAS, which keeps later loads and stores from moving before
/// its load but not before its store: without this fence a reader could see a holder's new
/// bytes and still the word from before the pin (no `X`, same version) and accept a torn
/// buffer. It is a seqlock writer's fence (crossbeam's `SeqLock::write` has the same); on
/// x86-64 it compiles to nothing. `mod tests` below shows the torn read under Miri's
/// weak-memory emulation when this is a no-op.
#[inline]
pub(crate) fn after_exclusive_pin() {
    crate::sync::fence(std::sync::atomic::Ordering::Release);
}

/// Reads of a buffer that nobody pinned. Values may be torn or stale; the caller learns whether
/// they were valid only when `read_optimistic` returns, so it must not act on them before.
pub struct OptimisticView<'a> {
    ptr: *const u8,
    len: usize,
    _mapping: std::marker::PhantomData<&'a ()>,
}

impl OptimisticView<'_> {
    /// # Safety
    /// `ptr..ptr+len` lies in a live mapping region. Reads there never fault fatally on a plain
    /// mapping (evicted memory reads as zeros); on a transparent one a read that races an
    /// eviction faults like any plain load and is served, and only an IO error in that load
    /// raises `SIGBUS` (or calls the mapping's hook), as a plain load would.
    pub(crate) unsafe fn new(ptr: *const u8, len: usize) -> Self {
        OptimisticView {
            ptr,
            len,
            _mapping: std::marker::PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The little-endian u64 at `offset` (8-byte aligned). Panics if out of range.
    pub fn read_u64(&self, offset: usize) -> u64 {
        assert!(
            offset.is_multiple_of(8) && offset.checked_add(8).is_some_and(|e| e <= self.len),
            "read_u64 at {offset} of {}",
            self.len
        );
        // SAFETY: in range and aligned; a volatile load because a writer may race with us (the
        // version check discards what we read in that case).
        u64::from_le(unsafe { std::ptr::read_volatile(self.ptr.add(offset) as *const u64) })
    }

    /// The `len` bytes at `offset`, copied out (valid only once the read validates). Panics
    /// if out of range.
    pub fn to_vec(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.copy_to(offset, &mut v);
        v
    }

    /// Copies `out.len()` bytes from `offset`. Panics if out of range.
    pub fn copy_to(&self, offset: usize, out: &mut [u8]) {
        assert!(
            offset.checked_add(out.len()).is_some_and(|e| e <= self.len),
            "copy of {} at {offset} of {}",
            out.len(),
            self.len
        );
        // Bytes up to an 8-byte boundary, then aligned words, then the tail: a key compare or
        // a value copy-out reads a word per load, not a byte.
        let mut k = 0;
        while k < out.len() && !(self.ptr as usize + offset + k).is_multiple_of(8) {
            // SAFETY: in range; volatile for the same reason as read_u64.
            out[k] = unsafe { std::ptr::read_volatile(self.ptr.add(offset + k)) };
            k += 1;
        }
        while out.len() - k >= 8 {
            // SAFETY: in range and 8-byte aligned (the loop above); volatile as above.
            let w = unsafe { std::ptr::read_volatile(self.ptr.add(offset + k) as *const u64) };
            out[k..k + 8].copy_from_slice(&w.to_ne_bytes());
            k += 8;
        }
        while k < out.len() {
            // SAFETY: in range; volatile as above.
            out[k] = unsafe { std::ptr::read_volatile(self.ptr.add(offset + k)) };
            k += 1;
        }
    }
}

impl std::fmt::Debug for SharedGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedGuard")
            .field("index", &self.index)
            .field("len", &self.len)
            .finish()
    }
}

impl std::fmt::Debug for ExclusiveGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExclusiveGuard")
            .field("index", &self.index)
            .field("len", &self.len)
            .field("dirty", &self.dirty)
            .finish()
    }
}

// Std threads and atomics: not under the shuttle build, whose atomics need its scheduler.
#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use std::sync::atomic::{fence, AtomicU64, Ordering};
    use std::sync::Arc;

    use super::after_exclusive_pin;
    use crate::state::{BufferState, Phase, Pin, Word};

    fn cached() -> BufferState {
        let s = BufferState::new();
        let l = Word::EVICTED.begin_load().unwrap();
        s.cas(Word::EVICTED, l).unwrap();
        s.cas(l, l.finish_load(Pin::None, false)).unwrap();
        s
    }

    /// An exclusive holder as `pin_exclusive`, `ExclusiveGuard::new` and its drop make one,
    /// writing `n` into both words (relaxed atomics stand in for the bytes, so that the model
    /// is free of the designed race and only the ordering is checked).
    fn exclusive_write(s: &BufferState, data: &[AtomicU64; 2], n: u64) {
        while s.update(|w| w.pin_exclusive()).is_err() {
            std::thread::yield_now();
        }
        after_exclusive_pin();
        data[0].store(n, Ordering::Relaxed);
        data[1].store(n, Ordering::Relaxed);
        s.update(|w| Some(w.unpin_exclusive(true))).unwrap();
    }

    /// `read_optimistic`'s steps; the second word first, so a reader that sees the holder's
    /// later store without its earlier one shows up as torn.
    fn optimistic_read(s: &BufferState, data: &[AtomicU64; 2]) -> Option<(u64, u64)> {
        let w = s.load();
        if w.phase() != Phase::Cached || w.exclusive() {
            return None;
        }
        let b = data[1].load(Ordering::Relaxed);
        let a = data[0].load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let v = s.load();
        (v.phase() == Phase::Cached && !v.exclusive() && v.version() == w.version())
            .then_some((a, b))
    }

    /// No validated optimistic read is torn, however the holder's stores are ordered against
    /// its pin (under Miri, which explores weak orderings, this fails without the fence).
    #[test]
    fn optimistic_reads_never_validate_a_torn_buffer() {
        let rounds = if cfg!(miri) { 40 } else { 2000 };
        let mut torn = 0;
        for _ in 0..rounds {
            let s = Arc::new(cached());
            let data = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            let (s2, d2) = (s.clone(), data.clone());
            let writer = std::thread::spawn(move || {
                for n in 1..=3 {
                    exclusive_write(&s2, &d2, n);
                }
            });
            for _ in 0..6 {
                if let Some((a, b)) = optimistic_read(&s, &data) {
                    torn += u64::from(a != b);
                }
            }
            writer.join().unwrap();
        }
        assert_eq!(torn, 0, "the version check accepted {torn} torn reads");
    }
}
