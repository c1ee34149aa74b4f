//! `dsgd torture`: a deterministic simulation tester for the protocols. It runs seeded random
//! scenarios ([`scenario`]) with the runtime's invariants checked after every event (the
//! simulator executor's checker: push-sum mass, replica agreement, progress, crashed nodes,
//! scoring, the figures against the events) and liveness once the faults have healed; a failing
//! scenario is shrunk ([`shrink`]) to a small spec that fails the same way under
//! `dsgd run --check`. It counts which fault kinds hit which protocol stages and which recovery
//! paths the protocols took ([`coverage`]).

pub mod coverage;
pub mod scenario;
pub mod shrink;

use crate::execute::{execute_checked, Outcome};
use crate::load::spec_from_value;
use crate::spec::Spec;
use dsgd_runtime::runner::AlgorithmConfig;
use dsgd_runtime::sim_exec::{CheckReport, Checks};
use dsgd_sim::spec::FaultSpec;
use serde_json::Value;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What the checks of a spec are: the invariants, and liveness when every fault heals (no random
/// failures, and each crashed node restarts later): progress within [`scenario::liveness_bound`]
/// of the time the last fault ends.
pub fn checks_for(spec: &Spec) -> Checks {
    let mut healed = 0f64;
    let mut down: BTreeMap<usize, f64> = BTreeMap::new();
    let mut events: Vec<(f64, usize, bool)> = Vec::new();
    for f in &spec.faults {
        match f {
            FaultSpec::Random { .. } => return Checks { liveness: None },
            FaultSpec::Crash { node, at_s } => events.push((*at_s, *node, false)),
            FaultSpec::Restart { node, at_s } => events.push((*at_s, *node, true)),
            FaultSpec::NicDegrade { until_s, .. }
            | FaultSpec::Partition { until_s, .. }
            | FaultSpec::MessageLoss { until_s, .. } => healed = healed.max(*until_s),
        }
    }
    // In time order, restarts first at one instant (as the engine applies a schedule sorted by
    // time and then by its order: close enough for the bound, which only needs every node up).
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (t, node, restart) in events {
        healed = healed.max(t);
        if restart {
            down.remove(&node);
        } else {
            down.insert(node, t);
        }
    }
    if !down.is_empty() {
        return Checks { liveness: None };
    }
    for s in &spec.compute.straggler.slowdowns {
        healed = healed.max(s.until_s);
    }
    let (timeout, rounds) = match spec.algorithm {
        AlgorithmConfig::Sync(c) => (c.timeout_s, 1),
        AlgorithmConfig::LocalSgd(c) => (c.timeout_s, c.local_steps),
        AlgorithmConfig::AsyncPs(c) => (c.timeout_s, 1),
        AlgorithmConfig::Easgd(c) => (c.timeout_s, c.tau),
        AlgorithmConfig::Gossip(c) => (c.timeout_s, c.tau),
    };
    let within = scenario::liveness_bound(timeout, spec.compute.step_time_ms, rounds as f64);
    Checks { liveness: Some((healed, within)) }
}

/// How a checked scenario ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every invariant held.
    Passed(CheckReport),
    /// It failed: `kind` is the invariant's name, `panic`, `refused` (the spec was refused: a
    /// generator's mistake) or `error` (the run stopped with another error).
    Failed {
        /// What failed.
        kind: String,
        /// The message.
        message: String,
    },
}

impl Verdict {
    /// The failure's kind, if it failed.
    pub fn failure(&self) -> Option<&str> {
        match self {
            Verdict::Passed(_) => None,
            Verdict::Failed { kind, .. } => Some(kind),
        }
    }
}

/// Runs `value` (a spec) with every check; panics are caught and reported as failures.
pub fn check_value(value: &Value) -> Verdict {
    let spec = match spec_from_value("torture", value.clone()) {
        Ok(s) => s,
        Err(e) => return Verdict::Failed { kind: "refused".into(), message: e.to_string() },
    };
    let checks = checks_for(&spec);
    match catch_unwind(AssertUnwindSafe(|| execute_checked(&spec, checks))) {
        Ok(Ok(Outcome { result, .. })) => Verdict::Passed(result.checks.unwrap_or_default()),
        Ok(Err(crate::Error::Sim(dsgd_sim::SimError::Invariant { invariant, at, what }))) => {
            Verdict::Failed { kind: invariant.to_string(), message: format!("at {at}: {what}") }
        }
        Ok(Err(crate::Error::Spec(e))) => Verdict::Failed { kind: "refused".into(), message: e.to_string() },
        Ok(Err(crate::Error::Field(e))) => Verdict::Failed { kind: "refused".into(), message: e.to_string() },
        Ok(Err(e)) => Verdict::Failed { kind: "error".into(), message: e.to_string() },
        Err(p) => {
            let message = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            Verdict::Failed { kind: "panic".into(), message }
        }
    }
}

/// One scenario's outcome.
#[derive(Clone, Debug)]
pub struct Case {
    /// Its seed.
    pub seed: u64,
    /// Its algorithm's label (`gossip-push`, `sync`...).
    pub algorithm: String,
    /// How it ended.
    pub verdict: Verdict,
}

/// Runs scenario `seed`.
pub fn run_case(seed: u64) -> Case {
    let value = scenario::scenario(seed);
    let algorithm = spec_from_value("torture", value.clone()).map_or_else(|_| "?".into(), |s| s.algorithm.label());
    Case { seed, algorithm, verdict: check_value(&value) }
}
