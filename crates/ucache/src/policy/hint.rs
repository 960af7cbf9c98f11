//! Application hints: a small tag that says what kind of access this is.
//!
//! Policies such as GET-SCAN (cache_ext §5.5) or a priority policy need to tell a scan from a
//! point lookup, which the buffer index alone cannot. Passing a tag through every primitive
//! would widen each signature for the few policies that care, so the tag belongs to the
//! thread: the caller sets it around a stretch of accesses ([`Hint::scoped`]) and a policy
//! reads [`Hint::current`] inside its hooks, which run on the accessing thread.

use std::cell::Cell;

/// An access class. The named constants are conventions shared by the bundled policies;
/// applications may use any other value for their own policies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hint(pub u8);

impl Hint {
    /// No hint: an ordinary access.
    pub const NONE: Hint = Hint(0);
    /// Part of a long sequential pass whose buffers will not be reused soon.
    pub const SCAN: Hint = Hint(1);
    /// A point lookup (a GET): the accesses a cache exists for.
    pub const POINT: Hint = Hint(2);
    /// Background maintenance (compaction, checkpointing) that should not displace hot data.
    pub const BACKGROUND: Hint = Hint(3);
    /// Data the application wants kept (P2Cache's pinned priority class).
    pub const PRIORITY: Hint = Hint(4);

    /// The calling thread's current hint.
    #[inline]
    pub fn current() -> Hint {
        CURRENT.with(|c| c.get())
    }

    /// Sets the calling thread's hint and returns the previous one.
    #[inline]
    pub fn set(hint: Hint) -> Hint {
        CURRENT.with(|c| c.replace(hint))
    }

    /// Runs `f` with the thread's hint set to `self`, restoring the previous hint afterwards
    /// (also when `f` panics).
    pub fn scoped<R>(self, f: impl FnOnce() -> R) -> R {
        struct Restore(Hint);
        impl Drop for Restore {
            fn drop(&mut self) {
                Hint::set(self.0);
            }
        }
        let _restore = Restore(Hint::set(self));
        f()
    }
}

thread_local! {
    static CURRENT: Cell<Hint> = const { Cell::new(Hint::NONE) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scoped_restores_even_on_panic() {
        assert_eq!(Hint::current(), Hint::NONE);
        Hint::SCAN.scoped(|| {
            assert_eq!(Hint::current(), Hint::SCAN);
            Hint::POINT.scoped(|| assert_eq!(Hint::current(), Hint::POINT));
            assert_eq!(Hint::current(), Hint::SCAN);
        });
        assert_eq!(Hint::current(), Hint::NONE);
        let r = std::panic::catch_unwind(|| Hint::BACKGROUND.scoped(|| panic!("boom")));
        assert!(r.is_err());
        assert_eq!(Hint::current(), Hint::NONE);
    }

    #[test]
    fn hints_are_per_thread() {
        Hint::set(Hint::SCAN);
        std::thread::spawn(|| assert_eq!(Hint::current(), Hint::NONE))
            .join()
            .unwrap();
        assert_eq!(Hint::set(Hint::NONE), Hint::SCAN);
    }
}
