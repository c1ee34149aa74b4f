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
