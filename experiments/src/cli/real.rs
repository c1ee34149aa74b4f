//! `dsgd real`: a spec run for real, one MPI process per rank (`mpirun -np N dsgd real SPEC`).

use super::out::Out;
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd real SPEC`.
#[derive(clap::Args)]
pub struct Args {
    /// The spec (JSON).
    spec: PathBuf,
    /// Output folder (default runs/<name>-real).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Override a field (repeatable).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    sets: Vec<String>,
}

/// Without MPI: says how to rebuild.
#[cfg(not(feature = "mpi"))]
pub fn run(_: Args, _: Out) -> anyhow::Result<ExitCode> {
    Err(anyhow::anyhow!(super::mpi::NO_MPI))
}

/// Runs the spec on this MPI job's ranks; rank 0 writes the run folder and prints the summary.
#[cfg(feature = "mpi")]
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    use super::out::say;
    use dsgd_experiments::real;
    use mpi::topology::Communicator;
    let spec = dsgd_experiments::load::spec_from_file(&a.spec, &a.sets)?;
    real::for_real(&spec)?;
    let universe = real::init()?;
    let world = universe.world();
    let dest = a.out.unwrap_or_else(|| PathBuf::from(format!("runs/{}-real", spec.name)));
    if world.rank() == 0 && dest.exists() {
        // Said before aborting: MPI_ABORT's own message does not say why.
        eprintln!("error: {} already exists; choose another --out (nothing was run)", dest.display());
        world.abort(2);
    }
    let ran = real::real(&world, &spec, &dest);
    if let Some(s) = super::mpi::or_abort(&world, ran) {
        say!(out, "{} with {} nodes for real on {} MPI ranks: {}", s.algorithm, s.nodes, world.size(), s.stop_reason);
        say!(
            out,
            "  {:.3} s wall; {} updates ({:.1}/s); mean iteration {}; final loss {}",
            s.sim_time_s,
            s.updates,
            s.updates_per_s,
            s.iteration_time_s.as_ref().map_or("-".into(), |t| format!("{:.4} s", t.mean)),
            s.final_loss.map_or("-".into(), |l| format!("{l:.6}"))
        );
        say!(
            out,
            "  wrote {}/{{spec.json,summary.json,metrics.csv,timeline.csv,gradient_times.csv,order.json}}",
            dest.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
