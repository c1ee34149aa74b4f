//! `dsgd calibrate`: this machine's or cluster's latency and bandwidth per message size (one
//! pair, all pairs at once, the ring) and, given a spec, its all-reduce and gradient step times,
//! written as spec parts.

use super::out::Out;
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd calibrate`.
#[derive(clap::Args)]
pub struct Args {
    /// A spec whose workload's gradient times to measure.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Where to write the network and compute parts.
    #[arg(long, default_value = "calibration.json")]
    out: PathBuf,
    /// The NICs are shaped by token buckets (Linux's `tbf`, as experiments/scripts/netns_cluster.sh
    /// shapes them): time streams too, and give the simulator the bucket they show.
    #[arg(long)]
    token_bucket: bool,
}

/// Without MPI: says how to rebuild.
#[cfg(not(feature = "mpi"))]
pub fn run(_: Args, _: Out) -> anyhow::Result<ExitCode> {
    Err(anyhow::anyhow!(super::mpi::NO_MPI))
}

/// Measures on this MPI job's ranks; rank 0 prints the figures and writes the parts.
#[cfg(feature = "mpi")]
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    use super::out::say;
    use dsgd_experiments::calibrate::Fit;
    let spec = a.spec.map(|p| dsgd_experiments::load::spec_from_file(&p, &[])).transpose()?;
    let universe = dsgd_experiments::real::init()?;
    let world = universe.world();
    let calibrated = dsgd_experiments::calibrate::calibrate(&world, spec.as_ref(), a.token_bucket);
    let Some(c) = super::mpi::or_abort(&world, calibrated) else {
        return Ok(ExitCode::SUCCESS);
    };
    say!(out, "  {:>9}  {:>14}  {:>14}  {:>14}", "bytes", "one way, pair", "all pairs", "ring round");
    for p in &c.points {
        say!(
            out,
            "  {:>9}  {:>11.1} us  {:>11.1} us  {:>11.1} us",
            p.bytes,
            p.one_way_s * 1e6,
            p.concurrent_one_way_s * 1e6,
            p.ring_one_way_s * 1e6
        );
    }
    let f = |f: &Fit| {
        format!(
            "{:?}: latency {:.1} us, bandwidth {:.2} Gbit/s up to {} B, through {} B",
            f.pattern, f.latency_us, f.bandwidth_gbps, f.up_to_bytes, f.through_bytes
        )
    };
    for p in &c.pattern_fits {
        say!(out, "fit {}", f(p));
    }
    if let Some(s) = &c.streams {
        for (n, t) in s.counts.iter().zip(s.times_s) {
            say!(out, "stream of {n} x {} B from rank 0 to 1: {:.3} ms", s.message_bytes, t * 1e3);
        }
    }
    match &c.bucket {
        Some(b) => say!(
            out,
            "used for the spec: a token bucket: latency {:.1} us, {:.3} Gbit/s once {:.0} kB of credit is spent at {:.2} Gbit/s",
            b.latency_us,
            b.bandwidth_gbps,
            b.depth_kb,
            b.peak_gbps
        ),
        None => say!(out, "used for the spec: {}", f(&c.fit)),
    }
    if let Some(t) = c.all_reduce_s {
        say!(out, "the spec's all-reduce of its model: {:.3} ms", t * 1e3);
    }
    for (w, steps) in c.step_s.iter().enumerate() {
        let mean = steps.iter().sum::<f64>() / steps.len() as f64;
        say!(out, "gradient step on worker {w}: mean {:.3} ms over {} steps", mean * 1e3, steps.len());
    }
    let mut v = c.spec_parts(spec.as_ref().map_or(0.0, |s| s.compute.step_time_ms));
    v["measured"] = serde_json::to_value(&c).expect("plain data");
    super::write_json(&a.out, &v, out)?;
    Ok(ExitCode::SUCCESS)
}
