//! Per-thread staging memory for transparent mappings.
//!
//! A transparent mapping's pages cannot be read into in place: touching an absent page there
//! would fault into ucache itself. Loads read into staging memory first and then install it
//! with one `UFFDIO_COPY`. The staging area is an anonymous mapping (page-aligned, so
//! `O_DIRECT` stores need no bounce buffer) kept per thread and grown on demand, so steady-state
//! faults allocate nothing, which matters because they run inside a signal handler.

use std::cell::Cell;

use crate::error::{Error, Result};

struct Area {
    ptr: *mut u8,
    len: usize,
}

impl Area {
    fn new(len: usize) -> Result<Area> {
        // SAFETY: anonymous private mapping at an address of the kernel's choosing, owned by
        // the returned Area until its Drop unmaps it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os("mmap(staging)"));
        }
        Ok(Area {
            ptr: p as *mut u8,
            len,
        })
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping created in Area::new.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

thread_local! {
    static AREA: Cell<Option<Area>> = const { Cell::new(None) };
}

/// Runs `f` with at least `len` bytes of page-aligned scratch memory owned by this thread.
/// A nested call (a fault served while the thread was already staging) gets its own area.
///
/// During thread exit, once this thread's slot is gone (a fault in a thread-local destructor
/// that runs after it), the area is made for the call and unmapped after it.
pub(crate) fn with_staging<R>(len: usize, f: impl FnOnce(*mut u8) -> R) -> Result<R> {
    let Ok(cached) = AREA.try_with(|a| a.take()) else {
        let area = Area::new(len.next_multiple_of(4096))?;
        return Ok(f(area.ptr));
    };
    let area = match cached {
        Some(a) if a.len >= len => a,
        _ => Area::new(len.next_multiple_of(4096).max(1 << 20))?,
    };
    let r = f(area.ptr);
    // Keep the larger of ours and one a nested call may have left behind.
    let _ = AREA.try_with(|a| match a.take() {
        Some(other) if other.len > area.len => a.set(Some(other)),
        _ => a.set(Some(area)),
    });
    Ok(r)
}
