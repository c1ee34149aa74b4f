//! What a run writes: `spec.json` (resolved), `summary.json`, `metrics.csv`, `timeline.csv`, and
//! with `--trace` a Chrome trace. Files are written to a temporary folder beside the target and
//! renamed into place at the end, so a run folder is either complete or absent.

use crate::spec::Spec;
use dsgd_runtime::metrics::{Note, Sample, TimeBreakdown};
use dsgd_runtime::outcome::{RunResult, StopReason};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Mean, median and 99th percentile of synchronous iteration times, seconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct IterationTimes {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Fault counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FaultCounts {
    /// Crashes.
    pub crashes: u64,
    /// Restarts.
    pub restarts: u64,
    /// Messages lost because an end crashed.
    pub lost_to_crashes: u64,
    /// Messages lost to partitions.
    pub lost_to_partitions: u64,
    /// Messages lost at random.
    pub lost_at_random: u64,
}

/// When and at which loss a run diverged.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    /// Simulated time of the first evaluation that showed it, seconds.
    pub time_s: f64,
    /// The loss then (null when it was not a number).
    pub loss: Option<f64>,
}

pub use dsgd_runtime::metrics::DIVERGENCE_FACTOR;

/// `summary.json`. Fields added after the first release default when an older file is read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The spec's name.
    pub name: String,
    /// Algorithm label.
    pub algorithm: String,
    /// Workers.
    pub nodes: usize,
    /// Seed.
    pub seed: u64,
    /// Hash (FNV-1a, hex) of the resolved spec's compact JSON: what a resumed sweep compares.
    #[serde(default)]
    pub spec_hash: String,
    /// The run's digest (hex): events, evaluated losses and final parameters.
    pub digest: String,
    /// Events processed.
    pub events: u64,
    /// Simulated seconds at the end.
    pub sim_time_s: f64,
    /// Wall-clock seconds the simulation took (the only field that varies between replays).
    pub wall_time_s: f64,
    /// Why the run ended.
    pub stop_reason: String,
    /// Updates applied.
    pub updates: u64,
    /// Updates per simulated second.
    pub updates_per_s: f64,
    /// Gradients computed.
    pub gradients: u64,
    /// Synchronous iterations (sync only).
    pub iterations: u64,
    /// Iteration times (sync only).
    pub iteration_time_s: Option<IterationTimes>,
    /// Loss of the consensus model at the end (null when no model existed then, or when it was
    /// not a finite number; see `diverged`).
    pub final_loss: Option<f64>,
    /// Its accuracy, for classifiers.
    pub final_accuracy: Option<f64>,
    /// Simulated time at which the target was reached.
    pub time_to_target_s: Option<f64>,
    /// Evaluations at which no model existed (every replica down, or a server shard down): they
    /// have no loss and cannot meet the target.
    #[serde(default)]
    pub evaluations_without_model: u64,
    /// When the consensus loss first became non-finite or exceeded `DIVERGENCE_FACTOR` times
    /// its first value; null if it never did.
    #[serde(default)]
    pub diverged: Option<Divergence>,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Messages sent.
    pub messages_sent: u64,
    /// Mean staleness of applied updates.
    pub mean_staleness: f64,
    /// Staleness -> count.
    pub staleness_histogram: BTreeMap<u64, u64>,
    /// Fault counters.
    pub faults: FaultCounts,
    /// Messages lost at random and sent again (reliable transport).
    #[serde(default)]
    pub retransmissions: u64,
    /// Bytes those retransmissions sent again.
    #[serde(default)]
    pub bytes_retransmitted: u64,
    /// Seconds the retransmitted messages waited for their timeouts, summed over messages.
    #[serde(default)]
    pub retransmission_wait_s: f64,
    /// What happened (crashes, restarts, timeouts, membership changes).
    pub events_log: Vec<Note>,
    /// Time breakdown per rank, seconds.
    pub time_breakdown: Vec<TimeBreakdown>,
    /// Seconds each rank's NIC spent transmitting (its bytes sent over its bandwidth). Beyond
    /// the rank's `communicating` time it is communication that overlapped other work (a gossip
    /// exchange during a gradient, a server answering pulls).
    #[serde(default)]
    pub nic_send_s: Vec<f64>,
    /// Final loss of each rank's replica (null for ranks without one).
    pub final_node_losses: Vec<Option<f64>>,
    /// Each worker's training samples per class, where `workload.partition` splits the training
    /// set (absent where every worker samples all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_histograms: Option<Vec<Vec<u64>>>,
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The first evaluation at which the loss diverged (see [`DIVERGENCE_FACTOR`]).
pub fn divergence(samples: &[Sample]) -> Option<Divergence> {
    dsgd_runtime::metrics::diverged_at(samples).map(|s| Divergence { time_s: s.time_s, loss: s.loss.and_then(finite) })
}

