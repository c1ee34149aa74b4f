//! Gossiping SGD (Jin, Yuan, Iandola, Keutzer 2016): no server; every node runs local SGD and
//! every `tau` local steps exchanges with one peer.
//!
//! - **Pull**: the node asks a peer `j` for its parameters and, when they arrive, sets
//!   `x_i = (x_i + x_j) / 2` (`j` is not changed). The node keeps computing while it waits (at
//!   most one request outstanding); a request unanswered for `timeout_s` marks the peer suspect
//!   for four timeouts, and suspects are skipped when choosing peers.
//! - **Push** (push-sum, Kempe et al. 2003): each node keeps `(x_i, w_i)` with `w_i = 1` at the
//!   start, takes gradients at `z_i = x_i / w_i` and adds `w_i` times the optimizer's step to
//!   `x_i` (so `z_i` moves by one step whatever the weight); to gossip it splits both in two and
//!   sends one part to the peer, who adds it to its own. `x` and `w` are kept in fixed point
//!   (integers: `x` in units of 2^-32, `w` in units of 2^-40) and split as `floor(v/2)` sent,
//!   `v - floor(v/2)` kept, so the sums of `x` and `w` over nodes and messages in flight are
//!   conserved exactly, in any order of delivery. The receiver acknowledges each push; a push
//!   not acknowledged within `timeout_s` is taken back (its mass re-added, its peer marked
//!   suspect), so a dead or cut-off peer does not drain the system's mass. (If the push arrived
//!   and only the acknowledgement was lost, that mass is counted twice: the price of not
//!   blocking on a dead peer.) With `max_in_flight = k`, a node with k pushes unacknowledged skips
//!   its push: its share stays with it and goes out with its next push, so a node that steps
//!   faster than its NIC sends holds at most k pushes instead of piling them up. Weight lost with
//!   a crashed node is gone; a node whose weight falls below 2^-16 (it fed a peer that could not
//!   pass weight on) renormalises before its next gradient, scaling `x` and `w` by a power of
//!   two: its model keeps its bits and it mints weight, which keeps `z` from losing its bits.
//!
//! Peers: `uniform` (any other node), `ring` (the next node), or `exponential` (Stochastic
//! Gradient Push's time-varying graph: node `i` talks to `i + 2^(k mod ceil(log2 n))`).
//!
//! A restarted node has lost its model: in pull mode it first copies a peer's parameters; in push
//! mode it starts with `(0, 0)` and computes only once it has received some mass.

use super::push_sum::{self, split, to_fixed, z_of};
use crate::audit::{Audit, MsgAudit};
use crate::optimizer::{OptimizerConfig, Sgd};
use crate::protocol::{Context, JobId, Phase, Protocol, View};
use dsgd_sim::{SimDuration, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// Push mode: pushes awaiting acknowledgement at most (default none: no limit). A node whose
    /// limit is reached skips its push; the share it would have sent stays with it and goes out
    /// in its next push, so mass is conserved and the pushes a node holds are bounded whatever
    /// its step time (without a limit, a node that steps faster than its NIC sends piles them up).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u64>,
}

impl Default for GossipConfig {
    fn default() -> Self {
        GossipConfig {
            mode: GossipMode::Pull,
            tau: 1,
            peers: PeerChoice::Uniform,
            timeout_s: super::DEFAULT_TIMEOUT_S,
            max_in_flight: None,
        }
    }
}

/// Messages of gossip SGD.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum GossipMsg {
    /// Asks for the receiver's parameters.
    PullRequest,
    /// The parameters asked for.
    PullReply {
        /// Values (shared with the sender until either writes them: no copy in the simulator).
        #[serde(with = "crate::wire::pod_shared")]
        x: Arc<Vec<f32>>,
    },
    /// Acknowledges push `seq`.
    PushAck {
        /// The push's sequence number.
        seq: u64,
    },
    /// Half of the sender's push-sum state, in fixed point.
    PushSum {
        /// Sequence number, for the acknowledgement.
        seq: u64,
        /// Half of `x`, in units of 2^-32 (shared with the sender, which keeps it until the
        /// push is acknowledged: no copy in the simulator).
        #[serde(with = "crate::wire::pod_shared")]
        x: Arc<Vec<i64>>,
        /// Half of `w`, in units of 2^-40.
        w: i64,
    },
}

