//! The tables printed after a run or sweep, and `report.md`.
//!
//! `report.md` states the target, then one pivot table per metric (a row per node count, a
//! column per algorithm, each cell the algorithm's best variant at that scale), with the best
//! algorithm of each row in bold. "Best" is decided with the 95% confidence intervals: every
//! algorithm whose interval overlaps the leader's is bold too (a tie). A last table lists every
//! variant.

use crate::analysis::{variant_text, AggregateRow};
use crate::sweep::RunRecord;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

fn num(x: f64, digits: usize) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x != 0.0 && (x.abs() < 1e-3 || x.abs() >= 1e5) {
        format!("{x:.2e}")
    } else {
        format!("{x:.digits$}")
    }
}

fn pm(v: (f64, f64), digits: usize) -> String {
    if v.1.is_finite() && v.0.is_finite() {
        format!("{} ± {}", num(v.0, digits), num(v.1, digits))
    } else {
        num(v.0, digits)
    }
}

/// Time to target as text: the median (unreached seeds counted as beyond the stop time) and how
/// many seeds reached it; `> stop` when fewer than half did.
pub fn time_to_target_text(r: &AggregateRow) -> String {
    let t = &r.time_to_target;
    let m = t.median_s.map_or(format!("> {}", num(t.stop_s, 0)), |m| num(m, 1));
    format!("{m} ({}/{})", t.reached, t.runs)
}

/// What became of the runs that did not end with a finite loss, for a table's notes column.
fn remarks(r: &AggregateRow) -> String {
    let mut v = Vec::new();
    if r.diverged > 0 {
        v.push(format!("{} diverged", r.diverged));
    }
    if r.no_model_at_end > 0 {
        v.push(format!("{} ended with no live model", r.no_model_at_end));
    }
    v.join("; ")
}

/// A Markdown table of aggregated rows (means ± 95% CI over seeds).
pub fn table(rows: &[AggregateRow]) -> String {
    let with_variant = rows.iter().any(|r| !r.variant.is_empty());
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| algorithm | nodes |{} seeds | final loss | final acc. | time to target, median (reached) | mean of reaching seeds (s) | updates/s | sync iteration (s) | notes |",
        if with_variant { " variant |" } else { "" }
    );
    let _ = writeln!(s, "|---|---:|{}---:|---:|---:|---:|---:|---:|---:|---|", if with_variant { "---|" } else { "" });
    for r in rows {
        let variant = if with_variant { format!(" {} |", r.variant_text()) } else { String::new() };
        let _ = writeln!(
            s,
            "| {} | {} |{variant} {} | {} | {} | {} | {} | {} | {} | {} |",
            r.algorithm,
            r.nodes,
            r.seeds,
            pm(r.final_loss, 4),
            pm(r.final_accuracy, 3),
            time_to_target_text(r),
            pm(r.time_to_target.mean_reached_s, 1),
            pm(r.updates_per_s, 1),
            pm(r.iteration_time_s, 4),
            remarks(r),
        );
    }
    s
}

/// A metric of the pivot tables.
struct Metric {
    title: &'static str,
    /// Mean and CI half-width.
    value: fn(&AggregateRow) -> (f64, f64),
    /// Cell text.
    text: fn(&AggregateRow) -> String,
    higher_is_better: bool,
    /// The figures (file stems in `plots/`) that illustrate the table, shown beside it.
    figures: &'static [&'static str],
}

fn interval(v: (f64, f64)) -> (f64, f64) {
    let h = if v.1.is_finite() { v.1 } else { 0.0 };
    (v.0 - h, v.0 + h)
}

/// The algorithms tied for best among `cells` (a row of a pivot table).
fn leaders(cells: &[&AggregateRow], m: &Metric) -> BTreeSet<String> {
    let ttt = m.title.starts_with("Time to target");
    let usable: Vec<&&AggregateRow> =
        cells.iter().filter(|r| (m.value)(r).0.is_finite() && (!ttt || r.time_to_target.median_s.is_some())).collect();
    let better = |a: &AggregateRow, b: &AggregateRow| {
        if ttt {
            a.rank_key() < b.rank_key()
        } else if m.higher_is_better {
            (m.value)(a).0 > (m.value)(b).0
        } else {
            (m.value)(a).0 < (m.value)(b).0
        }
    };
    let Some(lead) = usable.iter().copied().reduce(|a, b| if better(b, a) { b } else { a }) else {
        return BTreeSet::new();
    };
    let li = interval((m.value)(lead));
    usable
        .iter()
        .filter(|r| {
            let ri = interval((m.value)(r));
            let same_reach = !ttt || r.time_to_target.reached == lead.time_to_target.reached;
            same_reach && ri.0 <= li.1 && li.0 <= ri.1
        })
        .map(|r| r.algorithm.clone())
        .collect()
}

