//! Asynchronous parameter-server SGD (Downpour, Dean et al. 2012), with optional bounded
//! staleness (SSP, Ho et al. 2013).
//!
//! The parameters are split into `shards` contiguous slices, one per server rank. A worker pulls
//! every slice, computes a gradient on what it got, and pushes each slice of the gradient to its
//! shard; the shard applies it at once with its own optimizer and answers the push with its fresh
//! slice (a push is also the next pull). The staleness of an applied gradient is the number of
//! updates the shard applied between the worker's read and the push. With `staleness_bound = s`,
//! a shard holds back its answer to a worker that is more than `s` pushes ahead of the slowest
//! live worker (a worker silent for `timeout_s` no longer counts as live).
//!
//! With `update_time_us > 0`, a shard is a single server that takes that long to apply each push
//! and answer it: pushes queue and are served one at a time, first come first served (the
//! measured cost of a real server's decode, update and encode, so the simulator can predict a
//! real run; a real run pays its own and refuses a modelled one).
//!
//! Staleness remedies (both off by default): `staleness_lr: "inverse"` divides the rate of a
//! gradient computed `τ` versions ago by `max(1, τ)` (Zhang, Gupta, Lian, Liu 2016);
//! `delay_compensation: λ > 0` applies `g + λ·g⊙g⊙(w − w_read)` instead of `g` (DC-ASGD, Zheng et
//! al. 2017), where `w_read` is the slice the shard last sent that worker (the shard keeps one per
//! worker) and `w` its slice now.
//!
//! Failures: a crashed worker is simply not heard from. A crashed shard keeps its parameters
//! (they are its durable state); workers waiting for it re-send their request every `timeout_s`
//! until it is back, so they stall exactly as long as it is down.

use crate::audit::Audit;
use crate::collectives::{chunk, slice_bytes};
use crate::optimizer::{OptimizerConfig, Sgd};
use crate::protocol::{Context, JobId, Phase, Protocol, View};
use crate::protocols::service::Service;
use dsgd_sim::{SimDuration, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;

/// Configuration of parameter-server SGD.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PsConfig {
    /// Number of server shards (default 1).
    pub shards: usize,
    /// Bounded staleness: how many pushes a worker may run ahead of the slowest (default none).
    pub staleness_bound: Option<u64>,
    /// Re-send and liveness timeout in seconds (default 5).
    pub timeout_s: f64,
    /// A shard's time to apply one push and answer it, microseconds (default 0: at once).
    #[serde(skip_serializing_if = "crate::protocols::service::is_instant")]
    pub update_time_us: f64,
    /// The learning rate of a stale gradient (default `none`: the same rate at any staleness).
    #[serde(skip_serializing_if = "StalenessLr::is_none")]
    pub staleness_lr: StalenessLr,
    /// DC-ASGD's λ ≥ 0 (default 0: no compensation).
    #[serde(skip_serializing_if = "is_zero")]
    pub delay_compensation: f64,
}

/// How a shard scales the learning rate of a gradient computed `τ` versions ago.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StalenessLr {
    /// The same rate whatever the staleness.
    #[default]
    None,
    /// `η / max(1, τ)`.
    Inverse,
}

impl StalenessLr {
    fn is_none(&self) -> bool {
        *self == StalenessLr::None
    }

