//! `dsgd bench-real`: how fast real gradients flow through the engine. Each case runs one
//! algorithm with `workers` workers of the burn MLP (784-128-10) on Fashion-MNIST at a batch size,
//! and reports the real gradients computed per wall-clock second; beside them, measured in the
//! same process just before each case (a machine's speed drifts from minute to minute), a plain
//! burn training loop of one model at the same batch (forward, backward, burn's SGD: no engine,
//! no flat vectors) on one core. The target: the engine at 100 workers delivers at least the
//! plain loop's rate times the number of cores.
//!
//! Beside the rate, each case reports the process's CPU time per gradient (user and system, all
//! threads, from `getrusage`) and the cores it kept busy (CPU time over wall time). The two
//! factor the rate: gradients per second ≈ cores busy / CPU time per gradient (both are taken
//! around the whole case, the rate over the run's own wall time). So a case short of
//! the target shows whether it lacks parallelism (cores idle while the simulator's thread works
//! alone) or does too much work per gradient; and the CPU time is less moved by a busy machine
//! than the wall time is.
//!
//! A run does model work besides its gradients: it evaluates the consensus model on the test
//! images every simulated second and, at the end, each distinct replica (the per-node losses).
//! In the paper cluster that work can exceed the gradients' (a parameter server whose NIC
//! saturates computes 800 gradients in 30 simulated seconds and evaluates 32 models). So each
//! case also reports its evaluations and the **model work** over the machine's time: the time a
//! plain loop on one core needs for the run's gradients and its evaluations (a plain burn forward
//! pass over the same test images, measured beside the plain training loop), over the wall time
//! times the cores. That is the share of the machine the engine gives to the model.

use crate::execute::execute;
use crate::load::spec_from_value;
use crate::{Error, Result};
use dsgd_models::fashion_mnist;
use dsgd_models::nets::{self, NetKind};
use serde::Serialize;
use serde_json::json;

/// The algorithms a case can run (`gossip` pulls, `gossip_push` is push-sum).
pub const ALGORITHMS: [&str; 6] = ["sync", "async_ps", "easgd", "gossip", "gossip_push", "local_sgd"];

/// The cluster a case runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Cluster {
    /// 10 ms steps without jitter, messages the model's size, evaluation on 1,000 images.
    Friendly,
    /// The paper sweeps' cluster (`experiments/paper/fashion_shards.json`'s base): 180 ms steps
    /// with log-normal jitter σ = 0.1, 46.8 MB messages (`wire_params`), shards, Nesterov
    /// momentum, evaluation on 2,000 images every simulated second.
    Paper,
}

/// The paper sweeps' spec, whose base a paper-cluster case runs.
const PAPER: &str = include_str!("../paper/fashion_shards.json");

/// The algorithm's spec section (EASGD with τ = 4, as the paper sweeps run it).
fn algorithm_json(algorithm: &str) -> serde_json::Value {
    match algorithm {
        "gossip" => json!({"kind": "gossip", "mode": "pull"}),
        "gossip_push" => json!({"kind": "gossip", "mode": "push"}),
        "easgd" => json!({"kind": "easgd", "tau": 4}),
        "sync" => json!({"kind": "sync", "collective": "ring"}),
        other => json!({ "kind": other }),
    }
}

/// One measured case.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Algorithm.
    pub algorithm: String,
    /// Workers.
    pub workers: usize,
    /// Real gradients computed.
    pub gradients: u64,
    /// Wall seconds of the run: friendly cluster, the simulation (the data set already loaded);
    /// paper cluster, the whole run in a process that already did the one-time work.
    pub wall_s: f64,
    /// Paper cluster: wall seconds of a 1 ms run of the same spec in a fresh process (the
    /// program, the data set, the replicas, the first evaluation); 0 in the friendly cluster.
    pub startup_s: f64,
    /// Gradients per wall second.
    pub gradients_per_s: f64,
    /// Models evaluated on the test images (the consensus at each sample, each distinct replica
    /// at the end).
    pub evaluations: u64,
    /// The plain loop measured just before this case (the machine's speed drifts from minute to
    /// minute, so each case is set beside its own).
    pub plain: Plain,
    /// Gradients per second over the plain loop's steps per second × cores.
    pub gradients_vs_plain: f64,
    /// The plain loop's time for the run's gradients and evaluations over wall time × cores.
    pub model_work_vs_machine: f64,
    /// CPU milliseconds (user and system, every thread of the process) per gradient.
    pub cpu_ms_per_gradient: f64,
    /// Cores kept busy: the process's CPU time over the wall time of the case.
    pub cores_busy: f64,
    /// The run's digest (the same whatever the thread count and the machine's load).
    pub digest: String,
}

