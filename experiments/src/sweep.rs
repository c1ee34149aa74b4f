//! Sweeps: a grid over spec fields, run in parallel, resumable, aggregated over seeds.
//!
//! A sweep file is `{"name", "base": {spec} | "base_file": "spec.json", "grid": {"field.path":
//! [values...]}}`. Points are the Cartesian product of the grid (fields in sorted order); point
//! `i` runs in `OUT/runs/iiii/`. A run folder appears only when complete, so a sweep that was
//! killed resumes by running the points that have no folder (stale partial folders are removed).
//! Each run is deterministic, so `--jobs` changes the wall time and nothing else.

use crate::execute::{execute, write_run};
use crate::load::{set_path, spec_from_value, SpecError};
use crate::output::{write_atomic, Summary};
use crate::spec::Spec;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A sweep file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweepSpec {
    /// Name for reports.
    pub name: String,
    /// The spec every point starts from.
    pub base: Value,
    /// Or a spec file to start from (relative to the sweep file).
    pub base_file: Option<String>,
    /// Field path -> values.
    pub grid: BTreeMap<String, Vec<Value>>,
}

/// One point of the grid, ready to run.
#[derive(Clone, Debug)]
pub struct Point {
    /// Index in the grid.
    pub index: usize,
    /// `field=value` pairs.
    pub assignment: Vec<(String, Value)>,
    /// The validated spec.
    pub spec: Spec,
}

impl Point {
    /// Folder name.
    pub fn dir_name(&self) -> String {
        format!("{:04}", self.index)
    }
}

/// Reads a sweep file and validates every point before anything runs.
pub fn load(path: &Path) -> Result<(SweepSpec, Vec<Point>), SpecError> {
    let name = path.display().to_string();
    let err = |m: String| SpecError { source_name: name.clone(), message: m };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let sweep: SweepSpec =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(&text)).map_err(|e| {
            let p = e.path().to_string();
            err(format!("field `{p}`: {}", e.into_inner()))
        })?;
    let base = match (&sweep.base, &sweep.base_file) {
        (Value::Null, Some(f)) => {
            let file = path.parent().unwrap_or(Path::new(".")).join(f);
            let t = std::fs::read_to_string(&file)
                .map_err(|e| err(format!("field `base_file`: cannot read {}: {e}", file.display())))?;
            serde_json::from_str(&t)
                .map_err(|e| err(format!("field `base_file`: {} is not valid JSON: {e}", file.display())))?
        }
        (Value::Null, None) => Value::Object(Default::default()),
        (v @ Value::Object(_), None) => v.clone(),
        (Value::Object(_), Some(_)) => return Err(err("give either `base` or `base_file`, not both".into())),
        _ => return Err(err("field `base`: must be a JSON object (a spec)".into())),
    };
    if sweep.grid.values().any(Vec::is_empty) {
        return Err(err("field `grid`: every field needs at least one value".into()));
    }
    let points = expand(&name, &base, &sweep.grid)?;
    Ok((sweep, points))
}

/// The Cartesian product of the grid applied to `base`.
pub fn expand(source: &str, base: &Value, grid: &BTreeMap<String, Vec<Value>>) -> Result<Vec<Point>, SpecError> {
    let axes: Vec<(&String, &Vec<Value>)> = grid.iter().collect();
    let total: usize = axes.iter().map(|(_, v)| v.len()).product();
    let mut points = Vec::with_capacity(total);
    for index in 0..total {
        let mut rest = index;
        let mut assignment = Vec::new();
        for (k, vs) in axes.iter().rev() {
            assignment.push(((*k).clone(), vs[rest % vs.len()].clone()));
            rest /= vs.len();
        }
        assignment.reverse();
        let mut v = base.clone();
        for (k, val) in &assignment {
            set_path(&mut v, k, val.clone())
                .map_err(|e| SpecError { source_name: source.into(), message: format!("grid: {e}") })?;
        }
        let label = format!("{source} (point {index}: {})", describe(&assignment));
        let spec = spec_from_value(&label, v)?;
        points.push(Point { index, assignment, spec });
    }
    Ok(points)
}

