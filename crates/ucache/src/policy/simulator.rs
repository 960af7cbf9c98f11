//! Trace-driven replay of a [`Policy`], running the very code the live cache runs.
//!
//! A miss-ratio curve is only worth having if it describes the policy that will run in
//! production, so there is no second, "simulation" implementation of any policy: the simulator
//! owns a row of real state words, moves them through the real transitions
//! ([`crate::state::Word`]'s load, pin and evict) and calls the policy's hooks in the same order and under the same
//! ownership as a mapping does. What it leaves out is the IO, the memory and the other threads.
//!
//! ```
//! use ucache::policy::{Clock, Simulator};
//!
//! let mut sim = Simulator::new(Box::new(Clock::new()), 10, 2);
//! for id in [0, 1, 0, 2, 0, 1] {
//!     sim.access(id);
//! }
//! assert_eq!(sim.stats().requests, 6);
//! assert!(sim.stats().hits >= 1);
//! ```

use super::{Buffers, Guarded, Layout, Policy};
use crate::state::{BufferState, Phase, Pin};

/// Counters of one replay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    pub requests: u64,
    pub hits: u64,
    pub misses: u64,
    /// Buffers evicted (by the policy's choice or the fallback).
    pub evictions: u64,
    /// Evictions the manager made itself because the policy proposed too few valid victims.
    pub fallback_evictions: u64,
    /// Proposals the manager refused: not resident, out of range or vetoed by `is_evictable`.
    pub rejected: u64,
    /// Misses the policy refused to admit ([`Policy::admit`]): served around the cache, as
    /// [`crate::Mapping::read`] does, and not inserted. Counted in `misses` too.
    pub bypassed: u64,
    /// Misses served without inserting because nothing at all could be evicted (every
    /// resident buffer vetoed), as the live cache would report its budget exhausted.
    pub unevictable: u64,
}

impl SimStats {
    /// Misses per request (0 for an empty replay).
    pub fn miss_ratio(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.misses as f64 / self.requests as f64
        }
    }
}

/// A cache of `capacity` buffers over ids `0..buffers`, driven one request at a time.
pub struct Simulator {
    states: Box<[BufferState]>,
    policy: Guarded,
    capacity: u64,
    resident: u64,
    batch: usize,
    cands: Vec<u64>,
    stats: SimStats,
}

impl Simulator {
    /// Attaches `policy` to a simulated mapping of `buffers` buffers with room for `capacity`
    /// (at least one).
    pub fn new(policy: Box<dyn Policy>, buffers: u64, capacity: u64) -> Self {
        let capacity = capacity.clamp(1, buffers.max(1));
        let layout = Layout {
            buffers,
            capacity,
            buffer_size: 4096,
        };
        Simulator {
            states: (0..buffers).map(|_| BufferState::new()).collect(),
            policy: Guarded::new(policy, layout),
            capacity,
            resident: 0,
            batch: 1,
            cands: Vec::new(),
            stats: SimStats::default(),
        }
    }

    /// Evicts up to `batch` buffers whenever the cache is full, as the live cache does with
    /// its eviction batch. The default of 1 gives the textbook behaviour of each policy.
    pub fn with_batch(mut self, batch: usize) -> Self {
        self.batch = batch.max(1);
        self
    }

    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// The policy under simulation.
    pub fn policy(&self) -> &dyn Policy {
        self.policy.policy()
    }

    /// Whether the policy was switched off for panicking in a hook (the manager's guard then
    /// goes on with its fallback sweep, as a live mapping does).
    pub fn policy_broken(&self) -> bool {
        self.policy.is_broken()
    }

    /// Buffers resident now.
    pub fn resident(&self) -> u64 {
        self.resident
    }

    /// Whether buffer `id` is resident.
    pub fn is_resident(&self, id: u64) -> bool {
        self.states[id as usize].load().phase() == Phase::Cached
    }

    /// Says that buffer `id` will be accessed soon, so its state word can be on its way into
    /// the CPU cache meanwhile. A replay knows its trace's future; on traces far larger than
    /// the cache the state word is a cache miss per request otherwise. Only a hint.
    #[inline]
    pub fn prefetch(&self, id: u64) {
        if let Some(s) = self.states.get(id as usize) {
            s.prefetch();
        }
    }

    /// One access to buffer `id` (< `buffers`), as a shared pin and unpin would make it.
    /// Returns whether it hit.
    #[inline]
    pub fn access(&mut self, id: u64) -> bool {
        self.stats.requests += 1;
        let w = self.states[id as usize].load();
        if w.phase() == Phase::Cached {
            self.stats.hits += 1;
            if let Some(t) = w.touch() {
                self.states[id as usize].store_exclusive(t);
            }
            if self.policy.wants_hits() {
                self.policy.on_hit(id);
            }
            return true;
        }
        self.stats.misses += 1;
        // The live order: admission is asked first, then every demand miss, admitted or not,
        // reaches on_miss.
        let admitted = self.policy.admit(id);
        self.policy.on_miss(id);
        if !admitted {
            self.stats.bypassed += 1;
            return false;
        }
        while self.resident >= self.capacity {
            if !self.evict() {
                self.stats.unevictable += 1;
                return false;
            }
        }
        let s = &self.states[id as usize];
        let loading = w.begin_load().expect("an evicted buffer is claimable");
        s.store_exclusive(loading);
        self.policy.on_insert(id);
        s.store_exclusive(loading.finish_load(Pin::Shared, false).unpin_shared());
        self.resident += 1;
        false
    }

