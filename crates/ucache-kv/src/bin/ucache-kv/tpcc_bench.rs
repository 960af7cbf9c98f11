//! `ucache-kv tpcc`: TPC-C ([`crate::tpcc`]) on the store, on each placement, in memory and
//! out of memory, with the same method as `bench`: a worker process per measurement inside a
//! memory cgroup of the budget, the data files dropped from the page cache first, placements
//! interleaved within each repetition.
//!
//! Besides transactions per second it reports where the time went, from counters: the share
//! of the threads' time spent waiting for the log (`Kv::log_wait_ns`: commits' syncs, and
//! write-backs held for the write-ahead rule) and spent in misses (ucache's miss latency
//! histogram: making room, that is eviction and the write-back of dirty victims, plus the
//! read). The cache does not time eviction apart from the read on explicit mappings, so the
//! second share is eviction and reading together.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use ucache_cli::bench::cgroup;
use ucache_cli::bench::cpu::self_cpu;
use ucache_kv::{Kv, KvOptions, Placement};

use crate::tpcc::{self, Driver, Scale, TYPES};

const SYSTEMS: [&str; 2] = ["kv-ucache-pool", "kv-ucache-inplace"];

#[derive(Parser, Clone)]
pub struct TpccArgs {
    /// Where the databases live (one directory per placement; kept between runs).
    #[arg(long, default_value = "target/kv-tpcc")]
    dir: PathBuf,
    #[arg(long, default_value_t = 1)]
    warehouses: u32,
    /// Items (the specification's 100,000; fewer for quick runs).
    #[arg(long, default_value_t = 100_000)]
    items: u32,
    /// Customers and initial orders per district (the specification's 3,000).
    #[arg(long, default_value_t = 3_000)]
    customers: u32,
    #[arg(long, default_value_t = 1 << 30)]
    memory_in: u64,
    #[arg(long, default_value_t = 32 << 20)]
    memory_out: u64,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 2)]
    reps: usize,
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Durability modes (comma-separated): nosync, sync (as in `bench`).
    #[arg(long, default_value = "nosync")]
    durability: String,
    /// Memory the cgroup allows beyond the budget, for the process itself (more than
    /// `bench`'s: the limit also holds the log's dirty page cache and the check's tables of a
    /// district; with 8 MiB, and with 32 MiB once the store read its data `O_DIRECT` and ran
    /// 2,400 tx/s out of memory, the checked runs were killed by the cgroup). Only the store
    /// runs here, so no baseline caches in it.
    #[arg(long, default_value_t = 64 << 20)]
    slack: u64,
    /// Check the consistency conditions after the last repetition's runs.
    #[arg(long)]
    check: bool,
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Parser)]
pub struct TpccWorkerArgs {
    #[arg(long)]
    system: String,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    memory: u64,
    #[arg(long)]
    warehouses: u32,
    #[arg(long)]
    items: u32,
    #[arg(long)]
    customers: u32,
    /// Load the database instead of measuring.
    #[arg(long)]
    load: bool,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    #[arg(long, default_value = "nosync")]
    durability: String,
    #[arg(long)]
    check: bool,
    #[arg(long)]
    cgroup: Option<PathBuf>,
}

/// One TPC-C measurement.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TpccResult {
    system: String,
    workload: String,
    size: String,
    durability: String,
    threads: usize,
    warehouses: u32,
    data_bytes: u64,
    memory_bytes: u64,
    /// Committed transactions of all five types per second (rollbacks not counted).
    ops_per_sec: f64,
    /// New-Order transactions per minute (TPC-C's tpmC, without its timing rules).
    new_orders_per_min: f64,
    cpu_us_per_op: f64,
    /// Per type, in [`TYPES`] order: transactions run.
    per_type: Vec<u64>,
    rollbacks: u64,
    /// Of the threads' time: waiting for the log, and in misses (eviction and reads).
    log_share: f64,
    miss_share: f64,
    evictions: u64,
    writebacks: u64,
    /// Whether the consistency conditions held after the run (None: not checked).
    consistent: Option<bool>,
}

fn scale(w: u32, items: u32, customers: u32) -> Scale {
    Scale {
        warehouses: w,
        items,
        customers,
    }
}

