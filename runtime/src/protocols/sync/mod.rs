//! Synchronous all-reduce SGD.
//!
//! Every member computes a gradient at the shared parameters, the members all-reduce the
//! gradients (message by message with a [`CollectiveKind`], or charged in closed form), and every
//! replica applies the same averaged update, so replicas stay bit-identical.
//!
//! **Backup workers** (Chen et al. 2016): with `backup_workers = b > 0` the lowest-ranked member
//! aggregates: workers send it their gradients, it averages the first `p - b` to arrive, applies
//! the update and sends the new parameters to every member; late gradients are dropped.
//!
//! **Failures.** A member that makes no progress for `timeout_s` starts a *probe*: it bumps the
//! epoch and asks every rank to answer; every live rank that hears a probe answers and waits
//! `timeout_s / 2`; the membership of the new epoch is everyone who answered. The member with the
//! most completed iterations (lowest rank on ties) sends its parameters and optimizer state to
//! every other member, and training resumes with the survivors from identical replicas. A restarted rank announces itself with
//! `Join`, which triggers a probe that takes it back in with the current parameters. Messages of
//! older epochs are ignored, so no round of a dead membership can be confused with a live one.
//!
//! **Reading the code.** A worker is in one [`Stage`] of its iteration (computing, reducing,
//! awaiting a donor's state, joining after a restart, crashed), with a membership probe as an
//! overlay that pauses the stage; it reduces in one [`Mode`] fixed by its configuration
//! (message-level collective, analytic closed form, or backup-worker aggregation). The modes live
//! in [`reduce`], the probes, joins and state hand-offs in [`membership`].

pub mod buckets;
pub mod local;
mod membership;
mod pipeline;
mod reduce;

pub use buckets::BucketConfig;

use crate::audit::Audit;
use crate::collectives::{analytic::CostModel, CollectiveKind, Groups};
use crate::optimizer::{OptimizerConfig, Sgd};
use crate::protocol::{Context, JobId, Protocol, View};
use crate::protocols::service::Service;
use dsgd_sim::{NetworkConfig, SimDuration, SimTime, Topology};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Configuration of synchronous SGD.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyncConfig {
    /// The all-reduce algorithm (default ring).
    pub collective: CollectiveKind,
    /// Backup workers: average the first `members - backup_workers` gradients (default 0).
    pub backup_workers: usize,
    /// Failure-detection timeout in seconds (default 5).
    pub timeout_s: f64,
    /// Network figures for the analytic collectives (filled in from the network when absent).
    pub cost: Option<CostModel>,
    /// Ranks per group of the hierarchical collectives: ranks `k·g..(k+1)·g` form group `k`
    /// (filled in from a racks topology's `rack_size` when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_size: Option<usize>,
    /// A worker's time to handle one chunk of the message-level collective (decode, reduce,
    /// encode what it sends on), microseconds (default 0: at once); chunks queue behind it (see
    /// [`crate::protocols::service`]).
    #[serde(skip_serializing_if = "crate::protocols::service::is_instant")]
    pub message_time_us: f64,
    /// Gradient buckets as PyTorch DDP forms them, each all-reduced on its own (default none:
    /// the whole gradient in one all-reduce). Message-level collectives only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<BucketConfig>,
    /// Rounds of local SGD (set from `local_sgd`'s configuration, never read from a spec).
    #[serde(skip)]
    pub local: Option<local::Rounds>,
}

impl SyncConfig {
    /// Fills in what is absent from the network: the analytic collectives' cost (its latency and
    /// bandwidth, and a racks topology's core latency and uplink) and the hierarchical
    /// collectives' groups (a racks topology's racks).
    pub fn fill_from(&mut self, net: &NetworkConfig) {
        let racks = match net.topology {
            Topology::Racks { rack_size, uplink, core_latency } => Some((rack_size, uplink, core_latency)),
            Topology::Flat => None,
        };
        if self.collective.is_analytic() && self.cost.is_none() {
            self.cost = Some(CostModel {
                latency: net.latency,
                bandwidth: net.bandwidth,
                gamma_ns_per_byte: 0.0,
                core_latency: racks.map_or(SimDuration::ZERO, |r| r.2),
                uplink: racks.map(|r| r.1),
            });
        }
        if self.collective.is_hierarchical() && self.group_size.is_none() {
            self.group_size = racks.map(|r| r.0);
        }
    }
}

