//! `dsgd bench-real`: real gradients per wall second through the engine for each algorithm and
//! worker count, beside a plain burn training loop at the same batch.

use super::out::{say, Out};
use dsgd_experiments::realbench;
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd bench-real`.
#[derive(clap::Args)]
pub struct Args {
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
}

/// Measures the plain loop, then every case, and prints the table.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let algorithms = super::given_or_all(a.algorithms, &realbench::ALGORITHMS);
    for alg in &algorithms {
        for &n in &a.workers {
            realbench::spec(alg, n, a.batch, a.sim_time_s)?;
        }
    }
    let cores = super::cores();
    let plain = realbench::plain(a.batch, a.plain_steps.max(1))?;
    eprintln!("plain burn loop: {plain:.0} gradients/s on one core ({cores} cores here)");
    let mut rows = Vec::new();
    for alg in &algorithms {
        for &n in &a.workers {
            let row = realbench::measure(alg, n, a.batch, a.sim_time_s)?;
            eprintln!(
                "{:>9} {:>4} workers: {:.0} gradients/s ({} in {:.2} s; {:.3} CPU ms a gradient, {:.2} cores busy)",
                alg, n, row.gradients_per_s, row.gradients, row.wall_s, row.cpu_ms_per_gradient, row.cores_busy
            );
            rows.push(row);
        }
    }
    say!(out, "{}", realbench::table(&rows, plain, cores));
    if let Some(path) = a.json {
        let v = serde_json::json!({"plain_loop_per_s": plain, "cores": cores, "batch": a.batch, "rows": rows});
        super::write_json(&path, &v, out)?;
    }
    Ok(ExitCode::SUCCESS)
}
