//! All-reduce collectives, message by message.
//!
//! A collective is a per-member list of [`Step`]s: in round `r`, maybe send a range of the
//! buffer to a member, maybe wait for a range from a member and add it in (reduce) or copy it
//! (gather). [`Run`] executes one member's list over messages, buffering rounds that arrive
//! early. Members are indices `0..p` into the current membership, not ranks. One collective a
//! file: [`ring`], [`tree`], [`halving_doubling`], [`hierarchical`] (two levels, for racks);
//! [`analytic`] holds the closed-form costs used by the analytic modes and by tests. This module
//! knows nothing of the network or the clock.

pub mod analytic;
pub mod halving_doubling;
pub mod hierarchical;
pub mod ring;
pub mod tree;

pub use hierarchical::Groups;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;

/// Which all-reduce algorithm to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CollectiveKind {
    /// Ring: chunked reduce-scatter then all-gather; 2(p-1) rounds of S/p bytes.
    Ring,
    /// Binomial tree: reduce to member 0, then broadcast; 2·ceil(log2 p) rounds of S bytes.
    Tree,
    /// Recursive halving (reduce-scatter) then doubling (all-gather), Rabenseifner's algorithm,
    /// with a pre- and post-step for non-power-of-two member counts.
    HalvingDoubling,
    /// Two levels for racks: reduce-scatter inside each rack, one ring per shard across the
    /// racks, all-gather inside each rack (see [`hierarchical`]). Groups are the racks of
    /// `network.topology` unless the sync config's `group_size` says otherwise.
    Hierarchical,
    /// No per-step messages: the closed-form ring cost, charged once every contribution is in.
    Analytic,
    /// No per-step messages: the closed-form cost of [`CollectiveKind::Hierarchical`].
    AnalyticHierarchical,
}

impl CollectiveKind {
    /// True for the kinds charged in closed form rather than run message by message.
    pub fn is_analytic(self) -> bool {
        matches!(self, CollectiveKind::Analytic | CollectiveKind::AnalyticHierarchical)
    }
    /// The name a spec gives it.
    pub fn name(self) -> &'static str {
        match self {
            CollectiveKind::Ring => "ring",
            CollectiveKind::Tree => "tree",
            CollectiveKind::HalvingDoubling => "halving_doubling",
            CollectiveKind::Hierarchical => "hierarchical",
            CollectiveKind::Analytic => "analytic",
            CollectiveKind::AnalyticHierarchical => "analytic_hierarchical",
        }
    }
    /// True for the kinds that need groups (racks).
    pub fn is_hierarchical(self) -> bool {
        matches!(self, CollectiveKind::Hierarchical | CollectiveKind::AnalyticHierarchical)
    }
}

/// How a received range is combined with the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Add element-wise (reduction).
    Add,
    /// Overwrite (gather, broadcast).
    Copy,
}

/// One round of one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Round number, shared by a sender and its receiver.
    pub round: u32,
    /// Send this range of the buffer to this member.
    pub send: Option<(usize, Range<usize>)>,
    /// Then wait for this range from this member and combine it.
    pub recv: Option<(usize, Range<usize>, Op)>,
}

/// The steps of member `me` of `p` for a `dim`-element all-reduce (the hierarchical kind as one
/// group of all `p`: build [`Schedule::hierarchical`] for racks).
pub fn schedule(kind: CollectiveKind, p: usize, me: usize, dim: usize) -> Vec<Step> {
    match kind {
        CollectiveKind::Ring => ring::schedule(p, me, dim),
        CollectiveKind::Tree => tree::schedule(p, me, dim),
        CollectiveKind::HalvingDoubling => halving_doubling::schedule(p, me, dim),
        CollectiveKind::Hierarchical => {
            let s = Schedule::hierarchical(Arc::new(Groups::consecutive(p, p.max(1))), me, dim);
            (0..s.len()).filter_map(|k| s.get(k)).collect()
        }
        CollectiveKind::Analytic | CollectiveKind::AnalyticHierarchical => Vec::new(),
    }
}

