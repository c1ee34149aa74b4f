//! A spec fuzzer: proptest generates mutations of valid specs (a field replaced by a hostile
//! value, removed, given an unknown sibling, or set to the wrong kind of container), and every
//! case must end one of three ways, within a time bound:
//! - refused, with an error that names a field (`field \`...\``) and nothing written;
//! - refused because its memory estimate exceeds this machine's;
//! - run to a complete folder (`spec.json`, `summary.json`, `metrics.csv`, `timeline.csv`), or
//!   stopped at the time bound when asked to (a legitimately long run), with nothing left.
//!
//! A panic, an error without a field after the spec check, or a run that does not stop when
//! asked is a failure. `.ci/run` runs 300 cases; `DSGD_FUZZ_CASES=100000 cargo test --release -p
//! dsgd-experiments --test fuzz -- --nocapture` runs as many as asked and prints the figures
//! (`DSGD_FUZZ_SEED` picks another sequence, `DSGD_FUZZ_BOUND_S` the time bound, default 5 s).
//!
//! Each case runs under the memory budget `dsgd run` gives it (its estimate with room to spare),
//! so a run that outgrows it stops over its budget (a fourth clean ending, with nothing written).
//! `DSGD_FUZZ_HEAVY=1` makes every mutation a size scaled up 1 to 100 times (nodes, dimensions,
//! parameters, shards, times, rates): the memory-heavy cases, for a run under `ulimit -v`.
//! `DSGD_FUZZ_OUT=DIR` keeps the specs of the cases that stopped at the bound or over their budget
//! (`long/`, `over_budget/`) and `fuzz.json` with each one's estimate beside what it did, so what
//! stays long can be classified against the estimate, and `current.json`, the case under way
//! (the culprit, if the process is ended from outside).

use dsgd_experiments::bounds::check_memory;
use dsgd_experiments::execute::{execute, write_run};
use dsgd_experiments::load::spec_from_value;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Small valid specs, one per algorithm and workload family (no burn: its data set would make
/// every case slow).
fn bases() -> Vec<Value> {
    let common = json!({"compute": {"step_time_ms": 10}, "stop": {"sim_time_s": 2}, "eval": {"every_s": 0.5}});
    let mut out = Vec::new();
    for extra in [
        json!({"nodes": 4, "algorithm": {"kind": "sync", "collective": "ring", "timeout_s": 0.5}, "workload": {"kind": "quadratic", "dim": 20},
               "network": {"transport": "datagram"}, "faults": [{"kind": "message_loss", "from_s": 0, "until_s": 1, "probability": 0.05}]}),
        json!({"nodes": 5, "algorithm": {"kind": "sync", "collective": "tree", "backup_workers": 1}, "workload": {"kind": "timing", "params": 1000}}),
        json!({"nodes": 3, "algorithm": {"kind": "async_ps", "shards": 2, "staleness_bound": 3}, "workload": {"kind": "softmax", "classes": 3, "features": 4, "train": 200, "test": 50}}),
        json!({"nodes": 4, "algorithm": {"kind": "easgd", "tau": 2}, "workload": {"kind": "quadratic", "dim": 10, "wire_params": 100000},
               "faults": [{"kind": "crash", "node": 1, "at_s": 0.5}, {"kind": "restart", "node": 1, "at_s": 1.0}]}),
        json!({"nodes": 6, "algorithm": {"kind": "gossip", "mode": "push"}, "workload": {"kind": "quadratic", "dim": 10},
               "compute": {"straggler": {"jitter": {"kind": "log_normal", "sigma": 0.3}}},
               "network": {"topology": {"kind": "racks", "rack_size": 3, "uplink_gbps": 5, "core_latency_us": 5}}}),
        json!({"nodes": 4, "algorithm": {"kind": "gossip", "mode": "pull"}, "workload": {"kind": "quadratic", "dim": 10},
               "network": {"transport": "reliable", "rto_ms": 50},
               "faults": [{"kind": "partition", "from_s": 0.5, "until_s": 1.0, "groups": [[0, 1]]},
                          {"kind": "message_loss", "from_s": 0.2, "until_s": 0.8, "probability": 0.1}]}),
    ] {
        let mut v = common.clone();
        merge(&mut v, extra);
        out.push(v);
    }
    out
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, v) in y {
                merge(x.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// Every place in `v` (objects' fields and lists' items), as paths of keys and indices.
fn places(v: &Value, at: &mut Vec<Vec<Value>>, path: Vec<Value>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let mut p = path.clone();
                p.push(Value::String(k.clone()));
                at.push(p.clone());
                places(x, at, p);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                let mut p = path.clone();
                p.push(json!(i));
                at.push(p.clone());
                places(x, at, p);
            }
        }
        _ => {}
    }
}

