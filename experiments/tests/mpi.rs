//! Real runs over MPI on loopback: `mpirun -np 4` (oversubscribed on small machines). Built only
//! with the `mpi` feature; `.ci/run` installs Open MPI and runs these.
#![cfg(feature = "mpi")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn specs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/real")
}

/// One `mpirun` at a time: the tests of this file run in parallel threads, and four ranks each
/// on a 2-core machine would otherwise time one another's contention instead of the runtime.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn mpirun(dir: &Path, np: usize, args: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    Command::new("mpirun")
        .current_dir(dir)
        .args(["--allow-run-as-root", "--oversubscribe", "-np", &np.to_string(), env!("CARGO_BIN_EXE_dsgd")])
        .args(args)
        .output()
        .expect("mpirun is installed (apt-get install openmpi-bin libopenmpi-dev)")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The simulator's error bound per validation spec. Measured here (2 cores, 4 ranks, each spec
/// calibrated just before and after its run, mean message times; three validations of all 11):
/// the five small specs within 0.7%, the large-message specs within 4.2%, the real-gradient
/// specs within 8.9%. The real runs themselves vary by up to 37% from one validation to the next
/// on these machines, and the real-gradient specs most of all: their four ranks' burn gradients
/// share 2 cores with the ranks' message loops, and how the operating system schedules them is
/// not in the model (one CI machine, with median message times, gave sync_mlp -26.3% twice in a
/// row where this machine gave -2..-16%). So the real-gradient bound is wide: it still fails a
/// prediction that leaves out the ring (about half of sync_mlp's iteration) or replays the wrong
/// gradients. A spec that misses its bound is run once more, so one descheduled rank does not
/// fail CI but a systematic error does.
const BOUNDS: [(&str, f64); 11] = [
    ("sync", 0.05),
    ("async_ps", 0.05),
    ("easgd", 0.05),
    ("gossip", 0.05),
    ("sync_straggler", 0.05),
    ("async_ps_large", 0.10),
    ("async_ps_mlp", 0.30),
    ("easgd_mlp", 0.30),
    ("gossip_mlp", 0.30),
    ("sync_large", 0.10),
    ("sync_mlp", 0.30),
];

fn validate(dir: &Path, out: &str, names: &[&str]) -> (Output, Vec<serde_json::Value>) {
    let paths: Vec<String> = names.iter().map(|n| specs().join(format!("{n}.json")).display().to_string()).collect();
    let mut args = vec!["validate"];
    args.extend(paths.iter().map(String::as_str));
    args.extend(["--out", out]);
    let o = mpirun(dir, 4, &args);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(out).join("validation.json")).unwrap()).unwrap();
    let rows = v["comparisons"].as_array().unwrap().clone();
    assert_eq!(rows.len(), names.len(), "{v}");
    (o, rows)
}

