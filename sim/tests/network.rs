//! Closed-form checks of the network model: idle links, fan-in, fan-out, rings, racks, analytic mode.

use dsgd_sim::{
    Bandwidth, NetMode, NetworkConfig, NicOverride, Occurrence, Sim, SimConfig, SimDuration, SimTime, TokenBucket,
    Topology,
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

/// A straightforward reference of the contention model: every head arrival is an event, nothing
/// is reserved ahead of time. The engine's shortcuts must give exactly the same delivery times.
fn reference(net: &NetworkConfig, nodes: usize, sends: &[(SimTime, usize, usize, u64)]) -> Vec<SimTime> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let (rack_size, uplink, core) = match net.topology {
        Topology::Flat => (usize::MAX, Bandwidth(1), SimDuration::ZERO),
        Topology::Racks { rack_size, uplink, core_latency } => (rack_size, uplink, core_latency),
    };
    let lat = |n: usize| net.per_node.get(&n).and_then(|o| o.latency).unwrap_or(net.latency);
    let bw = |n: usize| net.per_node.get(&n).and_then(|o| o.bandwidth).unwrap_or(net.bandwidth);
    // Links: egress n, ingress n, then uplink/downlink per rack.
    let path = |a: usize, b: usize| -> Vec<(usize, Bandwidth)> {
        if a / rack_size == b / rack_size {
            vec![(2 * a, bw(a)), (2 * b + 1, bw(b))]
        } else {
            let (ra, rb) = (a / rack_size, b / rack_size);
            vec![(2 * a, bw(a)), (2 * nodes + 2 * ra, uplink), (2 * nodes + 2 * rb + 1, uplink), (2 * b + 1, bw(b))]
        }
    };
    let mut free = vec![SimTime::ZERO; 2 * nodes + 2 * nodes.div_ceil(rack_size.min(nodes)) + 2];
    let mut delivered = vec![SimTime::ZERO; sends.len()];
    // Events: (time, seq, message, hop, tail). Sends are hop 0.
    let mut q = BinaryHeap::new();
    for (i, &(t, ..)) in sends.iter().enumerate() {
        q.push(Reverse((t, i as u64, i, 0usize, SimTime::ZERO)));
    }
    let mut seq = sends.len() as u64;
    while let Some(Reverse((now, _, m, hop, prev_tail))) = q.pop() {
        let (_, a, b, bytes) = sends[m];
        let p = path(a, b);
        let (link, speed) = p[hop];
        let start = now.max(free[link]);
        let mut tail = (start + speed.transfer_time(bytes)).max(prev_tail);
        free[link] = tail;
        let mut head = start;
        if hop == 0 {
            let l = lat(a).max(lat(b)) + if a / rack_size == b / rack_size { SimDuration::ZERO } else { core };
            head = start + l;
            tail += l;
        }
        if hop + 1 == p.len() {
            delivered[m] = tail;
        } else {
            q.push(Reverse((head, seq, m, hop + 1, tail)));
            seq += 1;
        }
    }
    delivered
}

#[test]
fn the_engine_matches_a_plain_event_per_hop_reference_under_random_traffic() {
    use dsgd_sim::rng::splitmix64;
    for (case, topology) in [
        Topology::Flat,
        Topology::Racks { rack_size: 3, uplink: Bandwidth::from_gbps(15.0), core_latency: SimDuration::from_micros(2) },
    ]
    .into_iter()
    .enumerate()
    {
        let nodes = 10;
        let mut net = NetworkConfig { topology, ..flat() };
        net.per_node.insert(
            3,
            NicOverride { latency: Some(SimDuration::from_micros(9)), bandwidth: Some(Bandwidth::from_gbps(4.0)) },
        );
        net.per_node.insert(7, NicOverride { latency: Some(SimDuration::from_micros(6)), bandwidth: None });
        let mut x = 99 + case as u64;
        let mut r = || {
            x = splitmix64(x);
            x
        };
        let mut sends: Vec<(SimTime, usize, usize, u64)> = (0..2_000)
            .map(|_| {
                let a = (r() % nodes as u64) as usize;
                let b = (a + 1 + (r() % (nodes as u64 - 1)) as usize) % nodes;
                (SimTime(r() % 20_000_000), a, b, 1_000 + r() % 200_000)
            })
            .collect();
        sends.sort_by_key(|s| s.0);
        let want = reference(&net, nodes, &sends);
        let mut sim = cluster(nodes, net);
        for (i, s) in sends.iter().enumerate() {
            sim.set_timer(s.1, s.0 - SimTime::ZERO, i as u64).unwrap();
        }
        let mut got = vec![SimTime::ZERO; sends.len()];
        while let Some((t, occ)) = sim.step() {
            match occ {
                Occurrence::Timer { tag, .. } => {
                    let (_, a, b, bytes) = sends[tag as usize];
                    sim.send(a, b, bytes, tag as usize).unwrap();
                }
                Occurrence::Message { payload, .. } => got[payload] = t,
                _ => {}
            }
        }
        assert_eq!(got, want, "topology case {case}");
        assert!(sim.stats().events < 2 * 2_000 + 2_000 * if case == 0 { 1 } else { 3 }, "shortcut never taken");
    }
}

