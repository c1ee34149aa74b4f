//! What each rank reports at the end of a real run, and how rank 0 turns the reports into the
//! run's result: the counters added up, the consensus of every evaluation instant scored, and the
//! final model.

use crate::consensus::consensus_of;
use crate::metrics::{Interval, Metrics, Note, Sample, TimeBreakdown};
use crate::outcome::{RunResult, StopReason};
use crate::protocol::View;
use crate::timing::Recording;
use crate::train::TrainConfig;
use dsgd_models::Workload;
use dsgd_sim::{SimDuration, SimStats, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A model view that owns its data, to snapshot and send.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) enum OwnedView {
    Replica { params: Vec<f32>, weight: f64 },
    Shard { offset: usize, params: Vec<f32> },
    Nothing,
}

impl OwnedView {
    pub fn of(v: View<'_>) -> Self {
        match v {
            View::Replica { params, weight } => OwnedView::Replica { params: params.into_owned(), weight },
            View::Shard { offset, params } => OwnedView::Shard { offset, params: params.to_vec() },
            View::Nothing => OwnedView::Nothing,
        }
    }
    pub fn view(&self) -> View<'_> {
        match self {
            OwnedView::Replica { params, weight } => View::Replica { params: params.into(), weight: *weight },
            OwnedView::Shard { offset, params } => View::Shard { offset: *offset, params },
            OwnedView::Nothing => View::Nothing,
        }
    }
}

/// One rank's account of the run, sent to rank 0 at the end.
#[derive(Serialize, Deserialize)]
pub(super) struct Report {
    pub updates: u64,
    pub gradients: u64,
    pub staleness: BTreeMap<u64, u64>,
    pub iteration_ns: Vec<u64>,
    pub notes: Vec<Note>,
    pub timeline: Vec<Interval>,
    #[serde(with = "every_field")]
    pub times: TimeBreakdown,
    /// `(evaluation index, cumulative updates of this rank, live, view)`.
    pub snapshots: Vec<(usize, u64, bool, OwnedView)>,
    pub final_view: OwnedView,
    pub up: bool,
    pub end_s: f64,
    pub messages_sent: u64,
    pub messages_delivered: u64,
    /// Wall time spent decoding and handling delivered messages.
    pub handling_ns: u64,
    /// Timers that fired.
    pub timers_fired: u64,
    pub bytes_sent: u64,
    pub crashes: u64,
    pub restarts: u64,
    pub stop: Option<StopReason>,
    /// How long each gradient took, in the order started: from the compute thread taking it up
    /// to the loop handing it over (or dropping it, after a crash).
    pub gradient_ns: Vec<u64>,
    /// The rank's handler calls in order (see [`crate::order`]).
    pub order: Vec<crate::order::Handled>,
}

/// A time breakdown with every field, for bincode: the summary's format leaves `overlapped` out
/// when it is zero, which a format that does not describe itself cannot read back.
mod every_field {
    use super::TimeBreakdown;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(t: &TimeBreakdown, s: S) -> Result<S::Ok, S::Error> {
        (t.computing, t.communicating, t.idle, t.crashed, t.overlapped).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<TimeBreakdown, D::Error> {
        let (computing, communicating, idle, crashed, overlapped) = Deserialize::deserialize(d)?;
        Ok(TimeBreakdown { computing, communicating, idle, crashed, overlapped })
    }
}

/// Rank 0 turns every rank's report into the run's result.
pub(super) fn assemble(
    reports: Vec<Report>,
    workload: &dyn Workload,
    train: &TrainConfig,
    every: SimDuration,
) -> RunResult {
    let dim = if workload.timing_only() { 0 } else { workload.param_count() };
    let mut metrics = Metrics::default();
    let mut stats = SimStats::default();
    for rep in &reports {
        metrics.updates += rep.updates;
        metrics.gradients += rep.gradients;
        for (&k, &c) in &rep.staleness {
            *metrics.staleness.entry(k).or_default() += c;
        }
        metrics.iteration_times.extend(rep.iteration_ns.iter().map(|&n| SimDuration(n)));
        metrics.notes.extend(rep.notes.iter().cloned());
        metrics.timeline.extend(rep.timeline.iter().copied());
        stats.messages_sent += rep.messages_sent;
        stats.messages_delivered += rep.messages_delivered;
        stats.bytes_sent += rep.bytes_sent;
        metrics.bytes_by_rank.push(rep.bytes_sent);
        stats.crashes += rep.crashes;
        stats.restarts += rep.restarts;
        // Handler calls: the events a real run has (deliveries, finished gradients, timers).
        stats.events += rep.messages_delivered + rep.gradients + rep.timers_fired;
    }
    metrics.notes.sort_by(|a, b| a.time_s.total_cmp(&b.time_s).then(a.rank.cmp(&b.rank)));
    let evals = reports.iter().map(|r| r.snapshots.len()).min().unwrap_or(0);
    let mut time_to_target = None;
    for k in 0..evals {
        let views = reports.iter().map(|r| r.snapshots[k].3.view());
        let c = consensus_of(views, dim);
        let updates = reports.iter().map(|r| r.snapshots[k].1).sum();
        let live = reports.iter().filter(|r| r.snapshots[k].2).count();
        let time_s = (every.as_nanos() * k as u64) as f64 / 1e9;
        let eval = c.evaluate(workload);
        metrics.evaluations += u64::from(eval.is_some());
        let sample = Sample::scored(time_s, eval, c.distance, Vec::new(), updates, live);
        if time_to_target.is_none() && train.stop.target_met(&sample) {
            time_to_target = Some(sample.time_s);
        }
        metrics.samples.push(sample);
    }
    let end_s = reports.iter().map(|r| r.end_s).fold(0.0, f64::max);
    let c = consensus_of(reports.iter().map(|r| r.final_view.view()), dim);
    let node_losses = crate::consensus::replica_losses(&c.replicas, |params| {
        metrics.evaluations += params.len() as u64;
        params.iter().map(|p| workload.evaluate(p).loss).collect()
    });
    let live = reports.iter().filter(|r| r.up).count();
    let eval = c.evaluate(workload);
    metrics.evaluations += u64::from(eval.is_some());
    metrics.samples.push(Sample::scored(end_s, eval, c.distance, node_losses, metrics.updates, live));
    if time_to_target.is_none() && metrics.samples.last().is_some_and(|s| train.stop.target_met(s)) {
        time_to_target = Some(end_s);
    }
    let final_params = c.model.unwrap_or_default();
    let stop = reports.iter().find_map(|r| r.stop.filter(|s| *s != StopReason::SimTime)).unwrap_or(StopReason::SimTime);
    // Real runs are not replayable: the digest identifies the final model only (the same fold
    // the simulator ends its digest with).
    let mut d = dsgd_sim::Digest::new();
    d.absorb_f32s(&final_params);
    let digest = d.value();
    RunResult {
        digest,
        stop,
        sim_time: SimTime::from_secs_f64(end_s),
        stats,
        times: reports.iter().map(|r| r.times).collect(),
        time_to_target,
        final_params,
        trace: None,
        recording: Some(Recording { per_rank: reports.iter().map(|r| r.gradient_ns.clone()).collect() }),
        handling: reports.iter().map(|r| (r.handling_ns, r.messages_delivered)).collect(),
        order: Some(crate::order::RecordedOrder { ranks: reports.iter().map(|r| r.order.clone()).collect() }),
        checks: None,
        metrics,
    }
}
