//! The workload section of an experiment spec: which gradient source, its sizes and data, with
//! its one set of defaults; it checks itself ([`WorkloadSpec::validate`], paths relative to the
//! section) and builds the [`Workload`] ([`WorkloadSpec::build`]).

use crate::fashion_mnist;
use crate::nets::{self, BurnNet, NetKind};
use crate::partition::Partition;
use crate::profile::{Layer, Profile, FORWARD_SHARE, PROFILE_NAMES};
use crate::quadratic::Quadratic;
use crate::softmax::{Softmax, SoftmaxConfig};
use crate::timing::TimingWorkload;
use crate::wire::WireSized;
use crate::Workload;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The most parameters a model (or its messages) may have: 2^40 (4 TiB of fp32).
pub const MAX_PARAMS: usize = 1 << 40;

/// A workload value that is refused: its path relative to the section, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{field}`: {problem}")]
pub struct WorkloadError {
    /// Path of the field, relative to the workload section (`dim`, `hidden[0]`).
    pub field: String,
    /// What is wrong and what is allowed.
    pub problem: String,
}

fn bad<T>(field: impl Into<String>, problem: impl Into<String>) -> Result<T, WorkloadError> {
    Err(WorkloadError { field: field.into(), problem: problem.into() })
}

fn at_most(field: &str, v: usize, max: usize) -> Result<(), WorkloadError> {
    if v > max {
        return bad(field, format!("is {v}; must be at most {max}"));
    }
    Ok(())
}

fn positive(field: &str, x: f64) -> Result<(), WorkloadError> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        bad(field, format!("is {x}; must be a positive number"))
    }
}

fn non_negative(field: &str, x: f64) -> Result<(), WorkloadError> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        bad(field, format!("is {x}; must be zero or a positive number"))
    }
}

/// A timing workload's backward profile: a name or the layers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProfileSpec {
    /// A named profile (see [`PROFILE_NAMES`]).
    Named(String),
    /// The layers in forward order.
    Layers(Vec<Layer>),
}

impl ProfileSpec {
    fn validate(&self) -> Result<(), WorkloadError> {
        match self {
            ProfileSpec::Named(name) if Profile::named(name).is_none() => bad(
                "profile",
                format!("is \"{name}\"; must be one of {} or a list of layers", PROFILE_NAMES.join(", ")),
            ),
            ProfileSpec::Named(_) => Ok(()),
            ProfileSpec::Layers(layers) => {
                if layers.is_empty() {
                    return bad("profile", "must have at least one layer");
                }
                for (i, l) in layers.iter().enumerate() {
                    if l.params == 0 {
                        return bad(format!("profile[{i}].params"), "must be at least 1");
                    }
                    at_most(&format!("profile[{i}].params"), l.params as usize, MAX_PARAMS)?;
                    non_negative(&format!("profile[{i}].flops"), l.flops)?;
                }
                if layers.iter().all(|l| l.flops == 0.0) {
                    return bad("profile", "some layer must have flops above 0");
                }
                Ok(())
            }
        }
    }

