//! Caching policy: the paper's hookpoints (Table 2).
//!
//! A [`Policy`] is attached to one mapping. It sees that mapping's buffers only, by index, and
//! only *proposes*: the cache validates every candidate against the buffer's state word (still
//! cached, unpinned, no IO in flight) and cancels the eviction of any that fail, so a policy that
//! is wrong about a buffer can cost hit ratio but never correctness.
//!
//! A [`GlobalPolicy`] is attached to the cache and decides when memory must be freed and which
//! mappings give it up.
//!
//! Hooks run on the IO path of many threads at once, so implementations use interior
//! mutability. CLOCK, SIEVE, S3-FIFO, LFU and MGLRU keep their hit path lock-free (a bit or a counter);
//! the list policies (LRU, 2Q, ARC, LIRS, ...) keep one mutex per mapping around O(1) list
//! work, and the advanced ones skip a hit's update rather than wait for it under contention.
//! Hooks may run inside the SIGBUS handler of a transparent mapping's faulting thread, so a
//! hook must never touch the mapping's memory.

use crate::state::{BufferState, Word};

mod advanced;
mod arc;
mod clock;
pub mod config;
#[cfg(test)]
mod conformance;
mod count_min;
mod counter_clock;
mod exact_lfu;
mod fallback;
mod fifo;
mod forward;
mod get_scan;
mod global;
mod guarded;
mod hint;
mod lfu;
mod lhd;
mod lirs;
mod list;
mod lists;
mod lru;
mod mglru;
mod mru;
pub mod prefetch;
mod priority;
mod registry;
mod resident;
mod s3fifo;
mod sieve;
mod simulator;
mod two_q;
mod veto;
mod w_tiny_lfu;

pub use advanced::{advanced_policy_by_name, ADVANCED_POLICY_NAMES};
pub use arc::ArcPolicy;
pub use clock::{Clock, ClockConfig};
pub use config::{
    parse_policy, policy_from_spec, split_policy_list, PlainConfig, PolicyConfig, PolicyConfigError,
};
pub use count_min::CountMin;
pub use counter_clock::CounterClock;
pub use exact_lfu::ExactLfu;
pub use fallback::Fallback;
pub use fifo::Fifo;
pub use get_scan::GetScan;
pub use global::{MappingUsage, ProportionalGlobal, ReservedShares};
pub(crate) use guarded::{Guarded, GuardedGlobal};
pub use hint::Hint;
pub use lfu::{Lfu, LfuConfig};
pub use lhd::Lhd;
pub use lirs::{Lirs, LirsConfig};
pub use list::IndexList;
pub use lists::IndexQueues;
pub use lru::Lru;
pub use mglru::Mglru;
pub use mru::Mru;
pub use priority::{Priority, PriorityHandle};
pub use registry::{config_by_name, policy_by_name, POLICY_NAMES};
pub use resident::ResidentSet;
pub use s3fifo::{S3Fifo, S3FifoConfig, S3FifoRules, S3Queue};
pub use sieve::Sieve;
pub use simulator::{SimStats, Simulator};
pub use two_q::{TwoQ, TwoQConfig};
pub use veto::Veto;
pub use w_tiny_lfu::{WTinyLfu, WTinyLfuConfig};

/// The shape of the mapping a policy is attached to.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Buffers in the mapping.
    pub buffers: u64,
    /// The most buffers of this mapping that can be resident at once (the cache budget).
    pub capacity: u64,
    /// Bytes per buffer.
    pub buffer_size: usize,
}

/// Read access to the state words of a mapping's buffers, for policies that keep their
/// recency information in the word (CLOCK's referenced bit) rather than in their own structures.
pub struct Buffers<'a> {
    states: &'a [BufferState],
}

impl<'a> Buffers<'a> {
    pub(crate) fn new(states: &'a [BufferState]) -> Self {
        Buffers { states }
    }

    /// Number of buffers in the mapping.
    #[inline]
    pub fn len(&self) -> u64 {
        self.states.len() as u64
    }

    /// Whether the mapping has no buffers.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    /// The current state word of buffer `index`.
    #[inline]
    pub fn state(&self, index: u64) -> Word {
        self.states[index as usize].load()
    }

    /// Hints that the state word of `index` will be read soon (a CPU prefetch of its cache
    /// line); out-of-range indices are ignored.
    #[inline]
    pub fn prefetch(&self, index: u64) {
        if let Some(s) = self.states.get(index as usize) {
            s.prefetch();
        }
    }

    /// Whether buffer `index` could be evicted right now: cached and held by nobody. Policies
    /// skip other buffers when they propose, so a pinned buffer never costs a batch slot.
    #[inline]
    pub fn is_candidate(&self, index: u64) -> bool {
        let w = self.state(index);
        w.phase() == crate::state::Phase::Cached && w.idle()
    }

