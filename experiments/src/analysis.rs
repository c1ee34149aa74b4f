//! Sweep analysis on tidy data: `runs.csv` (one row per run), `aggregate.csv` (one row per grid
//! point without its seed) and the choice of each algorithm's best variant.
//!
//! Runs are grouped by algorithm, node count and every other spec field that varies among the
//! runs of that algorithm (its *variant*: a learning rate, a collective, EASGD's τ...), except
//! the seed and the name; each group is aggregated over its seeds. Means carry 95% confidence
//! half-widths from Student's t with the exact quantile for their degrees of freedom (none for a
//! single value). Time to target never drops the seeds that missed it: the median counts them as
//! "beyond the stop time" (so it is known only when at least half reached the target), and the
//! mean over the reaching seeds always travels with their count.

use crate::output::Summary;
use crate::sweep::RunRecord;
use serde_json::Value;
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::collections::{BTreeMap, BTreeSet};

/// The two-sided 95% quantile of Student's t with `df` degrees of freedom.
pub fn t95(df: usize) -> f64 {
    StudentsT::new(0.0, 1.0, df as f64).expect("positive degrees of freedom").inverse_cdf(0.975)
}

/// Mean and 95% confidence half-width of a sample (NaN half-width for fewer than two values).
pub fn mean_ci(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, f64::NAN);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    (mean, t95(n - 1) * (var / n as f64).sqrt())
}

/// The median of `xs`, where `None` stands for a value beyond every finite one; `None` if the
/// median itself is beyond.
pub fn median_beyond(xs: &[Option<f64>]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().map(|x| x.unwrap_or(f64::INFINITY)).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let m = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    m.is_finite().then_some(m)
}

/// Flattens a JSON value into dotted paths (arrays stay whole, as their JSON text).
pub fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, x, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

fn flat_spec(r: &RunRecord) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    flatten("", &serde_json::to_value(&r.spec).expect("serialises"), &mut m);
    m
}

/// Fields never part of a variant: they are the seed, the run's name, or have their own column.
fn is_identity(k: &str) -> bool {
    k == "seed" || k == "name" || k == "nodes"
}

/// The fields that vary across `runs` (flattened paths, identity fields excluded), in order.
pub fn varying_fields(runs: &[RunRecord]) -> Vec<String> {
    let flat: Vec<_> = runs.iter().map(flat_spec).collect();
    let keys: BTreeSet<&String> = flat.iter().flat_map(|m| m.keys()).collect();
    keys.into_iter().filter(|k| !is_identity(k) && flat.iter().any(|m| m.get(*k) != flat[0].get(*k))).cloned().collect()
}

/// Each run's variant: the `(field, value)` pairs of the fields that vary among the runs of its
/// algorithm (same label), other than the seed, name and node count.
pub fn variants(runs: &[RunRecord]) -> Vec<Vec<(String, String)>> {
    let flat: Vec<_> = runs.iter().map(flat_spec).collect();
    let mut by_alg: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        by_alg.entry(r.summary.algorithm.as_str()).or_default().push(i);
    }
    let mut out = vec![Vec::new(); runs.len()];
    for idx in by_alg.values() {
        let keys: BTreeSet<&String> = idx.iter().flat_map(|&i| flat[i].keys()).collect();
        let varying: Vec<&String> = keys
            .into_iter()
            .filter(|k| !is_identity(k) && idx.iter().any(|&i| flat[i].get(*k) != flat[idx[0]].get(*k)))
            .collect();
        for &i in idx {
            out[i] = varying
                .iter()
                .map(|k| ((*k).clone(), flat[i].get(*k).cloned().unwrap_or_else(|| "-".into())))
                .collect();
        }
    }
    out
}

/// A variant as `field=value` text.
pub fn variant_text(v: &[(String, String)]) -> String {
    v.iter().map(|(k, x)| format!("{k}={x}")).collect::<Vec<_>>().join(" ")
}

