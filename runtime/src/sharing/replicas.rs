//! Identical replicas held once.
//!
//! Synchronous SGD keeps every member's replica bit-identical: the same initial parameters, the
//! same average applied by the same optimizer, a donor's state after a membership change. In
//! one process (the simulator's executor, [`super::InProcess`]) the members' replicas can
//! therefore be one shared vector, and each iteration's update computed once instead of once a
//! member: at 100 members that is 99 optimizer passes over the model, and 100 copies of it into
//! the gradient jobs, saved an iteration, all on the simulator's one thread.
//!
//! Sharing is found, never assumed: [`SharedReplicas::share`] hands out a vector already held
//! only when its bits are equal, and [`SharedReplicas::step`] reuses an update only for the very
//! same parameters, velocity and average (by identity: held weakly, so no freed vector's address
//! can be taken for them while they are remembered) at the same step count. Whatever is not found
//! is computed as before, so a member whose replica differs (it never does in sync SGD, but a
//! cache must not rely on that) gets its own result.

use crate::optimizer::Sgd;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};

/// Vectors and updates shared by the members of one run.
#[derive(Debug, Default)]
pub struct SharedReplicas {
    /// Recently shared vectors (initial parameters and velocities, donors' states).
    known: VecDeque<Weak<Vec<f32>>>,
    /// Recently computed updates.
    steps: VecDeque<Step>,
}

/// An update: what it was computed from, and the parameters and velocity it gave.
#[derive(Debug)]
struct Step {
    params: Weak<Vec<f32>>,
    /// The velocity before (none for an optimizer without momentum).
    velocity: Option<Weak<Vec<f32>>>,
    steps: u64,
    avg: Weak<Vec<f32>>,
    out: (Arc<Vec<f32>>, Arc<Vec<f32>>),
}

impl SharedReplicas {
    /// Vectors remembered for [`Self::share`].
    const KNOWN: usize = 4;
    /// Updates remembered: one an iteration, and a few more for groups that a partition split.
    const STEPS: usize = 4;

    /// A vector held by another member with the same bits as `v`, or `v` (then remembered).
    pub fn share(&mut self, v: Arc<Vec<f32>>) -> Arc<Vec<f32>> {
        self.known.retain(|w| w.strong_count() > 0);
        let same =
            |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        if let Some(held) = self.known.iter().filter_map(Weak::upgrade).find(|h| same(h, &v)) {
            return held;
        }
        if self.known.len() == Self::KNOWN {
            self.known.pop_front();
        }
        self.known.push_back(Arc::downgrade(&v));
        v
    }

    /// Applies `avg` to `params` with `opt`: the update another member computed from the very
    /// same parameters, velocity, step count and average, or computed here (and remembered when
    /// another member holds the same parameters).
    pub fn step(&mut self, params: &mut Arc<Vec<f32>>, opt: &mut Sgd, avg: &Arc<Vec<f32>>) {
        let velocity = opt.shared_velocity();
        let same = |w: &Weak<Vec<f32>>, a: &Arc<Vec<f32>>| std::ptr::eq(w.as_ptr(), Arc::as_ptr(a));
        let found = self.steps.iter().find(|s| {
            same(&s.params, params)
                && s.steps == opt.steps()
                && same(&s.avg, avg)
                && match &s.velocity {
                    Some(v) => same(v, velocity),
                    None => velocity.is_empty(),
                }
        });
        if let Some(s) = found {
            *params = s.out.0.clone();
            opt.adopt_shared(s.out.1.clone(), opt.steps() + 1);
            return;
        }
        let shared = Arc::strong_count(params) > 1;
        let key = (
            Arc::downgrade(params),
            (!velocity.is_empty()).then(|| Arc::downgrade(velocity)),
            opt.steps(),
            Arc::downgrade(avg),
        );
        opt.apply(Arc::make_mut(params).as_mut_slice(), avg);
        if shared {
            if self.steps.len() == Self::STEPS {
                self.steps.pop_front();
            }
            let out = (params.clone(), opt.shared_velocity().clone());
            self.steps.push_back(Step { params: key.0, velocity: key.1, steps: key.2, avg: key.3, out });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimizer::OptimizerConfig;

    #[test]
    fn equal_vectors_are_shared_and_an_update_is_computed_once_for_identical_replicas() {
        let cfg = OptimizerConfig { lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 1e-4, ..Default::default() };
        let mut board = SharedReplicas::default();
        // Three members start from equal (separately built) parameters and velocities.
        let init = || Arc::new(vec![0.5f32, -1.25, 3.0]);
        let mut members: Vec<(Arc<Vec<f32>>, Sgd)> = (0..3)
            .map(|_| {
                let mut opt = Sgd::new(cfg, 3, 3);
                let v = board.share(opt.shared_velocity().clone());
                opt.adopt_shared(v, 0);
                (board.share(init()), opt)
            })
            .collect();
        assert!(Arc::ptr_eq(&members[0].0, &members[2].0), "equal bits are shared");
        // Unequal bits are not: -0.0 and 0.0 compare equal but are other bits.
        assert!(!Arc::ptr_eq(&board.share(Arc::new(vec![0.0f32])), &board.share(Arc::new(vec![-0.0f32]))));

        // The reference: one replica updated on its own, unshared.
        let mut alone = (init(), Sgd::new(cfg, 3, 3));
        for it in 0..3 {
            let avg = Arc::new(vec![0.1 * it as f32 + 0.3, -0.7, 1e-3]);
            alone.1.apply(Arc::make_mut(&mut alone.0).as_mut_slice(), &avg);
            for (p, o) in members.iter_mut() {
                board.step(p, o, &avg);
            }
            assert!(Arc::ptr_eq(&members[0].0, &members[1].0) && Arc::ptr_eq(&members[1].0, &members[2].0));
            let v = |o: &Sgd| o.shared_velocity().clone();
            assert!(Arc::ptr_eq(&v(&members[0].1), &v(&members[2].1)), "one velocity");
            for (p, o) in &members {
                assert_eq!(**p, *alone.0, "iteration {it}");
                assert_eq!(o.velocity(), alone.1.velocity());
                assert_eq!(o.steps(), alone.1.steps());
            }
        }
        // A member whose replica differs gets its own update, not the shared one.
        let avg = Arc::new(vec![1.0f32, 1.0, 1.0]);
        let mut odd = (Arc::new(vec![9.0f32, 9.0, 9.0]), members[0].1.clone());
        let mut expect = odd.clone();
        expect.1.apply(Arc::make_mut(&mut expect.0).as_mut_slice(), &avg);
        let (p0, o0) = &mut members[0];
        board.step(p0, o0, &avg);
        board.step(&mut odd.0, &mut odd.1, &avg);
        assert_eq!(*odd.0, *expect.0);
        assert!(!Arc::ptr_eq(&odd.0, &members[0].0));
    }
}
