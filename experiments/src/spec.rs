//! Experiment specs: the JSON a user writes, its defaults, its validation, and its translation
//! into the engine's and runtime's configurations. The format is documented in `SPEC.md`.
//!
//! Every field has a default, so `{}` is a valid spec. Unknown fields, wrong types and
//! impossible values are rejected with the field's path and what is allowed.

use dsgd_models::fashion_mnist;
use dsgd_models::nets::{self, BurnNet, NetKind};
use dsgd_models::quadratic::Quadratic;
use dsgd_models::softmax::{Softmax, SoftmaxConfig};
use dsgd_models::timing::TimingWorkload;
use dsgd_models::wire::WireSized;
use dsgd_models::Workload;
use dsgd_runtime::optimizer::OptimizerConfig;
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::AlgorithmConfig;
use dsgd_runtime::timing::GradientTiming;
pub use dsgd_runtime::train::EvalConfig;
use dsgd_runtime::train::{StopRule, TrainConfig};
pub use dsgd_sim::spec::{
    ComputeSpec, FaultSpec, ModeSpec, NetworkSpec, NicSpec, SlowdownSpec, StepTimes, StragglerSpec, TopologySpec,
    TransportSpec, DEFAULT_RTO_MS,
};
use dsgd_sim::SimConfig;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A problem with a spec: which field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("field `{field}`: {problem}")]
pub struct FieldError {
    /// Dotted path of the field.
    pub field: String,
    /// What is wrong and what is allowed.
    pub problem: String,
}

impl From<dsgd_sim::SimError> for FieldError {
    fn from(e: dsgd_sim::SimError) -> Self {
        match e {
            dsgd_sim::SimError::InvalidConfig { field, problem } => FieldError { field, problem },
            other => FieldError { field: String::new(), problem: other.to_string() },
        }
    }
}

fn bad<T>(field: impl Into<String>, problem: impl Into<String>) -> Result<T, FieldError> {
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

/// Gradient sources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// Only message sizes; no arithmetic.
    Timing {
        /// Parameter count (default 11,689,512: ResNet-18).
        #[serde(default = "resnet18_params")]
        params: usize,
    },
    /// The noisy quadratic model.
    Quadratic {
        /// Dimension (default 100).
        #[serde(default = "d_dim")]
        dim: usize,
        /// Largest curvature (default 1).
        #[serde(default = "one")]
        h_max: f64,
        /// Smallest curvature (default 0.01).
        #[serde(default = "d_hmin")]
        h_min: f64,
        /// Gradient-noise scale: variance `noise·h_i/batch` (default 1).
        #[serde(default = "one")]
        noise: f64,
        /// Starting value of every coordinate (default 1).
        #[serde(default = "one")]
        x0: f64,
        /// Parameters on the wire: messages as large as a model of this many parameters
        /// (default: the workload's own `dim`), e.g. 11689512 for ResNet-18.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wire_params: Option<usize>,
    },
    /// Logistic regression on a seeded Gaussian mixture.
    Softmax {
        /// Classes (default 10).
        #[serde(default = "d_classes")]
        classes: usize,
        /// Features (default 32).
        #[serde(default = "d_features")]
        features: usize,
        /// Training samples (default 10,000).
        #[serde(default = "d_train")]
        train: usize,
        /// Held-out samples (default 2,000).
        #[serde(default = "d_test")]
        test: usize,
        /// Spread of the class means (default 0.5).
        #[serde(default = "d_sep")]
        separation: f64,
        /// Dataset seed (default 1).
        #[serde(default = "d_one_u64")]
        data_seed: u64,
        /// Parameters on the wire (default: the model's own count).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wire_params: Option<usize>,
    },
    /// A burn network on Fashion-MNIST (CPU `flex` backend, or CUDA with the `cuda` feature).
    Burn {
        /// `mlp`, `cnn`, `resnet20` or `resnet18`.
        model: BurnModel,
        /// Hidden widths of the MLP (default [128]).
        #[serde(default = "d_hidden")]
        hidden: Vec<usize>,
        /// Folder of the IDX files (default `$DSGD_FASHION_MNIST`, else /usr/share/datasets/fashion-mnist).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_dir: Option<String>,
        /// Seed of the initial parameters (default 1).
        #[serde(default = "d_one_u64")]
        init_seed: u64,
        /// Parameters on the wire (default: the model's own count).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wire_params: Option<usize>,
        /// Where gradients are computed: `cpu` (default) or `cuda` / `cuda:N`.
        #[serde(default = "d_device")]
        device: String,
        /// Evaluate on the first this many test images (default: all 10,000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        test_samples: Option<usize>,
        /// Training images that set BatchNorm statistics at evaluation (default 512).
        #[serde(default = "d_bn_calibration")]
        bn_calibration: usize,
    },
}

