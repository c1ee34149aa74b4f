//! `dsgd sweep`: a grid of specs run in parallel (or spread over MPI ranks), resumable,
//! aggregated over seeds, reported and plotted. Also the steps `dsgd run`'s default comparison
//! shares with it.

use super::out::{say, Out};
use anyhow::anyhow;
use dsgd_experiments::sweep::{self, RunRecord};
use dsgd_experiments::{analysis, output::write_atomic, plot, report};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `dsgd sweep FILE --out DIR`.
#[derive(clap::Args)]
pub struct Args {
    /// The sweep file (JSON).
    sweep: PathBuf,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
    /// Parallel runs (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Do not draw figures.
    #[arg(long)]
    no_plots: bool,
    /// When OUT holds runs of an earlier version of the grid, remove them and run the
    /// changed points again (without it, such a resume is refused and nothing runs).
    #[arg(long)]
    rerun_changed: bool,
    /// Print the outcome (runs done, failures, the aggregate rows) as JSON only.
    #[arg(long)]
    pub json: bool,
    /// Run even if a point's estimated memory exceeds what this machine has available.
    #[arg(long)]
    force: bool,
}

/// Runs the sweep (its points spread over the ranks when started under a multi-rank `mpirun`).
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let (path, dest, jobs, draw) = (&a.sweep, &a.out, a.jobs.unwrap_or_else(super::cores), !a.no_plots);
    let (spec, points) = sweep::load(path)?;
    if !a.force {
        for p in &points {
            dsgd_experiments::bounds::check_memory(&p.spec).map_err(|e| {
                anyhow!("{} (point {}: {}): {e}", path.display(), p.index, sweep::describe(&p.assignment))
            })?;
        }
    }
    dsgd_experiments::bounds::set_budget(None);
    if let Some(code) = super::mpi::sweep(&spec, &points, dest, jobs, draw, a.rerun_changed, out)? {
        return Ok(code);
    }
    let report = sweep::run(&spec, &points, dest, jobs, !out.json_mode(), a.rerun_changed)?;
    let resume = format!("dsgd sweep {} --out {}", path.display(), dest.display());
    if let Some(code) = interrupted(&report, points.len(), &resume) {
        return Ok(code);
    }
    let code = sweep_report(&report, out);
    let runs = finish_sweep(dest, draw, out)?;
    sweep_json(dest, &report, &runs, out);
    Ok(code)
}

/// Aggregates the finished runs in `dir`: runs.csv, aggregate.csv, report.md and (if `draw`)
/// the figures; prints the best variants.
pub fn finish_sweep(dir: &Path, draw: bool, out: Out) -> anyhow::Result<Vec<RunRecord>> {
    let runs = sweep::collect_runs(dir)?;
    let rows = analysis::aggregate(&runs);
    let io = |e: std::io::Error| anyhow!("cannot write into {}: {e}", dir.display());
    write_atomic(&dir.join("runs.csv"), analysis::runs_csv(&runs).as_bytes()).map_err(io)?;
    write_atomic(&dir.join("aggregate.csv"), analysis::aggregate_csv(&rows).as_bytes()).map_err(io)?;
    let best = analysis::best(&rows);
    say!(out, "Target: {}", report::target_text(&runs));
    if best.len() < rows.len() {
        say!(out, "Best variant of each algorithm and node count:\n{}", report::table(&best));
    } else {
        say!(out, "{}", report::table(&rows));
    }
    let files = if draw { plot::all(&runs, &dir.join("plots"))? } else { Vec::new() };
    let drawn = files.iter().filter_map(|f| Some(f.file_stem()?.to_str()?.to_string())).collect();
    let md = report::report_md(&dir.display().to_string(), &runs, &rows, &best, &drawn);
    write_atomic(&dir.join("report.md"), md.as_bytes()).map_err(io)?;
    if draw {
        say!(
            out,
            "report: {}  tables: runs.csv, aggregate.csv  figures: {}/ ({} files)",
            dir.join("report.md").display(),
            dir.join("plots").display(),
            files.len()
        );
    }
    Ok(runs)
}

/// The `--json` document of a finished sweep.
pub fn sweep_json(dir: &Path, r: &sweep::SweepReport, runs: &[RunRecord], out: Out) {
    if !out.json_mode() {
        return;
    }
    let rows = analysis::aggregate(runs);
    let failed: Vec<serde_json::Value> =
        r.failed.iter().map(|(i, e)| serde_json::json!({"index": i, "error": e})).collect();
    out.json(&serde_json::json!({
        "out": dir.display().to_string(),
        "ran": r.ran,
        "skipped": r.skipped,
        "failed": failed,
        "target": report::target_text(runs),
        "aggregate": rows.iter().map(analysis::row_json).collect::<Vec<_>>(),
        "best": analysis::best(&rows).iter().map(analysis::row_json).collect::<Vec<_>>(),
    }));
}

/// After an interrupted sweep: what was kept, and how to resume. `None` if not interrupted.
pub fn interrupted(r: &sweep::SweepReport, total: usize, resume: &str) -> Option<ExitCode> {
    if !dsgd_runtime::cancel::requested() {
        return None;
    }
    eprintln!(
        "interrupted: {} runs finished now and are kept ({} of {total} done), {} unfinished runs removed; \
         resume with: {resume}",
        r.ran,
        r.ran + r.skipped,
        r.interrupted
    );
    Some(ExitCode::from(130))
}

/// Prints how many runs ran, were kept and failed; exit 1 if any failed.
pub fn sweep_report(r: &sweep::SweepReport, out: Out) -> ExitCode {
    say!(out, "{} runs done now, {} already done earlier, {} failed", r.ran, r.skipped, r.failed.len());
    for (i, e) in &r.failed {
        eprintln!("run {i} failed: {e}");
    }
    if r.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
