//! Loads as store streams ([`Object::read_stream`]): reads refilled one by one as they
//! complete, each buffer published the moment its own read lands. `pin_each` runs one on the
//! calling thread; the IO threads run one per prefetch job, taking in later jobs of the same
//! mapping while reads are in flight. Adjacent buffers travel as one run.
//!
//! [`Object::read_stream`]: crate::store::Object::read_stream

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Instant;

use super::batch::{run_part, RUN_BYTES, STAGING_BYTES};
use super::claim::LoadClaim;
use super::{with_staging, MappingCore};
use crate::error::{Error, Result};
use crate::guard::SharedGuard;
use crate::held::{self, Hold};
use crate::state::{Phase, Pin};
use crate::stats::Counter;
use crate::store::IoBuf;

/// Most bytes one run of a prefetch stream (the IO threads' [`MappingCore::load_stream`]) reads and installs at once: a whole window of the
/// transparent readahead (`ReadAhead::transparent_default`), so one window is one read and one
/// `UFFDIO_COPY`. It was 128 KiB (Linux's default readahead) while stores read through the
/// page cache, whose own readahead made the device's requests large whatever the run; a store
/// that reads around it (the LD_PRELOAD shim's `O_DIRECT` reads) hands the device requests of
/// this size, and a sequential scan on the virtio disk ran 0.9-1.5 s with 1 MiB runs against
/// 1.3-2.5 s with 128 KiB ones (docs/results/2026-11-26-preload-scans).
pub(super) const STREAM_RUN_BYTES: usize = 1 << 20;

/// Runs a transparent stream keeps staging memory for: reads in flight on a store that
/// overlaps them (io_uring). A synchronous store uses the first slot only.
const RUNS_IN_FLIGHT: usize = 4;

/// What `pin_each` did with one index.
enum Step<'a> {
    /// Cached: visited at once.
    Visited,
    /// Another thread is loading, evicting or holding it: visit it after the stream.
    Later,
    /// Claimed with its room at the instant given (its miss's latency starts there): its
    /// read goes into the stream.
    Claimed(Instant, LoadClaim<'a>),
    /// Claimable, but no memory until a read in flight is visited: retry after a completion.
    NoRoom,
}

