//! Shrinking a failing scenario: simpler specs are tried one change at a time (a fault removed,
//! an option back to its default, fewer nodes, a smaller model, a shorter run), and a change is
//! kept when the spec still fails the same way (the same invariant, or a panic), until no change
//! is kept or the budget of runs is spent.

use super::{check_value, Verdict};
use serde_json::{json, Value};

/// Simpler variants of `v`, the most useful first.
fn candidates(v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(faults) = v["faults"].as_array() {
        for i in 0..faults.len() {
            let mut c = v.clone();
            c["faults"].as_array_mut().expect("an array").remove(i);
            out.push(c);
        }
    }
    for section in ["compute", "network", "algorithm", "optimizer"] {
        if let Some(m) = v[section].as_object() {
            for k in m.keys().filter(|k| !matches!(k.as_str(), "kind" | "step_time_ms" | "lr")) {
                let mut c = v.clone();
                c[section].as_object_mut().expect("an object").remove(k);
                out.push(c);
            }
        }
    }
    if let Some(n) = v["nodes"].as_u64() {
        for m in [2, n / 2, n - 1] {
            if m >= 2 && m < n {
                let mut c = v.clone();
                c["nodes"] = json!(m);
                out.push(c);
            }
        }
    }
    for (field, least) in [("dim", 2), ("params", 100)] {
        if let Some(d) = v["workload"][field].as_u64() {
            if d / 2 >= least {
                let mut c = v.clone();
                c["workload"][field] = json!(d / 2);
                out.push(c);
            }
        }
    }
    if let Some(t) = v["stop"]["sim_time_s"].as_f64() {
        let mut c = v.clone();
        c["stop"]["sim_time_s"] = json!((t * 0.75 * 1e3).round() / 1e3);
        out.push(c);
    }
    for k in ["batch", "eval"] {
        if v.get(k).is_some() {
            let mut c = v.clone();
            c.as_object_mut().expect("an object").remove(k);
            out.push(c);
        }
    }
    out
}

/// The smallest spec found that fails as `v` fails (`kind`), and the runs it took.
pub fn shrink(v: &Value, kind: &str, budget: usize) -> (Value, Verdict, usize) {
    shrink_with(v, kind, budget, check_value)
}

/// [`shrink`] with the checks `check` (a test plants its own failure).
pub fn shrink_with(v: &Value, kind: &str, budget: usize, check: impl Fn(&Value) -> Verdict) -> (Value, Verdict, usize) {
    let mut best = v.clone();
    let mut verdict = check(v);
    let mut runs = 1;
    'outer: while runs < budget {
        for c in candidates(&best) {
            if runs >= budget {
                break 'outer;
            }
            runs += 1;
            let got = check(&c);
            if got.failure() == Some(kind) {
                best = c;
                verdict = got;
                continue 'outer;
            }
        }
        break;
    }
    (best, verdict, runs)
}
