//! Real networks in burn on Fashion-MNIST, behind the [`Workload`] trait.
//!
//! Gradients are computed with autodiff on burn's `flex` CPU backend (bitwise reproducible across
//! runs and thread counts) or, with the `cuda` feature, on a GPU ([`device`]). Parameters and
//! gradients cross the boundary as one flat `f32` vector ([`flat`]); every call builds a fresh
//! replica from its configuration and loads the vector into it, so replicas never share state
//! (an MLP on the CPU needs no replica: [`mlp_grad`] computes autodiff's bits from the flat
//! vector itself). A
//! minibatch is `batch` training images drawn uniformly with replacement from the request's seed
//! (each worker's seeds come from its own named stream, so each worker has its own sample order).
//! Initial parameters come from a ChaCha stream of `init_seed`, not from burn's random state.
//!
//! # BatchNorm (ResNet-20, ResNet-18)
//! Running statistics are state, not parameters: they are not in the flat vector, so no algorithm
//! sends, averages or stores them, and every algorithm treats them the same way. A gradient is
//! computed in training mode, where BatchNorm normalises with the minibatch's own statistics and
//! the running statistics play no part. At evaluation the statistics of the evaluated parameters
//! are recomputed exactly ("precise BN", Wu & Johnson 2021): one training-mode forward pass over a
//! fixed calibration set of [`BN_CALIBRATION`] training images with momentum 1, then inference
//! with those statistics. So the evaluated model (a synchronous replica, a gossip or EASGD
//! consensus average, the parameter server's shards) always carries statistics that match its
//! parameters, which an average of per-worker running means would not, and an evaluation is a
//! pure function of the parameters.

pub mod block;
pub mod cnn;
pub mod cnn_grad;
pub mod device;
pub mod flat;
pub mod flops;
pub mod mlp;
pub mod mlp_grad;
pub mod resnet18;
pub mod resnet20;

use crate::fashion_mnist::{FashionMnist, Split};
use crate::idx::DataError;
use crate::partition::{self, Partition, Parts};
use crate::{job_rng, Evaluation, GradRequest, Workload};
use burn::backend::{Autodiff, Flex};
use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use cnn::Cnn;
pub use device::{Device, DeviceError};
use mlp::Mlp;
use rand::Rng;
use rand::SeedableRng;
use resnet18::ResNet18;
use resnet20::ResNet20;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

type CpuTrain = Autodiff<Flex>;
#[cfg(feature = "cuda")]
type CudaTrain = Autodiff<burn::backend::Cuda>;

/// Training images whose statistics set BatchNorm's running statistics at evaluation (default).
pub const BN_CALIBRATION: usize = 512;
/// Seed of the calibration images' choice.
const BN_SEED: u64 = 0x0062_6e63_616c_6962;

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
    /// ResNet-20 ([`resnet20`]).
    ResNet20,
    /// ResNet-18 ([`resnet18`]).
    ResNet18,
}

impl NetKind {
    /// The short name: `mlp`, `cnn`, `resnet20`, `resnet18`.
    pub fn name(&self) -> &'static str {
        match self {
            NetKind::Mlp { .. } => "mlp",
            NetKind::Cnn => "cnn",
            NetKind::ResNet20 => "resnet20",
            NetKind::ResNet18 => "resnet18",
        }
    }
    /// True if the network has BatchNorm layers.
    pub fn has_batch_norm(&self) -> bool {
        matches!(self, NetKind::ResNet20 | NetKind::ResNet18)
    }
}

/// A network's forward pass.
trait Net<B: Backend>: Module<B> {
    fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2>;
}
macro_rules! impl_net {
    ($($t:ident),*) => {$(
        impl<B: Backend> Net<B> for $t<B> {
            fn logits(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
                self.forward(x)
            }
        }
    )*};
}
impl_net!(Mlp, Cnn, ResNet20, ResNet18);

/// Reshapes flattened square images `[n, channels·side²]` to `[n, channels, side, side]`.
pub fn to_images<B: Backend>(x: Tensor<B, 2>, channels: usize) -> Tensor<B, 4> {
    let [n, d] = x.dims();
    let side = ((d / channels) as f64).sqrt().round() as usize;
    x.reshape([n, channels, side, side])
}

