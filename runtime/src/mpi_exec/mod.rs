//! The real executor: one MPI process per rank drives the same [`Protocol`] state machines as
//! the simulator, through the same [`Context`] API, on the wall clock and a real network.
//!
//! - **Messages** are serialised with bincode (vectors as byte blocks, [`crate::wire`]) and sent with non-blocking sends that own their
//!   buffers ([`outbox`]), so a large message never blocks the protocol, one tag per kind of
//!   traffic; the rank's loop advances its sends and polls for arrivals with a non-blocking
//!   probe, sleeping 20 µs when idle (with the thread's timer slack at 1 ns, so a sleep is not
//!   stretched by the kernel's default 50 µs).
//! - **Timers** run on the wall clock (`now` is the time since the common start, after a barrier).
//! - **Gradients** are computed on a compute thread, one after another, with the real workload;
//!   a gradient takes at least the compute model's duration (base step time, jitter and
//!   stragglers from the same named random streams as the simulator), by sleeping the rest, so a
//!   timing-only workload emulates a device and a straggler is an injected delay.
//! - **Crashes**: a crashed rank stops participating (drops what arrives, sends nothing, its
//!   timers and gradients are void) and the MPI job stays up; a restart calls `on_restart` and
//!   `on_start` as in the simulator.
//! - **Stopping**: every rank stops at the wall-time limit; a rank that meets the iteration or
//!   update rule tells the others. Before leaving, every rank announces that it has sent its
//!   last message and drains what is still arriving, so no send is left blocked.
//! - **Evaluation**: every `eval.every_s` each rank snapshots its model view locally; at the end
//!   rank 0 gathers the snapshots and the counters and evaluates the consensus of each instant,
//!   so the run's `metrics.csv` has the simulator's format with wall-clock times.

pub mod outbox;

use crate::consensus::consensus_of;
use crate::metrics::{report_through_ledger, Ledger, Metrics, Note, Sample, State, TimeAccount, TimeBreakdown};
use crate::outcome::{RunResult, StopReason};
use crate::protocol::{Context, JobId, Phase, Protocol, View};
use crate::timing::Recording;
use crate::train::TrainConfig;
use dsgd_models::{GradRequest, Workload};
use dsgd_sim::compute::ComputeModel;
use dsgd_sim::{ComputeConfig, SimDuration, SimStats, SimTime, StreamRng, Streams};
use mpi::point_to_point::Status;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use outbox::Outbox;
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const DATA: i32 = 1;
const STOP: i32 = 2;
const DONE: i32 = 3;
const REPORT: i32 = 4;

/// A crash of a rank in a real run, and its restart.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RealCrash {
    /// The rank.
    pub node: usize,
    /// Wall seconds after the start.
    pub at_s: f64,
    /// When it comes back, if it does.
    pub restart_s: Option<f64>,
}

/// What a real run needs beyond the algorithm's roles.
#[derive(Clone, Debug)]
pub struct RealConfig {
    /// Root seed (data order, protocol randomness and compute jitter streams).
    pub seed: u64,
    /// The compute model: each gradient takes at least its duration.
    pub compute: ComputeConfig,
    /// Crashes to inject.
    pub crashes: Vec<RealCrash>,
}

fn codec() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// A message as the executor sends it (bincode; vectors as byte blocks, see [`crate::wire`]).
pub fn encode<T: Serialize>(x: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(x, codec()).expect("protocol messages serialise")
}

/// A message the executor received (only from a rank of the same binary).
pub fn decode<T: DeserializeOwned>(b: &[u8]) -> T {
    bincode::serde::decode_from_slice(b, codec()).expect("a message from a rank of the same binary").0
}

/// A model view that owns its data, to snapshot and send.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum OwnedView {
    Replica { params: Vec<f32>, weight: f64 },
    Shard { offset: usize, params: Vec<f32> },
    Nothing,
}

impl OwnedView {
    fn of(v: View<'_>) -> Self {
        match v {
            View::Replica { params, weight } => OwnedView::Replica { params: params.into_owned(), weight },
            View::Shard { offset, params } => OwnedView::Shard { offset, params: params.to_vec() },
            View::Nothing => OwnedView::Nothing,
        }
    }
    fn view(&self) -> View<'_> {
        match self {
            OwnedView::Replica { params, weight } => View::Replica { params: params.into(), weight: *weight },
            OwnedView::Shard { offset, params } => View::Shard { offset: *offset, params },
            OwnedView::Nothing => View::Nothing,
        }
    }
}

