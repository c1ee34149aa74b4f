//! Determinism: the same seed gives the same digest, another seed another; streams are independent;
//! the trace exports as Chrome trace-event JSON.

use dsgd_sim::{
    Bandwidth, ComputeConfig, Fault, FaultConfig, Jitter, NetworkConfig, Occurrence, RandomFailures, Sim, SimConfig,
    SimDuration, SimTime, Topology,
};

/// A busy workload: every node computes, then sends its result to a random-ish peer, repeatedly,
/// under jitter, loss, a partition and random failures.
fn workload(seed: u64, nodes: usize, trace: bool) -> Sim<u64> {
    let cfg = SimConfig {
        nodes,
        seed,
        network: NetworkConfig {
            latency: SimDuration::from_micros(20),
            bandwidth: Bandwidth::from_gbps(10.0),
            topology: Topology::Racks {
                rack_size: 4,
                uplink: Bandwidth::from_gbps(20.0),
                core_latency: SimDuration::from_micros(5),
            },
            ..Default::default()
        },
        compute: ComputeConfig {
            base: SimDuration::from_millis(10),
            jitter: Jitter::LogNormal { sigma: 0.3 },
            ..Default::default()
        },
        faults: FaultConfig {
            schedule: vec![
                Fault::MessageLoss { from: SimTime::ZERO, until: SimTime::from_secs_f64(0.5), probability: 0.05 },
                Fault::Partition {
                    from: SimTime::from_secs_f64(0.2),
                    until: SimTime::from_secs_f64(0.3),
                    groups: vec![vec![0, 1, 2]],
                },
            ],
            random: Some(RandomFailures {
                mtbf: SimDuration::from_millis(300),
                mttr: SimDuration::from_millis(50),
                nodes: vec![3],
            }),
        },
        trace,
    };
    let mut sim = Sim::new(&cfg).unwrap();
    for n in 0..nodes {
        sim.start_compute(n, 1.0).unwrap();
    }
    let end = SimTime::from_secs_f64(1.0);
    while let Some((_, occ)) = sim.step_until(end) {
        match occ {
            Occurrence::ComputeDone { node, job, .. } => {
                let to = (node + 1 + job.0 as usize % (nodes - 1)) % nodes;
                sim.send(node, to, 250_000, job.0).unwrap();
                sim.start_compute(node, 1.0).unwrap();
            }
            Occurrence::Restarted { node } => {
                sim.start_compute(node, 1.0).unwrap();
            }
            _ => {}
        }
    }
    sim
}

#[test]
fn the_same_seed_gives_the_same_digest() {
    let a = workload(1, 12, false);
    let b = workload(1, 12, false);
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.stats(), b.stats());
    assert!(
        a.stats().messages_delivered > 500 && a.stats().lost_random > 0 && a.stats().crashes > 0,
        "{:?}",
        a.stats()
    );
}

#[test]
fn another_seed_gives_another_digest() {
    assert_ne!(workload(1, 12, false).digest(), workload(2, 12, false).digest());
}

#[test]
fn tracing_does_not_change_the_run() {
    assert_eq!(workload(3, 6, false).digest(), workload(3, 6, true).digest());
}

#[test]
fn adding_a_node_leaves_the_other_nodes_draws_unchanged() {
    let steps = |nodes: usize| {
        let cfg = SimConfig {
            compute: ComputeConfig { jitter: Jitter::Pareto { alpha: 1.5 }, ..Default::default() },
            ..SimConfig::new(nodes, 9)
        };
        let mut sim: Sim<()> = Sim::new(&cfg).unwrap();
        // Node i's k-th job end time depends only on node i's stream.
        let mut ends = vec![Vec::new(); nodes];
        for _ in 0..50 {
            for (n, e) in ends.iter_mut().enumerate() {
                e.push(sim.start_compute(n, 1.0).unwrap().1);
            }
        }
        ends
    };
    let four = steps(4);
    let five = steps(5);
    assert_eq!(four[..], five[..4]);
    assert_ne!(five[3], five[4]);
}

#[test]
fn the_trace_exports_as_chrome_json_with_one_track_per_node() {
    let sim = workload(4, 6, true);
    let trace = sim.trace().expect("tracing on");
    let mut buf = Vec::new();
    trace.write_chrome(&dsgd_sim::chrome::node_names(6), &mut buf).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
    let evs = v["traceEvents"].as_array().unwrap();
    let names: Vec<_> = evs
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, (0..6).map(|n| format!("node {n}")).collect::<Vec<_>>());
    let spans = |name: &str| evs.iter().filter(|e| e["ph"] == "X" && e["name"] == name).count();
    let (computes, messages) = (spans("compute"), spans("message"));
    assert!(computes > 100 && messages > 100, "{computes} {messages}");
    assert!(evs.iter().any(|e| e["name"] == "crash"));
    assert!(evs.iter().filter(|e| e["ph"] == "X").all(|e| e["dur"].as_f64().unwrap() >= 0.0));
    // The live-ranks counter drops at the crash.
    let live: Vec<f64> =
        evs.iter().filter(|e| e["name"] == "live ranks").map(|e| e["args"]["ranks"].as_f64().unwrap()).collect();
    assert_eq!(live[0], 6.0);
    assert!(live.contains(&5.0), "{live:?}");
}

