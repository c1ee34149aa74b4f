//! The command line for scripts: `dsgd check`, `--json`, `dsgd diff`, exit codes, and flags that
//! would do nothing are refused.

use std::process::Output;

mod common;
use common::{dsgd, text};

/// Stdout as one JSON document (nothing else may be on it).
fn stdout_json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", text(o)))
}

const SPEC: &str =
    r#"{"name": "t", "nodes": 3, "workload": {"kind": "quadratic", "dim": 10}, "stop": {"sim_time_s": 2}}"#;

#[test]
fn check_validates_and_resolves_without_running() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.json"), SPEC).unwrap();
    let o = dsgd(dir.path(), &["check", "s.json", "--set", "seed=9", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = stdout_json(&o);
    assert_eq!(v["kind"], "spec");
    assert_eq!(v["spec"]["seed"], 9);
    assert_eq!(v["spec"]["network"]["latency_us"], 10.0, "defaults are filled in");
    assert!(!dir.path().join("runs").exists(), "check runs nothing");
    let o = dsgd(dir.path(), &["check", "s.json"]);
    assert!(o.status.success() && text(&o).contains("a valid spec: sync with 3 nodes"), "{}", text(&o));

    let sweep = r#"{"base": {"stop": {"sim_time_s": 1}}, "grid": [{"nodes": [2, 4], "seed": [1, 2, 3]}, {"algorithm": [{"kind": "gossip"}]}]}"#;
    std::fs::write(dir.path().join("sw.json"), sweep).unwrap();
    let o = dsgd(dir.path(), &["check", "sw.json", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = stdout_json(&o);
    assert_eq!((v["kind"].as_str(), v["runs"].as_u64()), (Some("sweep"), Some(7)));
    assert_eq!(v["points"][6]["assignment"]["algorithm"]["kind"], "gossip");
    assert!(text(&dsgd(dir.path(), &["check", "sw.json"])).contains("a valid sweep of 7 runs"));

    std::fs::write(dir.path().join("bad.json"), r#"{"nodes": 0}"#).unwrap();
    let o = dsgd(dir.path(), &["check", "bad.json", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout_json(&o)["error"].as_str().unwrap().contains("nodes"), "{}", text(&o));
}

#[test]
fn json_output_of_run_sweep_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.json"), SPEC).unwrap();
    let o = dsgd(dir.path(), &["run", "s.json", "--out", "r", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = stdout_json(&o);
    assert_eq!(v["dir"], "r");
    assert_eq!(v["nodes"], 3);
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r/summary.json")).unwrap()).unwrap();
    assert_eq!(v["digest"], recorded["digest"]);

    let o = dsgd(dir.path(), &["replay", "r", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = stdout_json(&o);
    assert_eq!((v["identical"].as_u64(), v["runs"].as_u64()), (Some(1), Some(1)));
    assert_eq!(v["verdicts"][0]["digest_now"], recorded["digest"]);

    let sweep = r#"{"base": {"workload": {"kind": "quadratic", "dim": 10}, "stop": {"sim_time_s": 1}}, "grid": {"nodes": [2, 3], "seed": [1, 2]}}"#;
    std::fs::write(dir.path().join("sw.json"), sweep).unwrap();
    let o = dsgd(dir.path(), &["sweep", "sw.json", "--out", "o", "--no-plots", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v = stdout_json(&o);
    assert_eq!((v["ran"].as_u64(), v["skipped"].as_u64()), (Some(4), Some(0)));
    assert_eq!(v["aggregate"].as_array().unwrap().len(), 2);
    assert_eq!(v["aggregate"][0]["seeds"], 2);
}

#[test]
fn diff_names_the_fields_that_differ() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.json"), SPEC).unwrap();
    for (out, sets) in [("a", vec![]), ("b", vec![]), ("c", vec!["--set", "optimizer.lr=0.05"])] {
        let mut args = vec!["run", "s.json", "--out", out];
        args.extend(sets);
        assert!(dsgd(dir.path(), &args).status.success());
    }
    let same = dsgd(dir.path(), &["diff", "a", "b"]);
    assert_eq!(same.status.code(), Some(0), "{}", text(&same));
    assert!(text(&same).contains("spec: identical") && text(&same).contains("summary: identical"), "{}", text(&same));
    let o = dsgd(dir.path(), &["diff", "a", "c", "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = stdout_json(&o);
    assert_eq!(v["identical"], false);
    let spec: Vec<&str> = v["spec"].as_array().unwrap().iter().map(|d| d["field"].as_str().unwrap()).collect();
    assert_eq!(spec, ["optimizer.lr"]);
    let summary: Vec<&str> = v["summary"].as_array().unwrap().iter().map(|d| d["field"].as_str().unwrap()).collect();
    assert!(summary.contains(&"digest") && summary.contains(&"final_loss"), "{summary:?}");
    assert!(!summary.contains(&"wall_time_s"));
    let o = dsgd(dir.path(), &["diff", "a", "nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn flags_that_would_do_nothing_are_refused_and_help_lists_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.json"), SPEC).unwrap();
    let o = dsgd(dir.path(), &["run", "s.json", "--jobs", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--jobs applies to the default comparison"), "{}", text(&o));
    let o = dsgd(dir.path(), &["run", "--trace"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--trace needs a spec"), "{}", text(&o));
    assert!(!dir.path().join("runs").exists(), "nothing ran");
    let help = text(&dsgd(dir.path(), &["--help"]));
    assert!(help.contains("Exit codes: 0 success; 1") && help.contains("2 bad input"), "{help}");
}

#[test]
fn a_diverged_run_says_when_and_at_which_loss() {
    let dir = tempfile::tempdir().unwrap();
    let spec = r#"{"nodes": 16, "algorithm": {"kind": "async_ps"}, "workload": {"kind": "quadratic"},
        "batch": 16, "optimizer": {"lr": 0.5}, "compute": {"step_time_ms": 50}, "stop": {"sim_time_s": 30},
        "eval": {"every_s": 0.5}}"#;
    std::fs::write(dir.path().join("s.json"), spec).unwrap();
    let o = dsgd(dir.path(), &["run", "s.json", "--out", "r"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("diverged at "), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("r/summary.json")).unwrap()).unwrap();
    let t = s["diverged"]["time_s"].as_f64().expect("a divergence time");
    assert!(t > 0.0 && t < 30.0, "{s}");
    // The loss at that evaluation is more than 100 times the first, or not a number.
    let csv = std::fs::read_to_string(dir.path().join("r/metrics.csv")).unwrap();
    let first: f64 = csv.lines().nth(1).unwrap().split(',').nth(1).unwrap().parse().unwrap();
    match s["diverged"]["loss"].as_f64() {
        Some(l) => assert!(l > 100.0 * first, "{l} vs {first}"),
        None => assert!(s["final_loss"].is_null()),
    }
}

#[test]
fn bench_scale_measures_each_case_in_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let o = dsgd(
        dir.path(),
        &[
            "bench-scale",
            "--nodes",
            "4,16",
            "--algorithms",
            "sync_hierarchical,gossip_push",
            "--repeat",
            "2",
            "--json",
            "rows.json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let rows: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("rows.json")).unwrap()).unwrap();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        assert!(r["events"].as_u64().unwrap() > 1000, "{r}");
        assert!(r["peak_bytes"].as_u64().unwrap() > 1 << 20, "each case reports its own peak memory: {r}");
        assert!(r["wall_s"].as_f64().unwrap() > 0.0);
        assert_eq!(r["runs"], 2, "the fastest of two runs, which gave one digest: {r}");
    }
    // 16 nodes in racks of 4: each member 3 + 3 steps inside its rack and 2·3 across.
    assert_eq!(rows[1]["algorithm"], "sync_hierarchical");
    assert_eq!(rows[1]["work"], "2500 iterations, racks of 4");
    // (The run stops when member 0 finishes iteration 2500; others may have a last step to send.)
    let messages = rows[1]["messages"].as_u64().unwrap();
    assert!((2499 * 16 * 12..=2500 * 16 * 12).contains(&messages), "{messages}");
    assert!(text(&o).contains("| gossip_push | 16 |"), "{}", text(&o));
    // The same case gives the same digest: the benchmark runs what it says.
    let again = dsgd(dir.path(), &["bench-scale", "--nodes", "16", "--algorithms", "sync_hierarchical", "--one"]);
    let row: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(row["digest"], rows[1]["digest"]);
    let bad = dsgd(dir.path(), &["bench-scale", "--algorithms", "ring"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad).contains("known: sync_ring"), "{}", text(&bad));
}

#[test]
fn bench_real_reports_each_case_beside_the_plain_loop() {
    let dir = tempfile::tempdir().unwrap();
    let args =
        ["bench-real", "--workers", "1,3", "--algorithms", "gossip", "--sim-time-s", "0.2", "--plain-steps", "20"];
    let o = dsgd(dir.path(), &[&args[..], &["--json", "real.json"]].concat());
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("plain burn loop (one model, one core)"), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("real.json")).unwrap()).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let (g, wall) = (r["gradients"].as_u64().unwrap() as f64, r["wall_s"].as_f64().unwrap());
        // Gossip workers never wait for each other: one gradient every 10 ms, 20 each in 0.2 s.
        assert_eq!(g, 20.0 * r["workers"].as_f64().unwrap(), "{r}");
        assert!((r["gradients_per_s"].as_f64().unwrap() - g / wall).abs() < 1e-6 * g / wall, "{r}");
        // CPU time per gradient and cores busy: both measured, and a process on this machine's
        // cores cannot keep more of them busy than it has (a little over for the clocks' grain).
        let (cpu_ms, busy) = (r["cpu_ms_per_gradient"].as_f64().unwrap(), r["cores_busy"].as_f64().unwrap());
        let cores = v["cores"].as_f64().unwrap();
        assert!(cpu_ms > 0.0 && busy > 0.0 && busy <= cores * 1.2, "{r}");
        // Model work: the plain loop's time for the gradients and the evaluations over the
        // machine's time. Evaluations: the consensus at 0 and at 0.2 s (the sample the stop
        // cuts short), again in the final evaluation, and each distinct replica there.
        let evals = r["evaluations"].as_f64().unwrap();
        assert!(evals >= 4.0 && evals <= 3.0 + r["workers"].as_f64().unwrap(), "{r}");
        // Each case beside the plain loop measured just before it.
        let (plain, eval_s) =
            (r["plain"]["steps_per_s"].as_f64().unwrap(), r["plain"]["evaluation_s"].as_f64().unwrap());
        assert!(plain > 0.0 && eval_s > 0.0, "{r}");
        let ratio = r["gradients_vs_plain"].as_f64().unwrap();
        assert!((ratio - g / wall / (plain * cores)).abs() < 1e-6 * ratio, "{r}");
        let work = g / plain + evals * eval_s;
        let share = r["model_work_vs_machine"].as_f64().unwrap();
        assert!(share > 0.0 && (share - work / (wall * cores)).abs() < 1e-6 * share, "{r}");
    }
    // A case is an ordinary run: its digest is the one `dsgd run` gives for the same spec.
    let spec = dsgd_experiments::realbench::spec(dsgd_experiments::realbench::Cluster::Friendly, "gossip", 3, 32, 0.2)
        .unwrap();
    std::fs::write(dir.path().join("case.json"), spec.to_string()).unwrap();
    let o = dsgd(dir.path(), &["run", "case.json", "--out", "case"]);
    assert!(o.status.success(), "{}", text(&o));
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("case/summary.json")).unwrap()).unwrap();
    assert_eq!(s["digest"], rows[1]["digest"]);
}

#[test]
fn bench_real_runs_the_paper_cluster_and_reports_its_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["bench-real", "--cluster", "paper", "--workers", "2", "--algorithms", "gossip_push,local_sgd"];
    let o =
        dsgd(dir.path(), &[&args[..], &["--sim-time-s", "0.6", "--plain-steps", "20", "--json", "p.json"]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("p.json")).unwrap()).unwrap();
    assert_eq!(v["cluster"], "paper");
    for r in v["rows"].as_array().unwrap() {
        // 180 ms steps with jitter: a few gradients each in 0.6 s, over the run's wall time; the
        // start-up of a fresh process (a 1 ms run of the same spec) reported beside.
        let (g, wall, start) =
            (r["gradients"].as_f64().unwrap(), r["wall_s"].as_f64().unwrap(), r["startup_s"].as_f64().unwrap());
        assert!(g >= 4.0 && start > 0.0 && wall > 0.0, "{r}");
        assert!((r["gradients_per_s"].as_f64().unwrap() - g / wall).abs() < 1e-6 * g / wall, "{r}");
    }
    let bad = dsgd(dir.path(), &["bench-real", "--cluster", "paper", "--algorithms", "ring"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
}

#[test]
fn set_and_grid_keys_reach_into_defaulted_objects() {
    // `SPEC` leaves `algorithm` to its default (sync); `--set algorithm.collective=tree` changes
    // that default's collective, as `dsgd check` shows it, instead of failing on a missing `kind`.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.json"), SPEC).unwrap();
    let o = dsgd(dir.path(), &["check", "s.json", "--set", "algorithm.collective=tree", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let a = &stdout_json(&o)["spec"]["algorithm"];
    assert_eq!((a["kind"].as_str(), a["collective"].as_str()), (Some("sync"), Some("tree")), "{a}");
    assert_eq!(a["timeout_s"], 5.0, "the default's other fields stay");
    // A field of a section that is absent, and one of an algorithm that is given, as before.
    let o = dsgd(dir.path(), &["check", "s.json", "--set", "network.transport=datagram", "--json"]);
    assert_eq!(stdout_json(&o)["spec"]["network"]["transport"], "datagram", "{}", text(&o));
    // Choosing another kind gives that kind with its own defaults, not the default kind's fields.
    let o = dsgd(dir.path(), &["check", "s.json", "--set", "algorithm.kind=gossip", "--json"]);
    assert_eq!(stdout_json(&o)["spec"]["algorithm"]["mode"], "pull", "{}", text(&o));
    // A setting the default does not take is still refused, naming the field.
    let o = dsgd(dir.path(), &["check", "s.json", "--set", "algorithm.tau=3"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("algorithm"), "{}", text(&o));
    // Sweep grid keys take the same path.
    let sweep = r#"{"base": {"stop": {"sim_time_s": 1}}, "grid": [{"algorithm.collective": ["ring", "tree"]},
        {"algorithm.kind": ["gossip"]}]}"#;
    std::fs::write(dir.path().join("sw.json"), sweep).unwrap();
    let o = dsgd(dir.path(), &["check", "sw.json", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(stdout_json(&o)["runs"], 3);
}

/// Runs the GPU check script with `path` first on PATH and `dsgd` as its binary.
fn gpu_check(dir: &std::path::Path, path: &std::path::Path) -> Output {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/gpu_check.sh");
    std::process::Command::new("bash")
        .arg(script)
        .env("PATH", format!("{}:{}", path.display(), std::env::var("PATH").unwrap_or_default()))
        .env("DSGD_BIN", env!("CARGO_BIN_EXE_dsgd"))
        .env("OUT", dir.join("out"))
        .output()
        .expect("bash runs")
}

#[test]
fn the_gpu_check_refuses_clearly_without_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("bin");
    std::fs::create_dir(&fake).unwrap();
    let nvidia_smi = fake.join("nvidia-smi");
    // A driver tool that finds no GPU.
    std::fs::write(&nvidia_smi, "#!/bin/sh\nexit 9\n").unwrap();
    std::fs::set_permissions(&nvidia_smi, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = gpu_check(dir.path(), &fake);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("nvidia-smi finds no GPU"), "{}", text(&o));
    // One that finds a GPU, with a binary built without CUDA (as this test's is): refused with the
    // binary's own words, before anything is measured.
    std::fs::write(&nvidia_smi, "#!/bin/sh\necho 'NVIDIA H100 80GB HBM3'\n").unwrap();
    if cfg!(feature = "cuda") {
        return;
    }
    let o = gpu_check(dir.path(), &fake);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("cannot compute on the GPU") && text(&o).contains("without CUDA"), "{}", text(&o));
    assert!(!dir.path().join("out/gpu_check.json").exists());
    // And no driver tool at all, where this machine has none.
    if std::process::Command::new("nvidia-smi").output().is_err() {
        let o = gpu_check(dir.path(), &dir.path().join("nothing"));
        assert_eq!(o.status.code(), Some(3), "{}", text(&o));
        assert!(text(&o).contains("no NVIDIA GPU here"), "{}", text(&o));
    }
}

#[test]
fn an_order_that_does_not_fit_the_run_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.json"), SPEC).unwrap();
    let refused = |order: &str, extra: &[&str], says: &[&str]| {
        std::fs::write(dir.path().join("order.json"), order).unwrap();
        let mut args = vec!["run", "s.json", "--out", "out", "--order", "order.json"];
        args.extend(extra);
        let o = dsgd(dir.path(), &args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        for s in says {
            assert!(text(&o).contains(s), "{s:?} in {}", text(&o));
        }
        assert!(!dir.path().join("out").exists(), "nothing is written");
    };
    // Another number of ranks; a record whose next call never comes; not a record at all.
    refused(r#"{"ranks": [[]]}"#, &[], &["order.json", "the recorded order has 1 ranks, the run 3"]);
    refused(
        r#"{"ranks": [[{"timer": {"tag": 9, "k": 0}}], [], []]}"#,
        &[],
        &["order.json", "rank 0 waits for Timer { tag: 9, k: 0 }", "nothing else will happen"],
    );
    refused(r#"{"rank": []}"#, &[], &["order.json: not a recorded order", "missing field `ranks`"]);
    // Faults: a crash voids events a real rank never saw.
    let crash = r#"faults=[{"kind": "crash", "node": 1, "at_s": 0.5}]"#;
    refused(r#"{"ranks": [[], [], []]}"#, &["--set", crash], &["faults", "without injected faults"]);
    let o = dsgd(dir.path(), &["run", "s.json", "--order", "order.json", "--check"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = dsgd(dir.path(), &["run", "--order", "order.json"]);
    assert!(text(&o).contains("--order needs the spec"), "{}", text(&o));
}
