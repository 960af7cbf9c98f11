//! Reclaim: the cache's list of what it can evict from, and the eviction round over it.
//!
//! The budget ([`crate::budget`]) counts bytes and knows nothing of mappings; when it must make
//! room it runs one round here. A round asks the global policy which members to take from and
//! asks each, through the narrow [`Evictable`] interface, to evict up to its share of one
//! batch. How a member evicts (claim, write back the dirty ones, drop, finish) is its own
//! business (`mapping/evict.rs`). This module names no mapping: members are trait objects, so
//! the dependencies point one way, from the mappings down to the budget and this list.

use std::any::Any;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use crate::policy::{GuardedGlobal, MappingUsage};

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
    /// Evicts up to `want` buffers of the member's choosing. Returns how many buffers' budget
    /// this gave back ([`crate::budget::Budget::release`]); write-backs that failed are
    /// noted for the loader that ran the round ([`crate::budget::note_writeback_failure`]).
    fn evict_some(&self, want: usize) -> u64;
}

/// The members, changed only by map and unmap; read by evictors and address lookups without
/// locking.
#[derive(Default)]
pub(crate) struct Registry {
    list: ArcSwap<Vec<Arc<dyn Evictable>>>,
}

impl Registry {
    pub(crate) fn add(&self, m: Arc<dyn Evictable>) {
        self.list.rcu(|list| {
            let mut l = Vec::clone(list);
            l.push(m.clone());
            l
        });
    }

    pub(crate) fn remove(&self, id: u64) {
        self.list.rcu(|list| {
            list.iter()
                .filter(|m| m.id() != id)
                .cloned()
                .collect::<Vec<_>>()
        });
    }

    /// The members now.
    pub(crate) fn load(&self) -> Guard<Arc<Vec<Arc<dyn Evictable>>>> {
        self.list.load()
    }

    /// Evicts up to one `batch`, asking `global` where from. Returns buffers evicted (whose
    /// budget went back). The batch is counted in bytes across members, in the first chosen
    /// member's buffers when it was given as a count.
    pub(crate) fn evict_round(&self, global: &GuardedGlobal, batch: Batch) -> u64 {
        let list = self.list.load();
        let usage: Vec<MappingUsage> = list
            .iter()
            .map(|m| MappingUsage {
                resident: m.resident(),
                buffer_size: m.buffer_size(),
                weight: m.weight(),
            })
            .collect();
        let mut order = Vec::with_capacity(list.len());
        global.choose_eviction_mappings(&usage, &mut order);
        let mut evicted = 0;
        let mut left: Option<u64> = None;
        for i in order {
            let Some(m) = list.get(i) else { continue };
            let bs = m.buffer_size() as u64;
            let bytes = *left.get_or_insert_with(|| batch.buffers_for(bs as usize) as u64 * bs);
            if bytes == 0 {
                break;
            }
            let n = m.evict_some(bytes.div_ceil(bs) as usize);
            evicted += n;
            left = Some(bytes.saturating_sub(n * bs));
        }
        evicted
    }
}
