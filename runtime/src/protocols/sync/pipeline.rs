//! A synchronous iteration with gradient buckets ([`super::buckets`]): the buckets are
//! all-reduced one after another, each with the configured collective, and the step waits for
//! the last.
//!
//! Without overlap every bucket is ready when the gradient is, and each run carries its slice of
//! the gradient, so a real run computes the same bits. With overlap (the simulator only: it
//! needs to know when the backward pass will end) bucket `k` is ready at its share of the
//! gradient's duration and its run may start before the gradient exists, so the runs carry no
//! values: every member's gradient goes on the executor's ring board when it is ready, and the
//! average is the board's (the ring's order of additions over the whole vector). The last
//! bucket holds the first layer and is ready with the gradient, so no member's last run can end
//! before every member has put its gradient on the board.

use super::buckets::{self, Bucket};
use super::{SyncMsg, SyncWorker, BUCKET_READY};
use crate::collectives::{self, CollectiveKind, Run, Schedule};
use crate::protocol::Context;
use crate::sharing::Seat;
use dsgd_sim::{SimDuration, SimTime};
use std::sync::Arc;

/// The buckets' progress through one iteration.
pub(super) struct Pipeline {
    buckets: Arc<[Bucket]>,
    /// The bucket running, or the next to start.
    pub next: usize,
    /// Buckets whose gradients are ready.
    ready: usize,
    /// The gradient with the finished buckets' sums written over it (without the board).
    sum: Vec<f32>,
    /// Overlap: the runs carry no values and the average comes from the executor's board
    /// (fixed for the run, so every member agrees).
    board: bool,
    /// This iteration's gradient: when it started and when it will be ready (overlap, more than
    /// one bucket, and no probe since it started).
    clock: Option<(SimTime, SimTime)>,
    /// Each bucket's schedule for a membership view.
    schedules: Option<(u64, Arc<[Schedule]>)>,
    /// When the running bucket's collective started.
    run_started: SimTime,
}

impl Pipeline {
    /// Back to the first bucket, none ready (a new iteration, or a probe).
    pub fn restart(&mut self) {
        self.next = 0;
        self.ready = 0;
        self.sum = Vec::new();
        self.clock = None;
    }

    /// When bucket `k` is ready.
    fn ready_at(&self, k: usize) -> Option<SimTime> {
        let (start, due) = self.clock?;
        let span = due.saturating_since(start).as_nanos() as f64;
        Some(start + SimDuration((span * self.buckets[k].ready).round() as u64))
    }
}

impl SyncWorker {
    /// The bucket whose collective runs (0 without buckets).
    pub(super) fn running_bucket(&self) -> u32 {
        self.collective.pipeline.as_ref().map_or(0, |p| p.next as u32)
    }

    /// A new iteration's gradient started, to be ready at `due` where the executor knows it.
    pub(super) fn begin_buckets(&mut self, ctx: &mut dyn Context<SyncMsg>, due: Option<SimTime>) {
        let cfg = self.cfg.buckets.expect("bucketed");
        let pipeline = self.collective.pipeline.get_or_insert_with(|| {
            let wire = collectives::wire_params(ctx.workload());
            Pipeline {
                buckets: buckets::layout(&cfg, &ctx.workload().profile(), wire).into(),
                next: 0,
                ready: 0,
                sum: Vec::new(),
                board: cfg.overlap && due.is_some(),
                clock: None,
                schedules: None,
                run_started: SimTime::ZERO,
            }
        });
        pipeline.restart();
        if pipeline.board && pipeline.buckets.len() > 1 {
            pipeline.clock = due.map(|d| (ctx.now(), d));
            self.time_next_bucket(ctx);
        }
    }

    /// Sets the timer of the next bucket that becomes ready before the gradient does.
    fn time_next_bucket(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let p = self.collective.pipeline.as_ref().expect("bucketed");
        if p.ready + 1 >= p.buckets.len() {
            return; // the last bucket is ready with the gradient
        }
        if let Some(at) = p.ready_at(p.ready) {
            let tag = self.tag(BUCKET_READY);
            ctx.set_timer(at.saturating_since(ctx.now()), tag);
        }
    }

