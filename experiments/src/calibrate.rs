//! `dsgd calibrate` and the calibration behind `dsgd validate`: what the real executor's messages
//! and gradients cost on this machine, measured the way a run incurs them, and written as spec
//! parts so that the simulator can replay a real run.
//!
//! - **Messages** go through the executor's own path: a ring all-reduce chunk encoded with the
//!   executor's codec, a non-blocking send, a polling receiver that decodes it. Each size is timed
//!   twice: one pair alone (ranks 0 and 1, the others polling as in a run), and every pair of ranks
//!   at once (0-1, 2-3, …), since in a run all ranks send together and share the cores.
//! - **The fit** is `one_way = latency + bytes / bandwidth` on the points of the spec's traffic
//!   pattern (the ring's for a message-level all-reduce, all pairs' for the others, the pair's
//!   with 2 ranks), over the sizes up to the largest message the spec sends. The line goes through
//!   the point of the spec's bulk message (a ring chunk, or a model's worth), which is timed at
//!   its exact size, and is least squares over the other points: message cost is not linear in
//!   size over three decades (protocol switches, caches), and the bulk messages carry the time.
//! - **Gradients**: the spec's workload steps, timed on every worker rank at once (as in a run,
//!   where the workers compute side by side on the same cores).

use crate::spec::Spec;
use crate::{collective_fit, shaping};
use crate::{Error, Result};
use dsgd_runtime::collectives::{CollectiveKind, Run, Schedule};
use dsgd_runtime::mpi_exec::inbox::Inbox;
use dsgd_runtime::mpi_exec::outbox::Outbox;
use dsgd_runtime::mpi_exec::{self, precise_sleeps};
use dsgd_runtime::protocols::sync::SyncMsg;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const TAG: i32 = 7;

/// One measured message size.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PingPong {
    /// Payload bytes.
    pub bytes: usize,
    /// Mean one-way time (half the round trip) of ranks 0 and 1 alone, seconds.
    pub one_way_s: f64,
    /// The same with every pair of ranks exchanging at once, seconds.
    pub concurrent_one_way_s: f64,
    /// Mean time of one round of a ring exchange (every rank sends to the next and receives
    /// from the previous at once, as in a ring all-reduce), seconds.
    pub ring_one_way_s: f64,
}

/// Which traffic a fit describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    /// One pair of ranks alone.
    Pair,
    /// Every pair of ranks at once, each pair one message at a time.
    Pairs,
    /// Every rank sending and receiving at once.
    Ring,
}

impl Pattern {
    /// The traffic of `spec` run on `ranks` ranks: a synchronous collective has every rank
    /// sending at once; the other algorithms exchange between pairs (workers and a server, two
    /// gossip partners) at unaligned times.
    pub fn of(spec: &Spec, ranks: usize) -> Pattern {
        match &spec.algorithm {
            _ if spec.algorithm.sync().is_some_and(|c| c.backup_workers == 0 && !c.collective.is_analytic()) => {
                Pattern::Ring
            }
            _ if ranks > 2 => Pattern::Pairs,
            _ => Pattern::Pair,
        }
    }

    /// The point's time in this pattern.
    pub fn time(self, p: &PingPong) -> f64 {
        match self {
            Pattern::Pair => p.one_way_s,
            Pattern::Pairs => p.concurrent_one_way_s,
            Pattern::Ring => p.ring_one_way_s,
        }
    }
}

/// `one_way = latency + bytes / bandwidth` over the sizes up to `up_to_bytes`, through the point
/// at `through_bytes`.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Fit {
    /// Largest size fitted.
    pub up_to_bytes: usize,
    /// The size whose measured time the line matches exactly (the spec's bulk message).
    pub through_bytes: usize,
    /// Microseconds.
    pub latency_us: f64,
    /// Gbit/s.
    pub bandwidth_gbps: f64,
    /// Which points were fitted.
    pub pattern: Pattern,
}

