//! Readahead markers read with their window: a transparent mapping's asynchronous readahead
//! without a synchronous read on the reader's thread.
//!
//! [`ReadAhead::asynchronous`](crate::policy::prefetch::ReadAhead::asynchronous) leaves one
//! buffer of each window out, its marker, so that the reader faults there half a window before
//! the end and that fault starts the next window. Left out of the window's read, the marker's
//! own bytes were then read on the reader's thread: a 4 KiB read that waited behind the IO
//! threads' 1 MiB reads, 1-12 ms each on the virtio disk (539 of them, about 0.95 s, in one
//! sqlite scan of 512 MiB; docs/results/2026-11-26-preload-scans).
//!
//! Linux reads its marker page (`PG_readahead`) with the window and only flags it. Userspace
//! cannot flag a present page (it cannot read the accessed bit), so the page must stay absent
//! for the touch to fault. Here the marker is claimed and read with its window, as one
//! contiguous read; its bytes are *kept* in a slot of this table instead of installed, and the
//! buffer goes back to `Evicted`. Its fault then claims it as any miss, finds the kept bytes
//! and installs them without IO, and the miss hook starts the next window as before.
//!
//! Kept bytes are valid only while the buffer has not been loaded since: each entry records the
//! version the buffer's word has once the marker's claim is undone (every load that completes
//! and is evicted again, or is undone, bumps it), and a fault uses the bytes only if it claimed
//! the buffer from a word of that version. Writes through the mapping reach an object through
//! loaded buffers only, so an unchanged version means bytes unchanged by the mapping; a program
//! that writes the object around the mapping evicts the range explicitly to drop its copies
//! (the LD_PRELOAD shim does after every `pwrite`), and that drops kept bytes too.
//!
//! The slots are reserved from the cache's budget when the mapping is made (a few buffers,
//! within the quarter of the budget that set-aside pools share), so kept bytes never take
//! memory beyond the budget. A table that is
//! full replaces its oldest entry: a marker whose bytes were dropped is read on its fault, as
//! before.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::claim::LoadClaim;
use super::MappingCore;
use crate::budget::Budget;
use crate::error::Result;
use crate::region::Region;
use crate::state::Word;
use crate::stats::Counter;

/// Entries: one live marker per readahead stream (4 by default), and room for as many whose
/// reader has not reached them yet.
const SLOTS: usize = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    /// Slot unused.
    Free,
    /// The marker is proposed with its window; its read has not landed.
    Pending,
    /// The slot holds the marker's bytes, valid while its word's version is this one.
    Bytes { version: u64 },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    index: u64,
    kept: Kept,
    /// When the entry was made, on the table's clock: the oldest is replaced.
    stamp: u64,
}

/// The kept markers of one transparent mapping with readahead.
pub(super) struct KeptMarkers {
    slots: Region,
    bs: usize,
    entries: Mutex<([Entry; SLOTS], u64)>,
    /// The slots' budget went back to the cache (at unmap, or when the mapping is dropped).
    given_back: AtomicBool,
}

impl KeptMarkers {
    /// A table for a mapping of `buffers` buffers of `bs` bytes, its slots reserved from
    /// `budget` within the quarter that set-aside pools share
    /// ([`Budget::claim_aside`]): slots held for good must not crowd out loads when many
    /// mappings are made. `None` for a mapping too small for windows with markers to matter,
    /// or when the slots cannot be had.
    pub(super) fn new(budget: &Budget, buffers: u64, bs: usize) -> Option<KeptMarkers> {
        if buffers < 4 * SLOTS as u64 {
            return None;
        }
        let bytes = (SLOTS * bs) as u64;
        let granted = budget.claim_aside(SLOTS as u64, bs);
        let had = granted == SLOTS as u64;
        let slots = Region::reserve(SLOTS * bs, 4096).ok();
        let slots = slots.filter(|_| had && budget.reserve(bytes).is_ok());
        let Some(slots) = slots else {
            budget.release_aside(granted * bs as u64);
            return None;
        };
        let free = Entry {
            index: u64::MAX,
            kept: Kept::Free,
            stamp: 0,
        };
        Some(KeptMarkers {
            slots,
            bs,
            entries: Mutex::new(([free; SLOTS], 0)),
            given_back: AtomicBool::new(false),
        })
    }

