//! `dsgd validate`: specs run for real and in the simulator with calibrated parameters; the
//! simulator's error per algorithm as a table, JSON and a plot.

use anyhow::anyhow;

use super::out::Out;
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd validate SPEC...`.
#[derive(clap::Args)]
pub struct Args {
    /// The specs.
    #[arg(required = true)]
    specs: Vec<PathBuf>,
    /// Output folder.
    #[arg(long, default_value = "validation")]
    out: PathBuf,
    /// The NICs are shaped by token buckets (Linux's `tbf`, as experiments/scripts/netns_cluster.sh
    /// shapes them): time streams too, and give the simulator the bucket they show.
    #[arg(long)]
    token_bucket: bool,
    /// Fail (exit 1) if any error exceeds this fraction.
    #[arg(long)]
    max_error: Option<f64>,
}

/// Without MPI: says how to rebuild.
#[cfg(not(feature = "mpi"))]
pub fn run(_: Args, _: Out) -> anyhow::Result<ExitCode> {
    Err(anyhow!(super::mpi::NO_MPI))
}

/// Runs the validation on this MPI job's ranks; rank 0 writes the folder and says how far off
/// the simulator was.
#[cfg(feature = "mpi")]
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    use super::out::say;
    use dsgd_experiments::output::write_atomic;
    use dsgd_experiments::{plot, real};
    let load = |p: &PathBuf| dsgd_experiments::load::spec_from_file(p, &[]);
    let specs = a.specs.iter().map(load).collect::<Result<Vec<_>, _>>()?;
    for s in &specs {
        real::for_real(s)?;
    }
    let universe = real::init()?;
    let world = universe.world();
    let validated = real::validate(&world, &specs, a.token_bucket);
    let Some(v) = super::mpi::or_abort(&world, validated) else { return Ok(ExitCode::SUCCESS) };
    let (rows, dir) = (&v.comparisons, &a.out);
    let table = real::table(rows);
    say!(out, "{table}");
    std::fs::create_dir_all(dir.join("runs")).map_err(|e| anyhow!("cannot create {}: {e}", dir.display()))?;
    let io = |e: std::io::Error| anyhow!("cannot write into {}: {e}", dir.display());
    for (r, (spec, outcome)) in rows.iter().zip(&v.replays) {
        dsgd_experiments::execute::write_run(&dir.join("runs").join(&r.name), spec, outcome)?;
    }
    let json = serde_json::to_string_pretty(&v).expect("json") + "\n";
    write_atomic(&dir.join("validation.json"), json.as_bytes()).map_err(io)?;
    write_atomic(&dir.join("validation.md"), table.as_bytes()).map_err(io)?;
    let bars: Vec<(String, f64, f64)> = rows.iter().map(|r| (r.algorithm.clone(), r.real, r.simulated)).collect();
    plot::validation(&bars, &dir.join("validation"))?;
    say!(
        out,
        "wrote {}/{{validation.json,validation.md,validation.png,validation.svg,runs/}} (replay the simulator's side with: dsgd replay {})",
        dir.display(),
        dir.display()
    );
    if let Some(m) = a.max_error {
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
