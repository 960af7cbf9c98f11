//! CPU cache hints.

/// Bytes in a cache line on the CPUs ucache runs on (x86-64, most arm64): what tables laid
/// out by line (the resident set, the readahead detector's record) assume.
pub(crate) const BYTES: usize = 64;

/// Starts fetching the cache line that holds `x` into this core's caches: for loops that
/// know which cold lines they will touch next (a clock sweep's state words and their
/// resident-set entries) and would otherwise wait for each miss in turn. Only a hint: it
/// never faults and changes nothing, so under Miri, which need not model it, it is left out.
#[inline]
pub(crate) fn prefetch<T>(x: &T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch never faults and does not change memory; SSE is part of the
        // x86-64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(x as *const T as *const i8) };
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = x;
}
