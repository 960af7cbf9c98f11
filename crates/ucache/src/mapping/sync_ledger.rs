//! What a failed sync may have lost ("fsyncgate"). After a failed `fsync`, Linux may mark the
//! file's dirty pages clean and drop them, and report the error only once: a later `fsync`
//! returns success. So a cache that left buffers clean after writing them could later report
//! durable data the kernel threw away.
//!
//! Two kinds of write-back reach the store. msync's own writes keep their buffers claimed
//! until the sync after them returns, and are clean only if no sync failed since they began
//! (else they are dirty again, and written again by a retry). Eviction's and `writeback`'s
//! writes leave their buffers clean (or gone) at once: the ledger counts them, and a failed
//! sync that may have lost any of them poisons the mapping until the application clears it.
//!
//! Syncs of one mapping are serialized, so that one sync's success cannot hide another's
//! failure: with the error reported once, a sync that ran after a failed one would succeed
//! though the failure dropped pages it was meant to cover.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// A mapping's account of write-backs and syncs.
#[derive(Default)]
pub(super) struct SyncLedger {
    /// Write-backs left clean at once (eviction, `writeback`) that have begun.
    started: AtomicU64,
    /// Of those, the ones that have returned.
    completed: AtomicU64,
    syncs: Mutex<Syncs>,
}

#[derive(Default)]
struct Syncs {
    /// How many of the counted write-backs a successful sync covers: those that had returned
    /// before it began.
    durable: u64,
    /// Failed syncs so far: msync's writes are good only if this did not move since.
    failures: u64,
    /// The first failed sync that may have lost counted write-backs, until cleared.
    poison: Option<String>,
    /// Failed syncs that poisoned (or found poisoned) the mapping, so far: an msync during
    /// which this moved vouches for nothing, even if the poison was cleared before it ended.
    poisonings: u64,
    /// The failure behind the latest poisoning, kept past its clearing for that msync's error.
    last_poison: String,
}

/// Where the poison stood when an msync began ([`SyncLedger::poison_mark`]).
#[derive(Clone, Copy)]
pub(super) struct PoisonMark {
    poisonings: u64,
    poisoned: bool,
}

/// A failed sync, or one that cannot vouch for the writes before it.
pub(super) enum SyncError {
    /// The store's sync failed.
    Failed(io::Error),
    /// Another sync of this mapping failed after these writes began: the store may have
    /// dropped them, and this sync would not say.
    Overtaken,
}

impl SyncLedger {
    /// Counts `n` write-backs that leave their buffers clean at once, before they begin.
    pub(super) fn begin_clean_writes(&self, n: u64) {
        self.started.fetch_add(n, Ordering::AcqRel);
    }

    /// Counts `n` such write-backs as returned (failed ones too: they need no cover).
    pub(super) fn end_clean_writes(&self, n: u64) {
        self.completed.fetch_add(n, Ordering::AcqRel);
    }

    /// The failure count to hand to [`SyncLedger::sync`], read before writes that are to be
    /// vouched for by that sync.
    pub(super) fn epoch(&self) -> u64 {
        self.syncs.lock().failures
    }

    /// Runs the store's `sync`, vouching for writes begun after `epoch`: `Ok` only if it
    /// succeeded and no sync failed since then. A failure that may have lost counted
    /// write-backs poisons the mapping.
    pub(super) fn sync(
        &self,
        epoch: u64,
        sync: impl FnOnce() -> io::Result<()>,
    ) -> Result<(), SyncError> {
        let mut s = self.syncs.lock();
        if s.failures != epoch {
            return Err(SyncError::Overtaken);
        }
        let covered = self.completed.load(Ordering::Acquire);
        match sync() {
            Ok(()) => {
                s.durable = s.durable.max(covered);
                Ok(())
            }
            Err(e) => {
                s.failures += 1;
                if self.started.load(Ordering::Acquire) > s.durable {
                    s.poison.get_or_insert_with(|| e.to_string());
                    s.poisonings += 1;
                    s.last_poison = e.to_string();
                }
                Err(SyncError::Failed(e))
            }
        }
    }

