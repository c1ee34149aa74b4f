//! `dsgd bench-scale`: how the engine's cost grows with the cluster. For every algorithm and
//! node count it runs one fixed spec (a timing workload of 1 M parameters, 100 ms steps, 10 Gb/s,
//! 10 µs) in a child process of its own, so that each case's peak memory is its own, and reports
//! wall time, events, events per second, nanoseconds per event and peak resident memory.

use crate::load::spec_from_value;
use crate::spec::Spec;
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// The algorithms the benchmark knows, by name.
pub const ALGORITHMS: &[&str] =
    &["sync_ring", "sync_hierarchical", "sync_backup", "async_ps", "easgd", "gossip_pull", "gossip_push"];

/// The asynchronous algorithms' timeout in the benchmark, longer than a busy server's queue
/// takes to drain (10,000 EASGD workers wait about a minute for their turn at the centre), so no
/// worker gives up and asks again. With the default 5 s they pile up requests faster than the
/// centre's NIC serves them (congestion collapse): memory then grows with the backlog, which is
/// what such a cluster would do, but not what this benchmark measures. Not much longer either:
/// every exchange leaves a timeout timer pending for this long.
const PATIENT: f64 = 120.0;

/// One measured case.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Algorithm name (one of [`ALGORITHMS`]).
    pub algorithm: String,
    /// Nodes (workers).
    pub nodes: usize,
    /// What was simulated, in words.
    pub work: String,
    /// Engine events.
    pub events: u64,
    /// Messages sent.
    pub messages: u64,
    /// Wall seconds of the run (the spec's setup and the simulation).
    pub wall_s: f64,
    /// Peak resident memory of the process, bytes (`VmHWM`).
    pub peak_bytes: u64,
    /// The run's digest.
    pub digest: String,
    /// Runs measured (the row has the fastest wall time and the largest peak memory).
    #[serde(default = "one")]
    pub runs: usize,
    /// `dsgd check`'s expected events for the case ([`crate::bounds::estimate`]).
    #[serde(default)]
    pub estimated_events: f64,
    /// `dsgd check`'s expected wall seconds for the case.
    #[serde(default)]
    pub estimated_wall_s: f64,
    /// `dsgd check`'s estimated peak memory for the case, bytes.
    #[serde(default)]
    pub estimated_bytes: f64,
}

fn one() -> usize {
    1
}

impl Row {
    /// Events per wall second.
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.wall_s.max(1e-9)
    }
    /// Wall nanoseconds per event.
    pub fn ns_per_event(&self) -> f64 {
        self.wall_s * 1e9 / self.events.max(1) as f64
    }
}

/// Ranks per rack of the hierarchical case: about √n, dividing n where a round number does.
fn rack_size(nodes: usize) -> usize {
    let root = (nodes as f64).sqrt().round().max(1.0) as usize;
    (root..=2 * root).find(|g| nodes.is_multiple_of(*g)).unwrap_or(root)
}

