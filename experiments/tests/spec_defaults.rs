//! `experiments/SPEC.md` states every field's default; the code holds them once. This test reads
//! the defaults the document states as literals and checks each against the code: setting the
//! field to the documented value must leave the resolved spec unchanged. That also holds for
//! fields the resolved spec leaves out while they have their default (`rto_ms`, `update_time_us`).

use dsgd_experiments::load::{set_path, spec_from_value};
use serde_json::{json, Value};

const SPEC_MD: &str = include_str!("../SPEC.md");

/// A documented default as JSON, or `None` when the document describes it in words (`beta/nodes`,
/// `from the network`, `all 10,000`).
fn literal(doc: &str) -> Option<Value> {
    let quoted = doc.trim().starts_with('`');
    let s = doc.trim().trim_matches('`').trim();
    // A bare "none" means the field is absent; `none` in backticks is a variant's name.
    if s == "none" && !quoted {
        return Some(Value::Null);
    }
    if s == "required" {
        return None;
    }
    if let Ok(v) = serde_json::from_str::<Value>(s) {
        return Some(v);
    }
    let word = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    word.then(|| Value::String(s.to_string()))
}

/// What a run of `base` with `path` set to `value` is configured with (`None` if it is refused):
/// the resolved spec, with the network and compute sections as the engine configurations they
/// resolve to (a field left out, such as `rto_ms`, means its default there).
fn resolved(base: &Value, path: Option<(&str, Value)>) -> Option<String> {
    let mut v = base.clone();
    if let Some((p, x)) = path {
        set_path(&mut v, p, x).ok()?;
    }
    let spec = spec_from_value("SPEC.md", v).ok()?;
    let mut json = serde_json::to_value(&spec).expect("a spec serialises");
    let object = json.as_object_mut().expect("a spec is an object");
    object.remove("network");
    object.remove("compute");
    Some(format!("{json} {:?} {:?}", spec.network.config(), spec.compute.config()))
}

/// The `(path, documented default)` pairs of a `| field | default | meaning |` table under the
/// heading `section`, each field under `prefix`.
fn field_table(section: &str, prefix: &str) -> Vec<(String, String)> {
    let start = SPEC_MD.find(section).unwrap_or_else(|| panic!("SPEC.md has no section {section}"));
    let rows = SPEC_MD[start..].lines().skip(1).skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
    rows.skip(2)
        .filter_map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let field = cells.get(1)?.trim_matches('`');
            Some((format!("{prefix}{field}"), cells.get(2)?.to_string()))
        })
        .collect()
}

/// The `(kind, path, documented default)` triples of a `| kind | fields (defaults) |` table: each
/// field written `` `name` (default) ``.
fn kind_table(section: &str, prefix: &str) -> Vec<(String, String, String)> {
    let start = SPEC_MD.find(section).unwrap_or_else(|| panic!("SPEC.md has no section {section}"));
    let rows = SPEC_MD[start..].lines().skip(1).skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|'));
    let mut out = Vec::new();
    for row in rows.skip(2) {
        // `\|` inside a cell separates a field's choices, not cells.
        let row = row.replace("\\|", "/");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(kind), Some(fields)) = (cells.get(1), cells.get(2)) else { continue };
        let kind = kind.trim_matches('`');
        // Fields are separated by "; " (algorithms) or ", " before the next field (workloads).
        for part in fields.split("; ").flat_map(|p| p.split(", `")).map(|p| {
            if p.starts_with('`') {
                p.to_string()
            } else {
                format!("`{p}")
            }
        }) {
            let part = part.as_str();
            // `name`...: (default): the first backticked word names the field, the first
            // parenthesis after it holds the default.
            let Some(name) = part.strip_prefix('`').and_then(|p| p.split('`').next()) else { continue };
            let Some(open) = part.find(" (") else { continue };
            let Some(close) = part[open..].find(')') else { continue };
            let default = &part[open + 2..open + close];
            out.push((kind.to_string(), format!("{prefix}{name}"), default.to_string()));
        }
    }
    out
}

/// The base spec whose `section` has kind `kind` (a burn workload needs its model).
fn base_with_kind(section: &str, kind: &str) -> Value {
    let mut inner = json!({"kind": kind});
    if kind == "burn" {
        inner["model"] = json!("mlp");
    }
    json!({ section: inner })
}

fn check(base: &Value, path: &str, doc: &str, checked: &mut Vec<String>, wrong: &mut Vec<String>) {
    let Some(value) = literal(doc) else { return };
    let plain = resolved(base, None).expect("the base spec is valid");
    match resolved(base, Some((path, value.clone()))) {
        Some(with) if with == plain => checked.push(path.to_string()),
        Some(_) => wrong.push(format!("{path}: SPEC.md says {doc}, but setting it to {value} changes the run")),
        None => wrong.push(format!("{path}: SPEC.md says {doc}, but {value} is refused")),
    }
}

#[test]
fn every_default_in_spec_md_is_the_codes_default() {
    let (mut checked, mut wrong) = (Vec::new(), Vec::new());
    let empty = json!({});
    for (section, prefix) in [
        ("## Top level", ""),
        ("## `optimizer`", "optimizer."),
        ("## `compute`", "compute."),
        ("## `network`", "network."),
    ] {
        for (path, doc) in field_table(section, prefix) {
            check(&empty, &path, &doc, &mut checked, &mut wrong);
        }
    }
    for (path, doc) in field_table("## `stop` and `eval`", "") {
        check(&empty, &path, &doc, &mut checked, &mut wrong);
    }
    for (section, field) in [("## `algorithm`", "algorithm"), ("## `workload`", "workload")] {
        for (kind, path, doc) in kind_table(section, &format!("{field}.")) {
            check(&base_with_kind(field, &kind), &path, &doc, &mut checked, &mut wrong);
        }
    }
    eprintln!("{} documented defaults checked against the code", checked.len());
    assert!(wrong.is_empty(), "SPEC.md and the code disagree:\n{}", wrong.join("\n"));
    // The document states most defaults as literals; a parser that found few would prove little.
    assert!(checked.len() >= 50, "only {} documented defaults were checked: {checked:?}", checked.len());
}

#[test]
fn a_wrong_documented_default_is_caught() {
    // The check itself must be able to fail: a default the code does not have changes the spec.
    let (mut checked, mut wrong) = (Vec::new(), Vec::new());
    check(&json!({}), "network.rto_ms", "300", &mut checked, &mut wrong);
    check(&json!({"algorithm": {"kind": "gossip"}}), "algorithm.timeout_s", "6", &mut checked, &mut wrong);
    assert_eq!(wrong.len(), 2, "{wrong:?}");
    check(&json!({}), "network.rto_ms", "200", &mut checked, &mut wrong);
    assert_eq!(checked, ["network.rto_ms"]);
}
