//! Sequential [`crate::Mapping::read`] calls read ahead, as `read(2)` does on a file (the
//! kernel keeps `f_ra` per open file for this).
//!
//! Each call already keeps many reads in flight for its own range (`pin_each`), but a program
//! that reads a file in pieces waits at every call for that piece's reads, and the device is
//! idle while it copies the bytes out. Pins feed the mapping's readahead miss by miss; a read
//! says its whole range at once, so the detector here works on ranges: a call that starts
//! where an earlier one ended continues that stream, and loads the stream's next window on the
//! IO threads before it waits for its own range. The window starts at twice the call's length
//! (at least [`MIN_WINDOW`]) and doubles while the stream goes on, up to the mapping's
//! readahead limit; the next window is issued once less than half a window lies read ahead of
//! the reader, so one window loads while the reader consumes the other, as Linux's
//! asynchronous readahead marker does.
//!
//! A call that continues no stream is random access: it takes over the least recently used
//! slot and reads nothing ahead, so random reads cost nothing extra. Unlike `read(2)`, a first
//! read at offset 0 is no stream yet: a library's callers often read one range and stop (a
//! header, `cat_file(path, 0, n)`), and on S3 a window read for nothing costs requests. A
//! file read in pieces reads ahead from its second piece on.
//!
//! A stream that has run past a threshold (a quarter of the budget, given by the caller), or
//! that started at the object's first byte when the object is larger than the whole budget, is
//! a scan: [`ReadStreams::on_read`] answers [`Next::Scan`] and loads nothing more into the
//! cache, and the read takes what is not resident straight from the store
//! ([`super::scan`]), as PostgreSQL's ring strategy keeps a sequential scan from flooding its
//! buffer pool.

use std::ops::Range;

use parking_lot::Mutex;

/// The smallest window: Linux's default `read_ahead_kb`.
pub(super) const MIN_WINDOW: u64 = 128 << 10;

/// Sequential readers tracked at once (threads reading different files' ranges).
const STREAMS: usize = 4;

/// What a read should do besides its own range ([`ReadStreams::on_read`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Nothing: a random read, or a stream with enough read ahead already.
    Nothing,
    /// Load these bytes ahead of the reader, into the cache.
    Load(Range<u64>),
    /// The stream is a scan: read what is not resident past the cache, and load nothing ahead.
    Scan,
}

/// When a stream becomes a scan ([`ReadStreams::on_read`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct ScanAfter {
    /// Bytes the stream has read before the call.
    pub(super) bytes: u64,
    /// A stream that started at offset 0 is a scan from its second call: the mapping is larger
    /// than the cache's whole budget, so a pass over it from the start could not stay cached.
    pub(super) from_start: bool,
}

#[derive(Clone, Copy, Default)]
struct Stream {
    /// Where the stream began: its first read's start.
    start: u64,
    /// Where the stream's last read ended (0 with `used` 0: an empty slot).
    next: u64,
    /// How far the stream has been read ahead: loads were issued up to here.
    ahead: u64,
    /// The current window in bytes (0: not sequential yet).
    window: u64,
    /// When the stream was last used, for replacing the least recently used.
    used: u64,
}

/// The read streams of one mapping.
pub(super) struct ReadStreams {
    inner: Mutex<Slots>,
}

struct Slots {
    streams: [Stream; STREAMS],
    clock: u64,
}

impl ReadStreams {
    pub(super) fn new() -> Self {
        ReadStreams {
            inner: Mutex::new(Slots {
                streams: [Stream::default(); STREAMS],
                clock: 0,
            }),
        }
    }