/// The spec of one case, and what it simulates in words.
pub fn case(algorithm: &str, nodes: usize) -> Result<(Spec, String)> {
    if nodes == 0 {
        return Err(Error::argument("--nodes", "every node count must be at least 1"));
    }
    let mut v = json!({
        "name": format!("bench-{algorithm}-{nodes}"),
        "nodes": nodes,
        "workload": {"kind": "timing", "params": 1_000_000},
        "compute": {"step_time_ms": 100, "straggler": {"jitter": {"kind": "log_normal", "sigma": 0.1}}},
        "network": {"latency_us": 10, "bandwidth_gbps": 10},
        // No timeline: it records every phase change of the first 5 simulated seconds, which is
        // all of a short large case and a sliver of a long small one.
        "eval": {"every_s": 1000, "timeline_s": 0},
        "stop": {"sim_time_s": 1000},
    });
    // Iterations or simulated seconds: a few million events at 100 nodes, and what the same
    // settings cost at 1,000 and 10,000 (the message-level ring's 2(n-1) steps make one
    // iteration of 10,000 nodes 2×10^8 messages: one iteration is run there).
    let iterations = |at_100: u64| (at_100 * 100 / nodes as u64).max(1);
    let n = nodes as f64;
    let (algorithm_json, stop, work): (Value, Value, String) = match algorithm {
        "sync_ring" if nodes > 20_000 => {
            let problem = format!(
                "a message-level ring of {nodes} members sends {:.1e} messages an iteration; \
                 sync_backup and sync_hierarchical scale further",
                2.0 * n * (n - 1.0)
            );
            return Err(Error::argument("--nodes", problem));
        }
        "sync_ring" => {
            let it = iterations(100);
            let work = format!("{it} iteration{}", if it == 1 { "" } else { "s" });
            (json!({"kind": "sync", "collective": "ring"}), json!({"iterations": it}), work)
        }
        "sync_hierarchical" => {
            let g = rack_size(nodes);
            v["network"]["topology"] = json!({"kind": "racks", "rack_size": g, "uplink_gbps": 40});
            let it = iterations(400);
            let work = format!("{it} iteration{}, racks of {g}", if it == 1 { "" } else { "s" });
            (json!({"kind": "sync", "collective": "hierarchical"}), json!({"iterations": it}), work)
        }
        // One aggregator and one backup worker: the aggregator gathers every gradient, so the
        // events grow as the nodes (2 simulated seconds at 100,000 nodes), with a
        // gradient of 100 parameters (400 bytes, as the quadratic's): a model the size of the
        // others' would take the aggregator's NIC 320 s to gather at 100,000 nodes.
        "sync_backup" => {
            v["workload"]["params"] = json!(100);
            let secs = (2e5 / n).clamp(2.0, 200.0);
            let alg = json!({"kind": "sync", "backup_workers": 1, "timeout_s": PATIENT});
            (alg, json!({"sim_time_s": secs}), format!("{secs} s, 1 backup worker, 100 parameters"))
        }
        "async_ps" => {
            let shards = 10.min(nodes);
            // Ten shards whatever the size (n × shards messages are in flight at once), which
            // their NICs keep busy: 40 s at 100 nodes, 4 s at 10,000.
            let secs = (400.0 / n.sqrt() * 10.0).round() / 10.0;
            let work = format!("{secs} s, {shards} shards");
            (json!({"kind": "async_ps", "shards": shards, "timeout_s": PATIENT}), json!({"sim_time_s": secs}), work)
        }
        // The centre's NIC bounds the exchanges whatever the node count.
        "easgd" => (json!({"kind": "easgd", "timeout_s": PATIENT}), json!({"sim_time_s": 600}), "600 s".into()),
        "gossip_pull" | "gossip_push" => {
            let mode = if algorithm == "gossip_pull" { "pull" } else { "push" };
            // Events grow as nodes: 200 s at 100 nodes, 2 s at 10,000.
            let secs = 20_000.0 / n;
            let alg = json!({"kind": "gossip", "mode": mode, "timeout_s": PATIENT});
            (alg, json!({"sim_time_s": secs}), format!("{secs} s"))
        }
        other => {
            let problem = format!("unknown algorithm {other:?}; known: {}", ALGORITHMS.join(", "));
            return Err(Error::argument("--algorithms", problem));
        }
    };
    v["algorithm"] = algorithm_json;
    v["stop"] = json!({"sim_time_s": 1000});
    for (k, x) in stop.as_object().expect("an object") {
        v["stop"][k] = x.clone();
    }
    let spec = spec_from_value("bench-scale", v)?;
    Ok((spec, work))
}

/// This process's peak resident memory in bytes (Linux `VmHWM`), or 0 where unknown.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Runs one case in this process.
pub fn measure(algorithm: &str, nodes: usize) -> Result<Row> {
    let (spec, work) = case(algorithm, nodes)?;
    let estimate = crate::bounds::estimate(&spec);
    let started = std::time::Instant::now();
    let outcome = crate::execute::execute(&spec, false)?;
    let wall_s = started.elapsed().as_secs_f64();
    Ok(Row {
        algorithm: algorithm.into(),
        nodes,
        work,
        events: outcome.summary.events,
        messages: outcome.result.stats.messages_sent,
        wall_s,
        peak_bytes: peak_rss(),
        digest: outcome.summary.digest,
        runs: 1,
        estimated_events: estimate.events,
        estimated_wall_s: estimate.wall_s,
        estimated_bytes: estimate.bytes,
    })
}

