//! The simulator executor: drives one [`Protocol`] instance per rank on the `dsgd-sim` engine.
//!
//! It turns engine occurrences into handler calls, delivers gradients when the engine says a
//! computation is done (computed with the parameters fixed when it started and a seed drawn from
//! the rank's `("data", rank)` stream, on this thread or ahead of time on [`GradientPool`]'s),
//! evaluates the consensus model every `eval.every_s` of simulated time, applies the stopping
//! rule and folds every evaluated loss and the final parameters into the engine's digest, so a
//! replay checks the arithmetic too.

mod check;
mod driver;
mod guard;
mod jobs;

pub use check::{CheckReport, Checks};

use crate::consensus::{consensus_on, Consensus, NO_MODEL};
use crate::gradient_pool::GradientPool;
use crate::host::{Host, RankCore};
use crate::metrics::{Metrics, Sample};
use crate::order::{RecordedOrder, Replay};
use crate::outcome::{RunResult, StopReason};
use crate::protocol::{Protocol, View};
use crate::sharing::InProcess;
use crate::timing::{GradientTiming, Recording};
use crate::train::TrainConfig;
use check::Checker;
use driver::{GradientDurations, Job, SimDriver};
use dsgd_models::Workload;
use dsgd_sim::{Occurrence, Sim, SimConfig, SimDuration, SimError, SimTime};
use guard::Guard;
use jobs::Jobs;
use std::sync::Arc;

/// Drives a protocol on the simulator.
pub struct SimExecutor<P: Protocol> {
    sim: Sim<P::Msg>,
    roles: Vec<P>,
    /// Each rank's streams and time account.
    cores: Vec<RankCore>,
    workload: Arc<dyn Workload>,
    train: TrainConfig,
    jobs: Jobs,
    metrics: Metrics,
    threads: usize,
    /// Background threads for gradients (real networks on the CPU, `threads` > 1, modelled timing).
    pool: Option<GradientPool>,
    timing: GradientDurations,
    /// The timeline's window (`train.eval.timeline_s`), converted once.
    window: SimTime,
    /// What the ranks, all in this process, share (see [`crate::sharing`]).
    sharing: InProcess,
    /// The simulation tester's invariants, when the run is checked.
    check: Option<Checker<P::Msg>>,
    /// A real run's order of handler calls, when it is replayed.
    replay: Option<Replay<Occurrence<P::Msg>>>,
    /// Whether the next event's node state is prefetched while an event is handled
    /// ([`PREFETCH_FROM`] nodes on).
    prefetch: bool,
}

