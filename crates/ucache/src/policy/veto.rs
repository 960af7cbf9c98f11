//! [`Veto`]: any policy, plus the application's say on which buffers may be evicted, in one
//! line instead of a wrapper type that forwards every hook by hand.

use super::{Buffers, Layout, Policy};

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

impl<P: Policy, F: Fn(u64) -> bool + Send + Sync + 'static> Policy for Veto<P, F> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn attach(&mut self, layout: Layout) {
        self.inner.attach(layout)
    }
    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.inner.choose_eviction_buffers(buffers, want, out)
    }
    fn is_evictable(&self, index: u64) -> bool {
        (self.may_evict)(index) && self.inner.is_evictable(index)
    }
    fn admit(&self, index: u64) -> bool {
        self.inner.admit(index)
    }
    fn has_prefetching(&self) -> bool {
        self.inner.has_prefetching()
    }
    fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
        self.inner.choose_prefetch_buffers(index, out)
    }
    fn wants_hits(&self) -> bool {
        self.inner.wants_hits()
    }
    fn on_miss(&self, index: u64) {
        self.inner.on_miss(index)
    }
    fn on_hit(&self, index: u64) {
        self.inner.on_hit(index)
    }
    fn on_insert(&self, index: u64) {
        self.inner.on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        self.inner.on_evict(index)
    }
}

/// A boxed policy is a policy, so wrappers such as [`Veto`] take one chosen by name
/// ([`super::policy_by_name`]) as readily as a concrete type.
impl Policy for Box<dyn Policy> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn attach(&mut self, layout: Layout) {
        (**self).attach(layout)
    }
    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        (**self).choose_eviction_buffers(buffers, want, out)
    }
    fn is_evictable(&self, index: u64) -> bool {
        (**self).is_evictable(index)
    }
    fn admit(&self, index: u64) -> bool {
        (**self).admit(index)
    }
    fn has_prefetching(&self) -> bool {
        (**self).has_prefetching()
    }
    fn choose_prefetch_buffers(&self, index: u64, out: &mut Vec<u64>) {
        (**self).choose_prefetch_buffers(index, out)
    }
    fn wants_hits(&self) -> bool {
        (**self).wants_hits()
    }
    fn on_miss(&self, index: u64) {
        (**self).on_miss(index)
    }
    fn on_hit(&self, index: u64) {
        (**self).on_hit(index)
    }
    fn on_insert(&self, index: u64) {
        (**self).on_insert(index)
    }
    fn on_evict(&self, index: u64) {
        (**self).on_evict(index)
    }
}

#[cfg(test)]
mod tests {
    /// The hooks `trait Policy` declares, read from its source.
    fn policy_hooks() -> Vec<String> {
        let src = include_str!("mod.rs");
        let start = src.find("pub trait Policy").unwrap();
        let body = &src[start..];
        let body = &body[..body.find("\n}\n").unwrap()];
        body.lines()
            .filter_map(|l| l.strip_prefix("    fn "))
            .map(|l| l[..l.find(['(', '<']).unwrap()].to_string())
            .collect()
    }

    /// A hook added to the trait later must be forwarded here too, or the wrapped policy
    /// would silently lose it.
    #[test]
    fn forwards_every_policy_hook() {
        let hooks = policy_hooks();
        assert!(hooks.len() >= 11, "parsed {hooks:?}");
        let src = include_str!("veto.rs");
        for imp in ["Policy for Veto<P, F>", "impl Policy for Box<dyn Policy>"] {
            let at = &src[src.find(imp).unwrap()..];
            let body = &at[..at.find("\n}\n").unwrap()];
            for h in &hooks {
                assert!(body.contains(&format!("fn {h}(")), "{imp} misses {h}");
            }
        }
    }
}