/// What calibration measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Calibration {
    /// The ping-pong points.
    pub points: Vec<PingPong>,
    /// The fit used for the spec (or over every size without one), for its traffic pattern.
    pub fit: Fit,
    /// The fits of every pattern over the same sizes: a pair alone, all pairs, the ring.
    pub pattern_fits: Vec<Fit>,
    /// Gradient step times of the spec's workload on each worker rank, seconds (empty without
    /// a spec, or for a timing-only workload).
    pub step_s: Vec<Vec<f64>>,
    /// The mean time of a synchronous spec's own all-reduce of its model, seconds.
    pub all_reduce_s: Option<f64>,
    /// Two streams from rank 0 to rank 1 (see [`crate::shaping`]).
    pub streams: Option<shaping::Streams>,
    /// The token bucket they show, if they show one: then the spec parts use it.
    pub bucket: Option<shaping::BucketFit>,
    /// A server's NIC under its workers' traffic, where the spec has servers, Gbit/s
    /// ([`shaping::incast`]; reported, not in the spec parts).
    pub incast_gbps: Option<f64>,
}

/// The largest message Open MPI's TCP transport sends eagerly (`btl_tcp_eager_limit`, which
/// `netns_cluster.sh` pins): a larger one goes by rendezvous, its data after a round trip.
pub const EAGER_LIMIT: usize = 65_536;

/// Receives one message the way the executor does: by polling its inbox (matched probes and
/// non-blocking receives), advancing this rank's sends, with the executor's pause when nothing is there.
pub(crate) fn poll_receive(inbox: &mut Inbox, out: &mut Outbox) -> Vec<u8> {
    loop {
        out.progress();
        if let Some(m) = inbox.poll() {
            return m.buf;
        }
        std::thread::sleep(mpi_exec::IDLE_PAUSE);
    }
}

/// The payload: one round of a ring all-reduce, as the executor encodes it.
pub(crate) fn encode_payload(data: Vec<f32>) -> Vec<u8> {
    mpi_exec::encode(&SyncMsg::Chunk { view: 0, iter: 0, bucket: 0, round: 0, data })
}

fn decode(b: &[u8]) -> Vec<f32> {
    match mpi_exec::decode::<SyncMsg>(b) {
        SyncMsg::Chunk { data, .. } => data,
        _ => Vec::new(),
    }
}

/// Mean times of one round of a ring exchange of `sizes`: every rank sends to the next rank
/// and receives from the previous one, all at once.
fn ring(world: &SimpleCommunicator, sizes: &[usize], reps: usize) -> Vec<f64> {
    let (me, n) = (world.rank(), world.size());
    let next = (me + 1) % n;
    let mut out = Outbox::new();
    let mut inbox = Inbox::new();
    let mut means = Vec::new();
    world.barrier();
    for &bytes in sizes {
        let payload = vec![0.5f32; bytes / 4];
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t = Instant::now();
            out.send(next, TAG, encode_payload(payload.clone()));
            decode(&poll_receive(&mut inbox, &mut out));
            times.push(t.elapsed().as_secs_f64());
        }
        means.push(mean(times));
    }
    while out.in_flight() > 0 {
        out.progress();
    }
    world.barrier();
    means
}

/// Mean wall time of the spec's own all-reduce of a `dim`-element vector, run as the
/// synchronous protocol runs it (its schedule, the executor's codec and sends, a polling
/// receiver) on every rank at once, each rank pausing `gap` before each one (a run's gradient:
/// a shaped link's bucket refills meanwhile, as in a run); seconds, the pauses not counted.
pub fn all_reduce(world: &SimpleCommunicator, kind: CollectiveKind, dim: usize, reps: usize, gap: Duration) -> f64 {
    let (me, n) = (world.rank() as usize, world.size() as usize);
    let mut out = Outbox::new();
    let mut inbox = Inbox::new();
    let mut outgoing = Vec::new();
    let mut times = Vec::with_capacity(reps);
    let mut early: BTreeMap<(u64, u32), Vec<f32>> = BTreeMap::new();
    world.barrier();
    for it in 0..reps as u64 + 2 {
        // The pause as a rank's gradient is waited for in a run: looking at its messages every
        // `IDLE_PAUSE` (chunks from ranks that already began the next all-reduce may come).
        let until = Instant::now() + gap;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            out.progress();
            inbox.progress();
            std::thread::sleep(left.min(mpi_exec::IDLE_PAUSE));
        }
        let t = Instant::now();
        let mut run = Run::new(Schedule::new(kind, n, me, dim), vec![0.5f32; dim], dim);
        // Rounds of this all-reduce that came early, while the last one ran, as in the protocol.
        let later = early.split_off(&(it + 1, 0));
        for ((_, round), data) in std::mem::replace(&mut early, later) {
            run.deliver(round, data);
        }
        while !run.poll(|o| outgoing.push(o)) {
            for o in outgoing.drain(..) {
                let msg = SyncMsg::Chunk { view: 0, iter: it, bucket: 0, round: o.round, data: o.data };
                out.send(o.to as i32, TAG, mpi_exec::encode(&msg));
            }
            match mpi_exec::decode::<SyncMsg>(&poll_receive(&mut inbox, &mut out)) {
                SyncMsg::Chunk { iter, round, data, .. } if iter == it => run.deliver(round, data),
                SyncMsg::Chunk { iter, round, data, .. } => {
                    early.insert((iter, round), data);
                }
                _ => {}
            }
        }
        for o in outgoing.drain(..) {
            let msg = SyncMsg::Chunk { view: 0, iter: it, bucket: 0, round: o.round, data: o.data };
            out.send(o.to as i32, TAG, mpi_exec::encode(&msg));
        }
        if it >= 2 {
            times.push(t.elapsed().as_secs_f64());
        }
    }
    while out.in_flight() > 0 {
        out.progress();
    }
    world.barrier();
    mean(times)
}

