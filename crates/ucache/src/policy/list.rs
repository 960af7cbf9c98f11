//! An intrusive doubly-linked list of buffer indices: the queue most policies are built from.
//!
//! LRU, FIFO, 2Q, ARC, S3-FIFO and their ghost lists all need O(1) insertion at either end and
//! O(1) removal of an arbitrary buffer. Allocating a node per buffer (or hashing) on the miss
//! path would cost more than the policy decision itself, so the links live in two flat arrays
//! indexed by buffer: membership, removal and moves are array reads and writes. Indices are
//! `u32` to halve the footprint (mappings up to 2^32 − 2 buffers, 16 TiB at 4 KiB buffers).
//!
//! Not synchronized: a policy keeps its lists behind its own lock.

const NIL: u32 = u32::MAX;
/// `prev` of an index that is not in the list.
const OUT: u32 = u32::MAX - 1;

pub struct IndexList {
    prev: Box<[u32]>,
    next: Box<[u32]>,
    head: u32,
    tail: u32,
    len: u64,
}

impl IndexList {
    /// An empty list for indices `0..n`.
    pub fn new(n: u64) -> Self {
        assert!(n < OUT as u64, "IndexList holds at most 2^32 - 2 indices");
        IndexList {
            prev: vec![OUT; n as usize].into_boxed_slice(),
            next: vec![NIL; n as usize].into_boxed_slice(),
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
        self.prev[i as usize] != OUT
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
        let p = self.prev[i as usize];
        (p != NIL).then_some(p as u64)
    }

    /// The neighbour of `i` towards the back, if any (`i` must be in the list).
    #[inline]
    pub fn towards_back(&self, i: u64) -> Option<u64> {
        debug_assert!(self.contains(i));
        let n = self.next[i as usize];
        (n != NIL).then_some(n as u64)
    }

    /// Inserts `i` at the front; `i` must not be in the list.
    #[inline]
    pub fn push_front(&mut self, i: u64) {
        debug_assert!(!self.contains(i), "{i} already listed");
        let x = i as u32;
        self.prev[i as usize] = NIL;
        self.next[i as usize] = self.head;
        if self.head != NIL {
            self.prev[self.head as usize] = x;
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
        self.next[i as usize] = NIL;
        self.prev[i as usize] = self.tail;
        if self.tail != NIL {
            self.next[self.tail as usize] = x;
        } else {
            self.head = x;
        }
        self.tail = x;
        self.len += 1;
    }

    /// Unlinks `i`; returns whether it was in the list.
    #[inline]
    pub fn remove(&mut self, i: u64) -> bool {
        let p = self.prev[i as usize];
        if p == OUT {
            return false;
        }
        let n = self.next[i as usize];
        if p != NIL {
            self.next[p as usize] = n;
        } else {
            self.head = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        } else {
            self.tail = p;
        }
        self.prev[i as usize] = OUT;
        self.next[i as usize] = NIL;
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
            cur = self.prev[i as usize];
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
