//! `dsgd`: run, sweep, replay and plot distributed-SGD experiments on a simulated cluster.

use clap::{Parser, Subcommand};
use dsgd_experiments::execute::{execute, execute_with, write_run};
use dsgd_experiments::load::{self, spec_from_file};
use dsgd_experiments::output::{fresh_dir, write_atomic};
use dsgd_experiments::spec::GradientTime;
use dsgd_experiments::sweep::{self, RunRecord};
use dsgd_experiments::{plot, report};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Prints a line to stdout; a closed pipe (`dsgd ... | head`) is not an error worth a panic,
/// and the work goes on (output files are written regardless).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// The embedded default: a small comparison of every algorithm on the noisy quadratic.
const DEFAULT_SWEEP: &str = include_str!("../specs/default_sweep.json");

#[derive(Parser)]
#[command(
    name = "dsgd",
    version,
    about = "How should distributed deep learning scale? A deterministic simulator of distributed SGD."
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
        /// Also write a Chrome trace (trace.json; open it in Perfetto).
        #[arg(long)]
        trace: bool,
        /// Parallel runs for the default comparison (default: all cores).
        #[arg(long)]
        jobs: Option<usize>,
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
    },
    /// Re-run the resolved spec(s) in a run or sweep folder; exit 0 only if everything is identical.
    Replay {
        /// A run folder or a sweep folder.
        dir: PathBuf,
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
    let result = match cli.command {
        Command::Run { spec: Some(spec), out, sets, trace, jobs: _ } => run_one(&spec, out, &sets, trace),
        Command::Run { spec: None, out, sets, trace: _, jobs } => run_default(out, &sets, jobs.unwrap_or_else(cores)),
        Command::Sweep { sweep, out, jobs, no_plots } => run_sweep(&sweep, &out, jobs.unwrap_or_else(cores), !no_plots),
        Command::Replay { dir } => replay(&dir),
        Command::Plot { dirs, out } => plot_dirs(&dirs, out),
        Command::BenchGradient { model, hidden, device, batch, steps, warmup, peak_tflops, json } => {
            bench_gradient(&model, &hidden, &device, batch, steps, warmup, peak_tflops, json)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_one(path: &Path, out: Option<PathBuf>, sets: &[String], trace: bool) -> Result<ExitCode, String> {
    let spec = spec_from_file(path, sets).map_err(|e| e.to_string())?;
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
    out!("  digest {}  ({} events)", s.digest, s.events);
    out!(
        "  wrote {}/{{spec.json,summary.json,metrics.csv,timeline.csv{}{}}}",
        dir.display(),
        if outcome.result.recording.is_some() { ",gradient_times.csv" } else { "" },
        if trace { ",trace.json" } else { "" }
    );
    Ok(ExitCode::SUCCESS)
}

fn finish_sweep(out: &Path, draw: bool) -> Result<Vec<RunRecord>, String> {
    let runs = sweep::collect_runs(out)?;
    let rows = sweep::aggregate(&runs);
    write_atomic(&out.join("aggregate.csv"), sweep::aggregate_csv(&rows).as_bytes()).map_err(|e| e.to_string())?;
    let best = sweep::best(&rows);
    let mut md = format!("# {}\n\nMeans ± 95% confidence half-widths over seeds.\n\n", out.display());
    if best.len() < rows.len() {
        let t = report::table(&best);
        out!("Best variant of each algorithm and node count:\n{t}");
        md.push_str(&format!("## Best variant of each algorithm and node count\n\n{t}\n## Every variant\n\n"));
        md.push_str(&report::table(&rows));
    } else {
        let t = report::table(&rows);
        out!("{t}");
        md.push_str(&t);
    }
    write_atomic(&out.join("report.md"), md.as_bytes()).map_err(|e| e.to_string())?;
    if draw {
        let files = plot::all(&sweep::best_runs(&runs), &out.join("plots"))?;
        out!(
            "report: {}  figures: {}/ ({} files)",
            out.join("report.md").display(),
            out.join("plots").display(),
            files.len()
        );
    }
    Ok(runs)
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

fn run_sweep(path: &Path, out: &Path, jobs: usize, draw: bool) -> Result<ExitCode, String> {
    let (spec, points) = sweep::load(path).map_err(|e| e.to_string())?;
    let report = sweep::run(&spec, &points, out, jobs, true)?;
    let code = sweep_report(&report);
    finish_sweep(out, draw)?;
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
    let report = sweep::run(&sweep_spec, &points, &out, jobs, true)?;
    let code = sweep_report(&report);
    finish_sweep(&out, true)?;
    Ok(code)
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

fn replay(dir: &Path) -> Result<ExitCode, String> {
    let runs = sweep::collect_runs(dir)?;
    let mut bad = 0;
    for r in &runs {
        let recording = dsgd_experiments::execute::saved_recording(&r.dir)?;
        if recording.is_none() && r.spec.compute.gradient_time == GradientTime::Measured {
            return Err(format!(
                "{}: a measured run without its {}; it cannot be replayed",
                r.dir.display(),
                dsgd_experiments::execute::GRADIENT_TIMES
            ));
        }
        let outcome = execute_with(&r.spec, false, recording)?;
        let strip = |s: &dsgd_experiments::output::Summary| {
            let mut v = serde_json::to_value(s).expect("serialises");
            v.as_object_mut().expect("object").remove("wall_time_s");
            v
        };
        let same_summary = strip(&outcome.summary) == strip(&r.summary);
        let csv = std::fs::read_to_string(r.dir.join("metrics.csv")).unwrap_or_default();
        let same_metrics = csv == dsgd_experiments::output::metrics_csv(&outcome.result);
        if outcome.summary.digest == r.summary.digest && same_summary && same_metrics {
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
    Ok(if bad == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn plot_dirs(dirs: &[PathBuf], out: Option<PathBuf>) -> Result<ExitCode, String> {
    let mut runs = Vec::new();
    for d in dirs {
        runs.extend(sweep::collect_runs(d)?);
    }
    let out = out.unwrap_or_else(|| dirs[0].join("plots"));
    let files = plot::all(&sweep::best_runs(&runs), &out)?;
    for f in &files {
        out!("{}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}
