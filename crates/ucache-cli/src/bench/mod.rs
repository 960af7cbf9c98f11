//! `ucache bench`: one workload through several systems, interleaved, each run in its own
//! worker process, with the method of DESIGN.md ("Benchmarks are part of the product").
//!
//! The order of steps is what makes numbers from a noisy, shared, host-cached machine
//! comparable: one fully written data file; one O_DIRECT pass so the host cache holds all of
//! it; a cold page cache and the same memory budget for every system; systems interleaved
//! within each rep so drift on the machine hits them all alike; and the CPU taken by other
//! processes recorded beside every figure.

pub mod cgroup;
pub mod cold;
pub mod cpu;
pub mod datafile;
pub mod latency;
pub mod plot;
pub mod report;
pub mod role;
pub mod s3data;
pub mod sweep;
pub mod system;
pub mod worker;
pub mod workload;
pub mod zipf;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use self::cgroup::MemCgroup;
use self::report::{Report, RunResult};
use self::system::{StoreKind, SystemKind, SystemRow};
use self::workload::Workload;
use crate::size::{format_size, parse_size};

#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// lookup: random 8-byte reads, one random buffer per op; seq: a shared cursor sweeps the
    /// buffers, reading every 4 KiB page of each (the paper's Figure 6); zipf: lookups with
    /// Zipf(0.99) skew. cache_ext's workloads (ucache-explicit; getscan and search also mmap
    /// and pread): ycsb-a|b|c (Zipf, 50%/5%/0% updates), getscan (half the threads Zipf GETs,
    /// half scans with Hint::SCAN), search (all threads sweep the file again and again),
    /// tenants (two mappings sharing the budget: A Zipf lookups, B scans).
    #[arg(value_enum)]
    pub workload: Workload,
    /// Size of the data file (suffixes K, M, G, KiB, MiB, GiB are all powers of 1024).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub data: u64,
    /// Memory budget: ucache's cache size, and the memory cgroup limit of mmap and pread.
    #[arg(long, default_value = "128MiB", value_parser = parse_size)]
    pub memory: u64,
    /// Threads issuing ops (may exceed the core count).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Buffer size: the unit of caching and IO (a power of two, at least 4KiB).
    #[arg(long, default_value = "4KiB", value_parser = parse_size)]
    pub buffer_size: u64,
    /// Measured seconds per run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Warm-up seconds per run, before measuring.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Repetitions; each rep runs every system once, interleaved.
    #[arg(long, default_value_t = 2)]
    pub reps: usize,
    /// The store under ucache: file, uring, or s3://bucket/key (an object, uploaded with the
    /// data pattern if missing; systems that read the local file are left out and raw-get,
    /// direct ranged GETs at the same concurrency, is added). Credentials come from
    /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY.
    #[arg(long, value_parser = StoreKind::parse, default_value = "file")]
    pub store: StoreKind,
    /// S3 endpoint for --store s3://… (default: AWS_ENDPOINT_URL or UCACHE_S3_ENDPOINT).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Loads in flight per thread of ucache-prefetch (its `pin_each` depth), and GETs in
    /// flight per thread of raw-get.
    #[arg(long, default_value_t = system::PREFETCH_BATCH)]
    pub prefetch_depth: usize,
    /// ucache systems: buffers evicted per batch (`CacheOptions::batch`): larger batches
    /// spread one `process_madvise` and its TLB shootdown over more misses [default: the
    /// library's, 256 KiB of buffers (`ucache::CacheOptions::DEFAULT_BATCH_BYTES`)].
    #[arg(long)]
    pub eviction_batch: Option<usize>,
    /// ucache systems: switch the background evictor off
    /// (`CacheOptions::background_eviction(false)`), so that loaders evict every batch
    /// themselves.
    #[arg(long)]
    pub no_background_eviction: bool,
    /// ucache-pool systems: 4 KiB pages for the frame pool
    /// (`CacheOptions::pool_huge_pages(false)`) instead of transparent huge pages, to measure
    /// what huge pages buy.
    #[arg(long)]
    pub no_pool_huge_pages: bool,
    /// Data file (default: `/var/tmp/ucache-bench-<data>.dat`). Must be on a real disk (not
    /// tmpfs); created or rewritten if missing, of the wrong size, or not holding the pattern.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Write results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write an SVG bar chart here [default: the JSON path with .svg, else ./ucache-bench.svg].
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Systems to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = SystemKind::parse,
        default_value = "ucache-explicit,ucache-prefetch,ucache-transparent,mmap,pread,raw-psync,raw-uring"
    )]
    pub systems: Vec<SystemKind>,
    /// Run mmap and pread without a memory cgroup (they may then cache the whole file).
    #[arg(long)]
    pub no_cgroup: bool,
    /// Repeat the benchmark at each of these buffer sizes (comma-separated) and draw
    /// throughput against buffer size (the paper's Figure 6).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sweep_buffer_size: Vec<u64>,
    /// Repeat the benchmark at each of these memory budgets (comma-separated) and draw
    /// throughput against the budget (the paper's Figure 8).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sweep_memory: Vec<u64>,
    /// Repeat the benchmark at each of these prefetch depths (comma-separated) and draw
    /// throughput against the requests in flight (miss throughput over S3).
    #[arg(long, value_delimiter = ',')]
    pub sweep_prefetch_depth: Vec<usize>,
    /// ucache systems: run each once per eviction policy, as its own row
    /// (`ucache-explicit:lru`), comma-separated names of `ucache sim --policies`; for tenants
    /// `A+B` gives tenant A and B their own (`lfu+mru`) [default: CLOCK, one row].
    #[arg(long, value_delimiter = ',', value_parser = system::parse_policy_spec)]
    pub policies: Vec<String>,
    /// tenants: the weights (MapOptions::weight) of tenant A and tenant B: the default global
    /// policy evicts first from the tenant most over its weighted share of the memory.
    #[arg(long, value_delimiter = ',', default_value = "1,1")]
    pub tenant_weights: Vec<u32>,
    /// Record the buffer index of every op of an extra first run of the first system, warm-up
    /// included, as a trace for `ucache sim --format record`. That run is slowed by the
    /// recording, so it is not counted; threads' streams are interleaved round-robin.
    #[arg(long)]
    pub record: Option<PathBuf>,
}

