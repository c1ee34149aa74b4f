//! Simulating 100 nodes for 1,000 synchronous iterations with the message-level ring all-reduce
//! and the timing workload (ResNet-18-sized messages): 100 × 2 × 99 chunks an iteration, about
//! 19.8 million messages in all. Target: under 2 s on one core (2.1-2.5 s on the 2-core Intel Xeon
//! VM, 2026-12-07; 2.6-2.8 s before a message's events rode inline in the queue).
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use dsgd_models::timing::TimingWorkload;
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::{run, AlgorithmConfig};
use dsgd_runtime::train::{EvalConfig, StopRule, TrainConfig};
use dsgd_sim::{Bandwidth, NetworkConfig, SimConfig, SimDuration};
use std::sync::Arc;

fn sync_100_nodes_1000_iterations() -> u64 {
    let sim = SimConfig {
        network: NetworkConfig {
            latency: SimDuration::from_micros(5),
            bandwidth: Bandwidth::from_gbps(100.0),
            ..Default::default()
        },
        ..SimConfig::new(100, 1)
    };
    let train = TrainConfig {
        eval: EvalConfig { every_s: 1e6, ..Default::default() },
        stop: StopRule { sim_time_s: 1e6, iterations: Some(1000), ..Default::default() },
        ..Default::default()
    };
    let r =
        run(&AlgorithmConfig::Sync(SyncConfig::default()), 100, &sim, Arc::new(TimingWorkload::new(11_689_512)), train)
            .unwrap();
    assert_eq!(r.metrics.iterations(), 1000);
    r.stats.messages_sent
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sync_ring");
    g.sample_size(10);
    g.bench_function("100_nodes_1000_iterations", |b| b.iter(sync_100_nodes_1000_iterations));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