/// The spec of a case: in the friendly cluster, MLP 784-128-10 at `batch`, 10 ms simulated
/// steps, 10 Gb/s, `sim_time_s` simulated seconds, evaluation on 1,000 test images once a
/// simulated second; in the paper cluster, the paper sweeps' base with `workers` nodes, `batch`
/// and `sim_time_s`.
pub fn spec(
    cluster: Cluster,
    algorithm: &str,
    workers: usize,
    batch: usize,
    sim_time_s: f64,
) -> Result<serde_json::Value> {
    if !ALGORITHMS.contains(&algorithm) {
        let problem = format!("unknown algorithm {algorithm:?}; expected one of {}", ALGORITHMS.join(", "));
        return Err(Error::argument("--algorithms", problem));
    }
    let name = format!("bench-real-{algorithm}-{workers}");
    Ok(match cluster {
        Cluster::Friendly => json!({
            "name": name,
            "nodes": workers, "algorithm": algorithm_json(algorithm), "batch": batch,
            "workload": {"kind": "burn", "model": "mlp", "hidden": [128], "test_samples": Cluster::Friendly.test_samples()},
            "compute": {"step_time_ms": 10}, "stop": {"sim_time_s": sim_time_s}, "eval": {"every_s": 1, "timeline_s": 0}
        }),
        Cluster::Paper => {
            let sweep: serde_json::Value = serde_json::from_str(PAPER).expect("the embedded paper sweep is JSON");
            let mut v = sweep["base"].clone();
            v["name"] = json!(name);
            v["nodes"] = json!(workers);
            v["batch"] = json!(batch);
            v["algorithm"] = algorithm_json(algorithm);
            v["stop"] = json!({"sim_time_s": sim_time_s});
            v
        }
    })
}

/// Runs one case. In the paper cluster, a 1 ms run of the same spec first takes the one-time
/// costs (the data set, the evaluation's network) in this process, so that the rate is over the
/// wall time of a run that starts with them done; the start-up a user waits for is measured
/// apart: the wall time of a fresh process of `exe` (`dsgd run` of the 1 ms spec), when given.
pub fn measure(
    cluster: Cluster,
    algorithm: &str,
    workers: usize,
    batch: usize,
    sim_time_s: f64,
    exe: Option<&std::path::Path>,
    plain: Plain,
) -> Result<Row> {
    let value = spec(cluster, algorithm, workers, batch, sim_time_s)?;
    let spec = spec_from_value("bench-real", value.clone())?;
    let startup_s = match cluster {
        Cluster::Friendly => 0.0,
        Cluster::Paper => {
            let mut first = spec.clone();
            first.stop.sim_time_s = 1e-3;
            execute(&first, false)?;
            match exe {
                Some(exe) => fresh_start(exe, value)?,
                None => 0.0,
            }
        }
    };
    let (cpu0, wall0) = (cpu_seconds()?, std::time::Instant::now());
    let outcome = execute(&spec, false)?;
    let (cpu, wall) = (cpu_seconds()? - cpu0, wall0.elapsed().as_secs_f64());
    let (s, evaluations) = (outcome.summary, outcome.result.metrics.evaluations);
    let wall_s = match cluster {
        Cluster::Friendly => s.wall_time_s,
        Cluster::Paper => wall,
    };
    Ok(Row {
        algorithm: algorithm.into(),
        workers,
        gradients: s.gradients,
        wall_s,
        startup_s,
        gradients_per_s: s.gradients as f64 / wall_s.max(1e-9),
        evaluations,
        plain,
        gradients_vs_plain: s.gradients as f64 / wall_s.max(1e-9) / (plain.steps_per_s * plain.cores as f64),
        model_work_vs_machine: plain.work_s(s.gradients, evaluations) / (wall_s.max(1e-9) * plain.cores as f64),
        cpu_ms_per_gradient: 1e3 * cpu / (s.gradients.max(1) as f64),
        cores_busy: cpu / wall.max(1e-9),
        digest: s.digest,
    })
}