impl Default for SyncConfig {
    fn default() -> Self {
        SyncConfig {
            collective: CollectiveKind::Ring,
            backup_workers: 0,
            timeout_s: crate::protocols::DEFAULT_TIMEOUT_S,
            cost: None,
            group_size: None,
            message_time_us: 0.0,
            buckets: None,
            local: None,
        }
    }
}

/// Messages of synchronous SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum SyncMsg {
    /// One round of a message-level collective.
    Chunk {
        /// Membership view (see [`view_id`]).
        view: u64,
        /// Iteration.
        iter: u64,
        /// The bucket (0 without buckets).
        bucket: u32,
        /// Round of the collective.
        round: u32,
        /// Values.
        #[serde(with = "crate::wire::pod")]
        data: Vec<f32>,
    },
    /// A gradient for the analytic all-reduce or for the backup-worker aggregator (shared, so
    /// that the simulator, which never serialises, moves no copy of it to each member).
    Grad {
        /// Membership view (see [`view_id`]).
        view: u64,
        /// Iteration.
        iter: u64,
        /// When the sender's gradient was ready.
        ready: SimTime,
        /// Values.
        #[serde(with = "crate::wire::pod_shared")]
        data: Arc<Vec<f32>>,
    },
    /// New parameters from the backup-worker aggregator; `iter` iterations are now done.
    Params {
        /// Membership view (see [`view_id`]).
        view: u64,
        /// Completed iterations.
        iter: u64,
        /// Values.
        #[serde(with = "crate::wire::pod")]
        params: Vec<f32>,
    },
    /// "I am alive in epoch `epoch` with `done` iterations completed, in view `view`."
    Probe {
        /// The proposed epoch.
        epoch: u32,
        /// Completed iterations of the sender.
        done: u64,
        /// The view whose all-reduces made the sender's replica (`u64::MAX` while it awaits a
        /// donor's state): members with the same view and `done` hold the same replica.
        view: u64,
    },
    /// A rank outside the sender's membership (restarted, or cut off by a partition) is invited
    /// to merge; `epoch` is the sender's.
    Join {
        /// The sender's epoch.
        epoch: u32,
    },
    /// Parameters and optimizer state for a member that is behind (boxed: rare and large).
    State(Box<StateMsg>),
}

/// The state a probe's donor hands to the other members.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateMsg {
    /// Epoch.
    pub epoch: u32,
    /// The view the donor formed: only members of that view adopt it (another prober may have
    /// formed another view of the same epoch, with another donor).
    pub view: u64,
    /// Completed iterations.
    pub done: u64,
    /// Parameters.
    #[serde(with = "crate::wire::pod")]
    pub params: Vec<f32>,
    /// Momentum buffer.
    #[serde(with = "crate::wire::pod")]
    pub velocity: Vec<f32>,
    /// Optimizer steps.
    pub steps: u64,
}

/// A membership view: the epoch number in the high 32 bits and a hash of the member list in the
/// low 32, so two groups that formed the same epoch number apart (on the two sides of a
/// partition) never take each other's messages for their own.
pub fn view_id(epoch: u32, members: &[usize]) -> u64 {
    let bytes: Vec<u8> = members.iter().flat_map(|m| (*m as u64).to_le_bytes()).collect();
    (epoch as u64) << 32 | (dsgd_sim::rng::fnv1a64(&bytes) & 0xFFFF_FFFF)
}

const WATCHDOG: u64 = 1;
const PROBE_END: u64 = 2;
const ANALYTIC_DONE: u64 = 3;
const HELLO: u64 = 4;
const SERVED: u64 = 5;
const BUCKET_READY: u64 = 6;
const SMALL: u64 = 64;

