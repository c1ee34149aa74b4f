//! The simulation tester's invariants, checked after every event of a simulated run when asked
//! (`dsgd run --check`, `dsgd torture`), from what the protocols show ([`crate::audit`]) and what
//! the executor sees (sends, deliveries, crashes, evaluations). The first violation stops the run
//! with [`SimError::Invariant`] naming the invariant.
//!
//! Invariants:
//! - `finite`: a run in which a live replica or shard held a non-finite value at an evaluation
//!   reports divergence (see [`crate::metrics::DIVERGENCE_FACTOR`]);
//! - `progress`: a node's progress counts (iterations, versions, local steps) never decrease
//!   while it is up;
//! - `agreement`: members of one synchronous view that completed the same iterations hold the
//!   same parameters, bit for bit;
//! - `push_sum_mass`: the push-sum weight of the live nodes and of the pushes not yet
//!   acknowledged equals the nodes' initial weight, plus the weight counted twice (a push taken
//!   back after it was delivered), less the weight lost with crashed nodes, plus the weight
//!   nodes minted by renormalising (a node near zero weight); exactly, in fixed point;
//! - `crashed_node`: no message is sent by a node that is down, or delivered to one, or delivered
//!   across a crash or restart of either end (it belongs to an earlier incarnation);
//! - `scored`: an evaluation has a loss exactly when a model exists (every shard up for a
//!   parameter server; some live replica otherwise), and counts the live nodes there are;
//! - `figures`: the run's counters agree with the events (messages, bytes, gradients, crashes,
//!   restarts), samples are in time order with updates that never decrease, and every rank's
//!   time breakdown sums to the run's time;
//! - `liveness` (with [`Checks::liveness`]): once the faults have healed the run makes progress
//!   within the given bound: more updates, and a loss that falls (some evaluation in the window
//!   scores lower than an earlier one: a stuck model scores the same every time), unless the run
//!   diverges or every replica was lost.

use crate::audit::{Audit, Held, MsgAudit};
use crate::metrics::{Metrics, Sample, State, TimeBreakdown};
use crate::protocol::{Phase, Protocol, View};
use dsgd_sim::{Fault, SimConfig, SimError, SimStats, SimTime};
use std::collections::{BTreeMap, BTreeSet};

/// What to check besides the invariants that always hold.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Checks {
    /// Liveness: the time by which every fault has healed (windows closed, crashed nodes back),
    /// seconds, and the bound within which the run must make progress after it.
    pub liveness: Option<(f64, f64)>,
}

/// What a checked run reached: the coverage table's counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    /// (fault kind, role, stage) -> how many times a fault hit a node of that role in that stage.
    pub coverage: BTreeMap<(&'static str, &'static str, &'static str), u64>,
    /// Recovery paths reached: each kind of note the protocols wrote (numbers taken out), counted.
    pub reached: BTreeMap<String, u64>,
    /// Events checked.
    pub events: u64,
}

/// One node's part of the push-sum ledger.
#[derive(Clone, Default)]
struct PushNode {
    /// Its weight, as last seen (0 while down).
    w: i64,
    /// Pushes it sent that are neither acknowledged nor taken back: sequence -> weight.
    out: BTreeMap<u64, i64>,
    /// Those of them delivered.
    arrived: BTreeSet<u64>,
    out_sum: i128,
    arrived_sum: i128,
    /// The weight it has minted by renormalising, as last seen.
    minted: i128,
}

/// The push-sum ledger (see `push_sum_mass`), kept up to date from the messages and the audits
/// at a cost per event that does not grow with the pushes a node holds.
#[derive(Default)]
struct Ledger {
    nodes: Vec<PushNode>,
    /// The sum over nodes of weight + pushes out − pushes out that arrived.
    total: i128,
    /// Weight counted twice, weight lost with crashed nodes, and weight minted by nodes that
    /// renormalised.
    twice: i128,
    lost: i128,
    minted: i128,
    /// The weight the run started with.
    start: i128,
}

impl Ledger {
    fn new(n: usize) -> Self {
        Ledger { nodes: vec![PushNode::default(); n], ..Ledger::default() }
    }

