//! The network: NICs, topologies and the two transfer models (contended FIFO links, analytic).
//!
//! Every node has a full-duplex NIC: an egress link and an ingress link, each a FIFO queue at the
//! node's bandwidth, optionally shaped by a token bucket ([`TokenBucket`]). A message's path is a list of links (see [`flat`] and [`racks`]); the
//! [`contention`] model moves it through them cut-through, the [`analytic`] model charges
//! `latency + S/B` and ignores other traffic. This module owns link state only: it never touches
//! the event queue; the engine schedules the times it returns.

pub mod analytic;
pub mod contention;
pub mod flat;
pub mod racks;

use crate::error::{Result, SimError};
use crate::time::{Bandwidth, SimDuration, SimTime};
use std::collections::BTreeMap;

/// How nodes are wired.
#[derive(Clone, Debug, PartialEq)]
pub enum Topology {
    /// Every node on one non-blocking switch.
    Flat,
    /// Racks of `rack_size` consecutive nodes; each rack reaches the core through one uplink and
    /// one downlink of `uplink` bandwidth (oversubscription = rack_size·B / uplink), and crossing
    /// the core adds `core_latency`.
    Racks {
        /// Nodes per rack (the last rack may be smaller).
        rack_size: usize,
        /// Bandwidth of each rack's uplink and of its downlink.
        uplink: Bandwidth,
        /// Extra one-way latency of a message that crosses the core.
        core_latency: SimDuration,
    },
}

/// Which transfer model to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetMode {
    /// FIFO links with queueing (the default).
    Contention,
    /// Contention-free: every message takes latency + S/B, whatever else is in flight.
    Analytic,
}

/// What happens to a message lost at random (`message_loss` faults).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Lost is lost: the receiver never sees it (UDP-like).
    Datagram,
    /// The sender sends it again `rto` after the lost attempt was sent, doubling the wait at each
    /// further loss (at most 64 × `rto`), as TCP or RDMA reliable connections do: loss costs time
    /// and bandwidth, not the message. Losses to partitions and crashes stay losses.
    Reliable {
        /// The retransmission timeout.
        rto: SimDuration,
    },
}

/// Per-node overrides of the NIC.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NicOverride {
    /// This node's one-way latency instead of the default.
    pub latency: Option<SimDuration>,
    /// This node's NIC bandwidth (both directions) instead of the default.
    pub bandwidth: Option<Bandwidth>,
}

/// The network's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct NetworkConfig {
    /// One-way latency of a message (a message pays the larger of its two ends' latencies).
    pub latency: SimDuration,
    /// NIC bandwidth of every node, in each direction.
    pub bandwidth: Bandwidth,
    /// Nodes whose NIC differs from the default.
    pub per_node: BTreeMap<usize, NicOverride>,
    /// The wiring.
    pub topology: Topology,
    /// The transfer model.
    pub mode: NetMode,
    /// What happens to messages lost at random (default [`Transport::Datagram`]).
    pub transport: Transport,
    /// A token bucket on every link (default none).
    pub token_bucket: Option<TokenBucket>,
    /// Messages larger than this many bytes are sent by rendezvous (default none: every
    /// message eagerly): their data leaves one round trip after the send, once the receiver has
    /// answered the sender's request, as MPI sends messages past its eager limit (LogGPS's S).
    pub rendezvous_bytes: Option<u64>,
}

/// A token bucket on a link: tokens accrue at the link's bandwidth up to `depth_bytes`; while
/// there are tokens the link sends at `peak`, then at its bandwidth. A link starts full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenBucket {
    /// The bucket's depth, bytes.
    pub depth_bytes: u64,
    /// The rate while tokens last (above the link's bandwidth).
    pub peak: Bandwidth,
}

/// A link's token bucket and its tokens.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    depth: f64,
    /// The peak rate, nominal and now (scaled with the link's bandwidth when degraded).
    peak_base: Bandwidth,
    peak: Bandwidth,
    /// Tokens (bytes) at `at`.
    tokens: f64,
    at: SimTime,
}

