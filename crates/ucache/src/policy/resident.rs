//! A lock-free set of resident buffer indices with a clock hand, after vmcache's
//! `ResidentPageSet`, kept in insertion order.
//!
//! Policies that scan for victims must not scan the whole mapping (it can be many times larger
//! than memory), so they keep the resident buffers here: a ring of slots twice the capacity.
//! A key enters the free slot closest behind the shared hand, so the hand meets it only after
//! a full lap; concurrent inserters each take a line of slots at a time from there backwards,
//! so that two of them do not write one line by turns. After an eviction round the newcomers
//! take their victims' slots, as the textbook clock puts a page into its victim's frame, and
//! buffers loaded together (a scan, a readahead run) sit together and are evicted together,
//! in one range. Keys inserted between two sweeps are met newest first. vmcache places a key
//! by its hash instead; with that order, transparent `seq` over zram evicted buffers of any
//! age in one batch and ran at 0.37-0.53x mmap at 4 KiB buffers, against 0.67-0.74x with this
//! order (alternating runs, docs/design.md, "Policies"); a newcomer's slot is also still in
//! the cache from the sweep. A key's slot is remembered per key, so removal is one load and
//! one CAS. Because a buffer is inserted once per residency and removed once, and both happen
//! while its loader or evictor owns it, a key is in at most one slot.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::per_thread::PerThread;

const EMPTY: u64 = u64::MAX;
const LOW: u64 = u32::MAX as u64;
/// A fill hint's slot when its line is used up (no ring has 2^32 slots).
const NO_SLOT: u64 = LOW;
/// Slots on one cache line.
const SLOTS_PER_LINE: u64 = (crate::cache_line::BYTES / std::mem::size_of::<u64>()) as u64;

pub struct ResidentSet {
    slots: Box<[AtomicU64]>,
    mask: u64,
    /// The slot of each present key; stale for absent keys, which `remove` detects.
    at: Box<[AtomicU32]>,
    /// The two words every evictor and every loader writes sit on lines of their own: on the
    /// line of the fields above, which every insert and remove reads, each write made the
    /// other threads' next insert or remove wait for the line
    /// (docs/results/2026-11-27-metadata-pages).
    hand: CachePadded<AtomicU64>,
    /// The next line of slots to hand out to an inserting thread (low half: its last slot not
    /// handed out) and the hand's low 32 bits then (high half).
    fill: CachePadded<AtomicU64>,
    /// Per thread: the next slot of the line it claimed (low half, [`NO_SLOT`] once the line
    /// is used up) and the hand's low 32 bits then. When every insert took the slot after the
    /// last one's, two loading threads wrote the same slot line and the same cursor by turns,
    /// and both loads were about three quarters of `insert`'s samples at two threads
    /// (docs/results/2026-11-27-evening).
    hints: PerThread<AtomicU64>,
    /// Slots per line handed out: a cache line's worth, or the whole ring if smaller.
    line: u64,
    /// Slots looked at by inserts, for the test that filling is linear.
    #[cfg(test)]
    probes: AtomicU64,
}

impl ResidentSet {
    /// A set for at most `capacity` keys at once, each below `keys`.
    pub fn new(capacity: u64, keys: u64) -> Self {
        Self::with_hints(capacity, keys, PerThread::new(|| AtomicU64::new(NO_SLOT)))
    }

    fn with_hints(capacity: u64, keys: u64, hints: PerThread<AtomicU64>) -> Self {
        let n = (capacity.max(1) * 2).next_power_of_two();
        assert!(n <= 1 << 31, "a resident set of more than 2^30 buffers");
        ResidentSet {
            slots: crate::region::huge_table(n as usize, || AtomicU64::new(EMPTY))
                .expect("memory for a resident set"),
            mask: n - 1,
            hand: CachePadded::new(AtomicU64::new(0)),
            fill: CachePadded::new(AtomicU64::new(n - 1)),
            hints,
            line: SLOTS_PER_LINE.min(n),
            at: crate::region::huge_table(keys as usize, || AtomicU32::new(0))
                .expect("memory for a resident set's slot table"),
            #[cfg(test)]
            probes: AtomicU64::new(0),
        }
    }

