//! `ucache sim`: replay a trace through the real policies and draw miss-ratio curves.
//!
//! The replays run [`ucache::policy::Simulator`], which drives the same policy code and state
//! words as the live cache, so a curve drawn here describes what the cache will do. Ids are
//! renumbered densely first ([`trace`]); then every policy × size replay runs in parallel
//! ([`runner`]) and reports its miss ratio and its replay speed per CPU core.

pub mod csv;
pub mod format;
pub mod generate;
pub mod msr;
pub mod oracle;
pub mod plot;
pub mod record;
pub mod report;
pub mod runner;
pub mod sizes;
pub mod text;
pub mod trace;

use std::io::IsTerminal;
use std::path::PathBuf;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ucache::policy::{policy_by_name, POLICY_NAMES};

use self::format::Format;
use self::generate::{parse_generator, Zipf};
use self::report::Report;
use self::runner::Job;
use self::sizes::{parse_sizes, resolve_all, CacheSize};

#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// The trace file to replay.
    #[arg(
        long,
        required_unless_present = "generate",
        conflicts_with = "generate"
    )]
    pub trace: Option<PathBuf>,
    /// Trace format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// With --format csv: the column holding the id, counting from 1.
    #[arg(long, default_value_t = 1)]
    pub column: usize,
    /// Instead of a file, a synthetic trace: zipf:REQUESTS:IDS or zipf:REQUESTS:IDS:ALPHA (α defaults to 0.99).
    #[arg(long, value_parser = parse_generator)]
    pub generate: Option<Zipf>,
    /// Seed of --generate.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Comma-separated policies, any of the built-in ones (`ucache::policy::POLICY_NAMES`:
    /// clock, fifo, lru, mru, lfu, sieve, s3fifo, 2q, arc, lirs, w-tinylfu, lhd, mglru,
    /// get-scan, priority); an unknown name is refused with the list.
    #[arg(long, default_value = "clock,fifo,lru,sieve,s3fifo")]
    pub policies: String,
    /// Comma-separated cache sizes: a percentage of the distinct ids (10%) or a number of
    /// buffers (5000).
    #[arg(long, default_value = "1%,5%,10%,25%", value_parser = SizeList::parse)]
    pub sizes: SizeList,
    /// Replays run at once (default: the number of CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Draw the miss-ratio curves into this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Also write the trace, renumbered, as a record file (--format record reads it back):
    /// a generated trace saved for other tools, or a large text trace made quick to reload.
    #[arg(long)]
    pub save_trace: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The parsed `--sizes` list (one argument, comma-separated).
#[derive(Clone, Debug)]
pub struct SizeList(pub Vec<CacheSize>);

impl SizeList {
    fn parse(s: &str) -> Result<SizeList, String> {
        parse_sizes(s).map(SizeList)
    }
}

fn bar(len: u64, quiet: bool, template: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    if quiet || !std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb.set_style(
        ProgressStyle::with_template(template)
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb
}

pub fn run(args: &SimArgs) -> Result<(), String> {
    let policies: Vec<String> = args
        .policies
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    for p in &policies {
        if policy_by_name(p).is_none() {
            return Err(format!(
                "unknown policy '{p}' (known: {})",
                POLICY_NAMES.join(", ")
            ));
        }
    }
    if policies.is_empty() {
        return Err("no policies given".into());
    }
    let sizes = &args.sizes.0;

    let (trace, title) = match (&args.trace, &args.generate) {
        (Some(path), _) => {
            let len = std::fs::metadata(path)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .len();
            let pb = bar(
                len,
                args.quiet,
                "reading {bar:40} {bytes}/{total_bytes} ({bytes_per_sec})",
            );
            let t = format::load(path, args.format, args.column, &mut |b| pb.set_position(b))?;
            pb.finish_and_clear();
            let name = path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into(),
            );
            (t, name)
        }
        (None, Some(z)) => (
            z.generate(args.seed)?,
            format!("zipf α={} over {} ids", z.alpha, z.universe),
        ),
        (None, None) => return Err("give --trace FILE or --generate zipf:N:U".into()),
    };
    let requests = trace.requests.len() as u64;
    if requests == 0 {
        return Err("the trace holds no requests".into());
    }

    if let Some(path) = &args.save_trace {
        let io = |e: std::io::Error| format!("{}: {e}", path.display());
        let mut w = record::RecordWriter::create(path).map_err(io)?;
        for &id in &trace.requests {
            w.push(id as u64).map_err(io)?;
        }
        w.finish().map_err(io)?;
    }

    let jobs: Vec<Job> = resolve_all(sizes, trace.unique)
        .into_iter()
        .flat_map(|c| {
            policies.iter().map(move |p| Job {
                policy: p.clone(),
                cache_size: c,
            })
        })
        .collect();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let pb = bar(
        requests * jobs.len() as u64,
        args.quiet,
        "replaying {bar:40} {human_pos}/{human_len} requests ({per_sec}, eta {eta})",
    );
    let outcomes = runner::run_all(&trace, &jobs, threads, &pb)?;
    pb.finish_and_clear();

    let report = Report::new(requests, trace.unique, &outcomes);
    print!("{}", report.table());
    if let Some(path) = &args.json {
        let s = serde_json::to_string_pretty(&report).expect("serializable");
        std::fs::write(path, s + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if let Some(path) = &args.plot {
        plot::write_svg(path, &report, &title)?;
    }
    Ok(())
}