fn open(system: &str, dir: &Path, memory: u64, sync: bool) -> Kv {
    let mut o = KvOptions::in_dir_direct(dir);
    o.memory_bytes = memory;
    o.placement = match system {
        "kv-ucache-pool" => Placement::Pool,
        _ => Placement::InPlace,
    };
    o.sync_commits = sync;
    // 512 MiB of pages (TPC-C grows as it runs): the per-page tables (states, LSNs) stay
    // small inside the out-of-memory cgroup.
    o.capacity_pages = 1 << 17;
    o.checkpoint_bytes = 256 << 20;
    Kv::open(o).expect("open ucache-kv")
}

/// Total nanoseconds of the misses in a latency histogram (each bucket at its midpoint).
fn miss_ns(h: &[u64]) -> f64 {
    h.iter()
        .enumerate()
        .map(|(i, &n)| n as f64 * 1.5 * (1u64 << i) as f64)
        .sum()
}

pub fn worker(a: TpccWorkerArgs) {
    if let Some(cg) = &a.cgroup {
        cgroup::join(cg).expect("join the memory cgroup");
    }
    let s = scale(a.warehouses, a.items, a.customers);
    let kv = open(&a.system, &a.dir, a.memory, a.durability == "sync");
    if a.load {
        tpcc::load(&kv, s, &mut rand::rngs::StdRng::seed_from_u64(7)).expect("load");
        kv.close().expect("close");
        return;
    }
    let driver = Driver::new(&kv, s).expect("driver");
    let measuring = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let (mut st0, mut log0, mut t0, mut cpu0) = (None, 0, Instant::now(), self_cpu());
    let counts: Vec<[u64; 6]> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..a.threads)
            .map(|t| {
                let (kv, driver, measuring, stop) = (&kv, &driver, &measuring, &stop);
                sc.spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(t as u64 + 1);
                    let mut n = [0u64; 6];
                    while !stop.load(Ordering::Relaxed) {
                        let tx = tpcc::pick(&mut rng);
                        let w = rng.gen_range(1..=s.warehouses);
                        let ok = driver.run(kv, tx, w, &mut rng).expect("transaction");
                        if measuring.load(Ordering::Relaxed) {
                            n[TYPES.iter().position(|x| *x == tx).unwrap()] += 1;
                            n[5] += u64::from(!ok);
                        }
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(Duration::from_secs_f64(a.warmup));
        st0 = Some(kv.mapping().stats());
        log0 = kv.log_wait_ns();
        (t0, cpu0) = (Instant::now(), self_cpu());
        measuring.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs_f64(a.seconds));
        measuring.store(false, Ordering::Relaxed);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // The counters after the threads stopped: a little of their last transaction is past
    // the measured window, which the shares below count against it.
    let wall = t0.elapsed().as_nanos() as f64;
    let cpu = (self_cpu() - cpu0).as_secs_f64();
    let (st0, st1) = (st0.unwrap(), kv.mapping().stats());
    let log = (kv.log_wait_ns() - log0) as f64;
    let missed: Vec<u64> = st1
        .miss_latency
        .iter()
        .zip(&st0.miss_latency)
        .map(|(a, b)| a - b)
        .collect();
    let mut per = [0u64; 6];
    for c in &counts {
        for i in 0..6 {
            per[i] += c[i];
        }
    }
    let committed = per[..5].iter().sum::<u64>() - per[5];
    let consistent = a.check.then(|| {
        let bad = tpcc::check(&kv, s).expect("check");
        for b in &bad {
            eprintln!("inconsistent: {b}");
        }
        bad.is_empty()
    });
    kv.checkpoint().expect("checkpoint");
    let r = TpccResult {
        system: a.system.clone(),
        workload: "tpcc".into(),
        size: String::new(),
        durability: a.durability.clone(),
        threads: a.threads,
        warehouses: a.warehouses,
        data_bytes: 0,
        memory_bytes: a.memory,
        ops_per_sec: committed as f64 / a.seconds,
        new_orders_per_min: (per[0] - per[5]) as f64 * 60.0 / a.seconds,
        cpu_us_per_op: cpu * 1e6 / committed.max(1) as f64,
        per_type: per[..5].to_vec(),
        rollbacks: per[5],
        log_share: log / (wall * a.threads as f64),
        miss_share: miss_ns(&missed) / (wall * a.threads as f64),
        evictions: st1.evictions - st0.evictions,
        writebacks: st1.writebacks - st0.writebacks,
        consistent,
    };
    println!("RESULT {}", serde_json::to_string(&r).unwrap());
}

pub fn bench(a: TpccArgs) {
    let common = |s: &str| -> Vec<String> {
        vec![
            "tpcc-worker".into(),
            "--system".into(),
            s.into(),
            "--dir".into(),
            a.dir
                .join(format!(
                    "{s}-w{}-i{}-c{}",
                    a.warehouses, a.items, a.customers
                ))
                .to_string_lossy()
                .into(),
            "--warehouses".into(),
            a.warehouses.to_string(),
            "--items".into(),
            a.items.to_string(),
            "--customers".into(),
            a.customers.to_string(),
        ]
    };
    let dir_of = |s: &str| PathBuf::from(&common(s)[4]);
    let mut sizes = Vec::new();
    for s in SYSTEMS {
        let d = dir_of(s);
        let what = format!("TPC-C ({} warehouses) into {s}", a.warehouses);
        crate::load_once(&d, &what, |_| {
            let mut args = common(s);
            args.extend(["--memory".into(), a.memory_in.to_string(), "--load".into()]);
            args
        });
        let kv = open(s, &d, 64 << 20, false);
        sizes.push(kv.pages_used().unwrap() * 4096);
        eprintln!("{s}: {:.1} MiB of pages", sizes.last().unwrap() / 1048576);
    }
    let modes: Vec<String> = a.durability.split(',').map(str::to_string).collect();
    let classes = [("in-memory", a.memory_in), ("out-of-memory", a.memory_out)];
    let total = (a.reps * modes.len() * classes.len() * SYSTEMS.len()) as u64;
    let bar = ProgressBar::new(total);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} (eta {eta})").unwrap());
    let mut results: Vec<TpccResult> = Vec::new();
    for rep in 0..a.reps {
        for mode in &modes {
            for (class, memory) in classes {
                for (si, s) in SYSTEMS.iter().enumerate() {
                    bar.set_message(format!("rep {rep} {mode} {class} {s}"));
                    let d = dir_of(s);
                    let mut args = common(s);
                    args.extend(crate::run_args(
                        memory, a.threads, a.seconds, a.warmup, mode,
                    ));
                    if a.check && rep + 1 == a.reps {
                        args.push("--check".into());
                    }
                    let files = [d.join("data"), d.join("wal")];
                    if let Some(mut r) =
                        crate::run_cold::<TpccResult>(&files, memory + a.slack, args)
                    {
                        r.size = class.into();
                        r.data_bytes = sizes[si];
                        results.push(r);
                    }
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    println!(
        "| durability | size | system | tx/s (mean) | per rep | New-Orders/min | CPU µs/tx | log share | miss (evict+read) share | evictions/s | consistent |"
    );
    println!("|---|---|---|---:|---|---:|---:|---:|---:|---:|---|");
    for mode in &modes {
        for (class, _) in classes {
            for s in SYSTEMS {
                let rs: Vec<&TpccResult> = results
                    .iter()
                    .filter(|r| &r.durability == mode && r.size == class && r.system == s)
                    .collect();
                if rs.is_empty() {
                    continue;
                }
                let m = |f: &dyn Fn(&TpccResult) -> f64| {
                    rs.iter().map(|r| f(r)).sum::<f64>() / rs.len() as f64
                };
                let each: Vec<String> =
                    rs.iter().map(|r| format!("{:.0}", r.ops_per_sec)).collect();
                let consistent: Vec<String> = rs
                    .iter()
                    .filter_map(|r| r.consistent.map(|c| c.to_string()))
                    .collect();
                println!(
                    "| {mode} | {class} | {s} | {:.0} | {} | {:.0} | {:.1} | {:.1}% | {:.1}% | {:.0} | {} |",
                    m(&|r| r.ops_per_sec),
                    each.join(", "),
                    m(&|r| r.new_orders_per_min),
                    m(&|r| r.cpu_us_per_op),
                    m(&|r| r.log_share * 100.0),
                    m(&|r| r.miss_share * 100.0),
                    m(&|r| r.evictions as f64 / a.seconds),
                    if consistent.is_empty() { "-".into() } else { consistent.join(", ") },
                );
            }
        }
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&results).unwrap()).unwrap();
        eprintln!("wrote {}", p.display());
    }
    if results.iter().any(|r| r.consistent == Some(false)) {
        eprintln!("TPC-C consistency check FAILED");
        std::process::exit(1);
    }
}
