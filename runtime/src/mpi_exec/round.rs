//! A rank's main loop in a real run: one method a phase of a round (snapshots, the stopping
//! check, injected faults, timers, finished gradients, messages, the stopping rule), then the
//! drain before leaving and the rank's report.

use super::inbox::Inbox;
use super::rank::{GradDone, Rank};
use super::report::{OwnedView, Report};
use super::{decode, encode, RealConfig, RealCrash, DATA, DONE, STOP};
use crate::order::{Handled, Namer};
use crate::outcome::StopReason;
use crate::protocol::Protocol;
use crate::train::TrainConfig;
use dsgd_sim::{SimDuration, SimTime};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A rank's main loop and what it keeps between rounds: one method a phase of a round.
pub(super) struct Loop<P: Protocol> {
    pub r: Rank<P>,
    train: TrainConfig,
    end: SimTime,
    pub every: SimDuration,
    /// This rank's injected crashes still to come, in time order.
    crashes: Vec<RealCrash>,
    pub up: bool,
    restart_at: Option<SimTime>,
    crash_count: u64,
    restart_count: u64,
    delivered: u64,
    handling_ns: u64,
    timers_fired: u64,
    /// (evaluation index, updates, up, model view) at every multiple of `every`.
    snapshots: Vec<(usize, u64, bool, OwnedView)>,
    next_eval: usize,
    stop: Option<StopReason>,
    /// When this rank learnt that the run stops.
    stop_seen: Option<SimTime>,
    /// Ranks that announced their last message.
    done_from: Vec<bool>,
    done_rx: mpsc::Receiver<GradDone>,
    /// A finished gradient that ended the last idle wait, for `gradients`.
    woken: Option<GradDone>,
    /// Each finished gradient's duration, in job order (the compute thread does them in turn).
    gradient_ns: Vec<u64>,
    /// The handler calls so far, in order, named as the simulator names them.
    order: Vec<Handled>,
    namer: Namer,
    /// Messages arriving.
    inbox: Inbox,
}

