//! The `dsgd` command line: the parser and one module per command. Each command takes its own
//! arguments and an [`Out`] (lines or one JSON document) and returns its exit code, or an error
//! that [`main`] prints with exit code 2.

use anyhow::anyhow;

mod bench_gradient;
mod bench_real;
mod bench_scale;
mod calibrate;
mod check;
mod diff;
mod mpi;
mod out;
mod plot;
mod real;
mod replay;
mod run;
mod sweep;
mod torture;
mod validate;

use clap::{Parser, Subcommand};
use out::Out;
use std::process::ExitCode;

const EXIT_CODES: &str = "Exit codes: 0 success; 1 a run, replay or validation failed (or `diff` found \
differences); 2 bad input (a spec, a sweep file, a flag or a folder), with a message naming the file \
and the field; 3 a run stopped for outgrowing its memory budget; 4 an invariant was violated (`run --check`) \
or a `torture` scenario failed.";

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
    Run(run::Args),
    /// Run a grid of specs in parallel; resumes where it stopped; aggregates over seeds.
    Sweep(sweep::Args),
    /// Re-run the resolved spec(s) in a run or sweep folder; exit 0 only if everything is identical.
    Replay(replay::Args),
    /// Validate a spec or a sweep file without running anything: print the resolved spec (every
    /// default filled in) or, for a sweep, its number of runs and their points.
    Check(check::Args),
    /// Say which spec fields and which summary figures differ between two run folders (exit 0
    /// if none, 1 if some differ).
    Diff(diff::Args),
    /// Run a spec for real, one MPI process per rank: `mpirun -np N dsgd real SPEC` (needs the
    /// `mpi` feature). Writes the same summary.json and metrics.csv as a simulated run.
    Real(real::Args),
    /// Measure this machine's or cluster's latency and bandwidth per message size, for one pair,
    /// all pairs at once and the ring, up to the spec's largest message, and, given a spec, its
    /// all-reduce and gradient step times; write them as spec parts (JSON).
    Calibrate(calibrate::Args),
    /// Run specs for real and in the simulator with calibrated parameters; report the
    /// simulator's error per algorithm (table, JSON and plot).
    Validate(validate::Args),
    /// Time real gradient steps of a burn network (CPU, or CUDA with the `cuda` feature).
    BenchGradient(bench_gradient::Args),
    /// How the simulator's cost grows with the cluster: wall time, events/s, ns/event and peak
    /// memory of each algorithm at each node count, each case in a process of its own.
    BenchScale(bench_scale::Args),
    /// Real gradients per wall second through the engine (burn MLP 784-128-10 on Fashion-MNIST)
    /// for each algorithm and worker count, beside a plain burn training loop at the same batch.
    BenchReal(bench_real::Args),
    /// Draw the figures of finished runs or sweeps.
    Plot(plot::Args),
    /// Test the protocols: seeded random scenarios with faults, every invariant checked after
    /// every event and progress required once the faults heal; failures are shrunk to specs that
    /// `dsgd run --check` fails on; prints a coverage table (exit 4 if a scenario failed).
    Torture(torture::Args),
}

impl Command {
    /// Where this command's words go: `--json` asks for one JSON document only.
    fn out(&self) -> Out {
        Out::new(match self {
            Command::Run(a) => a.json,
            Command::Sweep(a) => a.json,
            Command::Replay(a) => a.json,
            Command::Check(a) => a.json,
            Command::Diff(a) => a.json,
            _ => false,
        })
    }

    fn execute(self, out: Out) -> anyhow::Result<ExitCode> {
        match self {
            Command::Run(a) => run::run(a, out),
            Command::Sweep(a) => sweep::run(a, out),
            Command::Replay(a) => replay::run(a, out),
            Command::Check(a) => check::run(a, out),
            Command::Diff(a) => diff::run(a, out),
            Command::Real(a) => real::run(a, out),
            Command::Calibrate(a) => calibrate::run(a, out),
            Command::Validate(a) => validate::run(a, out),
            Command::BenchGradient(a) => bench_gradient::run(a, out),
            Command::BenchScale(a) => bench_scale::run(a, out),
            Command::BenchReal(a) => bench_real::run(a, out),
            Command::Plot(a) => plot::run(a, out),
            Command::Torture(a) => torture::run(a, out),
        }
    }
}

/// Parses the command line, runs the command, and turns its outcome into an exit code: an error
/// is printed (and, under `--json`, given as the JSON document) with exit code 2, or 130 when
/// Ctrl-C stopped the work.
pub fn main() -> ExitCode {
    let command = Cli::parse().command;
    let out = command.out();
    // SIGINT/SIGTERM: runs stop at their next check and sweeps keep what finished; a second
    // signal ends the process at once.
    let _ = ctrlc::set_handler(|| {
        if dsgd_runtime::cancel::requested() {
            std::process::exit(130);
        }
        dsgd_runtime::cancel::request();
    });
    match command.execute(out) {
        Ok(code) => code,
        Err(_) if dsgd_runtime::cancel::requested() => {
            eprintln!("interrupted: the run was stopped before it finished; nothing was written");
            ExitCode::from(130)
        }
        Err(e) => {
            // A run stopped for outgrowing its memory has a code of its own, and so has a
            // violated invariant of a checked run.
            let code = match e.downcast_ref::<dsgd_experiments::Error>() {
                Some(dsgd_experiments::Error::Sim(dsgd_sim::SimError::OverBudget(_))) => OVER_BUDGET,
                Some(dsgd_experiments::Error::Sim(dsgd_sim::SimError::Invariant { .. })) => torture::FOUND,
                _ => 2,
            };
            // The whole chain: a library error and the context the command added to it.
            let e = format!("{e:#}");
            out.json(&serde_json::json!({"error": e}));
            eprintln!("error: {e}");
            ExitCode::from(code)
        }
    }
}

/// The machine's cores: the default number of parallel runs.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The exit code of a run stopped because it outgrew its memory budget (see `dsgd_runtime::budget`).
pub const OVER_BUDGET: u8 = 3;

/// The algorithms a benchmark was given, or all it knows when given none.
fn given_or_all(given: Vec<String>, all: &[&str]) -> Vec<String> {
    if given.is_empty() {
        all.iter().map(|a| a.to_string()).collect()
    } else {
        given
    }
}

/// Writes a benchmark's figures as JSON at `path` (atomically) and says so.
fn write_json(path: &std::path::Path, value: &impl serde::Serialize, out: Out) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).expect("plain data serialises") + "\n";
    dsgd_experiments::output::write_atomic(path, text.as_bytes())
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    out::say!(out, "wrote {}", path.display());
    Ok(())
}
