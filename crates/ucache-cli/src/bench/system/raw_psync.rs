//! The device at the benchmark's own concurrency: each thread has one O_DIRECT read in flight,
//! so nothing can beat this on misses without keeping more requests in flight.
//!
//! raw-psync-fresh reads the same way into fresh memory ([`Arena`]): the floor of a cache that
//! reads each miss in place and gives evicted frames back, as ucache-explicit does.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use super::aligned::AlignedBuf;
use super::arena::Arena;
use super::{Params, System};
use crate::bench::worker::ThreadCtx;

pub struct RawPsync {
    file: File,
    fresh: bool,
}

impl RawPsync {
    pub fn open(p: &Params, fresh: bool) -> Result<Self, String> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p.path)
            .map_err(|e| format!("open {} O_DIRECT: {e}", p.path.display()))?;
        Ok(RawPsync { file, fresh })
    }
}

impl System for RawPsync {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        read_loop(&self.file, ctx, self.fresh)
    }
}

/// One synchronous read per access, into the thread's own buffer, reused, or (`fresh`) into
/// the next buffer of an [`Arena`]. The file's open flags decide whether that is the device
/// (`O_DIRECT`) or the page cache (`pread`'s system).
pub(super) fn read_loop(file: &File, ctx: &mut ThreadCtx, fresh: bool) -> Result<(), String> {
    let bs = ctx.params().buffer_size;
    let mut own = AlignedBuf::new(bs);
    let mut arena = fresh.then(|| Arena::new(bs));
    while ctx.running() {
        let t = ctx.sample();
        let idx = ctx.next_index();
        let buf: &mut [u8] = match &mut arena {
            // One read at a time: nothing older is in flight.
            // SAFETY: an arena buffer of bs bytes, ours until the next take.
            Some(a) => unsafe { std::slice::from_raw_parts_mut(a.take(usize::MAX).0, bs) },
            None => &mut own,
        };
        file.read_exact_at(buf, idx * bs as u64)
            .map_err(|e| format!("pread: {e}"))?;
        ctx.touch(buf, idx);
        ctx.done(1, t);
    }
    Ok(())
}
