//! FIFO: evict in insertion order; hits change nothing.
//!
//! The baseline every other policy is measured against (Belady, "A study of replacement
//! algorithms for a virtual-storage computer", IBM Systems Journal 1966), and a good policy in
//! its own right where reuse is short-lived or nearly uniform: log-structured data read once
//! soon after it is written, or a working set that fits. Hits cost nothing: the policy does not
//! even ask for them ([`Policy::wants_hits`] is false), so its hit path is the bare pin.
//!
//! Synchronization: one `parking_lot` mutex around an [`IndexList`], taken on insert, evict and
//! victim choice (the miss path, which pays for IO anyway), never on hits.

use parking_lot::Mutex;

use super::{Buffers, IndexList, Layout, Policy};

pub struct Fifo {
    /// Front: newest; back: oldest, the next victim.
    queue: Mutex<IndexList>,
}

impl Default for Fifo {
    fn default() -> Self {
        Fifo {
            queue: Mutex::new(IndexList::new(0)),
        }
    }
}

impl Fifo {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Proposes up to `want` candidates from the back of `list`, moving each one proposed to the
/// front so that concurrent evictors propose different buffers. A proposal whose eviction is
/// then cancelled (it was pinned meanwhile) thereby counts as fresh, which is what a pin means.
/// Buffers that cannot be evicted now are skipped in place. Shared with [`super::Lru`], whose
/// list has the same shape; [`super::Mru`] walks the other way.
pub(super) fn propose_from_back(
    list: &mut IndexList,
    buffers: &Buffers<'_>,
    want: usize,
    out: &mut Vec<u64>,
) {
    let start = out.len();
    let mut cur = list.back();
    let mut left = list.len();
    while let Some(i) = cur {
        if out.len() - start == want || left == 0 {
            break;
        }
        left -= 1;
        cur = list.towards_front(i);
        if buffers.is_candidate(i) {
            out.push(i);
        }
    }
    for &i in &out[start..] {
        list.move_to_front(i);
    }
}

impl Policy for Fifo {
    fn name(&self) -> &str {
        "fifo"
    }

    fn attach(&mut self, layout: Layout) {
        *self.queue.get_mut() = IndexList::new(layout.buffers);
    }

    fn choose_eviction_buffers(&self, buffers: &Buffers<'_>, want: usize, out: &mut Vec<u64>) {
        propose_from_back(&mut self.queue.lock(), buffers, want, out);
    }

    fn on_insert(&self, index: u64) {
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

    /// Belady's anomaly (1969): FIFO misses more with 4 frames than with 3 on this string.
    #[test]
    fn fifo_textbook_belady_anomaly() {
        let t = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];
        assert_eq!(hit_pattern(Box::new(Fifo::new()), 3, &t), "MMMMMMMHHMMH");
        assert_eq!(hit_pattern(Box::new(Fifo::new()), 4, &t), "MMMMHHMMMMMM");
    }

    /// A hit does not save a buffer from FIFO: 1 is hit, yet it is the first victim.
    #[test]
    fn fifo_ignores_hits() {
        let t = [1, 2, 3, 1, 4, 1, 2];
        assert_eq!(hit_pattern(Box::new(Fifo::new()), 3, &t), "MMMHMMM");
    }
}
