//! The workloads: uniform point lookups and YCSB A, B and C (Zipf 0.99), over keys `0..n`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use ucache_cli::bench::latency::Histogram;
use ucache_cli::bench::zipf::Zipf;

use crate::systems::{key, System};

pub const WORKLOADS: [&str; 4] = ["lookup", "ycsb-a", "ycsb-b", "ycsb-c"];
pub const VALUE: usize = 120;

pub fn value(n: u64, version: u64) -> Vec<u8> {
    let mut v = vec![0u8; VALUE];
    v[..8].copy_from_slice(&n.to_le_bytes());
    v[8..16].copy_from_slice(&version.to_le_bytes());
    v
}

/// (share of reads in percent, Zipf or uniform).
fn mix(workload: &str) -> (u32, bool) {
    match workload {
        "lookup" => (100, false),
        "ycsb-a" => (50, true),
        "ycsb-b" => (95, true),
        "ycsb-c" => (100, true),
        w => panic!("unknown workload {w}"),
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
    let (reads, zipf) = mix(workload);
    let z = zipf.then(|| Zipf::new(n, 0.99));
    let measuring = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (z, measuring, stop) = (z.clone(), &measuring, &stop);
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
                        if rng.gen_range(0..100) < reads {
                            assert!(sys.get(&key(i)), "key {i} missing");
                        } else {
                            sys.update(&key(i), &value(i, k));
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
