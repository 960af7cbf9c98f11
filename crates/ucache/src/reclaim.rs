//! Reclaim: the cache's list of what it can evict from, and the eviction round over it.
//!
//! The budget ([`crate::budget`]) counts bytes and knows nothing of mappings; when it must make
//! room it runs one round here. A round asks the global policy which members to take from and
//! asks each, through the narrow [`Evictable`] interface, to evict up to its share of one
//! batch. How a member evicts (claim, write back the dirty ones, drop, finish) is its own
//! business (`mapping/evict.rs`). This module names no mapping: members are trait objects, so
//! the dependencies point one way, from the mappings down to the budget and this list.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};

use arc_swap::{ArcSwap, Guard};

use crate::policy::{GuardedGlobal, MappingUsage};

/// A member unused while eviction rounds freed `budget / IDLE_HORIZON` bytes is idle
/// ([`Activity`]).
pub(crate) const IDLE_HORIZON: u64 = 2;

/// [`crate::CacheOptions::MAX_BATCH`].
pub(crate) const MAX_BATCH: usize = 1024;

/// How much one eviction round frees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Batch {
    Buffers(usize),
    Bytes(u64),
}

impl Batch {
    /// Buffers of `bs` bytes per round (1..=[`MAX_BATCH`]).
    pub(crate) fn buffers_for(self, bs: usize) -> usize {
        match self {
            Batch::Buffers(n) => n,
            Batch::Bytes(b) => (b / bs as u64).clamp(1, MAX_BATCH as u64) as usize,
        }
    }
}

/// A member of the cache that holds budget and can give it back: a mapping, as the budget and
/// the eviction round see it. `Any`, so that the public façade (which made the member) can
/// get its own type back for the address-based calls; nothing below the façade does.
pub(crate) trait Evictable: Any + Send + Sync {
    /// The identity [`Registry::remove`] takes.
    fn id(&self) -> u64;
    /// Buffers resident now, for the global policy.
    fn resident(&self) -> u64;
    /// Bytes per buffer: the unit of [`Evictable::evict_some`].
    fn buffer_size(&self) -> usize;
    /// The member's weight for the global policy.
    fn weight(&self) -> u32;
    /// Whether nobody has used the member while the cache evicted `horizon` bytes, the
    /// eviction clock reading `clock` ([`Activity::idle`]); always false for a member whose
    /// accesses ucache cannot see.
    fn idle(&self, clock: u64, horizon: u64) -> bool;
    /// Evicts up to `want` buffers of the member's choosing. Returns how many buffers' budget
    /// this gave back ([`crate::budget::Budget::release`]); write-backs that failed are
    /// noted for the loader that ran the round ([`crate::budget::note_writeback_failure`]).
    fn evict_some(&self, want: usize) -> u64;
}

/// The members, changed only by map and unmap; read by evictors and address lookups without
/// locking.
///
/// It holds members weakly: `unmap` waits until its handle holds the last reference to the
/// mapping, so that the address range is free when it returns, and a round that took a copy
/// of the list and waits in the global policy (a policy may block) must not hold that up.
/// A round holds a member only while it asks or evicts it.
#[derive(Default)]
pub(crate) struct Registry {
    list: ArcSwap<Vec<Member>>,
    /// The eviction clock: bytes that eviction rounds have freed, ever.
    evicted_bytes: AtomicU64,
}

/// When a member was last used, on the eviction clock ([`Registry`]'s bytes evicted): what
/// tells an idle member from one whose share of the budget protects a working set.
///
/// Shares exist so that a fast-loading tenant (a scan) cannot push out a tenant that reuses its
/// buffers; a tenant nobody touches reuses nothing, and its buffers under its share would stay
/// while an active tenant thrashes in its own (found in TPC-H on S3: a query whose working set
/// fits the budget missed on every run, the budget held by files earlier queries had read).
/// Idle means unused while the cache evicted half its budget ([`IDLE_HORIZON`]). A whole
/// budget would be the safe bound (under a global LRU every buffer of such a member would be
/// gone by then, since each eviction made room for a buffer used later), but a member that
/// thrashes only mildly evicts a few buffers per pass over its working set, and an idle
/// member's buffers would outlast many passes. Less than half would come near what one call
/// may evict at once (a readahead window reaches a quarter of the budget), so a member used
/// between two such calls could be taken for idle. A tenant that must keep its share through
/// long sleeps has [`crate::policy::ReservedShares`].
///
/// An access costs one relaxed load of a line that only eviction rounds write (once per round
/// at most), and a store after each round that found the member used.
pub(crate) struct Activity {
    touched: AtomicBool,
    seen_at: AtomicU64,
}