/// Where a worker is in its iteration (what [`SyncWorker::stage`] shows; the worker's own
/// [`Step`] carries each stage's data). A membership probe ([`membership::Probing`]) pauses
/// whichever stage it finds; the stage resumes, or changes, when the probe ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Computing the gradient of iteration `done` (or holding it while a probe runs).
    Computing,
    /// Reducing the gradient with the other members.
    Reducing,
    /// A membership change made another member the donor: waiting for its state.
    AwaitingState,
    /// Restarted: asked the others `asked` times (at most [`JOIN_ASKS`]) to take it back, and
    /// waiting for the state of the membership that does.
    Joining {
        /// Requests sent so far.
        asked: u32,
    },
    /// Crashed: the next start is a restart.
    Crashed,
}

/// Join requests a restarted worker sends, one per timeout, before it probes on its own.
pub const JOIN_ASKS: u32 = 3;

impl Stage {
    /// The worker has no valid parameters until a donor's state arrives.
    fn awaits_state(self) -> bool {
        matches!(self, Stage::AwaitingState | Stage::Joining { .. } | Stage::Crashed)
    }
}

/// The gradient of the iteration in progress.
#[derive(Clone, Debug)]
enum Gradient {
    /// Being computed by this job.
    Pending(JobId),
    /// Computed.
    Ready(Arc<Vec<f32>>),
    /// None: none was started, or the one started was given up.
    Absent,
}

/// A [`Stage`] with the data that stage holds.
#[derive(Clone, Debug)]
enum Step {
    /// Computing the gradient of iteration `done`, or holding it while a probe runs.
    Computing(Gradient),
    /// Reducing this gradient with the other members.
    Reducing(Arc<Vec<f32>>),
    /// Waiting for a donor's state, with the iteration's gradient as it was (a later probe may
    /// make this worker the donor; a gradient that finishes while it waits is given up).
    AwaitingState(Gradient),
    /// Restarted: asked the others `asked` times to take it back.
    Joining {
        /// Requests sent so far.
        asked: u32,
    },
    /// Crashed: the next start is a restart.
    Crashed,
}

impl Step {
    fn kind(&self) -> Stage {
        match self {
            Step::Computing(_) => Stage::Computing,
            Step::Reducing(_) => Stage::Reducing,
            Step::AwaitingState(_) => Stage::AwaitingState,
            Step::Joining { asked } => Stage::Joining { asked: *asked },
            Step::Crashed => Stage::Crashed,
        }
    }

    /// The iteration's gradient, as a stage that waits keeps it.
    fn gradient(&self) -> Gradient {
        match self {
            Step::Computing(g) | Step::AwaitingState(g) => g.clone(),
            Step::Reducing(g) => Gradient::Ready(g.clone()),
            Step::Joining { .. } | Step::Crashed => Gradient::Absent,
        }
    }
}

/// How the members reduce their gradients, fixed by the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A message-level collective ([`CollectiveKind`]): every member ends with the sum.
    Collective,
    /// Every member sends its gradient to every other one (0 bytes on the wire) and the closed
    /// form of the collective is charged after the last gradient is ready.
    Analytic,
    /// Backup workers: the lowest-ranked member averages the first `p - b` gradients and sends
    /// the new parameters back.
    Backup,
}

impl Mode {
    fn of(cfg: &SyncConfig) -> Mode {
        if cfg.backup_workers > 0 {
            Mode::Backup
        } else if cfg.collective.is_analytic() {
            Mode::Analytic
        } else {
            Mode::Collective
        }
    }
}

/// The current membership: the members, the epoch and their view id.
#[derive(Clone, Debug)]
struct Membership {
    /// The members, by rank, in ascending order (so a rank is found by binary search: a linear
    /// one at every gradient made 100,000 workers' iterations quadratic): at the start one list
    /// shared by every worker, so n workers hold one n-long list, not n of them.
    members: Arc<[usize]>,
    epoch: u32,
    /// [`view_id`] of the epoch and members.
    view: u64,
}

