//! Experiment specs: the JSON a user writes. Each section belongs to the layer that runs it and
//! carries its units, defaults and checks there: `network`, `compute` and `faults` to the engine
//! (`dsgd_sim::spec`), `algorithm`, `optimizer`, `batch`, `stop` and `eval` to the runtime,
//! `workload` to the models (`dsgd_models::spec`). This module holds what only the command line
//! knows: the spec's top level (name, seed, nodes), the checks across sections, and the prefix
//! that turns a section's relative path into the path the user wrote. The format is documented
//! in `SPEC.md`.
//!
//! Every field has a default, so `{}` is a valid spec. Unknown fields, wrong types and
//! impossible values are rejected with the field's path and what is allowed.

pub use dsgd_models::spec::{BurnModel, WorkloadSpec, MAX_PARAMS};
use dsgd_models::Workload;
use dsgd_runtime::optimizer::OptimizerConfig;
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::AlgorithmConfig;
use dsgd_runtime::timing::GradientTiming;
pub use dsgd_runtime::train::EvalConfig;
use dsgd_runtime::train::{StopRule, TrainConfig};
pub use dsgd_sim::spec::{
    ComputeSpec, FaultSpec, ModeSpec, NetworkSpec, NicSpec, SlowdownSpec, StepTimes, StragglerSpec, TokenBucketSpec,
    TopologySpec, TransportSpec, DEFAULT_RTO_MS,
};
use dsgd_sim::SimConfig;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use dsgd_sim::error::FieldPath;

/// A problem with a spec: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("field `{field}`: {problem}")]
pub struct FieldError {
    /// Dotted path of the field.
    pub field: FieldPath,
    /// What is wrong and what is allowed.
    pub problem: String,
}

impl From<dsgd_sim::SimError> for FieldError {
    fn from(e: dsgd_sim::SimError) -> Self {
        match e.into_field_problem() {
            Ok((field, problem)) => FieldError { field, problem },
            Err(other) => FieldError { field: FieldPath::default(), problem: other.to_string() },
        }
    }
}

impl From<dsgd_models::spec::WorkloadError> for FieldError {
    /// The workload section's error, with its path as the user wrote it.
    fn from(e: dsgd_models::spec::WorkloadError) -> Self {
        FieldError { field: FieldPath::from(e.field).under("workload"), problem: e.problem }
    }
}

fn bad<T>(field: impl Into<FieldPath>, problem: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError { field: field.into(), problem: problem.into() })
}

/// One experiment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Spec {
    /// A name for reports (default "run").
    pub name: String,
    /// Root seed of every random stream (default 1).
    pub seed: u64,
    /// Number of workers (default 4). Servers, where the algorithm has them, are extra ranks.
    pub nodes: usize,
    /// The algorithm (default synchronous ring all-reduce).
    pub algorithm: AlgorithmConfig,
    /// Where gradients come from (default the noisy quadratic).
    pub workload: WorkloadSpec,
    /// Minibatch size per worker and gradient (default 32).
    pub batch: usize,
    /// The optimizer.
    pub optimizer: OptimizerConfig,
    /// Step times and stragglers.
    pub compute: ComputeSpec,
    /// The network.
    pub network: NetworkSpec,
    /// Faults.
    pub faults: Vec<FaultSpec>,
    /// When to stop.
    pub stop: StopRule,
    /// Evaluation.
    pub eval: EvalConfig,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            name: "run".into(),
            seed: 1,
            nodes: 4,
            algorithm: AlgorithmConfig::Sync(SyncConfig::default()),
            workload: WorkloadSpec::default(),
            batch: 32,
            optimizer: OptimizerConfig::default(),
            compute: ComputeSpec::default(),
            network: NetworkSpec::default(),
            faults: Vec::new(),
            stop: StopRule::default(),
            eval: EvalConfig::default(),
        }
    }
}

/// Everything a run needs, translated from a spec.
pub struct Resolved {
    /// The algorithm.
    pub algorithm: AlgorithmConfig,
    /// Workers.
    pub workers: usize,
    /// The cluster.
    pub sim: SimConfig,
    /// The gradient source.
    pub workload: Arc<dyn Workload>,
    /// Training settings.
    pub train: TrainConfig,
    /// Where gradient durations come from (a replay sets [`GradientTiming::Replay`]).
    pub timing: GradientTiming,
}

