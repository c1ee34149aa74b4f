//! The engine's configuration as a user writes it: the `network`, `compute` and `faults` sections
//! of an experiment spec, in the user's units (µs, ms, s, Gbit/s) and with their one set of
//! defaults. Each section checks itself ([`NetworkSpec::validate`], [`ComputeSpec::validate`],
//! [`validate_faults`]) and reports a bad value with its path relative to the section (the
//! caller adds the section's name with [`SimError::under`]), then converts itself to the
//! engine's typed configuration ([`NetworkSpec::config`], [`ComputeSpec::config`],
//! [`fault_config`]).
//!
//! The checks include the engine's hard limits: no duration over [`MAX_SECONDS`], none that
//! rounds to 0 ns where time must pass, bandwidths and factors within twelve orders of magnitude.

use crate::compute::{ComputeConfig, Jitter, Slowdown};
use crate::error::{FieldPath, Result, SimError};
use crate::faults::{Fault, FaultConfig, RandomFailures};
use crate::net::{NetMode, NetworkConfig, NicOverride, TokenBucket, Topology, Transport};
use crate::time::{Bandwidth, SimDuration, SimTime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest duration a spec may give, seconds (about 31.7 years; nanoseconds fit in u64).
pub const MAX_SECONDS: f64 = 1e9;
/// Half a nanosecond in seconds: a duration below it rounds to 0 ns.
pub const HALF_NS: f64 = 0.5e-9;
/// Why a duration must not round to 0 ns.
pub const ZERO_NS: &str = "(it would round to 0 ns, and a step that takes no time never lets time pass)";
/// The default retransmission timeout, milliseconds.
pub const DEFAULT_RTO_MS: f64 = 200.0;

fn bad<T>(field: impl Into<FieldPath>, problem: impl Into<String>) -> Result<T> {
    Err(SimError::config(field, problem))
}

/// A number as a person writes it: plain, or in exponent form when very small or large.
pub fn num(x: f64) -> String {
    if x == 0.0 || (1e-4..1e15).contains(&x.abs()) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// `x` is a finite number above zero.
pub fn positive(field: &str, x: f64) -> Result<()> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        bad(field, format!("is {x}; must be a positive number"))
    }
}

/// `x` is a finite number, zero or above.
pub fn non_negative(field: &str, x: f64) -> Result<()> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        bad(field, format!("is {x}; must be zero or a positive number"))
    }
}

/// A duration in seconds that must be at least `min_s` (and at most [`MAX_SECONDS`]).
pub fn duration(field: &str, s: f64, min_s: f64, why: &str) -> Result<()> {
    if s < min_s {
        return bad(field, format!("is {} s; must be at least {} s {why}", num(s), num(min_s)));
    }
    if s > MAX_SECONDS {
        return bad(field, format!("is {} s; must be at most {} s", num(s), num(MAX_SECONDS)));
    }
    Ok(())
}

fn factor(field: &str, f: f64) -> Result<()> {
    positive(field, f)?;
    if !(1e-6..=1e6).contains(&f) {
        return bad(field, format!("is {}; must be between 1e-6 and 1e6", num(f)));
    }
    Ok(())
}

fn gbps(field: &str, b: f64) -> Result<()> {
    positive(field, b)?;
    if !(1e-6..=1e6).contains(&b) {
        return bad(field, format!("is {}; must be between 1e-6 (1 kbit/s) and 1e6 (1 Pbit/s)", num(b)));
    }
    Ok(())
}

/// `[from_s, until_s]` is a window of times.
fn window(from: f64, until: f64) -> Result<()> {
    non_negative("from_s", from)?;
    non_negative("until_s", until)?;
    duration("from_s", from, 0.0, "")?;
    duration("until_s", until, 0.0, "")?;
    if until < from {
        return bad("until_s", format!("({until}) is before from_s ({from})"));
    }
    Ok(())
}

fn rank(field: impl Into<FieldPath>, n: usize, ranks: usize) -> Result<()> {
    if n < ranks {
        return Ok(());
    }
    Err(SimError::RankOutOfRange { field: field.into(), rank: n, ranks })
}