    /// Frees buffers: the policy's valid proposals first, then the fallback. Returns whether
    /// anything was freed.
    fn evict(&mut self) -> bool {
        let mut cands = std::mem::take(&mut self.cands);
        cands.clear();
        let proposed = self.policy.choose_eviction_buffers(
            &Buffers::new(&self.states),
            self.batch,
            &mut cands,
        );
        let mut freed = 0;
        for (k, &i) in cands.iter().enumerate() {
            if self.try_evict(i) {
                freed += 1;
                if k >= proposed {
                    self.stats.fallback_evictions += 1;
                }
            } else if k < proposed {
                self.stats.rejected += 1;
            }
        }
        if freed == 0 {
            cands.clear();
            self.policy
                .fallback_victims(&Buffers::new(&self.states), self.batch, &mut cands);
            for &i in &cands {
                if self.try_evict(i) {
                    self.stats.fallback_evictions += 1;
                    freed += 1;
                }
            }
        }
        self.cands = cands;
        freed > 0
    }

    fn try_evict(&mut self, i: u64) -> bool {
        if i >= self.states.len() as u64 || !self.policy.is_evictable(i) {
            return false;
        }
        let s = &self.states[i as usize];
        let Some(e) = s.load().begin_evict() else {
            return false;
        };
        s.store_exclusive(e);
        self.policy.on_evict(i);
        s.store_exclusive(e.finish_evict());
        self.resident -= 1;
        self.stats.evictions += 1;
        true
    }
}

impl std::fmt::Debug for Simulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("policy", &self.policy.name())
            .field("capacity", &self.capacity)
            .field("resident", &self.resident)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Replays `trace` through `policy` with room for `capacity` buffers and spells the outcome,
/// `H` for a hit and `M` for a miss, so textbook sequences can be written down as strings.
#[cfg(test)]
pub(crate) fn hit_pattern(policy: Box<dyn Policy>, capacity: u64, trace: &[u64]) -> String {
    let n = trace.iter().max().map_or(1, |m| m + 1);
    let mut sim = Simulator::new(policy, n, capacity);
    let s: String = trace
        .iter()
        .map(|&id| if sim.access(id) { 'H' } else { 'M' })
        .collect();
    let st = sim.stats();
    assert_eq!(
        (st.fallback_evictions, st.rejected, st.unevictable),
        (0, 0, 0),
        "the policy alone must drive a textbook replay"
    );
    s
}

/// A policy the test keeps a handle to while the simulator owns it, to look inside.
#[cfg(test)]
pub(crate) struct Probe<P>(pub std::sync::Arc<parking_lot::RwLock<P>>);

#[cfg(test)]
impl<P: Policy> Probe<P> {
    pub(crate) fn wrap(p: P) -> (Box<dyn Policy>, std::sync::Arc<parking_lot::RwLock<P>>) {
        let a = std::sync::Arc::new(parking_lot::RwLock::new(p));
        (Box::new(Probe(a.clone())), a)
    }
}