/// A synchronous-SGD worker.
pub struct SyncWorker {
    cfg: SyncConfig,
    mode: Mode,
    batch: usize,
    opt_cfg: OptimizerConfig,
    /// The replica's parameters, shared with the members whose replicas are identical.
    params: Arc<Vec<f32>>,
    opt: Sgd,
    now: Membership,
    /// Completed iterations.
    done: u64,
    /// The stage of the iteration, with its data.
    stage: Step,
    /// A membership probe in progress (an overlay: it pauses whichever stage it finds).
    probing: Option<membership::Probing>,
    iter_start: SimTime,
    /// Generation of the iteration's and probe's timers: a timer of an older one is void.
    gen: u64,
    watchdog: membership::Watchdog,
    /// A donor's state that came before this worker finished its own probe.
    pending_state: Option<Box<StateMsg>>,
    /// The message-level collective's state.
    collective: reduce::CollectiveState,
    /// Gradients received by the analytic and backup modes, by (view, iteration).
    gathered: reduce::Gathered,
    /// Chunks waiting to be handled (when `message_time_us > 0`).
    chunks: Service<SyncMsg>,
    /// Local SGD: the worker's round of local steps (`opt` is then the outer optimizer).
    local: Option<local::Local>,
}

/// The initial membership, shared by every worker.
#[derive(Clone, Debug)]
pub struct Initial {
    now: Membership,
    groups: Option<(u64, Arc<Groups>)>,
}

impl SyncWorker {
    /// A worker; `ranks` is the number of workers.
    pub fn new(cfg: SyncConfig, batch: usize, opt: OptimizerConfig, ranks: usize) -> Self {
        Self::with_members(cfg, batch, opt, &Self::initial(&cfg, ranks))
    }

    /// The initial membership of `ranks` workers (all of them), its view id and, for the
    /// hierarchical collective, its groups: to share among all workers.
    pub fn initial(cfg: &SyncConfig, ranks: usize) -> Initial {
        let members: Arc<[usize]> = (0..ranks).collect();
        let view = view_id(0, &members);
        let groups = cfg
            .collective
            .is_hierarchical()
            .then(|| (view, Arc::new(Groups::of_ranks(&members, cfg.group_size.unwrap_or(ranks)))));
        Initial { now: Membership { members, epoch: 0, view }, groups }
    }

    /// A worker of the initial membership from [`SyncWorker::initial`], shared by all workers.
    pub fn with_members(cfg: SyncConfig, batch: usize, opt: OptimizerConfig, initial: &Initial) -> Self {
        let Initial { now, groups } = initial.clone();
        let mode = Mode::of(&cfg);
        let workers = now.members.len();
        let rounds = cfg.local.filter(|r| !r.is_sync(&opt));
        let local = rounds.map(|r| local::Local::new(r.h, opt, 0, workers));
        let opt = rounds.map_or(opt, |r| r.outer_optimizer());
        SyncWorker {
            cfg,
            mode,
            batch,
            opt_cfg: opt,
            params: Default::default(),
            opt: Sgd::new(opt, 0, workers),
            now,
            done: 0,
            stage: Step::Computing(Gradient::Absent),
            probing: None,
            iter_start: SimTime::ZERO,
            gen: 0,
            watchdog: membership::Watchdog::default(),
            pending_state: None,
            collective: reduce::CollectiveState::new(groups),
            gathered: reduce::Gathered::new(),
            chunks: Service::new(cfg.message_time_us),
            local,
        }
    }

