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
    fn evaluate(&self, params: &[f32]) -> Evaluation {
        self.inner.evaluate(params)
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
