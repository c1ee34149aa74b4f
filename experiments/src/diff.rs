//! `dsgd diff A B`: which spec fields and which summary figures differ between two run folders.
//!
//! Both `spec.json` files are flattened into dotted paths and compared field by field (a field
//! present in one only counts as a difference). The summaries are compared on their scalars and
//! small objects (flattened the same way); per-rank lists, logs and histograms are compared whole
//! and reported by name. The wall time is left out: it is the one figure that differs between
//! replays.

use crate::analysis::flatten;
use crate::{Error, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One field that differs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Difference {
    /// Dotted path.
    pub field: String,
    /// Its value in A (`None`: absent).
    pub a: Option<String>,
    /// Its value in B.
    pub b: Option<String>,
}

/// What differs between two runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RunDiff {
    /// Spec fields.
    pub spec: Vec<Difference>,
    /// Summary figures.
    pub summary: Vec<Difference>,
}

impl RunDiff {
    /// True if nothing differs.
    pub fn is_empty(&self) -> bool {
        self.spec.is_empty() && self.summary.is_empty()
    }
}

fn read_json(dir: &Path, file: &str) -> Result<Value> {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let hint =
            if dir.join("runs").is_dir() { " (a sweep folder: give two run folders, e.g. DIR/runs/0003)" } else { "" };
        Error::file(&path, format!("{e}{hint}"))
    })?;
    serde_json::from_str(&text).map_err(|e| Error::file(&path, format!("not valid JSON: {e}")))
}

fn compare(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> Vec<Difference> {
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| Difference { field: k.clone(), a: a.get(k).cloned(), b: b.get(k).cloned() })
        .collect()
}

/// Flattens a summary: scalars and small objects by path; lists and maps whole.
fn flat_summary(v: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(m) = v.as_object() {
        for (k, x) in m {
            match x {
                _ if k == "wall_time_s" => {}
                Value::Object(o)
                    if o.values().all(|y| !y.is_object() && !y.is_array()) && k != "staleness_histogram" =>
                {
                    flatten(k, x, &mut out)
                }
                Value::Array(_) | Value::Object(_) => {
                    out.insert(k.clone(), x.to_string());
                }
                _ => flatten(k, x, &mut out),
            }
        }
    }
    out
}

/// Compares run folders `a` and `b`.
pub fn diff_runs(a: &Path, b: &Path) -> Result<RunDiff> {
    let (sa, sb) = (read_json(a, "spec.json")?, read_json(b, "spec.json")?);
    let (mut fa, mut fb) = (BTreeMap::new(), BTreeMap::new());
    flatten("", &sa, &mut fa);
    flatten("", &sb, &mut fb);
    let (ua, ub) = (read_json(a, "summary.json")?, read_json(b, "summary.json")?);
    Ok(RunDiff { spec: compare(&fa, &fb), summary: compare(&flat_summary(&ua), &flat_summary(&ub)) })
}

/// The difference as text: one line per field, long values shortened.
pub fn text(d: &RunDiff) -> String {
    let short = |v: &Option<String>| match v {
        None => "(absent)".to_string(),
        Some(s) if s.chars().count() > 60 => format!("{}…", s.chars().take(57).collect::<String>()),
        Some(s) => s.clone(),
    };
    let mut s = String::new();
    for (title, list) in [("spec", &d.spec), ("summary", &d.summary)] {
        if list.is_empty() {
            s.push_str(&format!("{title}: identical\n"));
        } else {
            s.push_str(&format!("{title}: {} field{} differ\n", list.len(), if list.len() == 1 { "" } else { "s" }));
            for x in list {
                s.push_str(&format!("  {}: {} -> {}\n", x.field, short(&x.a), short(&x.b)));
            }
        }
    }
    s
}