fn secs(x: f64) -> SimTime {
    SimTime::from_secs_f64(x)
}
fn ms(x: f64) -> SimDuration {
    SimDuration::from_secs_f64(x * 1e-3)
}
fn us(x: f64) -> SimDuration {
    SimDuration::from_secs_f64(x * 1e-6)
}

/// The network.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way latency, microseconds (default 10).
    pub latency_us: f64,
    /// NIC bandwidth, gigabits per second (default 10).
    pub bandwidth_gbps: f64,
    /// Ranks whose NIC differs.
    pub per_node: BTreeMap<usize, NicSpec>,
    /// Wiring (default flat).
    pub topology: TopologySpec,
    /// `contention` (default) or `analytic`.
    pub mode: ModeSpec,
    /// What a message lost at random costs: `reliable` (sent again after `rto_ms`, doubling per
    /// loss) or `datagram` (lost is lost). Absent means datagram here; experiment specs make
    /// `reliable` their default for new specs, while a recorded spec without the field was run
    /// before it existed and replays with datagram semantics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<TransportSpec>,
    /// The reliable transport's retransmission timeout, milliseconds (default
    /// [`DEFAULT_RTO_MS`], TCP's minimum on Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rto_ms: Option<f64>,
    /// A token bucket on every link (absent: none, as before it existed, so older specs keep
    /// their form and hash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_bucket: Option<TokenBucketSpec>,
    /// Messages larger than this many kilobytes (1,000 bytes) go by rendezvous: their data leaves
    /// one round trip after the send, when the receiver has answered (MPI's protocol past its
    /// eager limit; Open MPI's TCP transport's is 64 KiB). Absent: every message goes at once,
    /// as before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendezvous_kb: Option<f64>,
}

/// A token bucket shaping every link (each NIC both ways, each rack uplink and downlink), as
/// Linux's `tbf` shapes an emulated NIC or a cloud provider a VM's: tokens accrue at the link's
/// bandwidth up to `depth_kb`; while a link has tokens it sends at `peak_gbps`, and once they
/// are spent, at its bandwidth. A message of S bytes alone on a link with a full bucket of T
/// bytes takes S/P while S ≤ T·P/(P−B), else T/(P−B) + (S − T·P/(P−B))/B, which is (S − T)/B.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBucketSpec {
    /// The bucket's depth, kilobytes (1,000 bytes).
    pub depth_kb: f64,
    /// The rate while tokens last, gigabits per second: above every link's bandwidth.
    pub peak_gbps: f64,
}

impl Default for NetworkSpec {
    fn default() -> Self {
        NetworkSpec {
            latency_us: 10.0,
            bandwidth_gbps: 10.0,
            per_node: BTreeMap::new(),
            topology: TopologySpec::Flat,
            mode: ModeSpec::Contention,
            transport: None,
            rto_ms: None,
            token_bucket: None,
            rendezvous_kb: None,
        }
    }
}

/// What a message lost at random costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportSpec {
    /// Sent again after a retransmission timeout: loss costs time, as on TCP.
    Reliable,
    /// Lost is lost.
    Datagram,
}

/// A NIC override.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicSpec {
    /// Latency, microseconds.
    pub latency_us: Option<f64>,
    /// Bandwidth, gigabits per second.
    pub bandwidth_gbps: Option<f64>,
}

/// Wiring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TopologySpec {
    /// One non-blocking switch.
    #[default]
    Flat,
    /// Racks joined by an oversubscribed core.
    Racks {
        /// Ranks per rack.
        rack_size: usize,
        /// Uplink bandwidth of a rack, gigabits per second.
        uplink_gbps: f64,
        /// Extra latency across the core, microseconds (default 0).
        #[serde(default)]
        core_latency_us: f64,
    },
}

impl TopologySpec {
    /// The racks' uplink bandwidth, for a racks topology.
    pub fn uplink_gbps(&self) -> Option<f64> {
        match *self {
            TopologySpec::Racks { uplink_gbps, .. } => Some(uplink_gbps),
            TopologySpec::Flat => None,
        }
    }

    /// Ranks per rack, for a racks topology.
    pub fn rack_size(&self) -> Option<usize> {
        match *self {
            TopologySpec::Racks { rack_size, .. } => Some(rack_size),
            TopologySpec::Flat => None,
        }
    }
}

