//! Closed-form checks of the network model: idle links, fan-in, fan-out, rings, racks, analytic mode.

use dsgd_sim::{
    Bandwidth, NetMode, NetworkConfig, NicOverride, Occurrence, Sim, SimConfig, SimDuration, SimTime, Topology,
};

const S: u64 = 1_000_000; // 1 MB
const LAT: SimDuration = SimDuration::from_micros(5);

fn cluster(nodes: usize, net: NetworkConfig) -> Sim<usize> {
    let mut cfg = SimConfig::new(nodes, 7);
    cfg.network = net;
    Sim::new(&cfg).unwrap()
}

fn flat() -> NetworkConfig {
    NetworkConfig { latency: LAT, bandwidth: Bandwidth::from_gbps(10.0), ..Default::default() }
}

/// S bytes at 10 Gb/s.
fn sb() -> SimDuration {
    Bandwidth::from_gbps(10.0).transfer_time(S)
}

/// Runs until nothing is pending; returns (arrival time, from, to, payload) of every delivery.
fn deliveries(sim: &mut Sim<usize>) -> Vec<(SimTime, usize, usize, usize)> {
    let mut out = Vec::new();
    while let Some((t, occ)) = sim.step() {
        if let Occurrence::Message { from, to, payload, .. } = occ {
            out.push((t, from, to, payload));
        }
    }
    out
}

#[test]
fn one_message_alone_takes_latency_plus_size_over_bandwidth() {
    let mut sim = cluster(2, flat());
    sim.send(0, 1, S, 0).unwrap();
    let d = deliveries(&mut sim);
    assert_eq!(d, vec![(SimTime::ZERO + LAT + sb(), 0, 1, 0)]);
    assert_eq!(sb(), SimDuration::from_micros(800));
}

#[test]
fn k_senders_into_one_receiver_serialise_on_its_ingress() {
    for k in [1usize, 2, 5, 16] {
        let mut sim = cluster(k + 1, flat());
        for s in 1..=k {
            sim.send(s, 0, S, s).unwrap();
        }
        let d = deliveries(&mut sim);
        let times: Vec<SimTime> = d.iter().map(|x| x.0).collect();
        let expected: Vec<SimTime> = (1..=k as u64).map(|j| SimTime::ZERO + LAT + SimDuration(j * sb().0)).collect();
        assert_eq!(times, expected, "k = {k}");
        // First come, first served: senders in the order they sent.
        assert_eq!(d.iter().map(|x| x.1).collect::<Vec<_>>(), (1..=k).collect::<Vec<_>>());
    }
}

#[test]
fn one_sender_to_k_receivers_serialises_on_its_egress() {
    let k = 8;
    let mut sim = cluster(k + 1, flat());
    for r in 1..=k {
        sim.send(0, r, S, r).unwrap();
    }
    let d = deliveries(&mut sim);
    for (j, x) in d.iter().enumerate() {
        assert_eq!(x.0, SimTime::ZERO + LAT + SimDuration((j as u64 + 1) * sb().0));
        assert_eq!(x.2, j + 1);
    }
}

#[test]
fn a_ring_of_neighbour_sends_runs_in_parallel() {
    for n in [2usize, 3, 10, 64] {
        let mut sim = cluster(n, flat());
        for i in 0..n {
            sim.send(i, (i + 1) % n, S, i).unwrap();
        }
        let d = deliveries(&mut sim);
        assert_eq!(d.len(), n);
        assert!(d.iter().all(|x| x.0 == SimTime::ZERO + LAT + sb()), "n = {n}: {d:?}");
    }
}

#[test]
fn analytic_mode_ignores_contention() {
    let mut sim = cluster(5, NetworkConfig { mode: NetMode::Analytic, ..flat() });
    for s in 1..5 {
        sim.send(s, 0, S, s).unwrap();
    }
    assert!(deliveries(&mut sim).iter().all(|x| x.0 == SimTime::ZERO + LAT + sb()));
}

#[test]
fn a_slow_receiver_paces_the_transfer_and_latency_is_the_larger_end() {
    let mut net = flat();
    net.per_node.insert(
        1,
        NicOverride { latency: Some(SimDuration::from_micros(50)), bandwidth: Some(Bandwidth::from_gbps(5.0)) },
    );
    let mut sim = cluster(2, net);
    sim.send(0, 1, S, 0).unwrap();
    let d = deliveries(&mut sim);
    assert_eq!(d[0].0, SimTime::ZERO + SimDuration::from_micros(50) + SimDuration(2 * sb().0));
}

#[test]
fn racks_share_an_oversubscribed_uplink() {
    let core = SimDuration::from_micros(3);
    let net = NetworkConfig {
        topology: Topology::Racks { rack_size: 4, uplink: Bandwidth::from_gbps(10.0), core_latency: core },
        ..flat()
    };
    // Four nodes of rack 0 each send to a distinct node of rack 1: the shared uplink serialises them.
    let mut sim = cluster(8, net.clone());
    for i in 0..4 {
        sim.send(i, 4 + i, S, i).unwrap();
    }
    let d = deliveries(&mut sim);
    for (j, x) in d.iter().enumerate() {
        assert_eq!(x.0, SimTime::ZERO + LAT + core + SimDuration((j as u64 + 1) * sb().0), "{d:?}");
    }
    // Inside a rack the switch is non-blocking.
    let mut sim = cluster(8, net);
    for i in 0..4 {
        sim.send(i, (i + 1) % 4, S, i).unwrap();
    }
    assert!(deliveries(&mut sim).iter().all(|x| x.0 == SimTime::ZERO + LAT + sb()));
}

#[test]
fn ingress_queues_in_order_of_arrival_not_of_sending() {
    // Node 1's egress is busy with a big transfer when it sends to 0; node 2 sends to 0 later but
    // its message reaches 0's ingress first and must not wait behind node 1's.
    let mut sim = cluster(4, flat());
    sim.send(1, 3, 10 * S, 99).unwrap();
    sim.send(1, 0, S, 1).unwrap(); // egress free at 10·S/B, so it reaches node 0 at LAT + 10·S/B
    sim.set_timer(2, SimDuration::from_micros(100), 0).unwrap();
    let mut got = Vec::new();
    while let Some((t, occ)) = sim.step() {
        match occ {
            Occurrence::Timer { node: 2, .. } => sim.send(2, 0, S, 2).unwrap(),
            Occurrence::Message { to: 0, payload, .. } => got.push((t, payload)),
            _ => {}
        }
    }
    let t100 = SimTime::ZERO + SimDuration::from_micros(100);
    assert_eq!(got[0], (t100 + LAT + sb(), 2));
    assert_eq!(got[1], (SimTime::ZERO + LAT + SimDuration(11 * sb().0), 1));
}

#[test]
fn bad_network_configs_are_errors() {
    let mut net = flat();
    net.per_node.insert(9, NicOverride::default());
    let err = Sim::<()>::new(&SimConfig { network: net, ..SimConfig::new(4, 0) }).err().unwrap();
    assert!(err.to_string().contains("network.per_node.9"), "{err}");
    let net = NetworkConfig {
        topology: Topology::Racks { rack_size: 0, uplink: Bandwidth(1), core_latency: SimDuration::ZERO },
        ..flat()
    };
    let err = Sim::<()>::new(&SimConfig { network: net, ..SimConfig::new(4, 0) }).err().unwrap();
    assert!(err.to_string().contains("rack_size"), "{err}");
    assert!(Sim::<()>::new(&SimConfig::new(0, 0)).is_err());
}
