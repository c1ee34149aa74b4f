//! One rank of a real run: its protocol, the host core's state, and its real I/O (the wall
//! clock, MPI sends, wall-clock timers and a compute thread) as the core's [`Driver`].

use super::outbox::Outbox;
use super::{encode, DATA};
use crate::gradient_pool::GradientInput;
use crate::host::{Driver, Host, RankCore};
use crate::metrics::Metrics;
use crate::protocol::{JobId, Protocol};
use crate::sharing::{Alone, Sharing};
use dsgd_models::Workload;
use dsgd_sim::compute::ComputeModel;
use dsgd_sim::{SimDuration, SimTime, Streams};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A gradient for the compute thread: at least `at_least` long from when it was asked for.
pub(super) struct GradJob {
    job: u64,
    /// The rank's incarnation that asked (a crash voids the jobs of the one before).
    inc: u64,
    input: GradientInput,
    at_least: Duration,
    /// When the rank asked for it.
    asked: Instant,
}

/// A gradient the compute thread finished.
pub(super) struct GradDone {
    pub job: u64,
    pub inc: u64,
    /// When the job's time started: when it was asked for, or, if it had to wait for the one
    /// before it, when that one ended.
    pub started: Instant,
    pub grad: Vec<f32>,
    pub loss: f64,
}

/// The wall time since the common start.
pub(super) fn now_of(start: Instant) -> SimTime {
    SimTime(start.elapsed().as_nanos() as u64)
}

/// A rank's real I/O: what the host core drives a handler call through.
pub(super) struct RankIo {
    ranks: usize,
    /// The common start (after a barrier).
    pub start: Instant,
    /// Non-blocking sends in flight.
    pub out: Outbox,
    /// Jobs for the compute thread.
    pub compute: mpsc::Sender<GradJob>,
    /// The compute model: each gradient takes at least its duration.
    model: ComputeModel,
    /// Pending timers: (due, id) -> tag.
    pub timers: BTreeMap<(u64, u64), u64>,
    next_timer: u64,
    next_job: u64,
    /// The rank's incarnation (bumped by a crash).
    pub inc: u64,
    /// Protocol messages sent.
    pub messages_sent: u64,
    /// One rank a process: nothing to share.
    alone: Alone,
}

impl<M: Serialize> Driver<M> for &mut RankIo {
    fn now(&self) -> SimTime {
        now_of(self.start)
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn send(&mut self, _from: usize, to: usize, msg: M, _bytes: u64) {
        self.messages_sent += 1;
        self.out.send(to as i32, DATA, encode(&msg));
    }
    fn set_timer(&mut self, _rank: usize, after: SimDuration, tag: u64) {
        let id = self.next_timer;
        self.next_timer += 1;
        self.timers.insert(((now_of(self.start) + after).as_nanos(), id), tag);
    }
    fn start_gradient(&mut self, input: GradientInput, _workload: &dyn Workload) -> (JobId, Option<SimTime>) {
        let job = self.next_job;
        self.next_job += 1;
        let now = now_of(self.start);
        let at_least = Duration::from_nanos(self.model.step_time(input.node, now, 1.0).as_nanos());
        let _ = self.compute.send(GradJob { job, inc: self.inc, input, at_least, asked: Instant::now() });
        (dsgd_sim::JobId(job), None)
    }
    fn sharing(&mut self) -> &mut dyn Sharing {
        &mut self.alone
    }
}

/// The per-rank state the loop owns.
pub(super) struct Rank<P: Protocol> {
    pub role: P,
    pub core: RankCore,
    pub metrics: Metrics,
    pub io: RankIo,
    pub workload: Arc<dyn Workload>,
    /// The timeline's window (`eval.timeline_s`).
    pub window: SimTime,
}

impl<P: Protocol> Rank<P>
where
    P::Msg: Serialize,
{
    /// Rank `me` of `ranks`, started at `start`, sending through `out` and computing through
    /// `compute`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        role: P,
        (me, ranks): (usize, usize),
        start: Instant,
        (out, compute): (Outbox, mpsc::Sender<GradJob>),
        model: ComputeModel,
        workload: Arc<dyn Workload>,
        streams: &Streams,
        timeline_s: f64,
    ) -> Self {
        let io = RankIo {
            ranks,
            start,
            out,
            compute,
            model,
            timers: BTreeMap::new(),
            next_timer: 0,
            next_job: 0,
            inc: 0,
            messages_sent: 0,
            alone: Alone,
        };
        Rank {
            role,
            core: RankCore::new(streams, me),
            metrics: Metrics::default(),
            io,
            workload,
            window: SimTime::from_secs_f64(timeline_s),
        }
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.core.rank
    }

    /// Ranks in the run.
    pub fn ranks(&self) -> usize {
        self.io.ranks
    }

    /// The wall time since the common start.
    pub fn now(&self) -> SimTime {
        now_of(self.io.start)
    }

    /// The role and the host core's context for a handler call.
    pub fn host(&mut self) -> (&mut P, Host<'_, P::Msg, &mut RankIo>) {
        let host = Host {
            core: &mut self.core,
            metrics: &mut self.metrics,
            window: self.window,
            workload: &*self.workload,
            driver: &mut self.io,
            msg: std::marker::PhantomData,
        };
        (&mut self.role, host)
    }

    /// Closes the rank's time account now.
    pub fn close(&mut self) {
        let now = self.now();
        self.core.close(now, self.window, &mut self.metrics);
    }
}

/// Lowers the calling thread's scheduling priority to nice 19 (Linux: nice is per thread).
fn yield_to_messages() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

/// The compute thread: gradients one after another with the real workload, each taking at least
/// its compute model's duration (the rest is slept).
pub(super) fn compute_thread(workload: Arc<dyn Workload>, jobs: mpsc::Receiver<GradJob>, done: mpsc::Sender<GradDone>) {
    yield_to_messages();
    let mut free = Instant::now();
    for j in jobs {
        // The job's time starts when it was asked for, or when the last one ended if it was
        // still running then: waiting for a core is part of what a gradient costs here.
        let t = j.asked.max(free);
        let (grad, loss) = j.input.compute(&*workload);
        if let Some(rest) = j.at_least.checked_sub(t.elapsed()) {
            std::thread::sleep(rest);
        }
        free = Instant::now();
        if done.send(GradDone { job: j.job, inc: j.inc, started: t, grad, loss }).is_err() {
            return;
        }
    }
}
