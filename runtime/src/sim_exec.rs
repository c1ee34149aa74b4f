//! The simulator executor: drives one [`Protocol`] instance per rank on the `dsgd-sim` engine.
//!
//! It turns engine occurrences into handler calls, delivers gradients when the engine says a
//! computation is done (computed with the parameters fixed when it started and a seed drawn from
//! the rank's `("data", rank)` stream, on this thread or ahead of time on [`GradientPool`]'s),
//! evaluates the consensus model every `eval.every_s` of simulated time, applies the stopping
//! rule and folds every evaluated loss and the final parameters into the engine's digest, so a
//! replay checks the arithmetic too.

use crate::consensus::{consensus_of, Consensus, NO_MODEL};
use crate::gradient_pool::{GradientInput, GradientOutput, GradientPool, Task};
use crate::metrics::{report_through_ledger, Ledger, Metrics, Note, Sample, State, TimeAccount};
use crate::outcome::{RunResult, StopReason};
use crate::protocol::{Context, JobId, Phase, Protocol, Report, View};
use crate::timing::{GradientTiming, Recording};
use crate::train::TrainConfig;
use dsgd_models::Workload;
use dsgd_sim::{Occurrence, Sim, SimConfig, SimDuration, SimError, SimTime, StreamRng};
use rand::RngCore;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A gradient job in flight: its input, computed when it completes, or handed to the pool.
enum Job {
    /// Computed on the simulator's thread when it completes.
    Inline(GradientInput),
    /// Computed already (timed when it started, under measured timing).
    Ready(usize, GradientOutput),
    /// Handed to the background threads.
    Pooled(Arc<Task>),
}

impl Job {
    fn node(&self) -> usize {
        match self {
            Job::Inline(i) => i.node,
            Job::Ready(node, _) => *node,
            Job::Pooled(t) => t.node(),
        }
    }
}

/// Stops a run that is interrupted (Ctrl-C, checked every 4,096 events) or whose time cannot
/// advance ([`dsgd_sim::STALL_EVENTS`] events at one instant).
#[derive(Default)]
struct Guard {
    instant: SimTime,
    at_instant: u64,
    handled: u64,
}

impl Guard {
    fn check(&mut self, now: SimTime) -> Result<(), SimError> {
        self.handled += 1;
        if self.handled & 0xFFF == 0 && crate::cancel::requested() {
            return Err(SimError::Interrupted { at: now });
        }
        if now == self.instant {
            self.at_instant += 1;
            if self.at_instant > dsgd_sim::STALL_EVENTS {
                return Err(SimError::Stalled { at: now, events: self.at_instant });
            }
        } else {
            (self.instant, self.at_instant) = (now, 1);
        }
        Ok(())
    }
}

/// The gradient timing of a run and what it has used so far.
struct GradientDurations {
    mode: GradientTiming,
    used: Recording,
    /// The first replay entry that was missing.
    error: Option<String>,
}

impl GradientDurations {
    /// The duration of `rank`'s next gradient, or `None` under the compute model; under measured
    /// timing the job is computed here and `result` holds it.
    fn next(
        &mut self,
        rank: usize,
        job: &GradientInput,
        result: &mut Option<GradientOutput>,
        workload: &dyn Workload,
    ) -> Option<SimDuration> {
        if matches!(self.mode, GradientTiming::Model) {
            return None;
        }
        let k = self.used.per_rank[rank].len();
        let ns = match &self.mode {
            GradientTiming::Model => return None,
            GradientTiming::Measure => {
                // The one read of the wall clock on the simulated path: recorded for replay.
                let started = std::time::Instant::now();
                *result = Some(job.compute(workload));
                started.elapsed().as_nanos().max(1) as u64
            }
            GradientTiming::Replay(rec) => match rec.per_rank.get(rank).and_then(|v| v.get(k)) {
                Some(&ns) => ns,
                None => {
                    self.error.get_or_insert_with(|| {
                        format!("the recording has no duration for gradient {k} of rank {rank}; it was made by another spec")
                    });
                    1
                }
            },
        };
        self.used.per_rank[rank].push(ns);
        Some(SimDuration(ns))
    }
}

/// Drives a protocol on the simulator.
pub struct SimExecutor<P: Protocol> {
    sim: Sim<P::Msg>,
    roles: Vec<P>,
    workload: Arc<dyn Workload>,
    train: TrainConfig,
    jobs: BTreeMap<u64, Job>,
    data_rngs: Vec<StreamRng>,
    proto_rngs: Vec<StreamRng>,
    clocks: Vec<TimeAccount>,
    metrics: Metrics,
    threads: usize,
    /// Background threads for gradients (real networks on the CPU, `threads` > 1, modelled timing).
    pool: Option<GradientPool>,
    timing: GradientDurations,
    /// The timeline's window (`train.eval.timeline_s`), converted once.
    window: SimTime,
}

