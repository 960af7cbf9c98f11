//! Per-thread staging memory for transparent mappings.
//!
//! A transparent mapping's pages cannot be read into in place: touching an absent page there
//! would fault into ucache itself. Loads read into staging memory first and then install it
//! with one `UFFDIO_COPY`. The staging area is an anonymous mapping (page-aligned, so
//! `O_DIRECT` stores need no bounce buffer) kept per thread and grown on demand, so steady-state
//! faults allocate nothing, which matters because they run inside a signal handler.
//!
//! Staging is memory outside the cache's budget, so what a thread keeps is bounded: the first
//! [`KEEP`] bytes stay populated (every fault and readahead run fits there), and the pages of a
//! larger area, which batched loads use (up to 16 MiB), are handed back with `MADV_FREE` after
//! each use. The kernel reclaims those only under memory pressure, and a later batch that finds
//! them still there writes them at no cost.

use std::cell::Cell;

use crate::error::{Error, Result};

/// Bytes of a thread's area that stay populated between uses.
const KEEP: usize = 1 << 20;

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

    /// Lets the kernel take back the pages past [`KEEP`]: their contents are never read before
    /// they are written again.
    fn release_tail(&self) {
        if self.len > KEEP {
            // SAFETY: a range inside this area's own mapping, which nobody uses between calls.
            unsafe {
                libc::madvise(
                    self.ptr.add(KEEP) as *mut libc::c_void,
                    self.len - KEEP,
                    libc::MADV_FREE,
                )
            };
        }
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
        _ => Area::new(len.next_multiple_of(4096).max(KEEP))?,
    };
    let r = f(area.ptr);
    area.release_tail();
    // Keep the larger of ours and one a nested call may have left behind.
    let _ = AREA.try_with(|a| match a.take() {
        Some(other) if other.len > area.len => a.set(Some(other)),
        _ => a.set(Some(area)),
    });
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `LazyFree` kilobytes of the mapping that starts at `addr`, from `/proc/self/smaps`.
    fn lazy_free_kib(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let head = format!("{addr:x}-");
        let vma = smaps
            .split_inclusive('\n')
            .skip_while(|l| !l.starts_with(&head))
            .skip(1)
            .take_while(|l| !l.contains('-') || l.contains(':'))
            .find(|l| l.starts_with("LazyFree:"))
            .expect("the area's LazyFree line");
        vma.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_large_area_keeps_only_its_first_mebibyte_populated() {
        let len = 4 * KEEP;
        let p = with_staging(len, |p| {
            // SAFETY: `len` bytes of this thread's staging area.
            unsafe { std::ptr::write_bytes(p, 7, len) };
            p as usize
        })
        .unwrap();
        // Pages still in the kernel's per-CPU batches are not counted yet (at most a few
        // dozen); the first mebibyte is never counted.
        let lazy = lazy_free_kib(p);
        let tail = ((len - KEEP) / 1024) as u64;
        assert!(
            (tail - 256..=tail).contains(&lazy),
            "LazyFree {lazy} KiB, tail {tail} KiB"
        );
        // The same area serves the next call, and what it writes reads back.
        let q = with_staging(len, |q| {
            // SAFETY: as above.
            unsafe {
                std::ptr::write_bytes(q, 9, len);
                assert_eq!(*q.add(len - 1), 9);
            }
            q as usize
        })
        .unwrap();
        assert_eq!(p, q, "the area is kept for the next call");
    }
}
