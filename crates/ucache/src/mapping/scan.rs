//! Scans read past the cache: once a sequential [`crate::Mapping::read`] stream has run past a
//! quarter of the budget ([`super::read_stream`]), the buffers of a call that are not resident
//! are read from the store straight into the caller's memory, neither installed nor counted as
//! cached, as PostgreSQL's ring strategy keeps a sequential scan from flooding its buffer pool.
//!
//! The cache path costs a scan twice over, and for nothing: each miss lands in a fresh page
//! (page fault, zeroing, the memory cgroup's charge) after an eviction dropped the old one, and
//! the bytes are copied a second time, from the cache to the caller. Read past the cache, the
//! bytes are read (or DMAed, on `O_DIRECT`) once, into memory the caller owns, and the scan
//! evicts nobody: a file larger than the budget, read once, would only have pushed out what
//! others were using.
//!
//! Coherence: only a buffer whose word says `Evicted` is read past the cache. A dirty buffer is
//! `Cached` until its write-back has landed and only then claimed `Evicting` and dropped
//! (`evict.rs`), so an `Evicted` word (read with acquire) means the store holds every write
//! that completed through the mapping before this read began; a resident, loading or evicting
//! buffer is copied through the cache as before. A buffer whose word changed while its bytes
//! were read (someone loaded it, and may have written it back as the read ran) is read again
//! through the cache, so a read never returns a buffer torn between two versions.

use super::batch::{run_part, RUN_BYTES};
use super::{take_result, MappingCore};
use crate::error::Result;
use crate::staging::with_staging;
use crate::state::{Phase, Word};
use crate::stats::Counter;
use crate::store::IoBuf;

/// Buffers read past the cache in one store batch: as [`super::batch::STAGING_BYTES`], the
/// most bounce memory one batch takes.
const BATCH_BYTES: usize = super::batch::STAGING_BYTES;

/// Groups `n` buffers with indices `index(k)` and memory `dest(k)` into requests: runs of
/// consecutive buffers whose memory is adjacent, of at most [`RUN_BYTES`]. Returns (first,
/// count) of each.
pub(super) fn runs(
    n: usize,
    bs: usize,
    index: impl Fn(usize) -> u64,
    dest: impl Fn(usize) -> *mut u8,
) -> Vec<(usize, usize)> {
    let run_max = (RUN_BYTES / bs).max(1);
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for k in 0..n {
        if let Some((first, m)) = spans.last_mut() {
            let follows = index(*first) + *m as u64 == index(k)
                && dest(*first).wrapping_add(*m * bs) == dest(k);
            if follows && *m < run_max {
                *m += 1;
                continue;
            }
        }
        spans.push((k, 1));
    }
    spans
}

impl MappingCore {
    /// Buffer `i`'s word if the buffer may be read past the cache: nothing of it is resident,
    /// loading, dirty or being written back or evicted. The caller keeps the word to check,
    /// once the read is done, that nobody loaded the buffer meanwhile ([`Self::still`]).
    pub(super) fn absent(&self, i: u64) -> Option<Word> {
        let w = self.state(i).load();
        (w.phase() == Phase::Evicted).then_some(w)
    }

    /// Whether buffer `i`'s word is still `seen`: nobody loaded it since. A load, and so any
    /// write and write-back that followed it, ends with an eviction or an undone claim, both
    /// of which bump the version; so bytes read past the cache between [`Self::absent`] and
    /// this check could not have met a write-back of the same buffer halfway (a store read
    /// racing a store write may return part of each).
    pub(super) fn still(&self, i: u64, seen: Word) -> bool {
        self.state(i).load() == seen
    }

