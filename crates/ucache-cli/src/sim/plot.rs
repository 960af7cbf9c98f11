//! The miss-ratio curve: miss ratio against cache size, one line per policy.
//!
//! Sizes usually span orders of magnitude (0.1% to 50% of the footprint), so the x axis is
//! logarithmic when they do; the y axis starts at 0 so gaps between policies read true.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::prelude::*;

use super::report::Report;

fn color(k: usize) -> RGBColor {
    const PALETTE: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    PALETTE[k % PALETTE.len()]
}

/// Axis labels for buffer counts: 500, 20k, 1.5M.
fn count_label(v: f64) -> String {
    let (x, unit) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{x:.1}");
    format!("{}{unit}", s.strip_suffix(".0").unwrap_or(&s))
}

pub fn write_svg(path: &Path, report: &Report, title: &str) -> Result<(), String> {
    let mut lines: BTreeMap<&str, Vec<(f64, f64)>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for r in &report.results {
        if !order.contains(&r.policy.as_str()) {
            order.push(&r.policy);
        }
        lines
            .entry(&r.policy)
            .or_default()
            .push((r.cache_size as f64, r.miss_ratio));
    }
    if lines.is_empty() {
        return Err("no results to plot".into());
    }
    let xmin = report
        .results
        .iter()
        .map(|r| r.cache_size)
        .min()
        .unwrap_or(1) as f64;
    let xmax = report
        .results
        .iter()
        .map(|r| r.cache_size)
        .max()
        .unwrap_or(1) as f64;
    let ymax = report
        .results
        .iter()
        .map(|r| r.miss_ratio)
        .fold(0.0f64, f64::max)
        .max(0.01)
        * 1.08;
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("plot {}: {e}", path.display());
    root.fill(&WHITE).map_err(err)?;
    let caption = format!(
        "{title} — {} requests, {} distinct ids",
        report.trace.requests, report.trace.unique
    );
    let mut b = ChartBuilder::on(&root);
    b.caption(caption, ("sans-serif", 18))
        .margin(14)
        .x_label_area_size(45)
        .y_label_area_size(60);

    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc("cache size (buffers)")
                .x_label_formatter(&|v| count_label(*v))
                .y_desc("miss ratio")
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            for (k, name) in order.iter().enumerate() {
                let mut pts = lines[name].clone();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                let c = color(k);
                chart
                    .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                    .map_err(err)?
                    .label(*name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                chart
                    .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .draw()
                .map_err(err)?;
        }};
    }
    if xmax >= 10.0 * xmin {
        draw!(b
            .build_cartesian_2d((xmin * 0.9..xmax * 1.1).log_scale(), 0f64..ymax)
            .map_err(err)?);
    } else {
        let pad = ((xmax - xmin) * 0.05).max(1.0);
        draw!(b
            .build_cartesian_2d((xmin - pad).max(0.0)..xmax + pad, 0f64..ymax)
            .map_err(err)?);
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_labels_are_short() {
        assert_eq!(count_label(500.0), "500");
        assert_eq!(count_label(20_000.0), "20k");
        assert_eq!(count_label(1_500_000.0), "1.5M");
    }
}