impl Bucket {
    /// Tokens at `t` (after `at`), refilled at `rate` bytes a nanosecond.
    fn tokens_at(&self, t: SimTime, rate: f64) -> f64 {
        (self.tokens + rate * t.saturating_since(self.at).0 as f64).min(self.depth)
    }

    /// How long `bytes` take from `start`, at the peak while tokens last, then at `bandwidth`.
    fn duration(&self, start: SimTime, bytes: u64, bandwidth: Bandwidth) -> SimDuration {
        let (r, p) = (bytes_per_ns(bandwidth), bytes_per_ns(self.peak));
        if p <= r {
            return bandwidth.transfer_time(bytes);
        }
        let t = self.tokens_at(start, r);
        let b = bytes as f64;
        // Bytes sent at the peak before the tokens run out, refilling meanwhile.
        let at_peak = t * p / (p - r);
        let ns = if b <= at_peak { b / p } else { t / (p - r) + (b - at_peak) / r };
        SimDuration(ns.round() as u64)
    }

    /// Spends the tokens of `bytes` sent from `start` until `tail`.
    fn spend(&mut self, start: SimTime, tail: SimTime, bytes: u64, bandwidth: Bandwidth) {
        let r = bytes_per_ns(bandwidth);
        let t = self.tokens_at(start, r);
        self.tokens = (t + r * tail.saturating_since(start).0 as f64 - bytes as f64).clamp(0.0, self.depth);
        self.at = tail;
    }
}

fn bytes_per_ns(b: Bandwidth) -> f64 {
    b.bytes_per_sec() / 1e9
}

impl Default for NetworkConfig {
    /// 10 µs latency, 10 Gb/s, flat, contention model.
    fn default() -> Self {
        NetworkConfig {
            latency: SimDuration::from_micros(10),
            bandwidth: Bandwidth::from_gbps(10.0),
            per_node: BTreeMap::new(),
            topology: Topology::Flat,
            mode: NetMode::Contention,
            transport: Transport::Datagram,
            token_bucket: None,
            rendezvous_bytes: None,
        }
    }
}

/// Index of a link in [`Network`]'s link table.
pub type LinkId = u32;

/// One FIFO link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    /// Nominal bandwidth.
    pub base: Bandwidth,
    /// Current bandwidth (nominal times any degradation factor).
    pub now: Bandwidth,
    /// When the last reserved transfer's tail leaves this link.
    pub free_at: SimTime,
    /// The last two transfer times computed here, and for what (bytes, bit/s), the latest first:
    /// messages of one or two sizes follow each other on a link (a ring's chunks of a vector
    /// that the members do not divide evenly), and the division costs more than the rest of a
    /// reservation.
    memo: [(u64, u64, SimDuration); 2],
}

impl Link {
    fn new(b: Bandwidth) -> Self {
        Link { base: b, now: b, free_at: SimTime::ZERO, memo: [(u64::MAX, 0, SimDuration::ZERO); 2] }
    }

    /// [`Bandwidth::transfer_time`] of `bytes` at the current bandwidth.
    #[inline]
    fn transfer_time(&mut self, bytes: u64) -> SimDuration {
        let key = (bytes, self.now.0);
        if (self.memo[0].0, self.memo[0].1) == key {
            return self.memo[0].2;
        }
        if (self.memo[1].0, self.memo[1].1) != key {
            self.memo[1] = (bytes, self.now.0, self.now.transfer_time(bytes));
        }
        self.memo.swap(0, 1);
        self.memo[0].2
    }
}

/// Where a message stands on its path (contention model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Index of the next link on the path.
    pub hop: u8,
    /// When the message's last byte left the previous link.
    pub tail: SimTime,
}

/// What the engine must do next with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Process the message's head at the next link at this time.
    Hop(SimTime, Progress),
    /// Deliver the message (its last byte arrived) at this time.
    Deliver(SimTime),
}