    /// Clears the referenced bit and says whether it was set (CLOCK's second chance). Losing a
    /// race with a concurrent pin only leaves the bit set, which is harmless.
    #[inline]
    pub fn test_and_clear_referenced(&self, index: u64) -> bool {
        let s = &self.states[index as usize];
        let w = s.load();
        if !w.referenced() {
            return false;
        }
        let _ = s.cas(w, w.clear_referenced());
        true
    }
}

/// Per-mapping policy hooks.
///
/// Only [`Policy::choose_eviction_buffers`] is required; the default of every other hook does
/// what a policy that does not care would want.
pub trait Policy: Send + Sync + 'static {
    /// A short name for statistics and benchmark output.
    fn name(&self) -> &str;

    /// Called once, before the mapping is shared, to size resident-set structures.
    fn attach(&mut self, layout: Layout) {
        let _ = layout;
    }

    /// Proposes up to `want` buffers to evict, appended to `out`. Called concurrently by every
    /// thread that needs memory; proposals may overlap and may be stale.
    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>);

    /// Whether this buffer may be evicted now: the application's veto, e.g. a page whose log
    /// records are not yet durable, or one its own latch protects (the paper's vmcache port).
    fn is_evictable(&self, index: u64) -> bool {
        let _ = index;
        true
    }

    /// Admission control (cache_ext §5.6): whether a missing buffer that is about to be read
    /// may enter the cache. Refused reads are served around the cache: [`crate::Mapping::read`]
    /// copies those bytes straight from the store, a prefetch drops the buffer, the simulator
    /// counts a bypassed miss. Pins, `ensure_cached` and transparent faults always admit: their
    /// caller needs the bytes in the mapping's memory, so there is nothing to bypass to. Called
    /// on the reading thread, so a policy may decide by [`Hint::current`] (e.g. refuse
    /// [`Hint::BACKGROUND`] reads, as cache_ext's compaction filter does). Asked before
    /// [`Policy::on_miss`], which follows for refused demand reads too.
    fn admit(&self, index: u64) -> bool {
        let _ = index;
        true
    }

    /// Whether misses on this mapping should trigger [`Policy::choose_prefetch_buffers`].
    fn has_prefetching(&self) -> bool {
        false
    }

    /// After a miss on `index`, proposes buffers to read ahead asynchronously.
    fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
        let _ = (index, out);
    }

    /// Whether [`Policy::on_hit`] should be called. Asked once at attach time, so policies that
    /// need no per-hit work (CLOCK keeps its bit in the state word) cost nothing on hits.
    fn wants_hits(&self) -> bool {
        false
    }

    /// A demand access missed on this buffer: called before the manager reserves memory for
    /// it (and so before any eviction that reservation causes), with the buffer not yet
    /// resident. Ghost-based policies (ARC, 2Q, LIRS) adapt here, exactly where their papers
    /// do, since by [`Policy::on_insert`] the evictions made for this miss have already
    /// consumed the ghost lists. Not called for prefetches.
    fn on_miss(&self, index: u64) {
        let _ = index;
    }

    /// An access found the buffer cached. For a pin the buffer stays held while this runs; for
    /// `ensure_cached` and `prefetch`, which do not pin, it may be evicted meanwhile, so a hit
    /// may arrive for a buffer the policy no longer holds (ignore it, or reset on insert).
    fn on_hit(&self, index: u64) {
        let _ = index;
    }

    /// The buffer became resident. Called while the inserting thread still owns the buffer
    /// exclusively, so for one buffer it never races with [`Policy::on_evict`].
    fn on_insert(&self, index: u64) {
        let _ = index;
    }

    /// The buffer left the cache, for any reason (eviction, explicit evict, unmap). Called while
    /// the evicting thread still owns the buffer.
    fn on_evict(&self, index: u64) {
        let _ = index;
    }
}

/// Cache-wide policy hooks: when to evict and from which mappings.
pub trait GlobalPolicy: Send + Sync + 'static {
    /// Whether to evict before `want` more bytes are taken; `used` and `budget` in bytes. A
    /// policy can ask for eviction below the budget (keeping headroom), not past it: the cache
    /// evicts whenever `used + want > budget` whatever this answers. Headroom is a wish: when
    /// nothing can be evicted, a load that fits the budget itself proceeds.
    fn need_to_evict(&self, used: u64, want: u64, budget: u64) -> bool {
        used + want > budget
    }

    /// Orders the mappings to take eviction candidates from, most preferred first, as indices
    /// into `usage`. The cache walks them until it has a batch; mappings left out are walked
    /// after those named (a preference, never a veto: `is_evictable` is the veto).
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>);
}
