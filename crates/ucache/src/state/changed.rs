//! The async [`BufferState::wait_change`] (feature `tokio`): a future that resolves once the
//! word changes, for a task that must not block its executor thread.
//!
//! Where a thread parks on the word's address in parking_lot's table, a task leaves its
//! [`Waker`](std::task::Waker) in [`crate::wakers`]' table under the same key, and sets the
//! word's `W` bit as a parked thread does. Every transition that clears `W` already calls
//! `BufferState::wake`, which wakes both, so the protocol's CAS paths need no change and a
//! word nobody waits on never touches the table: the hit path stays one atomic add.
//!
//! Order matters for a lost wakeup: the waker is registered first, then the bit is set by a CAS
//! from the word the waiter saw. A change before the CAS fails it (the waiter looks again); a
//! change after it clears `W` and so wakes the registered waker.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{BufferState, Word};
use crate::wakers;

/// Resolves once the buffer's word is no longer `seen` (setting `W` is no change): the async
/// [`BufferState::wait_change`].
/// Dropped while pending, it takes its waker back out of the table.
pub(crate) struct Changed<'a> {
    s: &'a BufferState,
    seen: Word,
    /// The id of this future's registration, while it has one.
    registered: Option<u64>,
}

impl BufferState {
    pub(crate) fn changed(&self, seen: Word) -> Changed<'_> {
        Changed {
            s: self,
            seen,
            registered: None,
        }
    }
}

impl Changed<'_> {
    fn unregister(&mut self) {
        if let Some(id) = self.registered.take() {
            wakers::forget(self.s.key(), id);
        }
    }
}

impl Future for Changed<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A waker taken by a wake is gone from the table; any other is replaced, so each
        // pending poll leaves exactly one registration, of the latest waker.
        self.unregister();
        if !self.s.unchanged(self.seen) {
            return Poll::Ready(());
        }
        self.registered = Some(wakers::register(self.s.key(), cx.waker()));
        if self.s.mark_waiters(self.seen) {
            Poll::Pending
        } else {
            self.unregister();
            Poll::Ready(())
        }
    }
}

impl Drop for Changed<'_> {
    fn drop(&mut self) {
        self.unregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wakers::tests::Count;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::task::Waker;

    /// A buffer in `Loading`, and a waker that counts its wake-ups.
    fn loading_with_a_counting_waker() -> (BufferState, Word, Arc<Count>, Waker) {
        let s = BufferState::new();
        let w0 = s.load();
        let loading = w0.begin_load().unwrap();
        s.cas(w0, loading).unwrap();
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        (s, loading, count, waker)
    }

    #[test]
    fn a_transition_wakes_a_pending_waiter_once_and_a_dropped_one_never() {
        let (s, loading, count, waker) = loading_with_a_counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut f = Box::pin(s.changed(loading));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert!(s.load().has_waiters(), "the waiter marked the word");
        // A second poll replaces the registration rather than adding one.
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(wakers::tests::registered(s.key()), 1);
        let cached = s.load().finish_load(crate::state::Pin::None, false);
        s.cas(s.load(), cached).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken exactly once");
        assert!(f.as_mut().poll(&mut cx).is_ready());

        // A waiter dropped while pending leaves nothing behind to wake.
        let x = s.load().pin_exclusive().unwrap();
        s.cas(s.load(), x).unwrap();
        let mut g = Box::pin(s.changed(x));
        assert!(g.as_mut().poll(&mut cx).is_pending());
        drop(g);
        assert_eq!(wakers::tests::registered(s.key()), 0);
        s.update(|w| Some(w.unpin_exclusive(false))).unwrap();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    /// Two waits of one task (the branches of a `join!`) share its waker: a wait taking its
    /// registration back must not take the other's, or the other is never woken. Here `b`
    /// waits again on the next state before `a` sees the change that woke them both.
    #[test]
    fn two_waits_with_one_waker_keep_their_own_registrations() {
        let (s, loading, count, waker) = loading_with_a_counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut a = Box::pin(s.changed(loading));
        let mut b = Box::pin(s.changed(loading));
        assert!(a.as_mut().poll(&mut cx).is_pending());
        assert!(b.as_mut().poll(&mut cx).is_pending());
        // Loaded and pinned exclusively by its loader: both are woken.
        let x = s.load().finish_load(crate::state::Pin::Exclusive, false);
        s.cas(s.load(), x).unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            2,
            "one wake per registration"
        );
        assert!(b.as_mut().poll(&mut cx).is_ready());
        let mut b = Box::pin(s.changed(s.load()));
        assert!(
            b.as_mut().poll(&mut cx).is_pending(),
            "b waits for the unpin"
        );
        assert!(a.as_mut().poll(&mut cx).is_ready());
        drop(a);
        s.update(|w| Some(w.unpin_exclusive(false))).unwrap();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            3,
            "b was woken by the unpin"
        );
        assert!(b.as_mut().poll(&mut cx).is_ready());
    }

    #[test]
    fn a_change_before_the_mark_is_seen_at_once() {
        let s = BufferState::new();
        let seen = s.load();
        let loading = seen.begin_load().unwrap();
        s.cas(seen, loading).unwrap();
        let waker = Waker::from(Arc::new(Count::default()));
        let mut cx = Context::from_waker(&waker);
        assert!(Box::pin(s.changed(seen)).as_mut().poll(&mut cx).is_ready());
        assert!(!s.load().has_waiters());
    }
}
