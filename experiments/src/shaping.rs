//! A shaped link, measured: how fast a stream of messages goes once a link's burst allowance is
//! spent, how large that allowance is, and how fast a message goes within it.
//!
//! A NIC shaped by a token bucket (Linux's `tbf` on an emulated host's veth, a cloud VM's burst
//! allowance) sends a message at its peak while it has tokens and at its rate once they are
//! spent. A ping-pong sees only the first: its messages find a bucket refilled by the round trip,
//! so a line fitted through them overstates what a busy link delivers (a parameter server's NIC
//! fed by seven workers took 576 updates a second where such a line predicted 864). So the link
//! is also timed with streams: rank 0 sends `count` messages back to back to rank 1 after a quiet
//! spell that fills its bucket, and rank 1 answers the last with a small message.
//!
//! The fit, from two streams of X₁ < X₂ bytes taking T₁ < T₂ and the pair's ping-pong:
//! - the rate: B = (X₂ − X₁)/(T₂ − T₁), both streams well past the bucket;
//! - the depth: a stream of X bytes past the bucket takes a round trip plus (X − T)/B, so
//!   T = X₁ − B·(T₁ − 2·one_way(8 B)), from the short stream, whose time varies less (an error
//!   in a time counts B times in the depth);
//! - latency and peak: the line `one_way = latency + bytes/peak` (least squares) through the
//!   pair's ping-pong sizes within the bucket, the peak kept between 2 and 20 times the rate; the
//!   latency plus what the spec's traffic pattern (all pairs at once, the ring) adds to the
//!   smallest message;
//! - for a synchronous spec, whose traffic is its all-reduce, the bucket is then fitted to that
//!   all-reduce as a run does it, with the simulator in the loop ([`crate::collective_fit`]).
//!
//! Fitted only where asked (`--token-bucket`: a network known to be shaped, as
//! `netns_cluster.sh`'s is); streams that show no bucket (its depth under 4 KiB) leave the plain
//! fit.

use crate::calibrate::{encode_payload, poll_receive, Pattern, PingPong};
use dsgd_runtime::mpi_exec::inbox::Inbox;
use dsgd_runtime::mpi_exec::outbox::Outbox;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;
use std::time::{Duration, Instant};

const TAG: i32 = 8;
/// Silence before each stream: 20 ms refill 2.5 MB of tokens at 1 Gbit/s.
const QUIET: Duration = Duration::from_millis(20);

/// Two streams from rank 0 to rank 1.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Streams {
    /// Bytes of each message.
    pub message_bytes: usize,
    /// Messages in the short and the long stream.
    pub counts: [usize; 2],
    /// The shortest time of each over its repetitions, from the first send to the answer's
    /// arrival, seconds: a shaped link's rate and bucket are fixed, and what else the machine
    /// did only ever adds time (one 1 MiB stream in ten took a millisecond more, which made
    /// its mean show no bucket at all).
    pub times_s: [f64; 2],
}

impl Streams {
    /// The two streams' sizes in bytes.
    fn bytes(&self) -> [f64; 2] {
        self.counts.map(|c| (c * self.message_bytes) as f64)
    }

    /// The shorter of two timings of the same streams (before and after a run).
    pub fn shortest(&self, other: &Streams) -> Streams {
        Streams { times_s: [0, 1].map(|i| self.times_s[i].min(other.times_s[i])), ..*self }
    }
}

/// The streams for messages of `bulk` bytes: messages of `bulk` clamped to 64 KiB..4 MiB (a
/// spec's own messages up to 4 MiB: one of 4 MB shows no bucket, whose 125 kB are 3% of it, and
/// the plain fit of all pairs at once then gives its rate), the short stream at least 1 MiB, the
/// long one four times as many messages.
pub fn counts_for(bulk: usize) -> (usize, [usize; 2]) {
    let m = bulk.clamp(64 << 10, 4 << 20);
    let short = (1usize << 20).div_ceil(m);
    (m, [short, 4 * short])
}

