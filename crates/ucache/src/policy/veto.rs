//! [`Veto`]: any policy, plus the application's say on which buffers may be evicted, in one
//! line instead of a wrapper type that forwards every hook by hand.

use super::forward::{forward_policy_hooks, Wraps};
use super::Policy;

/// Wraps `inner` so that a buffer is evictable only if `may_evict(index)` says so as well as
/// `inner`'s own [`Policy::is_evictable`]: a page whose log records are not durable yet, a
/// bucket the application is rebuilding. Every other hook goes to `inner`, so its choices,
/// prefetching and name are unchanged.
///
/// `may_evict` runs wherever the cache asks, on any thread and possibly inside a transparent
/// mapping's fault handler: it must be quick, must not block, and must not touch the mapping's
/// memory. A vetoed proposal is counted in `eviction_cancels` and skipped, never waited for;
/// a mapping whose every resident buffer is vetoed makes loads wait for memory (see
/// [`crate::CacheOptions::budget_wait`]).
///
/// ```
/// # use std::sync::Arc;
/// # use std::sync::atomic::{AtomicU64, Ordering};
/// # use ucache::{Cache, CacheOptions, MapOptions, store::MemoryStore};
/// use ucache::policy::{Clock, Veto};
///
/// let durable_below = Arc::new(AtomicU64::new(4));
/// let d = durable_below.clone();
/// let policy = Veto::new(Clock::new(), move |i| i < d.load(Ordering::Relaxed));
///
/// let store = MemoryStore::new();
/// store.insert("log", vec![0; 16 * 4096]);
/// let cache = Cache::new(CacheOptions::new(16 * 4096).batch(4)).unwrap();
/// let map = cache
///     .map(Arc::new(store), "log", MapOptions::new().policy(Box::new(policy)))
///     .unwrap();
/// assert_eq!(map.policy_name(), "clock");
/// ```
pub struct Veto<P, F> {
    inner: P,
    may_evict: F,
}

impl<P: Policy, F: Fn(u64) -> bool + Send + Sync + 'static> Veto<P, F> {
    /// `inner` with the extra veto `may_evict` (true: may be evicted).
    pub fn new(inner: P, may_evict: F) -> Self {
        Veto { inner, may_evict }
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P: Policy, F> Wraps for Veto<P, F> {
    type Inner = P;
    fn wrapped(&self) -> &P {
        &self.inner
    }
    fn wrapped_mut(&mut self) -> &mut P {
        &mut self.inner
    }
}

impl<P: Policy, F: Fn(u64) -> bool + Send + Sync + 'static> Policy for Veto<P, F> {
    forward_policy_hooks!(
        name,
        attach,
        choose_eviction_buffers,
        admit,
        has_prefetching,
        choose_prefetch_buffers,
        wants_hits,
        on_miss,
        on_hit,
        on_insert,
        on_evict,
    );
    fn is_evictable(&self, index: u64) -> bool {
        (self.may_evict)(index) && self.inner.is_evictable(index)
    }
}
