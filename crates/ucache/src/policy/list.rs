//! An intrusive doubly-linked list of buffer indices: the queue most policies are built from.
//!
//! LRU, FIFO, 2Q, ARC, S3-FIFO and their ghost lists all need O(1) insertion at either end and
//! O(1) removal of an arbitrary buffer. Allocating a node per buffer (or hashing) on the miss
//! path would cost more than the policy decision itself, so the links live in one flat array
//! indexed by buffer: membership, removal and moves are array reads and writes. A buffer's two
//! links sit side by side, so touching a node costs one cache miss, not two (on large traces
//! the list is memory-bound). Indices are `u32` to halve the footprint (mappings up to
//! 2^32 − 2 buffers, 16 TiB at 4 KiB buffers).
//!
//! Not synchronized: a policy keeps its lists behind its own lock.

const NIL: u32 = u32::MAX;
/// `prev` of an index that is not in the list.
const OUT: u32 = u32::MAX - 1;

/// The links of one index: towards the front, towards the back.
#[derive(Clone, Copy)]
struct Links {
    prev: u32,
    next: u32,
}

pub struct IndexList {
    links: Box<[Links]>,
    head: u32,
    tail: u32,
    len: u64,
}

impl IndexList {
    /// An empty list for indices `0..n`.
    pub fn new(n: u64) -> Self {
        assert!(n < OUT as u64, "IndexList holds at most 2^32 - 2 indices");
        IndexList {
            links: vec![
                Links {
                    prev: OUT,
                    next: NIL
                };
                n as usize
            ]
            .into_boxed_slice(),
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }

    #[inline]
    pub fn len(&self) -> u64 {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn contains(&self, i: u64) -> bool {
        self.links[i as usize].prev != OUT
    }

    /// The most recently pushed-front index (the MRU end).
    #[inline]
    pub fn front(&self) -> Option<u64> {
        (self.head != NIL).then_some(self.head as u64)
    }

    /// The oldest index (the LRU end).
    #[inline]
    pub fn back(&self) -> Option<u64> {
        (self.tail != NIL).then_some(self.tail as u64)
    }

    /// The neighbour of `i` towards the front, if any (`i` must be in the list).
    #[inline]
    pub fn towards_front(&self, i: u64) -> Option<u64> {
        debug_assert!(self.contains(i));
        let p = self.links[i as usize].prev;
        (p != NIL).then_some(p as u64)
    }

    /// The neighbour of `i` towards the back, if any (`i` must be in the list).
    #[inline]
    pub fn towards_back(&self, i: u64) -> Option<u64> {
        debug_assert!(self.contains(i));
        let n = self.links[i as usize].next;
        (n != NIL).then_some(n as u64)
    }

    /// Inserts `i` at the front; `i` must not be in the list.
    #[inline]
    pub fn push_front(&mut self, i: u64) {
        debug_assert!(!self.contains(i), "{i} already listed");
        let x = i as u32;
        self.links[i as usize].prev = NIL;
        self.links[i as usize].next = self.head;
        if self.head != NIL {
            self.links[self.head as usize].prev = x;
        } else {
            self.tail = x;
        }
        self.head = x;
        self.len += 1;
    }

    /// Inserts `i` at the back; `i` must not be in the list.
    #[inline]
    pub fn push_back(&mut self, i: u64) {
        debug_assert!(!self.contains(i), "{i} already listed");
        let x = i as u32;
        self.links[i as usize].next = NIL;
        self.links[i as usize].prev = self.tail;
        if self.tail != NIL {
            self.links[self.tail as usize].next = x;
        } else {
            self.head = x;
        }
        self.tail = x;
        self.len += 1;
    }

    /// Unlinks `i`; returns whether it was in the list.
    #[inline]
    pub fn remove(&mut self, i: u64) -> bool {
        let p = self.links[i as usize].prev;
        if p == OUT {
            return false;
        }
        let n = self.links[i as usize].next;
        if p != NIL {
            self.links[p as usize].next = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.links[n as usize].prev = p;
        } else {
            self.tail = p;
        }
        self.links[i as usize].prev = OUT;
        self.links[i as usize].next = NIL;
        self.len -= 1;
        true
    }

    /// Moves `i` to the front, inserting it if absent.
    #[inline]
    pub fn move_to_front(&mut self, i: u64) {
        if self.head == i as u32 {
            return;
        }
        self.remove(i);
        self.push_front(i);
    }

    #[inline]
    pub fn pop_front(&mut self) -> Option<u64> {
        let f = self.front()?;
        self.remove(f);
        Some(f)
    }

    #[inline]
    pub fn pop_back(&mut self) -> Option<u64> {
        let b = self.back()?;
        self.remove(b);
        Some(b)
    }

    /// Indices from the back (oldest) to the front.
    pub fn iter_from_back(&self) -> impl Iterator<Item = u64> + '_ {
        let mut cur = self.tail;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let i = cur;
            cur = self.links[i as usize].prev;
            Some(i as u64)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn order_and_removal() {
        let mut l = IndexList::new(10);
        l.push_front(1);
        l.push_front(2);
        l.push_back(3);
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![3, 1, 2]);
        assert!(l.remove(1));
        assert!(!l.remove(1));
        l.move_to_front(3);
        assert_eq!(l.iter_from_back().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(l.pop_back(), Some(2));
        assert_eq!(l.pop_front(), Some(3));
        assert!(l.is_empty() && l.front().is_none() && l.back().is_none());
    }

    proptest! {
        /// The list behaves exactly like a deque of distinct values.
        #[test]
        fn matches_a_deque(ops in prop::collection::vec((0u8..5, 0u64..16), 0..200)) {
            let mut l = IndexList::new(16);
            let mut d: VecDeque<u64> = VecDeque::new();
            for (op, i) in ops {
                match op {
                    0 if !d.contains(&i) => { l.push_front(i); d.push_front(i); }
                    1 if !d.contains(&i) => { l.push_back(i); d.push_back(i); }
                    2 => {
                        let had = d.iter().position(|&x| x == i).map(|p| d.remove(p));
                        prop_assert_eq!(l.remove(i), had.is_some());
                    }
                    3 => prop_assert_eq!(l.pop_back(), d.pop_back()),
                    4 => {
                        if let Some(p) = d.iter().position(|&x| x == i) { d.remove(p); }
                        d.push_front(i);
                        l.move_to_front(i);
                    }
                    _ => {}
                }
                prop_assert_eq!(l.len(), d.len() as u64);
                let back: Vec<u64> = d.iter().rev().copied().collect();
                prop_assert_eq!(l.iter_from_back().collect::<Vec<_>>(), back);
                for k in 0..16 { prop_assert_eq!(l.contains(k), d.contains(&k)); }
            }
        }
    }
}