/// Transfer model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModeSpec {
    /// FIFO links with queueing.
    #[default]
    Contention,
    /// latency + S/B, no queueing.
    Analytic,
}

impl NetworkSpec {
    /// Checks every value for a cluster of `ranks` nodes; paths are relative to the section.
    pub fn validate(&self, ranks: usize) -> Result<()> {
        non_negative("latency_us", self.latency_us)?;
        duration("latency_us", self.latency_us / 1e6, 0.0, "")?;
        gbps("bandwidth_gbps", self.bandwidth_gbps)?;
        if let Some(rto) = self.rto_ms {
            positive("rto_ms", rto)?;
            duration("rto_ms", rto / 1e3, 1e-3, "(1 ms)")?;
        }
        for (&n, o) in &self.per_node {
            let field = format!("per_node.{n}");
            rank(&field, n, ranks)?;
            if let Some(l) = o.latency_us {
                non_negative(&format!("{field}.latency_us"), l)?;
                duration(&format!("{field}.latency_us"), l / 1e6, 0.0, "")?;
            }
            if let Some(b) = o.bandwidth_gbps {
                gbps(&format!("{field}.bandwidth_gbps"), b)?;
            }
        }
        if let TopologySpec::Racks { rack_size, uplink_gbps, core_latency_us } = self.topology {
            if rack_size == 0 {
                return bad("topology.rack_size", "must be at least 1");
            }
            gbps("topology.uplink_gbps", uplink_gbps)?;
            non_negative("topology.core_latency_us", core_latency_us)?;
            duration("topology.core_latency_us", core_latency_us / 1e6, 0.0, "")?;
        }
        if let Some(b) = self.token_bucket {
            self.check_bucket(b)?;
        }
        if let Some(kb) = self.rendezvous_kb {
            non_negative("rendezvous_kb", kb)?;
            if kb > 1e9 {
                return bad("rendezvous_kb", format!("is {}; must be at most 1e9 (a terabyte)", num(kb)));
            }
        }
        Ok(())
    }

    /// The token bucket: a depth of at least a byte, and a peak above every link's bandwidth,
    /// on the contention model (the analytic one keeps no link state).
    fn check_bucket(&self, b: TokenBucketSpec) -> Result<()> {
        positive("token_bucket.depth_kb", b.depth_kb)?;
        if !(1e-3..=1e9).contains(&b.depth_kb) {
            return bad(
                "token_bucket.depth_kb",
                format!("is {}; must be between 1e-3 (a byte) and 1e9 (a terabyte)", num(b.depth_kb)),
            );
        }
        gbps("token_bucket.peak_gbps", b.peak_gbps)?;
        let links = [Some(self.bandwidth_gbps), self.topology.uplink_gbps()];
        let fastest = links.into_iter().flatten().chain(self.per_node.values().filter_map(|o| o.bandwidth_gbps));
        if let Some(top) = fastest.filter(|&l| l >= b.peak_gbps).reduce(f64::max) {
            return bad(
                "token_bucket.peak_gbps",
                format!(
                    "is {}; must be above every link's bandwidth, and a link has {} Gbit/s",
                    num(b.peak_gbps),
                    num(top)
                ),
            );
        }
        if self.mode == ModeSpec::Analytic {
            return bad(
                "token_bucket",
                "needs mode `contention`: the analytic model keeps no link state to hold tokens",
            );
        }
        Ok(())
    }

