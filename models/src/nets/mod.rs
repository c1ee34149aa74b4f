//! Real networks in burn on Fashion-MNIST, behind the [`Workload`] trait.
//!
//! Gradients are computed on burn's `flex` CPU backend (bitwise reproducible across runs and
//! thread counts) with autodiff. Parameters and gradients cross the boundary as one flat `f32`
//! vector ([`flat`]); every call builds a fresh replica from its configuration and loads the
//! vector into it, so replicas never share state. A minibatch is `batch` training images drawn
//! uniformly with replacement from the request's seed (each worker's seeds come from its own named
//! stream, so each worker has its own sample order). Initial parameters come from a ChaCha stream
//! of `init_seed`, not from burn's random state. The models here have no batch normalisation.

pub mod cnn;
pub mod flat;
pub mod mlp;

use crate::fashion_mnist::{FashionMnist, Split};
use crate::idx::DataError;
use crate::{job_rng, Evaluation, GradRequest, Workload};
use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use cnn::Cnn;
use mlp::Mlp;
use rand::Rng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

type Cpu = Flex;
type Train = Autodiff<Flex>;

/// Which network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetKind {
    /// A multi-layer perceptron with these hidden widths.
    Mlp {
        /// Hidden layer widths.
        hidden: Vec<usize>,
    },
    /// The small CNN of [`cnn`].
    Cnn,
}

/// A network's forward pass.
trait Net<B: Backend>: Module<B> {
    fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2>;
}
impl<B: Backend> Net<B> for Mlp<B> {
    fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward(x)
    }
}
impl<B: Backend> Net<B> for Cnn<B> {
    fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward(x)
    }
}

/// A burn network on Fashion-MNIST.
pub struct BurnNet {
    kind: NetKind,
    data: Arc<FashionMnist>,
    init_seed: u64,
    params: usize,
}

static DATA: OnceLock<Mutex<BTreeMap<PathBuf, Arc<FashionMnist>>>> = OnceLock::new();

/// Loads Fashion-MNIST from `dir` once per process.
pub fn dataset(dir: &Path) -> Result<Arc<FashionMnist>, DataError> {
    let cache = DATA.get_or_init(|| Mutex::new(BTreeMap::new()));
    if let Some(d) = cache.lock().expect("no panics hold the lock").get(dir) {
        return Ok(d.clone());
    }
    let d = Arc::new(FashionMnist::load(dir)?);
    cache.lock().expect("no panics hold the lock").insert(dir.to_path_buf(), d.clone());
    Ok(d)
}

fn widths(hidden: &[usize]) -> Vec<usize> {
    std::iter::once(784).chain(hidden.iter().copied()).chain(std::iter::once(10)).collect()
}

macro_rules! with_net {
    ($kind:expr, $B:ty, $dev:expr, $net:ident => $body:expr) => {
        match $kind {
            NetKind::Mlp { hidden } => {
                let $net = Mlp::<$B>::new(&widths(hidden), $dev);
                $body
            }
            NetKind::Cnn => {
                let $net = Cnn::<$B>::new(1, 10, $dev);
                $body
            }
        }
    };
}

fn batch_tensors<B: Backend>(split: &Split, idx: &[usize], device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let mut x = Vec::with_capacity(idx.len() * 784);
    for &i in idx {
        x.extend_from_slice(&split.images[i * 784..(i + 1) * 784]);
    }
    let y: Vec<i64> = idx.iter().map(|&i| split.labels[i] as i64).collect();
    (
        Tensor::from_data(TensorData::new(x, [idx.len(), 784]), device),
        Tensor::from_data(TensorData::new(y, [idx.len()]), device),
    )
}

fn grad_of<N: Net<Train>>(net: N, params: &[f32], data: &Split, idx: &[usize], out: &mut [f32]) -> f64 {
    let device = Default::default();
    let net = flat::from_flat(net, params);
    let (x, y) = batch_tensors::<Train>(data, idx, &device);
    let loss = CrossEntropyLossConfig::new().init(&device).forward(net.logits(x), y);
    let value = loss.clone().into_scalar() as f64;
    let grads = loss.backward();
    out.copy_from_slice(&flat::grads_flat(&net, &grads));
    value
}

fn eval_of<N: Net<Cpu>>(net: N, params: &[f32], data: &Split) -> Evaluation {
    let device = Default::default();
    let net = flat::from_flat(net, params);
    let (mut loss, mut right) = (0.0, 0usize);
    let all: Vec<usize> = (0..data.len()).collect();
    for chunk in all.chunks(2000) {
        let (x, y) = batch_tensors::<Cpu>(data, chunk, &device);
        let logits = net.logits(x);
        let pred: Vec<i64> = logits.clone().argmax(1).into_data().convert::<i64>().to_vec().expect("ints");
        right += pred.iter().zip(chunk).filter(|(p, &i)| **p == data.labels[i] as i64).count();
        let l = CrossEntropyLossConfig::new().init(&device).forward(logits, y).into_scalar() as f64;
        loss += l * chunk.len() as f64;
    }
    Evaluation { loss: loss / data.len() as f64, accuracy: Some(right as f64 / data.len() as f64) }
}

