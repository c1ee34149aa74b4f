//! Seeded random scenarios for `dsgd torture`: an algorithm and its options, a cluster, a small
//! workload, and a fault schedule (crashes with restarts, partitions, message loss, slow NICs,
//! stragglers) that heals before the run ends, so the run must make progress after it. Each is a
//! spec, as a user would write it, so a failing one runs again with `dsgd run --check`.

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

/// The scenario of seed `seed`: the same spec on every machine.
pub fn scenario(seed: u64) -> Value {
    let mut g = ChaCha8Rng::seed_from_u64(seed ^ 0x0074_6f72_7475_7265);
    let nodes: u64 = *[2u64, 3, 4, 4, 5, 6, 8, 8, 12, 16, 32].choose(&mut g).expect("non-empty");
    let step_ms = *[2.0, 5.0, 10.0, 20.0].choose(&mut g).expect("non-empty");
    let (workload, lr, params) = workload(&mut g);
    let gbps: u64 = *[1, 10, 40].choose(&mut g).expect("non-empty");
    // A failure-detection timeout well above an iteration's quiet spells (a gradient, a tree's
    // rounds of whole messages, a donor's state sent to every member from one NIC), as a
    // practitioner would set it: shorter ones time out every round, which `dsgd check` warns of.
    let message_s = params as f64 * 4.0 * 8.0 / (gbps as f64 * 1e9);
    let quiet = 3.0 * step_ms / 1e3 * 4.0 + message_s * (2.0 * (nodes as f64).log2().ceil() + 2.0 * nodes as f64 + 2.0);
    let mut timeout_s = r3(f64::max(*[0.1, 0.2, 0.3, 0.5].choose(&mut g).expect("non-empty"), 3.0 * quiet));
    let mut algorithm = algorithm(&mut g, nodes, timeout_s);
    let ranks = ranks(&algorithm, nodes);
    let heal = g.random_range(0.6..1.6f64);
    let faults = faults(&mut g, ranks, heal);
    let mut compute = json!({"step_time_ms": step_ms});
    match g.random_range(0..4) {
        0 => compute["straggler"] = json!({"jitter": {"kind": "log_normal", "sigma": g.random_range(0.05..0.6)}}),
        // A tail light enough that no single step outlasts the liveness bound (a member that is
        // slow but alive holds synchronous SGD back however long its step takes).
        1 => compute["straggler"] = json!({"jitter": {"kind": "pareto", "alpha": g.random_range(3.0..5.0)}}),
        2 => {
            let from = g.random_range(0.0..heal - 0.1);
            let slow = json!({"node": g.random_range(0..ranks), "from_s": r3(from), "until_s": r3(heal),
                              "factor": r3(g.random_range(2.0..10.0))});
            compute["straggler"] = json!({"slowdowns": [slow]});
        }
        _ => {}
    }
    let mut network = json!({"latency_us": *[5, 20, 100].choose(&mut g).expect("non-empty"), "bandwidth_gbps": gbps});
    if g.random_bool(0.4) {
        network["transport"] = json!("reliable");
        network["rto_ms"] = json!(*[5, 20, 50].choose(&mut g).expect("non-empty"));
    }
    if nodes >= 4 && g.random_bool(0.25) && !matches!(algorithm["kind"].as_str(), Some("async_ps" | "easgd")) {
        network["topology"] =
            json!({"kind": "racks", "rack_size": nodes / 2, "uplink_gbps": UPLINK_GBPS, "core_latency_us": 10});
        // Half the members' messages from one NIC (a donor's state, a backup aggregator's
        // gradients and parameters) cross the uplink, slower than the NICs: the quiet spell is
        // longer (seed 187048: 32 members, 8 MB, a 0.437 s timeout against 0.5 s through the
        // 2 Gb/s uplink timed out every iteration, with no update in 4 s).
        let uplink_s = params as f64 * 4.0 * 8.0 / (UPLINK_GBPS as f64 * 1e9) * (nodes as f64 + 1.0);
        timeout_s = timeout_s.max(r3(3.0 * (3.0 * step_ms / 1e3 * 4.0 + uplink_s)));
        algorithm["timeout_s"] = json!(timeout_s);
    }
    let rounds = ["tau", "local_steps"].iter().filter_map(|k| algorithm[*k].as_f64()).fold(1.0, f64::max);
    let within = liveness_bound(timeout_s, step_ms, rounds);
    let every = *[0.05, 0.1, 0.2].choose(&mut g).expect("non-empty");
    json!({
        "name": format!("torture-{seed}"),
        "seed": seed,
        "nodes": nodes,
        "algorithm": algorithm,
        "workload": workload,
        "batch": *[4, 8, 16].choose(&mut g).expect("non-empty"),
        // Momentum 0.9 with a tenth of the rate: the same effective step, stable with the
        // staleness of a dozen asynchronous workers.
        "optimizer": if g.random_bool(0.3) { json!({"lr": lr / 10.0, "momentum": 0.9}) } else { json!({"lr": lr}) },
        "compute": compute,
        "network": network,
        "faults": faults,
        "stop": {"sim_time_s": r3(heal + within + 0.5)},
        "eval": {"every_s": every},
    })
}

/// The racks' uplink, Gb/s.
const UPLINK_GBPS: u64 = 2;

