//! Real runs over MPI (`dsgd real`, `dsgd calibrate`, `dsgd validate`), built with the cargo
//! feature `mpi` and started under `mpirun`, one process per rank.

use crate::calibrate;
use crate::execute::{write_run, Outcome};
use crate::output::Summary;
use crate::spec::{FaultSpec, FieldError, Spec, TopologySpec};
use crate::{collective_fit, shaping};
use crate::{Error, Result};
use dsgd_runtime::mpi_exec::{run_real, RealConfig, RealCrash, RealError};
use dsgd_runtime::outcome::RunResult;
use dsgd_runtime::protocol::Protocol;
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::{with_roles, AlgorithmConfig, Drive};
use dsgd_runtime::timing::Recording;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::Root;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// Starts MPI with full thread support (the executor sends from a thread of its own).
pub fn init() -> Result<Universe> {
    let (u, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .ok_or_else(|| Error::Mpi("MPI was already initialised in this process".into()))?;
    if level != mpi::Threading::Multiple {
        let problem = format!("this MPI library gives thread level {level:?}; dsgd real needs MPI_THREAD_MULTIPLE");
        return Err(Error::Mpi(problem));
    }
    Ok(u)
}

/// A field of the spec that a real run cannot honour.
fn refused(field: &str, problem: String) -> Error {
    Error::Field(FieldError { field: field.into(), problem })
}

/// The crashes to inject in a real run of `spec`, or an error naming what cannot run for real:
/// a fault other than a crash or restart, or an analytic collective (it charges a modelled delay
/// where a real run has a real network).
pub fn for_real(spec: &Spec) -> Result<Vec<RealCrash>> {
    if let Some(c) = spec.algorithm.sync() {
        if c.collective.is_analytic() {
            return Err(refused(
                "algorithm.collective",
                format!(
                    "{} charges a modelled delay instead of sending its messages, which a real run cannot do; use \
                     ring, tree, halving_doubling or hierarchical",
                    c.collective.name()
                ),
            ));
        }
    }
    if let AlgorithmConfig::Sync(SyncConfig { buckets: Some(b), .. }) = &spec.algorithm {
        if b.overlap {
            return Err(refused(
                "algorithm.buckets.overlap",
                "a real run cannot see inside the backward pass, so its buckets are all-reduced after the whole \
                 gradient; set overlap to false (the simulator models that exactly)"
                    .to_string(),
            ));
        }
    }
    if spec.compute.receive_time_us > 0.0 {
        return Err(refused(
            "compute.receive_time_us",
            format!(
                "is {}; a real rank takes the time its messages really take, so a modelled one cannot be added; \
                 leave it out",
                spec.compute.receive_time_us
            ),
        ));
    }
    if let Some(t) = charged_time(&spec.algorithm).filter(|&t| t > 0.0) {
        let field = if spec.algorithm.sync().is_some() { "message_time_us" } else { "update_time_us" };
        return Err(refused(
            &format!("algorithm.{field}"),
            format!(
                "is {t}; a real rank takes the time its messages really take, so a modelled one cannot be added; \
                 leave it out"
            ),
        ));
    }
    let mut crashes: Vec<RealCrash> = Vec::new();
    for (i, f) in spec.faults.iter().enumerate() {
        match f {
            FaultSpec::Crash { node, at_s } => crashes.push(RealCrash { node: *node, at_s: *at_s, restart_s: None }),
            FaultSpec::Restart { node, at_s } => {
                match crashes.iter_mut().rev().find(|c| c.node == *node && c.at_s < *at_s && c.restart_s.is_none()) {
                    Some(c) => c.restart_s = Some(*at_s),
                    None => {
                        let problem = format!("a restart of rank {node} needs an earlier crash");
                        return Err(refused(&format!("faults[{i}]"), problem));
                    }
                }
            }
            other => {
                let kind = serde_json::to_value(other).ok().and_then(|v| v["kind"].as_str().map(String::from));
                let problem = format!(
                    "{} cannot be injected in a real run; real runs inject crashes, restarts and stragglers \
                     (compute.straggler) only",
                    kind.unwrap_or_else(|| "this fault".into())
                );
                return Err(refused(&format!("faults[{i}]"), problem));
            }
        }
    }
    Ok(crashes)
}

struct OnMpi<'a> {
    world: &'a SimpleCommunicator,
    workload: std::sync::Arc<dyn dsgd_models::Workload>,
    train: dsgd_runtime::train::TrainConfig,
    cfg: RealConfig,
}