#[test]
fn every_algorithm_runs_for_real_and_the_simulator_predicts_it() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<&str> = BOUNDS.iter().map(|b| b.0).collect();
    let (_, rows) = validate(dir.path(), "v", &names);
    let algorithms: Vec<&str> = rows.iter().map(|r| r["algorithm"].as_str().unwrap()).collect();
    assert_eq!(
        algorithms,
        [
            "sync",
            "async_ps",
            "easgd",
            "gossip-pull",
            "sync",
            "async_ps",
            "async_ps",
            "easgd",
            "gossip-pull",
            "sync",
            "sync"
        ]
    );
    let mut missed = Vec::new();
    for (r, (name, bound)) in rows.iter().zip(BOUNDS) {
        let (real, sim, err) =
            (r["real"].as_f64().unwrap(), r["simulated"].as_f64().unwrap(), r["error"].as_f64().unwrap());
        assert!(real > 0.0 && sim > 0.0, "{r}");
        assert!((err - (sim - real) / real).abs() < 1e-9, "the reported error is the relative difference: {r}");
        // The network fit is the one of the algorithm's traffic, up to its largest message.
        let pattern = if r["algorithm"] == "sync" { "ring" } else { "pairs" };
        assert_eq!(r["fit"]["pattern"], pattern, "{r}");
        assert!(r["fit"]["latency_us"].as_f64().unwrap() > 0.0, "{r}");
        // The fit goes through the spec's bulk message, timed at its size just before the run: a
        // ring chunk (a quarter of the model on 4 ranks) for sync, a model's worth for the others.
        let through = r["fit"]["through_bytes"].as_u64().unwrap();
        let timed: Vec<u64> = r["points"].as_array().unwrap().iter().map(|p| p["bytes"].as_u64().unwrap()).collect();
        assert!(timed.contains(&through), "{r}");
        let up_to = r["fit"]["up_to_bytes"].as_u64().unwrap();
        if pattern == "ring" {
            assert!(through * 4 <= up_to, "{r}");
        } else {
            assert_eq!(through, up_to, "{r}");
        }
        // The measured time per message the simulator charged: servers' per update, sync
        // workers' per chunk; gossip charges none.
        let charged = r["charged_us"].as_f64();
        assert_eq!(charged.is_some(), !name.starts_with("gossip"), "{r}");
        assert!(charged.is_none_or(|u| u > 0.0), "{r}");
        assert!(r["gradient_ms"].as_f64().unwrap() >= 1.0, "each real gradient lasts at least the spec's step: {r}");
        if err.abs() > bound {
            missed.push((name, bound));
        }
    }
    // What the simulator ran is written as run folders that replay bit for bit.
    let replay =
        Command::new(env!("CARGO_BIN_EXE_dsgd")).current_dir(dir.path()).args(["replay", "v"]).output().unwrap();
    assert!(replay.status.success(), "{}", text(&replay));
    assert!(text(&replay).contains("11 of 11 runs replayed identically"), "{}", text(&replay));
    assert!(dir.path().join("v/validation.png").exists());
    // A spec that missed its bound gets one more try: the bound must hold on it.
    for (name, bound) in missed {
        let (_, again) = validate(dir.path(), &format!("again-{name}"), &[name]);
        let err = again[0]["error"].as_f64().unwrap();
        assert!(err.abs() <= bound, "{name}: the simulator is off by {:+.1}% twice: {}", 100.0 * err, again[0]);
    }
    // The bound of --max-error is enforced: a bound no prediction meets fails the command.
    let a = specs().join("sync.json").display().to_string();
    let o = mpirun(dir.path(), 4, &["validate", &a, "--out", "w", "--max-error", "0.000001"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("is off by"), "{}", text(&o));
}

#[test]
fn a_real_run_writes_the_simulators_formats_and_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let spec = specs().join("gossip.json").display().to_string();
    let o = mpirun(
        dir.path(),
        4,
        &[
            "real",
            &spec,
            "--out",
            "r",
            "--set",
            "stop.sim_time_s=2",
            "--set",
            r#"faults=[{"kind":"crash","node":3,"at_s":0.5}]"#,
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r/summary.json")).unwrap()).unwrap();
    assert_eq!(s["faults"]["crashes"], 1, "{s}");
    assert!(s["updates"].as_u64().unwrap() > 50, "the three live ranks go on: {s}");
    let csv = std::fs::read_to_string(dir.path().join("r/metrics.csv")).unwrap();
    assert!(csv.lines().count() >= 4, "{csv}");
    // Losses fall on the live ranks.
    assert!(s["final_loss"].as_f64().unwrap() < 10.0, "{s}");
    // Local SGD's survivors form a new membership and go on averaging.
    let spec = specs().join("sync.json").display().to_string();
    let local = r#"algorithm={"kind":"local_sgd","local_steps":2,"timeout_s":0.5}"#;
    let crash = r#"faults=[{"kind":"crash","node":3,"at_s":0.7}]"#;
    let args = ["real", &spec, "--out", "l", "--set", "stop.sim_time_s=3", "--set", local, "--set", crash];
    let o = mpirun(dir.path(), 4, &args);
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("l/summary.json")).unwrap()).unwrap();
    assert_eq!(s["faults"]["crashes"], 1, "{s}");
    assert!(s["iterations"].as_u64().unwrap() > 20, "rounds go on after the crash: {s}");
    assert!(s["final_loss"].as_f64().unwrap() < 10.0, "{s}");
}