/// A member's steps: listed (tree and halving-doubling take O(log p) of them), or, for the
/// ring's 2(p-1), computed on demand so that no member holds its whole schedule.
#[derive(Clone, Debug)]
pub enum Schedule {
    /// The steps, in order.
    Listed(Arc<[Step]>),
    /// Member `me` of a ring of `p` over a nominal vector of `dim` elements.
    Ring {
        /// Members.
        p: usize,
        /// This member.
        me: usize,
        /// Nominal vector length.
        dim: usize,
    },
    /// A member of a hierarchical all-reduce over `groups` (shared by all members).
    Hierarchical {
        /// The groups.
        groups: Arc<Groups>,
        /// This member's group and its index there.
        at: (usize, usize),
        /// Nominal vector length.
        dim: usize,
    },
}

impl Schedule {
    /// Member `me` of `p`'s schedule for a `dim`-element all-reduce (the hierarchical kind as
    /// one group of all `p`: see [`Schedule::hierarchical`]).
    pub fn new(kind: CollectiveKind, p: usize, me: usize, dim: usize) -> Self {
        match kind {
            CollectiveKind::Ring => Schedule::Ring { p, me, dim },
            CollectiveKind::Hierarchical => Schedule::hierarchical(Arc::new(Groups::consecutive(p, p.max(1))), me, dim),
            _ => Schedule::Listed(schedule(kind, p, me, dim).into()),
        }
    }
    /// Member `me`'s schedule of a hierarchical all-reduce over `groups`, computed on demand.
    pub fn hierarchical(groups: Arc<Groups>, me: usize, dim: usize) -> Self {
        let at = groups.locate(me);
        Schedule::Hierarchical { groups, at, dim }
    }
    /// Steps in all.
    pub fn len(&self) -> usize {
        match self {
            Schedule::Listed(s) => s.len(),
            Schedule::Ring { p, .. } => ring::steps(*p),
            Schedule::Hierarchical { groups, at, .. } => groups.steps(*at),
        }
    }
    /// True if there are no steps (a single member).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Step `k`, if there is one.
    #[inline(always)]
    pub fn get(&self, k: usize) -> Option<Step> {
        match self {
            Schedule::Listed(s) => s.get(k).cloned(),
            Schedule::Ring { p, me, dim } => (k < ring::steps(*p)).then(|| ring::step(*p, *me, *dim, k)),
            Schedule::Hierarchical { groups, at, dim } => hierarchical_step(groups, *at, *dim, k),
        }
    }
    /// Rounds in all (one more than the last step's round).
    pub fn rounds(&self) -> usize {
        match self {
            Schedule::Listed(s) => s.iter().map(|s| s.round as usize + 1).max().unwrap_or(0),
            Schedule::Ring { p, .. } => ring::steps(*p),
            Schedule::Hierarchical { groups, .. } => groups.rounds(),
        }
    }
}

/// Step `k` of a hierarchical member (out of line: [`Schedule::get`] is inlined for the ring).
#[inline(never)]
fn hierarchical_step(groups: &Groups, at: (usize, usize), dim: usize, k: usize) -> Option<Step> {
    groups.step(at, dim, k)
}

impl From<Vec<Step>> for Schedule {
    fn from(steps: Vec<Step>) -> Self {
        Schedule::Listed(steps.into())
    }
}

/// Elements on the wire of a workload's full vector (its message size in 4-byte words).
pub fn wire_params(w: &dyn dsgd_models::Workload) -> usize {
    ((w.message_bytes() / 4) as usize).max(1)
}

/// Bytes on the wire of a slice of `len` of the workload's `param_count` elements.
pub fn slice_bytes(w: &dyn dsgd_models::Workload, len: usize) -> u64 {
    (w.message_bytes() as u128 * len as u128 / w.param_count().max(1) as u128) as u64
}

/// The `c`-th of `p` near-equal chunks of `0..dim`.
#[inline]
pub fn chunk(dim: usize, p: usize, c: usize) -> Range<usize> {
    (c * dim / p)..((c + 1) * dim / p)
}

/// A message the running collective wants sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing {
    /// Member index of the receiver.
    pub to: usize,
    /// Round.
    pub round: u32,
    /// Nominal range (its length sets the message size).
    pub range: Range<usize>,
    /// The values (empty for timing-only workloads).
    pub data: Vec<f32>,
}

