//! The protocol API: algorithms are sans-IO state machines that act only through a [`Context`].
//!
//! A role (a worker, a parameter-server shard, a gossip peer) implements [`Protocol`]; an executor
//! (the simulator here, MPI later) owns the clock, the network and the gradient computations and
//! calls the handlers. A protocol never sees the event queue, a clock or a thread.

use crate::audit::{Audit, MsgAudit};
use crate::sharing::Sharing;
use dsgd_models::Workload;
use dsgd_sim::{SimDuration, SimTime};
use std::borrow::Cow;
use std::sync::Arc;

/// Handle of a gradient computation started with [`Context::start_gradient`].
pub type JobId = dsgd_sim::JobId;

/// What a node is doing, for the time breakdown (computing is set by the executor itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Running a gradient computation (set by the executor).
    Computing,
    /// Waiting for the network (a collective, a pull, an exchange).
    Communicating,
    /// Waiting for other nodes (a barrier, a staleness bound) or for nothing at all.
    Idle,
}

/// What the executor can see of a node's model, for the consensus metrics.
#[derive(Clone, Debug)]
pub enum View<'a> {
    /// A replica of the whole model; `weight` is the push-sum weight (1 elsewhere), so the
    /// node's model is `params / weight`.
    Replica {
        /// The (weighted) parameters.
        params: Cow<'a, [f32]>,
        /// The push-sum weight.
        weight: f64,
    },
    /// A server's slice `offset..offset+params.len()` of the authoritative model.
    Shard {
        /// Where the slice starts.
        offset: usize,
        /// The slice.
        params: &'a [f32],
    },
    /// Nothing to show (not started, or a role without parameters).
    Nothing,
}

/// What a protocol reports about itself, for the run's record (the time breakdown, update and
/// iteration counts, the log). Reporting changes nothing the protocol sees.
pub trait Report {
    /// Declares what the node is doing from now on (for the time breakdown).
    fn set_phase(&mut self, phase: Phase);
    /// Records that an update was applied to the model, computed on parameters `staleness`
    /// versions old.
    fn record_update(&mut self, staleness: u64);
    /// Records a finished synchronous iteration and how long it took.
    fn record_iteration(&mut self, took: SimDuration);
    /// Records that communication was in flight for `took` while the node computed (gradient
    /// buckets overlapped with the backward pass).
    fn record_overlap(&mut self, took: SimDuration);
    /// Notes something that happened (a timeout, a membership change), for the run's record.
    fn note(&mut self, what: String);
}

/// The world as a protocol sees it: what it may do (send, set timers, compute gradients, draw
/// random numbers) and, through [`Report`], what it reports.
pub trait Context<M>: Report {
    /// The current time (virtual in the simulator, elapsed wall time on a real cluster).
    fn now(&self) -> SimTime;
    /// This node's rank.
    fn rank(&self) -> usize;
    /// Number of ranks in the run (all roles).
    fn ranks(&self) -> usize;
    /// Sends `msg`, which takes `bytes` on the wire, to rank `to`. Delivery is not guaranteed.
    fn send(&mut self, to: usize, msg: M, bytes: u64);
    /// Sets a timer that calls `on_timer(tag)` after `after`. Timers are not cancelled: a
    /// protocol tells a stale timer by its tag (a generation number in its upper bits).
    fn set_timer(&mut self, after: SimDuration, tag: u64);
    /// Starts computing a gradient of a `batch`-sample minibatch at `params` (shared, so that a
    /// protocol that keeps its parameters need not copy them); `on_gradient` follows. Jobs on one
    /// node run one after another.
    fn start_gradient(&mut self, params: Arc<Vec<f32>>, batch: usize) -> JobId;
    /// As [`Context::start_gradient`], also saying when the gradient will be ready where the
    /// executor knows it in advance (the simulator draws a job's duration when it starts); `None`
    /// where it does not (a real cluster), the default.
    fn start_gradient_due(&mut self, params: Arc<Vec<f32>>, batch: usize) -> (JobId, Option<SimTime>) {
        (self.start_gradient(params, batch), None)
    }
    /// The workload (parameter count, initial parameters, message sizes).
    fn workload(&self) -> &dyn Workload;
    /// A random number from this rank's own stream (`("protocol", rank)` in the simulator).
    fn random(&mut self) -> u64;
    /// The executor's in-process sharing of identical values between ranks ([`Sharing`]): the
    /// simulator's shares among all ranks, a real cluster's shares nothing. Either gives the
    /// bits a rank computing alone would get.
    fn sharing(&mut self) -> &mut dyn Sharing;
}