#[test]
fn faults_that_cannot_be_injected_for_real_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = specs().join("sync.json").display().to_string();
    let o = mpirun(
        dir.path(),
        4,
        &[
            "real",
            &spec,
            "--out",
            "r",
            "--set",
            r#"faults=[{"kind":"partition","from_s":0,"until_s":1,"groups":[[0,1],[2,3]]}]"#,
        ],
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("field `faults[0]`: partition cannot be injected in a real run"), "{}", text(&o));
    assert!(!dir.path().join("r").exists());
    // Nor can a collective that is a modelled delay.
    for (c, extra) in [("analytic", ""), ("analytic_hierarchical", r#","group_size":2"#)] {
        let set = format!(r#"algorithm={{"kind":"sync","collective":"{c}"{extra}}}"#);
        let o = mpirun(dir.path(), 4, &["real", &spec, "--out", "r", "--set", &set]);
        assert!(!o.status.success());
        assert!(
            text(&o).contains(&format!("field `algorithm.collective`: {c} charges a modelled delay")),
            "{}",
            text(&o)
        );
        assert!(!dir.path().join("r").exists());
    }
    // Nor a parameter server's modelled update time: a real server takes its real time.
    let ps = specs().join("async_ps.json").display().to_string();
    let set = r#"algorithm={"kind":"async_ps","update_time_us":100}"#;
    let o = mpirun(dir.path(), 4, &["real", &ps, "--out", "r", "--set", set]);
    assert!(!o.status.success());
    assert!(text(&o).contains("field `algorithm.update_time_us`: is 100; a real rank takes"), "{}", text(&o));
    assert!(!dir.path().join("r").exists());
    // Nor buckets all-reduced while the backward pass runs: a real rank cannot see inside it.
    let set = r#"algorithm={"kind":"sync","buckets":{"overlap":true}}"#;
    let o = mpirun(dir.path(), 4, &["real", &spec, "--out", "r", "--set", set]);
    assert!(!o.status.success());
    assert!(text(&o).contains("field `algorithm.buckets.overlap`: a real run cannot see inside"), "{}", text(&o));
    assert!(!dir.path().join("r").exists());
    // Nor a worker's modelled receive time.
    let o = mpirun(dir.path(), 4, &["real", &ps, "--out", "r", "--set", "compute.receive_time_us=50"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("field `compute.receive_time_us`: is 50; a real rank takes"), "{}", text(&o));
    assert!(!dir.path().join("r").exists());
    // Nor an output folder that is there already: said, and left as it was.
    std::fs::create_dir(dir.path().join("r")).unwrap();
    std::fs::write(dir.path().join("r/keep"), "mine").unwrap();
    let o = mpirun(dir.path(), 4, &["real", &spec, "--out", "r"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("r already exists; choose another --out (nothing was run)"), "{}", text(&o));
    assert_eq!(std::fs::read_dir(dir.path().join("r")).unwrap().count(), 1);
}

#[test]
fn a_sweep_under_mpirun_spreads_its_runs_and_matches_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = r#"{"name": "s", "base": {"nodes": 4, "workload": {"kind": "quadratic", "dim": 20},
        "stop": {"sim_time_s": 2}}, "grid": {"seed": [1, 2, 3], "algorithm.kind": ["sync", "gossip"]}}"#;
    std::fs::write(dir.path().join("s.json"), sweep).unwrap();
    let o = mpirun(dir.path(), 3, &["sweep", "s.json", "--out", "m", "--no-plots"]);
    assert!(o.status.success(), "{}", text(&o));
    let one = Command::new(env!("CARGO_BIN_EXE_dsgd"))
        .current_dir(dir.path())
        .args(["sweep", "s.json", "--out", "o", "--no-plots"])
        .output()
        .unwrap();
    assert!(one.status.success(), "{}", text(&one));
    let agg = |d: &str| std::fs::read_to_string(dir.path().join(d).join("aggregate.csv")).unwrap();
    assert_eq!(agg("m"), agg("o"), "the same digests and aggregates with 3 ranks as with one process");
}

