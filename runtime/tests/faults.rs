//! Fault tests for every algorithm: a crash, a crash and restart, a 10x straggler, a partition
//! that heals. No run may deadlock; every run must reach its end, keep training after the fault
//! and record what happened.

mod common;
use common::*;
use dsgd_runtime::collectives::CollectiveKind;
use dsgd_runtime::outcome::{RunResult, StopReason};
use dsgd_runtime::protocols::async_ps::PsConfig;
use dsgd_runtime::protocols::easgd::EasgdConfig;
use dsgd_runtime::protocols::gossip::{GossipConfig, GossipMode};
use dsgd_runtime::protocols::sync::local::{LocalSgdConfig, Outer};
use dsgd_runtime::protocols::sync::{BucketConfig, SyncConfig};
use dsgd_runtime::runner::AlgorithmConfig;
use dsgd_sim::{Fault, SimTime};

const WORKERS: usize = 4;
const END: f64 = 12.0;
const TIMEOUT: f64 = 0.5;

fn algorithms() -> Vec<AlgorithmConfig> {
    let sync = SyncConfig { timeout_s: TIMEOUT, ..Default::default() };
    vec![
        AlgorithmConfig::Sync(sync),
        AlgorithmConfig::Sync(SyncConfig { collective: CollectiveKind::HalvingDoubling, ..sync }),
        AlgorithmConfig::Sync(SyncConfig { collective: CollectiveKind::Analytic, ..sync }),
        AlgorithmConfig::Sync(SyncConfig { collective: CollectiveKind::Hierarchical, group_size: Some(2), ..sync }),
        AlgorithmConfig::Sync(SyncConfig {
            collective: CollectiveKind::AnalyticHierarchical,
            group_size: Some(2),
            ..sync
        }),
        AlgorithmConfig::Sync(SyncConfig { backup_workers: 1, ..sync }),
        AlgorithmConfig::Sync(SyncConfig { buckets: Some(tiny_buckets(false)), ..sync }),
        AlgorithmConfig::Sync(SyncConfig { buckets: Some(tiny_buckets(true)), ..sync }),
        AlgorithmConfig::LocalSgd(LocalSgdConfig { timeout_s: TIMEOUT, local_steps: 4, ..Default::default() }),
        AlgorithmConfig::LocalSgd(LocalSgdConfig {
            timeout_s: TIMEOUT,
            local_steps: 2,
            outer: Outer::Nesterov { lr: 0.7, momentum: 0.9 },
            collective: CollectiveKind::HalvingDoubling,
            buckets: Some(tiny_buckets(false)),
            ..Default::default()
        }),
        AlgorithmConfig::AsyncPs(PsConfig { timeout_s: TIMEOUT, ..Default::default() }),
        AlgorithmConfig::AsyncPs(PsConfig {
            timeout_s: TIMEOUT,
            shards: 2,
            staleness_bound: Some(3),
            ..Default::default()
        }),
        AlgorithmConfig::Easgd(EasgdConfig { timeout_s: TIMEOUT, ..Default::default() }),
        AlgorithmConfig::Gossip(GossipConfig { timeout_s: TIMEOUT, ..Default::default() }),
        AlgorithmConfig::Gossip(GossipConfig { timeout_s: TIMEOUT, mode: GossipMode::Push, ..Default::default() }),
    ]
}

/// Buckets of one layer each (of [`layered_quadratic`]'s two).
fn tiny_buckets(overlap: bool) -> BucketConfig {
    BucketConfig { cap_mb: 1e-6, first_mb: 1e-6, overlap }
}

fn secs(s: f64) -> SimTime {
    SimTime::from_secs_f64(s)
}

fn run_with(alg: AlgorithmConfig, faults: Vec<Fault>, slow: Option<(usize, f64)>) -> RunResult {
    let mut sim = cluster(5, 10, 20, 10.0);
    sim.faults.schedule = faults;
    if let Some((n, f)) = slow {
        sim.compute.slow_nodes.insert(n, f);
    }
    let mut t = train(END);
    t.optimizer.lr = 0.2;
    t.eval.every_s = 0.25;
    let bucketed = alg.sync().is_some_and(|c| c.buckets.is_some());
    go(alg, WORKERS, &sim, if bucketed { layered_quadratic() } else { quadratic() }, t)
}

/// The checks every faulty run must pass.
fn healthy(label: &str, r: &RunResult) {
    assert_eq!(r.stop, StopReason::SimTime, "{label}: stopped early: {:?}", r.stop);
    let s = &r.metrics.samples;
    let at = |t: f64| s.iter().rev().find(|x| x.time_s <= t).expect("samples").updates;
    let late = s.last().unwrap().updates - at(0.75 * END);
    assert!(late > 0, "{label}: no updates in the last quarter (deadlock?)");
    let (first, last) = (loss(&s[0]), loss(s.last().unwrap()));
    assert!(last.is_finite() && last < 0.5 * first, "{label}: loss {first} -> {last}");
}