/// One rank's account of the run, sent to rank 0 at the end.
#[derive(Serialize, Deserialize)]
struct Report {
    updates: u64,
    gradients: u64,
    staleness: BTreeMap<u64, u64>,
    iteration_ns: Vec<u64>,
    notes: Vec<Note>,
    timeline: Vec<crate::metrics::Interval>,
    times: TimeBreakdown,
    /// `(evaluation index, cumulative updates of this rank, live, view)`.
    snapshots: Vec<(usize, u64, bool, OwnedView)>,
    final_view: OwnedView,
    up: bool,
    end_s: f64,
    messages_sent: u64,
    messages_delivered: u64,
    /// Wall time spent decoding and handling delivered messages.
    handling_ns: u64,
    /// Timers that fired.
    timers_fired: u64,
    bytes_sent: u64,
    crashes: u64,
    restarts: u64,
    stop: Option<StopReason>,
    /// How long each gradient took, in the order started: from the compute thread taking it up
    /// to the loop handing it over (or dropping it, after a crash).
    gradient_ns: Vec<u64>,
}

struct GradJob {
    job: u64,
    inc: u64,
    params: Arc<Vec<f32>>,
    batch: usize,
    seed: u64,
    at_least: Duration,
    /// When the rank asked for it.
    asked: Instant,
}

struct GradDone {
    job: u64,
    inc: u64,
    /// When the job's time started: when it was asked for, or, if it had to wait for the one
    /// before it, when that one ended.
    started: Instant,
    grad: Vec<f32>,
    loss: f64,
}

/// The context of one rank.
struct RealCtx<'a, M> {
    rank: usize,
    ranks: usize,
    start: Instant,
    out: &'a mut Outbox,
    compute: &'a mpsc::Sender<GradJob>,
    model: &'a mut ComputeModel,
    timers: &'a mut BTreeMap<(u64, u64), u64>,
    next_timer: &'a mut u64,
    next_job: &'a mut u64,
    inc: u64,
    workload: &'a dyn Workload,
    data_rng: &'a mut StreamRng,
    proto_rng: &'a mut StreamRng,
    clock: &'a mut TimeAccount,
    metrics: &'a mut Metrics,
    window: SimTime,
    sent: &'a mut (u64, u64),
    _msg: std::marker::PhantomData<M>,
}

/// Receives one waiting message, if there is one: a non-blocking probe, then a receive of exactly
/// the probed message (only the main thread receives, so nothing can take it in between).
pub fn try_receive(world: &SimpleCommunicator) -> Option<(Vec<u8>, Status)> {
    let probed = world.any_process().immediate_probe()?;
    let (buf, status) = world.process_at_rank(probed.source_rank()).receive_vec_with_tag::<u8>(probed.tag());
    Some((buf, status))
}

fn now_of(start: Instant) -> SimTime {
    SimTime(start.elapsed().as_nanos() as u64)
}

impl<M> RealCtx<'_, M> {
    fn ledger(&mut self) -> Ledger<'_> {
        Ledger { rank: self.rank, clock: self.clock, metrics: self.metrics, window: self.window }
    }
    fn ledger_now(&self) -> SimTime {
        now_of(self.start)
    }
}

impl<M: Serialize> Context<M> for RealCtx<'_, M> {
    fn now(&self) -> SimTime {
        now_of(self.start)
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn send(&mut self, to: usize, msg: M, bytes: u64) {
        self.sent.0 += 1;
        self.sent.1 += bytes;
        self.out.send(to as i32, DATA, encode(&msg));
    }
    fn set_timer(&mut self, after: SimDuration, tag: u64) {
        let id = *self.next_timer;
        *self.next_timer += 1;
        self.timers.insert(((self.now() + after).as_nanos(), id), tag);
    }
    fn start_gradient(&mut self, params: Arc<Vec<f32>>, batch: usize) -> JobId {
        let job = *self.next_job;
        *self.next_job += 1;
        let seed = self.data_rng.next_u64();
        let now = self.now();
        let at_least = Duration::from_nanos(self.model.step_time(self.rank, now, 1.0).as_nanos());
        let _ = self.compute.send(GradJob { job, inc: self.inc, params, batch, seed, at_least, asked: Instant::now() });
        self.ledger().phase(now, Phase::Computing);
        dsgd_sim::JobId(job)
    }
    fn workload(&self) -> &dyn Workload {
        self.workload
    }
    fn random(&mut self) -> u64 {
        self.proto_rng.next_u64()
    }
}