/// The node count from which the nodes' state (a few kilobytes each: streams, time account,
/// protocol, NIC) no longer fits the caches close to the processor, so that while an event is
/// handled the next event's node state is prefetched. Below it the state is in the caches and
/// the prefetches only cost their instructions: at 1,000 nodes the ring, EASGD and the backup
/// worker ran 8-25% slower with them, at 10,000 and 100,000 every algorithm ran faster (see
/// docs/performance.md).
pub const PREFETCH_FROM: usize = 5_000;

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
        let cores = (0..sim.nodes).map(|r| RankCore::new(engine.streams(), r)).collect();
        let window = SimTime::from_secs_f64(train.eval.timeline_s);
        Ok(SimExecutor {
            window,
            sim: engine,
            cores,
            roles,
            workload,
            train,
            jobs: Jobs::new(sim.nodes),
            metrics: Metrics::default(),
            threads: crate::gradient_pool::threads(),
            sharing: InProcess::new(crate::gradient_pool::threads()),
            pool: None,
            check: None,
            replay: None,
            prefetch: sim.nodes >= PREFETCH_FROM,
            timing: GradientDurations { mode: GradientTiming::Model, used: Recording::new(sim.nodes), error: None },
        })
    }

    /// Forces the prefetching of the next event's node state on or off (by default it is on
    /// from [`PREFETCH_FROM`] nodes). A prefetch changes no value: the run is the same bits
    /// either way, only faster or slower.
    pub fn with_prefetch(mut self, on: bool) -> Self {
        self.prefetch = on;
        self
    }

    /// Sets where gradient durations come from (the compute model by default).
    pub fn with_timing(mut self, mode: GradientTiming) -> Self {
        self.timing.mode = mode;
        self
    }

    /// Checks the invariants of [`check`] after every event, and `checks` besides (the run
    /// stops with [`SimError::Invariant`] at the first violation).
    pub fn with_checks(mut self, sim: &SimConfig, checks: Checks) -> Self {
        self.check = Some(Checker::new::<P>(sim, checks));
        self
    }

    /// The first invariant violation of a checked run, if any.
    /// Replays `order`, a real run's order of handler calls: each rank handles its events in that
    /// order and nothing after it, the stopping rules are off, and the run ends when every rank
    /// has handled its whole record ([`StopReason::Replayed`]). Refused with faults (a crash
    /// voids events a real rank never saw).
    pub fn with_order(mut self, sim: &SimConfig, order: &RecordedOrder) -> Result<Self, SimError> {
        if !sim.faults.schedule.is_empty() || sim.faults.random.is_some() {
            return Err(SimError::config("faults", "a recorded order is replayed without injected faults"));
        }
        self.replay = Some(Replay::new(order, self.roles.len()).map_err(|e| SimError::config("order", e))?);
        Ok(self)
    }

    /// Hands an occurrence to the recorded order; handles what it lets through.
    fn dispatch_replayed(&mut self, occ: Occurrence<P::Msg>) {
        let replay = self.replay.as_mut().expect("a replayed run");
        let ready = match &occ {
            &Occurrence::Message { from, to, .. } => replay.arrived(to, occ, |n| n.message(from)),
            &Occurrence::Timer { node, tag, .. } => replay.arrived(node, occ, |n| n.timer(tag)),
            &Occurrence::ComputeDone { node, .. } => replay.arrived(node, occ, |n| n.gradient()),
            // Refused by `with_order`.
            Occurrence::Crashed { .. } | Occurrence::Restarted { .. } => unreachable!("faults in a replayed order"),
        };
        for o in ready {
            self.handle(o);
        }
    }

    /// Where a replay stands: `Some(Ok)` when it is done, `Some(Err)` when it cannot go on.
    fn replay_end(&self, quiet: bool) -> Option<Result<(), SimError>> {
        let r = self.replay.as_ref()?;
        if r.done() {
            return Some(Ok(()));
        }
        r.stuck(quiet).map(|s| Err(SimError::config("order", s.to_string())))
    }

    fn violation(&mut self) -> Result<(), SimError> {
        match self.check.as_mut().and_then(|c| c.take_violation()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Rank `rank`'s role and the host core's context for a handler call on it.
    fn host(&mut self, rank: usize) -> (&mut P, Host<'_, P::Msg, SimDriver<'_, P::Msg>>) {
        let driver = SimDriver {
            sim: &mut self.sim,
            jobs: &mut self.jobs,
            timing: &mut self.timing,
            pool: self.pool.as_ref(),
            sharing: &mut self.sharing,
            check: self.check.as_mut(),
        };
        let host = Host {
            core: &mut self.cores[rank],
            metrics: &mut self.metrics,
            window: self.window,
            workload: &*self.workload,
            driver,
            msg: std::marker::PhantomData,
        };
        (&mut self.roles[rank], host)
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
    pub fn consensus(&self) -> Consensus<'_> {
        let dim = if self.workload.timing_only() { 0 } else { self.workload.param_count() };
        let views =
            self.roles.iter().enumerate().map(|(r, role)| if self.sim.is_up(r) { role.view() } else { View::Nothing });
        consensus_on(views, dim, self.threads)
    }

    /// Evaluates the consensus model; returns the sample and the model (`None`: no model).
    fn evaluate(&mut self, per_node: bool) -> (Sample, Option<Vec<f32>>) {
        let (eval, distance, node_losses, model, evaluated) = {
            let c = self.consensus();
            let eval = c.evaluate_on(&*self.workload, self.eval_threads());
            let (node_losses, distinct) =
                if per_node && !self.workload.timing_only() { self.node_losses(&c.replicas) } else { (Vec::new(), 0) };
            let evaluated = u64::from(eval.is_some()) + distinct;
            (eval, c.distance, node_losses, c.model, evaluated)
        };
        self.metrics.evaluations += evaluated;
        self.sim.absorb(eval.as_ref().map_or(NO_MODEL, |e| e.loss.to_bits()));
        self.sim.absorb(distance.to_bits());
        let live = (0..self.roles.len()).filter(|&r| self.sim.is_up(r)).count();
        let sample =
            Sample::scored(self.sim.now().as_secs_f64(), eval, distance, node_losses, self.metrics.updates, live);
        if let Some(check) = self.check.as_mut() {
            check.evaluated(&self.roles, &sample, !self.workload.timing_only(), self.sim.now());
        }
        (sample, model)
    }

    /// Threads an evaluation may use: the gradient threads' count for workloads whose gradients
    /// use them (they wait while the simulator's thread evaluates), else one.
    fn eval_threads(&self) -> usize {
        if self.workload.parallel_gradients() {
            self.threads
        } else {
            1
        }
    }

    /// Each replica's loss, in rank order: on the gradient threads' count of threads for
    /// workloads whose gradients use them (an evaluation is a pure function of the parameters,
    /// so the losses are the same bits on any thread).
    fn node_losses(&self, replicas: &[Option<std::borrow::Cow<'_, [f32]>>]) -> (Vec<Option<f64>>, u64) {
        let workload = &*self.workload;
        let threads = self.eval_threads();
        let mut distinct = 0;
        let losses = crate::consensus::replica_losses(replicas, |params| {
            distinct = params.len() as u64;
            dsgd_models::par::by_item(params.to_vec(), threads, |p| workload.evaluate(p).loss)
        });
        (losses, distinct)
    }

    fn dispatch(&mut self, occ: Occurrence<P::Msg>) {
        if self.replay.is_some() {
            return self.dispatch_replayed(occ);
        }
        if self.check.is_some() {
            return self.dispatch_checked(occ);
        }
        self.handle(occ)
    }

    /// [`Self::dispatch`] with the checker told what happens and shown the node afterwards.
    #[cold]
    fn dispatch_checked(&mut self, occ: Occurrence<P::Msg>) {
        let now = self.sim.now();
        let c = self.check.as_mut().expect("a checked run");
        let node = match &occ {
            Occurrence::Timer { node, .. } => *node,
            Occurrence::Message { from, to, sent_at, payload, .. } => {
                c.delivering(*from, *to, *sent_at, payload, now);
                *to
            }
            Occurrence::ComputeDone { node, .. } => {
                c.gradient();
                *node
            }
            Occurrence::Crashed { node } => {
                c.crashing(*node, now);
                *node
            }
            Occurrence::Restarted { node } => {
                c.restarting(*node, now);
                *node
            }
        };
        self.handle(occ);
        let c = self.check.as_mut().expect("a checked run");
        c.windows(now);
        c.after(node, &self.roles[node], self.cores[node].clock.state, now);
    }

    /// Prefetches what a handler call on `node` reads: its role, its streams and time account,
    /// its jobs, and the engine's state of it (see [`dsgd_sim::prefetch`]). Called for the next
    /// event's node while the current one is handled, so that its cache misses overlap this
    /// event's work instead of following one another in the next one's.
    #[inline]
    fn prefetch(&self, node: usize) {
        self.sim.prefetch_node(node);
        if let (Some(role), Some(core)) = (self.roles.get(node), self.cores.get(node)) {
            dsgd_sim::prefetch::lines(role, 8);
            dsgd_sim::prefetch::lines(core, 12);
        }
        self.jobs.prefetch(node);
    }

    /// Prefetches the next event's node state ([`Self::prefetch`]); out of line, so that the
    /// loop of a run without prefetching stays as it was.
    #[inline(never)]
    fn prefetch_next(&mut self) {
        if let Some(next) = self.sim.next_node() {
            self.prefetch(next);
        }
        self.sim.prefetch_next_event();
    }

    fn handle(&mut self, occ: Occurrence<P::Msg>) {
        match occ {
            Occurrence::Timer { node, tag, .. } => {
                let (p, mut c) = self.host(node);
                p.on_timer(&mut c, tag);
            }
            Occurrence::Message { from, to, payload, .. } => {
                let (p, mut c) = self.host(to);
                p.on_message(&mut c, from, payload);
            }
            Occurrence::ComputeDone { node, job, .. } => {
                let j = self.jobs.take(node, job.0).expect("every job is recorded");
                debug_assert_eq!(j.node(), node);
                let (grad, loss) = j.output(&*self.workload, self.pool.as_ref());
                let (p, c) = self.host(node);
                c.gradient_done(p, job, grad, loss);
            }
            Occurrence::Crashed { node } => {
                for j in self.jobs.take_all(node) {
                    if let (Job::Pooled(t), Some(pool)) = (j, self.pool.as_ref()) {
                        pool.drop_task(&t);
                    }
                }
                self.sharing.crashed(node);
                let (p, c) = self.host(node);
                c.crashed(p);
            }
            Occurrence::Restarted { node } => {
                let (p, c) = self.host(node);
                c.restarted(p);
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
            let Some((_, occ)) = self.sim.step_until(until) else { break };
            self.dispatch(occ);
            self.violation()?;
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
        // A replay ends with its record, whenever that is in simulated time.
        let end = if self.replay.is_some() { SimTime(u64::MAX / 4) } else { SimTime::from_secs_f64(stop.sim_time_s) };
        let every = SimDuration::from_secs_f64(self.train.eval.every_s).max(SimDuration(1));
        if self.threads > 1 && self.workload.parallel_gradients() && matches!(self.timing.mode, GradientTiming::Model) {
            self.pool = Some(GradientPool::new(self.workload.clone(), self.threads));
        }
        for r in 0..self.roles.len() {
            let (p, mut c) = self.host(r);
            p.on_start(&mut c);
        }
        if let Some(c) = self.check.as_mut() {
            let cores = &self.cores;
            c.started(&self.roles, |r| cores[r].clock.state, self.sim.now());
        }
        self.violation()?;
        let mut next_eval = SimTime::ZERO;
        let mut time_to_target = None;
        let mut guard = Guard::default();
        let reason = loop {
            if let Some((now, occ)) = self.sim.step_until(next_eval.min(end)) {
                if self.prefetch {
                    self.prefetch_next();
                }
                guard.check(now, &self.sim)?;
                self.dispatch(occ);
                self.violation()?;
                if let Some(e) = self.timing.error.take() {
                    return Err(SimError::config("compute.gradient_time", e));
                }
                match self.replay_end(false) {
                    Some(Ok(())) => break StopReason::Replayed,
                    Some(Err(e)) => return Err(e),
                    None if self.replay.is_some() => continue,
                    None => {}
                }
                match stop.counted(&self.metrics) {
                    Some(StopReason::Iterations) => {
                        let n = stop.iterations.expect("the iteration rule was met");
                        self.finish_last_iteration(n, now)?;
                        break StopReason::Iterations;
                    }
                    Some(reason) => break reason,
                    None => continue,
                }
            }
            if next_eval > end {
                break StopReason::SimTime;
            }
            let quiet = self.sim.peek_time().is_none();
            match self.replay_end(quiet) {
                Some(Ok(())) => break StopReason::Replayed,
                Some(Err(e)) => return Err(e),
                None => {}
            }
            if quiet {
                next_eval = end; // nothing will change: jump to the end
            }
            self.sim.advance_to(next_eval).expect("events up to the evaluation were processed");
            let (sample, _) = self.evaluate(self.train.eval.per_node);
            guard.check_now(next_eval, &self.sim)?;
            self.violation()?;
            let hit = self.replay.is_none() && stop.target_met(&sample);
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
        self.conclude(reason, time_to_target)
    }

    /// The final evaluation (always with per-node losses), the time accounts closed at the end,
    /// and the result.
    fn conclude(mut self, reason: StopReason, time_to_target: Option<f64>) -> Result<RunResult, SimError> {
        let now = self.sim.now();
        let (last, final_params) = self.evaluate(true);
        if self.metrics.samples.last().is_some_and(|s| s.time_s == last.time_s) {
            self.metrics.samples.pop();
        }
        self.metrics.samples.push(last);
        let final_params = final_params.unwrap_or_default();
        self.sim.absorb_f32s(&final_params);
        for core in &mut self.cores {
            core.close(now, self.window, &mut self.metrics);
        }
        let times: Vec<_> = self.cores.iter().map(|c| c.clock.times).collect();
        let stats = self.sim.stats();
        let checks = match self.check.take() {
            Some(c) => Some(c.finish(&self.metrics, &stats, &times, now)?),
            None => None,
        };
        let recording = match self.timing.mode {
            GradientTiming::Model => None,
            _ => Some(self.timing.used),
        };
        Ok(RunResult {
            digest: self.sim.digest().value(),
            stop: reason,
            sim_time: now,
            stats,
            times,
            time_to_target,
            final_params,
            trace: self.sim.trace().cloned(),
            metrics: self.metrics,
            recording,
            handling: Vec::new(),
            order: None,
            checks,
        })
    }
}
