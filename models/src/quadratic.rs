//! The noisy quadratic model (Zhang et al. 2019, "Which algorithmic choices matter at which batch
//! sizes?"): `f(x) = Σ h_i x_i² / 2` with a diagonal Hessian whose eigenvalues `h_i` are spaced
//! log-uniformly from `h_max` down to `h_min`, and minibatch gradients `h_i x_i + ξ_i` with
//! `ξ_i ~ N(0, c_i / b)`, `c_i = noise · h_i` (noise covariance proportional to the curvature).
//!
//! Under SGD with learning rate `η` and effective batch `B` the expectation evolves exactly as
//! `E[x_i²]_{t+1} = (1 - η h_i)² E[x_i²]_t + η² c_i / B`, which [`Quadratic::expected_loss`]
//! computes, so simulated runs can be checked against it.

use crate::{job_rng, Evaluation, GradRequest, Workload};
use rand_distr::{Distribution, StandardNormal};

/// The noisy quadratic model.
#[derive(Clone, Debug)]
pub struct Quadratic {
    h: Vec<f64>,
    c: Vec<f64>,
    x0: f64,
}

impl Quadratic {
    /// `dim` coordinates, curvatures from `h_max` to `h_min`, noise scale `noise`, start at `x0`
    /// in every coordinate. Panics are avoided: callers validate (`dim > 0`, `0 < h_min <= h_max`).
    pub fn new(dim: usize, h_max: f64, h_min: f64, noise: f64, x0: f64) -> Self {
        let h: Vec<f64> = (0..dim)
            .map(|i| if dim == 1 { h_max } else { h_max * (h_min / h_max).powf(i as f64 / (dim - 1) as f64) })
            .collect();
        let c = h.iter().map(|h| noise * h).collect();
        Quadratic { h, c, x0 }
    }
    /// Curvatures.
    pub fn curvatures(&self) -> &[f64] {
        &self.h
    }
    /// The closed-form expected loss after each of `steps` plain SGD steps (no momentum) with
    /// learning rate `lr` and effective batch `batch`, starting from the initial point.
    pub fn expected_loss(&self, lr: f64, batch: usize, steps: usize) -> Vec<f64> {
        let mut m: Vec<f64> = vec![self.x0 * self.x0; self.h.len()];
        let mut out = Vec::with_capacity(steps + 1);
        let loss = |m: &[f64]| self.h.iter().zip(m).map(|(h, m)| h * m / 2.0).sum::<f64>();
        out.push(loss(&m));
        for _ in 0..steps {
            for ((m, h), c) in m.iter_mut().zip(&self.h).zip(&self.c) {
                *m = (1.0 - lr * h).powi(2) * *m + lr * lr * c / batch as f64;
            }
            out.push(loss(&m));
        }
        out
    }
}

impl Workload for Quadratic {
    fn name(&self) -> &str {
        "quadratic"
    }
    fn param_count(&self) -> usize {
        self.h.len()
    }
    fn init(&self) -> Vec<f32> {
        vec![self.x0 as f32; self.h.len()]
    }
    fn gradient(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64 {
        let mut rng = job_rng(req.seed);
        let b = req.batch.max(1) as f64;
        let mut loss = 0.0;
        for i in 0..params.len() {
            let x = params[i] as f64;
            let z: f64 = StandardNormal.sample(&mut rng);
            grad[i] = (self.h[i] * x + (self.c[i] / b).sqrt() * z) as f32;
            loss += self.h[i] * x * x / 2.0;
        }
        loss
    }
    fn evaluate(&self, params: &[f32]) -> Evaluation {
        let loss = params.iter().zip(&self.h).map(|(&x, h)| h * (x as f64).powi(2) / 2.0).sum();
        Evaluation { loss, accuracy: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradient_noise_has_variance_c_over_b() {
        let q = Quadratic::new(4, 1.0, 0.1, 2.0, 0.0);
        let x = vec![0.0f32; 4];
        let mut g = vec![0.0f32; 4];
        let n = 20_000;
        let mut var = [0.0f64; 4];
        for s in 0..n {
            q.gradient(&x, GradRequest { worker: 0, batch: 8, seed: s }, &mut g);
            for (v, g) in var.iter_mut().zip(&g) {
                *v += (*g as f64).powi(2) / n as f64;
            }
        }
        for (i, (v, h)) in var.iter().zip(q.curvatures()).enumerate() {
            let want = 2.0 * h / 8.0;
            assert!((v / want - 1.0).abs() < 0.05, "coordinate {i}: {v} vs {want}");
        }
    }

    #[test]
    fn noiseless_expected_loss_is_geometric() {
        let q = Quadratic::new(1, 1.0, 1.0, 0.0, 1.0);
        let l = q.expected_loss(0.5, 1, 3);
        assert_eq!(l, vec![0.5, 0.125, 0.03125, 0.0078125]);
    }
}
