//! `dsgd`: run, sweep, replay and plot distributed-SGD experiments on a simulated cluster.

use clap::{Parser, Subcommand};
use dsgd_experiments::execute::{execute, execute_with, write_run};
use dsgd_experiments::load::{self, spec_from_file};
use dsgd_experiments::output::{fresh_dir, write_atomic};
use dsgd_experiments::spec::StepTimes;
use dsgd_experiments::sweep::{self, RunRecord};
use dsgd_experiments::{analysis, plot, report};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// mimalloc: gradient and parameter vectors of hundreds of kilobytes are allocated and freed at
/// every gradient and message; glibc's allocator returns such blocks to the system and faults
/// their pages in again each time, which cost real-gradient runs a third of their time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Set by `--json`: human-readable lines are not printed, so stdout holds one JSON document.
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// True when `--json` asked for one JSON document on stdout.
fn json_mode() -> bool {
    JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Prints a line to stdout (unless `--json` asked for JSON only); a closed pipe (`dsgd ... |
/// head`) is not an error worth a panic, and the work goes on (output files are written
/// regardless).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if !json_mode() {
            let _ = writeln!(std::io::stdout(), $($t)*);
        }
    }};
}

/// Prints a JSON document to stdout (for `--json`).
fn print_json(v: &serde_json::Value) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(v).expect("JSON values serialise"));
}

const EXIT_CODES: &str = "Exit codes: 0 success; 1 a run, replay or validation failed (or `diff` found \
differences); 2 bad input (a spec, a sweep file, a flag or a folder), with a message naming the file \
and the field.";

/// The embedded default: a small comparison of every algorithm on the noisy quadratic.
const DEFAULT_SWEEP: &str = include_str!("../specs/default_sweep.json");

