//! A scan's ring: on a store that does not read ahead itself (`O_DIRECT`, io_uring, an object
//! store), a scan read past the cache (`scan.rs`) reads its next two windows in the background
//! into memory of its own, and each call copies its bytes from there.
//!
//! Read past the cache straight into the caller's memory, each call of an `O_DIRECT` scan waits
//! for its own reads, and the device idles while the caller works between calls: the cache's
//! readahead overlapped that, and the kernel's does for a buffered file. The ring restores the
//! overlap without the cache's page lifecycle: two windows of up to 4 MiB (at most an eighth of
//! the budget each), reused for the whole scan, so no page is faulted in or dropped per read,
//! and the bytes are copied once, from the ring to the caller, as `read(2)` copies from the
//! page cache. The memory is made on a scan's first call and unmapped when a scan reaches the
//! mapping's end (or with the mapping). One ring per mapping, used by one scan at a time; a second concurrent scan of
//! the same mapping reads straight into its caller's memory, and takes the ring over only once
//! its owner has stopped (two of its calls in a row with none of the owner's between).
//!
//! Coherence: a buffer is read into a window only if its word says `Evicted` (nothing
//! resident, loading, dirty or being written back), and the version the word had then is kept.
//! Its bytes are copied out only if the word still says `Evicted` with that version when the
//! call that wants them runs: any load since (and so any write through the mapping, and its
//! write-back) ends with an eviction or an undone claim, both of which bump the version. A
//! write that completed before the call began has therefore either left the buffer resident
//! (the call copies it through the cache) or bumped its version (the window's bytes are
//! dropped and the call reads the buffer again), so it is always seen.

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::batch::run_part;
use super::scan::runs;
use super::MappingCore;
use crate::io_worker::Job;
use crate::region::Region;
use crate::state::Phase;
use crate::stats::Counter;
use crate::store::IoBuf;

/// Most bytes one window covers: the ring holds two.
const MAX_WINDOW: u64 = 4 << 20;

/// The results of one window's requests, once they landed.
#[derive(Default)]
struct Landing {
    results: Mutex<Option<Vec<io::Result<usize>>>>,
    landed: Condvar,
}

impl Landing {
    fn land(&self, results: Vec<io::Result<usize>>) {
        *self.results.lock() = Some(results);
        self.landed.notify_all();
    }

    /// Waits until the window's reads landed, and runs `f` on their results.
    fn wait<R>(&self, f: impl FnOnce(&[io::Result<usize>]) -> R) -> R {
        let mut g = self.results.lock();
        while g.is_none() {
            self.landed.wait(&mut g);
        }
        f(g.as_deref().unwrap_or(&[]))
    }
}

struct Window {
    /// Its first buffer.
    first: u64,
    /// Which half of the ring holds it.
    half: usize,
    /// Per buffer from `first`: the version its word had when it was read into the window, and
    /// the request (its index in the results, and the buffer's place in it) that read it; or
    /// `None`: the buffer was resident or busy, and not read.
    read: Vec<Option<(u64, usize, usize)>>,
    landing: Arc<Landing>,
}

impl Window {
    fn buffers(&self) -> Range<u64> {
        self.first..self.first + self.read.len() as u64
    }
}

struct State {
    /// The ring's memory, made on first use: two windows.
    mem: Option<Arc<Region>>,
    /// Where the scan that owns the ring continues (its last call's end).
    next: u64,
    /// Scan calls in a row that did not continue the owner: a second one takes the ring over.
    strangers: u32,
    /// Issued windows, in file order.
    windows: VecDeque<Window>,
}

impl State {
    /// Waits for every window in flight and forgets them all, so that their halves can be
    /// reused.
    fn reset(&mut self) {
        for w in self.windows.drain(..) {
            w.landing.wait(|_| ());
        }
    }
}

/// A mapping's scan ring.
pub(super) struct ScanRing {
    state: Mutex<State>,
}