fn noted(r: &RunResult, rank: usize, what: &str) -> bool {
    r.metrics.notes.iter().any(|n| n.rank == rank && n.what.contains(what))
}

#[test]
fn every_algorithm_survives_a_worker_crash() {
    for alg in algorithms() {
        let label = alg.label();
        let r = run_with(alg, vec![Fault::Crash { node: 1, at: secs(3.0) }], None);
        healthy(&label, &r);
        assert!(noted(&r, 1, "crashed"), "{label}");
        assert_eq!(r.samples_live_at_end(), WORKERS - 1 + servers(&alg), "{label}");
        if alg.sync().is_some_and(|c| c.backup_workers == 0) {
            assert!(
                r.metrics.notes.iter().any(|n| n.what.contains("members [0, 2, 3]")),
                "{label}: {:?}",
                r.metrics.notes
            );
        }
    }
}

#[test]
fn every_algorithm_takes_a_restarted_worker_back() {
    for alg in algorithms() {
        let label = alg.label();
        let faults = vec![Fault::Crash { node: 2, at: secs(3.0) }, Fault::Restart { node: 2, at: secs(5.0) }];
        let r = run_with(alg, faults, None);
        healthy(&label, &r);
        assert!(noted(&r, 2, "crashed") && noted(&r, 2, "restarted"), "{label}");
        if let AlgorithmConfig::Sync(_) = alg {
            let last = r.metrics.notes.iter().rev().find(|n| n.what.contains("members")).unwrap();
            assert!(last.what.contains("members [0, 1, 2, 3]"), "{label}: {last:?}");
            assert_eq!(r.metrics.samples.last().unwrap().consensus_distance, 0.0, "{label}: replicas differ");
        }
    }
}

#[test]
fn every_algorithm_tolerates_a_10x_straggler() {
    for alg in algorithms() {
        let label = alg.label();
        let r = run_with(alg, vec![], Some((3, 10.0)));
        healthy(&label, &r);
        if let AlgorithmConfig::Sync(c) = alg {
            let it = mean(r.metrics.iteration_times.iter().map(|d| d.as_secs_f64()));
            if c.backup_workers == 0 {
                assert!(it > 0.09, "{label}: sync must wait for the straggler ({it})");
            } else {
                assert!(it < 0.02, "{label}: backup workers must not wait for it ({it})");
            }
        }
    }
}

#[test]
fn every_algorithm_recovers_from_a_partition_that_heals() {
    for alg in algorithms() {
        let label = alg.label();
        let part = Fault::Partition { from: secs(3.0), until: secs(5.0), groups: vec![vec![0, 1]] };
        let r = run_with(alg, vec![part], None);
        healthy(&label, &r);
        assert!(r.stats.lost_partition > 0, "{label}: the partition cut nothing");
        if let AlgorithmConfig::Sync(_) = alg {
            let last = r.metrics.notes.iter().rev().find(|n| n.what.contains("members")).unwrap();
            assert!(last.what.contains("members [0, 1, 2, 3]"), "{label}: not merged: {last:?}");
            assert_eq!(r.metrics.samples.last().unwrap().consensus_distance, 0.0, "{label}: replicas differ");
        }
    }
}

fn servers(alg: &AlgorithmConfig) -> usize {
    alg.ranks(WORKERS) - WORKERS
}

trait LiveAtEnd {
    fn samples_live_at_end(&self) -> usize;
}
impl LiveAtEnd for RunResult {
    fn samples_live_at_end(&self) -> usize {
        self.metrics.samples.last().unwrap().live
    }
}

#[test]
fn every_algorithm_survives_a_storm_of_faults() {
    // Eight workers: a crash and restart, a partition that splits the cluster in two groups of
    // equal size (which then form memberships with the same epoch number), message loss and a
    // degraded NIC, one after another.
    for alg in algorithms() {
        let label = alg.label();
        let mut sim = cluster(9, 10, 20, 10.0);
        sim.faults.schedule = vec![
            Fault::Crash { node: 3, at: secs(2.0) },
            Fault::Restart { node: 3, at: secs(5.0) },
            Fault::Partition { from: secs(7.0), until: secs(8.0), groups: vec![vec![0, 1, 2, 3]] },
            Fault::MessageLoss { from: secs(9.0), until: secs(10.0), probability: 0.01 },
            Fault::NicDegrade { node: 5, from: secs(11.0), until: secs(12.0), factor: 0.1 },
        ];
        let mut t = train(16.0);
        t.optimizer.lr = 0.2;
        t.eval.every_s = 0.25;
        let r = go(alg, 8, &sim, quadratic(), t);
        assert_eq!(r.stop, StopReason::SimTime, "{label}");
        let s = &r.metrics.samples;
        let at = |t: f64| s.iter().rev().find(|x| x.time_s <= t).expect("samples").updates;
        assert!(s.last().unwrap().updates > at(13.0), "{label}: no progress after the storm");
        let (first, last) = (loss(&s[0]), loss(s.last().unwrap()));
        assert!(last < 0.5 * first, "{label}: {first} -> {last}");
        if let AlgorithmConfig::Sync(_) = alg {
            assert_eq!(s.last().unwrap().consensus_distance, 0.0, "{label}: replicas differ");
        }
    }
}

