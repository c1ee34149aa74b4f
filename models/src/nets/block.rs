//! The residual basic block shared by ResNet-20 and ResNet-18: two 3x3 convolutions with
//! BatchNorm and ReLU, plus a shortcut that is the identity, a subsample-and-zero-pad (the
//! parameter-free "option A" of the CIFAR ResNets) or a 1x1 convolution with BatchNorm
//! (torchvision's projection).

use super::SKELETON;
use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{AvgPool2d, AvgPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, PaddingConfig2d};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::Tensor;

/// A bias-free `k`x`k` convolution with "same" padding for odd `k`.
pub fn conv<B: Backend>(from: usize, to: usize, k: usize, stride: usize, device: &B::Device) -> Conv2d<B> {
    let p = k / 2;
    Conv2dConfig::new([from, to], [k, k])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(p, p, p, p))
        .with_bias(false)
        .with_initializer(SKELETON)
        .init(device)
}

/// BatchNorm over `c` channels with running-statistics momentum `momentum`.
pub fn bn<B: Backend>(c: usize, momentum: f64, device: &B::Device) -> BatchNorm<B> {
    BatchNormConfig::new(c).with_momentum(momentum).init(device)
}

/// How the block's input reaches its output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortcut {
    /// Subsample by the stride and zero-pad the channels (no parameters).
    Pad,
    /// A strided 1x1 convolution with BatchNorm.
    Project,
}

/// A projection shortcut.
#[derive(Module, Debug)]
pub struct Projection<B: Backend> {
    conv: Conv2d<B>,
    bn: BatchNorm<B>,
}

/// The basic block.
#[derive(Module, Debug)]
pub struct BasicBlock<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm<B>,
    projection: Option<Projection<B>>,
    subsample: Option<AvgPool2d>,
    pad: usize,
}

impl<B: Backend> BasicBlock<B> {
    /// A block from `from` to `to` channels with `stride`; the shortcut kind matters only when
    /// the shape changes.
    pub fn new(from: usize, to: usize, stride: usize, shortcut: Shortcut, momentum: f64, device: &B::Device) -> Self {
        let reshape = stride != 1 || from != to;
        let (projection, subsample, pad) = match (reshape, shortcut) {
            (false, _) => (None, None, 0),
            (true, Shortcut::Project) => {
                (Some(Projection { conv: conv(from, to, 1, stride, device), bn: bn(to, momentum, device) }), None, 0)
            }
            (true, Shortcut::Pad) => {
                (None, Some(AvgPool2dConfig::new([1, 1]).with_strides([stride, stride]).init()), (to - from) / 2)
            }
        };
        BasicBlock {
            conv1: conv(from, to, 3, stride, device),
            bn1: bn(to, momentum, device),
            conv2: conv(to, to, 3, 1, device),
            bn2: bn(to, momentum, device),
            projection,
            subsample,
            pad,
        }
    }

    /// The block's output for `x` `[n, c, h, w]`.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let y = relu(self.bn1.forward(self.conv1.forward(x.clone())));
        let y = self.bn2.forward(self.conv2.forward(y));
        let short = if let Some(p) = &self.projection {
            p.bn.forward(p.conv.forward(x))
        } else if let Some(s) = &self.subsample {
            let x = s.forward(x);
            let [n, _, h, w] = x.dims();
            let zeros = Tensor::zeros([n, self.pad, h, w], &x.device());
            Tensor::cat(vec![zeros.clone(), x, zeros], 1)
        } else {
            x
        };
        relu(y + short)
    }
}
