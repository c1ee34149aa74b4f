//! Figures, as PNG and SVG: loss, accuracy and consensus distance against simulated time (one
//! line per algorithm, one panel per node count, each panel with its own ranges), the scaling
//! charts against node count ([`scaling`]: time to target, throughput, speedup and efficiency,
//! with 95% confidence bars and the sweep's node counts as ticks), the time breakdown
//! ([`breakdown`]), node timelines with roles labelled ([`timeline`]), and staleness histograms.
//!
//! Each algorithm is drawn with the variant the report picks at each node count (the tables'
//! rule, [`crate::analysis::best_runs`]), named in the legend. Over-time lines are the median over
//! seeds, with the seeds' minimum and maximum as a band, at every time any seed was evaluated; a
//! seed's run that ended (at its target, or diverged) is carried at its last value, so no curve is
//! cut to the shortest run and a line crosses the target when the median seed does. Log axes are drawn by plotting log10 of the values and labelling
//! the ticks with the values themselves. Legends stand in a column of their own beside the
//! panels, so they never hide a point. Titles name the target. Text uses the DejaVu Sans font
//! embedded in the binary, so no system font is needed. Every file is written under a temporary
//! name and renamed.

pub mod breakdown;
pub mod scaling;
pub mod timeline;

use crate::analysis;
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
    /// A band (x, low, high) drawn under the line (the seeds' range), or empty.
    pub band: Vec<(f64, f64, f64)>,
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

/// How many tick labels to ask for on an axis spanning `lo..hi` (log10 units when `log`): one per
/// decade on log axes, so the ticks fall on powers of ten (1, 10, 100) rather than 1.58, 2.51...
fn label_count(lo: f64, hi: f64, log: bool) -> usize {
    if log {
        ((hi - lo).floor() as usize + 1).clamp(2, 12)
    } else {
        10
    }
}

fn fmt_tick(v: f64, log: bool) -> String {
    let x = if log { 10f64.powf(v) } else { v };
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 1e4 || x.abs() < 1e-2 {
        format!("{x:.0e}")
    } else if x.abs() >= 10.0 || (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// The data range of one panel, ignoring points above `cap` (diverged runs leave the chart at
/// the top).
fn bounds(panel: &Panel, x: Axis, y: Axis, cap: f64) -> Option<((f64, f64), (f64, f64))> {
    let pts: Vec<(f64, f64)> = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter())
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
    Some((pad(x0, x1), pad(y0, y1)))
}

/// A range widened by 5% on each side (or around a single value).
fn pad(lo: f64, hi: f64) -> (f64, f64) {
    let d = if hi > lo { (hi - lo) * 0.05 } else { lo.abs().max(1.0) * 0.1 };
    (lo - d, hi + d)
}

/// How a legend entry is drawn.
#[derive(Clone, Copy, PartialEq)]
pub enum Swatch {
    /// A line.
    Line,
    /// A filled box.
    Box,
}

/// The legend of line charts: each colour's first label.
fn line_entries(panels: &[Panel]) -> Vec<(String, RGBColor)> {
    let mut entries: BTreeMap<usize, String> = BTreeMap::new();
    for s in panels.iter().flat_map(|p| &p.series) {
        entries.entry(s.color).or_insert_with(|| s.label.clone());
    }
    entries.into_iter().map(|(c, l)| (l, PALETTE[c % PALETTE.len()])).collect()
}

/// Pixels the legend of `entries` takes: its column's width, and its height from the top of the
/// area it is drawn in (the figure must be at least that tall, or the last entries are cut off).
fn legend_size(entries: &[(String, RGBColor)]) -> (u32, u32) {
    let lines: Vec<Vec<String>> = entries.iter().map(|(l, _)| legend_lines(l)).collect();
    let longest = lines.iter().flatten().map(|l| l.chars().count()).max().unwrap_or(0) as u32;
    let width = (40 + 8 * longest).clamp(110, 40 + 8 * LEGEND_CHARS as u32);
    let height = LEGEND_TOP + lines.iter().map(|l| 24 + 18 * l.len().saturating_sub(1) as u32).sum::<u32>();
    (width, height)
}

/// Where the legend's first entry stands, in pixels from the top of its area.
const LEGEND_TOP: u32 = 60;

/// Splits `area` into the plotting part and a legend column on its right, draws the legend
/// there, and returns the plotting part.
fn with_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(String, RGBColor)],
    swatch: Swatch,
) -> Result<DrawingArea<DB, Shift>, DrawError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawError(e.to_string());
    if entries.is_empty() {
        return Ok(area.clone());
    }
    let (width, _) = legend_size(entries);
    let entries: Vec<(Vec<String>, RGBColor)> = entries.iter().map(|(l, c)| (legend_lines(l), *c)).collect();
    let (w, _) = area.dim_in_pixel();
    let (plot, legend) = area.split_horizontally(w.saturating_sub(width));
    let font = ("sans-serif", 14).into_font();
    let mut y = LEGEND_TOP as i32;
    for (label, color) in entries {
        match swatch {
            Swatch::Line => legend
                .draw(&PathElement::new(vec![(6, y), (28, y)], ShapeStyle::from(color).stroke_width(3)))
                .map_err(e)?,
            Swatch::Box => legend.draw(&Rectangle::new([(6, y - 7), (26, y + 7)], color.filled())).map_err(e)?,
        }
        // A label's first line stands by its swatch; further lines (the variants) under it.
        for (k, line) in label.iter().enumerate() {
            legend.draw(&Text::new(line.clone(), (34, y - 8 + 18 * k as i32), font.clone())).map_err(e)?;
        }
        y += 24 + 18 * label.len().saturating_sub(1) as i32;
    }
    Ok(plot)
}