/// The mean of repeated timings (at least one). A mean, not a median: the simulator predicts a
/// run's mean iteration time or update rate, and on oversubscribed cores a message now and then
/// waits for its rank to be scheduled; that tail is part of what a run's messages cost (the
/// median left sync_mlp at -15.7% in one of three validations here, the mean within 6.6%).
fn mean(times: Vec<f64>) -> f64 {
    times.iter().sum::<f64>() / times.len() as f64
}

/// Mean one-way times of `sizes` for this rank's pair; `pairs` says whether every pair runs
/// (else only ranks 0 and 1, the others wait for rank 0's word by polling).
fn exchange(world: &SimpleCommunicator, sizes: &[usize], reps: usize, pairs: bool) -> Vec<f64> {
    let me = world.rank();
    let peer = me ^ 1;
    let mut out = Outbox::new();
    let mut inbox = Inbox::new();
    let mut means = Vec::new();
    world.barrier();
    let active = |r: i32| (r ^ 1) < world.size() && (pairs || r <= 1);
    if active(me) {
        for &n in sizes {
            let payload = vec![0.5f32; n / 4];
            let mut times = Vec::with_capacity(reps);
            for _ in 0..reps {
                let t = Instant::now();
                if me % 2 == 0 {
                    out.send(peer, TAG, encode_payload(payload.clone()));
                    decode(&poll_receive(&mut inbox, &mut out));
                } else {
                    let v = decode(&poll_receive(&mut inbox, &mut out));
                    out.send(peer, TAG, encode_payload(v));
                }
                times.push(t.elapsed().as_secs_f64() / 2.0);
            }
            means.push(mean(times));
        }
    }
    // Ranks without a pair wait by polling, as in a run, not spinning in a barrier on the cores
    // the pairs are timed on.
    if me == 0 {
        for to in (1..world.size()).filter(|&r| !active(r)) {
            out.send(to, TAG, Vec::new());
        }
    } else if !active(me) {
        poll_receive(&mut inbox, &mut out);
    }
    while out.in_flight() > 0 {
        out.progress();
    }
    world.barrier();
    means
}

/// `one_way = latency + bytes / bandwidth` through the point at `through` (the time of the
/// first point of that size, or of the largest point up to `up_to` without one), least squares
/// over the other points up to `up_to`.
fn fit(points: &[PingPong], up_to: usize, through: usize, pattern: Pattern) -> Fit {
    let used: Vec<(f64, f64)> =
        points.iter().filter(|p| p.bytes <= up_to).map(|p| (p.bytes as f64, pattern.time(p))).collect();
    let anchor = used.iter().copied().find(|p| p.0 as usize == through).unwrap_or(used[used.len() - 1]);
    let (bx, by) = anchor;
    let sxy: f64 = used.iter().map(|p| (p.0 - bx) * (p.1 - by)).sum();
    let sxx: f64 = used.iter().map(|p| (p.0 - bx).powi(2)).sum();
    let slope = if sxx > 0.0 { (sxy / sxx).max(1e-13) } else { 1e-13 };
    // Latency is at least half the smallest size's time and at most the anchor's (then the line
    // is flat: the anchor costs its latency alone).
    let latency = (by - slope * bx).max(used[0].1 * 0.5).min(by).max(1e-7);
    let slope = if bx > 0.0 { ((by - latency) / bx).max(1e-13) } else { slope };
    Fit {
        up_to_bytes: up_to,
        through_bytes: bx as usize,
        latency_us: latency * 1e6,
        bandwidth_gbps: 8.0 / (slope * 1e9),
        pattern,
    }
}