/// The parent container of `path` and the last key.
fn parent<'a>(v: &'a mut Value, path: &[Value]) -> Option<(&'a mut Value, Value)> {
    let (last, up) = path.split_last()?;
    let mut cur = v;
    for k in up {
        cur = match k {
            Value::String(s) => cur.get_mut(s.as_str())?,
            Value::Number(n) => cur.get_mut(n.as_u64()? as usize)?,
            _ => return None,
        };
    }
    Some((cur, last.clone()))
}

/// A hostile or ordinary JSON value.
fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1)),
        Just(json!(2.5)),
        Just(json!(1e300)),
        Just(json!(-1e300)),
        Just(json!(1e-300)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(1u64 << 62)),
        Just(json!(null)),
        Just(json!(true)),
        Just(json!("x")),
        Just(json!("")),
        Just(json!([5])),
        Just(json!([])),
        Just(json!({})),
        Just(json!({"kind": "crash", "node": 99, "at_s": 1})),
        (0u64..300).prop_map(|n| json!(n)),
        (-1e3f64..1e3).prop_map(|x| json!(x)),
        any::<f64>().prop_filter("JSON numbers are finite", |x| x.is_finite()).prop_map(|x| json!(x)),
        prop::sample::select(vec![
            "sync",
            "async_ps",
            "easgd",
            "gossip",
            "ring",
            "tree",
            "push",
            "pull",
            "timing",
            "quadratic",
            "softmax",
            "log_normal",
            "pareto",
            "racks",
            "analytic"
        ])
        .prop_map(|s| json!(s)),
    ]
}

/// One mutation: which place (an index taken modulo the number of places), what to do (0
/// replace, 1 remove, 2 add an unknown sibling, 3 flip the container, 4-9 nudge a number), a
/// value, and a factor for nudges (10, 11: a heavy case's scaling up or down by 10^factor). Nudges are weighted up so that about half the cases run.
type Mutation = (u32, u8, Value, f64);

fn case() -> impl Strategy<Value = (usize, Vec<Mutation>)> {
    (0..bases().len(), prop::collection::vec((any::<u32>(), 0u8..10, value(), 0.1f64..10.0), 1..4))
}

/// The memory-heavy cases: one to three numbers scaled up (10) or down (11) by 10^x, x in 0..4
/// (more nodes, parameters, shards or time; shorter steps or more frequent evaluations).
fn heavy_case() -> impl Strategy<Value = (usize, Vec<Mutation>)> {
    let scale = prop_oneof![3 => Just(10u8), 1 => Just(11u8)];
    (0..bases().len(), prop::collection::vec((any::<u32>(), scale, Just(json!(0)), 0.0f64..4.0), 1..4))
}