impl Spec {
    /// Total ranks (workers and servers).
    pub fn ranks(&self) -> usize {
        self.algorithm.ranks(self.nodes)
    }

    /// The settings every algorithm's run shares.
    pub fn train(&self) -> TrainConfig {
        TrainConfig { batch: self.batch, optimizer: self.optimizer, eval: self.eval, stop: self.stop }
    }

    /// Checks every value; the first problem found is returned with its field's path.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.validate_algorithm()?;
        self.workload.validate(self.nodes)?;
        self.validate_engine()?;
        plain_name(&self.name)?;
        Ok(())
    }

    /// Nodes, batch, the algorithm and the optimizer, and the options that only some algorithms take.
    fn validate_algorithm(&self) -> Result<(), FieldError> {
        if self.nodes == 0 || self.nodes > 100_000 {
            return bad("nodes", format!("is {}; must be between 1 and 100000", self.nodes));
        }
        let field = |e: dsgd_runtime::error::ConfigError| FieldError { field: e.field, problem: e.problem };
        let net = self.network.config();
        self.algorithm.validate(self.nodes, &net).map_err(|e| field(e.under("algorithm")))?;
        self.train().validate().map_err(field)?;
        if self.optimizer.scale_with_workers
            && matches!(self.algorithm, AlgorithmConfig::Easgd(_) | AlgorithmConfig::Gossip(_))
        {
            return bad(
                "optimizer.scale_with_workers",
                format!(
                    "the linear scaling rule applies to sync (one step on the batches of all workers) and async_ps \
                     (the server's rate); {} workers each step on their own batch, so there is nothing to scale: \
                     remove it or set it to false",
                    self.algorithm.label()
                ),
            );
        }
        Ok(())
    }

    /// The engine's sections: each checks itself; the path gains the section's name, and a
    /// rank out of range learns which ranks are servers.
    fn validate_engine(&self) -> Result<(), FieldError> {
        let ranks = self.ranks();
        let servers = ranks - self.nodes;
        let field = |e: dsgd_sim::SimError| {
            let beyond = matches!(e, dsgd_sim::SimError::RankOutOfRange { .. });
            let mut e = FieldError::from(e);
            if servers > 0 && beyond {
                e.problem += &format!(" ({} workers, then {servers} server ranks)", self.nodes);
            }
            e
        };
        self.compute.validate(ranks).map_err(|e| field(e.under("compute")))?;
        self.network.validate(ranks).map_err(|e| field(e.under("network")))?;
        dsgd_sim::spec::validate_faults(&self.faults, ranks).map_err(|e| field(e.under("faults")))
    }
}

/// A run's name names its folder under `runs/`: it must be a plain name, not a path.
fn plain_name(name: &str) -> Result<(), FieldError> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        bad(
            "name",
            format!(
                "`{name}` is not a plain name: it names the run's folder under runs/, so it may hold only letters, \
                 digits, '.', '_' and '-' (at most 100, not starting with '.'); give the folder with --out instead"
            ),
        )
    }
}

impl Spec {
    /// The engine's, runtime's and workload's configurations (validates first).
    pub fn resolve(&self) -> Result<Resolved, FieldError> {
        self.validate()?;
        let (network, compute) = (self.network.config(), self.compute.config());
        let faults = dsgd_sim::spec::fault_config(&self.faults);
        let mut rng = dsgd_sim::Streams::new(self.seed).stream("data.partition", 0);
        let workload = self.workload.build(self.nodes, &mut rng)?;
        let train = self.train();
        let sim = SimConfig { nodes: self.ranks(), seed: self.seed, network, compute, faults, trace: false };
        let timing = match self.compute.gradient_time {
            StepTimes::Model => GradientTiming::Model,
            StepTimes::Measured => GradientTiming::Measure,
        };
        Ok(Resolved { algorithm: self.algorithm, workers: self.nodes, sim, workload, train, timing })
    }
}