impl<M> crate::protocol::Report for RealCtx<'_, M> {
    report_through_ledger!();
}

/// The per-rank state the loop owns.
struct Rank<P: Protocol> {
    role: P,
    rank: usize,
    ranks: usize,
    start: Instant,
    out: Outbox,
    compute: mpsc::Sender<GradJob>,
    model: ComputeModel,
    timers: BTreeMap<(u64, u64), u64>,
    next_timer: u64,
    next_job: u64,
    inc: u64,
    workload: Arc<dyn Workload>,
    data_rng: StreamRng,
    proto_rng: StreamRng,
    clock: TimeAccount,
    metrics: Metrics,
    window: SimTime,
    sent: (u64, u64),
}

impl<P: Protocol> Rank<P>
where
    P::Msg: Serialize,
{
    /// Rank `me` of `ranks`, started at `start`, sending through `out` and computing through
    /// `compute`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        role: P,
        (me, ranks): (usize, usize),
        start: Instant,
        (out, compute): (Outbox, mpsc::Sender<GradJob>),
        model: ComputeModel,
        workload: Arc<dyn Workload>,
        streams: &Streams,
        timeline_s: f64,
    ) -> Self {
        Rank {
            role,
            rank: me,
            ranks,
            start,
            out,
            compute,
            model,
            timers: BTreeMap::new(),
            next_timer: 0,
            next_job: 0,
            inc: 0,
            workload,
            data_rng: streams.stream("data", me as u64),
            proto_rng: streams.stream("protocol", me as u64),
            clock: TimeAccount::new(),
            metrics: Metrics::default(),
            window: SimTime::from_secs_f64(timeline_s),
            sent: (0, 0),
        }
    }
    fn with_ctx(&mut self, f: impl FnOnce(&mut P, &mut dyn Context<P::Msg>)) {
        let mut ctx = RealCtx {
            rank: self.rank,
            ranks: self.ranks,
            start: self.start,
            out: &mut self.out,
            compute: &self.compute,
            model: &mut self.model,
            timers: &mut self.timers,
            next_timer: &mut self.next_timer,
            next_job: &mut self.next_job,
            inc: self.inc,
            workload: &*self.workload,
            data_rng: &mut self.data_rng,
            proto_rng: &mut self.proto_rng,
            clock: &mut self.clock,
            metrics: &mut self.metrics,
            window: self.window,
            sent: &mut self.sent,
            _msg: std::marker::PhantomData,
        };
        f(&mut self.role, &mut ctx);
    }
    fn switch(&mut self, to: State) {
        let now = now_of(self.start);
        self.clock.switch(now, to, self.rank, self.window, &mut self.metrics.timeline);
    }
}

/// Sets this thread's timer slack (inherited by the threads it starts) to 1 ns: the kernel's
/// default of 50 µs stretched every 20 µs poll to about 150 µs of message latency.
pub fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_timerslack(1);
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

fn compute_thread(
    workload: Arc<dyn Workload>,
    worker: usize,
    jobs: mpsc::Receiver<GradJob>,
    done: mpsc::Sender<GradDone>,
) {
    yield_to_messages();
    let mut free = Instant::now();
    for j in jobs {
        // The job's time starts when it was asked for, or when the last one ended if it was
        // still running then: waiting for a core is part of what a gradient costs here.
        let t = j.asked.max(free);
        let (grad, loss) = if j.params.is_empty() {
            (Vec::new(), f64::NAN)
        } else {
            workload.gradient_owned(&j.params, GradRequest { worker, batch: j.batch, seed: j.seed })
        };
        if let Some(rest) = j.at_least.checked_sub(t.elapsed()) {
            std::thread::sleep(rest);
        }
        free = Instant::now();
        if done.send(GradDone { job: j.job, inc: j.inc, started: t, grad, loss }).is_err() {
            return;
        }
    }
}