    /// The engine's network configuration.
    pub fn config(&self) -> NetworkConfig {
        NetworkConfig {
            transport: match self.transport {
                Some(TransportSpec::Reliable) => Transport::Reliable { rto: ms(self.rto_ms.unwrap_or(DEFAULT_RTO_MS)) },
                Some(TransportSpec::Datagram) | None => Transport::Datagram,
            },
            latency: us(self.latency_us),
            bandwidth: Bandwidth::from_gbps(self.bandwidth_gbps),
            per_node: self
                .per_node
                .iter()
                .map(|(&n, o)| {
                    let nic = NicOverride {
                        latency: o.latency_us.map(us),
                        bandwidth: o.bandwidth_gbps.map(Bandwidth::from_gbps),
                    };
                    (n, nic)
                })
                .collect(),
            topology: match self.topology {
                TopologySpec::Flat => Topology::Flat,
                TopologySpec::Racks { rack_size, uplink_gbps, core_latency_us } => Topology::Racks {
                    rack_size,
                    uplink: Bandwidth::from_gbps(uplink_gbps),
                    core_latency: us(core_latency_us),
                },
            },
            mode: match self.mode {
                ModeSpec::Contention => NetMode::Contention,
                ModeSpec::Analytic => NetMode::Analytic,
            },
            token_bucket: self.token_bucket.map(|b| TokenBucket {
                depth_bytes: (b.depth_kb * 1e3).round() as u64,
                peak: Bandwidth::from_gbps(b.peak_gbps),
            }),
            rendezvous_bytes: self.rendezvous_kb.map(|kb| (kb * 1e3).round() as u64),
        }
    }
}

/// Step times and stragglers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ComputeSpec {
    /// Where step durations come from: `model` (default) or `measured` by the caller.
    pub gradient_time: StepTimes,
    /// Time of one step on one node, milliseconds (default 100).
    pub step_time_ms: f64,
    /// Nodes whose step time differs, by rank (heterogeneous clusters).
    pub per_node_step_time_ms: BTreeMap<usize, f64>,
    /// Stragglers.
    pub straggler: StragglerSpec,
    /// Host time a worker spends on each message it receives before it can act on it (decode,
    /// copies: LogP's receive overhead), microseconds; messages wait their turn, first come,
    /// first served. Default 0 (a message is seen as it arrives), left out of a resolved spec
    /// then, so older specs keep their form and hash. `dsgd validate` sets it from what real
    /// workers measured.
    #[serde(skip_serializing_if = "is_zero")]
    pub receive_time_us: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Default for ComputeSpec {
    fn default() -> Self {
        ComputeSpec {
            gradient_time: StepTimes::Model,
            step_time_ms: 100.0,
            per_node_step_time_ms: BTreeMap::new(),
            straggler: StragglerSpec::default(),
            receive_time_us: 0.0,
        }
    }
}

/// The source of step durations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepTimes {
    /// The compute model: `step_time_ms`, per-node times and jitter (deterministic).
    #[default]
    Model,
    /// Each step's duration as the caller measured it (for real gradients: their wall time on
    /// this machine, recorded so a replay reproduces the run). Stragglers still multiply it;
    /// jitter and step times are not used.
    Measured,
}

/// Stragglers: jitter on every step, persistently slow nodes, temporary slowdowns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StragglerSpec {
    /// Jitter distribution (default none).
    pub jitter: Jitter,
    /// Rank -> factor, e.g. `{"3": 10}` for a 10x straggler.
    pub slow_nodes: BTreeMap<usize, f64>,
    /// Temporary slowdowns.
    pub slowdowns: Vec<SlowdownSpec>,
}

/// A temporary slowdown.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlowdownSpec {
    /// Rank, or absent for every rank.
    #[serde(default)]
    pub node: Option<usize>,
    /// Start, seconds.
    pub from_s: f64,
    /// End, seconds.
    pub until_s: f64,
    /// Factor on steps that start inside the window.
    pub factor: f64,
}

impl ComputeSpec {
    /// Checks every value for a cluster of `ranks` nodes; paths are relative to the section.
    pub fn validate(&self, ranks: usize) -> Result<()> {
        positive("step_time_ms", self.step_time_ms)?;
        duration("step_time_ms", self.step_time_ms / 1e3, HALF_NS, ZERO_NS)?;
        for (&n, &t) in &self.per_node_step_time_ms {
            let field = format!("per_node_step_time_ms.{n}");
            rank(&field, n, ranks)?;
            positive(&field, t)?;
            duration(&field, t / 1e3, HALF_NS, ZERO_NS)?;
        }
        non_negative("receive_time_us", self.receive_time_us)?;
        duration("receive_time_us", self.receive_time_us / 1e6, 0.0, "")?;
        self.straggler.validate(ranks).map_err(|e| e.under("straggler"))
    }

