//! Several disjoint queues of buffer indices over one link array: S3-FIFO's small, main and
//! ghost queues, 2Q's and ARC's lists and their ghosts.
//!
//! A buffer is in at most one of a policy's queues at a time, so the queues can share one
//! array of links, each node tagged with its queue. Moving a buffer from one queue to another
//! (promotion, becoming a ghost, a ghost hit) then touches one cache line instead of one per
//! queue, and "which queue is it in" is the same read. On traces much larger than the CPU cache
//! those misses are most of a policy's cost. Same O(1) operations as [`super::IndexList`].
//!
//! Not synchronized: a policy keeps its queues behind its own lock.

const NIL: u32 = u32::MAX;
/// The tag of a node in no queue.
const NONE: u8 = u8::MAX;

#[derive(Clone, Copy)]
struct Node {
    prev: u32,
    next: u32,
    queue: u8,
}

#[derive(Clone, Copy)]
struct Ends {
    head: u32,
    tail: u32,
    len: u64,
}

pub struct IndexQueues {
    nodes: Box<[Node]>,
    ends: Box<[Ends]>,
}

impl IndexQueues {
    /// `queues` empty queues (at most 255) for indices `0..n`.
    pub fn new(n: u64, queues: usize) -> Self {
        assert!(n < NIL as u64, "IndexQueues holds at most 2^32 - 1 indices");
        assert!(queues < NONE as usize, "at most 254 queues");
        IndexQueues {
            nodes: vec![
                Node {
                    prev: NIL,
                    next: NIL,
                    queue: NONE
                };
                n as usize
            ]
            .into_boxed_slice(),
            ends: vec![
                Ends {
                    head: NIL,
                    tail: NIL,
                    len: 0
                };
                queues
            ]
            .into_boxed_slice(),
        }
    }

    #[inline]
    pub fn len(&self, q: usize) -> u64 {
        self.ends[q].len
    }

    #[inline]
    pub fn is_empty(&self, q: usize) -> bool {
        self.ends[q].len == 0
    }

    /// The queue `i` is in, if any.
    #[inline]
    pub fn queue_of(&self, i: u64) -> Option<usize> {
        let t = self.nodes[i as usize].queue;
        (t != NONE).then_some(t as usize)
    }

    /// The newest index of queue `q`.
    #[inline]
    pub fn front(&self, q: usize) -> Option<u64> {
        let h = self.ends[q].head;
        (h != NIL).then_some(h as u64)
    }

    /// The oldest index of queue `q`.
    #[inline]
    pub fn back(&self, q: usize) -> Option<u64> {
        let t = self.ends[q].tail;
        (t != NIL).then_some(t as u64)
    }

    /// The neighbour of `i` towards the front of its queue (`i` must be queued).
    #[inline]
    pub fn towards_front(&self, i: u64) -> Option<u64> {
        debug_assert!(self.queue_of(i).is_some());
        let p = self.nodes[i as usize].prev;
        (p != NIL).then_some(p as u64)
    }

    /// Inserts `i`, which must be in no queue, at the front of queue `q`.
    #[inline]
    pub fn push_front(&mut self, q: usize, i: u64) {
        debug_assert!(self.queue_of(i).is_none(), "{i} already queued");
        let x = i as u32;
        let e = &mut self.ends[q];
        let old = e.head;
        e.head = x;
        if old == NIL {
            e.tail = x;
        }
        e.len += 1;
        self.nodes[i as usize] = Node {
            prev: NIL,
            next: old,
            queue: q as u8,
        };
        if old != NIL {
            self.nodes[old as usize].prev = x;
        }
    }

    /// Unlinks `i` from whatever queue holds it; returns that queue.
    #[inline]
    pub fn remove(&mut self, i: u64) -> Option<usize> {
        let Node { prev, next, queue } = self.nodes[i as usize];
        if queue == NONE {
            return None;
        }
        let e = &mut self.ends[queue as usize];
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            e.head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            e.tail = prev;
        }
        e.len -= 1;
        self.nodes[i as usize] = Node {
            prev: NIL,
            next: NIL,
            queue: NONE,
        };
        Some(queue as usize)
    }

    /// Moves `i` to the front of queue `q`, from whichever queue (or none) it was in.
    #[inline]
    pub fn move_to_front(&mut self, q: usize, i: u64) {
        if self.ends[q].head == i as u32 {
            return;
        }
        self.remove(i);
        self.push_front(q, i);
    }

    /// Removes and returns the oldest index of queue `q`.
    #[inline]
    pub fn pop_back(&mut self, q: usize) -> Option<u64> {
        let b = self.back(q)?;
        self.remove(b);
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    proptest! {
        /// The queues behave exactly like three deques of distinct values, each value in at
        /// most one of them.
        #[test]
        fn matches_three_deques(ops in prop::collection::vec((0u8..4, 0usize..3, 0u64..16), 0..300)) {
            let mut l = IndexQueues::new(16, 3);
            let mut d: [VecDeque<u64>; 3] = Default::default();
            let find = |d: &[VecDeque<u64>; 3], i: u64| d.iter().position(|q| q.contains(&i));
            for (op, q, i) in ops {
                match op {
                    0 if find(&d, i).is_none() => { l.push_front(q, i); d[q].push_front(i); }
                    1 => {
                        let had = find(&d, i);
                        if let Some(k) = had {
                            let p = d[k].iter().position(|&x| x == i).unwrap();
                            d[k].remove(p);
                        }
                        prop_assert_eq!(l.remove(i), had);
                    }
                    2 => prop_assert_eq!(l.pop_back(q), d[q].pop_back()),
                    3 => {
                        if let Some(k) = find(&d, i) {
                            let p = d[k].iter().position(|&x| x == i).unwrap();
                            d[k].remove(p);
                        }
                        d[q].push_front(i);
                        l.move_to_front(q, i);
                    }
                    _ => {}
                }
                for (k, dk) in d.iter().enumerate() {
                    prop_assert_eq!(l.len(k), dk.len() as u64);
                    prop_assert_eq!(l.front(k), dk.front().copied());
                    prop_assert_eq!(l.back(k), dk.back().copied());
                    // Walk from the back to the front.
                    let mut walk = Vec::new();
                    let mut cur = l.back(k);
                    while let Some(x) = cur {
                        walk.push(x);
                        cur = l.towards_front(x);
                    }
                    let want: Vec<u64> = dk.iter().rev().copied().collect();
                    prop_assert_eq!(walk, want);
                }
                for x in 0..16 {
                    prop_assert_eq!(l.queue_of(x), find(&d, x));
                }
            }
        }
    }
}
