//! The gradient jobs in flight, kept by rank: a job's start and its completion each touch its
//! own rank's entry (at 10,000 ranks an ordered map by job id cost a few cache misses on each
//! completion, as completions come in no order of ids).

use super::driver::Job;
use smallvec::SmallVec;

/// Each rank's jobs in flight, in the order they were started.
pub(super) struct Jobs {
    by_rank: Vec<SmallVec<[(u64, Job); 1]>>,
}

impl Jobs {
    /// No jobs on `ranks` ranks.
    pub fn new(ranks: usize) -> Self {
        Jobs { by_rank: (0..ranks).map(|_| SmallVec::new()).collect() }
    }

    /// Prefetches `rank`'s jobs.
    #[inline]
    pub fn prefetch(&self, rank: usize) {
        if let Some(j) = self.by_rank.get(rank) {
            dsgd_sim::prefetch::lines(j, 2);
        }
    }

    /// Records job `id` of `rank`.
    #[inline]
    pub fn insert(&mut self, rank: usize, id: u64, job: Job) {
        self.by_rank[rank].push((id, job));
    }

    /// Takes job `id` of `rank` out, if it is there.
    #[inline]
    pub fn take(&mut self, rank: usize, id: u64) -> Option<Job> {
        let jobs = &mut self.by_rank[rank];
        let k = jobs.iter().position(|(j, _)| *j == id)?;
        Some(jobs.remove(k).1)
    }

    /// Takes every job of `rank` out, in the order they were started.
    pub fn take_all(&mut self, rank: usize) -> impl Iterator<Item = Job> {
        std::mem::take(&mut self.by_rank[rank]).into_iter().map(|(_, j)| j)
    }
}

#[cfg(test)]
mod tests {
    use super::{Job, Jobs};
    use crate::gradient_pool::GradientInput;
    use std::sync::Arc;

    fn job(node: usize, seed: u64) -> Job {
        Job::Inline(GradientInput { node, params: Arc::new(vec![]), batch: 1, seed })
    }

    fn seed(j: Job) -> u64 {
        match j {
            Job::Inline(i) => i.seed,
            _ => unreachable!(),
        }
    }

    #[test]
    fn jobs_are_taken_by_rank_and_id_whatever_the_order() {
        let mut jobs = Jobs::new(3);
        jobs.insert(1, 7, job(1, 70));
        jobs.insert(1, 9, job(1, 90));
        jobs.insert(2, 8, job(2, 80));
        jobs.insert(1, 10, job(1, 100));
        assert!(jobs.take(0, 7).is_none());
        assert!(jobs.take(2, 7).is_none());
        assert_eq!(jobs.take(1, 9).map(seed), Some(90));
        assert!(jobs.take(1, 9).is_none());
        assert_eq!(jobs.take_all(1).map(seed).collect::<Vec<_>>(), vec![70, 100]);
        assert_eq!(jobs.take_all(1).count(), 0);
        assert_eq!(jobs.take(2, 8).map(seed), Some(80));
    }
}