impl Drive for OnMpi<'_> {
    type Out = Result<Option<RunResult>, RealError>;
    fn drive<P: Protocol>(self, roles: Vec<P>) -> Self::Out
    where
        P::Msg: Serialize + DeserializeOwned,
    {
        run_real(self.world, roles, self.workload, self.train, &self.cfg)
    }
}

/// Runs `spec` for real on this MPI job; the outcome on rank 0, `None` elsewhere.
pub fn run_spec(world: &SimpleCommunicator, spec: &Spec) -> Result<Option<Outcome>> {
    let crashes = for_real(spec)?;
    crate::pages::for_workload(&spec.workload);
    let r = spec.resolve()?;
    if !matches!(r.timing, dsgd_runtime::timing::GradientTiming::Model) {
        return Err(refused(
            "compute.gradient_time",
            "a real run always takes real time; leave it at \"model\"".into(),
        ));
    }
    let cfg = RealConfig { seed: spec.seed, compute: r.sim.compute.clone(), crashes };
    let started = Instant::now();
    let net = r.sim.network.clone();
    let workload = r.workload.clone();
    let drive = OnMpi { world, workload: r.workload, train: r.train, cfg };
    let result = with_roles(&r.algorithm, r.workers, &r.train, &net, drive)??;
    Ok(result.map(|result| {
        let summary = Summary::new(spec, &result, started.elapsed().as_secs_f64()).with_histograms(workload.as_ref());
        Outcome { result, summary }
    }))
}

/// `dsgd real`: runs the spec for real and, on rank 0, writes the run folder.
pub fn real(world: &SimpleCommunicator, spec: &Spec, dest: &Path) -> Result<Option<Summary>> {
    let outcome = run_spec(world, spec)?;
    match outcome {
        Some(o) => {
            write_run(dest, spec, &o)?;
            Ok(Some(o.summary))
        }
        None => Ok(None),
    }
}

/// One algorithm's comparison of the simulator with reality.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Comparison {
    /// The spec's name.
    pub name: String,
    /// Algorithm.
    pub algorithm: String,
    /// What is compared: `mean_iteration_time_s` (sync) or `updates_per_s`.
    pub metric: String,
    /// Measured on the real run.
    pub real: f64,
    /// Predicted by the simulator with the calibrated parameters.
    pub simulated: f64,
    /// `(simulated - real) / real`.
    pub error: f64,
    /// Time to the target loss, real and simulated, where both reached it.
    pub time_to_target_s: Option<(f64, f64)>,
    /// Mean duration of a real gradient (the simulator replays each one), milliseconds.
    pub gradient_ms: Option<f64>,
    /// The plain network fit (the simulator's network when no token bucket was seen).
    pub fit: calibrate::Fit,
    /// The token bucket the streams showed, which the simulator's network took instead of the
    /// plain fit.
    pub bucket: Option<shaping::BucketFit>,
    /// The streams (the shorter of the timings before and after the run).
    pub streams: Option<shaping::Streams>,
    /// The measured time per message the simulator charged: a server's per update (parameter
    /// server or EASGD centre, `update_time_us`), a sync worker's per chunk (`message_time_us`).
    pub charged_us: Option<f64>,
    /// The real ranks' mean wall time per handled message (decode, the protocol's work, the
    /// answers' encoding), microseconds, over all ranks.
    pub handling_us: f64,
    /// A synchronous spec's all-reduce on the shaped network, each after a pause of the run's
    /// mean gradient, seconds: as timed, and as the simulator takes it under the network fitted
    /// to it ([`collective_fit`]).
    pub all_reduce_s: Option<[f64; 2]>,
    /// A server's NIC under its workers' traffic, Gbit/s ([`shaping::incast`]; reported, not
    /// given to the simulator).
    pub incast_gbps: Option<f64>,
    /// The workers' measured time per received message that the simulator charged
    /// (`compute.receive_time_us`), microseconds; `None` for sync with a message-level
    /// collective, whose chunks `charged_us` covers.
    pub receive_us: Option<f64>,
    /// The ping-pong points, the mean of the timings just before and just after the run (a pair alone, all pairs at once, the
    /// ring), over the sizes the spec sends.
    pub points: Vec<calibrate::PingPong>,
}

