//! Every algorithm's run is bit-identical across executions with the same seed, and the digest
//! covers the training math (losses and final parameters), not only the event order.

mod common;
use common::*;
use dsgd_models::softmax::{Softmax, SoftmaxConfig};
use dsgd_runtime::collectives::CollectiveKind;
use dsgd_runtime::protocols::async_ps::PsConfig;
use dsgd_runtime::protocols::easgd::EasgdConfig;
use dsgd_runtime::protocols::gossip::{GossipConfig, GossipMode, PeerChoice};
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::AlgorithmConfig;
use dsgd_sim::{Fault, Jitter, SimTime};
use std::sync::Arc;

fn algorithms() -> Vec<AlgorithmConfig> {
    vec![
        AlgorithmConfig::Sync(SyncConfig::default()),
        AlgorithmConfig::Sync(SyncConfig { collective: CollectiveKind::Tree, backup_workers: 1, ..Default::default() }),
        // Groups 2, 2, 1; after the crash of rank 1, 1, 2, 1: members holding several shards.
        AlgorithmConfig::Sync(SyncConfig {
            collective: CollectiveKind::Hierarchical,
            group_size: Some(2),
            ..Default::default()
        }),
        AlgorithmConfig::AsyncPs(PsConfig { shards: 2, staleness_bound: Some(2), ..Default::default() }),
        AlgorithmConfig::Easgd(EasgdConfig::default()),
        AlgorithmConfig::Gossip(GossipConfig { peers: PeerChoice::Exponential, ..Default::default() }),
        AlgorithmConfig::Gossip(GossipConfig { mode: GossipMode::Push, ..Default::default() }),
    ]
}

fn once(alg: AlgorithmConfig, seed: u64, lr: f64) -> (u64, Vec<u32>, Vec<u64>) {
    let mut sim = cluster(seed, 20, 30, 10.0);
    sim.compute.jitter = Jitter::LogNormal { sigma: 0.4 };
    sim.faults.schedule = vec![Fault::Crash { node: 1, at: SimTime::from_secs_f64(1.0) }];
    let mut t = train(3.0);
    t.optimizer.lr = lr;
    t.optimizer.momentum = 0.5;
    let wl = Arc::new(Softmax::new(SoftmaxConfig { train: 2_000, test: 500, ..Default::default() }));
    let r = go(alg, 5, &sim, wl, t);
    let bits = r.final_params.iter().map(|x| x.to_bits()).collect();
    let losses = r.metrics.samples.iter().map(|s| loss(s).to_bits()).collect();
    (r.digest, bits, losses)
}

#[test]
fn every_algorithm_replays_bit_for_bit() {
    for alg in algorithms() {
        let a = once(alg, 7, 0.1);
        let b = once(alg, 7, 0.1);
        assert_eq!(a, b, "{}", alg.label());
        assert_ne!(a.0, once(alg, 8, 0.1).0, "{}: another seed, same digest", alg.label());
    }
}

#[test]
fn the_digest_covers_the_arithmetic() {
    // A different learning rate changes no event time (compute and messages are modelled), only
    // the numbers: the digest must still change.
    let alg = AlgorithmConfig::Sync(SyncConfig::default());
    assert_ne!(once(alg, 7, 0.1).0, once(alg, 7, 0.1000001).0);
}

/// Prefetching the next event's node state (on by default from
/// `dsgd_runtime::sim_exec::PREFETCH_FROM` nodes) changes no bit of any algorithm's run, faults
/// included: forced on and forced off, the digests, final parameters and losses are the same.
#[test]
fn prefetching_changes_no_bit() {
    use dsgd_runtime::runner::{run_checked, Extras};
    use dsgd_runtime::timing::GradientTiming;
    let with = |alg: AlgorithmConfig, on: bool| {
        let mut sim = cluster(7, 20, 30, 10.0);
        sim.compute.jitter = Jitter::LogNormal { sigma: 0.4 };
        sim.faults.schedule = vec![Fault::Crash { node: 1, at: SimTime::from_secs_f64(1.0) }];
        let mut t = train(3.0);
        t.optimizer.momentum = 0.5;
        let wl = Arc::new(Softmax::new(SoftmaxConfig { train: 2_000, test: 500, ..Default::default() }));
        let extras = Extras { prefetch: Some(on), ..Extras::default() };
        let r = run_checked(&alg, 5, &sim, wl, t, GradientTiming::Model, extras).expect("valid configuration");
        let bits: Vec<u32> = r.final_params.iter().map(|x| x.to_bits()).collect();
        (r.digest, bits, r.stats.events)
    };
    for alg in algorithms() {
        assert_eq!(with(alg, true), with(alg, false), "{}", alg.label());
    }
}