fn mutate(base: &Value, muts: &[Mutation]) -> Value {
    let mut v = base.clone();
    for (pick, op, x, factor) in muts {
        let mut at = Vec::new();
        places(&v, &mut at, Vec::new());
        if at.is_empty() {
            continue;
        }
        let path = &at[*pick as usize % at.len()];
        let Some((p, key)) = parent(&mut v, path) else { continue };
        match (p, key, op) {
            (Value::Object(m), Value::String(k), 0) => {
                m.insert(k, x.clone());
            }
            (Value::Object(m), Value::String(k), 1) => {
                m.remove(&k);
            }
            (Value::Object(m), Value::String(k), 2) => {
                m.insert(format!("{k}_unknown"), x.clone());
            }
            (Value::Object(m), Value::String(k), 10 | 11) => {
                // A heavy case: a number scaled, whole numbers kept whole; nothing else.
                let factor = if *op == 10 { 10f64.powf(*factor) } else { 10f64.powf(-factor) };
                let scaled = match m.get(&k) {
                    Some(Value::Number(n)) if n.is_u64() => {
                        json!((n.as_u64().unwrap_or(0) as f64 * factor).round() as u64)
                    }
                    Some(Value::Number(n)) => json!(n.as_f64().unwrap_or(0.0) * factor),
                    _ => continue,
                };
                m.insert(k, scaled);
            }
            (Value::Object(m), Value::String(k), 4..=9) => {
                let nudged = match m.get(&k) {
                    Some(Value::Number(n)) if n.is_u64() && *op >= 7 => {
                        json!((n.as_u64().unwrap_or(0) as i64 + (*factor as i64) - 2).max(0))
                    }
                    Some(Value::Number(n)) if n.is_u64() => {
                        json!((n.as_u64().unwrap_or(0) as f64 * factor).round() as u64)
                    }
                    Some(Value::Number(n)) => json!(n.as_f64().unwrap_or(0.0) * factor),
                    _ => x.clone(),
                };
                m.insert(k, nudged);
            }
            (Value::Object(m), Value::String(k), _) => {
                let old = m.get(&k).cloned().unwrap_or(Value::Null);
                let flipped = match old {
                    Value::Object(o) => Value::Array(o.into_iter().map(|(_, y)| y).collect()),
                    Value::Array(a) => json!({"items": a}),
                    other => json!([other]),
                };
                m.insert(k, flipped);
            }
            (Value::Array(a), Value::Number(i), 1) => {
                let i = i.as_u64().unwrap_or(0) as usize;
                if i < a.len() {
                    a.remove(i);
                }
            }
            (Value::Array(a), Value::Number(i), _) => {
                let i = i.as_u64().unwrap_or(0) as usize;
                if i < a.len() {
                    a[i] = x.clone();
                }
            }
            _ => {}
        }
    }
    v
}

#[derive(Default, Debug)]
struct Tally {
    refused_with_field: u64,
    refused_for_memory: u64,
    ran: u64,
    stopped_at_bound: u64,
    stopped_over_budget: u64,
    failures: Vec<String>,
    slowest_s: f64,
    /// The cases that stopped at the bound or over their budget, with the estimate beside.
    kept: Vec<Value>,
}

fn check_case(spec_json: &Value, bound: Duration, tally: &mut Tally) {
    let text = spec_json.to_string();
    let spec = match spec_from_value("fuzz.json", spec_json.clone()) {
        Err(e) => {
            let msg = e.to_string();
            if msg.contains("field `") {
                tally.refused_with_field += 1;
            } else {
                tally.failures.push(format!("an error without a field: {msg}\n  spec: {text}"));
            }
            return;
        }
        Ok(s) => s,
    };
    if check_memory(&spec).is_err() {
        tally.refused_for_memory += 1;
        return;
    }
    let estimate = dsgd_experiments::bounds::estimate(&spec);
    dsgd_experiments::bounds::set_budget(Some(&spec));
    if let Ok(out) = std::env::var("DSGD_FUZZ_OUT") {
        // The case under way, for a process that the kernel or the allocator ends.
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(std::path::Path::new(&out).join("current.json"), &text).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("run");
    // The watchdog asks the run to stop at the bound, and fails the whole test if it does not.
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        let text = text.clone();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            while !done.load(Ordering::SeqCst) {
                if t0.elapsed() > bound {
                    dsgd_runtime::cancel::request();
                }
                if t0.elapsed() > bound + Duration::from_secs(30) {
                    eprintln!("HANG: did not stop 30 s after it was asked to\n  spec: {text}");
                    std::process::exit(3);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let t0 = Instant::now();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        execute(&spec, false).and_then(|o| write_run(&dest, &spec, &o))
    }));
    done.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
    let took = t0.elapsed().as_secs_f64();
    tally.slowest_s = tally.slowest_s.max(took);
    let interrupted = dsgd_runtime::cancel::requested();
    dsgd_runtime::cancel::clear();
    match res {
        Err(p) => {
            let what = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            tally.failures.push(format!("PANIC: {}\n  spec: {text}", what.unwrap_or_default()));
        }
        Ok(Err(_)) if interrupted => {
            tally.stopped_at_bound += 1;
            if dest.exists() {
                tally.failures.push(format!("a run stopped at the bound left a folder\n  spec: {text}"));
            }
            tally.kept.push(json!({"ending": "long", "took_s": took, "estimated_s": estimate.wall_s,
                "estimated_events": estimate.events, "estimated_bytes": estimate.bytes, "spec": spec_json}));
        }
        Ok(Err(dsgd_experiments::Error::Sim(dsgd_sim::SimError::OverBudget(why)))) => {
            tally.stopped_over_budget += 1;
            if dest.exists() {
                tally.failures.push(format!("a run stopped over its budget left a folder\n  spec: {text}"));
            }
            tally.kept.push(json!({"ending": "over_budget", "took_s": took, "estimated_s": estimate.wall_s,
                "estimated_bytes": estimate.bytes, "why": why.to_string(), "spec": spec_json}));
        }
        Ok(Err(e)) => tally.failures.push(format!("an error after the spec check: {e}\n  spec: {text}")),
        Ok(Ok(_)) => {
            let complete =
                ["spec.json", "summary.json", "metrics.csv", "timeline.csv"].iter().all(|f| dest.join(f).exists());
            if complete {
                tally.ran += 1;
            } else {
                tally.failures.push(format!("an incomplete run folder\n  spec: {text}"));
            }
        }
    }
}

