//! Closed-form checks of the algorithms on the simulator.

mod common;
use common::*;
use dsgd_models::quadratic::Quadratic;
use dsgd_models::Workload;
use dsgd_runtime::collectives::analytic::CostModel;
use dsgd_runtime::collectives::CollectiveKind;
use dsgd_runtime::protocols::async_ps::PsConfig;
use dsgd_runtime::protocols::easgd::EasgdConfig;
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::AlgorithmConfig;
use dsgd_runtime::train::StopRule;
use dsgd_sim::{Bandwidth, Jitter, SimDuration};
use std::sync::Arc;

fn sync(collective: CollectiveKind) -> AlgorithmConfig {
    AlgorithmConfig::Sync(SyncConfig { collective, ..Default::default() })
}

#[test]
fn sync_ring_iteration_takes_compute_plus_the_ring_cost() {
    // ResNet-18-sized messages over 10 Gb/s, 50 µs latency, 100 ms compute.
    let params = 11_689_512;
    let s = 4.0 * params as f64;
    for n in [2usize, 4, 8, 16] {
        let sim = cluster(1, 100, 50, 10.0);
        let mut t = train(60.0);
        t.stop.iterations = Some(20);
        let r = go(sync(CollectiveKind::Ring), n, &sim, timing(params), t);
        let measured = mean(r.metrics.iteration_times.iter().map(|d| d.as_secs_f64()));
        let expected = 0.1 + 2.0 * (n as f64 - 1.0) * (50e-6 + s / n as f64 * 8.0 / 10e9);
        assert!((measured / expected - 1.0).abs() < 0.01, "n={n}: {measured} vs {expected}");
        assert_eq!(r.metrics.iterations(), 20);
    }
}

#[test]
fn a_sync_workers_chunk_handling_time_adds_to_every_round_of_the_ring() {
    // As above, with 0.5 ms to handle each chunk: each of the 2(n-1) rounds waits for it.
    let params = 11_689_512;
    let s = 4.0 * params as f64;
    let alg = AlgorithmConfig::Sync(SyncConfig { message_time_us: 500.0, ..Default::default() });
    for n in [2usize, 4, 8] {
        let mut t = train(60.0);
        t.stop.iterations = Some(20);
        let r = go(alg, n, &cluster(1, 100, 50, 10.0), timing(params), t);
        let measured = mean(r.metrics.iteration_times.iter().map(|d| d.as_secs_f64()));
        let expected = 0.1 + 2.0 * (n as f64 - 1.0) * (50e-6 + s / n as f64 * 8.0 / 10e9 + 500e-6);
        assert!((measured / expected - 1.0).abs() < 0.002, "n={n}: {measured} vs {expected}");
        assert_eq!(r.metrics.iterations(), 20);
    }
}

#[test]
fn an_easgd_centre_with_an_update_time_caps_the_exchanges() {
    // tau = 1: every step is an exchange; 8 workers at 1 ms a step offer ~8,000 exchanges/s to a
    // centre that handles one per 10 ms, so they step 100 times a second in all.
    let alg = AlgorithmConfig::Easgd(EasgdConfig { tau: 1, update_time_us: 10_000.0, ..Default::default() });
    let r = go(alg, 8, &cluster(1, 1, 10, 10.0), timing(1000), train(5.0));
    let rate = r.metrics.updates as f64 / r.sim_time.as_secs_f64();
    assert!((rate / 100.0 - 1.0).abs() < 0.02, "{rate} steps/s, the centre's 1/(10 ms) is 100/s");
}

/// The cost model of 20 µs, 25 Gb/s NICs, `core_us` across the core and uplinks of `uplink_gbps`.
fn cost_20us_25gbps(core_us: u64, uplink_gbps: Option<f64>) -> CostModel {
    CostModel {
        latency: SimDuration::from_micros(20),
        bandwidth: Bandwidth::from_gbps(25.0),
        gamma_ns_per_byte: 0.0,
        core_latency: SimDuration::from_micros(core_us),
        uplink: uplink_gbps.map(Bandwidth::from_gbps),
    }
}

