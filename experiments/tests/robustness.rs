//! Every spec either runs or is refused clearly: the specs that used to panic, hang, wrap or
//! escape their folder are refused with the exact field, and nothing is written.

use std::process::Command;

mod common;
use common::{dsgd, text};

/// (spec, the field the error must name)
const REFUSED: &[(&str, &str)] = &[
    // Used to panic in the collective schedule, or wrap the message size to 216 bytes.
    (r#"{"nodes":5,"workload":{"kind":"quadratic","wire_params":18446744073709551615}}"#, "workload.wire_params"),
    (r#"{"nodes":5,"workload":{"kind":"quadratic","wire_params":4611686018427387904}}"#, "workload.wire_params"),
    // Capacity overflow.
    (r#"{"workload":{"kind":"quadratic","dim":9223372036854775808}}"#, "workload.dim"),
    (r#"{"batch":9223372036854775808}"#, "batch"),
    (r#"{"algorithm":{"kind":"async_ps","shards":9223372036854775808}}"#, "algorithm.shards"),
    // Hung at time 0, crawled, or hung gossip.
    (
        r#"{"network":{"latency_us":0,"bandwidth_gbps":1e300},"compute":{"step_time_ms":1e-300}}"#,
        "compute.step_time_ms",
    ),
    (r#"{"network":{"bandwidth_gbps":1e300}}"#, "network.bandwidth_gbps"),
    (r#"{"algorithm":{"kind":"sync","timeout_s":1e-9}}"#, "algorithm.timeout_s"),
    (
        r#"{"algorithm":{"kind":"gossip"},"compute":{"straggler":{"jitter":{"kind":"log_normal","sigma":30}}}}"#,
        "compute.straggler.jitter.sigma",
    ),
    // Paths inside tagged objects, duplicate keys, a list for an object.
    (r#"{"algorithm":{"kind":"async_ps","shards":2.5}}"#, "algorithm.shards"),
    (r#"{"faults":[{"kind":"crash","node":1,"at_s":1},{"kind":"crash","node":1,"at_s":"x"}]}"#, "faults[1].at_s"),
    (r#"{"algorithm":{"kind":"sync","colective":"ring"}}"#, "algorithm.colective"),
    (r#"{"algorithm":{"kind":"bogus"}}"#, "algorithm.kind"),
    (r#"{"nodes":2,"nodes":3}"#, "nodes"),
    (r#"{"stop":[5]}"#, "stop"),
    // Hierarchical collectives need groups; group sizes mean something only for them.
    (r#"{"algorithm":{"kind":"sync","collective":"hierarchical"}}"#, "algorithm.group_size"),
    (r#"{"algorithm":{"kind":"sync","collective":"hierarchical","group_size":0}}"#, "algorithm.group_size"),
    (r#"{"algorithm":{"kind":"sync","collective":"tree","group_size":4}}"#, "algorithm.group_size"),
    // Staleness remedies: λ must be at least 0, and they belong to the parameter server.
    (r#"{"algorithm":{"kind":"async_ps","delay_compensation":-1}}"#, "algorithm.delay_compensation"),
    (r#"{"algorithm":{"kind":"sync","staleness_lr":"inverse"}}"#, "algorithm.staleness_lr"),
    (r#"{"algorithm":{"kind":"async_ps","staleness_lr":"half"}}"#, "algorithm.staleness_lr"),
    (r#"{"algorithm":{"kind":"gossip","mode":"sideways"}}"#, "algorithm.mode"),
    // Push-sum's flow control: at least 1, and push mode only.
    (r#"{"algorithm":{"kind":"gossip","mode":"push","max_in_flight":0}}"#, "algorithm.max_in_flight"),
    (r#"{"algorithm":{"kind":"gossip","max_in_flight":1}}"#, "algorithm.max_in_flight"),
    // Gradient buckets: positive caps, message-level all-reduce, synchronous SGD only.
    (r#"{"algorithm":{"kind":"sync","buckets":{"cap_mb":0}}}"#, "algorithm.buckets.cap_mb"),
    (r#"{"algorithm":{"kind":"sync","buckets":{"first_mb":-1}}}"#, "algorithm.buckets.first_mb"),
    (r#"{"algorithm":{"kind":"sync","collective":"analytic","buckets":{}}}"#, "algorithm.buckets"),
    (r#"{"nodes":4,"algorithm":{"kind":"sync","backup_workers":1,"buckets":{}}}"#, "algorithm.buckets"),
    (r#"{"algorithm":{"kind":"gossip","buckets":{}}}"#, "algorithm.buckets"),
    (r#"{"algorithm":{"kind":"sync","buckets":{"overlap":"yes"}}}"#, "algorithm.buckets"),
    (r#"{"workload":{"kind":"timing","profile":"vgg"}}"#, "workload.profile"),
    (r#"{"workload":{"kind":"timing","profile":[]}}"#, "workload.profile"),
    (r#"{"workload":{"kind":"timing","profile":[{"params":0,"flops":1}]}}"#, "workload.profile[0].params"),
    // Local SGD: at least one local step, a sound outer step, no overlap of a change not yet made.
    (r#"{"algorithm":{"kind":"local_sgd","local_steps":0}}"#, "algorithm.local_steps"),
    (r#"{"algorithm":{"kind":"local_sgd","outer":{"kind":"nesterov","lr":0,"momentum":0.9}}}"#, "algorithm.outer.lr"),
    (
        r#"{"algorithm":{"kind":"local_sgd","outer":{"kind":"nesterov","lr":0.7,"momentum":1}}}"#,
        "algorithm.outer.momentum",
    ),
    (r#"{"algorithm":{"kind":"local_sgd","buckets":{"overlap":true}}}"#, "algorithm.buckets.overlap"),
    (r#"{"algorithm":{"kind":"local_sgd","backup_workers":1}}"#, "algorithm.backup_workers"),
    (r#"{"algorithm":{"kind":"local_sgd","collective":"analytic","buckets":{}}}"#, "algorithm.buckets"),
    // A name is not a path.
    (r#"{"name":"../../escape"}"#, "name"),
    (r#"{"name":"/tmp/abs"}"#, "name"),
];

#[test]
fn the_specs_that_broke_dsgd_are_refused_with_their_field() {
    let dir = tempfile::tempdir().unwrap();
    for (spec, field) in REFUSED {
        std::fs::write(dir.path().join("s.json"), spec).unwrap();
        let o = dsgd(dir.path(), &["run", "s.json", "--out", "out"]);
        assert_eq!(o.status.code(), Some(2), "{spec}: {}", text(&o));
        let msg = text(&o);
        assert!(msg.starts_with("error: s.json: field `") && msg.contains(&format!("`{field}`")), "{spec}: {msg}");
        assert!(!msg.contains("panicked"), "{spec}: {msg}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, ["s.json"], "{spec}: something was written");
    }
    assert!(!dir.path().join("../escape").exists());
}

#[test]
fn a_timing_workload_with_several_shards_runs() {
    let dir = tempfile::tempdir().unwrap();
    let spec = r#"{"algorithm":{"kind":"async_ps","shards":2},"workload":{"kind":"timing"},"stop":{"sim_time_s":3}}"#;
    std::fs::write(dir.path().join("s.json"), spec).unwrap();
    let o = dsgd(dir.path(), &["run", "s.json", "--out", "r"]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_spec_too_large_for_this_machine_is_refused_with_its_estimate() {
    let dir = tempfile::tempdir().unwrap();
    // 100,000 replicas of a million parameters: terabytes.
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"nodes": 100000, "workload": {"kind": "quadratic", "dim": 1000000}}"#,
    )
    .unwrap();
    let o = dsgd(dir.path(), &["run", "s.json", "--out", "r"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let msg = text(&o);
    assert!(msg.contains("GiB of memory") && msg.contains("nodes (100000)") && msg.contains("--force"), "{msg}");
    assert!(!dir.path().join("r").exists());
    let o = dsgd(dir.path(), &["check", "s.json", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let bytes = v["estimate"]["bytes"].as_f64().unwrap();
    assert!(bytes > 1e12, "{v}");
    // A small spec passes and its estimate is printed.
    std::fs::write(dir.path().join("small.json"), r#"{"nodes": 4, "stop": {"sim_time_s": 1}}"#).unwrap();
    let o = dsgd(dir.path(), &["check", "small.json"]);
    assert!(text(&o).contains("estimated peak memory"), "{}", text(&o));
    assert!(dsgd(dir.path(), &["run", "small.json", "--out", "ok"]).status.success());
}

#[test]
fn a_run_that_outgrows_its_memory_stops_naming_the_nic_that_holds_it_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // Push-sum every nanosecond through 10 Gb/s NICs: each node's messages pile up without end.
    let spec = r#"{"nodes": 16, "algorithm": {"kind": "gossip", "mode": "push", "peers": "exponential"},
        "workload": {"kind": "quadratic", "dim": 100}, "batch": 16, "optimizer": {"lr": 0.5},
        "compute": {"step_time_ms": 1e-06}, "stop": {"sim_time_s": 2}, "eval": {"every_s": 0.5}}"#;
    std::fs::write(dir.path().join("push.json"), spec).unwrap();
    let o = dsgd(dir.path(), &["check", "push.json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("warning: each node pushes") && text(&o).contains("max_in_flight"), "{}", text(&o));
    let o = run_with_budget(dir.path(), "push.json", "200");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let msg = text(&o);
    assert!(msg.contains("over its budget of 200 MB (DSGD_MEMORY_BUDGET_MB)"), "{msg}");
    assert!(msg.contains("NIC holds") && msg.contains("sends faster than its bandwidth allows"), "{msg}");
    assert!(!dir.path().join("r").exists(), "nothing half-done is written");
    // The same run with flow control stays small and finishes.
    let o = dsgd(dir.path(), &["check", "push.json", "--set", "algorithm.max_in_flight=2"]);
    assert!(!text(&o).contains("warning"), "{}", text(&o));
}

#[test]
fn a_probe_to_every_rank_from_every_member_stops_over_its_budget_naming_the_senders() {
    // Found by the fuzzer's memory-heavy cases (10,601 members took a 4 GB address space in one
    // doubling of the event queue): after a lost message every member of a ring probes every
    // rank at once, a million messages among 1,000 members.
    let dir = tempfile::tempdir().unwrap();
    let spec = r#"{"nodes": 1000, "algorithm": {"kind": "sync", "collective": "ring", "timeout_s": 0.5},
        "workload": {"kind": "quadratic", "dim": 20}, "compute": {"step_time_ms": 10}, "network": {"transport": "datagram"},
        "faults": [{"kind": "message_loss", "from_s": 0, "until_s": 1, "probability": 0.05}],
        "stop": {"sim_time_s": 2}, "eval": {"every_s": 0.5}}"#;
    std::fs::write(dir.path().join("probes.json"), spec).unwrap();
    let o = run_with_budget(dir.path(), "probes.json", "150");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let msg = text(&o);
    assert!(msg.contains("senders (at most 999 from one") && msg.contains("send to many others at once"), "{msg}");
    assert!(!dir.path().join("r").exists(), "nothing half-done is written");
}

#[test]
fn check_warns_of_a_timeout_that_a_backup_aggregators_round_outlasts() {
    // Found by `dsgd torture` (seed 187048): every iteration timed out and none stepped.
    let dir = tempfile::tempdir().unwrap();
    let spec = r#"{"nodes": 32, "algorithm": {"kind": "sync", "backup_workers": 1, "timeout_s": 0.437},
        "workload": {"kind": "timing", "params": 2000000}, "compute": {"step_time_ms": 2}, "stop": {"sim_time_s": 3},
        "network": {"bandwidth_gbps": 40, "topology": {"kind": "racks", "rack_size": 16, "uplink_gbps": 2}}}"#;
    std::fs::write(dir.path().join("backup.json"), spec).unwrap();
    let o = dsgd(dir.path(), &["check", "backup.json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("warning: algorithm.timeout_s is 0.437 s"), "{}", text(&o));
    let o = dsgd(dir.path(), &["run", "backup.json", "--out", "r", "--json"]);
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["updates"], 0, "the warning is true: {}", text(&o));
    let o = dsgd(dir.path(), &["check", "backup.json", "--set", "algorithm.timeout_s=3"]);
    assert!(!text(&o).contains("warning"), "{}", text(&o));
}

#[test]
fn half_written_folders_of_dead_processes_are_removed_at_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    // A process id that cannot be alive (above the kernel's maximum).
    let stale = runs.join(".x.partial-4294967295");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("spec.json"), "{}").unwrap();
    std::fs::write(dir.path().join("s.json"), r#"{"name": "x", "stop": {"sim_time_s": 1}}"#).unwrap();
    let o = dsgd(dir.path(), &["run", "s.json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!stale.exists(), "the stale folder is still there");
    assert!(text(&o).contains("left half written by a process (4294967295) that died"), "{}", text(&o));
    assert!(runs.join("x/summary.json").exists());
}

/// `dsgd run SPEC --out r` in `dir` under a memory budget of `mb` MB.
fn run_with_budget(dir: &std::path::Path, spec: &str, mb: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dsgd"))
        .current_dir(dir)
        .env("DSGD_MEMORY_BUDGET_MB", mb)
        .args(["run", spec, "--out", "r"])
        .output()
        .unwrap()
}

fn signal(child: &std::process::Child, sig: &str) {
    let ok = Command::new("kill").args([sig, &child.id().to_string()]).status().expect("kill runs").success();
    assert!(ok, "kill {sig} failed");
}

#[test]
fn an_interrupted_sweep_keeps_its_finished_runs_and_says_how_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sweep.json"), common::SLOW_SWEEP).unwrap();
    for sig in ["-INT", "-TERM"] {
        let out = format!("s{sig}");
        let child = Command::new(env!("CARGO_BIN_EXE_dsgd"))
            .current_dir(dir.path())
            .args(["sweep", "sweep.json", "--out", &out, "--jobs", "2", "--no-plots"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let runs = dir.path().join(&out).join("runs");
        common::wait_for_runs(&runs, 2);
        signal(&child, sig);
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(130), "{sig}: {}", text(&o));
        let msg = text(&o);
        assert!(
            msg.contains("interrupted:") && msg.contains(&format!("resume with: dsgd sweep sweep.json --out {out}")),
            "{msg}"
        );
        let kept = common::finished_runs(&runs);
        assert!((2..20).contains(&kept), "{sig}: {kept} runs kept");
        let partial = common::partial_runs(&runs);
        assert!(partial.is_empty(), "{sig}: unfinished runs left: {partial:?}");
        let o = dsgd(dir.path(), &["sweep", "sweep.json", "--out", &out, "--no-plots"]);
        assert!(
            text(&o).contains(&format!("{} runs done now, {kept} already done earlier", 20 - kept)),
            "{}",
            text(&o)
        );
    }
}

#[test]
fn an_interrupted_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // A long run: a million simulated seconds of a 16-node ring.
    let spec = r#"{"nodes": 16, "workload": {"kind": "quadratic", "dim": 10}, "compute": {"step_time_ms": 1},
        "stop": {"sim_time_s": 1000000}, "eval": {"every_s": 1000}}"#;
    std::fs::write(dir.path().join("s.json"), spec).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_dsgd"))
        .current_dir(dir.path())
        .args(["run", "s.json", "--out", "r"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    signal(&child, "-INT");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    assert!(text(&o).contains("nothing was written"), "{}", text(&o));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(left, ["s.json"]);
}