/// The most characters a legend line holds (about 8 pixels each at its 14-point font): longer
/// lines are wrapped, not cut off at the figure's edge.
const LEGEND_CHARS: usize = 40;

/// A legend label's lines, each wrapped at spaces to at most [`LEGEND_CHARS`] characters (a word
/// longer than that stands alone); a wrapped line's continuation is indented two spaces more
/// than it.
fn legend_lines(label: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in label.lines() {
        let indent = line.len() - line.trim_start().len();
        let mut current = line[..indent].to_string();
        let mut empty = true;
        for word in line.split_whitespace() {
            if !empty && current.chars().count() + 1 + word.chars().count() > LEGEND_CHARS {
                out.push(std::mem::replace(&mut current, " ".repeat(indent + 2)));
                empty = true;
            }
            if !empty {
                current.push(' ');
            }
            current.push_str(word);
            empty = false;
        }
        out.push(current);
    }
    out
}

/// The largest value an over-time chart draws: on a log axis (loss, distance), 10x the largest
/// starting value, so one diverging run does not flatten the others. An accuracy (a linear axis)
/// is never capped: it rises from its start, and a cap at 10x its start hid every value above
/// 0.64 (Fashion-MNIST starts near 0.06).
fn divergence_cap(panels: &[Panel], x: Axis, y: Axis) -> f64 {
    if !(x.desc.contains("time") && y.log) {
        return f64::INFINITY;
    }
    let cap = 10.0
        * panels.iter().flat_map(|p| p.series.iter().filter_map(|s| s.points.first().map(|q| q.1))).fold(0.0, f64::max);
    if cap > 0.0 {
        cap
    } else {
        f64::INFINITY
    }
}

