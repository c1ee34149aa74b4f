//! Asynchronous elastic averaging SGD (Zhang, Choromanska, LeCun 2015).
//!
//! Each worker runs local SGD; every `tau` local steps it sends its parameters `x_i` to the
//! centre server, which computes `diff = alpha·(x_i - c)`, moves the centre `c += diff` and sends
//! `diff` back; the worker then sets `x_i -= diff` and carries on (it waits for the answer, as in
//! the paper's asynchronous algorithm). `alpha` defaults to `beta / workers` with `beta = 0.9`.
//!
//! Failures: a worker whose exchange goes unanswered for `timeout_s` skips it and goes on with
//! local steps. A crashed centre keeps its variable. A restarted worker first fetches the centre
//! and starts from it.

use crate::audit::Audit;
use crate::optimizer::{OptimizerConfig, Sgd};
use crate::protocol::{Context, JobId, Phase, Protocol, View};
use crate::protocols::service::Service;
use dsgd_sim::SimDuration;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Configuration of EASGD.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EasgdConfig {
    /// Local steps between exchanges with the centre (default 4).
    pub tau: u64,
    /// Moving rate; default `beta / workers`.
    pub alpha: Option<f64>,
    /// Used for the default `alpha` (default 0.9).
    pub beta: f64,
    /// Exchange timeout in seconds (default 5).
    pub timeout_s: f64,
    /// The centre's time to handle one exchange, microseconds (default 0: at once); exchanges
    /// queue behind it (see [`crate::protocols::service`]).
    #[serde(skip_serializing_if = "crate::protocols::service::is_instant")]
    pub update_time_us: f64,
}

impl Default for EasgdConfig {
    fn default() -> Self {
        EasgdConfig { tau: 4, alpha: None, beta: 0.9, timeout_s: super::DEFAULT_TIMEOUT_S, update_time_us: 0.0 }
    }
}

impl EasgdConfig {
    /// The moving rate for `workers` workers.
    pub fn alpha_for(&self, workers: usize) -> f64 {
        self.alpha.unwrap_or(self.beta / workers as f64)
    }
}

/// Messages of EASGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EasgdMsg {
    /// A worker's parameters for an elastic exchange.
    Exchange {
        /// The worker's parameters.
        #[serde(with = "crate::wire::pod")]
        x: Vec<f32>,
    },
    /// The centre's answer: the elastic difference.
    Diff {
        /// `alpha·(x - c)`.
        #[serde(with = "crate::wire::pod")]
        diff: Vec<f32>,
    },
    /// A restarted worker asks for the centre.
    Fetch,
    /// The centre variable.
    Centre {
        /// Its values.
        #[serde(with = "crate::wire::pod")]
        c: Vec<f32>,
    },
}

const TIMEOUT: u64 = 1;

/// Where an EASGD worker is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Not started yet.
    Idle,
    /// Computing the gradient of this job.
    Computing(JobId),
    /// Waiting for the centre's answer to an exchange (or, after a restart, to a fetch).
    Exchanging,
    /// Crashed: the next start fetches the centre.
    Crashed,
}

/// An EASGD worker.
pub struct EasgdWorker {
    cfg: EasgdConfig,
    batch: usize,
    opt_cfg: OptimizerConfig,
    centre: usize,
    /// The replica, shared with the gradient job that reads it (copied on write).
    x: Arc<Vec<f32>>,
    opt: Sgd,
    steps: u64,
    stage: Stage,
    /// Generation of the exchange timers: a timer of an older exchange is void.
    gen: u64,
}

impl EasgdWorker {
    /// A worker; the centre is rank `centre`.
    pub fn new(cfg: EasgdConfig, batch: usize, opt: OptimizerConfig, centre: usize) -> Self {
        EasgdWorker {
            cfg,
            batch,
            opt_cfg: opt,
            centre,
            x: Arc::default(),
            opt: Sgd::new(opt, 0, 1),
            steps: 0,
            stage: Stage::Idle,
            gen: 0,
        }
    }

    fn compute(&mut self, ctx: &mut dyn Context<EasgdMsg>) {
        self.stage = Stage::Computing(ctx.start_gradient(self.x.clone(), self.batch));
    }

    fn wait_for_centre(&mut self, ctx: &mut dyn Context<EasgdMsg>, msg: EasgdMsg, bytes: u64) {
        self.stage = Stage::Exchanging;
        ctx.send(self.centre, msg, bytes);
        ctx.set_phase(Phase::Communicating);
        self.gen += 1;
        ctx.set_timer(SimDuration::from_secs_f64(self.cfg.timeout_s), TIMEOUT | self.gen << 8);
    }

    fn resume(&mut self, ctx: &mut dyn Context<EasgdMsg>) {
        self.gen += 1;
        self.compute(ctx);
    }
}