/// What a finished benchmark hands back to `main` and `demo`.
pub struct Outcome {
    pub report: Report,
    /// Runs that failed outright (worker error, timeout).
    pub errors: Vec<String>,
    /// Total words that did not hold their offset, over all runs.
    pub mismatches: u64,
}

/// Longest `--seconds` or `--warmup` accepted: eleven days.
const MAX_SECONDS: f64 = 1e6;

impl BenchArgs {
    pub fn validate(&self) -> Result<(), String> {
        let bs = self.buffer_size;
        if !bs.is_power_of_two() || bs < 4096 {
            return Err(format!(
                "--buffer-size {bs}: must be a power of two of at least 4KiB"
            ));
        }
        if self.data < bs || !self.data.is_multiple_of(bs) {
            return Err(format!(
                "--data {}: must be a positive multiple of --buffer-size {}",
                format_size(self.data),
                format_size(bs)
            ));
        }
        if self.threads == 0 || self.reps == 0 {
            return Err("--threads and --reps must be at least 1".into());
        }
        // Bounded, so that every deadline derived from them is a valid Duration.
        let seconds_ok = self.seconds > 0.0 && self.seconds <= MAX_SECONDS;
        if !seconds_ok || !(0.0..=MAX_SECONDS).contains(&self.warmup) {
            return Err(format!(
                "--seconds must be > 0 and --warmup >= 0, both at most {MAX_SECONDS}"
            ));
        }
        if self.systems().is_empty() {
            return Err(format!(
                "--systems: none of them runs the {} workload (ycsb-* and tenants need ucache-explicit; getscan and search also run on mmap and pread)",
                self.workload.name()
            ));
        }
        if self.prefetch_depth == 0 {
            return Err("--prefetch-depth must be at least 1".into());
        }
        if self
            .eviction_batch
            .is_some_and(|b| !(1..=ucache::CacheOptions::MAX_BATCH).contains(&b))
        {
            return Err("--eviction-batch must be between 1 and 1024".into());
        }
        if self.tenant_weights.len() != 2 || self.tenant_weights.contains(&0) {
            return Err("--tenant-weights takes two weights of at least 1, like 3,1".into());
        }
        if self.workload != workload::Workload::Tenants
            && self.policies.iter().any(|p| p.contains('+'))
        {
            return Err("--policies A+B (a policy per tenant) is for the tenants workload".into());
        }
        if self.store.s3_url().is_none() && self.systems.contains(&SystemKind::RawGet) {
            return Err("raw-get needs --store s3://bucket/key".into());
        }
        // Found now, not after minutes of measurement whose results would then be lost.
        let json = self.json.iter().map(|j| ("--json", j.clone()));
        for (what, path) in json.chain([("the plot", self.plot_path())]) {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if !dir.is_dir() {
                return Err(format!(
                    "{what} {}: directory {} does not exist",
                    path.display(),
                    dir.display()
                ));
            }
        }
        Ok(())
    }

