//! How a labelled training set is split among workers (`workload.partition`).
//!
//! - `shared` (the default): every worker samples the whole training set, as before partitions
//!   existed; such runs draw exactly the random numbers they always did.
//! - `shards`: the samples are shuffled and cut into `workers` disjoint shards of equal size
//!   (sizes differ by at most one); together they cover the training set.
//! - `labels` with `per_worker = c`: the pathological non-IID split (McMahan et al. 2017). The
//!   classes are shuffled; worker `w` holds the `c` classes at positions `w·c, …, w·c + c − 1`
//!   (mod the number of classes), and each class's samples are dealt out, shuffled, in equal
//!   parts to the workers that hold it. A class that no worker holds is left out.
//! - `dirichlet` with `alpha`: for each class, the shares of the workers are drawn from
//!   Dirichlet(α) and the class's shuffled samples are cut in those proportions (Hsu et al.
//!   2019); small α gives each worker few classes, large α approaches `shards`.
//!
//! A worker left with no sample (a Dirichlet share that rounds to nothing, or more holders of a
//! class than it has samples) takes one from the worker with the most, so every worker can draw
//! minibatches.
//!
//! Every draw comes from the one generator the caller passes (a named stream of the run's seed),
//! so a partition is a pure function of the seed, the labels and the number of workers.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_distr::{Distribution, Gamma};
use serde::{Deserialize, Serialize};

/// How the training set is split among workers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Partition {
    /// Every worker samples the whole training set (the default).
    Shared {},
    /// Disjoint shards of equal size.
    Shards {},
    /// Each worker holds `per_worker` classes.
    Labels {
        /// Classes per worker.
        per_worker: usize,
    },
    /// Class shares per worker drawn from Dirichlet(`alpha`).
    Dirichlet {
        /// Concentration; smaller is more skewed.
        alpha: f64,
    },
}

impl Default for Partition {
    fn default() -> Self {
        Partition::Shared {}
    }
}

/// The samples each worker draws its minibatches from, by index into the training set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parts {
    /// `of[w]`: worker `w`'s sample indices, ascending.
    pub of: Vec<Vec<u32>>,
}

impl Partition {
    /// True for the default, which splits nothing.
    pub fn is_shared(&self) -> bool {
        *self == Partition::Shared {}
    }

    /// Checks the partition for `workers` workers over `samples` samples of `classes` classes;
    /// returns the field (relative to the partition) and the problem.
    pub fn validate(&self, workers: usize, samples: usize, classes: usize) -> Result<(), (String, String)> {
        let bad = |f: &str, p: String| Err((f.to_string(), p));
        match *self {
            Partition::Shared {} => Ok(()),
            _ if workers > samples => bad(
                "kind",
                format!("splits {samples} training samples among {workers} workers; every worker needs at least one"),
            ),
            Partition::Shards {} => Ok(()),
            Partition::Labels { per_worker } if per_worker == 0 || per_worker > classes => {
                bad("per_worker", format!("is {per_worker}; must be from 1 to {classes} (the classes there are)"))
            }
            Partition::Labels { .. } => Ok(()),
            Partition::Dirichlet { alpha } if !(alpha.is_finite() && alpha > 0.0) => {
                bad("alpha", format!("is {alpha}; must be a positive number"))
            }
            Partition::Dirichlet { alpha } if !(1e-3..=1e6).contains(&alpha) => {
                bad("alpha", format!("is {alpha}; must be between 0.001 and 1e6"))
            }
            Partition::Dirichlet { .. } => Ok(()),
        }
    }

    /// Splits samples with labels `labels` (in `0..classes`) among `workers` workers; `None` for
    /// [`Partition::Shared`]. Call [`Partition::validate`] first.
    pub fn split(&self, labels: &[u32], classes: usize, workers: usize, rng: &mut impl Rng) -> Option<Parts> {
        let workers = workers.max(1);
        let mut of = match *self {
            Partition::Shared {} => return None,
            Partition::Shards {} => {
                let mut all: Vec<u32> = (0..labels.len() as u32).collect();
                all.shuffle(rng);
                (0..workers).map(|w| all[w * all.len() / workers..(w + 1) * all.len() / workers].to_vec()).collect()
            }
            Partition::Labels { per_worker } => by_labels(labels, classes, workers, per_worker, rng),
            Partition::Dirichlet { alpha } => by_dirichlet(labels, classes, workers, alpha, rng),
        };
        fill_empty(&mut of);
        for part in &mut of {
            part.sort_unstable();
        }
        Some(Parts { of })
    }
}