/// A group's key: algorithm label, node count, variant.
type GroupKey = (String, usize, Vec<(String, String)>);

/// Time to target over the seeds of a group.
#[derive(Clone, Debug, PartialEq)]
pub struct TimeToTarget {
    /// Seeds that reached the target.
    pub reached: usize,
    /// Seeds in all.
    pub runs: usize,
    /// The median with unreached seeds counted as beyond the stop time; `None` when at least
    /// half of them did not reach it.
    pub median_s: Option<f64>,
    /// Mean and 95% CI over the reaching seeds only (NaN when none reached it).
    pub mean_reached_s: (f64, f64),
    /// The longest stop time of the group's runs (what "beyond" means).
    pub stop_s: f64,
}

impl TimeToTarget {
    fn of(rs: &[&RunRecord]) -> Self {
        let t: Vec<Option<f64>> = rs.iter().map(|r| r.summary.time_to_target_s).collect();
        let reached: Vec<f64> = t.iter().flatten().copied().collect();
        TimeToTarget {
            reached: reached.len(),
            runs: rs.len(),
            median_s: median_beyond(&t),
            mean_reached_s: mean_ci(&reached),
            stop_s: rs.iter().map(|r| r.spec.stop.sim_time_s).fold(0.0, f64::max),
        }
    }
}

/// One row of `aggregate.csv`: a grid point without its seed, over its seeds.
#[derive(Clone, Debug)]
pub struct AggregateRow {
    /// Algorithm label.
    pub algorithm: String,
    /// Workers.
    pub nodes: usize,
    /// The variant's `(field, value)` pairs (empty when nothing else varies).
    pub variant: Vec<(String, String)>,
    /// Seeds aggregated.
    pub seeds: usize,
    /// Final loss, mean and CI over the runs that had a finite one.
    pub final_loss: (f64, f64),
    /// Final accuracy, mean and CI (NaN for non-classifiers).
    pub final_accuracy: (f64, f64),
    /// Time to target.
    pub time_to_target: TimeToTarget,
    /// Updates per simulated second, mean and CI.
    pub updates_per_s: (f64, f64),
    /// Mean sync iteration time, mean and CI (NaN for asynchronous algorithms).
    pub iteration_time_s: (f64, f64),
    /// Runs that diverged.
    pub diverged: usize,
    /// Runs that ended without a model.
    pub no_model_at_end: usize,
}

impl AggregateRow {
    /// The variant as `field=value` text.
    pub fn variant_text(&self) -> String {
        variant_text(&self.variant)
    }
    /// How well the row did at reaching the target: more seeds reaching it first, then the
    /// shorter median, the shorter mean over reaching seeds, the lower final loss. Smaller is
    /// better.
    pub fn rank_key(&self) -> (f64, f64, f64, f64) {
        let inf = |x: f64| if x.is_finite() { x } else { f64::INFINITY };
        let t = &self.time_to_target;
        (
            -(t.reached as f64 / t.runs.max(1) as f64),
            t.median_s.unwrap_or(f64::INFINITY),
            inf(t.mean_reached_s.0),
            inf(self.final_loss.0),
        )
    }
}

/// A row as JSON (non-finite numbers as null).
pub fn row_json(r: &AggregateRow) -> Value {
    let f = |x: f64| if x.is_finite() { Value::from(x) } else { Value::Null };
    let pair = |(m, h): (f64, f64)| serde_json::json!({"mean": f(m), "ci95": f(h)});
    let t = &r.time_to_target;
    serde_json::json!({
        "algorithm": r.algorithm,
        "nodes": r.nodes,
        "variant": r.variant.iter().cloned().collect::<BTreeMap<String, String>>(),
        "seeds": r.seeds,
        "final_loss": pair(r.final_loss),
        "final_accuracy": pair(r.final_accuracy),
        "time_to_target": {
            "reached": t.reached,
            "runs": t.runs,
            "median_s": t.median_s,
            "mean_reached_s": pair(t.mean_reached_s),
            "stop_s": t.stop_s,
        },
        "updates_per_s": pair(r.updates_per_s),
        "iteration_time_s": pair(r.iteration_time_s),
        "diverged": r.diverged,
        "no_model_at_end": r.no_model_at_end,
    })
}

