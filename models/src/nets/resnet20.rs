//! ResNet-20, the CIFAR-style residual network of He et al. (2016, section 4.2): a 3x3
//! convolution to 16 channels, three stages of three basic blocks (16, 32, 64 channels; the
//! second and third halve the resolution) with parameter-free shortcuts, global average pooling
//! and a linear classifier. 269,722 parameters on 3-channel input with 10 classes; 269,434 on
//! Fashion-MNIST's one channel, where the stages see 28x28, 14x14 and 7x7.

use super::block::{bn, conv, BasicBlock, Shortcut};
use super::SKELETON;
use burn::module::Module;
use burn::nn::conv::Conv2d;
use burn::nn::{BatchNorm, Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// ResNet-20.
#[derive(Module, Debug)]
pub struct ResNet20<B: Backend> {
    conv: Conv2d<B>,
    bn: BatchNorm<B>,
    blocks: Vec<BasicBlock<B>>,
    fc: Linear<B>,
    channels: usize,
}

impl<B: Backend> ResNet20<B> {
    /// The network for `channels`-channel square images and `classes` classes; `momentum` is
    /// BatchNorm's running-statistics momentum.
    pub fn new(channels: usize, classes: usize, momentum: f64, device: &B::Device) -> Self {
        let mut blocks = Vec::new();
        let mut from = 16;
        for (stage, width) in [16, 32, 64].into_iter().enumerate() {
            for i in 0..3 {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                blocks.push(BasicBlock::new(from, width, stride, Shortcut::Pad, momentum, device));
                from = width;
            }
        }
        ResNet20 {
            conv: conv(channels, 16, 3, 1, device),
            bn: bn(16, momentum, device),
            blocks,
            fc: LinearConfig::new(64, classes).with_initializer(SKELETON).init(device),
            channels,
        }
    }

    /// Logits of a batch of flattened square images `[n, channels·side²]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = super::to_images(x, self.channels);
        let mut x = relu(self.bn.forward(self.conv.forward(x)));
        for b in &self.blocks {
            x = b.forward(x);
        }
        self.fc.forward(super::global_pool(x))
    }
}