#[cfg(test)]
impl<P: Policy> Policy for Probe<P> {
    fn name(&self) -> &str {
        "probe"
    }
    fn attach(&mut self, layout: Layout) {
        self.0.write().attach(layout);
    }
    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        self.0.read().choose_eviction_buffers(buffers, want, out);
    }
    fn admit(&self, index: u64) -> bool {
        self.0.read().admit(index)
    }
    fn wants_hits(&self) -> bool {
        self.0.read().wants_hits()
    }
    fn on_hit(&self, index: u64) {
        self.0.read().on_hit(index);
    }
    fn on_insert(&self, index: u64) {
        self.0.read().on_insert(index);
    }
    fn on_evict(&self, index: u64) {
        self.0.read().on_evict(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Clock;

    /// Proposes nothing, ever: the fallback must keep the simulated cache within capacity.
    struct Useless;
    impl Policy for Useless {
        fn name(&self) -> &str {
            "useless"
        }
        fn choose_eviction_buffers(&self, _: &Buffers<'_>, _: usize, _: &mut Vec<u64>) {}
    }

    /// Proposes buffers 1.. and vetoes all but buffer 0. A veto is the application's word, so
    /// the fallback respects it too.
    struct Vetoing;
    impl Policy for Vetoing {
        fn name(&self) -> &str {
            "vetoing"
        }
        fn choose_eviction_buffers(&self, _: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
            out.extend((1..=want as u64).map(|i| i % 4));
        }
        fn is_evictable(&self, index: u64) -> bool {
            index == 0
        }
    }

    #[test]
    fn clock_textbook_second_chance() {
        // Capacity 3. Inserted buffers start referenced (the loader's pin sets R), so the
        // first eviction sweep clears 0, 1, 2 and then takes 0.
        let mut sim = Simulator::new(Box::new(Clock::new()), 8, 3);
        for id in [0, 1, 2] {
            assert!(!sim.access(id));
        }
        assert!(sim.access(1));
        assert!(!sim.access(3));
        assert_eq!(sim.resident(), 3);
        assert_eq!(sim.stats().evictions, 1);
        assert_eq!(sim.stats().fallback_evictions, 0);
        let s = sim.stats();
        assert_eq!((s.requests, s.hits, s.misses), (5, 1, 4));
    }

    #[test]
    fn useless_policy_is_backed_by_the_fallback() {
        let mut sim = Simulator::new(Box::new(Useless), 100, 10);
        for r in 0..10u64 {
            for id in 0..100 {
                sim.access((id * 7 + r) % 100);
                assert!(sim.resident() <= 10);
            }
        }
        let s = sim.stats();
        assert_eq!(s.requests, 1000);
        assert_eq!(s.evictions, s.fallback_evictions);
        assert_eq!(s.misses - s.evictions, 10);
    }

    #[test]
    fn invalid_proposals_are_rejected_and_vetoes_respected() {
        let mut sim = Simulator::new(Box::new(Vetoing), 4, 1);
        assert!(!sim.access(0));
        assert!(!sim.access(1)); // evicts 0, the only evictable buffer, via the fallback
        assert!(!sim.is_resident(0));
        assert!(sim.stats().rejected >= 1);
        assert_eq!(sim.stats().fallback_evictions, 1);
        // Now 1 is resident and vetoed: a miss cannot insert, and says so.
        assert!(!sim.access(2));
        assert!(!sim.is_resident(2));
        assert_eq!(sim.stats().unevictable, 1);
        assert_eq!(sim.resident(), 1);
    }

    /// Admits even buffers only.
    struct EvenOnly(Clock);
    impl Policy for EvenOnly {
        fn name(&self) -> &str {
            "even-only"
        }
        fn attach(&mut self, layout: Layout) {
            self.0.attach(layout);
        }
        fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
            self.0.choose_eviction_buffers(b, want, out);
        }
        fn admit(&self, index: u64) -> bool {
            index.is_multiple_of(2)
        }
        fn on_insert(&self, index: u64) {
            self.0.on_insert(index);
        }
        fn on_evict(&self, index: u64) {
            self.0.on_evict(index);
        }
    }

    #[test]
    fn refused_admission_is_a_bypassed_miss_that_inserts_nothing() {
        let mut sim = Simulator::new(Box::new(EvenOnly(Clock::new())), 16, 4);
        for id in [0, 1, 2, 1, 0, 3] {
            sim.access(id);
        }
        let s = sim.stats();
        assert_eq!((s.requests, s.hits, s.misses, s.bypassed), (6, 1, 5, 3));
        assert!(!sim.is_resident(1) && !sim.is_resident(3));
        assert_eq!(sim.resident(), 2);
        assert_eq!(s.evictions, 0);
    }

    /// Logs `on_miss`, which must come before the evictions and insert of its miss.
    struct MissOrder {
        clock: Clock,
        log: std::sync::Mutex<Vec<(char, u64)>>,
    }
    impl Policy for MissOrder {
        fn name(&self) -> &str {
            "miss-order"
        }
        fn attach(&mut self, layout: Layout) {
            self.clock.attach(layout);
        }
        fn choose_eviction_buffers(&self, b: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
            self.clock.choose_eviction_buffers(b, want, out);
        }
        fn on_miss(&self, index: u64) {
            self.log.lock().unwrap().push(('m', index));
        }
        fn on_insert(&self, index: u64) {
            self.log.lock().unwrap().push(('i', index));
            self.clock.on_insert(index);
        }
        fn on_evict(&self, index: u64) {
            self.log.lock().unwrap().push(('e', index));
            self.clock.on_evict(index);
        }
    }

    #[test]
    fn on_miss_precedes_eviction_and_insert() {
        let p = MissOrder {
            clock: Clock::new(),
            log: Default::default(),
        };
        let mut sim = Simulator::new(Box::new(p), 8, 1);
        sim.access(0);
        sim.access(0);
        sim.access(1);
        let p = sim.policy() as *const dyn Policy as *const MissOrder;
        // SAFETY: built from a `MissOrder` above.
        let log = unsafe { &*p }.log.lock().unwrap().clone();
        assert_eq!(log, vec![('m', 0), ('i', 0), ('m', 1), ('e', 0), ('i', 1)]);
    }

    #[test]
    fn batch_eviction_frees_several() {
        let mut sim = Simulator::new(Box::new(Clock::new()), 100, 10).with_batch(4);
        for id in 0..11 {
            sim.access(id);
        }
        assert_eq!(sim.stats().evictions, 4);
        assert_eq!(sim.resident(), 7);
    }
}
