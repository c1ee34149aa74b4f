//! Membership changes of synchronous SGD: the watchdog that notices a member is gone, the probe
//! that forms the next membership, the donor's state hand-off, and a restarted rank's join.

use super::{
    Gradient, Membership, Stage, StateMsg, Step, SyncMsg, SyncWorker, HELLO, JOIN_ASKS, PROBE_END, SMALL, WATCHDOG,
};
use crate::protocol::{Context, Phase};
use dsgd_sim::{SimDuration, SimTime};
use std::collections::BTreeMap;

/// A probe in progress: the proposed epoch and who answered, with their completed iterations
/// and the views their replicas come from.
pub(super) struct Probing {
    epoch: u32,
    responders: BTreeMap<usize, (u64, u64)>,
}

/// One watchdog timer stays armed while the worker waits for others; when it fires it re-arms
/// itself for `timeout` after the last progress, so progress costs no timer operation.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Watchdog {
    armed: bool,
    progress: SimTime,
}

impl SyncWorker {
    /// Notes progress, and arms the watchdog if it is not.
    pub(super) fn arm_watchdog(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        self.watchdog.progress = ctx.now();
        if !self.watchdog.armed {
            self.watchdog.armed = true;
            ctx.set_timer(self.timeout(), WATCHDOG);
        }
    }

    /// The worker waits for others (and no probe runs), so silence means someone is gone.
    fn waiting(&self) -> bool {
        let stage = self.stage();
        self.probing.is_none() && (stage == Stage::Reducing || stage.awaits_state())
    }

    /// The watchdog fired: re-arm it if there was progress since; otherwise ask again to join,
    /// or probe for a new membership.
    pub(super) fn on_watchdog(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        self.watchdog.armed = false;
        if !self.waiting() {
            return;
        }
        let quiet = ctx.now().saturating_since(self.watchdog.progress);
        match self.stage() {
            _ if quiet < self.timeout() => {
                self.watchdog.armed = true;
                ctx.set_timer(SimDuration(self.timeout().as_nanos() - quiet.as_nanos()), WATCHDOG);
            }
            Stage::Joining { asked } if asked < JOIN_ASKS => {
                self.stage = Step::Joining { asked: asked + 1 };
                self.ask_to_join(ctx);
            }
            _ => {
                ctx.note(format!("timeout in iteration {} (epoch {})", self.done, self.now.epoch));
                self.start_probe(ctx, self.now.epoch + 1);
            }
        }
    }

    /// Every timeout the lowest member invites the ranks outside the membership to join (a
    /// restarted rank, or the other side of a healed partition).
    pub(super) fn on_hello(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        ctx.set_timer(self.timeout(), HELLO);
        let rank = ctx.rank();
        let joining = matches!(self.stage, Step::Joining { .. });
        if self.probing.is_none() && !joining && self.now.members[0] == rank {
            for r in (0..ctx.ranks()).filter(|r| self.now.members.binary_search(r).is_err()) {
                ctx.send(r, SyncMsg::Join { epoch: self.now.epoch }, SMALL);
            }
        }
    }

    /// Starts a probe of `epoch`: pauses the iteration and asks every rank to answer.
    fn start_probe(&mut self, ctx: &mut dyn Context<SyncMsg>, epoch: u32) {
        self.collective.abandon(ctx.sharing());
        if let Step::Reducing(grad) = &self.stage {
            // The gradient is kept; the reduction starts over.
            self.stage = Step::Computing(Gradient::Ready(grad.clone()));
        }
        self.invalidate();
        let rank = ctx.rank();
        let view = self.replica_view();
        self.probing = Some(Probing { epoch, responders: [(rank, (self.done, view))].into_iter().collect() });
        for r in (0..ctx.ranks()).filter(|&r| r != rank) {
            ctx.send(r, SyncMsg::Probe { epoch, done: self.done, view }, SMALL);
        }
        ctx.set_phase(Phase::Communicating);
        let tag = self.tag(PROBE_END);
        ctx.set_timer(self.timeout().mul_f64(0.5), tag);
    }

    /// The view whose all-reduces made this replica, or `u64::MAX` while it awaits a donor's state
    /// (its replica is then stale, whatever its view).
    fn replica_view(&self) -> u64 {
        if self.stage().awaits_state() {
            u64::MAX
        } else {
            self.now.view
        }
    }

    /// A probe: join it if it is newer, merge with a group outside the membership, and count the
    /// sender (its completed iterations and replica's view) as a responder of this worker's probe
    /// of the same epoch.
    pub(super) fn on_probe(&mut self, ctx: &mut dyn Context<SyncMsg>, from: usize, epoch: u32, done: (u64, u64)) {
        let current = self.probing.as_ref().map_or(self.now.epoch, |p| p.epoch);
        if epoch > current {
            self.start_probe(ctx, epoch);
        } else if self.probing.is_none() && self.now.members.binary_search(&from).is_err() {
            // A prober from another group (a healed partition): merge in a newer epoch.
            self.start_probe(ctx, self.now.epoch.max(epoch) + 1);
        }
        if let Some(p) = self.probing.as_mut().filter(|p| p.epoch == epoch) {
            p.responders.insert(from, done);
        }
    }

