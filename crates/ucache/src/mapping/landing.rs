//! [`Landing`]: an iterator of shared pins in the order buffers land, the pull-based
//! counterpart of `pin_each`'s callback.
//!
//! `pin_each` runs the store's stream on the calling thread, so the caller's code must run
//! inside it, as a callback. An iterator hands control back between items, so its reads must
//! go on without the calling thread: it claims the buffers ahead of the consumer (as a
//! prefetch does) and hands the claims to the IO threads, whose one stream per mapping
//! (`io_worker.rs`, `stream.rs`) reads them, refilled read by read, and publishes each as its
//! own read lands. `next` then yields a buffer that has landed if there is one, and otherwise
//! pins the oldest one, waiting for its read (or making it a demand miss).
//!
//! A landed buffer is pinned by the iterator as soon as it sees it, before it claims more:
//! the claims' room is made by evicting, and a landed buffer nobody has used yet is just what
//! CLOCK-like policies evict first (never referenced), so unpinned it would be read twice.
//! The window is therefore at most half the budget, leaving the other half to the caller's
//! guards and everything else. The iterator never waits while it holds a pin: it yields every
//! landed buffer before it waits for one in flight.

use std::collections::VecDeque;
use std::iter::FusedIterator;
use std::sync::Arc;

use super::MappingCore;
use crate::error::{Error, Result};
use crate::guard::SharedGuard;
use crate::io_worker::Job;
use crate::state::Phase;

/// An index taken from the caller's list and not yet yielded.
enum Ahead<'m> {
    /// Claimed here and handed to the IO threads: loading, or landed and not yet seen.
    Claimed(u64),
    /// Landed (or found cached) and pinned, waiting for its turn.
    Landed(SharedGuard<'m>),
    /// Not claimed here (cached already, another thread's, or no room without waiting):
    /// pinned when its turn comes, as any pin is.
    Pin(u64),
    /// Refused (an index past the end): yielded as its error, in its turn.
    Refused(Error),
}

impl Ahead<'_> {
    /// The buffer still to pin, if any.
    fn unpinned(&self) -> Option<u64> {
        match *self {
            Ahead::Claimed(i) | Ahead::Pin(i) => Some(i),
            Ahead::Landed(_) | Ahead::Refused(_) => None,
        }
    }
}

/// Shared pins of a list of buffers, yielded in the order they land, with reads in flight on
/// the IO threads ahead of the consumer. Made by [`Mapping::landing`](crate::Mapping::landing),
/// which documents it.
///
/// The iterator and its guards borrow the mapping, so neither outlives it:
///
/// ```compile_fail,E0505
/// # use std::sync::Arc;
/// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
/// let store = MemoryStore::new();
/// store.insert("o", vec![0; 4 * 4096]);
/// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
/// let map = cache.map(Arc::new(store), "o", MapOptions::new()).unwrap();
/// let g = map.landing(0..4, 2).unwrap().next().unwrap().unwrap();
/// map.unmap().unwrap(); // the guard still borrows the mapping
/// assert_eq!(g[0], 0);
/// ```
#[must_use = "an iterator does nothing unless consumed"]
pub struct Landing<'m, I> {
    m: &'m Arc<MappingCore>,
    indices: std::iter::Fuse<I>,
    /// Most buffers taken ahead of the consumer (claimed, or listed and not yet yielded).
    window: usize,
    ahead: VecDeque<Ahead<'m>>,
}

impl<'m, I: Iterator<Item = u64>> Landing<'m, I> {
    pub(super) fn new(m: &'m Arc<MappingCore>, indices: I, depth: usize) -> Result<Self> {
        if depth == 0 {
            return Err(Error::BadArgument(
                "landing depth must be at least 1".into(),
            ));
        }
        let mut l = Landing {
            m,
            indices: indices.fuse(),
            window: depth.min(m.window_buffers() / 2).max(1),
            ahead: VecDeque::new(),
        };
        // The first reads start now, before the first `next`.
        l.refill();
        Ok(l)
    }

    /// Pins the buffers ahead that have landed (or were cached), so the evictions that make
    /// room for more claims cannot take them. Never waits.
    fn pin_landed(&mut self) {
        let m = self.m;
        for a in self.ahead.iter_mut() {
            if let Some(g) = a.unpinned().and_then(|i| m.try_pin_shared(i)) {
                *a = Ahead::Landed(g);
            }
        }
    }

    /// Pins what has landed, then tops the window up.
    fn advance(&mut self) {
        self.pin_landed();
        self.refill();
    }

