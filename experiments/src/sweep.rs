//! Sweeps: a grid over spec fields, run in parallel, resumable, aggregated over seeds.
//!
//! A sweep file is `{"name", "base": {spec} | "base_file": "spec.json", "grid": {"field.path":
//! [values...]}}`. Points are the Cartesian product of the grid (fields in sorted order); point
//! `i` runs in `OUT/runs/iiii/`. `grid` may also be a list of such objects: the points are then
//! the products of each, one after another (for settings that only some algorithms take). A run folder appears only when complete, so a sweep that was
//! killed resumes by running the points that have no folder (stale partial folders are removed).
//! Each run is deterministic, so `--jobs` changes the wall time and nothing else.

use crate::execute::{execute, write_run};
use crate::load::{set_spec_path, spec_from_value, SpecError};
use crate::output::{spec_hash, write_atomic, Summary};
use crate::spec::Spec;
use crate::{Error, Result};
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
    /// Field path -> values, or a list of such grids.
    pub grid: Grid,
}

/// One grid (field path -> values), or several whose points are taken one grid after another.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Grid {
    /// The Cartesian product of the values.
    One(BTreeMap<String, Vec<Value>>),
    /// The union of several products, in order.
    Many(Vec<BTreeMap<String, Vec<Value>>>),
}

impl Default for Grid {
    fn default() -> Self {
        Grid::One(BTreeMap::new())
    }
}

impl Grid {
    /// The grids, one or several.
    pub fn parts(&self) -> &[BTreeMap<String, Vec<Value>>] {
        match self {
            Grid::One(g) => std::slice::from_ref(g),
            Grid::Many(v) => v,
        }
    }
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
    crate::load::no_duplicate_keys(&text).map_err(|e| err(e.to_string()))?;
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
    if sweep.grid.parts().is_empty() {
        return Err(err("field `grid`: a list of grids needs at least one grid".into()));
    }
    if sweep.grid.parts().iter().any(|g| g.values().any(Vec::is_empty)) {
        return Err(err("field `grid`: every field needs at least one value".into()));
    }
    let points = expand(&name, &base, &sweep.grid)?;
    Ok((sweep, points))
}

/// The points of the grid (each part's Cartesian product, one after another) applied to `base`.
pub fn expand(source: &str, base: &Value, grid: &Grid) -> Result<Vec<Point>, SpecError> {
    let mut points = Vec::new();
    for part in grid.parts() {
        expand_one(source, base, part, &mut points)?;
    }
    Ok(points)
}