/// The context handed to a handler: split borrows of the executor.
struct Ctx<'a, M> {
    rank: usize,
    sim: &'a mut Sim<M>,
    workload: &'a dyn Workload,
    jobs: &'a mut BTreeMap<u64, Job>,
    data_rng: &'a mut StreamRng,
    proto_rng: &'a mut StreamRng,
    clock: &'a mut TimeAccount,
    metrics: &'a mut Metrics,
    window: SimTime,
    timing: &'a mut GradientDurations,
    pool: Option<&'a GradientPool>,
}

impl<M> Ctx<'_, M> {
    fn ledger(&mut self) -> Ledger<'_> {
        Ledger { rank: self.rank, clock: self.clock, metrics: self.metrics, window: self.window }
    }
    fn ledger_now(&self) -> SimTime {
        self.sim.now()
    }
}

impl<M> Context<M> for Ctx<'_, M> {
    fn now(&self) -> SimTime {
        self.sim.now()
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.sim.nodes()
    }
    fn send(&mut self, to: usize, msg: M, bytes: u64) {
        self.metrics.record_send(self.rank, bytes);
        self.sim.send(self.rank, to, bytes, msg).expect("a protocol sends from a live node to an existing rank");
    }
    fn set_timer(&mut self, after: SimDuration, tag: u64) {
        self.sim.set_timer(self.rank, after, tag).expect("a live node sets timers");
    }
    fn start_gradient(&mut self, params: Arc<Vec<f32>>, batch: usize) -> JobId {
        let seed = self.data_rng.next_u64();
        let input = GradientInput { node: self.rank, params, batch, seed };
        let mut result = None;
        let (job, due) = match self.timing.next(self.rank, &input, &mut result, self.workload) {
            None => self.sim.start_compute(self.rank, 1.0),
            Some(took) => self.sim.start_compute_measured(self.rank, took),
        }
        .expect("a live node computes");
        let j = match (result, self.pool) {
            (Some(out), _) => Job::Ready(self.rank, out),
            (None, Some(pool)) => Job::Pooled(pool.submit(due.as_nanos(), job.0, input)),
            (None, None) => Job::Inline(input),
        };
        self.jobs.insert(job.0, j);
        let now = self.sim.now();
        self.ledger().phase(now, Phase::Computing);
        job
    }
    fn workload(&self) -> &dyn Workload {
        self.workload
    }
    fn random(&mut self) -> u64 {
        self.proto_rng.next_u64()
    }
}

impl<M> Report for Ctx<'_, M> {
    report_through_ledger!();
}

impl<P: Protocol> SimExecutor<P> {
    /// Builds the cluster (one rank per entry of `roles`; `sim.nodes` must match).
    pub fn new(
        sim: &SimConfig,
        roles: Vec<P>,
        workload: Arc<dyn Workload>,
        train: TrainConfig,
    ) -> Result<Self, SimError> {
        if roles.len() != sim.nodes {
            return Err(SimError::config("nodes", format!("{} roles for {} nodes", roles.len(), sim.nodes)));
        }
        let engine = Sim::new(sim)?;
        let data_rngs = (0..sim.nodes).map(|r| engine.streams().stream("data", r as u64)).collect();
        let proto_rngs = (0..sim.nodes).map(|r| engine.streams().stream("protocol", r as u64)).collect();
        let window = SimTime::from_secs_f64(train.eval.timeline_s);
        Ok(SimExecutor {
            window,
            sim: engine,
            clocks: vec![TimeAccount::new(); roles.len()],
            roles,
            workload,
            train,
            jobs: BTreeMap::new(),
            data_rngs,
            proto_rngs,
            metrics: Metrics::default(),
            threads: crate::gradient_pool::threads(),
            pool: None,
            timing: GradientDurations { mode: GradientTiming::Model, used: Recording::new(sim.nodes), error: None },
        })
    }

    /// Sets where gradient durations come from (the compute model by default).
    pub fn with_timing(mut self, mode: GradientTiming) -> Self {
        self.timing.mode = mode;
        self
    }

    fn with_ctx(&mut self, rank: usize, f: impl FnOnce(&mut P, &mut dyn Context<P::Msg>)) {
        let mut ctx = Ctx {
            rank,
            sim: &mut self.sim,
            workload: &*self.workload,
            jobs: &mut self.jobs,
            data_rng: &mut self.data_rngs[rank],
            proto_rng: &mut self.proto_rngs[rank],
            clock: &mut self.clocks[rank],
            metrics: &mut self.metrics,
            window: self.window,
            timing: &mut self.timing,
            pool: self.pool.as_ref(),
        };
        f(&mut self.roles[rank], &mut ctx);
    }

