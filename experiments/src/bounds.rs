//! The memory a run needs, checked against what this machine has before anything runs.
//!
//! The hard limits that keep every accepted spec runnable (no size or time that overflows or
//! wraps, no duration that rounds to 0 ns where time must pass) are part of each section's own
//! validation ([`MAX_SECONDS`] in the engine's, [`MAX_PARAMS`] in the workload's): a spec beyond
//! them is refused with its field, whatever the machine. The memory estimate ([`estimate`]) counts the replicas' and
//! servers' parameter vectors (with the optimizer's and the messages' copies), per-member
//! collective schedules, the engine's per-node state and the data set;
//! `dsgd check` prints it, and `dsgd run`/`sweep` refuse a spec whose estimate exceeds 90% of the
//! memory available (`MemAvailable`) unless given `--force`.

use crate::spec::{Spec, WorkloadSpec};
use dsgd_runtime::budget::Budget;
use dsgd_runtime::collectives::CollectiveKind;
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::AlgorithmConfig;

pub use dsgd_models::spec::MAX_PARAMS;
pub use dsgd_sim::spec::MAX_SECONDS;

/// What a run is expected to need.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Peak memory, bytes.
    pub bytes: f64,
    /// Parameters of the model every replica holds (0 for timing-only workloads).
    pub params: f64,
    /// Ranks (workers and servers).
    pub ranks: usize,
    /// What drives it, most first: `(field, bytes)`.
    pub drivers: Vec<(String, f64)>,
    /// Engine events expected: the gradients the workers compute before the first stop rule
    /// (each worker's step, what it waits for, and a central NIC where there is one), their
    /// messages, evaluations ([`expected_gradients`]).
    pub events: f64,
    /// Wall seconds expected for those events ([`ns_per_event`]) and for first touching the
    /// memory estimated, not counting real gradients' computation.
    pub wall_s: f64,
}

/// Group size and number of groups of the hierarchical collectives under `spec`.
fn groups(spec: &Spec, c: &dsgd_runtime::protocols::sync::SyncConfig) -> (f64, f64) {
    let rack = spec.network.topology.rack_size();
    let g = c.group_size.or(rack).unwrap_or(spec.nodes).clamp(1, spec.nodes.max(1));
    (g as f64, spec.nodes.div_ceil(g) as f64)
}

/// The buckets of a synchronous all-reduce (1 without `algorithm.buckets`): one per cap's worth
/// of the message, and no more than the model's layers.
fn buckets(spec: &Spec) -> f64 {
    let Some(SyncConfig { buckets: Some(b), .. }) = spec.algorithm.sync() else { return 1.0 };
    let bytes = 4.0 * wire_params(&spec.workload);
    let mb = dsgd_runtime::protocols::sync::buckets::MB;
    let by_size = 1.0 + ((bytes - b.first_mb * mb).max(0.0) / (b.cap_mb * mb)).ceil();
    by_size.min(spec.workload.profile_layers() as f64).max(1.0)
}

/// Gradients a worker takes between all-reduces: local SGD's `local_steps`, 1 otherwise.
fn local_steps(spec: &Spec) -> f64 {
    match &spec.algorithm {
        AlgorithmConfig::LocalSgd(l) => l.local_steps.max(1) as f64,
        _ => 1.0,
    }
}

/// Seconds a NIC of `spec` takes to send one model's message.
fn wire_s(spec: &Spec) -> f64 {
    4.0 * wire_params(&spec.workload) / (spec.network.bandwidth_gbps * 1e9 / 8.0)
}

/// Messages a worker's gradient causes, on average, under `spec`'s algorithm.
fn messages_per_gradient(spec: &Spec) -> f64 {
    let n = spec.nodes as f64;
    match &spec.algorithm {
        AlgorithmConfig::Sync(c) if c.backup_workers > 0 => 2.0,
        AlgorithmConfig::Sync(_) | AlgorithmConfig::LocalSgd(_) => {
            let c = &spec.algorithm.sync().expect("synchronous");
            // Local SGD all-reduces once every `local_steps` gradients.
            buckets(spec) / local_steps(spec)
                * match c.collective {
                    CollectiveKind::Ring => 2.0 * (n - 1.0),
                    CollectiveKind::Tree => 2.0,
                    CollectiveKind::HalvingDoubling => 2.0 * n.log2().ceil() + 2.0,
                    CollectiveKind::Hierarchical => {
                        let (g, r) = groups(spec, c);
                        2.0 * (g - 1.0) + 2.0 * (r - 1.0)
                    }
                    CollectiveKind::Analytic | CollectiveKind::AnalyticHierarchical => n - 1.0,
                }
        }
        // A pull request and reply per shard, and a push per shard.
        AlgorithmConfig::AsyncPs(c) => 3.0 * c.shards as f64,
        // A request and a reply (or a push and its acknowledgement) every tau steps.
        AlgorithmConfig::Easgd(c) => 2.0 / c.tau as f64,
        AlgorithmConfig::Gossip(c) => 2.0 / c.tau as f64,
    }
}