#[test]
fn the_backlog_names_the_sender_whose_nic_holds_the_most() {
    let mut sim = cluster(3, flat());
    for k in 0..5 {
        sim.send(0, 1, S, k).unwrap();
    }
    sim.send(2, 1, S, 9).unwrap();
    let b = sim.backlog();
    assert_eq!((b.messages, b.wire_bytes), (6, 6 * S));
    let w = b.worst.clone().expect("a sender");
    assert_eq!((w.node, w.messages, w.wire_bytes), (0, 5, 5 * S));
    // Node 0's egress is booked for its five megabytes: five serialisation times ahead.
    assert_eq!(w.booked, SimDuration(5 * sb().as_nanos()));
    assert!(b.describe().contains("node 0's NIC holds 5 messages"), "{}", b.describe());
    // Delivered messages are no longer held.
    let _ = deliveries(&mut sim);
    assert_eq!(sim.backlog().messages, 0);
}

#[test]
fn a_backlog_spread_over_many_senders_is_named_so_and_the_queues_next_growth_counts() {
    let mut sim = cluster(8, flat());
    let before = sim.pending_growth_bytes();
    // Every node sends one message to each of the others, as a synchronous probe does.
    for from in 0..8 {
        for to in (0..8).filter(|&t| t != from) {
            sim.send(from, to, S, 0).unwrap();
        }
    }
    let b = sim.backlog();
    assert_eq!((b.messages, b.senders), (56, 8));
    assert!(b.describe().contains("from 8 senders (at most 7 from one, node 0)"), "{}", b.describe());
    assert!(!b.describe().contains("faster than its bandwidth"), "{}", b.describe());
    // The queue's slab is counted at its next doubling only when nearly full.
    assert_eq!(before, 0);
    let mut filled = 0;
    while sim.pending_growth_bytes() == 0 && filled < 1 << 20 {
        sim.send(0, 1, 1, 0).unwrap();
        filled += 1;
    }
    assert!(sim.pending_growth_bytes() > 0 && sim.pending_growth_bytes() < 1 << 30, "{filled}");
    assert!(sim.backlog().describe().contains("the event queue would next take"));
}

/// 1 Gbit/s links with a 125 kB bucket that sends at 10 Gbit/s while it has tokens.
fn shaped() -> NetworkConfig {
    NetworkConfig {
        latency: LAT,
        bandwidth: Bandwidth::from_gbps(1.0),
        token_bucket: Some(TokenBucket { depth_bytes: 125_000, peak: Bandwidth::from_gbps(10.0) }),
        ..Default::default()
    }
}

/// A message of `bytes` on a 1 Gbit/s link whose bucket holds `tokens` at its start, peak 10 Gbit/s:
/// S/P while S ≤ T·P/(P−B), else (S − T)/B; nanoseconds.
fn bucket_ns(bytes: f64, tokens: f64) -> u64 {
    let (b, p) = (0.125, 1.25); // bytes a nanosecond
    let at_peak = tokens * p / (p - b);
    (if bytes <= at_peak { bytes / p } else { (bytes - tokens) / b }).round() as u64
}

#[test]
fn a_token_bucket_sends_at_its_peak_while_tokens_last_then_at_the_bandwidth() {
    // Within the bucket: latency + S/P, through both the sender's and the receiver's bucket.
    for bytes in [1_000u64, 50_000, 125_000, 138_888] {
        let mut sim = cluster(2, shaped());
        sim.send(0, 1, bytes, 0).unwrap();
        let d = deliveries(&mut sim);
        assert_eq!(d[0].0, SimTime::ZERO + LAT + SimDuration(bucket_ns(bytes as f64, 125_000.0)), "{bytes} B");
        assert_eq!(bucket_ns(bytes as f64, 125_000.0), (bytes as f64 / 1.25).round() as u64);
    }
    // Beyond it: latency + (S − T)/B. 1 MB: 7 ms at 1 Gbit/s, where 8 ms without the bucket.
    let mut sim = cluster(2, shaped());
    sim.send(0, 1, S, 0).unwrap();
    assert_eq!(deliveries(&mut sim)[0].0, SimTime::ZERO + LAT + SimDuration::from_micros(7_000));
}

