//! A recording [`Context`] for testing a protocol's handlers one call at a time, without an
//! executor: it keeps what the handler sent, the timers it set or cancelled, the gradients it
//! started and what it reported, and lets the test set the time. Used by the protocols' unit
//! tests (`runtime/tests/protocols.rs`) and the push-sum conservation test.

use crate::protocol::{Context, JobId, Phase, Report};
use crate::sharing::{Alone, Sharing};
use dsgd_models::Workload;
use dsgd_sim::{SimDuration, SimTime, TimerId};
use std::sync::Arc;

/// A timer a handler set (numbered in the order they were set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetTimer {
    /// When it would fire.
    pub at: SimTime,
    /// Its tag.
    pub tag: u64,
    /// Its id.
    pub id: TimerId,
}

/// What a protocol did through its context, for one rank.
pub struct Recorder<M> {
    /// This rank.
    pub rank: usize,
    /// Ranks in all.
    pub ranks: usize,
    /// The time handlers see (the test moves it).
    pub now: SimTime,
    /// The workload.
    pub workload: Arc<dyn Workload>,
    /// Messages sent: receiver, message, bytes on the wire.
    pub sent: Vec<(usize, M, u64)>,
    /// Timers set.
    pub timers: Vec<SetTimer>,
    /// Gradients started: job, parameters, batch.
    pub gradients: Vec<(JobId, Vec<f32>, usize)>,
    /// The last phase set.
    pub phase: Option<Phase>,
    /// Updates recorded, by staleness.
    pub updates: Vec<u64>,
    /// Iterations recorded.
    pub iterations: Vec<SimDuration>,
    /// Notes.
    pub notes: Vec<String>,
    next_id: u64,
    rng: u64,
    /// One rank on its own: nothing shared.
    alone: Alone,
}

impl<M> Recorder<M> {
    /// Rank `rank` of `ranks` at time zero.
    pub fn new(rank: usize, ranks: usize, workload: Arc<dyn Workload>) -> Self {
        Recorder {
            rank,
            ranks,
            now: SimTime::ZERO,
            workload,
            sent: Vec::new(),
            timers: Vec::new(),
            gradients: Vec::new(),
            phase: None,
            updates: Vec::new(),
            iterations: Vec::new(),
            notes: Vec::new(),
            next_id: 0,
            rng: 0x853c_49e6_748f_ea9b ^ rank as u64,
            alone: Alone,
        }
    }
    /// Moves the time to `secs` seconds.
    pub fn at(&mut self, secs: f64) -> &mut Self {
        self.now = SimTime::from_secs_f64(secs);
        self
    }
    /// Takes the messages sent so far.
    pub fn take_sent(&mut self) -> Vec<(usize, M, u64)> {
        std::mem::take(&mut self.sent)
    }
    /// Takes the gradients started so far.
    pub fn take_gradients(&mut self) -> Vec<(JobId, Vec<f32>, usize)> {
        std::mem::take(&mut self.gradients)
    }
    /// The tags of the timers set so far, in order.
    pub fn timer_tags(&self) -> Vec<u64> {
        self.timers.iter().map(|t| t.tag).collect()
    }
}

impl<M> Context<M> for Recorder<M> {
    fn now(&self) -> SimTime {
        self.now
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn send(&mut self, to: usize, msg: M, bytes: u64) {
        self.sent.push((to, msg, bytes));
    }
    fn set_timer(&mut self, after: SimDuration, tag: u64) {
        self.next_id += 1;
        let id = TimerId(self.next_id);
        self.timers.push(SetTimer { at: self.now + after, tag, id });
    }
    fn start_gradient(&mut self, params: Arc<Vec<f32>>, batch: usize) -> JobId {
        self.next_id += 1;
        let job = dsgd_sim::JobId(self.next_id);
        self.gradients.push((job, Arc::unwrap_or_clone(params), batch));
        job
    }
    fn workload(&self) -> &dyn Workload {
        &*self.workload
    }
    /// A fixed LCG per rank: handlers' random choices are reproducible in tests.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.rng >> 11
    }
    fn sharing(&mut self) -> &mut dyn Sharing {
        &mut self.alone
    }
}

impl<M> Report for Recorder<M> {
    fn set_phase(&mut self, phase: Phase) {
        self.phase = Some(phase);
    }
    fn record_update(&mut self, staleness: u64) {
        self.updates.push(staleness);
    }
    fn record_iteration(&mut self, took: SimDuration) {
        self.iterations.push(took);
    }
    fn record_overlap(&mut self, _took: SimDuration) {}
    fn note(&mut self, what: String) {
        self.notes.push(what);
    }
}
