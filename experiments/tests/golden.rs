//! Pins the digests of the example specs and of points of the paper sweeps
//! (`golden_digests.txt`), so that no change moves a simulated result unnoticed. A deliberate
//! change regenerates the file with `DSGD_BLESS=1` and says why in its commit.

use dsgd_experiments::execute::execute;
use dsgd_experiments::load::{parse_assignment, set_path, spec_from_value};
use serde_json::Value;
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn golden_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden_digests.txt")
}

/// The digest of a spec file (a sweep file: its base) with `--set`-style overrides.
fn digest_of(path: &str, sets: &[&str]) -> String {
    let text = std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut v: Value = serde_json::from_str(&text).expect("JSON");
    if let Some(base) = v.get("base") {
        v = base.clone();
    }
    for s in sets {
        let (k, x) = parse_assignment(s).expect("PATH=VALUE");
        set_path(&mut v, &k, x).expect("settable");
    }
    let spec = spec_from_value(path, v).unwrap_or_else(|e| panic!("{e}"));
    execute(&spec, false).unwrap_or_else(|e| panic!("{path}: {e}")).summary.digest
}

#[test]
fn example_and_paper_digests_are_the_golden_ones() {
    let text = std::fs::read_to_string(golden_file()).expect("golden_digests.txt");
    let bless = std::env::var_os("DSGD_BLESS").is_some();
    let mut out = String::new();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let f: Vec<&str> = line.split(" | ").collect();
        assert_eq!(f.len(), 3, "malformed line: {line}");
        let sets: Vec<&str> = if f[1] == "-" { Vec::new() } else { f[1].split_whitespace().collect() };
        let got = digest_of(f[0], &sets);
        checked += 1;
        if got != f[2] {
            wrong.push(format!("{} [{}]: golden {}, now {got}", f[0], f[1], f[2]));
        }
        out.push_str(&format!("{} | {} | {got}\n", f[0], f[1]));
    }
    if bless {
        std::fs::write(golden_file(), out).expect("writable");
        return;
    }
    assert!(checked >= 18, "every example spec and the paper points are pinned ({checked})");
    assert!(wrong.is_empty(), "digests moved:\n{}", wrong.join("\n"));
}

#[test]
fn every_example_spec_is_pinned() {
    let text = std::fs::read_to_string(golden_file()).expect("golden_digests.txt");
    let mut missing = Vec::new();
    for e in std::fs::read_dir(root().join("experiments/specs")).expect("specs").flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".json")
            && name != "default_sweep.json"
            && !text.contains(&format!("experiments/specs/{name} |"))
        {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "example specs without a golden digest: {missing:?}");
}