fn d_bn_calibration() -> usize {
    nets::BN_CALIBRATION
}

fn d_device() -> String {
    "cpu".into()
}

/// The burn networks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BurnModel {
    /// Multi-layer perceptron.
    Mlp,
    /// Two convolutions and a linear layer.
    Cnn,
    /// The CIFAR-style ResNet-20 (BatchNorm).
    Resnet20,
    /// torchvision's ResNet-18 (BatchNorm).
    Resnet18,
}

fn d_hidden() -> Vec<usize> {
    vec![128]
}

fn resnet18_params() -> usize {
    11_689_512
}
fn d_dim() -> usize {
    100
}
fn one() -> f64 {
    1.0
}
fn d_hmin() -> f64 {
    0.01
}
fn d_classes() -> usize {
    10
}
fn d_features() -> usize {
    32
}
fn d_train() -> usize {
    10_000
}
fn d_test() -> usize {
    2_000
}
fn d_sep() -> f64 {
    0.5
}
fn d_one_u64() -> u64 {
    1
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec::Quadratic { dim: 100, h_max: 1.0, h_min: 0.01, noise: 1.0, x0: 1.0, wire_params: None }
    }
}

fn finite_pos(field: &str, x: f64) -> Result<(), FieldError> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        bad(field, format!("is {x}; must be a positive number"))
    }
}
fn finite_nonneg(field: &str, x: f64) -> Result<(), FieldError> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        bad(field, format!("is {x}; must be zero or a positive number"))
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
        self.validate_workload()?;
        self.validate_engine()?;
        plain_name(&self.name)?;
        crate::bounds::check(self)
    }

    /// Nodes, batch, the algorithm and the optimizer, and the options that only some algorithms take.
    fn validate_algorithm(&self) -> Result<(), FieldError> {
        if self.nodes == 0 || self.nodes > 100_000 {
            return bad("nodes", format!("is {}; must be between 1 and 100000", self.nodes));
        }
        let field = |e: dsgd_runtime::error::ConfigError| FieldError { field: e.field, problem: e.problem };
        self.algorithm.validate(self.nodes).map_err(|e| field(e.under("algorithm")))?;
        self.train().validate().map_err(field)?;
        if let AlgorithmConfig::Sync(c) = &self.algorithm {
            if c.collective.is_hierarchical() && c.group_size.is_none() && self.network.topology == TopologySpec::Flat {
                return bad(
                    "algorithm.group_size",
                    format!(
                        "collective {} needs groups: use a racks network.topology (its racks are the groups) or \
                         set group_size",
                        c.collective.name()
                    ),
                );
            }
        }
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

    /// The workload's sizes and parameters.
    fn validate_workload(&self) -> Result<(), FieldError> {
        match &self.workload {
            WorkloadSpec::Timing { params } if *params == 0 => return bad("workload.params", "must be at least 1"),
            WorkloadSpec::Quadratic { dim, h_max, h_min, noise, x0, wire_params } => {
                if *wire_params == Some(0) {
                    return bad("workload.wire_params", "must be at least 1");
                }
                if *dim == 0 {
                    return bad("workload.dim", "must be at least 1");
                }
                finite_pos("workload.h_max", *h_max)?;
                finite_pos("workload.h_min", *h_min)?;
                if h_min > h_max {
                    return bad("workload.h_min", format!("({h_min}) must not exceed h_max ({h_max})"));
                }
                finite_nonneg("workload.noise", *noise)?;
                if !x0.is_finite() {
                    return bad("workload.x0", "must be a finite number");
                }
            }
            WorkloadSpec::Burn { hidden, wire_params, device, test_samples, bn_calibration, .. } => {
                if let Err(e) = nets::Device::parse(device) {
                    return bad("workload.device", e);
                }
                if !(1..=10_000).contains(&test_samples.unwrap_or(1)) {
                    return bad("workload.test_samples", "must be from 1 to 10000 (the test set's size)");
                }
                if !(1..=60_000).contains(bn_calibration) {
                    return bad("workload.bn_calibration", "must be from 1 to 60000 (the training set's size)");
                }
                if *wire_params == Some(0) {
                    return bad("workload.wire_params", "must be at least 1");
                }
                if hidden.contains(&0) {
                    return bad("workload.hidden", "every hidden width must be at least 1");
                }
            }
            WorkloadSpec::Softmax { classes, features, train, test, separation, wire_params, .. } => {
                if *wire_params == Some(0) {
                    return bad("workload.wire_params", "must be at least 1");
                }
                if *classes < 2 {
                    return bad("workload.classes", "must be at least 2");
                }
                for (f, v) in [("features", features), ("train", train), ("test", test)] {
                    if *v == 0 {
                        return bad(format!("workload.{f}"), "must be at least 1");
                    }
                }
                finite_nonneg("workload.separation", *separation)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The engine's sections: each checks itself; the path gains the section's name, and a
    /// rank out of range learns which ranks are servers.
    fn validate_engine(&self) -> Result<(), FieldError> {
        let ranks = self.ranks();
        let servers = ranks - self.nodes;
        let field = |e: dsgd_sim::SimError| {
            let mut e = FieldError::from(e);
            if servers > 0 && e.problem.starts_with("names rank") {
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
    /// The workloads that need no data files.
    fn simple_workload(&self) -> (Arc<dyn Workload>, Option<usize>) {
        match self.workload.clone() {
            WorkloadSpec::Timing { params } => (Arc::new(TimingWorkload::new(params)), None),
            WorkloadSpec::Quadratic { dim, h_max, h_min, noise, x0, wire_params } => {
                (Arc::new(Quadratic::new(dim, h_max, h_min, noise, x0)), wire_params)
            }
            WorkloadSpec::Softmax { classes, features, train, test, separation, data_seed, wire_params } => (
                Arc::new(Softmax::new(SoftmaxConfig { classes, features, train, test, separation, data_seed })),
                wire_params,
            ),
            WorkloadSpec::Burn { .. } => unreachable!("handled by resolve"),
        }
    }

    /// The engine's, runtime's and workload's configurations (validates first).
    pub fn resolve(&self) -> Result<Resolved, FieldError> {
        self.validate()?;
        let (network, compute) = (self.network.config(), self.compute.config());
        let faults = dsgd_sim::spec::fault_config(&self.faults);
        let workload = self.workload()?;
        let train = self.train();
        let sim = SimConfig { nodes: self.ranks(), seed: self.seed, network, compute, faults, trace: false };
        let timing = match self.compute.gradient_time {
            StepTimes::Model => GradientTiming::Model,
            StepTimes::Measured => GradientTiming::Measure,
        };
        Ok(Resolved { algorithm: self.algorithm, workers: self.nodes, sim, workload, train, timing })
    }

    /// The workload, in its message size when `wire_params` says so; loads data for burn.
    fn workload(&self) -> Result<Arc<dyn Workload>, FieldError> {
        let (workload, wire): (Arc<dyn Workload>, Option<usize>) = match &self.workload {
            WorkloadSpec::Burn {
                model,
                hidden,
                data_dir,
                init_seed,
                wire_params,
                device,
                test_samples,
                bn_calibration,
            } => {
                let dir = fashion_mnist::resolve_dir(data_dir.as_deref().map(std::path::Path::new));
                let data = nets::dataset(&dir)
                    .map_err(|e| FieldError { field: "workload.data_dir".into(), problem: e.to_string() })?;
                let kind = match model {
                    BurnModel::Mlp => NetKind::Mlp { hidden: hidden.clone() },
                    BurnModel::Cnn => NetKind::Cnn,
                    BurnModel::Resnet20 => NetKind::ResNet20,
                    BurnModel::Resnet18 => NetKind::ResNet18,
                };
                let device = nets::Device::parse(device)
                    .map_err(|problem| FieldError { field: "workload.device".into(), problem })?;
                let net = BurnNet::with_device(kind, data, *init_seed, device)
                    .map_err(|problem| FieldError { field: "workload.device".into(), problem })?
                    .with_evaluation(test_samples.unwrap_or(usize::MAX), *bn_calibration);
                (Arc::new(net), *wire_params)
            }
            _ => self.simple_workload(),
        };
        Ok(match wire {
            Some(p) => Arc::new(WireSized::new(workload, 4 * p as u64)),
            None => workload,
        })
    }
}