    /// Adds `key`, which must be below the `keys` the set was made for and not present.
    /// Returns false, leaving the key out, if a whole lap found no free slot: more keys are
    /// present than the set was made for (a caller's bug, or a budget that grew), and the
    /// loader must not spin while it holds its buffer. A key left out is never proposed; the
    /// cache's fallback sweep still finds it.
    pub fn insert(&self, key: u64) -> bool {
        assert!(
            key < self.at.len() as u64,
            "key {key} of a resident set made for {} keys",
            self.at.len()
        );
        let hand = self.hand.load(Ordering::Relaxed) & LOW;
        let hint = self.hints.mine();
        let h = hint.load(Ordering::Relaxed);
        let mut pos = if h >> 32 == hand && h & LOW != NO_SLOT {
            h & LOW
        } else {
            self.claim_line(hand)
        };
        // A lap's worth of probes: beyond that every slot was looked at (other threads'
        // claims only make this thread's lap longer), and the set is full.
        for _ in 0..=self.mask {
            #[cfg(test)]
            self.probes.fetch_add(1, Ordering::Relaxed);
            let slot = &self.slots[pos as usize];
            let first_of_line = pos & (self.line - 1) == 0;
            if slot.load(Ordering::Relaxed) == EMPTY
                && slot
                    .compare_exchange(EMPTY, key, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                // Ordered before any remove by the state word's transitions (module docs).
                self.at[key as usize].store(pos as u32, Ordering::Relaxed);
                let next = if first_of_line { NO_SLOT } else { pos - 1 };
                hint.store(hand << 32 | next, Ordering::Relaxed);
                return true;
            }
            pos = if first_of_line {
                self.claim_line(hand)
            } else {
                pos - 1
            };
        }
        false
    }

    /// Claims the next line of slots to fill for the calling thread and returns the slot to
    /// start at (the line's last one not yet handed out). Lines are handed out from the one
    /// just behind the hand backwards, so newcomers still enter behind the hand; a thread then
    /// fills its line alone, and the shared cursor is written once per line, not per insert.
    fn claim_line(&self, hand: u64) -> u64 {
        let mut f = self.fill.load(Ordering::Relaxed);
        loop {
            // While the hand has not moved, the lines between it and the cursor are handed
            // out: go on from the cursor, or filling a set without evicting (a cache warming
            // up) would probe them all again for every line.
            let start = if f >> 32 == hand {
                f & LOW
            } else {
                hand.wrapping_sub(1) & self.mask
            };
            let next = (start & !(self.line - 1)).wrapping_sub(1) & self.mask;
            match self.fill.compare_exchange_weak(
                f,
                hand << 32 | next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return start,
                Err(now) => f = now,
            }
        }
    }

