//! `dsgd run`: one spec, or with no spec the embedded default comparison of every algorithm.

use anyhow::{anyhow, Context};

use super::out::{say, Out};
use super::sweep::{finish_sweep, interrupted, sweep_json, sweep_report};
use dsgd_experiments::execute::{execute, execute_checked, execute_in_order, read_order, write_run};
use dsgd_experiments::load::{self, spec_from_file};
use dsgd_experiments::output::fresh_dir;
use dsgd_experiments::sweep;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The embedded default: a small comparison of every algorithm on the noisy quadratic.
const DEFAULT_SWEEP: &str = include_str!("../../specs/default_sweep.json");

/// `dsgd run [SPEC]`.
#[derive(clap::Args)]
pub struct Args {
    /// The spec (JSON). Omit it for the embedded default.
    spec: Option<PathBuf>,
    /// Output folder (default runs/<name>, or runs/<name>-2... if taken).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Override a field: --set network.latency_us=50 (repeatable; values are JSON).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
    /// Also write a Chrome trace (trace.json; open it in Perfetto). Needs a spec.
    #[arg(long)]
    trace: bool,
    /// Parallel runs for the default comparison (default: all cores). Only without a spec.
    #[arg(long)]
    jobs: Option<usize>,
    /// Print the summary (or, for the default comparison, the sweep's outcome) as JSON only.
    #[arg(long)]
    pub json: bool,
    /// Run even if the estimated memory exceeds what this machine has available.
    #[arg(long)]
    force: bool,
    /// Check the simulation tester's invariants after every event, and progress once the
    /// spec's faults heal (as `dsgd torture` does); a violation stops the run (exit 4).
    #[arg(long)]
    check: bool,
    /// Replay the order in which a real run's ranks handled their events (the `order.json` of a
    /// `dsgd real` folder of the same spec): each rank handles its events in that order and
    /// nothing after it, the stopping rules are off, and the run ends when every rank has
    /// handled its record. Its replicas then end with the real run's bits.
    #[arg(long, value_name = "ORDER_JSON")]
    order: Option<PathBuf>,
}

/// Runs the spec, or the embedded default when none is given.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    match a.spec {
        Some(_) if a.jobs.is_some() => {
            Err(anyhow!("--jobs applies to the default comparison (dsgd run with no spec); a single run uses one core"))
        }
        None if a.trace => {
            Err(anyhow!("--trace needs a spec (dsgd run SPEC --trace); the default comparison writes no traces"))
        }
        None if a.check => Err(anyhow!("--check needs a spec (dsgd run SPEC --check)")),
        None if a.order.is_some() => {
            Err(anyhow!("--order needs the spec of the real run (dsgd run SPEC --order ORDER_JSON)"))
        }
        Some(_) if a.check && a.order.is_some() => Err(anyhow!("--check and --order cannot be combined")),
        Some(spec) => run_one(&spec, a.out, &a.sets, (a.trace, a.check, a.order), a.force, out),
        None => run_default(a.out, &a.sets, a.jobs.unwrap_or_else(super::cores), out),
    }
}

