//! Where the workers' time goes: one panel per algorithm, one stacked bar per node count, of the
//! fraction of the workers' time spent computing, blocked in communication, idle (waiting for
//! others, a staleness bound, a barrier) and crashed: means over workers and seeds of
//! `time_breakdown`. Communication that did not block, and so overlapped other work (a gossip
//! exchange during a gradient, a push while the next gradient runs), is drawn as a dark band at
//! the bottom of the computing block: the workers' NIC transmit time (`nic_send_s`) beyond their
//! blocked time, at most their computing time. Server ranks (parameter-server shards, EASGD's
//! centre) are not workers and are left out.

use super::{both_formats, on_target, with_legend, DrawError, Swatch, Target, PALETTE};
use crate::sweep::RunRecord;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Mean fractions of worker time: computing, communicating, idle, crashed, and the overlapped
/// communication (a part of computing).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Shares {
    /// Computing.
    pub computing: f64,
    /// Blocked in communication.
    pub communicating: f64,
    /// Idle.
    pub idle: f64,
    /// Crashed.
    pub crashed: f64,
    /// Communication overlapped with other work.
    pub overlapped: f64,
}

/// The shares of one run's workers (ranks below `nodes`).
pub fn shares(r: &RunRecord) -> Option<Shares> {
    let t = r.summary.sim_time_s;
    let workers = r.spec.nodes.min(r.summary.time_breakdown.len());
    if t <= 0.0 || workers == 0 {
        return None;
    }
    let mut s = Shares::default();
    for (rank, b) in r.summary.time_breakdown.iter().take(workers).enumerate() {
        s.computing += b.computing / t;
        s.communicating += b.communicating / t;
        s.idle += b.idle / t;
        s.crashed += b.crashed / t;
        let send = r.summary.nic_send_s.get(rank).copied().unwrap_or(0.0);
        s.overlapped += (send - b.communicating).clamp(0.0, b.computing) / t;
    }
    let n = workers as f64;
    Some(Shares {
        computing: s.computing / n,
        communicating: s.communicating / n,
        idle: s.idle / n,
        crashed: s.crashed / n,
        overlapped: s.overlapped / n,
    })
}

/// Algorithm -> node count -> mean shares over its runs.
pub fn table(runs: &[RunRecord]) -> BTreeMap<String, BTreeMap<usize, Shares>> {
    let mut acc: BTreeMap<String, BTreeMap<usize, (Shares, usize)>> = BTreeMap::new();
    for r in runs {
        let Some(s) = shares(r) else { continue };
        let e = acc.entry(r.summary.algorithm.clone()).or_default().entry(r.spec.nodes).or_default();
        e.0.computing += s.computing;
        e.0.communicating += s.communicating;
        e.0.idle += s.idle;
        e.0.crashed += s.crashed;
        e.0.overlapped += s.overlapped;
        e.1 += 1;
    }
    acc.into_iter()
        .map(|(a, per)| {
            let per = per
                .into_iter()
                .map(|(n, (s, k))| {
                    let k = k as f64;
                    let m = Shares {
                        computing: s.computing / k,
                        communicating: s.communicating / k,
                        idle: s.idle / k,
                        crashed: s.crashed / k,
                        overlapped: s.overlapped / k,
                    };
                    (n, m)
                })
                .collect();
            (a, per)
        })
        .collect()
}

const COMPUTING: RGBColor = PALETTE[0];
const OVERLAP: RGBColor = RGBColor(16, 60, 90);
const COMMUNICATING: RGBColor = PALETTE[1];
const IDLE: RGBColor = RGBColor(200, 200, 200);
const CRASHED: RGBColor = PALETTE[3];

fn draw<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    data: &BTreeMap<String, BTreeMap<usize, Shares>>,
) -> Result<(), DrawError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawError(e.to_string());
    area.fill(&WHITE).map_err(e)?;
    let area = area
        .titled(
            "Where the workers' time goes (mean over workers and seeds)",
            ("sans-serif", 20).into_font().style(FontStyle::Bold),
        )
        .map_err(e)?;
    let legend = [
        ("computing".to_string(), COMPUTING),
        ("  of which overlapped communication".to_string(), OVERLAP),
        ("blocked in communication".to_string(), COMMUNICATING),
        ("idle (waiting)".to_string(), IDLE),
        ("crashed".to_string(), CRASHED),
    ];
    let area = with_legend(&area, &legend, Swatch::Box)?;
    let cols = data.len().clamp(1, 3);
    let rows = data.len().div_ceil(cols).max(1);
    for (cell, (alg, per)) in area.split_evenly((rows, cols)).into_iter().zip(data) {
        let nodes: Vec<usize> = per.keys().copied().collect();
        let k = nodes.len();
        let mut chart = ChartBuilder::on(&cell)
            .caption(alg, ("sans-serif", 16))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(56)
            .build_cartesian_2d((0..k.saturating_sub(1)).into_segmented(), 0.0..1.0)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("nodes")
            .y_desc("fraction of time")
            .x_labels(k + 1)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => nodes.get(*i).map_or(String::new(), usize::to_string),
                _ => String::new(),
            })
            .label_style(("sans-serif", 13))
            .draw()
            .map_err(e)?;
        let mut bars = Vec::new();
        for (i, s) in per.values().enumerate() {
            let (x0, x1) = (|| SegmentValue::Exact(i), || SegmentValue::Exact(i + 1));
            let mut y = 0.0;
            for (v, color) in
                [(s.computing, COMPUTING), (s.communicating, COMMUNICATING), (s.idle, IDLE), (s.crashed, CRASHED)]
            {
                bars.push(Rectangle::new([(x0(), y), (x1(), y + v)], color.filled()));
                y += v;
            }
            bars.push(Rectangle::new([(x0(), 0.0), (x1(), s.overlapped.min(s.computing))], OVERLAP.filled()));
        }
        chart
            .draw_series(bars.into_iter().map(|mut r| {
                r.set_margin(0, 0, 6, 6);
                r
            }))
            .map_err(e)?;
    }
    area.present().map_err(e)
}

/// Draws the breakdown figure (`stem.png`, `stem.svg`).
pub fn chart(stem: &Path, runs: &[RunRecord]) -> crate::Result<Vec<PathBuf>> {
    let data = table(runs);
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let cols = data.len().clamp(1, 3) as u32;
    let rows = data.len().div_ceil(3).max(1) as u32;
    both_formats(stem, (480 * cols + 380, 40 + 360 * rows), &|t| on_target!(t, a => draw(a, &data)))
}