    /// A rank asks to join: answer with the running probe, or start one that takes it in.
    pub(super) fn on_join(&mut self, ctx: &mut dyn Context<SyncMsg>, from: usize, epoch: u32) {
        if let Some(p) = &self.probing {
            let probe = SyncMsg::Probe { epoch: p.epoch, done: self.done, view: p.responders[&ctx.rank()].1 };
            ctx.send(from, probe, SMALL);
        } else if !matches!(self.stage, Step::Joining { .. }) {
            ctx.note(format!("rank {from} (epoch {epoch}) joins"));
            self.start_probe(ctx, self.now.epoch.max(epoch) + 1);
        }
    }

    /// The probe is over: the responders are the new membership, and the one with the most
    /// completed iterations (lowest rank on ties) is the donor of the state. Members whose
    /// replica comes from the donor's view after as many iterations hold the donor's replica
    /// already: they go on without a hand-off (the donor sends its state only to the others), so
    /// a membership change that keeps the members in step costs no state transfer (sending the
    /// whole model to every member from one NIC can take longer than the timeout, and the next
    /// probe would start the same transfer again).
    pub(super) fn end_probe(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let Some(p) = self.probing.take() else { return };
        self.gen += 1;
        let rank = ctx.rank();
        let members: Vec<usize> = p.responders.keys().copied().collect();
        self.now = Membership { view: super::view_id(p.epoch, &members), members: members.into(), epoch: p.epoch };
        self.collective.drop_before(self.now.view);
        let view = self.now.view;
        self.gathered.retain(|k, _| k.0 >= view);
        let max_done = p.responders.values().map(|&(d, _)| d).max().expect("self responded");
        ctx.note(format!("epoch {}: members {:?} at iteration {max_done}", self.now.epoch, self.now.members));
        let (donor, from) = p.responders.iter().find(|(_, &(d, _))| d == max_done).map(|(&r, &s)| (r, s)).expect("max");
        let in_step = |s: &(u64, u64)| *s == from && from.1 != u64::MAX;
        if donor != rank && !in_step(&p.responders[&rank]) {
            // Everyone adopts the donor's state, so replicas are bit-identical after any
            // membership change (two halves of a healed partition may have equal counts but
            // different parameters).
            self.stage = Step::AwaitingState(self.stage.gradient());
            self.arm_watchdog(ctx);
            if let Some(state) = self.pending_state.take() {
                self.on_state(ctx, state);
            }
            return;
        }
        let grad = self.stage.gradient();
        self.stage = Step::Computing(grad.clone());
        if donor == rank {
            self.hand_state(ctx, &p, in_step);
        }
        match grad {
            Gradient::Ready(_) => self.start_reduce(ctx),
            Gradient::Absent => self.begin_iteration(ctx),
            Gradient::Pending(_) => {} // it goes on when the gradient is done
        }
    }

    /// The donor sends its parameters and optimizer state to every other responder not `in_step`.
    fn hand_state(&mut self, ctx: &mut dyn Context<SyncMsg>, p: &Probing, in_step: impl Fn(&(u64, u64)) -> bool) {
        let rank = ctx.rank();
        // The members that adopt this state share the donor's vectors (see `crate::sharing`).
        self.params = ctx.sharing().share(self.params.clone());
        let velocity = ctx.sharing().share(self.opt.shared_velocity().clone());
        self.opt.adopt_shared(velocity, self.opt.steps());
        for (&m, _) in p.responders.iter().filter(|(&m, s)| m != rank && !in_step(s)) {
            let msg = SyncMsg::State(Box::new(StateMsg {
                epoch: self.now.epoch,
                view: self.now.view,
                done: self.done,
                params: Vec::clone(&self.params),
                velocity: self.opt.velocity().to_vec(),
                steps: self.opt.steps(),
            }));
            ctx.send(m, msg, 2 * Self::bytes(ctx));
        }
    }

    /// A restarted rank asks every other rank to take it back.
    pub(super) fn ask_to_join(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let rank = ctx.rank();
        for r in (0..ctx.ranks()).filter(|&r| r != rank) {
            ctx.send(r, SyncMsg::Join { epoch: self.now.epoch }, SMALL);
        }
        ctx.set_phase(Phase::Communicating);
        self.arm_watchdog(ctx);
    }

    /// A donor's state: kept until this worker's own probe is over, adopted if the worker
    /// awaits it, ignored if it is stale.
    pub(super) fn on_state(&mut self, ctx: &mut dyn Context<SyncMsg>, msg: Box<StateMsg>) {
        if msg.epoch > self.now.epoch || self.probing.is_some() {
            self.pending_state = Some(msg);
            return;
        }
        let StateMsg { epoch, view, done, params, velocity, steps } = *msg;
        // A state of an older epoch, or of another view of this one (a prober that heard other
        // responders formed other members, with another donor: found by `dsgd torture`, where
        // adopting it left two members of one view with different replicas), is ignored.
        if epoch < self.now.epoch || view != self.now.view || !self.stage().awaits_state() {
            return;
        }
        let velocity = Self::share(ctx, velocity);
        self.opt.adopt_shared(velocity, steps);
        self.adopt(ctx, params, done);
    }
}