/// Global average pooling `[n, c, h, w]` → `[n, c]`.
pub fn global_pool<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 2> {
    let [n, c, _, _] = x.dims();
    x.mean_dim(3).mean_dim(2).reshape([n, c])
}

/// A burn network on Fashion-MNIST.
pub struct BurnNet {
    kind: NetKind,
    data: Arc<FashionMnist>,
    init_seed: u64,
    params: usize,
    device: Device,
    test_samples: usize,
    calibration: usize,
    /// The training set split among workers, and each worker's label histogram.
    parts: Option<Arc<(Parts, Vec<Vec<u64>>)>>,
    /// The initial parameters, drawn once: every node of a run starts from them, and building
    /// the network to draw them cost 100 workers a tenth of a second.
    initial: OnceLock<Vec<f32>>,
}

/// How the layers of a network built from its config are filled: with zeros. Every network is
/// built only to have its parameters replaced (from a flat vector, or by [`flat::init`] from the
/// run's own generator), so drawing random initial values there would be wasted; it also took
/// burn's process-wide random generator, whose lock let only one thread build a network at a
/// time.
pub const SKELETON: burn::nn::Initializer = burn::nn::Initializer::Zeros;

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

fn widths(hidden: &[usize], inputs: usize, classes: usize) -> Vec<usize> {
    std::iter::once(inputs).chain(hidden.iter().copied()).chain(std::iter::once(classes)).collect()
}

/// Builds `$net`, the network of `$kind` on backend `$B` for `$ch`-channel 28x28 input and `$cl`
/// classes with BatchNorm momentum `$m`, and evaluates `$body` with it.
macro_rules! with_net {
    ($kind:expr, $B:ty, $dev:expr, $ch:expr, $cl:expr, $m:expr, $net:ident => $body:expr) => {
        match $kind {
            NetKind::Mlp { hidden } => {
                let $net = Mlp::<$B>::new(&widths(hidden, $ch * 784, $cl), $dev);
                $body
            }
            NetKind::Cnn => {
                let $net = Cnn::<$B>::new($ch, $cl, $dev);
                $body
            }
            NetKind::ResNet20 => {
                let $net = ResNet20::<$B>::new($ch, $cl, $m, $dev);
                $body
            }
            NetKind::ResNet18 => {
                let $net = ResNet18::<$B>::new($ch, $cl, $m, $dev);
                $body
            }
        }
    };
}

/// `(trainable parameters, BatchNorm running-statistic values)` of `kind` for `channels`-channel
/// 28x28 input and `classes` classes (the counts do not depend on the image size).
pub fn parameter_counts(kind: &NetKind, channels: usize, classes: usize) -> (usize, usize) {
    let device = Default::default();
    with_net!(kind, Flex, &device, channels, classes, 0.1, net => flat::counts(&net))
}

/// The images (`[n, 784]` row-major) and labels of the samples `idx`.
fn gather(split: &Split, idx: &[usize]) -> (Vec<f32>, Vec<i64>) {
    let mut x = Vec::with_capacity(idx.len() * 784);
    for &i in idx {
        split.image(i, &mut x);
    }
    (x, idx.iter().map(|&i| split.labels[i] as i64).collect())
}

fn batch_tensors<B: Backend>(split: &Split, idx: &[usize], device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let (x, y) = gather(split, idx);
    (
        Tensor::from_data(TensorData::new(x, [idx.len(), 784]), device),
        Tensor::from_data(TensorData::new(y, [idx.len()]), device),
    )
}

fn grad_of<B: AutodiffBackend, N: Net<B>>(
    net: N,
    params: &[f32],
    data: &Split,
    idx: &[usize],
    out: &mut [f32],
    device: &B::Device,
) -> f64 {
    grad_with(&flat::from_flat(net, params), data, idx, out, device)
}