/// Groups runs by algorithm, node count and variant, and aggregates over seeds.
pub fn aggregate(runs: &[RunRecord]) -> Vec<AggregateRow> {
    let vars = variants(runs);
    let mut groups: BTreeMap<GroupKey, Vec<&RunRecord>> = BTreeMap::new();
    for (r, v) in runs.iter().zip(vars) {
        groups.entry((r.summary.algorithm.clone(), r.spec.nodes, v)).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|((algorithm, nodes, variant), rs)| {
            let f = |g: &dyn Fn(&Summary) -> Option<f64>| {
                mean_ci(&rs.iter().filter_map(|r| g(&r.summary)).filter(|x| x.is_finite()).collect::<Vec<_>>())
            };
            AggregateRow {
                algorithm,
                nodes,
                variant,
                seeds: rs.len(),
                final_loss: f(&|s| s.final_loss),
                final_accuracy: f(&|s| s.final_accuracy),
                time_to_target: TimeToTarget::of(&rs),
                updates_per_s: f(&|s| Some(s.updates_per_s)),
                iteration_time_s: f(&|s| s.iteration_time_s.map(|i| i.mean)),
                diverged: rs.iter().filter(|r| r.summary.diverged.is_some()).count(),
                no_model_at_end: rs
                    .iter()
                    .filter(|r| r.summary.final_loss.is_none() && r.summary.evaluations_without_model > 0)
                    .count(),
            }
        })
        .collect()
}

/// For each algorithm and node count, the variant that did best (see [`AggregateRow::rank_key`]).
pub fn best(rows: &[AggregateRow]) -> Vec<AggregateRow> {
    let mut by: BTreeMap<(String, usize), &AggregateRow> = BTreeMap::new();
    for r in rows {
        let key = (r.algorithm.clone(), r.nodes);
        let cmp = |a: &AggregateRow, b: &AggregateRow| {
            let (x, y) = (a.rank_key(), b.rank_key());
            x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)).then(x.2.total_cmp(&y.2)).then(x.3.total_cmp(&y.3))
        };
        if by.get(&key).is_none_or(|old| cmp(r, old).is_lt()) {
            by.insert(key, r);
        }
    }
    by.into_values().cloned().collect()
}

/// The runs of the best variant of each algorithm and node count (all runs when nothing varies).
pub fn best_runs(runs: &[RunRecord]) -> Vec<RunRecord> {
    let chosen: BTreeSet<GroupKey> =
        best(&aggregate(runs)).into_iter().map(|r| (r.algorithm, r.nodes, r.variant)).collect();
    runs.iter()
        .zip(variants(runs))
        .filter(|(r, v)| chosen.contains(&(r.summary.algorithm.clone(), r.spec.nodes, v.clone())))
        .map(|(r, _)| r.clone())
        .collect()
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        String::new()
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), num)
}

fn csv_text(header: Vec<String>, rows: Vec<Vec<String>>) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header).expect("writes to memory");
    for r in rows {
        w.write_record(&r).expect("writes to memory");
    }
    String::from_utf8(w.into_inner().expect("flushes to memory")).expect("UTF-8 in, UTF-8 out")
}

