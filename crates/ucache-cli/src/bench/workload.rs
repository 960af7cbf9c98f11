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

use super::datafile::{expected_word, word_ok};
use super::role::Role;
use super::zipf::Zipf;
use std::cell::RefCell;

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
    /// YCSB A (cache_ext §6.1): Zipf(0.99) buffers, half the ops updates (an exclusive pin
    /// that rewrites one word with its value, so the buffer turns dirty and is written back).
    YcsbA,
    /// YCSB B: as A with 5% updates.
    YcsbB,
    /// YCSB C: as A, reads only.
    YcsbC,
    /// cache_ext's GET-SCAN (§6.4): half the threads do Zipf lookups, the others scan the
    /// whole file with `Hint::SCAN` set; GET and scan throughput are reported apart.
    Getscan,
    /// cache_ext's file search (§6.3): all threads share a cursor that sweeps the file again
    /// and again, reading every page, over data larger than the budget. cache_ext ran ripgrep
    /// over a tree of files; one big file has the same access pattern (a loop larger than the
    /// cache) without per-file open costs.
    Search,
    /// Two mappings in one cache sharing the budget (cache_ext §6.5's isolation): the first
    /// half of the file is tenant A, Zipf lookups by half the threads; the second half is
    /// tenant B, scanned by the other half.
    Tenants,
}

/// The skew of the `zipf` workload.
pub const ZIPF_THETA: f64 = 0.99;

thread_local! {
    /// The Zipf table a thread last used: building one sums n powers, so it is kept, and
    /// per thread (not per process) so tenants and tests may use tables of different sizes.
    static ZIPF: RefCell<Option<Zipf>> = const { RefCell::new(None) };
}

/// A Zipf-distributed buffer index in `0..buffers`, hot ranks scattered.
fn zipf_index(rng: &mut SmallRng, buffers: u64) -> u64 {
    ZIPF.with(|z| {
        let mut z = z.borrow_mut();
        let z = match &mut *z {
            Some(t) if t.ranks() == buffers => t,
            slot => slot.insert(Zipf::new(buffers, ZIPF_THETA)),
        };
        z.scatter(z.sample(rng))
    })
}