impl ScanRing {
    pub(super) fn new() -> Self {
        ScanRing {
            state: Mutex::new(State {
                mem: None,
                next: u64::MAX,
                strangers: 0,
                windows: VecDeque::new(),
            }),
        }
    }
}

impl Drop for ScanRing {
    fn drop(&mut self) {
        // The jobs hold the memory themselves; nothing to wait for.
        self.state.get_mut().windows.clear();
    }
}

impl MappingCore {
    /// The bytes of one window: a quarter of the scan threshold's ring share.
    fn window_bytes(&self) -> u64 {
        let w = (self.cache.budget.budget_bytes() / 8).min(MAX_WINDOW);
        (w >> self.shift << self.shift).max(self.bs as u64)
    }

    /// Copies what the ring holds of a scan call's range (`buf.len()` bytes at `offset`) into
    /// `buf`, then issues the windows that keep the ring two ahead of the call. Returns the
    /// buffers copied, ascending; the caller reads the rest. Does nothing (returns none) on a
    /// store that reads ahead itself, or while another scan holds the ring.
    pub(super) fn read_from_ring(self: &Arc<Self>, offset: u64, buf: &mut [u8]) -> Vec<u64> {
        let Some(ring) = &self.scan_ring else {
            return Vec::new();
        };
        let Some(mut st) = ring.state.try_lock() else {
            return Vec::new();
        };
        let end = offset + buf.len() as u64;
        if st.next == offset {
            st.strangers = 0;
        } else {
            // Another scan's call. Two scans taking turns would each throw the other's windows
            // away, so the ring stays with its owner while the owner goes on; the second stray
            // call in a row (the owner stopped) takes it over.
            st.strangers += 1;
            if st.strangers < 2 && !st.windows.is_empty() {
                return Vec::new();
            }
            st.strangers = 0;
            st.reset();
        }
        st.next = end;
        let wb = self.window_bytes();
        let mem = match &st.mem {
            Some(m) => m.clone(),
            None => match Region::reserve(2 * wb as usize, 4096) {
                Ok(r) => {
                    let m = Arc::new(r);
                    st.mem = Some(m.clone());
                    m
                }
                Err(_) => return Vec::new(),
            },
        };
        let served = self.copy_from_windows(&st, &mem, wb, offset, buf);
        // Windows the call has passed are done with: their halves take the next ones.
        let first_wanted = end >> self.shift;
        while st
            .windows
            .front()
            .is_some_and(|w| w.buffers().end <= first_wanted)
        {
            if let Some(w) = st.windows.pop_front() {
                w.landing.wait(|_| ());
            }
        }
        while st.windows.len() < 2 {
            let from = st.windows.back().map_or(first_wanted, |w| w.buffers().end);
            if from >= self.buffers() {
                break;
            }
            let half = st.windows.back().map_or(0, |w| 1 - w.half);
            let n = (wb >> self.shift).min(self.buffers() - from);
            let w = self.issue_window(&mem, wb, half, from, n as usize);
            st.windows.push_back(w);
        }
        if st.windows.is_empty() {
            // The scan reached the mapping's end: its memory goes back now rather than when
            // the mapping is dropped (a program that scans many files once each keeps none).
            st.mem = None;
        }
        served
    }

