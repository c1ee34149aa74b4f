//! Compute and stragglers: how long a node's step takes.
//!
//! A step on node `i` started at time `t` takes
//! `base_i · work · J · slow_i · Π(transient factors whose window holds t)`, where `J` is a draw
//! from node `i`'s own jitter stream `("compute", i)`:
//! - `None`: `J = 1`;
//! - `Exponential { mean }`: `J = 1 + X`, `X ~ Exp` with mean `mean` (a delay in units of the base);
//!   the expected slowest of `p` nodes is then `base·(1 + mean·H_p)`;
//! - `LogNormal { sigma }`: `J = exp(N(-sigma²/2, sigma²))`, mean 1;
//! - `Pareto { alpha }`: `J ~ Pareto(scale 1, shape alpha)`, at least 1, heavy-tailed
//!   (mean `alpha/(alpha-1)` for `alpha > 1`).

use crate::error::{Result, SimError};
use crate::rng::{StreamRng, Streams};
use crate::time::{SimDuration, SimTime};
use rand_distr::{Distribution, Exp, LogNormal, Pareto};
use std::collections::BTreeMap;

/// The distribution of the per-step jitter factor (in specs: `{"kind": "log_normal", "sigma": 0.3}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Jitter {
    /// Every step takes exactly its base time.
    #[default]
    None,
    /// Base plus an exponential delay with mean `mean`·base.
    Exponential {
        /// Mean of the extra delay, as a fraction of the base time.
        mean: f64,
    },
    /// Log-normal factor with mean 1 and log-standard-deviation `sigma`.
    LogNormal {
        /// Standard deviation of the factor's logarithm.
        sigma: f64,
    },
    /// Pareto factor (minimum 1) with tail index `alpha`.
    Pareto {
        /// Tail index; smaller is heavier.
        alpha: f64,
    },
}

/// A temporary slowdown of one node (or all) over a window of time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slowdown {
    /// The node, or `None` for every node.
    pub node: Option<usize>,
    /// Start of the window (inclusive).
    pub from: SimTime,
    /// End of the window (exclusive).
    pub until: SimTime,
    /// Factor applied to steps that start inside the window.
    pub factor: f64,
}

/// The compute model's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeConfig {
    /// Base step time of every node.
    pub base: SimDuration,
    /// Nodes whose base step time differs (heterogeneous clusters).
    pub per_node_base: BTreeMap<usize, SimDuration>,
    /// The jitter distribution.
    pub jitter: Jitter,
    /// Persistently slow nodes and their factor (e.g. 10.0 for a 10x straggler).
    pub slow_nodes: BTreeMap<usize, f64>,
    /// Transient slowdowns.
    pub slowdowns: Vec<Slowdown>,
    /// Host time per received message on each of the first `receive_nodes` nodes (the workers),
    /// before the node sees it; messages queue first come, first served. Zero: seen on arrival.
    pub receive: SimDuration,
    /// How many nodes, from node 0, pay `receive` (the workers; servers model their own).
    pub receive_nodes: usize,
}

impl Default for ComputeConfig {
    /// 100 ms per step, no jitter, no stragglers.
    fn default() -> Self {
        ComputeConfig {
            base: SimDuration::from_millis(100),
            per_node_base: BTreeMap::new(),
            jitter: Jitter::None,
            slow_nodes: BTreeMap::new(),
            slowdowns: Vec::new(),
            receive: SimDuration::ZERO,
            receive_nodes: usize::MAX,
        }
    }
}

enum Sampler {
    None,
    Exp(Exp<f64>),
    LogNormal(LogNormal<f64>),
    Pareto(Pareto<f64>),
}

/// Draws step times.
pub struct ComputeModel {
    base: Vec<SimDuration>,
    receive: SimDuration,
    receive_nodes: usize,
    slow: Vec<f64>,
    slowdowns: Vec<Slowdown>,
    sampler: Sampler,
    rngs: Vec<StreamRng>,
}

impl ComputeModel {
    /// Prefetches node `node`'s stream and step time.
    #[inline]
    pub(crate) fn prefetch(&self, node: usize) {
        if let Some(r) = self.rngs.get(node) {
            crate::prefetch::lines(r, 6);
        }
        if let Some(b) = self.base.get(node) {
            crate::prefetch::lines(b, 1);
        }
    }
}

fn check_factor(field: String, f: f64) -> Result<()> {
    if f.is_finite() && f > 0.0 {
        Ok(())
    } else {
        Err(SimError::config(field, format!("is {f}; a factor must be a positive finite number")))
    }
}

fn check_node(field: String, n: usize, nodes: usize) -> Result<()> {
    if n < nodes {
        Ok(())
    } else {
        Err(SimError::config(field, format!("names node {n}, but the cluster has nodes 0..{nodes}")))
    }
}

