//! CLOCK with k-bit counters and a chosen initial frequency: FIFO-reinsertion, as libCacheSim's
//! `Clock.c` defines it (and as CLOCK's generalisation to several bits, "GCLOCK", is usually
//! described).
//!
//! A hit raises the buffer's counter up to `2^k - 1`; a new buffer enters at the head of a
//! FIFO with the counter at `init_freq`. The victim search looks at the tail: a buffer with a
//! nonzero counter is moved to the head with its counter decremented, one with zero is the
//! victim. This is what [`super::ClockConfig`] builds for any setting other than the default
//! (one bit, inserted referenced, no `fifo_reinsertion`), which runs the lock-free
//! [`super::Clock`] with its bit in
//! the state word instead. libCacheSim's defaults (one bit, `init_freq` 0: a new buffer gets no
//! second chance until it is hit) are the preset `clock:libcachesim`.
//!
//! Synchronization: a hit is a relaxed load and store of the buffer's own counter, no lock;
//! the FIFO sits behind a `parking_lot` mutex taken on the miss path.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use parking_lot::Mutex;

use super::{Buffers, IndexList, Layout, Policy};

pub struct CounterClock {
    max_freq: u8,
    init_freq: u8,
    freq: Box<[AtomicU8]>,
    /// Front: the head, where buffers enter and are reinserted; back: the hand.
    queue: Mutex<IndexList>,
}

impl CounterClock {
    /// `bits` counter bits (1 to 8), new buffers at `init_freq` (at most `2^bits - 1`).
    pub fn new(bits: u8, init_freq: u8) -> Self {
        let max_freq = ((1u16 << bits.clamp(1, 8)) - 1) as u8;
        CounterClock {
            max_freq,
            init_freq: init_freq.min(max_freq),
            freq: Box::new([]),
            queue: Mutex::new(IndexList::new(0)),
        }
    }
}

impl Policy for CounterClock {
    fn name(&self) -> &str {
        "clock"
    }

    fn attach(&mut self, layout: Layout) {
        self.freq = (0..layout.buffers).map(|_| AtomicU8::new(0)).collect();
        *self.queue.get_mut() = IndexList::new(layout.buffers);
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        let mut q = self.queue.lock();
        let start = out.len();
        // Each buffer is passed over at most max_freq times (its counter reaches 0) plus once
        // per lap skipped as busy: this bounds a call's work.
        let mut steps = (self.max_freq as u64 + 2) * q.len() + 1;
        let mut skipped = 0;
        while out.len() - start < want && steps > 0 {
            steps -= 1;
            let Some(t) = q.back() else { break };
            if out[start..].contains(&t) {
                break; // all the way round to this call's own victims
            }
            q.move_to_front(t);
            if !buffers.is_candidate(t) {
                skipped += 1;
                if skipped >= q.len() {
                    break;
                }
                continue;
            }
            skipped = 0;
            let f = self.freq[t as usize].load(Relaxed);
            if f > 0 {
                self.freq[t as usize].store(f - 1, Relaxed);
            } else {
                out.push(t);
            }
        }
    }

    fn wants_hits(&self) -> bool {
        true
    }

    fn on_hit(&self, index: u64) {
        let f = &self.freq[index as usize];
        let v = f.load(Relaxed);
        if v < self.max_freq {
            f.store(v + 1, Relaxed);
        }
    }

    fn on_insert(&self, index: u64) {
        self.freq[index as usize].store(self.init_freq, Relaxed);
        self.queue.lock().push_front(index);
    }

    fn on_evict(&self, index: u64) {
        self.queue.lock().remove(index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::simulator::hit_pattern;

    /// FIFO-reinsertion written out over a vector: front is the head.
    fn model(bits: u8, init: u8, capacity: usize, trace: &[u64]) -> String {
        let max = (1u16 << bits) as u8 - 1;
        let mut q: std::collections::VecDeque<(u64, u8)> = Default::default();
        trace
            .iter()
            .map(|&p| {
                if let Some(e) = q.iter_mut().find(|e| e.0 == p) {
                    e.1 = (e.1 + 1).min(max);
                    return 'H';
                }
                if q.len() == capacity {
                    loop {
                        let (id, f) = q.pop_back().unwrap();
                        if f == 0 {
                            break;
                        }
                        q.push_front((id, f - 1));
                    }
                }
                q.push_front((p, init));
                'M'
            })
            .collect()
    }

    #[test]
    fn counter_clock_is_fifo_reinsertion() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for (bits, init) in [(1, 0), (1, 1), (2, 0), (2, 3), (3, 1)] {
            for capacity in [1u64, 2, 3, 5, 8, 13] {
                let trace: Vec<u64> = (0..500)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        (x % 24).min(x % 7 + x % 3)
                    })
                    .collect();
                assert_eq!(
                    hit_pattern(Box::new(CounterClock::new(bits, init)), capacity, &trace),
                    model(bits, init, capacity as usize, &trace),
                    "bits {bits} init {init} capacity {capacity}"
                );
            }
        }
    }
}
