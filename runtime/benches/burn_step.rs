//! Gradient step time of the burn networks at batch 64 on the CPU: a plain loop (gradient, then
//! SGD) against the same steps through the engine (a one-worker synchronous run). A run also
//! evaluates the model at its start and end, so the engine's per-step cost is measured as the
//! difference between runs of 2·STEPS and STEPS iterations, which cancels those fixed costs.
//! Needs Fashion-MNIST installed.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use dsgd_models::fashion_mnist::resolve_dir;
use dsgd_models::nets::{dataset, BurnNet, NetKind};
use dsgd_models::{GradRequest, Workload};
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::{run, AlgorithmConfig};
use dsgd_runtime::train::{EvalConfig, StopRule, TrainConfig};
use dsgd_sim::SimConfig;
use std::sync::Arc;

/// Steps per measured loop: 20 for the MLP and the CNN, 3 for ResNet-20 (about 1.8 s a step on
/// two cores).
fn steps(name: &str) -> u64 {
    if name == "resnet20" {
        3
    } else {
        20
    }
}

fn bench(c: &mut Criterion) {
    let data = dataset(&resolve_dir(None)).expect("Fashion-MNIST (apt-get install dataset-fashion-mnist)");
    let mut g = c.benchmark_group("burn_step_batch64");
    g.sample_size(10);
    let nets = [("mlp", NetKind::Mlp { hidden: vec![128] }), ("cnn", NetKind::Cnn), ("resnet20", NetKind::ResNet20)];
    let only = std::env::var("DSGD_BENCH_NETS").unwrap_or_default();
    for (name, kind) in nets {
        if !only.is_empty() && !only.split(',').any(|n| n == name) {
            continue;
        }
        let steps = steps(name);
        // The run's fixed costs (two evaluations) cancel in the difference; keep them small.
        let net: Arc<dyn Workload> = Arc::new(BurnNet::new(kind, data.clone(), 1).with_evaluation(100, 64));
        let init = net.init();
        g.bench_function(format!("{name}/plain_loop_{steps}_steps"), |b| {
            b.iter(|| {
                let mut p = init.clone();
                let mut grad = vec![0.0; p.len()];
                for s in 0..steps {
                    net.gradient(&p, GradRequest { worker: 0, batch: 64, seed: s }, &mut grad);
                    p.iter_mut().zip(&grad).for_each(|(x, g)| *x -= 0.1 * g);
                }
                p
            })
        });
        for steps in [steps, 2 * steps] {
            g.bench_function(format!("{name}/through_engine_{steps}_iterations"), |b| {
                b.iter(|| {
                    let train = TrainConfig {
                        batch: 64,
                        eval: EvalConfig { every_s: 1e9, ..Default::default() },
                        stop: StopRule { sim_time_s: 1e9, iterations: Some(steps), ..Default::default() },
                        ..Default::default()
                    };
                    run(&AlgorithmConfig::Sync(SyncConfig::default()), 1, &SimConfig::new(1, 1), net.clone(), train)
                        .unwrap()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
