//! What a finished run reports, the same whichever executor ran it (the simulator's
//! [`crate::sim_exec`] or the MPI executor): why it stopped, its counters, evaluations and time
//! breakdown, the final consensus parameters.

use crate::metrics::{Metrics, TimeBreakdown};
use crate::timing::Recording;
use dsgd_sim::{SimStats, SimTime};

/// Why a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The simulated-time limit.
    SimTime,
    /// The iteration count.
    Iterations,
    /// The update count.
    Updates,
    /// The target loss or accuracy was reached.
    Target,
    /// Nothing was left to happen (every node down or waiting forever).
    Quiescent,
    /// Every rank handled the whole of a recorded order ([`crate::order`]).
    Replayed,
}

/// Everything a finished run reports.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Digest of every event, every evaluated loss and the final parameters.
    pub digest: u64,
    /// Why it stopped.
    pub stop: StopReason,
    /// Simulated time at the end.
    pub sim_time: SimTime,
    /// Engine counters (messages, bytes, losses, crashes).
    pub stats: SimStats,
    /// Algorithm counters and the evaluation series.
    pub metrics: Metrics,
    /// Time breakdown per rank.
    pub times: Vec<TimeBreakdown>,
    /// Simulated time of the first evaluation that met the target, if any.
    pub time_to_target: Option<f64>,
    /// The consensus parameters at the end (empty when no model existed then).
    pub final_params: Vec<f32>,
    /// The engine's event trace, when tracing was on.
    pub trace: Option<dsgd_sim::Trace>,
    /// The gradient durations used, when they were measured or replayed (or, in a real run,
    /// what the real gradients took).
    pub recording: Option<Recording>,
    /// A real run's per rank: the wall time its loop spent decoding and handling delivered
    /// messages (the protocol's work on them, its answers' encoding included), nanoseconds, and
    /// how many it handled; empty when simulated.
    pub handling: Vec<(u64, u64)>,
    /// A real run's order of handler calls per rank, which the simulator can replay
    /// ([`crate::order`]); `None` when simulated.
    pub order: Option<crate::order::RecordedOrder>,
    /// What the simulation tester's checks reached (`None` unless the run was checked).
    pub checks: Option<crate::sim_exec::CheckReport>,
}