#[test]
fn calibration_writes_spec_parts() {
    let dir = tempfile::tempdir().unwrap();
    let o = mpirun(
        dir.path(),
        4,
        &["calibrate", "--spec", &specs().join("sync.json").display().to_string(), "--out", "c.json", "--token-bucket"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("c.json")).unwrap()).unwrap();
    assert!(c["network"]["latency_us"].as_f64().unwrap() > 0.0, "{c}");
    // The measurements behind it: every size up to the spec's largest message, for one pair, all
    // pairs at once and the ring; a fit per pattern; the spec's own all-reduce; each worker's steps.
    let points = c["measured"]["points"].as_array().unwrap();
    assert!(points.len() >= 3, "{c}");
    for p in points {
        for k in ["one_way_s", "concurrent_one_way_s", "ring_one_way_s"] {
            assert!(p[k].as_f64().unwrap() > 0.0, "{k}: {p}");
        }
    }
    assert_eq!(c["measured"]["pattern_fits"].as_array().unwrap().len(), 3, "{c}");
    assert!(c["measured"]["all_reduce_s"].as_f64().unwrap() > 0.0, "{c}");
    // With --token-bucket: two streams from rank 0 to rank 1, the longer one taking longer.
    let t = c["measured"]["streams"]["times_s"].as_array().unwrap();
    assert!(t[0].as_f64().unwrap() > 0.0 && t[1].as_f64().unwrap() > t[0].as_f64().unwrap(), "{c}");
    let steps = c["measured"]["step_s"].as_array().unwrap();
    assert_eq!(steps.len(), 4, "one list of step times per worker rank: {c}");
    assert!(steps.iter().all(|s| s.as_array().unwrap().iter().all(|t| t.as_f64().unwrap() > 0.0)), "{c}");
    assert!(c["network"]["bandwidth_gbps"].as_f64().unwrap() > 0.0, "{c}");
    assert!(c["compute"]["step_time_ms"].as_f64().unwrap() > 0.0, "{c}");
}

#[test]
fn the_simulator_and_the_mpi_executor_end_a_deterministic_sync_run_with_the_same_replicas() {
    // Fixed steps, no jitter, 15 iterations: both executors draw the same minibatches from the
    // same named streams and sum the ring's chunks in the same order, so every rank's replica
    // must end bit for bit the same in both (the loss of each is compared exactly). The MLP
    // runs with a bucket per layer, all-reduced one after another after the gradient.
    // And local SGD: three local steps with momentum, DiLoCo's outer step, halving-doubling.
    let buckets = r#"algorithm={"kind":"sync","buckets":{"cap_mb":1e-6,"first_mb":1e-6}}"#;
    let local = r#"algorithm={"kind":"local_sgd","local_steps":3,"collective":"halving_doubling","outer":{"kind":"nesterov","lr":0.7,"momentum":0.9}}"#;
    for (name, extra) in [("sync.json", None), ("sync_mlp.json", Some(buckets)), ("sync.json", Some(local))] {
        same_replicas(name, extra);
    }
}

fn same_replicas(name: &str, extra: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let spec = specs().join(name).display().to_string();
    // 20 ms steps, so that no rank finishes a gradient between the last iteration and the stop.
    let mut sets = vec![
        "--set",
        "stop.iterations=15",
        "--set",
        "stop.sim_time_s=100",
        "--set",
        "stop.target_loss=null",
        "--set",
        "compute.step_time_ms=20",
    ];
    if let Some(e) = extra {
        sets.extend(["--set", e]);
    }
    let (s, r) = simulated_and_real(dir.path(), &spec, &sets, 4);
    for key in ["stop_reason", "iterations", "updates", "gradients", "final_node_losses", "final_loss"] {
        assert_eq!(s[key], r[key], "{name}, {key}: simulated {} against real {}", s[key], r[key]);
    }
    let losses = s["final_node_losses"].as_array().unwrap();
    assert_eq!(losses.len(), 4);
    assert!(losses.iter().all(|l| *l == losses[0]), "every replica after the same 15 iterations: {losses:?}");
}

/// Runs `spec` with `sets` in the simulator and over MPI on `np` ranks; both summaries.
fn simulated_and_real(dir: &Path, spec: &str, sets: &[&str], np: usize) -> (serde_json::Value, serde_json::Value) {
    let sim = Command::new(env!("CARGO_BIN_EXE_dsgd"))
        .current_dir(dir)
        .args(["run", spec, "--out", "sim"])
        .args(sets)
        .output()
        .unwrap();
    assert!(sim.status.success(), "{}", text(&sim));
    let mut args = vec!["real", spec, "--out", "real"];
    args.extend(sets);
    let o = mpirun(dir, np, &args);
    assert!(o.status.success(), "{}", text(&o));
    let read = |d: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(d).join("summary.json")).unwrap()).unwrap()
    };
    (read("sim"), read("real"))
}