fn headline(s: &Summary) -> (String, f64) {
    match (&s.iteration_time_s, s.algorithm.starts_with("sync")) {
        (Some(it), true) => ("mean_iteration_time_s".into(), it.mean),
        _ => ("updates_per_s".into(), s.updates_per_s),
    }
}

/// `dsgd validate`: for each spec, calibrates the network over the sizes it sends just before
/// and just after its run (the mean of the two, so that the fit sees the machine in the state the
/// run saw it), runs it for real, and runs it in the
/// simulator with the network fitted to its traffic pattern up to its largest message through its
/// bulk message, and with the real run's own gradient durations (each rank's gradients take, in
/// order, what they took for real); compares. With `token_bucket` (NICs known to be shaped by
/// one), it also times streams before and after, and the simulator's network is the token bucket
/// they show ([`shaping`]). On rank 0: the comparisons with their ping-pong points and, per spec,
/// the simulated run (a measured run that `dsgd replay` reproduces).
pub fn validate(world: &SimpleCommunicator, specs: &[Spec], token_bucket: bool) -> Result<Option<Validation>> {
    let ranks = world.size() as usize;
    let mut rows = Vec::new();
    let mut replays = Vec::new();
    for spec in specs {
        let (big, bulk) = (calibrate::largest_message(spec)?, calibrate::bulk_message(spec, ranks)?);
        let sizes = calibrate::sizes_for(&[big], &[bulk]);
        let before = calibrate::ping_pong(world, &sizes, 60);
        let streams_before = if token_bucket { shaping::stream(world, bulk, 10) } else { None };
        // A server's NIC under its workers' traffic (the first server's, for every server).
        let server = (token_bucket && spec.nodes < ranks).then_some(spec.nodes as i32);
        let incast_before = server.and_then(|s| shaping::incast(world, s, bulk, 3));
        let real = run_spec(world, spec)?;
        let after = calibrate::ping_pong(world, &sizes, 60);
        let streams_after = if token_bucket { shaping::stream(world, bulk, 10) } else { None };
        let incast_after = server.and_then(|s| shaping::incast(world, s, bulk, 3));
        // A synchronous spec's all-reduce, each after a pause of the run's mean gradient.
        let mut gap_ms = real.as_ref().and_then(|o| mean_gradient_ms(&o.result)).unwrap_or(spec.compute.step_time_ms);
        world.process_at_rank(0).broadcast_into(&mut gap_ms);
        let all_reduce = match token_bucket {
            true => calibrate::spec_all_reduce(world, spec, Duration::from_secs_f64(gap_ms / 1e3), 40)?,
            false => None,
        };
        let (Some(real), Some(before), Some(after)) = (real, before, after) else { continue };
        let points = calibrate::mean_points(&before, &after);
        let pattern = calibrate::Pattern::of(spec, ranks);
        let fit = calibrate::fits(&points, big, bulk, pattern);
        let handling = handling_us(&real.result, 0..real.result.handling.len());
        let streams = streams_before.zip(streams_after).map(|(a, b)| a.shortest(&b));
        // The faster of the two, as for the streams: what else the machine did only adds time.
        let incast_gbps = incast_before.zip(incast_after).map(|(a, b)| a.max(b) * 8.0 / 1e9);
        // A spec fitted to its all-reduce starts from the pair's latency: the timing holds what
        // every rank sending at once adds, which the ring's ping-pong shows with more noise.
        let start = if all_reduce.is_some() { calibrate::Pattern::Pair } else { pattern };
        let mut bucket = streams.and_then(|s| shaping::fit(&points, &s, start));
        let mut sim_spec = replay_spec(spec, &fit, bucket, &real.result);
        // A synchronous spec's network, fitted to its all-reduce with the simulator in the loop.
        let mut all_reduce_s = None;
        if let (Some(b), Some(t)) = (bucket, all_reduce) {
            let gap = gap_ms / 1e3;
            let b = collective_fit::fit(b, t, |b| collective_fit::simulated_all_reduce(&sim_spec, b, gap, 40))?;
            all_reduce_s = Some([t, collective_fit::simulated_all_reduce(&sim_spec, b, gap, 40)?]);
            bucket = Some(b);
            sim_spec = replay_spec(spec, &fit, bucket, &real.result);
        }
        let recording = real.result.recording.as_ref().map(extended);
        let sim = crate::execute::execute_with(&sim_spec, false, recording)?;
        let (metric, r) = headline(&real.summary);
        let (_, s) = headline(&sim.summary);
        let sim_to_target = sim.result.metrics.samples.iter().find(|x| spec.stop.target_met(x)).map(|x| x.time_s);
        rows.push(Comparison {
            name: spec.name.clone(),
            algorithm: real.summary.algorithm.clone(),
            metric,
            real: r,
            simulated: s,
            error: (s - r) / r,
            time_to_target_s: real.summary.time_to_target_s.zip(sim_to_target),
            gradient_ms: mean_gradient_ms(&real.result),
            fit,
            bucket,
            streams,
            charged_us: charged_time(&sim_spec.algorithm),
            handling_us: handling,
            all_reduce_s,
            incast_gbps,
            receive_us: charges_receive(&sim_spec.algorithm).then_some(sim_spec.compute.receive_time_us),
            points,
        });
        replays.push((sim_spec, sim));
    }
    Ok((world.rank() == 0).then_some(Validation { comparisons: rows, replays }))
}

