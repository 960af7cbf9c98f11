//! The advanced policy library (issue #4, part 2): ghost-based, frequency-based,
//! hit-density, generational and application-directed policies, by name.
//!
//! Each policy lives in its own file with its source and when it suits; this file only names
//! them for the registry and holds what they share.

use super::{Buffers, Policy};
use crate::state::Phase;

/// Names accepted by [`advanced_policy_by_name`].
pub const ADVANCED_POLICY_NAMES: &[&str] = &[
    "2q",
    "arc",
    "lirs",
    "w-tinylfu",
    "lhd",
    "mglru",
    "get-scan",
    "priority",
];

/// A fresh policy of the named kind, or `None` if the name is not one of
/// [`ADVANCED_POLICY_NAMES`].
pub fn advanced_policy_by_name(name: &str) -> Option<Box<dyn Policy>> {
    Some(match name {
        "2q" => Box::new(super::TwoQ::new()),
        "arc" => Box::new(super::ArcPolicy::new()),
        "lirs" => Box::new(super::Lirs::new()),
        "w-tinylfu" => Box::new(super::WTinyLfu::new()),
        "lhd" => Box::new(super::Lhd::new()),
        "mglru" => Box::new(super::Mglru::new()),
        "get-scan" => Box::new(super::GetScan::new()),
        // By name there is no handle to protect with, so only `Hint::PRIORITY` loads are
        // protected; applications construct `Priority` themselves to get a handle.
        "priority" => Box::new(super::Priority::new()),
        _ => return None,
    })
}

/// Whether buffer `i` could be evicted right now (cached, unpinned, no IO). Policies skip the
/// others when proposing, so a pinned buffer at the tail of a queue costs a step, not a
/// rejected proposal and a fallback eviction.
#[inline]
pub(super) fn idle(buffers: &Buffers<'_>, i: u64) -> bool {
    let w = buffers.state(i);
    w.phase() == Phase::Cached && w.idle()
}

/// Test access to what a policy believes is resident.
#[cfg(test)]
#[allow(dead_code)] // used by the proptest over the library
pub(super) trait Audit {
    /// Every buffer the policy tracks as resident, each once.
    fn tracked(&self) -> Vec<u64>;
}