fn run_one(
    path: &Path,
    dest: Option<PathBuf>,
    sets: &[String],
    (trace, check, order): (bool, bool, Option<PathBuf>),
    force: bool,
    out: Out,
) -> anyhow::Result<ExitCode> {
    let spec = spec_from_file(path, sets)?;
    if !force {
        dsgd_experiments::bounds::check_memory(&spec).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    }
    dsgd_experiments::bounds::set_budget((!force).then_some(&spec));
    let dest = dest.unwrap_or_else(|| fresh_dir(&Path::new("runs").join(&spec.name)));
    if dest.exists() {
        return Err(anyhow!("{} already exists; choose another --out (nothing was run)", dest.display()));
    }
    let outcome = match check {
        true if trace => return Err(anyhow!("--check and --trace cannot be combined; run the spec twice")),
        true => execute_checked(&spec, dsgd_experiments::torture::checks_for(&spec))
            .with_context(|| format!("{} (checked)", path.display()))?,
        false => match order {
            Some(file) => execute_in_order(&spec, trace, None, read_order(&file)?)
                .with_context(|| format!("{} replaying the order in {}", path.display(), file.display()))?,
            None => execute(&spec, trace)?,
        },
    };
    let dir = write_run(&dest, &spec, &outcome)?;
    let s = &outcome.summary;
    say!(out, "{} with {} nodes, seed {}: {}", s.algorithm, s.nodes, s.seed, s.stop_reason);
    say!(
        out,
        "  simulated {:.3} s in {:.2} s wall; {} updates ({:.1}/s); final loss {}; accuracy {}; time to target {}",
        s.sim_time_s,
        s.wall_time_s,
        s.updates,
        s.updates_per_s,
        s.final_loss.map_or("-".into(), |l| format!("{l:.6}")),
        s.final_accuracy.map_or("-".into(), |a| format!("{a:.4}")),
        s.time_to_target_s.map_or("not reached".into(), |t| format!("{t:.3} s")),
    );
    if let Some(d) = &s.diverged {
        say!(
            out,
            "  diverged at {:.3} s (loss {}); lower optimizer.lr",
            d.time_s,
            d.loss.map_or("not a number".into(), |l| format!("{l:.4e}"))
        );
    }
    if s.evaluations_without_model > 0 {
        say!(
            out,
            "  {} evaluations had no model to score (no live replica, or a server shard down): no loss, no target",
            s.evaluations_without_model
        );
    }
    say!(out, "  digest {}  ({} events)", s.digest, s.events);
    if let Some(c) = &outcome.result.checks {
        let live = match dsgd_experiments::torture::checks_for(&spec).liveness {
            Some((healed, within)) if s.sim_time_s + 1e-9 < healed + within => {
                format!(" (the run is too short for the liveness check, which needs {:.3} s)", healed + within)
            }
            Some((0.0, within)) => format!(", and the run made progress within {within} s of its start"),
            Some((healed, within)) => {
                format!(", and the run made progress within {within} s of {healed} s, when its faults had healed")
            }
            None => " (no liveness check: a fault never heals)".into(),
        };
        say!(out, "  checked: every invariant held after each of {} events{live}", c.events);
    }
    say!(
        out,
        "  wrote {}/{{spec.json,summary.json,metrics.csv,timeline.csv{}{}{}}}",
        dir.display(),
        if outcome.result.recording.is_some() { ",gradient_times.csv" } else { "" },
        if outcome.result.order.is_some() { ",order.json" } else { "" },
        if trace { ",trace.json" } else { "" }
    );
    if out.json_mode() {
        let mut v = serde_json::to_value(s).expect("serialises");
        v["dir"] = dir.display().to_string().into();
        out.json(&v);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_default(dest: Option<PathBuf>, sets: &[String], jobs: usize, out: Out) -> anyhow::Result<ExitCode> {
    let mut sweep_spec: sweep::SweepSpec =
        serde_json::from_str(DEFAULT_SWEEP).map_err(|e| anyhow!("embedded default: {e}"))?;
    for s in sets {
        let (k, v) = load::parse_assignment(s)?;
        load::set_spec_path(&mut sweep_spec.base, &k, v)?;
    }
    let points = sweep::expand("<embedded default>", &sweep_spec.base, &sweep_spec.grid)?;
    dsgd_experiments::bounds::set_budget(None);
    let dest = dest.unwrap_or_else(|| fresh_dir(Path::new("runs/default")));
    say!(
        out,
        "Comparing every algorithm on the noisy quadratic: {} runs, {jobs} at a time, into {}",
        points.len(),
        dest.display()
    );
    let report = sweep::run(&sweep_spec, &points, &dest, jobs, !out.json_mode(), false)?;
    if let Some(code) = interrupted(&report, points.len(), &format!("dsgd run --out {}", dest.display())) {
        return Ok(code);
    }
    let code = sweep_report(&report, out);
    let runs = finish_sweep(&dest, true, out)?;
    sweep_json(&dest, &report, &runs, out);
    Ok(code)
}