/// `field=value` pairs as text, with algorithms by their label.
pub fn describe(assignment: &[(String, Value)]) -> String {
    assignment
        .iter()
        .map(|(k, v)| match v {
            Value::Object(o) => format!("{k}={}", o.get("kind").and_then(Value::as_str).unwrap_or("{..}")),
            _ => format!("{k}={v}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What a sweep did.
pub struct SweepReport {
    /// Runs executed now.
    pub ran: usize,
    /// Runs found complete from an earlier invocation.
    pub skipped: usize,
    /// Runs that failed, with why.
    pub failed: Vec<(usize, String)>,
}

/// Removes partial run folders left by a killed sweep.
fn clean_partials(runs: &Path) -> std::io::Result<()> {
    if let Ok(entries) = std::fs::read_dir(runs) {
        for e in entries.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with('.') && n.contains(".partial-") {
                std::fs::remove_dir_all(e.path())?;
            }
        }
    }
    Ok(())
}

/// Creates `out/runs` and removes what an interrupted sweep left half written there.
pub fn prepare(out: &Path) -> Result<(), String> {
    let runs = out.join("runs");
    std::fs::create_dir_all(&runs).map_err(|e| format!("cannot create {}: {e}", runs.display()))?;
    clean_partials(&runs).map_err(|e| format!("cannot clean {}: {e}", runs.display()))
}

/// Runs every point that has no finished folder under `out/runs`, `jobs` at a time.
pub fn run(
    sweep: &SweepSpec,
    points: &[Point],
    out: &Path,
    jobs: usize,
    progress: bool,
) -> Result<SweepReport, String> {
    prepare(out)?;
    run_share(sweep, points, out, jobs, progress)
}

/// [`run`] without the cleaning, for one of several processes sharing `out` (after [`prepare`]).
pub fn run_share(
    sweep: &SweepSpec,
    points: &[Point],
    out: &Path,
    jobs: usize,
    progress: bool,
) -> Result<SweepReport, String> {
    let runs = out.join("runs");
    let mut resolved = sweep.clone();
    resolved.base_file = None;
    write_atomic(&out.join("sweep.json"), crate::execute::erased::Json::pretty(&resolved).as_bytes())
        .map_err(|e| e.to_string())?;
    let todo: Vec<&Point> = points.iter().filter(|p| !runs.join(p.dir_name()).join("summary.json").exists()).collect();
    let skipped = points.len() - todo.len();
    let bar = if progress { ProgressBar::new(points.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40} {pos}/{len} runs  elapsed {elapsed_precise}  left ~{eta_precise}  {msg}",
        )
        .expect("valid template"),
    );
    bar.set_position(skipped as u64);
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(todo.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(p) = todo.get(i) else { break };
                bar.set_message(describe(&p.assignment));
                let res = execute(&p.spec, false).and_then(|o| write_run(&runs.join(p.dir_name()), &p.spec, &o));
                if let Err(e) = res {
                    failed.lock().expect("no panics hold the lock").push((p.index, e));
                }
                bar.inc(1);
            });
        }
    });
    bar.finish_and_clear();
    let mut failed = failed.into_inner().expect("threads joined");
    failed.sort();
    Ok(SweepReport { ran: todo.len() - failed.len(), skipped, failed })
}

/// A finished run read back from disk.
#[derive(Clone, Debug)]
pub struct RunRecord {
    /// Its folder.
    pub dir: PathBuf,
    /// Its spec.
    pub spec: Spec,
    /// Its summary.
    pub summary: Summary,
}

/// Reads a run folder.
pub fn read_run(dir: &Path) -> Result<RunRecord, String> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(|e| format!("{}: {e}", dir.join(f).display()));
    let spec = crate::load::spec_from_str(&dir.join("spec.json").display().to_string(), &read("spec.json")?, &[])
        .map_err(|e| e.to_string())?;
    let summary: Summary = serde_json::from_str(&read("summary.json")?)
        .map_err(|e| format!("{}: {e}", dir.join("summary.json").display()))?;
    Ok(RunRecord { dir: dir.to_path_buf(), spec, summary })
}

