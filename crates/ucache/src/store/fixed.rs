//! Registered ("fixed") buffers for the io_uring store: memory a ring has pinned once, so a
//! read into it (`IORING_OP_READ_FIXED`) skips pinning its pages on every request.
//!
//! Only memory whose pages stay put may be registered: a registration holds the physical
//! pages it pinned, so if the process later dropped them (`MADV_DONTNEED`) and faulted fresh
//! ones in, a fixed read would land in the old pages, unseen. Frame pools
//! ([`crate::pool`]) qualify, with one care: they give a wholly free chunk back with
//! `MADV_DONTNEED`. So a pool *announces* its range here ([`Announced`]), and tells of every
//! chunk it gives back ([`released`]) before the pages go. Each ring registers the 2 MiB
//! chunks its reads land in, on first use, and compares [`epoch`] with the epoch its table was
//! built at before every fixed request: a chunk given back since (and perhaps repopulated,
//! now with other pages) bumped the epoch, so the ring drops its whole table and registers
//! afresh. A request's destination is a claimed frame, whose chunk cannot be given back while
//! the read is in flight, so one check per request suffices.
//!
//! In-place mappings never announce their memory (their pages are given back buffer by
//! buffer), so reads into them stay plain reads.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use parking_lot::RwLock;

/// Bytes per registration: a pool chunk ([`crate::pool::CHUNK`]).
pub(crate) const CHUNK: usize = 2 << 20;

/// Bumped whenever announced memory loses pages (a chunk given back, a range withdrawn).
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Announced ranges: (start, end).
static RANGES: RwLock<Vec<(usize, usize)>> = RwLock::new(Vec::new());

thread_local! {
    /// Fixed requests this thread submitted (tests see the fixed path taken).
    static FIXED_REQUESTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The current epoch: a registration made at an older one may hold pages that are gone.
pub(crate) fn epoch() -> u64 {
    EPOCH.load(SeqCst)
}

/// Says that announced memory is about to lose its pages; call it before `MADV_DONTNEED`.
pub(crate) fn released() {
    EPOCH.fetch_add(1, SeqCst);
}

pub(crate) fn count_fixed() {
    FIXED_REQUESTS.with(|n| n.set(n.get() + 1));
}

/// Fixed requests this thread has submitted.
#[cfg(test)]
pub(crate) fn fixed_requests() -> u64 {
    FIXED_REQUESTS.with(|n| n.get())
}

/// The registrable piece around `ptr..ptr+len`: the announced part of the 2 MiB chunk that
/// holds it, as (chunk start, piece start, piece length), or `None` when the request is not
/// wholly inside one announced chunk.
pub(crate) fn chunk_of(ptr: *const u8, len: usize) -> Option<(usize, usize, usize)> {
    let p = ptr as usize;
    let end = p.checked_add(len)?;
    let chunk = p & !(CHUNK - 1);
    let ranges = RANGES.read();
    let &(start, stop) = ranges.iter().find(|&&(s, e)| s <= p && end <= e)?;
    let lo = chunk.max(start);
    let hi = (chunk + CHUNK).min(stop);
    (end <= hi).then_some((chunk, lo, hi - lo))
}

/// An announced range; withdrawn (and the epoch bumped) when dropped, which must happen
/// before the memory is unmapped.
#[derive(Debug)]
pub(crate) struct Announced {
    range: (usize, usize),
}

impl Announced {
    /// Announces `base..base+len`, whose pages stay put except as told through [`released`].
    pub(crate) fn new(base: *mut u8, len: usize) -> Announced {
        let range = (base as usize, base as usize + len);
        RANGES.write().push(range);
        Announced { range }
    }
}

impl Drop for Announced {
    fn drop(&mut self) {
        let mut r = RANGES.write();
        if let Some(k) = r.iter().position(|&x| x == self.range) {
            r.swap_remove(k);
        }
        drop(r);
        released();
    }
}
