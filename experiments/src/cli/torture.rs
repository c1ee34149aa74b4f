//! `dsgd torture`: seeded random scenarios with faults, every invariant checked after every
//! event and liveness after the faults heal; failures shrunk to specs `dsgd run --check` fails
//! on; a coverage table of faults by protocol stage.

use super::out::{say, Out};
use anyhow::{anyhow, Context};
use dsgd_experiments::output::fresh_dir;
use dsgd_experiments::torture::coverage::Coverage;
use dsgd_experiments::torture::{run_case, scenario::scenario, shrink::shrink, Case, Verdict};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Exit code when a scenario failed (and of `dsgd run --check` on a violated invariant).
pub const FOUND: u8 = 4;

/// `dsgd torture`.
#[derive(clap::Args)]
pub struct Args {
    /// Scenarios to run (default 200, or as many as fit in --minutes).
    #[arg(long)]
    seeds: Option<u64>,
    /// Run scenarios for this many minutes (stops early at --seeds if given too).
    #[arg(long)]
    minutes: Option<f64>,
    /// The first scenario's seed; scenario k has seed FROM + k.
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Scenarios run in parallel (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Folder for the failing and shrunk specs, the coverage table and the summary (default
    /// runs/torture, or runs/torture-2... if taken).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Runs the shrinker may make for each failing scenario (0: no shrinking).
    #[arg(long, default_value_t = 300)]
    shrink_runs: usize,
    /// Failing scenarios to shrink (the first of each kind of failure first).
    #[arg(long, default_value_t = 5)]
    shrink_at_most: usize,
}

/// The run's summary, as `torture.json`.
#[derive(serde::Serialize)]
struct Summary {
    first_seed: u64,
    scenarios: u64,
    passed: u64,
    failed: Vec<Failure>,
    wall_s: f64,
    scenarios_per_hour: f64,
    events_checked: u64,
    by_algorithm: std::collections::BTreeMap<String, u64>,
    coverage: Coverage,
}

#[derive(serde::Serialize)]
struct Failure {
    seed: u64,
    algorithm: String,
    kind: String,
    message: String,
    spec: Option<String>,
    shrunk: Option<String>,
}

/// Runs the scenarios, shrinks the failures, writes the folder.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    if a.minutes.is_some_and(|m| !(m.is_finite() && m > 0.0)) {
        return Err(anyhow!("--minutes must be a positive number"));
    }
    let seeds = a.seeds.unwrap_or(if a.minutes.is_some() { u64::MAX } else { 200 });
    let jobs = a.jobs.unwrap_or_else(super::cores).max(1);
    let dest = a.out.unwrap_or_else(|| fresh_dir(Path::new("runs/torture")));
    std::fs::create_dir_all(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let deadline = a.minutes.map(|m| Instant::now() + Duration::from_secs_f64(m * 60.0));
    say!(
        out,
        "torture: scenarios from seed {} on {jobs} threads{}",
        a.from,
        match a.minutes {
            Some(m) => format!(" for {m} minutes"),
            None => String::new(),
        }
    );
    // Panics are caught and reported per scenario; their default message would interleave.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let started = Instant::now();
    let next = AtomicU64::new(0);
    let cases: Mutex<Vec<Case>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                if dsgd_runtime::cancel::requested() || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= seeds {
                    break;
                }
                let case = run_case(a.from + k);
                if dsgd_runtime::cancel::requested() {
                    break; // interrupted: this scenario did not finish
                }
                if let Verdict::Failed { kind, message } = &case.verdict {
                    eprintln!("seed {} ({}): {kind}: {message}", case.seed, case.algorithm);
                }
                let mut all = cases.lock().unwrap_or_else(|e| e.into_inner());
                all.push(case);
                if all.len().is_multiple_of(10_000) {
                    eprintln!("{} scenarios checked in {:.0} s", all.len(), started.elapsed().as_secs_f64());
                }
            });
        }
    });
    let wall = started.elapsed().as_secs_f64();
    let mut cases = cases.into_inner().unwrap_or_else(|e| e.into_inner());
    cases.sort_by_key(|c| c.seed);
    let mut coverage = Coverage::default();
    let mut by_algorithm = std::collections::BTreeMap::new();
    for c in &cases {
        *by_algorithm.entry(c.algorithm.clone()).or_default() += 1;
        if let Verdict::Passed(r) = &c.verdict {
            coverage.add(&c.algorithm, r);
        }
    }
    let failures = shrink_failures(&cases, &dest, a.shrink_runs, a.shrink_at_most)?;
    std::panic::set_hook(hook);
    let passed = cases.iter().filter(|c| c.verdict.failure().is_none()).count() as u64;
    let summary = Summary {
        first_seed: a.from,
        scenarios: cases.len() as u64,
        passed,
        failed: failures,
        wall_s: wall,
        scenarios_per_hour: cases.len() as f64 / wall.max(1e-9) * 3600.0,
        events_checked: coverage.events,
        by_algorithm,
        coverage,
    };
    let table = summary.coverage.markdown();
    write(&dest.join("coverage.md"), &table)?;
    write(&dest.join("torture.json"), &(serde_json::to_string_pretty(&summary)? + "\n"))?;
    say!(out, "{table}");
    say!(
        out,
        "{} scenarios ({}) in {:.1} s on {jobs} threads: {:.0} scenarios an hour, {} events checked; {} passed, {} failed",
        summary.scenarios,
        summary.by_algorithm.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "),
        wall,
        summary.scenarios_per_hour,
        summary.events_checked,
        summary.passed,
        summary.failed.len()
    );
    for f in &summary.failed {
        say!(out, "  seed {} ({}): {}: {}", f.seed, f.algorithm, f.kind, f.message);
        if let Some(p) = &f.shrunk {
            say!(out, "    reproduce: dsgd run --check {p}");
        }
    }
    say!(
        out,
        "wrote {}/{{torture.json,coverage.md{}}}",
        dest.display(),
        if summary.failed.is_empty() { "" } else { ",failures/" }
    );
    Ok(if summary.failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(FOUND) })
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes each failing scenario's spec and shrinks the first `at_most` (one of each kind first).
fn shrink_failures(cases: &[Case], dest: &Path, runs: usize, at_most: usize) -> anyhow::Result<Vec<Failure>> {
    let failing: Vec<&Case> = cases.iter().filter(|c| c.verdict.failure().is_some()).collect();
    if failing.is_empty() {
        return Ok(Vec::new());
    }
    let dir = dest.join("failures");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut order: Vec<&Case> = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for c in &failing {
        if kinds.insert(c.verdict.failure().unwrap_or_default().to_string()) {
            order.push(c);
        }
    }
    let chosen: Vec<u64> = order.iter().map(|c| c.seed).take(at_most).collect();
    let mut out = Vec::new();
    for c in failing {
        let Verdict::Failed { kind, message } = &c.verdict else { continue };
        let value = scenario(c.seed);
        let spec = dir.join(format!("seed-{}.json", c.seed));
        write(&spec, &(serde_json::to_string_pretty(&value)? + "\n"))?;
        let mut shrunk = None;
        if runs > 0 && chosen.contains(&c.seed) {
            let (small, verdict, used) = shrink(&value, kind, runs);
            let path = dir.join(format!("seed-{}-shrunk.json", c.seed));
            write(&path, &(serde_json::to_string_pretty(&small)? + "\n"))?;
            eprintln!("seed {}: shrunk in {used} runs; it still fails: {verdict:?}", c.seed);
            shrunk = Some(path.display().to_string());
        }
        out.push(Failure {
            seed: c.seed,
            algorithm: c.algorithm.clone(),
            kind: kind.clone(),
            message: message.clone(),
            spec: Some(spec.display().to_string()),
            shrunk,
        });
    }
    Ok(out)
}