#[test]
fn tree_halving_doubling_and_analytic_match_their_costs() {
    let params = 2_500_000; // 10 MB
    let bytes = 4 * params as u64;
    let cost = cost_20us_25gbps(0, None);
    for n in [4usize, 8] {
        for (kind, expected) in [
            (CollectiveKind::Tree, cost.tree(n, bytes)),
            (CollectiveKind::HalvingDoubling, cost.halving_doubling(n, bytes)),
            (CollectiveKind::Analytic, cost.ring(n, bytes)),
        ] {
            let sim = cluster(1, 50, 20, 25.0);
            let mut t = train(60.0);
            t.stop.iterations = Some(10);
            let r = go(sync(kind), n, &sim, timing(params), t);
            // Every iteration, the first included: the tree's iterations are recorded by a member
            // that receives the broadcast in its last round, not by the root that sends it.
            assert_eq!(r.metrics.iteration_times.len(), 10);
            let measured = mean(r.metrics.iteration_times.iter().map(|d| d.as_secs_f64())) - 0.05;
            let want = expected.as_secs_f64();
            assert!((measured / want - 1.0).abs() < 0.01, "{kind:?} n={n}: {measured} vs {want}");
        }
    }
}

#[test]
fn a_parameter_server_saturates_at_bandwidth_over_size() {
    // S/B = 10 ms; compute 1 ms: one worker does ~1/(1 ms + 2·10 ms) updates/s; many are capped at B/S = 100/s.
    let params = 3_125_000; // 12.5 MB
    let mut rates = Vec::new();
    for m in [1usize, 2, 4, 8, 16] {
        let sim = cluster(1, 1, 10, 10.0);
        let r = go(AlgorithmConfig::AsyncPs(PsConfig::default()), m, &sim, timing(params), train(5.0));
        rates.push(r.metrics.updates as f64 / r.sim_time.as_secs_f64());
    }
    assert!((rates[0] - 1.0 / 0.02102).abs() < 1.5, "one worker: {}", rates[0]);
    for w in rates.windows(2) {
        assert!(w[1] >= w[0] * 0.99, "throughput fell as workers were added: {rates:?}");
    }
    for &r in &rates[2..] {
        assert!((r / 100.0 - 1.0).abs() < 0.03, "saturated rate {r} should be B/S = 100/s ({rates:?})");
    }
}

#[test]
fn a_parameter_server_with_an_update_time_serves_one_push_at_a_time() {
    // 4 KB messages over 10 us + 10 Gbit/s: 13.28 us each way; compute 10 ms; 1 ms per update.
    let ps = AlgorithmConfig::AsyncPs(PsConfig { update_time_us: 1000.0, ..Default::default() });
    let rate = |alg: &AlgorithmConfig, m: usize| {
        let r = go(*alg, m, &cluster(1, 10, 10, 10.0), timing(1000), train(5.0));
        r.metrics.updates as f64 / r.sim_time.as_secs_f64()
    };
    // One worker waits for its own update: one push per 10 ms + 2 x 13.28 us + 1 ms.
    let one = rate(&ps, 1);
    assert!((one * 0.011_026_56 - 1.0).abs() < 0.01, "one worker: {one}/s");
    // 32 workers offer ~2,900 pushes/s to a server that serves 1,000/s: it is the bottleneck.
    let many = rate(&ps, 32);
    assert!((many / 1000.0 - 1.0).abs() < 0.01, "32 workers: {many}/s, the server's 1/(1 ms) is 1000/s");
    // Without an update time the same 32 workers are limited by their compute alone.
    let free = rate(&AlgorithmConfig::AsyncPs(PsConfig::default()), 32);
    assert!((free * 0.010_026_56 / 32.0 - 1.0).abs() < 0.01, "32 free workers: {free}/s");
}

#[test]
fn a_workers_receive_time_adds_to_its_cycle_and_the_servers_pay_none() {
    // 4 KB messages over 10 us + 10 Gbit/s: 13.28 us each way; compute 10 ms; 1 ms of host time
    // per message a worker receives (its server's answer), none on the server.
    let mut sim = cluster(1, 10, 10, 10.0);
    sim.compute.receive = SimDuration::from_millis(1);
    let ps = AlgorithmConfig::AsyncPs(PsConfig::default());
    let r = go(ps, 1, &sim, timing(1000), train(5.0));
    let one = r.metrics.updates as f64 / r.sim_time.as_secs_f64();
    // A server paying it too would make this 1/(12.027 ms).
    assert!((one * 0.011_026_56 - 1.0).abs() < 0.01, "one worker: {one}/s");
    // Without it, the same worker is 1 ms faster per cycle.
    let free =
        go(AlgorithmConfig::AsyncPs(PsConfig::default()), 1, &cluster(1, 10, 10, 10.0), timing(1000), train(5.0));
    let free = free.metrics.updates as f64 / free.sim_time.as_secs_f64();
    assert!((free * 0.010_026_56 - 1.0).abs() < 0.01, "without receive time: {free}/s");
}

