//! `ucache-kv bench`: the store on ucache against LMDB, on the same machine, in one run.
//!
//! Every measurement runs in its own worker process (this binary, `worker`), inside a memory
//! cgroup of the run's budget (plus what the process needs besides its cache: `slack`), with the data
//! files dropped from the page cache first: LMDB is held to the budget, and the store's own
//! file reads cannot hide in the page cache either. Systems and workloads are interleaved
//! within each repetition, so drift on a shared machine hits them alike.

mod mmap;
mod systems;
mod tpcc;
mod tpcc_bench;
mod workload;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use ucache_cli::bench::cgroup::{self, MemCgroup};
use ucache_cli::bench::cpu::self_cpu;
use ucache_cli::bench::datafile::drop_page_cache;
use ucache_cli::bench::plot::{write_panels, Bar};

use systems::{KvMmap, KvUcache, Lmdb, System};
use ucache_kv::Placement;

/// Every system the bench knows, in the order a repetition runs them. The store reads its
/// data file `O_DIRECT` ([`KvOptions::in_dir_direct`]); `kv-ucache-pool-buffered` is the pool
/// through the page cache instead ([`KvOptions::in_dir`]), for comparison.
const SYSTEMS: [&str; 5] = [
    "kv-ucache-pool",
    "kv-ucache-pool-buffered",
    "kv-ucache-inplace",
    "kv-mmap",
    "lmdb",
];
/// The systems of a run when `--systems` is not given.
const DEFAULT_SYSTEMS: &str = "kv-ucache-pool,kv-ucache-inplace,kv-mmap,lmdb";
/// Memory a system's cgroup allows beyond the budget: what the process needs besides its
/// cache, so that every system caches about the budget's worth of pages. The store on ucache
/// caches in its own memory and needs room for its page tables, heap and threads (1.7 MiB
/// measured at a 12 MiB budget) and for its log's dirty pages in the page cache (with 4 MiB
/// in all, YCSB A and F were killed by the cgroup); LMDB and kv-mmap cache in the kernel's
/// page cache, charged to the same cgroup, and need almost nothing else (0.1 and 1.0 MiB of
/// anonymous memory). With 8 MiB for every system, LMDB held 19.4 MiB of pages where the
/// store held 12 (docs/results/2026-11-26-kv-direct); the table's `cgroup anon + file`
/// column shows what each one held.
fn slack(system: &str) -> u64 {
    if on_ucache(system) {
        8 << 20
    } else {
        2 << 20
    }
}

#[derive(Parser)]
#[command(name = "ucache-kv", about = "The ucache-kv store's benchmark")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs every system on every workload, in memory and out of memory.
    Bench(BenchArgs),
    /// One measurement (run by `bench`).
    #[command(hide = true)]
    Worker(WorkerArgs),
    /// TPC-C on each placement, in memory and out of memory.
    Tpcc(tpcc_bench::TpccArgs),
    /// One TPC-C measurement or load (run by `tpcc`).
    #[command(hide = true)]
    TpccWorker(tpcc_bench::TpccWorkerArgs),
}

#[derive(Parser, Clone)]
struct BenchArgs {
    /// Where the data sets live (one directory per system; kept between runs).
    #[arg(long, default_value = "target/kv-bench")]
    dir: PathBuf,
    /// Keys (8 bytes each, 120-byte values).
    #[arg(long, default_value_t = 400_000)]
    keys: u64,
    /// The in-memory budget (larger than the data).
    #[arg(long, default_value_t = 512 << 20)]
    memory_in: u64,
    /// The out-of-memory budget (data at least 4 times larger).
    #[arg(long, default_value_t = 16 << 20)]
    memory_out: u64,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Measured seconds per run, after `warmup` seconds.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Workloads (comma-separated): lookup (uniform point gets), and ycsb-a, ycsb-b, ycsb-c,
    /// ycsb-e (scans and inserts), ycsb-f (read-modify-writes), each with Zipf(0.99) keys, or
    /// uniform keys with the suffix -uniform (ycsb-e-uniform).
    #[arg(long, default_value = "lookup,ycsb-a,ycsb-b,ycsb-c,ycsb-e,ycsb-f")]
    workloads: String,
    /// Durability modes (comma-separated): nosync (the store's commits logged but not synced,
    /// LMDB with MDB_NOSYNC), sync (each commit durable when it returns: the store syncs its
    /// log with group commit, LMDB keeps its default sync). In sync mode only the workloads
    /// that write run, and not kv-mmap, which has no log.
    #[arg(long, default_value = "nosync")]
    durability: String,
    /// Systems (comma-separated): kv-ucache-pool, kv-ucache-pool-buffered, kv-ucache-inplace,
    /// kv-mmap, lmdb.
    #[arg(long, default_value = DEFAULT_SYSTEMS)]
    systems: String,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write an SVG bar chart here: a panel per durability, size and workload.
    #[arg(long)]
    svg: Option<PathBuf>,
}

