//! What the calling thread itself holds: its exclusive pins, and the loads its own `pin_each`
//! stream has in flight; and whether it is running a policy hook, during which it may hold
//! buffers in transition (the load or eviction that called the hook).
//!
//! A thread that waits on a buffer it holds waits forever: nobody else can release an
//! exclusive pin (guards do not leave their thread), and nobody else finishes a read that
//! sits in this thread's own stream. The paths that wait on a buffer (a pin that meets a
//! locked or loading word, `msync` meeting an exclusive pin) look here first and return
//! [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) instead. Only those wait paths read
//! it, so the shared-pin hit path never pays for it.

use std::cell::{Cell, RefCell};

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

/// Exclusive pins recorded per thread. A thread holding more at once (a tree latched deeper
/// than this) is not protected for the rest: a wait on one of those hangs as before. That
/// such pins exist is still known ([`unrecorded_exclusive`]).
const MAX_EXCLUSIVE: usize = 32;

/// A thread's exclusive pins: mapping addresses and buffer indices, a stack in the order
/// taken. Fixed-size and without a destructor, so taking and dropping an exclusive pin costs a
/// plain thread-local access, not a lazily registered one. Two arrays of words rather than one
/// of pairs: a pair is stored with one 16-byte move, and the load of its upper half that
/// follows right after (the unpin) could not be forwarded from the store buffer; that stall
/// doubled the cost of an exclusive pin + unpin (29 against 16 ns).
struct Exclusive {
    mappings: [Cell<usize>; MAX_EXCLUSIVE],
    indices: [Cell<u64>; MAX_EXCLUSIVE],
    len: Cell<usize>,
    /// Exclusive pins held beyond the record: while there are any, this thread's holds are
    /// not all known.
    unrecorded: Cell<usize>,
}

impl Exclusive {
    const fn new() -> Self {
        Exclusive {
            mappings: [const { Cell::new(0) }; MAX_EXCLUSIVE],
            indices: [const { Cell::new(0) }; MAX_EXCLUSIVE],
            len: Cell::new(0),
            unrecorded: Cell::new(0),
        }
    }

    fn find(&self, mapping: usize, index: u64) -> Option<usize> {
        (0..self.len.get())
            .rev()
            .find(|&k| self.indices[k].get() == index && self.mappings[k].get() == mapping)
    }
}

#[cfg(not(feature = "shuttle"))]
std::thread_local! {
    static IN_HOOK: Cell<u32> = const { Cell::new(0) };
    static EXCLUSIVE: Exclusive = const { Exclusive::new() };
    /// (mapping address, buffer index) of reads in flight in this thread's `pin_each`: one
    /// push and one removal per read, next to a read's microseconds.
    static STREAMING: RefCell<Vec<(usize, u64)>> = const { RefCell::new(Vec::new()) };
}

// The model checker runs its threads on one OS thread: each needs its own record.
#[cfg(feature = "shuttle")]
shuttle::thread_local! {
    static IN_HOOK: Cell<u32> = Cell::new(0);
    static EXCLUSIVE: Exclusive = Exclusive::new();
    static STREAMING: RefCell<Vec<(usize, u64)>> = RefCell::new(Vec::new());
}

#[inline]
/// Records that this thread holds buffer `index` of the mapping at `mapping`.
pub(crate) fn hold(mapping: usize, index: u64, why: Hold) {
    match why {
        Hold::Exclusive => {
            let _ = EXCLUSIVE.try_with(|x| {
                let n = x.len.get();
                if n < MAX_EXCLUSIVE {
                    x.mappings[n].set(mapping);
                    x.indices[n].set(index);
                    x.len.set(n + 1);
                } else {
                    x.unrecorded.set(x.unrecorded.get() + 1);
                }
            });
        }
        Hold::Streaming => {
            let _ = STREAMING.try_with(|s| s.borrow_mut().push((mapping, index)));
        }
    }
}