#[test]
fn a_crashed_shard_stalls_its_workers_until_it_returns_with_its_state() {
    let alg = AlgorithmConfig::AsyncPs(PsConfig { timeout_s: TIMEOUT, shards: 2, ..Default::default() });
    // Ranks 0..4 are workers, 4 and 5 the shards. Shard 5 is down from 3 s to 6 s.
    let faults = vec![Fault::Crash { node: 5, at: secs(3.0) }, Fault::Restart { node: 5, at: secs(6.0) }];
    let r = run_with(alg, faults, None);
    healthy("async_ps 2 shards", &r);
    let s = &r.metrics.samples;
    let at = |t: f64| s.iter().rev().find(|x| x.time_s <= t).expect("samples").updates;
    // Updates are counted by shard 0, which every push also reaches: while shard 1 is down no
    // worker can complete a pull, so nothing is pushed.
    assert!(at(3.5) - at(3.0) <= WORKERS as u64, "updates went on while a shard was down");
    assert_eq!(at(6.0), at(3.5), "updates went on while a shard was down");
    assert!(at(8.0) > at(6.0) + 100, "training did not resume after the shard came back");
    assert!(r.metrics.notes.iter().any(|n| n.rank == 5 && n.what.contains("back at version")), "{:?}", r.metrics.notes);
    assert!(r.metrics.notes.iter().any(|n| n.what.contains("no answer from shards [1]")));
}

/// The ranks that hold the model: every worker, and the servers.
fn model_holders(alg: &AlgorithmConfig) -> Vec<usize> {
    (0..alg.ranks(WORKERS)).collect()
}

#[test]
fn with_no_live_model_an_evaluation_has_no_score_and_never_meets_the_target() {
    // Before the fix, an empty cluster's "consensus" was a vector of zeros, which is the
    // quadratic's optimum: the run reported loss 0 and stopped with `target`.
    let cases: Vec<(AlgorithmConfig, Vec<usize>)> = algorithms()
        .into_iter()
        .flat_map(|alg| {
            let mut v = vec![(alg, model_holders(&alg))];
            if let AlgorithmConfig::AsyncPs(c) = alg {
                // The only server, or one shard of two: its slice is unknown, not zero.
                v = vec![(alg, vec![WORKERS + c.shards - 1])];
            }
            v
        })
        .collect();
    for (alg, down) in cases {
        let label = format!("{} with ranks {down:?} down", alg.label());
        let mut sim = cluster(5, 10, 20, 10.0);
        sim.faults.schedule = down.iter().map(|&node| Fault::Crash { node, at: secs(3.0) }).collect();
        let mut t = train(END);
        t.optimizer.lr = 0.2;
        t.eval.every_s = 0.25;
        t.stop.target_loss = Some(1e-9);
        let r = go(alg, WORKERS, &sim, quadratic(), t);
        assert_ne!(r.stop, StopReason::Target, "{label}: a dead cluster met the target");
        assert_eq!(r.time_to_target, None, "{label}");
        for s in &r.metrics.samples {
            if s.time_s < 3.0 {
                assert!(s.loss.is_some_and(f64::is_finite), "{label}: no model at {} s", s.time_s);
            } else {
                assert_eq!((s.loss, s.accuracy), (None, None), "{label}: scored a model at {} s", s.time_s);
            }
        }
        assert!(r.final_params.is_empty(), "{label}: a final model out of nothing");
    }
}

#[test]
fn with_the_easgd_centre_down_the_model_is_the_mean_of_the_workers() {
    let alg = AlgorithmConfig::Easgd(EasgdConfig { timeout_s: TIMEOUT, ..Default::default() });
    let r = run_with(alg, vec![Fault::Crash { node: WORKERS, at: secs(3.0) }], None);
    let s = &r.metrics.samples;
    assert!(s.iter().all(|x| x.loss.is_some()), "the workers' replicas are a model");
    assert!(loss(s.last().unwrap()) < 0.5 * loss(&s[0]));
    assert_eq!(r.final_params.len(), 32);
}

#[test]
fn a_cluster_whose_time_cannot_advance_is_an_error_not_a_hang() {
    // Steps and messages that take no time: every iteration happens at t = 0.
    let mut sim = cluster(1, 0, 0, 1e6);
    sim.compute.base = dsgd_sim::SimDuration(0);
    let alg = AlgorithmConfig::Sync(SyncConfig::default());
    let r = dsgd_runtime::runner::run(&alg, 2, &sim, timing(16), train(1.0));
    match r {
        Err(dsgd_sim::SimError::Stalled { at, events }) => {
            assert_eq!(at, SimTime::ZERO);
            assert!(events > dsgd_sim::STALL_EVENTS);
        }
        Err(e) => panic!("another error: {e}"),
        Ok(r) => panic!("ran to {:?} with {} events", r.stop, r.stats.events),
    }
}
