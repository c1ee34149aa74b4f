//! The per-rank host core both executors share: everything a rank's protocol is given and
//! everything that happens to it, written once.
//!
//! An executor supplies only a [`Driver`]: its clock, its transport, its timers and where a
//! gradient is computed. The core owns the rest:
//! - the rank's named random streams (`("data", rank)` seeds each gradient job,
//!   `("protocol", rank)` is the protocol's own) and its time account ([`RankCore`]);
//! - the [`Context`] a protocol sees ([`Host`]): sends are counted, a gradient's seed is drawn and
//!   the rank enters the computing phase, reports go through the run's [`Ledger`];
//! - the steps of a rank's life: a crash, a restart, a gradient handed over ([`Host::crashed`],
//!   [`Host::restarted`], [`Host::gradient_done`]).
//!
//! The simulator drives every rank through one of these on the engine; the MPI executor drives its
//! one rank on the wall clock. Neither copies the other's bookkeeping.

use crate::gradient_pool::GradientInput;
use crate::metrics::{report_through_ledger, Ledger, Metrics, State, TimeAccount};
use crate::protocol::{Context, JobId, Phase, Protocol, Report};
use crate::sharing::Sharing;
use dsgd_models::Workload;
use dsgd_sim::{SimDuration, SimTime, StreamRng, Streams};
use rand::RngCore;
use std::sync::Arc;

/// What an executor supplies to the core: a clock, a transport, timers and a gradient runner.
pub(crate) trait Driver<M> {
    /// The current time (virtual, or wall time since the common start).
    fn now(&self) -> SimTime;
    /// Ranks in the run.
    fn ranks(&self) -> usize;
    /// Sends `msg` (`bytes` on the wire) from `from` to `to`.
    fn send(&mut self, from: usize, to: usize, msg: M, bytes: u64);
    /// Calls the protocol's `on_timer(tag)` on `rank` after `after`.
    fn set_timer(&mut self, rank: usize, after: SimDuration, tag: u64);
    /// Starts computing the gradient `input`; the executor hands it over later through
    /// [`Host::gradient_done`], at the time returned where it knows it now.
    fn start_gradient(&mut self, input: GradientInput, workload: &dyn Workload) -> (JobId, Option<SimTime>);
    /// The executor's in-process sharing (see [`crate::sharing`]).
    fn sharing(&mut self) -> &mut dyn Sharing;
}

/// What a rank keeps across handler calls whichever executor runs it: its random streams and
/// its time account.
pub(crate) struct RankCore {
    /// The rank.
    pub rank: usize,
    /// Seeds of its gradient jobs (the minibatch each samples).
    data_rng: StreamRng,
    /// The protocol's own random numbers.
    proto_rng: StreamRng,
    /// Where its time went, and what it is doing now.
    pub clock: TimeAccount,
}

impl RankCore {
    /// Rank `rank`'s core, its streams drawn from the run's `streams` by name.
    pub fn new(streams: &Streams, rank: usize) -> Self {
        RankCore {
            rank,
            data_rng: streams.stream("data", rank as u64),
            proto_rng: streams.stream("protocol", rank as u64),
            clock: TimeAccount::new(),
        }
    }

    /// Switches the rank's state at `now`, recording the interval just ended.
    pub fn switch(&mut self, now: SimTime, to: State, window: SimTime, metrics: &mut Metrics) {
        self.clock.switch(now, to, self.rank, window, &mut metrics.timeline);
    }

    /// Closes the rank's time account at `now` (the last interval is counted).
    pub fn close(&mut self, now: SimTime, window: SimTime, metrics: &mut Metrics) {
        let state = self.clock.state;
        self.switch(now, state, window, metrics);
    }
}

/// The context a protocol sees for one handler call: its rank's core, the run's counters and the
/// executor's driver.
pub(crate) struct Host<'a, M, D: Driver<M>> {
    /// The rank's core.
    pub core: &'a mut RankCore,
    /// The counters the rank reports into.
    pub metrics: &'a mut Metrics,
    /// The timeline's window (`eval.timeline_s`).
    pub window: SimTime,
    /// The workload.
    pub workload: &'a dyn Workload,
    /// The executor's clock, transport, timers and gradient runner (borrows of its state).
    pub driver: D,
    /// The message type the driver carries.
    pub msg: std::marker::PhantomData<M>,
}

impl<M, D: Driver<M>> Host<'_, M, D> {
    fn ledger(&mut self) -> Ledger<'_> {
        Ledger { rank: self.core.rank, clock: &mut self.core.clock, metrics: self.metrics, window: self.window }
    }

    fn ledger_now(&self) -> SimTime {
        self.driver.now()
    }

    fn switch(&mut self, to: State) {
        let now = self.driver.now();
        self.core.switch(now, to, self.window, self.metrics);
    }

    /// The rank crashed: its time counts as crashed from now, the log says so, and the protocol
    /// drops its volatile state. (The executor voids its timers, jobs and messages.)
    pub fn crashed<P: Protocol<Msg = M>>(mut self, role: &mut P) {
        self.switch(State::Crashed);
        self.note("crashed".into());
        role.on_crash();
    }

    /// The rank restarted: it is idle, the log says so, and the protocol restarts and starts.
    pub fn restarted<P: Protocol<Msg = M>>(mut self, role: &mut P) {
        self.switch(State::Phase(Phase::Idle));
        self.note("restarted".into());
        role.on_restart(&mut self);
        role.on_start(&mut self);
    }

    /// A gradient of this rank is done: it is counted, the rank stops computing, and the
    /// protocol gets it.
    pub fn gradient_done<P: Protocol<Msg = M>>(mut self, role: &mut P, job: JobId, grad: Vec<f32>, loss: f64) {
        self.metrics.gradients += 1;
        self.switch(State::Phase(Phase::Idle));
        role.on_gradient(&mut self, job, grad, loss);
    }
}

impl<M, D: Driver<M>> Context<M> for Host<'_, M, D> {
    fn now(&self) -> SimTime {
        self.driver.now()
    }
    fn rank(&self) -> usize {
        self.core.rank
    }
    fn ranks(&self) -> usize {
        self.driver.ranks()
    }
    fn send(&mut self, to: usize, msg: M, bytes: u64) {
        self.metrics.record_send(self.core.rank, bytes);
        self.driver.send(self.core.rank, to, msg, bytes);
    }
    fn set_timer(&mut self, after: SimDuration, tag: u64) {
        self.driver.set_timer(self.core.rank, after, tag);
    }
    fn start_gradient(&mut self, params: Arc<Vec<f32>>, batch: usize) -> JobId {
        self.start_gradient_due(params, batch).0
    }
    fn start_gradient_due(&mut self, params: Arc<Vec<f32>>, batch: usize) -> (JobId, Option<SimTime>) {
        let seed = self.core.data_rng.next_u64();
        let input = GradientInput { node: self.core.rank, params, batch, seed };
        let started = self.driver.start_gradient(input, self.workload);
        let now = self.driver.now();
        self.ledger().phase(now, Phase::Computing);
        started
    }
    fn workload(&self) -> &dyn Workload {
        self.workload
    }
    fn random(&mut self) -> u64 {
        self.core.proto_rng.next_u64()
    }
    fn sharing(&mut self) -> &mut dyn Sharing {
        self.driver.sharing()
    }
}

impl<M, D: Driver<M>> Report for Host<'_, M, D> {
    report_through_ledger!();
}
