//! The tester's coverage: which fault kinds hit which protocol stages, and which recovery paths
//! the protocols took, summed over scenarios ("sometimes" counters: a cell that stays at zero is
//! a scenario the tester never reached).

use dsgd_runtime::sim_exec::CheckReport;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Coverage summed over scenarios.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Coverage {
    /// "fault kind / algorithm role / stage" -> (scenarios it happened in, times in all).
    pub hits: BTreeMap<String, (u64, u64)>,
    /// "algorithm: note" -> (scenarios, times).
    pub reached: BTreeMap<String, (u64, u64)>,
    /// Events checked in all.
    pub events: u64,
}

impl Coverage {
    /// Adds one scenario of `algorithm` (its label) that reached `report`.
    pub fn add(&mut self, algorithm: &str, report: &CheckReport) {
        self.events += report.events;
        for ((fault, role, stage), n) in &report.coverage {
            let e = self.hits.entry(format!("{fault} / {algorithm} {role} / {stage}")).or_default();
            e.0 += 1;
            e.1 += n;
        }
        for (note, n) in &report.reached {
            let e = self.reached.entry(format!("{algorithm}: {note}")).or_default();
            e.0 += 1;
            e.1 += n;
        }
    }

    /// Adds another coverage.
    pub fn merge(&mut self, other: &Coverage) {
        self.events += other.events;
        for (k, (a, b)) in &other.hits {
            let e = self.hits.entry(k.clone()).or_default();
            e.0 += a;
            e.1 += b;
        }
        for (k, (a, b)) in &other.reached {
            let e = self.reached.entry(k.clone()).or_default();
            e.0 += a;
            e.1 += b;
        }
    }

    /// The table in Markdown: faults by algorithm role and stage (columns: the stages), then the
    /// recovery paths.
    pub fn markdown(&self) -> String {
        let mut rows: BTreeMap<(String, String), BTreeMap<String, u64>> = BTreeMap::new();
        let mut stages: Vec<String> = Vec::new();
        for (k, (scenarios, _)) in &self.hits {
            let parts: Vec<&str> = k.split(" / ").collect();
            let [fault, who, stage] = parts[..] else { continue };
            rows.entry((fault.to_string(), who.to_string())).or_default().insert(stage.to_string(), *scenarios);
            if !stages.iter().any(|s| s == stage) {
                stages.push(stage.to_string());
            }
        }
        stages.sort();
        let mut s = String::from("Scenarios in which a fault hit a node of each algorithm's role in each stage:\n\n");
        let _ = writeln!(s, "| fault | algorithm role | {} |", stages.join(" | "));
        let _ = writeln!(s, "|---|---|{}", "---:|".repeat(stages.len()));
        for ((fault, who), by) in &rows {
            let cells: Vec<String> =
                stages.iter().map(|st| by.get(st).map_or("·".to_string(), |n| n.to_string())).collect();
            let _ = writeln!(s, "| {fault} | {who} | {} |", cells.join(" | "));
        }
        let _ = writeln!(s, "\nRecovery paths the protocols took (their notes), scenarios and times:\n");
        let _ = writeln!(s, "| algorithm: note | scenarios | times |\n|---|---:|---:|");
        for (k, (a, b)) in &self.reached {
            let _ = writeln!(s, "| {k} | {a} | {b} |");
        }
        s
    }
}