/// Runs every case (`algorithms` × `nodes`) in a child process of `exe` (`dsgd bench-scale
/// --one`), `repeat` times unless a run takes over 10 s, and keeps the fastest wall time and the
/// largest peak memory; every run of a case must give the same digest. `progress` sees each row.
pub fn run_cases(
    exe: &std::path::Path,
    algorithms: &[String],
    nodes: &[usize],
    repeat: usize,
    mut progress: impl FnMut(&Row),
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for a in algorithms {
        for &n in nodes {
            let mut best: Option<Row> = None;
            for _ in 0..repeat.max(1) {
                let n_arg = n.to_string();
                let fail = |problem: String| Error::Bench { case: format!("{a} at {n} nodes"), problem };
                let o = std::process::Command::new(exe)
                    .args(["bench-scale", "--one", "--algorithms", a.as_str(), "--nodes", n_arg.as_str()])
                    .output()
                    .map_err(|e| fail(format!("cannot run {}: {e}", exe.display())))?;
                if dsgd_runtime::cancel::requested() {
                    return Err(Error::Interrupted);
                }
                if !o.status.success() {
                    return Err(fail(format!("failed: {}", String::from_utf8_lossy(&o.stderr).trim())));
                }
                let row: Row =
                    serde_json::from_slice(&o.stdout).map_err(|e| fail(format!("unreadable result ({e})")))?;
                let long = row.wall_s > 10.0;
                best = Some(match best {
                    None => row,
                    Some(b) if b.digest != row.digest => {
                        return Err(fail(format!("two runs gave digests {} and {}", b.digest, row.digest)))
                    }
                    Some(b) => Row {
                        wall_s: b.wall_s.min(row.wall_s),
                        peak_bytes: b.peak_bytes.max(row.peak_bytes),
                        runs: b.runs + 1,
                        ..b
                    },
                });
                if long {
                    break;
                }
            }
            let row = best.expect("at least one run");
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The rows as a Markdown table, each measurement beside `dsgd check`'s estimate.
pub fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| algorithm | nodes | simulated | events (estimate) | wall s (estimate) | events/s | ns/event | peak MB (estimate) |\n\
         |---|---:|---|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        t.push_str(&format!(
            "| {} | {} | {} | {} ({:.2e}) | {:.2} ({:.2}) | {:.2} M | {:.0} | {:.0} ({:.0}) |\n",
            r.algorithm,
            r.nodes,
            r.work,
            r.events,
            r.estimated_events,
            r.wall_s,
            r.estimated_wall_s,
            r.events_per_s() / 1e6,
            r.ns_per_event(),
            r.peak_bytes as f64 / 1e6,
            r.estimated_bytes / 1e6
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_is_a_valid_spec_and_unknown_names_are_refused() {
        for a in ALGORITHMS {
            for n in [1, 100, 1000, 10_000] {
                if *a == "sync_backup" && n == 1 {
                    continue; // a backup worker needs another worker
                }
                let (spec, work) = case(a, n).unwrap_or_else(|e| panic!("{a} {n}: {e}"));
                assert_eq!(spec.nodes, n);
                assert!(!work.is_empty());
            }
        }
        let e = case("ring", 10).unwrap_err();
        assert!(
            matches!(&e, Error::Argument { flag: "--algorithms", problem } if problem.contains("sync_ring")),
            "{e}"
        );
        assert!(matches!(case("easgd", 0), Err(Error::Argument { flag: "--nodes", .. })));
        assert!(matches!(case("sync_ring", 100_000), Err(Error::Argument { flag: "--nodes", .. })));
        assert!(case("sync_backup", 100_000).is_ok());
        assert_eq!(rack_size(100), 10);
        assert_eq!(rack_size(1000), 40);
        assert_eq!(rack_size(10_000), 100);
    }

    #[test]
    fn a_measured_case_reports_what_its_run_did() {
        let row = measure("sync_ring", 4).expect("runs");
        // 4 nodes, 2500 iterations of 2·3 ring steps each member: 6 messages a member.
        assert_eq!(row.messages, 2500 * 4 * 6);
        assert!(row.events >= row.messages);
        assert!(row.peak_bytes > 0, "VmHWM is readable on Linux");
        assert!(table(&[row]).contains("| sync_ring | 4 | 2500 iterations |"));
    }

    #[test]
    fn the_estimate_is_within_twice_every_committed_measurement() {
        // results/bench/scale.json, measured by `dsgd bench-scale` on this project's 2-core
        // machines: dsgd check's expected events and wall time for each case within a factor 2.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../results/bench/scale.json");
        // DSGD_BLESS=1 writes the current estimates into the file's rows.
        let mut rows: Vec<Row> = serde_json::from_slice(&std::fs::read(path).expect("scale.json")).expect("rows");
        assert!(rows.len() >= 20, "{} rows", rows.len());
        let mut off = Vec::new();
        for r in &mut rows {
            let (spec, _) = case(&r.algorithm, r.nodes).expect("a case");
            let e = crate::bounds::estimate(&spec);
            (r.estimated_events, r.estimated_wall_s, r.estimated_bytes) = (e.events, e.wall_s, e.bytes);
            for (what, est, got) in [("events", e.events, r.events as f64), ("wall", e.wall_s, r.wall_s)] {
                let ratio = est / got;
                if !(0.5..=2.0).contains(&ratio) {
                    off.push(format!("{} at {}: {what} estimated {est:.3e}, measured {got:.3e}", r.algorithm, r.nodes));
                }
            }
        }
        if std::env::var_os("DSGD_BLESS").is_some() {
            std::fs::write(path, serde_json::to_string_pretty(&rows).expect("rows serialise") + "\n")
                .expect("writable");
        }
        assert!(off.is_empty(), "estimates off by more than 2x:\n{}", off.join("\n"));
    }
}
