//! Gossiping SGD (Jin, Yuan, Iandola, Keutzer 2016): no server; every node runs local SGD and
//! every `tau` local steps exchanges with one peer.
//!
//! - **Pull**: the node asks a peer `j` for its parameters and, when they arrive, sets
//!   `x_i = (x_i + x_j) / 2` (`j` is not changed). The node keeps computing while it waits (at
//!   most one request outstanding); a request unanswered for `timeout_s` marks the peer suspect
//!   for four timeouts, and suspects are skipped when choosing peers.
//! - **Push** (push-sum, Kempe et al. 2003): each node keeps `(x_i, w_i)` with `w_i = 1` at the
//!   start, takes gradients at `z_i = x_i / w_i` and applies the step to `x_i`; to gossip it halves
//!   both and sends one half to the peer, who adds it to its own. Halving is exact, and the sums
//!   of `x` and `w` over nodes and messages in flight are conserved (exactly when the values are
//!   dyadic; state is kept in `f64`). A lost message loses its mass: push-sum assumes a reliable
//!   network, so crashes and partitions perturb the average it converges to.
//!
//! Peers: `uniform` (any other node), `ring` (the next node), or `exponential` (Stochastic
//! Gradient Push's time-varying graph: node `i` talks to `i + 2^(k mod ceil(log2 n))`).
//!
//! A restarted node has lost its model: in pull mode it first copies a peer's parameters; in push
//! mode it starts with `(0, 0)` and computes only once it has received some mass.

use crate::optimizer::{OptimizerConfig, Sgd};
use crate::protocol::{Context, JobId, Phase, Protocol, View};
use dsgd_sim::{SimDuration, SimTime};
use serde::{Deserialize, Serialize};

/// Pull or push gossip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GossipMode {
    /// Pull a peer's parameters and average.
    Pull,
    /// Push-sum.
    Push,
}

/// How a node chooses its peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerChoice {
    /// Uniformly among the other nodes.
    Uniform,
    /// The next node on a ring.
    Ring,
    /// A time-varying exponential graph (offsets 1, 2, 4, ...).
    Exponential,
}

/// Configuration of gossip SGD.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GossipConfig {
    /// Pull or push (default pull).
    pub mode: GossipMode,
    /// Local steps between exchanges (default 1).
    pub tau: u64,
    /// Peer choice (default uniform).
    pub peers: PeerChoice,
    /// Timeout of a pull request, seconds (default 5).
    pub timeout_s: f64,
}

impl Default for GossipConfig {
    fn default() -> Self {
        GossipConfig { mode: GossipMode::Pull, tau: 1, peers: PeerChoice::Uniform, timeout_s: 5.0 }
    }
}

/// Messages of gossip SGD.
#[derive(Clone, Debug, PartialEq)]
pub enum GossipMsg {
    /// Asks for the receiver's parameters.
    PullRequest,
    /// The parameters asked for.
    PullReply {
        /// Values.
        x: Vec<f32>,
    },
    /// Half of the sender's push-sum state.
    PushSum {
        /// Half of `x`.
        x: Vec<f64>,
        /// Half of `w`.
        w: f64,
    },
}

const TIMEOUT: u64 = 1;

/// A gossip node.
pub struct GossipNode {
    cfg: GossipConfig,
    batch: usize,
    opt_cfg: OptimizerConfig,
    x: Vec<f32>,
    xs: Vec<f64>,
    w: f64,
    opt: Sgd,
    steps: u64,
    exchanges: u64,
    job: Option<JobId>,
    outstanding: Option<usize>,
    suspect_until: Vec<SimTime>,
    gen: u64,
    restarted: bool,
    recovering: bool,
}

impl GossipNode {
    /// A node.
    pub fn new(cfg: GossipConfig, batch: usize, opt: OptimizerConfig) -> Self {
        GossipNode {
            cfg,
            batch,
            opt_cfg: opt,
            x: Vec::new(),
            xs: Vec::new(),
            w: 1.0,
            opt: Sgd::new(opt, 0, 1),
            steps: 0,
            exchanges: 0,
            job: None,
            outstanding: None,
            suspect_until: Vec::new(),
            gen: 0,
            restarted: false,
            recovering: false,
        }
    }

    /// Push-sum state `(x, w)` (push mode).
    pub fn mass(&self) -> (&[f64], f64) {
        (&self.xs, self.w)
    }

    /// Pull-mode parameters.
    pub fn params(&self) -> &[f32] {
        &self.x
    }

    fn push(&self) -> bool {
        self.cfg.mode == GossipMode::Push
    }

    fn timeout(&self) -> SimDuration {
        SimDuration::from_secs_f64(self.cfg.timeout_s)
    }

    fn choose_peer(&mut self, ctx: &mut dyn Context<GossipMsg>) -> Option<usize> {
        let (n, me, now) = (ctx.ranks(), ctx.rank(), ctx.now());
        if n < 2 {
            return None;
        }
        let ok = |p: &usize| self.suspect_until[*p] <= now;
        let peer = match self.cfg.peers {
            PeerChoice::Uniform => {
                let candidates: Vec<usize> = (0..n).filter(|&p| p != me).filter(ok).collect();
                let pool: Vec<usize> =
                    if candidates.is_empty() { (0..n).filter(|&p| p != me).collect() } else { candidates };
                pool[(ctx.random() % pool.len() as u64) as usize]
            }
            PeerChoice::Ring => (1..n).map(|k| (me + k) % n).find(ok).unwrap_or((me + 1) % n),
            PeerChoice::Exponential => {
                let levels = (usize::BITS - (n - 1).leading_zeros()) as u64; // offsets 1..2^(levels-1) < n
                let offset = 1usize << (self.exchanges % levels);
                (me + offset) % n
            }
        };
        self.exchanges += 1;
        Some(peer)
    }

