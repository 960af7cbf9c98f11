//! Tasks waiting on a key (feature `tokio`): the async counterpart of parking_lot's table of
//! parked threads, which the state word's waiters share a key with (the word's address).
//!
//! A task must not block its executor thread, so where a thread parks on a key, a task leaves
//! its [`Waker`] here under it ([`register`]), and whoever wakes the key's threads wakes its
//! tasks too ([`wake`]). The table knows keys only: the future that waits on a state word
//! (`Changed`, in `state/changed.rs`) and the word's transitions that call [`wake`] live with
//! the word, so the imports point one way, state word → this table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::task::Waker;

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
pub(crate) fn register(key: usize, waker: &Waker) -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut v = shard(key).lock().unwrap_or_else(PoisonError::into_inner);
    v.push((key, id, waker.clone()));
    id
}

/// Takes registration `id` back, if a wake has not taken it already.
pub(crate) fn forget(key: usize, id: u64) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker's target that counts its wake-ups.
    #[derive(Default)]
    pub(crate) struct Count(pub(crate) AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Registrations left on `key`.
    pub(crate) fn registered(key: usize) -> usize {
        let v = shard(key).lock().unwrap_or_else(PoisonError::into_inner);
        v.iter().filter(|(k, _, _)| *k == key).count()
    }

    /// Keys of words of our own: nothing else in the process registers on them. `key + 8 *
    /// SHARDS` shares a shard with `key`, so a wake must pick its own key out of the shard.
    fn keys(words: &[AtomicU64; SHARDS + 1]) -> (usize, usize) {
        (
            &words[0] as *const AtomicU64 as usize,
            &words[SHARDS] as *const AtomicU64 as usize,
        )
    }

    #[test]
    fn a_wake_takes_every_registration_of_its_key_and_no_other() {
        let words: [AtomicU64; SHARDS + 1] = [const { AtomicU64::new(0) }; SHARDS + 1];
        let (key, neighbour) = keys(&words);
        assert!(std::ptr::eq(shard(key), shard(neighbour)));
        let (mine, theirs) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let (w, t) = (Waker::from(mine.clone()), Waker::from(theirs.clone()));
        register(key, &w);
        register(key, &w);
        register(neighbour, &t);
        wake(key);
        assert_eq!(
            mine.0.load(Ordering::SeqCst),
            2,
            "one wake per registration"
        );
        assert_eq!(
            theirs.0.load(Ordering::SeqCst),
            0,
            "the neighbour sleeps on"
        );
        assert_eq!((registered(key), registered(neighbour)), (0, 1));
        wake(key);
        assert_eq!(
            mine.0.load(Ordering::SeqCst),
            2,
            "a wake takes what it wakes"
        );
        wake(neighbour);
        assert_eq!(theirs.0.load(Ordering::SeqCst), 1);
        assert_eq!(registered(neighbour), 0);
    }

    /// Two registrations of one waker (two futures of one task): taking one back by its id
    /// leaves the other to be woken.
    #[test]
    fn forget_takes_back_its_own_registration_only() {
        let words: [AtomicU64; SHARDS + 1] = [const { AtomicU64::new(0) }; SHARDS + 1];
        let (key, _) = keys(&words);
        let count = Arc::new(Count::default());
        let w = Waker::from(count.clone());
        let a = register(key, &w);
        let b = register(key, &w);
        assert_ne!(a, b);
        forget(key, a);
        assert_eq!(registered(key), 1);
        forget(key, a);
        assert_eq!(
            registered(key),
            1,
            "a second forget of one id takes nothing"
        );
        wake(key);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "b was woken");
        forget(key, b);
        assert_eq!(registered(key), 0, "a forget after the wake is harmless");
    }
}
