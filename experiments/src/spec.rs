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
use dsgd_runtime::train::{StopRule, TrainConfig};
use dsgd_sim::{
    Bandwidth, ComputeConfig, Fault, FaultConfig, Jitter, NetMode, NetworkConfig, NicOverride, RandomFailures,
    SimConfig, SimDuration, SimTime, Slowdown, Topology,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    pub eval: EvalSpec,
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
            eval: EvalSpec::default(),
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

/// Step times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComputeSpec {
    /// Where gradient durations come from: `model` (default) or `measured`.
    pub gradient_time: GradientTime,
    /// Time of one gradient on one worker, milliseconds (default 100).
    pub step_time_ms: f64,
    /// Workers whose step time differs, by rank (heterogeneous clusters).
    pub per_node_step_time_ms: BTreeMap<usize, f64>,
    /// Stragglers.
    pub straggler: StragglerSpec,
}

impl Default for ComputeSpec {
    fn default() -> Self {
        ComputeSpec {
            gradient_time: GradientTime::Model,
            step_time_ms: 100.0,
            per_node_step_time_ms: BTreeMap::new(),
            straggler: StragglerSpec::default(),
        }
    }
}

/// The source of gradient durations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GradientTime {
    /// The compute model: `step_time_ms`, per-node times and jitter (deterministic).
    #[default]
    Model,
    /// Each real gradient's wall time on this machine, recorded in `gradient_times.csv` so that
    /// `dsgd replay` reproduces the run exactly. Stragglers still multiply it; jitter and step
    /// times are not used.
    Measured,
}

/// Stragglers: jitter on every step, persistently slow nodes, temporary slowdowns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StragglerSpec {
    /// Jitter distribution (default none).
    pub jitter: Jitter,
    /// Rank -> factor, e.g. `{"3": 10}` for a 10x straggler.
    pub slow_nodes: BTreeMap<usize, f64>,
    /// Temporary slowdowns.
    pub slowdowns: Vec<SlowdownSpec>,
}

/// A temporary slowdown.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowdownSpec {
    /// Rank, or absent for every rank.
    #[serde(default)]
    pub node: Option<usize>,
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub until_s: f64,
    /// Factor on steps that start inside the window.
    pub factor: f64,
}

/// The network.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way latency, microseconds (default 10).
    pub latency_us: f64,
    /// NIC bandwidth, gigabits per second (default 10).
    pub bandwidth_gbps: f64,
    /// Ranks whose NIC differs.
    pub per_node: BTreeMap<usize, NicSpec>,
    /// Wiring (default flat).
    pub topology: TopologySpec,
    /// `contention` (default) or `analytic`.
    pub mode: ModeSpec,
    /// What a message lost at random costs: `reliable` (the default for specs: it is sent again
    /// after `rto_ms`, doubling per loss) or `datagram` (lost is lost). A recorded `spec.json`
    /// without the field was run before it existed, with datagram semantics, and replays so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportSpec>,
    /// The reliable transport's retransmission timeout, milliseconds (default 200, TCP's
    /// minimum on Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rto_ms: Option<f64>,
}

/// What a message lost at random costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportSpec {
    /// Sent again after a retransmission timeout: loss costs time, as on TCP.
    Reliable,
    /// Lost is lost.
    Datagram,
}

/// The default retransmission timeout, milliseconds.
pub const DEFAULT_RTO_MS: f64 = 200.0;

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            latency_us: 10.0,
            bandwidth_gbps: 10.0,
            per_node: BTreeMap::new(),
            topology: TopologySpec::Flat,
            mode: ModeSpec::Contention,
            transport: None,
            rto_ms: None,
        }
    }
}

/// A NIC override.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicSpec {
    /// Latency, microseconds.
    pub latency_us: Option<f64>,
    /// Bandwidth, gigabits per second.
    pub bandwidth_gbps: Option<f64>,
}

/// Wiring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TopologySpec {
    /// One non-blocking switch.
    #[default]
    Flat,
    /// Racks joined by an oversubscribed core.
    Racks {
        /// Ranks per rack.
        rack_size: usize,
        /// Uplink bandwidth of a rack, gigabits per second.
        uplink_gbps: f64,
        /// Extra latency across the core, microseconds (default 0).
        #[serde(default)]
        core_latency_us: f64,
    },
}

/// Transfer model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeSpec {
    /// FIFO links with queueing.
    #[default]
    Contention,
    /// latency + S/B, no queueing.
    Analytic,
}