#[test]
fn the_simulator_predicts_runs_across_an_emulated_network() {
    // Four hosts in network namespaces of their own, each NIC a veth into one bridge shaped to
    // 1 Gbit/s both ways by a token bucket (experiments/scripts/netns_cluster.sh): the ring's
    // 1 MB messages and the parameter server's 4 MB pulls go through TCP and queue at real NICs,
    // which loopback never does. Calibrated on that network (its token bucket fitted from
    // streams), the simulator predicts both within 15% (a few percent on a quiet machine); the
    // script leaves no namespace, bridge or veth.
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/netns_cluster.sh");
    let spec = |n: &str| specs().join(format!("{n}.json")).display().to_string();
    let (sync, ps) = (spec("sync_large"), spec("async_ps_large"));
    // One validation: its comparisons (name, simulated, real, error), or None where namespaces
    // cannot be made here.
    let validate = |out: &str| -> Option<Vec<(String, f64, f64, f64)>> {
        let o = {
            let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
            Command::new("bash")
                .current_dir(dir.path())
                .arg(&script)
                .args(["--hosts", "4", "--gbps", "1", "--prefix", "dsgdci", "--subnet", "10.213.7", "--"])
                .args([env!("CARGO_BIN_EXE_dsgd"), "validate", &sync, &ps, "--out", out, "--token-bucket"])
                .output()
                .expect("bash runs the script")
        };
        if o.status.code() == Some(77) {
            eprintln!("SKIPPED (no network namespaces here): {}", text(&o));
            return None;
        }
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(out).join("validation.json")).unwrap()).unwrap();
        let rows = v["comparisons"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{v}");
        Some(
            rows.iter()
                .map(|r| {
                    let f = |k: &str| r[k].as_f64().unwrap();
                    (r["name"].to_string(), f("simulated"), f("real"), f("error"))
                })
                .collect(),
        )
    };
    let Some(mut rows) = validate("v") else { return };
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("v/validation.json")).unwrap()).unwrap();
    for r in v["comparisons"].as_array().unwrap() {
        // Streams of the spec's messages: the ring's 250 kB chunks show the token bucket; the
        // server's 4 MB messages, of which the bucket is 3%, may not (then the plain fit).
        let t = r["streams"]["times_s"].as_array().unwrap();
        assert!(t[1].as_f64().unwrap() > t[0].as_f64().unwrap(), "{r}");
        // The ring's network is fitted to its all-reduce (the simulator's within 1% of the
        // timing); the server's NIC is timed under its workers' traffic.
        if r["name"] == "real-sync-large" {
            assert!(r["bucket"]["depth_kb"].as_f64().is_some_and(|d| d > 4.0), "streams show the token bucket: {r}");
            let [t, s] = [0, 1].map(|i| r["all_reduce_s"][i].as_f64().unwrap());
            assert!(t > 0.0 && (s >= t * 0.99), "{r}");
        } else {
            assert!(r["incast_gbps"].as_f64().is_some_and(|g| g > 0.1), "{r}");
        }
        // With a fitted bucket, the replayed spec sends past Open MPI's eager limit by rendezvous.
        let name = r["name"].as_str().unwrap();
        let replay = std::fs::read_to_string(dir.path().join("v/runs").join(name).join("spec.json")).unwrap();
        assert_eq!(replay.contains("\"rendezvous_kb\": 65.536"), r["bucket"].is_object(), "{replay}");
    }
    // A real run's time is a measurement on a shared machine: one that other work disturbed
    // (+15.7% once in CI, against a few percent on a quiet machine) is measured once more.
    if rows.iter().any(|r| r.3.abs() > 0.15) {
        eprintln!("measured again after {rows:?}");
        rows = validate("v2").expect("namespaces were made the first time");
    }
    for (name, simulated, real, err) in rows {
        assert!(err.abs() <= 0.15, "{name}: simulated {simulated} against real {real} ({err:+.3})");
    }
    let left = Command::new("ip").args(["-o", "link", "show"]).output().expect("ip runs");
    assert!(!String::from_utf8_lossy(&left.stdout).contains("dsgdci"), "interfaces left behind");
    let left = Command::new("ip").args(["netns", "list"]).output().expect("ip runs");
    assert!(!String::from_utf8_lossy(&left.stdout).contains("dsgdci"), "namespaces left behind");
}