#[test]
fn a_stream_drains_the_bucket_and_an_idle_link_fills_it_again() {
    // Ten 100 kB messages back to back: the first goes at the peak, and the stream ends where a
    // 1 Gbit/s link that started with 125 kB of credit ends it: (10·100 kB − 125 kB)/B.
    let mut sim = cluster(2, shaped());
    for i in 0..10 {
        sim.send(0, 1, 100_000, i).unwrap();
    }
    let d = deliveries(&mut sim);
    assert_eq!(d[0].0, SimTime::ZERO + LAT + SimDuration(80_000));
    assert_eq!(d[9].0, SimTime::ZERO + LAT + SimDuration(7_000_000));
    // Each message after the bucket ran dry takes S/B.
    assert_eq!(d[9].0 - d[8].0, SimDuration(800_000));
    // A millisecond after the stream (125 kB at 1 Gbit/s) both buckets are full again, and the
    // next message goes at the peak.
    let quiet = d[9].0 + SimDuration::from_micros(1_000);
    sim.advance_to(quiet).unwrap();
    sim.send(0, 1, 100_000, 10).unwrap();
    let d = deliveries(&mut sim);
    assert_eq!(d[0].0, quiet + LAT + SimDuration(80_000));
    // That message spent 100 kB and got 10 kB back in its 80 µs: 35 kB are left in each bucket.
    // Sent 200 µs after it arrived, the next 100 kB finds 35 kB + 205 µs of refill = 60.625 kB in
    // each (the sender's bucket was last used a latency earlier, and the receiver's is reached a
    // latency later), so it takes (100 kB − 60.625 kB)/B = 315 µs.
    let later = d[0].0 + SimDuration::from_micros(200);
    sim.advance_to(later).unwrap();
    sim.send(0, 1, 100_000, 11).unwrap();
    assert_eq!(bucket_ns(100_000.0, 60_625.0), 315_000);
    assert_eq!(deliveries(&mut sim)[0].0, later + LAT + SimDuration(315_000));
}

#[test]
fn without_a_token_bucket_a_link_is_what_it_was() {
    // The same stream on links without a bucket: every message at S/B, as before the bucket.
    let mut sim = cluster(2, NetworkConfig { token_bucket: None, ..shaped() });
    for i in 0..3 {
        sim.send(0, 1, 100_000, i).unwrap();
    }
    let times: Vec<SimTime> = deliveries(&mut sim).iter().map(|x| x.0).collect();
    let b = Bandwidth::from_gbps(1.0).transfer_time(100_000);
    assert_eq!(times, (1..=3).map(|k| SimTime::ZERO + LAT + SimDuration(k * b.0)).collect::<Vec<_>>());
}

#[test]
fn a_message_past_the_rendezvous_limit_leaves_one_round_trip_later() {
    // 64 KiB and below go at once; above, the data leaves after a round trip (2 × latency), on
    // the contention model and the analytic one alike.
    for mode in [NetMode::Contention, NetMode::Analytic] {
        let cfg = NetworkConfig {
            latency: LAT,
            bandwidth: Bandwidth::from_gbps(1.0),
            rendezvous_bytes: Some(65_536),
            mode,
            ..NetworkConfig::default()
        };
        for (bytes, rtt) in [(65_536u64, 0u64), (65_537, 2)] {
            let mut sim = cluster(2, cfg.clone());
            sim.send(0, 1, bytes, 0).unwrap();
            let transfer = Bandwidth::from_gbps(1.0).transfer_time(bytes);
            let want = SimTime::ZERO + SimDuration(rtt * LAT.0) + LAT + transfer;
            assert_eq!(deliveries(&mut sim)[0].0, want, "{mode:?}, {bytes} B");
        }
    }
    // The sender's NIC is free during the handshake: a small message sent just after a large
    // one is not held behind it, and the large one then waits for the small one's transfer.
    let cfg = NetworkConfig {
        latency: LAT,
        bandwidth: Bandwidth::from_gbps(1.0),
        rendezvous_bytes: Some(65_536),
        ..NetworkConfig::default()
    };
    let mut sim = cluster(3, cfg);
    sim.send(0, 1, 100_000, 0).unwrap();
    sim.send(0, 2, 1_000, 1).unwrap();
    let d = deliveries(&mut sim);
    let (small, large) =
        (Bandwidth::from_gbps(1.0).transfer_time(1_000), Bandwidth::from_gbps(1.0).transfer_time(100_000));
    assert_eq!(d[0].0, SimTime::ZERO + LAT + small);
    assert_eq!(d[1].0, SimTime::ZERO + SimDuration(2 * LAT.0) + LAT + large);
}