    /// Completed iterations.
    pub fn iterations(&self) -> u64 {
        self.done
    }
    /// The current membership.
    pub fn members(&self) -> &[usize] {
        &self.now.members
    }
    /// The parameters.
    pub fn params(&self) -> &[f32] {
        &self.params
    }
    /// The stage of the iteration.
    pub fn stage(&self) -> Stage {
        self.stage.kind()
    }
    /// The reduction mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn tag(&self, kind: u64) -> u64 {
        kind | self.gen << 8
    }
    fn bytes(ctx: &dyn Context<SyncMsg>) -> u64 {
        ctx.workload().message_bytes()
    }
    fn timeout(&self) -> SimDuration {
        SimDuration::from_secs_f64(self.cfg.timeout_s)
    }
    /// Voids the timers of the current iteration or probe.
    fn invalidate(&mut self) {
        self.gen += 1;
    }
    /// The rank's index among the members. With every rank a member (no crash yet) it is the
    /// rank itself, found with one read: the members are distinct and ascending, so `members[r]
    /// == r` only at index `r`. A binary search otherwise.
    fn me(&self, rank: usize) -> Option<usize> {
        let members = &self.now.members;
        if members.get(rank) == Some(&rank) {
            return Some(rank);
        }
        members.binary_search(&rank).ok()
    }
    /// `v`, or a vector with its bits that another member already holds (see
    /// [`crate::sharing`]).
    fn share(ctx: &mut dyn Context<SyncMsg>, v: Vec<f32>) -> Arc<Vec<f32>> {
        ctx.sharing().share(Arc::new(v))
    }

    /// Starts computing the gradient of iteration `done` at the current parameters.
    fn begin_iteration(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        self.iter_start = ctx.now();
        if let Some(l) = self.local.as_mut() {
            l.begin();
        }
        let (job, due) = ctx.start_gradient_due(self.params.clone(), self.batch);
        self.stage = Step::Computing(Gradient::Pending(job));
        if self.cfg.buckets.is_some() {
            self.begin_buckets(ctx, due);
        }
    }

    /// Adopts new parameters (from the backup aggregator or a donor) with `done` iterations, and
    /// starts the next one.
    fn adopt(&mut self, ctx: &mut dyn Context<SyncMsg>, params: Vec<f32>, done: u64) {
        self.params = Self::share(ctx, params);
        self.done = done;
        self.invalidate();
        self.begin_iteration(ctx);
    }
}

