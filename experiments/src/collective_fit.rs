//! A shaped network fitted to a synchronous spec's own all-reduce, with the simulator in the loop.
//!
//! A pair's streams and ping-pong give a link's token bucket ([`crate::shaping`]); a ring
//! all-reduce loads every link at once, and on an emulated network the host's two cores carry
//! all the NICs' traffic and every rank's reductions besides: eight ranks' rounds of 125 kB took
//! 1.9 ms where one stream's rate gives 1.2 ms, and within the bucket far longer than its peak
//! shows. So for a spec whose traffic is its all-reduce, the all-reduce is timed as a run does it
//! (every rank at once, each after a pause of a gradient's time, in which the buckets refill,
//! waited as a rank waits for its gradient: [`crate::calibrate::all_reduce`]), and the network
//! is the one under which the simulator's all-reduce takes that time ([`fit`]), starting from
//! the pair's bucket and latency (the timing holds what all ranks at once add): that bucket if
//! the simulator is already as slow;
//! else its peak lowered towards the rate; else, the bucket gone, the rate lowered. Each
//! simulated all-reduce is the replay's spec run with a timing workload of the same messages and
//! steps of the pause ([`simulated_all_reduce`]).

use crate::execute;
use crate::shaping::BucketFit;
use crate::spec::{ComputeSpec, Spec, TokenBucketSpec, WorkloadSpec};
use crate::{Error, Result};

/// Steps of the bisections: a peak within 20× of the rate to 0.02%.
const STEPS: usize = 14;
/// Close enough: the simulated all-reduce within this fraction of the measured one.
const TOLERANCE: f64 = 0.002;

