//! What a user reads is what happened: no score without a model, sweeps grouped by every varied
//! field, CSV that any reader loads, options that mean what they say, resumes that never mix
//! grids.

use std::path::Path;

mod common;
use common::{dsgd, text};

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Reads a CSV file as a header and rows, the way a strict reader (pandas, R) would.
fn read_csv(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    let rows: Vec<Vec<String>> = r.records().map(|x| x.unwrap().iter().map(String::from).collect()).collect();
    for row in &rows {
        assert_eq!(row.len(), header.len(), "ragged row in {}", path.display());
    }
    (header, rows)
}

fn col(header: &[String], name: &str) -> usize {
    header.iter().position(|h| h == name).unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

#[test]
fn a_crashed_only_parameter_server_reports_no_loss_and_never_the_target() {
    let dir = tempfile::tempdir().unwrap();
    // The quadratic's optimum is the zero vector: before the fix, the dead server's "model" was
    // all zeros and the run stopped at once with `target` and loss 0.
    let spec = r#"{"name": "ps-dead", "nodes": 4, "algorithm": {"kind": "async_ps", "timeout_s": 0.5},
        "workload": {"kind": "quadratic", "dim": 20}, "compute": {"step_time_ms": 10},
        "faults": [{"kind": "crash", "node": 4, "at_s": 2.0}],
        "stop": {"sim_time_s": 6, "target_loss": 1e-9}, "eval": {"every_s": 0.5}}"#;
    std::fs::write(dir.path().join("s.json"), spec).unwrap();
    let o = dsgd(dir.path(), &["run", "s.json", "--out", "r"]);
    assert!(o.status.success(), "{}", text(&o));
    let s = json(&dir.path().join("r/summary.json"));
    assert_ne!(s["stop_reason"], "target", "{s}");
    assert!(s["final_loss"].is_null() && s["time_to_target_s"].is_null(), "{s}");
    assert!(s["evaluations_without_model"].as_u64().unwrap() >= 8, "{s}");
    let (h, rows) = read_csv(&dir.path().join("r/metrics.csv"));
    let (t, loss, model) = (col(&h, "time_s"), col(&h, "loss"), col(&h, "model"));
    for r in &rows {
        let after = r[t].parse::<f64>().unwrap() >= 2.0;
        assert_eq!(r[model] == "0", after, "{r:?}");
        assert_eq!(r[loss].is_empty(), after, "{r:?}");
    }
    assert!(text(&o).contains("final loss -"), "{}", text(&o));
}

const BASE: &str = r#"{"workload": {"kind": "quadratic", "dim": 20}, "compute": {"step_time_ms": 10},
    "stop": {"sim_time_s": 3, "target_loss": 1.0}, "eval": {"every_s": 0.5}}"#;