    /// Reads buffers `absent` (ascending, each overlapping the range) of a read of `buf.len()`
    /// bytes at `offset` from the store, straight into `buf`. A buffer that lies whole in `buf`
    /// at memory the store accepts (any, or 4 KiB-aligned for `O_DIRECT`) is read in place;
    /// one cut by the range's ends, or in memory an `O_DIRECT` store refuses, is read whole
    /// into staging memory and copied. Errors as a miss's: a short read is
    /// [`crate::Error::ShortIo`], a failed one [`crate::Error::Io`]; every buffer is read either way and the
    /// first error returned.
    pub(super) fn read_past_cache(
        &self,
        absent: &[u64],
        offset: u64,
        buf: &mut [u8],
    ) -> Result<()> {
        let per = (BATCH_BYTES / self.bs).max(1);
        let mut first = Ok(());
        for chunk in absent.chunks(per) {
            let r = self.read_past_cache_batch(chunk, offset, buf);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn read_past_cache_batch(&self, absent: &[u64], offset: u64, buf: &mut [u8]) -> Result<()> {
        let bs = self.bs as u64;
        let end = offset + buf.len() as u64;
        let unaligned_ok = self.object.accepts_unaligned();
        let base = buf.as_mut_ptr();
        // Where buffer i starts in `buf`, if all of it lies there in memory the store accepts.
        let in_place = |i: u64| {
            let first = i << self.shift;
            if first < offset || first + bs > end {
                return None;
            }
            // SAFETY: within `buf`, as first..first + bs lies within offset..end.
            let p = unsafe { base.add((first - offset) as usize) };
            (unaligned_ok || (p as usize).is_multiple_of(4096)).then_some(p)
        };
        let bounced = absent.iter().filter(|&&i| in_place(i).is_none()).count();
        if bounced == 0 {
            return self.read_past_cache_into(absent, offset, buf, &in_place, None);
        }
        with_staging(bounced * self.bs, |stage| {
            self.read_past_cache_into(absent, offset, buf, &in_place, Some(stage))
        })?
    }

    /// [`MappingCore::read_past_cache_batch`] with staging memory at `stage` for the buffers
    /// that `in_place` does not place.
    fn read_past_cache_into(
        &self,
        absent: &[u64],
        offset: u64,
        buf: &mut [u8],
        in_place: &dyn Fn(u64) -> Option<*mut u8>,
        stage: Option<*mut u8>,
    ) -> Result<()> {
        let mut slot = 0;
        let dests: Vec<(*mut u8, bool)> = absent
            .iter()
            .map(|&i| match (in_place(i), stage) {
                (Some(p), _) => (p, false),
                (None, Some(s)) => {
                    // SAFETY: slot `slot` of the staging area, sized for every bounced buffer.
                    let p = unsafe { s.add(slot * self.bs) };
                    slot += 1;
                    (p, true)
                }
                (None, None) => unreachable!("a bounced buffer without staging"),
            })
            .collect();
        let spans = runs(absent.len(), self.bs, |k| absent[k], |k| dests[k].0);
        let mut reqs: Vec<IoBuf> = spans
            .iter()
            // SAFETY: each request covers either whole buffers inside the caller's `buf`, which
            // we hold by `&mut` and nobody else touches until the batch returns, or our own
            // staging slots; spans cover adjacent memory only, and no two overlap.
            .map(|&(k, n)| unsafe {
                IoBuf::new(dests[k].0, n * self.bs, self.object_offset(absent[k]))
            })
            .collect();
        for k in 0..reqs.len() {
            self.count_store_read(k);
        }
        let mut out = Vec::with_capacity(reqs.len());
        self.object.read_batch(&mut reqs, &mut out);
        drop(reqs);
        let end = offset + buf.len() as u64;
        let mut first: Result<()> = Ok(());
        let mut bytes = 0u64;
        for (j, &(k0, n)) in spans.iter().enumerate() {
            let got = take_result(&mut out, j);
            for m in 0..n {
                let k = k0 + m;
                let i = absent[k];
                let r = self.check_read(i, run_part(&got, m, self.bs));
                if let Err(e) = r {
                    if first.is_ok() {
                        first = Err(e);
                    }
                    continue;
                }
                bytes += self.valid(i) as u64;
                let (p, staged) = dests[k];
                if staged {
                    let at = i << self.shift;
                    let from = offset.max(at);
                    let to = end.min(at + self.bs as u64);
                    // SAFETY: the staging slot holds the buffer's bytes, read just now.
                    let src = unsafe { std::slice::from_raw_parts(p, self.bs) };
                    let within = (from - at) as usize;
                    buf[(from - offset) as usize..(to - offset) as usize]
                        .copy_from_slice(&src[within..within + (to - from) as usize]);
                }
            }
        }
        let st = self.stats();
        st.add(Counter::BytesRead, bytes);
        st.add(Counter::BytesReadPastCache, bytes);
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_adjacent_buffers_in_adjacent_memory_up_to_a_run() {
        let bs = 4096;
        let base = 0x10_0000usize;
        // Buffers 0..40 in place, then 50 and 51 in place, then 52 elsewhere.
        let index: Vec<u64> = (0..40).chain([50, 51, 52]).collect();
        let dest: Vec<usize> = index
            .iter()
            .map(|&i| {
                if i == 52 {
                    0x90_0000
                } else {
                    base + i as usize * bs
                }
            })
            .collect();
        let spans = runs(index.len(), bs, |k| index[k], |k| dest[k] as *mut u8);
        // 32 buffers of 4 KiB make one run of 128 KiB.
        assert_eq!(spans, vec![(0, 32), (32, 8), (40, 2), (42, 1)]);
    }
}