const TIMEOUT: u64 = 1;
const PUSH_TIMEOUT: u64 = 2;
pub use super::push_sum::X_ONE;
/// Fixed-point scale of push-sum weights (one unit of weight).
pub const W_ONE: i64 = 1 << 40;
/// Push mode: a node whose weight is below this (2^-16 of one) before a gradient renormalises:
/// see [`GossipNode::renormalise`].
pub const W_FLOOR: i64 = W_ONE >> 16;

/// A gossip node's life: running, crashed, or (pull mode, after a restart) copying a peer's
/// parameters before it computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Training (or not started yet).
    Running,
    /// Crashed: the next start is a restart, with the model lost.
    Crashed,
    /// Restarted in pull mode: waiting for a peer's parameters; nothing to share or score yet.
    Recovering,
}

/// A gossip node.
pub struct GossipNode {
    cfg: GossipConfig,
    batch: usize,
    opt_cfg: OptimizerConfig,
    /// Pull-mode parameters, shared with the gradient job and the replies that read them (copied
    /// on write).
    x: Arc<Vec<f32>>,
    xs: Vec<i64>,
    w: i64,
    /// Push mode: the model `z = x / w` while `z_ok` (shared with the gradient job that reads it).
    z: Arc<Vec<f32>>,
    z_ok: bool,
    /// Push mode: pushed halves of `x` received and not yet added to `xs`, in arrival order.
    pending: Vec<Arc<Vec<i64>>>,
    /// Push mode: buffers of added or acknowledged pushes, for the next ones (fresh pages cost
    /// more than the arithmetic), until they go to the process's pool
    /// ([`crate::sharing::Sharing::buffers`]) where there is one.
    spare: Vec<Vec<i64>>,
    opt: Sgd,
    steps: u64,
    exchanges: u64,
    job: Option<JobId>,
    outstanding: Option<usize>,
    /// Peers suspected until a time (sparse: only peers that timed out recently).
    suspect_until: BTreeMap<usize, SimTime>,
    gen: u64,
    life: Life,
    unacked: BTreeMap<u64, (usize, Arc<Vec<i64>>, i64)>,
    next_push: u64,
    /// Push mode: weight this node has minted by renormalising, over all its lives.
    minted: i128,
}

impl GossipNode {
    /// A node.
    pub fn new(cfg: GossipConfig, batch: usize, opt: OptimizerConfig) -> Self {
        GossipNode {
            cfg,
            batch,
            opt_cfg: opt,
            x: Default::default(),
            xs: Vec::new(),
            w: W_ONE,
            z: Default::default(),
            z_ok: false,
            spare: Vec::new(),
            pending: Vec::new(),
            opt: Sgd::new(opt, 0, 1),
            steps: 0,
            exchanges: 0,
            job: None,
            outstanding: None,
            suspect_until: BTreeMap::new(),
            gen: 0,
            life: Life::Running,
            unacked: BTreeMap::new(),
            next_push: 0,
            minted: 0,
        }
    }

    /// Push-sum state `(x, w)` in fixed point (push mode): `x` in units of 2^-32, `w` of 2^-40.
    pub fn mass(&self) -> (std::borrow::Cow<'_, [i64]>, i64) {
        if self.pending.is_empty() {
            (self.xs.as_slice().into(), self.w)
        } else {
            let mut xs = self.xs.clone();
            for m in &self.pending {
                push_sum::absorb(&mut xs, m);
            }
            (xs.into(), self.w)
        }
    }

    /// Pushes sent and not yet acknowledged (push mode).
    pub fn pushes_in_flight(&self) -> usize {
        self.unacked.len()
    }

    /// The node's model `z = x / w` (push mode), computed afresh: with up to two messages
    /// waiting, in one pass that adds them on the way (the same saturating additions in the same
    /// order as [`Self::mass`], without a copy of `x`).
    fn z_fresh(&self) -> Vec<f32> {
        let w = self.w as f64 / W_ONE as f64;
        match self.pending.as_slice() {
            [] => push_sum::model_of(&self.xs, [None, None], w),
            [a] => push_sum::model_of(&self.xs, [Some(a), None], w),
            [a, b] => push_sum::model_of(&self.xs, [Some(a), Some(b)], w),
            _ => push_sum::model_of(&self.mass().0, [None, None], w),
        }
    }

    /// The node's model `z = x / w` (push mode), from the cache or computed into it.
    fn z(&mut self) -> Arc<Vec<f32>> {
        if !self.z_ok {
            self.settle();
            let w = self.w as f64 / W_ONE as f64;
            let mut z = self.take_z();
            z.clear();
            z.extend(self.xs.iter().map(|&x| z_of(x, w)));
            self.z = Arc::new(z);
            self.z_ok = true;
        }
        self.z.clone()
    }

