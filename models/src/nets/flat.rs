//! Flat exchange: a module's float parameters leave as one `f32` vector (one concatenation, one
//! read-back) and enter from one, in the module's visiting order; gradients likewise.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha12Rng;

struct Collect<B: Backend> {
    parts: Vec<Tensor<B, 1>>,
}

impl<B: Backend> ModuleVisitor<B> for Collect<B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let t = param.val();
        let n = t.shape().num_elements();
        self.parts.push(t.reshape([n]));
    }
}

/// The module's float parameters as one vector.
pub fn to_flat<B: Backend, M: Module<B>>(module: &M) -> Vec<f32> {
    let mut c = Collect { parts: Vec::new() };
    module.visit(&mut c);
    if c.parts.is_empty() {
        return Vec::new();
    }
    Tensor::cat(c.parts, 0).into_data().to_vec::<f32>().expect("float parameters are f32")
}

/// Number of float parameters.
pub fn count<B: Backend, M: Module<B>>(module: &M) -> usize {
    module.num_params()
}

struct Load<'a> {
    src: &'a [f32],
    pos: usize,
}

impl<B: Backend> ModuleMapper<B> for Load<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let shape = param.shape();
        let n = shape.num_elements();
        let data = TensorData::new(self.src[self.pos..self.pos + n].to_vec(), shape);
        self.pos += n;
        let device = param.lazy_device();
        param.map(|old| {
            let t = Tensor::<B, D>::from_data(data, &device);
            if old.is_require_grad() {
                t.require_grad()
            } else {
                t
            }
        })
    }
}

/// Loads `flat` (as produced by [`to_flat`]) into `module`.
pub fn from_flat<B: Backend, M: Module<B>>(module: M, flat: &[f32]) -> M {
    let mut l = Load { src: flat, pos: 0 };
    let m = module.map(&mut l);
    assert_eq!(l.pos, flat.len(), "flat vector length does not match the module");
    m
}

struct Grads<'a, B: AutodiffBackend> {
    grads: &'a B::Gradients,
    parts: Vec<Tensor<B::InnerBackend, 1>>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Grads<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let t = param.val();
        let n = t.shape().num_elements();
        let g = match t.grad(self.grads) {
            Some(g) => g.reshape([n]),
            None => Tensor::zeros([n], &t.device()),
        };
        self.parts.push(g);
    }
}

/// The gradients of `module`'s parameters as one vector, in [`to_flat`]'s order (zeros for
/// parameters that take no gradient).
pub fn grads_flat<B: AutodiffBackend, M: Module<B>>(module: &M, grads: &B::Gradients) -> Vec<f32> {
    let mut g = Grads::<B> { grads, parts: Vec::new() };
    module.visit(&mut g);
    if g.parts.is_empty() {
        return Vec::new();
    }
    Tensor::cat(g.parts, 0).into_data().to_vec::<f32>().expect("f32 gradients")
}

struct Init<'a> {
    rng: &'a mut ChaCha12Rng,
}

impl<B: Backend> ModuleMapper<B> for Init<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let shape = param.shape();
        let dims: Vec<usize> = param.val().dims().to_vec();
        let n = shape.num_elements();
        // He-uniform on weights (fan-in: rows of a linear weight [in, out]; in·k·k for a
        // convolution [out, in, k, k]); biases start at zero.
        let fan_in = match dims.len() {
            2 => dims[0],
            4 => dims[1] * dims[2] * dims[3],
            _ => 0,
        };
        let values: Vec<f32> = if fan_in == 0 {
            vec![0.0; n]
        } else {
            let b = (6.0f64 / fan_in as f64).sqrt();
            (0..n).map(|_| self.rng.random_range(-b..b) as f32).collect()
        };
        let device = param.lazy_device();
        param.map(|old| {
            let t = Tensor::<B, D>::from_data(TensorData::new(values, shape), &device);
            if old.is_require_grad() {
                t.require_grad()
            } else {
                t
            }
        })
    }
}

/// Re-initialises every parameter from `rng` (independent of burn's own random state).
pub fn init<B: Backend, M: Module<B>>(module: M, rng: &mut ChaCha12Rng) -> M {
    module.map(&mut Init { rng })
}