    /// The backward pass has produced the next bucket (overlap).
    pub(super) fn bucket_ready(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let Some(p) = self.collective.pipeline.as_mut() else { return };
        if self.probing.is_some() || p.clock.is_none() || p.ready + 1 >= p.buckets.len() {
            return;
        }
        p.ready += 1;
        self.time_next_bucket(ctx);
        self.pump(ctx);
    }

    /// The whole gradient is ready and no probe runs: every bucket is ready.
    pub(super) fn buckets_gradient_ready(&mut self, ctx: &mut dyn Context<SyncMsg>, me: usize, grad: Arc<Vec<f32>>) {
        let p = self.collective.pipeline.as_mut().expect("bucketed");
        p.ready = p.buckets.len();
        if p.board {
            let key = (self.now.view, self.done);
            let seat = Seat { key, of: self.now.members.len(), me, rank: ctx.rank() };
            let wire = collectives::wire_params(ctx.workload());
            let held = ctx.sharing().ring_deposit(seat, grad, wire);
            assert!(held, "overlap runs only where the executor knows when gradients end, which has a board");
            self.collective.deposited = Some((key, me));
        } else {
            p.sum = Vec::clone(&grad);
        }
        self.pump(ctx);
    }

    /// Starts the next bucket's collective if it is ready and none runs.
    fn pump(&mut self, ctx: &mut dyn Context<SyncMsg>) {
        let Some(p) = self.collective.pipeline.as_ref() else { return };
        if self.collective.run.is_some() || p.next >= p.ready || self.probing.is_some() {
            return;
        }
        let Some(me) = self.me(ctx.rank()) else { return };
        let k = p.next;
        let steps = self.bucket_schedules(me)[k].clone();
        let p = self.collective.pipeline.as_ref().expect("bucketed");
        let b = p.buckets[k];
        let buf = if p.board { Vec::new() } else { p.sum[b.real(p.sum.len(), p.wire_total())].to_vec() };
        let now = ctx.now();
        self.collective.pipeline.as_mut().expect("bucketed").run_started = now;
        self.launch(ctx, k as u32, Run::new(steps, buf, b.wire()));
    }

    /// Each bucket's schedule for this member in the current view.
    fn bucket_schedules(&mut self, me: usize) -> Arc<[Schedule]> {
        let view = self.now.view;
        if let Some((v, s)) = &self.collective.pipeline.as_ref().expect("bucketed").schedules {
            if *v == view {
                return s.clone();
            }
        }
        let groups = (self.cfg.collective == CollectiveKind::Hierarchical)
            .then(|| self.collective.groups(&self.now, self.cfg.group_size));
        let p = self.collective.pipeline.as_mut().expect("bucketed");
        let p_members = self.now.members.len();
        let s: Arc<[Schedule]> = p
            .buckets
            .iter()
            .map(|b| match &groups {
                Some(g) => Schedule::hierarchical(g.clone(), me, b.wire()),
                None => Schedule::new(self.cfg.collective, p_members, me, b.wire()),
            })
            .collect();
        p.schedules = Some((view, s.clone()));
        s
    }

    /// The running bucket's collective finished with `sum`: on to the next bucket, or the step.
    pub(super) fn bucket_done(&mut self, ctx: &mut dyn Context<SyncMsg>, sum: Vec<f32>) {
        let p = self.collective.pipeline.as_mut().expect("bucketed");
        if let Some((_, due)) = p.clock {
            let overlapped = ctx.now().min(due).saturating_since(p.run_started);
            if overlapped > SimDuration::ZERO {
                ctx.record_overlap(overlapped);
            }
        }
        let b = p.buckets[p.next];
        if !p.board {
            let range = b.real(p.sum.len(), p.wire_total());
            p.sum[range].copy_from_slice(&sum);
        }
        p.next += 1;
        if p.next < p.buckets.len() {
            return self.pump(ctx);
        }
        if p.board {
            let (key, me) = self.collective.deposited.take().expect("the gradient is on the board");
            let wire = collectives::wire_params(ctx.workload());
            let avg = ctx.sharing().ring_average(key, me, wire);
            self.step(ctx, &avg);
        } else {
            let sum = std::mem::take(&mut p.sum);
            let members = self.now.members.len();
            self.finish(ctx, sum, members);
        }
    }
}

impl Pipeline {
    /// Elements on the wire of the whole gradient.
    fn wire_total(&self) -> usize {
        self.buckets.first().map_or(0, |b| b.hi)
    }
}
