//! In-process sharing: an executor's service that lets the ranks of one process hold identical
//! values once, the way SMPI's shared malloc sits in the runtime, invisible to the application.
//!
//! Synchronous SGD keeps every member's replica bit-identical, and in the simulator every member
//! runs in one process. There the members' replicas can be one vector, an update computed once
//! for all of them, an analytic average summed once, and a ring all-reduce's values left on a
//! board instead of copied into every message. Whether that is possible is the executor's
//! business, so a protocol asks its [`Context`](crate::protocol::Context) for a [`Sharing`] and
//! gets the simulator's [`InProcess`] or, on a real cluster (one rank a process), [`Alone`],
//! which shares nothing and computes every result where it is asked for. Either way a rank gets
//! the same bits: sharing is found, never assumed (see each part).
//!
//! The parts: [`replicas`] (identical vectors and updates), [`sums`] (averages of the same
//! gradients in the same order), [`ring_board`] (a ring all-reduce's average, computed once with
//! the ring's bits, on a background thread when it is worth one).

pub mod replicas;
pub mod ring_board;
pub mod sums;

use crate::optimizer::Sgd;
use replicas::SharedReplicas;
use ring_board::SharedRing;
use std::sync::Arc;
use sums::AnalyticSums;

/// A ring iteration on the board: (membership view, iteration).
pub type RingKey = (u64, u64);

/// Where a member's gradient sits on a ring board.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seat {
    /// The iteration.
    pub key: RingKey,
    /// Members of the ring.
    pub of: usize,
    /// This member's index in the ring.
    pub me: usize,
    /// This member's rank.
    pub rank: usize,
}

/// What an executor lets the ranks of one process share. Every method gives the bits a rank
/// computing alone would get.
pub trait Sharing {
    /// A vector with the bits of `v` that another rank already holds, or `v`.
    fn share(&mut self, v: Arc<Vec<f32>>) -> Arc<Vec<f32>>;
    /// Applies the average gradient `avg` to `params` with `opt` (the update another rank
    /// computed from the very same parameters, velocity, step count and average, or here).
    fn step(&mut self, params: &mut Arc<Vec<f32>>, opt: &mut Sgd, avg: &Arc<Vec<f32>>);
    /// The mean of `grads`, summed in the order given.
    fn average(&mut self, grads: Vec<Arc<Vec<f32>>>) -> Arc<Vec<f32>>;
    /// A member offers its gradient for its `seat` in a ring that runs over a nominal vector of
    /// `wire` elements. True: the board holds it, so the ring's messages need carry no values and
    /// [`Sharing::ring_average`] gives the result; false: no board here, the values travel in
    /// the messages.
    fn ring_deposit(&mut self, seat: Seat, grad: Arc<Vec<f32>>, wire: usize) -> bool;
    /// The average of ring iteration `key` for member `me`, whose ring has finished (after a
    /// deposit that returned true).
    fn ring_average(&mut self, key: RingKey, me: usize, wire: usize) -> Arc<Vec<f32>>;
    /// Member `me` gives ring iteration `key` up (a probe; a crashed rank's seats are given up
    /// by its executor).
    fn ring_leave(&mut self, key: RingKey, me: usize);
    /// Buffers the ranks of this process hand one another for push-sum's messages (a buffer
    /// freed by the receiver that added a message serves as the next message of any sender), or
    /// none where a rank is alone. Only allocations: every element of a buffer taken from here is
    /// written before it is read, so no result depends on which buffer a rank gets.
    fn buffers(&mut self) -> Option<&mut Buffers>;
}

/// Push-sum's message buffers, kept for the next messages (see [`Sharing::buffers`]). A rank that
/// takes one after each gradient and frees one for each message it adds gets a fresh allocation
/// whenever, by chance, more messages left it than came in; the ranks of a process pooled
/// together balance out. A fresh buffer costs its zeroing and, often, the system's page faults:
/// a tenth of a 100-node push-sum run's time on the simulator's thread when each node kept its
/// own.
#[derive(Debug, Default)]
pub struct Buffers(Vec<Vec<i64>>);

impl Buffers {
    /// Bytes kept at most (and at least two buffers, however large).
    pub const KEEP_BYTES: usize = 64 << 20;

    /// A kept buffer, if there is one.
    pub fn take(&mut self) -> Option<Vec<i64>> {
        self.0.pop()
    }

    /// Keeps `buf` for a later message, unless enough are kept already.
    pub fn give(&mut self, buf: Vec<i64>) {
        let room = (Self::KEEP_BYTES / (8 * buf.capacity().max(1))).max(2);
        if self.0.len() < room {
            self.0.push(buf);
        }
    }

    /// Buffers kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No buffer kept.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The sum of `vs` in the given order (empty vectors stay empty: timing-only workloads); the
/// first is summed into in place when nothing else holds it.
pub fn sum_in_order(mut vs: impl Iterator<Item = Arc<Vec<f32>>>) -> Vec<f32> {
    let mut acc = vs.next().map(Arc::unwrap_or_clone).unwrap_or_default();
    let rest: Vec<Arc<Vec<f32>>> = vs.collect();
    crate::rows::add_rows(&mut acc, &rest.iter().map(|v| &v[..]).collect::<Vec<_>>());
    acc
}

/// The average of `contributors` vectors whose sum is `sum`.
pub fn scaled(mut sum: Vec<f32>, contributors: usize) -> Vec<f32> {
    let scale = 1.0 / contributors as f32;
    sum.iter_mut().for_each(|x| *x *= scale);
    sum
}

/// Sharing among the ranks of one process (the simulator's executor).
#[derive(Debug)]
pub struct InProcess {
    replicas: SharedReplicas,
    sums: AnalyticSums,
    ring: SharedRing,
    buffers: Buffers,
}

impl InProcess {
    /// Sharing whose ring averages are summed on `threads` threads.
    pub fn new(threads: usize) -> Self {
        InProcess {
            replicas: SharedReplicas::default(),
            sums: AnalyticSums::default(),
            ring: SharedRing::new(threads),
            buffers: Buffers::default(),
        }
    }

