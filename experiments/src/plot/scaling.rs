//! Charts against node count: time to target, throughput, speedup and parallel efficiency.
//!
//! The x axis is categorical: one tick per node count of the runs, labelled with the count (so a
//! sweep over 1, 2, 4, ..., 100 nodes is ticked at exactly those). Points are means over seeds
//! with their 95% Student-t confidence bars. Time to target is averaged over the seeds that
//! reached it; a hollow marker says that not every seed did. Speedup is the time to target at
//! the smallest node count where every seed reached it, over the time at m nodes; parallel
//! efficiency is that speedup over the growth in nodes (1 is perfect scaling); their bars
//! propagate both times' intervals (first order).

use super::{both_formats, fmt_tick, on_target, tr, with_legend, Axis, DrawError, Swatch, Target, PALETTE};
use crate::analysis::mean_ci;
use crate::sweep::RunRecord;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One point: the mean at a node count and its 95% CI half-width (NaN: none).
#[derive(Clone, Copy, Debug)]
pub struct NodePoint {
    /// Index of the node count on the axis.
    pub at: usize,
    /// Mean.
    pub mean: f64,
    /// 95% CI half-width.
    pub ci: f64,
    /// Drawn hollow: not every run contributed.
    pub partial: bool,
}

/// One algorithm's line.
pub struct NodeSeries {
    /// Legend label.
    pub label: String,
    /// Colour index.
    pub color: usize,
    /// Its points, in node order.
    pub points: Vec<NodePoint>,
}

/// One panel: a title, a y axis and its lines.
pub struct NodePanel<'a> {
    /// Title.
    pub title: String,
    /// The y axis.
    pub y: Axis<'a>,
    /// The lines.
    pub series: Vec<NodeSeries>,
    /// A horizontal reference line (e.g. efficiency 1), if any.
    pub reference: Option<f64>,
}

fn draw<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    title: &str,
    nodes: &[usize],
    panels: &[NodePanel],
) -> Result<(), DrawError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawError(e.to_string());
    area.fill(&WHITE).map_err(e)?;
    let area = area.titled(title, ("sans-serif", 20).into_font().style(FontStyle::Bold)).map_err(e)?;
    let mut entries: BTreeMap<usize, String> = BTreeMap::new();
    for s in panels.iter().flat_map(|p| &p.series) {
        entries.entry(s.color).or_insert_with(|| s.label.clone());
    }
    let mut entries: Vec<(String, RGBColor)> =
        entries.into_iter().map(|(c, l)| (l, PALETTE[c % PALETTE.len()])).collect();
    if panels.iter().flat_map(|p| &p.series).flat_map(|s| &s.points).any(|p| p.partial) {
        entries.push(("hollow: not every seed".into(), RGBColor(255, 255, 255)));
    }
    let area = with_legend(&area, &entries, Swatch::Line)?;
    for (cell, panel) in area.split_evenly((1, panels.len().max(1))).into_iter().zip(panels) {
        draw_panel(&cell, panel, nodes)?;
    }
    area.present().map_err(e)
}

/// One panel: the series of `panel` against `nodes`, with 95% CI bars and a reference line.
fn draw_panel<DB: DrawingBackend>(
    cell: &DrawingArea<DB, Shift>,
    panel: &NodePanel,
    nodes: &[usize],
) -> Result<(), DrawError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawError(e.to_string());
    let k = nodes.len();
    let log = panel.y.log;
    let Some((floor, y0, y1)) = y_range(panel) else { return Ok(()) };
    let t = |v: f64| tr(v.max(floor), log).expect("positive after the floor");
    let mut chart = ChartBuilder::on(cell)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d((0..k.saturating_sub(1)).into_segmented(), y0..y1)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("nodes")
        .y_desc(panel.y.desc)
        .x_labels(k + 1)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => nodes.get(*i).map_or(String::new(), usize::to_string),
            _ => String::new(),
        })
        .y_labels(super::label_count(y0, y1, log))
        .y_label_formatter(&|v| fmt_tick(*v, log))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    if let Some(r) = panel.reference {
        let style = ShapeStyle::from(&BLACK.mix(0.4)).stroke_width(1);
        chart
            .draw_series(LineSeries::new([(SegmentValue::Exact(0), t(r)), (SegmentValue::Last, t(r))], style))
            .map_err(e)?;
    }
    for s in &panel.series {
        let color = PALETTE[s.color % PALETTE.len()];
        let style = ShapeStyle::from(&color).stroke_width(2);
        let pts: Vec<(SegmentValue<usize>, f64)> =
            s.points.iter().map(|p| (SegmentValue::CenterOf(p.at), t(p.mean))).collect();
        chart.draw_series(LineSeries::new(pts, style)).map_err(e)?;
        chart
            .draw_series(s.points.iter().filter(|p| p.ci.is_finite() && p.ci > 0.0).map(|p| {
                ErrorBar::new_vertical(
                    SegmentValue::CenterOf(p.at),
                    t(p.mean - p.ci),
                    t(p.mean),
                    t(p.mean + p.ci),
                    style,
                    10,
                )
            }))
            .map_err(e)?;
        chart
            .draw_series(s.points.iter().map(|p| {
                let fill = if p.partial { WHITE.filled() } else { color.filled() };
                Circle::new((SegmentValue::CenterOf(p.at), t(p.mean)), 5, fill)
            }))
            .map_err(e)?;
        chart
            .draw_series(s.points.iter().map(|p| Circle::new((SegmentValue::CenterOf(p.at), t(p.mean)), 5, style)))
            .map_err(e)?;
    }
    Ok(())
}

