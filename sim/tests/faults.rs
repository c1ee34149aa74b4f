//! Fault semantics: partitions, crashes and restarts, message loss, degraded NICs, random failures.

use dsgd_sim::{
    Bandwidth, Fault, FaultConfig, NetworkConfig, Occurrence, RandomFailures, Sim, SimConfig, SimDuration, SimError,
    SimTime,
};

fn ms(x: u64) -> SimTime {
    SimTime::ZERO + SimDuration::from_millis(x)
}

fn cfg(nodes: usize, faults: Vec<Fault>) -> SimConfig {
    let mut c = SimConfig::new(nodes, 11);
    c.network = NetworkConfig {
        latency: SimDuration::from_micros(10),
        bandwidth: Bandwidth::from_gbps(8.0), // 1 byte per ns
        ..Default::default()
    };
    c.faults = FaultConfig { schedule: faults, random: None };
    c
}

#[test]
fn partition_windows_drop_exactly_the_messages_that_cross_them() {
    // {0,1} | {2,3} during [10 ms, 20 ms). Node 0 sends to 2 (crossing) and to 1 (same side) at
    // several times; a timer with tag t triggers the sends at t µs.
    let part = Fault::Partition { from: ms(10), until: ms(20), groups: vec![vec![0, 1], vec![2, 3]] };
    let mut sim: Sim<u64> = Sim::new(&cfg(4, vec![part])).unwrap();
    // 1000 bytes take 1 µs + 10 µs latency: a send at 9_990 µs is in flight at 10 ms.
    let sends_us = [0u64, 9_980, 9_990, 10_000, 15_000, 19_999, 20_000, 30_000];
    for &t in &sends_us {
        sim.set_timer(0, SimDuration::from_micros(t), t).unwrap();
    }
    let mut crossed = Vec::new();
    let mut same_side = Vec::new();
    while let Some((_, occ)) = sim.step() {
        match occ {
            Occurrence::Timer { node: 0, tag, .. } => {
                sim.send(0, 2, 1000, tag).unwrap();
                sim.send(0, 1, 1000, tag).unwrap();
            }
            Occurrence::Message { to: 2, payload, .. } => crossed.push(payload),
            Occurrence::Message { to: 1, payload, .. } => same_side.push(payload),
            _ => {}
        }
    }
    // 9_980 arrives at 9_991 µs (before the cut); 9_990 is still in flight at 10 ms; 20_000 is sent after healing.
    assert_eq!(crossed, vec![0, 9_980, 20_000, 30_000]);
    assert_eq!(same_side, sends_us.to_vec());
    assert_eq!(sim.stats().lost_partition, 4);
}

#[test]
fn a_crash_drops_the_nodes_events_and_messages() {
    let faults = vec![Fault::Crash { node: 1, at: ms(10) }, Fault::Restart { node: 1, at: ms(30) }];
    let mut sim: Sim<&str> = Sim::new(&cfg(3, faults)).unwrap();
    sim.set_timer(1, SimDuration::from_millis(5), 5).unwrap();
    sim.set_timer(1, SimDuration::from_millis(15), 15).unwrap();
    sim.start_compute(1, 0.2).unwrap(); // 100 ms base · 0.2 = 20 ms: ends after the crash
    sim.set_timer(0, SimDuration::from_millis(12), 12).unwrap(); // node 0 sends to the dead node
    sim.set_timer(0, SimDuration::from_millis(40), 40).unwrap(); // and after its restart
                                                                 // A big message from 2 to 1, sent before the crash, arrives after the restart: lost.
    sim.send(2, 1, 35_000_000, "old incarnation").unwrap();
    let mut seen = Vec::new();
    while let Some((t, occ)) = sim.step() {
        match occ {
            Occurrence::Timer { node: 1, tag, .. } => {
                seen.push(format!("timer {tag} at {t}"));
                sim.send(1, 2, 100_000_000, "in flight at crash").unwrap();
            }
            Occurrence::Timer { node: 0, tag, .. } => {
                sim.send(0, 1, 100, if tag == 12 { "to dead" } else { "to reborn" }).unwrap()
            }
            Occurrence::Crashed { node } => seen.push(format!("crash {node} at {t}")),
            Occurrence::Restarted { node } => {
                assert!(sim.set_timer(1, SimDuration::ZERO, 0).is_ok());
                seen.push(format!("restart {node} at {t}"))
            }
            Occurrence::Message { to, payload, .. } => seen.push(format!("{payload} -> {to}")),
            Occurrence::ComputeDone { .. } => seen.push("compute".into()),
            _ => {}
        }
    }
    assert_eq!(
        seen,
        vec![
            "timer 5 at 0.005000000s",
            "crash 1 at 0.010000000s",
            "restart 1 at 0.030000000s",
            "timer 0 at 0.030000000s",
            "to reborn -> 1",
            "in flight at crash -> 2", // sent by the timer at 30 ms, after the restart: delivered
        ]
    );
    let st = sim.stats();
    assert_eq!(st.discarded, 2, "the 15 ms timer and the computation");
    assert_eq!(st.lost_crash, 3, "in flight at crash, to dead, old incarnation");
    assert_eq!((st.crashes, st.restarts), (1, 1));
}

