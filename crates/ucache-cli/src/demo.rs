//! `ucache demo`: the benchmark with settings small enough to finish in about a minute on two
//! cores, wrapped in an explanation of what to look at. It runs `bench::run` itself, so what
//! the demo shows is exactly what `ucache bench` measures.

use std::path::PathBuf;

use crate::bench::system::{StoreKind, SystemKind};
use crate::bench::workload::Workload;
use crate::bench::{self, BenchArgs, Outcome};

#[derive(clap::Args, Clone, Debug)]
pub struct DemoArgs {
    /// Data file [default: /var/tmp/ucache-bench-1GiB.dat, shared with `ucache bench`].
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Also write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// SVG bar chart [default: next to the JSON, else ./ucache-bench.svg].
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Run mmap and pread without a memory cgroup.
    #[arg(long)]
    pub no_cgroup: bool,
}

const INTRO: &str = "\
ucache demo: random 8-byte lookups in a 1 GiB file with a 128 MiB memory budget.

Every system gets the same budget: ucache enforces it itself, mmap and pread run in a memory
cgroup of that size, and the raw systems read with O_DIRECT and cache nothing. With 1/8 of the
file fitting in memory, about 12% of lookups can hit, so this is a miss-heavy workload and the
device sets the pace. Each system runs in its own process, interleaved, twice (3 s measured
after 1 s warm-up each), and every word read is checked against its offset. ucache reads
through its io_uring store.
";

const OUTRO: &str = "
How to read it:
- raw-psync is the device at the same concurrency (one O_DIRECT read in flight per thread);
  a cache that only forwards misses cannot beat it by much, since hits are the only help.
- ucache-explicit vs mmap is the headline: same budget, same lookups, but explicit pins and
  batched eviction instead of page faults and the kernel's LRU. Its cpu µs/op tells how much
  software each miss costs on top of the read.
- ucache-pool is ucache-explicit over a pool mapping: a miss reads into a frame of the
  cache's pool, faulted in once and reused by later misses, instead of a fresh page that the
  kernel must allocate, zero and later take back. The gap between the two is what the page
  lifecycle costs an in-place cache on this machine.
- ucache-transparent runs mmap's very loop (plain loads through a pointer) over a transparent
  ucache mapping: misses fault into ucache's SIGBUS handler on the faulting thread.
- raw-uring keeps 32 reads in flight per thread: the device's throughput. ucache-prefetch
  keeps the same 32 loads in flight through one pin_each stream per thread, so compare
  those two.
- others' CPU % is what other processes on this machine used during each run; figures taken
  while it is high are not comparable with quieter ones. Compare ratios within one run. On a
  disk it also holds the kernel's softirq time, which /proc/stat counts by timer ticks and
  charges to no process: ucache-explicit reads higher there, though perf finds that CPU
  almost unused (docs/design.md, section 'Background eviction').
For other sizes, thread counts (16 threads on 2 cores is a fine test), the seq workload or
a zram-backed file (scripts/zram-setup.sh), use `ucache bench --help`.
";

pub fn run(args: &DemoArgs) -> Result<Outcome, String> {
    let bench = BenchArgs {
        workload: Workload::Lookup,
        data: 1 << 30,
        memory: 128 << 20,
        threads: 2,
        buffer_size: 4096,
        seconds: 3.0,
        warmup: 1.0,
        reps: 2,
        // io_uring, so ucache-prefetch's batches really have many reads in flight, as
        // raw-uring's do; with the synchronous file store a batch is 32 reads in a row.
        store: StoreKind::Uring,
        endpoint: None,
        prefetch_depth: crate::bench::system::PREFETCH_BATCH,
        eviction_batch: None,
        no_background_eviction: false,
        no_pool_huge_pages: false,
        file: args.file.clone(),
        json: args.json.clone(),
        plot: args.plot.clone(),
        systems: vec![
            SystemKind::UcacheExplicit,
            SystemKind::UcachePool,
            SystemKind::UcachePrefetch,
            SystemKind::UcacheTransparent,
            SystemKind::Mmap,
            SystemKind::Pread,
            SystemKind::RawPsync,
            SystemKind::RawUring,
        ],
        no_cgroup: args.no_cgroup,
        record: None,
        policies: Vec::new(),
        tenant_weights: vec![1, 1],
        sweep_buffer_size: Vec::new(),
        sweep_memory: Vec::new(),
        sweep_prefetch_depth: Vec::new(),
    };
    println!("{INTRO}");
    let outcome = bench::run(&bench)?;
    println!();
    for r in &outcome.report.results {
        if let (Some(m), Some(p)) = (r.vs_mmap, r.vs_raw_psync) {
            println!(
                "{:<16} {m:>5.2}x mmap, {p:>5.2}x raw-psync, {:.1} CPU-µs per op",
                r.system.name(),
                r.cpu_us_per_op
            );
        }
    }
    println!("{OUTRO}");
    Ok(outcome)
}