    /// The cached model's buffer (its contents stale), for a new model: its allocation is reused when no
    /// gradient job reads it any more (a job's thread may keep a weak reference to it, which
    /// does not stop this, and a new `Arc` is a new identity to that thread's cache).
    fn take_z(&mut self) -> Vec<f32> {
        Arc::try_unwrap(std::mem::take(&mut self.z)).unwrap_or_default()
    }

    /// Adds pushed mass to this node's: the weight now, `x` when it is next read (the next
    /// gradient's pass adds the first message waiting, [`Self::settle`] any other), in arrival
    /// order, so the sums are those of adding each at once.
    fn absorb(&mut self, x: Arc<Vec<i64>>, w: i64) {
        self.pending.push(x);
        self.w += w;
        self.z_ok = false;
    }

    /// Adds every message waiting to `x`.
    fn settle(&mut self) {
        for m in std::mem::take(&mut self.pending) {
            push_sum::absorb(&mut self.xs, &m);
            self.recycle(m);
        }
    }

    /// Keeps a pushed half nobody else holds as the buffer of a later push (any node's buffer
    /// fits any other's): fresh pages cost more than the arithmetic done in them.
    fn recycle(&mut self, m: Arc<Vec<i64>>) {
        if let Ok(buf) = Arc::try_unwrap(m) {
            if self.spare.len() < 2 {
                self.spare.push(buf);
            }
        }
    }

    /// A buffer for a push: one of this node's, else one of the process's pool, else a new one.
    fn buffer(&mut self, ctx: &mut dyn Context<GossipMsg>) -> Vec<i64> {
        self.spare.pop().or_else(|| ctx.sharing().buffers().and_then(|pool| pool.take())).unwrap_or_default()
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
        self.suspect_until.retain(|_, until| *until > now);
        let ok = |p: &usize| !self.suspect_until.contains_key(p);
        let peer = match self.cfg.peers {
            // Without suspects, "the k-th of the others" is computed in O(1): the same draw and
            // the same peer as picking from the list of all others, without building it.
            PeerChoice::Uniform if self.suspect_until.is_empty() => {
                let k = (ctx.random() % (n - 1) as u64) as usize;
                if k >= me {
                    k + 1
                } else {
                    k
                }
            }
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
            if self.w <= 0 {
                return; // a restarted push node waits for mass
            }
            if self.w < W_FLOOR {
                let k = self.renormalise();
                ctx.note(format!("weight near zero: x and w scaled up by 2^{k}"));
            }
            self.z()
        } else {
            self.x.clone()
        };
        self.job = Some(ctx.start_gradient(params, self.batch));
    }

    /// Push mode: scales `(x, w)` by the power of two that brings `w` closest to one from below
    /// (as far as `x` allows without overflow), minting weight. `z = x / w` keeps its bits
    /// (both scale exactly, and a quotient of two values scaled by 2^k is the same quotient), so
    /// the model and its cache are untouched; what changes is the node's say in later averages.
    ///
    /// Why: a node that pushes into a peer that does not push back (a ring whose next node is
    /// down, or forwards into a crashed node) halves its weight at every step, and weight lost
    /// with a crashed node is gone for good. Near zero weight, `x` holds `z` with few bits
    /// (`x` is kept in units of 2^-32), the steps `w × step` round to nothing, and `z` is noise:
    /// three nodes on a ring that lost two to overlapping crashes kept one survivor at a weight
    /// of 2^-40 with a loss of 130 for good, and the restarted nodes never received weight
    /// (found by `dsgd torture`, seed 59049). Runs without faults do not get near the floor.
    /// Returns the power of two.
    fn renormalise(&mut self) -> u32 {
        self.settle();
        let top = self.xs.iter().map(|x| x.unsigned_abs()).max().unwrap_or(0);
        // w << k_w ≤ W_ONE < w << (k_w + 1); |x| << k_x < 2^62, room for what is added later.
        let k_w = self.w.leading_zeros() - W_ONE.leading_zeros();
        let k_w = if self.w << k_w > W_ONE { k_w - 1 } else { k_w };
        let k = k_w.min(top.leading_zeros().saturating_sub(2));
        if k > 0 {
            self.xs.iter_mut().for_each(|x| *x <<= k);
            let before = self.w;
            self.w <<= k;
            self.minted += (self.w - before) as i128;
        }
        k
    }

