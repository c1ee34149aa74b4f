//! `workload.partition`: the training set split among workers, end to end. The summary's label
//! histograms are what the workers really drew from, the split is a function of the seed, and a
//! spec without a partition runs exactly as before (the golden digests pin that).

use dsgd_experiments::execute::execute;
use dsgd_experiments::load::spec_from_value;
use dsgd_experiments::output::Summary;
use serde_json::{json, Value};

fn run(spec: Value) -> Summary {
    let spec = spec_from_value("t.json", spec).unwrap_or_else(|e| panic!("{e}"));
    execute(&spec, false).unwrap_or_else(|e| panic!("{e}")).summary
}

fn softmax(partition: Value, seed: u64) -> Value {
    json!({
        "nodes": 5, "seed": seed, "algorithm": {"kind": "gossip"},
        "workload": {"kind": "softmax", "train": 3000, "partition": partition},
        "compute": {"step_time_ms": 10}, "stop": {"sim_time_s": 2}
    })
}

#[test]
fn the_summary_holds_each_workers_label_histogram_and_the_split_follows_the_seed() {
    let shards = run(softmax(json!({"kind": "shards"}), 1));
    let h = shards.label_histograms.expect("a partitioned run records its histograms");
    assert_eq!(h.len(), 5);
    assert_eq!(h.iter().flatten().sum::<u64>(), 3000, "the shards cover the training set");
    assert!(h.iter().all(|w| w.iter().sum::<u64>() == 600), "equal shards: {h:?}");

    let labels = run(softmax(json!({"kind": "labels", "per_worker": 2}), 1));
    for (w, hist) in labels.label_histograms.expect("histograms").iter().enumerate() {
        assert_eq!(hist.iter().filter(|&&n| n > 0).count(), 2, "worker {w} holds exactly 2 classes: {hist:?}");
    }

    let d = |seed| run(softmax(json!({"kind": "dirichlet", "alpha": 0.1}), seed));
    let (a, b, c) = (d(3), d(3), d(4));
    assert_eq!(a.label_histograms, b.label_histograms, "the same seed splits the same way");
    assert_eq!(a.digest, b.digest);
    assert_ne!(a.label_histograms, c.label_histograms, "another seed splits another way");
    assert_ne!(a.digest, shards.digest);

    let shared = run(softmax(json!({"kind": "shared"}), 1));
    assert_eq!(shared.label_histograms, None, "no split, no histograms");
    let mut plain = softmax(json!({}), 1);
    plain["workload"].as_object_mut().expect("object").remove("partition");
    assert_eq!(run(plain).digest, shared.digest, "shared is the behaviour of a spec without the field");
}

#[test]
fn a_burn_run_with_one_class_per_worker_trains_each_worker_on_its_class() {
    let spec = json!({
        "nodes": 3, "algorithm": {"kind": "gossip"}, "batch": 16,
        "workload": {"kind": "burn", "model": "mlp", "hidden": [16], "test_samples": 500,
                     "partition": {"kind": "labels", "per_worker": 1}},
        "compute": {"step_time_ms": 10}, "stop": {"sim_time_s": 0.2}
    });
    let s = run(spec);
    let h = s.label_histograms.expect("histograms");
    assert_eq!(h.len(), 3);
    for hist in &h {
        let held: Vec<u64> = hist.iter().copied().filter(|&n| n > 0).collect();
        assert_eq!(held, [6000], "one whole Fashion-MNIST class (6,000 images) per worker: {hist:?}");
    }
    assert!(s.gradients > 0);
}
