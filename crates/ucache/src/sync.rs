//! The synchronization primitives of the buffer protocol, switchable to shuttle's.
//!
//! With the `shuttle` feature, the state word's atomics and waits become shuttle's, so the
//! model checker (tests/model.rs) controls every interleaving of the real protocol code.
//! Parking becomes a yield there: shuttle cannot see a thread blocked in the OS.

#[cfg(feature = "shuttle")]
pub(crate) use shuttle::sync::atomic::{fence, AtomicU64};
#[cfg(not(feature = "shuttle"))]
pub(crate) use std::sync::atomic::{fence, AtomicU64};

/// Gives the processor to another thread while waiting for one.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(not(feature = "shuttle"))]
    std::thread::yield_now();
    #[cfg(feature = "shuttle")]
    shuttle::thread::yield_now();
}

/// Whether waiters may block in the OS (false under the model checker).
pub(crate) const CAN_PARK: bool = cfg!(not(feature = "shuttle"));

/// A point where the model checker may switch threads, and a no-op otherwise: before an
/// optimistic reader's reads of the buffer, which are plain memory the checker cannot see.
/// Without it, those reads would always run right after the word was loaded, and the model
/// could never put a frame's reuse (or a writer) between the two.
#[inline(always)]
pub(crate) fn model_switch_point() {
    #[cfg(feature = "shuttle")]
    shuttle::thread::yield_now();
}