    /// Takes indices from the list until the window is full, claiming the evicted ones that
    /// get room without waiting, and hands the claims to the IO threads as one job. A claim
    /// that would have to wait for memory is left to its pin: the consumer's guards, or reads
    /// this iterator has in flight, may be what holds the budget.
    fn refill(&mut self) {
        let m = self.m;
        let mut job = Vec::new();
        let mut room = true;
        while self.ahead.len() < self.window {
            let Some(i) = self.indices.next() else { break };
            let s = match m.slot(i) {
                Ok(s) => s,
                Err(e) => {
                    self.ahead.push_back(Ahead::Refused(e));
                    continue;
                }
            };
            let w = s.load();
            let claim = if room && w.phase() == Phase::Evicted {
                m.claim_load(i, w)
            } else {
                None
            };
            let Some(mut c) = claim else {
                self.ahead.push_back(Ahead::Pin(i));
                continue;
            };
            match c.take_room(false) {
                Ok(true) => {
                    job.push(c.into_raw());
                    self.ahead.push_back(Ahead::Claimed(i));
                }
                // The claim undoes itself as it drops; the pin will wait for memory or fail.
                Ok(false) | Err(_) => {
                    room = false;
                    self.ahead.push_back(Ahead::Pin(i));
                }
            }
        }
        if !job.is_empty() {
            // The IO threads adopt the claims ([`MappingCore::load_stream`]).
            m.cache.io.submit(Job::Load {
                mapping: m.clone(),
                indices: job,
            });
        }
    }
}

impl MappingCore {
    /// Buffers a reader may take ahead of its consumer: what the budget holds, less the room
    /// the background evictor keeps free (the last reads would evict the first ones, landed
    /// and not yet used), at least one.
    pub(super) fn window_buffers(&self) -> usize {
        let room = self
            .cache
            .budget
            .budget_bytes()
            .saturating_sub(self.cache.budget.evictor().ahead());
        usize::try_from(room >> self.shift)
            .unwrap_or(usize::MAX)
            .max(1)
    }
}

impl<'m, I: Iterator<Item = u64>> Iterator for Landing<'m, I> {
    type Item = Result<SharedGuard<'m>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.advance();
        // A landed buffer, the earliest listed first; a refused index counts as landed, so its
        // error comes out no later than its turn.
        let ready = self
            .ahead
            .iter()
            .position(|a| matches!(a, Ahead::Landed(_) | Ahead::Refused(_)));
        let r = match ready {
            Some(k) => match self.ahead.remove(k).expect("found above") {
                Ahead::Landed(g) => Ok(g),
                Ahead::Refused(e) => Err(e),
                _ => unreachable!("only landed and refused entries are ready"),
            },
            // Nothing landed (so the iterator holds no pin): wait for the oldest, or load it
            // as a demand miss (never claimed, evicted by another thread since it landed, or
            // its background read failed: then this read's error is the item's).
            None => {
                let a = self.ahead.pop_front()?;
                // Without the mapping's readahead: the iterator reads ahead itself.
                let i = a.unpinned().expect("only unpinned entries are left");
                self.m.pin_shared_with(i, false)
            }
        };
        self.advance();
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lo, hi) = self.indices.size_hint();
        let n = self.ahead.len();
        (lo.saturating_add(n), hi.and_then(|h| h.checked_add(n)))
    }
}

impl<I: Iterator<Item = u64>> FusedIterator for Landing<'_, I> {}

impl<I> Drop for Landing<'_, I> {
    /// Unpins what it holds and waits for the reads it started, so that once it is gone
    /// nothing of it is left pinned or in flight: every buffer it claimed is cached and
    /// unpinned (evictable) or, if its read failed, evicted. At most a window of reads, each
    /// already issued.
    fn drop(&mut self) {
        // Every pin first (landed guards unpin as they drop), so that no wait below holds one.
        self.ahead.retain(|a| matches!(a, Ahead::Claimed(_)));
        for a in self.ahead.drain(..) {
            if let Ahead::Claimed(i) = a {
                let s = self.m.state(i);
                loop {
                    let w = s.load();
                    if w.phase() != Phase::Loading {
                        break;
                    }
                    s.wait_change(w);
                }
            }
        }
    }
}

impl<I> std::fmt::Debug for Landing<'_, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing")
            .field("window", &self.window)
            .field("ahead", &self.ahead.len())
            .finish()
    }
}
