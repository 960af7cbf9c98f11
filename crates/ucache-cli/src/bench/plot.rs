//! The SVG bar charts of `ucache bench` (one workload) and `ucache-kv bench` (a grid of panels,
//! one per workload and size): ops/s per system, with each rep as a dot so the spread between
//! reps (the noise of this machine) is visible next to the differences between systems.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::SystemResult;
use crate::size::format_size;

fn color_of(name: &str) -> RGBColor {
    match name {
        "ucache-explicit" => RGBColor(31, 119, 180),
        "ucache-prefetch" => RGBColor(23, 190, 207),
        "ucache-transparent" => RGBColor(44, 160, 44),
        "mmap" => RGBColor(214, 39, 40),
        "pread" => RGBColor(255, 127, 14),
        "raw-psync" => RGBColor(127, 127, 127),
        "raw-psync-fresh" => RGBColor(170, 170, 170),
        "raw-uring" => RGBColor(80, 80, 80),
        "raw-uring-fresh" => RGBColor(150, 150, 150),
        // ucache-kv bench's systems.
        "kv-ucache-pool" => RGBColor(31, 119, 180),
        "kv-ucache-inplace" => RGBColor(44, 160, 44),
        "kv-mmap" => RGBColor(214, 39, 40),
        "lmdb" => RGBColor(255, 127, 14),
        _ => RGBColor(148, 103, 189),
    }
}

