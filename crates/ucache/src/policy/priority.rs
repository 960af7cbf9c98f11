//! Application-directed protection with priorities, after P2Cache (Lee et al., HotStorage'23):
//! the application tells the cache which data it must keep (index nodes, metadata, a hot
//! table) and how much it matters, instead of hoping recency guesses it.
//!
//! Unprotected buffers are kept in LRU order and evicted first. A protected buffer (priority
//! 1..=255, set through a [`PriorityHandle`] over index ranges, or by loading it under
//! [`Hint::PRIORITY`], which protects it at priority 1) is proposed only when no unprotected
//! buffer is left, lowest priority first and LRU within a priority. Protection is a
//! preference, not a veto: a mapping whose budget is all protected still makes progress. Suits
//! applications that know their working set's structure: B-tree inner nodes, bloom filters,
//! dictionary pages.
//!
//! Concurrency: the lists and priorities sit behind one mutex shared with the handle. Hits
//! and misses are O(1); protecting a range is O(range); choosing among protected buffers (the
//! rare case where nothing else is left) is O(protected resident).

use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;

use super::advanced::idle;
use super::{Buffers, Hint, IndexList, Layout, Policy};

struct Inner {
    /// Per buffer; empty until attach.
    priority: Vec<u8>,
    normal: IndexList,
    protected: IndexList,
    /// Protections set before attach, applied by it.
    pending: Vec<(Range<u64>, u8)>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            priority: Vec::new(),
            normal: IndexList::new(0),
            protected: IndexList::new(0),
            pending: Vec::new(),
        }
    }
}

impl Inner {
    fn set(&mut self, range: Range<u64>, priority: u8) {
        if self.priority.is_empty() {
            self.pending.push((range, priority));
            return;
        }
        let end = range.end.min(self.priority.len() as u64);
        for i in range.start..end {
            let old = std::mem::replace(&mut self.priority[i as usize], priority);
            // A resident buffer changes list, keeping it resident-tracked exactly once. An
            // unprotected buffer goes to the cold end: the application just said it is done.
            if (old == 0) != (priority == 0) {
                if priority == 0 && self.protected.remove(i) {
                    self.normal.push_back(i);
                } else if priority != 0 && self.normal.remove(i) {
                    self.protected.push_front(i);
                }
            }
        }
    }
}

/// The eviction policy; create it, take a [`PriorityHandle`], then give it to the mapping.
///
/// ```
/// use std::sync::Arc;
/// use ucache::policy::Priority;
/// use ucache::store::MemoryStore;
/// use ucache::{Cache, CacheOptions, MapOptions};
///
/// let store = MemoryStore::new();
/// store.insert("index", vec![0u8; 64 * 4096]);
/// let cache = Cache::new(CacheOptions::new(8 * 4096).batch(2)).unwrap();
/// let policy = Priority::new();
/// let keep = policy.handle();
/// let m = cache
///     .map(Arc::new(store), "index", MapOptions::new().policy(Box::new(policy)))
///     .unwrap();
/// keep.protect(0..2, 10); // the root and its first child stay while anything else can go
/// for i in 0..64 {
///     drop(m.pin_shared(i).unwrap());
/// }
/// assert!(m.state(0).unwrap().phase() == ucache::Phase::Cached);
/// ```
#[derive(Default)]
pub struct Priority {
    inner: Arc<Mutex<Inner>>,
}

/// The application's side: protects and unprotects buffer ranges of the mapping, at any
/// time, from any thread.
#[derive(Clone)]
pub struct PriorityHandle {
    inner: Arc<Mutex<Inner>>,
}

impl PriorityHandle {
    /// Protects buffers `range` at `priority` (higher is kept longer; 0 unprotects).
    pub fn protect(&self, range: Range<u64>, priority: u8) {
        self.inner.lock().set(range, priority);
    }

    /// Makes buffers `range` ordinary again.
    pub fn unprotect(&self, range: Range<u64>) {
        self.inner.lock().set(range, 0);
    }

    /// The priority of buffer `index` (0: unprotected).
    pub fn priority(&self, index: u64) -> u8 {
        let g = self.inner.lock();
        if let Some(&p) = g.priority.get(index as usize) {
            return p;
        }
        let pending = g.pending.iter().rev().find(|(r, _)| r.contains(&index));
        pending.map_or(0, |&(_, p)| p)
    }
}