    pub fn data_path(&self) -> PathBuf {
        self.file.clone().unwrap_or_else(|| {
            PathBuf::from(format!(
                "/var/tmp/ucache-bench-{}.dat",
                format_size(self.data)
            ))
        })
    }

    pub fn plot_path(&self) -> PathBuf {
        self.plot.clone().unwrap_or_else(|| match &self.json {
            Some(j) => j.with_extension("svg"),
            None => PathBuf::from("ucache-bench.svg"),
        })
    }

    /// The sweep's line plot: `--plot`, else next to the JSON, else ./ucache-sweep.svg.
    pub fn sweep_plot_path(&self) -> PathBuf {
        self.plot.clone().unwrap_or_else(|| match &self.json {
            Some(j) => j.with_extension("svg"),
            None => PathBuf::from("ucache-sweep.svg"),
        })
    }

    /// Systems in the order given, each once. Over S3, the systems that read the local file
    /// are left out and raw-get, the baseline at the same concurrency, is always run. Systems
    /// that cannot run the workload are left out, so the default list works for every one.
    fn systems(&self) -> Vec<SystemKind> {
        let s3 = self.store.s3_url().is_some();
        let mut out = Vec::new();
        for &s in &self.systems {
            let skip = (s3 && s.needs_local_file()) || !s.supports(self.workload);
            if !skip && !out.contains(&s) {
                out.push(s);
            }
        }
        if s3 && !out.contains(&SystemKind::RawGet) {
            out.push(SystemKind::RawGet);
        }
        out
    }
}

