//! Batched loads: `ensure_cached` and `prefetch` claim many buffers first and read them in
//! one store batch, so a device sees many requests in flight; `read` copies through the cache
//! or, for buffers the policy does not admit, around it.

use std::cell::RefCell;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use super::claim::LoadClaim;
use super::read_stream::{Next, ScanAfter, MIN_WINDOW};
use super::{take_result, zero_tail, MappingCore};
use crate::error::{Error, Result};
use crate::io_worker::{Job, STREAM_DEPTH};
use crate::staging::with_staging;
use crate::state::{Phase, Pin};
use crate::stats::Counter;
use crate::store::IoBuf;

/// Bytes of buffers per IO job of a prefetch: one run of the IO threads' stream
/// ([`super::stream::STREAM_RUN_BYTES`]), so a readahead window of 1 MiB is one job, read and
/// installed by one thread with one call each. In jobs of 128 KiB the two IO threads took
/// alternate eighths of each window, and no run was longer than a job.
const PREFETCH_JOB_BYTES: usize = super::stream::STREAM_RUN_BYTES;

/// Most bytes one read request of a batched load or of `pin_each`'s stream covers: a run of
/// adjacent buffers goes to the store as one request (the kernel's default readahead window).
/// The IO threads' prefetch stream reads longer runs ([`super::stream::STREAM_RUN_BYTES`]).
pub(super) const RUN_BYTES: usize = 128 << 10;

/// What the read of a run of buffers returned, as the result of its `k`th buffer of `bs`
/// bytes: the bytes that landed in it, or the run's error.
pub(super) fn run_part(got: &io::Result<usize>, k: usize, bs: usize) -> io::Result<usize> {
    match got {
        Ok(b) => Ok(b.saturating_sub(k * bs).min(bs)),
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    }
}

/// Most reads one [`MappingCore::read_into`] keeps in flight.
const READ_DEPTH: usize = 64;

/// The largest window read ahead of sequential [`crate::Mapping::read`] calls: 8 MiB keeps a
/// fast device busy between calls of a few MiB without holding much of the budget.
const MAX_READ_WINDOW: u64 = 8 << 20;

/// Most staging memory one batched load of a transparent mapping takes at once.
pub(super) const STAGING_BYTES: usize = 16 << 20;

/// What [`MappingCore::claim_loads`] got.
struct Claims<'a> {
    /// Buffers now `Loading` and ours, their room taken.
    claimed: Vec<LoadClaim<'a>>,
    /// Buffers another thread is loading or evicting.
    others: Vec<u64>,
    /// Claiming stopped short at `indices[consumed]`: memory could not be had without
    /// waiting, while buffers claimed here (a demand load's) or nothing (a prefetch's) could
    /// free it.
    stopped: bool,
    /// How many of `indices` were dealt with.
    consumed: usize,
}