    /// The roles (for inspection after a run).
    pub fn roles(&self) -> &[P] {
        &self.roles
    }

    /// The engine (for inspection, e.g. the trace).
    pub fn sim(&self) -> &Sim<P::Msg> {
        &self.sim
    }

    /// The consensus model, the mean squared distance of replicas from it, and the replicas.
    pub fn consensus(&self) -> Consensus {
        let dim = if self.workload.timing_only() { 0 } else { self.workload.param_count() };
        let views =
            self.roles.iter().enumerate().map(|(r, role)| if self.sim.is_up(r) { role.view() } else { View::Nothing });
        consensus_of(views, dim)
    }

    /// Evaluates the consensus model; returns the sample and the model (`None`: no model).
    fn evaluate(&mut self, per_node: bool) -> (Sample, Option<Vec<f32>>) {
        let c = self.consensus();
        let eval = c.evaluate(&*self.workload);
        let node_losses =
            if per_node && !self.workload.timing_only() { self.node_losses(&c.replicas) } else { Vec::new() };
        self.sim.absorb(eval.as_ref().map_or(NO_MODEL, |e| e.loss.to_bits()));
        self.sim.absorb(c.distance.to_bits());
        let sample = Sample {
            time_s: self.sim.now().as_secs_f64(),
            loss: eval.as_ref().map(|e| e.loss),
            accuracy: eval.and_then(|e| e.accuracy),
            consensus_distance: c.distance,
            node_losses,
            updates: self.metrics.updates,
            live: (0..self.roles.len()).filter(|&r| self.sim.is_up(r)).count(),
        };
        (sample, c.model)
    }

    /// Each replica's loss, in rank order: on the gradient threads' count of threads for
    /// workloads whose gradients use them (an evaluation is a pure function of the parameters,
    /// so the losses are the same bits on any thread).
    fn node_losses(&self, replicas: &[Option<Vec<f32>>]) -> Vec<Option<f64>> {
        let workload = &*self.workload;
        let losses = |chunk: &[Option<Vec<f32>>]| -> Vec<Option<f64>> {
            chunk.iter().map(|r| r.as_ref().map(|p| workload.evaluate(p).loss)).collect()
        };
        if self.threads < 2 || !workload.parallel_gradients() || replicas.len() < 2 {
            return losses(replicas);
        }
        let per = replicas.len().div_ceil(self.threads);
        std::thread::scope(|s| {
            let parts: Vec<_> = replicas.chunks(per).map(|chunk| s.spawn(move || losses(chunk))).collect();
            parts.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
        })
    }

    fn switch(&mut self, rank: usize, now: SimTime, to: State) {
        self.clocks[rank].switch(now, to, rank, self.window, &mut self.metrics.timeline);
    }

    fn dispatch(&mut self, now: SimTime, occ: Occurrence<P::Msg>) {
        match occ {
            Occurrence::Timer { node, tag, .. } => self.with_ctx(node, |p, c| p.on_timer(c, tag)),
            Occurrence::Message { from, to, payload, .. } => self.with_ctx(to, |p, c| p.on_message(c, from, payload)),
            Occurrence::ComputeDone { node, job, .. } => {
                let j = self.jobs.remove(&job.0).expect("every job is recorded");
                debug_assert_eq!(j.node(), node);
                let (grad, loss) = match j {
                    Job::Ready(_, out) => out,
                    Job::Inline(input) => input.compute(&*self.workload),
                    Job::Pooled(task) => self.pool.as_ref().expect("pooled jobs have a pool").take(&task),
                };
                self.metrics.gradients += 1;
                self.switch(node, now, State::Phase(Phase::Idle));
                self.with_ctx(node, |p, c| p.on_gradient(c, job, grad, loss));
            }
            Occurrence::Crashed { node } => {
                let pool = self.pool.as_ref();
                self.jobs.retain(|_, j| {
                    let keep = j.node() != node;
                    if let (false, Job::Pooled(t), Some(pool)) = (keep, &*j, pool) {
                        pool.drop_task(t);
                    }
                    keep
                });
                self.switch(node, now, State::Crashed);
                self.metrics.notes.push(Note { time_s: now.as_secs_f64(), rank: node, what: "crashed".into() });
                self.roles[node].on_crash();
            }
            Occurrence::Restarted { node } => {
                self.switch(node, now, State::Phase(Phase::Idle));
                self.metrics.notes.push(Note { time_s: now.as_secs_f64(), rank: node, what: "restarted".into() });
                self.with_ctx(node, |p, c| {
                    p.on_restart(c);
                    p.on_start(c);
                });
            }
        }
    }