/// Messages beyond the gradients' own: a parameter server's worker asks every shard for its
/// slice at the start, and each answers (100,000 workers of 10 shards: 2 million messages
/// before the first update); EASGD workers that time out waiting for the centre ask again.
fn extra_messages(spec: &Spec) -> f64 {
    let n = spec.nodes as f64;
    match &spec.algorithm {
        AlgorithmConfig::AsyncPs(c) => 2.0 * n * c.shards as f64,
        // A centre that cannot keep up leaves workers waiting past their timeout, and each asks
        // again (a timer and a request each time).
        AlgorithmConfig::Easgd(c) => {
            let wire = wire_s(spec);
            let wanted = n / (spec.compute.step_time_ms / 1e3 * c.tau.max(1) as f64);
            if wanted * wire > 1.0 {
                2.0 * n * spec.stop.sim_time_s / c.timeout_s
            } else {
                0.0
            }
        }
        _ => 0.0,
    }
}

/// Events beyond one a message: a hierarchical all-reduce's messages across racks pass the
/// racks' uplinks and the core (about 1.2 events more each, measured by `dsgd bench-scale`).
fn hops_per_gradient(spec: &Spec) -> f64 {
    match spec.algorithm.sync() {
        Some(c) if c.backup_workers == 0 && c.collective == CollectiveKind::Hierarchical => {
            1.2 * 2.0 * (groups(spec, &c).1 - 1.0) * buckets(spec) / local_steps(spec)
        }
        _ => 0.0,
    }
}

/// Parameters of the arithmetic model of `w` (not counting `wire_params`).
fn model_params(w: &WorkloadSpec) -> f64 {
    match w {
        WorkloadSpec::Timing { .. } => 0.0,
        WorkloadSpec::Quadratic { dim, .. } => *dim as f64,
        WorkloadSpec::Softmax { classes, features, .. } => (*classes * (*features + 1)) as f64,
        WorkloadSpec::Burn { model, hidden, .. } => match model {
            crate::spec::BurnModel::Mlp => {
                let mut prev = 784.0;
                let mut n = 0.0;
                for &h in hidden.iter().chain([10usize].iter()) {
                    n += prev * h as f64 + h as f64;
                    prev = h as f64;
                }
                n
            }
            crate::spec::BurnModel::Cnn => 20_490.0,
            crate::spec::BurnModel::Resnet20 => 269_434.0,
            crate::spec::BurnModel::Resnet18 => 11_175_370.0, // torchvision's, on 1 channel and 10 classes
        },
    }
}

/// Parameters a message of `w` carries on the wire (`wire_params`, or the model's).
fn wire_params(w: &WorkloadSpec) -> f64 {
    match w {
        WorkloadSpec::Timing { params, .. } => *params as f64,
        WorkloadSpec::Quadratic { wire_params, .. }
        | WorkloadSpec::Softmax { wire_params, .. }
        | WorkloadSpec::Burn { wire_params, .. } => wire_params.map_or_else(|| model_params(w), |p| p as f64),
    }
}

/// Bytes the engine holds for each event in its queue (the slot, the heap entry, a message's
/// envelope), about.
const EVENT_BYTES: f64 = 200.0;

fn dataset_bytes(w: &WorkloadSpec) -> f64 {
    match w {
        WorkloadSpec::Softmax { features, train, test, .. } => ((train + test) * (features + 1)) as f64 * 8.0,
        WorkloadSpec::Burn { .. } => 70_000.0 * 784.0 * 4.0,
        _ => 0.0,
    }
}

