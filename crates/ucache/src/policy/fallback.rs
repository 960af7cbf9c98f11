//! The manager's own victim search, used when a policy proposes too few buffers.
//!
//! A policy only proposes (cache_ext's safety rule): a policy that proposes nothing, proposes
//! buffers that are pinned or gone, or panics must still not stop the cache from freeing
//! memory. This sweep needs no policy state, only the state words, so it works whatever the
//! policy did. It is a plain CLOCK over the whole mapping, bounded per call, so a broken
//! policy costs throughput, never progress or correctness.

use std::sync::atomic::{AtomicU64, Ordering};

use super::Buffers;
use crate::state::Phase;

/// Slots examined per wanted victim before giving up for this call.
const SWEEP_PER_VICTIM: u64 = 64;
/// Slots examined per call at least, so a mapping that is mostly evicted still yields victims.
const MIN_SWEEP: u64 = 4096;

#[derive(Default)]
pub struct Fallback {
    hand: AtomicU64,
}

impl Fallback {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends up to `want` cached, idle, unreferenced buffers to `out`, clearing referenced
    /// bits as it passes (second chance), and sweeping at most a bounded number of slots.
    pub fn victims(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let n = buffers.len();
        if n == 0 || want == 0 {
            return;
        }
        let start = out.len();
        let limit = (want as u64 * SWEEP_PER_VICTIM).max(MIN_SWEEP).min(2 * n);
        let mut seen = 0;
        while seen < limit && out.len() - start < want {
            let step = 64.min(limit - seen);
            let from = self.hand.fetch_add(step, Ordering::Relaxed);
            for k in from..from + step {
                if out.len() - start >= want {
                    // Hand back the slots not looked at, unless another sweep moved on
                    // meanwhile: the next call starts right after the last victim. A hand that
                    // always moved by whole steps would, on a mapping of 64 buffers, start at
                    // the same buffer every time and propose the same ones (all vetoed, say)
                    // for good.
                    let _ = self.hand.compare_exchange(
                        from + step,
                        k,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    break;
                }
                let i = k % n;
                let w = buffers.state(i);
                // Not one the policy (or this sweep) proposed already: a duplicate would take
                // a place in the batch and then count as a cancelled eviction.
                if w.phase() == Phase::Cached
                    && w.idle()
                    && out.len() - start < want
                    && !out.contains(&i)
                    && !buffers.test_and_clear_referenced(i)
                {
                    out.push(i);
                }
            }
            seen += step;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BufferState, Pin, Word};

    /// Consecutive calls go on from the last victim: on a mapping of 64 buffers, a hand that
    /// moved by whole steps of 64 started at buffer 0 every time and proposed 0..4 again and
    /// again (a veto on them then stalled the cache for good).
    #[test]
    fn the_next_sweep_starts_after_the_last_victim() {
        let st: Vec<BufferState> = (0..64).map(|_| BufferState::new()).collect();
        for s in &st {
            let cached = Word::EVICTED
                .begin_load()
                .unwrap()
                .finish_load(Pin::None, false);
            s.store_exclusive(cached);
        }
        let f = Fallback::new();
        let b = Buffers::new(&st);
        let mut first = Vec::new();
        f.victims(&b, 4, &mut first);
        let mut second = Vec::new();
        f.victims(&b, 4, &mut second);
        assert_eq!(first, [0, 1, 2, 3]);
        assert_eq!(second, [4, 5, 6, 7]);
    }
}
