//! Per-thread staging memory for transparent mappings.
//!
//! A transparent mapping's pages cannot be read into in place: touching an absent page there
//! would fault into ucache itself. Loads read into staging memory first and then install it
//! with one `UFFDIO_COPY`. The staging area is an anonymous mapping (page-aligned, so
//! `O_DIRECT` stores need no bounce buffer) kept per thread and grown on demand, so steady-state
//! faults allocate nothing, which matters because they run inside a signal handler.
//!
//! Areas for large reads (readahead runs, batches: [`HUGE_MIN`] and more) are backed by
//! transparent huge pages where the kernel allows them (`MADV_HUGEPAGE` on a 2 MiB-aligned
//! range). An `O_DIRECT` read hands the device one segment per physically contiguous piece of
//! its buffer: 256 segments for 1 MiB of 4 KiB pages, more than the virtio disk here takes in
//! one request (254), against one segment in a huge page. Reading a file with `O_DIRECT` in
//! 1 MiB pieces ran at 0.66-0.73 GB/s into 4 KiB pages and 2.8-3.6 GB/s into a huge page on
//! that disk, where the page cache's own readahead (large folios) reached 0.9 GB/s
//! (docs/results/2026-11-27-preload-quiet).
//!
//! Staging is memory outside the cache's budget, so what a thread keeps is bounded: a small
//! area of [`HUGE_MIN`] bytes for a fault's buffer (populated only as far as it is written),
//! and a huge area whose first [`HUGE`] bytes stay populated (every readahead run fits there).
//! The pages of a larger area, which batched loads use (up to 16 MiB), are handed back with
//! `MADV_FREE` after each use. The kernel reclaims those only under memory pressure, and a
//! later batch that finds them still there writes them at no cost.

use std::cell::Cell;

use crate::error::{Error, Result};

/// A huge page: the alignment and size unit of huge areas, and what one keeps populated.
const HUGE: usize = 2 << 20;

/// Reads at least this large get a huge area; smaller ones (a fault's buffer) a small area of
/// this size, so that the threads that fault (a program's own, in the shim) do not each hold a
/// huge page for a few KiB.
const HUGE_MIN: usize = 256 << 10;

struct Area {
    ptr: *mut u8,
    len: usize,
    huge: bool,
}

impl Area {
    fn new(len: usize) -> Result<Area> {
        let huge = len >= HUGE_MIN;
        let len = if huge {
            len.next_multiple_of(HUGE)
        } else {
            HUGE_MIN
        };
        // A huge area is mapped a huge page larger, then trimmed to a 2 MiB-aligned range.
        let map_len = if huge { len + HUGE } else { len };
        // SAFETY: anonymous private mapping at an address of the kernel's choosing, owned by
        // the returned Area (trimmed to `len` bytes below) until its Drop unmaps it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os("mmap(staging)"));
        }
        let mut ptr = p as *mut u8;
        if huge {
            let head = (p as usize).next_multiple_of(HUGE) - p as usize;
            // SAFETY: the head (`head` bytes) and the tail (`HUGE - head` bytes, at least one
            // page) lie inside the mapping just made, outside the `len` bytes from `p + head`
            // that the area keeps; the advice is on those bytes.
            unsafe {
                ptr = ptr.add(head);
                if head > 0 {
                    libc::munmap(p, head);
                }
                libc::munmap(ptr.add(len) as *mut libc::c_void, HUGE - head);
                // Failure (a kernel without THP) leaves an area of small pages: still correct.
                libc::madvise(ptr as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
            }
        }
        Ok(Area { ptr, len, huge })
    }

    /// Whether this area serves a read of `len` bytes: large enough, and huge if the read
    /// should be.
    fn serves(&self, len: usize) -> bool {
        self.len >= len && (self.huge || len < HUGE_MIN)
    }