fn pivot(best: &[AggregateRow], m: &Metric) -> String {
    let algs: BTreeSet<&str> = best.iter().map(|r| r.algorithm.as_str()).collect();
    let mut by_nodes: BTreeMap<usize, Vec<&AggregateRow>> = BTreeMap::new();
    for r in best {
        by_nodes.entry(r.nodes).or_default().push(r);
    }
    let mut s = format!("### {}\n\n| nodes |", m.title);
    for a in &algs {
        let _ = write!(s, " {a} |");
    }
    let _ = write!(s, "\n|---:|");
    for _ in &algs {
        s.push_str("---:|");
    }
    s.push('\n');
    for (nodes, cells) in &by_nodes {
        let lead = leaders(cells, m);
        let _ = write!(s, "| {nodes} |");
        for a in &algs {
            let cell = match cells.iter().find(|r| r.algorithm == *a) {
                None => String::new(),
                Some(r) if lead.contains(*a) => format!("**{}**", (m.text)(r)),
                Some(r) => (m.text)(r),
            };
            let _ = write!(s, " {cell} |");
        }
        s.push('\n');
    }
    s
}

const METRICS: [Metric; 4] = [
    Metric {
        title: "Time to target (simulated s): median over seeds, unreached seeds counted as beyond the stop time; (reached/seeds)",
        value: |r| r.time_to_target.mean_reached_s,
        text: time_to_target_text,
        higher_is_better: false,
        figures: &["time_to_target_vs_nodes", "accuracy_vs_time", "loss_vs_time"],
    },
    Metric {
        title: "Final loss (mean ± 95% CI)",
        value: |r| r.final_loss,
        text: |r| if r.final_loss.0.is_finite() { pm(r.final_loss, 4) } else { remarks(r) },
        higher_is_better: false,
        figures: &["consensus_distance"],
    },
    Metric {
        title: "Final accuracy (mean ± 95% CI)",
        value: |r| r.final_accuracy,
        text: |r| pm(r.final_accuracy, 3),
        higher_is_better: true,
        figures: &[],
    },
    Metric {
        title: "Model updates per simulated second (mean ± 95% CI)",
        value: |r| r.updates_per_s,
        text: |r| pm(r.updates_per_s, 1),
        higher_is_better: true,
        figures: &["throughput_vs_nodes", "speedup_vs_nodes", "time_breakdown"],
    },
];

/// What the runs aim for, as text: "loss ≤ 0.03", "accuracy ≥ 0.8", or "none".
pub fn target_text(runs: &[RunRecord]) -> String {
    let targets: BTreeSet<String> = runs
        .iter()
        .map(|r| {
            let s = &r.spec.stop;
            match (s.target_loss, s.target_accuracy) {
                (Some(l), Some(a)) => format!("loss ≤ {l} or accuracy ≥ {a}"),
                (Some(l), None) => format!("loss ≤ {l}"),
                (None, Some(a)) => format!("accuracy ≥ {a}"),
                (None, None) => "none".into(),
            }
        })
        .collect();
    targets.into_iter().collect::<Vec<_>>().join("; ")
}

/// `report.md` of a sweep: the target, the verdicts, the pivot tables of the best variants each
/// with the figures drawn from the same variants beside it (`figures`: the stems of the files in
/// `plots/`; a figure not drawn is not shown), the chosen variants, and every variant.
pub fn report_md(
    title: &str,
    runs: &[RunRecord],
    rows: &[AggregateRow],
    best: &[AggregateRow],
    figures: &BTreeSet<String>,
) -> String {
    let mut md = format!("# {title}\n\n");
    let _ = writeln!(md, "**Target:** {}. {} runs in {} groups.\n", target_text(runs), runs.len(), rows.len());
    md.push_str(
        "Each cell is the algorithm's best variant at that node count (most seeds reaching the target, then the \
         shortest median time, then the lowest final loss). **Bold**: the best algorithm of the row, and every \
         algorithm whose 95% confidence interval overlaps it (a tie). Intervals are Student-t over seeds; a \
         single seed has none.\n\n",
    );
    if runs.iter().any(|r| r.spec.stop.target_loss.is_some() || r.spec.stop.target_accuracy.is_some()) {
        let mut times: BTreeMap<(usize, String), Vec<Option<f64>>> = BTreeMap::new();
        for r in crate::analysis::best_runs(runs) {
            times.entry((r.spec.nodes, r.summary.algorithm.clone())).or_default().push(r.summary.time_to_target_s);
        }
        md.push_str(&crate::verdict::verdicts_md(&crate::verdict::verdicts(&times)));
        md.push('\n');
    }
    let has_acc = best.iter().any(|r| r.final_accuracy.0.is_finite());
    for m in METRICS.iter().filter(|m| has_acc || !m.title.starts_with("Final accuracy")) {
        md.push_str(&pivot(best, m));
        md.push('\n');
        for f in m.figures.iter().filter(|f| figures.contains(**f)) {
            let _ = writeln!(md, "![{f}](plots/{f}.png)\n");
        }
    }
    if best.iter().any(|r| !r.variant.is_empty()) {
        md.push_str("### The best variant of each cell\n\n| algorithm | nodes | variant |\n|---|---:|---|\n");
        for r in best.iter().filter(|r| !r.variant.is_empty()) {
            let _ = writeln!(md, "| {} | {} | {} |", r.algorithm, r.nodes, variant_text(&r.variant));
        }
        md.push('\n');
    }
    md.push_str("## Every variant\n\n");
    md.push_str(&table(rows));
    md
}
