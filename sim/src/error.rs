//! The engine's one error type. Every way a caller can misuse the engine or hand it a bad
//! configuration is a variant here; panics are kept for broken internal invariants only.

use crate::time::SimTime;
use thiserror::Error;

/// Everything that can go wrong when configuring or driving the engine.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum SimError {
    /// An event was scheduled before the current virtual time.
    #[error("cannot schedule an event at {at} in the past (now is {now})")]
    ScheduleInPast {
        /// The current virtual time.
        now: SimTime,
        /// The requested (earlier) time.
        at: SimTime,
    },
    /// A node index outside `0..nodes`.
    #[error("node {node} does not exist: the cluster has nodes 0..{nodes}")]
    UnknownNode {
        /// The index that was used.
        node: usize,
        /// How many nodes the cluster has.
        nodes: usize,
    },
    /// A timer id that was never issued, already fired, or was cancelled.
    #[error("timer {0} is not pending (it fired, was cancelled, or never existed)")]
    UnknownTimer(u64),
    /// A crashed node tried to act (send, set a timer or start a computation).
    #[error("node {node} is down at {now} and cannot act")]
    NodeDown {
        /// The crashed node.
        node: usize,
        /// The current virtual time.
        now: SimTime,
    },
    /// A configuration value is out of its allowed range.
    #[error("invalid configuration: `{field}` {problem}")]
    InvalidConfig {
        /// The path of the offending field, e.g. `network.topology.rack_size`.
        field: FieldPath,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// A configuration names a rank (a fault's node, a NIC or straggler override) that the run
    /// does not have.
    #[error("invalid configuration: `{field}` names rank {rank}, but the run has ranks 0..{ranks}")]
    RankOutOfRange {
        /// The path of the field that names it.
        field: FieldPath,
        /// The rank named.
        rank: usize,
        /// How many ranks the run has.
        ranks: usize,
    },
    /// Writing the trace failed.
    #[error("could not write the trace: {0}")]
    Trace(String),
    /// Events kept coming at one instant: simulated time stopped advancing.
    #[error(
        "simulated time stopped advancing at {at}: {events} events in a row at that instant; a duration that \
         rounds to 0 ns (a step time, a latency with a very high bandwidth) lets events repeat forever"
    )]
    Stalled {
        /// The instant.
        at: SimTime,
        /// Events processed at it.
        events: u64,
    },
    /// The run holds more memory than it may (see the runtime's memory budget): stopped before
    /// the machine runs out, with what it holds and why it grew. (Boxed: every `Result` of the
    /// engine's hot path carries this enum, so it stays small.)
    #[error(transparent)]
    OverBudget(Box<OverBudget>),
    /// The simulation tester found one of its invariants violated (`dsgd run --check`,
    /// `dsgd torture`).
    #[error("invariant `{invariant}` violated at simulated time {at}: {what}")]
    Invariant {
        /// The invariant's name (`push_sum_mass`, `agreement`, `liveness`...).
        invariant: &'static str,
        /// When it was found violated.
        at: SimTime,
        /// What was seen.
        what: String,
    },
    /// The run was asked to stop (an interrupt, or a time bound) before it finished.
    #[error("the run was interrupted at simulated time {at}")]
    Interrupted {
        /// Simulated time when it stopped.
        at: SimTime,
    },
}

/// A run stopped for holding more memory than its budget ([`SimError::OverBudget`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the run was stopped at simulated time {at}: it holds {held_mb} MB of memory, over its budget of {budget_mb} MB \
     ({why}); {cause}"
)]
pub struct OverBudget {
    /// Simulated time when it stopped.
    pub at: SimTime,
    /// Memory held, MB.
    pub held_mb: u64,
    /// The budget, MB.
    pub budget_mb: u64,
    /// Where the budget comes from (the spec's estimate, the machine's memory, a variable).
    pub why: String,
    /// What grew (the engine's backlog, in words).
    pub cause: String,
}

/// Events in a row at one instant after which a run is [`SimError::Stalled`]: far more than any
/// real cluster produces at once (a 100,000-node collective step is a few hundred thousand).
pub const STALL_EVENTS: u64 = 50_000_000;

impl SimError {
    /// A configuration error as the path of its field and what is wrong with it (`Err` with the
    /// error itself for the others).
    pub fn into_field_problem(self) -> std::result::Result<(FieldPath, String), SimError> {
        match self {
            SimError::InvalidConfig { field, problem } => Ok((field, problem)),
            SimError::RankOutOfRange { field, rank, ranks } => {
                Ok((field, format!("names rank {rank}, but the run has ranks 0..{ranks}")))
            }
            other => Err(other),
        }
    }

    /// Shorthand for [`SimError::InvalidConfig`].
    pub fn config(field: impl Into<FieldPath>, problem: impl Into<String>) -> Self {
        SimError::InvalidConfig { field: field.into(), problem: problem.into() }
    }

    /// The same error seen from the configuration that holds the checked one as `name`: a
    /// configuration error's path gains the prefix; other errors are unchanged.
    pub fn under(self, name: &str) -> Self {
        match self {
            SimError::InvalidConfig { field, problem } => SimError::InvalidConfig { field: field.under(name), problem },
            SimError::RankOutOfRange { field, rank, ranks } => {
                SimError::RankOutOfRange { field: field.under(name), rank, ranks }
            }
            other => other,
        }
    }
}

/// A field's path in a configuration (`network.topology.rack_size`, `faults[2].at_s`), relative
/// to the configuration that checked it. A layer that holds that configuration under a name puts
/// the name in front ([`FieldPath::under`]), so the command line reports the path as the user
/// wrote it. The one path type of every layer's configuration errors (the engine's, the
/// runtime's, the workload's and the spec's).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(String);

impl FieldPath {
    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The path seen from the configuration that holds this one as `name`.
    pub fn under(&self, name: &str) -> FieldPath {
        FieldPath(join_path(name, &self.0))
    }
    /// The configuration itself (no field).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for FieldPath {
    fn from(s: &str) -> Self {
        FieldPath(s.to_string())
    }
}

impl From<String> for FieldPath {
    fn from(s: String) -> Self {
        FieldPath(s)
    }
}

impl From<&String> for FieldPath {
    fn from(s: &String) -> Self {
        FieldPath(s.clone())
    }
}

impl PartialEq<str> for FieldPath {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for FieldPath {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// `name.field`, or `name[i]` for an index, or `name` for the section itself (an empty field).
pub fn join_path(name: &str, field: &str) -> String {
    if field.is_empty() {
        name.to_string()
    } else if name.is_empty() || field.starts_with('[') {
        format!("{name}{field}")
    } else {
        format!("{name}.{field}")
    }
}

/// Result type of the engine.
pub type Result<T> = std::result::Result<T, SimError>;