impl MappingCore {
    /// Claims the evicted buffers among `indices` (reserving budget for each); the rest are
    /// cached, loading or evicting by someone else. `demand` says the caller needs the data now
    /// (ensure_cached), not a prefetch: only demand misses reach
    /// [`Policy::on_miss`](crate::policy::Policy::on_miss). Neither waits for memory while it
    /// holds claims of its own, which are `Loading` and so cannot be evicted: two callers that
    /// each held half the budget that way would wait for each other. A demand claim with
    /// nothing claimed yet waits; otherwise claiming stops, and the caller loads what it has.
    /// `missed` is an index whose miss the policy has already been told of (the one a demand
    /// claim stopped at, claimed again).
    fn claim_loads(
        &self,
        indices: &[u64],
        demand: bool,
        missed: Option<u64>,
    ) -> Result<Claims<'_>> {
        let mut claimed = Vec::new();
        let mut others = Vec::new();
        let mut stopped = false;
        let mut consumed = indices.len();
        for (k, &i) in indices.iter().enumerate() {
            let s = self.state(i);
            let w = s.load();
            if w.phase() == Phase::Cached {
                self.note_unpinned_hit(s, i);
                continue;
            }
            let Some(mut c) = self.claim_load(i, w) else {
                others.push(i);
                continue;
            };
            if demand && missed != Some(i) {
                self.policy.on_miss(i);
            }
            // A prefetch never waits for memory: when nothing can be evicted now (the budget is
            // held by pins or by this very batch's loads), it stops here. On an error the
            // claims taken so far undo themselves as they drop.
            if c.take_room(demand && claimed.is_empty())? {
                claimed.push(c);
            } else {
                stopped = true;
                consumed = k;
                break;
            }
        }
        Ok(Claims {
            claimed,
            others,
            stopped,
            consumed,
        })
    }

    /// Reads claimed (`Loading`) buffers in one store batch and publishes them. `demand` is
    /// when a demand load began claiming them (its misses' latency, eviction included), `None`
    /// for a prefetch. Returns the first error; every failed buffer goes back to `Evicted`.
    pub(super) fn load_claimed(
        &self,
        claimed: Vec<LoadClaim<'_>>,
        demand: Option<Instant>,
    ) -> Result<()> {
        if claimed.is_empty() {
            return Ok(());
        }
        let prefetched = demand.is_none();
        let (ok, first) = if self.is_view() {
            self.reveal_claims(claimed, Pin::None, prefetched)
        } else if self.home.is_transparent() {
            self.read_batch_staged(claimed, prefetched)
        } else {
            self.read_batch_at(claimed, prefetched, None)
        };
        let st = self.stats();
        if prefetched {
            st.add(Counter::Prefetches, ok);
        } else {
            self.count_access(Counter::Misses, ok);
        }
        st.add(Counter::BytesRead, ok * self.bs as u64);
        if let Some(t0) = demand.filter(|_| ok > 0) {
            st.record_miss_latencies(t0.elapsed(), ok);
        }
        first.map_or(Ok(()), Err)
    }

    /// [`MappingCore::read_batch_at`] through staging memory, at most [`STAGING_BYTES`] of it
    /// at a time. Buffers that get no staging memory go back evicted, with the error.
    fn read_batch_staged(
        &self,
        mut claimed: Vec<LoadClaim<'_>>,
        prefetched: bool,
    ) -> (u64, Option<Error>) {
        let per = (STAGING_BYTES / self.bs).max(1);
        let mut ok = 0;
        let mut first = None;
        while !claimed.is_empty() {
            let rest = claimed.split_off(per.min(claimed.len()));
            let chunk = std::mem::replace(&mut claimed, rest);
            let n = chunk.len();
            // Without staging memory the chunk's claims (dropped unread) undo themselves.
            let staged = with_staging(n * self.bs, |p| {
                self.read_batch_at(chunk, prefetched, Some(p))
            });
            match staged {
                Ok((o, e)) => {
                    ok += o;
                    first = first.or(e);
                }
                Err(e) => return (ok, first.or(Some(e))),
            }
        }
        (ok, first)
    }

    /// Reads claimed buffers in one store batch into their homes, or into slots of the
    /// staging area at `stage` to install from, and publishes each one that succeeds.
    /// Claims of consecutive buffers whose memory is adjacent (in place, or staged) travel
    /// as one request of up to [`RUN_BYTES`], so every store, not only one that merges
    /// requests itself, sees a scan as a few large reads. Returns how many buffers loaded
    /// and the first error.
    fn read_batch_at(
        &self,
        mut claimed: Vec<LoadClaim<'_>>,
        prefetched: bool,
        stage: Option<*mut u8>,
    ) -> (u64, Option<Error>) {
        let dests: Vec<*mut u8> = claimed
            .iter_mut()
            .enumerate()
            .map(|(k, c)| match stage {
                // SAFETY: slot k of this thread's staging area, which holds the chunk.
                Some(p) => unsafe { p.add(k * self.bs) },
                None => c.dest(),
            })
            .collect();
        // (first claim, buffers) of each request.
        let spans = super::scan::runs(claimed.len(), self.bs, |k| claimed[k].index(), |k| dests[k]);
        let mut reqs: Vec<IoBuf> = spans
            .iter()
            // SAFETY: each destination is either the home of a Loading buffer claimed by us
            // or our own staging slot, and a span covers only adjacent ones: exclusive until
            // the batch returns.
            .map(|&(k, n)| unsafe {
                IoBuf::new(
                    dests[k],
                    n * self.bs,
                    self.object_offset(claimed[k].index()),
                )
            })
            .collect();
        let mut out = Vec::with_capacity(reqs.len());
        for k in 0..reqs.len() {
            self.count_store_read(k);
        }
        self.object.read_batch(&mut reqs, &mut out);
        drop(reqs);
        let mut first = None;
        let mut ok = 0u64;
        let mut claims = claimed.into_iter().enumerate();
        for (j, &(_, n)) in spans.iter().enumerate() {
            let got = take_result(&mut out, j);
            for (m, (k, c)) in claims.by_ref().take(n).enumerate() {
                let got_m = run_part(&got, m, self.bs);
                match self.finish_load(c, dests[k], got_m, prefetched, Pin::None) {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
        }
        (ok, first)
    }

    /// Ends the load of a claimed buffer, whose read into `dest` (its home, or a staging
    /// slot of `bs` bytes) returned `got`: installs it if staged, and publishes it holding
    /// `pin`, or gives it back evicted (the claim's undo) and reports why.
    pub(super) fn finish_load(
        &self,
        mut claim: LoadClaim<'_>,
        dest: *mut u8,
        mut got: io::Result<usize>,
        prefetched: bool,
        pin: Pin,
    ) -> Result<()> {
        let i = claim.index();
        let transparent = self.home.is_transparent();
        if transparent {
            // SAFETY: dest is our staging slot of bs bytes.
            let buf = unsafe { std::slice::from_raw_parts_mut(dest, self.bs) };
            got = got.map(|n| zero_tail(buf, n));
        }
        let r = self.check_read(i, got).and_then(|()| {
            if !transparent {
                return Ok(());
            }
            claim.mark_filled();
            // SAFETY: the staging slot is readable; buffer i is Loading and ours.
            unsafe { self.install(i, dest, self.bs, false) }
        });
        if r.is_ok() {
            claim.publish(pin, prefetched, false);
        }
        r
    }

    /// Loads claims handed over as bare indices (an IO job's), in one batch.
    ///
    /// # Safety
    /// Each index is a claim of this mapping turned into its index with
    /// [`LoadClaim::into_raw`], adopted here once.
    pub(crate) unsafe fn load_handed(
        &self,
        indices: &[u64],
        demand: Option<Instant>,
    ) -> Result<()> {
        // SAFETY: forwarded from our caller.
        let claims = indices
            .iter()
            .map(|&i| unsafe { LoadClaim::adopt(self, i) });
        self.load_claimed(claims.collect(), demand)
    }

    /// Loads the missing buffers among `indices` with one batch from this thread, then waits
    /// for any that other threads were loading.
    pub(crate) fn ensure_cached_indices(self: &Arc<Self>, indices: &[u64]) -> Result<()> {
        for &i in indices {
            self.check_index(i)?;
        }
        let mut distinct = indices.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() as u64 > self.cache.budget.budget_bytes() >> self.shift {
            return Err(Error::BadLength {
                len: distinct.len() as u64 * self.bs as u64,
                why: "more buffers to hold at once than the cache's budget",
            });
        }
        let mut rest = indices;
        let mut missed = None;
        let mut others = Vec::new();
        loop {
            let t0 = Instant::now();
            let c = self.claim_loads(rest, true, missed)?;
            let hits = c.consumed - c.claimed.len() - c.others.len();
            self.count_access(Counter::Hits, hits as u64);
            self.load_claimed(c.claimed, Some(t0))?;
            others.extend(c.others);
            if !c.stopped {
                break;
            }
            // No memory while our own claims were loading: now they are loaded and evictable.
            rest = &rest[c.consumed..];
            missed = rest.first().copied();
        }
        for i in others {
            drop(self.pin_shared(i)?);
        }
        Ok(())
    }

    pub(crate) fn ensure_cached_range(self: &Arc<Self>, offset: u64, len: u64) -> Result<()> {
        let r = self.range(offset, len)?;
        let v: Vec<u64> = r.collect();
        self.ensure_cached_indices(&v)
    }

    /// Whether a read of buffer `i` should go around the cache: it is not resident (nor on its
    /// way in) and the policy refuses to admit it.
    fn bypass(&self, i: u64) -> bool {
        self.state(i).load().phase() == Phase::Evicted && !self.policy.admit(i)
    }

    /// Copies `[offset, offset + buf.len())` out of the mapping: the covered buffers are
    /// visited as by [`MappingCore::pin_each`] (hits at once, misses as their reads land, up
    /// to [`READ_DEPTH`] reads in flight, adjacent misses read as one request), except
    /// buffers that are missing and that the policy refuses to admit, whose bytes are read
    /// straight from the store.
    pub(crate) fn read_into(self: &Arc<Self>, offset: u64, buf: &mut [u8]) -> Result<()> {
        let r = self.range(offset, buf.len() as u64)?;
        let end = offset + buf.len() as u64;
        let buf = RefCell::new(buf);
        // Buffer i's part of the range: where it starts within the buffer, and its bytes in
        // `buf`.
        let piece = |i: u64| {
            let first = i << self.shift;
            let from = offset.max(first);
            let to = end.min(first + self.bs as u64);
            (
                (from - first) as usize,
                (from - offset) as usize..(to - offset) as usize,
            )
        };
        // A scan reads what is absent past the cache first; the rest goes through it.
        let mut past: Result<()> = Ok(());
        let mut absent = Vec::new();
        if self.read_ahead_of(offset..end) {
            let mut b = buf.borrow_mut();
            let served = self.read_from_ring(offset, &mut b[..]);
            let seen: Vec<_> = r
                .clone()
                .filter(|i| served.binary_search(i).is_err())
                .filter_map(|i| Some((i, self.absent(i)?)))
                .collect();
            absent.extend(seen.iter().map(|&(i, _)| i));
            past = self.read_past_cache(&absent, offset, &mut b[..]);
            // Neither those read now nor those the ring held go through the cache, unless
            // someone loaded one while it was read: that one is copied through the cache.
            absent.clear();
            absent.extend(
                seen.into_iter()
                    .filter(|&(i, w)| self.still(i, w))
                    .map(|(i, _)| i),
            );
            absent.extend(served);
            absent.sort_unstable();
        }
        let mut bypassed = 0;
        let mut around: Result<()> = Ok(());
        let mut admitted = r.filter(|&i| {
            if absent.binary_search(&i).is_ok() {
                return false;
            }
            let seen = self.state(i).load();
            if around.is_err() || !self.bypass(i) {
                return around.is_ok();
            }
            // Still a demand miss, as the policy's history should know.
            self.policy.on_miss(i);
            let (within, dst) = piece(i);
            around = self.read_around(i, within, &mut buf.borrow_mut()[dst]);
            bypassed += 1;
            // Loaded by someone while it was read: copied through the cache instead, as a scan's
            // buffers are (`scan.rs`).
            around.is_ok() && !self.still(i, seen)
        });
        let r = self.pin_each(&mut admitted, READ_DEPTH, &mut |i, bytes| {
            let (within, dst) = piece(i);
            let dst = &mut buf.borrow_mut()[dst];
            let n = dst.len();
            dst.copy_from_slice(&bytes[within..within + n]);
        });
        drop(admitted);
        self.stats().add(Counter::Bypasses, bypassed);
        past.and(around).and(r)
    }

    /// Loads the window ahead of a read of `range` on the IO threads if the read continues a
    /// sequential stream (`read_stream.rs`): issued before the read waits for its own range,
    /// so the next pieces load while this one is read and copied. A window is at most a
    /// quarter of the budget (as pins' readahead), so a stream cannot evict itself.
    ///
    /// Returns whether the read is part of a scan, to read past the cache (`scan.rs`): with
    /// [`crate::MapOptions::scan_bypass`], a call of at least [`MIN_WINDOW`] in a stream that
    /// has read a quarter of the budget, or from its second call a stream that began at the
    /// start of a mapping larger than the whole budget. Smaller calls keep the cache and its
    /// readahead: on an `O_DIRECT` store each would otherwise wait for a small read of its own.
    fn read_ahead_of(self: &Arc<Self>, range: std::ops::Range<u64>) -> bool {
        let Some(streams) = &self.read_streams else {
            return false;
        };
        let budget = self.cache.budget.budget_bytes();
        let max = (budget / 4).min(MAX_READ_WINDOW);
        let scan =
            (self.scan_bypass && range.end - range.start >= MIN_WINDOW).then_some(ScanAfter {
                bytes: budget / 4,
                from_start: self.len > budget,
            });
        match streams.on_read(range, self.len, max, scan) {
            Next::Nothing => false,
            Next::Scan => true,
            Next::Load(ahead) => {
                // Only advice: an unmapping mapping refuses it, and the read goes on regardless.
                let _ = self.prefetch_range(ahead.start, ahead.end - ahead.start);
                false
            }
        }
    }

    /// Reads buffer `i` from the store into staging memory and copies bytes `within..` of it
    /// into `dst`. The whole buffer is read so an `O_DIRECT` store sees an aligned request.
    fn read_around(&self, i: u64, within: usize, dst: &mut [u8]) -> Result<()> {
        with_staging(self.bs, |p| {
            // SAFETY: the staging area is this thread's and at least bs long.
            let tmp = unsafe { std::slice::from_raw_parts_mut(p, self.bs) };
            self.count_store_read(0);
            let got = self.object.read_at(tmp, self.object_offset(i));
            self.check_read(i, got)?;
            dst.copy_from_slice(&tmp[within..within + dst.len()]);
            self.stats().add(Counter::BytesRead, self.valid(i) as u64);
            Ok(())
        })?
    }

    /// A cached buffer that a call wants resident, without pinning it (`ensure_cached`, async
    /// or not): counts as an access for the policy, so the call's own loads do not evict it.
    /// The buffer is not pinned, so it may be evicted as the hook runs: the bundled policies
    /// ignore hits on buffers they no longer hold, and reset what a stray hit left behind when
    /// the buffer is inserted again.
    pub(super) fn note_unpinned_hit(&self, s: &crate::state::BufferState, i: u64) {
        let _ = s.update(|w| w.touch());
        if self.policy_hits {
            self.policy.on_hit(i);
        }
    }

    /// Claims the evicted buffers among `indices` that the policy admits and has the IO worker
    /// load them; the others are dropped (a prefetch is only advice).
    pub(crate) fn prefetch_indices(self: &Arc<Self>, indices: &[u64]) -> Result<()> {
        MappingCore::prefetch_on(self, indices, false)
    }

    /// [`MappingCore::prefetch_indices`], the claimed runs read by this thread before it
    /// returns if `here` ([`crate::MapOptions::readahead_inline`]), else by the IO threads.
    pub(super) fn prefetch_on(self: &Arc<Self>, indices: &[u64], here: bool) -> Result<()> {
        // Unmapping: a hook's pin, or its own prefetch, must not load buffers behind the
        // passes that evict them all, or the passes never end.
        if self.is_unmapping() {
            return Err(Error::Unmapped);
        }
        for &i in indices {
            self.check_index(i)?;
        }
        let before = indices.len();
        let admitted: Vec<u64> = indices
            .iter()
            .copied()
            .filter(|&i| !self.bypass(i))
            .collect();
        self.stats()
            .add(Counter::Bypasses, (before - admitted.len()) as u64);
        // One job per run: the IO threads read the first run while this thread still claims
        // (and evicts for) the rest. No more than the budget holds, less what the background
        // evictor keeps free, or the last runs (or the evictor they wake) would evict the
        // first ones, loaded by then and not yet used.
        let per_job = (PREFETCH_JOB_BYTES >> self.shift).max(1);
        let admitted = &admitted[..admitted.len().min(self.window_buffers())];
        for run in admitted.chunks(per_job) {
            let c = self.claim_loads(run, false, None)?;
            if !c.claimed.is_empty() {
                // The IO threads, or the stream here, adopt the claims.
                let mut indices = c.claimed.into_iter().map(LoadClaim::into_raw);
                if here {
                    // SAFETY: claims of this mapping, just turned into their indices, each
                    // adopted once by the stream.
                    unsafe { MappingCore::load_stream(self, STREAM_DEPTH, &mut || indices.next()) };
                } else {
                    self.cache.io.submit(Job::Load {
                        mapping: self.clone(),
                        indices: indices.collect(),
                    });
                }
            }
            if c.stopped {
                break;
            }
        }
        Ok(())
    }

    pub(crate) fn prefetch_range(self: &Arc<Self>, offset: u64, len: u64) -> Result<()> {
        let v: Vec<u64> = self.range(offset, len)?.collect();
        MappingCore::prefetch_indices(self, &v)
    }
}
