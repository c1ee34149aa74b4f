//! `dsgd-experiments`: the `dsgd` command line's library: specs, runs, sweeps, replay, plots.
//!
//! Module map:
//! - [`spec`]: the experiment spec in user units, its defaults and validation, and its resolution
//!   into the engine's and runtime's configurations; [`load`]: reading specs (strict JSON, field
//!   paths in errors, `--set`); [`bounds`]: hard limits and the memory estimate.
//! - [`execute`]: one simulated run; [`output`]: `summary.json`, the CSVs and atomic run folders;
//!   [`diff`]: comparing runs.
//! - [`sweep`]: grids, resume and parallel runs; [`analysis`]: `runs.csv`, `aggregate.csv` and
//!   intervals; [`report`]: `report.md`, with [`verdict`]: which algorithm is fastest to the
//!   target at each node count, and whether significantly; [`plot`]: the figures.
//! - `real` (feature `mpi`): real runs and validation; `calibrate` (feature `mpi`): message
//!   times per size and pattern, the spec's all-reduce and gradient steps; `shaping` (feature
//!   `mpi`): streams that show a link's token bucket, and its fit; `collective_fit` (feature
//!   `mpi`): that bucket fitted to a spec's own all-reduce, with the simulator in the loop.
//! - [`torture`]: the deterministic simulation tester (`dsgd torture`): seeded random scenarios
//!   with faults, checked invariants and liveness, shrinking and a coverage table.
//! - [`error`]: the library's errors, one enum a caller can match.
//! - [`gradbench`]: the gradient-step benchmark; [`realbench`]: real gradients through the engine
//!   against a plain burn loop; [`scalebench`]: the scaling benchmark.

pub mod analysis;
pub mod bounds;
#[cfg(feature = "mpi")]
pub mod calibrate;
#[cfg(feature = "mpi")]
pub mod collective_fit;
pub mod diff;
pub mod error;
pub mod execute;
pub mod gradbench;
pub mod load;
pub mod output;
pub mod pages;
pub mod plot;
#[cfg(feature = "mpi")]
pub mod real;
pub mod realbench;
pub mod report;
pub mod scalebench;
#[cfg(feature = "mpi")]
pub mod shaping;
pub mod spec;
pub mod sweep;
pub mod torture;
pub mod verdict;

pub use error::{Error, Result};
