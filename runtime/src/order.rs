//! The order in which each rank handled its events, recorded in a real run and replayed by the
//! simulator, so that algorithms whose arrival order is the machine's (a parameter server's
//! workers, EASGD's, gossip) can be checked to end with the same bits in both executors.
//!
//! A handler call is named the same way in both executors, by counts kept at the rank that
//! handles it ([`Namer`]): the `k`-th message from a given sender (MPI keeps each pair's
//! messages in order, and so do the simulator's links), the `k`-th gradient handed back (a
//! rank's gradients are computed one after another), the `k`-th firing of a timer tag. The
//! simulator, given a [`RecordedOrder`], hands each rank its events in the recorded order: an
//! event that comes early is held until the ones before it have been handled ([`Replay`]), and
//! a rank whose record is exhausted handles nothing more. Since every protocol is a
//! deterministic function of what it handled (its random numbers come from its rank's named
//! streams, its gradients from the job's seed and the parameters at the start), each rank then
//! ends in the state the real run left it in, bit for bit.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// One handler call of a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Handled {
    /// The `k`-th message (from 0) this rank handled from rank `from`.
    Message {
        /// The sender.
        from: usize,
        /// Its index among the sender's messages to this rank.
        k: u64,
    },
    /// The `k`-th gradient handed back to this rank.
    Gradient {
        /// Its index.
        k: u64,
    },
    /// The `k`-th firing of a timer with this tag at this rank.
    Timer {
        /// The protocol's tag.
        tag: u64,
        /// Its index among the firings of that tag.
        k: u64,
    },
}

/// Names each handler call of one rank as it happens.
#[derive(Clone, Debug, Default)]
pub struct Namer {
    messages: BTreeMap<usize, u64>,
    gradients: u64,
    timers: BTreeMap<u64, u64>,
}

fn next(count: &mut u64) -> u64 {
    *count += 1;
    *count - 1
}

impl Namer {
    /// The next message from `from`.
    pub fn message(&mut self, from: usize) -> Handled {
        Handled::Message { from, k: next(self.messages.entry(from).or_default()) }
    }
    /// The next gradient.
    pub fn gradient(&mut self) -> Handled {
        Handled::Gradient { k: next(&mut self.gradients) }
    }
    /// The next firing of `tag`.
    pub fn timer(&mut self, tag: u64) -> Handled {
        Handled::Timer { tag, k: next(self.timers.entry(tag).or_default()) }
    }
}

/// Every rank's handler calls in the order it made them (`order.json` in a real run's folder).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedOrder {
    /// Per rank, its handler calls in order.
    pub ranks: Vec<Vec<Handled>>,
}

/// Held events at most, over all ranks, before a replay gives up: a record that does not fit
/// the run (another spec or seed) would otherwise hold events until memory runs out.
pub const MAX_HELD: usize = 1 << 20;

/// The simulator's side: which event each rank handles next, and the events held until then.
#[derive(Debug)]
pub struct Replay<E> {
    expected: Vec<VecDeque<Handled>>,
    /// The same, as sets (to tell an early event from one after the record).
    remaining: Vec<BTreeSet<Handled>>,
    /// Each rank's record's length.
    lens: Vec<usize>,
    namers: Vec<Namer>,
    held: Vec<BTreeMap<Handled, E>>,
    held_total: usize,
    /// Events that came after their rank's record ended (never handled).
    pub dropped: u64,
}

/// Why a recorded order cannot be replayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rank {rank} waits for {waits_for:?} (its handler call {index} in the record), {why}")]
pub struct Stuck {
    /// The rank.
    pub rank: usize,
    /// What it waits for.
    pub waits_for: Handled,
    /// The call's position in the rank's record.
    pub index: usize,
    /// Why that is final.
    pub why: &'static str,
}

impl<E> Replay<E> {
    /// A replay of `order` on `ranks` ranks (refused if the record has another number of ranks).
    pub fn new(order: &RecordedOrder, ranks: usize) -> Result<Self, String> {
        if order.ranks.len() != ranks {
            return Err(format!("the recorded order has {} ranks, the run {ranks}", order.ranks.len()));
        }
        Ok(Replay {
            expected: order.ranks.iter().map(|r| r.iter().copied().collect()).collect(),
            remaining: order.ranks.iter().map(|r| r.iter().copied().collect()).collect(),
            lens: order.ranks.iter().map(Vec::len).collect(),
            namers: vec![Namer::default(); ranks],
            held: (0..ranks).map(|_| BTreeMap::new()).collect(),
            held_total: 0,
            dropped: 0,
        })
    }