/// One member's execution of a collective.
#[derive(Clone, Debug)]
pub struct Run {
    steps: Schedule,
    /// Rounds of the schedule (data for a later round is stale and dropped).
    rounds: usize,
    /// Length of the nominal vector the schedule's ranges refer to.
    wire: usize,
    pos: usize,
    /// Step `pos`, kept while it waits for its message (a ring's steps are computed on demand).
    current: Option<Step>,
    sent: bool,
    buf: Vec<f32>,
    /// Data of rounds that arrived before this member reached them: a handful at most (a
    /// neighbour runs at most a few rounds ahead), so a list beats a map.
    early: Vec<(u32, Vec<f32>)>,
}

impl Run {
    /// Starts a run of `steps` (shareable: a member's schedule is the same every iteration) over
    /// `buf` (this member's contribution; empty for timing-only workloads). The steps' ranges
    /// refer to a nominal vector of `wire` elements (which sets message sizes); they are mapped
    /// proportionally onto `buf`, so a small vector can stand in for a large model's.
    pub fn new(steps: Schedule, buf: Vec<f32>, wire: usize) -> Self {
        let rounds = steps.rounds();
        Run { steps, rounds, wire: wire.max(1), pos: 0, current: None, sent: false, buf, early: Vec::new() }
    }

    /// The slice of the buffer that nominal `range` stands for.
    fn map(&self, range: &Range<usize>) -> Range<usize> {
        let n = self.buf.len();
        let at = |x: usize| (x as u128 * n as u128 / self.wire as u128) as usize;
        at(range.start)..at(range.end)
    }
    /// Hands in the data of a round (possibly before this member reaches it). A second message
    /// for the same round replaces the first.
    pub fn deliver(&mut self, round: u32, data: Vec<f32>) {
        if (round as usize) < self.rounds {
            match self.early.iter_mut().find(|(r, _)| *r == round) {
                Some(slot) => slot.1 = data,
                None => self.early.push((round, data)),
            }
        }
    }
    /// Advances as far as possible, handing each message to send to `send` (as it is made, so
    /// that it goes on to the transport without a trip through memory); true when finished.
    pub fn poll(&mut self, mut send: impl FnMut(Outgoing)) -> bool {
        loop {
            let step = match self.current.take() {
                Some(step) => step,
                None => match self.steps.get(self.pos) {
                    Some(step) => step,
                    None => return true,
                },
            };
            if !self.sent {
                if let Some((to, range)) = &step.send {
                    let data = if self.buf.is_empty() { Vec::new() } else { self.buf[self.map(range)].to_vec() };
                    send(Outgoing { to: *to, round: step.round, range: range.clone(), data });
                }
                self.sent = true;
            }
            if let Some((_, range, op)) = &step.recv {
                let Some(i) = self.early.iter().position(|(r, _)| *r == step.round) else {
                    self.current = Some(step);
                    return false;
                };
                let (_, data) = self.early.swap_remove(i);
                if !self.buf.is_empty() {
                    let r = self.map(range);
                    let dst = &mut self.buf[r];
                    debug_assert_eq!(dst.len(), data.len(), "round {} range mismatch", step.round);
                    match op {
                        Op::Add => dst.iter_mut().zip(&data).for_each(|(d, s)| *d += s),
                        Op::Copy => dst.copy_from_slice(&data),
                    }
                }
            }
            self.pos += 1;
            self.sent = false;
        }
    }
    /// The reduced buffer (the element-wise sum over members) once finished.
    pub fn into_result(self) -> Vec<f32> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs all members' schedules to completion by passing messages in FIFO order.
    fn simulate(kind: CollectiveKind, p: usize, dim: usize) -> (Vec<Vec<f32>>, usize) {
        simulate_wire(kind, p, dim, dim)
    }

    /// As `simulate`, with schedules over a nominal vector of `wire` elements.
    fn simulate_wire(kind: CollectiveKind, p: usize, dim: usize, wire: usize) -> (Vec<Vec<f32>>, usize) {
        simulate_schedules(&format!("{kind:?}"), (0..p).map(|m| Schedule::new(kind, p, m, wire)).collect(), dim, wire)
    }

