//! Exact LFU: evict the least frequently used resident buffer; among equals, the one that
//! reached its count first.
//!
//! The textbook policy beside the sampled [`super::Lfu`], and libCacheSim's definition (its
//! `LFU.c`: counts start at 1 on insert, each hit moves the object to the back of the next
//! count's FIFO, the victim is the front of the lowest count's), so that `lfu:libcachesim`
//! reproduces libCacheSim's miss ratios. Ordered as a `BTreeSet` of (count, arrival at that
//! count, index): O(log n) per hit and miss, behind one mutex also taken on hits, so it is the
//! choice for replays and small caches; the sampled LFU stays the one for hot paths.

use std::collections::BTreeSet;

use parking_lot::Mutex;

use super::{Buffers, Layout, Policy};

/// (count, sequence number when it reached that count, index).
type Key = (u32, u64, u64);

#[derive(Default)]
struct Order {
    set: BTreeSet<Key>,
    /// Each resident buffer's key, for removal; `None` when not resident.
    key: Vec<Option<(u32, u64)>>,
    seq: u64,
}

impl Order {
    fn put(&mut self, index: u64, count: u32) {
        self.seq += 1;
        self.set.insert((count, self.seq, index));
        self.key[index as usize] = Some((count, self.seq));
    }

    fn take(&mut self, index: u64) -> Option<u32> {
        let (c, s) = self.key.get_mut(index as usize)?.take()?;
        self.set.remove(&(c, s, index));
        Some(c)
    }
}

#[derive(Default)]
pub struct ExactLfu {
    order: Mutex<Order>,
}

impl ExactLfu {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for ExactLfu {
    fn name(&self) -> &str {
        "lfu"
    }

    fn attach(&mut self, layout: Layout) {
        self.order.get_mut().key = vec![None; layout.buffers as usize];
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let o = self.order.lock();
        let start = out.len();
        for &(_, _, i) in o.set.iter() {
            if out.len() - start >= want {
                break;
            }
            if buffers.is_candidate(i) {
                out.push(i);
            }
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, index: u64) {
        let mut o = self.order.lock();
        // A hit may arrive for a buffer evicted meanwhile (ensure_cached, prefetch): ignore it.
        if let Some(c) = o.take(index) {
            o.put(index, c.saturating_add(1));
        }
    }

    fn on_insert(&self, index: u64) {
        let mut o = self.order.lock();
        o.take(index);
        o.put(index, 1);
    }

    fn on_evict(&self, index: u64) {
        self.order.lock().take(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::hit_pattern;

    /// LFU over a vector, ties to the earliest arrival at the count.
    fn model(capacity: usize, trace: &[u64]) -> String {
        let mut v: Vec<(u64, u32, u64)> = Vec::new(); // (id, count, seq)
        let mut seq = 0;
        trace
            .iter()
            .map(|&p| {
                seq += 1;
                if let Some(e) = v.iter_mut().find(|e| e.0 == p) {
                    e.1 += 1;
                    e.2 = seq;
                    return 'H';
                }
                if v.len() == capacity {
                    let k = (0..v.len()).min_by_key(|&k| (v[k].1, v[k].2)).unwrap();
                    v.remove(k);
                }
                v.push((p, 1, seq));
                'M'
            })
            .collect()
    }

    #[test]
    fn exact_lfu_evicts_the_least_frequent_and_the_earliest_of_equals() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for capacity in [1u64, 2, 3, 5, 8, 13] {
            let trace: Vec<u64> = (0..600)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 30).min(x % 9 + x % 4)
                })
                .collect();
            assert_eq!(
                hit_pattern(Box::new(ExactLfu::new()), capacity, &trace),
                model(capacity as usize, &trace),
                "capacity {capacity}"
            );
        }
    }
}
