//! Sequential readahead with an adaptive window, after Linux's on-demand readahead
//! (mm/readahead.c; Wu Fengguang et al., "On-demand readahead", 2007).
//!
//! A miss right after another miss (or at buffer 0) starts a stream with a small window; a
//! miss exactly where the previous window ended means the reader consumed it, so the window
//! doubles, up to a maximum. A miss that continues no stream is random access: it starts a
//! new, windowless stream (replacing the least recently used one), so a random reader
//! pays for no readahead and a reader that turns random loses its window. Several streams
//! are tracked at once, so interleaved sequential readers (threads scanning different
//! ranges) each keep their own window. Suits sequential scans: table scans, log replay,
//! file copies.
//!
//! [`ReadAhead::asynchronous`] adds Linux's readahead marker (`PG_readahead`): the buffer in
//! the middle of each window is left out of it, so the reader misses there, half a window
//! before the end, and that miss loads the next window while the reader still has the rest of
//! this one to consume. Without it every window is fetched when the reader has run out, and
//! the reader waits for all of it.

use parking_lot::Mutex;

use super::super::Layout;
use super::Prefetcher;

#[derive(Clone, Copy, Debug, Default)]
struct StreamState {
    /// The last buffer this stream covers (its last miss or the end of its window).
    last: u64,
    /// The current window (0: not sequential yet).
    size: u64,
    /// For replacement: when the stream was last used.
    used: u64,
    /// The buffer left out of the current window to trigger the next (asynchronous mode).
    marker: Option<u64>,
    live: bool,
}

pub struct ReadAhead {
    initial: u64,
    max: u64,
    buffers: u64,
    asynchronous: bool,
    streams: Mutex<(Vec<StreamState>, u64)>,
}

impl ReadAhead {
    /// Windows start at `initial` buffers and double up to `max`; 4 streams.
    pub fn new(initial: u64, max: u64) -> Self {
        Self::with_streams(initial, max, 4)
    }

    /// As [`ReadAhead::new`], tracking `streams` concurrent sequential readers (at least 1).
    pub fn with_streams(initial: u64, max: u64, streams: usize) -> Self {
        let initial = initial.max(1);
        ReadAhead {
            initial,
            max: max.max(initial),
            buffers: u64::MAX,
            asynchronous: false,
            streams: Mutex::new((vec![StreamState::default(); streams.max(1)], 0)),
        }
    }
}

impl ReadAhead {
    /// Leaves a marker buffer in the middle of each window whose miss starts the next window
    /// early (see the module documentation).
    pub fn asynchronous(mut self) -> Self {
        self.asynchronous = true;
        self
    }
}

impl ReadAhead {
    /// What transparent mappings use unless told otherwise: asynchronous, from 16 KiB up to
    /// 1 MiB of `buffer_size` buffers. Larger than Linux's 128 KiB because each window is one
    /// job for the IO threads: with windows of 128 KiB a zram scan waited on every one (0.34×
    /// mmap at 4 KiB buffers), with 1 MiB it runs at 0.52× (see docs/design.md).
    pub fn transparent_default(buffer_size: usize) -> Self {
        let bs = buffer_size.max(1) as u64;
        Self::new((16 << 10) / bs, ((1 << 20) / bs).max(4)).asynchronous()
    }
}

impl Default for ReadAhead {
    /// Linux's defaults in 4 KiB pages: an initial window of 4, a maximum of 32 (128 KiB).
    fn default() -> Self {
        Self::new(4, 32)
    }
}

impl Prefetcher for ReadAhead {
    fn name(&self) -> &str {
        "readahead"
    }

    fn attach(&mut self, layout: Layout) {
        self.buffers = layout.buffers;
        // A window must fit the cache many times over, or it evicts itself before the reader
        // gets to it: at most a quarter of the capacity.
        self.max = self.max.min((layout.capacity / 4).max(1));
        self.initial = self.initial.min(self.max);
    }

    fn on_miss(&self, index: u64, out: &mut Vec<u64>) {
        let mut g = self.streams.lock();
        let (streams, clock) = &mut *g;
        *clock += 1;
        let now = *clock;
        // The reader reached a window's marker: fetch the next window now, behind it.
        if let Some(k) = streams
            .iter()
            .position(|s| s.live && s.marker == Some(index))
        {
            let s = &mut streams[k];
            s.used = now;
            let first = s.last.saturating_add(1);
            self.extend(s, first, out);
            return;
        }
        let hit = streams
            .iter()
            .position(|s| s.live && s.last.checked_add(1) == Some(index));
        let k = match hit {
            Some(k) => k,
            None => {
                // Random access (or a new reader): take over the least recently used stream.
                let k = (0..streams.len()).min_by_key(|&k| streams[k].used).unwrap();
                streams[k] = StreamState {
                    last: index,
                    size: 0,
                    used: now,
                    marker: None,
                    live: true,
                };
                if index != 0 {
                    return;
                }
                k
            }
        };
        let s = &mut streams[k];
        s.used = now;
        s.last = index;
        self.extend(s, index.saturating_add(1), out);
    }
}