/// The network under which `simulate` (a bucket → the simulated all-reduce, seconds) takes
/// `measured_s`: `b` where it already takes as long; else `b` with its peak lowered (log scale,
/// down to the rate); else, with the peak at the rate (no bucket), the rate lowered, down to a
/// tenth.
pub fn fit(b: BucketFit, measured_s: f64, mut simulate: impl FnMut(BucketFit) -> Result<f64>) -> Result<BucketFit> {
    if simulate(b)? >= measured_s * (1.0 - TOLERANCE) {
        return Ok(b);
    }
    let flat = BucketFit { peak_gbps: b.bandwidth_gbps, ..b };
    if simulate(flat)? >= measured_s {
        let (mut lo, mut hi) = (b.bandwidth_gbps.ln(), b.peak_gbps.ln());
        for _ in 0..STEPS {
            let mid = 0.5 * (lo + hi);
            let t = simulate(BucketFit { peak_gbps: mid.exp(), ..b })?;
            if (t - measured_s).abs() <= TOLERANCE * measured_s {
                return Ok(BucketFit { peak_gbps: mid.exp(), ..b });
            }
            // A lower peak is slower: too fast lowers the top.
            if t < measured_s {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        return Ok(BucketFit { peak_gbps: lo.exp(), ..b });
    }
    let (mut lo, mut hi) = (0.1 * b.bandwidth_gbps, b.bandwidth_gbps);
    for _ in 0..STEPS {
        let mid = 0.5 * (lo + hi);
        let t = simulate(BucketFit { bandwidth_gbps: mid, peak_gbps: mid, ..b })?;
        if (t - measured_s).abs() <= TOLERANCE * measured_s {
            lo = mid;
            break;
        }
        if t < measured_s {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(BucketFit { bandwidth_gbps: lo, peak_gbps: lo, ..b })
}

/// `spec`'s network with `b`: its latency, rate and bucket (none where the peak is not above the
/// rate: the link then sends at its rate throughout).
pub fn with_bucket(spec: &mut Spec, b: BucketFit) {
    spec.network.latency_us = b.latency_us;
    spec.network.bandwidth_gbps = b.bandwidth_gbps;
    spec.network.token_bucket =
        (b.peak_gbps > b.bandwidth_gbps).then_some(TokenBucketSpec { depth_kb: b.depth_kb, peak_gbps: b.peak_gbps });
}

/// The simulator's mean all-reduce under `b`, seconds: `replay` (a synchronous spec as the
/// simulator replays a real run of it) with a timing workload of its messages, steps of `gap_s`
/// without jitter (at least a microsecond), for `iterations` iterations; the mean iteration less
/// the step.
pub fn simulated_all_reduce(replay: &Spec, b: BucketFit, gap_s: f64, iterations: u64) -> Result<f64> {
    let gap_s = gap_s.max(1e-6);
    let mut s = replay.clone();
    let r = replay.resolve()?;
    let params = dsgd_runtime::collectives::wire_params(r.workload.as_ref());
    s.workload = WorkloadSpec::Timing { params, profile: None };
    s.compute = ComputeSpec {
        step_time_ms: gap_s * 1e3,
        receive_time_us: replay.compute.receive_time_us,
        ..ComputeSpec::default()
    };
    s.faults = Default::default();
    with_bucket(&mut s, b);
    s.stop.iterations = Some(iterations);
    s.stop.sim_time_s = 1e6;
    s.eval.every_s = 1e6;
    let out = execute::execute(&s, false)?;
    let it =
        out.summary.iteration_time_s.ok_or_else(|| Error::Mpi("the simulated all-reduce ran no iteration".into()))?;
    Ok(it.mean - gap_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load;

    const B: BucketFit = BucketFit { latency_us: 100.0, bandwidth_gbps: 1.0, depth_kb: 100.0, peak_gbps: 10.0 };

    /// A stand-in simulator: 100 kB within the bucket at the peak, 25 kB past it at the rate.
    fn toy(b: BucketFit) -> Result<f64> {
        Ok(100e3 * 8.0 / (b.peak_gbps * 1e9) + 25e3 * 8.0 / (b.bandwidth_gbps * 1e9))
    }

    #[test]
    fn a_simulator_as_slow_as_the_measurement_keeps_the_pairs_bucket() {
        assert_eq!(fit(B, toy(B).unwrap(), toy).unwrap(), B);
        assert_eq!(fit(B, 0.5 * toy(B).unwrap(), toy).unwrap(), B);
    }

    #[test]
    fn a_faster_simulator_first_lowers_the_peak_then_the_rate() {
        // 0.5 ms: 100 kB at 2 Gbit/s (0.4 ms) and 25 kB at 1 Gbit/s (0.2 ms) is 0.6; at 2.5, 0.52.
        let measured = 100e3 * 8.0 / 2.5e9 + 0.2e-3;
        let f = fit(B, measured, toy).unwrap();
        assert!((toy(f).unwrap() - measured).abs() <= TOLERANCE * measured, "{f:?}");
        assert!((f.peak_gbps - 2.5).abs() < 0.02, "{f:?}");
        assert_eq!(BucketFit { peak_gbps: B.peak_gbps, ..f }, B);
        // 2 ms: slower than the rate throughout (1 ms): 125 kB at 0.5 Gbit/s, no bucket.
        let f = fit(B, 2e-3, toy).unwrap();
        assert!((f.bandwidth_gbps - 0.5).abs() < 0.005 && f.peak_gbps == f.bandwidth_gbps, "{f:?}");
        let mut s = Spec::default();
        with_bucket(&mut s, f);
        assert_eq!((s.network.token_bucket, s.network.bandwidth_gbps), (None, f.bandwidth_gbps));
    }

    #[test]
    fn the_simulated_ring_all_reduce_is_the_closed_form() {
        // Four nodes, a ring of 400,000 parameters (chunks of 400 kB) at 1 Gbit/s, 50 µs: six
        // rounds of 50 µs + 3.2 ms, with no bucket; with one of 400 kB at 10 Gbit/s, refilled in
        // the 20 ms step, the first round's chunk goes at the peak.
        let spec = load::spec_from_str(
            "t.json",
            r#"{"nodes": 4, "workload": {"kind": "quadratic", "dim": 400000}, "compute": {"step_time_ms": 20}}"#,
            &[],
        )
        .unwrap();
        let plain = BucketFit { latency_us: 50.0, bandwidth_gbps: 1.0, depth_kb: 400.0, peak_gbps: 1.0 };
        let t = simulated_all_reduce(&spec, plain, 0.02, 5).unwrap();
        assert!((t - 6.0 * (50e-6 + 3.2e-3)).abs() < 1e-8, "{t}");
        let bucket = BucketFit { peak_gbps: 10.0, ..plain };
        let t = simulated_all_reduce(&spec, bucket, 0.02, 5).unwrap();
        assert!(t < 6.0 * (50e-6 + 3.2e-3) - 2.5e-3, "{t}");
    }
}