#[test]
fn a_sweep_over_collectives_keeps_them_apart_and_its_csv_loads() {
    let dir = tempfile::tempdir().unwrap();
    // An array-valued grid field (a fault list) as well: its JSON text has commas and quotes.
    let sweep = format!(
        r#"{{"base": {BASE}, "grid": {{"algorithm.kind": ["sync"], "algorithm.collective": ["ring", "tree"], "seed": [1, 2],
            "faults": [[], [{{"kind": "crash", "node": 1, "at_s": 1.5}}]]}}}}"#
    );
    std::fs::write(dir.path().join("sw.json"), sweep).unwrap();
    let o = dsgd(dir.path(), &["sweep", "sw.json", "--out", "o", "--jobs", "2", "--no-plots"]);
    assert!(o.status.success(), "{}", text(&o));
    let (h, rows) = read_csv(&dir.path().join("o/aggregate.csv"));
    assert_eq!(rows.len(), 4, "two collectives × two fault lists, seeds pooled: {rows:?}");
    let c = col(&h, "algorithm.collective");
    let mut collectives: Vec<&str> = rows.iter().map(|r| r[c].as_str()).collect();
    collectives.sort();
    assert_eq!(collectives, ["ring", "ring", "tree", "tree"]);
    assert!(rows.iter().all(|r| r[col(&h, "seeds")] == "2"));
    let f = col(&h, "faults");
    assert!(rows.iter().any(|r| r[f].contains(r#""kind":"crash""#)), "{rows:?}");
    let (h, rows) = read_csv(&dir.path().join("o/runs.csv"));
    assert_eq!(rows.len(), 8);
    for name in ["run", "seed", "algorithm.collective", "faults", "digest", "final_loss", "time_to_target_s"] {
        col(&h, name);
    }
    let md = std::fs::read_to_string(dir.path().join("o/report.md")).unwrap();
    assert!(md.contains("**Target:** loss ≤ 1"), "{md}");
    assert!(md.contains("algorithm.collective=tree"), "{md}");
}

#[test]
fn scaling_the_rate_with_workers_is_refused_where_it_means_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for alg in [r#"{"kind": "gossip"}"#, r#"{"kind": "easgd"}"#] {
        std::fs::write(
            dir.path().join("s.json"),
            format!(r#"{{"algorithm": {alg}, "optimizer": {{"scale_with_workers": true}}}}"#),
        )
        .unwrap();
        let o = dsgd(dir.path(), &["run", "s.json", "--out", "x"]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("field `optimizer.scale_with_workers`"), "{}", text(&o));
        assert!(!dir.path().join("x").exists());
    }
    // Where it applies, it changes the run.
    let base = r#"{"nodes": 4, "workload": {"kind": "quadratic", "dim": 20}, "stop": {"sim_time_s": 2}}"#;
    std::fs::write(dir.path().join("s.json"), base).unwrap();
    let digest = |out: &str, extra: &[&str]| {
        let mut args = vec!["run", "s.json", "--out", out];
        args.extend_from_slice(extra);
        assert!(dsgd(dir.path(), &args).status.success());
        json(&dir.path().join(out).join("summary.json"))["digest"].clone()
    };
    assert_ne!(digest("a", &[]), digest("b", &["--set", "optimizer.scale_with_workers=true"]));
}

#[test]
fn a_grid_may_be_a_list_of_grids() {
    let dir = tempfile::tempdir().unwrap();
    let sweep = format!(
        r#"{{"base": {BASE}, "grid": [
            {{"algorithm": [{{"kind": "sync"}}], "optimizer.scale_with_workers": [false, true]}},
            {{"algorithm": [{{"kind": "gossip"}}, {{"kind": "easgd"}}]}}]}}"#
    );
    std::fs::write(dir.path().join("sw.json"), sweep).unwrap();
    let o = dsgd(dir.path(), &["sweep", "sw.json", "--out", "o", "--jobs", "2", "--no-plots"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("4 runs done now"), "{}", text(&o));
    let (h, rows) = read_csv(&dir.path().join("o/aggregate.csv"));
    let s = col(&h, "optimizer.scale_with_workers");
    let sync: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "sync").collect();
    assert_eq!(sync.len(), 2, "the two sync variants are separate rows");
    assert!(rows.iter().filter(|r| r[0] != "sync").all(|r| r[s].is_empty()), "{rows:?}");
}

