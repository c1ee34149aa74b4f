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
