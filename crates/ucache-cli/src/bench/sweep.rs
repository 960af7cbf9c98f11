//! `ucache bench --sweep-buffer-size LIST` / `--sweep-memory LIST` / `--sweep-prefetch-depth
//! LIST`: the same benchmark at several buffer sizes, budgets or prefetch depths, drawn as one
//! line per system (the paper's Figure 6, where throughput in bytes/s rises with the buffer
//! size; Figure 8, throughput against the share of the data that fits in memory; and, over an
//! object store, miss throughput against the requests in flight).
//!
//! Each point is a full `bench::run` (its own table, its own per-point plot) so a sweep is
//! exactly a series of benchmarks; the sweep adds the combined JSON (same shape as one run's:
//! every result already names its buffer size and budget) and the line plot.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::report::{Report, SystemResult};
use super::workload::Workload;
use super::{BenchArgs, Outcome};
use crate::size::format_size;

/// Which parameter a sweep varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    BufferSize,
    Memory,
    PrefetchDepth,
}

impl Param {
    fn name(self) -> &'static str {
        match self {
            Param::BufferSize => "buffer size",
            Param::Memory => "memory budget",
            Param::PrefetchDepth => "prefetch depth",
        }
    }
    fn of(self, r: &SystemResult) -> u64 {
        match self {
            Param::BufferSize => r.buffer_size as u64,
            Param::Memory => r.memory_bytes,
            Param::PrefetchDepth => r.prefetch_depth.unwrap_or(0) as u64,
        }
    }
    fn set(self, args: &mut BenchArgs, v: u64) {
        match self {
            Param::BufferSize => args.buffer_size = v,
            Param::Memory => args.memory = v,
            Param::PrefetchDepth => args.prefetch_depth = v as usize,
        }
    }
    /// How a value is written: sizes for sizes, plain counts for depths.
    fn label(self, v: u64) -> String {
        match self {
            Param::PrefetchDepth => v.to_string(),
            _ => format_size(v),
        }
    }
}

/// The sweep the arguments ask for, if any.
pub fn requested(args: &BenchArgs) -> Result<Option<(Param, Vec<u64>)>, String> {
    let depths: Vec<u64> = args
        .sweep_prefetch_depth
        .iter()
        .map(|&d| d as u64)
        .collect();
    match (
        &args.sweep_buffer_size[..],
        &args.sweep_memory[..],
        &depths[..],
    ) {
        ([], [], []) => Ok(None),
        (b, [], []) => Ok(Some((Param::BufferSize, b.to_vec()))),
        ([], m, []) => Ok(Some((Param::Memory, m.to_vec()))),
        ([], [], d) => Ok(Some((Param::PrefetchDepth, d.to_vec()))),
        _ => Err(
            "sweep one parameter at a time (--sweep-buffer-size, --sweep-memory or \
                  --sweep-prefetch-depth)"
                .into(),
        ),
    }
}

/// Runs every point, then writes the combined JSON and the line plot.
pub fn run(args: &BenchArgs, param: Param, values: &[u64]) -> Result<Outcome, String> {
    let mut results = Vec::new();
    let mut errors = Vec::new();
    let mut mismatches = 0;
    let mut config = serde_json::Value::Null;
    for (k, &v) in values.iter().enumerate() {
        let mut a = args.clone();
        param.set(&mut a, v);
        a.sweep_buffer_size.clear();
        a.sweep_memory.clear();
        a.sweep_prefetch_depth.clear();
        a.json = None;
        a.plot = Some(point_plot_path(&args.sweep_plot_path(), k, &param.label(v)));
        println!(
            "\n=== sweep point {}/{}: {} {} ===",
            k + 1,
            values.len(),
            param.name(),
            param.label(v)
        );
        let o = super::run(&a)?;
        if config.is_null() {
            config = o.report.config.clone();
        }
        results.extend(o.report.results);
        errors.extend(o.errors);
        mismatches += o.mismatches;
    }
    config["sweep"] = serde_json::json!({"param": param.name(), "values": values});
    let report = Report { config, results };
    if let Some(j) = &args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(j, text + "\n").map_err(|e| format!("writing {}: {e}", j.display()))?;
        println!("\nsweep JSON: {}", j.display());
    }
    let p = args.sweep_plot_path();
    match write_svg(&p, &report.results, param) {
        Ok(()) => println!("sweep plot: {}", p.display()),
        Err(e) => println!("sweep plot failed: {e}"),
    }
    Ok(Outcome {
        report,
        errors,
        mismatches,
    })
}

fn point_plot_path(sweep: &Path, k: usize, v: &str) -> PathBuf {
    let stem = sweep
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("sweep");
    sweep.with_file_name(format!("{stem}-{k}-{v}.svg"))
}

