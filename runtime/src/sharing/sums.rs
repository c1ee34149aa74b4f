//! Averages of the very same gradients, summed once.
//!
//! In synchronous SGD's analytic mode every member of an iteration sums the same gradients (the
//! very same shared vectors, moved to every member without a copy) in the same rank order, so
//! the first member computes the average and the others share it: p sums of p gradients an
//! iteration become one. Only a cache: an average is found by the identity of the vectors it was
//! computed from (held weakly, so no gradient is kept alive by it, and no other vector can take a
//! freed one's address while it is held), and an evicted one is computed again with the same
//! bits.

use super::{scaled, sum_in_order};
use std::collections::VecDeque;
use std::sync::{Arc, Weak};

/// Recently computed averages.
#[derive(Debug, Default)]
pub struct AnalyticSums {
    entries: VecDeque<SumEntry>,
}

/// An average and the vectors it was computed from, in order.
type SumEntry = (Vec<Weak<Vec<f32>>>, Arc<Vec<f32>>);

impl AnalyticSums {
    /// Averages kept: the current iteration's, and one a member still finishing may ask for.
    const KEEP: usize = 2;

    /// The average of `got` (summed in the order given).
    pub fn average(&mut self, got: Vec<Arc<Vec<f32>>>) -> Arc<Vec<f32>> {
        let same = |from: &[Weak<Vec<f32>>]| {
            from.len() == got.len() && from.iter().zip(&got).all(|(w, g)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(g)))
        };
        if let Some((_, sum)) = self.entries.iter().find(|(from, _)| same(from)) {
            return sum.clone();
        }
        let from = got.iter().map(Arc::downgrade).collect();
        let p = got.len();
        let avg = Arc::new(scaled(sum_in_order(got.into_iter()), p));
        if self.entries.len() == Self::KEEP {
            self.entries.pop_front();
        }
        self.entries.push_back((from, avg.clone()));
        avg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(values: &[Vec<f32>]) -> Vec<Arc<Vec<f32>>> {
        values.iter().map(|v| Arc::new(v.clone())).collect()
    }

    #[test]
    fn the_analytic_sum_is_computed_once_for_the_same_vectors_and_again_for_others() {
        let mut sums = AnalyticSums::default();
        let got = shared(&[vec![1.0, 2.0], vec![0.5, 0.25], vec![4.0, 8.0]]);
        let first = sums.average(got.clone());
        assert_eq!(*first, scaled(vec![5.5, 10.25], 3));
        // Every member asks with the same shared vectors: the cached sum, no new entry.
        for _ in 0..5 {
            assert!(Arc::ptr_eq(&sums.average(got.clone()), &first));
        }
        assert_eq!(sums.entries.len(), 1);
        // Equal values in other vectors (another iteration) are summed anew, not taken for these.
        let other = shared(&[vec![1.0, 2.0], vec![0.5, 0.25], vec![4.0, 9.0]]);
        assert_eq!(*sums.average(other.clone()), scaled(vec![5.5, 11.25], 3));
        assert_eq!(sums.entries.len(), 2);
        // A subset of the vectors (a member that lost one) is another sum.
        assert_eq!(*sums.average(got[..2].to_vec()), vec![0.75, 1.125]);
        assert_eq!(sums.entries.len(), AnalyticSums::KEEP);
        // The cache holds no gradient alive.
        let weak = Arc::downgrade(&other[2]);
        drop(other);
        assert!(weak.upgrade().is_none());
    }
}