    /// Runs the members' `schedules` (member `m` has `schedules[m]`) to completion and checks that
    /// every member ends with the sum; returns the results and the number of messages.
    fn simulate_schedules(what: &str, schedules: Vec<Schedule>, dim: usize, wire: usize) -> (Vec<Vec<f32>>, usize) {
        let p = schedules.len();
        let kind = what;
        let inputs: Vec<Vec<f32>> =
            (0..p).map(|m| (0..dim).map(|i| ((m * 31 + i * 7) % 13) as f32).collect()).collect();
        let mut runs: Vec<Run> =
            schedules.into_iter().enumerate().map(|(m, s)| Run::new(s, inputs[m].clone(), wire)).collect();
        let mut done = vec![false; p];
        let mut messages = 0;
        let mut queue: std::collections::VecDeque<Outgoing> = Default::default();
        for _ in 0..10 * (p + 4) * (p + 4) {
            for m in 0..p {
                let mut out = Vec::new();
                done[m] = runs[m].poll(|o| out.push(o));
                queue.extend(out);
            }
            while let Some(o) = queue.pop_front() {
                messages += 1;
                runs[o.to].deliver(o.round, o.data);
            }
            if done.iter().all(|&d| d) {
                break;
            }
        }
        assert!(done.iter().all(|&d| d), "{kind} p={p} did not finish");
        let sum: Vec<f32> = (0..dim).map(|i| inputs.iter().map(|v| v[i]).sum()).collect();
        let results: Vec<Vec<f32>> = runs.into_iter().map(Run::into_result).collect();
        for r in &results {
            assert_eq!(r, &sum, "{kind} p={p}");
        }
        (results, messages)
    }

    #[test]
    fn every_collective_sums_for_every_member_count() {
        for kind in [CollectiveKind::Ring, CollectiveKind::Tree, CollectiveKind::HalvingDoubling] {
            for p in 1..=13 {
                simulate(kind, p, 37);
            }
        }
    }

    fn hierarchical(ranks: &[usize], size: usize, dim: usize, wire: usize) -> usize {
        let groups = Arc::new(Groups::of_ranks(ranks, size));
        let schedules = (0..ranks.len()).map(|m| Schedule::hierarchical(groups.clone(), m, wire)).collect();
        simulate_schedules(&format!("hierarchical {ranks:?}/{size}"), schedules, dim, wire).1
    }

    #[test]
    fn the_hierarchical_all_reduce_sums_for_every_grouping() {
        for size in 1..=6 {
            for p in 1..=14 {
                let ranks: Vec<usize> = (0..p).collect();
                hierarchical(&ranks, size, 37, 37);
                hierarchical(&ranks, size, 5, 1_000_000);
            }
        }
        // Racks thinned by crashes: unequal groups, members owning several shards.
        for ranks in [vec![0, 1, 2, 5, 6, 7, 8, 12], vec![3, 4, 8], vec![0, 4, 5, 6, 7, 9], vec![7]] {
            hierarchical(&ranks, 4, 41, 41);
        }
    }

    #[test]
    fn the_hierarchical_all_reduce_crosses_groups_2r_minus_2_times_a_member() {
        // r groups of g: g-1 steps in, 2(r-1) across, g-1 steps out for each of the g·r members.
        for (g, r) in [(4, 3), (8, 2), (1, 5), (5, 1), (3, 3)] {
            let p = g * r;
            let messages = hierarchical(&(0..p).collect::<Vec<_>>(), g, 64, 64);
            assert_eq!(messages, p * (2 * (g - 1) + 2 * (r - 1)), "g={g} r={r}");
        }
    }

    #[test]
    fn a_small_vector_can_stand_in_for_a_large_one() {
        for kind in [CollectiveKind::Ring, CollectiveKind::Tree, CollectiveKind::HalvingDoubling] {
            for p in [2, 5, 8, 13] {
                simulate_wire(kind, p, 7, 1_000_000);
            }
        }
    }