/// `aggregate.csv`: one row per group, a column per variant field (empty where it does not
/// apply), then the statistics.
pub fn aggregate_csv(rows: &[AggregateRow]) -> String {
    let fields: BTreeSet<&String> = rows.iter().flat_map(|r| r.variant.iter().map(|(k, _)| k)).collect();
    let mut header: Vec<String> = vec!["algorithm".into(), "nodes".into()];
    header.extend(fields.iter().map(|f| f.to_string()));
    header.extend(
        [
            "seeds",
            "final_loss",
            "final_loss_ci95",
            "final_accuracy",
            "final_accuracy_ci95",
            "reached",
            "time_to_target_median_s",
            "time_to_target_mean_reached_s",
            "time_to_target_mean_reached_ci95",
            "stop_s",
            "updates_per_s",
            "updates_per_s_ci95",
            "iteration_time_s",
            "iteration_time_ci95",
            "diverged",
            "no_model_at_end",
        ]
        .map(String::from),
    );
    let body = rows
        .iter()
        .map(|r| {
            let mut row = vec![r.algorithm.clone(), r.nodes.to_string()];
            row.extend(
                fields
                    .iter()
                    .map(|f| r.variant.iter().find(|(k, _)| k == *f).map_or(String::new(), |(_, v)| v.clone())),
            );
            let t = &r.time_to_target;
            row.extend([
                r.seeds.to_string(),
                num(r.final_loss.0),
                num(r.final_loss.1),
                num(r.final_accuracy.0),
                num(r.final_accuracy.1),
                t.reached.to_string(),
                opt(t.median_s),
                num(t.mean_reached_s.0),
                num(t.mean_reached_s.1),
                num(t.stop_s),
                num(r.updates_per_s.0),
                num(r.updates_per_s.1),
                num(r.iteration_time_s.0),
                num(r.iteration_time_s.1),
                r.diverged.to_string(),
                r.no_model_at_end.to_string(),
            ]);
            row
        })
        .collect();
    csv_text(header, body)
}

