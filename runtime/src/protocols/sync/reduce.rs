//! The three ways a synchronous worker reduces its gradient ([`Mode`]): a message-level
//! collective, the analytic closed form, and backup-worker aggregation. Each mode starts in
//! [`SyncWorker::start_reduce`] and ends in [`SyncWorker::step`], which applies the average and
//! begins the next iteration (through [`SyncWorker::finish`] where the mode holds a sum). Where
//! the executor keeps a ring board ([`crate::sharing`]), the ring's average comes from it and the
//! ring's messages carry no values.

use super::{Gradient, Membership, Mode, Step, SyncMsg, SyncWorker, ANALYTIC_DONE};
use crate::collectives::{self, CollectiveKind, Groups, Run, Schedule};
use crate::protocol::{Context, Phase};
use crate::sharing::{scaled, sum_in_order, RingKey, Seat, Sharing};
use dsgd_sim::SimTime;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A gradient received for (view, iteration): sender, when it was ready, values (shared by every
/// member in the analytic modes).
type Contribution = (usize, SimTime, Arc<Vec<f32>>);

/// Gradients received by the analytic and backup modes, by (view, iteration).
pub(super) type Gathered = BTreeMap<(u64, u64), Vec<Contribution>>;

/// The message-level collective of one member.
pub(super) struct CollectiveState {
    /// The collective of the current iteration (of one bucket, with buckets), while it runs.
    pub(super) run: Option<Run>,
    /// Rounds that arrived before this member started them, by (view, iteration, bucket, round).
    early: BTreeMap<(u64, u64, u32, u32), Vec<f32>>,
    /// The member's schedule of a view (the same every iteration).
    schedule: Option<(u64, Schedule)>,
    /// The hierarchical collectives' groups of a view (at the start one list shared by all).
    groups: Option<(u64, Arc<Groups>)>,
    /// The iteration and member index under which this member's gradient is on the executor's
    /// ring board, until it takes the average or gives the iteration up.
    pub(super) deposited: Option<(RingKey, usize)>,
    /// The buckets' progress through the iteration (with buckets).
    pub(super) pipeline: Option<super::pipeline::Pipeline>,
}

impl CollectiveState {
    pub(super) fn new(groups: Option<(u64, Arc<Groups>)>) -> Self {
        CollectiveState { run: None, early: BTreeMap::new(), schedule: None, groups, deposited: None, pipeline: None }
    }

    /// Stops the running collective (a probe), giving its place on the ring board up.
    pub(super) fn abandon(&mut self, sharing: &mut dyn Sharing) {
        self.run = None;
        if let Some(p) = self.pipeline.as_mut() {
            p.restart();
        }
        if let Some((key, me)) = self.deposited.take() {
            sharing.ring_leave(key, me);
        }
    }

    /// Forgets the running collective and every round received (a crash; the executor gives the
    /// crashed rank's places on its ring board up).
    pub(super) fn clear(&mut self) {
        self.run = None;
        if let Some(p) = self.pipeline.as_mut() {
            p.restart();
        }
        self.deposited = None;
        self.early.clear();
    }

    /// Drops the rounds of views older than `view` (a membership change).
    pub(super) fn drop_before(&mut self, view: u64) {
        self.early.retain(|k, _| k.0 >= view);
    }

    /// The members in the hierarchical collectives' groups, built once a view.
    pub(super) fn groups(&mut self, now: &Membership, group_size: Option<usize>) -> Arc<Groups> {
        match &self.groups {
            Some((view, g)) if *view == now.view => g.clone(),
            _ => {
                let size = group_size.unwrap_or(now.members.len());
                let g = Arc::new(Groups::of_ranks(&now.members, size));
                self.groups = Some((now.view, g.clone()));
                g
            }
        }
    }
}

impl SyncWorker {
    /// The gradient is ready and no probe runs: reduce it in this worker's mode.
    pub(super) fn start_reduce(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let Gradient::Ready(grad) = self.stage.gradient() else { unreachable!("a gradient is ready") };
        let rank = ctx.rank();
        let Some(me) = self.me(rank) else { return };
        self.stage = Step::Reducing(grad.clone());
        ctx.set_phase(Phase::Communicating);
        self.arm_watchdog(ctx);
        let (view, iter, ready) = (self.now.view, self.done, ctx.now());
        match self.mode {
            Mode::Collective => self.start_collective(ctx, me, grad),
            Mode::Backup if rank != self.aggregator() => {
                let msg = SyncMsg::Grad { view, iter, ready, data: grad };
                ctx.send(self.aggregator(), msg, Self::bytes(ctx));
            }
            Mode::Backup | Mode::Analytic => {
                if self.mode == Mode::Analytic {
                    for &m in self.now.members.iter().filter(|&&m| m != rank) {
                        ctx.send(m, SyncMsg::Grad { view, iter, ready, data: grad.clone() }, 0);
                    }
                }
                self.gathered.entry((view, iter)).or_default().push((rank, ready, grad));
                self.check_gathered(ctx);
            }
        }
    }

    /// Message-level mode: runs this member's schedule, with the rounds that came early. A ring
    /// whose gradients the executor's board holds sends messages without values.
    fn start_collective(&mut self, ctx: &mut dyn Context<SyncMsg>, me: usize, grad: Arc<Vec<f32>>) {
        if self.collective.pipeline.is_some() {
            return self.buckets_gradient_ready(ctx, me, grad);
        }
        let key = (self.now.view, self.done);
        let wire = collectives::wire_params(ctx.workload());
        let steps = match &self.collective.schedule {
            Some((view, steps)) if *view == self.now.view => steps.clone(),
            _ => {
                let steps = if self.cfg.collective == CollectiveKind::Hierarchical {
                    Schedule::hierarchical(self.collective.groups(&self.now, self.cfg.group_size), me, wire)
                } else {
                    Schedule::new(self.cfg.collective, self.now.members.len(), me, wire)
                };
                self.collective.schedule = Some((self.now.view, steps.clone()));
                steps
            }
        };
        let seat = Seat { key, of: self.now.members.len(), me, rank: ctx.rank() };
        let on_board =
            self.cfg.collective == CollectiveKind::Ring && ctx.sharing().ring_deposit(seat, grad.clone(), wire);
        let buf = if on_board {
            self.collective.deposited = Some((key, me));
            Vec::new()
        } else {
            Vec::clone(&grad)
        };
        self.launch(ctx, 0, Run::new(steps, buf, wire));
    }

    /// Starts `run`, the collective of `bucket` (0 without buckets), with the rounds of it that
    /// came early (older views, iterations and buckets are dropped).
    pub(super) fn launch(&mut self, ctx: &mut dyn Context<SyncMsg>, bucket: u32, mut run: Run) {
        let key = (self.now.view, self.done);
        let early = &mut self.collective.early;
        let later = early.split_off(&(key.0, key.1, bucket + 1, 0));
        let this = early.split_off(&(key.0, key.1, bucket, 0));
        *early = later;
        for ((_, _, _, round), data) in this {
            run.deliver(round, data);
        }
        self.collective.run = Some(run);
        self.poll_run(ctx);
    }

    /// A round of the message-level collective: delivered to the running collective, kept for
    /// later, or dropped if it belongs to an iteration that is over.
    pub(super) fn on_chunk(
        &mut self,
        ctx: &mut dyn Context<SyncMsg>,
        key: (u64, u64),
        (bucket, round): (u32, u32),
        data: Vec<f32>,
    ) {
        if key < (self.now.view, self.done) {
            return;
        }
        if key == (self.now.view, self.done) && self.probing.is_none() && bucket == self.running_bucket() {
            if let Some(run) = self.collective.run.as_mut() {
                run.deliver(round, data);
                self.arm_watchdog(ctx);
                self.poll_run(ctx);
                return;
            }
        }
        self.collective.early.insert((key.0, key.1, bucket, round), data);
    }

    /// Sends what the collective can send now; finishes the iteration when it is complete.
    fn poll_run(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let bucket = self.running_bucket();
        let Some(run) = self.collective.run.as_mut() else { return };
        let (view, iter, members) = (self.now.view, self.done, &self.now.members);
        let finished = run.poll(|o| {
            let bytes = 4 * o.range.len() as u64;
            let msg = SyncMsg::Chunk { view, iter, bucket, round: o.round, data: o.data };
            ctx.send(members[o.to], msg, bytes);
        });
        if finished {
            let sum = self.collective.run.take().expect("running").into_result();
            if self.collective.pipeline.is_some() {
                return self.bucket_done(ctx, sum);
            }
            match self.collective.deposited.take() {
                Some((key, me)) => {
                    let wire = collectives::wire_params(ctx.workload());
                    let avg = ctx.sharing().ring_average(key, me, wire);
                    self.step(ctx, &avg);
                }
                None => {
                    let p = self.now.members.len();
                    self.finish(ctx, sum, p);
                }
            }
        }
    }

    /// A gradient for the analytic or backup mode.
    pub(super) fn on_grad(
        &mut self,
        ctx: &mut dyn Context<SyncMsg>,
        from: usize,
        key: (u64, u64),
        ready: SimTime,
        data: Arc<Vec<f32>>,
    ) {
        if key < (self.now.view, self.done) {
            return;
        }
        self.gathered.entry(key).or_default().push((from, ready, data));
        if self.probing.is_none() {
            self.check_gathered(ctx);
        }
    }

    /// The analytic and backup modes act once enough gradients are in.
    fn check_gathered(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        if !matches!(self.stage, Step::Reducing(_)) {
            return;
        }
        let key = (self.now.view, self.done);
        let have = self.gathered.get(&key).map_or(0, Vec::len);
        let p = self.now.members.len();
        match self.mode {
            Mode::Backup => {
                let need = p.saturating_sub(self.cfg.backup_workers).max(1);
                if have < need || ctx.rank() != self.aggregator() {
                    return;
                }
                let got = self.gathered.remove(&key).expect("present");
                let dropped = got.len() - need;
                let sum = sum_in_order(got.into_iter().take(need).map(|(_, _, g)| g));
                if dropped > 0 {
                    ctx.note(format!("iteration {}: dropped {dropped} late gradients", self.done));
                }
                self.finish(ctx, sum, need);
            }
            Mode::Analytic if have == p => {
                let last = self.gathered[&key].iter().map(|g| g.1).max().expect("non-empty");
                let cost = self.cfg.cost.expect("analytic mode has a cost model");
                let took = if self.cfg.collective == CollectiveKind::AnalyticHierarchical {
                    cost.hierarchical(&self.collective.groups(&self.now, self.cfg.group_size), Self::bytes(ctx))
                } else {
                    cost.ring(p, Self::bytes(ctx))
                };
                let tag = self.tag(ANALYTIC_DONE);
                ctx.set_timer((last + took).saturating_since(ctx.now()), tag);
            }
            Mode::Analytic | Mode::Collective => {}
        }
    }

    /// Analytic mode: the closed form's time has passed; sum the gradients in rank order.
    pub(super) fn analytic_done(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let mut got = self.gathered.remove(&(self.now.view, self.done)).unwrap_or_default();
        got.sort_by_key(|g| g.0);
        let avg = ctx.sharing().average(got.into_iter().map(|g| g.2).collect());
        self.step(ctx, &avg);
    }

    /// Applies the average of `contributors` gradients whose sum is `sum` (see [`Self::step`]).
    pub(super) fn finish(&mut self, ctx: &mut dyn Context<SyncMsg>, sum: Vec<f32>, contributors: usize) {
        self.step(ctx, &Arc::new(scaled(sum, contributors)));
    }

    /// Applies the average gradient, records the iteration, sends the new parameters in backup
    /// mode, and begins the next iteration.
    pub(super) fn step(&mut self, ctx: &mut dyn Context<SyncMsg>, avg: &Arc<Vec<f32>>) {
        ctx.sharing().step(&mut self.params, &mut self.opt, avg);
        self.done += 1;
        self.invalidate();
        let rank = ctx.rank();
        if rank == self.recorder() {
            ctx.record_update(0);
            ctx.record_iteration(ctx.now() - self.iter_start);
        }
        if self.mode == Mode::Backup && rank == self.aggregator() {
            for &m in self.now.members.iter().filter(|&&m| m != rank) {
                let msg = SyncMsg::Params { view: self.now.view, iter: self.done, params: Vec::clone(&self.params) };
                ctx.send(m, msg, Self::bytes(ctx));
            }
        }
        let (view, done) = (self.now.view, self.done);
        self.gathered.retain(|k, _| k.0 >= view && k.1 >= done);
        self.begin_iteration(ctx);
    }

    /// The backup mode's aggregator: the lowest-ranked member.
    fn aggregator(&self) -> usize {
        self.now.members[0]
    }

    /// The member that records iterations: one that has the result last. In a binomial tree the
    /// root is done as soon as it has *sent* the broadcast, while every odd member receives it in
    /// the last round, so member 1 records there; elsewhere every member finishes together and
    /// member 0 records.
    fn recorder(&self) -> usize {
        let members = &self.now.members;
        if self.cfg.collective == CollectiveKind::Tree && self.mode == Mode::Collective && members.len() > 1 {
            members[1]
        } else {
            members[0]
        }
    }
}
