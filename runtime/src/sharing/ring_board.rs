//! The ring all-reduce of members that share one process (the simulator).
//!
//! Run message by message, the ring makes every member copy each chunk it sends, add or copy
//! each chunk it receives, and scale its own copy of the sum: at 100 members, about four passes
//! over the model per member per iteration, all of them on the simulator's one thread. Here the
//! members still send every round's message (same sizes, same times, so the same trace), but the
//! messages carry no values: each member leaves its gradient on a board shared by the run, and
//! the first member to finish computes the average once ([`ring::result`]: the ring's additions
//! in the ring's order, so the same bits) for all of them. Only the simulator's executor keeps a
//! board ([`super::InProcess`]); real runs send the values.
//!
//! The sum need not wait for the ring: once the last member has left its gradient, the average is
//! a pure function of what lies on the board, so with more than one thread it is summed at once on
//! a background thread while the simulator's thread plays the ring's messages, and the first
//! member to finish takes it (waiting if it is not done). Without threads it is summed by that
//! member. Either way it is the same bits.
//!
//! A member finishes only after every member's first message has passed round the ring, so every
//! gradient is on the board by then. An entry is dropped once every member that left a gradient
//! has taken the average or given the iteration up (a probe), or once a later iteration of the
//! same view has begun. A crash (which the executor reports, [`SharedRing::crashed`], since a
//! crashed rank does nothing) closes the rank's seats but drops no entry by itself: a member that
//! left its gradient and sent its first message may crash before the others have left theirs,
//! and they still finish with its values (as they would with the values its message carried).

use super::{RingKey, Seat};
use crate::collectives::ring;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The gradients and averages of the iterations in progress, by (view, iteration).
#[derive(Debug)]
pub struct SharedRing {
    entries: BTreeMap<RingKey, Entry>,
    /// Threads summing an average (see [`ring::result`]; the result does not depend on them).
    threads: usize,
    /// Additions from which an average is summed in the background ([`BACKGROUND_SUM`]).
    background_from: usize,
}

#[derive(Debug)]
struct Entry {
    /// Each member's gradient, once it has left it.
    grads: Vec<Option<Arc<Vec<f32>>>>,
    /// Members that left a gradient and have neither taken the average nor given up.
    open: Vec<bool>,
    /// The rank in each member's seat, once it has left a gradient.
    ranks: Vec<usize>,
    /// The average, once a member asked for it.
    average: Option<Arc<Vec<f32>>>,
    /// The average being summed in the background since the last gradient came in.
    summing: Option<JoinHandle<Vec<f32>>>,
    /// Members whose gradient is not on the board yet.
    missing: usize,
}

/// Additions (gradient length × members) from which an average is summed in the background.
const BACKGROUND_SUM: usize = 1 << 20;

/// The average of `grads` (in member order) over a ring of nominal `wire` elements.
fn average_of(grads: &[Arc<Vec<f32>>], wire: usize, threads: usize) -> Vec<f32> {
    let refs: Vec<&[f32]> = grads.iter().map(|g| &g[..]).collect();
    let mut avg = ring::result(&refs, wire, threads);
    let scale = 1.0 / grads.len() as f32;
    avg.iter_mut().for_each(|x| *x *= scale);
    avg
}

impl SharedRing {
    /// An empty board whose averages are summed on `threads` threads.
    pub fn new(threads: usize) -> Self {
        SharedRing { entries: BTreeMap::new(), threads, background_from: BACKGROUND_SUM }
    }

    /// A member leaves its gradient in its `seat`, whose ring runs over a nominal vector of `wire`
    /// elements. The last gradient in starts the sum in the background (with more than one
    /// thread).
    pub fn deposit(&mut self, seat: Seat, grad: Arc<Vec<f32>>, wire: usize) {
        let Seat { key, of: p, me, rank } = seat;
        // Earlier iterations of this view that nobody holds open are over (the others gave them
        // up, or only crashed members were left in them).
        self.entries.retain(|k, e| !(k.0 == key.0 && k.1 < key.1 && !e.open.iter().any(|&o| o)));
        let e = self.entries.entry(key).or_insert_with(|| Entry {
            grads: vec![None; p],
            open: vec![false; p],
            ranks: vec![usize::MAX; p],
            average: None,
            summing: None,
            missing: p,
        });
        debug_assert_eq!(e.grads.len(), p, "members of one view disagree on their number");
        let len = grad.len();
        if e.grads[me].replace(grad).is_none() {
            e.missing -= 1;
        }
        e.open[me] = true;
        e.ranks[me] = rank;
        // Worth a thread when the sum is about a millisecond of additions (a thread costs tens of
        // microseconds to start; timing-only runs have no values at all).
        let worth = len.saturating_mul(p) >= self.background_from;
        if worth && self.threads > 1 && e.missing == 0 && e.average.is_none() && e.summing.is_none() {
            let grads: Vec<Arc<Vec<f32>>> = e.grads.iter().flatten().cloned().collect();
            let threads = self.threads;
            e.summing = Some(std::thread::spawn(move || average_of(&grads, wire, threads)));
        }
    }