#[test]
fn sync_pays_the_expected_maximum_of_exponential_jitter() {
    // step = 10 ms · (1 + Exp(mean 1)): E[slowest of n] = 10 ms · (1 + H_n); the all-reduce of a
    // tiny vector adds 2(n-1)·latency.
    for n in [1usize, 4, 16] {
        let mut sim = cluster(3, 10, 1, 100.0);
        sim.compute.jitter = Jitter::Exponential { mean: 1.0 };
        let mut t = train(1e6);
        t.stop.iterations = Some(3000);
        t.eval.every_s = 1e5;
        let r = go(sync(CollectiveKind::Ring), n, &sim, timing(16), t);
        let measured = mean(r.metrics.iteration_times.iter().map(|d| d.as_secs_f64()));
        let h: f64 = (1..=n).map(|k| 1.0 / k as f64).sum();
        let comm = 2.0 * (n as f64 - 1.0) * 1e-6;
        let expected = 0.01 * (1.0 + h) + comm;
        // Var of the max of n exponentials is Σ 1/k² ≤ π²/6: standard error ≤ 10 ms·1.29/√3000.
        let se = 0.01 * 1.29 / (3000f64).sqrt();
        assert!((measured - expected).abs() < 4.0 * se, "n={n}: {measured} vs {expected} (se {se})");
    }
}

#[test]
fn sync_sgd_on_the_quadratic_follows_the_closed_form_recursion() {
    let q = Quadratic::new(16, 1.0, 0.05, 4.0, 1.0);
    let (workers, batch, lr) = (4usize, 2usize, 0.5);
    let wl: Arc<dyn Workload> = Arc::new(q.clone());
    let expected = q.expected_loss(lr, workers * batch, 30);
    let sim = cluster(0, 10, 5, 10.0);
    let mut t = train(100.0);
    t.batch = batch;
    t.optimizer.lr = lr;
    t.stop.iterations = Some(1);
    let period = go(sync(CollectiveKind::Ring), workers, &sim, wl.clone(), t).metrics.iteration_times[0].as_secs_f64();
    for steps in [3usize, 10, 30] {
        let seeds = 200;
        let losses: Vec<f64> = (0..seeds)
            .map(|seed| {
                let mut t = train((steps as f64 + 0.5) * period);
                t.batch = batch;
                t.optimizer.lr = lr;
                t.stop = StopRule { sim_time_s: (steps as f64 + 0.5) * period, ..Default::default() };
                t.eval.every_s = 1e3;
                let r = go(
                    sync(CollectiveKind::Ring),
                    workers,
                    &{
                        let mut s = sim.clone();
                        s.seed = seed;
                        s
                    },
                    wl.clone(),
                    t,
                );
                loss(r.metrics.samples.last().unwrap())
            })
            .collect();
        let m = mean(losses.iter().copied());
        let sd = (losses.iter().map(|l| (l - m).powi(2)).sum::<f64>() / (seeds - 1) as f64).sqrt();
        let se = sd / (seeds as f64).sqrt();
        assert!((m - expected[steps]).abs() < 4.0 * se + 1e-9, "step {steps}: {m} vs {} (se {se})", expected[steps]);
    }
}

/// A cluster of racks of `g` nodes whose uplinks carry `uplink_gbps`, `core_us` across the core.
fn racks(g: usize, uplink_gbps: f64, core_us: u64) -> dsgd_sim::SimConfig {
    let mut sim = cluster(1, 50, 20, 25.0);
    sim.network.topology = dsgd_sim::Topology::Racks {
        rack_size: g,
        uplink: Bandwidth::from_gbps(uplink_gbps),
        core_latency: SimDuration::from_micros(core_us),
    };
    sim
}

fn hierarchical(kind: CollectiveKind, g: usize) -> AlgorithmConfig {
    AlgorithmConfig::Sync(SyncConfig { collective: kind, group_size: Some(g), ..Default::default() })
}

/// Mean all-reduce time of 10 iterations of `alg` on `n` nodes of `sim` (50 ms compute).
fn all_reduce_time(alg: AlgorithmConfig, n: usize, sim: &dsgd_sim::SimConfig, params: usize) -> f64 {
    let mut t = train(60.0);
    t.stop.iterations = Some(10);
    let run = go(alg, n, sim, timing(params), t);
    assert_eq!(run.metrics.iteration_times.len(), 10);
    mean(run.metrics.iteration_times.iter().map(|d| d.as_secs_f64())) - 0.05
}