impl ReadAhead {
    /// Grows the stream's window and proposes it from `first`, leaving out the marker.
    fn extend(&self, s: &mut StreamState, first: u64, out: &mut Vec<u64>) {
        s.size = if s.size == 0 {
            self.initial
        } else {
            (2 * s.size).min(self.max)
        };
        let end = (first - 1)
            .saturating_add(s.size)
            .min(self.buffers.saturating_sub(1));
        s.marker = None;
        if first > end {
            return;
        }
        let marker = (self.asynchronous && end > first).then(|| first + (end - first).div_ceil(2));
        out.extend((first..=end).filter(|&i| Some(i) != marker));
        s.marker = marker;
        s.last = end;
    }
}

#[cfg(test)]
mod tests {
    use super::super::answers as run;
    use super::*;

    #[test]
    fn window_doubles_on_sequential_misses_up_to_max() {
        let p = ReadAhead::new(2, 8);
        // A reader that consumes every window: each miss lands right after the last one.
        let got = run(&p, &[0, 3, 8, 17, 26]);
        assert_eq!(got[0], vec![1, 2]);
        assert_eq!(got[1], (4..=7).collect::<Vec<_>>());
        assert_eq!(got[2], (9..=16).collect::<Vec<_>>());
        assert_eq!(got[3], (18..=25).collect::<Vec<_>>(), "capped at 8");
        assert_eq!(got[4], (27..=34).collect::<Vec<_>>());
    }

    #[test]
    fn asynchronous_windows_leave_a_marker_whose_miss_fetches_the_next() {
        let p = ReadAhead::new(4, 8).asynchronous();
        // Miss at 0 starts a window 1..=4 with 3 (its middle) left out as the marker.
        let got = run(&p, &[0, 3, 7, 100]);
        assert_eq!(got[0], vec![1, 2, 4]);
        // The reader misses at the marker: the next window, 5..=12, is fetched while it
        // still has 4 to read; its own marker is 9.
        assert_eq!(got[1], vec![5, 6, 7, 8, 10, 11, 12]);
        // A miss that is neither a marker nor the next buffer is random.
        assert!(got[2].is_empty());
        assert!(got[3].is_empty());
        let got = run(&p, &[9]);
        assert_eq!(got[0], (13..=20).filter(|&i| i != 17).collect::<Vec<_>>());
    }

    #[test]
    fn random_access_resets() {
        let p = ReadAhead::with_streams(2, 8, 1);
        let got = run(&p, &[100, 101, 104, 500, 900, 901, 904]);
        assert!(got[0].is_empty(), "a lone miss is random: no readahead");
        assert_eq!(got[1], vec![102, 103], "sequential: initial window");
        assert_eq!(got[2], (105..=108).collect::<Vec<_>>());
        assert!(got[3].is_empty() && got[4].is_empty(), "random again");
        assert_eq!(got[5], vec![902, 903], "back to the initial window");
        assert_eq!(got[6].len(), 4);
    }

    #[test]
    fn interleaved_streams_keep_their_windows() {
        let p = ReadAhead::new(2, 16);
        let got = run(&p, &[1000, 5000, 1001, 5001, 1004, 5004]);
        assert_eq!(got[2], vec![1002, 1003]);
        assert_eq!(got[3], vec![5002, 5003]);
        assert_eq!(got[4].len(), 4);
        assert_eq!(got[5].len(), 4);
    }

    #[test]
    fn clamped_to_the_mapping() {
        let mut p = ReadAhead::new(4, 4);
        p.attach(Layout {
            buffers: 10,
            capacity: 16,
            buffer_size: 4096,
        });
        let got = run(&p, &[6, 7]);
        assert_eq!(got[1], vec![8, 9]);
    }

    #[test]
    fn window_is_at_most_a_quarter_of_the_cache() {
        let mut p = ReadAhead::new(4, 32);
        p.attach(Layout {
            buffers: 1000,
            capacity: 16,
            buffer_size: 4096,
        });
        let got = run(&p, &[0, 5, 10, 15]);
        assert!(got.iter().all(|w| w.len() <= 4), "{got:?}");
    }
}
