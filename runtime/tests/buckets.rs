//! Gradient buckets of synchronous SGD: closed forms of the overlapped and sequential pipelines,
//! and one bucket equal to no buckets.

mod common;
use common::*;
use dsgd_models::profile::{Layer, Profile, FORWARD_SHARE};
use dsgd_models::timing::TimingWorkload;
use dsgd_models::Workload;
use dsgd_runtime::collectives::CollectiveKind;
use dsgd_runtime::outcome::RunResult;
use dsgd_runtime::protocols::sync::{BucketConfig, SyncConfig};
use dsgd_runtime::runner::AlgorithmConfig;
use std::sync::Arc;

fn sync(collective: CollectiveKind, buckets: Option<BucketConfig>) -> AlgorithmConfig {
    AlgorithmConfig::Sync(SyncConfig { collective, buckets, ..Default::default() })
}

fn bucketed(overlap: bool) -> Option<BucketConfig> {
    // Caps below any layer: every layer is a bucket of its own.
    Some(BucketConfig { cap_mb: 1e-6, first_mb: 1e-6, overlap })
}

/// A timing model of `layers` equal layers of `each` parameters and equal arithmetic.
fn equal_layers(layers: usize, each: u64) -> Arc<dyn Workload> {
    let profile = Profile { layers: vec![Layer { params: each, flops: 1.0 }; layers], forward_share: FORWARD_SHARE };
    Arc::new(TimingWorkload::new(layers * each as usize).with_profile(profile))
}

fn iterations(alg: AlgorithmConfig, n: usize, step_ms: u64, w: Arc<dyn Workload>, its: u64) -> RunResult {
    let sim = cluster(1, step_ms, 50, 10.0);
    let mut t = train(600.0);
    t.stop.iterations = Some(its);
    let r = go(alg, n, &sim, w, t);
    assert_eq!(r.metrics.iterations(), its);
    r
}

fn mean_iteration(r: &RunResult) -> f64 {
    mean(r.metrics.iteration_times.iter().map(|d| d.as_secs_f64()))
}

#[test]
fn one_bucket_without_overlap_is_the_unbucketed_iteration_to_the_nanosecond_and_bit() {
    let one = Some(BucketConfig { cap_mb: 1e6, first_mb: 1e6, overlap: false });
    for kind in [CollectiveKind::Ring, CollectiveKind::Tree, CollectiveKind::HalvingDoubling] {
        for n in [1usize, 3, 8] {
            let plain = iterations(sync(kind, None), n, 100, timing(11_689_512), 5);
            let b = iterations(sync(kind, one), n, 100, timing(11_689_512), 5);
            assert_eq!(plain.metrics.iteration_times, b.metrics.iteration_times, "{kind:?} n={n}");
            // Real values: the same bits (the unbucketed ring sums on the executor's board, the
            // bucket's ring in its messages).
            let plain = iterations(sync(kind, None), n, 100, quadratic(), 5);
            let b = iterations(sync(kind, one), n, 100, quadratic(), 5);
            assert_eq!(plain.metrics.iteration_times, b.metrics.iteration_times, "{kind:?} n={n}");
            assert_eq!(plain.final_params, b.final_params, "{kind:?} n={n}");
        }
    }
}

#[test]
fn equal_buckets_follow_the_pipeline_closed_forms() {
    // B equal buckets over a ring of n members, 50 µs latency and 10 Gb/s: each bucket's
    // all-reduce takes c = 2(n−1)(α + (S/B)/n · 8/bandwidth); the backward pass produces a
    // bucket every b = (2/3)·T/B after the forward pass's F = T/3.
    let (n, layers) = (4usize, 8usize);
    for (step_ms, each) in [(400u64, 200_000u64), (40, 2_000_000)] {
        let t = step_ms as f64 / 1e3;
        let (f, b) = (t * FORWARD_SHARE, t * (1.0 - FORWARD_SHARE) / layers as f64);
        let bucket_bytes = 4.0 * each as f64;
        let c = 2.0 * (n as f64 - 1.0) * (50e-6 + bucket_bytes / n as f64 * 8.0 / 10e9);
        let overlapped = f + b + (layers as f64 - 1.0) * b.max(c) + c;
        let sequential = t + layers as f64 * c;
        let r = iterations(sync(CollectiveKind::Ring, bucketed(true)), n, step_ms, equal_layers(layers, each), 5);
        let measured = mean_iteration(&r);
        assert!((measured / overlapped - 1.0).abs() < 1e-4, "overlap, b={b} c={c}: {measured} vs {overlapped}");
        // The time breakdown counts the communication hidden behind the backward pass: from
        // the first bucket's start to the gradient's end, (B−1)·min(b, c) an iteration.
        let hidden = (layers as f64 - 1.0) * b.min(c);
        for (rank, t) in r.times.iter().enumerate() {
            assert!(
                (t.overlapped / 5.0 / hidden - 1.0).abs() < 1e-6,
                "rank {rank}: {} vs {hidden}",
                t.overlapped / 5.0
            );
        }
        let r = iterations(sync(CollectiveKind::Ring, bucketed(false)), n, step_ms, equal_layers(layers, each), 5);
        let measured = mean_iteration(&r);
        assert!((measured / sequential - 1.0).abs() < 1e-4, "no overlap, c={c}: {measured} vs {sequential}");
        assert!(r.times.iter().all(|t| t.overlapped == 0.0), "nothing overlaps without overlap");
    }
}

#[test]
fn overlap_gives_the_model_of_no_overlap_up_to_the_order_of_additions() {
    // Two buckets either way. With overlap the average is the board's whole-vector ring, which
    // is the unbucketed ring's; without, each bucket's own ring.
    let w = || -> Arc<dyn Workload> { layered_quadratic() };
    let on = iterations(sync(CollectiveKind::Ring, bucketed(true)), 4, 100, w(), 20);
    let off = iterations(sync(CollectiveKind::Ring, bucketed(false)), 4, 100, w(), 20);
    let plain = iterations(sync(CollectiveKind::Ring, None), 4, 100, w(), 20);
    assert_eq!(on.final_params, plain.final_params, "overlap sums on the board like the unbucketed ring");
    assert_ne!(on.final_params, off.final_params, "two buckets' rings add in another order");
    for (x, y) in on.final_params.iter().zip(&off.final_params) {
        assert!((x - y).abs() <= 1e-5 * x.abs().max(1.0), "{x} vs {y}");
    }
    let (a, b) = (mean_iteration(&on), mean_iteration(&off));
    assert!(a < b, "overlap hides communication: {a} vs {b}");
}
