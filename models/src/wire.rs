//! A surrogate: the arithmetic of one workload with the message size of another model.
//!
//! `WireSized` computes gradients with its inner workload (say the 100-dimensional noisy
//! quadratic) but declares messages of `bytes` bytes (say ResNet-18's 46.8 MB), so a run has
//! the convergence behaviour of a cheap objective and the communication costs of a large model.
//! Collectives and shards split messages in proportion to the slices of the real vector.

use crate::{Evaluation, GradRequest, Workload};
use std::sync::Arc;

/// A workload whose messages are `bytes` long whatever its dimension.
#[derive(Clone)]
pub struct WireSized {
    inner: Arc<dyn Workload>,
    bytes: u64,
}

impl WireSized {
    /// Wraps `inner`, declaring full messages of `bytes` bytes.
    pub fn new(inner: Arc<dyn Workload>, bytes: u64) -> Self {
        WireSized { inner, bytes }
    }
}

impl Workload for WireSized {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn param_count(&self) -> usize {
        self.inner.param_count()
    }
    fn timing_only(&self) -> bool {
        self.inner.timing_only()
    }
    fn init(&self) -> Vec<f32> {
        self.inner.init()
    }
    fn gradient(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64 {
        self.inner.gradient(params, req, grad)
    }
    fn gradient_shared(&self, params: &std::sync::Arc<Vec<f32>>, req: GradRequest, grad: &mut [f32]) -> f64 {
        self.inner.gradient_shared(params, req, grad)
    }
    fn gradient_owned(&self, params: &std::sync::Arc<Vec<f32>>, req: GradRequest) -> (Vec<f32>, f64) {
        self.inner.gradient_owned(params, req)
    }
    fn evaluate(&self, params: &[f32]) -> Evaluation {
        self.inner.evaluate(params)
    }
    fn evaluate_on(&self, params: &[f32], threads: usize) -> Evaluation {
        self.inner.evaluate_on(params, threads)
    }
    fn label_histograms(&self) -> Option<Vec<Vec<u64>>> {
        self.inner.label_histograms()
    }
    fn message_bytes(&self) -> u64 {
        self.bytes
    }
    fn profile(&self) -> crate::profile::Profile {
        self.inner.profile()
    }
    fn parallel_gradients(&self) -> bool {
        self.inner.parallel_gradients()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A workload that records which of its methods were called.
    #[derive(Default)]
    struct Calls(Mutex<Vec<&'static str>>);

    impl Calls {
        fn note(&self, name: &'static str) {
            self.0.lock().expect("not poisoned").push(name);
        }
    }

    impl Workload for Calls {
        fn name(&self) -> &str {
            "calls"
        }
        fn param_count(&self) -> usize {
            2
        }
        fn init(&self) -> Vec<f32> {
            vec![0.0; 2]
        }
        fn gradient(&self, _: &[f32], _: GradRequest, _: &mut [f32]) -> f64 {
            self.note("gradient");
            0.0
        }
        fn gradient_shared(&self, _: &Arc<Vec<f32>>, _: GradRequest, _: &mut [f32]) -> f64 {
            self.note("gradient_shared");
            0.0
        }
        fn gradient_owned(&self, _: &Arc<Vec<f32>>, _: GradRequest) -> (Vec<f32>, f64) {
            self.note("gradient_owned");
            (vec![0.0; 2], 0.0)
        }
        fn evaluate(&self, _: &[f32]) -> Evaluation {
            self.note("evaluate");
            Evaluation { loss: 0.0, accuracy: None }
        }
        fn evaluate_on(&self, _: &[f32], _: usize) -> Evaluation {
            self.note("evaluate_on");
            Evaluation { loss: 0.0, accuracy: None }
        }
    }

    #[test]
    fn the_surrogate_calls_its_inner_workloads_own_paths() {
        // A workload's shared, owned and threaded paths are faster than the defaults (which
        // fall back on `gradient` and `evaluate`); the surrogate must not hide them.
        let inner = Arc::new(Calls::default());
        let w = WireSized::new(inner.clone(), 1 << 20);
        let p = Arc::new(vec![0.0; 2]);
        let req = GradRequest { worker: 0, batch: 1, seed: 0 };
        w.gradient(&p, req, &mut [0.0; 2]);
        w.gradient_shared(&p, req, &mut [0.0; 2]);
        w.gradient_owned(&p, req);
        w.evaluate(&p);
        w.evaluate_on(&p, 2);
        let calls = inner.0.lock().expect("not poisoned").clone();
        assert_eq!(calls, ["gradient", "gradient_shared", "gradient_owned", "evaluate", "evaluate_on"]);
        assert_eq!(w.message_bytes(), 1 << 20);
    }
}
