//! Builds the roles of an algorithm and runs them on the simulator.
//!
//! Rank layout: workers are ranks `0..workers`; a parameter server's shards follow
//! (`workers..workers+shards`), and so does EASGD's centre (`workers`). Faults and per-node
//! settings in the engine's configuration name ranks in this layout.

use crate::error::ConfigError;
use crate::outcome::RunResult;
use crate::protocol::{Protocol, Role};
use crate::protocols::async_ps::{PsConfig, PsRole, PsWorker, Shard};
use crate::protocols::easgd::{Centre, EasgdConfig, EasgdRole, EasgdWorker};
use crate::protocols::gossip::{GossipConfig, GossipNode};
use crate::protocols::sync::local::LocalSgdConfig;
use crate::protocols::sync::{SyncConfig, SyncWorker};
use crate::sim_exec::{Checks, SimExecutor};
use crate::timing::GradientTiming;
use crate::train::TrainConfig;
use dsgd_models::Workload;
use dsgd_sim::{NetworkConfig, SimConfig, SimError, Topology};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which algorithm, with its settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AlgorithmConfig {
    /// Synchronous all-reduce SGD.
    Sync(SyncConfig),
    /// Asynchronous parameter-server SGD.
    AsyncPs(PsConfig),
    /// Elastic averaging SGD.
    Easgd(EasgdConfig),
    /// Gossip SGD.
    Gossip(GossipConfig),
    /// Local SGD: local steps, then an average (on the synchronous worker's machinery).
    LocalSgd(LocalSgdConfig),
}

impl AlgorithmConfig {
    /// A short name for tables and plots, e.g. `gossip-push`.
    pub fn label(&self) -> String {
        match self {
            AlgorithmConfig::Sync(c) if c.backup_workers > 0 => format!("sync+{}backup", c.backup_workers),
            AlgorithmConfig::Sync(_) => "sync".into(),
            AlgorithmConfig::AsyncPs(c) if c.staleness_bound.is_some() => "async_ps-ssp".into(),
            AlgorithmConfig::AsyncPs(_) => "async_ps".into(),
            AlgorithmConfig::Easgd(_) => "easgd".into(),
            AlgorithmConfig::Gossip(c) => {
                format!("gossip-{}", if c.mode == crate::protocols::gossip::GossipMode::Push { "push" } else { "pull" })
            }
            AlgorithmConfig::LocalSgd(_) => "local_sgd".into(),
        }
    }

    /// The synchronous worker's configuration of `sync` and `local_sgd` (`None` for the others).
    pub fn sync(&self) -> Option<SyncConfig> {
        match self {
            AlgorithmConfig::Sync(c) => Some(*c),
            AlgorithmConfig::LocalSgd(c) => Some(c.sync()),
            _ => None,
        }
    }

    /// Total ranks for `workers` workers (servers included).
    pub fn ranks(&self, workers: usize) -> usize {
        match self {
            AlgorithmConfig::AsyncPs(c) => workers + c.shards,
            AlgorithmConfig::Easgd(_) => workers + 1,
            _ => workers,
        }
    }

    /// Each rank's role in words (`worker 3`, `shard 1`, `centre`), for traces.
    pub fn role_names(&self, workers: usize) -> Vec<String> {
        let mut names: Vec<String> = (0..workers).map(|w| format!("worker {w}")).collect();
        match self {
            AlgorithmConfig::AsyncPs(c) => names.extend((0..c.shards).map(|s| format!("shard {s}"))),
            AlgorithmConfig::Easgd(_) => names.push("centre".into()),
            _ => {}
        }
        names
    }

    /// Checks ranges against `workers`, and that the hierarchical collectives have groups (set, or
    /// the racks of `net`); the error's path is relative to the algorithm.
    pub fn validate(&self, workers: usize, net: &NetworkConfig) -> Result<(), ConfigError> {
        let timeout = match self {
            AlgorithmConfig::Sync(c) => check_sync(c, workers, net).map(|()| c.timeout_s)?,
            AlgorithmConfig::AsyncPs(c) => check_ps(c).map(|()| c.timeout_s)?,
            AlgorithmConfig::Easgd(c) => check_easgd(c).map(|()| c.timeout_s)?,
            AlgorithmConfig::Gossip(c) => check_gossip(c).map(|()| c.timeout_s)?,
            AlgorithmConfig::LocalSgd(c) => {
                c.check().map_err(|(field, problem)| ConfigError::new(field, problem))?;
                check_sync(&c.sync(), workers, net).map(|()| c.timeout_s)?
            }
        };
        if !(timeout.is_finite() && timeout > 0.0) {
            return Err(ConfigError::new("timeout_s", "must be a positive number of seconds"));
        }
        let why = "(a shorter failure-detection timeout fires before messages arrive, so every round times out)";
        Ok(dsgd_sim::spec::duration("timeout_s", timeout, 1e-3, why)?)
    }
}

