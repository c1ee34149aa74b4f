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

use crate::collectives::{self, analytic::CostModel, CollectiveKind, Groups, Outgoing, Run, Schedule};
use crate::optimizer::{OptimizerConfig, Sgd};
use crate::protocol::{Context, JobId, Phase, Protocol, View};
use dsgd_sim::{NetworkConfig, SimDuration, SimTime, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
        SyncConfig { collective: CollectiveKind::Ring, backup_workers: 0, timeout_s: 5.0, cost: None, group_size: None }
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
        /// Round of the collective.
        round: u32,
        /// Values.
        data: Vec<f32>,
    },
    /// A gradient for the analytic all-reduce or for the backup-worker aggregator.
    Grad {
        /// Membership view (see [`view_id`]).
        view: u64,
        /// Iteration.
        iter: u64,
        /// When the sender's gradient was ready.
        ready: SimTime,
        /// Values.
        data: Vec<f32>,
    },
    /// New parameters from the backup-worker aggregator; `iter` iterations are now done.
    Params {
        /// Membership view (see [`view_id`]).
        view: u64,
        /// Completed iterations.
        iter: u64,
        /// Values.
        params: Vec<f32>,
    },
    /// "I am alive in epoch `epoch` with `done` iterations completed."
    Probe {
        /// The proposed epoch.
        epoch: u32,
        /// Completed iterations of the sender.
        done: u64,
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
    /// Completed iterations.
    pub done: u64,
    /// Parameters.
    pub params: Vec<f32>,
    /// Momentum buffer.
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
const SMALL: u64 = 64;

/// A gradient received for (epoch, iteration): sender, when it was ready, values.
type Contribution = (usize, SimTime, Vec<f32>);

struct Probing {
    epoch: u32,
    responders: BTreeMap<usize, u64>,
}

/// A synchronous-SGD worker.
pub struct SyncWorker {
    cfg: SyncConfig,
    batch: usize,
    opt_cfg: OptimizerConfig,
    params: Vec<f32>,
    opt: Sgd,
    /// The current membership: at the start one list shared by every worker, so n workers hold
    /// one n-long list, not n of them.
    members: Arc<[usize]>,
    epoch: u32,
    view: u64,
    done: u64,
    grad: Option<Vec<f32>>,
    job: Option<JobId>,
    run: Option<Run>,
    reducing: bool,
    chunks: BTreeMap<(u64, u64, u32), Vec<f32>>,
    grads: BTreeMap<(u64, u64), Vec<Contribution>>,
    iter_start: SimTime,
    gen: u64,
    watchdog_armed: bool,
    progress: SimTime,
    schedule: Option<(u64, Schedule)>,
    probing: Option<Probing>,
    awaiting_state: bool,
    pending_state: Option<Box<StateMsg>>,
    restarted: bool,
    joining: u32,
    /// The collective's messages of one poll (kept to reuse its allocation).
    outbox: Vec<Outgoing>,
    /// The hierarchical collective's groups of a view (at the start one list shared by all).
    groups: Option<(u64, Arc<Groups>)>,
}

/// The initial membership, shared by every worker.
#[derive(Clone, Debug)]
pub struct Initial {
    members: Arc<[usize]>,
    view: u64,
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
        Initial { members, view, groups }
    }

    /// A worker of the initial membership from [`SyncWorker::initial`], shared by all workers.
    pub fn with_members(cfg: SyncConfig, batch: usize, opt: OptimizerConfig, initial: &Initial) -> Self {
        let Initial { members, view, groups } = initial.clone();
        SyncWorker {
            cfg,
            batch,
            groups,
            opt_cfg: opt,
            params: Vec::new(),
            opt: Sgd::new(opt, 0, members.len()),
            members,
            epoch: 0,
            view,
            done: 0,
            grad: None,
            job: None,
            run: None,
            reducing: false,
            chunks: BTreeMap::new(),
            grads: BTreeMap::new(),
            iter_start: SimTime::ZERO,
            gen: 0,
            watchdog_armed: false,
            progress: SimTime::ZERO,
            schedule: None,
            probing: None,
            awaiting_state: false,
            pending_state: None,
            restarted: false,
            joining: 0,
            outbox: Vec::new(),
        }
    }

    /// Completed iterations.
    pub fn iterations(&self) -> u64 {
        self.done
    }
    /// The current membership.
    pub fn members(&self) -> &[usize] {
        &self.members
    }
    /// The parameters.
    pub fn params(&self) -> &[f32] {
        &self.params
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
    /// Notes progress. One watchdog timer stays armed while the node waits for others; when it
    /// fires it re-arms itself for `timeout` after the last progress, so progress costs no timer
    /// operation.
    fn arm_watchdog(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        self.progress = ctx.now();
        if !self.watchdog_armed {
            self.watchdog_armed = true;
            ctx.set_timer(self.timeout(), WATCHDOG);
        }
    }
    fn waiting(&self) -> bool {
        self.probing.is_none() && (self.reducing || self.awaiting_state)
    }
    fn me(&self, rank: usize) -> Option<usize> {
        self.members.iter().position(|&m| m == rank)
    }
    /// The current members in the hierarchical collectives' groups, built once a view (at the
    /// start, one list shared by all workers).
    fn groups(&mut self) -> Arc<Groups> {
        match &self.groups {
            Some((view, g)) if *view == self.view => g.clone(),
            _ => {
                let size = self.cfg.group_size.unwrap_or(self.members.len());
                let g = Arc::new(Groups::of_ranks(&self.members, size));
                self.groups = Some((self.view, g.clone()));
                g
            }
        }
    }
    fn aggregator(&self) -> usize {
        self.members[0]
    }
    /// The member that records iterations: one that has the result last. In a binomial tree the
    /// root is done as soon as it has *sent* the broadcast, while every odd member receives it in
    /// the last round, so member 1 records there; elsewhere every member finishes together and
    /// member 0 records.
    fn recorder(&self) -> usize {
        if self.cfg.collective == CollectiveKind::Tree && self.cfg.backup_workers == 0 && self.members.len() > 1 {
            self.members[1]
        } else {
            self.members[0]
        }
    }

    fn begin_iteration(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        self.iter_start = ctx.now();
        self.grad = None;
        self.reducing = false;
        self.job = Some(ctx.start_gradient(self.params.clone(), self.batch));
    }

    fn start_reduce(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let grad = self.grad.clone().expect("a gradient is ready");
        let rank = ctx.rank();
        let Some(me) = self.me(rank) else { return };
        self.reducing = true;
        ctx.set_phase(Phase::Communicating);
        self.arm_watchdog(ctx);
        let key = (self.view, self.done);
        if self.cfg.backup_workers > 0 || self.cfg.collective.is_analytic() {
            let now = ctx.now();
            if self.cfg.backup_workers > 0 {
                if rank != self.aggregator() {
                    let msg = SyncMsg::Grad { view: key.0, iter: key.1, ready: now, data: grad };
                    ctx.send(self.aggregator(), msg, Self::bytes(ctx));
                    return;
                }
            } else {
                for &m in self.members.iter().filter(|&&m| m != rank) {
                    let msg = SyncMsg::Grad { view: key.0, iter: key.1, ready: now, data: grad.clone() };
                    ctx.send(m, msg, 0);
                }
            }
            self.grads.entry(key).or_default().push((rank, now, grad));
            self.check_gathered(ctx);
            return;
        }
        let wire = collectives::wire_params(ctx.workload());
        let steps = match &self.schedule {
            Some((view, steps)) if *view == self.view => steps.clone(),
            _ => {
                let steps = if self.cfg.collective == CollectiveKind::Hierarchical {
                    Schedule::hierarchical(self.groups(), me, wire)
                } else {
                    Schedule::new(self.cfg.collective, self.members.len(), me, wire)
                };
                self.schedule = Some((self.view, steps.clone()));
                steps
            }
        };
        let mut run = Run::new(steps, grad, wire);
        let early: Vec<(u32, Vec<f32>)> =
            self.chunks.range((key.0, key.1, 0)..=(key.0, key.1, u32::MAX)).map(|(k, v)| (k.2, v.clone())).collect();
        self.chunks.retain(|k, _| (k.0, k.1) > key);
        for (round, data) in early {
            run.deliver(round, data);
        }
        self.run = Some(run);
        self.poll_run(ctx);
    }

    fn poll_run(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let Some(run) = self.run.as_mut() else { return };
        let mut out = std::mem::take(&mut self.outbox);
        let finished = run.poll(&mut out);
        for o in out.drain(..) {
            let bytes = 4 * o.range.len() as u64;
            let msg = SyncMsg::Chunk { view: self.view, iter: self.done, round: o.round, data: o.data };
            ctx.send(self.members[o.to], msg, bytes);
        }
        self.outbox = out;
        if finished {
            let sum = self.run.take().expect("running").into_result();
            let p = self.members.len();
            self.finish(ctx, sum, p);
        }
    }

    /// Analytic all-reduce and backup aggregation: act once enough gradients are in.
    fn check_gathered(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        if !self.reducing {
            return;
        }
        let key = (self.view, self.done);
        let have = self.grads.get(&key).map_or(0, Vec::len);
        let p = self.members.len();
        if self.cfg.backup_workers > 0 {
            let need = p.saturating_sub(self.cfg.backup_workers).max(1);
            if have < need || ctx.rank() != self.aggregator() {
                return;
            }
            let got = self.grads.remove(&key).expect("present");
            let dropped = got.len() - need;
            let sum = sum_in_order(got.into_iter().take(need).map(|(_, _, g)| g));
            if dropped > 0 {
                ctx.note(format!("iteration {}: dropped {dropped} late gradients", self.done));
            }
            self.finish(ctx, sum, need);
        } else if have == p {
            let got = &self.grads[&key];
            let last = got.iter().map(|g| g.1).max().expect("non-empty");
            let cost = self.cfg.cost.expect("analytic mode has a cost model");
            let took = if self.cfg.collective == CollectiveKind::AnalyticHierarchical {
                cost.hierarchical(&self.groups(), Self::bytes(ctx))
            } else {
                cost.ring(p, Self::bytes(ctx))
            };
            let at = last + took;
            let tag = self.tag(ANALYTIC_DONE);
            ctx.set_timer(at.saturating_since(ctx.now()), tag);
        }
    }

    fn finish(&mut self, ctx: &mut dyn Context<SyncMsg>, mut sum: Vec<f32>, contributors: usize) {
        let scale = 1.0 / contributors as f32;
        sum.iter_mut().for_each(|x| *x *= scale);
        self.opt.apply(&mut self.params, &sum);
        self.done += 1;
        self.invalidate();
        let rank = ctx.rank();
        if rank == self.recorder() {
            ctx.record_update(0);
            ctx.record_iteration(ctx.now() - self.iter_start);
        }
        if self.cfg.backup_workers > 0 && rank == self.aggregator() {
            for &m in self.members.iter().filter(|&&m| m != rank) {
                let msg = SyncMsg::Params { view: self.view, iter: self.done, params: self.params.clone() };
                ctx.send(m, msg, Self::bytes(ctx));
            }
        }
        self.grads.retain(|k, _| k.0 >= self.view && k.1 >= self.done);
        self.begin_iteration(ctx);
    }

    fn start_probe(&mut self, ctx: &mut dyn Context<SyncMsg>, epoch: u32) {
        self.run = None;
        self.reducing = false;
        self.invalidate();
        let rank = ctx.rank();
        self.probing = Some(Probing { epoch, responders: [(rank, self.done)].into_iter().collect() });
        for r in (0..ctx.ranks()).filter(|&r| r != rank) {
            ctx.send(r, SyncMsg::Probe { epoch, done: self.done }, SMALL);
        }
        ctx.set_phase(Phase::Communicating);
        let tag = self.tag(PROBE_END);
        ctx.set_timer(self.timeout().mul_f64(0.5), tag);
    }

    fn end_probe(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let Some(p) = self.probing.take() else { return };
        self.gen += 1;
        let rank = ctx.rank();
        self.epoch = p.epoch;
        self.members = p.responders.keys().copied().collect::<Vec<_>>().into();
        self.view = view_id(self.epoch, &self.members);
        self.chunks.retain(|k, _| k.0 >= self.view);
        self.grads.retain(|k, _| k.0 >= self.view);
        let max_done = p.responders.values().copied().max().expect("self responded");
        self.joining = 0;
        self.awaiting_state = false;
        ctx.note(format!("epoch {}: members {:?} at iteration {max_done}", self.epoch, self.members));
        let donor = p.responders.iter().find(|(_, &d)| d == max_done).map(|(&r, _)| r).expect("max exists");
        if donor != rank {
            // Everyone adopts the donor's state, so replicas are bit-identical after any
            // membership change (two halves of a healed partition may have equal counts but
            // different parameters).
            self.awaiting_state = true;
            self.arm_watchdog(ctx);
            if let Some(state) = self.pending_state.take() {
                self.on_state(ctx, state);
            }
            return;
        }
        {
            for (&m, _) in p.responders.iter().filter(|(&m, _)| m != rank) {
                let msg = SyncMsg::State(Box::new(StateMsg {
                    epoch: self.epoch,
                    done: self.done,
                    params: self.params.clone(),
                    velocity: self.opt.velocity().to_vec(),
                    steps: self.opt.steps(),
                }));
                ctx.send(m, msg, 2 * Self::bytes(ctx));
            }
        }
        if self.grad.is_some() {
            self.start_reduce(ctx);
        } else if self.job.is_none() {
            self.begin_iteration(ctx);
        }
    }

    fn ask_to_join(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let rank = ctx.rank();
        for r in (0..ctx.ranks()).filter(|&r| r != rank) {
            ctx.send(r, SyncMsg::Join { epoch: self.epoch }, SMALL);
        }
        ctx.set_phase(Phase::Communicating);
        self.arm_watchdog(ctx);
    }

    fn on_state(&mut self, ctx: &mut dyn Context<SyncMsg>, msg: Box<StateMsg>) {
        if msg.epoch > self.epoch || self.probing.is_some() {
            self.pending_state = Some(msg);
            return;
        }
        let StateMsg { epoch, done, params, velocity, steps } = *msg;
        if epoch < self.epoch || !self.awaiting_state {
            return;
        }
        self.awaiting_state = false;
        self.params = params;
        self.opt.adopt(&velocity, steps);
        self.done = done;
        self.invalidate();
        self.begin_iteration(ctx);
    }
}

/// Sums vectors in the given order (empty vectors stay empty: timing-only workloads).
fn sum_in_order(mut vs: impl Iterator<Item = Vec<f32>>) -> Vec<f32> {
    let mut acc = vs.next().unwrap_or_default();
    for v in vs {
        acc.iter_mut().zip(&v).for_each(|(a, b)| *a += b);
    }
    acc
}

impl Protocol for SyncWorker {
    type Msg = SyncMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        self.params = ctx.workload().init();
        self.opt = Sgd::new(self.opt_cfg, self.params.len(), ctx.ranks());
        ctx.set_timer(self.timeout(), HELLO);
        if self.restarted {
            self.restarted = false;
            self.awaiting_state = true;
            self.joining = 1;
            self.members = vec![ctx.rank()].into();
            self.ask_to_join(ctx);
            return;
        }
        self.begin_iteration(ctx);
    }

    fn on_message(&mut self, ctx: &mut dyn Context<SyncMsg>, from: usize, msg: SyncMsg) {
        match msg {
            SyncMsg::Chunk { view, iter, round, data } => {
                if (view, iter) < (self.view, self.done) {
                    return;
                }
                if (view, iter) == (self.view, self.done) && self.probing.is_none() {
                    if let Some(run) = self.run.as_mut() {
                        run.deliver(round, data);
                        self.arm_watchdog(ctx);
                        self.poll_run(ctx);
                        return;
                    }
                }
                self.chunks.insert((view, iter, round), data);
            }
            SyncMsg::Grad { view, iter, ready, data } => {
                if (view, iter) < (self.view, self.done) {
                    return;
                }
                self.grads.entry((view, iter)).or_default().push((from, ready, data));
                if self.probing.is_none() {
                    self.check_gathered(ctx);
                }
            }
            SyncMsg::Params { view, iter, params } => {
                if view == self.view && iter > self.done && self.probing.is_none() && !self.awaiting_state {
                    self.params = params;
                    self.done = iter;
                    self.invalidate();
                    self.begin_iteration(ctx);
                }
            }
            SyncMsg::Probe { epoch, done } => {
                let current = self.probing.as_ref().map_or(self.epoch, |p| p.epoch);
                if epoch > current {
                    self.start_probe(ctx, epoch);
                } else if self.probing.is_none() && !self.members.contains(&from) {
                    // A prober from another group (a healed partition): merge in a newer epoch.
                    self.start_probe(ctx, self.epoch.max(epoch) + 1);
                }
                if let Some(p) = self.probing.as_mut().filter(|p| p.epoch == epoch) {
                    p.responders.insert(from, done);
                }
            }
            SyncMsg::Join { epoch } => match &self.probing {
                Some(p) => {
                    let probe = SyncMsg::Probe { epoch: p.epoch, done: self.done };
                    ctx.send(from, probe, SMALL);
                }
                None if self.joining == 0 => {
                    ctx.note(format!("rank {from} (epoch {epoch}) joins"));
                    self.start_probe(ctx, self.epoch.max(epoch) + 1);
                }
                None => {}
            },
            SyncMsg::State(state) => self.on_state(ctx, state),
        }
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<SyncMsg>, tag: u64) {
        if tag == HELLO {
            ctx.set_timer(self.timeout(), HELLO);
            let rank = ctx.rank();
            if self.probing.is_none() && self.joining == 0 && self.members[0] == rank {
                for r in (0..ctx.ranks()).filter(|r| !self.members.contains(r)) {
                    ctx.send(r, SyncMsg::Join { epoch: self.epoch }, SMALL);
                }
            }
            return;
        }
        if tag == WATCHDOG {
            self.watchdog_armed = false;
            if !self.waiting() {
                return;
            }
            let quiet = ctx.now().saturating_since(self.progress);
            if quiet < self.timeout() {
                self.watchdog_armed = true;
                ctx.set_timer(SimDuration(self.timeout().as_nanos() - quiet.as_nanos()), WATCHDOG);
            } else if self.joining > 0 && self.joining < 3 {
                self.joining += 1;
                self.ask_to_join(ctx);
            } else {
                ctx.note(format!("timeout in iteration {} (epoch {})", self.done, self.epoch));
                self.start_probe(ctx, self.epoch + 1);
            }
            return;
        }
        if tag >> 8 != self.gen {
            return;
        }
        match tag & 0xff {
            PROBE_END => self.end_probe(ctx),
            ANALYTIC_DONE => {
                let got = self.grads.remove(&(self.view, self.done)).unwrap_or_default();
                let mut got = got;
                got.sort_by_key(|g| g.0);
                let p = got.len();
                self.finish(ctx, sum_in_order(got.into_iter().map(|g| g.2)), p);
            }
            _ => {}
        }
    }

    fn on_gradient(&mut self, ctx: &mut dyn Context<SyncMsg>, job: JobId, grad: Vec<f32>, _loss: f64) {
        if self.job != Some(job) {
            return; // computed for parameters that have since been replaced
        }
        self.job = None;
        if self.awaiting_state {
            return;
        }
        self.grad = Some(grad);
        if self.probing.is_none() {
            self.start_reduce(ctx);
        }
    }

    fn on_crash(&mut self) {
        self.run = None;
        self.job = None;
        self.grad = None;
        self.probing = None;
        self.reducing = false;
        self.watchdog_armed = false;
        self.pending_state = None;
        self.chunks.clear();
        self.grads.clear();
        self.restarted = true;
    }

    fn on_restart(&mut self, _ctx: &mut dyn Context<SyncMsg>) {
        self.done = 0;
        self.epoch = 0;
        self.view = 0;
        self.gen += 1;
    }

    fn view(&self) -> View<'_> {
        if self.awaiting_state {
            View::Nothing
        } else {
            View::Replica { params: (&self.params[..]).into(), weight: 1.0 }
        }
    }

    fn completed_iterations(&self) -> Option<u64> {
        Some(self.done)
    }
}