/// Draws a chart against node count as PNG and SVG.
pub fn chart(stem: &Path, title: &str, nodes: &[usize], panels: &[NodePanel]) -> crate::Result<Vec<PathBuf>> {
    let size = (620 * panels.len().max(1) as u32 + 230, 460);
    both_formats(stem, size, &|t| on_target!(t, a => draw(a, title, nodes, panels)))
}

/// The node counts of `runs`, in order.
pub fn node_counts(runs: &[RunRecord]) -> Vec<usize> {
    runs.iter().map(|r| r.spec.nodes).collect::<BTreeSet<_>>().into_iter().collect()
}

/// Per algorithm and node count: the values of `f` over the runs (None where a run has none).
fn by_alg(
    runs: &[RunRecord],
    f: &dyn Fn(&RunRecord) -> Option<f64>,
) -> BTreeMap<String, BTreeMap<usize, Vec<Option<f64>>>> {
    let mut by: BTreeMap<String, BTreeMap<usize, Vec<Option<f64>>>> = BTreeMap::new();
    for r in runs {
        by.entry(r.summary.algorithm.clone()).or_default().entry(r.spec.nodes).or_default().push(f(r));
    }
    by
}

/// One line per algorithm of the mean of `f` at each node count (over the runs that have it).
pub fn series(
    runs: &[RunRecord],
    nodes: &[usize],
    colors: &BTreeMap<String, usize>,
    f: &dyn Fn(&RunRecord) -> Option<f64>,
) -> Vec<NodeSeries> {
    by_alg(runs, f)
        .into_iter()
        .map(|(alg, per)| NodeSeries {
            color: colors[&alg],
            label: alg,
            points: per
                .into_iter()
                .filter_map(|(n, v)| {
                    let have: Vec<f64> = v.iter().flatten().copied().filter(|x| x.is_finite()).collect();
                    let (mean, ci) = mean_ci(&have);
                    let at = nodes.iter().position(|&m| m == n)?;
                    (!have.is_empty()).then_some(NodePoint { at, mean, ci, partial: have.len() < v.len() })
                })
                .collect(),
        })
        .filter(|s| !s.points.is_empty())
        .collect()
}

/// Speedup and efficiency lines from time-to-target lines, against each algorithm's smallest
/// node count where every seed reached the target.
pub fn speedup(ttt: &[NodeSeries], nodes: &[usize]) -> (Vec<NodeSeries>, Vec<NodeSeries>) {
    let mut sp = Vec::new();
    let mut eff = Vec::new();
    for s in ttt {
        let Some(base) = s.points.iter().find(|p| !p.partial) else { continue };
        let rel = |p: &NodePoint| {
            if p.at == base.at {
                return (1.0, 0.0); // exactly 1 by definition
            }
            let r0 = if base.ci.is_finite() { base.ci / base.mean } else { 0.0 };
            let r1 = if p.ci.is_finite() { p.ci / p.mean } else { 0.0 };
            (base.mean / p.mean, (r0 * r0 + r1 * r1).sqrt())
        };
        let pts: Vec<(NodePoint, f64)> = s
            .points
            .iter()
            .filter(|p| p.at >= base.at)
            .map(|p| {
                let (v, r) = rel(p);
                let grow = nodes[p.at] as f64 / nodes[base.at] as f64;
                (NodePoint { at: p.at, mean: v, ci: v * r, partial: p.partial }, grow)
            })
            .collect();
        sp.push(NodeSeries { label: s.label.clone(), color: s.color, points: pts.iter().map(|p| p.0).collect() });
        eff.push(NodeSeries {
            label: s.label.clone(),
            color: s.color,
            points: pts
                .iter()
                .map(|(p, g)| NodePoint { at: p.at, mean: p.mean / g, ci: p.ci / g, partial: p.partial })
                .collect(),
        });
    }
    (sp, eff)
}

/// The smallest value shown (logs clamp below it) and the y range of `panel` (means, CI ends and
/// the reference line), or `None` when it has nothing to show.
fn y_range(panel: &NodePanel) -> Option<(f64, f64, f64)> {
    let log = panel.y.log;
    let values: Vec<f64> = panel
        .series
        .iter()
        .flat_map(|s| &s.points)
        .flat_map(|p| {
            let h = if p.ci.is_finite() { p.ci } else { 0.0 };
            [p.mean - h, p.mean + h, p.mean]
        })
        .chain(panel.reference)
        .filter(|v| v.is_finite() && (!log || *v > 0.0))
        .collect();
    if values.is_empty() {
        return None;
    }
    let floor = values.iter().copied().fold(f64::INFINITY, f64::min);
    let t = |v: f64| tr(v.max(floor), log).expect("positive after the floor");
    let (lo, hi) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| (a.min(t(v)), b.max(t(v))));
    let (y0, y1) = super::pad(lo, hi);
    Some((floor, y0, y1))
}