    /// Hints that `key` may be removed soon: starts fetching the line that remembers its slot
    /// (a sweep calls this for the keys it is about to propose, whose removals would
    /// otherwise each stall on a cold line, one after another). Only a hint: a key outside
    /// the set's range is ignored, as [`crate::policy::Buffers::prefetch`] ignores one.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        if let Some(at) = self.at.get(key as usize) {
            crate::cache_line::prefetch(at);
        }
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&self, key: u64) -> bool {
        let Some(at) = self.at.get(key as usize) else {
            return false;
        };
        let slot = &self.slots[at.load(Ordering::Relaxed) as usize];
        slot.compare_exchange(key, EMPTY, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Advances the shared clock hand by `n` slots and calls `f` for every key in them.
    /// Concurrent callers get disjoint slots.
    pub fn clock_batch(&self, n: u64, mut f: impl FnMut(u64)) {
        let start = self.hand.fetch_add(n, Ordering::Relaxed);
        for i in start..start + n {
            let k = self.slots[(i & self.mask) as usize].load(Ordering::Acquire);
            if k != EMPTY {
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
            if k != EMPTY {
                prefetch(k);
            }
        }
        for i in start..start + n {
            let k = key(i);
            if k != EMPTY && f(k) {
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
            .filter(|s| s.load(Ordering::Relaxed) != EMPTY)
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn insert_remove_iterate() {
        let s = ResidentSet::new(100, 700);
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
    fn prefetch_is_a_hint_that_ignores_keys_out_of_range() {
        let s = ResidentSet::new(4, 10);
        assert!(s.insert(3));
        for k in [0, 3, 9, 10, u64::MAX] {
            s.prefetch(k);
        }
        assert_eq!(s.count(), 1);
        assert!(s.remove(3));
        assert!(!s.remove(10));
    }

    #[test]
    fn a_full_set_refuses_a_key_instead_of_spinning() {
        let s = ResidentSet::new(4, 100);
        for k in 0..s.slots() {
            assert!(s.insert(k));
        }
        assert!(!s.insert(50));
        assert!(!s.remove(50));
        assert!(s.remove(3));
        assert!(s.insert(50));
        assert!(s.remove(50));
    }

    #[test]
    fn sweep_hands_back_the_slots_after_a_stop() {
        let s = ResidentSet::new(100, 100);
        for k in 0..100 {
            s.insert(k);
        }
        let mut seen = Vec::new();
        // Stop at the third key: the next sweep starts right after it.
        let mut n = 0;
        let looked = s.clock_sweep(
            s.slots(),
            |_| {},
            |k| {
                seen.push(k);
                n += 1;
                n == 3
            },
        );
        assert!(looked < s.slots());
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
    fn newcomers_enter_just_behind_the_hand() {
        let s = ResidentSet::new(8, 1000);
        for k in [700, 3, 512] {
            s.insert(k);
        }
        // Filling from the hand backwards: the next lap meets the newest first.
        let mut seen = Vec::new();
        s.clock_batch(s.slots(), |k| seen.push(k));
        assert_eq!(seen, [512, 3, 700]);
        // The hand stops at its victim; the newcomer takes the victim's slot, so the next lap
        // meets it last, as the textbook's frame array would.
        let mut met = Vec::new();
        s.clock_sweep(
            s.slots(),
            |_| {},
            |k| {
                met.push(k);
                k == 3
            },
        );
        assert_eq!(met, [512, 3]);
        assert!(s.remove(3));
        assert!(!s.remove(3), "removed twice");
        s.insert(9);
        let mut seen = Vec::new();
        s.clock_batch(s.slots(), |k| seen.push(k));
        assert_eq!(seen, [700, 512, 9]);
    }

    /// Warming up inserts without evicting: each insert starts where the last one stopped.
    /// Probing from the hand every time would look at 5 * 10^9 slots here.
    #[test]
    fn filling_without_eviction_is_linear() {
        let n = if cfg!(miri) { 1_000 } else { 100_000 };
        let s = ResidentSet::new(n, n + 2);
        for k in 0..n {
            s.insert(k);
        }
        assert_eq!(s.count(), n);
        assert_eq!(s.probes.load(Ordering::Relaxed), n);
        // Once the hand moves, inserts start behind it again.
        let mut met = Vec::new();
        s.clock_sweep(
            s.slots(),
            |_| {},
            |k| {
                met.push(k);
                met.len() == 2
            },
        );
        assert!(s.remove(met[0]) && s.remove(met[1]));
        s.insert(n + 1);
        let mut seen = Vec::new();
        s.clock_batch(s.slots(), |k| seen.push(k));
        assert_eq!(seen.last(), Some(&(n + 1)), "the newcomer is met last");
    }

    #[test]
    #[should_panic(expected = "key 10 of a resident set made for 10 keys")]
    fn a_key_beyond_the_range_is_refused() {
        ResidentSet::new(4, 10).insert(10);
    }

    #[test]
    fn a_key_beyond_the_range_is_not_removed() {
        assert!(!ResidentSet::new(4, 10).remove(10));
    }

    #[test]
    fn inserts_probe_past_survivors() {
        let s = ResidentSet::new(4, 100);
        let n = s.slots();
        s.insert(42); // just behind the hand, never removed
        for k in 0..3 * n {
            let k = k % 40;
            s.insert(k);
            assert!(s.remove(k));
        }
        assert_eq!(s.count(), 1);
        assert!(s.remove(42));
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn slots_are_reused_under_churn() {
        let rounds = if cfg!(miri) { 50 } else { 1000u64 };
        let s = ResidentSet::new(64, 64 * rounds);
        for round in 0..rounds {
            for k in 0..64 {
                s.insert(round * 64 + k);
            }
            for k in 0..64 {
                assert!(s.remove(round * 64 + k));
            }
        }
        assert_eq!(s.count(), 0);
    }

    /// Two threads inserting by turns fill lines of their own (at two threads, each took the
    /// slot next to the other's last one, and both wrote every line).
    #[test]
    fn threads_inserting_by_turns_fill_lines_of_their_own() {
        let s = ResidentSet::with_hints(
            64,
            1000,
            PerThread::with_shards(2, || AtomicU64::new(NO_SLOT)),
        );
        let line_of = |k: u64| s.at[k as usize].load(Ordering::Relaxed) as u64 / SLOTS_PER_LINE;
        let (go, turns) = crossbeam_channel::unbounded::<u64>();
        let (done, finished) = crossbeam_channel::unbounded::<()>();
        let mine = s.hints.index();
        std::thread::scope(|sc| {
            // A second thread, in the other shard than this one's: new threads until one is.
            let mut tries = 0;
            let other = loop {
                tries += 1;
                assert!(tries < 64, "no new thread fell in the other shard");
                let (s, turns, done) = (&s, turns.clone(), done.clone());
                let (tell, told) = crossbeam_channel::bounded(1);
                let h = sc.spawn(move || {
                    let i = s.hints.index();
                    tell.send(i).unwrap();
                    if i != mine {
                        for k in turns {
                            assert!(s.insert(k));
                            done.send(()).unwrap();
                        }
                    }
                });
                if told.recv().unwrap() != mine {
                    break h;
                }
                h.join().unwrap();
            };
            for k in 0..12 {
                if k % 2 == 0 {
                    assert!(s.insert(k));
                } else {
                    go.send(k).unwrap();
                    finished.recv().unwrap();
                }
            }
            drop(go);
            other.join().unwrap();
        });
        assert_eq!(s.count(), 12);
        let lines = |odd: u64| {
            let mut l: Vec<u64> = (0..12).filter(|k| k % 2 == odd).map(line_of).collect();
            l.dedup();
            l
        };
        let (evens, odds) = (lines(0), lines(1));
        assert!(
            evens.iter().all(|l| !odds.contains(l)),
            "{evens:?} {odds:?}"
        );
        // Each thread's keys fill its lines one after another, from the hand backwards.
        assert!(evens.len() == 1 && odds.len() == 1, "{evens:?} {odds:?}");
    }

    #[test]
    fn concurrent_insert_remove() {
        // Under Miri (which checks every access of the race for data races) a smaller run.
        let (rounds, keys) = if cfg!(miri) { (3, 20) } else { (50, 1000) };
        let s = std::sync::Arc::new(ResidentSet::new(4 * keys, 4 * rounds * keys));
        let ts: Vec<_> = (0..4u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let base = t * rounds * keys;
                    for r in 0..rounds {
                        for k in 0..keys {
                            s.insert(base + r * keys + k);
                        }
                        for k in 0..keys {
                            assert!(s.remove(base + r * keys + k));
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
