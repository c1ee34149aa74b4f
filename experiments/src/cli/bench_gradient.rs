//! `dsgd bench-gradient`: the step time of a burn network's real gradient (CPU, or CUDA with the
//! `cuda` feature), samples per second and the model's FLOP rate.

use anyhow::anyhow;

use super::out::{say, Out};
use dsgd_experiments::gradbench::{self, GradBench};
use dsgd_models::nets::Device;
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd bench-gradient`.
#[derive(clap::Args)]
pub struct Args {
    /// mlp, cnn, resnet20 or resnet18.
    #[arg(long, default_value = "resnet20")]
    model: String,
    /// Hidden widths of the MLP, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "128")]
    hidden: Vec<usize>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Minibatch size.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Timed steps.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 2)]
    warmup: usize,
    /// The device's peak TFLOP/s (default: looked up for known NVIDIA GPUs).
    #[arg(long)]
    peak_tflops: Option<f64>,
    /// Also write the timings as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Times the gradient steps and prints them.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let kind = gradbench::parse_kind(&a.model, &a.hidden)?;
    let device = Device::parse(&a.device)?;
    let bench = GradBench { kind, device, batch: a.batch, steps: a.steps, warmup: a.warmup, data_dir: None };
    let t = gradbench::run(&bench)?;
    let gpu = matches!(device, Device::Cuda(_)).then(gradbench::gpu_name).flatten();
    let peak = a.peak_tflops.or_else(|| gpu.as_deref().and_then(gradbench::known_peak_tflops));
    say!(
        out,
        "{} ({} parameters) on {}{}, batch {}",
        t.model,
        t.params,
        t.device,
        gpu.map_or(String::new(), |g| format!(" ({g})")),
        t.batch
    );
    say!(
        out,
        "  step time: mean {:.2} ms, median {:.2} ms over {} steps",
        t.mean_s * 1e3,
        t.median_s * 1e3,
        t.step_s.len()
    );
    say!(out, "  samples per second: {:.0}", t.samples_per_s);
    match peak {
        Some(p) => say!(
            out,
            "  model FLOP/s: {:.1} GFLOP/s = {:.2}% of the {p} TFLOP/s FP32 peak",
            t.flops_per_s / 1e9,
            100.0 * t.flops_per_s / (p * 1e12)
        ),
        None => say!(
            out,
            "  model FLOP/s: {:.1} GFLOP/s (give --peak-tflops for the fraction of peak)",
            t.flops_per_s / 1e9
        ),
    }
    if let Some(path) = a.json {
        let text = serde_json::to_string_pretty(&t).expect("plain data") + "\n";
        dsgd_experiments::output::write_atomic(&path, text.as_bytes())
            .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