/// One fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    /// A rank crashes.
    Crash {
        /// Rank.
        node: usize,
        /// When, seconds.
        at_s: f64,
    },
    /// A crashed rank restarts.
    Restart {
        /// Rank.
        node: usize,
        /// When, seconds.
        at_s: f64,
    },
    /// A rank's NIC slows down over a window.
    NicDegrade {
        /// Rank.
        node: usize,
        /// Start, seconds.
        from_s: f64,
        /// End, seconds.
        until_s: f64,
        /// Bandwidth factor.
        factor: f64,
    },
    /// The network splits into groups over a window.
    Partition {
        /// Start, seconds.
        from_s: f64,
        /// End, seconds.
        until_s: f64,
        /// Groups of ranks; unlisted ranks form one more group.
        groups: Vec<Vec<usize>>,
    },
    /// Random message loss over a window.
    MessageLoss {
        /// Start, seconds.
        from_s: f64,
        /// End, seconds.
        until_s: f64,
        /// Loss probability.
        probability: f64,
    },
    /// Random crashes and repairs.
    Random {
        /// Mean time between failures per rank, seconds.
        mtbf_s: f64,
        /// Mean time to repair, seconds.
        mttr_s: f64,
        /// The ranks that fail (default all).
        #[serde(default)]
        nodes: Vec<usize>,
    },
}

/// Evaluation settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalSpec {
    /// Evaluate every this many simulated seconds (default 1).
    pub every_s: f64,
    /// Evaluate every replica at every evaluation (default false).
    pub per_node: bool,
    /// Record node timelines over the first this many seconds (default 5).
    pub timeline_s: f64,
}

