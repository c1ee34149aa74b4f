//! Figures, as PNG and SVG: loss, accuracy and consensus distance against simulated time (one
//! line per algorithm, one panel per node count), time to target and throughput against node
//! count (the scaling charts), node timelines, and staleness histograms.
//!
//! Series are means over seeds. Log axes are drawn by plotting log10 of the values and labelling
//! the ticks with the values themselves. Text uses the DejaVu Sans font embedded in the binary,
//! so no system font is needed. Every file is written under a temporary name and renamed.

use crate::sweep::RunRecord;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;

const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
        let _ = plotters::style::register_font("sans-serif", FontStyle::Bold, dejavu::sans::bold());
    });
}

/// A line of a chart.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Colour index.
    pub color: usize,
    /// Points (x, y) in data units.
    pub points: Vec<(f64, f64)>,
}

/// One panel of a chart.
pub struct Panel {
    /// Panel title.
    pub title: String,
    /// Its lines.
    pub series: Vec<Series>,
}

/// Axis description.
#[derive(Clone, Copy)]
pub struct Axis<'a> {
    /// Label.
    pub desc: &'a str,
    /// Logarithmic.
    pub log: bool,
}

fn tr(v: f64, log: bool) -> Option<f64> {
    if !v.is_finite() {
        return None;
    }
    if log {
        (v > 0.0).then(|| v.log10())
    } else {
        Some(v)
    }
}

fn fmt_tick(v: f64, log: bool) -> String {
    let x = if log { 10f64.powf(v) } else { v };
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 1e4 || x.abs() < 1e-2 {
        format!("{x:.0e}")
    } else if x.abs() >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// The data range, ignoring points above `cap` (diverged runs leave the chart at the top).
fn bounds(panels: &[Panel], x: Axis, y: Axis, cap: f64) -> Option<((f64, f64), (f64, f64))> {
    let pts: Vec<(f64, f64)> = panels
        .iter()
        .flat_map(|p| p.series.iter().flat_map(|s| s.points.iter()))
        .filter(|p| p.1 <= cap)
        .filter_map(|&(a, b)| Some((tr(a, x.log)?, tr(b, y.log)?)))
        .collect();
    if pts.is_empty() {
        return None;
    }
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (a, b) in pts {
        x0 = x0.min(a);
        x1 = x1.max(a);
        y0 = y0.min(b);
        y1 = y1.max(b);
    }
    let pad = |lo: f64, hi: f64| {
        let d = if hi > lo { (hi - lo) * 0.05 } else { lo.abs().max(1.0) * 0.1 };
        (lo - d, hi + d)
    };
    Some((pad(x0, x1), pad(y0, y1)))
}

fn draw_lines<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
    x: Axis,
    y: Axis,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(e)?;
    // Over-time charts are capped at 10x the largest starting value, so one diverging run does
    // not flatten the others.
    let cap = if x.desc.contains("time") {
        10.0 * panels
            .iter()
            .flat_map(|p| p.series.iter().filter_map(|s| s.points.first().map(|q| q.1)))
            .fold(0.0, f64::max)
    } else {
        f64::INFINITY
    };
    let cap = if cap > 0.0 { cap } else { f64::INFINITY };
    let Some(((x0, x1), (y0, y1))) = bounds(panels, x, y, cap) else { return Ok(()) };
    let area = area.titled(title, ("sans-serif", 24).into_font().style(FontStyle::Bold)).map_err(e)?;
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    for (cell, panel) in area.split_evenly((rows, cols)).into_iter().zip(panels) {
        let mut chart = ChartBuilder::on(&cell)
            .caption(&panel.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(x.desc)
            .y_desc(y.desc)
            .x_label_formatter(&|v| fmt_tick(*v, x.log))
            .y_label_formatter(&|v| fmt_tick(*v, y.log))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(e)?;
        for s in &panel.series {
            let color = PALETTE[s.color % PALETTE.len()];
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.1 <= cap)
                .filter_map(|&(a, b)| Some((tr(a, x.log)?, tr(b, y.log)?)))
                .collect();
            let style = ShapeStyle::from(&color).stroke_width(2);
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(e)?
                .label(s.label.clone())
                .legend(move |(lx, ly)| PathElement::new(vec![(lx, ly), (lx + 18, ly)], style));
            if pts.len() <= 12 {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(e)?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(e)?;
    }
    area.present().map_err(e)
}

/// Renders `draw` to `stem.png` and `stem.svg`, each atomically.
fn both_formats(
    stem: &Path,
    size: (u32, u32),
    draw: &dyn Fn(Target) -> Result<(), String>,
) -> Result<Vec<PathBuf>, String> {
    register_font();
    let mut out = Vec::new();
    for ext in ["png", "svg"] {
        let dest = stem.with_extension(ext);
        let tmp = stem.with_extension(format!("tmp-{}.{ext}", std::process::id()));
        let res = if ext == "png" { draw(Target::Png(&tmp, size)) } else { draw(Target::Svg(&tmp, size)) };
        if let Err(err) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(format!("{}: {err}", dest.display()));
        }
        std::fs::rename(&tmp, &dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        out.push(dest);
    }
    Ok(out)
}

/// Where a figure goes.
pub enum Target<'a> {
    /// A PNG file of this size.
    Png(&'a Path, (u32, u32)),
    /// An SVG file of this size.
    Svg(&'a Path, (u32, u32)),
}

macro_rules! on_target {
    ($t:expr, $area:ident => $body:expr) => {
        match $t {
            Target::Png(p, s) => {
                let $area = BitMapBackend::new(p, s).into_drawing_area();
                $body
            }
            Target::Svg(p, s) => {
                let $area = SVGBackend::new(p, s).into_drawing_area();
                $body
            }
        }
    };
}

/// A multi-panel line chart as PNG and SVG.
pub fn line_chart(stem: &Path, title: &str, panels: &[Panel], x: Axis, y: Axis) -> Result<Vec<PathBuf>, String> {
    let cols = panels.len().clamp(1, 3) as u32;
    let rows = panels.len().div_ceil(3).max(1) as u32;
    both_formats(stem, (520 * cols, 40 + 380 * rows), &|t| on_target!(t, a => draw_lines(a, title, panels, x, y)))
}

/// Reads a run's `metrics.csv` as (time, column) pairs.
fn series_of(dir: &Path, column: &str) -> Vec<(f64, f64)> {
    let Ok(text) = std::fs::read_to_string(dir.join("metrics.csv")) else { return Vec::new() };
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Vec::new() };
    let Some(col) = header.split(',').position(|h| h == column) else { return Vec::new() };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.first()?.parse().ok()?, f.get(col)?.parse().ok()?))
        })
        .collect()
}