    /// The average of iteration `key` for member `me`, whose ring (over a nominal vector of
    /// `wire` elements) has finished: taken from the background sum, or computed by the first
    /// member to ask.
    pub fn average(&mut self, key: RingKey, me: usize, wire: usize) -> Arc<Vec<f32>> {
        let e = self.entries.get_mut(&key).expect("a member whose ring finished left its gradient");
        if e.average.is_none() {
            let avg = match e.summing.take() {
                Some(sum) => sum.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => {
                    let grads: Vec<Arc<Vec<f32>>> = e
                        .grads
                        .iter()
                        .map(|g| g.clone().expect("a finished ring has every member's gradient"))
                        .collect();
                    average_of(&grads, wire, self.threads)
                }
            };
            e.average = Some(Arc::new(avg));
        }
        let avg = e.average.clone().expect("set above");
        self.close(key, me);
        avg
    }

    /// Member `me` gives iteration `key` up (a probe).
    pub fn leave(&mut self, key: RingKey, me: usize) {
        self.close(key, me);
    }

    /// Rank `rank` crashed: every seat it holds is given up.
    pub fn crashed(&mut self, rank: usize) {
        let seats: Vec<(RingKey, usize)> = self
            .entries
            .iter()
            .flat_map(|(&k, e)| (0..e.open.len()).filter(|&m| e.open[m] && e.ranks[m] == rank).map(move |m| (k, m)))
            .collect();
        for (key, me) in seats {
            if let Some(open) = self.entries.get_mut(&key).and_then(|e| e.open.get_mut(me)) {
                *open = false; // the entry stays: see the module's comment
            }
        }
    }

    fn close(&mut self, key: RingKey, me: usize) {
        if let Some(e) = self.entries.get_mut(&key) {
            if let Some(open) = e.open.get_mut(me) {
                *open = false;
            }
            if !e.open.iter().any(|&o| o) {
                self.entries.remove(&key);
            }
        }
    }

    /// Iterations held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_is_the_rings_computed_once_and_the_board_empties_as_members_finish() {
        // One thread, or a sum too small for a thread: summed by the first member to finish;
        // otherwise in the background from the last deposit. The same bits either way.
        for (threads, background_from) in [(1, 0), (2, BACKGROUND_SUM), (2, 0)] {
            board_round(threads, background_from);
        }
    }

    fn board_round(threads: usize, background_from: usize) {
        let grads: Vec<Arc<Vec<f32>>> =
            (0..4).map(|m| Arc::new((0..10).map(|i| (m * 10 + i) as f32 * 0.37 + 0.1).collect())).collect();
        let mut board = SharedRing::new(threads);
        board.background_from = background_from;
        let seat = |key, of, me| Seat { key, of, me, rank: 10 + me };
        for (m, g) in grads.iter().enumerate() {
            board.deposit(seat((5, 9), 4, m), g.clone(), 10);
        }
        let refs: Vec<&[f32]> = grads.iter().map(|g| &g[..]).collect();
        let expect: Vec<f32> = ring::result(&refs, 10, 1).iter().map(|x| x * 0.25).collect();
        let first = board.average((5, 9), 2, 10);
        assert_eq!(*first, expect);
        // A member that gave up still lets the others finish; the last one empties the board.
        board.leave((5, 9), 0);
        assert!(Arc::ptr_eq(&board.average((5, 9), 1, 10), &first), "computed once");
        board.leave((5, 9), 2); // already closed: no change
        assert_eq!(board.len(), 1);
        assert!(Arc::ptr_eq(&board.average((5, 9), 3, 10), &first), "computed once");
        assert_eq!(board.len(), 0);
        // An iteration every member gave up (a probe) leaves nothing behind, whether or not all
        // gradients came in.
        board.deposit(seat((6, 0), 3, 0), grads[0].clone(), 10);
        board.deposit(seat((6, 0), 3, 2), grads[2].clone(), 10);
        board.leave((6, 0), 2);
        board.leave((6, 0), 0);
        assert_eq!(board.len(), 0);
        assert_eq!(Arc::strong_count(&grads[0]), 1, "the board holds no gradient of a finished iteration");
        // An iteration given up after its last gradient came in (its sum may be running).
        for (m, g) in grads.iter().enumerate() {
            board.deposit(seat((7, 0), 4, m), g.clone(), 10);
        }
        (0..4).for_each(|m| board.leave((7, 0), m));
        assert_eq!(board.len(), 0);
        // Ranks that crashed (and so never leave) give their seats up through the executor: two
        // iterations open, one crashed rank in each, then the rest finish.
        for key in [(8, 0), (8, 1)] {
            for (m, g) in grads.iter().enumerate() {
                board.deposit(seat(key, 4, m), g.clone(), 10);
            }
        }
        board.crashed(11); // member 1 of both
        for m in [0, 2, 3] {
            board.average((8, 0), m, 10);
            board.average((8, 1), m, 10);
        }
        assert_eq!(board.len(), 0, "a crashed rank's seats do not keep an iteration open");
        // A member that left its gradient and crashed before the others left theirs (found by
        // `dsgd torture`: its first message had arrived, so the others finish with its values).
        board.deposit(seat((9, 0), 4, 3), grads[3].clone(), 10);
        board.crashed(13);
        for (m, g) in grads.iter().enumerate().take(3) {
            board.deposit(seat((9, 0), 4, m), g.clone(), 10);
        }
        for m in 0..3 {
            assert_eq!(*board.average((9, 0), m, 10), expect, "the crashed member's gradient counts");
        }
        assert_eq!(board.len(), 0);
        // An iteration only a crashed member left a gradient in is dropped when the view's next
        // iteration begins.
        board.deposit(seat((9, 1), 4, 3), grads[3].clone(), 10);
        board.crashed(13);
        board.deposit(seat((9, 2), 4, 0), grads[0].clone(), 10);
        assert_eq!(board.len(), 1);
    }
}