/// Writes the kept cases' specs (`long/case-K.json`, `over_budget/case-K.json`) and `fuzz.json`.
fn keep(out: &std::path::Path, tally: &Tally, cases: u64, seed: u64, heavy: bool, bound: Duration) {
    std::fs::create_dir_all(out).unwrap();
    for (k, case) in tally.kept.iter().enumerate() {
        let dir = out.join(case["ending"].as_str().unwrap_or("other"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("case-{k}.json")), serde_json::to_string_pretty(&case["spec"]).unwrap())
            .unwrap();
    }
    let summary = json!({"cases": cases, "seed": seed, "heavy": heavy, "bound_s": bound.as_secs_f64(),
        "refused_with_field": tally.refused_with_field, "refused_for_memory": tally.refused_for_memory,
        "ran": tally.ran, "stopped_at_bound": tally.stopped_at_bound, "stopped_over_budget": tally.stopped_over_budget,
        "failures": tally.failures, "kept": tally.kept});
    std::fs::write(out.join("fuzz.json"), serde_json::to_string_pretty(&summary).unwrap()).unwrap();
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn mutated_specs_are_refused_with_a_field_or_run_to_a_complete_folder() {
    let cases: u64 = env("DSGD_FUZZ_CASES", 300);
    let seed: u64 = env("DSGD_FUZZ_SEED", 1);
    let bound = Duration::from_secs_f64(env("DSGD_FUZZ_BOUND_S", 5.0));
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &bytes));
    let heavy = env("DSGD_FUZZ_HEAVY", 0u8) == 1;
    let strategy = if heavy { heavy_case().boxed() } else { case().boxed() };
    let bases = bases();
    for b in &bases {
        assert!(spec_from_value("base", b.clone()).is_ok(), "a base spec is invalid: {b}");
    }
    let t0 = Instant::now();
    let mut tally = Tally::default();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..cases {
        let (base, muts) = strategy.new_tree(&mut runner).expect("a case").current();
        let v = mutate(&bases[base], &muts);
        *seen.entry(bases[base]["algorithm"]["kind"].as_str().unwrap_or("?").to_string()).or_default() += 1;
        check_case(&v, bound, &mut tally);
    }
    println!(
        "{cases} cases in {:.1} s (seed {seed}, bound {:.0} s{}): {} refused naming a field, {} refused for memory, \
         {} ran to a complete folder, {} stopped at the time bound, {} stopped over their memory budget, {} failures; \
         slowest case {:.2} s; bases {seen:?}",
        t0.elapsed().as_secs_f64(),
        bound.as_secs_f64(),
        if heavy { ", memory-heavy" } else { "" },
        tally.refused_with_field,
        tally.refused_for_memory,
        tally.ran,
        tally.stopped_at_bound,
        tally.stopped_over_budget,
        tally.failures.len(),
        tally.slowest_s,
    );
    if let Ok(out) = std::env::var("DSGD_FUZZ_OUT") {
        keep(std::path::Path::new(&out), &tally, cases, seed, heavy, bound);
    }
    assert!(tally.failures.is_empty(), "{} failures:\n{}", tally.failures.len(), tally.failures.join("\n"));
    // The generator reaches both sides of the check.
    assert!(tally.ran > 0 && tally.refused_with_field > 0, "{tally:?}");
}