/// A role of a distributed algorithm.
pub trait Protocol {
    /// The messages this algorithm's roles exchange.
    type Msg;
    /// Called once at the start, and again after a restart (with the state reset by `on_restart`).
    fn on_start(&mut self, ctx: &mut dyn Context<Self::Msg>);
    /// A message arrived from rank `from`.
    fn on_message(&mut self, ctx: &mut dyn Context<Self::Msg>, from: usize, msg: Self::Msg);
    /// A timer set with `tag` fired.
    fn on_timer(&mut self, ctx: &mut dyn Context<Self::Msg>, tag: u64);
    /// A gradient computation finished: `grad` is the minibatch gradient, `loss` the minibatch loss.
    fn on_gradient(&mut self, ctx: &mut dyn Context<Self::Msg>, job: JobId, grad: Vec<f32>, loss: f64);
    /// The node crashed (its timers and computations are gone). Volatile state should be dropped
    /// here; state meant to survive (a server's parameters) may be kept.
    fn on_crash(&mut self);
    /// The node restarted; `on_start` is called right after.
    fn on_restart(&mut self, ctx: &mut dyn Context<Self::Msg>);
    /// The node's model, for metrics.
    fn view(&self) -> View<'_>;
    /// Synchronous iterations this rank has completed (`None`, the default: the algorithm has no
    /// iterations). When a `stop.iterations` rule is met, the simulator lets the members still
    /// finishing the last iteration finish it before the final evaluation.
    fn completed_iterations(&self) -> Option<u64> {
        None
    }
    /// The node's state as the simulation tester's invariants see it ([`crate::audit`]); the
    /// default shows nothing to check.
    fn audit(&self) -> Audit<'_> {
        Audit { role: "node", ..Audit::default() }
    }
    /// What the tester needs of a message of this protocol (the default: nothing).
    fn audit_msg(_msg: &Self::Msg) -> MsgAudit
    where
        Self: Sized,
    {
        MsgAudit::Other
    }
}

/// A run with two kinds of rank (workers and servers) whose roles share one message type.
#[allow(clippy::large_enum_variant)] // one per rank; boxing buys nothing
pub enum Role<W, S> {
    /// A worker.
    Worker(W),
    /// A server (a parameter-server shard, EASGD's centre).
    Server(S),
}

macro_rules! both {
    ($self:ident, $r:ident => $e:expr) => {
        match $self {
            Role::Worker($r) => $e,
            Role::Server($r) => $e,
        }
    };
}

impl<M, W: Protocol<Msg = M>, S: Protocol<Msg = M>> Protocol for Role<W, S> {
    type Msg = M;
    fn on_start(&mut self, ctx: &mut dyn Context<M>) {
        both!(self, r => r.on_start(ctx))
    }
    fn on_message(&mut self, ctx: &mut dyn Context<M>, from: usize, msg: M) {
        both!(self, r => r.on_message(ctx, from, msg))
    }
    fn on_timer(&mut self, ctx: &mut dyn Context<M>, tag: u64) {
        both!(self, r => r.on_timer(ctx, tag))
    }
    fn on_gradient(&mut self, ctx: &mut dyn Context<M>, job: JobId, grad: Vec<f32>, loss: f64) {
        both!(self, r => r.on_gradient(ctx, job, grad, loss))
    }
    fn on_crash(&mut self) {
        both!(self, r => r.on_crash())
    }
    fn on_restart(&mut self, ctx: &mut dyn Context<M>) {
        both!(self, r => r.on_restart(ctx))
    }
    fn view(&self) -> View<'_> {
        both!(self, r => r.view())
    }
    fn completed_iterations(&self) -> Option<u64> {
        both!(self, r => r.completed_iterations())
    }
    fn audit(&self) -> Audit<'_> {
        both!(self, r => r.audit())
    }
    fn audit_msg(msg: &M) -> MsgAudit {
        W::audit_msg(msg)
    }
}
