//! The three ways a synchronous worker reduces its gradient ([`Mode`]): a message-level
//! collective, the analytic closed form, and backup-worker aggregation. Each mode starts in
//! [`SyncWorker::start_reduce`] and ends in [`SyncWorker::step`], which applies the average and
//! begins the next iteration (through [`SyncWorker::finish`] where the mode holds a sum). In the
//! simulator the ring's average comes from a board shared by the members ([`SharedRing`]).

use super::shared_ring::SharedRing;
use super::{Membership, Mode, Stage, SyncMsg, SyncWorker, ANALYTIC_DONE};
use crate::collectives::{self, CollectiveKind, Groups, Outgoing, Run, Schedule};
use crate::protocol::{Context, Phase};
use dsgd_sim::SimTime;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

/// A gradient received for (view, iteration): sender, when it was ready, values (shared by every
/// member in the analytic modes).
type Contribution = (usize, SimTime, Arc<Vec<f32>>);

/// The analytic modes' averages, shared by the workers of one simulated run. Every member of an
/// iteration sums the same gradients (the very same shared vectors) in the same rank order, so
/// the first member computes the average and the others share it: p sums of p gradients an
/// iteration become one. Only a cache: an average is found by the identity of the vectors it was
/// computed from (held weakly, so no gradient is kept alive by it, and no other vector can take
/// a freed one's address while it is held), and an evicted one is computed again with the same
/// bits.
#[derive(Debug, Default)]
pub struct AnalyticSums {
    entries: VecDeque<SumEntry>,
}

/// An average and the vectors it was computed from, in order.
type SumEntry = (Vec<Weak<Vec<f32>>>, Arc<Vec<f32>>);

impl AnalyticSums {
    /// Averages kept: the current iteration's, and one a member still finishing may ask for.
    const KEEP: usize = 2;

    /// The average of `got` (summed in rank order).
    fn average(&mut self, got: Vec<Contribution>) -> Arc<Vec<f32>> {
        let same = |from: &[Weak<Vec<f32>>]| {
            from.len() == got.len() && from.iter().zip(&got).all(|(w, g)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&g.2)))
        };
        if let Some((_, sum)) = self.entries.iter().find(|(from, _)| same(from)) {
            return sum.clone();
        }
        let from = got.iter().map(|g| Arc::downgrade(&g.2)).collect();
        let p = got.len();
        let avg = Arc::new(scaled(sum_in_order(got.into_iter().map(|g| g.2)), p));
        if self.entries.len() == Self::KEEP {
            self.entries.pop_front();
        }
        self.entries.push_back((from, avg.clone()));
        avg
    }
}

/// Gradients received by the analytic and backup modes, by (view, iteration).
pub(super) type Gathered = BTreeMap<(u64, u64), Vec<Contribution>>;

/// The message-level collective of one member.
pub(super) struct CollectiveState {
    /// The collective of the current iteration, while it runs.
    run: Option<Run>,
    /// Rounds that arrived before this member started them, by (view, iteration, round).
    early: BTreeMap<(u64, u64, u32), Vec<f32>>,
    /// The member's schedule of a view (the same every iteration).
    schedule: Option<(u64, Schedule)>,
    /// The hierarchical collectives' groups of a view (at the start one list shared by all).
    groups: Option<(u64, Arc<Groups>)>,
    /// The collective's messages of one poll (kept to reuse its allocation).
    outbox: Vec<Outgoing>,
    /// The ring's board when every member runs in this process (see [`SharedRing`]).
    shared: Option<Arc<Mutex<SharedRing>>>,
    /// The iteration (view, iteration) and member index under which this member's gradient is
    /// on the board, until it takes the average or gives the iteration up.
    deposited: Option<((u64, u64), usize)>,
}

impl CollectiveState {
    pub(super) fn new(groups: Option<(u64, Arc<Groups>)>, shared: Option<Arc<Mutex<SharedRing>>>) -> Self {
        CollectiveState {
            run: None,
            early: BTreeMap::new(),
            schedule: None,
            groups,
            outbox: Vec::new(),
            shared,
            deposited: None,
        }
    }