#[derive(Parser)]
struct WorkerArgs {
    #[arg(long)]
    system: String,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    keys: u64,
    #[arg(long)]
    memory: u64,
    #[arg(long)]
    workload: Option<String>,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Join this memory cgroup first.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// sync or nosync.
    #[arg(long, default_value = "nosync")]
    durability: String,
}

/// One measurement, in the shape the issue asks for (plus the size class and durability).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Measurement {
    system: String,
    workload: String,
    size: String,
    durability: String,
    threads: usize,
    data_bytes: u64,
    memory_bytes: u64,
    ops_per_sec: f64,
    cpu_us_per_op: f64,
    p99_us: f64,
    /// Anonymous memory and page cache in the worker's cgroup at the end of the run: where
    /// each system kept its cached pages (ucache in its own memory, LMDB and kv-mmap in the
    /// kernel's page cache, up to the cgroup's slack beyond the budget).
    #[serde(default)]
    cgroup_anon_bytes: Option<u64>,
    #[serde(default)]
    cgroup_file_bytes: Option<u64>,
}

fn open(system: &str, dir: &Path, memory: u64, sync: bool) -> Box<dyn System> {
    match system {
        "kv-ucache-pool" => Box::new(KvUcache::open(dir, memory, Placement::Pool, sync, true)),
        "kv-ucache-pool-buffered" => {
            Box::new(KvUcache::open(dir, memory, Placement::Pool, sync, false))
        }
        "kv-ucache-inplace" => {
            Box::new(KvUcache::open(dir, memory, Placement::InPlace, sync, true))
        }
        "kv-mmap" => Box::new(KvMmap::open(dir)),
        "lmdb" => Box::new(Lmdb::open(dir, sync)),
        s => panic!("unknown system {s}"),
    }
}

/// Whether `system` is this store on ucache (its files are `data` and `wal`).
fn on_ucache(system: &str) -> bool {
    system.starts_with("kv-ucache-")
}

/// The bytes of a system's data files.
fn data_bytes(system: &str, dir: &Path) -> u64 {
    match system {
        s if on_ucache(s) => {
            // Pages in use, not the sparse file's length.
            let kv = KvUcache::open(dir, 64 << 20, Placement::InPlace, false, false);
            kv.0.pages_used().unwrap() * 4096
        }
        "kv-mmap" => {
            let mut first = [0u8; 64];
            let f = std::fs::File::open(dir.join("data.mmap")).unwrap();
            std::os::unix::fs::FileExt::read_at(&f, &mut first, 0).unwrap();
            ucache_kv::meta::next_page(&first[..]) * 4096
        }
        _ => std::fs::metadata(dir.join("data.mdb")).map_or(0, |m| m.len()),
    }
}

fn data_files(system: &str, dir: &Path) -> Vec<PathBuf> {
    match system {
        s if on_ucache(s) => vec![dir.join("data"), dir.join("wal")],
        "kv-mmap" => vec![dir.join("data.mmap")],
        _ => vec![dir.join("data.mdb")],
    }
}

