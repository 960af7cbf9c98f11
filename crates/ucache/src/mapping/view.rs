//! File views ([`MapOptions::file_view`]): a transparent mapping whose region is the file
//! itself, mapped by the kernel and kept inaccessible except where ucache has loaded buffers.
//!
//! Every other transparent mapping pays for a miss twice on a device as fast as memory: the
//! read into staging, then `UFFDIO_COPY` into a page of ucache's own, which is allocated,
//! charged and later zapped. On zram, where a read is itself a page copy, that held
//! `rg --mmap` through the LD_PRELOAD shim at about 0.6× plain `mmap`
//! (docs/results/2026-11-27-guard). A view loads a buffer by making it readable and having the
//! kernel read it into the page cache and map it (`Region::reveal`), and evicts it by hiding
//! it again and dropping its pages: the page-cache page is the only copy, as under `mmap`,
//! while the budget, the policy and the readahead windows stay ucache's. A buffer's state word
//! and its protection change together under the buffer's claim, so a load that reaches a
//! hidden page always finds the buffer not `Cached` and waits or loads. What a view cannot do
//! is be written through: it is read-only.
//!
//! Loads go through the same claims as any miss; only where their bytes come from differs.
//! So the three ways a transparent mapping loads (one buffer on a fault or pin, a batch, an
//! IO thread's stream) each ask [`MappingCore::reveal_claims`] here instead of the store.

use super::claim::LoadClaim;
use super::options::MapOptions;
use super::MappingCore;
use crate::error::{Error, Result};
use crate::fault::FaultHandling;
use crate::region::Region;
use crate::state::Pin;
use crate::store::Object;

/// Smallest buffer of a view. Each run of loaded buffers is an area of the address space of
/// its own until its neighbours load (`vm.max_map_count` is 65,530 by default), and each load
/// and eviction costs a protection change of a few microseconds: at 16 KiB an rg-shaped scan
/// ran at 0.55× plain, at 64 KiB at 0.84-0.94×.
const MIN_BUFFER: usize = 64 << 10;

/// Refuses the options a view cannot have, before the store is asked for anything.
pub(super) fn check_options(o: &MapOptions, bs: usize) -> Result<()> {
    if !o.file_view {
        return Ok(());
    }
    let why = if !o.transparent {
        "a file view is a transparent mapping: `transparent(false)` contradicts `file_view(true)`"
    } else if o.writable {
        "a file view is read-only: its pages are the file's, and ucache cannot see stores to them"
    } else if bs < MIN_BUFFER {
        "a file view needs buffers of at least 64 KiB (each run of loaded buffers is an area of \
         the address space)"
    } else if o.fault_handling != FaultHandling::OnFaultingThread {
        "a file view's faults are served on the faulting thread (they come by SIGSEGV, not \
         through a userfaultfd that handler threads could read)"
    } else {
        return Ok(());
    };
    Err(Error::BadArgument(why.into()))
}

/// The region of a view of `obj` (named `name`) from `offset`, `bytes` long.
pub(super) fn reserve(
    obj: &dyn Object,
    name: &str,
    offset: u64,
    bytes: usize,
    bs: usize,
) -> Result<Region> {
    let fd = obj.page_cache_fd().ok_or_else(|| {
        Error::BadArgument(format!(
            "object {name} cannot be a file view: its store does not read it through a file's \
             page cache"
        ))
    })?;
    Region::reserve_view(bytes, bs.min(2 << 20), fd, offset)
}

impl MappingCore {
    /// Whether this mapping is a file view.
    pub(crate) fn is_view(&self) -> bool {
        self.home.region().is_some_and(Region::is_view)
    }

    /// Loads `claims` (room taken) by revealing them, each run of consecutive buffers with one
    /// call, and publishes each holding `pin`. Returns how many loaded and the first error; a
    /// buffer that failed goes back to `Evicted`, hidden again.
    pub(super) fn reveal_claims<'a>(
        &'a self,
        claims: impl IntoIterator<Item = LoadClaim<'a>>,
        pin: Pin,
        prefetched: bool,
    ) -> (u64, Option<Error>) {
        let region = self.home.region().expect("a view has a region");
        let (mut ok, mut first) = (0, None);
        let mut run: Vec<LoadClaim<'a>> = Vec::new();
        let mut reveal = |run: &mut Vec<LoadClaim<'a>>| {
            let Some(start) = run.first().map(LoadClaim::index) else {
                return;
            };
            let r = region.reveal((start << self.shift) as usize, run.len() * self.bs);
            for mut c in run.drain(..) {
                match &r {
                    Ok(()) => {
                        c.publish(pin, prefetched, false);
                        ok += 1;
                    }
                    Err(_) => c.mark_filled(),
                }
            }
            if let Err(e) = r {
                first.get_or_insert(e);
            }
        };
        for c in claims {
            if run.last().is_some_and(|l| l.index() + 1 != c.index()) {
                reveal(&mut run);
            }
            run.push(c);
        }
        reveal(&mut run);
        (ok, first)
    }
}