/// Runs this process's rank of a real run. `roles` holds a role for every rank (only this rank's
/// is used); `world.size()` must equal `roles.len()`. Returns the run's result on rank 0 and
/// `None` elsewhere.
pub fn run_real<P>(
    world: &SimpleCommunicator,
    mut roles: Vec<P>,
    workload: Arc<dyn Workload>,
    train: TrainConfig,
    cfg: &RealConfig,
) -> Result<Option<RunResult>, String>
where
    P: Protocol,
    P::Msg: Serialize + DeserializeOwned,
{
    let ranks = roles.len();
    if world.size() as usize != ranks {
        return Err(format!(
            "this spec needs {ranks} ranks (workers and servers) but mpirun started {}; run it with `mpirun -np {ranks}`",
            world.size()
        ));
    }
    let me = world.rank() as usize;
    let role = roles.swap_remove(me);
    let streams = Streams::new(cfg.seed);
    let model = ComputeModel::new(&cfg.compute, ranks, &streams).map_err(|e| e.to_string())?;
    precise_sleeps();
    let (job_tx, job_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let w = workload.clone();
    let computer = std::thread::spawn(move || compute_thread(w, me, job_rx, done_tx));

    world.barrier();
    let start = Instant::now();
    let channels = (Outbox::new(), job_tx);
    let r = Rank::new(role, (me, ranks), start, channels, model, workload, &streams, train.eval.timeline_s);
    let mut l = Loop::new(r, train, cfg, done_rx);
    l.r.with_ctx(|p, c| p.on_start(c));
    while l.step(world) {}
    let end_time = now_of(start);
    let state = l.r.clock.state;
    l.r.switch(state);
    let final_view = if l.up { OwnedView::of(l.r.role.view()) } else { OwnedView::Nothing };
    l.drain(world);
    computer.join().map_err(|_| "the compute thread panicked".to_string())?;
    world.barrier();
    let report = l.report(end_time, final_view);
    if me != 0 {
        world.process_at_rank(0).send_with_tag(&encode(&report)[..], REPORT);
        world.barrier();
        return Ok(None);
    }
    let mut reports = vec![report];
    for from in 1..ranks {
        let (buf, _) = world.process_at_rank(from as i32).receive_vec_with_tag::<u8>(REPORT);
        reports.push(decode(&buf));
    }
    world.barrier();
    Ok(Some(assemble(reports, &*l.r.workload, &train, l.every)))
}

/// A rank's main loop and what it keeps between rounds: one method a phase of a round.
struct Loop<P: Protocol> {
    r: Rank<P>,
    train: TrainConfig,
    end: SimTime,
    every: SimDuration,
    /// This rank's injected crashes still to come, in time order.
    crashes: Vec<RealCrash>,
    up: bool,
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
    /// Each finished gradient's duration, in job order (the compute thread does them in turn).
    gradient_ns: Vec<u64>,
}

impl<P: Protocol> Loop<P>
where
    P::Msg: Serialize + DeserializeOwned,
{
    fn new(r: Rank<P>, train: TrainConfig, cfg: &RealConfig, done_rx: mpsc::Receiver<GradDone>) -> Self {
        let mut crashes: Vec<RealCrash> = cfg.crashes.iter().filter(|c| c.node == r.rank).copied().collect();
        crashes.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let ranks = r.ranks;
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
            gradient_ns: Vec::new(),
        }
    }

    /// One round: snapshots, the stopping check, faults, timers, gradients, messages and the
    /// stopping rule; false when the rank leaves the loop.
    fn step(&mut self, world: &SimpleCommunicator) -> bool {
        let now = now_of(self.r.start);
        self.snapshot(now);
        if self.leaving(now) {
            return false;
        }
        self.inject_faults(now);
        let busy = self.timers() | self.gradients() | self.messages(world) | self.r.out.progress();
        self.apply_stop_rule();
        if !busy {
            std::thread::sleep(Duration::from_micros(20));
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
    /// their way), for at most a second, so that every replica ends after the same iteration, as
    /// in the simulator.
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
        !behind || now.saturating_since(told) > SimDuration::from_secs_f64(1.0)
    }

    /// Injected crashes and restarts due by `now`.
    fn inject_faults(&mut self, now: SimTime) {
        let me = self.r.rank;
        if self.up && self.crashes.first().is_some_and(|c| SimTime::from_secs_f64(c.at_s) <= now) {
            let c = self.crashes.remove(0);
            self.up = false;
            self.crash_count += 1;
            self.r.inc += 1;
            self.r.timers.clear();
            self.r.switch(State::Crashed);
            self.r.metrics.notes.push(Note { time_s: now.as_secs_f64(), rank: me, what: "crashed".into() });
            self.r.role.on_crash();
            self.restart_at = c.restart_s.map(SimTime::from_secs_f64);
        }
        if !self.up && self.restart_at.is_some_and(|t| t <= now) {
            self.up = true;
            self.restart_at = None;
            self.restart_count += 1;
            self.r.switch(State::Phase(Phase::Idle));
            self.r.metrics.notes.push(Note { time_s: now.as_secs_f64(), rank: me, what: "restarted".into() });
            self.r.with_ctx(|p, c| {
                p.on_restart(c);
                p.on_start(c);
            });
        }
    }

    /// Fires the timers that are due; true if any fired.
    fn timers(&mut self) -> bool {
        let mut busy = false;
        while let Some((&(at, id), &tag)) = self.r.timers.first_key_value() {
            if at > now_of(self.r.start).as_nanos() {
                break;
            }
            self.r.timers.remove(&(at, id));
            busy = true;
            self.timers_fired += 1;
            self.r.with_ctx(|p, c| p.on_timer(c, tag));
        }
        busy
    }

    /// Hands finished gradients (of this incarnation) to the protocol; true if any came back.
    fn gradients(&mut self) -> bool {
        let mut busy = false;
        while let Ok(d) = self.done_rx.try_recv() {
            busy = true;
            self.gradient_ns.push(d.started.elapsed().as_nanos().max(1) as u64);
            if d.inc != self.r.inc || !self.up {
                continue;
            }
            self.r.metrics.gradients += 1;
            self.r.switch(State::Phase(Phase::Idle));
            self.r.with_ctx(|p, c| p.on_gradient(c, dsgd_sim::JobId(d.job), d.grad, d.loss));
        }
        busy
    }

    /// Delivers waiting messages and notes stop and last-message announcements; true if any.
    fn messages(&mut self, world: &SimpleCommunicator) -> bool {
        let mut busy = false;
        while let Some((buf, status)) = try_receive(world) {
            busy = true;
            match status.tag() {
                DATA if self.up => {
                    self.delivered += 1;
                    let t = Instant::now();
                    let m: P::Msg = decode(&buf);
                    let from = status.source_rank() as usize;
                    self.r.with_ctx(|p, c| p.on_message(c, from, m));
                    self.handling_ns += t.elapsed().as_nanos() as u64;
                }
                STOP => {
                    let why: StopReason = decode(&buf);
                    self.stop.get_or_insert(why);
                }
                // A rank that stopped first has sent its last message: it has stopped, so do we.
                DONE => {
                    self.done_from[status.source_rank() as usize] = true;
                    self.stop.get_or_insert(StopReason::SimTime);
                }
                _ => {}
            }
        }
        busy
    }

    /// A rank that meets the iteration or update rule tells the others.
    fn apply_stop_rule(&mut self) {
        let stop = &self.train.stop;
        let hit = if stop.iterations.is_some_and(|n| self.r.metrics.iterations() >= n) {
            Some(StopReason::Iterations)
        } else if stop.updates.is_some_and(|n| self.r.metrics.updates >= n) {
            Some(StopReason::Updates)
        } else {
            None
        };
        if let (Some(why), None) = (hit, self.stop) {
            self.stop = Some(why);
            for to in (0..self.r.ranks).filter(|&t| t != self.r.rank) {
                self.r.out.send(to as i32, STOP, encode(&why));
            }
        }
    }

    /// Announces the last message, then drains until every other rank has announced its own and
    /// every send of this rank has completed.
    fn drain(&mut self, world: &SimpleCommunicator) {
        let me = self.r.rank;
        for to in (0..self.r.ranks).filter(|&t| t != me) {
            self.r.out.send(to as i32, DONE, Vec::new());
        }
        // Closing the job channel ends the compute thread once it is done.
        let (closed_jobs, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.r.compute, closed_jobs));
        self.done_from[me] = true;
        while !self.done_from.iter().all(|&d| d) || self.r.out.in_flight() > 0 {
            let sent = self.r.out.progress();
            match try_receive(world) {
                Some((_, status)) if status.tag() == DONE => self.done_from[status.source_rank() as usize] = true,
                Some(_) => {}
                None if !sent => std::thread::sleep(Duration::from_micros(20)),
                None => {}
            }
        }
        let (_, closed_done) = mpsc::channel();
        drop(std::mem::replace(&mut self.done_rx, closed_done));
    }

    /// This rank's report for rank 0.
    fn report(&mut self, end_time: SimTime, final_view: OwnedView) -> Report {
        let r = &mut self.r;
        Report {
            updates: r.metrics.updates,
            gradients: r.metrics.gradients,
            staleness: r.metrics.staleness.clone(),
            iteration_ns: r.metrics.iteration_times.iter().map(|d| d.as_nanos()).collect(),
            notes: r.metrics.notes.clone(),
            timeline: r.metrics.timeline.clone(),
            times: r.clock.times,
            snapshots: std::mem::take(&mut self.snapshots),
            final_view,
            up: self.up,
            end_s: end_time.as_secs_f64(),
            messages_sent: r.sent.0,
            messages_delivered: self.delivered,
            handling_ns: self.handling_ns,
            timers_fired: self.timers_fired,
            bytes_sent: r.sent.1,
            crashes: self.crash_count,
            restarts: self.restart_count,
            stop: self.stop,
            gradient_ns: std::mem::take(&mut self.gradient_ns),
        }
    }
}