    /// Gives the slots' budget back to `budget`, once, and their pages to the kernel.
    pub(super) fn give_back(&self, budget: &Budget) {
        {
            let mut g = self.entries.lock();
            if self.given_back.swap(true, Ordering::AcqRel) {
                return;
            }
            g.0.iter_mut().for_each(|e| e.kept = Kept::Free);
        }
        let _ = self.slots.drop_ranges(&[(0, self.slots.len())]);
        budget.release(self.slots.len() as u64);
        budget.release_aside(self.slots.len() as u64);
    }

    /// Budget the slots hold: all of them until given back.
    pub(super) fn bytes(&self) -> u64 {
        if self.given_back.load(Ordering::Acquire) {
            0
        } else {
            self.slots.len() as u64
        }
    }

    fn slot_addr(&self, k: usize) -> *mut u8 {
        self.slots.at(k * self.bs)
    }

    /// If `want` is a readahead window with its marker left out (ascending, adjacent but for
    /// one buffer missing inside, the shape `ReadAhead::asynchronous` proposes), puts the
    /// marker back in its place and notes it pending, so the window is read whole and the
    /// marker's bytes kept ([`MappingCore::keep_markers_of_run`]).
    pub(super) fn read_with_window(&self, want: &mut Vec<u64>) {
        let Some(m) = window_marker(want) else { return };
        {
            let mut g = self.entries.lock();
            // Checked under the lock, which `give_back` takes to clear the entries.
            if self.given_back.load(Ordering::Relaxed) {
                return;
            }
            let (entries, clock) = &mut *g;
            *clock += 1;
            let stamp = *clock;
            // The marker's own entry if it has one (a window proposed again), else a free
            // slot, else the oldest entry.
            let k = (0..SLOTS)
                .find(|&k| entries[k].index == m && entries[k].kept != Kept::Free)
                .or_else(|| (0..SLOTS).find(|&k| entries[k].kept == Kept::Free))
                .unwrap_or_else(|| (0..SLOTS).min_by_key(|&k| entries[k].stamp).unwrap_or(0));
            entries[k] = Entry {
                index: m,
                kept: Kept::Pending,
                stamp,
            };
        }
        let at = want.partition_point(|&j| j < m);
        want.insert(at, m);
    }

    /// The pending marker among buffers `first..first + n`, if any.
    fn pending_in(&self, first: u64, n: u64) -> Option<(usize, u64)> {
        let g = self.entries.lock();
        (0..SLOTS).find_map(|k| {
            let e = g.0[k];
            (e.kept == Kept::Pending && e.index >= first && e.index < first + n)
                .then_some((k, e.index))
        })
    }
}

/// The buffer missing inside `want`, if `want` is ascending and adjacent but for exactly one
/// buffer.
fn window_marker(want: &[u64]) -> Option<u64> {
    let (&first, &last) = (want.first()?, want.last()?);
    if last.checked_sub(first)? != want.len() as u64 {
        return None;
    }
    let mut hole = None;
    for pair in want.windows(2) {
        match pair[1].checked_sub(pair[0])? {
            1 => {}
            2 if hole.is_none() => hole = Some(pair[0] + 1),
            _ => return None,
        }
    }
    hole
}