/// Mean over runs of series sampled on the same time grid (index by index).
fn mean_series(all: &[Vec<(f64, f64)>]) -> Vec<(f64, f64)> {
    let n = all.iter().map(Vec::len).min().unwrap_or(0);
    (0..n).map(|i| (all[0][i].0, all.iter().map(|s| s[i].1).sum::<f64>() / all.len() as f64)).collect()
}

fn colors(runs: &[RunRecord]) -> BTreeMap<String, usize> {
    let mut labels: Vec<String> = runs.iter().map(|r| r.summary.algorithm.clone()).collect();
    labels.sort();
    labels.dedup();
    labels.into_iter().enumerate().map(|(i, l)| (l, i)).collect()
}

/// Over-time panels (one per node count) of `column`, means over seeds.
fn over_time(runs: &[RunRecord], column: &str) -> Vec<Panel> {
    let color = colors(runs);
    // nodes -> algorithm -> one series per seed
    type BySeed = BTreeMap<String, Vec<Vec<(f64, f64)>>>;
    let mut by: BTreeMap<usize, BySeed> = BTreeMap::new();
    for r in runs {
        let s = series_of(&r.dir, column);
        if !s.is_empty() {
            by.entry(r.spec.nodes).or_default().entry(r.summary.algorithm.clone()).or_default().push(s);
        }
    }
    by.into_iter()
        .map(|(nodes, algs)| Panel {
            title: format!("{nodes} node{}", if nodes == 1 { "" } else { "s" }),
            series: algs
                .into_iter()
                .map(|(a, s)| Series { color: color[&a], label: a, points: mean_series(&s) })
                .collect(),
        })
        .collect()
}

