//! The real executor: one MPI process per rank drives the same [`Protocol`] state machines as
//! the simulator, through the same [`Context`] API, on the wall clock and a real network.
//!
//! - **Messages** are serialised with bincode (vectors as byte blocks, [`crate::wire`]) and sent
//!   with non-blocking sends that own their buffers ([`outbox`]), so a large message never blocks
//!   the protocol, one tag per kind of traffic; arrivals are matched by a non-blocking probe and
//!   received without blocking into buffers of the [`inbox`], so a large message arriving never
//!   holds the rank either; the rank's loop advances both and, when idle, waits up to
//!   [`IDLE_PAUSE`] for its next gradient (with the thread's timer slack at 1 ns, so a wait is
//!   not stretched by the kernel's default 50 µs).
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

pub mod inbox;
pub mod outbox;
mod rank;
mod report;
mod round;

use crate::outcome::RunResult;
use crate::protocol::Protocol;
use crate::train::TrainConfig;
use dsgd_models::Workload;
use dsgd_sim::compute::ComputeModel;
use dsgd_sim::{ComputeConfig, Streams};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use outbox::Outbox;
use rank::{compute_thread, Rank};
use report::{assemble, OwnedView};
use round::Loop;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::{mpsc, Arc};
use std::time::Instant;

/// MPI tags, one per kind of traffic: protocol messages, the stop rule, the last-message
/// announcement and the ranks' reports.
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

/// A real run that cannot start or finish.
#[derive(Debug, thiserror::Error)]
pub enum RealError {
    /// `mpirun` started another number of ranks than the spec has.
    #[error("this spec needs {needed} ranks (workers and servers) but mpirun started {started}; run it with `mpirun -np {needed}`")]
    Ranks {
        /// Ranks the spec has.
        needed: usize,
        /// Ranks mpirun started.
        started: usize,
    },
    /// The compute section cannot be built.
    #[error(transparent)]
    Compute(#[from] dsgd_sim::SimError),
    /// The rank's gradient thread panicked.
    #[error("the compute thread panicked")]
    ComputeThread,
}

/// How long a rank's loop that found nothing to do waits (for its next gradient) before it looks
/// for messages again. Each look is a system call into the kernel's sockets (Open MPI's TCP
/// transport polls them), and with 20 µs eight idle ranks took 60-75% of two cores that way.
pub const IDLE_PAUSE: std::time::Duration = std::time::Duration::from_micros(100);

/// Sets this thread's timer slack (inherited by the threads it starts) to 1 ns: the kernel's
/// default of 50 µs stretched every 20 µs poll to about 150 µs of message latency.
pub fn precise_sleeps() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_timerslack(1);
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
) -> Result<Option<RunResult>, RealError>
where
    P: Protocol,
    P::Msg: Serialize + DeserializeOwned,
{
    let ranks = roles.len();
    if world.size() as usize != ranks {
        return Err(RealError::Ranks { needed: ranks, started: world.size() as usize });
    }
    let me = world.rank() as usize;
    let role = roles.swap_remove(me);
    let streams = Streams::new(cfg.seed);
    let model = ComputeModel::new(&cfg.compute, ranks, &streams)?;
    precise_sleeps();
    let (job_tx, job_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let w = workload.clone();
    let computer = std::thread::spawn(move || compute_thread(w, job_rx, done_tx));

    world.barrier();
    let start = Instant::now();
    let channels = (Outbox::new(), job_tx);
    let r = Rank::new(role, (me, ranks), start, channels, model, workload, &streams, train.eval.timeline_s);
    let mut l = Loop::new(r, train, cfg, done_rx);
    let (p, mut host) = l.r.host();
    p.on_start(&mut host);
    while l.step() {}
    let end_time = l.r.now();
    l.r.close();
    let final_view = if l.up { OwnedView::of(l.r.role.view()) } else { OwnedView::Nothing };
    l.drain();
    computer.join().map_err(|_| RealError::ComputeThread)?;
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
