//! The engine as the host core's [`Driver`]: virtual time, the simulated network, engine timers,
//! and gradient jobs whose durations come from the compute model, a measurement or a recording.

use super::check::Checker;
use super::jobs::Jobs;
use crate::gradient_pool::{GradientInput, GradientOutput, GradientPool, Task};
use crate::host::Driver;
use crate::protocol::JobId;
use crate::sharing::{InProcess, Sharing};
use crate::timing::{GradientTiming, Recording};
use dsgd_models::Workload;
use dsgd_sim::{Sim, SimDuration, SimTime};
use std::sync::Arc;

/// A gradient job in flight: its input, computed when it completes, or handed to the pool.
pub(super) enum Job {
    /// Computed on the simulator's thread when it completes.
    Inline(GradientInput),
    /// Computed already (timed when it started, under measured timing).
    Ready(usize, GradientOutput),
    /// Handed to the background threads.
    Pooled(Arc<Task>),
}

impl Job {
    /// The rank computing it.
    pub fn node(&self) -> usize {
        match self {
            Job::Inline(i) => i.node,
            Job::Ready(node, _) => *node,
            Job::Pooled(t) => t.node(),
        }
    }

    /// The gradient and its loss (computed now, taken from the pool, or already there).
    pub fn output(self, workload: &dyn Workload, pool: Option<&GradientPool>) -> GradientOutput {
        match self {
            Job::Ready(_, out) => out,
            Job::Inline(input) => input.compute(workload),
            Job::Pooled(task) => pool.expect("pooled jobs have a pool").take(&task),
        }
    }
}

/// The gradient timing of a run and what it has used so far.
pub(super) struct GradientDurations {
    pub mode: GradientTiming,
    pub used: Recording,
    /// The first replay entry that was missing.
    pub error: Option<String>,
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
        // Under the compute model nothing of the rank's is read (at 10,000 ranks its record is
        // seldom in cache).
        let ns = match &self.mode {
            GradientTiming::Model => return None,
            GradientTiming::Measure => {
                // The one read of the wall clock on the simulated path: recorded for replay.
                let started = std::time::Instant::now();
                *result = Some(job.compute(workload));
                started.elapsed().as_nanos().max(1) as u64
            }
            GradientTiming::Replay(rec) => {
                let k = self.used.per_rank[rank].len();
                match rec.per_rank.get(rank).and_then(|v| v.get(k)) {
                    Some(&ns) => ns,
                    None => {
                        self.error.get_or_insert_with(|| {
                            format!("the recording has no duration for gradient {k} of rank {rank}; it was made by another spec")
                        });
                        1
                    }
                }
            }
        };
        self.used.per_rank[rank].push(ns);
        Some(SimDuration(ns))
    }
}

/// Split borrows of the executor that the core drives a handler call through.
pub(super) struct SimDriver<'a, M> {
    pub sim: &'a mut Sim<M>,
    pub jobs: &'a mut Jobs,
    pub timing: &'a mut GradientDurations,
    pub pool: Option<&'a GradientPool>,
    pub sharing: &'a mut InProcess,
    /// The invariants' checker, in a checked run.
    pub check: Option<&'a mut Checker<M>>,
}

impl<M> Driver<M> for SimDriver<'_, M> {
    fn now(&self) -> SimTime {
        self.sim.now()
    }
    fn ranks(&self) -> usize {
        self.sim.nodes()
    }
    fn send(&mut self, from: usize, to: usize, msg: M, bytes: u64) {
        if let Some(c) = self.check.as_deref_mut() {
            c.sent(from, to, &msg, bytes, self.sim.now());
        }
        self.sim.send(from, to, bytes, msg).expect("a protocol sends from a live node to an existing rank");
    }
    fn set_timer(&mut self, rank: usize, after: SimDuration, tag: u64) {
        self.sim.set_timer(rank, after, tag).expect("a live node sets timers");
    }
    fn start_gradient(&mut self, input: GradientInput, workload: &dyn Workload) -> (JobId, Option<SimTime>) {
        let rank = input.node;
        let mut result = None;
        let (job, due) = match self.timing.next(rank, &input, &mut result, workload) {
            None => self.sim.start_compute(rank, 1.0),
            Some(took) => self.sim.start_compute_measured(rank, took),
        }
        .expect("a live node computes");
        let j = match (result, self.pool) {
            (Some(out), _) => Job::Ready(rank, out),
            (None, Some(pool)) => Job::Pooled(pool.submit(due.as_nanos(), job.0, input)),
            (None, None) => Job::Inline(input),
        };
        self.jobs.insert(rank, job.0, j);
        (job, Some(due))
    }
    fn sharing(&mut self) -> &mut dyn Sharing {
        self.sharing
    }
}
