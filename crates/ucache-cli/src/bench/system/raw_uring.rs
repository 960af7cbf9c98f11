//! The device's throughput: each thread keeps 32 O_DIRECT reads in flight on its own io_uring.
//! This is the ceiling ucache-prefetch aims at, since batched loading is its way past the
//! one-request-per-thread limit of raw-psync.
//!
//! raw-uring-fresh reads the same way into fresh memory ([`Arena`]): buffers well behind every
//! read in flight are given back, so each read lands in a newly faulted page, as in a cache
//! that gives evicted frames back. On this project's VM the device itself serves such reads
//! more slowly (see docs/design.md), a cost no page-recycling design escapes.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Instant;

use io_uring::{opcode, types, IoUring};

use super::aligned::AlignedBuf;
use super::arena::Arena;
use super::{Params, System, URING_QUEUE_DEPTH as QUEUE_DEPTH};
use crate::bench::worker::ThreadCtx;

pub struct RawUring {
    file: File,
    fresh: bool,
}

impl RawUring {
    pub fn open(p: &Params, fresh: bool) -> Result<Self, String> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p.path)
            .map_err(|e| format!("open {} O_DIRECT: {e}", p.path.display()))?;
        Ok(RawUring { file, fresh })
    }
}

struct Slot {
    buf: AlignedBuf,
    index: u64,
    started: Option<Instant>,
    /// Where the read in flight lands: `buf`, or (fresh) the arena buffer of sequence `seq`.
    at: *mut u8,
    seq: usize,
}

impl System for RawUring {
    fn run_thread(&self, ctx: &mut ThreadCtx) -> Result<(), String> {
        let bs = ctx.params().buffer_size;
        let mut ring =
            IoUring::new(QUEUE_DEPTH as u32).map_err(|e| format!("io_uring_setup: {e}"))?;
        let fd = types::Fd(self.file.as_raw_fd());
        let mut slots: Vec<Slot> = (0..QUEUE_DEPTH)
            .map(|_| Slot {
                buf: AlignedBuf::new(if self.fresh { 0 } else { bs }),
                index: 0,
                started: None,
                at: std::ptr::null_mut(),
                seq: usize::MAX,
            })
            .collect();
        let mut arena = self.fresh.then(|| Arena::new(bs));
        let mut done: Vec<(usize, i32)> = Vec::with_capacity(QUEUE_DEPTH);
        let mut in_flight = 0usize;
        let mut error = None;

        // `oldest`: the lowest arena sequence of the other reads in flight.
        let submit = |ctx: &mut ThreadCtx,
                      ring: &mut IoUring,
                      arena: &mut Option<Arena>,
                      oldest: usize,
                      slot: usize,
                      s: &mut Slot| {
            s.index = ctx.next_index();
            s.started = ctx.sample();
            (s.at, s.seq) = match arena {
                Some(a) => a.take(oldest),
                None => (s.buf.as_mut_ptr(), usize::MAX),
            };
            let sqe = opcode::Read::new(fd, s.at, bs as u32)
                .offset(s.index * bs as u64)
                .build()
                .user_data(slot as u64);
            // SAFETY: the slot's buffer (or arena buffer, which is dropped only once behind every
            // read in flight) stays alive and untouched until its completion is reaped, and the
            // loop below never returns while reads are in flight.
            unsafe {
                ring.submission()
                    .push(&sqe)
                    .expect("ring has a free entry per slot")
            };
        };

        for (i, s) in slots.iter_mut().enumerate() {
            submit(ctx, &mut ring, &mut arena, 0, i, s);
            in_flight += 1;
        }
        while in_flight > 0 {
            if let Err(e) = ring.submit_and_wait(1) {
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                // The kernel may still be writing into our buffers: waiting is impossible, so
                // leaking them is the only safe way out.
                std::mem::forget(slots);
                return Err(format!("io_uring_enter: {e}"));
            }
            done.clear();
            done.extend(
                ring.completion()
                    .map(|c| (c.user_data() as usize, c.result())),
            );
            for &(slot, res) in &done {
                in_flight -= 1;
                slots[slot].seq = usize::MAX;
                let oldest = slots.iter().map(|s| s.seq).min().unwrap_or(usize::MAX);
                let s = &mut slots[slot];
                if res < 0 || res as usize != bs {
                    error.get_or_insert_with(|| {
                        format!(
                            "read of buffer {}: {}",
                            s.index,
                            if res < 0 {
                                std::io::Error::from_raw_os_error(-res).to_string()
                            } else {
                                format!("short read {res} of {bs}")
                            }
                        )
                    });
                    continue;
                }
                // SAFETY: the read into `at` (bs bytes of the slot's buffer or of the arena)
                // has completed and nothing else writes there.
                let got = unsafe { std::slice::from_raw_parts(s.at, bs) };
                ctx.touch(got, s.index);
                ctx.done(1, s.started);
                if ctx.running() && error.is_none() {
                    submit(ctx, &mut ring, &mut arena, oldest, slot, s);
                    in_flight += 1;
                }
            }
        }
        error.map_or(Ok(()), Err)
    }
}
