//! Helpers shared by the command-line tests.
#![allow(dead_code, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `dsgd` in `dir` and waits for it.
pub fn dsgd(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsgd")).current_dir(dir).args(args).output().expect("dsgd runs")
}

/// Standard output and error together.
pub fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A sweep of 20 runs of about a tenth of a second each (a 60- or 64-node ring all-reduce of a
/// timing workload), long enough to be stopped half way.
pub const SLOW_SWEEP: &str = r#"{
  "base": {"workload": {"kind": "timing", "params": 1000000}, "compute": {"step_time_ms": 10},
           "network": {"bandwidth_gbps": 100}, "stop": {"sim_time_s": 1000, "iterations": 40}, "eval": {"every_s": 100}},
  "grid": {"nodes": [60, 64], "seed": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}
}"#;

/// Finished run folders in `runs` (hidden, half-written ones are not counted).
pub fn finished_runs(runs: &Path) -> usize {
    std::fs::read_dir(runs)
        .map(|d| d.flatten().filter(|e| !e.file_name().to_string_lossy().starts_with('.')).count())
        .unwrap_or(0)
}

/// Half-written run folders left in `runs`.
pub fn partial_runs(runs: &Path) -> Vec<String> {
    std::fs::read_dir(runs)
        .map(|d| {
            d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with('.')).collect()
        })
        .unwrap_or_default()
}

/// Waits (at most two minutes) until `runs` holds at least `n` finished runs.
pub fn wait_for_runs(runs: &Path, n: usize) {
    let t0 = std::time::Instant::now();
    while finished_runs(runs) < n && t0.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
