//! What every algorithm's run shares: batch size, optimizer, evaluation interval, stopping rule.

use crate::error::ConfigError;
use crate::optimizer::OptimizerConfig;
use serde::{Deserialize, Serialize};

/// When a run stops: the first rule met wins. `sim_time_s` always applies.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StopRule {
    /// Simulated seconds (default 60).
    pub sim_time_s: f64,
    /// Stop after this many synchronous iterations.
    pub iterations: Option<u64>,
    /// Stop after this many applied updates.
    pub updates: Option<u64>,
    /// Stop at the first evaluation whose loss is at or below this.
    pub target_loss: Option<f64>,
    /// Stop at the first evaluation whose accuracy is at or above this.
    pub target_accuracy: Option<f64>,
}

impl StopRule {
    /// True if evaluation `s` meets the target (an evaluation without a model never does).
    pub fn target_met(&self, s: &crate::metrics::Sample) -> bool {
        self.target_loss.is_some_and(|t| s.loss.is_some_and(|l| l <= t))
            || self.target_accuracy.is_some_and(|t| s.accuracy.is_some_and(|a| a >= t))
    }
}

impl Default for StopRule {
    fn default() -> Self {
        StopRule { sim_time_s: 60.0, iterations: None, updates: None, target_loss: None, target_accuracy: None }
    }
}

/// Settings common to every algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Minibatch size of one gradient on one worker (default 32).
    pub batch: usize,
    /// The optimizer.
    pub optimizer: OptimizerConfig,
    /// Evaluate the consensus model every this many simulated seconds (default 1).
    pub eval_every_s: f64,
    /// Also evaluate every replica at every evaluation (default false; always done at the end).
    pub eval_per_node: bool,
    /// When to stop.
    pub stop: StopRule,
    /// Record each node's state intervals over the first this many seconds (default 5).
    pub timeline_s: f64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch: 32,
            optimizer: OptimizerConfig::default(),
            eval_every_s: 1.0,
            eval_per_node: false,
            stop: StopRule::default(),
            timeline_s: 5.0,
        }
    }
}

impl TrainConfig {
    /// Checks ranges; returns `(field, problem)` for the first bad value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |f: &str, p: &str| Err(ConfigError::new(f, p));
        if self.batch == 0 {
            return bad("batch", "must be at least 1");
        }
        if !(self.eval_every_s.is_finite() && self.eval_every_s > 0.0) {
            return bad("eval.every_s", "must be a positive number of seconds");
        }
        if !(self.stop.sim_time_s.is_finite() && self.stop.sim_time_s > 0.0) {
            return bad("stop.sim_time_s", "must be a positive number of seconds");
        }
        if let Some(a) = self.stop.target_accuracy {
            if !(0.0..=1.0).contains(&a) {
                return bad("stop.target_accuracy", "must be in [0, 1]");
            }
        }
        self.optimizer.validate().map_err(|e| e.under("optimizer"))
    }
}