/// Estimates the peak memory of a run of `spec`.
pub fn estimate(spec: &Spec) -> Estimate {
    let ranks = spec.ranks();
    let n = spec.nodes as f64;
    let params = model_params(&spec.workload);
    // Each rank: its parameters, the optimizer's velocity, a gradient and about one message's
    // copy in flight.
    let replicas = ranks as f64 * params * 4.0 * 4.0;
    let schedules = match spec.algorithm.sync() {
        Some(c) if c.backup_workers == 0 => {
            // Each member's schedule and the run's copy of it (72-byte steps), or what computes it.
            let per_member = match c.collective {
                // Computed on demand, one step at a time.
                CollectiveKind::Ring => 0.0,
                CollectiveKind::Tree => 2.0 * n.log2().ceil() * 72.0 * 2.0,
                CollectiveKind::HalvingDoubling => (2.0 * n.log2().ceil() + 2.0) * 72.0 * 2.0,
                CollectiveKind::Analytic | CollectiveKind::AnalyticHierarchical => 0.0,
                // Computed on demand from the member's list of group starts (r + 1 words).
                CollectiveKind::Hierarchical => (groups(spec, &c).1 + 1.0) * 8.0,
            };
            n * per_member * buckets(spec)
        }
        _ => 0.0,
    };
    // DC-ASGD: each shard keeps the slice it last sent each worker (a model per worker in all).
    let sent = match &spec.algorithm {
        AlgorithmConfig::AsyncPs(c) if c.delay_compensation > 0.0 => n * params * 4.0,
        _ => 0.0,
    };
    // Every worker of a parameter server has a pull or a push in flight with every shard.
    let in_flight = match &spec.algorithm {
        AlgorithmConfig::AsyncPs(c) => n * c.shards as f64 * 2.0 * EVENT_BYTES,
        _ => 0.0,
    };
    let engine = ranks as f64 * 2048.0;
    let data = dataset_bytes(&spec.workload);
    let mut drivers = vec![
        (format!("nodes ({}) × the model's parameters ({params:.0})", spec.nodes), replicas),
        (format!("nodes ({}): per-member collective schedules (algorithm.collective)", spec.nodes), schedules),
        (format!("nodes ({}): the engine's per-node state", spec.nodes), engine),
        ("the workload's data set".to_string(), data),
        (format!("nodes ({}): the slices the shards last sent (algorithm.delay_compensation)", spec.nodes), sent),
        (format!("nodes ({}) × algorithm.shards: the messages in flight between them", spec.nodes), in_flight),
    ];
    drivers.retain(|d| d.1 > 0.0);
    drivers.sort_by(|a, b| b.1.total_cmp(&a.1));
    let gradients = expected_gradients(spec);
    let events = gradients * (1.0 + messages_per_gradient(spec) + hops_per_gradient(spec))
        + extra_messages(spec)
        + spec.stop.sim_time_s / spec.eval.every_s;
    let bytes = replicas + schedules + sent + in_flight + engine + data + 64e6;
    Estimate {
        bytes,
        params,
        ranks,
        drivers,
        events,
        wall_s: events * ns_per_event(spec) * 1e-9 + bytes * FIRST_TOUCH_S_PER_BYTE + arithmetic_s(spec),
    }
}

/// Wall nanoseconds of an analytic workload's arithmetic (2-core AMD EPYC, 2026-12-06, by the
/// fuzzer's long cases: softmax regression with 15 to 31,000 parameters and 3 to 3,479 classes,
/// quadratics of 265 dimensions): a multiply-add in f64, an exponential, a quadratic's dimension
/// (its noise drawn), and one pass of an update over a parameter (the optimizer, the copies into
/// and out of messages).
const NS_PER_MAC: f64 = 0.5;
const NS_PER_EXP: f64 = 8.0;
const NS_PER_DIM: f64 = 8.0;
const NS_PER_PARAM_PASS: f64 = 1.0;
/// Passes over the model an update makes.
const PASSES: f64 = 4.0;

/// Wall seconds of a run's arithmetic beyond its events: each gradient of an analytic workload
/// (a softmax regression's multiply-adds and exponentials over the batch, a quadratic's noise),
/// each update's passes over the model, and each evaluation (of every replica with
/// `eval.per_node`). A burn network's real gradients are said apart; a timing workload has none.
/// Without it, a softmax of 31,000 parameters was estimated at 0.1 s and ran for minutes.
fn arithmetic_s(spec: &Spec) -> f64 {
    let b = spec.batch as f64;
    let (per_gradient, per_eval) = match &spec.workload {
        WorkloadSpec::Softmax { classes, features, test, .. } => {
            let per_sample = *classes as f64 * ((*features + 1) as f64 * NS_PER_MAC + NS_PER_EXP);
            // The logits and the gradient's accumulation: two multiply-adds a weight.
            (b * (per_sample + *classes as f64 * (*features + 1) as f64 * NS_PER_MAC), *test as f64 * per_sample)
        }
        WorkloadSpec::Quadratic { dim, .. } => (*dim as f64 * NS_PER_DIM, *dim as f64 * NS_PER_MAC),
        _ => return 0.0,
    };
    let params = model_params(&spec.workload);
    let models = if spec.eval.per_node { spec.ranks() as f64 } else { 1.0 };
    let evaluations = spec.stop.sim_time_s / spec.eval.every_s * models;
    (expected_gradients(spec) * (per_gradient + params * NS_PER_PARAM_PASS * PASSES) + evaluations * per_eval) * 1e-9
}