/// The buffer of tenant B's mapping that comes first: B is the file's second half.
pub fn tenant_split(buffers: u64) -> u64 {
    buffers.div_ceil(2)
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Lookup => "lookup",
            Workload::Seq => "seq",
            Workload::Zipf => "zipf",
            Workload::YcsbA => "ycsb-a",
            Workload::YcsbB => "ycsb-b",
            Workload::YcsbC => "ycsb-c",
            Workload::Getscan => "getscan",
            Workload::Search => "search",
            Workload::Tenants => "tenants",
        }
    }

    /// Point lookups (random access), as opposed to a scan.
    pub fn is_random(self) -> bool {
        !matches!(self, Workload::Seq | Workload::Search)
    }

    /// The fraction of ops that are updates.
    pub fn update_fraction(self) -> f64 {
        match self {
            Workload::YcsbA => 0.5,
            Workload::YcsbB => 0.05,
            _ => 0.0,
        }
    }

    /// Whether the next op is an update (drawn per op, so each thread runs the mix).
    #[inline]
    pub fn next_is_update(self, rng: &mut SmallRng) -> bool {
        let p = self.update_fraction();
        p > 0.0 && rng.gen_bool(p)
    }

    /// The buffer index of the next op of a thread in `role`. Scanning roles share `cursor`,
    /// so together they make one pass after another.
    #[inline]
    pub fn next_index(
        self,
        role: Role,
        rng: &mut SmallRng,
        cursor: &AtomicU64,
        buffers: u64,
    ) -> u64 {
        let sweep = |n: u64| cursor.fetch_add(1, Ordering::Relaxed) % n;
        match (self, role) {
            (Workload::Lookup, _) => rng.gen_range(0..buffers),
            (Workload::Seq | Workload::Search, _) | (Workload::Getscan, Role::Scan) => {
                sweep(buffers)
            }
            (Workload::Tenants, Role::TenantB) => {
                let split = tenant_split(buffers);
                split + sweep(buffers - split)
            }
            (Workload::Tenants, _) => zipf_index(rng, tenant_split(buffers)),
            (
                Workload::Zipf
                | Workload::YcsbA
                | Workload::YcsbB
                | Workload::YcsbC
                | Workload::Getscan,
                _,
            ) => zipf_index(rng, buffers),
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
            Workload::Seq | Workload::Search => {
                let first = cursor.fetch_add(out.len() as u64, Ordering::Relaxed);
                for (k, i) in out.iter_mut().enumerate() {
                    *i = (first + k as u64) % buffers;
                }
            }
            _ => out
                .iter_mut()
                .for_each(|i| *i = self.next_index(Role::All, rng, cursor, buffers)),
        }
    }

    /// Performs the op's reads on `buf`, the whole buffer that starts at file offset `base`.
    /// Returns the number of words that did not hold their offset.
    #[inline]
    pub fn touch(self, role: Role, rng: &mut SmallRng, buf: &[u8], base: u64) -> u64 {
        if matches!(self, Workload::Seq | Workload::Search) || role.scans() {
            (0..buf.len())
                .step_by(PAGE)
                .map(|at| u64::from(!word_ok(buf, base, at)))
                .sum()
        } else {
            let at = rng.gen_range(0..buf.len() / 8) * 8;
            u64::from(!word_ok(buf, base, at))
        }
    }

    /// An update of buffer `buf` (file offset `base`): checks one random word and writes its
    /// correct value back, so the data file keeps its pattern however often it is written
    /// back. Returns 1 if the word was wrong before the write.
    #[inline]
    pub fn update(rng: &mut SmallRng, buf: &mut [u8], base: u64) -> u64 {
        let at = rng.gen_range(0..buf.len() / 8) * 8;
        let bad = u64::from(!word_ok(buf, base, at));
        buf[at..at + 8].copy_from_slice(&expected_word(base + at as u64).to_le_bytes());
        bad
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
            assert_eq!(Workload::Lookup.touch(Role::All, &mut rng, &buf, 65536), 0);
        }
        assert_eq!(Workload::Seq.touch(Role::All, &mut rng, &buf, 65536), 0);
        assert_eq!(
            Workload::Seq.touch(Role::All, &mut rng, &buf, 0),
            4,
            "wrong base: every page wrong"
        );
        buf[4096] ^= 0x80;
        assert_eq!(Workload::Seq.touch(Role::All, &mut rng, &buf, 65536), 1);
    }

    #[test]
    fn seq_wraps_and_batches_are_contiguous() {
        let mut rng = SmallRng::seed_from_u64(1);
        let cursor = AtomicU64::new(0);
        let got: Vec<u64> = (0..7)
            .map(|_| Workload::Seq.next_index(Role::All, &mut rng, &cursor, 3))
            .collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0]);
        let mut out = [0u64; 4];
        Workload::Seq.next_indices(&mut rng, &cursor, 3, &mut out);
        assert_eq!(out, [1, 2, 0, 1]);
        Workload::Lookup.next_indices(&mut rng, &cursor, 3, &mut out);
        assert!(out.iter().all(|&i| i < 3));
    }

    #[test]
    fn live_workloads_pick_indices_in_their_part_of_the_file() {
        let mut rng = SmallRng::seed_from_u64(3);
        let cursor = AtomicU64::new(0);
        let n = 1000;
        for w in [Workload::YcsbA, Workload::YcsbC, Workload::Getscan] {
            let mut hits = vec![0u32; n as usize];
            for _ in 0..20_000 {
                hits[w.next_index(Role::Get, &mut rng, &cursor, n) as usize] += 1;
            }
            // Zipf: the hottest buffer takes far more than a uniform share (20).
            assert!(*hits.iter().max().unwrap() > 500, "{}", w.name());
        }
        // Scans of getscan and search sweep the whole file in order.
        let c = AtomicU64::new(0);
        let got: Vec<u64> = (0..4)
            .map(|_| Workload::Getscan.next_index(Role::Scan, &mut rng, &c, 3))
            .collect();
        assert_eq!(got, [0, 1, 2, 0]);
        let c = AtomicU64::new(0);
        let got: Vec<u64> = (0..4)
            .map(|_| Workload::Search.next_index(Role::All, &mut rng, &c, 3))
            .collect();
        assert_eq!(got, [0, 1, 2, 0]);
        // Tenants: A looks up in the first half, B sweeps the second half.
        let split = tenant_split(n);
        assert_eq!(split, 500);
        for _ in 0..5_000 {
            assert!(Workload::Tenants.next_index(Role::TenantA, &mut rng, &cursor, n) < split);
        }
        let c = AtomicU64::new(0);
        let got: Vec<u64> = (0..501)
            .map(|_| Workload::Tenants.next_index(Role::TenantB, &mut rng, &c, n))
            .collect();
        assert_eq!((got[0], got[499], got[500]), (500, 999, 500));
        assert_eq!(tenant_split(7), 4);
    }

    #[test]
    fn update_mix_and_updates_keep_the_pattern() {
        let mut rng = SmallRng::seed_from_u64(5);
        let count =
            |w: Workload, rng: &mut SmallRng| (0..20_000).filter(|_| w.next_is_update(rng)).count();
        let a = count(Workload::YcsbA, &mut rng);
        let b = count(Workload::YcsbB, &mut rng);
        assert!((9_000..11_000).contains(&a), "A {a}");
        assert!((700..1_300).contains(&b), "B {b}");
        assert_eq!(count(Workload::YcsbC, &mut rng), 0);
        let mut buf = vec![0u8; 8192];
        fill_pattern(&mut buf, 8192);
        let orig = buf.clone();
        for _ in 0..100 {
            assert_eq!(Workload::update(&mut rng, &mut buf, 8192), 0);
        }
        assert_eq!(buf, orig, "updates rewrite the right values");
        // Eight words: 200 updates reach each of them.
        let mut small = orig[..64].to_vec();
        small[0..8].fill(0xff);
        let bad: u64 = (0..200)
            .map(|_| Workload::update(&mut rng, &mut small, 8192))
            .sum();
        assert_eq!(bad, 1, "the wrong word is found once, then repaired");
        assert_eq!(small, orig[..64]);
    }
}