#[test]
fn a_down_node_cannot_act() {
    let mut sim: Sim<()> = Sim::new(&cfg(2, vec![Fault::Crash { node: 0, at: ms(1) }])).unwrap();
    assert!(matches!(sim.step(), Some((_, Occurrence::Crashed { node: 0 }))));
    assert!(matches!(sim.send(0, 1, 1, ()), Err(SimError::NodeDown { node: 0, .. })));
    assert!(matches!(sim.set_timer(0, SimDuration::ZERO, 0), Err(SimError::NodeDown { .. })));
    assert!(matches!(sim.start_compute(0, 1.0), Err(SimError::NodeDown { .. })));
    assert!(matches!(sim.send(1, 7, 1, ()), Err(SimError::UnknownNode { node: 7, nodes: 2 })));
}

#[test]
fn message_loss_drops_the_configured_fraction_in_its_window() {
    let loss = Fault::MessageLoss { from: ms(0), until: ms(1), probability: 0.3 };
    let mut sim: Sim<u32> = Sim::new(&cfg(2, vec![loss])).unwrap();
    let n = 20_000;
    for i in 0..n {
        sim.send(0, 1, 1, i).unwrap();
    }
    sim.set_timer(0, SimDuration::from_millis(2), 0).unwrap();
    let mut delivered = 0;
    while let Some((_, occ)) = sim.step() {
        match occ {
            Occurrence::Message { .. } => delivered += 1,
            Occurrence::Timer { .. } => (0..100).for_each(|i| sim.send(0, 1, 1, i).unwrap()),
            _ => {}
        }
    }
    let lost = sim.stats().lost_random as f64;
    // Binomial(20000, 0.3): sd ≈ 65; 5 sd bound. The 100 late messages are all delivered.
    assert!((lost - 6_000.0).abs() < 325.0, "lost {lost}");
    assert_eq!(delivered as f64 + lost, (n + 100) as f64);
}

#[test]
fn a_degraded_nic_slows_transfers_inside_its_window_only() {
    let deg = Fault::NicDegrade { node: 0, from: ms(1), until: ms(2), factor: 0.25 };
    let mut sim: Sim<u64> = Sim::new(&cfg(2, vec![deg])).unwrap();
    for t in [0u64, 1_000, 2_000] {
        sim.set_timer(0, SimDuration::from_micros(t), t).unwrap();
    }
    let mut took = Vec::new();
    while let Some((t, occ)) = sim.step() {
        match occ {
            Occurrence::Timer { tag, .. } => sim.send(0, 1, 10_000, tag).unwrap(),
            Occurrence::Message { sent_at, .. } => took.push((t - sent_at).as_nanos()),
            _ => {}
        }
    }
    assert_eq!(took, vec![10_000 + 10_000, 10_000 + 40_000, 10_000 + 10_000]);
}