impl Default for Activity {
    /// Used now: a new member is not idle before a round has seen it.
    fn default() -> Self {
        Activity {
            touched: AtomicBool::new(true),
            seen_at: AtomicU64::new(0),
        }
    }
}

impl Activity {
    /// Notes a use.
    #[inline]
    pub(crate) fn touch(&self) {
        if !self.touched.load(Relaxed) {
            self.touched.store(true, Relaxed);
        }
    }

    /// Whether the member went unused while the clock advanced `horizon` bytes, the clock
    /// reading `clock` now. A use noted since the last call restarts the wait. Racing calls
    /// (two rounds at once) may both see the use; either stamp is a clock reading of now.
    pub(crate) fn idle(&self, clock: u64, horizon: u64) -> bool {
        if self.touched.load(Relaxed) {
            self.touched.store(false, Relaxed);
            self.seen_at.store(clock, Relaxed);
            return false;
        }
        clock.saturating_sub(self.seen_at.load(Relaxed)) >= horizon
    }
}

/// A member of the [`Registry`]: its identity, and the member while it lives.
#[derive(Clone)]
pub(crate) struct Member {
    id: u64,
    member: Weak<dyn Evictable>,
}

impl Member {
    /// The member, unless it is gone (dropped after leaving the list).
    pub(crate) fn get(&self) -> Option<Arc<dyn Evictable>> {
        self.member.upgrade()
    }
}

impl Registry {
    pub(crate) fn add(&self, m: Arc<dyn Evictable>) {
        let m = Member {
            id: m.id(),
            member: Arc::downgrade(&m),
        };
        self.list.rcu(|list| {
            let mut l = Vec::clone(list);
            l.push(m.clone());
            l
        });
    }

    pub(crate) fn remove(&self, id: u64) {
        self.list.rcu(|list| {
            list.iter()
                .filter(|m| m.id != id)
                .cloned()
                .collect::<Vec<_>>()
        });
    }

    /// The members now.
    pub(crate) fn load(&self) -> Guard<Arc<Vec<Member>>> {
        self.list.load()
    }

    /// Evicts up to one `batch`, asking `global` where from. Returns buffers evicted (whose
    /// budget went back). The batch is counted in bytes across members, in the first chosen
    /// member's buffers when it was given as a count. A member is idle when unused while a
    /// [`IDLE_HORIZON`]th of the `budget` was evicted ([`Activity`]).
    pub(crate) fn evict_round(&self, global: &GuardedGlobal, batch: Batch, budget: u64) -> u64 {
        let list = self.list.load();
        let clock = self.evicted_bytes.load(Relaxed);
        let horizon = budget / IDLE_HORIZON;
        // A member gone since the list was copied holds nothing: the policy sees it empty.
        let usage: Vec<MappingUsage> = list
            .iter()
            .map(|m| match m.get() {
                Some(m) => MappingUsage {
                    resident: m.resident(),
                    buffer_size: m.buffer_size(),
                    weight: m.weight(),
                    idle: m.idle(clock, horizon),
                },
                None => MappingUsage {
                    resident: 0,
                    buffer_size: 4096,
                    weight: 1,
                    idle: true,
                },
            })
            .collect();
        let mut order = Vec::with_capacity(list.len());
        global.choose_eviction_mappings(&usage, &mut order);
        let mut evicted = 0;
        let mut freed = 0;
        let mut left: Option<u64> = None;
        for i in order {
            let Some(m) = list.get(i).and_then(Member::get) else {
                continue;
            };
            let bs = m.buffer_size() as u64;
            let bytes = *left.get_or_insert_with(|| batch.buffers_for(bs as usize) as u64 * bs);
            if bytes == 0 {
                break;
            }
            let n = m.evict_some(bytes.div_ceil(bs) as usize);
            evicted += n;
            freed += n * bs;
            left = Some(bytes.saturating_sub(n * bs));
        }
        // The clock moves once per round, and only when the round freed something.
        if freed > 0 {
            self.evicted_bytes.fetch_add(freed, Relaxed);
        }
        evicted
    }
}