impl MappingCore {
    /// Finishes a whole run of claims `claims` (buffers `first..`, read into `src`) that
    /// holds a pending readahead marker: copies the marker's bytes into its slot and undoes
    /// its claim (the buffer goes back to `Evicted`, its room given back), and installs the
    /// rest around it. Returns the claims still to publish (all but the marker) with the
    /// result of their install, or gives `claims` back untouched when the run holds no
    /// pending marker.
    pub(super) fn keep_markers_of_run<'a>(
        &'a self,
        first: u64,
        src: *const u8,
        claims: Vec<LoadClaim<'a>>,
    ) -> std::result::Result<(Vec<LoadClaim<'a>>, Result<()>), Vec<LoadClaim<'a>>> {
        let n = claims.len() as u64;
        let Some(kept) = &self.kept else {
            return Err(claims);
        };
        let Some((k, m)) = kept.pending_in(first, n) else {
            return Err(claims);
        };
        let mut rest = claims;
        let mut marker = rest.remove((m - first) as usize);
        let off = (m - first) as usize * self.bs;
        {
            let mut g = kept.entries.lock();
            let e = &mut g.0[k];
            // Replaced meanwhile by another window's marker: install this one as any buffer.
            if e.index != m || e.kept != Kept::Pending {
                drop(g);
                rest.insert((m - first) as usize, marker);
                return Err(rest);
            }
            // SAFETY: the run's staging memory holds n buffers, m among them; the slot is
            // this table's, written only under its lock.
            unsafe { std::ptr::copy_nonoverlapping(src.add(off), kept.slot_addr(k), self.bs) };
            // We hold the claim, so the word changes in nothing but its waiters bit until the
            // undo below, whose version a fault must see to use these bytes.
            let version = self.state(m).load().abort_load().version();
            e.kept = Kept::Bytes { version };
        }
        // Nothing reached the buffer's memory: the undo gives back its room only.
        marker.mark_unfilled();
        drop(marker);
        let before = (m - first) as usize * self.bs;
        let after = (n - 1) as usize * self.bs - before;
        // SAFETY: the staging run is readable; the buffers either side of the marker are
        // Loading and ours.
        let r = unsafe {
            let a = if before > 0 {
                self.install(first, src, before, false)
            } else {
                Ok(())
            };
            a.and_then(|()| {
                if after > 0 {
                    self.install(m + 1, src.add(off + self.bs), after, false)
                } else {
                    Ok(())
                }
            })
        };
        Ok((rest, r))
    }

    /// A demand miss on buffer `i`, claimed from word `seen` with its room taken: installs the
    /// marker bytes kept for it, if they are still valid, without IO (`writable` for a write
    /// miss). Returns whether it did; on `Ok(false)` the caller reads the buffer.
    pub(super) fn install_kept(
        &self,
        claim: &mut LoadClaim<'_>,
        seen: Word,
        writable: bool,
    ) -> Result<bool> {
        let Some(kept) = &self.kept else {
            return Ok(false);
        };
        let i = claim.index();
        let mut g = kept.entries.lock();
        let Some(k) = (0..SLOTS).find(|&k| g.0[k].index == i && g.0[k].kept != Kept::Free) else {
            return Ok(false);
        };
        let e = g.0[k];
        // Whatever the entry held, it is used up: a pending one is not in flight (we hold the
        // claim), and bytes of another version are stale.
        g.0[k].kept = Kept::Free;
        if e.kept
            != (Kept::Bytes {
                version: seen.version(),
            })
        {
            return Ok(false);
        }
        claim.mark_filled();
        // SAFETY: the slot holds buffer i's bytes (its version matched) and is ours under the
        // lock; buffer i is Loading and ours, its pages absent.
        unsafe { self.install(i, kept.slot_addr(k), self.bs, writable) }?;
        self.stats().add(Counter::MarkerHits, 1);
        Ok(true)
    }

    /// Drops what is kept for any of `indices`: an explicit eviction, which a program uses to
    /// invalidate bytes it changed around the mapping (the LD_PRELOAD shim after a `pwrite`).
    pub(super) fn forget_kept(&self, indices: &[u64]) {
        if let Some(kept) = &self.kept {
            let mut g = kept.entries.lock();
            for e in g.0.iter_mut() {
                if e.kept != Kept::Free && indices.contains(&e.index) {
                    e.kept = Kept::Free;
                }
            }
        }
    }

    /// Gives the kept markers' budget back (unmap, drop).
    pub(super) fn give_back_kept(&self) {
        if let Some(kept) = &self.kept {
            kept.give_back(&self.cache.budget);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::window_marker;

    #[test]
    fn finds_the_one_buffer_missing_inside_a_window() {
        assert_eq!(window_marker(&[1, 2, 4]), Some(3));
        assert_eq!(window_marker(&[5, 6, 7, 8, 10, 11, 12]), Some(9));
        assert_eq!(window_marker(&[1, 2, 3]), None, "no hole");
        assert_eq!(window_marker(&[1, 3, 5]), None, "two holes");
        assert_eq!(window_marker(&[1, 4]), None, "a hole of two");
        assert_eq!(window_marker(&[4, 2, 3]), None, "not ascending");
        assert_eq!(window_marker(&[]), None);
        assert_eq!(window_marker(&[7]), None);
    }
}
