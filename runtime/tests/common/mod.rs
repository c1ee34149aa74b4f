//! Shared helpers for the runtime's integration tests.
#![allow(dead_code, missing_docs)]

use dsgd_models::quadratic::Quadratic;
use dsgd_models::timing::TimingWorkload;
use dsgd_models::Workload;
use dsgd_runtime::metrics::Sample;
use dsgd_runtime::outcome::RunResult;
use dsgd_runtime::runner::{run, AlgorithmConfig};
use dsgd_runtime::train::{EvalConfig, StopRule, TrainConfig};
use dsgd_sim::{Bandwidth, ComputeConfig, NetworkConfig, SimConfig, SimDuration};
use std::sync::Arc;

pub fn cluster(seed: u64, step_ms: u64, latency_us: u64, gbps: f64) -> SimConfig {
    SimConfig {
        network: NetworkConfig {
            latency: SimDuration::from_micros(latency_us),
            bandwidth: Bandwidth::from_gbps(gbps),
            ..Default::default()
        },
        compute: ComputeConfig { base: SimDuration::from_millis(step_ms), ..Default::default() },
        ..SimConfig::new(1, seed)
    }
}

pub fn timing(params: usize) -> Arc<dyn Workload> {
    Arc::new(TimingWorkload::new(params))
}

pub fn quadratic() -> Arc<dyn Workload> {
    Arc::new(Quadratic::new(32, 1.0, 0.01, 1.0, 1.0))
}

/// The quadratic with a profile of two layers (12 and 20 of its 32 parameters).
pub struct TwoLayers(Quadratic);

impl Workload for TwoLayers {
    fn name(&self) -> &str {
        "two-layer quadratic"
    }
    fn param_count(&self) -> usize {
        self.0.param_count()
    }
    fn init(&self) -> Vec<f32> {
        self.0.init()
    }
    fn gradient(&self, params: &[f32], req: dsgd_models::GradRequest, grad: &mut [f32]) -> f64 {
        self.0.gradient(params, req, grad)
    }
    fn evaluate(&self, params: &[f32]) -> dsgd_models::Evaluation {
        self.0.evaluate(params)
    }
    fn profile(&self) -> dsgd_models::profile::Profile {
        dsgd_models::profile::Profile {
            layers: vec![
                dsgd_models::profile::Layer { params: 12, flops: 1.0 },
                dsgd_models::profile::Layer { params: 20, flops: 3.0 },
            ],
            forward_share: dsgd_models::profile::FORWARD_SHARE,
        }
    }
}

/// [`quadratic`] with two layers, so that gradient buckets have something to split.
pub fn layered_quadratic() -> Arc<dyn Workload> {
    Arc::new(TwoLayers(Quadratic::new(32, 1.0, 0.01, 1.0, 1.0)))
}

pub fn train(sim_time_s: f64) -> TrainConfig {
    TrainConfig {
        batch: 8,
        eval: EvalConfig { every_s: sim_time_s / 20.0, ..Default::default() },
        stop: StopRule { sim_time_s, ..Default::default() },
        ..Default::default()
    }
}

pub fn go(alg: AlgorithmConfig, workers: usize, sim: &SimConfig, w: Arc<dyn Workload>, t: TrainConfig) -> RunResult {
    run(&alg, workers, sim, w, t).expect("valid configuration")
}

pub fn mean(xs: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.into_iter().collect();
    v.iter().sum::<f64>() / v.len() as f64
}

/// The loss of an evaluation that had a model.
pub fn loss(s: &Sample) -> f64 {
    s.loss.unwrap_or_else(|| panic!("no model at {} s", s.time_s))
}
