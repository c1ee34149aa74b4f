//! Local SGD (periodic model averaging) on the synchronous worker's machinery.
//!
//! Every worker takes `H` steps of the inner optimizer (the run's `optimizer`) on its own copy of
//! the model, then the workers all-reduce the change since the last average, `Δ_i = x − x_i`
//! (with any collective, and buckets), and every replica applies the outer optimizer to the
//! average: `x − mean(Δ)` for plain averaging (the mean of the local models, Lin et al. 2020's
//! post-local SGD), or Nesterov SGD with its own rate and momentum (DiLoCo, Douillard et al.
//! 2023). A round is one iteration of the synchronous worker, so membership changes, restarts
//! and partitions are handled as for synchronous SGD: a worker that adopts a donor's state starts
//! a new round from it; the inner optimizer's state stays with each worker.
//!
//! With `H = 1`, plain averaging and an inner optimizer without momentum, a round is exactly a
//! synchronous SGD step (`mean(x − η(g_i + λx)) = x − η(mean(g) + λx)`), and it runs as one: the
//! gradients are all-reduced and the optimizer applied to their mean, the same bits as `sync`.

use super::SyncConfig;
use crate::collectives::{analytic::CostModel, CollectiveKind};
use crate::optimizer::{OptimizerConfig, Sgd};
use crate::protocols::sync::BucketConfig;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The outer step applied to the averaged change.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Outer {
    /// The mean of the local models: `x − mean(Δ)`.
    Average,
    /// Nesterov SGD on the averaged change as a gradient (DiLoCo's outer step).
    Nesterov {
        /// Outer learning rate (DiLoCo: 0.7).
        lr: f64,
        /// Outer momentum (DiLoCo: 0.9).
        momentum: f64,
    },
}

/// Configuration of local SGD.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalSgdConfig {
    /// Local steps between averages, `H` (default 4).
    pub local_steps: u64,
    /// The outer step (default plain averaging).
    pub outer: Outer,
    /// The all-reduce algorithm (default ring).
    pub collective: CollectiveKind,
    /// Failure-detection timeout in seconds (default 5).
    pub timeout_s: f64,
    /// Network figures for the analytic collectives (filled in from the network when absent).
    pub cost: Option<CostModel>,
    /// Ranks per group of the hierarchical collectives (as for `sync`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_size: Option<usize>,
    /// A worker's time to handle one chunk of the collective, microseconds (as for `sync`).
    #[serde(skip_serializing_if = "crate::protocols::service::is_instant")]
    pub message_time_us: f64,
    /// Buckets of the averaged change (as for `sync`; without overlap: the change exists only
    /// after the last local step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<BucketConfig>,
}

impl Default for LocalSgdConfig {
    fn default() -> Self {
        let s = SyncConfig::default();
        LocalSgdConfig {
            local_steps: 4,
            outer: Outer::Average,
            collective: s.collective,
            timeout_s: s.timeout_s,
            cost: None,
            group_size: None,
            message_time_us: 0.0,
            buckets: None,
        }
    }
}

/// What a synchronous worker needs to run rounds of local SGD.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rounds {
    /// Local steps a round.
    pub h: u64,
    /// The outer step.
    pub outer: Outer,
}

impl LocalSgdConfig {
    /// The synchronous configuration that runs these rounds.
    pub fn sync(&self) -> SyncConfig {
        SyncConfig {
            collective: self.collective,
            backup_workers: 0,
            timeout_s: self.timeout_s,
            cost: self.cost,
            group_size: self.group_size,
            message_time_us: self.message_time_us,
            buckets: self.buckets,
            local: Some(Rounds { h: self.local_steps, outer: self.outer }),
        }
    }

    /// What is wrong with the local options: (field, problem).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.local_steps == 0 {
            return Err(("local_steps", "must be at least 1".into()));
        }
        if let Outer::Nesterov { lr, momentum } = self.outer {
            if !(lr.is_finite() && lr > 0.0) {
                return Err(("outer.lr", format!("is {lr}; must be a positive number")));
            }
            if !(0.0..1.0).contains(&momentum) {
                return Err(("outer.momentum", format!("is {momentum}; must be at least 0 and below 1")));
            }
        }
        if self.buckets.is_some_and(|b| b.overlap) {
            return Err((
                "buckets.overlap",
                "local SGD averages the change since the last average, which exists only after the last local \
                 step; set overlap to false"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl Rounds {
    /// True if a round is exactly a synchronous step: one local step, plain averaging, and an
    /// inner optimizer without momentum.
    pub fn is_sync(&self, inner: &OptimizerConfig) -> bool {
        self.h == 1 && self.outer == Outer::Average && inner.momentum == 0.0
    }

    /// The outer optimizer, applied to the averaged change as a gradient.
    pub fn outer_optimizer(&self) -> OptimizerConfig {
        match self.outer {
            // x − 1·(Δ + 0·x) = x − Δ.
            Outer::Average => OptimizerConfig { lr: 1.0, ..Default::default() },
            Outer::Nesterov { lr, momentum } => OptimizerConfig { lr, momentum, nesterov: true, ..Default::default() },
        }
    }
}

/// A worker's progress through a round.
#[derive(Clone, Debug)]
pub(super) struct Local {
    /// Local steps a round.
    pub h: u64,
    /// The inner optimizer's configuration (the run's `optimizer`).
    pub inner_cfg: OptimizerConfig,
    /// The worker's own model, from the round's start (`None` before its first step).
    pub params: Option<Arc<Vec<f32>>>,
    /// The inner optimizer (its state stays with the worker).
    pub inner: Sgd,
    /// Local steps taken in this round.
    pub taken: u64,
}

impl Local {
    /// A worker's local state for `dim` parameters.
    pub fn new(h: u64, inner: OptimizerConfig, dim: usize, workers: usize) -> Self {
        Local { h, inner_cfg: inner, params: None, inner: Sgd::new(inner, dim, workers), taken: 0 }
    }

    /// A new round from the averaged model.
    pub fn begin(&mut self) {
        self.params = None;
        self.taken = 0;
    }

    /// One local step with `grad` from `start` (the round's model); true when the round's `H`
    /// steps are done.
    pub fn step(&mut self, start: &Arc<Vec<f32>>, grad: &[f32]) -> bool {
        let p = self.params.get_or_insert_with(|| start.clone());
        self.inner.apply(Arc::make_mut(p).as_mut_slice(), grad);
        self.taken += 1;
        self.taken >= self.h
    }

    /// The model the next local gradient is taken at.
    pub fn model<'a>(&'a self, start: &'a Arc<Vec<f32>>) -> &'a Arc<Vec<f32>> {
        self.params.as_ref().unwrap_or(start)
    }

    /// The change since the round's start, `start − x_local`.
    pub fn change(&self, start: &[f32]) -> Vec<f32> {
        let local = self.params.as_deref().map_or(start, |p| p.as_slice());
        start.iter().zip(local).map(|(a, b)| a - b).collect()
    }
}
