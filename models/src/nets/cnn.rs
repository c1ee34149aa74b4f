//! A small convolutional network: two 3x3 convolutions (16 and 32 channels, ReLU, 2x2 max-pool)
//! and a linear classifier; 20,490 parameters on 28x28 grey images.

use super::SKELETON;
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// The CNN.
#[derive(Module, Debug)]
pub struct Cnn<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: MaxPool2d,
    fc: Linear<B>,
}

impl<B: Backend> Cnn<B> {
    /// The network for `channels`-channel 28x28 input and `classes` classes.
    pub fn new(channels: usize, classes: usize, device: &B::Device) -> Self {
        let same = PaddingConfig2d::Explicit(1, 1, 1, 1);
        Cnn {
            conv1: Conv2dConfig::new([channels, 16], [3, 3])
                .with_padding(same.clone())
                .with_initializer(SKELETON)
                .init(device),
            conv2: Conv2dConfig::new([16, 32], [3, 3]).with_padding(same).with_initializer(SKELETON).init(device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            fc: LinearConfig::new(32 * 7 * 7, classes).with_initializer(SKELETON).init(device),
        }
    }

    /// Logits of a batch of flattened images `[n, channels·784]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, d] = x.dims();
        let x = x.reshape([n, d / 784, 28, 28]);
        let x = self.pool.forward(relu(self.conv1.forward(x)));
        let x = self.pool.forward(relu(self.conv2.forward(x)));
        self.fc.forward(x.reshape([n, 32 * 7 * 7]))
    }
}