/// Wall seconds to fault in a byte of fresh memory (the kernel zeroes pages at a few GB/s).
const FIRST_TOUCH_S_PER_BYTE: f64 = 0.5e-9;

/// Wall nanoseconds an event costs, message and protocol included (measured by `dsgd
/// bench-scale` on a 2-core Intel Xeon VM, 2026-12-07: 111-178 ns at 100 nodes). It grows with
/// the nodes as their state leaves the caches: slowly where an event touches a neighbour's state
/// (collectives, servers: 150 ns at 10,000 nodes for the ring, 390 at 100,000 for the
/// hierarchical all-reduce), fast where it touches a random peer's (gossip: 370-440 ns at 10,000
/// nodes, 1.3-1.7 µs at 100,000; EASGD's centre serving any worker: 200 ns at 10,000, 580 at
/// 100,000).
pub fn ns_per_event(spec: &Spec) -> f64 {
    let n = spec.nodes as f64;
    match spec.algorithm {
        AlgorithmConfig::Gossip(_) => 180.0 * (1.0 + (n / 5000.0).min(7.0)),
        AlgorithmConfig::Easgd(_) => 150.0 * (1.0 + (n / 10_000.0).min(3.0)),
        // Most of a large server's events are the workers' first pulls, served in order. A worker
        // of thousands of shards assembles its model from as many slices, each its own message
        // (12,800 shards: about 800 ns an event, found by the fuzzer's long cases). At 100,000
        // workers an event cost 221 ns with its first touches on the Intel VM (2026-12-07).
        AlgorithmConfig::AsyncPs(ref c) => {
            170.0 * (1.0 + (n / 1_000_000.0).min(0.5) + (c.shards as f64 / 4000.0).min(3.0))
        }
        _ => 170.0 * (1.0 + (n / 40_000.0).min(1.5)),
    }
}

/// The expected largest of `n` steps' jitter factors (a synchronous round waits for it), for
/// steps that are each the sum of `h` draws.
fn slowest_factor(jitter: &dsgd_sim::compute::Jitter, n: f64, h: f64) -> f64 {
    use dsgd_sim::compute::Jitter;
    let ln_n = n.max(1.0).ln();
    match *jitter {
        Jitter::None => 1.0,
        // H_n ≈ ln n + 0.58.
        Jitter::Exponential { mean } => 1.0 + mean * (ln_n + 0.58) / h.sqrt(),
        Jitter::LogNormal { sigma } => {
            let s = sigma / h.sqrt();
            (-s * s / 2.0 + s * (2.0 * ln_n).sqrt()).exp()
        }
        Jitter::Pareto { alpha } => n.max(1.0).powf(1.0 / alpha.max(1.01)),
    }
}

/// The mean jitter factor of one step.
fn mean_factor(jitter: &dsgd_sim::compute::Jitter) -> f64 {
    use dsgd_sim::compute::Jitter;
    match *jitter {
        Jitter::None | Jitter::LogNormal { .. } => 1.0,
        Jitter::Exponential { mean } => 1.0 + mean,
        Jitter::Pareto { alpha } => alpha.max(1.01) / (alpha.max(1.01) - 1.0),
    }
}

