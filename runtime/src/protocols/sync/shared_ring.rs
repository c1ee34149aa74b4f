//! The ring all-reduce of members that share one process (the simulator).
//!
//! Run message by message, the ring makes every member copy each chunk it sends, add or copy
//! each chunk it receives, and scale its own copy of the sum: at 100 members, about four passes
//! over the model per member per iteration, all of them on the simulator's one thread. Here the
//! members still send every round's message (same sizes, same times, so the same trace), but the
//! messages carry no values: each member leaves its gradient on a board shared by the run, and
//! the first member to finish computes the average once ([`ring::result`]: the ring's additions
//! in the ring's order, so the same bits) for all of them. Only the simulator builds a board;
//! real runs send the values.
//!
//! A member finishes only after every member's first message has passed round the ring, so every
//! gradient is on the board by then. An entry is dropped once every member that left a gradient
//! has taken the average or given the iteration up (a probe or a crash).

use crate::collectives::ring;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The gradients and averages of the iterations in progress, by (view, iteration).
#[derive(Debug)]
pub struct SharedRing {
    entries: BTreeMap<(u64, u64), Entry>,
    /// Threads summing an average (see [`ring::result`]; the result does not depend on them).
    threads: usize,
}

#[derive(Debug)]
struct Entry {
    /// Each member's gradient, once it has left it.
    grads: Vec<Option<Arc<Vec<f32>>>>,
    /// Members that left a gradient and have neither taken the average nor given up.
    open: Vec<bool>,
    /// The average, once a member asked for it.
    average: Option<Arc<Vec<f32>>>,
}

impl SharedRing {
    /// An empty board whose averages are summed on `threads` threads.
    pub fn new(threads: usize) -> Self {
        SharedRing { entries: BTreeMap::new(), threads }
    }

    /// Member `me` of `p` leaves its gradient for iteration `key`.
    pub fn deposit(&mut self, key: (u64, u64), p: usize, me: usize, grad: Arc<Vec<f32>>) {
        let e = self.entries.entry(key).or_insert_with(|| Entry {
            grads: vec![None; p],
            open: vec![false; p],
            average: None,
        });
        debug_assert_eq!(e.grads.len(), p, "members of one view disagree on their number");
        e.grads[me] = Some(grad);
        e.open[me] = true;
    }

    /// The average of iteration `key` for member `me`, whose ring (over a nominal vector of
    /// `wire` elements) has finished: computed by the first member to ask.
    pub fn average(&mut self, key: (u64, u64), me: usize, wire: usize) -> Arc<Vec<f32>> {
        let e = self.entries.get_mut(&key).expect("a member whose ring finished left its gradient");
        let avg = e
            .average
            .get_or_insert_with(|| {
                let grads: Vec<&[f32]> = e
                    .grads
                    .iter()
                    .map(|g| &g.as_ref().expect("a finished ring has every member's gradient")[..])
                    .collect();
                let mut avg = ring::result(&grads, wire, self.threads);
                let scale = 1.0 / grads.len() as f32;
                avg.iter_mut().for_each(|x| *x *= scale);
                Arc::new(avg)
            })
            .clone();
        self.close(key, me);
        avg
    }

    /// Member `me` gives iteration `key` up (a probe or a crash).
    pub fn leave(&mut self, key: (u64, u64), me: usize) {
        self.close(key, me);
    }

    fn close(&mut self, key: (u64, u64), me: usize) {
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
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_average_is_the_rings_computed_once_and_the_board_empties_as_members_finish() {
        let grads: Vec<Arc<Vec<f32>>> =
            (0..4).map(|m| Arc::new((0..10).map(|i| (m * 10 + i) as f32 * 0.37 + 0.1).collect())).collect();
        let mut board = SharedRing::new(2);
        for (m, g) in grads.iter().enumerate() {
            board.deposit((5, 9), 4, m, g.clone());
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
        board.deposit((6, 0), 3, 0, grads[0].clone());
        board.deposit((6, 0), 3, 2, grads[2].clone());
        board.leave((6, 0), 2);
        board.leave((6, 0), 0);
        assert_eq!(board.len(), 0);
        assert_eq!(Arc::strong_count(&grads[0]), 1, "the board holds no gradient of a finished iteration");
    }
}