    /// Rank `rank` crashed: its seats on the ring board are given up (it cannot do it itself).
    pub fn crashed(&mut self, rank: usize) {
        self.ring.crashed(rank);
    }
}

impl Sharing for InProcess {
    fn share(&mut self, v: Arc<Vec<f32>>) -> Arc<Vec<f32>> {
        self.replicas.share(v)
    }
    fn step(&mut self, params: &mut Arc<Vec<f32>>, opt: &mut Sgd, avg: &Arc<Vec<f32>>) {
        self.replicas.step(params, opt, avg)
    }
    fn average(&mut self, grads: Vec<Arc<Vec<f32>>>) -> Arc<Vec<f32>> {
        self.sums.average(grads)
    }
    fn ring_deposit(&mut self, seat: Seat, grad: Arc<Vec<f32>>, wire: usize) -> bool {
        self.ring.deposit(seat, grad, wire);
        true
    }
    fn ring_average(&mut self, key: RingKey, me: usize, wire: usize) -> Arc<Vec<f32>> {
        self.ring.average(key, me, wire)
    }
    fn ring_leave(&mut self, key: RingKey, me: usize) {
        self.ring.leave(key, me)
    }
    fn buffers(&mut self) -> Option<&mut Buffers> {
        Some(&mut self.buffers)
    }
}

/// No sharing: one rank a process (a real cluster, a protocol's unit test). Every result is
/// computed where it is asked for; a ring's values travel in its messages.
#[derive(Clone, Copy, Debug, Default)]
pub struct Alone;

impl Sharing for Alone {
    fn share(&mut self, v: Arc<Vec<f32>>) -> Arc<Vec<f32>> {
        v
    }
    fn step(&mut self, params: &mut Arc<Vec<f32>>, opt: &mut Sgd, avg: &Arc<Vec<f32>>) {
        opt.apply(Arc::make_mut(params).as_mut_slice(), avg);
    }
    fn average(&mut self, grads: Vec<Arc<Vec<f32>>>) -> Arc<Vec<f32>> {
        let p = grads.len();
        Arc::new(scaled(sum_in_order(grads.into_iter()), p))
    }
    fn ring_deposit(&mut self, _seat: Seat, _grad: Arc<Vec<f32>>, _wire: usize) -> bool {
        false
    }
    fn ring_average(&mut self, key: RingKey, _me: usize, _wire: usize) -> Arc<Vec<f32>> {
        unreachable!("no ring board in a process of one rank: iteration {key:?} was never deposited")
    }
    fn ring_leave(&mut self, _key: RingKey, _me: usize) {}
    fn buffers(&mut self) -> Option<&mut Buffers> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimizer::OptimizerConfig;

    #[test]
    fn the_pool_keeps_buffers_up_to_its_bytes_and_at_least_two() {
        let mut small = Buffers::default();
        for _ in 0..200 {
            small.give(Vec::with_capacity(1 << 17)); // 1 MiB each: 64 kept
        }
        assert_eq!(small.len(), 64);
        assert_eq!(small.take().map(|b| b.capacity()), Some(1 << 17));
        let mut large = Buffers::default();
        for _ in 0..5 {
            large.give(Vec::with_capacity(Buffers::KEEP_BYTES / 8)); // 64 MiB each
        }
        assert_eq!(large.len(), 2);
        assert!(InProcess::new(1).buffers().is_some() && Alone.buffers().is_none(), "only ranks of one process pool");
    }

    #[test]
    fn in_process_and_alone_give_the_same_bits() {
        let grads: Vec<Arc<Vec<f32>>> = (0..3).map(|m| Arc::new(vec![0.3 * m as f32 + 0.1, -1.7, 2.5e-3])).collect();
        let (mut shared, mut alone) = (InProcess::new(1), Alone);
        assert_eq!(shared.average(grads.clone()), alone.average(grads.clone()));
        let cfg = OptimizerConfig { lr: 0.1, momentum: 0.9, ..Default::default() };
        let (mut p1, mut o1) = (Arc::new(vec![1.0f32, 2.0, 3.0]), Sgd::new(cfg, 3, 3));
        let (mut p2, mut o2) = (p1.clone(), o1.clone());
        let avg = alone.average(grads);
        shared.step(&mut p1, &mut o1, &avg);
        alone.step(&mut p2, &mut o2, &avg);
        assert_eq!(p1, p2);
        assert_eq!(o1.velocity(), o2.velocity());
        let seat = Seat { key: (0, 0), of: 1, me: 0, rank: 0 };
        assert!(!alone.ring_deposit(seat, avg.clone(), 3), "no board alone");
        assert!(shared.ring_deposit(seat, avg.clone(), 3));
        assert_eq!(*shared.ring_average((0, 0), 0, 3), *avg, "one member: its own gradient");
    }
}
