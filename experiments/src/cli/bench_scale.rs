//! `dsgd bench-scale`: how the simulator's cost grows with the cluster (wall time, events/s,
//! ns/event, peak memory), each case in a process of its own.

use anyhow::anyhow;

use super::out::{say, Out};
use dsgd_experiments::scalebench::{self, Row};
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd bench-scale`.
#[derive(clap::Args)]
pub struct Args {
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
}

/// Runs every case (each in a child process) and prints the table.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let algorithms = super::given_or_all(a.algorithms, scalebench::ALGORITHMS);
    for alg in &algorithms {
        for &n in &a.nodes {
            scalebench::case(alg, n)?;
        }
    }
    if a.one {
        let (Some(alg), Some(&n), 1, 1) = (algorithms.first(), a.nodes.first(), algorithms.len(), a.nodes.len()) else {
            return Err(anyhow!("--one runs exactly one algorithm at one node count"));
        };
        println!("{}", serde_json::to_string(&scalebench::measure(alg, n)?).expect("serialises"));
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe().map_err(|e| anyhow!("cannot find this program to run the cases: {e}"))?;
    let rows = scalebench::run_cases(&exe, &algorithms, &a.nodes, a.repeat, |row: &Row| {
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
    say!(out, "{}", scalebench::table(&rows));
    if let Some(path) = a.json {
        super::write_json(&path, &rows, out)?;
    }
    Ok(ExitCode::SUCCESS)
}