    /// Where the poison stands, for [`SyncLedger::poisoned_since`] at the end of an msync.
    pub(super) fn poison_mark(&self) -> PoisonMark {
        let s = self.syncs.lock();
        PoisonMark {
            poisonings: s.poisonings,
            poisoned: s.poison.is_some(),
        }
    }

    /// The failure that poisoned the mapping, if it is poisoned now, was when `mark` was
    /// taken, or was poisoned again since: an msync that overlapped a poisoning cannot vouch
    /// for what the lost writes held, whoever cleared it meanwhile.
    pub(super) fn poisoned_since(&self, mark: PoisonMark) -> Option<String> {
        let s = self.syncs.lock();
        match &s.poison {
            Some(first) => Some(first.clone()),
            None if mark.poisoned || s.poisonings != mark.poisonings => Some(s.last_poison.clone()),
            None => None,
        }
    }

    /// Lifts the poison: the application has dealt with what may have been lost, so every
    /// write-back counted so far is taken as settled.
    pub(super) fn clear(&self) -> Option<String> {
        let mut s = self.syncs.lock();
        s.durable = self.started.load(Ordering::Acquire);
        s.poison.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail() -> io::Result<()> {
        Err(io::Error::other("EIO"))
    }

    #[test]
    fn a_failure_poisons_only_if_clean_writes_were_uncovered() {
        let l = SyncLedger::default();
        let mark = l.poison_mark();
        assert!(matches!(l.sync(l.epoch(), fail), Err(SyncError::Failed(_))));
        assert!(
            l.poisoned_since(mark).is_none(),
            "nothing written outside msync"
        );
        l.begin_clean_writes(2);
        l.end_clean_writes(2);
        assert!(l.sync(l.epoch(), || Ok(())).is_ok());
        assert!(l.sync(l.epoch(), fail).is_err());
        assert!(
            l.poisoned_since(mark).is_none(),
            "the writes were covered by a good sync"
        );
        l.begin_clean_writes(1);
        assert!(l.sync(l.epoch(), fail).is_err());
        let mark = l.poison_mark();
        assert_eq!(
            l.poisoned_since(mark).as_deref(),
            Some("EIO"),
            "one in flight"
        );
        assert!(l.clear().is_some());
        assert!(
            l.poisoned_since(mark).is_some(),
            "poisoned when the mark was taken"
        );
        let mark = l.poison_mark();
        assert!(l.sync(l.epoch(), fail).is_err());
        assert!(
            l.poisoned_since(mark).is_none(),
            "cleared writes are settled"
        );
    }

    #[test]
    fn a_good_sync_after_a_failure_does_not_vouch_for_writes_before_it() {
        let l = SyncLedger::default();
        let epoch = l.epoch(); // an msync begins its writes
        assert!(l.sync(l.epoch(), fail).is_err()); // another's sync fails
        assert!(matches!(
            l.sync(epoch, || Ok(())),
            Err(SyncError::Overtaken)
        ));
        assert!(l.sync(l.epoch(), || Ok(())).is_ok());
    }

    #[test]
    fn a_write_returned_after_a_good_sync_began_is_not_covered_by_it() {
        let l = SyncLedger::default();
        l.begin_clean_writes(1);
        let ledger = &l;
        // The write returns while the sync runs: that sync does not cover it.
        assert!(l
            .sync(l.epoch(), || {
                ledger.end_clean_writes(1);
                Ok(())
            })
            .is_ok());
        let mark = l.poison_mark();
        assert!(l.sync(l.epoch(), fail).is_err());
        assert!(l.poisoned_since(mark).is_some());
    }

    /// An msync that began before a poisoning, which another thread cleared before the msync
    /// ended, still fails: its writes may be among those lost.
    #[test]
    fn a_poisoning_cleared_during_an_msync_still_fails_it() {
        let l = SyncLedger::default();
        let mark = l.poison_mark();
        l.begin_clean_writes(1);
        l.end_clean_writes(1);
        assert!(l.sync(l.epoch(), fail).is_err());
        assert!(l.clear().is_some());
        assert!(l.sync(l.epoch(), || Ok(())).is_ok());
        assert_eq!(l.poisoned_since(mark).as_deref(), Some("EIO"));
        assert!(l.poisoned_since(l.poison_mark()).is_none());
    }
}