fn bad(field: &str, problem: String) -> Result<(), ConfigError> {
    Err(ConfigError::new(field, problem))
}

/// Synchronous SGD's options against `workers` and the network.
fn check_sync(c: &SyncConfig, workers: usize, net: &NetworkConfig) -> Result<(), ConfigError> {
    if c.backup_workers >= workers {
        return bad("backup_workers", format!("is {}; must be less than the {workers} workers", c.backup_workers));
    }
    match c.group_size {
        None if c.collective.is_hierarchical() && net.topology == Topology::Flat => {
            return bad(
                "group_size",
                format!(
                    "collective {} needs groups: use a racks network.topology (its racks are the groups) \
                         or set group_size",
                    c.collective.name()
                ),
            )
        }
        Some(0) => return bad("group_size", "must be at least 1".into()),
        Some(_) if !c.collective.is_hierarchical() => {
            return bad(
                "group_size",
                format!(
                    "applies only to the collectives hierarchical and analytic_hierarchical, not {}",
                    c.collective.name()
                ),
            )
        }
        _ => {}
    }
    service_time("message_time_us", c.message_time_us)?;
    if let Some(b) = &c.buckets {
        if let Err((field, problem)) = b.check() {
            return bad(&format!("buckets.{field}"), problem);
        }
        if c.backup_workers > 0 || c.collective.is_analytic() {
            return bad(
                "buckets",
                format!(
                    "applies only to message-level all-reduce (ring, tree, halving_doubling, hierarchical) without \
                     backup workers, not collective {} with {} backup workers",
                    c.collective.name(),
                    c.backup_workers
                ),
            );
        }
    }
    Ok(())
}

/// The parameter server's options.
fn check_ps(c: &PsConfig) -> Result<(), ConfigError> {
    if !(1..=100_000).contains(&c.shards) {
        return bad("shards", format!("is {}; must be from 1 to 100000", c.shards));
    }
    if !(c.delay_compensation.is_finite() && c.delay_compensation >= 0.0) {
        return bad(
            "delay_compensation",
            format!("is {}; must be a number at least 0 (DC-ASGD's λ; 0: off)", c.delay_compensation),
        );
    }
    service_time("update_time_us", c.update_time_us)?;
    Ok(())
}

/// EASGD's options.
fn check_easgd(c: &EasgdConfig) -> Result<(), ConfigError> {
    if c.tau == 0 {
        return bad("tau", "must be at least 1".into());
    }
    if let Some(a) = c.alpha {
        if !(a > 0.0 && a <= 1.0) {
            return bad("alpha", "must be in (0, 1]".into());
        }
    }
    service_time("update_time_us", c.update_time_us)?;
    Ok(())
}

/// Gossip's options.
fn check_gossip(c: &GossipConfig) -> Result<(), ConfigError> {
    if c.tau == 0 {
        return bad("tau", "must be at least 1".into());
    }
    match c.max_in_flight {
        Some(0) => return bad("max_in_flight", "must be at least 1 (or absent: no limit)".into()),
        Some(_) if c.mode != crate::protocols::gossip::GossipMode::Push => {
            return bad(
                "max_in_flight",
                "limits the pushes of push-sum (mode push); a pull node has at most one request \
                     outstanding already"
                    .into(),
            )
        }
        _ => {}
    }
    Ok(())
}

/// Checks a modelled time per message (`update_time_us`, `message_time_us`).
fn service_time(field: &str, us: f64) -> Result<(), ConfigError> {
    if us.is_finite() && us >= 0.0 {
        Ok(())
    } else {
        Err(ConfigError::new(field, format!("is {us}; must be 0 or more microseconds")))
    }
}

/// Runs `algorithm` with `workers` workers on the cluster `sim` (whose `nodes` is set here to
/// the number of ranks), with gradient durations from the compute model.
pub fn run(
    algorithm: &AlgorithmConfig,
    workers: usize,
    sim: &SimConfig,
    workload: Arc<dyn Workload>,
    train: TrainConfig,
) -> Result<RunResult, SimError> {
    run_timed(algorithm, workers, sim, workload, train, GradientTiming::Model)
}

/// [`run`] with gradient durations from `timing`.
pub fn run_timed(
    algorithm: &AlgorithmConfig,
    workers: usize,
    sim: &SimConfig,
    workload: Arc<dyn Workload>,
    train: TrainConfig,
    timing: GradientTiming,
) -> Result<RunResult, SimError> {
    run_checked(algorithm, workers, sim, workload, train, timing, Extras::default())
}