impl ComputeModel {
    /// Builds the model for `nodes` nodes, each with its own jitter stream.
    pub fn new(cfg: &ComputeConfig, nodes: usize, streams: &Streams) -> Result<Self> {
        let bad = |field: &str, what: &str| SimError::config(format!("compute.jitter.{field}"), what.to_string());
        let nonneg = |x: f64| x.is_finite() && x >= 0.0;
        let sampler = match cfg.jitter {
            Jitter::None => Sampler::None,
            Jitter::Exponential { mean } if !nonneg(mean) => {
                return Err(bad("mean", "must be a non-negative finite number"))
            }
            Jitter::Exponential { mean: 0.0 } => Sampler::None,
            Jitter::Exponential { mean } => Sampler::Exp(Exp::new(1.0 / mean).expect("checked")),
            Jitter::LogNormal { sigma } if !nonneg(sigma) => {
                return Err(bad("sigma", "must be a non-negative finite number"))
            }
            Jitter::LogNormal { sigma } => {
                Sampler::LogNormal(LogNormal::new(-sigma * sigma / 2.0, sigma).expect("checked"))
            }
            Jitter::Pareto { alpha } if !(alpha.is_finite() && alpha > 0.0) => {
                return Err(bad("alpha", "must be a positive finite number"))
            }
            Jitter::Pareto { alpha } => Sampler::Pareto(Pareto::new(1.0, alpha).expect("checked")),
        };
        let mut base = vec![cfg.base; nodes];
        for (&n, &b) in &cfg.per_node_base {
            check_node(format!("compute.per_node_base.{n}"), n, nodes)?;
            base[n] = b;
        }
        let mut slow = vec![1.0; nodes];
        for (&n, &f) in &cfg.slow_nodes {
            check_node(format!("compute.slow_nodes.{n}"), n, nodes)?;
            check_factor(format!("compute.slow_nodes.{n}"), f)?;
            slow[n] = f;
        }
        for (i, s) in cfg.slowdowns.iter().enumerate() {
            if let Some(n) = s.node {
                check_node(format!("compute.slowdowns[{i}].node"), n, nodes)?;
            }
            check_factor(format!("compute.slowdowns[{i}].factor"), s.factor)?;
            if s.until < s.from {
                return Err(SimError::config(format!("compute.slowdowns[{i}]"), "ends before it starts"));
            }
        }
        Ok(ComputeModel {
            base,
            receive: cfg.receive,
            receive_nodes: cfg.receive_nodes,
            slow,
            slowdowns: cfg.slowdowns.clone(),
            sampler,
            rngs: (0..nodes).map(|n| streams.stream("compute", n as u64)).collect(),
        })
    }

    /// The host time `node` spends on each message it receives, if any.
    pub fn receive_time(&self, node: usize) -> Option<SimDuration> {
        (node < self.receive_nodes && self.receive > SimDuration::ZERO).then_some(self.receive)
    }

    /// The time a step of `work` units (1.0 = one standard step) takes on `node`, starting at `now`.
    /// Draws one number from the node's jitter stream (none when jitter is off).
    pub fn step_time(&mut self, node: usize, now: SimTime, work: f64) -> SimDuration {
        let rng = &mut self.rngs[node];
        let jitter = match &self.sampler {
            Sampler::None => 1.0,
            Sampler::Exp(d) => 1.0 + d.sample(rng),
            Sampler::LogNormal(d) => d.sample(rng),
            Sampler::Pareto(d) => d.sample(rng),
        };
        self.base[node].mul_f64(work * jitter * self.straggling(node, now))
    }

    /// The factor by which `node` is slowed at `now`: its persistent slowness times every
    /// slowdown window it is in (1.0 for a healthy node).
    pub fn straggling(&self, node: usize, now: SimTime) -> f64 {
        let mut factor = self.slow[node];
        for s in &self.slowdowns {
            if s.node.is_none_or(|n| n == node) && s.from <= now && now < s.until {
                factor *= s.factor;
            }
        }
        factor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_jitter_has_its_mean() {
        let cfg = ComputeConfig {
            base: SimDuration::from_millis(10),
            jitter: Jitter::Exponential { mean: 0.5 },
            ..Default::default()
        };
        let mut m = ComputeModel::new(&cfg, 1, &Streams::new(3)).unwrap();
        let n = 200_000;
        let mean = (0..n).map(|_| m.step_time(0, SimTime::ZERO, 1.0).as_secs_f64()).sum::<f64>() / n as f64;
        // E = 10 ms · 1.5; standard error of the mean is 5 ms/sqrt(n) ≈ 0.011 ms.
        assert!((mean - 0.015).abs() < 5e-5, "mean step {mean}");
    }

    #[test]
    fn stragglers_and_windows_multiply() {
        let cfg = ComputeConfig {
            base: SimDuration::from_millis(10),
            slow_nodes: [(1, 10.0)].into_iter().collect(),
            slowdowns: vec![Slowdown { node: None, from: SimTime(100), until: SimTime(200), factor: 2.0 }],
            ..Default::default()
        };
        let mut m = ComputeModel::new(&cfg, 2, &Streams::new(3)).unwrap();
        assert_eq!(m.step_time(0, SimTime(0), 1.0), SimDuration::from_millis(10));
        assert_eq!(m.step_time(1, SimTime(0), 1.0), SimDuration::from_millis(100));
        assert_eq!(m.step_time(1, SimTime(150), 1.0), SimDuration::from_millis(200));
        assert_eq!(m.step_time(0, SimTime(200), 0.5), SimDuration::from_millis(5));
    }

    #[test]
    fn bad_values_name_their_field() {
        let cfg = ComputeConfig { slow_nodes: [(5, 2.0)].into_iter().collect(), ..Default::default() };
        let err = ComputeModel::new(&cfg, 4, &Streams::new(0)).err().unwrap();
        assert!(err.to_string().contains("compute.slow_nodes.5"), "{err}");
        let cfg = ComputeConfig { jitter: Jitter::LogNormal { sigma: -1.0 }, ..Default::default() };
        let err = ComputeModel::new(&cfg, 4, &Streams::new(0)).err().unwrap();
        assert!(err.to_string().contains("compute.jitter.sigma"), "{err}");
    }
}
