//! What the per-mapping lock of the advanced policies costs on the hit path: threads pin
//! random buffers of one mapping in a live cache, with everything resident (pure hits) and
//! with a quarter resident (hits and misses, evictions included).
//!
//! Run: `cargo run --release -p ucache --example policy_contention [seconds]`
//! (prints a Markdown table of million accesses per second).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use ucache::policy::{advanced_policy_by_name, Clock, Policy, ADVANCED_POLICY_NAMES};
use ucache::store::MemoryStore;
use ucache::{Cache, CacheOptions, MapOptions};

const BS: usize = 4096;
const BUFFERS: u64 = 16_384;

fn policy(name: &str) -> Box<dyn Policy> {
    if name == "clock" {
        Box::new(Clock::new())
    } else {
        advanced_policy_by_name(name).unwrap()
    }
}

fn run(name: &str, threads: usize, budget: u64, secs: f64) -> f64 {
    let store = MemoryStore::new();
    store.insert("db", vec![7u8; BUFFERS as usize * BS]);
    let cache = Cache::new(CacheOptions::new(budget * BS as u64)).unwrap();
    let m = cache
        .map(
            Arc::new(store),
            "db",
            MapOptions::new().policy(policy(name)),
        )
        .unwrap();
    for i in 0..budget.min(BUFFERS) {
        drop(m.pin_shared(i).unwrap());
    }
    let stop = AtomicBool::new(false);
    let total = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (m, stop, total) = (&m, &stop, &total);
            s.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(t as u64);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        let g = m.pin_shared(rng.gen_range(0..BUFFERS)).unwrap();
                        std::hint::black_box(g[0]);
                    }
                    n += 256;
                }
                total.fetch_add(n, Ordering::Relaxed);
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    total.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let secs: f64 = std::env::args().nth(1).map_or(0.5, |s| s.parse().unwrap());
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads: Vec<usize> = [1, 2, 4, 8, 16]
        .into_iter()
        .filter(|&t| t <= cpus)
        .collect();
    let mut names = vec!["clock"];
    names.extend_from_slice(ADVANCED_POLICY_NAMES);
    for (label, budget) in [("all resident", BUFFERS), ("1/4 resident", BUFFERS / 4)] {
        println!("\n{label}, {cpus} CPUs, Maccesses/s");
        print!("| policy |");
        threads.iter().for_each(|t| print!(" {t} thr |"));
        println!("\n|---|{}", "---:|".repeat(threads.len()));
        for name in &names {
            print!("| {name} |");
            for &t in &threads {
                print!(" {:.2} |", run(name, t, budget, secs));
            }
            println!();
        }
    }
}
