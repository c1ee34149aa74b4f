//! `dsgd-experiments`: the `dsgd` command line's library: specs, runs, sweeps, replay, plots.

pub mod analysis;
pub mod bounds;
pub mod diff;
pub mod execute;
pub mod gradbench;
pub mod load;
pub mod output;
pub mod plot;
#[cfg(feature = "mpi")]
pub mod real;
pub mod report;
pub mod scalebench;
pub mod spec;
pub mod sweep;