/// The spec the simulator runs to predict a real run of `spec`: the fitted network, the
/// measured time per handled message (a server's per update, `update_time_us`; a sync worker's
/// per chunk, `message_time_us`; any other worker's per received message,
/// `compute.receive_time_us`), and the real gradients' durations (`gradient_time: measured`,
/// fed from the real run), which already hold the injected stragglers, so these are not applied
/// again. A real run does not stop at its
/// target (it is found afterwards, in the gathered evaluations), so neither does the simulated
/// one: both are measured over the same time. With a token bucket, the network is the bucket's;
/// a racks topology's uplinks, shaped as the NICs are, keep their ratio to the NICs' bandwidth
/// (the fitted rate is what TCP delivers through a shaped link, below its nominal rate).
fn replay_spec(spec: &Spec, fit: &calibrate::Fit, bucket: Option<shaping::BucketFit>, real: &RunResult) -> Spec {
    let mut s = spec.clone();
    let servers = handling_us(real, spec.nodes..real.handling.len());
    match &mut s.algorithm {
        AlgorithmConfig::AsyncPs(c) => c.update_time_us = servers,
        AlgorithmConfig::Easgd(c) => c.update_time_us = servers,
        AlgorithmConfig::Sync(c) if exchanges_chunks(c) => {
            c.message_time_us = handling_us(real, 0..real.handling.len())
        }
        AlgorithmConfig::LocalSgd(c) if exchanges_chunks(&c.sync()) => {
            c.message_time_us = handling_us(real, 0..real.handling.len())
        }
        _ => {}
    }
    if charges_receive(&s.algorithm) {
        s.compute.receive_time_us = handling_us(real, 0..spec.nodes);
    }
    s.stop.target_loss = None;
    s.stop.target_accuracy = None;
    match bucket {
        Some(b) => {
            if let TopologySpec::Racks { uplink_gbps, .. } = &mut s.network.topology {
                *uplink_gbps *= b.bandwidth_gbps / spec.network.bandwidth_gbps;
            }
            collective_fit::with_bucket(&mut s, b);
            s.network.rendezvous_kb = Some(calibrate::EAGER_LIMIT as f64 / 1e3);
        }
        None => {
            s.network.latency_us = fit.latency_us;
            s.network.bandwidth_gbps = fit.bandwidth_gbps;
        }
    }
    s.compute.gradient_time = dsgd_sim::spec::StepTimes::Measured;
    s.compute.straggler = Default::default();
    s
}

/// The modelled time per handled message: a server's per update (parameter-server shards, the
/// EASGD centre), a sync worker's per collective chunk; `None` where nothing is modelled (gossip,
/// and sync with backup workers, whose gradients go whole to an aggregator).
fn charged_time(a: &AlgorithmConfig) -> Option<f64> {
    match a {
        AlgorithmConfig::AsyncPs(c) => Some(c.update_time_us),
        AlgorithmConfig::Easgd(c) => Some(c.update_time_us),
        AlgorithmConfig::Sync(c) if exchanges_chunks(c) => Some(c.message_time_us),
        AlgorithmConfig::LocalSgd(c) if exchanges_chunks(&c.sync()) => Some(c.message_time_us),
        AlgorithmConfig::Sync(_) | AlgorithmConfig::LocalSgd(_) | AlgorithmConfig::Gossip(_) => None,
    }
}

/// True where the workers' own time per received message is charged as
/// `compute.receive_time_us`: every algorithm but sync with a message-level collective, whose
/// chunks `message_time_us` charges.
fn charges_receive(a: &AlgorithmConfig) -> bool {
    !a.sync().is_some_and(|c| exchanges_chunks(&c))
}