    /// The factor of the rate of a gradient `staleness` versions old.
    pub fn factor(self, staleness: u64) -> f64 {
        match self {
            StalenessLr::None => 1.0,
            StalenessLr::Inverse => 1.0 / staleness.max(1) as f64,
        }
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Default for PsConfig {
    fn default() -> Self {
        PsConfig {
            shards: 1,
            staleness_bound: None,
            timeout_s: super::DEFAULT_TIMEOUT_S,
            update_time_us: 0.0,
            staleness_lr: StalenessLr::None,
            delay_compensation: 0.0,
        }
    }
}

/// Messages of parameter-server SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum PsMsg {
    /// Ask for the shard's slice.
    Pull,
    /// A gradient slice computed on version `read` of the shard; also asks for the new slice.
    Push {
        /// The shard version the gradient was computed on.
        read: u64,
        /// The slice of the gradient.
        #[serde(with = "crate::wire::pod")]
        grad: Vec<f32>,
    },
    /// The shard's slice at `version`.
    Params {
        /// Which shard.
        shard: usize,
        /// Its version (updates applied).
        version: u64,
        /// Values.
        #[serde(with = "crate::wire::pod")]
        params: Vec<f32>,
    },
}

const RESEND: u64 = 1;
const RELEASE: u64 = 2;
const SERVED: u64 = 3;

/// A parameter-server rank holding one shard.
pub struct Shard {
    index: usize,
    shards: usize,
    workers: usize,
    cfg: PsConfig,
    opt_cfg: OptimizerConfig,
    range: Range<usize>,
    params: Vec<f32>,
    opt: Option<Sgd>,
    version: u64,
    clock: Vec<u64>,
    /// `(clock, worker)` of every worker, slowest first: the slowest live worker is found
    /// without a scan of all of them at each push (a scan made 6,275 workers' SSP quadratic).
    by_clock: BTreeSet<(u64, usize)>,
    last_heard: Vec<SimTime>,
    held: BTreeMap<usize, ()>,
    /// Pushes waiting for the server (when `update_time_us > 0`).
    queue: Service<PsMsg>,
    /// With delay compensation: the slice last sent to each worker (what its gradient read).
    sent: Vec<Vec<f32>>,
}

impl Shard {
    /// Shard `index` of `shards`, serving `workers` workers (ranks `0..workers`).
    pub fn new(index: usize, shards: usize, workers: usize, cfg: PsConfig, opt: OptimizerConfig) -> Self {
        Shard {
            index,
            shards,
            workers,
            cfg,
            opt_cfg: opt,
            range: 0..0,
            params: Vec::new(),
            opt: None,
            version: 0,
            clock: vec![0; workers],
            by_clock: (0..workers).map(|w| (0, w)).collect(),
            last_heard: vec![SimTime::ZERO; workers],
            held: BTreeMap::new(),
            queue: Service::new(cfg.update_time_us),
            sent: Vec::new(),
        }
    }
    /// Updates applied.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether worker `w` is at most `staleness_bound` pushes ahead of the slowest live worker
    /// (itself counted, live or not): the first live worker in clock order is the slowest.
    fn may_answer(&self, now: SimTime, w: usize) -> bool {
        let Some(s) = self.cfg.staleness_bound else { return true };
        let timeout = SimDuration::from_secs_f64(self.cfg.timeout_s);
        let slowest =
            self.by_clock.iter().find(|&&(_, v)| v == w || now.saturating_since(self.last_heard[v]) < timeout);
        slowest.is_none_or(|&(c, _)| self.clock[w] <= c + s)
    }

    fn answer(&mut self, ctx: &mut dyn Context<PsMsg>, w: usize) {
        if self.cfg.delay_compensation > 0.0 {
            self.sent.resize(self.workers, Vec::new());
            self.sent[w].clone_from(&self.params);
        }
        let msg = PsMsg::Params { shard: self.index, version: self.version, params: self.params.clone() };
        let bytes = slice_bytes(ctx.workload(), self.range.len());
        ctx.send(w, msg, bytes);
    }