#[test]
fn every_flow_runs_from_a_send_to_the_receive_at_its_arrival_time() {
    let sim = workload(4, 6, true);
    let trace = sim.trace().expect("tracing on");
    let v = trace.to_chrome_json(&dsgd_sim::chrome::node_names(6));
    let evs = v["traceEvents"].as_array().unwrap();
    // Every delivery of the engine, as (sender, send time, receiver, arrival time) in microseconds.
    let us = |t: SimTime| t.as_nanos() as f64 / 1e3;
    let deliveries: Vec<(u64, f64, u64, f64)> = trace
        .records
        .iter()
        .filter(|r| r.kind == dsgd_sim::EventKind::Deliver)
        .map(|r| (r.peer as u64, us(r.start), r.node as u64, us(r.at)))
        .collect();
    let ends = |ph: &str| -> std::collections::BTreeMap<u64, (u64, f64)> {
        evs.iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| (e["id"].as_u64().unwrap(), (e["tid"].as_u64().unwrap(), e["ts"].as_f64().unwrap())))
            .collect()
    };
    let (starts, finishes) = (ends("s"), ends("f"));
    assert_eq!(starts.len(), deliveries.len(), "one flow per delivered message");
    assert_eq!(finishes.len(), deliveries.len());
    for (id, (from, sent)) in &starts {
        let (to, arrived) = finishes[id];
        assert!(
            deliveries.contains(&(*from, *sent, to, arrived)),
            "flow {id}: {from}@{sent} -> {to}@{arrived} is not a delivery"
        );
        // The receive end sits on a receive mark at the arrival time.
        assert!(evs.iter().any(|e| e["name"] == "receive" && e["tid"] == to && e["ts"].as_f64() == Some(arrived)));
    }
    // Each rank's NIC counter returns to what it holds at the end, never below zero.
    assert!(evs
        .iter()
        .filter(|e| e["ph"] == "C" && e["pid"] == 1)
        .all(|e| e["args"]["bytes"].as_f64().unwrap() >= 0.0));
}

#[test]
fn timers_can_be_cancelled_and_moved_through_the_engine() {
    let mut sim: Sim<()> = Sim::new(&SimConfig::new(1, 0)).unwrap();
    let a = sim.set_timer(0, SimDuration(10), 1).unwrap();
    let b = sim.set_timer(0, SimDuration(20), 2).unwrap();
    let c = sim.set_timer(0, SimDuration(30), 3).unwrap();
    sim.cancel_timer(b).unwrap();
    assert!(sim.cancel_timer(b).is_err());
    sim.move_timer(a, SimTime(40)).unwrap();
    let fired: Vec<(SimTime, u64)> = std::iter::from_fn(|| sim.step())
        .map(|(t, o)| match o {
            Occurrence::Timer { tag, .. } => (t, tag),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(fired, vec![(SimTime(30), 3), (SimTime(40), 1)]);
    assert!(sim.move_timer(c, SimTime(50)).is_err());
}

/// `Sim::next_node`, the prefetching hint, names the node of the occurrence the next step
/// returns whenever that step processes one event (a message's hops are events of their own),
/// through computations, timers and messages that queue behind one another on the NICs.
#[test]
fn the_next_node_hint_names_the_node_of_the_next_occurrence() {
    let nodes = 7;
    let cfg = SimConfig {
        compute: ComputeConfig {
            base: SimDuration::from_millis(1),
            jitter: Jitter::LogNormal { sigma: 0.5 },
            ..Default::default()
        },
        ..SimConfig::new(nodes, 3)
    };
    let mut sim: Sim<u64> = Sim::new(&cfg).unwrap();
    for n in 0..nodes {
        sim.start_compute(n, 1.0).unwrap();
    }
    let end = SimTime::from_secs_f64(0.5);
    let (mut checked, mut kinds) = (0, [0; 3]);
    loop {
        let before = sim.stats().events;
        let hint = sim.next_node();
        let Some((_, occ)) = sim.step_until(end) else { break };
        let (node, kind) = match occ {
            Occurrence::ComputeDone { node, job, .. } => {
                for k in 1..4 {
                    sim.send(node, (node + k * (job.0 as usize % 3 + 1)) % nodes, 100_000, job.0).unwrap();
                }
                sim.set_timer(node, SimDuration::from_micros(300), job.0).unwrap();
                (node, 0)
            }
            Occurrence::Timer { node, .. } => {
                sim.start_compute(node, 1.0).unwrap();
                (node, 1)
            }
            Occurrence::Message { to, .. } => (to, 2),
            other => panic!("no faults, yet {other:?}"),
        };
        if sim.stats().events == before + 1 {
            assert_eq!(hint, Some(node), "event {}", before + 1);
            checked += 1;
            kinds[kind] += 1;
        }
    }
    assert!(kinds.iter().all(|&k| k > 100), "each kind checked often: {kinds:?} of {checked}");
    assert_eq!(sim.next_node().is_some(), sim.peek_time().is_some());
}