/// The minibatch `idx` gradient of the loaded network `net`, written into `out`.
fn grad_with<B: AutodiffBackend, N: Net<B>>(
    net: &N,
    data: &Split,
    idx: &[usize],
    out: &mut [f32],
    device: &B::Device,
) -> f64 {
    let (x, y) = batch_tensors::<B>(data, idx, device);
    let loss = CrossEntropyLossConfig::new().init(device).forward(net.logits(x), y);
    let value = loss.clone().into_scalar().elem::<f64>();
    let mut grads = loss.backward();
    flat::grads_into(net, &mut grads, out);
    value
}

/// Steps per second of a plain burn training loop on the CPU: one module kept across steps,
/// forward, backward and burn's SGD at batch `batch`, no flat vectors and no engine. The
/// reference the engine's real-gradient throughput is compared with (`dsgd bench-real`).
pub fn plain_loop(kind: &NetKind, data: &FashionMnist, batch: usize, steps: usize) -> f64 {
    use burn::optim::{GradientsParams, Optimizer, SgdConfig};
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut rng = job_rng(0);
    let n = data.train.len();
    with_net!(kind, B, &device, 1, 10, 0.1, net => {
        let mut net = flat::init(net, &mut rand_chacha::ChaCha12Rng::seed_from_u64(1));
        let mut optim = SgdConfig::new().init();
        let started = std::time::Instant::now();
        for _ in 0..steps {
            let idx: Vec<usize> = (0..batch.max(1)).map(|_| rng.random_range(0..n)).collect();
            let (x, y) = batch_tensors::<B>(&data.train, &idx, &device);
            let loss = CrossEntropyLossConfig::new().init(&device).forward(net.logits(x), y);
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = optim.step(0.01, net, grads);
        }
        steps as f64 / started.elapsed().as_secs_f64()
    })
}

/// Evaluates `params` on `test`; `net` was built with BatchNorm momentum 1, so one training-mode
/// pass over `calibration` sets its running statistics to that set's statistics.
/// Test images a chunk of an evaluation scores at once.
const EVAL_CHUNK: usize = 1000;

fn eval_of<B: AutodiffBackend, N>(
    net: N,
    params: &[f32],
    calibration: Option<(&Split, &[usize])>,
    test: &Split,
    test_samples: usize,
    threads: usize,
    device: &B::Device,
) -> Evaluation
where
    N: Net<B> + AutodiffModule<B>,
    N::InnerModule: Net<B::InnerBackend> + Send + Sync,
{
    let net = flat::from_flat(net, params).no_grad();
    if let Some((train, idx)) = calibration {
        let (x, _) = batch_tensors::<B>(train, idx, device);
        let _ = net.logits(x);
    }
    let net = net.valid();
    let device = &net.devices()[0];
    // Each chunk's loss (its mean times its length) and count of right answers, summed in chunk
    // order whichever thread scored it: the bits do not depend on `threads`.
    let score = |chunk: &[usize]| -> (f64, usize) {
        let (x, y) = batch_tensors::<B::InnerBackend>(test, chunk, device);
        let logits = net.logits(x);
        let pred: Vec<i64> = logits.clone().argmax(1).into_data().convert::<i64>().to_vec().expect("ints");
        let right = pred.iter().zip(chunk).filter(|(p, &i)| **p == test.labels[i] as i64).count();
        let l = CrossEntropyLossConfig::new().init(device).forward(logits, y).into_scalar().elem::<f64>();
        (l * chunk.len() as f64, right)
    };
    let all: Vec<usize> = (0..test_samples).collect();
    let chunks: Vec<&[usize]> = all.chunks(EVAL_CHUNK).collect();
    let scores = crate::par::by_item(chunks, threads, score);
    let (mut loss, mut right) = (0.0, 0usize);
    for (l, r) in scores {
        loss += l;
        right += r;
    }
    Evaluation { loss: loss / test_samples as f64, accuracy: Some(right as f64 / test_samples as f64) }
}

impl BurnNet {
    /// The minibatch of a gradient request: sample indices drawn from the job's own stream.
    fn minibatch(&self, req: GradRequest) -> Vec<usize> {
        let mut rng = job_rng(req.seed);
        let n = self.data.train.len();
        let parts = self.parts.as_deref().map(|p| &p.0);
        (0..req.batch.max(1)).map(|_| partition::draw(parts, req.worker, n, &mut rng)).collect()
    }