fn draw_lines<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    title: &str,
    panels: &[Panel],
    x: Axis,
    y: Axis,
) -> Result<(), DrawError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawError(e.to_string());
    area.fill(&WHITE).map_err(e)?;
    let cap = divergence_cap(panels, x, y);
    let area = area.titled(title, ("sans-serif", 22).into_font().style(FontStyle::Bold)).map_err(e)?;
    let area = with_legend(&area, &line_entries(panels), Swatch::Line)?;
    let cols = panels.len().clamp(1, 3);
    let rows = panels.len().div_ceil(cols).max(1);
    for (cell, panel) in area.split_evenly((rows, cols)).into_iter().zip(panels) {
        let Some(((x0, x1), (y0, y1))) = bounds(panel, x, y, cap) else { continue };
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
            .x_labels(label_count(x0, x1, x.log))
            .y_labels(label_count(y0, y1, y.log))
            .x_label_formatter(&|v| fmt_tick(*v, x.log))
            .y_label_formatter(&|v| fmt_tick(*v, y.log))
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(e)?;
        for s in &panel.series {
            let color = PALETTE[s.color % PALETTE.len()];
            let band: Vec<(f64, f64, f64)> = s
                .band
                .iter()
                .filter(|b| b.2 <= cap)
                .filter_map(|&(a, lo, hi)| Some((tr(a, x.log)?, tr(lo, y.log)?, tr(hi, y.log)?)))
                .collect();
            if band.len() > 1 {
                let outline: Vec<(f64, f64)> =
                    band.iter().map(|b| (b.0, b.1)).chain(band.iter().rev().map(|b| (b.0, b.2))).collect();
                chart.draw_series(std::iter::once(Polygon::new(outline, color.mix(0.18).filled()))).map_err(e)?;
            }
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.1 <= cap)
                .filter_map(|&(a, b)| Some((tr(a, x.log)?, tr(b, y.log)?)))
                .collect();
            let style = ShapeStyle::from(&color).stroke_width(2);
            chart.draw_series(LineSeries::new(pts.clone(), style)).map_err(e)?;
            if pts.len() <= 12 {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(e)?;
            }
        }
    }
    area.present().map_err(e)
}

/// What the drawing library said when a figure could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DrawError(pub String);

