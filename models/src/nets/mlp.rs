//! A multi-layer perceptron: 784 → hidden → ... → 10 with ReLU.

use super::SKELETON;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// The MLP.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

impl<B: Backend> Mlp<B> {
    /// Layers of the given widths (`[784, 256, 128, 10]` for two hidden layers).
    pub fn new(widths: &[usize], device: &B::Device) -> Self {
        Mlp {
            layers: widths
                .windows(2)
                .map(|w| LinearConfig::new(w[0], w[1]).with_initializer(SKELETON).init(device))
                .collect(),
        }
    }

    /// Logits of a batch of flattened images `[n, 784]`.
    pub fn forward(&self, mut x: Tensor<B, 2>) -> Tensor<B, 2> {
        let last = self.layers.len() - 1;
        for (i, l) in self.layers.iter().enumerate() {
            x = l.forward(x);
            if i < last {
                x = relu(x);
            }
        }
        x
    }
}