/// The samples of each class, shuffled.
fn classes_of(labels: &[u32], classes: usize, rng: &mut impl Rng) -> Vec<Vec<u32>> {
    let mut by: Vec<Vec<u32>> = vec![Vec::new(); classes];
    for (i, &y) in labels.iter().enumerate() {
        by[y as usize].push(i as u32);
    }
    for c in &mut by {
        c.shuffle(rng);
    }
    by
}

fn by_labels(labels: &[u32], classes: usize, workers: usize, per_worker: usize, rng: &mut impl Rng) -> Vec<Vec<u32>> {
    let mut order: Vec<usize> = (0..classes).collect();
    order.shuffle(rng);
    let held: Vec<Vec<usize>> =
        (0..workers).map(|w| (0..per_worker).map(|j| order[(w * per_worker + j) % classes]).collect()).collect();
    let by = classes_of(labels, classes, rng);
    let mut of = vec![Vec::new(); workers];
    for (class, samples) in by.iter().enumerate() {
        let holders: Vec<usize> = (0..workers).filter(|w| held[*w].contains(&class)).collect();
        for (k, &w) in holders.iter().enumerate() {
            let (from, to) = (k * samples.len() / holders.len(), (k + 1) * samples.len() / holders.len());
            of[w].extend_from_slice(&samples[from..to]);
        }
    }
    of
}

fn by_dirichlet(labels: &[u32], classes: usize, workers: usize, alpha: f64, rng: &mut impl Rng) -> Vec<Vec<u32>> {
    let gamma = Gamma::new(alpha, 1.0).expect("alpha was validated");
    let by = classes_of(labels, classes, rng);
    let mut of = vec![Vec::new(); workers];
    for samples in &by {
        let draws: Vec<f64> = (0..workers).map(|_| gamma.sample(rng)).collect();
        let total: f64 = draws.iter().sum();
        let mut cum = 0.0;
        let mut from = 0;
        for (w, d) in draws.iter().enumerate() {
            cum += if total > 0.0 { d / total } else { 1.0 / workers as f64 };
            let to = if w + 1 == workers {
                samples.len()
            } else {
                ((cum * samples.len() as f64) as usize).min(samples.len())
            };
            of[w].extend_from_slice(&samples[from..to.max(from)]);
            from = to.max(from);
        }
    }
    of
}

/// Every worker needs a sample: an empty part takes one from the largest (lowest worker on
/// ties). Needs at least as many samples as workers.
fn fill_empty(of: &mut [Vec<u32>]) {
    for w in 0..of.len() {
        if of[w].is_empty() {
            let largest = (0..of.len()).max_by_key(|&v| (of[v].len(), std::cmp::Reverse(v))).expect("workers ≥ 1");
            if of[largest].len() > 1 {
                let taken = of[largest].pop().expect("two samples or more");
                of[w].push(taken);
            }
        }
    }
}

impl Parts {
    /// Each worker's count of samples per class.
    pub fn histograms(&self, labels: &[u32], classes: usize) -> Vec<Vec<u64>> {
        self.of
            .iter()
            .map(|part| {
                let mut h = vec![0u64; classes];
                for &i in part {
                    h[labels[i as usize] as usize] += 1;
                }
                h
            })
            .collect()
    }
}