fn worker(a: WorkerArgs) {
    if let Some(cg) = &a.cgroup {
        cgroup::join(cg).expect("join the memory cgroup");
    }
    let sys = open(&a.system, &a.dir, a.memory, a.durability == "sync");
    let Some(w) = a.workload else {
        let bar = ProgressBar::new(a.keys);
        sys.load(a.keys, &|n| workload::value(n, 0), &|n| bar.set_position(n));
        bar.finish_and_clear();
        return;
    };
    let cpu0 = self_cpu();
    let (ops, hist) = workload::run(&*sys, &w, a.keys, a.threads, a.warmup, a.seconds);
    let cpu = (self_cpu() - cpu0).as_secs_f64();
    let mem = a.cgroup.as_deref().and_then(cgroup::anon_and_file);
    sys.finish();
    // CPU includes the warmup: scale it to the measured share of the time.
    let share = a.seconds / (a.seconds + a.warmup);
    let m = Measurement {
        system: a.system.clone(),
        workload: w,
        size: String::new(),
        durability: a.durability.clone(),
        threads: a.threads,
        data_bytes: 0,
        memory_bytes: a.memory,
        ops_per_sec: ops as f64 / a.seconds,
        cpu_us_per_op: cpu * share * 1e6 / ops.max(1) as f64,
        p99_us: hist.quantile(0.99) / 1000.0,
        cgroup_anon_bytes: mem.map(|m| m.0),
        cgroup_file_bytes: mem.map(|m| m.1),
    };
    println!("RESULT {}", serde_json::to_string(&m).unwrap());
}