    /// An event `name`d by `name_of` arrived for `rank`: the events `rank` may handle now, in
    /// order (this one if it is next, then any held ones that follow it), or none (it is held,
    /// or dropped after the rank's record).
    pub fn arrived(&mut self, rank: usize, event: E, name_of: impl FnOnce(&mut Namer) -> Handled) -> Vec<E> {
        let name = name_of(&mut self.namers[rank]);
        let expected = &mut self.expected[rank];
        if expected.front() != Some(&name) {
            if self.remaining[rank].contains(&name) {
                self.held[rank].insert(name, event);
                self.held_total += 1;
            } else {
                self.dropped += 1;
            }
            return Vec::new();
        }
        expected.pop_front();
        self.remaining[rank].remove(&name);
        let mut ready = vec![event];
        while let Some(e) = expected.front().and_then(|n| self.held[rank].remove(n)) {
            let n = expected.pop_front().expect("the front was just read");
            self.remaining[rank].remove(&n);
            self.held_total -= 1;
            ready.push(e);
        }
        ready
    }

    /// True once every rank has handled its whole record.
    pub fn done(&self) -> bool {
        self.expected.iter().all(VecDeque::is_empty)
    }

    /// The first rank still waiting, if the replay can no longer go on: nothing else will happen
    /// (`quiet`), or too many events are held.
    pub fn stuck(&self, quiet: bool) -> Option<Stuck> {
        let why = if quiet {
            "and nothing else will happen in the simulation: the record is not of this spec and seed"
        } else if self.held_total > MAX_HELD {
            "while over a million events are held: the record is not of this spec and seed"
        } else {
            return None;
        };
        let (rank, queue) = self.expected.iter().enumerate().find(|(_, q)| !q.is_empty())?;
        Some(Stuck { rank, waits_for: queue[0], index: self.lens[rank] - queue.len(), why })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(from: usize, k: u64) -> Handled {
        Handled::Message { from, k }
    }

    #[test]
    fn events_are_handed_over_in_the_recorded_order() {
        let order = RecordedOrder { ranks: vec![vec![m(1, 0), Handled::Gradient { k: 0 }, m(1, 1), m(2, 0)]] };
        let mut r: Replay<&str> = Replay::new(&order, 1).unwrap();
        // The gradient comes first: held until the message before it.
        assert!(r.arrived(0, "grad", |n| n.gradient()).is_empty());
        assert!(r.arrived(0, "from 2", |n| n.message(2)).is_empty());
        assert_eq!(r.arrived(0, "from 1 #0", |n| n.message(1)), ["from 1 #0", "grad"]);
        assert_eq!(r.arrived(0, "from 1 #1", |n| n.message(1)), ["from 1 #1", "from 2"]);
        assert!(r.done());
        // After the record, nothing more is handled.
        assert!(r.arrived(0, "late", |n| n.timer(7)).is_empty());
        assert_eq!(r.dropped, 1);
    }

    #[test]
    fn a_record_that_does_not_fit_says_where_it_stuck() {
        let order = RecordedOrder { ranks: vec![vec![m(1, 0)], vec![Handled::Timer { tag: 3, k: 0 }]] };
        let mut r: Replay<u8> = Replay::new(&order, 2).unwrap();
        assert_eq!(r.arrived(0, 1, |n| n.message(1)), [1]);
        assert_eq!(r.stuck(false), None);
        let s = r.stuck(true).unwrap();
        assert_eq!((s.rank, s.waits_for, s.index), (1, Handled::Timer { tag: 3, k: 0 }, 0));
        assert!(s.to_string().contains("rank 1 waits for Timer"), "{s}");
        assert!(Replay::<u8>::new(&order, 3).unwrap_err().contains("2 ranks"));
    }

    #[test]
    fn the_order_round_trips_through_json() {
        let order =
            RecordedOrder { ranks: vec![vec![m(3, 9), Handled::Gradient { k: 2 }, Handled::Timer { tag: 5, k: 1 }]] };
        let text = serde_json::to_string(&order).unwrap();
        assert_eq!(serde_json::from_str::<RecordedOrder>(&text).unwrap(), order);
    }
}
