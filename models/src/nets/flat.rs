//! Flat exchange: a module's trainable parameters leave as one `f32` vector (one concatenation,
//! one read-back) and enter from one, in the module's visiting order; gradients likewise.
//!
//! BatchNorm running statistics are visited by burn as float "parameters" too; they are state,
//! not parameters, and are left out of every flat vector here (their field names start with
//! `running_`). See [`super`] for how they are set at evaluation.

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use rand::Rng;
use rand_chacha::ChaCha12Rng;

/// The field names on the path to the parameter being visited.
#[derive(Default)]
struct Path(Vec<String>);

impl Path {
    fn enter(&mut self, name: &str) {
        self.0.push(name.to_string());
    }
    fn exit(&mut self) {
        self.0.pop();
    }
    fn field(&self) -> &str {
        self.0.last().map_or("", String::as_str)
    }
    /// True for state that is not a trainable parameter (BatchNorm running statistics).
    fn is_state(&self) -> bool {
        self.field().starts_with("running_")
    }
}

macro_rules! track_path {
    () => {
        fn enter_module(&mut self, name: &str, _container_type: &str) {
            self.path.enter(name);
        }
        fn exit_module(&mut self, _name: &str, _container_type: &str) {
            self.path.exit();
        }
    };
}

struct Collect<B: Backend> {
    path: Path,
    parts: Vec<Tensor<B, 1>>,
    count: usize,
}

impl<B: Backend> ModuleVisitor<B> for Collect<B> {
    track_path!();
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.path.is_state() {
            return;
        }
        let t = param.val();
        let n = t.shape().num_elements();
        self.count += n;
        self.parts.push(t.reshape([n]));
    }
}

/// The module's trainable parameters as one vector.
pub fn to_flat<B: Backend, M: Module<B>>(module: &M) -> Vec<f32> {
    let mut c = Collect { path: Path::default(), parts: Vec::new(), count: 0 };
    module.visit(&mut c);
    if c.parts.is_empty() {
        return Vec::new();
    }
    Tensor::cat(c.parts, 0).into_data().to_vec::<f32>().expect("float parameters are f32")
}

struct Count {
    path: Path,
    trainable: usize,
    state: usize,
}

impl<B: Backend> ModuleVisitor<B> for Count {
    track_path!();
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let n = param.shape().num_elements();
        if self.path.is_state() {
            self.state += n;
        } else {
            self.trainable += n;
        }
    }
}

/// Number of trainable parameters (BatchNorm running statistics excluded).
pub fn count<B: Backend, M: Module<B>>(module: &M) -> usize {
    counts(module).0
}

/// `(trainable parameters, state values)`: state is BatchNorm running statistics.
pub fn counts<B: Backend, M: Module<B>>(module: &M) -> (usize, usize) {
    let mut c = Count { path: Path::default(), trainable: 0, state: 0 };
    module.visit(&mut c);
    (c.trainable, c.state)
}

/// `param` with `values` (of its shape); a parameter not yet built from its initializer never
/// is, so a network built only to be loaded allocates each parameter once.
fn replace<B: Backend, const D: usize>(param: Param<Tensor<B, D>>, values: Vec<f32>) -> Param<Tensor<B, D>> {
    let t = Tensor::<B, D>::from_data(TensorData::new(values, param.lazy_shape()), &param.lazy_device());
    let id = param.id;
    // Keeps the parameter's id, device and require-grad setting.
    param.transform_for_load(t, id)
}

struct Load<'a> {
    path: Path,
    src: &'a [f32],
    pos: usize,
}

impl<B: Backend> ModuleMapper<B> for Load<'_> {
    track_path!();
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.path.is_state() {
            return param;
        }
        let n = param.lazy_shape().num_elements();
        let values = self.src[self.pos..self.pos + n].to_vec();
        self.pos += n;
        replace(param, values)
    }
}

/// Loads `flat` (as produced by [`to_flat`]) into `module`; its running statistics are kept.
pub fn from_flat<B: Backend, M: Module<B>>(module: M, flat: &[f32]) -> M {
    let mut l = Load { path: Path::default(), src: flat, pos: 0 };
    let m = module.map(&mut l);
    assert_eq!(l.pos, flat.len(), "flat vector length does not match the module");
    m
}

struct Grads<'a, B: AutodiffBackend> {
    path: Path,
    grads: &'a mut B::Gradients,
    out: &'a mut [f32],
    at: usize,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Grads<'_, B> {
    track_path!();
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if self.path.is_state() {
            return;
        }
        let t = param.val();
        let n = t.shape().num_elements();
        let out = &mut self.out[self.at..self.at + n];
        self.at += n;
        // Removed from the container, the gradient's buffer is usually this tensor's alone, so
        // reading it back copies nothing before the one copy into `out`.
        match t.grad_remove(self.grads) {
            Some(g) => {
                let data = g.into_data();
                out.copy_from_slice(data.as_slice::<f32>().expect("f32 gradients"));
            }
            None => out.fill(0.0),
        }
    }
}

/// The gradients of `module`'s parameters written into `out` (of the parameter count), in
/// [`to_flat`]'s order (zeros for parameters that took no part in the loss). The gradients are
/// taken out of `grads`.
pub fn grads_into<B: AutodiffBackend, M: Module<B>>(module: &M, grads: &mut B::Gradients, out: &mut [f32]) {
    let mut g = Grads::<B> { path: Path::default(), grads, out, at: 0 };
    module.visit(&mut g);
    assert_eq!(g.at, g.out.len(), "the gradient has one value per parameter");
}

struct Init<'a> {
    path: Path,
    rng: &'a mut ChaCha12Rng,
}

impl<B: Backend> ModuleMapper<B> for Init<'_> {
    track_path!();
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.path.is_state() {
            return param;
        }
        let dims: Vec<usize> = param.lazy_shape().to_vec();
        let n: usize = dims.iter().product();
        // He-uniform on weights (fan-in: rows of a linear weight [in, out]; in·k·k for a
        // convolution [out, in, k, k]); BatchNorm scales start at one, shifts and biases at zero.
        let fan_in = match dims.len() {
            2 => dims[0],
            4 => dims[1] * dims[2] * dims[3],
            _ => 0,
        };
        let values: Vec<f32> = if self.path.field() == "gamma" {
            vec![1.0; n]
        } else if fan_in == 0 {
            vec![0.0; n]
        } else {
            let b = (6.0f64 / fan_in as f64).sqrt();
            (0..n).map(|_| self.rng.random_range(-b..b) as f32).collect()
        };
        replace(param, values)
    }
}

/// Re-initialises every parameter from `rng` (independent of burn's own random state).
pub fn init<B: Backend, M: Module<B>>(module: M, rng: &mut ChaCha12Rng) -> M {
    module.map(&mut Init { path: Path::default(), rng })
}
