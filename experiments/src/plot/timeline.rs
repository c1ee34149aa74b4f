//! Timelines: what each rank did over the first seconds of a run (from `timeline.csv`), one row
//! per rank, labelled with its role: `worker i`, `shard j` (a parameter-server shard) or `centre`
//! (EASGD's centre variable). Servers never compute: their time is shown as idle (serving
//! messages takes them no modelled time).

use super::{both_formats, on_target, with_legend, DrawError, Swatch, Target, PALETTE};
use crate::spec::Spec;
use crate::sweep::RunRecord;
use dsgd_runtime::runner::AlgorithmConfig;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// The role of `rank` in a run of `spec`.
pub fn role(spec: &Spec, rank: usize) -> String {
    if rank < spec.nodes {
        return format!("worker {rank}");
    }
    match spec.algorithm {
        AlgorithmConfig::AsyncPs(_) => format!("shard {}", rank - spec.nodes),
        AlgorithmConfig::Easgd(_) => "centre".into(),
        _ => format!("rank {rank}"),
    }
}

const STATES: [(&str, RGBColor); 4] = [
    ("computing", PALETTE[0]),
    ("communicating", PALETTE[1]),
    ("idle", RGBColor(200, 200, 200)),
    ("crashed", PALETTE[3]),
];

fn rows_of(dir: &Path) -> Vec<(usize, String, f64, f64)> {
    let text = std::fs::read_to_string(dir.join("timeline.csv")).unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.first()?.parse().ok()?, f.get(1)?.to_string(), f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?))
        })
        .collect()
}

fn draw<DB: DrawingBackend>(area: DrawingArea<DB, Shift>, runs: &[&RunRecord]) -> Result<(), DrawError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| DrawError(e.to_string());
    area.fill(&WHITE).map_err(e)?;
    let area = area
        .titled("What each rank does over time", ("sans-serif", 22).into_font().style(FontStyle::Bold))
        .map_err(e)?;
    let legend: Vec<(String, RGBColor)> = STATES.iter().map(|(n, c)| (n.to_string(), *c)).collect();
    let area = with_legend(&area, &legend, Swatch::Box)?;
    for (cell, r) in area.split_evenly((runs.len().max(1), 1)).into_iter().zip(runs) {
        let rows = rows_of(&r.dir);
        let ranks = r.spec.ranks().max(rows.iter().map(|x| x.0 + 1).max().unwrap_or(1));
        let t1 = rows.iter().map(|x| x.3).fold(0.0, f64::max).max(1e-9);
        let mut chart = ChartBuilder::on(&cell)
            .caption(format!("{} ({} workers)", r.summary.algorithm, r.spec.nodes), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(0.0..t1, (0..ranks.saturating_sub(1)).into_segmented())
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("simulated time (s)")
            .disable_y_mesh()
            .y_labels(ranks + 1)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) if *i < ranks => role(&r.spec, *i),
                _ => String::new(),
            })
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(e)?;
        for (name, color) in STATES {
            chart
                .draw_series(rows.iter().filter(|x| x.1 == name).map(|x| {
                    let mut b = Rectangle::new(
                        [(x.2, SegmentValue::Exact(x.0)), (x.3, SegmentValue::Exact(x.0 + 1))],
                        color.filled(),
                    );
                    b.set_margin(2, 2, 0, 0);
                    b
                }))
                .map_err(e)?;
        }
    }
    area.present().map_err(e)
}

/// Draws the timelines of `runs` (one panel each) as `stem.png` and `stem.svg`.
pub fn chart(stem: &Path, runs: &[&RunRecord]) -> crate::Result<Vec<PathBuf>> {
    let height: u32 = runs.iter().map(|r| 90 + 16 * r.spec.ranks().min(40) as u32).sum();
    both_formats(stem, (1250, 40 + height), &|t| on_target!(t, a => draw(a, runs)))
}