fn bytes_bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(
            "{msg:>22} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Runs the benchmark, or the sweep of benchmarks the arguments ask for.
pub fn run_or_sweep(args: &BenchArgs) -> Result<Outcome, String> {
    match sweep::requested(args)? {
        Some((param, values)) => sweep::run(args, param, &values),
        None => run(args),
    }
}

/// Runs the benchmark: prints the preamble and the table on stdout, writes JSON and plot.
pub fn run(args: &BenchArgs) -> Result<Outcome, String> {
    args.validate()?;
    let kinds = args.systems();
    let systems = SystemRow::expand(&kinds, &args.policies);
    let path = args.data_path();

    // The data: an object in S3, or a local file and the host cache under it.
    let s3_upload = match args.store.s3_url() {
        Some(url) => {
            let why = s3data::ensure(url, args.endpoint.as_deref(), args.data)
                .map_err(|e| format!("object {url}: {e}"))?;
            if let Some(why) = &why {
                println!(
                    "object: uploaded {url} ({} of the offset pattern; was {why})",
                    format_size(args.data)
                );
            }
            Some(why)
        }
        None => None,
    };
    let (info, warm_bps) = if s3_upload.is_some() {
        (None, 0.0)
    } else {
        let pb = bytes_bar(args.data, "checking data file");
        let info = datafile::ensure(&path, args.data, |done| {
            pb.set_message("writing data file");
            pb.set_position(done)
        })
        .map_err(|e| format!("data file {}: {e}", path.display()))?;
        pb.finish_and_clear();
        if info.created {
            println!(
                "data file: wrote {} ({} of the offset pattern; was {})",
                path.display(),
                format_size(args.data),
                info.reason.as_deref().unwrap_or("?")
            );
        }
        let pb = bytes_bar(args.data, "O_DIRECT warm-up read");
        let warm_bps = datafile::warm_host_cache(&path, |done| pb.set_position(done))
            .map_err(|e| format!("O_DIRECT read of {}: {e}", path.display()))?;
        pb.finish_and_clear();
        (Some(info), warm_bps)
    };

    // The memory cgroup for the page-cache baselines.
    let wants_cgroup = kinds.iter().any(|s| s.uses_page_cache());
    let (cg, cgroup_status) = if !wants_cgroup {
        (
            None,
            "not needed (no page-cache system selected)".to_string(),
        )
    } else if args.no_cgroup {
        (None, "disabled (--no-cgroup)".to_string())
    } else {
        match MemCgroup::create(args.memory) {
            Ok(cg) => {
                let s = cg.describe();
                (Some(cg), s)
            }
            Err(why) => (None, format!("unavailable: {why}")),
        }
    };
    let drop_caches_ok =
        s3_upload.is_none() && datafile::drop_page_cache(&path, true).unwrap_or(false);

    println!(
        "ucache bench {}: data {} ({}), memory {}, {} threads, buffer {}, {} s measured + {} s warm-up, {} rep(s), store {}",
        args.workload.name(),
        format_size(args.data),
        path.display(),
        format_size(args.memory),
        args.threads,
        format_size(args.buffer_size),
        args.seconds,
        args.warmup,
        args.reps,
        args.store.name(),
    );
    if s3_upload.is_none() {
        println!(
            "host-cache warm-up: read the file with O_DIRECT at {:.0} MB/s",
            warm_bps / 1e6
        );
    } else {
        println!(
            "S3 endpoint {}, prefetch depth {} (raw-get: the same GETs in flight per thread)",
            args.endpoint.as_deref().map_or(
                "from the environment".into(),
                ucache_object::redact_endpoint
            ),
            args.prefetch_depth
        );
    }
    println!("cgroup for mmap/pread: {cgroup_status}");
    if cg.is_none() && wants_cgroup {
        println!("  -> mmap and pread run WITHOUT a memory limit: they may cache the whole file.");
    }
    if !drop_caches_ok && s3_upload.is_none() {
        println!(
            "drop_caches: not permitted; dropping the file's pages with fadvise(DONTNEED) only"
        );
    }

    let config = json!({
        "workload": args.workload.name(),
        "systems": systems.iter().map(|s| s.name()).collect::<Vec<_>>(),
        "data_bytes": args.data,
        "memory_bytes": args.memory,
        "threads": args.threads,
        "buffer_size": args.buffer_size,
        "seconds": args.seconds,
        "warmup": args.warmup,
        "reps": args.reps,
        "policies": args.policies,
        "tenant_weights": args.tenant_weights,
        "store": args.store.name(),
        "endpoint": args.endpoint.as_deref().map(ucache_object::redact_endpoint),
        "prefetch_depth": args.prefetch_depth,
        // A count of buffers, or the library's default in bytes.
        "eviction_batch": args.eviction_batch.map_or_else(
            || json!(format!("{} bytes", ucache::CacheOptions::DEFAULT_BATCH_BYTES)),
            |b| json!(b)
        ),
        "background_eviction": !args.no_background_eviction,
        "pool_huge_pages": !args.no_pool_huge_pages,
        "file": if s3_upload.is_some() { serde_json::Value::Null } else { json!(path) },
        "json": args.json,
        "plot": args.plot_path(),
        "no_cgroup": args.no_cgroup,
        "cgroup": cgroup_status,
        "drop_caches": if drop_caches_ok { "permitted" } else { "not permitted (fadvise DONTNEED only)" },
        "datafile": info.as_ref().map(|info| json!({
            "filesystem": info.filesystem,
            "created": info.created,
            "recreate_reason": info.reason,
        })),
        "s3_object": s3_upload.as_ref().map(|why| json!({
            "uploaded": why.is_some(),
            "upload_reason": why,
        })),
        "warm_read_bytes_per_sec": warm_bps,
        "machine": {
            "nproc": cpu::nproc(),
            "kernel": cpu::kernel_release(),
            "cpu_model": cpu::cpu_model(),
        },
        "method": {
            "latency_sampling": "1 in 8 ops, log-bucketed histogram (<= 1/16 relative error)",
            "others_cpu_pct": "CPU of all other processes during the measured interval, % of one core (/proc/stat busy minus the worker's rusage)",
            "median": "per metric over reps; even counts average the middle two",
            "raw_uring_queue_depth": system::URING_QUEUE_DEPTH,
            "prefetch_batch": system::PREFETCH_BATCH,
            "bytes_per_sec": "ops/s x buffer size",
        },
        "started_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "version": env!("CARGO_PKG_VERSION"),
    });

    // The runs: for rep { for system { run } }, the order reversed every other rep (ABC,
    // CBA, ...) so that a machine drifting faster or slower over the run favours no system.
    // A recorded run, slowed by its recording, comes first and is not counted.
    let mut plan: Vec<(usize, &SystemRow, bool)> = Vec::new();
    if args.record.is_some() {
        plan.push((0, &systems[0], true));
    }
    for rep in 0..args.reps {
        let mut order: Vec<&SystemRow> = systems.iter().collect();
        if rep % 2 == 1 {
            order.reverse();
        }
        plan.extend(order.into_iter().map(|row| (rep, row, false)));
    }
    let total = plan.len();
    let run_ms = ((args.warmup + args.seconds) * 1000.0) as u64 + 500;
    let pb = ProgressBar::new(total as u64 * run_ms);
    pb.set_style(
        ProgressStyle::with_template(
            "[{elapsed_precise}] [{bar:40}] {percent:>3}% eta {eta} {msg}",
        )
        .expect("template")
        .progress_chars("=> "),
    );
    pb.enable_steady_tick(Duration::from_millis(200));
    let mut runs: Vec<RunResult> = Vec::new();
    let mut errors = Vec::new();
    let mut n = 0;
    for (rep, row, recording) in plan {
        let sys = row.kind;
        pb.set_message(format!(
            "rep {}/{} {} ({}/{total})",
            rep + 1,
            args.reps,
            row.name(),
            n + 1
        ));
        let in_cgroup = cg.as_ref().filter(|_| sys.uses_page_cache());
        // Page-cache systems must start cold; the others do not read through it, but a
        // drop costs little and keeps the machine's memory state the same for every run.
        datafile::drop_page_cache(&path, sys.uses_page_cache() && drop_caches_ok).ok();
        if let Some(cg) = in_cgroup {
            cg.reset_peak();
        }
        let base = n as u64 * run_ms;
        let record = args.record.as_deref().filter(|_| recording);
        let res = run_worker(
            args,
            row,
            &path,
            in_cgroup.map(|c| c.dir()),
            record,
            |elapsed| pb.set_position(base + (elapsed.as_millis() as u64).min(run_ms)),
        );
        n += 1;
        pb.set_position(n as u64 * run_ms);
        match res {
            Ok(mut r) => {
                if let Some(cg) = in_cgroup {
                    r.cgroup_peak_bytes = cg.peak();
                    r.cgroup_limit_hits = cg.limit_hits();
                }
                pb.suspend(|| eprintln!("{}", run_line(rep, &r)));
                if r.mismatches > 0 {
                    pb.suspend(|| {
                        eprintln!(
                            "!!! CORRECTNESS FAILURE: {} read {} words that did not hold their offset; first: {}",
                            row.name(),
                            r.mismatches,
                            r.first_mismatch.as_deref().unwrap_or("?")
                        )
                    });
                }
                if !recording {
                    runs.push(r);
                }
            }
            Err(e) => {
                let msg = format!("rep {} {}: {e}", rep + 1, row.name());
                pb.suspend(|| eprintln!("run failed: {msg}"));
                errors.push(msg);
            }
        }
    }
    pb.finish_and_clear();
    drop(cg);

    let results = report::summarize(&systems, &runs);
    let mismatches = results.iter().map(|r| r.mismatches).sum();
    let mut config = config;
    config["errors"] = json!(errors);
    let report = Report { config, results };

    println!();
    print!("{}", report::table(&report.results));
    for r in report
        .results
        .iter()
        .filter(|r| r.system.kind != SystemKind::RawGet)
    {
        if let Some(x) = r.vs_raw_get {
            println!("{} vs raw-get: {x:.2}x", r.system.name());
        }
    }
    let roles = report::role_table(&report.results);
    if !roles.is_empty() {
        println!("\nper thread class (median over reps):");
        print!("{roles}");
    }
    let stats = report::cache_stats(&report.results);
    if !stats.is_empty() {
        println!();
        print!("{stats}");
    }
    for r in &report.results {
        if let Some(rep) = r
            .reps
            .iter()
            .find(|x| x.cgroup_peak_bytes.is_some_and(|p| p > args.memory))
        {
            println!(
                "warning: {} peaked at {} bytes in its cgroup, above the {} limit",
                r.system.name(),
                rep.cgroup_peak_bytes.unwrap_or(0),
                args.memory
            );
        }
    }
    if let Some(j) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(j, text + "\n").map_err(|e| format!("writing {}: {e}", j.display()))?;
        println!("\nJSON: {}", j.display());
    }
    if !report.results.is_empty() {
        let p = args.plot_path();
        match plot::write_svg(&p, &report.results) {
            Ok(()) => println!("plot: {}", p.display()),
            Err(e) => println!("plot failed: {e}"),
        }
    }
    Ok(Outcome {
        report,
        errors,
        mismatches,
    })
}