    fn compute(&mut self, ctx: &mut dyn Context<GossipMsg>) {
        let params = if self.push() {
            if self.w <= 0.0 {
                return; // a restarted push node waits for mass
            }
            self.xs.iter().map(|&x| (x / self.w) as f32).collect()
        } else {
            self.x.clone()
        };
        self.job = Some(ctx.start_gradient(params, self.batch));
    }

    fn gossip(&mut self, ctx: &mut dyn Context<GossipMsg>) {
        if self.push() {
            let Some(peer) = self.choose_peer(ctx) else { return };
            self.xs.iter_mut().for_each(|x| *x *= 0.5);
            self.w *= 0.5;
            let bytes = ctx.workload().message_bytes() + 8;
            ctx.send(peer, GossipMsg::PushSum { x: self.xs.clone(), w: self.w }, bytes);
        } else if self.outstanding.is_none() {
            let Some(peer) = self.choose_peer(ctx) else { return };
            self.outstanding = Some(peer);
            ctx.send(peer, GossipMsg::PullRequest, 64);
            self.gen += 1;
            let t = self.timeout();
            ctx.set_timer(t, TIMEOUT | self.gen << 8);
        }
    }
}

impl Protocol for GossipNode {
    type Msg = GossipMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<GossipMsg>) {
        let init = ctx.workload().init();
        self.suspect_until = vec![SimTime::ZERO; ctx.ranks()];
        self.opt = Sgd::new(self.opt_cfg, init.len(), 1);
        let restarted = std::mem::take(&mut self.restarted);
        if self.push() {
            self.w = if restarted { 0.0 } else { 1.0 };
            self.xs = init.iter().map(|&x| if restarted { 0.0 } else { x as f64 }).collect();
        } else {
            self.x = init;
        }
        if restarted && !self.push() {
            self.recovering = true;
            ctx.set_phase(Phase::Communicating);
            self.gossip(ctx);
            return;
        }
        self.compute(ctx);
    }

    fn on_message(&mut self, ctx: &mut dyn Context<GossipMsg>, from: usize, msg: GossipMsg) {
        match msg {
            GossipMsg::PullRequest => {
                if self.recovering {
                    return; // nothing worth sharing yet
                }
                let bytes = ctx.workload().message_bytes();
                ctx.send(from, GossipMsg::PullReply { x: self.x.clone() }, bytes);
            }
            GossipMsg::PullReply { x } => {
                if self.outstanding != Some(from) {
                    return;
                }
                self.outstanding = None;
                self.gen += 1;
                if std::mem::take(&mut self.recovering) {
                    self.x = x;
                    self.compute(ctx);
                } else {
                    self.x.iter_mut().zip(&x).for_each(|(a, b)| *a = (*a + b) * 0.5);
                }
            }
            GossipMsg::PushSum { x, w } => {
                let idle = self.w <= 0.0 && self.job.is_none();
                self.xs.iter_mut().zip(&x).for_each(|(a, b)| *a += b);
                self.w += w;
                if idle {
                    self.compute(ctx);
                }
            }
        }
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<GossipMsg>, tag: u64) {
        if tag >> 8 != self.gen {
            return;
        }
        if let Some(peer) = self.outstanding.take() {
            ctx.note(format!("peer {peer} did not answer; skipping it for a while"));
            self.suspect_until[peer] = ctx.now() + self.timeout().mul_f64(4.0);
            if self.recovering {
                self.gossip(ctx);
            }
        }
    }

    fn on_gradient(&mut self, ctx: &mut dyn Context<GossipMsg>, job: JobId, grad: Vec<f32>, _loss: f64) {
        if self.job != Some(job) {
            return;
        }
        self.job = None;
        if self.push() {
            if !grad.is_empty() {
                let z: Vec<f32> = self.xs.iter().map(|&x| (x / self.w) as f32).collect();
                let mut stepped = z.clone();
                self.opt.apply(&mut stepped, &grad);
                self.xs.iter_mut().zip(stepped.iter().zip(&z)).for_each(|(x, (s, z))| *x += (s - z) as f64);
            }
        } else {
            self.opt.apply(&mut self.x, &grad);
        }
        self.steps += 1;
        ctx.record_update(0);
        if self.steps % self.cfg.tau == 0 {
            self.gossip(ctx);
        }
        self.compute(ctx);
    }

    fn on_crash(&mut self) {
        self.job = None;
        self.outstanding = None;
        self.restarted = true;
    }

    fn on_restart(&mut self, _ctx: &mut dyn Context<GossipMsg>) {
        self.steps = 0;
        self.gen += 1;
    }

    fn view(&self) -> View<'_> {
        if self.recovering {
            View::Nothing
        } else if self.push() {
            View::Replica { params: self.xs.iter().map(|&x| x as f32).collect::<Vec<f32>>().into(), weight: self.w }
        } else {
            View::Replica { params: (&self.x[..]).into(), weight: 1.0 }
        }
    }
}