/// Ranks of an algorithm with `nodes` workers (servers included).
fn ranks(algorithm: &Value, nodes: u64) -> u64 {
    match algorithm["kind"].as_str() {
        Some("async_ps") => nodes + algorithm["shards"].as_u64().unwrap_or(1),
        Some("easgd") => nodes + 1,
        _ => nodes,
    }
}

/// Rounds to a millisecond (specs a person can read).
fn r3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn algorithm(g: &mut ChaCha8Rng, nodes: u64, timeout_s: f64) -> Value {
    match g.random_range(0..9) {
        0..=1 => {
            let mut a = json!({"kind": "sync", "timeout_s": timeout_s,
                               "collective": *["ring", "tree", "halving_doubling", "analytic"].choose(g).expect("non-empty")});
            if nodes >= 3 && g.random_bool(0.25) {
                a["backup_workers"] = json!(1);
                a["collective"] = json!("ring");
            } else if a["collective"] != "analytic" && g.random_bool(0.3) {
                a["buckets"] = json!({"cap_mb": 0.0001, "first_mb": 0.00005, "overlap": g.random_bool(0.5)});
            }
            a
        }
        2 => json!({"kind": "local_sgd", "local_steps": g.random_range(2..5), "timeout_s": timeout_s}),
        3..=4 => {
            let mut a = json!({"kind": "async_ps", "shards": g.random_range(1..4), "timeout_s": timeout_s});
            if g.random_bool(0.3) {
                a["staleness_bound"] = json!(g.random_range(1..4));
            }
            if g.random_bool(0.3) {
                a["staleness_lr"] = json!("inverse");
            }
            if g.random_bool(0.2) {
                a["delay_compensation"] = json!(0.04);
            }
            a
        }
        5 => json!({"kind": "easgd", "tau": g.random_range(1..5), "timeout_s": timeout_s}),
        _ => {
            let push = g.random_bool(0.6);
            let mut a = json!({"kind": "gossip", "mode": if push { "push" } else { "pull" }, "timeout_s": timeout_s,
                               "peers": *["uniform", "ring", "exponential"].choose(g).expect("non-empty"),
                               "tau": g.random_range(1..3)});
            if push && g.random_bool(0.5) {
                a["max_in_flight"] = json!(g.random_range(1..4));
            }
            a
        }
    }
}

/// A small workload, a learning rate it trains with, and its parameters.
fn workload(g: &mut ChaCha8Rng) -> (Value, f64, u64) {
    match g.random_range(0..10) {
        0..=5 => {
            let dim = g.random_range(4..40);
            // Slow directions (h down to 1e-4) keep the loss falling through the run.
            let w = json!({"kind": "quadratic", "dim": dim, "h_max": 1.0, "h_min": 0.0001, "noise": 0.5, "x0": 1.0});
            // Now and then a rate that diverges: the checks must hold then too.
            (w, if g.random_bool(0.05) { 5.0 } else { 0.02 }, dim)
        }
        6..=7 => (json!({"kind": "softmax", "classes": 4, "features": 16, "train": 2000, "test": 200}), 0.0002, 68),
        _ => {
            let params = *[1000, 100_000, 2_000_000].choose(g).expect("non-empty");
            (json!({"kind": "timing", "params": params}), 0.1, params)
        }
    }
}

/// Faults that all end by `heal`: crashes with their restarts, partitions, loss, slow NICs.
fn faults(g: &mut ChaCha8Rng, ranks: u64, heal: f64) -> Value {
    let mut out = Vec::new();
    for _ in 0..g.random_range(0..5) {
        let from = g.random_range(0.05..heal - 0.05);
        let until = r3(g.random_range(from + 0.01..heal));
        let from = r3(from);
        let node = g.random_range(0..ranks);
        match g.random_range(0..5) {
            0 | 1 => {
                out.push(json!({"kind": "crash", "node": node, "at_s": from}));
                out.push(json!({"kind": "restart", "node": node, "at_s": until}));
            }
            2 => {
                let cut: Vec<u64> = (0..ranks).filter(|_| g.random_bool(0.5)).collect();
                if !cut.is_empty() && cut.len() < ranks as usize {
                    out.push(json!({"kind": "partition", "from_s": from, "until_s": until, "groups": [cut]}));
                }
            }
            3 => out.push(json!({"kind": "message_loss", "from_s": from, "until_s": until,
                                 "probability": *[0.05, 0.3, 1.0].choose(g).expect("non-empty")})),
            _ => out.push(json!({"kind": "nic_degrade", "node": node, "from_s": from, "until_s": until,
                                 "factor": *[0.01, 0.1, 0.5].choose(g).expect("non-empty")})),
        }
    }
    Value::Array(out)
}

/// Time within which a run must make progress once its faults have healed: enough for the
/// slowest recovery a protocol may take (several failure-detection timeouts: a suspect peer is
/// skipped for four; a restarted member asks to join, is probed and sent the state), plus tens
/// of its steps and rounds (`rounds`: local steps between exchanges).
pub fn liveness_bound(timeout_s: f64, step_ms: f64, rounds: f64) -> f64 {
    r3(6.0 * timeout_s + 40.0 * rounds * step_ms / 1e3 + 0.5)
}
