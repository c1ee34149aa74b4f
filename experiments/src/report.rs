//! The short table printed after a run or sweep, and `report.md`.

use crate::sweep::AggregateRow;
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
    if v.1 > 0.0 && v.1.is_finite() {
        format!("{} ± {}", num(v.0, digits), num(v.1, digits))
    } else {
        num(v.0, digits)
    }
}

/// A Markdown table of aggregated rows (means ± 95% CI over seeds).
pub fn table(rows: &[AggregateRow]) -> String {
    let with_variant = rows.iter().any(|r| !r.variant.is_empty());
    let mut s = String::from(if with_variant {
        "| algorithm | nodes | variant | seeds | final loss | final acc. | reached target | time to target (s) | updates/s | sync iteration (s) |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
    } else {
        "| algorithm | nodes | seeds | final loss | final acc. | reached target | time to target (s) | updates/s | sync iteration (s) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    });
    for r in rows {
        let variant = if with_variant { format!(" {} |", r.variant) } else { String::new() };
        let _ = writeln!(
            s,
            "| {} | {} |{variant} {} | {} | {} | {}/{} | {} | {} | {} |",
            r.algorithm,
            r.nodes,
            r.seeds,
            pm(r.final_loss, 4),
            pm(r.final_accuracy, 3),
            r.reached,
            r.seeds,
            pm(r.time_to_target_s, 1),
            pm(r.updates_per_s, 1),
            pm(r.iteration_time_s, 4),
        );
    }
    s
}