impl Protocol for SyncWorker {
    type Msg = SyncMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let init = ctx.workload().init();
        self.params = Self::share(ctx, init);
        self.opt = Sgd::new(self.opt_cfg, self.params.len(), ctx.ranks());
        if let Some(l) = self.local.as_mut() {
            *l = local::Local::new(l.h, l.inner_cfg, self.params.len(), ctx.ranks());
        }
        let velocity = ctx.sharing().share(self.opt.shared_velocity().clone());
        self.opt.adopt_shared(velocity, 0);
        ctx.set_timer(self.timeout(), HELLO);
        if matches!(self.stage, Step::Crashed) {
            self.stage = Step::Joining { asked: 1 };
            self.now.members = vec![ctx.rank()].into();
            self.ask_to_join(ctx);
            return;
        }
        self.begin_iteration(ctx);
    }

    fn on_message(&mut self, ctx: &mut dyn Context<SyncMsg>, from: usize, msg: SyncMsg) {
        match msg {
            SyncMsg::Chunk { .. } if !self.chunks.is_instant() => self.chunks.arrive(ctx, from, msg, SERVED),
            SyncMsg::Chunk { view, iter, bucket, round, data } => {
                self.on_chunk(ctx, (view, iter), (bucket, round), data)
            }
            SyncMsg::Grad { view, iter, ready, data } => self.on_grad(ctx, from, (view, iter), ready, data),
            SyncMsg::Params { view, iter, params } => {
                let current = view == self.now.view && iter > self.done;
                if current && self.probing.is_none() && !self.stage().awaits_state() {
                    self.adopt(ctx, params, iter);
                }
            }
            SyncMsg::Probe { epoch, done, view } => self.on_probe(ctx, from, epoch, (done, view)),
            SyncMsg::Join { epoch } => self.on_join(ctx, from, epoch),
            SyncMsg::State(state) => self.on_state(ctx, state),
        }
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<SyncMsg>, tag: u64) {
        match tag {
            HELLO => self.on_hello(ctx),
            WATCHDOG => self.on_watchdog(ctx),
            SERVED => {
                if let Some((_, SyncMsg::Chunk { view, iter, bucket, round, data })) = self.chunks.served(ctx, SERVED) {
                    self.on_chunk(ctx, (view, iter), (bucket, round), data);
                }
            }
            _ if tag >> 8 != self.gen => {} // a timer of an older iteration or probe
            _ => match tag & 0xff {
                PROBE_END => self.end_probe(ctx),
                ANALYTIC_DONE => self.analytic_done(ctx),
                BUCKET_READY => self.bucket_ready(ctx),
                _ => {}
            },
        }
    }

    fn on_gradient(&mut self, ctx: &mut dyn Context<SyncMsg>, job: JobId, grad: Vec<f32>, _loss: f64) {
        match &self.stage {
            Step::Computing(Gradient::Pending(j)) if *j == job => {
                let ready = match self.local.as_mut() {
                    // Local SGD: a local step; the round's change once its H steps are done.
                    Some(l) => {
                        if !l.step(&self.params, &grad) {
                            let next = l.model(&self.params).clone();
                            self.stage = Step::Computing(Gradient::Pending(ctx.start_gradient(next, self.batch)));
                            return;
                        }
                        l.change(&self.params)
                    }
                    None => grad,
                };
                self.stage = Step::Computing(Gradient::Ready(Arc::new(ready)));
                if self.probing.is_none() {
                    self.start_reduce(ctx);
                }
            }
            // The state of another member replaces these parameters: the gradient is given up.
            Step::AwaitingState(Gradient::Pending(j)) if *j == job => {
                self.stage = Step::AwaitingState(Gradient::Absent)
            }
            _ => {} // computed for parameters that have since been replaced
        }
    }

    fn on_crash(&mut self) {
        if let Some(l) = self.local.as_mut() {
            l.begin();
        }
        self.probing = None;
        self.stage = Step::Crashed;
        self.watchdog = membership::Watchdog::default();
        self.pending_state = None;
        self.collective.clear();
        self.chunks.clear();
        self.gathered.clear();
    }

    fn on_restart(&mut self, _ctx: &mut dyn Context<SyncMsg>) {
        self.done = 0;
        self.now.epoch = 0;
        self.now.view = 0;
        self.gen += 1;
    }

    fn view(&self) -> View<'_> {
        if self.stage().awaits_state() {
            View::Nothing
        } else {
            let model = self.local.as_ref().map_or(&self.params, |l| l.model(&self.params));
            View::Replica { params: (&model[..]).into(), weight: 1.0 }
        }
    }

    fn completed_iterations(&self) -> Option<u64> {
        Some(self.done)
    }

    fn audit(&self) -> Audit<'_> {
        let stage = match self.stage() {
            _ if self.probing.is_some() => "probing",
            Stage::Computing if self.local.is_some() => "local_steps",
            Stage::Computing => "computing",
            Stage::Reducing => "reducing",
            Stage::AwaitingState => "awaiting_state",
            Stage::Joining { .. } => "joining",
            Stage::Crashed => "crashed",
        };
        let agreed = (!self.stage().awaits_state()).then_some((
            self.now.view,
            &self.now.members[..],
            self.done,
            &self.params[..],
        ));
        Audit { role: "worker", stage: Some(stage), progress: [Some(self.done), None], agreed, push_sum: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_finds_its_index_among_any_members() {
        let cfg = SyncConfig::default();
        let mut w = SyncWorker::new(cfg, 1, OptimizerConfig::default(), 8);
        let lists: [&[usize]; 6] = [&[0, 1, 2, 3, 4, 5, 6, 7], &[0, 1, 3, 4], &[1, 2, 3], &[0, 2, 3], &[5], &[]];
        for members in lists {
            w.now.members = members.into();
            for rank in 0..9 {
                let linear = members.iter().position(|&m| m == rank);
                assert_eq!(w.me(rank), linear, "rank {rank} among {members:?}");
            }
        }
    }
}