#[derive(Parser)]
#[command(
    name = "dsgd",
    version,
    about = "How should distributed deep learning scale? A deterministic simulator of distributed SGD.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one spec; with no spec, run the embedded default comparison of all algorithms.
    Run {
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
        json: bool,
        /// Run even if the estimated memory exceeds what this machine has available.
        #[arg(long)]
        force: bool,
    },
    /// Run a grid of specs in parallel; resumes where it stopped; aggregates over seeds.
    Sweep {
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
        json: bool,
        /// Run even if a point's estimated memory exceeds what this machine has available.
        #[arg(long)]
        force: bool,
    },
    /// Re-run the resolved spec(s) in a run or sweep folder; exit 0 only if everything is identical.
    Replay {
        /// A run folder or a sweep folder.
        dir: PathBuf,
        /// Print one JSON document (every run's verdict) only.
        #[arg(long)]
        json: bool,
    },
    /// Validate a spec or a sweep file without running anything: print the resolved spec (every
    /// default filled in) or, for a sweep, its number of runs and their points.
    Check {
        /// A spec or a sweep file (JSON).
        file: PathBuf,
        /// Override a field of a spec (repeatable).
        #[arg(long = "set", value_name = "PATH=VALUE")]
        sets: Vec<String>,
        /// Print JSON only.
        #[arg(long)]
        json: bool,
    },
    /// Say which spec fields and which summary figures differ between two run folders (exit 0
    /// if none, 1 if some differ).
    Diff {
        /// A run folder.
        a: PathBuf,
        /// Another run folder.
        b: PathBuf,
        /// Print JSON only.
        #[arg(long)]
        json: bool,
    },
    /// Run a spec for real, one MPI process per rank: `mpirun -np N dsgd real SPEC` (needs the
    /// `mpi` feature). Writes the same summary.json and metrics.csv as a simulated run.
    Real {
        /// The spec (JSON).
        spec: PathBuf,
        /// Output folder (default runs/<name>-real).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Override a field (repeatable).
        #[arg(long = "set", value_name = "PATH=VALUE")]
        sets: Vec<String>,
    },
    /// Measure this machine's or cluster's latency and bandwidth per message size, for one pair,
    /// all pairs at once and the ring, up to the spec's largest message, and, given a spec, its
    /// all-reduce and gradient step times; write them as spec parts (JSON).
    Calibrate {
        /// A spec whose workload's gradient times to measure.
        #[arg(long)]
        spec: Option<PathBuf>,
        /// Where to write the network and compute parts.
        #[arg(long, default_value = "calibration.json")]
        out: PathBuf,
    },
    /// Run specs for real and in the simulator with calibrated parameters; report the
    /// simulator's error per algorithm (table, JSON and plot).
    Validate {
        /// The specs.
        #[arg(required = true)]
        specs: Vec<PathBuf>,
        /// Output folder.
        #[arg(long, default_value = "validation")]
        out: PathBuf,
        /// Fail (exit 1) if any error exceeds this fraction.
        #[arg(long)]
        max_error: Option<f64>,
    },
    /// Time real gradient steps of a burn network (CPU, or CUDA with the `cuda` feature).
    BenchGradient {
        /// mlp, cnn, resnet20 or resnet18.
        #[arg(long, default_value = "resnet20")]
        model: String,
        /// Hidden widths of the MLP, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "128")]
        hidden: Vec<usize>,
        /// cpu, cuda or cuda:N.
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Minibatch size.
        #[arg(long, default_value_t = 64)]
        batch: usize,
        /// Timed steps.
        #[arg(long, default_value_t = 10)]
        steps: usize,
        /// Untimed steps first.
        #[arg(long, default_value_t = 2)]
        warmup: usize,
        /// The device's peak TFLOP/s (default: looked up for known NVIDIA GPUs).
        #[arg(long)]
        peak_tflops: Option<f64>,
        /// Also write the timings as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// How the simulator's cost grows with the cluster: wall time, events/s, ns/event and peak
    /// memory of each algorithm at each node count, each case in a process of its own.
    BenchScale {
        /// Node counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
        nodes: Vec<usize>,
        /// Algorithms, comma-separated: sync_ring, sync_hierarchical, async_ps, easgd,
        /// gossip_pull, gossip_push (default all).
        #[arg(long, value_delimiter = ',')]
        algorithms: Vec<String>,
        /// Runs of each case (the fastest is reported; a case of over 10 s runs once).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Also write the rows as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Run one case in this process and print its row as JSON (used by the benchmark).
        #[arg(long, hide = true)]
        one: bool,
    },
    /// Real gradients per wall second through the engine (burn MLP 784-128-10 on Fashion-MNIST)
    /// for each algorithm and worker count, beside a plain burn training loop at the same batch.
    BenchReal {
        /// Worker counts, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,10,100")]
        workers: Vec<usize>,
        /// Algorithms, comma-separated: sync, async_ps, gossip (default all).
        #[arg(long, value_delimiter = ',')]
        algorithms: Vec<String>,
        /// Minibatch size.
        #[arg(long, default_value_t = 32)]
        batch: usize,
        /// Simulated seconds per case (10 ms steps).
        #[arg(long, default_value_t = 2.0)]
        sim_time_s: f64,
        /// Steps of the plain loop (best of three runs).
        #[arg(long, default_value_t = 2000)]
        plain_steps: usize,
        /// Also write the rows as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Draw the figures of finished runs or sweeps.
    Plot {
        /// Run or sweep folders.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where to put the figures (default: DIR/plots of the first folder).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = matches!(
        cli.command,
        Command::Run { json: true, .. }
            | Command::Sweep { json: true, .. }
            | Command::Replay { json: true, .. }
            | Command::Check { json: true, .. }
            | Command::Diff { json: true, .. }
    );
    JSON.store(json, std::sync::atomic::Ordering::Relaxed);
    // SIGINT/SIGTERM: runs stop at their next check and sweeps keep what finished; a second
    // signal ends the process at once.
    let _ = ctrlc::set_handler(|| {
        if dsgd_runtime::cancel::requested() {
            std::process::exit(130);
        }
        dsgd_runtime::cancel::request();
    });
    let result = match cli.command {
        Command::Run { spec: Some(_), jobs: Some(_), .. } => {
            Err("--jobs applies to the default comparison (dsgd run with no spec); a single run uses one core".into())
        }
        Command::Run { spec: None, trace: true, .. } => {
            Err("--trace needs a spec (dsgd run SPEC --trace); the default comparison writes no traces".into())
        }
        Command::Run { spec: Some(spec), out, sets, trace, force, .. } => run_one(&spec, out, &sets, trace, force),
        Command::Run { spec: None, out, sets, jobs, .. } => run_default(out, &sets, jobs.unwrap_or_else(cores)),
        Command::Sweep { sweep, out, jobs, no_plots, rerun_changed, force, .. } => {
            run_sweep(&sweep, &out, jobs.unwrap_or_else(cores), !no_plots, rerun_changed, force)
        }
        Command::Replay { dir, .. } => replay(&dir),
        Command::Check { file, sets, .. } => check(&file, &sets),
        Command::Diff { a, b, .. } => diff(&a, &b),
        Command::Plot { dirs, out } => plot_dirs(&dirs, out),
        Command::Real { spec, out, sets } => mpi_cmd::real(&spec, out, &sets),
        Command::Calibrate { spec, out } => mpi_cmd::calibrate(spec.as_deref(), &out),
        Command::Validate { specs, out, max_error } => mpi_cmd::validate(&specs, &out, max_error),
        Command::BenchGradient { model, hidden, device, batch, steps, warmup, peak_tflops, json } => {
            bench_gradient(&model, &hidden, &device, batch, steps, warmup, peak_tflops, json)
        }
        Command::BenchScale { nodes, algorithms, repeat, json, one } => {
            bench_scale(&nodes, &algorithms, repeat, json, one)
        }
        Command::BenchReal { workers, algorithms, batch, sim_time_s, plain_steps, json } => {
            bench_real(&workers, &algorithms, batch, sim_time_s, plain_steps, json)
        }
    };
    match result {
        Ok(code) => code,
        Err(_) if dsgd_runtime::cancel::requested() => {
            eprintln!("interrupted: the run was stopped before it finished; nothing was written");
            ExitCode::from(130)
        }
        Err(e) => {
            if json {
                print_json(&serde_json::json!({"error": e}));
            }
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_one(path: &Path, out: Option<PathBuf>, sets: &[String], trace: bool, force: bool) -> Result<ExitCode, String> {
    let spec = spec_from_file(path, sets).map_err(|e| e.to_string())?;
    if !force {
        dsgd_experiments::bounds::check_memory(&spec).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let dest = out.unwrap_or_else(|| fresh_dir(&Path::new("runs").join(&spec.name)));
    if dest.exists() {
        return Err(format!("{} already exists; choose another --out (nothing was run)", dest.display()));
    }
    let outcome = execute(&spec, trace)?;
    let dir = write_run(&dest, &spec, &outcome)?;
    let s = &outcome.summary;
    out!("{} with {} nodes, seed {}: {}", s.algorithm, s.nodes, s.seed, s.stop_reason);
    out!(
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
        out!(
            "  diverged at {:.3} s (loss {}); lower optimizer.lr",
            d.time_s,
            d.loss.map_or("not a number".into(), |l| format!("{l:.4e}"))
        );
    }
    if s.evaluations_without_model > 0 {
        out!(
            "  {} evaluations had no model to score (no live replica, or a server shard down): no loss, no target",
            s.evaluations_without_model
        );
    }
    out!("  digest {}  ({} events)", s.digest, s.events);
    out!(
        "  wrote {}/{{spec.json,summary.json,metrics.csv,timeline.csv{}{}}}",
        dir.display(),
        if outcome.result.recording.is_some() { ",gradient_times.csv" } else { "" },
        if trace { ",trace.json" } else { "" }
    );
    if json_mode() {
        let mut v = serde_json::to_value(s).expect("serialises");
        v["dir"] = dir.display().to_string().into();
        print_json(&v);
    }
    Ok(ExitCode::SUCCESS)
}

fn check(path: &Path, sets: &[String]) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?;
    let is_sweep = ["grid", "base", "base_file"].iter().any(|k| value.get(k).is_some());
    if !is_sweep {
        return check_spec(path, sets);
    }
    if !sets.is_empty() {
        return Err("--set applies to a spec; a sweep's fields are set in its file".into());
    }
    let (_, points) = sweep::load(path).map_err(|e| e.to_string())?;
    let mut algs: Vec<String> = points.iter().map(|p| p.spec.algorithm.label()).collect();
    algs.sort();
    algs.dedup();
    let mut nodes: Vec<usize> = points.iter().map(|p| p.spec.nodes).collect();
    nodes.sort();
    nodes.dedup();
    out!("{}: a valid sweep of {} runs", path.display(), points.len());
    out!("  algorithms: {}", algs.join(", "));
    out!("  node counts: {}", nodes.iter().map(usize::to_string).collect::<Vec<_>>().join(", "));
    for p in points.iter().take(5) {
        out!("  run {:04}: {}", p.index, sweep::describe(&p.assignment));
    }
    if points.len() > 5 {
        out!("  ... ({} more)", points.len() - 5);
    }
    if json_mode() {
        let pts: Vec<serde_json::Value> = points
            .iter()
            .map(|p| {
                let a: serde_json::Map<String, serde_json::Value> = p.assignment.iter().cloned().collect();
                serde_json::json!({"index": p.index, "assignment": a})
            })
            .collect();
        print_json(&serde_json::json!({"kind": "sweep", "runs": points.len(), "points": pts}));
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsgd check` of a spec: the resolved spec and the estimate of what running it takes.
fn check_spec(path: &Path, sets: &[String]) -> Result<ExitCode, String> {
    let spec = spec_from_file(path, sets).map_err(|e| e.to_string())?;
    let resolved = serde_json::to_value(&spec).expect("serialises");
    out!("{}: a valid spec: {} with {} nodes, seed {}", path.display(), spec.algorithm.label(), spec.nodes, spec.seed);
    out!("{}", serde_json::to_string_pretty(&resolved).expect("JSON"));
    let est = dsgd_experiments::bounds::estimate(&spec);
    let avail = dsgd_experiments::bounds::available_memory();
    out!(
        "estimated peak memory {} ({} ranks, {:.0} parameters each){}",
        dsgd_experiments::bounds::human(est.bytes),
        est.ranks,
        est.params,
        avail.map_or(String::new(), |a| format!("; {} available here", dsgd_experiments::bounds::human(a)))
    );
    for (what, bytes) in &est.drivers {
        out!("  {}: {what}", dsgd_experiments::bounds::human(*bytes));
    }
    out!(
        "at most about {:.2e} events, {:.1} s of wall time for them{}",
        est.events,
        est.wall_s,
        if matches!(spec.workload, dsgd_experiments::spec::WorkloadSpec::Burn { .. }) {
            ", plus the real gradients' computation"
        } else {
            ""
        }
    );
    if json_mode() {
        let drivers: Vec<serde_json::Value> =
            est.drivers.iter().map(|(f, b)| serde_json::json!({"what": f, "bytes": b})).collect();
        print_json(&serde_json::json!({
            "kind": "spec",
            "spec": resolved,
            "estimate": {"bytes": est.bytes, "ranks": est.ranks, "params": est.params, "drivers": drivers,
                         "available_bytes": avail, "events": est.events, "wall_s": est.wall_s},
        }));
    }
    Ok(ExitCode::SUCCESS)
}

fn diff(a: &Path, b: &Path) -> Result<ExitCode, String> {
    let d = dsgd_experiments::diff::diff_runs(a, b)?;
    out!("{}", dsgd_experiments::diff::text(&d).trim_end());
    if json_mode() {
        print_json(&serde_json::json!({"identical": d.is_empty(), "spec": d.spec, "summary": d.summary}));
    }
    Ok(if d.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn finish_sweep(out: &Path, draw: bool) -> Result<Vec<RunRecord>, String> {
    let runs = sweep::collect_runs(out)?;
    let rows = analysis::aggregate(&runs);
    let io = |e: std::io::Error| format!("cannot write into {}: {e}", out.display());
    write_atomic(&out.join("runs.csv"), analysis::runs_csv(&runs).as_bytes()).map_err(io)?;
    write_atomic(&out.join("aggregate.csv"), analysis::aggregate_csv(&rows).as_bytes()).map_err(io)?;
    let best = analysis::best(&rows);
    out!("Target: {}", report::target_text(&runs));
    if best.len() < rows.len() {
        out!("Best variant of each algorithm and node count:\n{}", report::table(&best));
    } else {
        out!("{}", report::table(&rows));
    }
    let md = report::report_md(&out.display().to_string(), &runs, &rows, &best);
    write_atomic(&out.join("report.md"), md.as_bytes()).map_err(io)?;
    if draw {
        let files = plot::all(&analysis::best_runs(&runs), &out.join("plots"))?;
        out!(
            "report: {}  tables: runs.csv, aggregate.csv  figures: {}/ ({} files)",
            out.join("report.md").display(),
            out.join("plots").display(),
            files.len()
        );
    }
    Ok(runs)
}

/// The `--json` document of a finished sweep.
fn sweep_json(out: &Path, r: &sweep::SweepReport, runs: &[RunRecord]) {
    if !json_mode() {
        return;
    }
    let rows = analysis::aggregate(runs);
    let failed: Vec<serde_json::Value> =
        r.failed.iter().map(|(i, e)| serde_json::json!({"index": i, "error": e})).collect();
    print_json(&serde_json::json!({
        "out": out.display().to_string(),
        "ran": r.ran,
        "skipped": r.skipped,
        "failed": failed,
        "target": report::target_text(runs),
        "aggregate": rows.iter().map(analysis::row_json).collect::<Vec<_>>(),
        "best": analysis::best(&rows).iter().map(analysis::row_json).collect::<Vec<_>>(),
    }));
}

/// After an interrupted sweep: what was kept, and how to resume. `None` if not interrupted.
fn interrupted(r: &sweep::SweepReport, total: usize, resume: &str) -> Option<ExitCode> {
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

fn sweep_report(r: &sweep::SweepReport) -> ExitCode {
    out!("{} runs done now, {} already done earlier, {} failed", r.ran, r.skipped, r.failed.len());
    for (i, e) in &r.failed {
        eprintln!("run {i} failed: {e}");
    }
    if r.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn run_sweep(
    path: &Path,
    out: &Path,
    jobs: usize,
    draw: bool,
    rerun_changed: bool,
    force: bool,
) -> Result<ExitCode, String> {
    let (spec, points) = sweep::load(path).map_err(|e| e.to_string())?;
    if !force {
        for p in &points {
            dsgd_experiments::bounds::check_memory(&p.spec).map_err(|e| {
                format!("{} (point {}: {}): {e}", path.display(), p.index, sweep::describe(&p.assignment))
            })?;
        }
    }
    if let Some(code) = mpi_cmd::sweep(&spec, &points, out, jobs, draw, rerun_changed)? {
        return Ok(code);
    }
    let progress = !json_mode();
    let report = sweep::run(&spec, &points, out, jobs, progress, rerun_changed)?;
    let resume = format!("dsgd sweep {} --out {}", path.display(), out.display());
    if let Some(code) = interrupted(&report, points.len(), &resume) {
        return Ok(code);
    }
    let code = sweep_report(&report);
    let runs = finish_sweep(out, draw)?;
    sweep_json(out, &report, &runs);
    Ok(code)
}

fn run_default(out: Option<PathBuf>, sets: &[String], jobs: usize) -> Result<ExitCode, String> {
    let mut sweep_spec: sweep::SweepSpec =
        serde_json::from_str(DEFAULT_SWEEP).map_err(|e| format!("embedded default: {e}"))?;
    for s in sets {
        let (k, v) = load::parse_assignment(s)?;
        load::set_path(&mut sweep_spec.base, &k, v)?;
    }
    let points = sweep::expand("<embedded default>", &sweep_spec.base, &sweep_spec.grid).map_err(|e| e.to_string())?;
    let out = out.unwrap_or_else(|| fresh_dir(Path::new("runs/default")));
    out!(
        "Comparing every algorithm on the noisy quadratic: {} runs, {jobs} at a time, into {}",
        points.len(),
        out.display()
    );
    let progress = !json_mode();
    let report = sweep::run(&sweep_spec, &points, &out, jobs, progress, false)?;
    if let Some(code) = interrupted(&report, points.len(), &format!("dsgd run --out {}", out.display())) {
        return Ok(code);
    }
    let code = sweep_report(&report);
    let runs = finish_sweep(&out, true)?;
    sweep_json(&out, &report, &runs);
    Ok(code)
}

/// Writes a benchmark's figures as JSON at `path` (atomically) and says so.
fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).expect("plain data serialises") + "\n";
    dsgd_experiments::output::write_atomic(path, text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    out!("wrote {}", path.display());
    Ok(())
}

fn bench_real(
    workers: &[usize],
    algorithms: &[String],
    batch: usize,
    sim_time_s: f64,
    plain_steps: usize,
    json: Option<PathBuf>,
) -> Result<ExitCode, String> {
    use dsgd_experiments::realbench;
    let algorithms: Vec<String> = if algorithms.is_empty() {
        realbench::ALGORITHMS.iter().map(|a| a.to_string()).collect()
    } else {
        algorithms.to_vec()
    };
    for a in &algorithms {
        for &n in workers {
            realbench::spec(a, n, batch, sim_time_s)?;
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let plain = realbench::plain(batch, plain_steps.max(1))?;
    eprintln!("plain burn loop: {plain:.0} gradients/s on one core ({cores} cores here)");
    let mut rows = Vec::new();
    for a in &algorithms {
        for &n in workers {
            let row = realbench::measure(a, n, batch, sim_time_s)?;
            eprintln!(
                "{:>9} {:>4} workers: {:.0} gradients/s ({} in {:.2} s; {:.3} CPU ms a gradient, {:.2} cores busy)",
                a, n, row.gradients_per_s, row.gradients, row.wall_s, row.cpu_ms_per_gradient, row.cores_busy
            );
            rows.push(row);
        }
    }
    out!("{}", realbench::table(&rows, plain, cores));
    if let Some(path) = json {
        let v = serde_json::json!({"plain_loop_per_s": plain, "cores": cores, "batch": batch, "rows": rows});
        write_json(&path, &v)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn bench_scale(
    nodes: &[usize],
    algorithms: &[String],
    repeat: usize,
    json: Option<PathBuf>,
    one: bool,
) -> Result<ExitCode, String> {
    use dsgd_experiments::scalebench::{self, Row};
    let algorithms: Vec<String> = if algorithms.is_empty() {
        scalebench::ALGORITHMS.iter().map(|a| a.to_string()).collect()
    } else {
        algorithms.to_vec()
    };
    for a in &algorithms {
        for &n in nodes {
            scalebench::case(a, n)?;
        }
    }
    if one {
        let (Some(a), Some(&n), 1, 1) = (algorithms.first(), nodes.first(), algorithms.len(), nodes.len()) else {
            return Err("--one runs exactly one algorithm at one node count".into());
        };
        println!("{}", serde_json::to_string(&scalebench::measure(a, n)?).expect("serialises"));
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program to run the cases: {e}"))?;
    let rows = scalebench::run_cases(&exe, &algorithms, nodes, repeat, |row: &Row| {
        eprintln!(
            "{:>17} {:>6} nodes: {:.2} s (best of {}), {} events, {:.0} ns/event, {:.0} MB",
            row.algorithm,
            row.nodes,
            row.wall_s,
            row.runs,
            row.events,
            row.ns_per_event(),
            row.peak_bytes as f64 / 1e6
        )
    })?;
    out!("{}", scalebench::table(&rows));
    if let Some(path) = json {
        write_json(&path, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[allow(clippy::too_many_arguments)]
fn bench_gradient(
    model: &str,
    hidden: &[usize],
    device: &str,
    batch: usize,
    steps: usize,
    warmup: usize,
    peak_tflops: Option<f64>,
    json: Option<PathBuf>,
) -> Result<ExitCode, String> {
    use dsgd_experiments::gradbench::{self, GradBench};
    let kind = gradbench::parse_kind(model, hidden)?;
    let device = dsgd_models::nets::Device::parse(device)?;
    let t = gradbench::run(&GradBench { kind, device, batch, steps, warmup, data_dir: None })?;
    let gpu = matches!(device, dsgd_models::nets::Device::Cuda(_)).then(gradbench::gpu_name).flatten();
    let peak = peak_tflops.or_else(|| gpu.as_deref().and_then(gradbench::known_peak_tflops));
    out!(
        "{} ({} parameters) on {}{}, batch {}",
        t.model,
        t.params,
        t.device,
        gpu.map_or(String::new(), |g| format!(" ({g})")),
        t.batch
    );
    out!("  step time: mean {:.2} ms, median {:.2} ms over {} steps", t.mean_s * 1e3, t.median_s * 1e3, t.step_s.len());
    out!("  samples per second: {:.0}", t.samples_per_s);
    match peak {
        Some(p) => out!(
            "  model FLOP/s: {:.1} GFLOP/s = {:.2}% of the {p} TFLOP/s FP32 peak",
            t.flops_per_s / 1e9,
            100.0 * t.flops_per_s / (p * 1e12)
        ),
        None => {
            out!("  model FLOP/s: {:.1} GFLOP/s (give --peak-tflops for the fraction of peak)", t.flops_per_s / 1e9)
        }
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&t).expect("plain data") + "\n";
        write_atomic(&path, text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// True if `new` agrees with the `summary.json` recorded in `dir` on every field that file has,
/// except the wall time (fields added since it was written are not compared).
fn same_summary(dir: &Path, new: &dsgd_experiments::output::Summary) -> Result<bool, String> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let old: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let new = serde_json::to_value(new).expect("serialises");
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else { return Ok(false) };
    Ok(old.iter().filter(|(k, _)| *k != "wall_time_s").all(|(k, v)| new.get(k) == Some(v)))
}

fn replay(dir: &Path) -> Result<ExitCode, String> {
    let runs = sweep::collect_runs(dir)?;
    let mut bad = 0;
    let mut verdicts = Vec::new();
    for r in &runs {
        let recording = dsgd_experiments::execute::saved_recording(&r.dir)?;
        if recording.is_none() && r.spec.compute.gradient_time == StepTimes::Measured {
            return Err(format!(
                "{}: a measured run without its {}; it cannot be replayed",
                r.dir.display(),
                dsgd_experiments::execute::GRADIENT_TIMES
            ));
        }
        let outcome = execute_with(&r.spec, false, recording)?;
        let same_summary = same_summary(&r.dir, &outcome.summary)?;
        let csv = std::fs::read_to_string(r.dir.join("metrics.csv")).unwrap_or_default();
        let same_metrics =
            dsgd_experiments::output::same_csv(&csv, &dsgd_experiments::output::metrics_csv(&outcome.result));
        let identical = outcome.summary.digest == r.summary.digest && same_summary && same_metrics;
        verdicts.push(serde_json::json!({
            "dir": r.dir.display().to_string(),
            "identical": identical,
            "digest_recorded": r.summary.digest,
            "digest_now": outcome.summary.digest,
            "summary_identical": same_summary,
            "metrics_identical": same_metrics,
        }));
        if identical {
            out!("identical  {}  digest {}", r.dir.display(), r.summary.digest);
        } else {
            bad += 1;
            out!(
                "DIFFERENT  {}  digest {} -> {}{}{}",
                r.dir.display(),
                r.summary.digest,
                outcome.summary.digest,
                if same_summary { "" } else { "; summary differs" },
                if same_metrics { "" } else { "; metrics.csv differs" }
            );
        }
    }
    out!("{} of {} runs replayed identically", runs.len() - bad, runs.len());
    if json_mode() {
        print_json(&serde_json::json!({"identical": runs.len() - bad, "runs": runs.len(), "verdicts": verdicts}));
    }
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn plot_dirs(dirs: &[PathBuf], out: Option<PathBuf>) -> Result<ExitCode, String> {
    let mut runs = Vec::new();
    for d in dirs {
        runs.extend(sweep::collect_runs(d)?);
    }
    let out = out.unwrap_or_else(|| dirs[0].join("plots"));
    let files = plot::all(&analysis::best_runs(&runs), &out)?;
    for f in &files {
        out!("{}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Ranks of the MPI job this process belongs to, from the launcher's environment.
fn mpi_job_size() -> usize {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(1)
}

#[cfg(not(feature = "mpi"))]
mod mpi_cmd {
    use super::*;
    const NO_MPI: &str = "this dsgd was built without MPI; rebuild with `cargo build --release --features mpi` \
                          (needs Open MPI: apt-get install openmpi-bin libopenmpi-dev libclang-dev)";
    pub fn real(_: &Path, _: Option<PathBuf>, _: &[String]) -> Result<ExitCode, String> {
        Err(NO_MPI.into())
    }
    pub fn calibrate(_: Option<&Path>, _: &Path) -> Result<ExitCode, String> {
        Err(NO_MPI.into())
    }
    pub fn validate(_: &[PathBuf], _: &Path, _: Option<f64>) -> Result<ExitCode, String> {
        Err(NO_MPI.into())
    }
    pub fn sweep(
        _: &sweep::SweepSpec,
        _: &[sweep::Point],
        _: &Path,
        _: usize,
        _: bool,
        _: bool,
    ) -> Result<Option<ExitCode>, String> {
        if mpi_job_size() > 1 {
            return Err(format!(
                "started as one of {} MPI ranks, but {NO_MPI}; every rank would run the whole sweep",
                mpi_job_size()
            ));
        }
        Ok(None)
    }
}

#[cfg(feature = "mpi")]
mod mpi_cmd {
    use super::*;
    use dsgd_experiments::real;
    use mpi::topology::Communicator;
    use mpi::traits::*;

    pub fn real(path: &Path, out: Option<PathBuf>, sets: &[String]) -> Result<ExitCode, String> {
        let spec = spec_from_file(path, sets).map_err(|e| e.to_string())?;
        real::for_real(&spec)?;
        let universe = real::init()?;
        let world = universe.world();
        let dest = out.unwrap_or_else(|| PathBuf::from(format!("runs/{}-real", spec.name)));
        if world.rank() == 0 && dest.exists() {
            world.abort(2);
        }
        if let Some(s) = real::real(&world, &spec, &dest)? {
            out!("{} with {} nodes for real on {} MPI ranks: {}", s.algorithm, s.nodes, world.size(), s.stop_reason);
            out!(
                "  {:.3} s wall; {} updates ({:.1}/s); mean iteration {}; final loss {}",
                s.sim_time_s,
                s.updates,
                s.updates_per_s,
                s.iteration_time_s.as_ref().map_or("-".into(), |t| format!("{:.4} s", t.mean)),
                s.final_loss.map_or("-".into(), |l| format!("{l:.6}"))
            );
            out!("  wrote {}/{{spec.json,summary.json,metrics.csv,timeline.csv}}", dest.display());
        }
        Ok(ExitCode::SUCCESS)
    }

    pub fn calibrate(spec: Option<&Path>, out: &Path) -> Result<ExitCode, String> {
        let spec = spec.map(|p| spec_from_file(p, &[]).map_err(|e| e.to_string())).transpose()?;
        let universe = real::init()?;
        let world = universe.world();
        if let Some(c) = dsgd_experiments::calibrate::calibrate(&world, spec.as_ref())? {
            out!("  {:>9}  {:>14}  {:>14}  {:>14}", "bytes", "one way, pair", "all pairs", "ring round");
            for p in &c.points {
                out!(
                    "  {:>9}  {:>11.1} us  {:>11.1} us  {:>11.1} us",
                    p.bytes,
                    p.one_way_s * 1e6,
                    p.concurrent_one_way_s * 1e6,
                    p.ring_one_way_s * 1e6
                );
            }
            let f = |f: &dsgd_experiments::calibrate::Fit| {
                format!(
                    "{:?}: latency {:.1} us, bandwidth {:.2} Gbit/s up to {} B, through {} B",
                    f.pattern, f.latency_us, f.bandwidth_gbps, f.up_to_bytes, f.through_bytes
                )
            };
            for p in &c.pattern_fits {
                out!("fit {}", f(p));
            }
            out!("used for the spec: {}", f(&c.fit));
            if let Some(t) = c.all_reduce_s {
                out!("the spec's all-reduce of its model: {:.3} ms", t * 1e3);
            }
            for (w, steps) in c.step_s.iter().enumerate() {
                let mean = steps.iter().sum::<f64>() / steps.len() as f64;
                out!("gradient step on worker {w}: mean {:.3} ms over {} steps", mean * 1e3, steps.len());
            }
            let mut v = c.spec_parts(spec.as_ref().map_or(0.0, |s| s.compute.step_time_ms));
            v["measured"] = serde_json::to_value(&c).expect("plain data");
            let text = serde_json::to_string_pretty(&v).expect("json") + "\n";
            write_atomic(out, text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
            out!("wrote {}", out.display());
        }
        Ok(ExitCode::SUCCESS)
    }

    pub fn validate(paths: &[PathBuf], out: &Path, max_error: Option<f64>) -> Result<ExitCode, String> {
        let specs =
            paths.iter().map(|p| spec_from_file(p, &[]).map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>()?;
        for s in &specs {
            real::for_real(s)?;
        }
        let universe = real::init()?;
        let world = universe.world();
        let Some(v) = real::validate(&world, &specs)? else { return Ok(ExitCode::SUCCESS) };
        let rows = &v.comparisons;
        let table = real::table(rows);
        out!("{table}");
        std::fs::create_dir_all(out.join("runs")).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
        let io = |e: std::io::Error| format!("cannot write into {}: {e}", out.display());
        for (r, (spec, outcome)) in rows.iter().zip(&v.replays) {
            dsgd_experiments::execute::write_run(&out.join("runs").join(&r.name), spec, outcome)?;
        }
        write_atomic(&out.join("validation.json"), (serde_json::to_string_pretty(&v).expect("json") + "\n").as_bytes())
            .map_err(io)?;
        write_atomic(&out.join("validation.md"), table.as_bytes()).map_err(io)?;
        let bars: Vec<(String, f64, f64)> = rows.iter().map(|r| (r.algorithm.clone(), r.real, r.simulated)).collect();
        plot::validation(&bars, &out.join("validation")).map_err(|e| e.to_string())?;
        out!("wrote {}/{{validation.json,validation.md,validation.png,validation.svg,runs/}} (replay the simulator's side with: dsgd replay {})", out.display(), out.display());
        if let Some(m) = max_error {
            if let Some(r) = rows.iter().find(|r| r.error.abs() > m) {
                eprintln!(
                    "error: {} ({}) is off by {:+.1}%, more than {:.1}%",
                    r.name,
                    r.algorithm,
                    100.0 * r.error,
                    100.0 * m
                );
                return Ok(ExitCode::from(1));
            }
        }
        Ok(ExitCode::SUCCESS)
    }

    /// Under mpirun with several ranks: rank r runs the points with index % size == r; rank 0
    /// cleans leftovers first and aggregates last. `None` when not under a multi-rank job.
    pub fn sweep(
        spec: &sweep::SweepSpec,
        points: &[sweep::Point],
        out: &Path,
        jobs: usize,
        draw: bool,
        rerun_changed: bool,
    ) -> Result<Option<ExitCode>, String> {
        if mpi_job_size() <= 1 {
            return Ok(None);
        }
        let universe = dsgd_experiments::real::init()?;
        let world = universe.world();
        let (me, size) = (world.rank() as usize, world.size() as usize);
        let mut refused = None;
        if me == 0 {
            refused = sweep::prepare(out, points, rerun_changed).err();
        }
        let mut ok = u8::from(refused.is_none());
        world.process_at_rank(0).broadcast_into(&mut ok);
        if ok == 0 {
            return Err(refused.unwrap_or_else(|| "rank 0 refused the output folder (see its message)".into()));
        }
        let mine: Vec<sweep::Point> = points.iter().filter(|p| p.index % size == me).cloned().collect();
        let report = sweep::run_share(spec, &mine, out, jobs, false);
        world.barrier();
        let report = report?;
        let mut failed = 0u64;
        world.all_reduce_into(&(report.failed.len() as u64), &mut failed, mpi::collective::SystemOperation::sum());
        if me != 0 {
            return Ok(Some(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }));
        }
        out!("{} runs over {size} MPI ranks", points.len());
        let all = sweep::run_share(spec, points, out, 1, false)?;
        let code = sweep_report(&all);
        finish_sweep(out, draw)?;
        Ok(Some(if failed == 0 { code } else { ExitCode::from(1) }))
    }
}
