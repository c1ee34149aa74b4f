//! What the MPI commands share: the message of a build without MPI, the size of the job this
//! process was started in, and a sweep spread over the ranks of a multi-rank `mpirun`.

use anyhow::anyhow;

use super::out::Out;
use dsgd_experiments::sweep;
use std::path::Path;
use std::process::ExitCode;

/// Why `real`, `calibrate` and `validate` cannot run in a build without the `mpi` feature.
#[cfg(not(feature = "mpi"))]
pub const NO_MPI: &str = "this dsgd was built without MPI; rebuild with `cargo build --release --features mpi` \
                          (needs Open MPI: apt-get install openmpi-bin libopenmpi-dev libclang-dev)";

/// Ranks of the MPI job this process belongs to, from the launcher's environment.
fn mpi_job_size() -> usize {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(1)
}

/// `r`, or, where it failed on this rank, the error said and the whole job ended (exit 1): the
/// other ranks would otherwise wait for this one in their next collective for ever.
#[cfg(feature = "mpi")]
pub fn or_abort<T>(world: &mpi::topology::SimpleCommunicator, r: dsgd_experiments::Result<T>) -> T {
    use mpi::traits::Communicator;
    match r {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e} (rank {} of {}; ending every rank)", world.rank(), world.size());
            world.abort(1)
        }
    }
}

/// Without MPI: refuses to run a sweep as one of several ranks (each would run all of it).
#[cfg(not(feature = "mpi"))]
pub fn sweep(
    _: &sweep::SweepSpec,
    _: &[sweep::Point],
    _: &Path,
    _: usize,
    _: bool,
    _: bool,
    _: Out,
) -> anyhow::Result<Option<ExitCode>> {
    if mpi_job_size() > 1 {
        return Err(anyhow!(
            "started as one of {} MPI ranks, but {NO_MPI}; every rank would run the whole sweep",
            mpi_job_size()
        ));
    }
    Ok(None)
}

/// Under mpirun with several ranks: rank r runs the points with index % size == r; rank 0
/// cleans leftovers first and aggregates last. `None` when not under a multi-rank job.
#[cfg(feature = "mpi")]
pub fn sweep(
    spec: &sweep::SweepSpec,
    points: &[sweep::Point],
    dir: &Path,
    jobs: usize,
    draw: bool,
    rerun_changed: bool,
    out: Out,
) -> anyhow::Result<Option<ExitCode>> {
    use mpi::topology::Communicator;
    use mpi::traits::*;
    if mpi_job_size() <= 1 {
        return Ok(None);
    }
    let universe = dsgd_experiments::real::init()?;
    let world = universe.world();
    let (me, size) = (world.rank() as usize, world.size() as usize);
    let mut refused = None;
    if me == 0 {
        refused = sweep::prepare(dir, points, rerun_changed).err();
    }
    let mut ok = u8::from(refused.is_none());
    world.process_at_rank(0).broadcast_into(&mut ok);
    if ok == 0 {
        return Err(match refused {
            Some(e) => e.into(),
            None => anyhow!("rank 0 refused the output folder (see its message)"),
        });
    }
    let mine: Vec<sweep::Point> = points.iter().filter(|p| p.index % size == me).cloned().collect();
    let report = sweep::run_share(spec, &mine, dir, jobs, false);
    world.barrier();
    let report = report?;
    let mut failed = 0u64;
    world.all_reduce_into(&(report.failed.len() as u64), &mut failed, mpi::collective::SystemOperation::sum());
    if me != 0 {
        return Ok(Some(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }));
    }
    super::out::say!(out, "{} runs over {size} MPI ranks", points.len());
    let all = sweep::run_share(spec, points, dir, 1, false)?;
    let code = super::sweep::sweep_report(&all, out);
    super::sweep::finish_sweep(dir, draw, out)?;
    Ok(Some(if failed == 0 { code } else { ExitCode::from(1) }))
}