    /// The engine's compute configuration.
    pub fn config(&self) -> ComputeConfig {
        let st = &self.straggler;
        ComputeConfig {
            base: ms(self.step_time_ms),
            per_node_base: self.per_node_step_time_ms.iter().map(|(&n, &t)| (n, ms(t))).collect(),
            jitter: st.jitter,
            slow_nodes: st.slow_nodes.clone(),
            slowdowns: st
                .slowdowns
                .iter()
                .map(|s| Slowdown { node: s.node, from: secs(s.from_s), until: secs(s.until_s), factor: s.factor })
                .collect(),
            receive: us(self.receive_time_us),
            receive_nodes: usize::MAX,
        }
    }
}

impl StragglerSpec {
    fn validate(&self, ranks: usize) -> Result<()> {
        match self.jitter {
            Jitter::None => {}
            Jitter::Exponential { mean } => {
                non_negative("jitter.mean", mean)?;
                if mean > 1e3 {
                    return bad("jitter.mean", format!("is {mean}; must be at most 1000"));
                }
            }
            Jitter::LogNormal { sigma } => {
                non_negative("jitter.sigma", sigma)?;
                if sigma > 3.0 {
                    let why = "must be at most 3 (a factor of e^12 at four standard deviations)";
                    return bad("jitter.sigma", format!("is {sigma}; {why}"));
                }
            }
            Jitter::Pareto { alpha } => {
                positive("jitter.alpha", alpha)?;
                if alpha < 1.0 {
                    let why = "must be at least 1 (below 1 the mean step time is infinite)";
                    return bad("jitter.alpha", format!("is {alpha}; {why}"));
                }
            }
        }
        for (&n, &f) in &self.slow_nodes {
            let field = format!("slow_nodes.{n}");
            rank(&field, n, ranks)?;
            factor(&field, f)?;
        }
        for (i, s) in self.slowdowns.iter().enumerate() {
            let field = format!("slowdowns[{i}]");
            if let Some(n) = s.node {
                rank(format!("{field}.node"), n, ranks)?;
            }
            window(s.from_s, s.until_s).map_err(|e| e.under(&field))?;
            factor(&format!("{field}.factor"), s.factor)?;
        }
        Ok(())
    }
}

/// One fault.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    /// A rank crashes.
    Crash {
        /// Rank.
        node: usize,
        /// When, seconds.
        at_s: f64,
    },
    /// A crashed rank restarts.
    Restart {
        /// Rank.
        node: usize,
        /// When, seconds.
        at_s: f64,
    },
    /// A rank's NIC slows down over a window.
    NicDegrade {
        /// Rank.
        node: usize,
        /// Start, seconds.
        from_s: f64,
        /// End, seconds.
        until_s: f64,
        /// Bandwidth factor.
        factor: f64,
    },
    /// The network splits into groups over a window.
    Partition {
        /// Start, seconds.
        from_s: f64,
        /// End, seconds.
        until_s: f64,
        /// Groups of ranks; unlisted ranks form one more group.
        groups: Vec<Vec<usize>>,
    },
    /// Random message loss over a window.
    MessageLoss {
        /// Start, seconds.
        from_s: f64,
        /// End, seconds.
        until_s: f64,
        /// Loss probability.
        probability: f64,
    },
    /// Random crashes and repairs.
    Random {
        /// Mean time between failures per rank, seconds.
        mtbf_s: f64,
        /// Mean time to repair, seconds.
        mttr_s: f64,
        /// The ranks that fail (default all).
        #[serde(default)]
        nodes: Vec<usize>,
    },
}