    /// Copies the buffers of the call's range that a window read and that are still as they
    /// were read, waiting for the windows' reads to land.
    fn copy_from_windows(
        &self,
        st: &State,
        mem: &Region,
        wb: u64,
        offset: u64,
        buf: &mut [u8],
    ) -> Vec<u64> {
        let end = offset + buf.len() as u64;
        let wanted = offset >> self.shift..((end - 1) >> self.shift) + 1;
        let mut served = Vec::new();
        for w in &st.windows {
            let have = w.buffers();
            let both = wanted.start.max(have.start)..wanted.end.min(have.end);
            if both.is_empty() {
                continue;
            }
            w.landing.wait(|results| {
                for i in both {
                    let k = (i - w.first) as usize;
                    let Some((version, j, m)) = w.read[k] else {
                        continue;
                    };
                    let got = match results.get(j) {
                        Some(Ok(n)) => run_part(&Ok(*n), m, self.bs),
                        _ => continue,
                    };
                    if !matches!(got, Ok(n) if n >= self.valid(i)) {
                        continue;
                    }
                    let word = self.state(i).load();
                    if word.phase() != Phase::Evicted || word.version() != version {
                        continue;
                    }
                    let at = i << self.shift;
                    let from = offset.max(at);
                    let to = end.min(at + self.bs as u64);
                    let src = mem.at(w.half * wb as usize + k * self.bs + (from - at) as usize);
                    // SAFETY: the window has landed, and its half is written by no one until
                    // it is popped from the ring, which needs the lock we hold.
                    let src = unsafe { std::slice::from_raw_parts(src, (to - from) as usize) };
                    buf[(from - offset) as usize..(to - offset) as usize].copy_from_slice(src);
                    served.push(i);
                }
            });
        }
        served
    }

    /// Reads the absent buffers among `n` from `first` into half `half` of the ring, on the IO
    /// threads.
    fn issue_window(
        self: &Arc<Self>,
        mem: &Arc<Region>,
        wb: u64,
        half: usize,
        first: u64,
        n: usize,
    ) -> Window {
        let base = mem.at(half * wb as usize);
        let mut read: Vec<Option<(u64, usize, usize)>> = vec![None; n];
        let mut absent = Vec::new();
        for (k, slot) in read.iter_mut().enumerate() {
            let w = self.state(first + k as u64).load();
            if w.phase() == Phase::Evicted {
                *slot = Some((w.version(), 0, 0));
                absent.push(k);
            }
        }
        // SAFETY (for `add`): slot k of the half, within the ring's 2 * wb bytes.
        let dest = |k: usize| unsafe { base.add(absent[k] * self.bs) };
        let spans = runs(absent.len(), self.bs, |k| first + absent[k] as u64, dest);
        // (memory, length, object offset, bytes of the mapping) of each request.
        let mut reqs: Vec<(usize, usize, u64, u64)> = Vec::with_capacity(spans.len());
        for (j, &(k0, len)) in spans.iter().enumerate() {
            for m in 0..len {
                if let Some(r) = &mut read[absent[k0 + m]] {
                    r.1 = j;
                    r.2 = m;
                }
            }
            self.count_store_read(j);
            let i = first + absent[k0] as u64;
            let valid = (0..len as u64).map(|m| self.valid(i + m) as u64).sum();
            reqs.push((
                dest(k0) as usize,
                len * self.bs,
                self.object_offset(i),
                valid,
            ));
        }
        let landing = Arc::new(Landing::default());
        let (me, keep, done) = (self.clone(), mem.clone(), landing.clone());
        self.cache.io.submit(Job::Task(Box::new(move || {
            let _memory = keep;
            let mut bufs: Vec<IoBuf> = reqs
                .iter()
                // SAFETY: each request covers slots of a half of the ring that no one else
                // reads or writes until this window lands (`Landing`), and `_memory` keeps the
                // ring mapped until then.
                .map(|&(p, len, off, _)| unsafe { IoBuf::new(p as *mut u8, len, off) })
                .collect();
            let mut out = Vec::with_capacity(bufs.len());
            me.object.read_batch(&mut bufs, &mut out);
            drop(bufs);
            let bytes: u64 = reqs
                .iter()
                .zip(&out)
                .map(|(r, got)| got.as_ref().map_or(0, |&n| r.3.min(n as u64)))
                .sum();
            let st = me.stats();
            st.add(Counter::BytesRead, bytes);
            st.add(Counter::BytesReadPastCache, bytes);
            done.land(out);
        })));
        Window {
            first,
            half,
            read,
            landing,
        }
    }
}
