//! The `ucache` command: benchmarks and a demo of the ucache IO cache.

mod demo;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ucache_cli::{bench, sim};

#[derive(Parser)]
#[command(
    name = "ucache",
    version,
    about = "ucache: a customizable IO cache — benchmarks, policy simulation and demo"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one workload through several systems (ucache, mmap, pread, raw O_DIRECT) under the
    /// same memory budget, interleaved; print a table, write JSON and an SVG plot.
    Bench(bench::BenchArgs),
    /// Replay a trace (or a generated Zipf trace) through the cache's policies at several
    /// cache sizes; print miss ratios, write JSON and a miss-ratio-curve SVG.
    Sim(sim::SimArgs),
    /// A cold sequential pass over a file through std::fs and through ucache's batched reads
    /// (Mapping::read, pin_each, ensure_cached, readahead pins), page cache dropped before
    /// each pass; prints each one's throughput over std::fs's.
    Coldread(bench::cold::ColdArgs),
    /// A one-minute comparison with sensible defaults, explained.
    Demo(demo::DemoArgs),
    /// One run of one system (used by `bench`; prints one JSON line).
    #[command(hide = true)]
    BenchWorker(bench::worker::WorkerArgs),
}

/// Exit status 2 means a system read wrong data: a correctness failure, not a slow run.
fn finish(outcome: Result<bench::Outcome, String>) -> ExitCode {
    match outcome {
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
        Ok(o) if o.mismatches > 0 => {
            eprintln!(
                "error: CORRECTNESS FAILURE: {} words read did not hold their offset (see the runs above)",
                o.mismatches
            );
            ExitCode::from(2)
        }
        Ok(o) if !o.errors.is_empty() => {
            eprintln!("error: {} run(s) failed:", o.errors.len());
            for e in &o.errors {
                eprintln!("  {e}");
            }
            ExitCode::FAILURE
        }
        Ok(_) => ExitCode::SUCCESS,
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Cmd::Bench(args) => finish(bench::run_or_sweep(&args)),
        Cmd::Demo(args) => finish(demo::run(&args)),
        Cmd::Coldread(args) => match bench::cold::run(&args) {
            Ok(0) => ExitCode::SUCCESS,
            Ok(bad) => {
                eprintln!("error: CORRECTNESS FAILURE: {bad} words did not hold their offset");
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Sim(args) => match sim::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::BenchWorker(args) => match bench::worker::run(&args) {
            Ok(r) => {
                println!("{}", serde_json::to_string(&r).expect("serializable"));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
    }
}
