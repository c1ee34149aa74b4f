//! Transport semantics under random message loss: with `reliable` (the default) a lost message
//! is sent again after its retransmission timeout, so loss costs time and no message; with
//! `datagram` lost is lost. Every algorithm, at 1%, 5% and 20% loss, both ways.

use dsgd_experiments::execute::execute;
use dsgd_experiments::load::{spec_from_record, spec_from_value};
use dsgd_experiments::output::Summary;
use serde_json::json;

fn run(spec: serde_json::Value) -> Summary {
    let spec = spec_from_value("t.json", spec).unwrap_or_else(|e| panic!("{e}"));
    execute(&spec, false).unwrap_or_else(|e| panic!("{e}")).summary
}

fn lossy(alg: serde_json::Value, p: f64, transport: &str) -> serde_json::Value {
    json!({
        "nodes": 4, "algorithm": alg, "workload": {"kind": "quadratic", "dim": 20},
        "optimizer": {"lr": 0.2}, "compute": {"step_time_ms": 10},
        "network": {"transport": transport, "rto_ms": 20},
        "faults": [{"kind": "message_loss", "from_s": 0, "until_s": 100, "probability": p}],
        "stop": {"sim_time_s": 10}, "eval": {"every_s": 0.5}
    })
}

#[test]
fn every_algorithm_under_loss_with_both_transports() {
    let algorithms = [
        json!({"kind": "sync", "timeout_s": 0.5}),
        json!({"kind": "async_ps", "timeout_s": 0.5}),
        json!({"kind": "easgd", "timeout_s": 0.5}),
        json!({"kind": "gossip", "mode": "pull", "timeout_s": 0.5}),
        json!({"kind": "gossip", "mode": "push", "timeout_s": 0.5}),
    ];
    for alg in &algorithms {
        for p in [0.01, 0.05, 0.2] {
            let label = format!("{} at {}% loss", alg, 100.0 * p);
            let r = run(lossy(alg.clone(), p, "reliable"));
            assert!(r.retransmissions > 0, "reliable, {label}: nothing was retransmitted");
            assert_eq!(r.faults.lost_at_random, 0, "reliable, {label}: a message was lost for good");
            assert_eq!(r.bytes_retransmitted > 0, r.retransmissions > 0);
            assert!(r.updates > 0 && r.final_loss.is_some_and(|l| l < 1.0), "reliable, {label}: no progress: {r:?}");
            // Retransmissions are about p / (1 - p) of the messages (each attempt lost with p).
            let rate = r.retransmissions as f64 / r.messages_sent as f64;
            let expected = p / (1.0 - p);
            assert!((rate / expected - 1.0).abs() < 0.5, "reliable, {label}: {rate} retransmissions per message");
            let d = run(lossy(alg.clone(), p, "datagram"));
            assert_eq!(d.retransmissions, 0, "datagram, {label}");
            assert!(d.faults.lost_at_random > 0, "datagram, {label}: nothing was lost");
            let lost = d.faults.lost_at_random as f64 / d.messages_sent as f64;
            assert!((lost / p - 1.0).abs() < 0.5, "datagram, {label}: {lost} of the messages lost");
        }
    }
}

fn sync_ring(nodes: usize, loss: f64, stop: serde_json::Value) -> Summary {
    run(json!({
        "nodes": nodes, "algorithm": {"kind": "sync", "collective": "ring", "timeout_s": 2},
        "workload": {"kind": "quadratic", "dim": 100}, "batch": 16, "optimizer": {"lr": 0.3},
        "compute": {"step_time_ms": 50}, "network": {"rto_ms": 20},
        "faults": [{"kind": "message_loss", "from_s": 0, "until_s": 1000, "probability": loss}],
        "stop": stop, "eval": {"every_s": 0.1}
    }))
}

#[test]
fn sync_under_five_percent_loss_reaches_its_target_later_by_what_the_retransmissions_cost() {
    // Before: with lost messages lost, an 8-node ring (112 messages an iteration) lost one nearly
    // every iteration, timed out and retried from scratch, and made no update at all.
    let target = json!({"sim_time_s": 100, "target_loss": 0.05});
    let (clean, lossy) = (sync_ring(8, 0.0, target.clone()), sync_ring(8, 0.05, target));
    let (t0, t1) = (clean.time_to_target_s.expect("reached"), lossy.time_to_target_s.expect("reached under loss"));
    assert!(t1 > t0, "loss cost no time: {t0} vs {t1}");
    assert!(lossy.retransmissions > 0 && lossy.faults.lost_at_random == 0);
    // Same number of iterations, same gradients: the difference in time is the retransmissions'.
    // With two members both wait for each other at every step, and two losses in one step are
    // rare (p² = 0.25%), so the slowdown is the sum of the retransmitted messages' waits. With
    // eight, delays on different links overlap in time (members are not in lockstep), so the
    // sum is an upper bound.
    let iters = json!({"sim_time_s": 1000, "iterations": 400});
    for (nodes, lowest) in [(2, 0.95), (8, 0.3)] {
        let (clean, lossy) = (sync_ring(nodes, 0.0, iters.clone()), sync_ring(nodes, 0.05, iters.clone()));
        assert_eq!((clean.iterations, lossy.iterations), (400, 400));
        let slowdown = lossy.sim_time_s - clean.sim_time_s;
        let waited = lossy.retransmission_wait_s;
        assert!(lossy.retransmissions > 20, "{nodes} nodes: {}", lossy.retransmissions);
        let ratio = slowdown / waited;
        println!(
            "{nodes} nodes: slowdown {slowdown:.3} s, waits {waited:.3} s, {} retransmissions",
            lossy.retransmissions
        );
        assert!(
            (lowest..=1.0 + 1e-3).contains(&ratio),
            "{nodes} nodes: slowdown {slowdown} s for {waited} s of waits ({} retransmissions)",
            lossy.retransmissions
        );
    }
}

#[test]
fn recorded_specs_without_a_transport_replay_as_datagram() {
    let text = r#"{"faults": [{"kind": "message_loss", "from_s": 0, "until_s": 5, "probability": 0.1}], "stop": {"sim_time_s": 3}}"#;
    let recorded = spec_from_record("spec.json", text).unwrap();
    assert_eq!(recorded.network.transport, None);
    let s = execute(&recorded, false).unwrap().summary;
    assert!(s.faults.lost_at_random > 0 && s.retransmissions == 0);
    let user = spec_from_value("s.json", serde_json::from_str(text).unwrap()).unwrap();
    assert_eq!(user.network.transport, Some(dsgd_experiments::spec::TransportSpec::Reliable));
}