fn human(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// One bar of a chart: a system's figure, each repetition's figure (drawn as dots), and a note
/// printed after the figure above the bar (a ratio to a baseline, or nothing).
pub struct Bar {
    pub name: String,
    pub value: f64,
    pub reps: Vec<f64>,
    pub note: String,
}

/// `ucache bench`'s chart: one workload, a bar per system.
pub fn write_svg(path: &Path, results: &[SystemResult]) -> Result<(), String> {
    let Some(first) = results.first() else {
        return Err("no results to plot".into());
    };
    let title = format!(
        "{} — data {}, memory {}, {} threads, buffer {}",
        first.workload.name(),
        format_size(first.data_bytes),
        format_size(first.memory_bytes),
        first.threads,
        format_size(first.buffer_size as u64),
    );
    let bars: Vec<Bar> = results
        .iter()
        .map(|r| Bar {
            name: r.system.name().to_string(),
            value: r.ops_per_sec,
            reps: r.reps.iter().map(|x| x.ops_per_sec).collect(),
            note: r
                .vs_mmap
                .map_or(String::new(), |x| format!(" ({x:.2}x mmap)")),
        })
        .collect();
    let width = 160 + 130 * bars.len() as u32;
    write_panels(
        path,
        (width.max(640), 480),
        (1, 1),
        &[(title, bars)],
        "ops/s (median of reps; dots: each rep)",
    )
}

/// Several bar charts in one SVG, on a grid of `grid` (rows, columns) panels filled row by
/// row, each a title and its bars; `y_desc` names the figure on every y axis.
pub fn write_panels(
    path: &Path,
    size: (u32, u32),
    grid: (usize, usize),
    panels: &[(String, Vec<Bar>)],
    y_desc: &str,
) -> Result<(), String> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(err)?;
    for (area, (title, bars)) in root.split_evenly(grid).iter().zip(panels) {
        draw_bars(area, title, bars, y_desc).map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// One bar chart in `area`: a bar per entry, its value and note above it, its reps as dots.
fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    bars: &[Bar],
    y_desc: &str,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    if bars.is_empty() {
        return Ok(());
    }
    let names: Vec<&str> = bars.iter().map(|b| b.name.as_str()).collect();
    let ymax = bars
        .iter()
        .flat_map(|b| b.reps.iter().copied().chain([b.value]))
        .fold(1.0f64, f64::max)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        // A segmented range over 0..k has k+1 segments, so k = len-1 gives one per bar; but
        // 0..0 draws no segment at all, so a lone bar gets a second, empty segment.
        .build_cartesian_2d((0..bars.len().max(2) - 1).into_segmented(), 0f64..ymax)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_max_light_lines(1)
        .y_desc(y_desc)
        .y_label_formatter(&|v| human(*v))
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i).map_or(String::new(), |s| s.to_string()),
            _ => String::new(),
        })
        .label_style(("sans-serif", 13))
        .draw()?;

    chart.draw_series(
        Histogram::vertical(&chart)
            .margin(18)
            .style_func(|x, _| match x {
                SegmentValue::Exact(i) | SegmentValue::CenterOf(i) => {
                    color_of(names.get(*i).copied().unwrap_or("")).filled()
                }
                SegmentValue::Last => BLACK.filled(),
            })
            .data(bars.iter().enumerate().map(|(i, b)| (i, b.value))),
    )?;

    let label =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
        Text::new(
            format!("{}{}", human(b.value), b.note),
            // Above the highest rep's dot, so the label never covers one.
            (
                SegmentValue::CenterOf(i),
                b.reps.iter().copied().fold(b.value, f64::max) + ymax * 0.01,
            ),
            label.clone(),
        )
    }))?;
    chart.draw_series(bars.iter().enumerate().flat_map(|(i, b)| {
        b.reps
            .iter()
            .map(move |&x| Circle::new((SegmentValue::CenterOf(i), x), 3, BLACK.filled()))
    }))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::report::{summarize, RunResult};
    use crate::bench::system::SystemKind;

    #[test]
    fn writes_panels_each_with_its_title_and_bars() {
        let bar = |name: &str, value: f64| Bar {
            name: name.into(),
            value,
            reps: vec![value * 0.9, value * 1.1],
            note: " (1.50x)".into(),
        };
        let panels = vec![
            (
                "ycsb-e, out-of-memory".to_string(),
                vec![bar("kv-ucache-pool", 3e4), bar("lmdb", 2e4)],
            ),
            ("ycsb-f, in-memory".to_string(), vec![bar("kv-mmap", 5e5)]),
        ];
        let path = std::env::temp_dir().join(format!("ucache-panels-{}.svg", std::process::id()));
        write_panels(&path, (1240, 420), (1, 2), &panels, "ops/s").unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        for text in [
            "ycsb-e, out-of-memory",
            "ycsb-f, in-memory",
            "kv-ucache-pool",
            "lmdb",
            "kv-mmap",
            "(1.50x)",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
    }

    #[test]
    fn writes_an_svg_with_every_system() {
        let json = serde_json::json!({
            "system": "mmap", "workload": "lookup", "threads": 2, "buffer_size": 4096,
            "data_bytes": 1u64 << 30, "memory_bytes": 128u64 << 20, "seconds": 1.0, "ops": 100,
            "ops_per_sec": 21000.0, "bytes_per_sec": 1.0, "cpu_us_per_op": 1.0, "cpu_cores": 1.0,
            "others_cpu_pct": 0.0, "steal_pct": 0.0, "latency_unit": "op", "samples": 1,
            "mean_us": 1.0, "p50_us": 1.0, "p90_us": 1.0, "p99_us": 1.0, "p999_us": 1.0,
            "max_us": 1.0, "mismatches": 0
        });
        let mmap: RunResult = serde_json::from_value(json).unwrap();
        let mut psync = mmap.clone();
        psync.system = crate::bench::system::SystemRow::plain(SystemKind::RawPsync);
        psync.ops_per_sec = 23000.0;
        let results = summarize(
            &crate::bench::report::tests::rows(&[SystemKind::Mmap, SystemKind::RawPsync]),
            &[mmap, psync],
        );
        let path =
            std::env::temp_dir().join(format!("ucache-plot-test-{}.svg", std::process::id()));
        write_svg(&path, &results).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("mmap") && svg.contains("raw-psync") && svg.contains("lookup"));
    }
}
