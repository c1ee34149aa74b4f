//! `dsgd check`: validates a spec or a sweep file without running anything; prints the resolved
//! spec and the estimate of what running it takes, or a sweep's runs.

use anyhow::anyhow;

use super::out::{say, Out};
use dsgd_experiments::bounds;
use dsgd_experiments::load::spec_from_file;
use dsgd_experiments::sweep;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `dsgd check FILE`.
#[derive(clap::Args)]
pub struct Args {
    /// A spec or a sweep file (JSON).
    file: PathBuf,
    /// Override a field of a spec (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
}

/// Checks the file as a sweep (it has `grid`, `base` or `base_file`) or as a spec.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let path = &a.file;
    let text = std::fs::read_to_string(path).map_err(|e| anyhow!("{}: cannot read: {e}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow!("{}: not valid JSON: {e}", path.display()))?;
    let is_sweep = ["grid", "base", "base_file"].iter().any(|k| value.get(k).is_some());
    if !is_sweep {
        return check_spec(path, &a.sets, out);
    }
    if !a.sets.is_empty() {
        return Err(anyhow!("--set applies to a spec; a sweep's fields are set in its file"));
    }
    check_sweep(path, out)
}

fn check_sweep(path: &Path, out: Out) -> anyhow::Result<ExitCode> {
    let (_, points) = sweep::load(path)?;
    let mut algs: Vec<String> = points.iter().map(|p| p.spec.algorithm.label()).collect();
    algs.sort();
    algs.dedup();
    let mut nodes: Vec<usize> = points.iter().map(|p| p.spec.nodes).collect();
    nodes.sort();
    nodes.dedup();
    say!(out, "{}: a valid sweep of {} runs", path.display(), points.len());
    say!(out, "  algorithms: {}", algs.join(", "));
    say!(out, "  node counts: {}", nodes.iter().map(usize::to_string).collect::<Vec<_>>().join(", "));
    for p in points.iter().take(5) {
        say!(out, "  run {:04}: {}", p.index, sweep::describe(&p.assignment));
    }
    if points.len() > 5 {
        say!(out, "  ... ({} more)", points.len() - 5);
    }
    if out.json_mode() {
        let pts: Vec<serde_json::Value> = points
            .iter()
            .map(|p| {
                let a: serde_json::Map<String, serde_json::Value> = p.assignment.iter().cloned().collect();
                serde_json::json!({"index": p.index, "assignment": a})
            })
            .collect();
        out.json(&serde_json::json!({"kind": "sweep", "runs": points.len(), "points": pts}));
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsgd check` of a spec: the resolved spec and the estimate of what running it takes.
fn check_spec(path: &Path, sets: &[String], out: Out) -> anyhow::Result<ExitCode> {
    let spec = spec_from_file(path, sets)?;
    let resolved = serde_json::to_value(&spec).expect("serialises");
    say!(
        out,
        "{}: a valid spec: {} with {} nodes, seed {}",
        path.display(),
        spec.algorithm.label(),
        spec.nodes,
        spec.seed
    );
    say!(out, "{}", serde_json::to_string_pretty(&resolved).expect("JSON"));
    let est = bounds::estimate(&spec);
    let avail = bounds::available_memory();
    say!(
        out,
        "estimated peak memory {} ({} ranks, {:.0} parameters each){}",
        bounds::human(est.bytes),
        est.ranks,
        est.params,
        avail.map_or(String::new(), |a| format!("; {} available here", bounds::human(a)))
    );
    for (what, bytes) in &est.drivers {
        say!(out, "  {}: {what}", bounds::human(*bytes));
    }
    say!(
        out,
        "expected: about {:.2e} events, {:.1} s of wall time for them{}",
        est.events,
        est.wall_s,
        if matches!(spec.workload, dsgd_experiments::spec::WorkloadSpec::Burn { .. }) {
            ", plus the real gradients' computation"
        } else {
            ""
        }
    );
    let warnings = bounds::warnings(&spec);
    for w in &warnings {
        say!(out, "warning: {w}");
    }
    let drivers: Vec<serde_json::Value> =
        est.drivers.iter().map(|(f, b)| serde_json::json!({"what": f, "bytes": b})).collect();
    out.json(&serde_json::json!({
        "kind": "spec",
        "spec": resolved,
        "estimate": {"bytes": est.bytes, "ranks": est.ranks, "params": est.params, "drivers": drivers,
                     "available_bytes": avail, "events": est.events, "wall_s": est.wall_s},
        "warnings": warnings,
    }));
    Ok(ExitCode::SUCCESS)
}