impl Protocol for EasgdWorker {
    type Msg = EasgdMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<EasgdMsg>) {
        self.x = Arc::new(ctx.workload().init());
        self.opt = Sgd::new(self.opt_cfg, self.x.len(), 1);
        if self.stage == Stage::Crashed {
            self.wait_for_centre(ctx, EasgdMsg::Fetch, 64);
        } else {
            self.compute(ctx);
        }
    }

    fn on_message(&mut self, ctx: &mut dyn Context<EasgdMsg>, _from: usize, msg: EasgdMsg) {
        if self.stage != Stage::Exchanging {
            return; // a late answer to an exchange that timed out
        }
        match msg {
            EasgdMsg::Diff { diff } => Arc::make_mut(&mut self.x).iter_mut().zip(&diff).for_each(|(x, d)| *x -= d),
            EasgdMsg::Centre { c } => self.x = Arc::new(c),
            _ => return,
        }
        self.resume(ctx);
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<EasgdMsg>, tag: u64) {
        if tag >> 8 == self.gen && self.stage == Stage::Exchanging {
            ctx.note("elastic exchange timed out; continuing locally".into());
            self.resume(ctx);
        }
    }

    fn on_gradient(&mut self, ctx: &mut dyn Context<EasgdMsg>, job: JobId, grad: Vec<f32>, _loss: f64) {
        if self.stage != Stage::Computing(job) {
            return;
        }
        self.opt.apply(Arc::make_mut(&mut self.x).as_mut_slice(), &grad);
        self.steps += 1;
        ctx.record_update(0);
        if self.steps.is_multiple_of(self.cfg.tau) {
            let bytes = ctx.workload().message_bytes();
            self.wait_for_centre(ctx, EasgdMsg::Exchange { x: Vec::clone(&self.x) }, bytes);
        } else {
            self.compute(ctx);
        }
    }

    fn on_crash(&mut self) {
        self.stage = Stage::Crashed;
    }

    fn on_restart(&mut self, _ctx: &mut dyn Context<EasgdMsg>) {
        self.steps = 0;
    }

    fn view(&self) -> View<'_> {
        View::Replica { params: (&self.x[..]).into(), weight: 1.0 }
    }

    fn audit(&self) -> Audit<'_> {
        let stage = match self.stage {
            Stage::Idle => "idle",
            Stage::Computing(_) => "computing",
            Stage::Exchanging => "exchanging",
            Stage::Crashed => "crashed",
        };
        Audit { role: "worker", stage: Some(stage), progress: [Some(self.steps), None], ..Audit::default() }
    }
}

/// The centre variable's server.
pub struct Centre {
    alpha: f64,
    c: Vec<f32>,
    started: bool,
    queue: Service<EasgdMsg>,
}

const SERVED: u64 = 2;

impl Centre {
    /// A centre with moving rate `alpha`, taking `update_time_us` per exchange.
    pub fn new(alpha: f64, update_time_us: f64) -> Self {
        Centre { alpha, c: Vec::new(), started: false, queue: Service::new(update_time_us) }
    }

    fn serve(&mut self, ctx: &mut dyn Context<EasgdMsg>, from: usize, msg: EasgdMsg) {
        let bytes = ctx.workload().message_bytes();
        match msg {
            EasgdMsg::Exchange { x } => {
                let a = self.alpha as f32;
                let diff: Vec<f32> = x.iter().zip(&self.c).map(|(x, c)| a * (x - c)).collect();
                self.c.iter_mut().zip(&diff).for_each(|(c, d)| *c += d);
                ctx.send(from, EasgdMsg::Diff { diff }, bytes);
            }
            EasgdMsg::Fetch => ctx.send(from, EasgdMsg::Centre { c: self.c.clone() }, bytes),
            _ => {}
        }
    }
}

impl Protocol for Centre {
    type Msg = EasgdMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<EasgdMsg>) {
        if !std::mem::replace(&mut self.started, true) {
            self.c = ctx.workload().init();
        }
        ctx.set_phase(Phase::Idle);
    }

    fn on_message(&mut self, ctx: &mut dyn Context<EasgdMsg>, from: usize, msg: EasgdMsg) {
        if !self.queue.is_instant() && matches!(msg, EasgdMsg::Exchange { .. }) {
            self.queue.arrive(ctx, from, msg, SERVED);
        } else {
            self.serve(ctx, from, msg);
        }
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<EasgdMsg>, tag: u64) {
        if tag == SERVED {
            if let Some((from, msg)) = self.queue.served(ctx, SERVED) {
                self.serve(ctx, from, msg);
            }
        }
    }
    fn on_gradient(&mut self, _ctx: &mut dyn Context<EasgdMsg>, _job: JobId, _grad: Vec<f32>, _loss: f64) {}
    fn on_crash(&mut self) {
        self.queue.clear(); // exchanges waiting are lost with the process; the centre is kept
    }
    fn on_restart(&mut self, _ctx: &mut dyn Context<EasgdMsg>) {}

    fn view(&self) -> View<'_> {
        View::Shard { offset: 0, params: &self.c }
    }

    fn audit(&self) -> Audit<'_> {
        Audit {
            role: "centre",
            stage: Some(if self.queue.is_instant() { "serving" } else { "queueing" }),
            ..Audit::default()
        }
    }
}

/// One rank of this algorithm's run: a worker or a server.
pub type EasgdRole = crate::protocol::Role<EasgdWorker, Centre>;