    fn sent(&mut self, from: usize, seq: u64, w: i64) {
        let n = &mut self.nodes[from];
        if n.out.insert(seq, w).is_none() {
            n.out_sum += w as i128;
            self.total += w as i128;
        }
    }

    /// Push `seq` of `from`, carrying `w`, is about to be added to its receiver's weight.
    fn delivered(&mut self, from: usize, seq: u64, w: i64) {
        let n = &mut self.nodes[from];
        match n.out.get(&seq) {
            Some(&held) => {
                if n.arrived.insert(seq) {
                    n.arrived_sum += held as i128;
                    self.total -= held as i128;
                }
            }
            // Taken back already (its acknowledgement was late): the receiver adds it again.
            None => self.twice += w as i128,
        }
    }

    /// The acknowledgement of push `seq` reaches its sender `to`.
    fn acked(&mut self, to: usize, seq: u64) {
        let n = &mut self.nodes[to];
        if let Some(w) = n.out.remove(&seq) {
            n.out_sum -= w as i128;
            self.total -= w as i128;
            if n.arrived.remove(&seq) {
                n.arrived_sum -= w as i128;
                self.total += w as i128;
            }
        }
    }

    /// Node `r` as it is now: its weight, and the pushes it still holds. Pushes it no longer
    /// holds without an acknowledgement were taken back; those that had arrived count twice.
    fn update(&mut self, r: usize, w: i64, held: &dyn Held, minted: i128) {
        let n = &mut self.nodes[r];
        self.total += (w - n.w) as i128;
        n.w = w;
        self.minted += minted - n.minted;
        n.minted = minted;
        let missing = n.out.len().saturating_sub(held.count());
        if missing > 0 {
            // Pushes are taken back oldest first (each when its own timeout fires), so the
            // search from the oldest ends after a few.
            let gone: Vec<(u64, i64)> =
                n.out.iter().filter(|(s, _)| !held.holds(**s)).take(missing).map(|(&s, &w)| (s, w)).collect();
            for (s, w) in gone {
                n.out.remove(&s);
                n.out_sum -= w as i128;
                self.total -= w as i128;
                if n.arrived.remove(&s) {
                    n.arrived_sum -= w as i128;
                    self.total += w as i128;
                    self.twice += w as i128;
                }
            }
        }
    }

    /// Node `r` crashed: its part is lost.
    fn crashed(&mut self, r: usize) {
        let n = std::mem::take(&mut self.nodes[r]);
        self.nodes[r].minted = n.minted; // counted over all its lives
        let part = n.w as i128 + n.out_sum - n.arrived_sum;
        self.lost += part;
        self.total -= part;
    }
}