impl<P: Protocol> Loop<P>
where
    P::Msg: Serialize + DeserializeOwned,
{
    pub fn new(r: Rank<P>, train: TrainConfig, cfg: &RealConfig, done_rx: mpsc::Receiver<GradDone>) -> Self {
        let mut crashes: Vec<RealCrash> = cfg.crashes.iter().filter(|c| c.node == r.rank()).copied().collect();
        crashes.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let ranks = r.ranks();
        Loop {
            r,
            train,
            end: SimTime::from_secs_f64(train.stop.sim_time_s),
            every: SimDuration::from_secs_f64(train.eval.every_s).max(SimDuration(1)),
            crashes,
            up: true,
            restart_at: None,
            crash_count: 0,
            restart_count: 0,
            delivered: 0,
            handling_ns: 0,
            timers_fired: 0,
            snapshots: Vec::new(),
            next_eval: 0,
            stop: None,
            stop_seen: None,
            done_from: vec![false; ranks],
            done_rx,
            woken: None,
            gradient_ns: Vec::new(),
            order: Vec::new(),
            namer: Namer::default(),
            inbox: Inbox::new(),
        }
    }

    /// One round: snapshots, the stopping check, faults, timers, gradients, messages and the
    /// stopping rule; false when the rank leaves the loop.
    pub fn step(&mut self) -> bool {
        let now = self.r.now();
        self.snapshot(now);
        if self.leaving(now) {
            return false;
        }
        self.inject_faults(now);
        let busy = self.timers() | self.gradients() | self.messages() | self.r.io.out.progress();
        self.apply_stop_rule();
        if !busy {
            self.idle();
        }
        true
    }

    /// Evaluation snapshots, taken locally at every multiple of `every`.
    fn snapshot(&mut self, now: SimTime) {
        while SimTime(self.every.as_nanos() * self.next_eval as u64) <= now.min(self.end) {
            let view = if self.up { OwnedView::of(self.r.role.view()) } else { OwnedView::Nothing };
            self.snapshots.push((self.next_eval, self.r.metrics.updates, self.up, view));
            self.next_eval += 1;
        }
    }

    /// True when the rank stops: at the wall-time limit, or once told to stop. Told that the
    /// iterations are done, it first finishes its own last one (its last chunks may still be on
    /// their way), for at most ten seconds, so that every replica ends after the same iteration,
    /// as in the simulator. (One second was not enough on two cores shared by two `mpirun` jobs
    /// of four ranks and a build: a rank left one iteration short and ended with another
    /// replica.)
    fn leaving(&mut self, now: SimTime) -> bool {
        if now >= self.end {
            self.stop.get_or_insert(StopReason::SimTime);
            return true;
        }
        let Some(why) = self.stop else { return false };
        let behind = why == StopReason::Iterations
            && self.up
            && self.r.role.completed_iterations().zip(self.train.stop.iterations).is_some_and(|(k, n)| k < n);
        let told = *self.stop_seen.get_or_insert(now);
        !behind || now.saturating_since(told) > SimDuration::from_secs_f64(10.0)
    }

    /// Injected crashes and restarts due by `now`.
    fn inject_faults(&mut self, now: SimTime) {
        if self.up && self.crashes.first().is_some_and(|c| SimTime::from_secs_f64(c.at_s) <= now) {
            let c = self.crashes.remove(0);
            self.up = false;
            self.crash_count += 1;
            self.r.io.inc += 1;
            self.r.io.timers.clear();
            let (p, host) = self.r.host();
            host.crashed(p);
            self.restart_at = c.restart_s.map(SimTime::from_secs_f64);
        }
        if !self.up && self.restart_at.is_some_and(|t| t <= now) {
            self.up = true;
            self.restart_at = None;
            self.restart_count += 1;
            let (p, host) = self.r.host();
            host.restarted(p);
        }
    }

    /// Fires the timers that are due; true if any fired.
    fn timers(&mut self) -> bool {
        let mut busy = false;
        while let Some((&(at, id), &tag)) = self.r.io.timers.first_key_value() {
            if at > self.r.now().as_nanos() {
                break;
            }
            self.r.io.timers.remove(&(at, id));
            busy = true;
            self.timers_fired += 1;
            self.order.push(self.namer.timer(tag));
            let (p, mut host) = self.r.host();
            p.on_timer(&mut host, tag);
        }
        busy
    }

    /// Waits for the compute thread's next gradient, at most until the next timer is due and
    /// for at most [`super::IDLE_PAUSE`] (messages are looked for at the end of it).
    fn idle(&mut self) {
        let now = self.r.now().as_nanos();
        let timer =
            self.r.io.timers.first_key_value().map(|(&(at, _), _)| Duration::from_nanos(at.saturating_sub(now)));
        let pause = timer.map_or(super::IDLE_PAUSE, |t| t.min(super::IDLE_PAUSE));
        if let Ok(d) = self.done_rx.recv_timeout(pause) {
            self.woken = Some(d);
        }
    }

    /// Hands finished gradients (of this incarnation) to the protocol; true if any came back.
    fn gradients(&mut self) -> bool {
        let mut busy = false;
        while let Some(d) = self.woken.take().or_else(|| self.done_rx.try_recv().ok()) {
            busy = true;
            self.gradient_ns.push(d.started.elapsed().as_nanos().max(1) as u64);
            if d.inc != self.r.io.inc || !self.up {
                continue;
            }
            self.order.push(self.namer.gradient());
            let (p, host) = self.r.host();
            host.gradient_done(p, dsgd_sim::JobId(d.job), d.grad, d.loss);
        }
        busy
    }

    /// Delivers waiting messages and notes stop and last-message announcements; true if any.
    /// Messages arriving meanwhile are matched and their receives posted after each handled one,
    /// as a NIC takes them in while its host works.
    fn messages(&mut self) -> bool {
        let mut busy = self.inbox.progress();
        while let Some(m) = self.inbox.take() {
            busy = true;
            match m.tag {
                DATA if self.up => {
                    self.delivered += 1;
                    let t = Instant::now();
                    let msg: P::Msg = decode(&m.buf);
                    let from = m.source as usize;
                    self.order.push(self.namer.message(from));
                    let (p, mut host) = self.r.host();
                    p.on_message(&mut host, from, msg);
                    self.handling_ns += t.elapsed().as_nanos() as u64;
                    self.inbox.progress();
                    self.r.io.out.progress();
                }
                STOP => {
                    let why: StopReason = decode(&m.buf);
                    self.stop.get_or_insert(why);
                }
                // A rank that stopped first has sent its last message: it has stopped, so do we.
                DONE => {
                    self.done_from[m.source as usize] = true;
                    self.stop.get_or_insert(StopReason::SimTime);
                }
                _ => {}
            }
        }
        busy
    }

    /// A rank that meets the iteration or update rule tells the others.
    fn apply_stop_rule(&mut self) {
        if let (Some(why), None) = (self.train.stop.counted(&self.r.metrics), self.stop) {
            self.stop = Some(why);
            let me = self.r.rank();
            for to in (0..self.r.ranks()).filter(|&t| t != me) {
                self.r.io.out.send(to as i32, STOP, encode(&why));
            }
        }
    }

    /// Announces the last message, then drains until every other rank has announced its own and
    /// every send of this rank has completed.
    pub fn drain(&mut self) {
        let me = self.r.rank();
        for to in (0..self.r.ranks()).filter(|&t| t != me) {
            self.r.io.out.send(to as i32, DONE, Vec::new());
        }
        // Closing the job channel ends the compute thread once it is done.
        let (closed_jobs, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.r.io.compute, closed_jobs));
        self.done_from[me] = true;
        while !self.done_from.iter().all(|&d| d) || self.r.io.out.in_flight() > 0 || self.inbox.pending() > 0 {
            let sent = self.r.io.out.progress();
            let took = self.inbox.progress();
            match self.inbox.take() {
                Some(m) if m.tag == DONE => self.done_from[m.source as usize] = true,
                Some(_) => {}
                None if !sent && !took => std::thread::sleep(super::IDLE_PAUSE),
                None => {}
            }
        }
        let (_, closed_done) = mpsc::channel();
        drop(std::mem::replace(&mut self.done_rx, closed_done));
    }

    /// This rank's report for rank 0.
    pub fn report(&mut self, end_time: SimTime, final_view: OwnedView) -> Report {
        let r = &mut self.r;
        Report {
            updates: r.metrics.updates,
            gradients: r.metrics.gradients,
            staleness: r.metrics.staleness.clone(),
            iteration_ns: r.metrics.iteration_times.iter().map(|d| d.as_nanos()).collect(),
            notes: r.metrics.notes.clone(),
            timeline: r.metrics.timeline.clone(),
            times: r.core.clock.times,
            snapshots: std::mem::take(&mut self.snapshots),
            final_view,
            up: self.up,
            end_s: end_time.as_secs_f64(),
            messages_sent: r.io.messages_sent,
            messages_delivered: self.delivered,
            handling_ns: self.handling_ns,
            timers_fired: self.timers_fired,
            bytes_sent: r.metrics.bytes_by_rank.get(r.core.rank).copied().unwrap_or(0),
            crashes: self.crash_count,
            restarts: self.restart_count,
            stop: self.stop,
            gradient_ns: std::mem::take(&mut self.gradient_ns),
            order: std::mem::take(&mut self.order),
        }
    }
}