    /// A network of `kind` on `data`, initialised from `init_seed`, computing on the CPU.
    pub fn new(kind: NetKind, data: Arc<FashionMnist>, init_seed: u64) -> Self {
        let params = parameter_counts(&kind, 1, 10).0;
        let test_samples = data.test.len();
        BurnNet {
            kind,
            data,
            init_seed,
            params,
            device: Device::Cpu,
            test_samples,
            calibration: BN_CALIBRATION,
            parts: None,
            initial: OnceLock::new(),
        }
    }

    /// Splits the training set among `workers` workers (see [`crate::partition`]); every draw
    /// comes from `rng`.
    pub fn with_partition(mut self, partition: Partition, workers: usize, rng: &mut impl rand::Rng) -> Self {
        let labels: Vec<u32> = self.data.train.labels.iter().map(|&y| y as u32).collect();
        self.parts = partition.split(&labels, 10, workers, rng).map(|p| {
            let h = p.histograms(&labels, 10);
            Arc::new((p, h))
        });
        self
    }

    /// Evaluates on the first `test_samples` test images (all by default) and sets BatchNorm
    /// statistics from `calibration` training images ([`BN_CALIBRATION`] by default); both are
    /// clamped to the dataset's size, and at least 1.
    pub fn with_evaluation(mut self, test_samples: usize, calibration: usize) -> Self {
        self.test_samples = test_samples.clamp(1, self.data.test.len());
        self.calibration = calibration.clamp(1, self.data.train.len());
        self
    }

    /// The same network computing on `device`; an error if the device cannot be used.
    pub fn with_device(
        kind: NetKind,
        data: Arc<FashionMnist>,
        init_seed: u64,
        device: Device,
    ) -> Result<Self, DeviceError> {
        device.check()?;
        Ok(BurnNet { device, ..BurnNet::new(kind, data, init_seed) })
    }

    /// The device gradients are computed on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The network.
    pub fn kind(&self) -> &NetKind {
        &self.kind
    }

    /// For an MLP on the CPU, the one network whose gradient takes [`mlp_grad`]: its layer
    /// widths and the job's minibatch (images, labels). `None` for every other network.
    fn lean_mlp_batch(&self, req: GradRequest) -> Option<(Vec<usize>, Vec<f32>, Vec<i64>)> {
        let (Device::Cpu, NetKind::Mlp { hidden }) = (self.device, &self.kind) else { return None };
        let (x, y) = gather(&self.data.train, &self.minibatch(req));
        Some((widths(hidden, 784, 10), x, y))
    }

    /// For the CNN on the CPU, the one path its gradient takes ([`cnn_grad`]): the job's
    /// minibatch. `None` for every other network.
    fn lean_cnn_batch(&self, req: GradRequest) -> Option<(Vec<f32>, Vec<i64>)> {
        let (Device::Cpu, NetKind::Cnn) = (self.device, &self.kind) else { return None };
        Some(gather(&self.data.train, &self.minibatch(req)))
    }

    fn calibration_indices(&self) -> Vec<usize> {
        let mut rng = job_rng(BN_SEED);
        let n = self.data.train.len();
        (0..self.calibration).map(|_| rng.random_range(0..n)).collect()
    }
}