/// Times the two streams of [`counts_for`]`(bulk)`, `reps` times each, and keeps each one's
/// shortest time; on rank 0, `None` elsewhere.
/// Ranks other than 0 and 1 wait for rank 0's word, polling as in a run.
pub fn stream(world: &SimpleCommunicator, bulk: usize, reps: usize) -> Option<Streams> {
    let (message_bytes, counts) = counts_for(bulk);
    let me = world.rank();
    let mut out = Outbox::new();
    let mut inbox = Inbox::new();
    let mut times_s = [0.0; 2];
    world.barrier();
    if world.size() >= 2 && me <= 1 {
        let payload = vec![0.5f32; message_bytes / 4];
        for (i, &count) in counts.iter().enumerate() {
            let mut shortest = f64::INFINITY;
            for _ in 0..reps {
                if me == 0 {
                    std::thread::sleep(QUIET);
                    let t = Instant::now();
                    for _ in 0..count {
                        out.send(1, TAG, encode_payload(payload.clone()));
                    }
                    poll_receive(&mut inbox, &mut out);
                    shortest = shortest.min(t.elapsed().as_secs_f64());
                } else {
                    for _ in 0..count {
                        poll_receive(&mut inbox, &mut out);
                    }
                    out.send(0, TAG, encode_payload(vec![0.5f32; 2]));
                }
            }
            times_s[i] = shortest;
        }
    }
    if me == 0 {
        for to in 2..world.size() {
            out.send(to, TAG, Vec::new());
        }
    } else if me >= 2 {
        poll_receive(&mut inbox, &mut out);
    }
    while out.in_flight() > 0 {
        out.progress();
    }
    world.barrier();
    (me == 0).then_some(Streams { message_bytes, counts, times_s })
}

/// A server's NIC under its workers' traffic: every other rank streams to `server` while the
/// server streams as much back to each of them, all at once (a parameter server's gradients in,
/// its parameters out), after a quiet spell; twice, with [`counts_for`]`(bulk)`'s short and long
/// streams per worker, `reps` times each. Returns, on every rank, the bytes a second into the
/// server once its bucket is spent: (X₂ − X₁)/(T₂ − T₁) over the two streams' shortest times,
/// T from the start to the server's last arrival. `None` on fewer than three ranks (no incast)
/// or where the two times do not differ.
///
/// On an emulated network this is below a pair's stream (0.70-0.96 Gbit/s where one stream moves
/// 0.95): the server's acknowledgements queue behind its own data in its shaped egress, and the
/// host's two cores carry every rank's TCP. It is reported, not given to the simulator: as the
/// server's NIC rate it made the predictions of eight-rank servers 14-25% slow, since in a run
/// the workers' pushes and the server's answers do not all flow at once.
pub fn incast(world: &SimpleCommunicator, server: i32, bulk: usize, reps: usize) -> Option<f64> {
    let (message_bytes, counts) = counts_for(bulk);
    let (me, n) = (world.rank(), world.size());
    if n < 3 {
        return None;
    }
    let mut out = Outbox::new();
    let mut inbox = Inbox::new();
    let payload = vec![0.5f32; message_bytes / 4];
    let mut times = [f64::INFINITY; 2];
    for (i, &count) in counts.iter().enumerate() {
        for _ in 0..reps {
            world.barrier();
            std::thread::sleep(QUIET);
            let t = Instant::now();
            let peers: Vec<i32> = if me == server { (0..n).filter(|&r| r != server).collect() } else { vec![server] };
            for _ in 0..count {
                for &p in &peers {
                    out.send(p, TAG, encode_payload(payload.clone()));
                }
            }
            let mut got = 0;
            while got < count * peers.len() {
                out.progress();
                match inbox.poll() {
                    Some(_) => got += 1,
                    None => std::thread::sleep(dsgd_runtime::mpi_exec::IDLE_PAUSE),
                }
            }
            times[i] = times[i].min(t.elapsed().as_secs_f64());
            while out.in_flight() > 0 {
                out.progress();
            }
        }
    }
    world.barrier();
    let mut rate = 0.0f64;
    if me == server && times[1] > times[0] {
        let x = counts.map(|c| (c * message_bytes * (n as usize - 1)) as f64);
        rate = (x[1] - x[0]) / (times[1] - times[0]);
    }
    world.process_at_rank(server).broadcast_into(&mut rate);
    (rate > 0.0).then_some(rate)
}

/// A link with a token bucket, as the simulator's `network` takes it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct BucketFit {
    /// One-way latency, microseconds.
    pub latency_us: f64,
    /// The rate once the bucket is spent, Gbit/s.
    pub bandwidth_gbps: f64,
    /// The bucket's depth, kB.
    pub depth_kb: f64,
    /// The rate while tokens last, Gbit/s.
    pub peak_gbps: f64,
}