/// The largest message `spec` sends, bytes: a model's worth of parameters (the wire size of a
/// timing-only workload), at least 16 KiB.
pub fn largest_message(spec: &Spec) -> Result<usize> {
    let r = spec.resolve()?;
    Ok((4 * r.workload.param_count() + 64).max(16 << 10))
}

/// The payload of the messages that carry `spec`'s traffic on `ranks` ranks, bytes: a ring
/// all-reduce's chunk (a model's worth over the workers), or a model's worth for the others
/// (servers' slices, elastic exchanges and gossip replies, a tree's rounds).
pub fn bulk_message(spec: &Spec, ranks: usize) -> Result<usize> {
    let r = spec.resolve()?;
    let params = r.workload.param_count();
    Ok(match spec.algorithm.sync() {
        Some(c) if Pattern::of(spec, ranks) == Pattern::Ring && c.collective == CollectiveKind::Ring => {
            4 * params.div_ceil(r.workers.max(1))
        }
        _ => largest_message(spec)?,
    })
}

/// The message sizes to time up to `largest` bytes: 8 B, 1 KiB, then ×8 to `largest`.
pub fn sizes_up_to(largest: usize) -> Vec<usize> {
    let mut s = vec![8, 1 << 10];
    let mut n = 16 << 10;
    while n < largest {
        s.push(n);
        n *= 8;
    }
    s.push(largest);
    s
}

/// Times `sizes` for a pair alone, all pairs at once and the ring; the points on rank 0, `None`
/// elsewhere.
pub fn ping_pong(world: &SimpleCommunicator, sizes: &[usize], reps: usize) -> Option<Vec<PingPong>> {
    precise_sleeps();
    let alone = exchange(world, sizes, reps, false);
    let together = exchange(world, sizes, reps, true);
    let ring = ring(world, sizes, reps);
    (world.rank() == 0).then(|| {
        (0..sizes.len())
            .map(|i| PingPong {
                bytes: sizes[i],
                one_way_s: alone[i],
                concurrent_one_way_s: together[i],
                ring_one_way_s: ring[i],
            })
            .collect()
    })
}

/// The mean of two timings of the same sizes (say, just before and just after a run, to see the
/// machine in the state the run saw it).
pub fn mean_points(a: &[PingPong], b: &[PingPong]) -> Vec<PingPong> {
    a.iter()
        .zip(b)
        .map(|(a, b)| PingPong {
            bytes: a.bytes,
            one_way_s: (a.one_way_s + b.one_way_s) / 2.0,
            concurrent_one_way_s: (a.concurrent_one_way_s + b.concurrent_one_way_s) / 2.0,
            ring_one_way_s: (a.ring_one_way_s + b.ring_one_way_s) / 2.0,
        })
        .collect()
}

/// The network fit of `pattern`'s points over the sizes up to a spec's largest message,
/// `largest` bytes (at least 3 sizes), through its bulk message's point, `bulk` bytes.
pub fn fits(points: &[PingPong], largest: usize, bulk: usize, pattern: Pattern) -> Fit {
    let up_to = points.iter().map(|p| p.bytes).filter(|&b| b <= largest.max(points[2].bytes)).max().unwrap_or(largest);
    fit(points, up_to, bulk, pattern)
}

