//! `dsgd-models`: gradient sources behind one trait, [`Workload`].
//!
//! A workload knows its parameter count, its initial parameters, how to compute the gradient of a
//! minibatch at given parameters, and how to evaluate loss (and accuracy) of a parameter vector.
//! Every random choice inside a gradient (which samples, what noise) comes from the `seed` the
//! caller passes with the request, so a gradient is a pure function of `(params, request)` and
//! jobs can be computed in any order or in parallel with identical bits.
//!
//! - [`timing::TimingWorkload`]: no arithmetic, only a parameter count (message sizes).
//! - [`quadratic::Quadratic`]: the noisy quadratic model with a closed-form loss recursion.
//! - [`softmax::Softmax`]: multinomial logistic regression on a seeded Gaussian mixture.
//! - [`wire::WireSized`]: any of these with the message size of another model.
//! - [`nets`]: burn networks on Fashion-MNIST ([`fashion_mnist`], [`idx`]: the data).
//! - [`profile`]: how a gradient becomes ready layer by layer (for overlapped all-reduce).
//! - [`partition`]: how a labelled training set is split among workers (shards, labels, Dirichlet).
//! - [`spec`]: the workload section of an experiment spec: defaults, checks, and the builder.

pub mod fashion_mnist;
pub mod idx;
pub mod nets;
pub mod par;
pub mod partition;
pub mod profile;
pub mod quadratic;
pub mod softmax;
pub mod spec;
pub mod timing;
pub mod wire;

use rand::SeedableRng;
use rand_chacha::ChaCha12Rng;

/// What a gradient job is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GradRequest {
    /// The worker computing it (for per-worker data shards).
    pub worker: usize,
    /// Minibatch size.
    pub batch: usize,
    /// Seed of every random choice in this job.
    pub seed: u64,
}

/// Loss (and accuracy, where defined) of a parameter vector.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evaluation {
    /// Loss on the evaluation set (or the exact objective).
    pub loss: f64,
    /// Fraction classified correctly, for classifiers.
    pub accuracy: Option<f64>,
}

/// A source of gradients.
pub trait Workload: Send + Sync {
    /// A short name, e.g. `quadratic`.
    fn name(&self) -> &str;
    /// Number of trainable parameters (sets message sizes: 4 bytes each).
    fn param_count(&self) -> usize;
    /// True if the workload does no arithmetic: parameter vectors are empty.
    fn timing_only(&self) -> bool {
        false
    }
    /// The initial parameters (empty for timing-only workloads).
    fn init(&self) -> Vec<f32>;
    /// Writes the minibatch gradient at `params` into `grad` (same length) and returns the
    /// minibatch loss.
    fn gradient(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64;
    /// As [`Workload::gradient`], at parameters the caller shares: a workload may keep what it
    /// built from the very same vector for its next call on the same thread (replicas of
    /// synchronous SGD share one). The result is the same.
    fn gradient_shared(&self, params: &std::sync::Arc<Vec<f32>>, req: GradRequest, grad: &mut [f32]) -> f64 {
        self.gradient(params, req, grad)
    }
    /// As [`Workload::gradient_shared`], into a vector of its own: the same bits. A workload
    /// that writes every element may skip zeroing the vector first.
    fn gradient_owned(&self, params: &std::sync::Arc<Vec<f32>>, req: GradRequest) -> (Vec<f32>, f64) {
        gradient_zeroed(self, params, req)
    }
    /// Evaluates `params`.
    fn evaluate(&self, params: &[f32]) -> Evaluation;
    /// [`Workload::evaluate`] on up to `threads` threads: the same bits (a workload whose
    /// evaluation is cheap ignores the threads).
    fn evaluate_on(&self, params: &[f32], threads: usize) -> Evaluation {
        let _ = threads;
        self.evaluate(params)
    }
    /// True if gradients are expensive enough to compute pending jobs on several threads.
    fn parallel_gradients(&self) -> bool {
        false
    }
    /// Each worker's count of training samples per class, where the training set is split
    /// among workers (`None`: every worker samples the whole set).
    fn label_histograms(&self) -> Option<Vec<Vec<u64>>> {
        None
    }
    /// The layers in forward order and the forward pass's share of a step (default: one layer,
    /// so the whole gradient is ready at the end of the step).
    fn profile(&self) -> profile::Profile {
        profile::Profile::flat(self.param_count())
    }
    /// Bytes of one full parameter (or gradient) vector on the wire.
    fn message_bytes(&self) -> u64 {
        4 * self.param_count() as u64
    }
}

/// [`Workload::gradient_shared`] into a zeroed vector of its own: what
/// [`Workload::gradient_owned`] does unless a workload knows better.
pub fn gradient_zeroed<W: Workload + ?Sized>(
    workload: &W,
    params: &std::sync::Arc<Vec<f32>>,
    req: GradRequest,
) -> (Vec<f32>, f64) {
    let mut grad = vec![0.0; params.len()];
    let loss = workload.gradient_shared(params, req, &mut grad);
    (grad, loss)
}

/// The generator of one gradient job.
pub fn job_rng(seed: u64) -> ChaCha12Rng {
    ChaCha12Rng::seed_from_u64(seed)
}