/// Loads a data set into `dir` once, through a worker process started with `worker_args(dir)`,
/// and keeps it between runs. The marker it leaves names the store's format, so data written
/// by a build of another format (which the store refuses, and kv-mmap would silently start
/// over on) is loaded again instead of failing or measuring an empty store.
pub fn load_once(dir: &Path, what: &str, worker_args: impl FnOnce(&Path) -> Vec<String>) {
    let marker = dir.join("loaded");
    let format = format!("{:x}", ucache_kv::meta::MAGIC);
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(format.as_str()) {
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    eprintln!("loading {what} ...");
    let t = Instant::now();
    let st = Command::new(std::env::current_exe().unwrap())
        .args(worker_args(dir))
        .status()
        .unwrap();
    assert!(st.success(), "loading {what} failed");
    std::fs::write(&marker, &format).unwrap();
    eprintln!("  {:.1} s", t.elapsed().as_secs_f64());
}

/// The arguments every measuring worker takes: its budget, threads, times and durability.
pub fn run_args(memory: u64, threads: usize, seconds: f64, warmup: f64, mode: &str) -> Vec<String> {
    vec![
        "--memory".into(),
        memory.to_string(),
        "--threads".into(),
        threads.to_string(),
        "--seconds".into(),
        seconds.to_string(),
        "--warmup".into(),
        warmup.to_string(),
        "--durability".into(),
        mode.to_string(),
    ]
}

/// Runs one measurement cold: drops `files` from the page cache, then runs the worker `args`
/// (a worker subcommand and its arguments) in a fresh memory cgroup of `limit` bytes when one
/// can be made (`--cgroup` is appended), and removes the cgroup afterwards.
pub fn run_cold<T: serde::de::DeserializeOwned>(
    files: &[PathBuf],
    limit: u64,
    mut args: Vec<String>,
) -> Option<T> {
    for f in files {
        let _ = drop_page_cache(f, false);
    }
    let cg = MemCgroup::create(limit).ok();
    if let Some(cg) = &cg {
        args.push("--cgroup".into());
        args.push(cg.dir().to_string_lossy().into());
    }
    let result = run_worker_raw(&args);
    if let Some(cg) = cg {
        cg.remove();
    }
    result
}

/// Runs this binary with `args` (a worker subcommand and its arguments) and parses the
/// `RESULT` line it prints; `None` (with the worker's error printed) if it failed.
pub fn run_worker_raw<T: serde::de::DeserializeOwned>(args: &[String]) -> Option<T> {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(args)
        .output()
        .expect("spawn worker");
    if !out.status.success() {
        eprintln!(
            "worker {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(|j| serde_json::from_str(j).unwrap())
}

fn bench(a: BenchArgs) {
    let workloads: Vec<String> = a.workloads.split(',').map(str::to_string).collect();
    for w in &workloads {
        assert!(workload::Mix::parse(w).is_some(), "unknown workload {w}");
    }
    let modes: Vec<String> = a.durability.split(',').map(str::to_string).collect();
    for m in &modes {
        assert!(m == "sync" || m == "nosync", "unknown durability {m}");
    }
    let chosen: Vec<&str> = a.systems.split(',').collect();
    for c in &chosen {
        assert!(SYSTEMS.contains(c), "unknown system {c}");
    }
    let systems: Vec<&'static str> = SYSTEMS.into_iter().filter(|s| chosen.contains(s)).collect();
    // What runs, in the order it runs within a repetition.
    let mut cells = Vec::new();
    for m in &modes {
        for (class, memory) in [("in-memory", a.memory_in), ("out-of-memory", a.memory_out)] {
            for w in &workloads {
                let sync = m == "sync";
                if sync && !workload::Mix::parse(w).unwrap().writes() {
                    continue;
                }
                for &s in &systems {
                    if sync && s == "kv-mmap" {
                        continue;
                    }
                    cells.push((m.clone(), class, memory, w.clone(), s));
                }
            }
        }
    }
    let dir_of = |s: &str| a.dir.join(format!("{s}-{}", a.keys));
    let mut sizes = Vec::new();
    for &s in &systems {
        let d = dir_of(s);
        load_once(&d, &format!("{} keys into {s}", a.keys), |d| {
            let mut args: Vec<String> =
                ["worker", "--system", s, "--keys"].map(String::from).into();
            args.extend([
                a.keys.to_string(),
                "--memory".into(),
                a.memory_in.to_string(),
            ]);
            args.extend(["--dir".into(), d.display().to_string()]);
            args
        });
        sizes.push(data_bytes(s, &d));
    }
    for (s, b) in systems.iter().zip(&sizes) {
        eprintln!("{s}: {:.1} MiB of data", *b as f64 / (1 << 20) as f64);
    }
    let total = (a.reps * cells.len()) as u64;
    let bar = ProgressBar::new(total);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} {msg} (eta {eta})").unwrap());
    let mut results: Vec<Measurement> = Vec::new();
    for rep in 0..a.reps {
        for (mode, class, memory, w, s) in &cells {
            bar.set_message(format!("rep {rep} {mode} {class} {w} {s}"));
            let si = systems.iter().position(|x| x == s).unwrap();
            let d = dir_of(s);
            let mut args: Vec<String> = vec![
                "worker".into(),
                "--system".into(),
                s.to_string(),
                "--dir".into(),
                d.to_string_lossy().into(),
                "--keys".into(),
                a.keys.to_string(),
                "--workload".into(),
                w.clone(),
            ];
            args.extend(run_args(*memory, a.threads, a.seconds, a.warmup, mode));
            if let Some(mut m) =
                run_cold::<Measurement>(&data_files(s, &d), memory + slack(s), args)
            {
                m.size = class.to_string();
                m.data_bytes = sizes[si];
                results.push(m);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let groups = report(&results);
    if let Some(p) = a.json {
        std::fs::write(&p, serde_json::to_string_pretty(&results).unwrap()).unwrap();
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = a.svg {
        match plot(&p, &groups, a.threads) {
            Ok(()) => eprintln!("wrote {}", p.display()),
            Err(e) => eprintln!("{e}"),
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The measurements of one cell (durability, size, workload), per system in `SYSTEMS` order,
/// in the order they first ran.
type Group<'a> = (
    (String, String, String),
    Vec<(&'static str, Vec<&'a Measurement>)>,
);

fn group(results: &[Measurement]) -> Vec<Group<'_>> {
    let mut cells: Vec<(String, String, String)> = Vec::new();
    for m in results {
        let c = (m.durability.clone(), m.size.clone(), m.workload.clone());
        if !cells.contains(&c) {
            cells.push(c);
        }
    }
    cells
        .into_iter()
        .map(|c| {
            let per = SYSTEMS
                .iter()
                .map(|&s| {
                    let ms = results
                        .iter()
                        .filter(|m| {
                            (&m.durability, &m.size, &m.workload) == (&c.0, &c.1, &c.2)
                                && m.system == s
                        })
                        .collect::<Vec<_>>();
                    (s, ms)
                })
                .filter(|(_, ms)| !ms.is_empty())
                .collect();
            (c, per)
        })
        .collect()
}

fn ops(ms: &[&Measurement]) -> Vec<f64> {
    ms.iter().map(|m| m.ops_per_sec).collect()
}

/// Prints the table (means of the repetitions, each repetition, and the ratio to LMDB) and
/// returns the cells for the plot.
fn report(results: &[Measurement]) -> Vec<Group<'_>> {
    let groups = group(results);
    println!(
        "| durability | size | workload | system | ops/s (mean of reps) | per rep | CPU µs/op | p99 µs | cgroup anon + file MiB | vs lmdb |"
    );
    println!("|---|---|---|---|---:|---|---:|---:|---:|---:|");
    for ((mode, class, w), per) in &groups {
        let base = per
            .iter()
            .find(|(s, _)| *s == "lmdb")
            .map_or(f64::NAN, |(_, ms)| mean(&ops(ms)));
        for (s, ms) in per {
            let o = ops(ms);
            let each: Vec<String> = o.iter().map(|x| format!("{x:.0}")).collect();
            let mib = |f: fn(&Measurement) -> Option<u64>| {
                let v: Vec<f64> = ms.iter().filter_map(|m| f(m)).map(|b| b as f64).collect();
                mean(&v) / (1 << 20) as f64
            };
            println!(
                "| {mode} | {class} | {w} | {s} | {:.0} | {} | {:.2} | {:.1} | {:.1} + {:.1} | {:.2}× |",
                mean(&o),
                each.join(", "),
                mean(&ms.iter().map(|m| m.cpu_us_per_op).collect::<Vec<_>>()),
                mean(&ms.iter().map(|m| m.p99_us).collect::<Vec<_>>()),
                mib(|m| m.cgroup_anon_bytes),
                mib(|m| m.cgroup_file_bytes),
                mean(&o) / base
            );
        }
    }
    groups
}

/// The SVG: one panel per cell, four to a row, each bar a system's mean with its repetitions
/// as dots and its ratio to LMDB.
fn plot(path: &Path, groups: &[Group<'_>], threads: usize) -> Result<(), String> {
    let panels: Vec<(String, Vec<Bar>)> = groups
        .iter()
        .map(|((mode, class, w), per)| {
            let base = per
                .iter()
                .find(|(s, _)| *s == "lmdb")
                .map(|(_, ms)| mean(&ops(ms)));
            let bars = per
                .iter()
                .map(|(s, ms)| {
                    let o = ops(ms);
                    let note = match base {
                        Some(b) if *s != "lmdb" => format!(" ({:.2}x)", mean(&o) / b),
                        _ => String::new(),
                    };
                    Bar {
                        name: s.to_string(),
                        value: mean(&o),
                        reps: o,
                        note,
                    }
                })
                .collect();
            (format!("{w}, {class}, {mode}, {threads} threads"), bars)
        })
        .collect();
    let cols = panels.len().clamp(1, 4);
    let rows = panels.len().div_ceil(cols).max(1);
    write_panels(
        path,
        (620 * cols as u32, 420 * rows as u32),
        (rows, cols),
        &panels,
        "ops/s (mean of reps; dots: each rep; x: vs lmdb)",
    )
}

fn main() {
    match Cli::parse().cmd {
        Cmd::Bench(a) => bench(a),
        Cmd::Worker(a) => worker(a),
        Cmd::Tpcc(a) => tpcc_bench::bench(a),
        Cmd::TpccWorker(a) => tpcc_bench::worker(a),
    }
}