/// Every finished run under `dir`: the folder itself, or its `runs/*` for a sweep.
pub fn collect_runs(dir: &Path) -> Result<Vec<RunRecord>, String> {
    if dir.join("summary.json").exists() {
        return Ok(vec![read_run(dir)?]);
    }
    let runs = dir.join("runs");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map_err(|e| format!("{}: no summary.json and no runs/ folder ({e})", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("summary.json").exists())
        .collect();
    names.sort();
    names.iter().map(|p| read_run(p)).collect()
}

/// Mean and 95% confidence half-width (Student t) of a sample.
pub fn mean_ci(xs: &[f64]) -> (f64, f64) {
    let n = xs.len();
    if n == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    if n == 1 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    const T: [f64; 10] = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228];
    let t = if n - 1 <= T.len() { T[n - 2] } else { 1.96 };
    (mean, t * (var / n as f64).sqrt())
}

/// One row of `aggregate.csv`: a grid point without its seed, over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct AggregateRow {
    /// Algorithm label.
    pub algorithm: String,
    /// Workers.
    pub nodes: usize,
    /// The other fields that vary between runs of this algorithm and node count, as
    /// `path=value` pairs (empty when nothing else varies).
    pub variant: String,
    /// Seeds aggregated.
    pub seeds: usize,
    /// Mean final loss and its 95% CI half-width.
    pub final_loss: (f64, f64),
    /// Mean final accuracy and CI (NaN for non-classifiers).
    pub final_accuracy: (f64, f64),
    /// Runs that reached the target.
    pub reached: usize,
    /// Mean time to target over the runs that reached it, and CI.
    pub time_to_target_s: (f64, f64),
    /// Mean updates per second and CI.
    pub updates_per_s: (f64, f64),
    /// Mean sync iteration time and CI (NaN for asynchronous algorithms).
    pub iteration_time_s: (f64, f64),
}

