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
//! mutability with fine-grained synchronization (atomics, per-slot CAS), never one big lock.

use crate::state::{BufferState, Word};

mod advanced;
mod arc;
mod clock;
mod count_min;
mod fallback;
mod get_scan;
mod global;
mod guarded;
mod hint;
mod lhd;
mod lirs;
mod list;
mod mglru;
pub mod prefetch;
mod priority;
mod resident;
mod simulator;
mod two_q;
mod w_tiny_lfu;

pub use advanced::{advanced_policy_by_name, ADVANCED_POLICY_NAMES};
pub use arc::ArcPolicy;
pub use clock::Clock;
pub use count_min::CountMin;
pub use fallback::Fallback;
pub use get_scan::GetScan;
pub use global::{MappingUsage, ProportionalGlobal};
pub use guarded::Guarded;
pub use hint::Hint;
pub use lhd::Lhd;
pub use lirs::Lirs;
pub use list::IndexList;
pub use mglru::Mglru;
pub use priority::{Priority, PriorityHandle};
pub use resident::ResidentSet;
pub use simulator::{SimStats, Simulator};
pub use two_q::TwoQ;
pub use w_tiny_lfu::WTinyLfu;

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

    /// A pin found the buffer cached.
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
    /// Whether `want` more bytes fit; `used` and `budget` in bytes.
    fn need_to_evict(&self, used: u64, want: u64, budget: u64) -> bool {
        used + want > budget
    }

    /// Orders the mappings to take eviction candidates from, most preferred first, as indices
    /// into `usage`. The cache walks them until it has a batch.
    fn choose_eviction_mappings(&self, usage: &[MappingUsage], out: &mut Vec<usize>);
}