    /// Stops the running collective (a probe or a crash).
    pub(super) fn abandon(&mut self) {
        self.run = None;
        if let Some((key, me)) = self.deposited.take() {
            self.board().leave(key, me);
        }
    }

    /// Forgets every round received (a crash).
    pub(super) fn clear(&mut self) {
        self.abandon();
        self.early.clear();
    }

    /// The shared ring's board (there is one when a gradient is on it).
    fn board(&self) -> std::sync::MutexGuard<'_, SharedRing> {
        self.shared.as_ref().expect("a shared ring").lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the rounds of views older than `view` (a membership change).
    pub(super) fn drop_before(&mut self, view: u64) {
        self.early.retain(|k, _| k.0 >= view);
    }

    /// The members in the hierarchical collectives' groups, built once a view.
    fn groups(&mut self, now: &Membership, group_size: Option<usize>) -> Arc<Groups> {
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
        let grad = self.grad.clone().expect("a gradient is ready");
        let rank = ctx.rank();
        let Some(me) = self.me(rank) else { return };
        self.stage = Stage::Reducing;
        ctx.set_phase(Phase::Communicating);
        self.arm_watchdog(ctx);
        let (view, iter, ready) = (self.now.view, self.done, ctx.now());
        match self.mode {
            Mode::Collective => self.start_collective(ctx, me, grad),
            Mode::Backup if rank != self.aggregator() => {
                let msg = SyncMsg::Grad { view, iter, ready, data: Vec::clone(&grad) };
                ctx.send(self.aggregator(), msg, Self::bytes(ctx));
            }
            Mode::Backup | Mode::Analytic => {
                if self.mode == Mode::Analytic {
                    for &m in self.now.members.iter().filter(|&&m| m != rank) {
                        ctx.send(m, SyncMsg::Shared { view, iter, ready, data: grad.clone() }, 0);
                    }
                }
                self.gathered.entry((view, iter)).or_default().push((rank, ready, grad));
                self.check_gathered(ctx);
            }
        }
    }

    /// Message-level mode: runs this member's schedule, with the rounds that came early. A
    /// shared ring's messages carry no values: the gradient goes on the board instead.
    fn start_collective(&mut self, ctx: &mut dyn Context<SyncMsg>, me: usize, grad: Arc<Vec<f32>>) {
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
        let buf = if self.collective.shared.is_some() {
            self.collective.board().deposit(key, self.now.members.len(), me, grad, wire);
            self.collective.deposited = Some((key, me));
            Vec::new()
        } else {
            Vec::clone(&grad)
        };
        let mut run = Run::new(steps, buf, wire);
        // Rounds that came early are moved into the run (older views and iterations dropped).
        let early = &mut self.collective.early;
        let later = early.split_off(&(key.0, key.1 + 1, 0));
        let this = early.split_off(&(key.0, key.1, 0));
        *early = later;
        for ((_, _, round), data) in this {
            run.deliver(round, data);
        }
        self.collective.run = Some(run);
        self.poll_run(ctx);
    }

    /// A round of the message-level collective: delivered to the running collective, kept for
    /// later, or dropped if it belongs to an iteration that is over.
    pub(super) fn on_chunk(&mut self, ctx: &mut dyn Context<SyncMsg>, key: (u64, u64), round: u32, data: Vec<f32>) {
        if key < (self.now.view, self.done) {
            return;
        }
        if key == (self.now.view, self.done) && self.probing.is_none() {
            if let Some(run) = self.collective.run.as_mut() {
                run.deliver(round, data);
                self.arm_watchdog(ctx);
                self.poll_run(ctx);
                return;
            }
        }
        self.collective.early.insert((key.0, key.1, round), data);
    }