/// What a simulated run may be given besides its spec.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// The simulation tester's invariants, checked after every event.
    pub checks: Option<Checks>,
    /// A real run's order of handler calls, replayed (see [`crate::order`]).
    pub order: Option<crate::order::RecordedOrder>,
    /// Prefetching of the next event's node state forced on or off (default: on from 5,000
    /// nodes, see [`SimExecutor::with_prefetch`]); it changes no result, only the speed.
    pub prefetch: Option<bool>,
}

/// [`run_timed`], with the simulation tester's invariants checked after every event when
/// `extras.checks` is given (see [`crate::sim_exec::Checks`]), and a real run's order of
/// handler calls replayed when `extras.order` is.
pub fn run_checked(
    algorithm: &AlgorithmConfig,
    workers: usize,
    sim: &SimConfig,
    workload: Arc<dyn Workload>,
    train: TrainConfig,
    timing: GradientTiming,
    extras: Extras,
) -> Result<RunResult, SimError> {
    if !matches!(timing, GradientTiming::Model) && workload.timing_only() {
        return Err(SimError::config(
            "compute.gradient_time",
            format!("\"measured\" needs real gradients; workload {} computes none", workload.name()),
        ));
    }
    let mut sim = sim.clone();
    sim.nodes = algorithm.ranks(workers);
    // A worker's receive time is the compute section's; servers charge their own per update.
    sim.compute.receive_nodes = workers;
    struct OnSim<'a> {
        sim: &'a SimConfig,
        workload: Arc<dyn Workload>,
        train: TrainConfig,
        timing: GradientTiming,
        extras: Extras,
    }
    impl Drive for OnSim<'_> {
        type Out = Result<RunResult, SimError>;
        fn drive<P: Protocol>(self, roles: Vec<P>) -> Self::Out
        where
            P::Msg: Serialize + DeserializeOwned,
        {
            let mut exec = SimExecutor::new(self.sim, roles, self.workload, self.train)?.with_timing(self.timing);
            if let Some(on) = self.extras.prefetch {
                exec = exec.with_prefetch(on);
            }
            if let Some(order) = &self.extras.order {
                exec = exec.with_order(self.sim, order)?;
            }
            match self.extras.checks {
                Some(c) => exec.with_checks(self.sim, c).run(),
                None => exec.run(),
            }
        }
    }
    let net = sim.network.clone();
    with_roles(algorithm, workers, &train, &net, OnSim { sim: &sim, workload, train, timing, extras })?
}

/// Something that runs the roles of an algorithm (the simulator, or a real executor).
pub trait Drive {
    /// What running them gives.
    type Out;
    /// Runs `roles`, one per rank.
    fn drive<P: Protocol>(self, roles: Vec<P>) -> Self::Out
    where
        P::Msg: Serialize + DeserializeOwned;
}

/// Builds the roles of `algorithm` with `workers` workers (and its servers) and hands them to
/// `d`. `net` gives the analytic collectives' default cost and the hierarchical collectives'
/// default groups (its racks).
pub fn with_roles<D: Drive>(
    algorithm: &AlgorithmConfig,
    workers: usize,
    train: &TrainConfig,
    net: &NetworkConfig,
    d: D,
) -> Result<D::Out, SimError> {
    if workers == 0 {
        return Err(SimError::config("nodes", "must be at least 1"));
    }
    algorithm.validate(workers, net).map_err(|e| e.under("algorithm"))?;
    train.validate()?;
    let (batch, opt) = (train.batch, train.optimizer);
    Ok(match *algorithm {
        AlgorithmConfig::Sync(_) | AlgorithmConfig::LocalSgd(_) => {
            let mut c = algorithm.sync().expect("synchronous");
            c.fill_from(net);
            let all = SyncWorker::initial(&c, workers);
            let roles: Vec<SyncWorker> = (0..workers).map(|_| SyncWorker::with_members(c, batch, opt, &all)).collect();
            d.drive(roles)
        }
        AlgorithmConfig::AsyncPs(c) => {
            let mut roles: Vec<PsRole> =
                (0..workers).map(|_| Role::Worker(PsWorker::new(workers, c.shards, batch, c))).collect();
            roles.extend((0..c.shards).map(|s| Role::Server(Shard::new(s, c.shards, workers, c, opt))));
            d.drive(roles)
        }
        AlgorithmConfig::Easgd(c) => {
            let mut roles: Vec<EasgdRole> =
                (0..workers).map(|_| Role::Worker(EasgdWorker::new(c, batch, opt, workers))).collect();
            roles.push(Role::Server(Centre::new(c.alpha_for(workers), c.update_time_us)));
            d.drive(roles)
        }
        AlgorithmConfig::Gossip(c) => {
            let roles: Vec<GossipNode> = (0..workers).map(|_| GossipNode::new(c, batch, opt)).collect();
            d.drive(roles)
        }
    })
}