impl FaultSpec {
    /// Checks one fault for a cluster of `ranks` nodes; paths are relative to the fault.
    pub fn validate(&self, ranks: usize) -> Result<()> {
        match self {
            FaultSpec::Crash { node, at_s } | FaultSpec::Restart { node, at_s } => {
                rank("node", *node, ranks)?;
                non_negative("at_s", *at_s)?;
                duration("at_s", *at_s, 0.0, "")?;
            }
            FaultSpec::NicDegrade { node, from_s, until_s, factor: f } => {
                rank("node", *node, ranks)?;
                window(*from_s, *until_s)?;
                factor("factor", *f)?;
            }
            FaultSpec::Partition { from_s, until_s, groups } => {
                window(*from_s, *until_s)?;
                let mut seen = std::collections::BTreeSet::new();
                for (g, members) in groups.iter().enumerate() {
                    for &n in members {
                        rank(format!("groups[{g}]"), n, ranks)?;
                        if !seen.insert(n) {
                            return bad(format!("groups[{g}]"), format!("rank {n} is in more than one group"));
                        }
                    }
                }
            }
            FaultSpec::MessageLoss { from_s, until_s, probability } => {
                window(*from_s, *until_s)?;
                if !(0.0..=1.0).contains(probability) {
                    return bad("probability", format!("is {probability}; must be in [0, 1]"));
                }
            }
            FaultSpec::Random { mtbf_s, mttr_s, nodes } => {
                positive("mtbf_s", *mtbf_s)?;
                positive("mttr_s", *mttr_s)?;
                duration("mtbf_s", *mtbf_s, 1e-3, "")?;
                duration("mttr_s", *mttr_s, 1e-3, "")?;
                for &n in nodes {
                    rank("nodes", n, ranks)?;
                }
            }
        }
        Ok(())
    }
}

/// Checks a list of faults (paths `[i].field`); at most one may be `random`.
pub fn validate_faults(faults: &[FaultSpec], ranks: usize) -> Result<()> {
    for (i, f) in faults.iter().enumerate() {
        f.validate(ranks).map_err(|e| e.under(&format!("[{i}]")))?;
    }
    if faults.iter().filter(|f| matches!(f, FaultSpec::Random { .. })).count() > 1 {
        return bad("", "at most one `random` entry is allowed");
    }
    Ok(())
}