#[test]
fn one_worker_of_a_server_or_a_centre_ends_with_the_same_model_in_both_executors() {
    // One worker and its parameter server (or EASGD centre): the worker's gradients, the
    // server's updates and their order are the same in the simulator and over MPI whatever the
    // timing, so the model after 30 updates must be the same to the last bit (its loss is
    // compared exactly). (With several workers the order of arrivals is the machine's.)
    for alg in [r#"algorithm={"kind":"async_ps"}"#, r#"algorithm={"kind":"easgd"}"#] {
        let dir = tempfile::tempdir().unwrap();
        let spec = specs().join("sync.json").display().to_string();
        let mut sets =
            vec!["--set", "nodes=1", "--set", alg, "--set", "stop.updates=30", "--set", "stop.sim_time_s=100"];
        sets.extend(["--set", "stop.target_loss=null", "--set", "compute.step_time_ms=20"]);
        let (s, r) = simulated_and_real(dir.path(), &spec, &sets, 2);
        for key in ["stop_reason", "updates", "gradients", "final_loss", "final_node_losses"] {
            assert_eq!(s[key], r[key], "{alg}, {key}: simulated {} against real {}", s[key], r[key]);
        }
        assert_eq!(s["updates"], 30, "{alg}");
    }
}

#[test]
fn every_algorithm_ends_with_the_real_runs_bits_when_the_simulator_replays_its_order() {
    // With several workers the order in which messages, gradients and timers reach a rank is
    // the machine's. The real run records it (order.json); the simulator, replaying it, hands
    // each rank the same events in the same order, so every model must end with the real
    // run's bits: the consensus loss and each replica's loss compared exactly. Four ranks each.
    let cases = [
        (r#"algorithm={"kind":"async_ps"}"#, "3"),
        (r#"algorithm={"kind":"async_ps","shards":2,"staleness_lr":"inverse"}"#, "2"),
        (r#"algorithm={"kind":"easgd","tau":2}"#, "3"),
        (r#"algorithm={"kind":"gossip","mode":"pull"}"#, "4"),
        (r#"algorithm={"kind":"gossip","mode":"push"}"#, "4"),
    ];
    for (alg, workers) in cases {
        let dir = tempfile::tempdir().unwrap();
        let spec = specs().join("sync.json").display().to_string();
        let nodes = format!("nodes={workers}");
        let sets = [
            "--set",
            alg,
            "--set",
            &nodes,
            "--set",
            "stop.updates=40",
            "--set",
            "stop.sim_time_s=100",
            "--set",
            "stop.target_loss=null",
            "--set",
            "compute.step_time_ms=5",
        ];
        let mut args = vec!["real", spec.as_str(), "--out", "real"];
        args.extend(sets);
        let o = mpirun(dir.path(), 4, &args);
        assert!(o.status.success(), "{alg}: {}", text(&o));
        let sim = Command::new(env!("CARGO_BIN_EXE_dsgd"))
            .current_dir(dir.path())
            .args(["run", &spec, "--out", "sim", "--order", "real/order.json"])
            .args(sets)
            .output()
            .unwrap();
        assert!(sim.status.success(), "{alg}: {}", text(&sim));
        let read = |d: &str| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(dir.path().join(d).join("summary.json")).unwrap()).unwrap()
        };
        let (s, r) = (read("sim"), read("real"));
        assert_eq!(s["stop_reason"], "replayed", "{alg}");
        for key in ["updates", "gradients", "final_loss", "final_node_losses"] {
            assert_eq!(s[key], r[key], "{alg}, {key}: simulated {} against real {}", s[key], r[key]);
        }
        assert!(r["updates"].as_u64().unwrap() >= 40, "{alg}: {r}");
        assert!(s["final_loss"].as_f64().is_some(), "{alg}: {s}");
        // The simulated run keeps the order it replayed, so `dsgd replay` reproduces it.
        let again =
            Command::new(env!("CARGO_BIN_EXE_dsgd")).current_dir(dir.path()).args(["replay", "sim"]).output().unwrap();
        assert!(
            again.status.success() && text(&again).contains("1 of 1 runs replayed identically"),
            "{alg}: {}",
            text(&again)
        );
    }
}
