//! Miss ratios of the advanced policy library against CLOCK, through the trace simulator
//! (which runs the very policy code the live cache runs), on three synthetic traces at three
//! cache sizes:
//! - zipf: 2M point lookups, Zipf(0.99) over 100k buffers;
//! - scan-mixed: the same lookups with a cold sequential scan of 2000 buffers, tagged
//!   `Hint::SCAN`, after every 2000 lookups (half the accesses are scans);
//! - loop: a loop over 15k buffers, repeated (2M accesses).
//!
//! Run: `cargo run --release -p ucache --example policy_mrc` (prints Markdown tables: miss
//! ratios, then the simulator's single-threaded cost per access).

use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::policy::{
    advanced_policy_by_name, Clock, Hint, Policy, Simulator, ADVANCED_POLICY_NAMES,
};

const KEYS: u64 = 100_000;
const SCAN_SPACE: u64 = 1_000_000;
const REQUESTS: usize = 2_000_000;
const SIZES: [u64; 3] = [1_000, 5_000, 20_000];

/// Zipf(s) over 0..n by inverse CDF on a precomputed table (rank 0 is the most popular).
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Self {
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += 1.0 / (k as f64).powf(s);
            cdf.push(sum);
        }
        cdf.iter_mut().for_each(|c| *c /= sum);
        Zipf { cdf }
    }

    fn sample(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c < u) as u64
    }
}

/// (buffer, scan?) per access.
fn traces() -> Vec<(&'static str, Vec<(u64, bool)>)> {
    let zipf = Zipf::new(KEYS, 0.99);
    // Popular keys are scattered over the key space, as hashed keys are.
    let scatter = |r: u64| (r.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 20) % KEYS;
    let mut rng = SmallRng::seed_from_u64(42);
    let z: Vec<(u64, bool)> = (0..REQUESTS)
        .map(|_| (scatter(zipf.sample(&mut rng)), false))
        .collect();
    let mut rng = SmallRng::seed_from_u64(43);
    let mut mixed = Vec::with_capacity(REQUESTS);
    let mut scan_at = KEYS;
    while mixed.len() < REQUESTS {
        for _ in 0..2000 {
            mixed.push((scatter(zipf.sample(&mut rng)), false));
        }
        for k in 0..2000 {
            mixed.push((scan_at + k, true));
        }
        scan_at = KEYS + (scan_at - KEYS + 2000) % SCAN_SPACE;
    }
    mixed.truncate(REQUESTS);
    let looped: Vec<(u64, bool)> = (0..REQUESTS)
        .map(|k| ((k as u64) % 15_000, false))
        .collect();
    vec![("zipf", z), ("scan-mixed", mixed), ("loop", looped)]
}

fn policy(name: &str) -> Box<dyn Policy> {
    if name == "clock" {
        Box::new(Clock::new())
    } else {
        advanced_policy_by_name(name).unwrap()
    }
}

fn main() {
    let traces = traces();
    let mut names = vec!["clock"];
    names.extend_from_slice(ADVANCED_POLICY_NAMES);
    print!("| policy |");
    for (t, _) in &traces {
        for c in SIZES {
            print!(" {t} {c} |");
        }
    }
    println!();
    println!("|---|{}", "---:|".repeat(traces.len() * SIZES.len()));
    let mut times = Vec::new();
    for name in &names {
        print!("| {name} |");
        let mut row = Vec::new();
        for (_, trace) in &traces {
            for c in SIZES {
                let mut sim = Simulator::new(policy(name), KEYS + SCAN_SPACE, c);
                let t = Instant::now();
                for &(id, scan) in trace {
                    if scan {
                        Hint::SCAN.scoped(|| sim.access(id));
                    } else {
                        sim.access(id);
                    }
                }
                row.push(t.elapsed().as_nanos() as f64 / trace.len() as f64);
                let s = sim.stats();
                assert_eq!(s.unevictable, 0);
                print!(" {:.2} |", 100.0 * s.miss_ratio());
            }
        }
        times.push(row);
        println!();
    }
    // Single-threaded simulator cost per access, hooks and state-word transitions included:
    // a rough relative measure of each policy's bookkeeping (noisy on a shared machine).
    println!();
    print!("| ns/access |");
    for (t, _) in &traces {
        for c in SIZES {
            print!(" {t} {c} |");
        }
    }
    println!();
    println!("|---|{}", "---:|".repeat(traces.len() * SIZES.len()));
    for (name, row) in names.iter().zip(&times) {
        print!("| {name} |");
        for ns in row {
            print!(" {ns:.0} |");
        }
        println!();
    }
}