/// The network's state: link reservations and per-node latencies.
pub struct Network {
    mode: NetMode,
    topology: Topology,
    latency: Vec<SimDuration>,
    min_latency: SimDuration,
    links: Vec<Link>,
    /// Heads scheduled to reach each link (events not yet processed).
    pending: Vec<u32>,
    /// Each link's token bucket, when the links have one.
    buckets: Vec<Bucket>,
    rendezvous_bytes: Option<u64>,
    nodes: usize,
}

impl Network {
    /// Builds the network for `nodes` nodes, validating the configuration.
    pub fn new(cfg: &NetworkConfig, nodes: usize) -> Result<Self> {
        if cfg.bandwidth.0 == 0 {
            return Err(SimError::config("network.bandwidth", "must be positive"));
        }
        let mut latency = vec![cfg.latency; nodes];
        let mut nic = vec![cfg.bandwidth; nodes];
        for (&n, o) in &cfg.per_node {
            if n >= nodes {
                return Err(SimError::config(
                    format!("network.per_node.{n}"),
                    format!("names node {n}, but the cluster has nodes 0..{nodes}"),
                ));
            }
            if let Some(l) = o.latency {
                latency[n] = l;
            }
            if let Some(b) = o.bandwidth {
                if b.0 == 0 {
                    return Err(SimError::config(format!("network.per_node.{n}.bandwidth"), "must be positive"));
                }
                nic[n] = b;
            }
        }
        let mut links: Vec<Link> = nic.iter().flat_map(|&b| [b, b]).map(Link::new).collect();
        if let Topology::Racks { rack_size, uplink, .. } = cfg.topology {
            if rack_size == 0 {
                return Err(SimError::config("network.topology.rack_size", "must be at least 1"));
            }
            if uplink.0 == 0 {
                return Err(SimError::config("network.topology.uplink", "must be positive"));
            }
            let racks = nodes.div_ceil(rack_size);
            links.extend((0..2 * racks).map(|_| Link::new(uplink)));
        }
        let min_latency = latency.iter().copied().min().unwrap_or(SimDuration::ZERO);
        let pending = vec![0; links.len()];
        let buckets = match cfg.token_bucket {
            Some(b) => {
                let depth = b.depth_bytes as f64;
                let full = Bucket { depth, peak_base: b.peak, peak: b.peak, tokens: depth, at: SimTime::ZERO };
                vec![full; links.len()]
            }
            None => Vec::new(),
        };
        Ok(Network {
            mode: cfg.mode,
            topology: cfg.topology.clone(),
            latency,
            min_latency,
            links,
            pending,
            buckets,
            rendezvous_bytes: cfg.rendezvous_bytes,
            nodes,
        })
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Prefetches node `node`'s latency and its NIC's two links.
    #[inline]
    pub(crate) fn prefetch(&self, node: usize) {
        if let Some(l) = self.latency.get(node) {
            crate::prefetch::lines(l, 1);
        }
        if let Some(l) = self.links.get(2 * node..2 * node + 2) {
            crate::prefetch::lines(l, 3);
        }
    }

    /// The links a message from `from` to `to` crosses, in order.
    pub fn path(&self, from: usize, to: usize) -> ([LinkId; 4], usize) {
        match self.topology {
            Topology::Flat => flat::path(from, to),
            Topology::Racks { rack_size, .. } => racks::path(self.nodes, rack_size, from, to),
        }
    }

    /// One-way latency from `from` to `to`.
    pub fn latency(&self, from: usize, to: usize) -> SimDuration {
        let base = self.latency[from].max(self.latency[to]);
        match self.topology {
            Topology::Flat => base,
            Topology::Racks { rack_size, core_latency, .. } => {
                if from / rack_size == to / rack_size {
                    base
                } else {
                    base + core_latency
                }
            }
        }
    }

    /// How long a message of `bytes` from `from` to `to` waits before its data leaves: a round
    /// trip where it goes by rendezvous, else nothing.
    pub fn handshake(&self, from: usize, to: usize, bytes: u64) -> SimDuration {
        match self.rendezvous_bytes {
            Some(limit) if bytes > limit => SimDuration(2 * self.latency(from, to).0),
            _ => SimDuration::ZERO,
        }
    }

    /// Starts a message of `bytes` from `from` to `to` at `now`: reserves what can be reserved
    /// now and says what comes next.
    pub fn begin(&mut self, now: SimTime, from: usize, to: usize, bytes: u64) -> Next {
        match self.mode {
            NetMode::Analytic => analytic::arrival(self, now, from, to, bytes),
            NetMode::Contention => contention::begin(self, now, from, to, bytes),
        }
    }

    /// Moves a message's head through the link it has reached at `now`.
    pub fn advance(&mut self, now: SimTime, from: usize, to: usize, bytes: u64, p: Progress) -> Next {
        contention::advance(self, now, from, to, bytes, p)
    }

    /// Scales the current bandwidth of a node's NIC (both directions) to `factor` of nominal
    /// (and a token bucket's peak with it). Transfers already reserved keep their times; later
    /// ones see the new speed.
    pub fn set_nic_factor(&mut self, node: usize, factor: f64) {
        for l in [2 * node, 2 * node + 1] {
            let link = &mut self.links[l];
            link.now = link.base.scaled(factor);
            if let Some(b) = self.buckets.get_mut(l) {
                b.peak = b.peak_base.scaled(factor);
            }
        }
    }

    /// Reserves link `id` for `bytes` whose head reaches it at `head` (it starts when the link is
    /// free) and whose tail left the link before at `upstream_tail`: the link's transfer time
    /// (through its token bucket, if it has one), no earlier than the upstream tail. Returns
    /// (start, tail).
    pub(crate) fn occupy(
        &mut self,
        id: LinkId,
        head: SimTime,
        bytes: u64,
        upstream_tail: SimTime,
    ) -> (SimTime, SimTime) {
        let link = &mut self.links[id as usize];
        let start = head.max(link.free_at);
        let Some(bucket) = self.buckets.get_mut(id as usize) else {
            let tail = (start + link.transfer_time(bytes)).max(upstream_tail);
            link.free_at = tail;
            return (start, tail);
        };
        let tail = (start + bucket.duration(start, bytes, link.now)).max(upstream_tail);
        bucket.spend(start, tail, bytes, link.now);
        link.free_at = tail;
        (start, tail)
    }

    pub(crate) fn min_latency(&self) -> SimDuration {
        self.min_latency
    }
    pub(crate) fn pending(&self, id: LinkId) -> u32 {
        self.pending[id as usize]
    }
    pub(crate) fn pending_mut(&mut self, id: LinkId) -> &mut u32 {
        &mut self.pending[id as usize]
    }
    pub(crate) fn link(&self, id: LinkId) -> &Link {
        &self.links[id as usize]
    }
}

/// Link id of node `n`'s egress.
pub(crate) fn egress(n: usize) -> LinkId {
    (2 * n) as LinkId
}
/// Link id of node `n`'s ingress.
pub(crate) fn ingress(n: usize) -> LinkId {
    (2 * n + 1) as LinkId
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_links_remembered_transfer_times_are_the_computed_ones() {
        let mut link = Link::new(Bandwidth::from_gbps(10.0));
        for (i, bytes) in [467_580u64, 467_584, 467_580, 467_584, 1, 467_584, 0, 3, 3, 467_580].into_iter().enumerate()
        {
            if i == 6 {
                link.now = link.base.scaled(0.5); // a degraded NIC: what was remembered is stale
            }
            assert_eq!(link.transfer_time(bytes), link.now.transfer_time(bytes), "message {i}, {bytes} B");
        }
    }
}