impl Default for EvalSpec {
    fn default() -> Self {
        EvalSpec { every_s: 1.0, per_node: false, timeline_s: 5.0 }
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
fn window(field: &str, from: f64, until: f64) -> Result<(), FieldError> {
    finite_nonneg(&format!("{field}.from_s"), from)?;
    finite_nonneg(&format!("{field}.until_s"), until)?;
    if until < from {
        return bad(format!("{field}.until_s"), format!("({until}) is before from_s ({from})"));
    }
    Ok(())
}

fn secs(x: f64) -> SimTime {
    SimTime::from_secs_f64(x)
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

    fn rank_ok(&self, field: String, n: usize) -> Result<(), FieldError> {
        let ranks = self.ranks();
        if n < ranks {
            return Ok(());
        }
        let servers = ranks - self.nodes;
        let extra =
            if servers > 0 { format!(" ({} workers, then {servers} server ranks)", self.nodes) } else { String::new() };
        bad(field, format!("names rank {n}, but the run has ranks 0..{ranks}{extra}"))
    }

    /// Checks every value; the first problem found is returned with its field's path.
    pub fn validate(&self) -> Result<(), FieldError> {
        self.validate_algorithm()?;
        self.validate_workload()?;
        self.validate_compute()?;
        self.validate_network()?;
        self.validate_faults()?;
        self.validate_stop_and_eval()?;
        crate::bounds::check(self)
    }

    /// Nodes, batch, the algorithm and the optimizer, and the options that only some algorithms take.
    fn validate_algorithm(&self) -> Result<(), FieldError> {
        if self.nodes == 0 || self.nodes > 100_000 {
            return bad("nodes", format!("is {}; must be between 1 and 100000", self.nodes));
        }
        if self.batch == 0 {
            return bad("batch", "must be at least 1");
        }
        let field = |e: dsgd_runtime::error::ConfigError| FieldError { field: e.field, problem: e.problem };
        self.algorithm.validate(self.nodes).map_err(|e| field(e.under("algorithm")))?;
        self.optimizer.validate().map_err(|e| field(e.under("optimizer")))?;
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

    /// Step times and stragglers.
    fn validate_compute(&self) -> Result<(), FieldError> {
        finite_pos("compute.step_time_ms", self.compute.step_time_ms)?;
        for (&n, &t) in &self.compute.per_node_step_time_ms {
            self.rank_ok(format!("compute.per_node_step_time_ms.{n}"), n)?;
            finite_pos(&format!("compute.per_node_step_time_ms.{n}"), t)?;
        }
        let st = &self.compute.straggler;
        match st.jitter {
            Jitter::None => {}
            Jitter::Exponential { mean } => finite_nonneg("compute.straggler.jitter.mean", mean)?,
            Jitter::LogNormal { sigma } => finite_nonneg("compute.straggler.jitter.sigma", sigma)?,
            Jitter::Pareto { alpha } => finite_pos("compute.straggler.jitter.alpha", alpha)?,
        }
        for (&n, &f) in &st.slow_nodes {
            self.rank_ok(format!("compute.straggler.slow_nodes.{n}"), n)?;
            finite_pos(&format!("compute.straggler.slow_nodes.{n}"), f)?;
        }
        for (i, s) in st.slowdowns.iter().enumerate() {
            let f = format!("compute.straggler.slowdowns[{i}]");
            if let Some(n) = s.node {
                self.rank_ok(format!("{f}.node"), n)?;
            }
            window(&f, s.from_s, s.until_s)?;
            finite_pos(&format!("{f}.factor"), s.factor)?;
        }
        Ok(())
    }

    /// Latencies, bandwidths and the topology.
    fn validate_network(&self) -> Result<(), FieldError> {
        let net = &self.network;
        finite_nonneg("network.latency_us", net.latency_us)?;
        finite_pos("network.bandwidth_gbps", net.bandwidth_gbps)?;
        for (&n, o) in &net.per_node {
            self.rank_ok(format!("network.per_node.{n}"), n)?;
            if let Some(l) = o.latency_us {
                finite_nonneg(&format!("network.per_node.{n}.latency_us"), l)?;
            }
            if let Some(b) = o.bandwidth_gbps {
                finite_pos(&format!("network.per_node.{n}.bandwidth_gbps"), b)?;
            }
        }
        if let TopologySpec::Racks { rack_size, uplink_gbps, core_latency_us } = net.topology {
            if rack_size == 0 {
                return bad("network.topology.rack_size", "must be at least 1");
            }
            finite_pos("network.topology.uplink_gbps", uplink_gbps)?;
            finite_nonneg("network.topology.core_latency_us", core_latency_us)?;
        }
        Ok(())
    }

    /// Every fault's ranks, times and values.
    fn validate_faults(&self) -> Result<(), FieldError> {
        for (i, f) in self.faults.iter().enumerate() {
            let p = format!("faults[{i}]");
            match f {
                FaultSpec::Crash { node, at_s } | FaultSpec::Restart { node, at_s } => {
                    self.rank_ok(format!("{p}.node"), *node)?;
                    finite_nonneg(&format!("{p}.at_s"), *at_s)?;
                }
                FaultSpec::NicDegrade { node, from_s, until_s, factor } => {
                    self.rank_ok(format!("{p}.node"), *node)?;
                    window(&p, *from_s, *until_s)?;
                    finite_pos(&format!("{p}.factor"), *factor)?;
                }
                FaultSpec::Partition { from_s, until_s, groups } => {
                    window(&p, *from_s, *until_s)?;
                    let mut seen = std::collections::BTreeSet::new();
                    for (g, members) in groups.iter().enumerate() {
                        for &n in members {
                            self.rank_ok(format!("{p}.groups[{g}]"), n)?;
                            if !seen.insert(n) {
                                return bad(format!("{p}.groups[{g}]"), format!("rank {n} is in more than one group"));
                            }
                        }
                    }
                }
                FaultSpec::MessageLoss { from_s, until_s, probability } => {
                    window(&p, *from_s, *until_s)?;
                    if !(0.0..=1.0).contains(probability) {
                        return bad(format!("{p}.probability"), format!("is {probability}; must be in [0, 1]"));
                    }
                }
                FaultSpec::Random { mtbf_s, mttr_s, nodes } => {
                    finite_pos(&format!("{p}.mtbf_s"), *mtbf_s)?;
                    finite_pos(&format!("{p}.mttr_s"), *mttr_s)?;
                    for &n in nodes {
                        self.rank_ok(format!("{p}.nodes"), n)?;
                    }
                }
            }
        }
        if self.faults.iter().filter(|f| matches!(f, FaultSpec::Random { .. })).count() > 1 {
            return bad("faults", "at most one `random` entry is allowed");
        }
        Ok(())
    }

    /// The stopping rule, the evaluation and the name.
    fn validate_stop_and_eval(&self) -> Result<(), FieldError> {
        finite_pos("stop.sim_time_s", self.stop.sim_time_s)?;
        if let Some(a) = self.stop.target_accuracy {
            if !(0.0..=1.0).contains(&a) {
                return bad("stop.target_accuracy", format!("is {a}; must be in [0, 1]"));
            }
        }
        if let Some(l) = self.stop.target_loss {
            if !l.is_finite() {
                return bad("stop.target_loss", "must be a finite number");
            }
        }
        finite_pos("eval.every_s", self.eval.every_s)?;
        finite_nonneg("eval.timeline_s", self.eval.timeline_s)?;
        plain_name(&self.name)?;
        Ok(())
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
        let (network, compute, faults) = (self.network_config(), self.compute_config(), self.fault_config());
        let workload = self.workload()?;
        let train = TrainConfig {
            batch: self.batch,
            optimizer: self.optimizer,
            eval_every_s: self.eval.every_s,
            eval_per_node: self.eval.per_node,
            stop: self.stop,
            timeline_s: self.eval.timeline_s,
        };
        let sim = SimConfig { nodes: self.ranks(), seed: self.seed, network, compute, faults, trace: false };
        let timing = match self.compute.gradient_time {
            GradientTime::Model => GradientTiming::Model,
            GradientTime::Measured => GradientTiming::Measure,
        };
        Ok(Resolved { algorithm: self.algorithm, workers: self.nodes, sim, workload, train, timing })
    }

    /// The engine's network configuration in its units.
    fn network_config(&self) -> NetworkConfig {
        let net = &self.network;
        NetworkConfig {
            transport: match net.transport {
                Some(TransportSpec::Reliable) => dsgd_sim::Transport::Reliable {
                    rto: SimDuration::from_secs_f64(net.rto_ms.unwrap_or(DEFAULT_RTO_MS) * 1e-3),
                },
                Some(TransportSpec::Datagram) | None => dsgd_sim::Transport::Datagram,
            },
            latency: SimDuration::from_secs_f64(net.latency_us * 1e-6),
            bandwidth: Bandwidth::from_gbps(net.bandwidth_gbps),
            per_node: net
                .per_node
                .iter()
                .map(|(&n, o)| {
                    let nic = NicOverride {
                        latency: o.latency_us.map(|l| SimDuration::from_secs_f64(l * 1e-6)),
                        bandwidth: o.bandwidth_gbps.map(Bandwidth::from_gbps),
                    };
                    (n, nic)
                })
                .collect(),
            topology: match net.topology {
                TopologySpec::Flat => Topology::Flat,
                TopologySpec::Racks { rack_size, uplink_gbps, core_latency_us } => Topology::Racks {
                    rack_size,
                    uplink: Bandwidth::from_gbps(uplink_gbps),
                    core_latency: SimDuration::from_secs_f64(core_latency_us * 1e-6),
                },
            },
            mode: match net.mode {
                ModeSpec::Contention => NetMode::Contention,
                ModeSpec::Analytic => NetMode::Analytic,
            },
        }
    }

    /// The engine's compute configuration in its units.
    fn compute_config(&self) -> ComputeConfig {
        let ms = |x: f64| SimDuration::from_secs_f64(x * 1e-3);
        let st = &self.compute.straggler;
        ComputeConfig {
            base: ms(self.compute.step_time_ms),
            per_node_base: self.compute.per_node_step_time_ms.iter().map(|(&n, &t)| (n, ms(t))).collect(),
            jitter: st.jitter,
            slow_nodes: st.slow_nodes.clone(),
            slowdowns: st
                .slowdowns
                .iter()
                .map(|s| Slowdown { node: s.node, from: secs(s.from_s), until: secs(s.until_s), factor: s.factor })
                .collect(),
        }
    }

    /// The engine's fault configuration in its units.
    fn fault_config(&self) -> FaultConfig {
        let mut faults = FaultConfig::default();
        for f in &self.faults {
            let fault = match f {
                FaultSpec::Crash { node, at_s } => Fault::Crash { node: *node, at: secs(*at_s) },
                FaultSpec::Restart { node, at_s } => Fault::Restart { node: *node, at: secs(*at_s) },
                FaultSpec::NicDegrade { node, from_s, until_s, factor } => {
                    Fault::NicDegrade { node: *node, from: secs(*from_s), until: secs(*until_s), factor: *factor }
                }
                FaultSpec::Partition { from_s, until_s, groups } => {
                    Fault::Partition { from: secs(*from_s), until: secs(*until_s), groups: groups.clone() }
                }
                FaultSpec::MessageLoss { from_s, until_s, probability } => {
                    Fault::MessageLoss { from: secs(*from_s), until: secs(*until_s), probability: *probability }
                }
                FaultSpec::Random { mtbf_s, mttr_s, nodes } => {
                    faults.random = Some(RandomFailures {
                        mtbf: SimDuration::from_secs_f64(*mtbf_s),
                        mttr: SimDuration::from_secs_f64(*mttr_s),
                        nodes: nodes.clone(),
                    });
                    continue;
                }
            };
            faults.schedule.push(fault);
        }
        faults
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
