//! What every algorithm's run shares: batch size, optimizer, evaluation, stopping rule; in the
//! units and with the defaults a spec uses, each checking itself with paths relative to itself.

use crate::error::ConfigError;
use crate::optimizer::OptimizerConfig;
use dsgd_sim::spec::{HALF_NS, ZERO_NS};
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

    /// The counted rule that `metrics` meets, if any: the iterations first, then the updates.
    pub fn counted(&self, metrics: &crate::metrics::Metrics) -> Option<crate::outcome::StopReason> {
        use crate::outcome::StopReason;
        if self.iterations.is_some_and(|n| metrics.iterations() >= n) {
            Some(StopReason::Iterations)
        } else if self.updates.is_some_and(|n| metrics.updates >= n) {
            Some(StopReason::Updates)
        } else {
            None
        }
    }
}

impl Default for StopRule {
    fn default() -> Self {
        StopRule { sim_time_s: 60.0, iterations: None, updates: None, target_loss: None, target_accuracy: None }
    }
}

impl StopRule {
    /// Checks ranges; paths are relative to the rule.
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive("sim_time_s", self.sim_time_s)?;
        duration("sim_time_s", self.sim_time_s, HALF_NS, ZERO_NS)?;
        if let Some(a) = self.target_accuracy {
            if !(0.0..=1.0).contains(&a) {
                return Err(ConfigError::new("target_accuracy", format!("is {a}; must be in [0, 1]")));
            }
        }
        if self.target_loss.is_some_and(|l| !l.is_finite()) {
            return Err(ConfigError::new("target_loss", "must be a finite number"));
        }
        Ok(())
    }
}

/// Evaluation settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// Evaluate the consensus model every this many simulated seconds (default 1).
    pub every_s: f64,
    /// Also evaluate every replica at every evaluation (default false; always done at the end).
    pub per_node: bool,
    /// Record each node's state intervals over the first this many seconds (default 5).
    pub timeline_s: f64,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig { every_s: 1.0, per_node: false, timeline_s: 5.0 }
    }
}

impl EvalConfig {
    /// Checks ranges; paths are relative to the settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive("every_s", self.every_s)?;
        duration("every_s", self.every_s, 1e-6, "")?;
        non_negative("timeline_s", self.timeline_s)?;
        duration("timeline_s", self.timeline_s, 0.0, "")?;
        Ok(())
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
    /// Evaluation.
    pub eval: EvalConfig,
    /// When to stop.
    pub stop: StopRule,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            batch: DEFAULT_BATCH,
            optimizer: OptimizerConfig::default(),
            eval: EvalConfig::default(),
            stop: StopRule::default(),
        }
    }
}

/// The default minibatch size.
pub const DEFAULT_BATCH: usize = 32;

/// The most evaluations a run may make.
pub const MAX_EVALUATIONS: f64 = 1e7;

impl TrainConfig {
    /// Checks ranges; the first bad value is returned with its path relative to these settings
    /// (`batch`, `optimizer.lr`, `stop.sim_time_s`, `eval.every_s`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.batch == 0 {
            return Err(ConfigError::new("batch", "must be at least 1"));
        }
        if self.batch > 1 << 20 {
            return Err(ConfigError::new("batch", format!("is {}; must be at most {}", self.batch, 1 << 20)));
        }
        self.optimizer.validate().map_err(|e| e.under("optimizer"))?;
        self.stop.validate().map_err(|e| e.under("stop"))?;
        self.eval.validate().map_err(|e| e.under("eval"))?;
        let evaluations = self.stop.sim_time_s / self.eval.every_s;
        if evaluations > MAX_EVALUATIONS {
            let problem = format!(
                "{} s gives {evaluations:.0} evaluations over stop.sim_time_s; at most 10^7 are allowed",
                self.eval.every_s
            );
            return Err(ConfigError::new("eval.every_s", problem));
        }
        Ok(())
    }
}

fn positive(field: &str, x: f64) -> Result<(), ConfigError> {
    Ok(dsgd_sim::spec::positive(field, x)?)
}
fn non_negative(field: &str, x: f64) -> Result<(), ConfigError> {
    Ok(dsgd_sim::spec::non_negative(field, x)?)
}
fn duration(field: &str, s: f64, min_s: f64, why: &str) -> Result<(), ConfigError> {
    Ok(dsgd_sim::spec::duration(field, s, min_s, why)?)
}