/// FNV-1a hash of the resolved spec's compact JSON, as hex.
pub fn spec_hash(spec: &Spec) -> String {
    let json = serde_json::to_string(spec).expect("plain data serialises");
    format!("{:016x}", dsgd_sim::rng::fnv1a64(json.as_bytes()))
}

impl Summary {
    /// Builds the summary of a finished run.
    pub fn new(spec: &Spec, r: &RunResult, wall_time_s: f64) -> Self {
        let last = r.metrics.samples.last();
        let mut its: Vec<f64> = r.metrics.iteration_times.iter().map(|d| d.as_secs_f64()).collect();
        its.sort_by(f64::total_cmp);
        let iteration_time_s = (!its.is_empty()).then(|| IterationTimes {
            mean: its.iter().sum::<f64>() / its.len() as f64,
            p50: percentile(&its, 0.5),
            p99: percentile(&its, 0.99),
        });
        let sim_time_s = r.sim_time.as_secs_f64();
        Summary {
            name: spec.name.clone(),
            algorithm: spec.algorithm.label(),
            nodes: spec.nodes,
            seed: spec.seed,
            spec_hash: spec_hash(spec),
            digest: format!("{:016x}", r.digest),
            events: r.stats.events,
            sim_time_s,
            wall_time_s,
            stop_reason: match r.stop {
                StopReason::SimTime => "sim_time",
                StopReason::Iterations => "iterations",
                StopReason::Updates => "updates",
                StopReason::Target => "target",
                StopReason::Quiescent => "quiescent",
                StopReason::Replayed => "replayed",
            }
            .into(),
            updates: r.metrics.updates,
            updates_per_s: if sim_time_s > 0.0 { r.metrics.updates as f64 / sim_time_s } else { 0.0 },
            gradients: r.metrics.gradients,
            iterations: r.metrics.iterations(),
            iteration_time_s,
            final_loss: last.and_then(|s| s.loss).and_then(finite),
            final_accuracy: last.and_then(|s| s.accuracy),
            time_to_target_s: r.time_to_target,
            evaluations_without_model: r.metrics.samples.iter().filter(|s| s.loss.is_none()).count() as u64,
            diverged: divergence(&r.metrics.samples),
            bytes_sent: r.stats.bytes_sent,
            messages_sent: r.stats.messages_sent,
            mean_staleness: r.metrics.mean_staleness(),
            staleness_histogram: r.metrics.staleness.clone(),
            faults: FaultCounts {
                crashes: r.stats.crashes,
                restarts: r.stats.restarts,
                lost_to_crashes: r.stats.lost_crash,
                lost_to_partitions: r.stats.lost_partition,
                lost_at_random: r.stats.lost_random,
            },
            retransmissions: r.stats.retransmissions,
            bytes_retransmitted: r.stats.bytes_retransmitted,
            retransmission_wait_s: r.stats.retransmission_wait.as_secs_f64(),
            events_log: r.metrics.notes.clone(),
            time_breakdown: r.times.clone(),
            nic_send_s: r
                .metrics
                .bytes_by_rank
                .iter()
                .enumerate()
                .map(|(rank, &b)| {
                    let gbps = spec.network.per_node.get(&rank).and_then(|n| n.bandwidth_gbps);
                    b as f64 * 8.0 / (gbps.unwrap_or(spec.network.bandwidth_gbps) * 1e9)
                })
                .collect(),
            final_node_losses: last
                .map(|s| s.node_losses.iter().map(|l| l.and_then(finite)).collect())
                .unwrap_or_default(),
            label_histograms: None,
        }
    }

    /// The summary with the workers' label histograms of `workload`'s partition.
    pub fn with_histograms(mut self, workload: &dyn dsgd_models::Workload) -> Self {
        self.label_histograms = workload.label_histograms();
        self
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or(String::new(), |v| format!("{v}"))
}

/// `metrics.csv`: one row per evaluation. `loss` is empty when it is not a finite number or
/// when there was no model (`model` is 0 then).
pub fn metrics_csv(r: &RunResult) -> String {
    let mut s = String::from("time_s,loss,accuracy,consensus_distance,updates,live,model\n");
    for m in &r.metrics.samples {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{}",
            m.time_s,
            opt(m.loss.and_then(finite)),
            opt(m.accuracy),
            m.consensus_distance,
            m.updates,
            m.live,
            u8::from(m.loss.is_some())
        );
    }
    s
}

