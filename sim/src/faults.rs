//! Faults as data: a schedule of crashes, restarts, NIC degradations, partitions and message-loss
//! windows, plus a seeded generator of random crash/repair cycles.
//!
//! Semantics, fixed here so the engine and its tests agree:
//! - **Crash** is fail-stop: the node's pending timers and computations are discarded, and every
//!   message it sent or was sent that is still in flight is lost (also one that arrives after a
//!   restart: the restarted node is a new incarnation).
//! - **Restart** brings a crashed node back with a new incarnation (the runtime decides its state).
//! - **NIC degradation** scales a node's NIC bandwidth by `factor` over a window; transfers already
//!   reserved on a link keep their times.
//! - **Partition**: nodes are split into the listed groups (unlisted nodes form one more group); a
//!   message between groups is lost if its flight `[sent, delivered]` overlaps `[from, until)`.
//! - **Message loss**: a message sent inside `[from, until)` is lost with `probability`, drawn from
//!   the stream `("net.loss", 0)` (only while some loss window is open, so loss-free runs draw nothing).
//! - **Random failures**: each listed node crashes after `Exp(mtbf)` of uptime and is repaired after
//!   `Exp(mttr)`, drawn from its own stream `("faults", node)`.

use crate::error::{Result, SimError};
use crate::time::{SimDuration, SimTime};

/// One scheduled fault.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Node `node` crashes at `at`.
    Crash {
        /// The node.
        node: usize,
        /// When.
        at: SimTime,
    },
    /// Node `node` restarts at `at` (no effect if it is up).
    Restart {
        /// The node.
        node: usize,
        /// When.
        at: SimTime,
    },
    /// Node `node`'s NIC runs at `factor` of its bandwidth during `[from, until)`.
    NicDegrade {
        /// The node.
        node: usize,
        /// Start of the window.
        from: SimTime,
        /// End of the window.
        until: SimTime,
        /// Bandwidth factor, in (0, 1] for a degradation.
        factor: f64,
    },
    /// The network is split into `groups` during `[from, until)`.
    Partition {
        /// Start of the window.
        from: SimTime,
        /// End of the window (the partition heals).
        until: SimTime,
        /// Disjoint groups of nodes; nodes in none form one more group.
        groups: Vec<Vec<usize>>,
    },
    /// Messages sent during `[from, until)` are lost with `probability`.
    MessageLoss {
        /// Start of the window.
        from: SimTime,
        /// End of the window.
        until: SimTime,
        /// Loss probability in [0, 1].
        probability: f64,
    },
}

/// Random crash/repair cycles.
#[derive(Clone, Debug, PartialEq)]
pub struct RandomFailures {
    /// Mean time between failures (of uptime), per node.
    pub mtbf: SimDuration,
    /// Mean time to repair.
    pub mttr: SimDuration,
    /// The nodes that fail; empty means all.
    pub nodes: Vec<usize>,
}

/// All faults of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// The fixed schedule.
    pub schedule: Vec<Fault>,
    /// The random generator, if any.
    pub random: Option<RandomFailures>,
}

/// A partition prepared for fast checks: each node's group.
#[derive(Clone, Debug)]
pub(crate) struct PartitionWindow {
    pub from: SimTime,
    pub until: SimTime,
    pub group: Vec<u32>,
}

impl PartitionWindow {
    /// True if a message from `a` to `b` in flight over `[sent, delivered]` crosses this partition.
    pub fn cuts(&self, a: usize, b: usize, sent: SimTime, delivered: SimTime) -> bool {
        self.group[a] != self.group[b] && sent < self.until && delivered >= self.from
    }
}

/// A message-loss window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LossWindow {
    pub from: SimTime,
    pub until: SimTime,
    pub probability: f64,
}

fn node_ok(field: &str, n: usize, nodes: usize) -> Result<()> {
    if n < nodes {
        Ok(())
    } else {
        Err(SimError::config(field, format!("names node {n}, but the cluster has nodes 0..{nodes}")))
    }
}

fn window_ok(field: &str, from: SimTime, until: SimTime) -> Result<()> {
    if from <= until {
        Ok(())
    } else {
        Err(SimError::config(field, format!("ends ({until}) before it starts ({from})")))
    }
}

impl FaultConfig {
    /// Checks every fault against a cluster of `nodes` nodes.
    pub fn validate(&self, nodes: usize) -> Result<()> {
        for (i, f) in self.schedule.iter().enumerate() {
            let field = format!("faults[{i}]");
            match f {
                Fault::Crash { node, .. } | Fault::Restart { node, .. } => {
                    node_ok(&format!("{field}.node"), *node, nodes)?
                }
                Fault::NicDegrade { node, from, until, factor } => {
                    node_ok(&format!("{field}.node"), *node, nodes)?;
                    window_ok(&field, *from, *until)?;
                    if !(factor.is_finite() && *factor > 0.0) {
                        return Err(SimError::config(format!("{field}.factor"), "must be a positive finite number"));
                    }
                }
                Fault::Partition { from, until, groups } => {
                    window_ok(&field, *from, *until)?;
                    let mut seen = vec![false; nodes];
                    for (g, members) in groups.iter().enumerate() {
                        for &n in members {
                            node_ok(&format!("{field}.groups[{g}]"), n, nodes)?;
                            if std::mem::replace(&mut seen[n], true) {
                                return Err(SimError::config(
                                    format!("{field}.groups[{g}]"),
                                    format!("node {n} is in more than one group"),
                                ));
                            }
                        }
                    }
                }
                Fault::MessageLoss { from, until, probability } => {
                    window_ok(&field, *from, *until)?;
                    if !(0.0..=1.0).contains(probability) {
                        return Err(SimError::config(format!("{field}.probability"), "must be in [0, 1]"));
                    }
                }
            }
        }
        if let Some(r) = &self.random {
            if r.mtbf.as_nanos() == 0 || r.mttr.as_nanos() == 0 {
                return Err(SimError::config("faults.random", "mtbf and mttr must be positive"));
            }
            for &n in &r.nodes {
                node_ok("faults.random.nodes", n, nodes)?;
            }
        }
        Ok(())
    }

    pub(crate) fn partitions(&self, nodes: usize) -> Vec<PartitionWindow> {
        self.schedule
            .iter()
            .filter_map(|f| match f {
                Fault::Partition { from, until, groups } => {
                    let mut group = vec![0u32; nodes];
                    for (g, members) in groups.iter().enumerate() {
                        for &n in members {
                            group[n] = g as u32 + 1;
                        }
                    }
                    Some(PartitionWindow { from: *from, until: *until, group })
                }
                _ => None,
            })
            .collect()
    }

    pub(crate) fn losses(&self) -> Vec<LossWindow> {
        self.schedule
            .iter()
            .filter_map(|f| match f {
                Fault::MessageLoss { from, until, probability } => {
                    Some(LossWindow { from: *from, until: *until, probability: *probability })
                }
                _ => None,
            })
            .collect()
    }
}