/// One line per finished run, on stderr, so a log shows progress even without a terminal.
fn run_line(rep: usize, r: &RunResult) -> String {
    let cg = match (r.cgroup_peak_bytes, r.cgroup_limit_hits) {
        (Some(p), Some(h)) => format!(", cgroup peak {} MiB, limit hit {h}x", p >> 20),
        (Some(p), None) => format!(", cgroup peak {} MiB", p >> 20),
        _ => String::new(),
    };
    format!(
        "rep {} {:<16} {:>12.0} ops/s  {:>7.2} cpu-µs/op  p99 {:>8.1} µs  others {:>3.0}%{cg}",
        rep + 1,
        r.system.name(),
        r.ops_per_sec,
        r.cpu_us_per_op,
        r.latency.p99_us,
        r.others_cpu_pct
    )
}

/// Re-executes this binary as `bench-worker` for one run and parses its JSON line.
fn run_worker(
    args: &BenchArgs,
    row: &SystemRow,
    path: &Path,
    cgroup: Option<&Path>,
    record: Option<&Path>,
    mut tick: impl FnMut(Duration),
) -> Result<RunResult, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("bench-worker")
        .args(["--system", row.kind.name()])
        .args(["--workload", args.workload.name()])
        .arg("--file")
        .arg(path)
        .args(["--data-bytes", &args.data.to_string()])
        .args(["--buffer-size", &args.buffer_size.to_string()])
        .args(["--memory-bytes", &args.memory.to_string()])
        .args(["--threads", &args.threads.to_string()])
        .args(["--seconds", &args.seconds.to_string()])
        .args(["--warmup", &args.warmup.to_string()])
        .args(["--store", args.store.name()])
        .args(["--prefetch-depth", &args.prefetch_depth.to_string()]);
    if let Some(b) = args.eviction_batch {
        cmd.args(["--eviction-batch", &b.to_string()]);
    }
    if args.no_background_eviction {
        cmd.arg("--no-background-eviction");
    }
    if args.no_pool_huge_pages {
        cmd.arg("--no-pool-huge-pages");
    }
    if let Some(e) = &args.endpoint {
        cmd.args(["--endpoint", e]);
    }
    if let Some(p) = &row.policy {
        cmd.args(["--policy", p]);
    }
    let weights: Vec<String> = args.tenant_weights.iter().map(u32::to_string).collect();
    cmd.args(["--tenant-weights", &weights.join(",")]);
    if let Some(cg) = cgroup {
        cmd.arg("--cgroup").arg(cg);
    }
    if let Some(r) = record {
        cmd.arg("--record").arg(r);
    }
    let oom_before = cgroup.and_then(cgroup::oom_kills).unwrap_or(0);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning worker: {e}"))?;
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = drain(Box::new(child.stdout.take().expect("piped")));
    let err = drain(Box::new(child.stderr.take().expect("piped")));

    // Setup (mapping, opening rings) is not measured but must not hang forever either.
    // Room for the longest fill (`worker::MAX_FILL`) besides setup and teardown.
    let limit =
        Duration::from_secs_f64(args.warmup + args.seconds + worker::MAX_FILL.as_secs_f64() + 60.0);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "worker did not finish within {:.0} s; killed",
                limit.as_secs_f64()
            ));
        }
        tick(start.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        // The group serves every run of the bench, so its count is compared with the one
        // before this run, and only a kill (SIGKILL) is blamed on it.
        let oom_killed = status.signal() == Some(libc::SIGKILL)
            && cgroup.and_then(cgroup::oom_kills).unwrap_or(0) > oom_before;
        if oom_killed {
            return Err(format!(
                "worker was killed by its memory cgroup's OOM killer: --memory {} is less than \
                 the process itself needs besides the page cache (a few MiB)",
                format_size(args.memory)
            ));
        }
        return Err(format!("worker exited with {status}: {}", err.trim()));
    }
    let line = out
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| format!("worker printed no result; stderr: {}", err.trim()))?;
    serde_json::from_str(line).map_err(|e| format!("bad worker output ({e}): {line}"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::Parser;

    use super::system::{SystemKind, SystemRow};
    use super::{run_worker, BenchArgs};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    /// One memory cgroup serves every run of a bench, and its `oom_kill` count only grows: a
    /// later worker that fails for its own reason (here it exits 101 with an error on stderr) is
    /// reported with that error, not as killed by the OOM killer.
    #[test]
    fn only_a_kill_during_the_run_is_blamed_on_the_oom_killer() {
        let cg = tempfile::tempdir().unwrap();
        // memory.events of the bench's cgroup after an earlier run of this invocation was killed.
        std::fs::write(
            cg.path().join("memory.events"),
            "low 0\nhigh 0\nmax 40\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        let args = Cli::try_parse_from(["t", "lookup", "--seconds", "1", "--warmup", "0"])
            .unwrap()
            .bench;
        let row = SystemRow::plain(SystemKind::RawPsync);
        // The worker is `current_exe() bench-worker ...`: under `cargo test` that is this test
        // binary, which rejects the worker's options and exits 101 with a message on stderr.
        let e = run_worker(
            &args,
            &row,
            Path::new("/nonexistent-data-file"),
            Some(cg.path()),
            None,
            |_| {},
        )
        .unwrap_err();
        assert!(
            !e.contains("OOM"),
            "a worker that exited with an error was reported as OOM-killed: {e}"
        );
    }
}
