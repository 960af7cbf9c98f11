//! What the calling thread itself holds: its exclusive pins, and the loads its own `pin_each`
//! stream has in flight.
//!
//! A thread that waits on a buffer it holds waits forever: nobody else can release an
//! exclusive pin (guards do not leave their thread), and nobody else finishes a read that
//! sits in this thread's own stream. The paths that wait on a buffer (a pin that meets a
//! locked or loading word, `msync` meeting an exclusive pin) look here first and return
//! [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) instead. Only those wait paths read
//! it, so the shared-pin hit path never pays for it.

use std::cell::RefCell;

/// Why a thread holds a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// An exclusive pin (an [`ExclusiveGuard`](crate::ExclusiveGuard) of this thread).
    Exclusive,
    /// A read in flight in this thread's `pin_each`.
    Streaming,
}

impl Hold {
    pub(crate) fn why(self) -> &'static str {
        match self {
            Hold::Exclusive => "pinned exclusively",
            Hold::Streaming => "being read by this thread's pin_each",
        }
    }
}

#[cfg(not(feature = "shuttle"))]
std::thread_local! {
    /// (mapping address, buffer index, why). A handful of entries at most: the exclusive pins
    /// a thread holds at once and the depth of its stream.
    static HELD: RefCell<Vec<(usize, u64, Hold)>> = const { RefCell::new(Vec::new()) };
}

// The model checker runs its threads on one OS thread: each needs its own record.
#[cfg(feature = "shuttle")]
shuttle::thread_local! {
    static HELD: RefCell<Vec<(usize, u64, Hold)>> = RefCell::new(Vec::new());
}

/// Records that this thread holds buffer `index` of the mapping at `mapping`.
pub(crate) fn hold(mapping: usize, index: u64, why: Hold) {
    let _ = HELD.try_with(|h| h.borrow_mut().push((mapping, index, why)));
}

/// Forgets one hold recorded by [`hold`].
pub(crate) fn release(mapping: usize, index: u64, why: Hold) {
    let _ = HELD.try_with(|h| {
        let mut h = h.borrow_mut();
        if let Some(k) = h.iter().rposition(|&e| e == (mapping, index, why)) {
            h.swap_remove(k);
        }
    });
}

/// How this thread holds buffer `index` of the mapping at `mapping`, if it does.
pub(crate) fn held(mapping: usize, index: u64) -> Option<Hold> {
    HELD.try_with(|h| {
        h.borrow()
            .iter()
            .find(|&&(m, i, _)| m == mapping && i == index)
            .map(|&(_, _, why)| why)
    })
    .ok()
    .flatten()
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    #[test]
    fn holds_are_per_thread_and_released_one_at_a_time() {
        hold(1, 7, Hold::Exclusive);
        hold(1, 7, Hold::Streaming);
        hold(2, 7, Hold::Exclusive);
        assert_eq!(held(1, 7), Some(Hold::Exclusive));
        assert_eq!(held(1, 8), None);
        std::thread::spawn(|| assert_eq!(held(1, 7), None))
            .join()
            .unwrap();
        release(1, 7, Hold::Exclusive);
        assert_eq!(held(1, 7), Some(Hold::Streaming));
        release(1, 7, Hold::Streaming);
        assert_eq!(held(1, 7), None);
        assert_eq!(held(2, 7), Some(Hold::Exclusive));
        release(2, 7, Hold::Exclusive);
        assert_eq!(held(2, 7), None);
    }
}