fn expand_one(
    source: &str,
    base: &Value,
    grid: &BTreeMap<String, Vec<Value>>,
    points: &mut Vec<Point>,
) -> Result<(), SpecError> {
    let axes: Vec<(&String, &Vec<Value>)> = grid.iter().collect();
    let total: usize = axes.iter().map(|(_, v)| v.len()).product();
    let first = points.len();
    for k in 0..total {
        let index = first + k;
        let mut rest = k;
        let mut assignment = Vec::new();
        for (k, vs) in axes.iter().rev() {
            assignment.push(((*k).clone(), vs[rest % vs.len()].clone()));
            rest /= vs.len();
        }
        assignment.reverse();
        let mut v = base.clone();
        for (k, val) in &assignment {
            set_spec_path(&mut v, k, val.clone())
                .map_err(|e| SpecError { source_name: source.into(), message: format!("grid: {e}") })?;
        }
        let label = format!("{source} (point {index}: {})", describe(&assignment));
        let spec = spec_from_value(&label, v)?;
        points.push(Point { index, assignment, spec });
    }
    Ok(())
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
    /// Runs stopped unfinished by an interrupt (SIGINT, SIGTERM); their folders were removed.
    pub interrupted: usize,
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

/// Creates `out/runs`, removes what an interrupted sweep left half written there, and checks that
/// the finished runs already there belong to this grid: a run folder whose recorded spec hash
/// differs from its point's, or whose index is past the grid's end, means the grid changed since
/// it ran. That is refused (nothing is run or removed) unless `rerun_changed`, which removes
/// those folders so that the changed points run again; the message names them either way.
pub fn prepare(out: &Path, points: &[Point], rerun_changed: bool) -> Result<Vec<String>> {
    let runs = out.join("runs");
    std::fs::create_dir_all(&runs).map_err(Error::io("create", &runs))?;
    clean_partials(&runs).map_err(Error::io("clean", &runs))?;
    let mut changed = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(&runs)
        .map_err(Error::io("read", &runs))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    for name in names {
        let dir = runs.join(&name);
        let point = name.parse::<usize>().ok().and_then(|i| points.get(i)).filter(|p| p.dir_name() == name);
        let why = match point {
            None => Some("is not a point of this grid".to_string()),
            Some(p) => match recorded_spec_hash(&dir) {
                Some(h) if h == spec_hash(&p.spec) => None,
                Some(_) => {
                    Some(format!("was run with another spec than point {} ({})", p.index, describe(&p.assignment)))
                }
                None => None, // not finished: it will run
            },
        };
        if let Some(why) = why {
            changed.push(format!("runs/{name} {why}"));
        }
    }
    if changed.is_empty() {
        return Ok(changed);
    }
    if !rerun_changed {
        return Err(Error::ChangedGrid { out: out.to_path_buf(), changed });
    }
    for c in &changed {
        let name = c.split_whitespace().next().expect("runs/NAME");
        std::fs::remove_dir_all(out.join(name)).map_err(Error::io("remove", &out.join(name)))?;
    }
    Ok(changed)
}

/// The spec hash a finished run folder recorded (computed from its `spec.json` for runs made
/// before summaries carried it); `None` if the folder has no finished run.
fn recorded_spec_hash(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let summary: Value = serde_json::from_str(&text).ok()?;
    match summary.get("spec_hash").and_then(Value::as_str) {
        Some(h) if !h.is_empty() => Some(h.to_string()),
        _ => {
            let spec = std::fs::read_to_string(dir.join("spec.json")).ok()?;
            let spec = crate::load::spec_from_record("spec.json", &spec).ok()?;
            Some(spec_hash(&spec))
        }
    }
}

/// Runs every point that has no finished folder under `out/runs`, `jobs` at a time (after
/// [`prepare`]'s checks; `rerun_changed` as there).
pub fn run(
    sweep: &SweepSpec,
    points: &[Point],
    out: &Path,
    jobs: usize,
    progress: bool,
    rerun_changed: bool,
) -> Result<SweepReport> {
    let changed = prepare(out, points, rerun_changed)?;
    if !changed.is_empty() {
        eprintln!("removed {} runs of an earlier grid; their points run again", changed.len());
    }
    run_share(sweep, points, out, jobs, progress)
}

/// [`run`] without the cleaning, for one of several processes sharing `out` (after [`prepare`]).
pub fn run_share(sweep: &SweepSpec, points: &[Point], out: &Path, jobs: usize, progress: bool) -> Result<SweepReport> {
    let runs = out.join("runs");
    let mut resolved = sweep.clone();
    resolved.base_file = None;
    let file = out.join("sweep.json");
    write_atomic(&file, crate::execute::erased::Json::pretty(&resolved).as_bytes())
        .map_err(Error::io("write", &file))?;
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
    let interrupted = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1).min(todo.len().max(1)) {
            s.spawn(|| loop {
                if dsgd_runtime::cancel::requested() {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(p) = todo.get(i) else { break };
                bar.set_message(describe(&p.assignment));
                let res = execute(&p.spec, false).and_then(|o| write_run(&runs.join(p.dir_name()), &p.spec, &o));
                match res {
                    Err(_) if dsgd_runtime::cancel::requested() => {
                        interrupted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => failed.lock().expect("no panics hold the lock").push((p.index, e.to_string())),
                    Ok(_) => {
                        done.fetch_add(1, Ordering::SeqCst);
                        bar.inc(1);
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut failed = failed.into_inner().expect("threads joined");
    failed.sort();
    let interrupted = interrupted.into_inner();
    let ran = done.into_inner();
    Ok(SweepReport { ran, skipped, failed, interrupted })
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
pub fn read_run(dir: &Path) -> Result<RunRecord> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).map_err(Error::io("read", &dir.join(f)));
    let spec = crate::load::spec_from_record(&dir.join("spec.json").display().to_string(), &read("spec.json")?)?;
    let summary: Summary =
        serde_json::from_str(&read("summary.json")?).map_err(|e| Error::file(&dir.join("summary.json"), e))?;
    Ok(RunRecord { dir: dir.to_path_buf(), spec, summary })
}

/// Every finished run under `dir`: the folder itself, or its `runs/*` for a sweep.
pub fn collect_runs(dir: &Path) -> Result<Vec<RunRecord>> {
    if dir.join("summary.json").exists() {
        return Ok(vec![read_run(dir)?]);
    }
    let runs = dir.join("runs");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&runs)
        .map_err(|e| Error::file(dir, format!("no summary.json and no runs/ folder ({e})")))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("summary.json").exists())
        .collect();
    names.sort();
    names.iter().map(|p| read_run(p)).collect()
}
