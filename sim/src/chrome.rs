//! The trace as Chrome trace-event JSON, for Perfetto or `chrome://tracing`:
//! - process "ranks": one track per rank, named by its role (`worker 3`, `shard 1`), with its
//!   computations and timers, each message as a span on its receiver from send to arrival,
//!   faults (crash, restart, a NIC's change, lost messages) as instants on the track they hit,
//!   and a flow arrow from each send to its receive;
//! - process "NICs": a counter track per rank, the bytes it has sent that have not arrived (its
//!   NIC's queue and the wire);
//! - process "cluster": counters of the live ranks, the bytes in flight and the messages lost.

use crate::time::{SimDuration, SimTime};
use crate::trace::{EventKind, Trace, TraceRecord};
use serde_json::{json, Map, Value};

const RANKS: u32 = 0;
const NICS: u32 = 1;
const CLUSTER: u32 = 2;

fn micros(t: SimTime) -> f64 {
    t.as_nanos() as f64 / 1e3
}

/// Width of the marks that carry a flow's ends (a send, a receive), microseconds.
const MARK_US: f64 = 0.001;

fn name_meta(pid: u32, tid: Option<usize>, what: &str, name: &str) -> Value {
    match tid {
        Some(t) => json!({"ph": "M", "name": what, "pid": pid, "tid": t, "args": {"name": name}}),
        None => json!({"ph": "M", "name": what, "pid": pid, "args": {"name": name}}),
    }
}

fn counter(pid: u32, name: &str, at: SimTime, key: &str, value: f64) -> Value {
    json!({"ph": "C", "pid": pid, "name": name, "ts": micros(at), "args": {key: value}})
}

fn is_message(kind: EventKind) -> bool {
    matches!(kind, EventKind::Deliver | EventKind::DropCrash | EventKind::DropPartition | EventKind::DropLoss)
}

fn lost(kind: EventKind) -> bool {
    matches!(kind, EventKind::DropCrash | EventKind::DropPartition | EventKind::DropLoss | EventKind::Retransmit)
}

/// The record itself: a span (computation, message) or an instant on its rank's track.
fn record_event(r: &TraceRecord) -> Value {
    let mut args = Map::new();
    if r.peer != u32::MAX {
        args.insert("peer".into(), json!(r.peer));
    }
    if r.bytes > 0 {
        args.insert("bytes".into(), json!(r.bytes));
    }
    let dur: SimDuration = r.at - r.start;
    if matches!(r.kind, EventKind::Compute | EventKind::Deliver) {
        json!({"ph": "X", "name": r.kind.label(), "pid": RANKS, "tid": r.node,
               "ts": micros(r.start), "dur": dur.as_nanos() as f64 / 1e3, "args": args})
    } else {
        json!({"ph": "i", "s": "t", "name": r.kind.label(), "pid": RANKS, "tid": r.node,
               "ts": micros(r.at), "args": args})
    }
}

/// A delivered message's flow: a send mark on the sender, a receive mark on the receiver, and
/// the arrow between them (`id`).
fn flow(r: &TraceRecord, id: usize, out: &mut Vec<Value>) {
    let (send, recv) = (micros(r.start), micros(r.at));
    out.push(json!({"ph": "X", "name": "send", "pid": RANKS, "tid": r.peer, "ts": send, "dur": MARK_US,
                    "args": {"to": r.node, "bytes": r.bytes}}));
    out.push(json!({"ph": "X", "name": "receive", "pid": RANKS, "tid": r.node, "ts": recv, "dur": MARK_US,
                    "args": {"from": r.peer, "bytes": r.bytes}}));
    out.push(
        json!({"ph": "s", "name": "message", "cat": "message", "id": id, "pid": RANKS, "tid": r.peer, "ts": send}),
    );
    out.push(json!({"ph": "f", "bp": "e", "name": "message", "cat": "message", "id": id, "pid": RANKS,
                    "tid": r.node, "ts": recv}));
}

/// The counters: bytes in flight per sender and in all, live ranks, messages lost.
fn counters(trace: &Trace, names: &[String], out: &mut Vec<Value>) {
    // (time, order, change): arrivals before sends at one instant, so a counter never overshoots.
    let mut flows: Vec<(SimTime, u8, u32, i64)> = Vec::new();
    for r in trace.records.iter().filter(|r| is_message(r.kind) && r.peer != u32::MAX) {
        flows.push((r.start, 1, r.peer, r.bytes as i64));
        flows.push((r.at, 0, r.peer, -(r.bytes as i64)));
    }
    flows.sort();
    let mut per = vec![0i64; names.len()];
    let mut total = 0i64;
    for (at, _, node, change) in flows {
        let n = node as usize;
        per[n] += change;
        total += change;
        out.push(counter(NICS, &format!("{}: bytes not yet arrived", names[n]), at, "bytes", per[n] as f64));
        out.push(counter(CLUSTER, "bytes in flight", at, "bytes", total as f64));
    }
    let (mut live, mut lost_so_far) = (names.len() as f64, 0.0);
    out.push(counter(CLUSTER, "live ranks", SimTime::ZERO, "ranks", live));
    out.push(counter(CLUSTER, "messages lost", SimTime::ZERO, "messages", 0.0));
    for r in &trace.records {
        match r.kind {
            EventKind::Crash => live -= 1.0,
            EventKind::Restart => live += 1.0,
            k if lost(k) => {
                lost_so_far += 1.0;
                out.push(counter(CLUSTER, "messages lost", r.at, "messages", lost_so_far));
                continue;
            }
            _ => continue,
        }
        out.push(counter(CLUSTER, "live ranks", r.at, "ranks", live));
    }
}

impl Trace {
    /// The trace as a Chrome trace-event JSON value; `names` names each rank's track (its role).
    pub fn to_chrome_json(&self, names: &[String]) -> Value {
        let mut events = vec![
            name_meta(RANKS, None, "process_name", "ranks"),
            name_meta(NICS, None, "process_name", "NICs"),
            name_meta(CLUSTER, None, "process_name", "cluster"),
        ];
        events.extend(names.iter().enumerate().map(|(n, name)| name_meta(RANKS, Some(n), "thread_name", name)));
        let mut flows = 0;
        for r in self.records.iter().filter(|r| r.kind != EventKind::NetHop) {
            events.push(record_event(r));
            if r.kind == EventKind::Deliver && r.peer != u32::MAX {
                flow(r, flows, &mut events);
                flows += 1;
            }
        }
        counters(self, names, &mut events);
        json!({"traceEvents": events, "displayTimeUnit": "ms"})
    }

    /// Writes the Chrome trace-event JSON to `w`; `names` names each rank's track.
    pub fn write_chrome<W: std::io::Write>(&self, names: &[String], w: W) -> crate::Result<()> {
        serde_json::to_writer(w, &self.to_chrome_json(names)).map_err(|e| crate::SimError::Trace(e.to_string()))
    }
}

/// Tracks named `node 0`, `node 1`, … for a trace without roles.
pub fn node_names(nodes: usize) -> Vec<String> {
    (0..nodes).map(|n| format!("node {n}")).collect()
}
