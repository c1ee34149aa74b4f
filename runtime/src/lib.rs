//! `dsgd-runtime`: the distributed-SGD algorithms, written once as sans-IO state machines
//! ([`protocol`]), and the executors that drive them: the simulator ([`sim_exec`]) and real
//! processes over MPI (`mpi_exec`, feature `mpi`).
//!
//! Module map:
//! - [`protocol`]: the API a protocol sees (`Context`: time, sends, timers, gradients, reports)
//!   and implements (`Protocol`: its handlers), and `Role` for runs with servers.
//! - [`protocols`]: the algorithms, one a file: `async_ps`, `easgd`, `gossip` (pull and
//!   push-sum), and `sync` in a folder: the worker's stages and modes (`mod.rs`), the three ways
//!   it reduces (`reduce.rs`: collective, analytic, backup workers) and its membership changes
//!   (`membership.rs`: watchdog, probe, state hand-off, join); `service`: a server's FIFO
//!   service time per message (the measured cost a validation charges).
//! - [`collectives`]: all-reduce schedules, one a file (ring, tree, halving-doubling,
//!   hierarchical) and their closed forms (`analytic`).
//! - [`optimizer`]: SGD with momentum, Nesterov, weight decay, schedules.
//! - [`runner`]: an algorithm's configuration and the roles it builds for an executor.
//! - [`train`]: the training configuration and the stopping rule.
//! - `host`: the per-rank core both executors share (the context a protocol sees, crash,
//!   restart, gradient hand-over, random streams); an executor supplies only a `Driver`.
//! - [`sim_exec`]: the simulator executor; `mpi_exec`: the MPI executor (its loop in `mod.rs`,
//!   its non-blocking sends in `outbox.rs`).
//! - [`outcome`]: what a finished run reports, whichever executor ran it.
//! - [`consensus`]: the model both executors score (mean of replicas, shards put together).
//! - [`metrics`]: counters, samples, time accounting and the per-rank `Ledger` both executors
//!   report through.
//! - [`gradient_pool`]: gradient jobs computed ahead of time on background threads.
//! - [`sharing`]: an executor's in-process sharing of identical values between ranks (the
//!   simulator's replicas, updates, averages and ring board), which a protocol reaches through
//!   its context and never sees the threads of.
//! - [`timing`]: gradient durations from the model, measured, or replayed.
//! - [`error`]: configuration errors with paths relative to the checked configuration.
//! - [`wire`]: how message vectors are serialised for real runs (one block of bytes).
//! - [`audit`]: what a protocol shows the simulation tester's invariants.
//! - [`budget`]: the process's memory budget, which stops a run that outgrows it;
//! - [`cancel`]: the Ctrl-C flag; `testkit` (feature `testkit`, or in tests): a recording `Context`
//!   for protocol tests.

pub mod audit;
pub mod budget;
pub mod cancel;
pub mod collectives;
pub mod consensus;
pub mod error;
pub mod gradient_pool;
mod host;
pub mod metrics;
#[cfg(feature = "mpi")]
pub mod mpi_exec;
pub mod optimizer;
pub mod order;
pub mod outcome;
pub mod protocol;
pub mod protocols;
pub mod rows;
pub mod runner;
pub mod sharing;
pub mod sim_exec;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod timing;
pub mod train;
pub mod wire;
