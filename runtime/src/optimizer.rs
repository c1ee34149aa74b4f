//! SGD with momentum (plain or Nesterov), weight decay and learning-rate schedules.
//!
//! The update (as in PyTorch): `g' = g + wd·x`; `v = μ·v + g'`; the step is `v` (plain) or
//! `g' + μ·v` (Nesterov); `x -= lr_t · step`. `lr_t` follows the schedule in the optimizer's own
//! step count, times the node count when the linear scaling rule is on. Each algorithm applies it
//! where it applies updates (every replica in sync SGD, the server in parameter-server SGD, each
//! worker's local steps in EASGD and gossip).

use crate::error::ConfigError;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Learning-rate schedule.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schedule {
    /// The base rate throughout.
    Constant,
    /// Multiply by `gamma` every `every` steps.
    Step {
        /// Steps between decays.
        every: u64,
        /// Decay factor.
        gamma: f64,
    },
    /// Ramp linearly from `base/steps` to the base over `steps` steps, then constant.
    Warmup {
        /// Length of the ramp.
        steps: u64,
    },
}

/// The optimizer's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimizerConfig {
    /// Base learning rate (default 0.1).
    pub lr: f64,
    /// Momentum coefficient (default 0: plain SGD).
    pub momentum: f64,
    /// Nesterov momentum (default false).
    pub nesterov: bool,
    /// L2 weight decay (default 0).
    pub weight_decay: f64,
    /// Schedule (default constant).
    pub schedule: Schedule,
    /// Linear scaling rule: multiply the rate by the number of workers (default false).
    pub scale_with_workers: bool,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            lr: 0.1,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            schedule: Schedule::Constant,
            scale_with_workers: false,
        }
    }
}

impl OptimizerConfig {
    /// Checks ranges; the first bad value's error has its path relative to the optimizer.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |f: &str, p: &str| Err(ConfigError::new(f, p));
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad("lr", "must be a positive number");
        }
        if !(0.0..1.0).contains(&self.momentum) {
            return bad("momentum", "must be in [0, 1)");
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad("weight_decay", "must be a non-negative number");
        }
        match self.schedule {
            Schedule::Step { every: 0, .. } => bad("schedule.every", "must be at least 1"),
            Schedule::Step { gamma, .. } if !(gamma > 0.0 && gamma <= 1.0) => {
                bad("schedule.gamma", "must be in (0, 1]")
            }
            Schedule::Warmup { steps: 0 } => bad("schedule.steps", "must be at least 1"),
            _ => Ok(()),
        }
    }
}

/// One step's arithmetic on one element, in `f32` exactly as written (no fused multiply-add).
#[derive(Clone, Copy, Debug)]
pub struct StepRule {
    lr: f32,
    mu: f32,
    wd: f32,
    nesterov: bool,
}

impl StepRule {
    /// The parameter after a step without momentum.
    #[inline(always)]
    pub fn plain(&self, x: f32, g: f32) -> f32 {
        x - self.lr * (g + self.wd * x)
    }
    /// The parameter after a step with momentum, updating the element's velocity `v`.
    #[inline(always)]
    pub fn momentum(&self, x: f32, g: f32, v: &mut f32) -> f32 {
        let g = g + self.wd * x;
        *v = self.mu * *v + g;
        let step = if self.nesterov { g + self.mu * *v } else { *v };
        x - self.lr * step
    }
}

/// One optimizer instance (its velocity and step count). The velocity is shared, copied on
/// write, so that replicas known to be identical can hold one (see the sync workers).
#[derive(Clone, Debug)]
pub struct Sgd {
    cfg: OptimizerConfig,
    scale: f64,
    velocity: Arc<Vec<f32>>,
    steps: u64,
}