#[inline]
/// Forgets one hold recorded by [`hold`].
pub(crate) fn release(mapping: usize, index: u64, why: Hold) {
    match why {
        Hold::Exclusive => {
            let _ = EXCLUSIVE.try_with(|x| {
                // Usually the last one taken: then nothing moves.
                if let Some(k) = x.find(mapping, index) {
                    let last = x.len.get() - 1;
                    if k != last {
                        x.mappings[k].set(x.mappings[last].get());
                        x.indices[k].set(x.indices[last].get());
                    }
                    x.len.set(last);
                } else {
                    x.unrecorded.set(x.unrecorded.get().saturating_sub(1));
                }
            });
        }
        Hold::Streaming => {
            let _ = STREAMING.try_with(|s| {
                let mut s = s.borrow_mut();
                if let Some(k) = s.iter().rposition(|&e| e == (mapping, index)) {
                    s.swap_remove(k);
                }
            });
        }
    }
}

/// Marks the thread as inside a policy hook while it lives (hooks may nest: a hook's call back
/// into the mapping runs hooks of its own).
pub(crate) struct InHook(());

impl InHook {
    #[inline]
    pub(crate) fn enter() -> Self {
        let _ = IN_HOOK.try_with(|d| d.set(d.get() + 1));
        InHook(())
    }
}

impl Drop for InHook {
    #[inline]
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|d| d.set(d.get() - 1));
    }
}

/// Whether this thread is running a policy hook. Such a thread may be the very one that
/// holds a buffer in transition (the load that called `on_miss`, the eviction batch that
/// called `on_evict`, the claims of a batch), so a call the hook makes back into its mapping
/// never waits for a buffer: it gets [`Error::WouldDeadlock`](crate::Error::WouldDeadlock).
pub(crate) fn in_hook() -> bool {
    IN_HOOK.try_with(|d| d.get() > 0).unwrap_or(false)
}

/// Whether this thread holds exclusive pins beyond its record, so that [`held`] may miss one.
pub(crate) fn unrecorded_exclusive() -> bool {
    EXCLUSIVE
        .try_with(|x| x.unrecorded.get() > 0)
        .unwrap_or(false)
}

/// Whether this thread holds any exclusive pin (of any mapping).
pub(crate) fn holds_exclusive() -> bool {
    EXCLUSIVE
        .try_with(|x| x.len.get() + x.unrecorded.get() > 0)
        .unwrap_or(false)
}

/// How this thread holds buffer `index` of the mapping at `mapping`, if it does.
pub(crate) fn held(mapping: usize, index: u64) -> Option<Hold> {
    let e = (mapping, index);
    let exclusive = EXCLUSIVE
        .try_with(|x| x.find(mapping, index).is_some())
        .unwrap_or(false);
    if exclusive {
        return Some(Hold::Exclusive);
    }
    let streaming = STREAMING
        .try_with(|s| s.borrow().contains(&e))
        .unwrap_or(false);
    streaming.then_some(Hold::Streaming)
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

    #[test]
    fn exclusive_pins_beyond_the_record_are_not_recorded_and_break_nothing() {
        for i in 0..MAX_EXCLUSIVE as u64 + 3 {
            hold(9, i, Hold::Exclusive);
        }
        assert_eq!(held(9, 0), Some(Hold::Exclusive));
        assert_eq!(held(9, MAX_EXCLUSIVE as u64 - 1), Some(Hold::Exclusive));
        assert_eq!(held(9, MAX_EXCLUSIVE as u64), None);
        assert!(unrecorded_exclusive());
        for i in (0..MAX_EXCLUSIVE as u64 + 3).rev() {
            release(9, i, Hold::Exclusive);
        }
        assert_eq!(held(9, 0), None);
        assert!(!unrecorded_exclusive() && !holds_exclusive());
        hold(9, 1, Hold::Exclusive);
        hold(9, 2, Hold::Exclusive);
        release(9, 1, Hold::Exclusive);
        assert_eq!(held(9, 2), Some(Hold::Exclusive));
        assert_eq!(held(9, 1), None);
        release(9, 2, Hold::Exclusive);
    }
}