/// The token bucket that `streams` and the ping-pong `points` show, for traffic in `pattern`;
/// `None` where the streams show no bucket (its depth under 4 KiB).
pub fn fit(points: &[PingPong], streams: &Streams, pattern: Pattern) -> Option<BucketFit> {
    let [x1, x2] = streams.bytes();
    let [t1, t2] = streams.times_s;
    if t2 <= t1 || points.is_empty() {
        return None;
    }
    let rate = (x2 - x1) / (t2 - t1);
    let round_trip = 2.0 * points[0].one_way_s;
    let depth = x1 - rate * (t1 - round_trip);
    if depth < 4096.0 {
        return None;
    }
    // The peak, from the pair's sizes within the bucket (a ping-pong's round trip refills it),
    // between twice and twenty times the rate: sizes of a few kilobytes differ by microseconds,
    // which the ranks' polling blurs.
    let within: Vec<(f64, f64)> =
        points.iter().filter(|p| p.bytes as f64 <= 0.8 * depth).map(|p| (p.bytes as f64, p.one_way_s)).collect();
    let n = within.len() as f64;
    let (mx, my) = (within.iter().map(|p| p.0).sum::<f64>() / n, within.iter().map(|p| p.1).sum::<f64>() / n);
    let sxy: f64 = within.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = within.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let peak = if sxx > 0.0 && sxy > 0.0 { sxx / sxy } else { f64::INFINITY }.clamp(2.0 * rate, 20.0 * rate);
    // The latency: the pair's, plus what the pattern adds to its smallest message (every rank
    // sending at once on shared cores).
    let first = &points[0];
    let latency = (my - mx / peak).max(0.5 * first.one_way_s) + (pattern.time(first) - first.one_way_s).max(0.0);
    Some(BucketFit {
        latency_us: latency * 1e6,
        bandwidth_gbps: rate * 8.0 / 1e9,
        depth_kb: depth / 1e3,
        peak_gbps: peak * 8.0 / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ping-pong points of a link with latency `l` s and peak `p` bytes/s, within its bucket.
    fn points(l: f64, p: f64) -> Vec<PingPong> {
        [8usize, 1024, 16384, 50_000]
            .iter()
            .map(|&b| {
                let t = l + b as f64 / p;
                PingPong { bytes: b, one_way_s: t, concurrent_one_way_s: t, ring_one_way_s: t }
            })
            .collect()
    }

    #[test]
    fn a_token_bucket_is_recovered_from_two_streams_and_the_ping_pong() {
        // 1 Gbit/s (125 MB/s) once spent, 125 kB deep, 10 Gbit/s within, 50 µs latency.
        let (l, r, depth, p) = (50e-6, 125e6, 125e3, 1.25e9);
        let pts = points(l, p);
        let round_trip = 2.0 * pts[0].one_way_s;
        let (m, counts) = counts_for(203_624);
        assert_eq!((m, counts), (203_624, [6, 24]));
        // A spec's own messages up to 4 MiB; smaller ones at least 64 KiB.
        assert_eq!(counts_for(4_000_064), (4_000_064, [1, 4]));
        assert_eq!(counts_for(100 << 20), (4 << 20, [1, 4]));
        assert_eq!(counts_for(1_000), (64 << 10, [16, 64]));
        let times_s = counts.map(|c| round_trip + ((c * m) as f64 - depth) / r);
        let f = fit(&pts, &Streams { message_bytes: m, counts, times_s }, Pattern::Pair).unwrap();
        assert!((f.bandwidth_gbps - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.depth_kb - 125.0).abs() < 1e-6, "{f:?}");
        assert!((f.peak_gbps - 10.0).abs() < 1e-6, "{f:?}");
        assert!((f.latency_us - 50.0).abs() < 1e-6, "{f:?}");
        // Where all pairs at once take 30 µs longer for the smallest message, so does the latency.
        let busy: Vec<PingPong> =
            pts.iter().map(|p| PingPong { concurrent_one_way_s: p.one_way_s + 30e-6, ..p.clone() }).collect();
        let f = fit(&busy, &Streams { message_bytes: m, counts, times_s }, Pattern::Pairs).unwrap();
        assert!((f.latency_us - 80.0).abs() < 1e-6, "{f:?}");
    }

    #[test]
    fn a_link_without_a_bucket_gets_none() {
        // A plain 1 Gbit/s link: streams at the ping-pong's rate, no credit.
        let (l, r) = (50e-6, 125e6);
        let pts = points(l, r);
        let round_trip = 2.0 * pts[0].one_way_s;
        let (m, counts) = counts_for(1 << 20);
        let times_s = counts.map(|c| round_trip + (c * m) as f64 / r);
        assert_eq!(fit(&pts, &Streams { message_bytes: m, counts, times_s }, Pattern::Pair), None);
        // Nor without two distinct times.
        assert_eq!(fit(&pts, &Streams { message_bytes: m, counts, times_s: [0.1, 0.1] }, Pattern::Pair), None);
    }
}