    /// Applies a push (if `msg` is one) and answers it, or holds the answer back.
    fn serve(&mut self, ctx: &mut dyn Context<PsMsg>, from: usize, msg: PsMsg) {
        if let PsMsg::Push { read, mut grad } = msg {
            let staleness = self.version - read.min(self.version);
            let lambda = self.cfg.delay_compensation as f32;
            if let Some(read_params) = self.sent.get(from).filter(|r| lambda > 0.0 && r.len() == grad.len()) {
                // DC-ASGD: g + λ·g⊙g⊙(w − w_read).
                for ((g, w), r) in grad.iter_mut().zip(&self.params).zip(read_params) {
                    *g += lambda * *g * *g * (w - r);
                }
            }
            let opt = self.opt.as_mut().expect("started");
            opt.apply_scaled(&mut self.params, &grad, self.cfg.staleness_lr.factor(staleness));
            self.version += 1;
            self.by_clock.remove(&(self.clock[from], from));
            self.clock[from] += 1;
            self.by_clock.insert((self.clock[from], from));
            if self.index == 0 {
                ctx.record_update(staleness);
            }
        }
        let was_held = !self.held.is_empty();
        if self.may_answer(ctx.now(), from) {
            self.answer(ctx, from);
        } else {
            self.held.insert(from, ());
            if !was_held {
                ctx.set_timer(SimDuration::from_secs_f64(self.cfg.timeout_s), RELEASE);
            }
        }
        if was_held {
            self.release(ctx);
        }
    }

    fn release(&mut self, ctx: &mut dyn Context<PsMsg>) {
        let now = ctx.now();
        let ready: Vec<usize> = self.held.keys().copied().filter(|&w| self.may_answer(now, w)).collect();
        for w in ready {
            self.held.remove(&w);
            self.answer(ctx, w);
        }
        if !self.held.is_empty() {
            ctx.set_timer(SimDuration::from_secs_f64(self.cfg.timeout_s), RELEASE);
        }
    }
}

impl Protocol for Shard {
    type Msg = PsMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<PsMsg>) {
        if self.opt.is_some() {
            return; // restarted: the shard's parameters and version survived
        }
        let w = ctx.workload();
        self.range = chunk(w.param_count(), self.shards, self.index);
        let init = w.init();
        self.params = if init.is_empty() { Vec::new() } else { init[self.range.clone()].to_vec() };
        self.opt = Some(Sgd::new(self.opt_cfg, self.params.len(), self.workers));
        ctx.set_phase(Phase::Idle);
    }

    fn on_message(&mut self, ctx: &mut dyn Context<PsMsg>, from: usize, msg: PsMsg) {
        self.last_heard[from] = ctx.now();
        if !self.queue.is_instant() && matches!(msg, PsMsg::Push { .. }) {
            self.queue.arrive(ctx, from, msg, SERVED);
            return;
        }
        self.serve(ctx, from, msg);
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<PsMsg>, tag: u64) {
        if tag == RELEASE {
            self.release(ctx);
        }
        if tag == SERVED {
            if let Some((from, msg)) = self.queue.served(ctx, SERVED) {
                self.serve(ctx, from, msg);
            }
        }
    }

    fn on_gradient(&mut self, _ctx: &mut dyn Context<PsMsg>, _job: JobId, _grad: Vec<f32>, _loss: f64) {}

    fn on_crash(&mut self) {
        self.held.clear(); // pending answers are lost with the process; parameters are kept
        self.queue.clear();
    }

    fn on_restart(&mut self, ctx: &mut dyn Context<PsMsg>) {
        ctx.note(format!("shard {} back at version {}", self.index, self.version));
    }

    fn view(&self) -> View<'_> {
        View::Shard { offset: self.range.start, params: &self.params }
    }

    fn audit(&self) -> Audit<'_> {
        Audit { role: "shard", progress: [Some(self.version), None], ..Audit::default() }
    }
}

/// A parameter-server worker (ranks `0..workers`; shards are ranks `workers..`).
pub struct PsWorker {
    workers: usize,
    shards: usize,
    batch: usize,
    cfg: PsConfig,
    params: Vec<f32>,
    versions: Vec<Option<u64>>,
    job: Option<JobId>,
    read: Vec<u64>,
    gen: u64,
}

impl PsWorker {
    /// A worker among `workers`, with `shards` shards.
    pub fn new(workers: usize, shards: usize, batch: usize, cfg: PsConfig) -> Self {
        PsWorker {
            workers,
            shards,
            batch,
            cfg,
            params: Vec::new(),
            versions: vec![None; shards],
            job: None,
            read: vec![],
            gen: 0,
        }
    }

