//! What a run measures: a time series of evaluations, and counters for the summary.

use crate::protocol::Phase;
use dsgd_sim::{SimDuration, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One evaluation of the model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    /// Simulated time, seconds.
    pub time_s: f64,
    /// Loss of the consensus model (see [`crate::consensus`]); `None` when no model existed
    /// (every replica down, or a parameter-server shard down). NaN or infinite if it diverged.
    pub loss: Option<f64>,
    /// Its accuracy, for classifiers (`None` without a model).
    pub accuracy: Option<f64>,
    /// Mean squared distance of live replicas from their average (0 with one replica or a server).
    pub consensus_distance: f64,
    /// Loss of each live replica (empty unless per-node evaluation is on).
    pub node_losses: Vec<Option<f64>>,
    /// Updates applied so far.
    pub updates: u64,
    /// Live nodes.
    pub live: usize,
}

impl Sample {
    /// An evaluation at `time_s` of the consensus model, scored as `eval` (`None`: no model),
    /// with the replicas' `distance` from it, each replica's loss (`node_losses`, or none), the
    /// `updates` applied so far and the `live` nodes.
    pub fn scored(
        time_s: f64,
        eval: Option<dsgd_models::Evaluation>,
        distance: f64,
        node_losses: Vec<Option<f64>>,
        updates: u64,
        live: usize,
    ) -> Self {
        Sample {
            time_s,
            loss: eval.as_ref().map(|e| e.loss),
            accuracy: eval.and_then(|e| e.accuracy),
            consensus_distance: distance,
            node_losses,
            updates,
            live,
        }
    }
}

/// A run diverged when its consensus loss becomes NaN or infinite, or exceeds this many times
/// its loss at the first evaluation.
pub const DIVERGENCE_FACTOR: f64 = 100.0;

/// The first evaluation at which the loss diverged (see [`DIVERGENCE_FACTOR`]).
pub fn diverged_at(samples: &[Sample]) -> Option<&Sample> {
    let first = samples.iter().find_map(|s| s.loss).filter(|l| l.is_finite())?;
    samples
        .iter()
        .find(|s| s.loss.is_some_and(|l| !l.is_finite() || l > DIVERGENCE_FACTOR * first.abs().max(f64::MIN_POSITIVE)))
}

/// How a node spent its time, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBreakdown {
    /// Running gradient computations.
    pub computing: f64,
    /// Waiting for the network.
    pub communicating: f64,
    /// Waiting for others, or nothing to do.
    pub idle: f64,
    /// Down.
    pub crashed: f64,
    /// Of `computing`: the time with communication in flight (gradient buckets all-reduced
    /// while the backward pass runs); absent when there is none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub overlapped: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// Something that happened, for the run's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Note {
    /// When, seconds.
    pub time_s: f64,
    /// Which rank.
    pub rank: usize,
    /// What.
    pub what: String,
}

/// A node's state over an interval of time, for timelines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// A protocol phase.
    Phase(Phase),
    /// Down.
    Crashed,
}

/// One interval of a node's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The rank.
    pub rank: usize,
    /// What it was doing.
    pub state: State,
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub to_s: f64,
}

/// Per-node time accounting.
#[derive(Clone, Debug)]
pub(crate) struct TimeAccount {
    pub state: State,
    pub since: SimTime,
    pub times: TimeBreakdown,
}

impl TimeAccount {
    pub fn new() -> Self {
        TimeAccount { state: State::Phase(Phase::Idle), since: SimTime::ZERO, times: TimeBreakdown::default() }
    }
    /// Switches state at `now`; the interval just ended goes to `timeline` if it starts before
    /// `window`.
    pub fn switch(&mut self, now: SimTime, to: State, rank: usize, window: SimTime, timeline: &mut Vec<Interval>) {
        if self.since < window && now > self.since {
            let to = now.min(window);
            timeline.push(Interval {
                rank,
                state: self.state,
                from_s: self.since.as_secs_f64(),
                to_s: to.as_secs_f64(),
            });
        }
        let dt = (now - self.since).as_secs_f64();
        match self.state {
            State::Phase(Phase::Computing) => self.times.computing += dt,
            State::Phase(Phase::Communicating) => self.times.communicating += dt,
            State::Phase(Phase::Idle) => self.times.idle += dt,
            State::Crashed => self.times.crashed += dt,
        }
        self.state = to;
        self.since = now;
    }
}