/// True if sync's workers reduce by a message-level collective, chunk by chunk (no backup
/// workers, not an analytic collective): `message_time_us` applies.
fn exchanges_chunks(c: &dsgd_runtime::protocols::sync::SyncConfig) -> bool {
    c.backup_workers == 0 && !c.collective.is_analytic()
}

/// The mean wall time per handled message of `ranks` (the servers after the workers, the
/// workers, or every rank), microseconds: nearly all are pushes or exchanges a server decodes,
/// applies and answers, chunks a sync worker decodes, reduces and passes on, or a server's or
/// peer's answer a worker decodes and takes in.
fn handling_us(real: &RunResult, ranks: std::ops::Range<usize>) -> f64 {
    let of = real.handling.get(ranks).unwrap_or_default();
    let (ns, n) = of.iter().fold((0, 0), |(a, b), &(ns, n)| (a + ns, b + n));
    if n == 0 {
        0.0
    } else {
        ns as f64 / n as f64 / 1e3
    }
}

/// The real run's gradient durations, each rank's repeated in order to 4 times their number (at
/// least 64), so that a simulated run that computes more gradients than the real one still
/// has a duration for each.
fn extended(rec: &Recording) -> Recording {
    let mean = {
        let all: Vec<u64> = rec.per_rank.iter().flatten().copied().collect();
        all.iter().sum::<u64>() / all.len().max(1) as u64
    };
    let per_rank = rec
        .per_rank
        .iter()
        .map(|v| {
            let base = if v.is_empty() { vec![mean.max(1)] } else { v.clone() };
            base.iter().copied().cycle().take((4 * v.len()).max(64)).collect()
        })
        .collect();
    Recording { per_rank }
}

fn mean_gradient_ms(r: &RunResult) -> Option<f64> {
    let all: Vec<u64> = r.recording.as_ref()?.per_rank.iter().flatten().copied().collect();
    (!all.is_empty()).then(|| all.iter().sum::<u64>() as f64 / all.len() as f64 / 1e6)
}

/// What `dsgd validate` found, on rank 0.
#[derive(Serialize)]
pub struct Validation {
    /// One row per spec.
    pub comparisons: Vec<Comparison>,
    /// Per spec, what the simulator ran (calibrated network, the real gradients' durations) and
    /// its outcome: written as run folders that `dsgd replay` reproduces.
    #[serde(skip)]
    pub replays: Vec<(Spec, Outcome)>,
}

/// The comparison as a Markdown table.
pub fn table(rows: &[Comparison]) -> String {
    let mut s = String::from(
        "| spec | algorithm | metric | real | simulated | error | time to target (real / sim) | gradient | charged per message | charged per worker receive | message handling | network fit |\n",
    );
    s.push_str("|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.5} | {:.5} | {:+.1}% | {} | {} | {} | {} | {:.1} us | {} |\n",
            r.name,
            r.algorithm,
            r.metric,
            r.real,
            r.simulated,
            100.0 * r.error,
            r.time_to_target_s.map_or("-".into(), |(a, b)| format!("{a:.2} s / {b:.2} s")),
            r.gradient_ms.map_or("-".into(), |g| format!("{g:.2} ms")),
            r.charged_us.map_or("-".into(), |u| format!("{u:.1} us")),
            r.receive_us.map_or("-".into(), |u| format!("{u:.1} us")),
            r.handling_us,
            network_fit(r)
        ));
    }
    s
}

/// The network the simulator took: the token bucket, or the plain fit.
fn network_fit(r: &Comparison) -> String {
    match r.bucket {
        Some(b) => format!(
            "token bucket: {:.1} us, {:.3} Gbit/s, {:.0} kB at {:.2} Gbit/s{}",
            b.latency_us,
            b.bandwidth_gbps,
            b.depth_kb,
            b.peak_gbps,
            r.incast_gbps.map_or(String::new(), |g| format!("; server incast {g:.3} Gbit/s (not used)"))
        ),
        None => {
            let f = &r.fit;
            let pattern = serde_json::to_value(f.pattern).ok().and_then(|v| v.as_str().map(String::from));
            format!(
                "{}: {:.1} us, {:.2} Gbit/s to {} B through {} B",
                pattern.unwrap_or_default(),
                f.latency_us,
                f.bandwidth_gbps,
                f.up_to_bytes,
                f.through_bytes
            )
        }
    }
}