    /// The ring's schedule as it was listed before steps were computed on demand.
    fn listed_ring(p: usize, me: usize, dim: usize) -> Vec<Step> {
        if p < 2 {
            return Vec::new();
        }
        let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
        let at = |k: isize| chunk(dim, p, k.rem_euclid(p as isize) as usize);
        let i = me as isize;
        let mut steps = Vec::new();
        for s in 0..p as isize - 1 {
            steps.push(Step {
                round: s as u32,
                send: Some((next, at(i - s))),
                recv: Some((prev, at(i - s - 1), Op::Add)),
            });
        }
        for s in 0..p as isize - 1 {
            let round = (p as isize - 1 + s) as u32;
            steps.push(Step { round, send: Some((next, at(i + 1 - s))), recv: Some((prev, at(i - s), Op::Copy)) });
        }
        steps
    }

    #[test]
    fn the_ring_computed_on_demand_is_the_listed_ring() {
        for p in 1..=40 {
            for me in 0..p {
                for dim in [1, 7, 1000, 11_689_512] {
                    let s = Schedule::new(CollectiveKind::Ring, p, me, dim);
                    let on_demand: Vec<Step> = (0..s.len()).map(|k| s.get(k).unwrap()).collect();
                    assert_eq!(on_demand, listed_ring(p, me, dim), "p={p} me={me} dim={dim}");
                    assert_eq!(s.get(s.len()), None);
                    assert_eq!(s.rounds(), s.len());
                }
            }
        }
    }

    #[test]
    fn the_ring_computed_in_one_place_has_the_bits_of_the_ring_run_message_by_message() {
        use rand::Rng;
        let mut rng = dsgd_sim::rng::Streams::new(7).stream("ring test", 0);
        for (p, dim, wire) in [
            (1, 9, 9),
            (2, 7, 7),
            (3, 10, 10),
            (5, 37, 37),
            (8, 1000, 1000),
            (13, 101, 11_689_512),
            (7, 3, 1000),
            (4, 70_001, 70_001),
            (9, 30_000, 11_689_512),
        ] {
            // Values whose sums round, so that another order of additions would show.
            let inputs: Vec<Vec<f32>> = (0..p)
                .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0) * 1e3f32.powf(rng.random())).collect())
                .collect();
            let mut runs: Vec<Run> = (0..p)
                .map(|m| Run::new(Schedule::new(CollectiveKind::Ring, p, m, wire), inputs[m].clone(), wire))
                .collect();
            let mut pending: std::collections::VecDeque<Outgoing> = Default::default();
            let mut done = vec![false; p];
            while !done.iter().all(|&d| d) {
                for m in 0..p {
                    let mut out = Vec::new();
                    done[m] = runs[m].poll(|o| out.push(o));
                    pending.extend(out);
                }
                while let Some(o) = pending.pop_front() {
                    runs[o.to].deliver(o.round, o.data);
                }
            }
            let refs: Vec<&[f32]> = inputs.iter().map(|v| &v[..]).collect();
            let direct = ring::result(&refs, wire, 1);
            for threads in [2, 3, 8] {
                let parts = ring::result(&refs, wire, threads);
                assert!(
                    parts.iter().zip(&direct).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "p={p} dim={dim}: {threads} parts"
                );
            }
            for run in runs {
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&run.into_result()), bits(&direct), "p={p} dim={dim} wire={wire}");
            }
            // Not merely the rank-order sum: for p > 2 the chunks are summed from other starts.
            if p > 2 {
                let rank_order: Vec<f32> = (0..dim).map(|i| inputs.iter().fold(0.0f32, |a, v| a + v[i])).collect();
                assert_ne!(direct, rank_order, "p={p}: the test's values should tell the orders apart");
            }
        }
    }

    #[test]
    fn message_counts_match_the_algorithms() {
        assert_eq!(simulate(CollectiveKind::Ring, 8, 64).1, 2 * 7 * 8);
        assert_eq!(simulate(CollectiveKind::Tree, 8, 64).1, 2 * 7);
        assert_eq!(simulate(CollectiveKind::HalvingDoubling, 8, 64).1, 2 * 3 * 8);
        assert_eq!(simulate(CollectiveKind::HalvingDoubling, 6, 64).1, 2 * 2 * 4 + 2 * 2);
    }
}
