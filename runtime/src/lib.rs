//! `dsgd-runtime`: the distributed-SGD algorithms, written once as sans-IO state machines
//! ([`protocol`]), and the executor that drives them on the simulator ([`sim_exec`]).

pub mod cancel;
pub mod collectives;
pub mod consensus;
pub mod metrics;
#[cfg(feature = "mpi")]
pub mod mpi_exec;
pub mod optimizer;
pub mod outcome;
pub mod protocol;
pub mod protocols;
pub mod run;
pub mod runner;
pub mod sim_exec;
pub mod testkit;
pub mod timing;
