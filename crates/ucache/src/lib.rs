//! ucache: a customizable IO cache for data-intensive programs.
//!
//! A [`Cache`] is a memory budget; [`Cache::map`] puts an object of a [`store::Store`] behind a
//! contiguous range of virtual memory cut into fixed-size buffers. Programs access buffers
//! through pins ([`Mapping::pin_shared`], [`Mapping::pin_exclusive`]) or optimistic reads, and
//! steer the cache with the explicit primitives `ensure_cached`, `prefetch`, `evict`,
//! `writeback` and `msync`, and with per-mapping [`policy::Policy`] hooks.
//!
//! The design follows uCache (FAST'26) and vmcache (SIGMOD'23): every buffer has one atomic
//! state word ([`Word`]), insertion is a two-step lock-free CAS protocol, eviction is batched
//! and optimistic, and nothing takes a global lock on the hit path or an in-place miss (a pool
//! miss pops its frame under its pool's free-list lock).

// Every module is private except the three families a user picks from (`error`, `policy`,
// `store`); what else is public is re-exported below, one chosen list.
mod budget;
mod cache;
mod cache_line;
pub mod error;
mod evictor;
mod fault;
mod fault_thread;
mod fork;
mod gauge;
mod guard;
mod held;
mod io_worker;
mod mapping;
mod ordinal;
mod per_thread;
pub mod policy;
mod pool;
mod reclaim;
mod region;
mod shared;
mod sigbus;
mod staging;
mod state;
mod stats;
mod stats_display;
mod stopwatch;
pub mod store;
mod sync;
mod typed;
mod uffd;
#[cfg(feature = "tokio")]
mod wakers;

// The public surface, by what a program does with it.
// A cache and how it is built (its tuning constants are associated constants of
// `CacheOptions`).
pub use cache::{Cache, CacheOptions};
// A mapping: how it is made, the handle, what `unmap` reports, its iterator and hook.
pub use mapping::{
    BeforeWriteback, Landing, MapOptions, Mapping, OptimisticRead, Placement, UnmapError,
};
// Access to buffers: pins, optimistic views.
pub use guard::{ExclusiveGuard, OptimisticView, SharedGuard};
// Transparent mappings: what a fault that cannot be served does.
pub use fault::{FaultAction, FaultHandling, FaultHook};
// A buffer's state, read-only (`Mapping::state`, `policy::Buffers::state`).
pub use state::{Phase, Word};
// Statistics.
pub use stats::StatsSnapshot;
// Errors.
pub use error::{Bounds, Error, Result};

/// The examples of `docs/guide.md`, run as doc tests so the guide cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide.md")]
mod guide {}