/// Gradients a run of `spec` is expected to compute before its first stop rule (simulated
/// time, iterations or updates): each worker's rate from its step time and what it waits for
/// (a synchronous round waits for the slowest worker and its collective; a server's worker for
/// its pull and push), bounded by a central NIC where the algorithm has one (the parameter
/// server's shards, EASGD's centre). Stragglers other than jitter and faults are not counted.
pub fn expected_gradients(spec: &Spec) -> f64 {
    let n = spec.nodes as f64;
    let step = spec.compute.step_time_ms / 1e3;
    let jitter = &spec.compute.straggler.jitter;
    let secs = spec.stop.sim_time_s;
    let wire = wire_s(spec);
    let lat = spec.network.latency_us / 1e6;
    let updates = spec.stop.updates.map_or(f64::INFINITY, |u| u as f64);
    match &spec.algorithm {
        AlgorithmConfig::Sync(_) | AlgorithmConfig::LocalSgd(_) => {
            let c = spec.algorithm.sync().expect("synchronous");
            let h = local_steps(spec);
            let log = n.log2().ceil().max(1.0);
            let comm = if c.backup_workers > 0 {
                // The aggregator's NIC takes in a message from every worker (sending the
                // average back overlaps the next round's gathering).
                (n - 1.0) * wire + 2.0 * lat
            } else {
                match c.collective {
                    CollectiveKind::Ring | CollectiveKind::Analytic => 2.0 * (n - 1.0) * (wire / n + lat),
                    CollectiveKind::Tree => 2.0 * log * (wire + lat),
                    CollectiveKind::HalvingDoubling => 2.0 * (n - 1.0) / n * wire + 2.0 * log * lat,
                    CollectiveKind::Hierarchical | CollectiveKind::AnalyticHierarchical => {
                        let (g, r) = groups(spec, &c);
                        2.0 * (g - 1.0) * (wire / g + lat) + 2.0 * (r - 1.0) * (wire / r + lat)
                    }
                }
            };
            let round = h * step * slowest_factor(jitter, n, h) + comm;
            let rounds = (secs / round).min(spec.stop.iterations.map_or(f64::INFINITY, |i| i as f64)).min(updates);
            n * h * rounds
        }
        AlgorithmConfig::AsyncPs(c) => {
            // A worker pulls the model and pushes its gradient through its own NIC; each shard
            // moves its slice in and out for every update.
            let worker = n / (step * mean_factor(jitter) + 2.0 * (wire + lat));
            let shards = c.shards.max(1) as f64 / wire.max(1e-12);
            (worker.min(shards) * secs).min(updates)
        }
        AlgorithmConfig::Easgd(c) => {
            // A worker waits for its exchange every tau steps; the centre's NIC moves a model in
            // and out for each.
            let tau = c.tau.max(1) as f64;
            let worker = n * tau / (tau * step * mean_factor(jitter) + 2.0 * (wire + lat));
            let centre = tau / wire.max(1e-12);
            // Every worker's first tau steps come before it waits for the centre.
            let first = n * tau * (secs / (tau * step * mean_factor(jitter))).min(1.0);
            (worker.min(centre) * secs).max(first).min(updates * tau)
        }
        // Gossip computes while it exchanges.
        AlgorithmConfig::Gossip(_) => (n / (step * mean_factor(jitter)) * secs).min(updates),
    }
}

/// Bytes of memory available to a new process (`MemAvailable`, and no more than its address-space
/// limit, `ulimit -v`), where the system says.
pub fn available_memory() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(address_space_limit().map_or(kib * 1024.0, |l| (kib * 1024.0).min(l as f64)))
}

/// The process's address-space limit (`ulimit -v`), bytes, if it has one.
pub fn address_space_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource};
    let (soft, _) = getrlimit(Resource::RLIMIT_AS).ok()?;
    (soft != nix::sys::resource::RLIM_INFINITY).then_some(soft)
}

/// Sets the process's memory budget ([`dsgd_runtime::budget`]) for runs of `spec` (its estimate
/// × 4, or + 2 GiB if more; `None`: the machine's memory only, for sweeps and replays) and
/// returns it. A run that outgrows it stops with what grew. Never above 90% of the memory
/// available with what the process holds already, nor within 256 MiB of an address-space limit;
/// `DSGD_MEMORY_BUDGET_MB` sets it by hand.
pub fn set_budget(spec: Option<&Spec>) -> Option<Budget> {
    let budget = budget_for(spec.map(estimate).as_ref());
    dsgd_runtime::budget::set(budget.clone());
    budget
}

fn budget_for(estimate: Option<&Estimate>) -> Option<Budget> {
    let held = dsgd_runtime::budget::held().map_or(0.0, |h| h.0 as f64);
    let address_space = address_space_limit().map(|l| l.saturating_sub(256 << 20));
    if let Some(mb) = std::env::var("DSGD_MEMORY_BUDGET_MB").ok().and_then(|v| v.parse::<u64>().ok()) {
        let why = "DSGD_MEMORY_BUDGET_MB".to_string();
        return Some(Budget { resident: mb << 20, address_space, why });
    }
    let machine = available_memory().map(|a| 0.9 * (a + held));
    let spec = estimate.map(|e| {
        let b = (4.0 * e.bytes).max(e.bytes + 2.0 * 1024f64.powi(3));
        (b, format!("the spec's estimate of {} with room to spare; --force lifts it", human(e.bytes)))
    });
    let (resident, why) = match (spec, machine) {
        (Some(s), Some(m)) if s.0 < m => s,
        (_, Some(m)) => (m, "90% of the memory this machine has available".to_string()),
        (Some(s), None) => s,
        (None, None) => return None,
    };
    Some(Budget { resident: resident as u64, address_space, why })
}

