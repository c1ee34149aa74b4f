//! Real runs over MPI (`dsgd real`, `dsgd calibrate`, `dsgd validate`), built with the cargo
//! feature `mpi` and started under `mpirun`, one process per rank.

use crate::execute::{write_run, Outcome};
use crate::output::Summary;
use crate::spec::{FaultSpec, Spec};
use dsgd_runtime::mpi_exec::{run_real, RealConfig, RealCrash};
use dsgd_runtime::outcome::RunResult;
use dsgd_runtime::protocol::Protocol;
use dsgd_runtime::runner::{with_roles, Drive};
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

/// Starts MPI with full thread support (the executor sends from a thread of its own).
pub fn init() -> Result<Universe, String> {
    let (u, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .ok_or("MPI was already initialised in this process")?;
    if level != mpi::Threading::Multiple {
        return Err(format!("this MPI library gives thread level {level:?}; dsgd real needs MPI_THREAD_MULTIPLE"));
    }
    Ok(u)
}

/// The crashes to inject in a real run of `spec`, or an error naming what cannot run for real:
/// a fault other than a crash or restart, or an analytic collective (it charges a modelled delay
/// where a real run has a real network).
pub fn for_real(spec: &Spec) -> Result<Vec<RealCrash>, String> {
    if let dsgd_runtime::runner::AlgorithmConfig::Sync(c) = &spec.algorithm {
        if c.collective.is_analytic() {
            return Err(format!(
                "algorithm.collective: {} charges a modelled delay instead of sending its messages, which a real run \
                 cannot do; use ring, tree, halving_doubling or hierarchical",
                c.collective.name()
            ));
        }
    }
    let mut crashes: Vec<RealCrash> = Vec::new();
    for (i, f) in spec.faults.iter().enumerate() {
        match f {
            FaultSpec::Crash { node, at_s } => crashes.push(RealCrash { node: *node, at_s: *at_s, restart_s: None }),
            FaultSpec::Restart { node, at_s } => {
                match crashes.iter_mut().rev().find(|c| c.node == *node && c.at_s < *at_s && c.restart_s.is_none()) {
                    Some(c) => c.restart_s = Some(*at_s),
                    None => return Err(format!("faults[{i}]: a restart of rank {node} needs an earlier crash")),
                }
            }
            other => {
                let kind = serde_json::to_value(other).ok().and_then(|v| v["kind"].as_str().map(String::from));
                return Err(format!(
                    "faults[{i}]: {} cannot be injected in a real run; real runs inject crashes, restarts and \
                     stragglers (compute.straggler) only",
                    kind.unwrap_or_else(|| "this fault".into())
                ));
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
    type Out = Result<Option<RunResult>, String>;
    fn drive<P: Protocol>(self, roles: Vec<P>) -> Self::Out
    where
        P::Msg: Serialize + DeserializeOwned,
    {
        run_real(self.world, roles, self.workload, self.train, &self.cfg)
    }
}

/// Runs `spec` for real on this MPI job; the outcome on rank 0, `None` elsewhere.
pub fn run_spec(world: &SimpleCommunicator, spec: &Spec) -> Result<Option<Outcome>, String> {
    let crashes = for_real(spec)?;
    let r = spec.resolve().map_err(|e| e.to_string())?;
    if !matches!(r.timing, dsgd_runtime::timing::GradientTiming::Model) {
        return Err("compute.gradient_time: a real run always takes real time; leave it at \"model\"".into());
    }
    let cfg = RealConfig { seed: spec.seed, compute: r.sim.compute.clone(), crashes };
    let started = Instant::now();
    let net = r.sim.network.clone();
    let workload = r.workload.clone();
    let drive = OnMpi { world, workload: r.workload, train: r.train, cfg };
    let result = with_roles(&r.algorithm, r.workers, &r.train, &net, drive).map_err(|e| e.to_string())??;
    Ok(result.map(|result| {
        let summary = Summary::new(spec, &result, started.elapsed().as_secs_f64()).with_histograms(workload.as_ref());
        Outcome { result, summary }
    }))
}

/// `dsgd real`: runs the spec for real and, on rank 0, writes the run folder.
pub fn real(world: &SimpleCommunicator, spec: &Spec, dest: &Path) -> Result<Option<Summary>, String> {
    let outcome = run_spec(world, spec)?;
    match outcome {
        Some(o) => {
            write_run(dest, spec, &o)?;
            Ok(Some(o.summary))
        }
        None => Ok(None),
    }
}

/// One measured message size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PingPong {
    /// Bytes.
    pub bytes: usize,
    /// Median one-way time (half the round trip), seconds.
    pub one_way_s: f64,
}

/// What calibration measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Calibration {
    /// The ping-pong points.
    pub points: Vec<PingPong>,
    /// Fitted latency, microseconds.
    pub latency_us: f64,
    /// Fitted bandwidth, Gbit/s.
    pub bandwidth_gbps: f64,
    /// Gradient step times of the spec's workload, seconds (empty without a spec).
    pub step_s: Vec<f64>,
}

/// Receives one message the way the executor does: by polling with a matched probe and a short
/// sleep when nothing is there.
fn poll_receive(world: &SimpleCommunicator) -> Vec<u8> {
    loop {
        if let Some((buf, _)) = dsgd_runtime::mpi_exec::try_receive(world) {
            return buf;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// Ping-pong between ranks 0 and 1 at several sizes, through the executor's own path (a sender
/// thread and a polling receiver), so the fitted latency includes what the runtime adds.
/// Least squares of `one_way = latency + bytes / bandwidth`. Results on rank 0.
pub fn ping_pong(world: &SimpleCommunicator, sizes: &[usize], reps: usize) -> Option<(Vec<PingPong>, f64, f64)> {
    let me = world.rank();
    let (tx, rx) = std::sync::mpsc::channel::<(i32, Vec<u8>)>();
    let sender = std::thread::spawn(move || {
        let w = SimpleCommunicator::world();
        for (to, buf) in rx {
            w.process_at_rank(to).send_with_tag(&buf[..], 7);
        }
    });
    let mut points = Vec::new();
    world.barrier();
    if me <= 1 {
        let peer = 1 - me;
        for &n in sizes {
            let mut times = Vec::new();
            for _ in 0..reps {
                let t = Instant::now();
                if me == 0 {
                    let _ = tx.send((peer, vec![0u8; n]));
                    poll_receive(world);
                } else {
                    let b = poll_receive(world);
                    let _ = tx.send((peer, b));
                }
                times.push(t.elapsed().as_secs_f64() / 2.0);
            }
            times.sort_by(f64::total_cmp);
            points.push(PingPong { bytes: n, one_way_s: times[times.len() / 2] });
        }
    }
    drop(tx);
    let _ = sender.join();
    world.barrier();
    if me != 0 {
        return None;
    }
    let k = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), p| (a + p.bytes as f64, b + p.one_way_s));
    let (mx, my) = (sx / k, sy / k);
    let sxy: f64 = points.iter().map(|p| (p.bytes as f64 - mx) * (p.one_way_s - my)).sum();
    let sxx: f64 = points.iter().map(|p| (p.bytes as f64 - mx).powi(2)).sum();
    let slope = (sxy / sxx).max(1e-13);
    let latency = (my - slope * mx).max(points[0].one_way_s * 0.5).max(1e-7);
    Some((points, latency * 1e6, 8.0 / (slope * 1e9)))
}

/// The gradient step times of `spec`'s workload on this machine (real compute only, no model).
pub fn step_times(spec: &Spec, steps: usize) -> Result<Vec<f64>, String> {
    let r = spec.resolve().map_err(|e| e.to_string())?;
    if r.workload.timing_only() {
        return Ok(Vec::new());
    }
    let p = r.workload.init();
    let mut g = vec![0.0; p.len()];
    let mut out = Vec::new();
    for s in 0..steps + 2 {
        let t = Instant::now();
        r.workload.gradient(&p, dsgd_models::GradRequest { worker: 0, batch: spec.batch, seed: s as u64 }, &mut g);
        if s >= 2 {
            out.push(t.elapsed().as_secs_f64());
        }
    }
    Ok(out)
}

/// `dsgd calibrate`: the network (ping-pong) and, with a spec, its workload's gradient times.
pub fn calibrate(world: &SimpleCommunicator, spec: Option<&Spec>) -> Result<Option<Calibration>, String> {
    if world.size() < 2 {
        return Err("calibration measures messages between two ranks: run it with `mpirun -np 2` or more".into());
    }
    let sizes = [8, 1 << 10, 16 << 10, 128 << 10, 1 << 20, 4 << 20];
    let pp = ping_pong(world, &sizes, 30);
    let steps = match (world.rank(), spec) {
        (0, Some(s)) => step_times(s, 10)?,
        _ => Vec::new(),
    };
    Ok(pp.map(|(points, latency_us, bandwidth_gbps)| Calibration { points, latency_us, bandwidth_gbps, step_s: steps }))
}

impl Calibration {
    /// The network and compute parts of a spec, as JSON.
    pub fn spec_parts(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "network": {"latency_us": self.latency_us, "bandwidth_gbps": self.bandwidth_gbps}
        });
        if !self.step_s.is_empty() {
            let n = self.step_s.len() as f64;
            let mean = self.step_s.iter().sum::<f64>() / n;
            let logs: Vec<f64> = self.step_s.iter().map(|t| (t / mean).ln()).collect();
            let lm = logs.iter().sum::<f64>() / n;
            let sigma = (logs.iter().map(|l| (l - lm).powi(2)).sum::<f64>() / n).sqrt();
            v["compute"] = serde_json::json!({
                "step_time_ms": mean * 1e3,
                "straggler": {"jitter": {"kind": "log_normal", "sigma": sigma}}
            });
        }
        v
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
}

fn headline(s: &Summary) -> (String, f64) {
    match (&s.iteration_time_s, s.algorithm.starts_with("sync")) {
        (Some(it), true) => ("mean_iteration_time_s".into(), it.mean),
        _ => ("updates_per_s".into(), s.updates_per_s),
    }
}

/// `dsgd validate`: calibrates, runs each spec for real and in the simulator with the calibrated
/// network (and, for real gradients, the measured step time), and compares. On rank 0.
pub fn validate(
    world: &SimpleCommunicator,
    specs: &[Spec],
) -> Result<Option<(serde_json::Value, Vec<Comparison>)>, String> {
    let pp = ping_pong(world, &[8, 1 << 10, 16 << 10, 128 << 10, 1 << 20], 30);
    let mut rows = Vec::new();
    for spec in specs {
        let real = run_spec(world, spec)?;
        let (Some(real), Some((_, lat, bw))) = (real, pp.as_ref()) else { continue };
        let mut sim_spec = spec.clone();
        sim_spec.network.latency_us = *lat;
        sim_spec.network.bandwidth_gbps = *bw;
        let steps = step_times(spec, 5)?;
        if !steps.is_empty() {
            let mean_ms = 1e3 * steps.iter().sum::<f64>() / steps.len() as f64;
            sim_spec.compute.step_time_ms = sim_spec.compute.step_time_ms.max(mean_ms);
        }
        let sim = crate::execute::execute(&sim_spec, false)?;
        let (metric, r) = headline(&real.summary);
        let (_, s) = headline(&sim.summary);
        rows.push(Comparison {
            name: spec.name.clone(),
            algorithm: real.summary.algorithm.clone(),
            metric,
            real: r,
            simulated: s,
            error: (s - r) / r,
            time_to_target_s: real.summary.time_to_target_s.zip(sim.summary.time_to_target_s),
        });
    }
    Ok(pp.map(|(points, lat, bw)| {
        (serde_json::json!({"latency_us": lat, "bandwidth_gbps": bw, "points": points}), rows)
    }))
}

/// The comparison as a Markdown table.
pub fn table(rows: &[Comparison]) -> String {
    let mut s =
        String::from("| spec | algorithm | metric | real | simulated | error | time to target (real / sim) |\n");
    s.push_str("|---|---|---|---:|---:|---:|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {:.5} | {:.5} | {:+.1}% | {} |\n",
            r.name,
            r.algorithm,
            r.metric,
            r.real,
            r.simulated,
            100.0 * r.error,
            r.time_to_target_s.map_or("-".into(), |(a, b)| format!("{a:.2} s / {b:.2} s"))
        ));
    }
    s
}