/// The index of one minibatch sample of `worker` among `n` training samples: uniform over the
/// worker's part, or over all `n` without a partition (the draw runs always made).
pub fn draw(parts: Option<&Parts>, worker: usize, n: usize, rng: &mut impl Rng) -> usize {
    match parts.and_then(|p| p.of.get(worker)) {
        Some(own) => own[rng.random_range(0..own.len())] as usize,
        None => rng.random_range(0..n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha12Rng;

    /// 1,000 samples of 10 classes drawn at random (so in unequal numbers).
    fn labels() -> Vec<u32> {
        let mut r = rng(99);
        (0..1000).map(|_| r.random_range(0..10u32)).collect()
    }

    fn rng(seed: u64) -> ChaCha12Rng {
        ChaCha12Rng::seed_from_u64(seed)
    }

    #[test]
    fn shards_are_disjoint_equal_and_cover_the_training_set() {
        let y = labels();
        for workers in [1, 3, 7, 16] {
            let p = Partition::Shards {}.split(&y, 10, workers, &mut rng(1)).expect("split");
            assert_eq!(p.of.len(), workers);
            let mut all: Vec<u32> = p.of.iter().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..1000).collect::<Vec<u32>>(), "disjoint and covering, {workers} workers");
            let sizes: Vec<usize> = p.of.iter().map(Vec::len).collect();
            assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        }
    }

    #[test]
    fn a_labels_split_gives_each_worker_exactly_its_classes() {
        let y = labels();
        let p = Partition::Labels { per_worker: 2 }.split(&y, 10, 8, &mut rng(2)).expect("split");
        let h = p.histograms(&y, 10);
        for (w, hist) in h.iter().enumerate() {
            let held: Vec<usize> = (0..10).filter(|&c| hist[c] > 0).collect();
            assert_eq!(held.len(), 2, "worker {w} holds exactly 2 classes: {hist:?}");
        }
        // 8 workers × 2 = 16 slots over 10 classes: the first six of the shuffled order are held
        // twice, and their samples are split between the two holders, disjointly.
        let mut all: Vec<u32> = p.of.iter().flatten().copied().collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "no sample is given twice");
        assert_eq!(n, 1000, "every class is held by someone");
        // One class per worker: each worker's samples all have one label.
        let p = Partition::Labels { per_worker: 1 }.split(&y, 10, 10, &mut rng(3)).expect("split");
        for part in &p.of {
            assert!(part.iter().all(|&i| y[i as usize] == y[part[0] as usize]));
        }
    }

    #[test]
    fn dirichlet_is_reproducible_by_seed_and_more_skewed_as_alpha_falls() {
        let y = labels();
        let split = |alpha, seed| Partition::Dirichlet { alpha }.split(&y, 10, 8, &mut rng(seed)).expect("split");
        assert_eq!(split(0.5, 7), split(0.5, 7), "same seed, same split");
        assert_ne!(split(0.5, 7), split(0.5, 8), "another seed, another split");
        // Skew: the mean over workers of the largest class's share of the worker's samples.
        let skew = |alpha: f64| {
            let mut total = 0.0;
            for seed in 0..10 {
                let p = split(alpha, seed);
                for h in p.histograms(&y, 10) {
                    let n: u64 = h.iter().sum();
                    total += *h.iter().max().unwrap() as f64 / n as f64;
                }
            }
            total / 80.0
        };
        let (s100, s1, s01) = (skew(100.0), skew(1.0), skew(0.1));
        assert!(s100 < s1 && s1 < s01, "skew grows as alpha falls: {s100:.3} {s1:.3} {s01:.3}");
        assert!(s100 < 0.2 && s01 > 0.45, "near uniform (0.1) at 100, a few classes at 0.1: {s100:.3} {s01:.3}");
        for alpha in [0.001, 0.01] {
            let p = split(alpha, 1);
            assert!(p.of.iter().all(|part| !part.is_empty()), "every worker has a sample at alpha {alpha}");
            assert_eq!(p.of.iter().map(Vec::len).sum::<usize>(), 1000);
        }
    }

    #[test]
    fn bad_partitions_are_refused_with_their_field() {
        let v = |p: Partition, workers| p.validate(workers, 1000, 10).map_err(|e| e.0);
        assert_eq!(v(Partition::Dirichlet { alpha: 0.0 }, 4), Err("alpha".into()));
        assert_eq!(v(Partition::Dirichlet { alpha: -1.0 }, 4), Err("alpha".into()));
        assert_eq!(v(Partition::Labels { per_worker: 11 }, 4), Err("per_worker".into()));
        assert_eq!(v(Partition::Labels { per_worker: 0 }, 4), Err("per_worker".into()));
        assert_eq!(v(Partition::Shards {}, 1001), Err("kind".into()));
        assert_eq!(v(Partition::Shared {}, 1001), Ok(()));
        assert_eq!(v(Partition::Dirichlet { alpha: 0.1 }, 100), Ok(()));
    }

    #[test]
    fn without_a_partition_the_draw_is_the_one_runs_always_made() {
        let (mut a, mut b) = (rng(5), rng(5));
        for _ in 0..100 {
            assert_eq!(draw(None, 3, 60_000, &mut a), b.random_range(0..60_000usize));
        }
        let parts = Parts { of: vec![vec![4, 9], vec![7]] };
        for _ in 0..20 {
            assert!([4, 9].contains(&draw(Some(&parts), 0, 10, &mut a)));
            assert_eq!(draw(Some(&parts), 1, 10, &mut a), 7);
        }
    }
}