/// Renders `draw` to `stem.png` and `stem.svg`, each atomically.
fn both_formats(
    stem: &Path,
    size: (u32, u32),
    draw: &dyn Fn(Target) -> Result<(), DrawError>,
) -> crate::Result<Vec<PathBuf>> {
    register_font();
    let mut out = Vec::new();
    for ext in ["png", "svg"] {
        let dest = stem.with_extension(ext);
        let tmp = stem.with_extension(format!("tmp-{}.{ext}", std::process::id()));
        let res = if ext == "png" { draw(Target::Png(&tmp, size)) } else { draw(Target::Svg(&tmp, size)) };
        if let Err(err) = res {
            let _ = std::fs::remove_file(&tmp);
            return Err(crate::Error::Figure { path: dest, problem: err.0 });
        }
        std::fs::rename(&tmp, &dest).map_err(crate::Error::io("write", &dest))?;
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
pub(crate) use on_target;

/// A multi-panel line chart as PNG and SVG.
pub fn line_chart(stem: &Path, title: &str, panels: &[Panel], x: Axis, y: Axis) -> crate::Result<Vec<PathBuf>> {
    both_formats(stem, line_chart_size(panels), &|t| on_target!(t, a => draw_lines(a, title, panels, x, y)))
}

/// A line chart's pixels: 520 × 380 a panel, three panels a row, beside its legend, and tall
/// enough for the whole legend (below the title's 40 pixels).
fn line_chart_size(panels: &[Panel]) -> (u32, u32) {
    let cols = panels.len().clamp(1, 3) as u32;
    let rows = panels.len().div_ceil(3).max(1) as u32;
    let (legend_w, legend_h) = legend_size(&line_entries(panels));
    (520 * cols + legend_w.max(220), (40 + 380 * rows).max(40 + legend_h + 20))
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

/// A seed's value at time `t`: its last evaluation at or before `t` (its first before it
/// starts), so a run that ended is carried at its last value.
fn value_at(s: &[(f64, f64)], t: f64) -> f64 {
    s[s.partition_point(|p| p.0 <= t).saturating_sub(1)].1
}

/// A line (x, y) and its band (x, low, high).
type LineAndBand = (Vec<(f64, f64)>, Vec<(f64, f64, f64)>);

/// The median over seeds and their range at every time any seed was evaluated, each seed carried
/// at its last value after its run ended.
fn median_band(seeds: &[Vec<(f64, f64)>]) -> LineAndBand {
    let mut times: Vec<f64> = seeds.iter().flat_map(|s| s.iter().map(|p| p.0)).collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let (mut median, mut band) = (Vec::new(), Vec::new());
    for t in times {
        let mut v: Vec<f64> = seeds.iter().filter(|s| !s.is_empty()).map(|s| value_at(s, t)).collect();
        v.sort_by(f64::total_cmp);
        let h = v.len() / 2;
        let m = if v.len() % 2 == 1 { v[h] } else { (v[h - 1] + v[h]) / 2.0 };
        median.push((t, m));
        band.push((t, v[0], v[v.len() - 1]));
    }
    (median, band)
}

/// The number of seeds behind each line, as text: "3", or "2–3" where groups differ.
fn seed_counts(runs: &[RunRecord]) -> String {
    let mut groups: BTreeMap<(String, usize), usize> = BTreeMap::new();
    for r in runs {
        *groups.entry((r.summary.algorithm.clone(), r.spec.nodes)).or_default() += 1;
    }
    let (lo, hi) = (groups.values().min().copied().unwrap_or(0), groups.values().max().copied().unwrap_or(0));
    if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}–{hi}")
    }
}

/// Each algorithm's legend label: its name, then each variant the report picked (the fields that
/// vary among its runs, by their last name) with the node counts it was picked at.
fn variant_labels(all: &[RunRecord], best: &[RunRecord]) -> BTreeMap<String, String> {
    let text: BTreeMap<&Path, String> = all
        .iter()
        .zip(analysis::variants(all))
        .map(|(r, v)| {
            let short: Vec<String> =
                v.iter().map(|(k, x)| format!("{}={x}", k.rsplit('.').next().unwrap_or(k))).collect();
            (r.dir.as_path(), short.join(" "))
        })
        .collect();
    let mut picked: BTreeMap<String, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
    for r in best {
        let v = text.get(r.dir.as_path()).cloned().unwrap_or_default();
        let nodes = picked.entry(r.summary.algorithm.clone()).or_default().entry(v).or_default();
        if !nodes.contains(&r.spec.nodes) {
            nodes.push(r.spec.nodes);
        }
    }
    picked
        .into_iter()
        .map(|(alg, vs)| {
            let mut label = alg.clone();
            for (v, mut nodes) in vs.into_iter().filter(|(v, _)| !v.is_empty()) {
                nodes.sort_unstable();
                let n: Vec<String> = nodes.iter().map(usize::to_string).collect();
                label += &format!("\n  {v}: {} node{}", n.join(", "), if n == ["1"] { "" } else { "s" });
            }
            (alg, label)
        })
        .collect()
}

fn colors(runs: &[RunRecord]) -> BTreeMap<String, usize> {
    let mut labels: Vec<String> = runs.iter().map(|r| r.summary.algorithm.clone()).collect();
    labels.sort();
    labels.dedup();
    labels.into_iter().enumerate().map(|(i, l)| (l, i)).collect()
}

/// The over-time panels of `column` that the charts draw from the runs `all` of a sweep: per node
/// count, each algorithm's picked variant (the tables' rule), its median over seeds and their
/// range, labelled with the variant.
pub fn over_time_panels(all: &[RunRecord], column: &str) -> Vec<Panel> {
    let best = analysis::best_runs(all);
    over_time(&best, &variant_labels(all, &best), column)
}

/// Over-time panels (one per node count) of `column`: per algorithm, the median over seeds and
/// their range (`runs` are the picked variants' runs; `labels` name them).
fn over_time(runs: &[RunRecord], labels: &BTreeMap<String, String>, column: &str) -> Vec<Panel> {
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
                .map(|(a, seeds)| {
                    let (points, band) = median_band(&seeds);
                    let label = labels.get(&a).cloned().unwrap_or_else(|| a.clone());
                    Series { color: color[&a], label, points, band }
                })
                .collect(),
        })
        .collect()
}