#[test]
fn the_hierarchical_all_reduce_matches_its_closed_form() {
    // 10 MB over 25 Gb/s NICs and 20 µs latency, in r groups of g on one switch:
    // T = 2(g-1)(α + S/(gB)) + 2(r-1)(α + S/(grB)).
    let params = 2_500_000;
    let s = 4.0 * params as f64;
    let (alpha, b) = (20e-6, 25e9 / 8.0);
    let cost = cost_20us_25gbps(0, None);
    for (g, r) in [(4usize, 2usize), (4, 4), (8, 3), (2, 8), (3, 5), (16, 1), (1, 6)] {
        let (gf, rf) = (g as f64, r as f64);
        let closed = 2.0 * (gf - 1.0) * (alpha + s / (gf * b)) + 2.0 * (rf - 1.0) * (alpha + s / (gf * rf * b));
        let groups = dsgd_runtime::collectives::Groups::consecutive(g * r, g);
        let analytic = cost.hierarchical(&groups, 4 * params as u64).as_secs_f64();
        assert!((analytic / closed - 1.0).abs() < 1e-6, "g={g} r={r}: cost model {analytic} vs {closed}");
        let sim = cluster(1, 50, 20, 25.0);
        for kind in [CollectiveKind::Hierarchical, CollectiveKind::AnalyticHierarchical] {
            let measured = all_reduce_time(hierarchical(kind, g), g * r, &sim, params);
            assert!((measured / closed - 1.0).abs() < 0.01, "{kind:?} g={g} r={r}: {measured} vs {closed}");
        }
        // Against the flat ring of the same nodes: 2(r-1) latencies instead of 2(p-1).
        let ring = all_reduce_time(sync(CollectiveKind::Ring), g * r, &sim, params);
        let flat = cost.ring(g * r, 4 * params as u64).as_secs_f64();
        assert!((ring / flat - 1.0).abs() < 0.01, "ring g={g} r={r}: {ring} vs {flat}");
    }
}

#[test]
fn racks_give_the_hierarchical_groups_and_charge_the_core() {
    // One member per rack or one rack: no two messages share an uplink, and the closed form with
    // the core latency holds exactly; racks set the groups without a group_size.
    let params = 2_500_000;
    for (g, r) in [(1usize, 6usize), (16, 1), (1, 3)] {
        let sim = racks(g, 10.0, 30);
        let cost = cost_20us_25gbps(30, Some(10.0));
        let groups = dsgd_runtime::collectives::Groups::consecutive(g * r, g);
        let closed = cost.hierarchical(&groups, 4 * params as u64).as_secs_f64();
        for kind in [CollectiveKind::Hierarchical, CollectiveKind::AnalyticHierarchical] {
            let measured = all_reduce_time(sync(kind), g * r, &sim, params);
            assert!((measured / closed - 1.0).abs() < 0.01, "{kind:?} g={g} r={r}: {measured} vs {closed}");
        }
    }
    // Without racks or a group_size there are no groups to form: refused, naming the field.
    let refused = dsgd_runtime::runner::run(
        &sync(CollectiveKind::Hierarchical),
        4,
        &cluster(1, 50, 20, 25.0),
        timing(100),
        train(1.0),
    );
    let Err(err) = refused else { panic!("a hierarchical collective without groups ran") };
    assert!(err.to_string().contains("algorithm.group_size"), "{err}");
}

#[test]
fn an_oversubscribed_core_slows_the_hierarchical_all_reduce_as_its_cost_says() {
    // Uplinks no faster than one NIC, shared by the g members of a rack: the cross-rack phase
    // moves S/r per rack per step at U, T = 2(g-1)(α + S/(gB)) + 2(r-1)(α + α_core + S/(rU)).
    // The engine's FIFO uplinks let the g rings pipeline, so it is a few percent under.
    let params = 2_500_000;
    for (g, r, u) in [(8usize, 4usize, 25.0), (4, 4, 12.5), (8, 3, 6.25)] {
        let sim = racks(g, u, 30);
        let groups = dsgd_runtime::collectives::Groups::consecutive(g * r, g);
        let cost = cost_20us_25gbps(30, Some(u));
        let closed = cost.hierarchical(&groups, 4 * params as u64).as_secs_f64();
        let non_blocking = CostModel { uplink: None, ..cost }.hierarchical(&groups, 4 * params as u64).as_secs_f64();
        assert!(closed > 1.5 * non_blocking, "{closed} vs {non_blocking}");
        let measured = all_reduce_time(sync(CollectiveKind::Hierarchical), g * r, &sim, params);
        eprintln!("g={g} r={r} u={u}: {measured} vs {closed}");
        assert!(measured <= closed * 1.001 && measured > 0.95 * closed, "g={g} r={r}: {measured} vs {closed}");
        let analytic = all_reduce_time(sync(CollectiveKind::AnalyticHierarchical), g * r, &sim, params);
        assert!((analytic / closed - 1.0).abs() < 0.01, "{analytic} vs {closed}");
    }
}