    /// Sends what the collective can send now; finishes the iteration when it is complete.
    fn poll_run(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let Some(run) = self.collective.run.as_mut() else { return };
        let mut out = std::mem::take(&mut self.collective.outbox);
        let finished = run.poll(&mut out);
        for o in out.drain(..) {
            let bytes = 4 * o.range.len() as u64;
            let msg = SyncMsg::Chunk { view: self.now.view, iter: self.done, round: o.round, data: o.data };
            ctx.send(self.now.members[o.to], msg, bytes);
        }
        self.collective.outbox = out;
        if finished {
            let sum = self.collective.run.take().expect("running").into_result();
            match self.collective.deposited.take() {
                Some((key, me)) => {
                    let wire = collectives::wire_params(ctx.workload());
                    let avg = self.collective.board().average(key, me, wire);
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
        if self.stage != Stage::Reducing {
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
        let avg = self.sums.lock().unwrap_or_else(|e| e.into_inner()).average(got);
        self.step(ctx, &avg);
    }

    /// Applies the average of `contributors` gradients whose sum is `sum` (see [`Self::step`]).
    fn finish(&mut self, ctx: &mut dyn Context<SyncMsg>, sum: Vec<f32>, contributors: usize) {
        self.step(ctx, &Arc::new(scaled(sum, contributors)));
    }

    /// Applies the average gradient, records the iteration, sends the new parameters in backup
    /// mode, and begins the next iteration.
    fn step(&mut self, ctx: &mut dyn Context<SyncMsg>, avg: &Arc<Vec<f32>>) {
        let mut replicas = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
        replicas.step(&mut self.params, &mut self.opt, avg);
        drop(replicas);
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

/// The average of `contributors` vectors whose sum is `sum`.
fn scaled(mut sum: Vec<f32>, contributors: usize) -> Vec<f32> {
    let scale = 1.0 / contributors as f32;
    sum.iter_mut().for_each(|x| *x *= scale);
    sum
}

/// Sums vectors in the given order (empty vectors stay empty: timing-only workloads); the first
/// is summed into in place when nothing else holds it.
fn sum_in_order(mut vs: impl Iterator<Item = Arc<Vec<f32>>>) -> Vec<f32> {
    let mut acc = vs.next().map(Arc::unwrap_or_clone).unwrap_or_default();
    for v in vs {
        acc.iter_mut().zip(v.iter()).for_each(|(a, b)| *a += b);
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contributions(values: &[Vec<f32>]) -> Vec<Contribution> {
        values.iter().enumerate().map(|(r, v)| (r, SimTime::ZERO, Arc::new(v.clone()))).collect()
    }

    #[test]
    fn the_analytic_sum_is_computed_once_for_the_same_vectors_and_again_for_others() {
        let mut sums = AnalyticSums::default();
        let got = contributions(&[vec![1.0, 2.0], vec![0.5, 0.25], vec![4.0, 8.0]]);
        let first = sums.average(got.clone());
        assert_eq!(*first, scaled(vec![5.5, 10.25], 3));
        // Every member asks with the same shared vectors: the cached sum, no new entry.
        for _ in 0..5 {
            assert!(Arc::ptr_eq(&sums.average(got.clone()), &first));
        }
        assert_eq!(sums.entries.len(), 1);
        // Equal values in other vectors (another iteration) are summed anew, not taken for these.
        let other = contributions(&[vec![1.0, 2.0], vec![0.5, 0.25], vec![4.0, 9.0]]);
        assert_eq!(*sums.average(other.clone()), scaled(vec![5.5, 11.25], 3));
        assert_eq!(sums.entries.len(), 2);
        // A subset of the vectors (a member that lost one) is another sum.
        assert_eq!(*sums.average(got[..2].to_vec()), vec![0.75, 1.125]);
        assert_eq!(sums.entries.len(), AnalyticSums::KEEP);
        // The cache holds no gradient alive.
        let weak = Arc::downgrade(&other[2].2);
        drop(other);
        assert!(weak.upgrade().is_none());
    }
}