/// What `dsgd check` warns about: [`send_rate_warnings`] and [`timeout_warnings`].
pub fn warnings(spec: &Spec) -> Vec<String> {
    let mut out = send_rate_warnings(spec);
    out.extend(timeout_warnings(spec));
    out
}

/// What `dsgd check` warns about in a synchronous spec with backup workers or a tree: a
/// failure-detection timeout shorter than the least time a healthy member waits in an iteration
/// without hearing from the others (its step, then the aggregator's gathering and sending back
/// of whole models, or one whole message of the tree, through a NIC or, across racks, the
/// uplink), so that every member times out and forms a new membership every iteration instead of
/// stepping (found by `dsgd torture`, seed 187048: 32 members, 8 MB, racks with a 2 Gb/s uplink
/// and a 0.437 s timeout: no update in 5 s).
pub fn timeout_warnings(spec: &Spec) -> Vec<String> {
    let Some(c) = spec.algorithm.sync() else { return Vec::new() };
    let n = spec.nodes as f64;
    if n < 2.0 {
        return Vec::new();
    }
    let bits = 32.0 * wire_params(&spec.workload);
    let nic_s = wire_s(spec);
    let (rack, uplink_s) = match spec.network.topology {
        dsgd_sim::spec::TopologySpec::Racks { rack_size, uplink_gbps, .. } => {
            (rack_size as f64, bits / (uplink_gbps * 1e9))
        }
        dsgd_sim::spec::TopologySpec::Flat => (n, 0.0),
    };
    let outside = (n - rack).max(0.0);
    let (wait, why) = if c.backup_workers > 0 {
        // The aggregator (rank 0) takes n - b - 1 gradients in and sends n - 1 models out.
        let gather = (n - c.backup_workers as f64 - 1.0).max(0.0);
        let nic = (gather + n - 1.0) * nic_s;
        let up = ((gather - (rack - 1.0)).max(0.0) + outside) * uplink_s;
        (nic.max(up), "the backup aggregator gathers the gradients and sends the model back")
    } else if c.collective == CollectiveKind::Tree && c.buckets.is_none() {
        let one = if outside > 0.0 { uplink_s } else { nic_s };
        (one, "one whole model crosses the tree")
    } else {
        return Vec::new();
    };
    let quiet = spec.compute.step_time_ms / 1e3 * local_steps(spec) + wait;
    if c.timeout_s >= quiet {
        return Vec::new();
    }
    vec![format!(
        "algorithm.timeout_s is {} s, but in each iteration a member waits at least {quiet:.3} s without hearing from \
         the others ({why}{}): every member will time out and form a new membership every iteration instead of \
         stepping. Set algorithm.timeout_s well above it (e.g. {:.3})",
        c.timeout_s,
        if outside > 0.0 && wait > 0.0 { ", partly through the racks' uplink" } else { "" },
        3.0 * quiet
    )]
}

/// What `dsgd check` warns about: a node that sends faster than its NIC's bandwidth, so that its
/// messages pile up for as long as the run goes (push-sum gossip without `max_in_flight`).
pub fn send_rate_warnings(spec: &Spec) -> Vec<String> {
    let AlgorithmConfig::Gossip(c) = &spec.algorithm else { return Vec::new() };
    if c.mode != dsgd_runtime::protocols::gossip::GossipMode::Push || c.max_in_flight.is_some() {
        return Vec::new();
    }
    let bits = 32.0 * wire_params(&spec.workload);
    let every_s = c.tau as f64 * spec.compute.step_time_ms / 1e3;
    let rate_gbps = bits / every_s / 1e9;
    if rate_gbps <= spec.network.bandwidth_gbps {
        return Vec::new();
    }
    vec![format!(
        "each node pushes {:.1} MB every {:.3} ms ({rate_gbps:.1} Gb/s) through a {} Gb/s NIC: its messages pile up for \
         as long as the run goes, until the run outgrows its memory. Set algorithm.max_in_flight (e.g. 2) to push \
         only when the last pushes have gone, or lengthen compute.step_time_ms or algorithm.tau",
        bits / 8e6,
        every_s * 1e3,
        spec.network.bandwidth_gbps
    )]
}

/// Bytes as text (MiB or GiB).
pub fn human(bytes: f64) -> String {
    if bytes >= 1024f64.powi(3) {
        format!("{:.1} GiB", bytes / 1024f64.powi(3))
    } else {
        format!("{:.0} MiB", bytes / 1024f64.powi(2))
    }
}