    /// Notes a read of `range` and says what to do besides: load bytes ahead of it (never past
    /// `len`, the mapping's length, and never a window above `max` bytes), or read it as a
    /// scan once the stream is one by `scan` (`None`: never).
    pub(super) fn on_read(
        &self,
        range: Range<u64>,
        len: u64,
        max: u64,
        scan: Option<ScanAfter>,
    ) -> Next {
        let mut slots = self.inner.lock();
        slots.clock += 1;
        let now = slots.clock;
        let asked = range.end - range.start;
        let max = max.max(MIN_WINDOW);
        let found = slots
            .streams
            .iter()
            .position(|s| s.used != 0 && s.next == range.start);
        let s = match found {
            Some(k) => &mut slots.streams[k],
            None => {
                let k = (0..STREAMS)
                    .min_by_key(|&k| slots.streams[k].used)
                    .unwrap_or(0);
                slots.streams[k] = Stream {
                    start: range.start,
                    next: range.end,
                    ahead: range.end,
                    window: 0,
                    used: now,
                };
                return Next::Nothing;
            }
        };
        s.used = now;
        s.next = range.end;
        s.ahead = s.ahead.max(range.end);
        if scan.is_some_and(|t| (t.from_start && s.start == 0) || range.start - s.start >= t.bytes)
        {
            return Next::Scan;
        }
        let window = s.window.max(2 * asked).clamp(MIN_WINDOW, max);
        s.window = window;
        // Issue the next window only when the reader is within half a window of the edge, so
        // a stream of small reads asks once per half window, not once per call.
        if s.ahead - range.end >= window / 2 || s.ahead >= len {
            return Next::Nothing;
        }
        let to = (range.end + window).min(len);
        let from = std::mem::replace(&mut s.ahead, to);
        // The reader consumed a window: the next one is twice as large.
        s.window = (2 * window).min(max);
        Next::Load(from..to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: u64 = 1 << 30;
    const MAX: u64 = 4 << 20;

    /// The window `on_read` loads, for a stream that never becomes a scan.
    fn ahead(r: &ReadStreams, range: Range<u64>, len: u64, max: u64) -> Option<Range<u64>> {
        match r.on_read(range, len, max, None) {
            Next::Nothing => None,
            Next::Load(w) => Some(w),
            Next::Scan => panic!("a scan without a threshold"),
        }
    }

    #[test]
    fn a_first_read_reads_nothing_ahead_even_at_the_start() {
        let r = ReadStreams::new();
        assert_eq!(ahead(&r, 4096..8192, LEN, MAX), None);
        assert_eq!(ahead(&r, 0..4096, LEN, MAX), None);
    }

    #[test]
    fn a_continued_read_reads_ahead_and_the_stream_keeps_half_a_window_ahead() {
        let r = ReadStreams::new();
        let m = 1 << 20;
        assert_eq!(ahead(&r, 0..m, LEN, MAX), None);
        assert_eq!(ahead(&r, m..2 * m, LEN, MAX), Some(2 * m..4 * m));
        // The window doubled to the limit (4 MiB); less than half of it lies ahead.
        assert_eq!(ahead(&r, 2 * m..3 * m, LEN, MAX), Some(4 * m..7 * m));
        // Half a window or more lies ahead: nothing new until the reader comes closer.
        assert_eq!(ahead(&r, 3 * m..4 * m, LEN, MAX), None);
        assert_eq!(ahead(&r, 4 * m..5 * m, LEN, MAX), None);
        assert_eq!(ahead(&r, 5 * m..6 * m, LEN, MAX), Some(7 * m..10 * m));
    }

    #[test]
    fn small_reads_ask_once_per_half_window() {
        let r = ReadStreams::new();
        let mut asked = Vec::new();
        let mut at = 0;
        while at < 2 << 20 {
            if let Some(w) = ahead(&r, at..at + 4096, LEN, MAX) {
                asked.push(w);
            }
            at += 4096;
        }
        // Contiguous windows, each starting where the last ended, none overlapping.
        for w in asked.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert!(asked.len() < 16, "{} windows for 512 reads", asked.len());
        assert!(asked.last().unwrap().end >= 2 << 20);
    }

    #[test]
    fn random_reads_read_nothing_ahead() {
        let r = ReadStreams::new();
        let mut x = 12345u64;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = ((x >> 20) % (LEN / 4096)) * 4096 + 4096;
            assert_eq!(ahead(&r, at..at + 4096, LEN, MAX), None);
        }
    }

    #[test]
    fn windows_stop_at_the_mapping_end() {
        let r = ReadStreams::new();
        let len = 3 << 20;
        let mut end = 0;
        let mut at = 0;
        while at < len {
            if let Some(w) = ahead(&r, at..at + (1 << 20), len, MAX) {
                assert!(w.end <= len);
                end = w.end;
            }
            at += 1 << 20;
        }
        assert_eq!(end, len);
    }

    #[test]
    fn interleaved_readers_keep_their_own_streams() {
        let r = ReadStreams::new();
        let m = 1 << 20;
        let (a, b) = (64 * m, 512 * m);
        // Their first reads are random: no stream yet.
        assert_eq!(ahead(&r, a..a + m, LEN, MAX), None);
        assert_eq!(ahead(&r, b..b + m, LEN, MAX), None);
        assert_eq!(
            ahead(&r, a + m..a + 2 * m, LEN, MAX),
            Some(a + 2 * m..a + 4 * m)
        );
        assert_eq!(
            ahead(&r, b + m..b + 2 * m, LEN, MAX),
            Some(b + 2 * m..b + 4 * m)
        );
    }

    #[test]
    fn a_stream_past_its_threshold_is_a_scan_and_loads_nothing_more() {
        let r = ReadStreams::new();
        let m = 1 << 20;
        let t = Some(ScanAfter {
            bytes: 3 * m,
            from_start: false,
        });
        assert_eq!(r.on_read(0..m, LEN, MAX, t), Next::Nothing);
        assert_eq!(r.on_read(m..2 * m, LEN, MAX, t), Next::Load(2 * m..4 * m));
        assert_eq!(
            r.on_read(2 * m..3 * m, LEN, MAX, t),
            Next::Load(4 * m..7 * m)
        );
        // Three MiB read before this call: a scan from here on.
        for k in 3..10 {
            assert_eq!(r.on_read(k * m..(k + 1) * m, LEN, MAX, t), Next::Scan);
        }
        // A call that does not ask (a small read) goes on with the readahead where it was.
        assert_eq!(
            r.on_read(10 * m..11 * m, LEN, MAX, None),
            Next::Load(11 * m..15 * m)
        );
    }

    #[test]
    fn a_stream_that_starts_late_counts_from_its_own_start() {
        let r = ReadStreams::new();
        let m = 1 << 20;
        let t = Some(ScanAfter {
            bytes: 2 * m,
            from_start: true,
        });
        let at = 512 * m;
        assert_eq!(r.on_read(at..at + m, LEN, MAX, t), Next::Nothing);
        assert!(matches!(
            r.on_read(at + m..at + 2 * m, LEN, MAX, t),
            Next::Load(_)
        ));
        assert_eq!(r.on_read(at + 2 * m..at + 3 * m, LEN, MAX, t), Next::Scan);
        // Random reads never are.
        let any = Some(ScanAfter {
            bytes: 0,
            from_start: true,
        });
        assert_eq!(r.on_read(4 * m..5 * m, LEN, MAX, any), Next::Nothing);
    }

    #[test]
    fn a_pass_from_the_start_of_an_object_larger_than_the_budget_is_a_scan_at_once() {
        let r = ReadStreams::new();
        let m = 1 << 20;
        let t = Some(ScanAfter {
            bytes: 64 * m,
            from_start: true,
        });
        assert_eq!(r.on_read(0..m, LEN, MAX, t), Next::Nothing);
        assert_eq!(r.on_read(m..2 * m, LEN, MAX, t), Next::Scan);
    }
}
