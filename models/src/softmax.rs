//! Multinomial logistic regression on a seeded synthetic Gaussian mixture.
//!
//! Class `k` has a mean `μ_k` drawn once from `N(0, separation²·I)`; a sample of class `k` is
//! `μ_k + N(0, I)`. The training and held-out sets are drawn from the dataset seed, so every
//! worker and every run sees the same data. Parameters are the weight matrix `W` (classes ×
//! features, row-major) followed by the bias `b`. A minibatch draws `batch` training indices
//! uniformly with replacement from the request's seed.

use crate::partition::{self, Partition, Parts};
use crate::{job_rng, Evaluation, GradRequest, Workload};
use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use std::sync::Arc;

/// Configuration of the synthetic problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftmaxConfig {
    /// Number of classes.
    pub classes: usize,
    /// Number of features.
    pub features: usize,
    /// Training samples.
    pub train: usize,
    /// Held-out samples.
    pub test: usize,
    /// Standard deviation of the class means (larger is easier).
    pub separation: f64,
    /// Seed of the dataset (independent of the run's seed).
    pub data_seed: u64,
}

impl Default for SoftmaxConfig {
    /// 10 classes, 32 features, 10,000 training and 2,000 held-out samples, separation 0.5.
    fn default() -> Self {
        SoftmaxConfig { classes: 10, features: 32, train: 10_000, test: 2_000, separation: 0.5, data_seed: 1 }
    }
}

/// Logistic regression on a Gaussian mixture.
#[derive(Clone, Debug)]
pub struct Softmax {
    cfg: SoftmaxConfig,
    train_x: Vec<f32>,
    train_y: Vec<u32>,
    test_x: Vec<f32>,
    test_y: Vec<u32>,
    /// The training set split among workers, and each worker's label histogram.
    parts: Option<Arc<(Parts, Vec<Vec<u64>>)>>,
}

fn draw_set(cfg: &SoftmaxConfig, means: &[f64], n: usize, rng: &mut impl Rng) -> (Vec<f32>, Vec<u32>) {
    let mut x = Vec::with_capacity(n * cfg.features);
    let mut y = Vec::with_capacity(n);
    for _ in 0..n {
        let k = rng.random_range(0..cfg.classes);
        y.push(k as u32);
        for f in 0..cfg.features {
            let z: f64 = StandardNormal.sample(rng);
            x.push((means[k * cfg.features + f] + z) as f32);
        }
    }
    (x, y)
}

impl Softmax {
    /// Generates the dataset. Callers validate sizes (all positive).
    pub fn new(cfg: SoftmaxConfig) -> Self {
        let mut rng = job_rng(cfg.data_seed ^ 0x5EED_DA7A);
        let means: Vec<f64> = (0..cfg.classes * cfg.features)
            .map(|_| cfg.separation * Distribution::<f64>::sample(&StandardNormal, &mut rng))
            .collect::<Vec<f64>>();
        let (train_x, train_y) = draw_set(&cfg, &means, cfg.train, &mut rng);
        let (test_x, test_y) = draw_set(&cfg, &means, cfg.test, &mut rng);
        Softmax { cfg, train_x, train_y, test_x, test_y, parts: None }
    }

    /// Splits the training set among `workers` workers (see [`crate::partition`]); every draw
    /// comes from `rng`.
    pub fn with_partition(mut self, partition: Partition, workers: usize, rng: &mut impl Rng) -> Self {
        self.parts = partition.split(&self.train_y, self.cfg.classes, workers, rng).map(|p| {
            let h = p.histograms(&self.train_y, self.cfg.classes);
            Arc::new((p, h))
        });
        self
    }

    /// Logits of sample `x` into `out`.
    fn logits(&self, params: &[f32], x: &[f32], out: &mut [f64]) {
        let (k, d) = (self.cfg.classes, self.cfg.features);
        for c in 0..k {
            let w = &params[c * d..(c + 1) * d];
            out[c] = params[k * d + c] as f64 + w.iter().zip(x).map(|(&w, &x)| (w * x) as f64).sum::<f64>();
        }
    }

