//! Running one spec and writing its folder.

use crate::output::{metrics_csv, timeline_csv, Staging, Summary};
use crate::spec::Spec;
use crate::{Error, Result};
use dsgd_runtime::order::RecordedOrder;
use dsgd_runtime::outcome::RunResult;
use dsgd_runtime::runner::{self, Extras};
use dsgd_runtime::sim_exec::Checks;
use dsgd_runtime::timing::{GradientTiming, Recording};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A finished run.
pub struct Outcome {
    /// What the engine and runtime returned.
    pub result: RunResult,
    /// The summary.
    pub summary: Summary,
}

/// Runs a (validated) spec. The wall clock is read only to report `wall_time_s` (and, where the
/// spec asks for measured gradient times, to time each gradient).
pub fn execute(spec: &Spec, trace: bool) -> Result<Outcome> {
    execute_with(spec, trace, None)
}

/// [`execute`], with gradient durations from `recording` when given (the replay of a measured run).
pub fn execute_with(spec: &Spec, trace: bool, recording: Option<Recording>) -> Result<Outcome> {
    execute_full(spec, trace, recording, Extras::default())
}

/// [`execute_with`], replaying `order`, the order of handler calls a real run of `spec`
/// recorded (see [`dsgd_runtime::order`]); the outcome keeps the order, so that the run's folder
/// holds it and `dsgd replay` replays the run with it.
pub fn execute_in_order(
    spec: &Spec,
    trace: bool,
    recording: Option<Recording>,
    order: RecordedOrder,
) -> Result<Outcome> {
    let mut out = execute_full(spec, trace, recording, Extras { order: Some(order.clone()), ..Extras::default() })?;
    out.result.order = Some(order);
    Ok(out)
}

/// The file of a real run's folder that holds its order of handler calls.
pub const ORDER: &str = "order.json";

/// [`execute`] with the simulation tester's invariants checked after every event, and `checks`
/// besides: the first violation ends the run with [`dsgd_sim::SimError::Invariant`].
pub fn execute_checked(spec: &Spec, checks: Checks) -> Result<Outcome> {
    execute_full(spec, false, None, Extras { checks: Some(checks), ..Extras::default() })
}

fn execute_full(spec: &Spec, trace: bool, recording: Option<Recording>, extras: Extras) -> Result<Outcome> {
    crate::pages::for_workload(&spec.workload);
    let mut r = spec.resolve()?;
    r.sim.trace = trace;
    if let Some(rec) = recording {
        r.timing = GradientTiming::Replay(Arc::new(rec));
    }
    let started = Instant::now();
    let result = runner::run_checked(&r.algorithm, r.workers, &r.sim, r.workload.clone(), r.train, r.timing, extras)?;
    let wall = started.elapsed().as_secs_f64();
    let summary = Summary::new(spec, &result, wall).with_histograms(r.workload.as_ref());
    Ok(Outcome { result, summary })
}

/// The file of a run folder that holds measured gradient durations.
pub const GRADIENT_TIMES: &str = "gradient_times.csv";

/// The measured gradient durations saved in run folder `dir`, if it has them.
pub fn saved_recording(dir: &Path) -> Result<Option<Recording>> {
    let path = dir.join(GRADIENT_TIMES);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Some(Recording::from_csv(&text, &path.display().to_string())?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", &path)(e)),
    }
}

/// The order of handler calls saved in run folder `dir` (a real run's, or the one a simulated
/// run replayed), if it has one.
pub fn saved_order(dir: &Path) -> Result<Option<RecordedOrder>> {
    let path = dir.join(ORDER);
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_order(&text, &path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", &path)(e)),
    }
}

/// A recorded order read from `path` (a real run's `order.json`), with errors that name it.
pub fn read_order(path: &Path) -> Result<RecordedOrder> {
    let text = std::fs::read_to_string(path).map_err(Error::io("read", path))?;
    parse_order(&text, path)
}

fn parse_order(text: &str, path: &Path) -> Result<RecordedOrder> {
    serde_json::from_str(text).map_err(|e| {
        let why = format!("{}: not a recorded order (the order.json of a `dsgd real` folder): {e}", path.display());
        dsgd_sim::SimError::config("order", why).into()
    })
}

/// Writes a run's folder atomically at `dest`.
pub fn write_run(dest: &Path, spec: &Spec, out: &Outcome) -> Result<PathBuf> {
    let io = |e: std::io::Error| Error::io("write", dest)(e);
    let stage = Staging::new(dest).map_err(io)?;
    let json = |v: &dyn erased::Json| v.pretty();
    stage.write("spec.json", json(spec).as_bytes()).map_err(io)?;
    stage.write("summary.json", json(&out.summary).as_bytes()).map_err(io)?;
    stage.write("metrics.csv", metrics_csv(&out.result).as_bytes()).map_err(io)?;
    stage.write("timeline.csv", timeline_csv(&out.result).as_bytes()).map_err(io)?;
    if let Some(rec) = &out.result.recording {
        stage.write(GRADIENT_TIMES, rec.to_csv().as_bytes()).map_err(io)?;
    }
    if let Some(order) = &out.result.order {
        stage.write(ORDER, order_json(order).as_bytes()).map_err(io)?;
    }
    if let Some(trace) = &out.result.trace {
        let mut buf = Vec::new();
        trace.write_chrome(&spec.algorithm.role_names(spec.nodes), &mut buf)?;
        stage.write("trace.json", &buf).map_err(io)?;
    }
    stage.commit().map_err(io)
}

/// A recorded order as JSON with one rank's handler calls a line (pretty JSON takes six lines a
/// call).
fn order_json(order: &RecordedOrder) -> String {
    let ranks: Vec<String> =
        order.ranks.iter().map(|r| serde_json::to_string(r).expect("plain data serialises")).collect();
    format!("{{\"ranks\": [\n{}\n]}}\n", ranks.join(",\n"))
}

/// Pretty JSON of anything serialisable, without generics at the call sites.
pub mod erased {
    /// Serialisable as pretty JSON.
    pub trait Json {
        /// The pretty JSON text, with a final newline.
        fn pretty(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn pretty(&self) -> String {
            let mut s = serde_json::to_string_pretty(self).expect("plain data serialises");
            s.push('\n');
            s
        }
    }
}
