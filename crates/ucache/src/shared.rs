//! What one cache's mappings share: its budget, its IO threads, its statistics and the
//! process that made it. Each mapping holds this core; the public [`crate::Cache`] is a
//! handle on it.
//!
//! It sits below the mappings and names none of them: the budget sees them as
//! [`Evictable`](crate::reclaim::Evictable) members, the IO threads as
//! [`IoTarget`](crate::io_worker::IoTarget)s, and only the façade (`cache.rs`), which makes
//! mappings, knows their type. See docs/design.md, "Module layers".

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::budget::Budget;
use crate::evictor::{EvictAhead, Evictor};
use crate::io_worker::IoWorker;
use crate::policy::GlobalPolicy;
use crate::reclaim::Batch;

pub(crate) struct CacheCore {
    pub(crate) budget: Budget,
    /// Every mapping's own counters, which [`crate::Cache::stats`] adds to the budget's.
    pub(crate) stats_registry: crate::stats::Registry,
    pub(crate) next_id: AtomicU64,
    pub(crate) io: IoWorker,
    pub(crate) background_eviction: bool,
    pub(crate) profile: bool,
    /// The process that made the cache: a forked child may not use it ([`crate::fork`]).
    pid: u32,
}

/// What [`CacheCore::new`] takes: the checked options of a cache.
pub(crate) struct CoreOptions {
    pub(crate) budget: u64,
    pub(crate) batch: Batch,
    pub(crate) global: Arc<dyn GlobalPolicy>,
    pub(crate) io_threads: usize,
    pub(crate) background_eviction: bool,
    pub(crate) budget_wait: Duration,
    pub(crate) profile: bool,
    pub(crate) pool_huge_pages: bool,
}

impl CacheCore {
    pub(crate) fn new(o: CoreOptions) -> Arc<CacheCore> {
        Arc::new_cyclic(|weak: &Weak<CacheCore>| {
            let ahead: Weak<dyn EvictAhead> = weak.clone();
            CacheCore {
                budget: Budget::new(
                    o.budget,
                    o.batch,
                    o.global,
                    o.budget_wait,
                    o.pool_huge_pages,
                    Evictor::new(ahead),
                ),
                stats_registry: Default::default(),
                next_id: AtomicU64::new(0),
                io: IoWorker::new(o.io_threads),
                background_eviction: o.background_eviction,
                profile: o.profile,
                pid: std::process::id(),
            }
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }
}

/// The background evictor's view of the cache: its budget.
impl EvictAhead for CacheCore {
    fn evictor(&self) -> &Evictor {
        self.budget.evictor()
    }
    fn short_of(&self, bytes: u64) -> bool {
        self.budget.short_of(bytes)
    }
    fn evict_ahead(&self) -> u64 {
        self.budget.evict_ahead()
    }
}