impl BurnNet {
    /// A network of `kind` on `data`, initialised from `init_seed`.
    pub fn new(kind: NetKind, data: Arc<FashionMnist>, init_seed: u64) -> Self {
        let device = Default::default();
        let params = with_net!(&kind, Cpu, &device, net => flat::count(&net));
        BurnNet { kind, data, init_seed, params }
    }
}

impl Workload for BurnNet {
    fn name(&self) -> &str {
        match self.kind {
            NetKind::Mlp { .. } => "mlp",
            NetKind::Cnn => "cnn",
        }
    }
    fn param_count(&self) -> usize {
        self.params
    }
    fn parallel_gradients(&self) -> bool {
        true
    }
    fn init(&self) -> Vec<f32> {
        let device = Default::default();
        let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(self.init_seed);
        with_net!(&self.kind, Cpu, &device, net => flat::to_flat(&flat::init(net, &mut rng)))
    }
    fn gradient(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64 {
        let mut rng = job_rng(req.seed);
        let n = self.data.train.len();
        let idx: Vec<usize> = (0..req.batch.max(1)).map(|_| rng.random_range(0..n)).collect();
        let device = Default::default();
        with_net!(&self.kind, Train, &device, net => grad_of(net, params, &self.data.train, &idx, grad))
    }
    fn evaluate(&self, params: &[f32]) -> Evaluation {
        let device = Default::default();
        with_net!(&self.kind, Cpu, &device, net => eval_of(net, params, &self.data.test))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fashion_mnist::resolve_dir;

    fn data() -> Arc<FashionMnist> {
        dataset(&resolve_dir(None)).expect(".ci/run installs dataset-fashion-mnist")
    }

    #[test]
    fn a_flat_round_trip_is_bit_exact() {
        for kind in [NetKind::Mlp { hidden: vec![64] }, NetKind::Cnn] {
            let device = Default::default();
            let p: Vec<f32> = (0..with_net!(&kind, Cpu, &device, n => flat::count(&n)))
                .map(|i| ((i as f32) * 0.618).sin() * 1e-3 + f32::EPSILON * i as f32)
                .collect();
            let back = with_net!(&kind, Cpu, &device, n => flat::to_flat(&flat::from_flat(n, &p)));
            assert_eq!(
                p.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                back.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn parameter_counts_match_the_architectures() {
        let d = data();
        assert_eq!(
            BurnNet::new(NetKind::Mlp { hidden: vec![256, 128] }, d.clone(), 1).param_count(),
            784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10
        );
        assert_eq!(
            BurnNet::new(NetKind::Cnn, d, 1).param_count(),
            (16 * 9 + 16) + (32 * 16 * 9 + 32) + (32 * 49 * 10 + 10)
        );
    }

    #[test]
    fn the_gradient_matches_finite_differences() {
        let net = BurnNet::new(NetKind::Mlp { hidden: vec![16] }, data(), 3);
        let p = net.init();
        let req = GradRequest { worker: 0, batch: 8, seed: 11 };
        let mut g = vec![0.0; p.len()];
        net.gradient(&p, req, &mut g);
        let mut scratch = vec![0.0; p.len()];
        // The largest gradient entries, where f32 finite differences are accurate.
        let mut order: Vec<usize> = (0..p.len()).collect();
        order.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
        for &j in &order[..5] {
            let (mut a, mut b) = (p.clone(), p.clone());
            a[j] += 1e-2;
            b[j] -= 1e-2;
            let fd = (net.gradient(&a, req, &mut scratch) - net.gradient(&b, req, &mut scratch)) / 2e-2;
            assert!((fd - g[j] as f64).abs() < 0.05 * g[j].abs() as f64 + 1e-3, "param {j}: fd {fd} vs {}", g[j]);
        }
    }

    #[test]
    fn the_mlp_beats_80_percent_after_a_few_hundred_steps() {
        let net = BurnNet::new(NetKind::Mlp { hidden: vec![128] }, data(), 1);
        let mut p = net.init();
        let before = net.evaluate(&p);
        let mut g = vec![0.0; p.len()];
        for step in 0..500 {
            net.gradient(&p, GradRequest { worker: 0, batch: 64, seed: step }, &mut g);
            p.iter_mut().zip(&g).for_each(|(x, g)| *x -= 0.3 * g);
        }
        let after = net.evaluate(&p);
        assert!(before.accuracy.unwrap() < 0.3, "{before:?}");
        assert!(after.accuracy.unwrap() > 0.8, "{after:?}");
    }
}