fn draw_staleness<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    hists: &[(String, Vec<(u64, f64)>)],
) -> Result<(), DrawError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawError(e.to_string());
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
pub fn all(all: &[RunRecord], out: &Path) -> crate::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).map_err(crate::Error::io("create", out))?;
    let runs = &analysis::best_runs(all);
    let labels = variant_labels(all, runs);
    let target = crate::report::target_text(runs);
    let goal = if target == "none" { String::new() } else { format!(" (target: {target})") };
    let mut files = over_time_charts(runs, &labels, out, &goal)?;
    files.extend(scaling_charts(runs, out, &goal)?);
    files.extend(breakdown::chart(&out.join("time_breakdown"), runs)?);
    files.extend(per_algorithm_charts(runs, out)?);
    Ok(files)
}

/// Loss, accuracy and consensus distance against simulated time.
fn over_time_charts(
    runs: &[RunRecord],
    labels: &BTreeMap<String, String>,
    out: &Path,
    goal: &str,
) -> crate::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let t = Axis { desc: "simulated time (s)", log: false };
    let seeds = seed_counts(runs);
    let goal = &format!("{goal}: median of {seeds} seeds, band min–max");
    let loss = over_time(runs, labels, "loss");
    if !loss.is_empty() {
        files.extend(line_chart(
            &out.join("loss_vs_time"),
            &format!("Loss of the consensus model{goal}"),
            &loss,
            t,
            Axis { desc: "loss", log: true },
        )?);
    }
    let acc = over_time(runs, labels, "accuracy");
    if !acc.is_empty() {
        files.extend(line_chart(
            &out.join("accuracy_vs_time"),
            &format!("Accuracy of the consensus model{goal}"),
            &acc,
            t,
            Axis { desc: "accuracy", log: false },
        )?);
    }
    let dist = over_time(runs, labels, "consensus_distance");
    if dist.iter().any(|p| p.series.iter().any(|s| s.points.iter().any(|q| q.1 > 0.0))) {
        files.extend(line_chart(
            &out.join("consensus_distance"),
            "Mean squared distance of replicas from their average",
            &dist,
            t,
            Axis { desc: "distance²", log: true },
        )?);
    }
    Ok(files)
}

/// Time to target, speedup and efficiency, and throughput against node counts.
fn scaling_charts(runs: &[RunRecord], out: &Path, goal: &str) -> crate::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let nodes = scaling::node_counts(runs);
    let color = colors(runs);
    let ttt = scaling::series(runs, &nodes, &color, &|r| r.summary.time_to_target_s);
    let secs = Axis { desc: "simulated seconds", log: true };
    if !ttt.is_empty() {
        let panel = scaling::NodePanel {
            title: "mean over the seeds that reached it, 95% CI".into(),
            y: secs,
            series: ttt,
            reference: None,
        };
        let (sp, eff) = scaling::speedup(&panel.series, &nodes);
        files.extend(scaling::chart(
            &out.join("time_to_target_vs_nodes"),
            &format!("Time to reach the target, lower is better{goal}"),
            &nodes,
            std::slice::from_ref(&panel),
        )?);
        if nodes.len() > 1 && sp.iter().any(|s| s.points.len() > 1) {
            let panels = [
                scaling::NodePanel {
                    title: "speedup: time at the first scale every seed reached / time at m".into(),
                    y: Axis { desc: "speedup", log: true },
                    series: sp,
                    reference: None,
                },
                scaling::NodePanel {
                    title: "parallel efficiency: speedup / growth in nodes (1 = linear)".into(),
                    y: Axis { desc: "efficiency", log: false },
                    series: eff,
                    reference: Some(1.0),
                },
            ];
            files.extend(scaling::chart(
                &out.join("speedup_vs_nodes"),
                &format!("Speedup and parallel efficiency in time to target{goal}"),
                &nodes,
                &panels,
            )?);
        }
    }
    let thr = scaling::series(runs, &nodes, &color, &|r| Some(r.summary.updates_per_s).filter(|&u| u > 0.0));
    if !thr.is_empty() {
        let panel = scaling::NodePanel {
            title: "mean over seeds, 95% CI".into(),
            y: Axis { desc: "updates / s", log: true },
            series: thr,
            reference: None,
        };
        files.extend(scaling::chart(
            &out.join("throughput_vs_nodes"),
            "Model updates per simulated second",
            &nodes,
            std::slice::from_ref(&panel),
        )?);
    }
    Ok(files)
}