#[test]
fn resuming_into_a_folder_of_another_grid_is_refused_or_reruns_the_changed_points() {
    let dir = tempfile::tempdir().unwrap();
    let write = |stop: u32, seeds: &str| {
        let sweep = format!(
            r#"{{"base": {{"workload": {{"kind": "quadratic", "dim": 20}}, "stop": {{"sim_time_s": {stop}}}}},
                "grid": {{"seed": {seeds}}}}}"#
        );
        std::fs::write(dir.path().join("sw.json"), sweep).unwrap();
    };
    write(2, "[1, 2, 3]");
    let o = dsgd(dir.path(), &["sweep", "sw.json", "--out", "o", "--no-plots"]);
    assert!(o.status.success(), "{}", text(&o));
    let before = std::fs::read_to_string(dir.path().join("o/runs/0000/summary.json")).unwrap();
    // Another stop time: every finished run belongs to another grid.
    write(3, "[1, 2, 3]");
    let o = dsgd(dir.path(), &["sweep", "sw.json", "--out", "o", "--no-plots"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("runs of another grid (3 of them)") && text(&o).contains("--rerun-changed"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("o/runs/0000/summary.json")).unwrap(),
        before,
        "nothing touched"
    );
    // Fewer seeds: run 0002 is no longer a point of the grid.
    write(2, "[1, 2]");
    let o = dsgd(dir.path(), &["sweep", "sw.json", "--out", "o", "--no-plots"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("runs/0002 is not a point of this grid"), "{}", text(&o));
    // Asked to, it removes the changed runs and runs their points again.
    write(3, "[1, 2, 3]");
    let o = dsgd(dir.path(), &["sweep", "sw.json", "--out", "o", "--no-plots", "--rerun-changed"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("3 runs done now, 0 already done earlier"), "{}", text(&o));
    let s = json(&dir.path().join("o/runs/0000/spec.json"));
    assert_eq!(s["stop"]["sim_time_s"], 3.0);
    assert!(dsgd(dir.path(), &["replay", "o"]).status.success());
}

#[test]
fn the_over_time_figure_draws_the_picked_variant_and_reaches_the_target_when_the_table_says() {
    // Sync at 4 nodes with two rates and three seeds: 0.5 reaches loss 0.05, 5.0 diverges at
    // once. Pooling them (as the figures once did) would draw a line that never reaches the target.
    let dir = tempfile::tempdir().unwrap();
    let sweep = r#"{"name": "pick", "base": {"nodes": 4, "batch": 16,
        "workload": {"kind": "quadratic", "dim": 50}, "compute": {"step_time_ms": 50,
        "straggler": {"jitter": {"kind": "log_normal", "sigma": 0.3}}},
        "stop": {"sim_time_s": 30, "target_loss": 0.05}, "eval": {"every_s": 0.5}},
        "grid": {"optimizer.lr": [0.5, 5.0], "seed": [1, 2, 3]}}"#;
    std::fs::write(dir.path().join("s.json"), sweep).unwrap();
    let o = dsgd(dir.path(), &["sweep", "s.json", "--out", "out", "--jobs", "2"]);
    assert!(o.status.success(), "{}", text(&o));
    let runs = dsgd_experiments::sweep::collect_runs(&dir.path().join("out")).unwrap();
    let best = dsgd_experiments::analysis::best(&dsgd_experiments::analysis::aggregate(&runs));
    let row = best.iter().find(|r| r.algorithm == "sync").expect("sync's best variant");
    assert_eq!(row.variant_text(), "optimizer.lr=0.5");
    let median = row.time_to_target.median_s.expect("the picked variant reaches the target");
    let panels = dsgd_experiments::plot::over_time_panels(&runs, "loss");
    let line = &panels[0].series[0];
    assert!(line.label.contains("lr=0.5: 4 nodes"), "the legend names the variant: {}", line.label);
    let crossing = line.points.iter().find(|p| p.1 <= 0.05).map(|p| p.0);
    assert_eq!(crossing, Some(median), "the line reaches the target when the table says");
    assert!(line.band.iter().all(|b| b.1 <= b.2), "a band from the lowest to the highest seed");
    // report.md shows each figure beside the table it illustrates, and only figures drawn.
    let md = std::fs::read_to_string(dir.path().join("out/report.md")).unwrap();
    let table = md.find("### Time to target").expect("the time-to-target table");
    let figure = md.find("![loss_vs_time](plots/loss_vs_time.png)").expect("the loss figure");
    let next = md[table + 1..].find("### ").map_or(md.len(), |i| table + 1 + i);
    assert!(table < figure && figure < next, "the figure follows its table:\n{md}");
    for line in md.lines().filter(|l| l.starts_with("![")) {
        let path = line.split("](").nth(1).unwrap().trim_end_matches(')');
        assert!(dir.path().join("out").join(path).exists(), "{path} is drawn");
    }
    assert!(!md.contains("accuracy_vs_time"), "no accuracy figure for a model without accuracy");
    // And a verdict per node count.
    assert!(md.contains("### Verdicts") && md.contains("| 4 | sync ("), "{md}");
}