/// Refuses a spec whose estimate exceeds 90% of the available memory (where it is known).
pub fn check_memory(spec: &Spec) -> crate::Result<()> {
    let (Some(avail), e) = (available_memory(), estimate(spec)) else { return Ok(()) };
    if e.bytes <= 0.9 * avail {
        return Ok(());
    }
    let drivers: Vec<String> = e
        .drivers
        .iter()
        .filter(|d| d.1 >= 0.01 * e.bytes)
        .take(3)
        .map(|(f, b)| format!("{f}: {}", human(*b)))
        .collect();
    Err(crate::Error::Memory { needed: human(e.bytes), available: human(avail), drivers: drivers.join("; ") })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Spec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_estimate_grows_with_nodes_and_parameters() {
        let small = estimate(&spec(r#"{"nodes": 4, "workload": {"kind": "quadratic", "dim": 1000}}"#));
        let big = estimate(&spec(r#"{"nodes": 4000, "workload": {"kind": "quadratic", "dim": 1000}}"#));
        assert!(big.bytes > 100.0 * (small.bytes - 64e6), "{big:?} vs {small:?}");
        // 4,000 ranks × 1,000 parameters × 16 bytes; the ring's steps are computed on demand.
        assert_eq!(big.drivers[0].1, 4000.0 * 1000.0 * 16.0, "{:?}", big.drivers);
        // A tree keeps its 2·ceil(log2 n) steps per member.
        let tree = estimate(&spec(r#"{"nodes": 4096, "algorithm": {"kind": "sync", "collective": "tree"}}"#));
        assert!(tree.drivers.iter().any(|d| d.1 == 4096.0 * 24.0 * 144.0), "{:?}", tree.drivers);
        let wide = estimate(&spec(r#"{"nodes": 4, "workload": {"kind": "quadratic", "dim": 100000000}}"#));
        assert_eq!(wide.drivers[0].1, 4.0 * 1e8 * 16.0);
    }

    #[test]
    fn events_follow_the_algorithms_rates_and_message_counts() {
        // 8 workers, 10 s of 100 ms steps without jitter, 1,000 parameters on 10 Gb/s with
        // 10 µs: a ring round is 0.1 s + 14 × (4 kB / 8 / 1.25 GB/s + 10 µs) = 0.100196 s, and
        // sends 14 messages a gradient.
        let ring = estimate(&spec(
            r#"{"nodes": 8, "workload": {"kind": "quadratic", "dim": 1000}, "compute": {"step_time_ms": 100},
            "stop": {"sim_time_s": 10}, "eval": {"every_s": 1}}"#,
        ));
        let rounds = 10.0 / (0.1 + 14.0 * (4000.0 / 8.0 / 1.25e9 + 10e-6));
        assert!((ring.events - (8.0 * rounds * 15.0 + 10.0)).abs() < 1e-6, "{}", ring.events);
        // Gossip computes while it exchanges: 800 gradients, 2 messages each.
        let gossip = estimate(&spec(
            r#"{"nodes": 8, "algorithm": {"kind": "gossip"}, "compute": {"step_time_ms": 100}, "stop": {"sim_time_s": 10}, "eval": {"every_s": 1}}"#,
        ));
        assert_eq!(gossip.events, 800.0 * 3.0 + 10.0);
        // The iteration rule stops a synchronous run first.
        let short = spec(r#"{"nodes": 8, "stop": {"sim_time_s": 1000, "iterations": 5}}"#);
        assert_eq!(expected_gradients(&short), 40.0);
        // A parameter server's shards bound it: 100 workers of 10 ms steps want 10,000 updates a
        // second, one shard's NIC moves a 4 MB model in and out 312.5 times a second.
        let ps = spec(
            r#"{"nodes": 100, "algorithm": {"kind": "async_ps", "shards": 1}, "compute": {"step_time_ms": 10},
            "workload": {"kind": "timing", "params": 1000000}, "stop": {"sim_time_s": 2}}"#,
        );
        assert!((expected_gradients(&ps) - 625.0).abs() < 1e-9, "{}", expected_gradients(&ps));
        // A synchronous round waits for the slowest of its workers' log-normal jitter.
        let jit = dsgd_sim::compute::Jitter::LogNormal { sigma: 0.1 };
        assert!(
            (slowest_factor(&jit, 100.0, 1.0) - (-0.005f64 + 0.1 * (2.0 * 100f64.ln()).sqrt()).exp()).abs() < 1e-12
        );
        assert!(slowest_factor(&jit, 100.0, 4.0) < slowest_factor(&jit, 100.0, 1.0));
    }

    #[test]
    fn a_timeout_shorter_than_a_backup_aggregators_round_is_warned_of() {
        // Torture's seed 187048: 32 members, 8 MB models, racks of 16 joined by a 2 Gb/s uplink:
        // the aggregator takes 15 gradients across the uplink and sends 16 models back, 31 × 32 ms,
        // after a 2 ms step.
        let racks = r#"{"nodes": 32, "algorithm": {"kind": "sync", "backup_workers": 1, "timeout_s": TIMEOUT},
            "workload": {"kind": "timing", "params": 2000000}, "compute": {"step_time_ms": 2},
            "network": {"bandwidth_gbps": 40, "topology": {"kind": "racks", "rack_size": 16, "uplink_gbps": 2}}}"#;
        let w = timeout_warnings(&spec(&racks.replace("TIMEOUT", "0.437")));
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("at least 0.994 s") && w[0].contains("uplink"), "{}", w[0]);
        assert!(timeout_warnings(&spec(&racks.replace("TIMEOUT", "3"))).is_empty());
        // On one switch the aggregator's NIC bounds it: (30 + 31) × 1.6 ms.
        let flat = racks
            .replace("TIMEOUT", "0.05")
            .replace(r#", "topology": {"kind": "racks", "rack_size": 16, "uplink_gbps": 2}"#, "");
        assert!(timeout_warnings(&spec(&flat))[0].contains("at least 0.100 s"), "{:?}", timeout_warnings(&spec(&flat)));
        // A ring hears from its neighbours all through the round: nothing to warn of.
        assert!(timeout_warnings(&spec(&flat.replace(r#""backup_workers": 1, "#, ""))).is_empty());
    }

    #[test]
    fn an_analytic_workloads_arithmetic_and_many_shards_count_in_the_wall_time() {
        // The fuzzer's long cases: 3 workers of a softmax regression of 31,383 parameters made
        // 2,949 gradients in 10 simulated seconds and 2.5-3.8 s of wall time; its events alone
        // come to milliseconds.
        let wide = r#"{"nodes": 3, "algorithm": {"kind": "async_ps", "shards": 2, "staleness_bound": 3},
            "workload": {"kind": "softmax", "classes": 3, "features": 10459, "train": 200, "test": 50},
            "compute": {"step_time_ms": 10}, "stop": {"sim_time_s": 10}, "eval": {"every_s": 0.5}}"#;
        let e = estimate(&spec(wide));
        assert!(e.wall_s > 1.5 && e.wall_s < 7.0, "{}", e.wall_s);
        assert!(e.wall_s > 20.0 * estimate(&spec(&wide.replace("10459", "4"))).wall_s);
        // 12,800 shards: each worker's model comes in 12,800 messages.
        let many = spec(&wide.replace(r#""shards": 2"#, r#""shards": 12800"#).replace("10459", "4"));
        assert!(ns_per_event(&many) > 3.0 * ns_per_event(&spec(wide)));
    }

    #[test]
    fn a_parameter_servers_messages_in_flight_are_counted() {
        // 256 workers with a pull or a push in flight with each of 100,000 shards.
        let e = estimate(&spec(
            r#"{"nodes": 256, "algorithm": {"kind": "async_ps", "shards": 100000},
            "workload": {"kind": "timing", "params": 1000000}}"#,
        ));
        assert_eq!(e.drivers[0].1, 256.0 * 100_000.0 * 2.0 * EVENT_BYTES, "{:?}", e.drivers);
        // Push-sum through a NIC slower than its pushes is warned about, unless flow-controlled.
        let push = r#"{"nodes": 4, "algorithm": {"kind": "gossip", "mode": "push"},
            "workload": {"kind": "quadratic", "dim": 1000000}, "compute": {"step_time_ms": 1}}"#;
        assert_eq!(send_rate_warnings(&spec(push)).len(), 1, "32 Mb a millisecond through 10 Gb/s");
        let flow = push.replace(r#""push"}"#, r#""push", "max_in_flight": 2}"#);
        assert!(send_rate_warnings(&spec(&flow)).is_empty());
    }

    #[test]
    fn mlp_parameters_are_counted_like_the_network() {
        let p = model_params(&spec(r#"{"workload": {"kind": "burn", "model": "mlp", "hidden": [128]}}"#).workload);
        assert_eq!(p, 784.0 * 128.0 + 128.0 + 128.0 * 10.0 + 10.0);
    }
}
