//! Pins handed to C: a guard of the Rust library, kept together with the mapping it borrows.

use std::ops::Deref;
use std::sync::Arc;

use ucache_core::{ExclusiveGuard, Mapping, SharedGuard};

use crate::handle::{arg, Out};
use crate::mapping::{mapping_of, ucache_mapping};
use crate::status::{call, ucache_status, Fail};

/// A pin's guard, held only to be dropped (which unpins): the buffer's address and length are
/// read before it is stored.
#[allow(dead_code)]
enum Guard {
    Shared(SharedGuard<'static>),
    Exclusive(ExclusiveGuard<'static>),
}

/// A pinned buffer. Opaque; made by `ucache_pin_shared` or `ucache_pin_exclusive`, released
/// by `ucache_unpin`.
pub struct ucache_pin {
    /// Borrows `*mapping`; declared first, so it is dropped (the buffer unpinned) before the
    /// mapping can go.
    guard: Guard,
    /// Kept only to keep the mapping alive.
    _mapping: Arc<Mapping>,
    /// The thread that took an exclusive pin (see [`this_thread`]), which must release it.
    thread: usize,
}

/// A number for the calling thread: the address of a thread-local.
fn this_thread() -> usize {
    thread_local!(static ME: u8 = const { 0 });
    ME.with(|m| m as *const u8 as usize)
}

/// The body of the two pin functions: checks the out-parameters, pins through `take`, and
/// hands out the pin (its guard made a [`Guard`] by `wrap`, kept with the mapping it borrows),
/// the buffer's address (which `addr` reads from the guard) and its length.
fn hand_out<G: Deref<Target = [u8]>, D>(
    mapping: *const ucache_mapping,
    (pin, data, len): (*mut *mut ucache_pin, *mut D, *mut usize),
    take: impl FnOnce(&'static Mapping) -> ucache_core::Result<G>,
    addr: impl FnOnce(&mut G) -> D,
    wrap: fn(G) -> Guard,
) -> ucache_status {
    call(|| {
        let (pin, data, len) = (
            Out::new(pin, "pin")?,
            Out::new(data, "data")?,
            Out::new(len, "len")?,
        );
        let mapping = mapping_of(mapping)?;
        // SAFETY: the reference is used only for the guard, which is stored next to the
        // `Arc` that keeps the mapping alive (at a fixed address) and is dropped before it
        // (field order of `ucache_pin`). It does not escape otherwise.
        let m: &'static Mapping = unsafe { &*Arc::as_ptr(&mapping) };
        let mut guard = take(m)?;
        data.set(addr(&mut guard));
        len.set(guard.len());
        pin.set(Box::into_raw(Box::new(ucache_pin {
            guard: wrap(guard),
            _mapping: mapping,
            thread: this_thread(),
        })));
        Ok(())
    })
}

/// Pins buffer `index` for reading, loading it if needed; many readers may hold it. Stores
/// the pin in `*pin`, the buffer's address in `*data` and its length in `*len` (the last
/// buffer of a mapping may be shorter than the buffer size).
///
/// Ownership: the pin belongs to the caller, who releases it once with `ucache_unpin`;
/// `data` is valid until then. The pin keeps the mapping alive: it stays valid after
/// `ucache_mapping_close`. Thread safety: any thread; a shared pin may be released on any
/// thread.
#[no_mangle]
pub extern "C" fn ucache_pin_shared(
    mapping: *const ucache_mapping,
    index: u64,
    pin: *mut *mut ucache_pin,
    data: *mut *const u8,
    len: *mut usize,
) -> ucache_status {
    hand_out(
        mapping,
        (pin, data, len),
        |m| m.pin_shared(index),
        |g| g.as_ptr(),
        Guard::Shared,
    )
}

/// Pins buffer `index` for writing, loading it if needed: no other pin reads or writes it
/// meanwhile. The buffer is marked dirty when released (written back later). Outputs as
/// `ucache_pin_shared`. `UCACHE_ERR_READ_ONLY` on a read-only mapping;
/// `UCACHE_ERR_WOULD_DEADLOCK` if this thread already holds that buffer exclusively.
///
/// Ownership: as `ucache_pin_shared`. Thread safety: any thread, but the pin must be
/// released on the thread that took it (elsewhere `ucache_unpin` refuses it).
#[no_mangle]
pub extern "C" fn ucache_pin_exclusive(
    mapping: *const ucache_mapping,
    index: u64,
    pin: *mut *mut ucache_pin,
    data: *mut *mut u8,
    len: *mut usize,
) -> ucache_status {
    hand_out(
        mapping,
        (pin, data, len),
        |m| m.pin_exclusive(index),
        |g| {
            g.mark_dirty();
            g.as_mut_ptr()
        },
        Guard::Exclusive,
    )
}

/// Releases a pin. A pin released after its mapping handle was closed may be the last user
/// of the mapping, which is then written back and released here.
///
/// Ownership: consumes the pin, like free(): releasing it twice is undefined behaviour.
/// NULL is refused with `UCACHE_ERR_NULL_POINTER`. An exclusive pin released on another
/// thread than the one that took it is refused (`UCACHE_ERR_BAD_ARGUMENT`) and stays held.
/// Thread safety: see the pin functions.
#[no_mangle]
pub extern "C" fn ucache_unpin(pin: *mut ucache_pin) -> ucache_status {
    call(|| {
        let p = arg(pin, "pin")?;
        if matches!(p.guard, Guard::Exclusive(_)) && p.thread != this_thread() {
            return Err(Fail::bad(
                "an exclusive pin must be released on the thread that took it",
            ));
        }
        release(pin);
        Ok(())
    })
}

/// Drops a pin handed out by `Box::into_raw`: unpins the buffer, then lets go of the mapping.
fn release(pin: *mut ucache_pin) {
    // SAFETY: a pin made by `Box::into_raw` in this file and not released yet (the contract
    // of `ucache_unpin`), so ownership goes back to a Box exactly once.
    drop(unsafe { Box::from_raw(pin) });
}