impl Sgd {
    /// An optimizer for `dim` parameters; `workers` feeds the linear scaling rule.
    pub fn new(cfg: OptimizerConfig, dim: usize, workers: usize) -> Self {
        let scale = if cfg.scale_with_workers { workers as f64 } else { 1.0 };
        let velocity = if cfg.momentum > 0.0 { vec![0.0; dim] } else { Vec::new() };
        Sgd { cfg, scale, velocity: Arc::new(velocity), steps: 0 }
    }
    /// Steps applied so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }
    /// The learning rate of the next step.
    pub fn lr(&self) -> f64 {
        let base = self.cfg.lr * self.scale;
        match self.cfg.schedule {
            Schedule::Constant => base,
            Schedule::Step { every, gamma } => base * gamma.powi((self.steps / every) as i32),
            Schedule::Warmup { steps } => base * ((self.steps + 1) as f64 / steps as f64).min(1.0),
        }
    }
    /// Applies one step of `grad` to `params` (equal lengths; empty for timing workloads).
    pub fn apply(&mut self, params: &mut [f32], grad: &[f32]) {
        self.apply_scaled(params, grad, 1.0);
    }
    /// As [`Sgd::apply`], with the learning rate multiplied by `factor` for this step (a
    /// staleness-aware rate); a factor of 1 gives `apply`'s bits.
    pub fn apply_scaled(&mut self, params: &mut [f32], grad: &[f32], factor: f64) {
        debug_assert_eq!(params.len(), grad.len());
        let empty = params.is_empty();
        let (rule, velocity) = self.take_step(factor);
        match velocity {
            Some(v) if !empty => {
                for ((x, g), v) in params.iter_mut().zip(grad).zip(v.iter_mut()) {
                    *x = rule.momentum(*x, *g, v);
                }
            }
            _ => {
                for (x, g) in params.iter_mut().zip(grad) {
                    *x = rule.plain(*x, *g);
                }
            }
        }
    }

    /// Counts a step and gives its rule and the velocity to update (`None` without momentum),
    /// for a caller that applies the step element by element where its parameters are (push-sum
    /// takes it at `x / w` in fixed point); [`Sgd::apply_scaled`] is the plain case.
    pub fn take_step(&mut self, factor: f64) -> (StepRule, Option<&mut [f32]>) {
        let rule = StepRule {
            lr: (self.lr() * factor) as f32,
            mu: self.cfg.momentum as f32,
            wd: self.cfg.weight_decay as f32,
            nesterov: self.cfg.nesterov,
        };
        self.steps += 1;
        let velocity = (!self.velocity.is_empty()).then(|| Arc::make_mut(&mut self.velocity).as_mut_slice());
        (rule, velocity)
    }
    /// The velocity, for handing state to a rejoining replica.
    pub fn velocity(&self) -> &[f32] {
        &self.velocity
    }
    /// The velocity as it is held (shared with identical replicas).
    pub fn shared_velocity(&self) -> &Arc<Vec<f32>> {
        &self.velocity
    }
    /// Adopts another replica's state (velocity and step count).
    pub fn adopt(&mut self, velocity: &[f32], steps: u64) {
        if !self.velocity.is_empty() && velocity.len() == self.velocity.len() {
            Arc::make_mut(&mut self.velocity).copy_from_slice(velocity);
        }
        self.steps = steps;
    }
    /// Adopts an identical replica's state, sharing its velocity (of this optimizer's length).
    pub fn adopt_shared(&mut self, velocity: Arc<Vec<f32>>, steps: u64) {
        if velocity.len() == self.velocity.len() {
            self.velocity = velocity;
        }
        self.steps = steps;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn momentum_and_nesterov_follow_their_recurrences() {
        let cfg = OptimizerConfig { lr: 0.5, momentum: 0.5, ..Default::default() };
        let mut o = Sgd::new(cfg, 1, 1);
        let mut x = [1.0f32];
        o.apply(&mut x, &[1.0]); // v = 1, x = 0.5
        o.apply(&mut x, &[1.0]); // v = 1.5, x = -0.25
        assert_eq!(x, [-0.25]);
        let mut o = Sgd::new(OptimizerConfig { nesterov: true, ..cfg }, 1, 1);
        let mut x = [1.0f32];
        o.apply(&mut x, &[1.0]); // v = 1, step = 1.5, x = 0.25
        assert_eq!(x, [0.25]);
    }

    #[test]
    fn schedules_and_scaling() {
        let cfg = OptimizerConfig { lr: 0.1, schedule: Schedule::Step { every: 2, gamma: 0.5 }, ..Default::default() };
        let mut o = Sgd::new(cfg, 0, 1);
        let mut rates = vec![];
        for _ in 0..5 {
            rates.push(o.lr());
            o.apply(&mut [], &[]);
        }
        assert_eq!(rates, vec![0.1, 0.1, 0.05, 0.05, 0.025]);
        let o = Sgd::new(
            OptimizerConfig { schedule: Schedule::Warmup { steps: 4 }, scale_with_workers: true, ..cfg },
            0,
            8,
        );
        assert!((o.lr() - 0.2).abs() < 1e-12);
        let bad = OptimizerConfig { momentum: 1.0, ..cfg };
        assert_eq!(bad.validate().unwrap_err().field, "momentum");
    }
}
