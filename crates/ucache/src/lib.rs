//! ucache: a customizable IO cache for data-intensive programs.
//!
//! A [`Cache`] is a memory budget; [`Cache::map`] puts an object of a [`store::Store`] behind a
//! contiguous range of virtual memory cut into fixed-size buffers. Programs access buffers
//! through pins ([`Mapping::pin_shared`], [`Mapping::pin_exclusive`]) or optimistic reads, and
//! steer the cache with the explicit primitives `ensure_cached`, `prefetch`, `evict`,
//! `writeback` and `msync`, and with per-mapping [`policy::Policy`] hooks.
//!
//! The design follows uCache (FAST'26) and vmcache (SIGMOD'23): every buffer has one atomic
//! state word ([`state`]), insertion is a two-step lock-free CAS protocol, eviction is batched
//! and optimistic, and nothing takes a global lock on the hit path or an in-place miss (a pool
//! miss pops its frame under its pool's free-list lock).

mod cache;
pub mod error;
mod evictor;
mod fault;
mod fault_thread;
mod fork;
mod guard;
mod held;
mod io_worker;
mod mapping;
pub mod policy;
mod pool;
mod region;
mod sigbus;
mod staging;
pub mod state;
mod stats;
mod stats_display;
mod stopwatch;
pub mod store;
mod sync;
mod typed;
mod uffd;
#[cfg(feature = "tokio")]
mod wakers;

pub use cache::{
    Cache, CacheOptions, BACKGROUND_EVICTION_BATCHES, DEFAULT_BATCH_BYTES, DEFAULT_BUDGET_WAIT,
    MAX_BATCH,
};
pub use error::{Bounds, Error, Result};
pub use fault::{FaultAction, FaultHandling, FaultHook};
pub use guard::{ExclusiveGuard, OptimisticView, SharedGuard};
pub use mapping::{BeforeWriteback, MapOptions, Mapping, OptimisticRead, Placement, UnmapError};
pub use stats::{StatsSnapshot, LATENCY_BUCKETS};

/// The examples of `docs/guide.md`, run as doc tests so the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
mod guide {}