/// What a rank reports through its context (phases, updates, iterations, notes), kept the same
/// way by both executors: each builds one over its own clock and counters for the call.
pub(crate) struct Ledger<'a> {
    pub rank: usize,
    pub clock: &'a mut TimeAccount,
    pub metrics: &'a mut Metrics,
    pub window: SimTime,
}

impl Ledger<'_> {
    /// The rank enters `phase` at `now` (nothing if it is in it already).
    pub fn phase(&mut self, now: SimTime, phase: Phase) {
        if self.clock.state != State::Phase(phase) {
            self.clock.switch(now, State::Phase(phase), self.rank, self.window, &mut self.metrics.timeline);
        }
    }
    /// An update applied with this staleness.
    pub fn update(&mut self, staleness: u64) {
        self.metrics.record_update(staleness);
    }
    /// A synchronous iteration that took `took`.
    pub fn iteration(&mut self, took: SimDuration) {
        self.metrics.iteration_times.push(took);
    }
    /// Communication in flight for `took` while the rank computed.
    pub fn overlap(&mut self, took: SimDuration) {
        self.clock.times.overlapped += took.as_secs_f64();
    }
    /// A line for the run's log.
    pub fn note(&mut self, now: SimTime, what: String) {
        self.metrics.notes.push(Note { time_s: now.as_secs_f64(), rank: self.rank, what });
    }
}

/// The methods of [`crate::protocol::Report`], written once for every executor's context that
/// has `fn ledger(&mut self) -> Ledger<'_>` and `fn ledger_now(&self) -> SimTime`.
macro_rules! report_through_ledger {
    () => {
        fn set_phase(&mut self, phase: Phase) {
            let now = self.ledger_now();
            self.ledger().phase(now, phase);
        }
        fn record_update(&mut self, staleness: u64) {
            self.ledger().update(staleness);
        }
        fn record_iteration(&mut self, took: SimDuration) {
            self.ledger().iteration(took);
        }
        fn record_overlap(&mut self, took: SimDuration) {
            self.ledger().overlap(took);
        }
        fn note(&mut self, what: String) {
            let now = self.ledger_now();
            self.ledger().note(now, what);
        }
    };
}
pub(crate) use report_through_ledger;

/// Counters gathered during a run.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    /// Evaluations, in time order.
    pub samples: Vec<Sample>,
    /// Updates applied.
    pub updates: u64,
    /// Gradients computed.
    pub gradients: u64,
    /// Models evaluated on the workload's whole evaluation set: the consensus model at each
    /// sample that had one, and each distinct replica for the final per-node losses.
    pub evaluations: u64,
    /// Staleness of applied updates: staleness -> count.
    pub staleness: BTreeMap<u64, u64>,
    /// Durations of synchronous iterations (as recorded by rank 0's view, or any recorder).
    pub iteration_times: Vec<SimDuration>,
    /// Notes.
    pub notes: Vec<Note>,
    /// What each node did over the first `timeline_s` seconds.
    pub timeline: Vec<Interval>,
    /// Bytes each rank sent (indexed by rank; empty if the executor does not count them).
    pub bytes_by_rank: Vec<u64>,
}

impl Metrics {
    /// Counts `bytes` sent by `rank`.
    pub fn record_send(&mut self, rank: usize, bytes: u64) {
        if self.bytes_by_rank.len() <= rank {
            self.bytes_by_rank.resize(rank + 1, 0);
        }
        self.bytes_by_rank[rank] += bytes;
    }

    /// Counts an applied update computed on parameters `staleness` versions old.
    pub fn record_update(&mut self, staleness: u64) {
        self.updates += 1;
        *self.staleness.entry(staleness).or_default() += 1;
    }

    /// Synchronous iterations recorded.
    pub fn iterations(&self) -> u64 {
        self.iteration_times.len() as u64
    }

    /// Mean staleness of applied updates.
    pub fn mean_staleness(&self) -> f64 {
        let (n, s) = self.staleness.iter().fold((0u64, 0u64), |(n, s), (&k, &c)| (n + c, s + k * c));
        if n == 0 {
            0.0
        } else {
            s as f64 / n as f64
        }
    }
}
