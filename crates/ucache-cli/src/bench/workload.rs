//! What one operation is, independent of the system that serves it.
//!
//! Every system hands the workload a byte slice holding one whole buffer of the file (from its
//! own page cache, mapping, DMA buffer or ucache guard) and the workload decides which words to
//! read and checks them, so all systems do exactly the same work per op apart from getting the
//! buffer.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::datafile::word_ok;
use super::zipf::Zipf;
use std::sync::OnceLock;

/// Reads are checked at this granularity in `seq`: one word per page is enough to catch a
/// wrong or torn page and touches every page, which is what a scan costs.
pub const PAGE: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Random point lookups: a random buffer, 8 bytes at a random aligned offset in it.
    Lookup,
    /// A shared cursor sweeps the buffers in order, wrapping around, reading a word from every
    /// 4 KiB page of each: the paper's Figure 6 sequential insertion.
    Seq,
    /// Point lookups as `lookup`, but buffers drawn from a Zipf(0.99) distribution (YCSB's
    /// skew), hot buffers scattered over the file: where eviction policies differ.
    Zipf,
}

/// The skew of the `zipf` workload.
pub const ZIPF_THETA: f64 = 0.99;

/// The Zipf table of one process (a worker runs one workload over one file).
fn zipf(buffers: u64) -> &'static Zipf {
    static Z: OnceLock<Zipf> = OnceLock::new();
    Z.get_or_init(|| Zipf::new(buffers, ZIPF_THETA))
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Lookup => "lookup",
            Workload::Seq => "seq",
            Workload::Zipf => "zipf",
        }
    }

    /// Point lookups (random access), as opposed to a scan.
    pub fn is_random(self) -> bool {
        self != Workload::Seq
    }

    /// The buffer index of the next op.
    #[inline]
    pub fn next_index(self, rng: &mut SmallRng, cursor: &AtomicU64, buffers: u64) -> u64 {
        match self {
            Workload::Lookup => rng.gen_range(0..buffers),
            Workload::Seq => cursor.fetch_add(1, Ordering::Relaxed) % buffers,
            Workload::Zipf => {
                let z = zipf(buffers);
                z.scatter(z.sample(rng))
            }
        }
    }

    /// Fills `out` with the buffer indices of the next `out.len()` ops; `seq` claims them from
    /// the cursor in one step so a batch is a contiguous run, as a scan would issue it.
    pub fn next_indices(
        self,
        rng: &mut SmallRng,
        cursor: &AtomicU64,
        buffers: u64,
        out: &mut [u64],
    ) {
        match self {
            Workload::Lookup => out.iter_mut().for_each(|i| *i = rng.gen_range(0..buffers)),
            Workload::Zipf => out
                .iter_mut()
                .for_each(|i| *i = self.next_index(rng, cursor, buffers)),
            Workload::Seq => {
                let first = cursor.fetch_add(out.len() as u64, Ordering::Relaxed);
                for (k, i) in out.iter_mut().enumerate() {
                    *i = (first + k as u64) % buffers;
                }
            }
        }
    }

    /// Performs the op's reads on `buf`, the whole buffer that starts at file offset `base`.
    /// Returns the number of words that did not hold their offset.
    #[inline]
    pub fn touch(self, rng: &mut SmallRng, buf: &[u8], base: u64) -> u64 {
        match self {
            Workload::Lookup | Workload::Zipf => {
                let at = rng.gen_range(0..buf.len() / 8) * 8;
                u64::from(!word_ok(buf, base, at))
            }
            Workload::Seq => (0..buf.len())
                .step_by(PAGE)
                .map(|at| u64::from(!word_ok(buf, base, at)))
                .sum(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::datafile::fill_pattern;
    use rand::SeedableRng;

    #[test]
    fn touch_checks_the_pattern() {
        let mut rng = SmallRng::seed_from_u64(1);
        let mut buf = vec![0u8; 16384];
        fill_pattern(&mut buf, 65536);
        for _ in 0..100 {
            assert_eq!(Workload::Lookup.touch(&mut rng, &buf, 65536), 0);
        }
        assert_eq!(Workload::Seq.touch(&mut rng, &buf, 65536), 0);
        assert_eq!(
            Workload::Seq.touch(&mut rng, &buf, 0),
            4,
            "wrong base: every page wrong"
        );
        buf[4096] ^= 0x80;
        assert_eq!(Workload::Seq.touch(&mut rng, &buf, 65536), 1);
    }

    #[test]
    fn seq_wraps_and_batches_are_contiguous() {
        let mut rng = SmallRng::seed_from_u64(1);
        let cursor = AtomicU64::new(0);
        let got: Vec<u64> = (0..7)
            .map(|_| Workload::Seq.next_index(&mut rng, &cursor, 3))
            .collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0]);
        let mut out = [0u64; 4];
        Workload::Seq.next_indices(&mut rng, &cursor, 3, &mut out);
        assert_eq!(out, [1, 2, 0, 1]);
        Workload::Lookup.next_indices(&mut rng, &cursor, 3, &mut out);
        assert!(out.iter().all(|&i| i < 3));
    }
}