/// One timeline per algorithm (its run with the most nodes up to 16, first seed) and their
/// staleness histograms.
fn per_algorithm_charts(runs: &[RunRecord], out: &Path) -> crate::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut pick: BTreeMap<String, &RunRecord> = BTreeMap::new();
    for r in runs.iter().filter(|r| r.spec.nodes <= 16) {
        let better = |old: &&RunRecord| {
            (r.spec.nodes, std::cmp::Reverse(r.spec.seed)) > (old.spec.nodes, std::cmp::Reverse(old.spec.seed))
        };
        if pick.get(&r.summary.algorithm).is_none_or(better) {
            pick.insert(r.summary.algorithm.clone(), r);
        }
    }
    let picked: Vec<&RunRecord> = pick.values().copied().collect();
    if !picked.is_empty() {
        files.extend(timeline::chart(&out.join("timeline"), &picked)?);
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
pub fn validation(rows: &[(String, f64, f64)], stem: &Path) -> crate::Result<Vec<PathBuf>> {
    let n = rows.len().max(1);
    let flat = |y: f64, label: &str, color: usize| Series {
        label: label.into(),
        color,
        points: (0..n.max(2)).map(|i| (i as f64, y)).collect(),
        band: Vec::new(),
    };
    let ratio = Series {
        label: format!("simulated / real ({})", rows.iter().map(|r| r.0.as_str()).collect::<Vec<_>>().join(", ")),
        color: 0,
        points: rows.iter().enumerate().map(|(i, r)| (i as f64, r.2 / r.1)).collect(),
        band: Vec::new(),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An accuracy curve evaluated every second that rises by `step` a second from 0 and stops at
    /// the first evaluation at or above 0.8 (a run stopped at its target).
    fn stopped_at_target(step: f64) -> Vec<(f64, f64)> {
        let mut s = Vec::new();
        for t in 0.. {
            let v = (t as f64 * step).min(1.0);
            s.push((t as f64, v));
            if v >= 0.8 {
                return s;
            }
        }
        unreachable!()
    }

    #[test]
    fn legend_lines_are_wrapped_not_cut_off() {
        let label = "async_ps\n  delay_compensation=- staleness_lr=inverse lr=0.03 momentum=0.9: 4, 16 nodes";
        let lines = legend_lines(label);
        assert!(lines.iter().all(|l| l.chars().count() <= LEGEND_CHARS), "{lines:#?}");
        // Nothing is lost: the same words in the same order, the variant's lines indented.
        let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(words(&lines.join(" ")), words(label));
        assert_eq!(lines[0], "async_ps");
        assert!(lines[1].starts_with("  delay") && lines[2..].iter().all(|l| l.starts_with("    ")), "{lines:#?}");
        assert_eq!(legend_lines("sync\n  lr=0.1: 4 nodes"), ["sync", "  lr=0.1: 4 nodes"]);
    }

    #[test]
    fn a_line_chart_is_tall_enough_for_its_whole_legend() {
        // Six algorithms with three long variants each: a legend taller than one row of panels.
        let label = |a: usize| {
            format!("algorithm{a}\n  delay_compensation=- staleness_lr=inverse lr=0.03 momentum=0.9: 4 nodes\n  tau=16 lr=0.1 momentum=0.0: 16 nodes\n  lr=0.3 momentum=0.9: 64 nodes")
        };
        let series = |a: usize| Series { label: label(a), color: a, points: vec![(0.0, 1.0)], band: Vec::new() };
        let panels: Vec<Panel> =
            (0..3).map(|p| Panel { title: format!("{p}"), series: (0..6).map(series).collect() }).collect();
        let (_, legend_h) = legend_size(&line_entries(&panels));
        assert!(legend_h > 380, "the case needs a taller figure: {legend_h}");
        let (w, h) = line_chart_size(&panels);
        assert!(h >= 40 + legend_h, "figure {h} px, legend {legend_h} px below the title");
        assert!(w >= 3 * 520 + legend_size(&line_entries(&panels)).0);
        // A short legend keeps the usual size.
        let one: Vec<Panel> =
            vec![Panel { title: "4 nodes".into(), series: vec![Series { label: "sync".into(), ..series(0) }] }];
        assert_eq!(line_chart_size(&one), (520 + 220, 420));
    }

    fn first_at_or_above(points: &[(f64, f64)], target: f64) -> Option<f64> {
        points.iter().find(|p| p.1 >= target).map(|p| p.0)
    }

    #[test]
    fn the_median_curve_reaches_the_target_when_the_median_seed_does() {
        // Seeds reach 0.8 at 8 s, 16 s and 27 s (steps 0.1, 0.05, 0.03): the table's median time
        // is 16 s.
        let seeds: Vec<Vec<(f64, f64)>> = [0.1, 0.05, 0.03].iter().map(|&s| stopped_at_target(s)).collect();
        let times: Vec<f64> = seeds.iter().map(|s| s.last().unwrap().0).collect();
        assert_eq!(times, [8.0, 16.0, 27.0]);
        let (median, band) = median_band(&seeds);
        assert_eq!(first_at_or_above(&median, 0.8), Some(16.0), "the line crosses when the median seed does");
        assert_eq!(median.last().unwrap().0, 27.0, "drawn to the end of the longest run, not cut");
        let (t, lo, hi) = *band.last().unwrap();
        assert!(
            t == 27.0 && lo >= 0.8 && (hi - 0.81).abs() < 1e-12,
            "the band spans the seeds, the early ones carried"
        );
        // The old index-by-index mean stopped at the shortest run (8 s) and never reached 0.8.
        let n = seeds.iter().map(Vec::len).min().unwrap();
        let old: Vec<(f64, f64)> =
            (0..n).map(|i| (seeds[0][i].0, seeds.iter().map(|s| s[i].1).sum::<f64>() / 3.0)).collect();
        assert_eq!(first_at_or_above(&old, 0.8), None);
    }

    #[test]
    fn only_a_log_scale_over_time_chart_caps_diverging_values() {
        let panel = |start: f64| Panel {
            title: String::new(),
            series: vec![Series {
                label: String::new(),
                color: 0,
                points: vec![(0.0, start), (9.0, 0.8)],
                band: vec![],
            }],
        };
        let time = Axis { desc: "simulated time (s)", log: false };
        // An accuracy starting at 0.06 rises to 0.8: nothing may hide it.
        assert_eq!(divergence_cap(&[panel(0.06)], time, Axis { desc: "accuracy", log: false }), f64::INFINITY);
        // A loss starting at 2.5 is drawn up to 25.
        assert_eq!(divergence_cap(&[panel(2.5)], time, Axis { desc: "loss", log: true }), 25.0);
    }

    #[test]
    fn seeds_evaluated_at_different_times_are_merged_on_all_their_times() {
        let a = vec![(0.0, 1.0), (1.0, 0.5)];
        let b = vec![(0.0, 3.0), (0.5, 2.0), (2.0, 1.0)];
        let (median, band) = median_band(&[a, b]);
        assert_eq!(median, [(0.0, 2.0), (0.5, 1.5), (1.0, 1.25), (2.0, 0.75)]);
        assert_eq!(band[1], (0.5, 1.0, 2.0));
    }
}
