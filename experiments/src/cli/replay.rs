//! `dsgd replay`: re-runs the resolved spec(s) of a run or sweep folder and says whether the
//! digest, the summary and the time series are identical.

use anyhow::anyhow;

use super::out::{say, Out};
use dsgd_experiments::execute::{execute_in_order, execute_with, saved_order, saved_recording, GRADIENT_TIMES};
use dsgd_experiments::output::{metrics_csv, same_csv, Summary};
use dsgd_experiments::spec::StepTimes;
use dsgd_experiments::sweep::{self, RunRecord};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `dsgd replay DIR`.
#[derive(clap::Args)]
pub struct Args {
    /// A run folder or a sweep folder.
    dir: PathBuf,
    /// Print one JSON document (every run's verdict) only.
    #[arg(long)]
    pub json: bool,
}

/// Replays every run in the folder; exit 0 only if all are identical.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let runs = sweep::collect_runs(&a.dir)?;
    dsgd_experiments::bounds::set_budget(None);
    let mut verdicts = Vec::new();
    for r in &runs {
        verdicts.push(replay_one(r, out)?);
    }
    let same = verdicts.iter().filter(|v| v["identical"] == true).count();
    say!(out, "{} of {} runs replayed identically", same, runs.len());
    out.json(&serde_json::json!({"identical": same, "runs": runs.len(), "verdicts": verdicts}));
    Ok(if same == runs.len() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Replays one run and prints its verdict; returns it as JSON.
fn replay_one(r: &RunRecord, out: Out) -> anyhow::Result<serde_json::Value> {
    let recording = saved_recording(&r.dir)?;
    if recording.is_none() && r.spec.compute.gradient_time == StepTimes::Measured {
        return Err(anyhow!("{}: a measured run without its {GRADIENT_TIMES}; it cannot be replayed", r.dir.display()));
    }
    let outcome = match saved_order(&r.dir)? {
        Some(order) => execute_in_order(&r.spec, false, recording, order)?,
        None => execute_with(&r.spec, false, recording)?,
    };
    let same_summary = same_summary(&r.dir, &outcome.summary)?;
    let csv = std::fs::read_to_string(r.dir.join("metrics.csv")).unwrap_or_default();
    let same_metrics = same_csv(&csv, &metrics_csv(&outcome.result));
    let identical = outcome.summary.digest == r.summary.digest && same_summary && same_metrics;
    if identical {
        say!(out, "identical  {}  digest {}", r.dir.display(), r.summary.digest);
    } else {
        say!(
            out,
            "DIFFERENT  {}  digest {} -> {}{}{}",
            r.dir.display(),
            r.summary.digest,
            outcome.summary.digest,
            if same_summary { "" } else { "; summary differs" },
            if same_metrics { "" } else { "; metrics.csv differs" }
        );
    }
    Ok(serde_json::json!({
        "dir": r.dir.display().to_string(),
        "identical": identical,
        "digest_recorded": r.summary.digest,
        "digest_now": outcome.summary.digest,
        "summary_identical": same_summary,
        "metrics_identical": same_metrics,
    }))
}

/// True if `new` agrees with the `summary.json` recorded in `dir` on every field that file has,
/// except the wall time (fields added since it was written are not compared).
fn same_summary(dir: &Path, new: &Summary) -> anyhow::Result<bool> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let old: serde_json::Value = serde_json::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let new = serde_json::to_value(new).expect("serialises");
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else { return Ok(false) };
    Ok(old.iter().filter(|(k, _)| *k != "wall_time_s").all(|(k, v)| new.get(k) == Some(v)))
}
