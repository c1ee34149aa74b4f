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
    /// Algorithms, comma-separated: sync, async_ps, easgd, gossip (pull), gossip_push, local_sgd
    /// (default all).
    #[arg(long, value_delimiter = ',')]
    algorithms: Vec<String>,
    /// The cluster: `friendly` (10 ms steps, no jitter, small messages) or `paper` (the paper
    /// sweeps' cluster: 180 ms steps with jitter, 46.8 MB messages, evaluation on 2,000 images;
    /// rates over runs that start with the one-time work done, and the start-up of a fresh
    /// process reported beside them).
    #[arg(long, value_enum, default_value = "friendly")]
    cluster: realbench::Cluster,
    /// Minibatch size.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Simulated seconds per case (default 2 in the friendly cluster, 30 in the paper one).
    #[arg(long)]
    sim_time_s: Option<f64>,
    /// Steps of the plain loop, measured before each case (best of three runs).
    #[arg(long, default_value_t = 1000)]
    plain_steps: usize,
    /// Also write the rows as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Measures the plain loop, then every case, and prints the table.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let algorithms = super::given_or_all(a.algorithms, &realbench::ALGORITHMS);
    let secs = a.sim_time_s.unwrap_or(match a.cluster {
        realbench::Cluster::Friendly => 2.0,
        realbench::Cluster::Paper => 30.0,
    });
    for alg in &algorithms {
        for &n in &a.workers {
            let v = realbench::spec(a.cluster, alg, n, a.batch, secs)?;
            dsgd_experiments::load::spec_from_value("bench-real", v)?;
        }
    }
    let cores = super::cores();
    let exe = std::env::current_exe().ok();
    let mut rows = Vec::new();
    for alg in &algorithms {
        for &n in &a.workers {
            let plain = realbench::Plain::measure(a.cluster, a.batch, a.plain_steps.max(1), cores)?;
            let row = realbench::measure(a.cluster, alg, n, a.batch, secs, exe.as_deref(), plain)?;
            eprintln!(
                "{:>11} {:>4} workers: {:.0} gradients/s, {:.2} of the plain loop × cores ({:.0} steps/s), model work {:.2} of the machine ({} gradients and {} evaluations in {:.2} s, start-up {:.2} s; {:.3} CPU ms a gradient, {:.2} cores busy)",
                alg,
                n,
                row.gradients_per_s,
                row.gradients_vs_plain,
                plain.steps_per_s,
                row.model_work_vs_machine,
                row.gradients,
                row.evaluations,
                row.wall_s,
                row.startup_s,
                row.cpu_ms_per_gradient,
                row.cores_busy
            );
            rows.push(row);
        }
    }
    say!(out, "{}", realbench::table(&rows));
    if let Some(path) = a.json {
        let v = serde_json::json!({"cluster": a.cluster, "sim_time_s": secs, "cores": cores, "batch": a.batch, "rows": rows});
        super::write_json(&path, &v, out)?;
    }
    Ok(ExitCode::SUCCESS)
}