/// Wall seconds of `exe run` of `spec` stopped after 1 simulated ms, in a fresh process: the
/// program's start, the data set, the replicas and the first evaluation.
fn fresh_start(exe: &std::path::Path, mut spec: serde_json::Value) -> Result<f64> {
    let fail = |problem: String| Error::Bench { case: "start-up".into(), problem };
    spec["stop"] = json!({"sim_time_s": 1e-3});
    let dir = std::env::temp_dir().join(format!("dsgd-bench-real-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join("spec.json");
    let _ = std::fs::remove_dir_all(dir.join("out"));
    std::fs::write(&path, spec.to_string()).map_err(|e| fail(format!("cannot write {}: {e}", path.display())))?;
    let t = std::time::Instant::now();
    let o = std::process::Command::new(exe)
        .args(["run", path.to_str().unwrap_or_default(), "--json", "--out"])
        .arg(dir.join("out"))
        .output()
        .map_err(|e| fail(format!("cannot run {}: {e}", exe.display())))?;
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);
    if !o.status.success() {
        return Err(fail(String::from_utf8_lossy(&o.stderr).trim().to_string()));
    }
    Ok(secs)
}

/// CPU seconds this process has used so far, user and system, all threads.
fn cpu_seconds() -> Result<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF)
        .map_err(|e| Error::Bench { case: "getrusage".into(), problem: e.to_string() })?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    Ok(secs(u.user_time()) + secs(u.system_time()))
}

/// The plain loop's rates, the reference of every case.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Plain {
    /// Training steps a second on one core.
    pub steps_per_s: f64,
    /// Seconds of one evaluation on one core (a burn forward pass over the cluster's test images).
    pub evaluation_s: f64,
    /// The cores of this machine.
    pub cores: usize,
}

impl Plain {
    /// Measures the plain loop at `batch` (best of three runs of `steps`) and one evaluation on
    /// the cluster's test images (best of three).
    pub fn measure(cluster: Cluster, batch: usize, steps: usize, cores: usize) -> Result<Plain> {
        let data = nets::dataset(&fashion_mnist::resolve_dir(None))?;
        let kind = NetKind::Mlp { hidden: vec![128] };
        nets::plain_loop(&kind, &data, batch, steps.min(50)); // warm up
        let steps_per_s = (0..3).map(|_| nets::plain_loop(&kind, &data, batch, steps)).fold(0.0, f64::max);
        let net = nets::BurnNet::new(kind, data, 1).with_evaluation(cluster.test_samples(), 1);
        let params = dsgd_models::Workload::init(&net);
        let evaluation_s = (0..4)
            .map(|_| {
                let t = std::time::Instant::now();
                std::hint::black_box(net.evaluate_burn(&params));
                t.elapsed().as_secs_f64()
            })
            .skip(1) // the first call warms up
            .fold(f64::INFINITY, f64::min);
        Ok(Plain { steps_per_s, evaluation_s, cores })
    }

    /// Seconds on one core of the plain loop for `gradients` steps and `evaluations` evaluations.
    pub fn work_s(&self, gradients: u64, evaluations: u64) -> f64 {
        gradients as f64 / self.steps_per_s + evaluations as f64 * self.evaluation_s
    }
}

impl Cluster {
    /// The test images an evaluation scores.
    pub fn test_samples(self) -> usize {
        match self {
            Cluster::Friendly => 1000,
            Cluster::Paper => {
                let sweep: serde_json::Value = serde_json::from_str(PAPER).expect("the embedded paper sweep is JSON");
                sweep["base"]["workload"]["test_samples"].as_u64().unwrap_or(10_000) as usize
            }
        }
    }
}

/// The rows, each beside its own plain loop, as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "Each case beside a plain burn loop (one model, one core) measured just before it: its steps a second, and \
         one evaluation's time.\n\n\
         | algorithm | workers | gradients | evaluations | wall s | start-up s | gradients/s | plain loop steps/s | evaluation ms | vs plain loop × cores | model work ÷ machine | CPU ms/gradient | cores busy |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        t += &format!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.1} | {:.2} | {:.2} | {:.3} | {:.2} |\n",
            r.algorithm,
            r.workers,
            r.gradients,
            r.evaluations,
            r.wall_s,
            r.startup_s,
            r.gradients_per_s,
            r.plain.steps_per_s,
            r.plain.evaluation_s * 1e3,
            r.gradients_vs_plain,
            r.model_work_vs_machine,
            r.cpu_ms_per_gradient,
            r.cores_busy
        );
    }
    t
}