/// Against-node-count series of a summary figure, means over the runs that have it.
fn scaling(runs: &[RunRecord], f: &dyn Fn(&RunRecord) -> Option<f64>) -> Vec<Panel> {
    let color = colors(runs);
    let mut by: BTreeMap<String, BTreeMap<usize, Vec<f64>>> = BTreeMap::new();
    for r in runs {
        if let Some(v) = f(r) {
            by.entry(r.summary.algorithm.clone()).or_default().entry(r.spec.nodes).or_default().push(v);
        }
    }
    let series: Vec<Series> = by
        .into_iter()
        .map(|(a, pts)| Series {
            color: color[&a],
            label: a,
            points: pts.into_iter().map(|(n, v)| (n as f64, v.iter().sum::<f64>() / v.len() as f64)).collect(),
        })
        .collect();
    if series.is_empty() {
        Vec::new()
    } else {
        vec![Panel { title: String::new(), series }]
    }
}

fn draw_timeline<DB: DrawingBackend>(area: DrawingArea<DB, Shift>, runs: &[(String, PathBuf)]) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(e)?;
    let area = area
        .titled("What each node does over time", ("sans-serif", 24).into_font().style(FontStyle::Bold))
        .map_err(e)?;
    let states = [
        ("computing", PALETTE[0]),
        ("communicating", PALETTE[1]),
        ("idle", RGBColor(200, 200, 200)),
        ("crashed", PALETTE[3]),
    ];
    for (cell, (label, dir)) in area.split_evenly((runs.len().max(1), 1)).into_iter().zip(runs) {
        let text = std::fs::read_to_string(dir.join("timeline.csv")).unwrap_or_default();
        let rows: Vec<(usize, String, f64, f64)> = text
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                Some((
                    f.first()?.parse().ok()?,
                    f.get(1)?.to_string(),
                    f.get(2)?.parse().ok()?,
                    f.get(3)?.parse().ok()?,
                ))
            })
            .collect();
        let ranks = rows.iter().map(|r| r.0 + 1).max().unwrap_or(1);
        let t1 = rows.iter().map(|r| r.3).fold(0.0, f64::max).max(1e-9);
        let mut chart = ChartBuilder::on(&cell)
            .caption(label, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t1, 0.0..ranks as f64)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("simulated time (s)")
            .y_desc("rank")
            .disable_y_mesh()
            .y_label_formatter(&|v| format!("{}", *v as usize))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(e)?;
        for (name, color) in states {
            chart
                .draw_series(
                    rows.iter()
                        .filter(|r| r.1 == name)
                        .map(|r| Rectangle::new([(r.2, r.0 as f64 + 0.1), (r.3, r.0 as f64 + 0.9)], color.filled())),
                )
                .map_err(e)?
                .label(name)
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(e)?;
    }
    area.present().map_err(e)
}

fn draw_staleness<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    hists: &[(String, Vec<(u64, f64)>)],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    area.fill(&WHITE).map_err(e)?;
    let area = area
        .titled("Staleness of applied updates", ("sans-serif", 24).into_font().style(FontStyle::Bold))
        .map_err(e)?;
    let cols = hists.len().clamp(1, 3);
    for (cell, (label, h)) in area.split_evenly((hists.len().div_ceil(cols).max(1), cols)).into_iter().zip(hists) {
        let xmax = h.iter().map(|b| b.0).max().unwrap_or(0) as f64 + 1.0;
        let ymax = h.iter().map(|b| b.1).fold(0.0, f64::max).max(1e-9) * 1.1;
        let mut chart = ChartBuilder::on(&cell)
            .caption(label, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(56)
            .build_cartesian_2d(-0.5..xmax, 0.0..ymax)
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("staleness (versions)")
            .y_desc("fraction of updates")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(
                h.iter()
                    .map(|&(s, f)| Rectangle::new([(s as f64 - 0.4, 0.0), (s as f64 + 0.4, f)], PALETTE[0].filled())),
            )
            .map_err(e)?;
    }
    area.present().map_err(e)
}