    fn shard_rank(&self, s: usize) -> usize {
        self.workers + s
    }

    fn arm(&mut self, ctx: &mut dyn Context<PsMsg>) {
        self.gen += 1;
        ctx.set_timer(SimDuration::from_secs_f64(self.cfg.timeout_s), RESEND | self.gen << 8);
    }
}

impl Protocol for PsWorker {
    type Msg = PsMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<PsMsg>) {
        self.params = ctx.workload().init();
        self.versions = vec![None; self.shards];
        for s in 0..self.shards {
            ctx.send(self.shard_rank(s), PsMsg::Pull, 64);
        }
        ctx.set_phase(Phase::Communicating);
        self.arm(ctx);
    }

    fn on_message(&mut self, ctx: &mut dyn Context<PsMsg>, _from: usize, msg: PsMsg) {
        let PsMsg::Params { shard, version, params } = msg else { return };
        if self.job.is_some() || self.versions[shard].is_some() {
            return; // a duplicate answer to a re-sent request
        }
        if !params.is_empty() {
            if self.shards == 1 {
                self.params = params; // the whole model: kept as it came, not copied
            } else {
                let dim = ctx.workload().param_count();
                if self.params.len() != dim {
                    // Every shard is written before the gradient starts, so zeros are never read.
                    self.params = vec![0.0; dim];
                }
                self.params[chunk(dim, self.shards, shard)].copy_from_slice(&params);
            }
        }
        self.versions[shard] = Some(version);
        if self.versions.iter().all(Option::is_some) {
            self.read = self.versions.iter().map(|v| v.expect("all present")).collect();
            self.gen += 1; // cancel the re-send timer
            let params = std::mem::take(&mut self.params); // the worker keeps no model between gradients
            self.job = Some(ctx.start_gradient(Arc::new(params), self.batch));
        }
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<PsMsg>, tag: u64) {
        if tag >> 8 != self.gen || tag & 0xff != RESEND {
            return;
        }
        let missing: Vec<usize> = (0..self.shards).filter(|&s| self.versions[s].is_none()).collect();
        ctx.note(format!("no answer from shards {missing:?}: asking again"));
        for s in missing {
            ctx.send(self.shard_rank(s), PsMsg::Pull, 64);
        }
        self.arm(ctx);
    }

    fn on_gradient(&mut self, ctx: &mut dyn Context<PsMsg>, job: JobId, mut grad: Vec<f32>, _loss: f64) {
        if self.job != Some(job) {
            return;
        }
        self.job = None;
        let dim = ctx.workload().param_count();
        for s in 0..self.shards {
            let r = chunk(dim, self.shards, s);
            let slice = if grad.is_empty() {
                Vec::new()
            } else if self.shards == 1 {
                std::mem::take(&mut grad) // one shard: the gradient goes whole, not copied
            } else {
                grad[r.clone()].to_vec()
            };
            let bytes = slice_bytes(ctx.workload(), r.len());
            ctx.send(self.shard_rank(s), PsMsg::Push { read: self.read[s], grad: slice }, bytes);
            self.versions[s] = None;
        }
        ctx.set_phase(Phase::Communicating);
        self.arm(ctx);
    }

    fn on_crash(&mut self) {
        self.job = None;
    }

    fn on_restart(&mut self, _ctx: &mut dyn Context<PsMsg>) {}

    fn view(&self) -> View<'_> {
        View::Nothing
    }

    fn audit(&self) -> Audit<'_> {
        let stage = if self.job.is_some() { "computing" } else { "pulling_or_pushing" };
        Audit { role: "worker", stage: Some(stage), ..Audit::default() }
    }
}

/// One rank of this algorithm's run: a worker or a server.
pub type PsRole = crate::protocol::Role<PsWorker, Shard>;
