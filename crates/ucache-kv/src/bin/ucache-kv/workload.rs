//! The workloads over keys `0..n`: uniform point lookups, and YCSB A to F, each with keys drawn
//! from Zipf(0.99) (`ycsb-a`) or uniformly (`ycsb-a-uniform`).
//!
//! As in YCSB's core workloads: A is 50% reads and 50% updates, B 95/5, C reads only, D 95%
//! reads of the latest inserted keys and 5% inserts (not run here), E 95% short scans (a
//! start key from the distribution and a length uniform in 1..=100) and 5% inserts, F 50%
//! reads and 50% read-modify-writes (a read, then an update of the same key, as YCSB's client
//! does it: two operations, not one transaction).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use ucache_cli::bench::latency::Histogram;
use ucache_cli::bench::zipf::Zipf;

use crate::systems::{key, System};

pub const VALUE: usize = 120;
/// The longest scan of YCSB E (YCSB's `maxscanlength` default).
const MAX_SCAN: usize = 100;

pub fn value(n: u64, version: u64) -> Vec<u8> {
    let mut v = vec![0u8; VALUE];
    v[..8].copy_from_slice(&n.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    v
}

/// What one operation of a workload does.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Read,
    Update,
    Scan,
    Insert,
    ReadModifyWrite,
}

/// A workload: its operations with their shares in percent, and the key distribution.
#[derive(Clone, Debug)]
pub struct Mix {
    ops: Vec<(Op, u32)>,
    zipf: bool,
}

impl Mix {
    /// The workload named `name`, or `None`.
    pub fn parse(name: &str) -> Option<Mix> {
        if name == "lookup" {
            return Some(Mix {
                ops: vec![(Op::Read, 100)],
                zipf: false,
            });
        }
        let rest = name.strip_prefix("ycsb-")?;
        let (letter, zipf) = match rest.strip_suffix("-uniform") {
            Some(l) => (l, false),
            None => (rest, true),
        };
        use Op::*;
        let ops = match letter {
            "a" => vec![(Read, 50), (Update, 50)],
            "b" => vec![(Read, 95), (Update, 5)],
            "c" => vec![(Read, 100)],
            "e" => vec![(Scan, 95), (Insert, 5)],
            "f" => vec![(Read, 50), (ReadModifyWrite, 50)],
            _ => return None,
        };
        Some(Mix { ops, zipf })
    }

    /// Whether the workload writes (so its durability mode matters).
    pub fn writes(&self) -> bool {
        self.ops
            .iter()
            .any(|(o, _)| *o != Op::Read && *o != Op::Scan)
    }

    fn pick(&self, r: u32) -> Op {
        let mut acc = 0;
        for &(op, share) in &self.ops {
            acc += share;
            if r < acc {
                return op;
            }
        }
        self.ops[0].0
    }
}

/// Runs `workload` on `threads` threads for `seconds` (after `warmup` seconds not counted).
/// Returns operations done and the latency histogram (every 8th operation timed).
pub fn run(
    sys: &dyn System,
    workload: &str,
    n: u64,
    threads: usize,
    warmup: f64,
    seconds: f64,
) -> (u64, Histogram) {
    let mix = Mix::parse(workload).unwrap_or_else(|| panic!("unknown workload {workload}"));
    let z = mix.zipf.then(|| Zipf::new(n, 0.99));
    // Inserted keys are new: above the loaded ones, from a random base per run so a later run
    // on the same data set inserts rather than updates.
    let next_insert = AtomicU64::new(n + rand::thread_rng().gen_range(1..1u64 << 24) * 65_536);
    let measuring = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (z, mix, measuring, stop, next_insert) =
                    (z.clone(), &mix, &measuring, &stop, &next_insert);
                s.spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(t as u64 + 1);
                    let mut hist = Histogram::new();
                    let mut ops = 0u64;
                    let mut k = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let i = match &z {
                            Some(z) => z.scatter(z.sample(&mut rng)) % n,
                            None => rng.gen_range(0..n),
                        };
                        let timed = k.is_multiple_of(8);
                        let t0 = timed.then(Instant::now);
                        match mix.pick(rng.gen_range(0..100)) {
                            Op::Read => assert!(sys.get(&key(i)), "key {i} missing"),
                            Op::Update => sys.update(&key(i), &value(i, k)),
                            Op::Scan => {
                                let len = rng.gen_range(1..=MAX_SCAN);
                                let got = sys.scan(&key(i), len);
                                // Keys 0..n are all there: a scan from i finds min(len, n - i).
                                assert!(got >= len.min((n - i) as usize), "scan from {i} short");
                            }
                            Op::Insert => {
                                let j = next_insert.fetch_add(1, Ordering::Relaxed);
                                sys.update(&key(j), &value(j, 0));
                            }
                            Op::ReadModifyWrite => {
                                let old = sys.read(&key(i)).expect("key missing");
                                let version = u64::from_le_bytes(old[8..16].try_into().unwrap());
                                sys.update(&key(i), &value(i, version + 1));
                            }
                        }
                        k += 1;
                        if measuring.load(Ordering::Relaxed) {
                            ops += 1;
                            if let Some(t0) = t0 {
                                hist.record(t0.elapsed().as_nanos() as u64);
                            }
                        }
                    }
                    (ops, hist)
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(warmup));
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs_f64(seconds));
        measuring.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        let mut total = 0;
        let mut hist = Histogram::new();
        for h in hs {
            let (o, hh) = h.join().unwrap();
            total += o;
            hist.merge(&hh);
        }
        (total, hist)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_to_their_mixes() {
        for w in [
            "lookup",
            "ycsb-a",
            "ycsb-c-uniform",
            "ycsb-e",
            "ycsb-f-uniform",
        ] {
            let m = Mix::parse(w).unwrap();
            assert_eq!(m.ops.iter().map(|(_, s)| s).sum::<u32>(), 100, "{w}");
        }
        assert!(Mix::parse("ycsb-d").is_none());
        assert!(Mix::parse("ycsb-a-zipf").is_none());
        assert!(Mix::parse("ycsb-e").unwrap().writes());
        assert!(!Mix::parse("ycsb-c-uniform").unwrap().writes());
        let e = Mix::parse("ycsb-e").unwrap();
        assert_eq!(e.pick(94), Op::Scan);
        assert_eq!(e.pick(95), Op::Insert);
        assert!(!Mix::parse("lookup").unwrap().zipf && Mix::parse("ycsb-e").unwrap().zipf);
    }
}