    /// The profile (after [`WorkloadSpec::validate`]).
    pub fn profile(&self) -> Profile {
        match self {
            ProfileSpec::Named(name) => Profile::named(name).expect("validated"),
            ProfileSpec::Layers(layers) => Profile { layers: layers.clone(), forward_share: FORWARD_SHARE },
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
        /// The backward profile (default: one layer, ready at the end of the step): a name
        /// (`resnet18`, `resnet50`) or the layers in forward order, `[{"params": …, "flops": …}]`;
        /// its layers are laid over `params` in proportion to their sizes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profile: Option<ProfileSpec>,
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
        /// How the training set is split among workers (default `shared`).
        #[serde(default, skip_serializing_if = "Partition::is_shared")]
        partition: Partition,
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
        /// How the training set is split among workers (default `shared`).
        #[serde(default, skip_serializing_if = "Partition::is_shared")]
        partition: Partition,
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

impl BurnModel {
    /// The network, with `hidden` widths for the MLP.
    pub fn net_kind(self, hidden: Vec<usize>) -> NetKind {
        match self {
            BurnModel::Mlp => NetKind::Mlp { hidden },
            BurnModel::Cnn => NetKind::Cnn,
            BurnModel::Resnet20 => NetKind::ResNet20,
            BurnModel::Resnet18 => NetKind::ResNet18,
        }
    }
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

impl WorkloadSpec {
    /// Checks every value for `workers` workers, the limits included; paths are relative to the
    /// section.
    pub fn validate(&self, workers: usize) -> Result<(), WorkloadError> {
        self.validate_values()?;
        let (partition, samples, classes) = match self {
            WorkloadSpec::Softmax { partition, train, classes, .. } => (partition, *train, *classes),
            WorkloadSpec::Burn { partition, .. } => (partition, fashion_mnist::TRAIN, 10),
            _ => return Ok(()),
        };
        partition
            .validate(workers, samples, classes)
            .map_err(|(field, problem)| WorkloadError { field: format!("partition.{field}"), problem })
    }

    fn validate_values(&self) -> Result<(), WorkloadError> {
        match self {
            WorkloadSpec::Timing { params, profile } => {
                if *params == 0 {
                    return bad("params", "must be at least 1");
                }
                if let Some(p) = profile {
                    p.validate()?;
                }
                at_most("params", *params, MAX_PARAMS)
            }
            WorkloadSpec::Quadratic { dim, h_max, h_min, noise, x0, wire_params } => {
                wire(*wire_params)?;
                if *dim == 0 {
                    return bad("dim", "must be at least 1");
                }
                at_most("dim", *dim, 1 << 31)?;
                positive("h_max", *h_max)?;
                positive("h_min", *h_min)?;
                if h_min > h_max {
                    return bad("h_min", format!("({h_min}) must not exceed h_max ({h_max})"));
                }
                non_negative("noise", *noise)?;
                if !x0.is_finite() {
                    return bad("x0", "must be a finite number");
                }
                Ok(())
            }
            WorkloadSpec::Softmax { classes, features, train, test, separation, wire_params, .. } => {
                wire(*wire_params)?;
                if *classes < 2 {
                    return bad("classes", "must be at least 2");
                }
                for (f, v) in [("features", features), ("train", train), ("test", test)] {
                    if *v == 0 {
                        return bad(f, "must be at least 1");
                    }
                }
                non_negative("separation", *separation)?;
                at_most("classes", *classes, 1 << 16)?;
                at_most("features", *features, 1 << 20)?;
                at_most("train", *train, 1 << 26)?;
                at_most("test", *test, 1 << 26)?;
                if classes * (features + 1) > 1 << 31 {
                    return bad("features", "classes × (features + 1) parameters must be at most 2^31");
                }
                Ok(())
            }
            WorkloadSpec::Burn { hidden, wire_params, device, test_samples, bn_calibration, .. } => {
                if let Err(e) = nets::Device::parse(device) {
                    return bad("device", e.to_string());
                }
                if !(1..=10_000).contains(&test_samples.unwrap_or(1)) {
                    return bad("test_samples", "must be from 1 to 10000 (the test set's size)");
                }
                if !(1..=60_000).contains(bn_calibration) {
                    return bad("bn_calibration", "must be from 1 to 60000 (the training set's size)");
                }
                wire(*wire_params)?;
                if hidden.contains(&0) {
                    return bad("hidden", "every hidden width must be at least 1");
                }
                at_most("hidden", hidden.len(), 64)?;
                for (i, &h) in hidden.iter().enumerate() {
                    at_most(&format!("hidden[{i}]"), h, 1 << 16)?;
                }
                Ok(())
            }
        }
    }

    /// The layers of the workload's backward profile (1 where it has none), without building it.
    pub fn profile_layers(&self) -> usize {
        match self {
            WorkloadSpec::Timing { profile: Some(p), .. } if p.validate().is_ok() => p.profile().layers.len(),
            WorkloadSpec::Burn { model, hidden, .. } => {
                Profile::of_net(&model.net_kind(hidden.clone()), 1, 10).layers.len()
            }
            _ => 1,
        }
    }

    /// Parameters on the wire, where the spec sets them.
    pub fn wire_params(&self) -> Option<usize> {
        match self {
            WorkloadSpec::Timing { .. } => None,
            WorkloadSpec::Quadratic { wire_params, .. }
            | WorkloadSpec::Softmax { wire_params, .. }
            | WorkloadSpec::Burn { wire_params, .. } => *wire_params,
        }
    }

    /// The workload for `workers` workers, in its message size when `wire_params` says so;
    /// loads the data for burn. A partition draws from `rng` (the run's named stream for it).
    pub fn build(&self, workers: usize, rng: &mut impl rand::Rng) -> Result<Arc<dyn Workload>, WorkloadError> {
        let workload: Arc<dyn Workload> = match self.clone() {
            WorkloadSpec::Timing { params, profile: None } => Arc::new(TimingWorkload::new(params)),
            WorkloadSpec::Timing { params, profile: Some(p) } => {
                Arc::new(TimingWorkload::new(params).with_profile(p.profile()))
            }
            WorkloadSpec::Quadratic { dim, h_max, h_min, noise, x0, .. } => {
                Arc::new(Quadratic::new(dim, h_max, h_min, noise, x0))
            }
            WorkloadSpec::Softmax { classes, features, train, test, separation, data_seed, partition, .. } => {
                let cfg = SoftmaxConfig { classes, features, train, test, separation, data_seed };
                Arc::new(Softmax::new(cfg).with_partition(partition, workers, rng))
            }
            WorkloadSpec::Burn {
                model,
                hidden,
                data_dir,
                init_seed,
                device,
                test_samples,
                bn_calibration,
                partition,
                ..
            } => {
                let dir = fashion_mnist::resolve_dir(data_dir.as_deref().map(std::path::Path::new));
                let data = nets::dataset(&dir)
                    .map_err(|e| WorkloadError { field: "data_dir".into(), problem: e.to_string() })?;
                let kind = model.net_kind(hidden);
                let unusable = |e: nets::DeviceError| WorkloadError { field: "device".into(), problem: e.to_string() };
                let device = nets::Device::parse(&device).map_err(unusable)?;
                let net = BurnNet::with_device(kind, data, init_seed, device)
                    .map_err(unusable)?
                    .with_evaluation(test_samples.unwrap_or(usize::MAX), bn_calibration)
                    .with_partition(partition, workers, rng);
                Arc::new(net)
            }
        };
        Ok(match self.wire_params() {
            Some(p) => Arc::new(WireSized::new(workload, 4 * p as u64)),
            None => workload,
        })
    }
}

fn wire(wire_params: Option<usize>) -> Result<(), WorkloadError> {
    if wire_params == Some(0) {
        return bad("wire_params", "must be at least 1");
    }
    at_most("wire_params", wire_params.unwrap_or(0), MAX_PARAMS)
}