/// The sizes to time for specs whose largest and bulk messages are `largest` and `bulk`: 8 B,
/// 1 KiB, ×8 from 16 KiB up to the largest, and every spec's own sizes.
pub fn sizes_for(largest: &[usize], bulk: &[usize]) -> Vec<usize> {
    let mut sizes = sizes_up_to(largest.iter().copied().max().unwrap_or(1));
    sizes.extend(largest.iter().chain(bulk));
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The gradient step times of `spec`'s workload, timed on every worker rank at once; on rank 0,
/// one list per worker (empty for a timing-only workload).
pub fn step_times(world: &SimpleCommunicator, spec: &Spec, steps: usize) -> Result<Vec<Vec<f64>>> {
    let r = spec.resolve()?;
    let me = world.rank() as usize;
    let mut mine = Vec::new();
    world.barrier();
    if !r.workload.timing_only() && me < r.workers {
        let p = r.workload.init();
        let mut g = vec![0.0; p.len()];
        for s in 0..steps + 2 {
            let t = Instant::now();
            let req = dsgd_models::GradRequest { worker: me, batch: spec.batch, seed: s as u64 };
            r.workload.gradient(&p, req, &mut g);
            if s >= 2 {
                mine.push(t.elapsed().as_secs_f64());
            }
        }
    }
    world.barrier();
    if me != 0 {
        world.process_at_rank(0).send(&mine[..]);
        return Ok(Vec::new());
    }
    let mut all = vec![mine];
    for from in 1..world.size() {
        all.push(world.process_at_rank(from).receive_vec::<f64>().0);
    }
    all.retain(|v| !v.is_empty());
    Ok(all)
}

/// Mean and log-normal sigma of the step times, each at least `floor_s` (a gradient takes at
/// least the spec's step time in a real run); `None` without times.
pub fn step_summary(steps: &[Vec<f64>], floor_s: f64) -> Option<(f64, f64)> {
    let all: Vec<f64> = steps.iter().flatten().map(|t| t.max(floor_s)).collect();
    if all.is_empty() {
        return None;
    }
    let n = all.len() as f64;
    let mean = all.iter().sum::<f64>() / n;
    let logs: Vec<f64> = all.iter().map(|t| (t / mean).ln()).collect();
    let lm = logs.iter().sum::<f64>() / n;
    Some((mean, (logs.iter().map(|l| (l - lm).powi(2)).sum::<f64>() / n).sqrt()))
}

/// The mean time of a synchronous spec's own all-reduce of its model on every rank (when the
/// spec has one rank a worker and as many workers as ranks), `reps` times, each after a pause of
/// `gap` ([`all_reduce`]), seconds.
pub fn spec_all_reduce(world: &SimpleCommunicator, spec: &Spec, gap: Duration, reps: usize) -> Result<Option<f64>> {
    let r = spec.resolve()?;
    match spec.algorithm.sync() {
        Some(c) if Pattern::of(spec, r.workers) == Pattern::Ring && r.workers == world.size() as usize => {
            let dim = dsgd_runtime::collectives::wire_params(r.workload.as_ref());
            Ok(Some(all_reduce(world, c.collective, dim, reps, gap)))
        }
        _ => Ok(None),
    }
}

/// `dsgd calibrate`: the network and, with a spec, its workload's gradient times; with
/// `token_bucket`, streams and the token bucket they show ([`shaping`]).
pub fn calibrate(world: &SimpleCommunicator, spec: Option<&Spec>, token_bucket: bool) -> Result<Option<Calibration>> {
    if world.size() < 2 {
        return Err(Error::Mpi(
            "calibration measures messages between two ranks: run it with `mpirun -np 2` or more".into(),
        ));
    }
    let ranks = world.size() as usize;
    let largest = spec.map(largest_message).transpose()?.unwrap_or(4 << 20);
    let bulk = spec.map(|s| bulk_message(s, ranks)).transpose()?.unwrap_or(largest);
    let points = ping_pong(world, &sizes_for(&[largest], &[bulk]), 30);
    let streams = if token_bucket { shaping::stream(world, bulk, 10) } else { None };
    // A server's NIC under its workers' traffic, where the spec has servers.
    let server = spec.filter(|s| token_bucket && s.nodes < ranks).map(|s| s.nodes as i32);
    let server_bps = server.and_then(|s| shaping::incast(world, s, bulk, 3));
    let steps = match spec {
        Some(s) => step_times(world, s, 10)?,
        None => Vec::new(),
    };
    let pattern = spec.map_or(Pattern::Ring, |s| Pattern::of(s, ranks));
    // The spec's all-reduce, each after a pause of a measured step (the spec's step time for a
    // timing workload).
    let all: Vec<f64> = steps.iter().flatten().copied().collect();
    let gap_s = match (spec, all.is_empty()) {
        (_, false) => all.iter().sum::<f64>() / all.len() as f64,
        (Some(s), true) => s.compute.step_time_ms / 1e3,
        (None, true) => 0.0,
    };
    let collective = match spec {
        Some(s) => spec_all_reduce(world, s, Duration::from_secs_f64(gap_s), 20)?,
        None => None,
    };
    let Some(points) = points else { return Ok(None) };
    let fit = fits(&points, largest, bulk, pattern);
    let pattern_fits = [Pattern::Pair, Pattern::Pairs, Pattern::Ring].map(|p| fits(&points, largest, bulk, p)).to_vec();
    let start = if collective.is_some() { Pattern::Pair } else { pattern };
    let mut bucket = streams.and_then(|s| shaping::fit(&points, &s, start));
    if let (Some(b), Some(t), Some(s)) = (bucket, collective, spec) {
        let mut shaped = s.clone();
        shaped.network.rendezvous_kb = Some(EAGER_LIMIT as f64 / 1e3);
        bucket = Some(collective_fit::fit(b, t, |b| collective_fit::simulated_all_reduce(&shaped, b, gap_s, 20))?);
    }
    let incast_gbps = server_bps.map(|r| r * 8.0 / 1e9);
    Ok(Some(Calibration {
        points,
        fit,
        pattern_fits,
        step_s: steps,
        all_reduce_s: collective,
        streams,
        bucket,
        incast_gbps,
    }))
}

impl Calibration {
    /// The network and compute parts of a spec, as JSON; `floor_ms` is the spec's step time.
    pub fn spec_parts(&self, floor_ms: f64) -> serde_json::Value {
        let mut v = match self.bucket {
            Some(b) => {
                let mut shaped = Spec::default();
                collective_fit::with_bucket(&mut shaped, b);
                let mut network = serde_json::json!({
                    "latency_us": b.latency_us,
                    "bandwidth_gbps": b.bandwidth_gbps,
                    "rendezvous_kb": EAGER_LIMIT as f64 / 1e3
                });
                if let Some(t) = shaped.network.token_bucket {
                    network["token_bucket"] = serde_json::json!({"depth_kb": t.depth_kb, "peak_gbps": t.peak_gbps});
                }
                serde_json::json!({ "network": network })
            }
            None => serde_json::json!({
                "network": {"latency_us": self.fit.latency_us, "bandwidth_gbps": self.fit.bandwidth_gbps}
            }),
        };
        if let Some((mean, sigma)) = step_summary(&self.step_s, floor_ms / 1e3) {
            v["compute"] = serde_json::json!({
                "step_time_ms": mean * 1e3,
                "straggler": {"jitter": {"kind": "log_normal", "sigma": sigma}}
            });
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(latency_s: f64, bytes_per_s: f64, sizes: &[usize]) -> Vec<PingPong> {
        sizes
            .iter()
            .map(|&b| {
                let t = latency_s + b as f64 / bytes_per_s;
                PingPong { bytes: b, one_way_s: t, concurrent_one_way_s: 2.0 * t, ring_one_way_s: 4.0 * t }
            })
            .collect()
    }

    #[test]
    fn the_fit_recovers_latency_and_bandwidth_over_the_sizes_asked() {
        let sizes = sizes_up_to(1 << 20);
        assert_eq!(sizes, [8, 1024, 16 << 10, 128 << 10, 1 << 20]);
        let p = points(50e-6, 1e9, &sizes);
        let (pair, all, ring) =
            [Pattern::Pair, Pattern::Pairs, Pattern::Ring].map(|pattern| fits(&p, 200_000, 128 << 10, pattern)).into();
        assert_eq!((all.up_to_bytes, pair.up_to_bytes), (128 << 10, 128 << 10));
        assert!((pair.latency_us - 50.0).abs() < 1e-6 && (pair.bandwidth_gbps - 8.0).abs() < 1e-6, "{pair:?}");
        // All pairs at once take twice as long: twice the latency, half the bandwidth.
        assert!(all.pattern == Pattern::Pairs);
        assert!((all.latency_us - 100.0).abs() < 1e-6 && (all.bandwidth_gbps - 4.0).abs() < 1e-6);
        assert!((ring.latency_us - 200.0).abs() < 1e-6 && (ring.bandwidth_gbps - 2.0).abs() < 1e-6);
        // A spec whose messages are small is fitted on the small sizes only, at least 3 of them.
        assert_eq!(fits(&p, 100, 100, Pattern::Pairs).up_to_bytes, 16 << 10);
    }

    #[test]
    fn the_fit_goes_through_the_bulk_message_where_cost_is_not_linear_in_size() {
        // A protocol switch: small messages cost 10 us, large ones 100 us + 1 GB/s.
        let sizes = sizes_for(&[1 << 20], &[250_000]);
        assert_eq!(sizes, [8, 1024, 16 << 10, 128 << 10, 250_000, 1 << 20]);
        let t = |b: usize| if b < 100_000 { 10e-6 } else { 100e-6 + b as f64 / 1e9 };
        let p: Vec<PingPong> = sizes
            .iter()
            .map(|&b| PingPong { bytes: b, one_way_s: t(b), concurrent_one_way_s: t(b), ring_one_way_s: t(b) })
            .collect();
        let f = fits(&p, 1 << 20, 250_000, Pattern::Ring);
        assert_eq!((f.through_bytes, f.up_to_bytes), (250_000, 1 << 20));
        let at = |b: f64| f.latency_us * 1e-6 + b * 8.0 / (f.bandwidth_gbps * 1e9);
        assert!((at(250_000.0) - t(250_000)).abs() < 1e-12, "{f:?}");
        // Plain least squares over every point misses the bulk size by far more.
        let (mx, my) = (sizes.iter().sum::<usize>() as f64 / 6.0, sizes.iter().map(|&b| t(b)).sum::<f64>() / 6.0);
        let sxy: f64 = sizes.iter().map(|&b| (b as f64 - mx) * (t(b) - my)).sum();
        let sxx: f64 = sizes.iter().map(|&b| (b as f64 - mx).powi(2)).sum();
        let plain = my + sxy / sxx * (250_000.0 - mx);
        assert!((plain - t(250_000)).abs() > 20e-6, "{plain}");
        // Without a point at the bulk size, the line goes through the largest one fitted.
        assert_eq!(fits(&p, 1 << 20, 12345, Pattern::Ring).through_bytes, 1 << 20);
    }

    #[test]
    fn a_ring_all_reduce_is_fitted_at_its_chunk_size_the_others_at_a_models_worth() {
        let spec = |algorithm: serde_json::Value| -> Spec {
            let v = serde_json::json!({ "algorithm": algorithm, "nodes": 4, "workload": {"kind": "quadratic", "dim": 1001} });
            crate::load::spec_from_str("t.json", &v.to_string(), &[]).unwrap()
        };
        assert_eq!(bulk_message(&spec(serde_json::json!({"kind": "sync"})), 4).unwrap(), 4 * 251);
        let tree = spec(serde_json::json!({"kind": "sync", "collective": "tree"}));
        assert_eq!(bulk_message(&tree, 4).unwrap(), largest_message(&tree).unwrap());
        let ps = spec(serde_json::json!({"kind": "gossip"}));
        assert_eq!(bulk_message(&ps, 4).unwrap(), largest_message(&ps).unwrap());
    }

    #[test]
    fn each_algorithm_is_fitted_on_the_pattern_of_its_traffic() {
        let spec = |algorithm: serde_json::Value| -> Spec {
            crate::load::spec_from_str("t.json", &serde_json::json!({ "algorithm": algorithm }).to_string(), &[])
                .unwrap()
        };
        // The message-level all-reduce sends to its ring neighbours all at once.
        assert_eq!(Pattern::of(&spec(serde_json::json!({"kind": "sync"})), 4), Pattern::Ring);
        // Backup workers and the others exchange with peers or servers, many pairs at once.
        let backup = spec(serde_json::json!({"kind": "sync", "backup_workers": 1}));
        assert_eq!(Pattern::of(&backup, 4), Pattern::Pairs);
        for kind in ["async_ps", "easgd", "gossip"] {
            assert_eq!(Pattern::of(&spec(serde_json::json!({ "kind": kind })), 4), Pattern::Pairs, "{kind}");
            assert_eq!(Pattern::of(&spec(serde_json::json!({ "kind": kind })), 2), Pattern::Pair, "{kind}");
        }
    }

    #[test]
    fn step_times_are_floored_at_the_specs_step_time() {
        let (mean, sigma) = step_summary(&[vec![0.001, 0.003], vec![0.004]], 0.002).unwrap();
        assert!((mean - 0.003).abs() < 1e-12, "{mean}");
        assert!(sigma > 0.0);
        assert_eq!(step_summary(&[], 0.002), None);
        assert_eq!(step_summary(&[vec![0.001]], 0.002), Some((0.002, 0.0)));
    }
}