/// The checker of one run.
pub(super) struct Checker<M> {
    classify: fn(&M) -> MsgAudit,
    checks: Checks,
    up: Vec<bool>,
    /// Each node's crash and restart times.
    changes: Vec<Vec<SimTime>>,
    progress: Vec<[Option<u64>; 2]>,
    agreed_at: Vec<Option<(u64, u64)>>,
    agreed: BTreeMap<(u64, u64), (u64, usize)>,
    /// The members of each view seen.
    view_members: BTreeMap<u64, Vec<usize>>,
    nonfinite: Vec<bool>,
    /// Live nodes that hold a synchronous replica (not waiting for a donor's state).
    holds: Vec<bool>,
    roles: Vec<&'static str>,
    stages: Vec<&'static str>,
    ledger: Option<Ledger>,
    /// Fault windows' onsets not reached yet: (time, kind, nodes; empty: all).
    onsets: Vec<(SimTime, &'static str, Vec<usize>)>,
    sends: u64,
    bytes: u64,
    deliveries: u64,
    gradients: u64,
    crashes: u64,
    restarts: u64,
    report: CheckReport,
    violation: Option<SimError>,
    /// Each evaluation's time, and whether a model existed then.
    models: Vec<(f64, bool)>,
    /// The first evaluation at which a live node held a non-finite value, and the node.
    nonfinite_seen: Option<(f64, usize)>,
}

fn fault_onsets(sim: &SimConfig) -> Vec<(SimTime, &'static str, Vec<usize>)> {
    let mut out: Vec<(SimTime, &'static str, Vec<usize>)> = sim
        .faults
        .schedule
        .iter()
        .filter_map(|f| match f {
            Fault::NicDegrade { node, from, .. } => Some((*from, "slow_nic", vec![*node])),
            Fault::Partition { from, .. } => Some((*from, "partition", Vec::new())),
            Fault::MessageLoss { from, .. } => Some((*from, "message_loss", Vec::new())),
            _ => None,
        })
        .collect();
    out.extend(sim.compute.slowdowns.iter().map(|s| (s.from, "straggler", s.node.into_iter().collect())));
    out.sort_by_key(|(t, _, _)| std::cmp::Reverse(*t));
    out
}

/// A 64-bit hash of a vector's bits (FNV-1a over each value).
fn bits_hash(v: &[f32]) -> u64 {
    v.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| (h ^ x.to_bits() as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

fn phase_name(state: State) -> &'static str {
    match state {
        State::Phase(Phase::Computing) => "computing",
        State::Phase(Phase::Communicating) => "communicating",
        State::Phase(Phase::Idle) => "idle",
        State::Crashed => "crashed",
    }
}

impl<M> Checker<M> {
    pub fn new<P: Protocol<Msg = M>>(sim: &SimConfig, checks: Checks) -> Self {
        let n = sim.nodes;
        Checker {
            classify: P::audit_msg,
            checks,
            up: vec![true; n],
            changes: vec![Vec::new(); n],
            progress: vec![[None; 2]; n],
            agreed_at: vec![None; n],
            agreed: BTreeMap::new(),
            view_members: BTreeMap::new(),
            nonfinite: vec![false; n],
            holds: vec![false; n],
            roles: vec!["node"; n],
            stages: vec!["idle"; n],
            ledger: None,
            onsets: fault_onsets(sim),
            sends: 0,
            bytes: 0,
            deliveries: 0,
            gradients: 0,
            crashes: 0,
            restarts: 0,
            report: CheckReport::default(),
            violation: None,
            models: Vec::new(),
            nonfinite_seen: None,
        }
    }

    fn fail(&mut self, invariant: &'static str, at: SimTime, what: String) {
        if self.violation.is_none() {
            self.violation = Some(SimError::Invariant { invariant, at, what });
        }
    }

    /// The first violation, taken.
    pub fn take_violation(&mut self) -> Option<SimError> {
        self.violation.take()
    }

    fn who(&self, r: usize) -> String {
        format!("{} {r}", self.roles[r])
    }

    /// Rank `from` sends `msg`.
    pub fn sent(&mut self, from: usize, to: usize, msg: &M, bytes: u64, now: SimTime) {
        self.sends += 1;
        self.bytes += bytes;
        if !self.up[from] {
            let what = format!("{} sent a message to rank {to} while down", self.who(from));
            self.fail("crashed_node", now, what);
        }
        if let MsgAudit::Push { seq, w } = (self.classify)(msg) {
            let n = self.up.len();
            self.ledger.get_or_insert_with(|| Ledger::new(n)).sent(from, seq, w);
        }
    }

    /// A message from `from` sent at `sent_at` is about to be handed to `to`.
    pub fn delivering(&mut self, from: usize, to: usize, sent_at: SimTime, msg: &M, now: SimTime) {
        self.deliveries += 1;
        for (end, name) in [(to, "receiver"), (from, "sender")] {
            if !self.up[end] {
                let what = format!("a message from rank {from} to rank {to} was delivered while its {name} is down");
                return self.fail("crashed_node", now, what);
            }
            if let Some(t) = self.changes[end].iter().rev().find(|&&t| t > sent_at && t <= now) {
                let what = format!(
                    "a message from rank {from} to rank {to} sent at {sent_at} was delivered at {now}, although its \
                     {name} crashed or restarted at {t} in between"
                );
                return self.fail("crashed_node", now, what);
            }
        }
        let Some(l) = self.ledger.as_mut() else { return };
        match (self.classify)(msg) {
            MsgAudit::Push { seq, w } => l.delivered(from, seq, w),
            MsgAudit::Ack { seq } => l.acked(to, seq),
            MsgAudit::Other => {}
        }
    }

    /// A gradient was handed over.
    pub fn gradient(&mut self) {
        self.gradients += 1;
    }

    /// Node `r` is about to crash.
    pub fn crashing(&mut self, r: usize, now: SimTime) {
        self.crashes += 1;
        self.hit("crash", r);
        self.up[r] = false;
        self.changes[r].push(now);
        self.nonfinite[r] = false;
        if std::mem::replace(&mut self.holds[r], false) && !self.holds.iter().any(|&h| h) {
            self.agreed.clear(); // the last replica is gone (see `after`)
            self.view_members.clear();
        }
        if let Some(l) = self.ledger.as_mut() {
            l.crashed(r);
        }
    }

    /// Node `r` is about to restart.
    pub fn restarting(&mut self, r: usize, now: SimTime) {
        self.restarts += 1;
        self.up[r] = true;
        self.changes[r].push(now);
        self.progress[r] = [None; 2];
        self.agreed_at[r] = None;
        // A restarted member counts its epochs from zero again, so the views it forms may have the
        // ids of views it was in before the crash, with other histories: those are forgotten.
        let stale: Vec<u64> = self.view_members.iter().filter(|(_, m)| m.contains(&r)).map(|(&v, _)| v).collect();
        for v in stale {
            self.view_members.remove(&v);
            let keys: Vec<(u64, u64)> = self.agreed.range((v, 0)..=(v, u64::MAX)).map(|(k, _)| *k).collect();
            keys.iter().for_each(|k| {
                self.agreed.remove(k);
            });
        }
    }

    /// Counts a fault hitting node `r` in its current stage.
    fn hit(&mut self, kind: &'static str, r: usize) {
        let stage = if self.up[r] { self.stages[r] } else { "down" };
        *self.report.coverage.entry((kind, self.roles[r], stage)).or_default() += 1;
    }

    /// Every node was started: the push-sum ledger opens with their weight.
    pub fn started<P: Protocol<Msg = M>>(&mut self, roles: &[P], states: impl Fn(usize) -> State, now: SimTime) {
        for (r, p) in roles.iter().enumerate() {
            self.after(r, p, states(r), now);
        }
        if let Some(l) = self.ledger.as_mut() {
            l.start = l.total;
        }
    }

    /// Fault windows opening up to `now` (counted once, at the first event at or after them).
    pub fn windows(&mut self, now: SimTime) {
        while self.onsets.last().is_some_and(|(t, _, _)| *t <= now) {
            let (_, kind, nodes) = self.onsets.pop().expect("checked");
            let all: Vec<usize> = if nodes.is_empty() { (0..self.up.len()).collect() } else { nodes };
            all.into_iter().for_each(|r| self.hit(kind, r));
        }
    }

    /// After an event on node `r`: its audit against the invariants.
    pub fn after<P: Protocol<Msg = M>>(&mut self, r: usize, p: &P, state: State, now: SimTime) {
        self.report.events += 1;
        let restarted_now = self.changes[r].last() == Some(&now) && self.up[r];
        let a: Audit<'_> = p.audit();
        self.roles[r] = a.role;
        self.stages[r] = a.stage.unwrap_or_else(|| phase_name(state));
        if restarted_now {
            self.hit("restart", r);
        }
        if !self.up[r] {
            return;
        }
        self.nonfinite[r] = match p.view() {
            // A push-sum node without weight shows 0/0; the consensus leaves it out.
            View::Replica { weight, .. } if weight <= 0.0 => false,
            View::Replica { params, .. } => params.iter().any(|x| !x.is_finite()),
            View::Shard { params, .. } => params.iter().any(|x| !x.is_finite()),
            View::Nothing => false,
        };
        for (i, now_p) in a.progress.iter().enumerate() {
            if let (Some(was), Some(is)) = (self.progress[r][i], *now_p) {
                if is < was {
                    let what = format!("{}'s progress count went from {was} to {is} without a restart", self.who(r));
                    self.fail("progress", now, what);
                }
            }
        }
        self.progress[r] = a.progress;
        let held = std::mem::replace(&mut self.holds[r], a.agreed.is_some());
        if held && a.agreed.is_none() && !self.holds.iter().any(|&h| h) {
            // No live member holds a replica any more (every one crashed or awaits a state no
            // one can send): the cluster starts over from scratch, with epochs, and so view
            // ids, that earlier members used.
            self.agreed.clear();
            self.view_members.clear();
        }
        if let Some((view, members, done, params)) = a.agreed {
            if self.agreed_at[r] != Some((view, done)) {
                self.agreed_at[r] = Some((view, done));
                self.view_members.entry(view).or_insert_with(|| members.to_vec());
                let h = bits_hash(params);
                match self.agreed.get(&(view, done)) {
                    Some(&(h0, r0)) if h0 != h => {
                        let what = format!(
                            "{} and {} both completed {done} iterations in view {view:#x} with different parameters",
                            self.who(r0),
                            self.who(r)
                        );
                        self.fail("agreement", now, what);
                    }
                    Some(_) => {}
                    None => {
                        self.agreed.insert((view, done), (h, r));
                    }
                }
            }
        }
        if let Some((w, unacked, minted)) = a.push_sum {
            let n = self.up.len();
            let l = self.ledger.get_or_insert_with(|| Ledger::new(n));
            l.update(r, w, unacked, minted);
            let (total, parts) = (l.total, (l.start, l.twice, l.lost, l.minted));
            let expected = parts.0 + parts.1 - parts.2 + parts.3;
            if parts.0 != 0 && total != expected {
                let what = format!(
                    "after an event on {}, the live nodes and unacknowledged pushes hold {total} units of weight, \
                     not {expected} (start {} + counted twice {} - lost with crashes {} + minted {})",
                    self.who(r),
                    parts.0,
                    parts.1,
                    parts.2,
                    parts.3
                );
                self.fail("push_sum_mass", now, what);
            }
        }
    }

    /// An evaluation: `sample` as scored, with a workload that has a model (`false`: timing only).
    pub fn evaluated<P: Protocol<Msg = M>>(&mut self, roles: &[P], sample: &Sample, real: bool, now: SimTime) {
        let live: Vec<usize> = (0..roles.len()).filter(|&r| self.up[r]).collect();
        if sample.live != live.len() {
            let what = format!("an evaluation counts {} live nodes; {} are up", sample.live, live.len());
            self.fail("scored", now, what);
        }
        let shards: Vec<usize> = (0..roles.len()).filter(|&r| matches!(roles[r].view(), View::Shard { .. })).collect();
        let model = if shards.len() > 1 || shards.iter().any(|&r| self.roles[r] == "shard") {
            shards.iter().all(|&r| self.up[r])
        } else {
            live.iter().any(|&r| !matches!(roles[r].view(), View::Nothing | View::Replica { weight: 0.0, .. }))
        };
        self.models.push((sample.time_s, model));
        if !real {
            return; // a timing workload has no parameters to score
        }
        if model != sample.loss.is_some() {
            let what = if model {
                "an evaluation has no loss although a model exists".to_string()
            } else {
                format!("an evaluation has loss {:?} although no model exists", sample.loss)
            };
            self.fail("scored", now, what);
        }
        if let Some(&r) = live.iter().find(|&&r| self.nonfinite[r]) {
            self.nonfinite_seen.get_or_insert((sample.time_s, r));
        }
    }

    /// Notes written during the run, for the coverage's recovery paths.
    fn notes(&mut self, metrics: &Metrics) {
        for n in &metrics.notes {
            let kind: String = n.what.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
            let kind = kind.split('#').next().unwrap_or("").trim_end().to_string();
            *self.report.reached.entry(kind).or_default() += 1;
        }
    }

    /// At the end: the figures against the events, liveness, and the report (or the first
    /// violation).
    pub fn finish(
        mut self,
        metrics: &Metrics,
        stats: &SimStats,
        times: &[TimeBreakdown],
        end: SimTime,
    ) -> Result<CheckReport, SimError> {
        if let Some(v) = self.violation.take() {
            return Err(v);
        }
        let sent_bytes: u64 = metrics.bytes_by_rank.iter().sum();
        let pairs = [
            ("messages sent", stats.messages_sent, self.sends),
            ("bytes sent (engine)", stats.bytes_sent, self.bytes),
            ("bytes sent (per rank)", sent_bytes, self.bytes),
            ("messages delivered", stats.messages_delivered, self.deliveries),
            ("gradients", metrics.gradients, self.gradients),
            ("crashes", stats.crashes, self.crashes),
            ("restarts", stats.restarts, self.restarts),
        ];
        for (what, recorded, seen) in pairs {
            if recorded != seen {
                self.fail("figures", end, format!("the run records {recorded} {what}; its events show {seen}"));
            }
        }
        for w in metrics.samples.windows(2) {
            if w[1].time_s < w[0].time_s || w[1].updates < w[0].updates {
                let what = format!(
                    "samples out of order: ({} s, {} updates) after ({} s, {} updates)",
                    w[1].time_s, w[1].updates, w[0].time_s, w[0].updates
                );
                self.fail("figures", end, what);
            }
        }
        if let Some((at, r)) = self.nonfinite_seen {
            if crate::metrics::diverged_at(&metrics.samples).is_none() {
                let what = format!(
                    "{} held a non-finite value at the evaluation at {at} s, but the run does not report divergence",
                    self.who(r)
                );
                self.fail("finite", end, what);
            }
        }
        let t = end.as_secs_f64();
        for (r, b) in times.iter().enumerate() {
            let sum = b.computing + b.communicating + b.idle + b.crashed;
            if (sum - t).abs() > 1e-9 * t.max(1.0) || b.overlapped > b.computing + 1e-12 {
                let what = format!("rank {r}'s time breakdown sums to {sum} s over a run of {t} s ({b:?})");
                self.fail("figures", end, what);
            }
        }
        if let Some((healed, within)) = self.checks.liveness {
            self.liveness(metrics, healed, within, end);
        }
        self.notes(metrics);
        match self.violation.take() {
            Some(v) => Err(v),
            None => Ok(self.report),
        }
    }

    /// After `healed`, within `within`: more updates and a lower loss (when the run lasts that
    /// long, every node is up, and it has not diverged).
    fn liveness(&mut self, metrics: &Metrics, healed: f64, within: f64, end: SimTime) {
        let until = healed + within;
        if end.as_secs_f64() + 1e-9 < until || self.up.iter().any(|u| !u) {
            return;
        }
        let s = &metrics.samples;
        let Some(at) = s.iter().find(|x| x.time_s >= healed) else { return };
        // Every replica was lost (each node crashed while the others were down, or held no
        // push-sum weight): nothing can make progress, and the summary counts the evaluations
        // without a model.
        if self.models.iter().any(|&(t, m)| t == at.time_s && !m) {
            *self.report.reached.entry("(no model survived the faults: liveness not required)".into()).or_default() +=
                1;
            return;
        }
        let later: Vec<&Sample> = s.iter().filter(|x| x.time_s > at.time_s && x.time_s <= until + 1e-9).collect();
        let Some(last) = later.last() else { return };
        if last.updates <= at.updates {
            let what = format!(
                "no update from {:.3} s, when the faults had healed, to {:.3} s ({} updates then and after)",
                at.time_s, last.time_s, at.updates
            );
            return self.fail("liveness", end, what);
        }
        // A run that diverges (a bad learning rate, not a stuck protocol) is reported as
        // diverged by its summary.
        // A timing workload scores nothing (its loss is not a number).
        if crate::metrics::diverged_at(s).is_some() || !at.loss.is_some_and(f64::is_finite) {
            return;
        }
        // The loss falls: some evaluation in the window scores lower than an earlier one (a
        // stuck model scores the same every time; a transient rise after the replicas reconnect
        // is allowed, as is a run at its loss floor, whose noise moves it both ways).
        let losses: Vec<f64> = std::iter::once(at).chain(later.iter().copied()).filter_map(|x| x.loss).collect();
        if losses.len() >= 2 && !losses.windows(2).any(|w| w[1] < w[0]) {
            let what = format!(
                "the loss did not fall after the faults healed: {} at {:.3} s, never lower than an earlier evaluation \
                 until {:.3} s (last {})",
                losses[0],
                at.time_s,
                last.time_s,
                losses[losses.len() - 1]
            );
            self.fail("liveness", end, what);
        }
    }
}