    /// Push mode: the peer of a push now, if flow control allows one and there is a peer.
    fn push_target(&mut self, ctx: &mut dyn Context<GossipMsg>) -> Option<usize> {
        if self.cfg.max_in_flight.is_some_and(|m| self.unacked.len() as u64 >= m) {
            return None; // flow control: the share stays here and goes out with the next push
        }
        self.choose_peer(ctx)
    }

    /// Push mode: sends the half `(x, w)` split off for `peer`.
    fn send_push(&mut self, ctx: &mut dyn Context<GossipMsg>, peer: usize, x: Vec<i64>, w: i64) {
        let x = Arc::new(x);
        let bytes = ctx.workload().message_bytes() + 16;
        let seq = self.next_push;
        self.next_push += 1;
        self.unacked.insert(seq, (peer, x.clone(), w));
        ctx.send(peer, GossipMsg::PushSum { seq, x, w }, bytes);
        let t = self.timeout();
        ctx.set_timer(t, PUSH_TIMEOUT | seq << 8);
    }

    fn gossip(&mut self, ctx: &mut dyn Context<GossipMsg>) {
        if self.push() {
            let Some(peer) = self.push_target(ctx) else { return };
            let buf = self.buffer(ctx);
            let (x, w) = self.split_off(buf);
            self.send_push(ctx, peer, x, w);
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

impl GossipNode {
    /// Push mode, a gradient at the current model: the optimizer's step taken at `z = x / w`
    /// and added to `x` scaled by `w` (so `z` moves by exactly one step whatever the node's
    /// weight: fast gossipers lose weight, stragglers gain it), then, every `tau` steps, half
    /// of `(x, w)` pushed to a peer, and the next gradient started. One pass over the state
    /// ([`push_sum::Step`]); the peer is drawn first, as no other draw comes between.
    fn push_step(&mut self, ctx: &mut dyn Context<GossipMsg>, grad: &[f32]) {
        self.steps += 1;
        ctx.record_update(0);
        let peer = if self.steps.is_multiple_of(self.cfg.tau) { self.push_target(ctx) } else { None };
        let w = self.w as f64 / W_ONE as f64;
        let sent_w = peer.map(|_| split(&mut self.w));
        let kept = self.w as f64 / W_ONE as f64;
        let mut z = self.take_z();
        let z_valid = self.z_ok;
        // The last messages waiting are added in the pass, any before them first: two, or
        // three when the half sent is written over the first of them, which it is where nobody
        // else holds that one (its sender has had the acknowledgement); else the half goes
        // into a spare buffer.
        let pending = self.pending.len();
        let unique = |m: &Arc<Vec<i64>>| Arc::strong_count(m) == 1 && Arc::weak_count(m) == 0;
        let over = peer.is_some() && pending > 0 && unique(&self.pending[pending.saturating_sub(3)]);
        let mut last = self.pending.split_off(pending.saturating_sub(if over { 3 } else { 2 }));
        self.settle();
        let mut first = None;
        if over {
            match Arc::try_unwrap(last.remove(0)) {
                Ok(buf) if buf.len() == self.xs.len() => first = Some(buf),
                Ok(buf) => push_sum::absorb(&mut self.xs, &buf),
                Err(shared) => push_sum::absorb(&mut self.xs, &shared),
            }
        }
        let sent_holds_first = first.is_some();
        let mut half = match first {
            Some(buf) => buf,
            None if peer.is_some() => self.buffer(ctx),
            None => Vec::new(),
        };
        let (rule, velocity) = self.opt.take_step(1.0);
        let sent = peer.map(|_| (&mut half, kept));
        let incoming = [last.first().map(|v| v.as_slice()), last.get(1).map(|v| v.as_slice())];
        push_sum::Step {
            xs: &mut self.xs,
            incoming,
            grad,
            rule,
            velocity,
            w,
            sent,
            sent_holds_first,
            z: &mut z,
            z_valid,
        }
        .run();
        self.z = Arc::new(z);
        self.z_ok = true;
        for m in last {
            self.recycle(m);
        }
        if let Some(pool) = ctx.sharing().buffers() {
            self.spare.drain(..).for_each(|b| pool.give(b));
        }
        if let (Some(peer), Some(sent_w)) = (peer, sent_w) {
            self.send_push(ctx, peer, half, sent_w);
        }
        self.compute(ctx);
    }

    /// Splits `(x, w)` in two, keeping one half and returning the other (`x` in `half`, a
    /// spare buffer); the model `z` of the half kept is computed in the same pass.
    fn split_off(&mut self, mut half: Vec<i64>) -> (Vec<i64>, i64) {
        self.settle();
        let sent_w = split(&mut self.w);
        let w = self.w as f64 / W_ONE as f64;
        half.clear();
        half.reserve(self.xs.len());
        let mut z = self.take_z();
        z.clear();
        z.reserve(self.xs.len());
        for x in self.xs.iter_mut() {
            half.push(split(x));
            z.push(z_of(*x, w));
        }
        self.z = Arc::new(z);
        self.z_ok = true;
        (half, sent_w)
    }
}

/// Replaces `x` by `(x + peer) / 2`, element by element: in place when nothing else holds `x`,
/// else into a fresh vector (the same bits, without first copying `x` only to overwrite it).
fn average_into(x: &mut Arc<Vec<f32>>, peer: &[f32]) {
    debug_assert_eq!(x.len(), peer.len(), "replicas of unequal lengths");
    match Arc::get_mut(x) {
        Some(own) => own.iter_mut().zip(peer).for_each(|(a, b)| *a = (*a + b) * 0.5),
        None => *x = Arc::new(x.iter().zip(peer).map(|(a, b)| (a + b) * 0.5).collect()),
    }
}

impl Protocol for GossipNode {
    type Msg = GossipMsg;

    fn on_start(&mut self, ctx: &mut dyn Context<GossipMsg>) {
        let init = ctx.workload().init();
        self.suspect_until = BTreeMap::new();
        self.opt = Sgd::new(self.opt_cfg, init.len(), 1);
        let restarted = self.life == Life::Crashed;
        self.life = Life::Running;
        if self.push() {
            self.w = if restarted { 0 } else { W_ONE };
            self.xs = init.iter().map(|&x| if restarted { 0 } else { to_fixed(x as f64) }).collect();
            self.pending.clear();
            self.z_ok = false;
        } else {
            self.x = Arc::new(init);
        }
        if restarted && !self.push() {
            self.life = Life::Recovering;
            ctx.set_phase(Phase::Communicating);
            self.gossip(ctx);
            return;
        }
        self.compute(ctx);
    }

    fn on_message(&mut self, ctx: &mut dyn Context<GossipMsg>, from: usize, msg: GossipMsg) {
        match msg {
            GossipMsg::PullRequest => {
                if self.life == Life::Recovering {
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
                if self.life == Life::Recovering {
                    self.life = Life::Running;
                    self.x = x;
                    self.compute(ctx);
                } else {
                    average_into(&mut self.x, &x);
                }
            }
            GossipMsg::PushAck { seq } => {
                if let Some((_, x, _)) = self.unacked.remove(&seq) {
                    self.recycle(x); // if the receiver has added it already
                }
            }
            GossipMsg::PushSum { seq, x, w } => {
                ctx.send(from, GossipMsg::PushAck { seq }, 64);
                let idle = self.w <= 0 && self.job.is_none();
                self.absorb(x, w);
                if idle {
                    self.compute(ctx);
                }
            }
        }
    }

    fn on_timer(&mut self, ctx: &mut dyn Context<GossipMsg>, tag: u64) {
        if tag & 0xff == PUSH_TIMEOUT {
            if let Some((peer, x, w)) = self.unacked.remove(&(tag >> 8)) {
                ctx.note(format!("push to peer {peer} not acknowledged; taking its mass back"));
                self.suspect_until.insert(peer, ctx.now() + self.timeout().mul_f64(4.0));
                let idle = self.w <= 0 && self.job.is_none();
                self.absorb(x, w);
                if idle {
                    self.compute(ctx);
                }
            }
            return;
        }
        if tag >> 8 != self.gen {
            return;
        }
        if let Some(peer) = self.outstanding.take() {
            ctx.note(format!("peer {peer} did not answer; skipping it for a while"));
            self.suspect_until.insert(peer, ctx.now() + self.timeout().mul_f64(4.0));
            if self.life == Life::Recovering {
                self.gossip(ctx);
            }
        }
    }

    fn on_gradient(&mut self, ctx: &mut dyn Context<GossipMsg>, job: JobId, grad: Vec<f32>, _loss: f64) {
        if self.job != Some(job) {
            return;
        }
        self.job = None;
        if self.push() && !grad.is_empty() {
            return self.push_step(ctx, &grad);
        }
        if !self.push() {
            self.opt.apply(Arc::make_mut(&mut self.x).as_mut_slice(), &grad);
        }
        self.steps += 1;
        ctx.record_update(0);
        if self.steps.is_multiple_of(self.cfg.tau) {
            self.gossip(ctx);
        }
        self.compute(ctx);
    }

    fn on_crash(&mut self) {
        self.job = None;
        self.outstanding = None;
        self.unacked.clear();
        self.z_ok = false;
        self.life = Life::Crashed;
    }

    fn on_restart(&mut self, _ctx: &mut dyn Context<GossipMsg>) {
        self.steps = 0;
        self.gen += 1;
    }

    fn view(&self) -> View<'_> {
        if self.life == Life::Recovering {
            View::Nothing
        } else if self.push() {
            let z = if self.z_ok { (&self.z[..]).into() } else { self.z_fresh().into() };
            View::Replica { params: z, weight: if self.w > 0 { 1.0 } else { 0.0 } }
        } else {
            View::Replica { params: (&self.x[..]).into(), weight: 1.0 }
        }
    }

    fn audit(&self) -> Audit<'_> {
        let stage = match self.life {
            Life::Crashed => "crashed",
            Life::Recovering => "recovering",
            Life::Running if self.job.is_some() => "computing",
            Life::Running if self.outstanding.is_some() || !self.unacked.is_empty() => "exchanging",
            Life::Running => "waiting",
        };
        let push_sum = self.push().then_some((self.w, &self.unacked as &dyn crate::audit::Held, self.minted));
        Audit { role: "node", stage: Some(stage), progress: [Some(self.steps), None], agreed: None, push_sum }
    }

    fn audit_msg(msg: &GossipMsg) -> MsgAudit {
        match msg {
            GossipMsg::PushSum { seq, w, .. } => MsgAudit::Push { seq: *seq, w: *w },
            GossipMsg::PushAck { seq } => MsgAudit::Ack { seq: *seq },
            _ => MsgAudit::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renormalising_keeps_the_model_bits_and_counts_the_weight_minted() {
        let cfg = GossipConfig { mode: GossipMode::Push, ..GossipConfig::default() };
        let mut node = GossipNode::new(cfg, 1, OptimizerConfig::default());
        // A node drained to 2^-30 of a unit (and a bit), holding a model of mixed signs.
        let model = [0.75f64, -1.5e-3, 3.0, -0.0, 1.0e-6];
        node.w = (W_ONE >> 30) + 5;
        let w = node.w as f64 / W_ONE as f64;
        node.xs = model.iter().map(|&z| to_fixed(z * w)).collect();
        let before = node.z_fresh();
        node.renormalise();
        assert_eq!(
            node.z_fresh().iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
            before.iter().map(|z| z.to_bits()).collect::<Vec<_>>(),
            "the model moved"
        );
        assert!(node.w <= W_ONE && node.w > W_ONE / 2, "weight {} not brought to (1/2, 1]", node.w);
        assert_eq!(node.minted, (node.w - ((W_ONE >> 30) + 5)) as i128);
        // A value too large to scale that far limits the shift instead of overflowing.
        node.w = W_ONE >> 20;
        node.xs = vec![1 << 55, -3];
        node.minted = 0;
        node.renormalise();
        assert_eq!(node.xs, vec![1 << 61, -3 << 6]);
        assert_eq!(node.w, W_ONE >> 14);
        assert_eq!(node.minted, ((W_ONE >> 14) - (W_ONE >> 20)) as i128);
    }

    #[test]
    fn a_pull_average_never_writes_a_replica_another_holder_reads() {
        let mine = vec![1.0f32, -2.5, 3.0e-8, f32::MAX];
        let peer = [0.5f32, 7.25, -1.0e-8, f32::MAX];
        let expect: Vec<u32> = mine.iter().zip(&peer).map(|(a, b)| ((a + b) * 0.5).to_bits()).collect();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // Held alone: averaged in place.
        let mut alone = Arc::new(mine.clone());
        let at = Arc::as_ptr(&alone);
        average_into(&mut alone, &peer);
        assert_eq!(bits(&alone), expect);
        assert!(std::ptr::eq(at, Arc::as_ptr(&alone)), "a replica held alone is averaged in place");
        // Shared with a gradient job: a fresh vector, the job's parameters untouched.
        let mut shared = Arc::new(mine.clone());
        let job = shared.clone();
        average_into(&mut shared, &peer);
        assert_eq!(bits(&shared), expect);
        assert_eq!(bits(&job), bits(&mine), "the job's parameters changed under it");
    }
}