fn flatten(prefix: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, x, out);
            }
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// Each run's variant: the values of the spec fields that vary across `runs`, other than the
/// seed, the node count, the name and the algorithm.
pub fn variants(runs: &[RunRecord]) -> Vec<String> {
    let flat: Vec<BTreeMap<String, String>> = runs
        .iter()
        .map(|r| {
            let mut m = BTreeMap::new();
            flatten("", &serde_json::to_value(&r.spec).expect("serialises"), &mut m);
            m.retain(|k, _| !(k == "seed" || k == "nodes" || k == "name" || k.starts_with("algorithm")));
            m
        })
        .collect();
    let mut keys: Vec<&String> = flat.iter().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let varying: Vec<&String> =
        keys.into_iter().filter(|k| flat.iter().any(|m| m.get(*k) != flat[0].get(*k))).collect();
    flat.iter()
        .map(|m| {
            varying
                .iter()
                .map(|k| format!("{k}={}", m.get(*k).map_or("-", String::as_str)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Groups runs by algorithm, node count and variant, and aggregates over seeds.
pub fn aggregate(runs: &[RunRecord]) -> Vec<AggregateRow> {
    let vars = variants(runs);
    let mut groups: BTreeMap<(String, usize, String), Vec<&RunRecord>> = BTreeMap::new();
    for (r, v) in runs.iter().zip(vars) {
        groups.entry((r.summary.algorithm.clone(), r.spec.nodes, v)).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|((algorithm, nodes, variant), rs)| {
            let f = |g: &dyn Fn(&Summary) -> Option<f64>| {
                mean_ci(&rs.iter().filter_map(|r| g(&r.summary)).collect::<Vec<_>>())
            };
            let reached = rs.iter().filter(|r| r.summary.time_to_target_s.is_some()).count();
            AggregateRow {
                algorithm,
                nodes,
                variant,
                seeds: rs.len(),
                final_loss: f(&|s| s.final_loss),
                final_accuracy: f(&|s| s.final_accuracy),
                reached,
                time_to_target_s: f(&|s| s.time_to_target_s),
                updates_per_s: f(&|s| Some(s.updates_per_s)),
                iteration_time_s: f(&|s| s.iteration_time_s.map(|i| i.mean)),
            }
        })
        .collect()
}

/// For each algorithm and node count, the variant that did best: the most seeds reaching the
/// target, then the shortest mean time to it, then the lowest final loss.
pub fn best(rows: &[AggregateRow]) -> Vec<AggregateRow> {
    let mut by: BTreeMap<(String, usize), &AggregateRow> = BTreeMap::new();
    let score = |r: &AggregateRow| {
        let ttt = if r.time_to_target_s.0.is_finite() { r.time_to_target_s.0 } else { f64::INFINITY };
        let loss = if r.final_loss.0.is_finite() { r.final_loss.0 } else { f64::INFINITY };
        (r.reached * 1000 / r.seeds.max(1), ttt, loss)
    };
    for r in rows {
        let key = (r.algorithm.clone(), r.nodes);
        let better = by.get(&key).is_none_or(|old| {
            let (a, b) = (score(r), score(old));
            a.0 > b.0 || (a.0 == b.0 && (a.1.total_cmp(&b.1).then(a.2.total_cmp(&b.2)).is_lt()))
        });
        if better {
            by.insert(key, r);
        }
    }
    by.into_values().cloned().collect()
}

/// The runs of the best variant of each algorithm and node count (all runs when nothing varies).
pub fn best_runs(runs: &[RunRecord]) -> Vec<RunRecord> {
    let chosen: Vec<(String, usize, String)> =
        best(&aggregate(runs)).into_iter().map(|r| (r.algorithm, r.nodes, r.variant)).collect();
    runs.iter()
        .zip(variants(runs))
        .filter(|(r, v)| chosen.iter().any(|c| c.0 == r.summary.algorithm && c.1 == r.spec.nodes && &c.2 == v))
        .map(|(r, _)| r.clone())
        .collect()
}

/// `aggregate.csv`.
pub fn aggregate_csv(rows: &[AggregateRow]) -> String {
    let mut s = String::from(
        "algorithm,nodes,variant,seeds,final_loss,final_loss_ci95,final_accuracy,final_accuracy_ci95,reached,time_to_target_s,time_to_target_ci95,updates_per_s,updates_per_s_ci95,iteration_time_s,iteration_time_ci95\n",
    );
    let c = |x: f64| if x.is_finite() { format!("{x}") } else { String::new() };
    for r in rows {
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            r.algorithm,
            r.nodes,
            r.variant,
            r.seeds,
            c(r.final_loss.0),
            c(r.final_loss.1),
            c(r.final_accuracy.0),
            c(r.final_accuracy.1),
            r.reached,
            c(r.time_to_target_s.0),
            c(r.time_to_target_s.1),
            c(r.updates_per_s.0),
            c(r.updates_per_s.1),
            c(r.iteration_time_s.0),
            c(r.iteration_time_s.1),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(alg: &str, variant: &str, reached: usize, ttt: f64, loss: f64) -> AggregateRow {
        AggregateRow {
            algorithm: alg.into(),
            nodes: 4,
            variant: variant.into(),
            seeds: 3,
            final_loss: (loss, 0.0),
            final_accuracy: (f64::NAN, f64::NAN),
            reached,
            time_to_target_s: (ttt, 0.0),
            updates_per_s: (1.0, 0.0),
            iteration_time_s: (f64::NAN, f64::NAN),
        }
    }

    #[test]
    fn best_prefers_reaching_the_target_then_speed_then_loss() {
        let rows = vec![
            row("sync", "lr=0.01", 0, f64::NAN, 0.1),
            row("sync", "lr=0.1", 3, 50.0, 0.02),
            row("sync", "lr=0.3", 3, 40.0, 0.03),
            row("sync", "lr=1", 2, 10.0, 0.5),
            row("gossip", "lr=0.01", 0, f64::NAN, 0.2),
            row("gossip", "lr=0.1", 0, f64::NAN, 0.1),
        ];
        let b = best(&rows);
        assert_eq!(b.len(), 2);
        assert_eq!(b.iter().find(|r| r.algorithm == "sync").unwrap().variant, "lr=0.3");
        assert_eq!(b.iter().find(|r| r.algorithm == "gossip").unwrap().variant, "lr=0.1");
    }

    #[test]
    fn mean_ci_uses_student_t() {
        let (m, h) = mean_ci(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((h - 4.303 * (1.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!(mean_ci(&[5.0]), (5.0, 0.0));
    }
}
