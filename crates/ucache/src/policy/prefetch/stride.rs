//! Constant-stride detection per stream, after the reference prediction tables of hardware
//! prefetchers (Chen and Baer, "Effective Hardware-Based Data Prefetching for
//! High-Performance Processors", IEEE ToC 1995), applied to buffer misses.
//!
//! Each stream remembers its last miss and the stride from the one before. When a miss
//! repeats the stride, the stream is confirmed and the next `depth` buffers along it are
//! proposed; once confirmed, the stream expects its next miss just past what it prefetched.
//! A miss is attributed to the stream whose last miss is nearest (within `max_stride`), so
//! interleaved strided readers (column scans of a row store, strided matrix walks, reverse
//! scans with a negative stride) are told apart. Suits fixed-layout strided access that plain
//! sequential readahead misses.

use parking_lot::Mutex;

use super::super::Layout;
use super::Prefetcher;

#[derive(Clone, Copy, Debug, Default)]
struct StreamState {
    last: u64,
    stride: i64,
    /// Confirmed: the miss expected next, just past the prefetched run.
    next: Option<u64>,
    used: u64,
    live: bool,
}

pub struct Stride {
    depth: u64,
    max_stride: u64,
    buffers: u64,
    streams: Mutex<(Vec<StreamState>, u64)>,
}

impl Stride {
    /// Prefetches `depth` buffers ahead along strides of at most `max_stride` buffers, with 8
    /// streams.
    pub fn new(depth: u64, max_stride: u64) -> Self {
        Stride {
            depth: depth.max(1),
            max_stride: max_stride.max(1),
            buffers: u64::MAX,
            streams: Mutex::new((vec![StreamState::default(); 8], 0)),
        }
    }

    fn step(&self, from: u64, stride: i64, k: u64) -> Option<u64> {
        let v = from as i128 + stride as i128 * k as i128;
        (0..self.buffers as i128).contains(&v).then_some(v as u64)
    }
}

impl Default for Stride {
    fn default() -> Self {
        Self::new(8, 64)
    }
}

impl Prefetcher for Stride {
    fn name(&self) -> &str {
        "stride"
    }

    fn attach(&mut self, layout: Layout) {
        self.buffers = layout.buffers;
    }

    fn on_miss(&self, index: u64, out: &mut Vec<u64>) {
        let mut g = self.streams.lock();
        let (streams, clock) = &mut *g;
        *clock += 1;
        let now = *clock;
        let live = |s: &&mut StreamState| s.live;
        let confirmed = streams.iter_mut().filter(live).find(|s| {
            s.next == Some(index)
                || (s.stride != 0 && self.step(s.last, s.stride, 1) == Some(index))
        });
        let s = match confirmed {
            Some(s) => s,
            None => {
                let near = streams
                    .iter_mut()
                    .filter(live)
                    .filter(|s| s.last != index && s.last.abs_diff(index) <= self.max_stride)
                    .min_by_key(|s| s.last.abs_diff(index));
                match near {
                    Some(s) => {
                        // A new candidate stride for this stream.
                        s.stride = index as i64 - s.last as i64;
                        s.last = index;
                        s.next = None;
                        s.used = now;
                    }
                    None => {
                        let s = streams.iter_mut().min_by_key(|s| s.used).unwrap();
                        *s = StreamState {
                            last: index,
                            stride: 0,
                            next: None,
                            used: now,
                            live: true,
                        };
                    }
                }
                return;
            }
        };
        s.used = now;
        s.last = index;
        out.extend((1..=self.depth).filter_map(|k| self.step(index, s.stride, k)));
        s.next = self.step(index, s.stride, self.depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::super::answers as run;
    use super::*;

    #[test]
    fn detects_and_follows_a_stride() {
        let p = Stride::new(3, 64);
        let got = run(&p, &[10, 15, 20, 40, 60]);
        assert!(got[0].is_empty() && got[1].is_empty(), "not confirmed yet");
        assert_eq!(got[2], vec![25, 30, 35]);
        // The reader used 25..35 from the prefetch, so it misses next at 40, as expected.
        assert_eq!(got[3], vec![45, 50, 55]);
        assert_eq!(got[4], vec![65, 70, 75]);
        // A prefetched buffer evicted before use misses itself: that continues the stream.
        let got = run(&p, &[65]);
        assert_eq!(got[0], vec![70, 75, 80]);
    }

    #[test]
    fn interleaved_and_negative_strides() {
        let p = Stride::new(2, 16);
        let got = run(&p, &[100, 1000, 103, 990, 106, 980, 970]);
        assert_eq!(got[4], vec![109, 112]);
        assert_eq!(got[5], vec![970, 960]);
        // The reader used 970 and 960 from the prefetch; its next miss is 950 — but here it
        // missed 970 again (evicted before use), which continues the stream too.
        assert_eq!(got[6], vec![960, 950]);
    }

    #[test]
    fn expects_the_miss_past_the_prefetched_run() {
        let p = Stride::new(2, 64);
        let got = run(&p, &[0, 4, 8, 20, 32]);
        assert_eq!(got[2], vec![12, 16]);
        assert_eq!(
            got[3],
            vec![24, 28],
            "12 and 16 hit; the miss at 20 is expected"
        );
        assert_eq!(got[4], vec![36, 40]);
    }

    #[test]
    fn never_leaves_the_mapping() {
        let mut p = Stride::new(4, 64);
        p.attach(Layout {
            buffers: 20,
            capacity: 5,
            buffer_size: 4096,
        });
        let got = run(&p, &[10, 7, 4, 1]);
        assert_eq!(got[3], vec![], "0 would need -2");
        let got = run(&p, &[12, 15, 18]);
        assert_eq!(got[2], vec![], "21 is past the end");
    }
}