    /// Iteration `n` has been recorded at `now` by the member that records iterations; lets the
    /// other live members that are still finishing it (their last message of the round arrives
    /// later, or later in the same instant) finish it, for at most one more iteration's time, so
    /// that the final evaluation sees every replica after `n` iterations. A member that cannot
    /// finish (cut off, stalled) is left as it is.
    fn finish_last_iteration(&mut self, n: u64, now: SimTime) -> Result<(), SimError> {
        let grace = self.metrics.iteration_times.last().copied().unwrap_or_default();
        let until = now + grace;
        while !self.every_live_rank_completed(n) {
            let Some((at, occ)) = self.sim.step_until(until) else { break };
            self.dispatch(at, occ);
            if let Some(e) = self.timing.error.take() {
                return Err(SimError::config("compute.gradient_time", e));
            }
        }
        Ok(())
    }

    fn every_live_rank_completed(&self, n: u64) -> bool {
        self.roles
            .iter()
            .enumerate()
            .all(|(r, p)| !self.sim.is_up(r) || p.completed_iterations().is_none_or(|k| k >= n))
    }

    /// Runs to the stopping rule and reports; an error if a replayed recording runs out.
    pub fn run(mut self) -> Result<RunResult, SimError> {
        let stop = self.train.stop;
        let end = SimTime::from_secs_f64(stop.sim_time_s);
        let every = SimDuration::from_secs_f64(self.train.eval.every_s).max(SimDuration(1));
        if self.threads > 1 && self.workload.parallel_gradients() && matches!(self.timing.mode, GradientTiming::Model) {
            self.pool = Some(GradientPool::new(self.workload.clone(), self.threads));
        }
        for r in 0..self.roles.len() {
            self.with_ctx(r, |p, c| p.on_start(c));
        }
        let mut next_eval = SimTime::ZERO;
        let mut time_to_target = None;
        let mut guard = Guard::default();
        let reason = loop {
            if let Some((now, occ)) = self.sim.step_until(next_eval.min(end)) {
                guard.check(now)?;
                self.dispatch(now, occ);
                if let Some(e) = self.timing.error.take() {
                    return Err(SimError::config("compute.gradient_time", e));
                }
                if let Some(n) = stop.iterations.filter(|&n| self.metrics.iterations() >= n) {
                    self.finish_last_iteration(n, now)?;
                    break StopReason::Iterations;
                }
                if stop.updates.is_some_and(|n| self.metrics.updates >= n) {
                    break StopReason::Updates;
                }
                continue;
            }
            if next_eval > end {
                break StopReason::SimTime;
            }
            let quiet = self.sim.peek_time().is_none();
            if quiet {
                next_eval = end; // nothing will change: jump to the end
            }
            self.sim.advance_to(next_eval).expect("events up to the evaluation were processed");
            let (sample, _) = self.evaluate(self.train.eval.per_node);
            let hit = stop.target_met(&sample);
            self.metrics.samples.push(sample);
            if hit {
                time_to_target = Some(next_eval.as_secs_f64());
                break StopReason::Target;
            }
            if quiet {
                break StopReason::Quiescent;
            }
            if next_eval == end {
                break StopReason::SimTime;
            }
            next_eval = (next_eval + every).min(end);
        };
        Ok(self.conclude(reason, time_to_target))
    }

    /// The final evaluation (always with per-node losses), the time accounts closed at the end,
    /// and the result.
    fn conclude(mut self, reason: StopReason, time_to_target: Option<f64>) -> RunResult {
        let now = self.sim.now();
        let (last, final_params) = self.evaluate(true);
        if self.metrics.samples.last().is_some_and(|s| s.time_s == last.time_s) {
            self.metrics.samples.pop();
        }
        self.metrics.samples.push(last);
        let final_params = final_params.unwrap_or_default();
        self.sim.absorb_f32s(&final_params);
        for r in 0..self.clocks.len() {
            let state = self.clocks[r].state;
            self.switch(r, now, state);
        }
        let recording = match self.timing.mode {
            GradientTiming::Model => None,
            _ => Some(self.timing.used),
        };
        RunResult {
            digest: self.sim.digest().value(),
            stop: reason,
            sim_time: now,
            stats: self.sim.stats(),
            times: self.clocks.iter().map(|c| c.times).collect(),
            time_to_target,
            final_params,
            trace: self.sim.trace().cloned(),
            metrics: self.metrics,
            recording,
            handling: Vec::new(),
        }
    }
}