/// `runs.csv`: one row per run: its folder, algorithm, nodes and seed, every field that varies
/// among the runs as its own column, and the summary's scalars.
pub fn runs_csv(runs: &[RunRecord]) -> String {
    let fields = varying_fields(runs);
    let mut header: Vec<String> = vec!["run".into(), "algorithm".into(), "nodes".into(), "seed".into()];
    header.extend(fields.iter().cloned());
    header.extend(
        [
            "spec_hash",
            "digest",
            "stop_reason",
            "events",
            "sim_time_s",
            "wall_time_s",
            "updates",
            "updates_per_s",
            "gradients",
            "iterations",
            "iteration_time_mean_s",
            "final_loss",
            "final_accuracy",
            "time_to_target_s",
            "diverged_at_s",
            "evaluations_without_model",
            "bytes_sent",
            "messages_sent",
            "mean_staleness",
            "crashes",
            "restarts",
            "computing_s",
            "communicating_s",
            "idle_s",
            "crashed_s",
        ]
        .map(String::from),
    );
    let body = runs
        .iter()
        .map(|r| {
            let s = &r.summary;
            let flat = flat_spec(r);
            let name = r.dir.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let mut row = vec![name, s.algorithm.clone(), s.nodes.to_string(), s.seed.to_string()];
            row.extend(fields.iter().map(|f| flat.get(f).cloned().unwrap_or_default()));
            let sum = |g: &dyn Fn(&dsgd_runtime::metrics::TimeBreakdown) -> f64| {
                num(s.time_breakdown.iter().map(g).sum::<f64>())
            };
            row.extend([
                s.spec_hash.clone(),
                s.digest.clone(),
                s.stop_reason.clone(),
                s.events.to_string(),
                num(s.sim_time_s),
                num(s.wall_time_s),
                s.updates.to_string(),
                num(s.updates_per_s),
                s.gradients.to_string(),
                s.iterations.to_string(),
                opt(s.iteration_time_s.map(|i| i.mean)),
                opt(s.final_loss),
                opt(s.final_accuracy),
                opt(s.time_to_target_s),
                opt(s.diverged.map(|d| d.time_s)),
                s.evaluations_without_model.to_string(),
                s.bytes_sent.to_string(),
                s.messages_sent.to_string(),
                num(s.mean_staleness),
                s.faults.crashes.to_string(),
                s.faults.restarts.to_string(),
                sum(&|b| b.computing),
                sum(&|b| b.communicating),
                sum(&|b| b.idle),
                sum(&|b| b.crashed),
            ]);
            row
        })
        .collect();
    csv_text(header, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_are_exact_for_any_degrees_of_freedom() {
        // Tabulated two-sided 95% values.
        for (df, t) in [(1, 12.7062), (2, 4.3027), (9, 2.2622), (10, 2.2281), (11, 2.2010), (30, 2.0423), (100, 1.9840)]
        {
            assert!((t95(df) - t).abs() < 1e-4, "df {df}: {} vs {t}", t95(df));
        }
    }

    #[test]
    fn mean_ci_uses_student_t_and_gives_no_interval_for_one_value() {
        let (m, h) = mean_ci(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((h - 4.302_652_7 * (1.0f64 / 3.0).sqrt()).abs() < 1e-6);
        let (m, h) = mean_ci(&[5.0]);
        assert_eq!(m, 5.0);
        assert!(h.is_nan(), "one value has no interval, not ± 0");
    }

    #[test]
    fn the_median_counts_unreached_seeds_as_beyond() {
        assert_eq!(median_beyond(&[Some(3.0), None, Some(1.0)]), Some(3.0));
        assert_eq!(median_beyond(&[Some(3.0), None, None]), None);
        assert_eq!(median_beyond(&[Some(3.0), Some(5.0)]), Some(4.0));
        assert_eq!(median_beyond(&[Some(3.0), None]), None);
    }

    fn row(alg: &str, variant: &str, ttt: &[Option<f64>], loss: f64) -> AggregateRow {
        let reached: Vec<f64> = ttt.iter().flatten().copied().collect();
        AggregateRow {
            algorithm: alg.into(),
            nodes: 4,
            variant: vec![("optimizer.lr".into(), variant.into())],
            seeds: ttt.len(),
            final_loss: (loss, 0.0),
            final_accuracy: (f64::NAN, f64::NAN),
            time_to_target: TimeToTarget {
                reached: reached.len(),
                runs: ttt.len(),
                median_s: median_beyond(ttt),
                mean_reached_s: mean_ci(&reached),
                stop_s: 100.0,
            },
            updates_per_s: (1.0, 0.0),
            iteration_time_s: (f64::NAN, f64::NAN),
            diverged: 0,
            no_model_at_end: 0,
        }
    }

    #[test]
    fn best_prefers_reaching_the_target_then_speed_then_loss() {
        let rows = vec![
            row("sync", "0.01", &[None, None, None], 0.1),
            row("sync", "0.1", &[Some(50.0), Some(50.0), Some(50.0)], 0.02),
            row("sync", "0.3", &[Some(40.0), Some(41.0), Some(42.0)], 0.03),
            row("sync", "1", &[Some(10.0), Some(10.0), None], 0.5),
            row("gossip", "0.01", &[None, None, None], 0.2),
            row("gossip", "0.1", &[None, None, None], 0.1),
        ];
        let b = best(&rows);
        assert_eq!(b.len(), 2);
        assert_eq!(b.iter().find(|r| r.algorithm == "sync").unwrap().variant_text(), "optimizer.lr=0.3");
        assert_eq!(b.iter().find(|r| r.algorithm == "gossip").unwrap().variant_text(), "optimizer.lr=0.1");
    }

    #[test]
    fn csv_fields_with_commas_and_quotes_round_trip() {
        let text = csv_text(
            vec!["a".into(), "workload.hidden".into()],
            vec![vec!["x".into(), "[128,64]".into()], vec!["say \"hi\"".into(), "".into()]],
        );
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let rows: Vec<Vec<String>> =
            r.records().map(|x| x.unwrap().iter().map(String::from).collect()).collect::<Vec<_>>();
        assert_eq!(rows, vec![vec!["x", "[128,64]"], vec!["say \"hi\"", ""]]);
    }
}
