//! Local SGD: a round's closed form, its time, and its degenerate case (synchronous SGD).

mod common;
use common::*;
use dsgd_models::quadratic::Quadratic;
use dsgd_models::Workload;
use dsgd_runtime::collectives::CollectiveKind;
use dsgd_runtime::optimizer::OptimizerConfig;
use dsgd_runtime::protocols::sync::local::{LocalSgdConfig, Outer};
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::AlgorithmConfig;
use std::sync::Arc;

fn local(h: u64, outer: Outer) -> AlgorithmConfig {
    AlgorithmConfig::LocalSgd(LocalSgdConfig { local_steps: h, outer, ..Default::default() })
}

#[test]
fn one_local_step_with_plain_averaging_is_synchronous_sgd_bit_for_bit() {
    for (kind, n) in [(CollectiveKind::Ring, 4), (CollectiveKind::Tree, 3), (CollectiveKind::HalvingDoubling, 5)] {
        let sim = cluster(3, 20, 50, 10.0);
        let mut t = train(2.0);
        t.optimizer = OptimizerConfig { lr: 0.1, weight_decay: 1e-3, ..Default::default() };
        let sync =
            go(AlgorithmConfig::Sync(SyncConfig { collective: kind, ..Default::default() }), n, &sim, quadratic(), t);
        let l = AlgorithmConfig::LocalSgd(LocalSgdConfig { local_steps: 1, collective: kind, ..Default::default() });
        let r = go(l, n, &sim, quadratic(), t);
        assert_eq!(r.final_params, sync.final_params, "{kind:?}");
        assert_eq!(r.metrics.iteration_times, sync.metrics.iteration_times, "{kind:?}");
        assert_eq!(r.digest, sync.digest, "{kind:?}");
    }
}

/// The noiseless quadratic: every worker's gradient is `h ⊙ x`, so every worker takes the same
/// local steps and a round has a closed form.
fn noiseless() -> (Arc<dyn Workload>, Vec<f64>) {
    let q = Quadratic::new(8, 1.0, 0.1, 0.0, 1.0);
    let h = q.curvatures().to_vec();
    (Arc::new(q), h)
}

#[test]
fn rounds_follow_their_closed_forms() {
    let (w, h) = noiseless();
    let lr = 0.1;
    let (rounds, steps) = (3u64, 4u64);
    let run = |outer| {
        let sim = cluster(1, 10, 50, 10.0);
        let mut t = train(100.0);
        t.optimizer = OptimizerConfig { lr, ..Default::default() };
        t.stop.iterations = Some(rounds);
        go(local(steps, outer), 4, &sim, w.clone(), t)
    };
    // Plain averaging: H local steps of (1 − ηh) a round.
    let r = run(Outer::Average);
    assert_eq!(r.metrics.iterations(), rounds);
    assert_eq!(r.metrics.gradients, rounds * steps * 4, "H gradients a round on each of 4 workers");
    for (x, h) in r.final_params.iter().zip(&h) {
        let expected = (1.0 - lr * h).powi((rounds * steps) as i32);
        assert!((*x as f64 - expected).abs() < 1e-5, "{x} vs {expected}");
    }
    // DiLoCo's outer Nesterov step on the round's change Δ = x − x_H.
    let (olr, mu) = (0.7, 0.9);
    let r = run(Outer::Nesterov { lr: olr, momentum: mu });
    for (x, h) in r.final_params.iter().zip(&h) {
        let (mut xe, mut v) = (1.0f64, 0.0f64);
        for _ in 0..rounds {
            let delta = xe - xe * (1.0 - lr * h).powi(steps as i32);
            v = mu * v + delta;
            xe -= olr * (delta + mu * v);
        }
        assert!((*x as f64 - xe).abs() < 1e-5, "{x} vs {xe}");
    }
}

#[test]
fn a_round_takes_its_local_steps_and_one_all_reduce() {
    // ResNet-18-sized messages: a round is H steps of 100 ms and one ring all-reduce.
    let params = 11_689_512;
    let s = 4.0 * params as f64;
    for (n, steps) in [(4usize, 1u64), (8, 4), (16, 8)] {
        let sim = cluster(1, 100, 50, 10.0);
        let mut t = train(600.0);
        t.stop.iterations = Some(10);
        let r = go(local(steps, Outer::Average), n, &sim, timing(params), t);
        let measured = mean(r.metrics.iteration_times.iter().map(|d| d.as_secs_f64()));
        let expected = 0.1 * steps as f64 + 2.0 * (n as f64 - 1.0) * (50e-6 + s / n as f64 * 8.0 / 10e9);
        assert!((measured / expected - 1.0).abs() < 0.01, "n={n} H={steps}: {measured} vs {expected}");
    }
}