/// True if `new` holds the same table as `old`, comparing only `old`'s columns (so a run
/// recorded before a column was added still replays).
pub fn same_csv(old: &str, new: &str) -> bool {
    if old == new {
        return true;
    }
    let (mut o, mut n) = (old.lines(), new.lines());
    let (Some(oh), Some(nh)) = (o.next(), n.next()) else { return false };
    let nh: Vec<&str> = nh.split(',').collect();
    let Some(cols) = oh.split(',').map(|c| nh.iter().position(|h| *h == c)).collect::<Option<Vec<usize>>>() else {
        return false;
    };
    let (o, n): (Vec<&str>, Vec<&str>) = (o.collect(), n.collect());
    o.len() == n.len()
        && o.iter().zip(&n).all(|(a, b)| {
            let b: Vec<&str> = b.split(',').collect();
            a.split(',').eq(cols.iter().map(|&c| b.get(c).copied().unwrap_or("")))
        })
}

/// `timeline.csv`: what each rank did over the timeline window.
pub fn timeline_csv(r: &RunResult) -> String {
    let mut s = String::from("rank,state,from_s,to_s\n");
    for i in &r.metrics.timeline {
        let state = match i.state {
            dsgd_runtime::metrics::State::Phase(p) => format!("{p:?}").to_lowercase(),
            dsgd_runtime::metrics::State::Crashed => "crashed".into(),
        };
        let _ = writeln!(s, "{},{},{},{}", i.rank, state, i.from_s, i.to_s);
    }
    s
}

/// Writes `bytes` to `path` atomically (a temporary file in the same folder, then a rename). A
/// path that names something other than a regular file (`/dev/null`, `/dev/stdout`, a pipe),
/// directly or through a link, is written to as it is: a rename would put a file in its place
/// (as root, `--json /dev/null` once turned the machine's `/dev/null` into a file).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return std::fs::OpenOptions::new().write(true).open(path)?.write_all(bytes);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp =
        dir.join(format!(".{}.tmp-{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("out"), std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// A folder being written: files go to a hidden sibling, renamed to `dest` by [`Staging::commit`];
/// dropped without committing, it is removed.
pub struct Staging {
    tmp: PathBuf,
    dest: PathBuf,
    done: bool,
}

impl Staging {
    /// Starts writing what will become `dest` (whose parent is created if missing).
    pub fn new(dest: &Path) -> std::io::Result<Self> {
        let parent = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent)?;
        remove_stale_partials(parent);
        let name = dest.file_name().and_then(|n| n.to_str()).unwrap_or("run");
        let tmp = parent.join(format!(".{name}.partial-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)?;
        }
        std::fs::create_dir_all(&tmp)?;
        Ok(Staging { tmp, dest: dest.to_path_buf(), done: false })
    }
    /// Writes one file into the staging folder.
    pub fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        std::fs::write(self.tmp.join(name), bytes)
    }
    /// Moves the folder into place.
    pub fn commit(mut self) -> std::io::Result<PathBuf> {
        std::fs::rename(&self.tmp, &self.dest)?;
        self.done = true;
        Ok(self.dest.clone())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// Removes the half-written folders (`.NAME.partial-PID`) that processes which no longer exist
/// left in `parent` (killed before they could clean up), saying so on stderr. Folders of live
/// processes are left alone; where processes cannot be looked up (no `/proc`), nothing is removed.
pub fn remove_stale_partials(parent: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix('.').and_then(|n| n.rsplit_once(".partial-")).map(|(_, p)| p) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let dead = pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists();
        if dead && std::fs::remove_dir_all(e.path()).is_ok() {
            eprintln!("removed {}, left half written by a process ({pid}) that died", e.path().display());
        }
    }
}

/// `base`, or `base-2`, `base-3`... whichever does not exist yet.
pub fn fresh_dir(base: &Path) -> PathBuf {
    if !base.exists() {
        return base.to_path_buf();
    }
    (2..).map(|k| PathBuf::from(format!("{}-{k}", base.display()))).find(|p| !p.exists()).expect("some suffix is free")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_write_replaces_a_file_but_writes_through_to_a_device() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rows.json");
        std::fs::write(&file, "old").unwrap();
        write_atomic(&file, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");
        // A link to /dev/null: the device is written to and the link stays. (Were the rename
        // done, it would replace the link, not the device.)
        let link = dir.path().join("null.json");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        write_atomic(&link, b"{}").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary file is left");
    }
}
