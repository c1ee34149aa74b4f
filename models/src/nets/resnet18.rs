//! ResNet-18 as in torchvision: a 7x7 stride-2 convolution to 64 channels with BatchNorm, ReLU
//! and a 3x3 stride-2 max-pool, four stages of two basic blocks (64, 128, 256, 512 channels;
//! projection shortcuts where the shape changes), global average pooling and a linear
//! classifier. 11,689,512 parameters with 3 input channels and 1000 classes. On 28x28 input the
//! stages see 7x7, 4x4, 2x2 and 1x1.

use super::block::{bn, conv, BasicBlock, Shortcut};
use super::SKELETON;
use burn::module::Module;
use burn::nn::conv::Conv2d;
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// ResNet-18.
#[derive(Module, Debug)]
pub struct ResNet18<B: Backend> {
    conv: Conv2d<B>,
    bn: BatchNorm<B>,
    pool: MaxPool2d,
    blocks: Vec<BasicBlock<B>>,
    fc: Linear<B>,
    channels: usize,
}

impl<B: Backend> ResNet18<B> {
    /// The network for `channels`-channel square images and `classes` classes; `momentum` is
    /// BatchNorm's running-statistics momentum.
    pub fn new(channels: usize, classes: usize, momentum: f64, device: &B::Device) -> Self {
        let mut blocks = Vec::new();
        let mut from = 64;
        for (stage, width) in [64, 128, 256, 512].into_iter().enumerate() {
            for i in 0..2 {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                blocks.push(BasicBlock::new(from, width, stride, Shortcut::Project, momentum, device));
                from = width;
            }
        }
        ResNet18 {
            conv: conv(channels, 64, 7, 2, device),
            bn: bn(64, momentum, device),
            pool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            blocks,
            fc: LinearConfig::new(512, classes).with_initializer(SKELETON).init(device),
            channels,
        }
    }

    /// Logits of a batch of flattened square images `[n, channels·side²]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = super::to_images(x, self.channels);
        let mut x = self.pool.forward(relu(self.bn.forward(self.conv.forward(x))));
        for b in &self.blocks {
            x = b.forward(x);
        }
        self.fc.forward(super::global_pool(x))
    }
}