    /// Turns logits into probabilities in place and returns the cross-entropy of `label`.
    fn softmax_xent(p: &mut [f64], label: usize) -> f64 {
        let max = p.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let mut z = 0.0;
        for v in p.iter_mut() {
            *v = (*v - max).exp();
            z += *v;
        }
        for v in p.iter_mut() {
            *v /= z;
        }
        -(p[label].max(1e-300)).ln()
    }
}

impl Workload for Softmax {
    fn name(&self) -> &str {
        "softmax"
    }
    fn param_count(&self) -> usize {
        self.cfg.classes * self.cfg.features + self.cfg.classes
    }
    fn init(&self) -> Vec<f32> {
        vec![0.0; self.param_count()]
    }
    fn gradient(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64 {
        let (k, d) = (self.cfg.classes, self.cfg.features);
        let mut rng = job_rng(req.seed);
        let b = req.batch.max(1);
        let mut acc = vec![0.0f64; grad.len()];
        let mut p = vec![0.0f64; k];
        let mut loss = 0.0;
        for _ in 0..b {
            let i = partition::draw(self.parts.as_deref().map(|p| &p.0), req.worker, self.cfg.train, &mut rng);
            let x = &self.train_x[i * d..(i + 1) * d];
            let y = self.train_y[i] as usize;
            self.logits(params, x, &mut p);
            loss += Self::softmax_xent(&mut p, y);
            for c in 0..k {
                let e = p[c] - if c == y { 1.0 } else { 0.0 };
                for f in 0..d {
                    acc[c * d + f] += e * x[f] as f64;
                }
                acc[k * d + c] += e;
            }
        }
        for (g, a) in grad.iter_mut().zip(&acc) {
            *g = (a / b as f64) as f32;
        }
        loss / b as f64
    }
    fn label_histograms(&self) -> Option<Vec<Vec<u64>>> {
        self.parts.as_ref().map(|p| p.1.clone())
    }
    fn evaluate(&self, params: &[f32]) -> Evaluation {
        let d = self.cfg.features;
        let mut p = vec![0.0f64; self.cfg.classes];
        let (mut loss, mut right) = (0.0, 0usize);
        for (i, &y) in self.test_y.iter().enumerate() {
            self.logits(params, &self.test_x[i * d..(i + 1) * d], &mut p);
            loss += Self::softmax_xent(&mut p, y as usize);
            let best = (0..p.len()).fold(0, |b, c| if p[c] > p[b] { c } else { b });
            right += (best == y as usize) as usize;
        }
        let n = self.test_y.len() as f64;
        Evaluation { loss: loss / n, accuracy: Some(right as f64 / n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_matches_finite_differences() {
        let s = Softmax::new(SoftmaxConfig { classes: 3, features: 4, train: 50, test: 10, ..Default::default() });
        let params: Vec<f32> = (0..s.param_count()).map(|i| (i as f32 * 0.37).sin() * 0.3).collect();
        let req = GradRequest { worker: 0, batch: 16, seed: 5 };
        let mut g = vec![0.0; params.len()];
        s.gradient(&params, req, &mut g);
        let mut scratch = vec![0.0; params.len()];
        for j in [0, 5, 12, 13, 14] {
            let (mut a, mut b) = (params.clone(), params.clone());
            a[j] += 1e-2;
            b[j] -= 1e-2;
            let fd = (s.gradient(&a, req, &mut scratch) - s.gradient(&b, req, &mut scratch)) / 2e-2;
            assert!((fd - g[j] as f64).abs() < 2e-3, "param {j}: fd {fd} vs {}", g[j]);
        }
    }

    #[test]
    fn sgd_learns_the_mixture() {
        let s = Softmax::new(SoftmaxConfig::default());
        let mut x = s.init();
        let before = s.evaluate(&x);
        let mut g = vec![0.0; x.len()];
        for step in 0..300 {
            s.gradient(&x, GradRequest { worker: 0, batch: 32, seed: step }, &mut g);
            x.iter_mut().zip(&g).for_each(|(x, g)| *x -= 0.5 * g);
        }
        let after = s.evaluate(&x);
        assert!((before.accuracy.unwrap() - 0.1).abs() < 0.05);
        assert!(after.accuracy.unwrap() > 0.8, "{after:?}");
        assert!(after.loss < before.loss);
    }
}