    /// Lets the kernel take back a huge area's pages past its first huge page: their contents
    /// are never read before they are written again.
    fn release_tail(&self) {
        if self.huge && self.len > HUGE {
            // SAFETY: a range inside this area's own mapping, which nobody uses between calls.
            unsafe {
                libc::madvise(
                    self.ptr.add(HUGE) as *mut libc::c_void,
                    self.len - HUGE,
                    libc::MADV_FREE,
                )
            };
        }
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        // SAFETY: exactly the range Area::new kept of its mapping.
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
        let area = Area::new(len)?;
        return Ok(f(area.ptr));
    };
    let area = match cached {
        Some(a) if a.serves(len) => a,
        _ => Area::new(len)?,
    };
    let r = f(area.ptr);
    area.release_tail();
    // Keep a huge area over a small one, then the larger of ours and one a nested call may
    // have left behind.
    let _ = AREA.try_with(|a| match a.take() {
        Some(other) if (other.huge, other.len) > (area.huge, area.len) => a.set(Some(other)),
        _ => a.set(Some(area)),
    });
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines of `/proc/self/smaps` for the mapping that holds `addr` (the kernel may have
    /// merged an area with a neighbour of the same flags).
    fn smaps_of(addr: usize) -> Vec<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        // A mapping's first line is its range, `start-end perms ...`; the others are `Key: ...`.
        let range = |l: &str| -> Option<(usize, usize)> {
            let (r, _) = l.split_once(' ')?;
            let (a, b) = r.split_once('-')?;
            Some((
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            ))
        };
        smaps
            .lines()
            .skip_while(|l| !range(l).is_some_and(|(a, b)| (a..b).contains(&addr)))
            .skip(1)
            .take_while(|l| range(l).is_none())
            .map(str::to_string)
            .collect()
    }

    /// The `LazyFree` kilobytes of the mapping that holds `addr`.
    fn lazy_free_kib(addr: usize) -> u64 {
        let line = smaps_of(addr)
            .into_iter()
            .find(|l| l.starts_with("LazyFree:"))
            .expect("the area's LazyFree line");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Whether the mapping that holds `addr` is advised for huge pages (`hg`).
    fn huge_advised(addr: usize) -> bool {
        smaps_of(addr)
            .iter()
            .find_map(|l| l.strip_prefix("VmFlags:"))
            .expect("the area's VmFlags line")
            .split_whitespace()
            .any(|f| f == "hg")
    }

    #[test]
    fn a_large_area_keeps_only_its_first_huge_page_populated() {
        let len = 4 * HUGE;
        let p = with_staging(len, |p| {
            // SAFETY: `len` bytes of this thread's staging area.
            unsafe { std::ptr::write_bytes(p, 7, len) };
            p as usize
        })
        .unwrap();
        // Small pages still in the kernel's per-CPU batches are not counted yet (at most a few
        // dozen; huge ones move at once); the first huge page is never counted.
        let lazy = lazy_free_kib(p);
        let tail = ((len - HUGE) / 1024) as u64;
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

    /// Runs and batches read into a 2 MiB-aligned area advised for huge pages, so an
    /// `O_DIRECT` read there is few device segments; a fault's buffer gets a small area, and a
    /// huge one, once a thread has it, serves its small reads too.
    #[test]
    fn large_reads_get_huge_areas_and_faults_small_ones() {
        std::thread::spawn(|| {
            let small = with_staging(4096, |p| p as usize).unwrap();
            assert!(!huge_advised(small));
            let huge = with_staging(1 << 20, |p| {
                // SAFETY: 1 MiB of this thread's staging area.
                unsafe { std::ptr::write_bytes(p, 1, 1 << 20) };
                p as usize
            })
            .unwrap();
            assert_ne!(huge, small, "a small area does not serve a large read");
            assert_eq!(huge % HUGE, 0, "aligned to a huge page");
            assert!(huge_advised(huge));
            let again = with_staging(4096, |p| p as usize).unwrap();
            assert_eq!(again, huge, "the huge area serves a fault's buffer");
        })
        .join()
        .unwrap();
    }
}