impl MappingCore {
    /// Visits buffers as they become available: pins each of `indices` shared and calls `f` on
    /// it, hits at once, misses as their own reads complete, with up to `depth` reads in flight
    /// from this thread (refilled read by read on an io_uring store). Buffers another thread is
    /// loading are visited last. Stops at the first error (an index out of range, a failed
    /// read, memory that cannot be freed) and returns it; buffers already in flight are still
    /// loaded. A transparent mapping visits them one pin at a time.
    pub(crate) fn pin_each(
        self: &Arc<Self>,
        indices: &mut dyn Iterator<Item = u64>,
        depth: usize,
        f: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<()> {
        if self.home.is_transparent() {
            for i in indices {
                let g = self.pin_shared(i)?;
                f(i, &g[..]);
            }
            return Ok(());
        }
        let failed: RefCell<Option<Error>> = RefCell::new(None);
        let mut later = Vec::new();
        // `f` runs while reads are in flight. A panic in it is held until every read has
        // landed and been published, then resumed: unwinding through the store would leave
        // the buffers in flight `Loading` for good.
        let panicked: RefCell<Option<Box<dyn Any + Send>>> = RefCell::new(None);
        let f = RefCell::new(f);
        let visit = |i: u64, bytes: &[u8]| {
            if panicked.borrow().is_some() {
                return;
            }
            let r = panic::catch_unwind(AssertUnwindSafe(|| (f.borrow_mut())(i, bytes)));
            if let Err(p) = r {
                *panicked.borrow_mut() = Some(p);
            }
        };
        let me = self.addr();
        // Reads in flight, and an index whose claim waits for memory those reads will free.
        let in_flight = std::cell::Cell::new(0usize);
        // When each buffer in flight was claimed, for the miss-latency histogram. A map: up to
        // `depth` runs of many buffers each are in flight, and a list searched for every
        // landed buffer cost a quadratic scan per stream step (10% of a cold `pin_each`).
        let issued: RefCell<HashMap<u64, Instant>> = RefCell::new(HashMap::with_capacity(depth));
        let mut retry: Option<u64> = None;
        // An index taken from `indices` to extend a run, but left for the next pull.
        let mut peeked: Option<u64> = None;
        // Adjacent misses travel as one read of up to RUN_BYTES where their memory is adjacent
        // too (always in place; for a pool mapping, where its frames are).
        let run_max = (RUN_BYTES / self.bs).max(1);
        // What to do with index `i`; `retried`: its miss was told to the policy already;
        // `may_wait`: no claim of this stream is outstanding, so it may wait for memory.
        let step = |i: u64, retried: bool, may_wait: bool| -> Result<Step<'_>> {
            let s = self.slot(i)?;
            let w = s.load();
            if w.phase() == Phase::Cached {
                // Never wait here: this stream's claims may not be submitted yet, and
                // whoever holds the buffer may be waiting for one of them.
                let Some(g) = self.try_pin_shared(i) else {
                    return Ok(Step::Later);
                };
                visit(i, &g[..]);
                return Ok(Step::Visited);
            }
            let Some(mut c) = self.claim_load(i, w) else {
                return Ok(Step::Later);
            };
            // Before taking room, as `Policy::on_miss` promises: ghost lists adapt
            // before the evictions the reservation makes.
            if !retried {
                self.policy.on_miss(i);
            }
            let t0 = Instant::now();
            // With claims outstanding, never wait for memory: a budget smaller than the
            // stream's depth is freed by those very reads once visited, so pause until one
            // completes. With none, wait as a demand miss does. (The claim undoes itself if
            // no room is had.)
            if !c.take_room(may_wait)? {
                return Ok(Step::NoRoom);
            }
            Ok(Step::Claimed(t0, c))
        };
        // Takes claim `c` of `i` into the read being built: until its read lands, a pin of i
        // from `f` would wait on this thread, so it is marked held; the claim itself travels
        // with the read and is adopted when it lands.
        let adopt_later = |i: u64, t0: Instant, c: LoadClaim<'_>| {
            issued.borrow_mut().insert(i, t0);
            held::hold(me, i, Hold::Streaming);
            c.into_raw();
        };
        // A claim, handed to the stream, that could not extend the run before it (a pool frame
        // not adjacent to the run's last): it starts the next read.
        let mut carried: Option<u64> = None;
        // Undoes a carried claim that no read took: after a failure, or when the store ends
        // its stream without asking for another read (a broken ring, a user store that
        // returned early), since nothing else would ever adopt it.
        let undo_carried = |i: u64| {
            held::release(me, i, Hold::Streaming);
            issued.borrow_mut().remove(&i);
            // SAFETY: handed to the stream by `adopt_later` and never read; adopted once.
            let mut c = unsafe { LoadClaim::adopt(self, i) };
            c.mark_unfilled();
        };
        let mut pull = || -> Option<IoBuf> {
            while failed.borrow().is_none() && panicked.borrow().is_none() {
                let (i, dest) = match carried.take() {
                    Some(i) => (i, self.ptr(i)),
                    None => {
                        // A retried index already told the policy of its miss.
                        let retried = retry.take();
                        let i = match retried.or_else(|| peeked.take()) {
                            Some(i) => i,
                            None => indices.next()?,
                        };
                        match step(i, retried.is_some(), in_flight.get() == 0) {
                            Ok(Step::Claimed(t0, mut c)) => {
                                let dest = c.dest();
                                adopt_later(i, t0, c);
                                (i, dest)
                            }
                            Ok(Step::Visited) => continue,
                            Ok(Step::Later) => {
                                later.push(i);
                                continue;
                            }
                            Ok(Step::NoRoom) => {
                                retry = Some(i);
                                return None;
                            }
                            Err(e) => {
                                failed.borrow_mut().get_or_insert(e);
                                continue;
                            }
                        }
                    }
                };
                let mut n = 1;
                // Extend the run with the next indices while they are adjacent misses that
                // can be claimed with room at once, and whose memory follows the run's (always
                // in place; in a pool, when the frames handed out happen to be adjacent, as
                // frames of a fresh chunk are).
                while n < run_max {
                    let Some(j) = indices.next() else { break };
                    let fresh = j == i + n as u64
                        && self.slot(j).is_ok_and(|s| {
                            let w = s.load();
                            w.phase() == Phase::Evicted && w.idle()
                        });
                    if !fresh {
                        peeked = Some(j);
                        break;
                    }
                    match step(j, false, false) {
                        Ok(Step::Claimed(t0, mut c)) => {
                            let adjacent = c.dest() == dest.wrapping_add(n * self.bs);
                            adopt_later(j, t0, c);
                            if !adjacent {
                                carried = Some(j);
                                break;
                            }
                            n += 1;
                        }
                        Ok(Step::Visited) => break,
                        Ok(Step::Later) => {
                            later.push(j);
                            break;
                        }
                        Ok(Step::NoRoom) => {
                            retry = Some(j);
                            break;
                        }
                        Err(e) => {
                            failed.borrow_mut().get_or_insert(e);
                            break;
                        }
                    }
                }
                self.count_store_read(in_flight.get());
                in_flight.set(in_flight.get() + 1);
                // SAFETY: buffers i..i+n are Loading and ours until the store hands the read
                // back, and their memory is adjacent (checked above).
                return Some(unsafe { IoBuf::new(dest, n * self.bs, self.object_offset(i)) });
            }
            // A claim carried past a failure is undone: nothing was read into it.
            if let Some(i) = carried.take() {
                undo_carried(i);
            }
            None
        };
        let st = self.stats();
        let mut done = |req: IoBuf, got: io::Result<usize>| {
            in_flight.set(in_flight.get() - 1);
            let first = (req.offset() - self.offset) >> self.shift;
            // Every buffer of the run is published before the first is visited, so `f` may
            // pin any of them (a record that spans buffers) without waiting on itself.
            let mut landed = Vec::with_capacity(req.len() / self.bs);
            for k in 0..req.len() / self.bs {
                let i = first + k as u64;
                held::release(me, i, Hold::Streaming);
                let since = issued.borrow_mut().remove(&i);
                // SAFETY: the claim of i was handed to this read in `pull`; adopted once, here.
                let claim = unsafe { LoadClaim::adopt(self, i) };
                // SAFETY: inside the run's memory.
                let dest = unsafe { req.ptr().add(k * self.bs) };
                let got_k = run_part(&got, k, self.bs);
                match self.finish_load(claim, dest, got_k, false, Pin::Shared) {
                    Ok(()) => {
                        if let Some(t) = since {
                            st.record_miss_latency(t.elapsed());
                        }
                        self.count_access(Counter::Misses, 1);
                        st.add(Counter::BytesRead, self.bs as u64);
                        // SAFETY: published with our shared pin, which the guard now owns.
                        landed.push(unsafe {
                            SharedGuard::new(self.state(i), i, dest, self.valid(i))
                        });
                    }
                    Err(e) => {
                        failed.borrow_mut().get_or_insert(e);
                    }
                }
            }
            for g in landed {
                visit(g.index(), &g[..]);
            }
        };
        self.object.read_stream(depth, &mut pull, &mut done);
        if let Some(i) = carried.take() {
            undo_carried(i);
        }
        if let Some(p) = panicked.into_inner() {
            panic::resume_unwind(p);
        }
        if let Some(e) = failed.into_inner() {
            return Err(e);
        }
        let f = f.into_inner();
        for i in later {
            let g = self.pin_shared(i)?;
            f(i, &g[..]);
        }
        Ok(())
    }

    /// Loads claimed buffers pulled from `next` as one store stream (the IO worker's
    /// prefetches): up to `depth` reads in flight, refilled read by read, each buffer published
    /// the moment its own read completes, so a thread waiting on one buffer waits for that read
    /// alone and the device never drains between batches. `next` may answer `None` for now and
    /// more later (see [`Object::read_stream`]); the call returns once it has nothing and no
    /// read is in flight. Failures are counted; the buffers stay evicted.
    ///
    /// [`Object::read_stream`]: crate::store::Object::read_stream
    ///
    /// # Safety
    /// Every index `next` gives is a claim of this mapping handed over with
    /// [`LoadClaim::into_raw`], given once.
    pub(crate) unsafe fn load_stream(&self, depth: usize, next: &mut dyn FnMut() -> Option<u64>) {
        if self.is_view() {
            // SAFETY: each index is a claim handed over by our caller, adopted once, here.
            let claims = std::iter::from_fn(next).map(|i| unsafe { LoadClaim::adopt(self, i) });
            let (ok, _) = self.reveal_claims(claims, Pin::None, true);
            self.stats().add(Counter::Prefetches, ok);
            self.stats().add(Counter::BytesRead, ok * self.bs as u64);
            return;
        }
        let left = if !self.home.is_transparent() {
            self.stream_into(depth.max(1), None, next)
        } else {
            // Staging for every read in flight (at least a few whole runs), within the same cap
            // as a batched load.
            let depth = depth
                .max(RUNS_IN_FLIGHT * STREAM_RUN_BYTES / self.bs)
                .min(STAGING_BYTES / self.bs)
                .max(1);
            // Without staging memory nothing was taken from `next` yet: all of it is left.
            with_staging(depth * self.bs, |p| self.stream_into(depth, Some(p), next))
                .unwrap_or(Some(None))
        };
        // Claims the stream did not take (no staging memory, or a store that ended its stream
        // early or panicked) are loaded one by one rather than left `Loading` for good.
        if let Some(peeked) = left {
            for i in peeked.into_iter().chain(std::iter::from_fn(next)) {
                // SAFETY: a claim handed over by our caller, not adopted by the stream.
                let _ = unsafe { self.load_handed(&[i], None) };
            }
        }
    }

    /// [`MappingCore::load_stream`] reading into the region, or into staging slots at `stage`
    /// (`depth` buffers in all). Consecutive indices travel as one run: one read, and on a
    /// transparent mapping one `UFFDIO_COPY`, for up to [`STREAM_RUN_BYTES`] of buffers, as a
    /// readahead window asks. Returns `None` once `next` is drained, or, if the store ended
    /// the stream before that, `Some` with a claim it had taken from `next` and not read.
    fn stream_into(
        &self,
        depth: usize,
        stage: Option<*mut u8>,
        next: &mut dyn FnMut() -> Option<u64>,
    ) -> Option<Option<u64>> {
        let run_max = (STREAM_RUN_BYTES / self.bs).clamp(1, depth);
        let slot_bytes = run_max * self.bs;
        let free = RefCell::new((0..depth / run_max).rev().collect::<Vec<usize>>());
        let outstanding = std::cell::Cell::new(0usize);
        let mut peeked: Option<u64> = None;
        // Whether `next`'s last answer was `None`: a stream that ends otherwise left claims.
        let mut drained = false;
        let mut next = || {
            let r = next();
            drained = r.is_none();
            r
        };
        let mut pull = || -> Option<IoBuf> {
            // The store asks only with room, so a slot is free; if not, pause the stream.
            let slot = match stage {
                Some(_) => Some(*free.borrow().last()?),
                None => None,
            };
            let first = peeked.take().or_else(&mut next)?;
            let mut n = 1;
            while n < run_max {
                match next() {
                    // Read straight into memory (no staging), a run needs its buffers'
                    // memory adjacent: always in place; in a pool, where the frames are.
                    Some(j)
                        if j == first + n as u64
                            && (stage.is_some()
                                || self.ptr(j) == self.ptr(first).wrapping_add(n * self.bs)) =>
                    {
                        n += 1
                    }
                    Some(j) => {
                        peeked = Some(j);
                        break;
                    }
                    None => break,
                }
            }
            let dest = match (stage, slot) {
                (Some(p), Some(k)) => {
                    free.borrow_mut().pop();
                    // SAFETY: slot k of the staging area, which holds depth / run_max of them.
                    unsafe { p.add(k * slot_bytes) }
                }
                // In place, or a pool mapping's adjacent frames (checked above).
                _ => self.ptr(first),
            };
            self.count_store_read(outstanding.get());
            outstanding.set(outstanding.get() + 1);
            // SAFETY: buffers first..first+n are Loading and claimed by the job (and adjacent
            // in the region), or dest is a free staging slot: exclusive until handed back.
            Some(unsafe { IoBuf::new(dest, n * self.bs, self.object_offset(first)) })
        };
        let mut done = |req: IoBuf, got: io::Result<usize>| {
            outstanding.set(outstanding.get() - 1);
            self.finish_run(&req, got);
            if let Some(p) = stage {
                free.borrow_mut()
                    .push((req.ptr() as usize - p as usize) / slot_bytes);
            }
        };
        self.object.read_stream(depth, &mut pull, &mut done);
        (peeked.is_some() || !drained).then_some(peeked)
    }

    /// Ends the loads of the run of buffers `req` covers, whose read returned `got`. A whole,
    /// fully read run on a transparent mapping is installed with one `UFFDIO_COPY`; anything
    /// else is finished buffer by buffer.
    fn finish_run(&self, req: &IoBuf, got: io::Result<usize>) {
        let first = (req.offset() - self.offset) >> self.shift;
        let n = req.len() / self.bs;
        let whole =
            matches!(got, Ok(b) if b == req.len()) && self.valid(first + n as u64 - 1) == self.bs;
        // SAFETY: the run's claims were handed to the job that reads it; adopted once, here.
        let mut claims: Vec<LoadClaim<'_>> = (first..first + n as u64)
            .map(|i| unsafe { LoadClaim::adopt(self, i) })
            .collect();
        if n > 1 && whole && self.home.is_transparent() {
            // A readahead marker read with its window keeps its bytes aside (`marker.rs`).
            let (claims, r) = match self.keep_markers_of_run(first, req.ptr(), claims) {
                Ok(kept) => kept,
                // SAFETY: the staging run is readable; buffers first..first+n are Loading
                // and ours.
                Err(claims) => (claims, unsafe {
                    self.install(first, req.ptr(), req.len(), false)
                }),
            };
            let n = claims.len();
            for mut c in claims {
                match r {
                    Ok(()) => c.publish(Pin::None, true, false),
                    // Part of the run may be installed: the undo drops whatever is there.
                    Err(_) => c.mark_filled(),
                }
            }
            if r.is_ok() {
                self.stats().add(Counter::Prefetches, n as u64);
                self.stats().add(Counter::BytesRead, req.len() as u64);
            }
            return;
        }
        for (k, c) in claims.drain(..).enumerate() {
            let got_k = run_part(&got, k, self.bs);
            // SAFETY: inside the run's memory.
            let dest = unsafe { req.ptr().add(k * self.bs) };
            if self.finish_load(c, dest, got_k, true, Pin::None).is_ok() {
                self.stats().add(Counter::Prefetches, 1);
                self.stats().add(Counter::BytesRead, self.bs as u64);
            }
        }
    }
}
