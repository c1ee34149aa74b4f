//! `dsgd bench-gradient`: the wall time of real gradient steps of a burn network on a device, with
//! samples per second and achieved model FLOP/s (6 · forward multiply-adds per sample) against the
//! device's peak. This is what the GPU check script runs, and what calibration uses for a model's
//! step-time distribution.

use crate::{Error, Result};
use dsgd_models::fashion_mnist;
use dsgd_models::nets::{self, flops, BurnNet, Device, NetKind};
use dsgd_models::{GradRequest, Workload};
use std::time::Instant;

/// What to time.
pub struct GradBench {
    /// The network.
    pub kind: NetKind,
    /// Where.
    pub device: Device,
    /// Minibatch size.
    pub batch: usize,
    /// Timed steps.
    pub steps: usize,
    /// Untimed steps first (kernel compilation, caches).
    pub warmup: usize,
    /// The data folder (default: the usual search).
    pub data_dir: Option<std::path::PathBuf>,
}

/// Timings of a benchmark.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GradTimes {
    /// Network name.
    pub model: String,
    /// Device.
    pub device: String,
    /// Trainable parameters.
    pub params: usize,
    /// Minibatch size.
    pub batch: usize,
    /// Every timed step, seconds.
    pub step_s: Vec<f64>,
    /// Mean step, seconds.
    pub mean_s: f64,
    /// Median step, seconds.
    pub median_s: f64,
    /// Samples per second at the mean step.
    pub samples_per_s: f64,
    /// Model FLOP/s at the mean step.
    pub flops_per_s: f64,
}

/// Parses a model name as the specs spell it.
pub fn parse_kind(model: &str, hidden: &[usize]) -> Result<NetKind> {
    Ok(match model {
        "mlp" => NetKind::Mlp { hidden: hidden.to_vec() },
        "cnn" => NetKind::Cnn,
        "resnet20" => NetKind::ResNet20,
        "resnet18" => NetKind::ResNet18,
        _ => {
            return Err(Error::argument(
                "--model",
                format!("unknown model {model:?}; expected mlp, cnn, resnet20 or resnet18"),
            ))
        }
    })
}

/// Runs the benchmark: each step is a full gradient as a run computes it (parameters into the
/// model, forward, backward, gradients out as one vector).
pub fn run(b: &GradBench) -> Result<GradTimes> {
    if b.batch == 0 || b.steps == 0 {
        return Err(Error::argument("--batch, --steps", "must be at least 1"));
    }
    crate::pages::for_net(&b.kind);
    let dir = fashion_mnist::resolve_dir(b.data_dir.as_deref());
    let data = nets::dataset(&dir)?;
    let net = BurnNet::with_device(b.kind.clone(), data, 1, b.device)?;
    let p = net.init();
    let mut g = vec![0.0; p.len()];
    let mut step_s = Vec::with_capacity(b.steps);
    for s in 0..b.warmup + b.steps {
        let t = Instant::now();
        net.gradient(&p, GradRequest { worker: 0, batch: b.batch, seed: s as u64 }, &mut g);
        if s >= b.warmup {
            step_s.push(t.elapsed().as_secs_f64());
        }
    }
    let mean_s = step_s.iter().sum::<f64>() / step_s.len() as f64;
    let mut sorted = step_s.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(GradTimes {
        model: b.kind.name().into(),
        device: b.device.to_string(),
        params: net.param_count(),
        batch: b.batch,
        median_s: sorted[sorted.len() / 2],
        samples_per_s: b.batch as f64 / mean_s,
        flops_per_s: flops::step_flops(&b.kind, b.batch) / mean_s,
        mean_s,
        step_s,
    })
}

/// FP32 peak (non-tensor-core) TFLOP/s of well-known NVIDIA GPUs, by the name `nvidia-smi` prints.
pub fn known_peak_tflops(gpu_name: &str) -> Option<f64> {
    let n = gpu_name.to_ascii_uppercase();
    [("H200", 67.0), ("H100 PCIE", 51.2), ("H100", 67.0), ("A100", 19.5), ("L40S", 91.6), ("A10", 31.2), ("V100", 15.7)]
        .iter()
        .find(|(k, _)| n.contains(k))
        .map(|&(_, p)| p)
}

/// The first GPU's name according to `nvidia-smi`, if it runs.
pub fn gpu_name() -> Option<String> {
    let o =
        std::process::Command::new("nvidia-smi").args(["--query-gpu=name", "--format=csv,noheader"]).output().ok()?;
    let s = String::from_utf8_lossy(&o.stdout).lines().next()?.trim().to_string();
    (o.status.success() && !s.is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_and_names() {
        assert_eq!(known_peak_tflops("NVIDIA H100 80GB HBM3"), Some(67.0));
        assert_eq!(known_peak_tflops("NVIDIA H100 PCIe"), Some(51.2));
        assert_eq!(known_peak_tflops("NVIDIA H200"), Some(67.0));
        assert_eq!(known_peak_tflops("Some GPU"), None);
        let e = parse_kind("resnet50", &[]).unwrap_err();
        assert!(matches!(&e, Error::Argument { flag: "--model", problem } if problem.contains("resnet18")), "{e}");
    }

    #[test]
    fn the_benchmark_times_real_steps() {
        let b = GradBench {
            kind: NetKind::Mlp { hidden: vec![16] },
            device: Device::Cpu,
            batch: 8,
            steps: 3,
            warmup: 1,
            data_dir: None,
        };
        let t = run(&b).unwrap();
        assert_eq!(t.step_s.len(), 3);
        assert!(t.mean_s > 0.0 && t.samples_per_s > 0.0);
        assert_eq!(t.params, 784 * 16 + 16 + 16 * 10 + 10);
        assert!((t.flops_per_s * t.mean_s - 6.0 * 8.0 * (784.0 * 16.0 + 160.0)).abs() < 1.0);
    }
}
