//! Async waits on a buffer's state word (feature `tokio`): the waker side of
//! [`BufferState::wait_change`].
//!
//! A thread that waits parks on the word's address in parking_lot's table; a task must not
//! block its executor thread, so it leaves its [`Waker`] in this table instead, under the same
//! key, and sets the word's `W` bit as a parked thread does. Every transition that clears `W`
//! already calls `BufferState::wake`, which wakes both, so the protocol's CAS paths need no
//! change and a word nobody waits on never touches this table: the hit path stays one atomic
//! add.
//!
//! Order matters for a lost wakeup: the waker is registered first, then the bit is set by a CAS
//! from the word the waiter saw. A change before the CAS fails it (the waiter looks again); a
//! change after it clears `W` and so wakes the registered waker.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::state::{BufferState, Word};

/// Shards of the table, by key: wakes of unrelated words rarely meet on one lock.
const SHARDS: usize = 64;

/// Registrations: the word's key, the registration's id, the waker. By id, not by waker, a
/// registration is taken back: the futures of one task (the branches of a `join!`) share one
/// waker, and one must not take back another's.
type Shard = Mutex<Vec<(usize, u64, Waker)>>;
static TABLE: [Shard; SHARDS] = [const { Mutex::new(Vec::new()) }; SHARDS];

fn shard(key: usize) -> &'static Shard {
    // Keys are addresses of 8-byte words.
    &TABLE[(key >> 3) % SHARDS]
}

/// Registers `waker` on the word at `key`: the registration's id, for [`forget`].
fn register(key: usize, waker: &Waker) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut v = shard(key).lock().unwrap_or_else(PoisonError::into_inner);
    v.push((key, id, waker.clone()));
    id
}

/// Takes registration `id` back, if a wake has not taken it already.
fn forget(key: usize, id: u64) {
    let mut v = shard(key).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(k) = v.iter().position(|&(_, i, _)| i == id) {
        v.swap_remove(k);
    }
}

/// Wakes every task waiting on the word at `key` (called by `BufferState::wake`).
pub(crate) fn wake(key: usize) {
    let woken: Vec<Waker> = {
        let mut v = shard(key).lock().unwrap_or_else(PoisonError::into_inner);
        if v.is_empty() {
            return;
        }
        let mut woken = Vec::new();
        v.retain(|(k, _, w)| {
            if *k == key {
                woken.push(w.clone());
            }
            *k != key
        });
        woken
    };
    for w in woken {
        w.wake();
    }
}

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
            forget(self.s.key(), id);
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
        self.registered = Some(register(self.s.key(), cx.waker()));
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
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A buffer in `Loading`, and a waker that counts its wake-ups.
    fn loading_with_a_counting_waker() -> (BufferState, Word, Arc<Count>, Waker) {
        let s = BufferState::new();
        let w0 = s.load();
        let loading = w0.begin_load().unwrap();
        s.cas(w0, loading).unwrap();
        let count = Arc::new(Count(AtomicUsize::new(0)));
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
        let key = s.key();
        assert!(!shard(key).lock().unwrap().iter().any(|(k, _, _)| *k == key));
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
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0))));
        let mut cx = Context::from_waker(&waker);
        assert!(Box::pin(s.changed(seen)).as_mut().poll(&mut cx).is_ready());
        assert!(!s.load().has_waiters());
    }
}