/// The engine's fault configuration of a list of faults.
pub fn fault_config(faults: &[FaultSpec]) -> FaultConfig {
    let mut config = FaultConfig::default();
    for f in faults {
        let fault = match f {
            FaultSpec::Crash { node, at_s } => Fault::Crash { node: *node, at: secs(*at_s) },
            FaultSpec::Restart { node, at_s } => Fault::Restart { node: *node, at: secs(*at_s) },
            FaultSpec::NicDegrade { node, from_s, until_s, factor } => {
                Fault::NicDegrade { node: *node, from: secs(*from_s), until: secs(*until_s), factor: *factor }
            }
            FaultSpec::Partition { from_s, until_s, groups } => {
                Fault::Partition { from: secs(*from_s), until: secs(*until_s), groups: groups.clone() }
            }
            FaultSpec::MessageLoss { from_s, until_s, probability } => {
                Fault::MessageLoss { from: secs(*from_s), until: secs(*until_s), probability: *probability }
            }
            FaultSpec::Random { mtbf_s, mttr_s, nodes } => {
                config.random = Some(RandomFailures {
                    mtbf: SimDuration::from_secs_f64(*mtbf_s),
                    mttr: SimDuration::from_secs_f64(*mttr_s),
                    nodes: nodes.clone(),
                });
                continue;
            }
        };
        config.schedule.push(fault);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(r: Result<()>) -> String {
        match r.map_err(SimError::into_field_problem) {
            Err(Ok((field, problem))) => format!("{field}: {problem}"),
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn sections_name_their_fields_relative_to_themselves() {
        let net = NetworkSpec { bandwidth_gbps: 0.0, ..Default::default() };
        assert_eq!(field(net.validate(4)), "bandwidth_gbps: is 0; must be a positive number");
        let mut net = NetworkSpec::default();
        net.per_node.insert(4, NicSpec::default());
        assert_eq!(field(net.validate(4)), "per_node.4: names rank 4, but the run has ranks 0..4");
        let mut compute = ComputeSpec::default();
        compute.straggler.slowdowns.push(SlowdownSpec { node: None, from_s: 2.0, until_s: 1.0, factor: 2.0 });
        assert_eq!(
            field(compute.validate(4).map_err(|e| e.under("compute"))),
            "compute.straggler.slowdowns[0].until_s: (1) is before from_s (2)"
        );
        let faults = [FaultSpec::Crash { node: 0, at_s: 1.0 }, FaultSpec::Crash { node: 0, at_s: -1.0 }];
        assert_eq!(
            field(validate_faults(&faults, 4).map_err(|e| e.under("faults"))),
            "faults[1].at_s: is -1; must be zero or a positive number"
        );
        let two = vec![FaultSpec::Random { mtbf_s: 1.0, mttr_s: 1.0, nodes: vec![] }; 2];
        assert_eq!(
            field(validate_faults(&two, 4).map_err(|e| e.under("faults"))),
            "faults: at most one `random` entry is allowed"
        );
    }

    #[test]
    fn a_rendezvous_limit_is_checked_and_becomes_the_engines_bytes() {
        let net = |kb| NetworkSpec { rendezvous_kb: Some(kb), ..Default::default() };
        assert!(net(65.536).validate(4).is_ok());
        assert_eq!(net(65.536).config().rendezvous_bytes, Some(65_536));
        assert_eq!(NetworkSpec::default().config().rendezvous_bytes, None);
        assert_eq!(field(net(-1.0).validate(4)), "rendezvous_kb: is -1; must be zero or a positive number");
        assert_eq!(field(net(2e9).validate(4)), "rendezvous_kb: is 2000000000; must be at most 1e9 (a terabyte)");
        assert!(!serde_json::to_string(&NetworkSpec::default()).unwrap().contains("rendezvous"));
    }

    #[test]
    fn a_token_bucket_is_checked_and_becomes_the_engines_bytes_and_rate() {
        let bucket = |depth_kb, peak_gbps| NetworkSpec {
            bandwidth_gbps: 1.0,
            token_bucket: Some(TokenBucketSpec { depth_kb, peak_gbps }),
            ..Default::default()
        };
        let ok = bucket(125.0, 10.0);
        assert!(ok.validate(4).is_ok());
        assert_eq!(
            ok.config().token_bucket,
            Some(TokenBucket { depth_bytes: 125_000, peak: Bandwidth::from_gbps(10.0) })
        );
        assert_eq!(NetworkSpec::default().config().token_bucket, None);
        assert_eq!(field(bucket(0.0, 10.0).validate(4)), "token_bucket.depth_kb: is 0; must be a positive number");
        assert_eq!(
            field(bucket(125.0, 1.0).validate(4)),
            "token_bucket.peak_gbps: is 1; must be above every link's bandwidth, and a link has 1 Gbit/s"
        );
        let mut fast = bucket(125.0, 10.0);
        fast.per_node.insert(2, NicSpec { latency_us: None, bandwidth_gbps: Some(40.0) });
        assert_eq!(
            field(fast.validate(4)),
            "token_bucket.peak_gbps: is 10; must be above every link's bandwidth, and a link has 40 Gbit/s"
        );
        let analytic = NetworkSpec { mode: ModeSpec::Analytic, ..bucket(125.0, 10.0) };
        assert_eq!(
            field(analytic.validate(4)),
            "token_bucket: needs mode `contention`: the analytic model keeps no link state to hold tokens"
        );
        // Left out of a spec without one, so that older specs keep their form and hash.
        assert!(!serde_json::to_string(&NetworkSpec::default()).unwrap().contains("token_bucket"));
    }

    #[test]
    fn the_defaults_are_the_engines_units_of_the_documented_values() {
        let net = NetworkSpec::default().config();
        assert_eq!(net.latency, SimDuration(10_000));
        assert_eq!(net.bandwidth, Bandwidth::from_gbps(10.0));
        assert_eq!(net.transport, Transport::Datagram);
        let reliable = NetworkSpec { transport: Some(TransportSpec::Reliable), ..Default::default() }.config();
        assert_eq!(reliable.transport, Transport::Reliable { rto: SimDuration::from_millis(200) });
        assert_eq!(ComputeSpec::default().config(), ComputeConfig::default());
        let spec: NetworkSpec =
            serde_json::from_str(r#"{"topology": {"kind": "racks", "rack_size": 4, "uplink_gbps": 40}}"#)
                .expect("parses");
        assert_eq!(
            spec.config().topology,
            Topology::Racks { rack_size: 4, uplink: Bandwidth::from_gbps(40.0), core_latency: SimDuration::ZERO }
        );
    }
}