/// Draws every figure that the runs have data for into `out`; returns the files written.
pub fn all(runs: &[RunRecord], out: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut files = Vec::new();
    let t = Axis { desc: "simulated time (s)", log: false };
    let n = Axis { desc: "nodes", log: true };
    let loss = over_time(runs, "loss");
    if !loss.is_empty() {
        files.extend(line_chart(
            &out.join("loss_vs_time"),
            "Loss of the consensus model",
            &loss,
            t,
            Axis { desc: "loss", log: true },
        )?);
    }
    let acc = over_time(runs, "accuracy");
    if !acc.is_empty() {
        files.extend(line_chart(
            &out.join("accuracy_vs_time"),
            "Accuracy of the consensus model",
            &acc,
            t,
            Axis { desc: "accuracy", log: false },
        )?);
    }
    let dist = over_time(runs, "consensus_distance");
    if dist.iter().any(|p| p.series.iter().any(|s| s.points.iter().any(|q| q.1 > 0.0))) {
        files.extend(line_chart(
            &out.join("consensus_distance"),
            "Mean squared distance of replicas from their average",
            &dist,
            t,
            Axis { desc: "distance²", log: true },
        )?);
    }
    let ttt = scaling(runs, &|r| r.summary.time_to_target_s);
    if !ttt.is_empty() {
        files.extend(line_chart(
            &out.join("time_to_target_vs_nodes"),
            "Time to reach the target (lower is better)",
            &ttt,
            n,
            Axis { desc: "simulated seconds", log: true },
        )?);
    }
    let thr = scaling(runs, &|r| Some(r.summary.updates_per_s).filter(|&u| u > 0.0));
    if !thr.is_empty() {
        files.extend(line_chart(
            &out.join("throughput_vs_nodes"),
            "Model updates per simulated second",
            &thr,
            n,
            Axis { desc: "updates / s", log: true },
        )?);
    }
    // One timeline per algorithm: its run with the most nodes up to 16, first seed.
    let mut pick: BTreeMap<String, &RunRecord> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.spec.nodes <= 16) {
        let better = |old: &&RunRecord| {
            (r.spec.nodes, std::cmp::Reverse(r.spec.seed)) > (old.spec.nodes, std::cmp::Reverse(old.spec.seed))
        };
        if pick.get(&r.summary.algorithm).is_none_or(better) {
            pick.insert(r.summary.algorithm.clone(), r);
        }
    }
    let timelines: Vec<(String, PathBuf)> =
        pick.values().map(|r| (format!("{} ({} nodes)", r.summary.algorithm, r.spec.nodes), r.dir.clone())).collect();
    if !timelines.is_empty() {
        let size = (1100, 40 + 220 * timelines.len() as u32);
        files.extend(both_formats(&out.join("timeline"), size, &|t| on_target!(t, a => draw_timeline(a, &timelines)))?);
    }
    let hists: Vec<(String, Vec<(u64, f64)>)> = pick
        .values()
        .filter(|r| r.summary.staleness_histogram.keys().any(|&k| k > 0))
        .map(|r| {
            let total: u64 = r.summary.staleness_histogram.values().sum();
            let h = r.summary.staleness_histogram.iter().map(|(&k, &c)| (k, c as f64 / total as f64)).collect();
            (format!("{} ({} nodes)", r.summary.algorithm, r.spec.nodes), h)
        })
        .collect();
    if !hists.is_empty() {
        let cols = hists.len().clamp(1, 3) as u32;
        let size = (420 * cols, 40 + 320 * hists.len().div_ceil(3) as u32);
        files.extend(both_formats(&out.join("staleness"), size, &|t| on_target!(t, a => draw_staleness(a, &hists)))?);
    }
    Ok(files)
}

/// The simulator's prediction relative to reality for each compared run (`(label, real,
/// simulated)`), with the ±10% band: x is the row of `validation.md`, y is simulated / real.
pub fn validation(rows: &[(String, f64, f64)], stem: &Path) -> Result<Vec<PathBuf>, String> {
    let n = rows.len().max(1);
    let flat = |y: f64, label: &str, color: usize| Series {
        label: label.into(),
        color,
        points: (0..n.max(2)).map(|i| (i as f64, y)).collect(),
    };
    let ratio = Series {
        label: format!("simulated / real ({})", rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>().join(", ")),
        color: 0,
        points: rows.iter().enumerate().map(|(i, r)| (i as f64, r.2 / r.1)).collect(),
    };
    let panel = Panel {
        title: "simulator against real runs".into(),
        series: vec![ratio, flat(1.0, "real", 1), flat(1.1, "+10%", 2), flat(0.9, "-10%", 2)],
    };
    line_chart(
        stem,
        "Validation: prediction / measurement",
        &[panel],
        Axis { desc: "compared run (row of validation.md)", log: false },
        Axis { desc: "simulated / real", log: false },
    )
}