impl Priority {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn handle(&self) -> PriorityHandle {
        PriorityHandle {
            inner: self.inner.clone(),
        }
    }
}

impl Policy for Priority {
    fn name(&self) -> &str {
        "priority"
    }

    fn attach(&mut self, layout: Layout) {
        let mut g = self.inner.lock();
        let n = layout.buffers;
        g.priority = vec![0; n as usize];
        g.normal = IndexList::new(n);
        g.protected = IndexList::new(n);
        for (r, p) in std::mem::take(&mut g.pending) {
            g.set(r, p);
        }
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let g = self.inner.lock();
        let start = out.len();
        let mut next = g.normal.back();
        while let Some(i) = next {
            if out.len() - start >= want {
                return;
            }
            if idle(buffers, i) {
                out.push(i);
            }
            next = g.normal.towards_front(i);
        }
        // Nothing unprotected is left: the lowest priorities, least recently used first.
        let mut rest: Vec<(u8, usize, u64)> = g
            .protected
            .iter_from_back()
            .enumerate()
            .filter(|&(_, i)| idle(buffers, i))
            .map(|(age, i)| (g.priority[i as usize], age, i))
            .collect();
        rest.sort_unstable();
        let room = want - (out.len() - start);
        out.extend(rest.into_iter().take(room).map(|(_, _, i)| i));
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, x: u64) {
        let Some(mut g) = self.inner.try_lock() else {
            return; // contended: a lossy hit (see advanced.rs)
        };
        if g.normal.contains(x) {
            g.normal.move_to_front(x);
        } else if g.protected.contains(x) {
            g.protected.move_to_front(x);
        }
    }

    fn on_insert(&self, x: u64) {
        let mut g = self.inner.lock();
        if g.priority[x as usize] == 0 && Hint::current() == Hint::PRIORITY {
            g.priority[x as usize] = 1;
        }
        if g.priority[x as usize] == 0 {
            g.normal.push_front(x);
        } else {
            g.protected.push_front(x);
        }
    }

    fn on_evict(&self, x: u64) {
        let mut g = self.inner.lock();
        if !g.normal.remove(x) {
            g.protected.remove(x);
        }
    }
}

#[cfg(test)]
impl super::advanced::Audit for Priority {
    fn tracked(&self) -> Vec<u64> {
        let g = self.inner.lock();
        g.normal
            .iter_from_back()
            .chain(g.protected.iter_from_back())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Simulator;

    #[test]
    fn protected_buffers_stay_while_others_exist() {
        let p = Priority::new();
        let h = p.handle();
        h.protect(0..3, 5); // before attach: applied by it
        let mut sim = Simulator::new(Box::new(p), 1000, 5);
        for id in 0..3 {
            sim.access(id);
        }
        for id in 100..600 {
            sim.access(id);
            for k in 0..3 {
                assert!(sim.is_resident(k), "protected {k} evicted at {id}");
            }
        }
        // Unprotected, buffer 1 is the LRU victim next time.
        h.unprotect(1..2);
        assert_eq!(h.priority(1), 0);
        sim.access(700);
        assert!(!sim.is_resident(1));
        assert!(sim.is_resident(0) && sim.is_resident(2));
    }

    #[test]
    fn all_protected_evicts_lowest_priority_first() {
        let p = Priority::new();
        let h = p.handle();
        let mut sim = Simulator::new(Box::new(p), 100, 3);
        h.protect(0..1, 9);
        h.protect(1..2, 2);
        h.protect(2..3, 7);
        for id in 0..3 {
            sim.access(id);
        }
        Hint::PRIORITY.scoped(|| sim.access(50)); // priority 1 by hint, evicts 1 (priority 2)
        assert!(!sim.is_resident(1));
        assert_eq!(h.priority(50), 1);
        sim.access(51); // unprotected: evicts 50, the lowest priority
        assert!(!sim.is_resident(50));
        sim.access(52); // 51 is unprotected and goes first
        assert!(sim.is_resident(0) && sim.is_resident(2) && sim.is_resident(52));
        assert_eq!(sim.stats().fallback_evictions, 0);
    }
}