/// Runs `$body` with `$B` the autodiff backend of `$device` and `$dev` its burn device.
macro_rules! on_device {
    ($device:expr, $B:ident, $dev:ident => $body:expr) => {
        match $device {
            Device::Cpu => {
                type $B = CpuTrain;
                let $dev = &Default::default();
                $body
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(n) => {
                type $B = CudaTrain;
                let $dev = &burn::backend::cuda::CudaDevice::new(n);
                $body
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => unreachable!("BurnNet::with_device refuses CUDA in a build without it"),
        }
    };
}

impl Workload for BurnNet {
    fn name(&self) -> &str {
        self.kind.name()
    }
    fn param_count(&self) -> usize {
        self.params
    }
    fn profile(&self) -> crate::profile::Profile {
        crate::profile::Profile::of_net(&self.kind, 1, 10)
    }
    fn parallel_gradients(&self) -> bool {
        self.device == Device::Cpu
    }
    fn init(&self) -> Vec<f32> {
        let draw = || {
            let device = Default::default();
            let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(self.init_seed);
            with_net!(&self.kind, Flex, &device, 1, 10, 0.1, net => flat::to_flat(&flat::init(net, &mut rng)))
        };
        self.initial.get_or_init(draw).clone()
    }
    fn gradient(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64 {
        if let Some((widths, x, y)) = self.lean_mlp_batch(req) {
            return mlp_grad::gradient(&widths, params, &x, &y, grad);
        }
        if let Some((x, y)) = self.lean_cnn_batch(req) {
            return cnn_grad::gradient(params, &x, &y, grad);
        }
        self.gradient_autodiff(params, req, grad)
    }
    fn gradient_owned(&self, params: &Arc<Vec<f32>>, req: GradRequest) -> (Vec<f32>, f64) {
        if let Some((widths, x, y)) = self.lean_mlp_batch(req) {
            return mlp_grad::gradient_owned(&widths, params, &x, &y);
        }
        if let Some((x, y)) = self.lean_cnn_batch(req) {
            let mut g = vec![0.0; cnn_grad::PARAMS];
            let loss = cnn_grad::gradient(params, &x, &y, &mut g);
            return (g, loss);
        }
        crate::gradient_zeroed(self, params, req)
    }
    fn label_histograms(&self) -> Option<Vec<Vec<u64>>> {
        self.parts.as_ref().map(|p| p.1.clone())
    }
    fn evaluate(&self, params: &[f32]) -> Evaluation {
        self.evaluate_on(params, 1)
    }
    fn evaluate_on(&self, params: &[f32], threads: usize) -> Evaluation {
        if let (Device::Cpu, NetKind::Cnn) = (self.device, &self.kind) {
            return self.evaluate_lean_cnn(params);
        }
        self.evaluate_burn_on(params, threads)
    }
}

impl BurnNet {
    /// The CNN's evaluation on the CPU: the forward pass of its gradient ([`cnn_grad::evaluate`]),
    /// so that evaluating costs what a forward pass does (through burn's modules it cost ten
    /// times that, and most of a CNN run's time) and reads the same activations as training.
    fn evaluate_lean_cnn(&self, params: &[f32]) -> Evaluation {
        let all: Vec<usize> = (0..self.test_samples).collect();
        let (x, y) = gather(&self.data.test, &all);
        let (loss, right) = cnn_grad::evaluate(params, &x, &y);
        let n = self.test_samples as f64;
        Evaluation { loss: loss / n, accuracy: Some(right as f64 / n) }
    }

    /// The evaluation through burn's modules, for every network (the reference the CNN's own
    /// evaluation is tested against).
    pub fn evaluate_burn(&self, params: &[f32]) -> Evaluation {
        self.evaluate_burn_on(params, 1)
    }

    /// [`BurnNet::evaluate_burn`] with the test set's chunks scored on up to `threads` threads
    /// (the same bits).
    pub fn evaluate_burn_on(&self, params: &[f32], threads: usize) -> Evaluation {
        // A GPU scores a chunk faster than a thread starts.
        let threads = if matches!(self.device, Device::Cpu) { threads } else { 1 };
        let idx = self.calibration_indices();
        let calibration = self.kind.has_batch_norm().then_some((&self.data.train, idx.as_slice()));
        on_device!(self.device, B, dev => with_net!(&self.kind, B, dev, 1, 10, 1.0, net =>
            eval_of::<B, _>(net, params, calibration, &self.data.test, self.test_samples, threads, dev)))
    }

    /// The gradient through burn's autodiff on a module loaded with `params`: the path of every
    /// network but an MLP on the CPU, whose [`mlp_grad`] path gives the same bits faster (kept
    /// as the reference it is tested and benchmarked against).
    pub fn gradient_autodiff(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64 {
        let idx = self.minibatch(req);
        on_device!(self.device, B, dev => with_net!(&self.kind, B, dev, 1, 10, 0.1, net =>
            grad_of::<B, _>(net, params, &self.data.train, &idx, grad, dev)))
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
    fn the_lean_mlp_gradient_has_the_bits_of_autodiff() {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for hidden in [vec![128], vec![16], vec![64, 32], vec![]] {
            let net = BurnNet::new(NetKind::Mlp { hidden: hidden.clone() }, data(), 5);
            let mut p = net.init();
            let (mut lean, mut reference) = (vec![0.0; p.len()], vec![0.0; p.len()]);
            // Along a short SGD trajectory (dead and live ReLUs, several batch sizes).
            for (k, batch) in [32, 1, 7, 64, 32, 200].into_iter().enumerate() {
                let req = GradRequest { worker: k, batch, seed: 40 + k as u64 };
                // The owned gradient goes into memory that is not zeroed first (taken before the
                // reference, whose freed buffers would hold the right values; `mlp_grad`'s own
                // test fills that memory with NaNs).
                let (owned, l0) = net.gradient_owned(&Arc::new(p.clone()), req);
                let l1 = net.gradient(&p, req, &mut lean);
                let l2 = net.gradient_autodiff(&p, req, &mut reference);
                assert_eq!(l1.to_bits(), l2.to_bits(), "{hidden:?} batch {batch}: loss");
                assert!(bits(&lean) == bits(&reference), "{hidden:?} batch {batch}: gradient");
                assert!(lean.iter().any(|&g| g != 0.0));
                assert_eq!(l0.to_bits(), l2.to_bits(), "{hidden:?} batch {batch}: owned loss");
                assert!(bits(&owned) == bits(&reference), "{hidden:?} batch {batch}: owned gradient");
                p.iter_mut().zip(&lean).for_each(|(x, g)| *x -= 0.5 * g);
            }
        }
    }

    /// FNV-1a of a vector's bits.
    fn fingerprint(v: &[f32]) -> u64 {
        v.iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
    }

    /// The CNN's lean gradient against autodiff's: the largest difference relative to the largest
    /// gradient element, and the loss's relative difference, over several parameter vectors
    /// (the initial one and two after steps) and batches.
    pub(crate) fn cnn_lean_vs_autodiff(net: &BurnNet) -> (f64, f64) {
        let mut p = net.init();
        let (mut worst, mut worst_loss) = (0f64, 0f64);
        for (k, batch) in [32usize, 7, 64].into_iter().enumerate() {
            let req = GradRequest { worker: k, batch, seed: 40 + k as u64 };
            let (mut lean, mut reference) = (vec![f32::NAN; p.len()], vec![0.0; p.len()]);
            let l1 = net.gradient(&p, req, &mut lean);
            let l2 = net.gradient_autodiff(&p, req, &mut reference);
            let scale = reference.iter().fold(0f32, |m, g| m.max(g.abs())) as f64;
            let diff = lean.iter().zip(&reference).map(|(a, b)| (a - b).abs() as f64).fold(0.0, f64::max);
            assert!(lean.iter().all(|g| g.is_finite()), "every element is written");
            worst = worst.max(diff / scale);
            worst_loss = worst_loss.max((l1 - l2).abs() / l2.abs());
            p.iter_mut().zip(&reference).for_each(|(x, g)| *x -= 0.5 * g);
        }
        (worst, worst_loss)
    }

    #[test]
    fn the_lean_cnn_gradient_is_autodiffs_to_rounding() {
        let net = BurnNet::new(NetKind::Cnn, data(), 3);
        let (grad, loss) = cnn_lean_vs_autodiff(&net);
        eprintln!("CNN lean gradient vs autodiff: {grad:.2e} of the largest element; loss {loss:.2e}");
        assert!(grad < 1e-5 && loss < 1e-6, "{grad:e} {loss:e}");
    }

    #[test]
    fn the_initial_parameters_are_the_same_on_every_call() {
        // Drawn once and kept: a later call, and a fresh network of the same seed, give the same
        // bits; another seed gives others.
        let kind = NetKind::Mlp { hidden: vec![16] };
        let net = BurnNet::new(kind.clone(), data(), 9);
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        let first = bits(net.init());
        assert_eq!(bits(net.init()), first);
        assert_eq!(bits(BurnNet::new(kind.clone(), data(), 9).init()), first);
        assert_ne!(bits(BurnNet::new(kind, data(), 10).init()), first);
    }

    #[test]
    fn an_evaluation_on_threads_has_the_bits_of_one_thread() {
        // 2,500 images: two full chunks and a part, spread over two and three threads.
        let net = BurnNet::new(NetKind::Mlp { hidden: vec![128] }, data(), 4).with_evaluation(2500, 32);
        let mut p = net.init();
        let mut g = vec![0.0; p.len()];
        for step in 0..5 {
            net.gradient(&p, GradRequest { worker: 0, batch: 32, seed: step }, &mut g);
            p.iter_mut().zip(&g).for_each(|(x, d)| *x -= 0.1 * d);
        }
        let one = net.evaluate(&p);
        for threads in [2, 3, 8] {
            let many = net.evaluate_on(&p, threads);
            assert_eq!(many.loss.to_bits(), one.loss.to_bits(), "{threads} threads");
            assert_eq!(many.accuracy, one.accuracy, "{threads} threads");
        }
    }

    #[test]
    fn the_lean_cnn_evaluation_is_burns_to_rounding() {
        // 2,000 test images, at the initial parameters and after a few steps (so that the
        // logits are not all alike).
        let net = BurnNet::new(NetKind::Cnn, data(), 3).with_evaluation(2000, 32);
        let mut p = net.init();
        let mut g = vec![0.0; p.len()];
        for step in 0..=40 {
            if step % 20 == 0 {
                let (lean, burn) = (net.evaluate(&p), net.evaluate_burn(&p));
                let (a, b) = (lean.accuracy.unwrap(), burn.accuracy.unwrap());
                eprintln!("step {step}: loss {} vs {}, accuracy {a} vs {b}", lean.loss, burn.loss);
                assert!((lean.loss - burn.loss).abs() < 1e-5 * burn.loss.abs().max(1.0), "{lean:?} {burn:?}");
                // An image whose two largest logits are within rounding may go either way.
                assert!((a - b).abs() <= 1.0 / 2000.0, "{lean:?} {burn:?}");
            }
            net.gradient(&p, GradRequest { worker: 0, batch: 32, seed: step }, &mut g);
            p.iter_mut().zip(&g).for_each(|(x, d)| *x -= 0.1 * d);
        }
    }

    #[test]
    fn gradients_and_evaluations_have_the_same_bits_on_every_machine() {
        // Fixed bits, recorded once: gemm's blocking follows nominal caches, not the machine's
        // (models/vendor/gemm-common), so an Intel L1 of 48 KiB and an AMD one of 32 KiB give
        // these same bits. Products of depth 784 (the first layer, forward), 600 (its weight
        // gradient at batch 600) and 576 (ResNet-20's 64-channel 3×3 convolutions) are each
        // summed in more than one block on some machines and in one on others.
        let mlp = BurnNet::new(NetKind::Mlp { hidden: vec![128] }, data(), 5).with_evaluation(500, 32);
        let p = Arc::new(mlp.init());
        let mut seen = Vec::new();
        for batch in [32, 600] {
            let (g, loss) = mlp.gradient_owned(&p, GradRequest { worker: 1, batch, seed: 77 });
            seen.push((format!("mlp gradient, batch {batch}"), fingerprint(&g) ^ loss.to_bits()));
        }
        let e = mlp.evaluate(&p);
        seen.push(("mlp evaluation".into(), e.loss.to_bits() ^ e.accuracy.unwrap().to_bits()));
        let resnet = BurnNet::new(NetKind::ResNet20, data(), 5);
        let q = resnet.init();
        let mut g = vec![0.0; q.len()];
        let loss = resnet.gradient(&q, GradRequest { worker: 0, batch: 2, seed: 3 }, &mut g);
        seen.push(("resnet20 gradient, batch 2".into(), fingerprint(&g) ^ loss.to_bits()));
        // The CNN's own path (cnn_grad.rs): its gemm products of depth 144 and 6,272 as well.
        let cnn = BurnNet::new(NetKind::Cnn, data(), 5);
        let c = Arc::new(cnn.init());
        let (g, loss) = cnn.gradient_owned(&c, GradRequest { worker: 2, batch: 32, seed: 11 });
        seen.push(("cnn gradient, batch 32".into(), fingerprint(&g) ^ loss.to_bits()));
        let expected: [u64; 5] = [
            0x0cae_36f9_e58e_1f1f,
            0x2599_71ef_38f1_3f2f,
            0x7fc4_2986_420c_49ba,
            0x1c37_a7d8_b6c2_3832,
            0x46fd_3882_4c33_3979,
        ];
        let wrong: Vec<String> = seen
            .iter()
            .zip(expected)
            .filter(|((_, got), want)| got != want)
            .map(|((what, got), want)| format!("{what}: {got:#018x}, recorded {want:#018x}"))
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn a_flat_round_trip_is_bit_exact() {
        for kind in [NetKind::Mlp { hidden: vec![64] }, NetKind::Cnn, NetKind::ResNet20] {
            let device = Default::default();
            let n = parameter_counts(&kind, 1, 10).0;
            let p: Vec<f32> = (0..n).map(|i| ((i as f32) * 0.618).sin() * 1e-3 + f32::EPSILON * i as f32).collect();
            let back = with_net!(&kind, Flex, &device, 1, 10, 0.1, n => flat::to_flat(&flat::from_flat(n, &p)));
            assert_eq!(
                p.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn parameter_counts_match_the_standard_figures() {
        assert_eq!(
            parameter_counts(&NetKind::Mlp { hidden: vec![256, 128] }, 1, 10).0,
            784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10
        );
        assert_eq!(parameter_counts(&NetKind::Cnn, 1, 10).0, (16 * 9 + 16) + (32 * 16 * 9 + 32) + (32 * 49 * 10 + 10));
        // torchvision's resnet18(): 11,689,512 trainable parameters; 9,600 running-statistic
        // values (mean and variance of 4,800 BatchNorm channels) are state.
        assert_eq!(parameter_counts(&NetKind::ResNet18, 3, 1000), (11_689_512, 9_600));
        // On Fashion-MNIST: a one-channel stem (2·64·49 fewer) and 10 classes (990·513 fewer).
        assert_eq!(parameter_counts(&NetKind::ResNet18, 1, 10).0, 11_689_512 - 2 * 64 * 49 - 990 * 513);
        // He et al.'s ResNet-20 with parameter-free shortcuts: 0.27M (269,722) on CIFAR-10.
        assert_eq!(parameter_counts(&NetKind::ResNet20, 3, 10), (269_722, 2 * (16 + 6 * (16 + 32 + 64))));
        // One input channel: the first convolution has 2·16·9 fewer weights.
        assert_eq!(parameter_counts(&NetKind::ResNet20, 1, 10).0, 269_722 - 2 * 16 * 9);
    }

    #[test]
    fn batch_norm_networks_learn_and_their_evaluation_is_a_pure_function_of_the_parameters() {
        let net = BurnNet::new(NetKind::ResNet20, data(), 2).with_evaluation(200, 64);
        let p0 = net.init();
        let mut p = p0.clone();
        let mut g = vec![0.0; p.len()];
        let req = |seed| GradRequest { worker: 0, batch: 16, seed };
        let first = net.gradient(&p, req(1), &mut g);
        assert!(g.iter().all(|x| x.is_finite()) && g.iter().any(|&x| x != 0.0));
        for step in 0..12 {
            net.gradient(&p, req(100 + step), &mut g);
            p.iter_mut().zip(&g).for_each(|(x, g)| *x -= 0.05 * g);
        }
        // The minibatch loss of the first batch falls after 12 steps of SGD.
        assert!(net.gradient(&p, req(1), &mut g) < first);
        // BatchNorm statistics are recomputed for the parameters evaluated: evaluating another
        // model in between changes nothing, and two replicas never share them.
        let a = net.evaluate(&p);
        let _ = net.evaluate(&p0);
        let b = net.evaluate(&p);
        assert_eq!(a.loss.to_bits(), b.loss.to_bits());
        let before = net.evaluate(&p0);
        assert!(a.loss < before.loss && a.accuracy.unwrap() > 0.3, "{before:?} -> {a:?}");
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