/// Rank 0 turns every rank's report into the run's result.
fn assemble(reports: Vec<Report>, workload: &dyn Workload, train: &TrainConfig, every: SimDuration) -> RunResult {
    let dim = if workload.timing_only() { 0 } else { workload.param_count() };
    let mut metrics = Metrics::default();
    let mut stats = SimStats::default();
    for rep in &reports {
        metrics.updates += rep.updates;
        metrics.gradients += rep.gradients;
        for (&k, &c) in &rep.staleness {
            *metrics.staleness.entry(k).or_default() += c;
        }
        metrics.iteration_times.extend(rep.iteration_ns.iter().map(|&n| SimDuration(n)));
        metrics.notes.extend(rep.notes.iter().cloned());
        metrics.timeline.extend(rep.timeline.iter().copied());
        stats.messages_sent += rep.messages_sent;
        stats.messages_delivered += rep.messages_delivered;
        stats.bytes_sent += rep.bytes_sent;
        metrics.bytes_by_rank.push(rep.bytes_sent);
        stats.crashes += rep.crashes;
        stats.restarts += rep.restarts;
        // Handler calls: the events a real run has (deliveries, finished gradients, timers).
        stats.events += rep.messages_delivered + rep.gradients + rep.timers_fired;
    }
    metrics.notes.sort_by(|a, b| a.time_s.total_cmp(&b.time_s).then(a.rank.cmp(&b.rank)));
    let evals = reports.iter().map(|r| r.snapshots.len()).min().unwrap_or(0);
    let mut time_to_target = None;
    for k in 0..evals {
        let views = reports.iter().map(|r| r.snapshots[k].3.view());
        let c = consensus_of(views, dim);
        let eval = c.evaluate(workload);
        let sample = Sample {
            time_s: (every.as_nanos() * k as u64) as f64 / 1e9,
            loss: eval.as_ref().map(|e| e.loss),
            accuracy: eval.and_then(|e| e.accuracy),
            consensus_distance: c.distance,
            node_losses: Vec::new(),
            updates: reports.iter().map(|r| r.snapshots[k].1).sum(),
            live: reports.iter().filter(|r| r.snapshots[k].2).count(),
        };
        if time_to_target.is_none() && train.stop.target_met(&sample) {
            time_to_target = Some(sample.time_s);
        }
        metrics.samples.push(sample);
    }
    let end_s = reports.iter().map(|r| r.end_s).fold(0.0, f64::max);
    let c = consensus_of(reports.iter().map(|r| r.final_view.view()), dim);
    let eval = c.evaluate(workload);
    metrics.samples.push(Sample {
        time_s: end_s,
        loss: eval.as_ref().map(|e| e.loss),
        accuracy: eval.and_then(|e| e.accuracy),
        consensus_distance: c.distance,
        node_losses: c.replicas.iter().map(|p| p.as_ref().map(|p| workload.evaluate(p).loss)).collect(),
        updates: metrics.updates,
        live: reports.iter().filter(|r| r.up).count(),
    });
    if time_to_target.is_none() && metrics.samples.last().is_some_and(|s| train.stop.target_met(s)) {
        time_to_target = Some(end_s);
    }
    let final_params = c.model.unwrap_or_default();
    let stop = reports.iter().find_map(|r| r.stop.filter(|s| *s != StopReason::SimTime)).unwrap_or(StopReason::SimTime);
    // Real runs are not replayable: the digest identifies the final model only (the same fold
    // the simulator ends its digest with).
    let mut d = dsgd_sim::Digest::new();
    d.absorb_f32s(&final_params);
    let digest = d.value();
    RunResult {
        digest,
        stop,
        sim_time: SimTime::from_secs_f64(end_s),
        stats,
        times: reports.iter().map(|r| r.times).collect(),
        time_to_target,
        final_params,
        trace: None,
        recording: Some(Recording { per_rank: reports.iter().map(|r| r.gradient_ns.clone()).collect() }),
        handling: reports.iter().map(|r| (r.handling_ns, r.messages_delivered)).collect(),
        metrics,
    }
}
