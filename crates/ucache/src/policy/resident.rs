//! A lock-free set of resident buffer indices with a clock hand, after vmcache's
//! `ResidentPageSet`.
//!
//! Policies that scan for victims must not scan the whole mapping (it can be many times larger
//! than memory), so they keep the resident buffers here. Open addressing with linear probing;
//! removal leaves a tombstone that a later insert reuses. Because a buffer is inserted once per
//! residency and removed once, and both happen while its loader or evictor owns it, keys are
//! unique and `remove` always finds its key before an empty slot.

use std::sync::atomic::{AtomicU64, Ordering};

const EMPTY: u64 = u64::MAX;
const TOMBSTONE: u64 = u64::MAX - 1;

pub struct ResidentSet {
    slots: Box<[AtomicU64]>,
    mask: u64,
    hand: AtomicU64,
}

impl ResidentSet {
    /// A set for at most `capacity` keys at once; sized to keep probes short.
    pub fn new(capacity: u64) -> Self {
        let n = (capacity.max(1) * 2).next_power_of_two();
        let slots = (0..n)
            .map(|_| AtomicU64::new(EMPTY))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        ResidentSet {
            slots,
            mask: n - 1,
            hand: AtomicU64::new(0),
        }
    }

    #[inline]
    fn home(&self, key: u64) -> u64 {
        // Fibonacci hashing: neighbouring buffers land far apart.
        key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16 & self.mask
    }

    pub fn insert(&self, key: u64) {
        debug_assert!(key < TOMBSTONE);
        let mut pos = self.home(key);
        loop {
            let slot = &self.slots[pos as usize];
            let cur = slot.load(Ordering::Relaxed);
            if (cur == EMPTY || cur == TOMBSTONE)
                && slot
                    .compare_exchange(cur, key, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            pos = (pos + 1) & self.mask;
        }
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&self, key: u64) -> bool {
        let mut pos = self.home(key);
        for _ in 0..self.slots.len() {
            let slot = &self.slots[pos as usize];
            let cur = slot.load(Ordering::Acquire);
            if cur == EMPTY {
                return false;
            }
            if cur == key
                && slot
                    .compare_exchange(key, TOMBSTONE, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return true;
            }
            pos = (pos + 1) & self.mask;
        }
        false
    }

    /// Advances the shared clock hand by `n` slots and calls `f` for every key in them.
    /// Concurrent callers get disjoint slots.
    pub fn clock_batch(&self, n: u64, mut f: impl FnMut(u64)) {
        let start = self.hand.fetch_add(n, Ordering::Relaxed);
        for i in start..start + n {
            let k = self.slots[(i & self.mask) as usize].load(Ordering::Acquire);
            if k < TOMBSTONE {
                f(k);
            }
        }
    }

    /// Claims the next `n` slots from the shared hand, calls `prefetch` for every key in them
    /// and then `f` for each key in order until `f` returns true. The slots after that key are
    /// handed back, so the next sweep starts right after it (the textbook hand), unless another
    /// thread claimed slots meanwhile: then they are simply skipped this lap. Returns the
    /// slots looked at. Concurrent callers get disjoint slots.
    pub fn clock_sweep(
        &self,
        n: u64,
        mut prefetch: impl FnMut(u64),
        mut f: impl FnMut(u64) -> bool,
    ) -> u64 {
        let start = self.hand.fetch_add(n, Ordering::Relaxed);
        let key = |i: u64| self.slots[(i & self.mask) as usize].load(Ordering::Acquire);
        for i in start..start + n {
            let k = key(i);
            if k < TOMBSTONE {
                prefetch(k);
            }
        }
        for i in start..start + n {
            let k = key(i);
            if k < TOMBSTONE && f(k) {
                let _ = self.hand.compare_exchange(
                    start + n,
                    i + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                return i + 1 - start;
            }
        }
        n
    }

    /// Number of slots (twice the capacity, rounded up to a power of two).
    pub fn slots(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Counts the keys present (O(slots); for tests and statistics).
    pub fn count(&self) -> u64 {
        self.slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) < TOMBSTONE)
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn insert_remove_iterate() {
        let s = ResidentSet::new(100);
        for k in 0..100 {
            s.insert(k * 7);
        }
        assert_eq!(s.count(), 100);
        for k in 0..50 {
            assert!(s.remove(k * 7));
        }
        assert!(!s.remove(3));
        let mut seen = HashSet::new();
        s.clock_batch(s.slots(), |k| {
            seen.insert(k);
        });
        assert_eq!(seen, (50..100).map(|k| k * 7).collect());
    }

    #[test]
    fn sweep_hands_back_the_slots_after_a_stop() {
        let s = ResidentSet::new(100);
        for k in 0..100 {
            s.insert(k);
        }
        let mut seen = Vec::new();
        // Stop at the third key: the next sweep starts right after it.
        let mut n = 0;
        let looked = s.clock_sweep(
            16,
            |_| {},
            |k| {
                seen.push(k);
                n += 1;
                n == 3
            },
        );
        assert!((3..16).contains(&looked));
        let mut next = None;
        s.clock_sweep(
            s.slots(),
            |_| {},
            |k| {
                next = Some(k);
                true
            },
        );
        let mut all = Vec::new();
        s.clock_batch(s.slots(), |k| all.push(k));
        let after = all.iter().position(|&k| k == seen[2]).unwrap();
        assert_eq!(next, Some(all[(after + 1) % all.len()]));
    }

    #[test]
    fn tombstones_are_reused_under_churn() {
        let s = ResidentSet::new(64);
        for round in 0..1000u64 {
            for k in 0..64 {
                s.insert(round * 64 + k);
            }
            for k in 0..64 {
                assert!(s.remove(round * 64 + k));
            }
        }
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn concurrent_insert_remove() {
        let s = std::sync::Arc::new(ResidentSet::new(4 * 1000));
        let ts: Vec<_> = (0..4u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for r in 0..50u64 {
                        for k in 0..1000 {
                            s.insert(t * 1_000_000 + r * 1000 + k);
                        }
                        for k in 0..1000 {
                            assert!(s.remove(t * 1_000_000 + r * 1000 + k));
                        }
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(s.count(), 0);
    }
}