#[test]
fn random_failures_follow_their_rates_and_replay() {
    let run = |seed| {
        let mut c = cfg(4, vec![]);
        c.seed = seed;
        c.faults.random = Some(RandomFailures {
            mtbf: SimDuration::from_millis(900),
            mttr: SimDuration::from_millis(100),
            nodes: vec![],
        });
        let mut sim: Sim<()> = Sim::new(&c).unwrap();
        let mut down = [0u64; 4];
        let mut since = [SimTime::ZERO; 4];
        let end = SimTime::from_secs_f64(2_000.0);
        let mut log = Vec::new();
        while let Some((t, occ)) = sim.step_until(end) {
            match occ {
                Occurrence::Crashed { node } => since[node] = t,
                Occurrence::Restarted { node } => down[node] += (t - since[node]).as_nanos(),
                _ => {}
            }
            log.push(t);
        }
        (down.iter().sum::<u64>() as f64 / (4.0 * end.as_nanos() as f64), log, sim.digest())
    };
    let (frac, log, digest) = run(5);
    // Long-run unavailability mttr / (mtbf + mttr) = 0.1; ~2000 cycles per node: a few % error.
    assert!((frac - 0.1).abs() < 0.01, "down fraction {frac}");
    assert_eq!((log, digest), (run(5).1, run(5).2));
    assert_ne!(digest, run(6).2);
}

#[test]
fn invalid_faults_name_their_field() {
    let bad = [
        (Fault::Crash { node: 12, at: ms(1) }, "faults[0].node"),
        (Fault::Partition { from: ms(2), until: ms(1), groups: vec![] }, "faults[0]"),
        (Fault::Partition { from: ms(1), until: ms(2), groups: vec![vec![0, 1], vec![1]] }, "faults[0].groups[1]"),
        (Fault::MessageLoss { from: ms(1), until: ms(2), probability: 1.5 }, "faults[0].probability"),
        (Fault::NicDegrade { node: 0, from: ms(1), until: ms(2), factor: -1.0 }, "faults[0].factor"),
    ];
    for (f, field) in bad {
        let err = Sim::<()>::new(&cfg(8, vec![f])).err().expect("rejected");
        assert!(err.to_string().contains(field), "{err} should name {field}");
    }
}

#[test]
fn a_hosts_receive_time_queues_its_messages_and_a_crash_drops_the_waiting_ones() {
    // 1 ms of host time per received message on nodes 0 and 1 (node 2 pays none). Node 2 sends
    // three 1000-byte messages to node 1 at 0 (they arrive at 11, 12, 13 µs: one byte per ns on
    // the sender's link); node 1 handles them one after another: at 1.011, 2.011, 3.011 ms. Node
    // 1 crashes at 2.5 ms, so the third is never handled; node 2, which pays no receive time,
    // sees node 1's message as it arrives.
    let mut c = cfg(3, vec![Fault::Crash { node: 1, at: SimTime::ZERO + SimDuration::from_micros(2_500) }]);
    c.compute.receive = SimDuration::from_millis(1);
    c.compute.receive_nodes = 2;
    let mut sim: Sim<u32> = Sim::new(&c).unwrap();
    for i in 0..3 {
        sim.send(2, 1, 1000, i).unwrap();
    }
    sim.send(1, 2, 1000, 9).unwrap();
    let mut seen = Vec::new();
    while let Some((t, occ)) = sim.step() {
        if let Occurrence::Message { to, payload, .. } = occ {
            seen.push((to, payload, t.as_nanos()));
        }
    }
    assert_eq!(seen, vec![(2, 9, 11_000), (1, 0, 1_011_000), (1, 1, 2_011_000)]);
    assert_eq!((sim.stats().messages_delivered, sim.stats().lost_crash), (3, 1));
}