/// What the y axis shows: bytes/s for scans (bigger buffers move more per op), ops/s for
/// lookups (an op is one 8-byte read whatever the buffer size).
fn metric(w: Workload, r: &SystemResult) -> f64 {
    match w {
        Workload::Seq => r.bytes_per_sec / 1e6,
        _ => r.ops_per_sec,
    }
}

pub fn write_svg(path: &Path, results: &[SystemResult], param: Param) -> Result<(), String> {
    let Some(first) = results.first() else {
        return Err("no results to plot".into());
    };
    let mut systems: Vec<&str> = Vec::new();
    for r in results {
        if !systems.contains(&r.system.name()) {
            systems.push(r.system.name());
        }
    }
    let xs: Vec<u64> = {
        let mut v: Vec<u64> = results.iter().map(|r| param.of(r)).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let ymax = results
        .iter()
        .map(|r| metric(first.workload, r))
        .fold(1.0f64, f64::max)
        * 1.1;
    let y_desc = match first.workload {
        Workload::Seq => "MB/s (median of reps)",
        _ => "ops/s (median of reps)",
    };
    let title = format!(
        "{} vs {} — data {}, {} threads",
        first.workload.name(),
        param.name(),
        format_size(first.data_bytes),
        first.threads
    );
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(err)?;
    // log2 x positions, labelled with the sizes themselves.
    let lx = |v: u64| (v as f64).log2();
    let (x0, x1) = (lx(xs[0]) - 0.3, lx(*xs.last().unwrap()) + 0.3);
    let mut chart = ChartBuilder::on(&root)
        .caption(&title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, 0f64..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(param.name())
        .y_desc(y_desc)
        .x_labels(xs.len().max(2))
        .x_label_formatter(&|x| param.label(2f64.powf(*x).round() as u64))
        .draw()
        .map_err(err)?;
    for (k, name) in systems.iter().enumerate() {
        let color = Palette99::pick(k).to_rgba();
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .filter_map(|&x| {
                results
                    .iter()
                    .find(|r| r.system.name() == *name && param.of(r) == x)
                    .map(|r| (lx(x), metric(first.workload, r)))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::summarize;
    use crate::bench::report::tests::run as fake_run;
    use crate::bench::system::SystemKind;

    #[test]
    fn draws_one_line_per_system_over_the_swept_values() {
        let mut results = Vec::new();
        for bs in [4096usize, 16384, 65536] {
            let runs: Vec<_> = [SystemKind::Mmap, SystemKind::UcacheTransparent]
                .into_iter()
                .map(|s| {
                    let mut r = fake_run(s, bs as f64);
                    r.buffer_size = bs;
                    r
                })
                .collect();
            results.extend(summarize(
                &crate::bench::report::tests::rows(&[
                    SystemKind::Mmap,
                    SystemKind::UcacheTransparent,
                ]),
                &runs,
            ));
        }
        let p = std::env::temp_dir().join(format!("ucache-sweep-{}.svg", std::process::id()));
        write_svg(&p, &results, Param::BufferSize).unwrap();
        let svg = std::fs::read_to_string(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert!(svg.contains("ucache-transparent") && svg.contains("mmap"));
        assert!(svg.contains("64KiB"), "x labels are sizes");
    }

    #[test]
    fn prefetch_depth_sweep_is_requested_and_labelled_as_counts() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        let cli = Cli::try_parse_from([
            "t",
            "lookup",
            "--store",
            "s3://b/k",
            "--sweep-prefetch-depth",
            "1,8,32",
        ])
        .unwrap();
        let (param, values) = requested(&cli.bench).unwrap().unwrap();
        assert_eq!((param, values), (Param::PrefetchDepth, vec![1, 8, 32]));
        assert_eq!(param.label(32), "32");
        assert_eq!(Param::BufferSize.label(65536), "64KiB");
        let both = Cli::try_parse_from([
            "t",
            "lookup",
            "--sweep-memory",
            "1GiB",
            "--sweep-prefetch-depth",
            "1",
        ])
        .unwrap();
        assert!(requested(&both.bench).is_err());
    }

    #[test]
    fn eviction_batch_outside_1_to_1024_is_refused() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            bench: BenchArgs,
        }
        for (b, ok) in [("0", false), ("1", true), ("256", true), ("1025", false)] {
            let cli = Cli::try_parse_from(["t", "lookup", "--eviction-batch", b]).unwrap();
            let r = cli.bench.validate();
            assert_eq!(r.is_ok(), ok, "--eviction-batch {b}: {r:?}");
            if let Err(e) = r {
                assert!(e.contains("--eviction-batch"), "{e}");
            }
        }
    }
}
