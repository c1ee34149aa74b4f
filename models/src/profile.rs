//! Backward profiles: how a gradient becomes ready layer by layer.
//!
//! A training step is a forward pass, then a backward pass that produces the layers' gradients in
//! reverse order. Frameworks that overlap communication with the backward pass (PyTorch DDP's
//! buckets, Horovod's tensor fusion) start all-reducing the last layers' gradients while the
//! first layers' are still being computed. A [`Profile`] is what that needs: the layers in
//! forward order with their parameter counts and their arithmetic, and the forward pass's share
//! of the step. A layer's share of the backward time is proportional to its arithmetic.
//!
//! Named profiles are the ImageNet networks' real layers (`resnet18`: 11,689,512 parameters and
//! 1.82 G multiply-adds an image; `resnet50`: 25,557,032 and 4.1 G); a burn network's profile
//! comes from its own layers ([`Profile::of_net`]).

use crate::nets::NetKind;
use serde::{Deserialize, Serialize};

/// The forward pass's share of a training step: the backward pass does about twice the forward
/// pass's arithmetic (gradients of the activations and of the weights).
pub const FORWARD_SHARE: f64 = 1.0 / 3.0;

/// One layer (with its BatchNorm, where it has one).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// Trainable parameters.
    pub params: u64,
    /// Arithmetic of the layer (any unit; only the layers' ratios matter), e.g. multiply-adds of
    /// one sample's forward pass.
    pub flops: f64,
}

/// A network's layers in forward order, and the forward pass's share of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    /// The layers in forward order (their parameters lie in this order in the flat vector).
    pub layers: Vec<Layer>,
    /// The forward pass's share of the step's time, in `[0, 1)`.
    pub forward_share: f64,
}

/// Names [`Profile::named`] knows.
pub const PROFILE_NAMES: &[&str] = &["resnet18", "resnet50"];

impl Profile {
    /// One layer of `params` parameters: the whole gradient is ready at the end of the step.
    pub fn flat(params: usize) -> Self {
        Profile { layers: vec![Layer { params: params as u64, flops: 1.0 }], forward_share: FORWARD_SHARE }
    }

    /// A named profile (see [`PROFILE_NAMES`]).
    pub fn named(name: &str) -> Option<Self> {
        let layers = match name {
            "resnet18" => imagenet_resnet(&[2, 2, 2, 2], false),
            "resnet50" => imagenet_resnet(&[3, 4, 6, 3], true),
            _ => return None,
        };
        Some(Profile { layers, forward_share: FORWARD_SHARE })
    }

    /// The profile of a burn network on 28x28 images with `channels` channels and `classes`
    /// classes, from the shapes of its layers.
    pub fn of_net(kind: &NetKind, channels: usize, classes: usize) -> Self {
        let mut b = Builder { side: 28, ch: channels, layers: Vec::new() };
        match kind {
            NetKind::Mlp { hidden } => {
                let mut from = channels * 784;
                for &w in hidden.iter().chain(std::iter::once(&classes)) {
                    b.layers.push(Layer { params: (from * w + w) as u64, flops: (from * w) as f64 });
                    from = w;
                }
            }
            NetKind::Cnn => {
                b.conv(16, 3, 1, Norm::Bias);
                b.side /= 2;
                b.conv(32, 3, 1, Norm::Bias);
                b.side /= 2;
                b.dense(classes);
            }
            NetKind::ResNet20 => {
                b.conv(16, 3, 1, Norm::Batch);
                b.stages(&[16, 32, 64], &[3, 3, 3], false, false);
                b.side = 1;
                b.dense(classes);
            }
            NetKind::ResNet18 => {
                b.conv(64, 7, 2, Norm::Batch);
                b.side = b.side.div_ceil(2);
                b.stages(&[64, 128, 256, 512], &[2, 2, 2, 2], false, true);
                b.side = 1;
                b.dense(classes);
            }
        }
        Profile { layers: b.layers, forward_share: FORWARD_SHARE }
    }

    /// Trainable parameters of all layers.
    pub fn params(&self) -> u64 {
        self.layers.iter().map(|l| l.params).sum()
    }
}

/// What follows a convolution.
#[derive(Clone, Copy)]
enum Norm {
    /// A bias per output channel.
    Bias,
    /// BatchNorm's scale and shift per output channel.
    Batch,
}

/// Layers of a convolutional network, built in forward order.
struct Builder {
    side: usize,
    ch: usize,
    layers: Vec<Layer>,
}

impl Builder {
    /// A `k`x`k` convolution to `to` channels with padding `k/2`.
    fn conv(&mut self, to: usize, k: usize, stride: usize, norm: Norm) {
        let side = (self.side + 2 * (k / 2) - k) / stride + 1;
        let weights = k * k * self.ch * to;
        let extra = match norm {
            Norm::Bias => to,
            Norm::Batch => 2 * to,
        };
        self.layers.push(Layer { params: (weights + extra) as u64, flops: (side * side * weights) as f64 });
        self.side = side;
        self.ch = to;
    }

    /// A fully connected layer (with bias) on the flattened maps.
    fn dense(&mut self, to: usize) {
        let from = self.side * self.side * self.ch;
        self.layers.push(Layer { params: (from * to + to) as u64, flops: (from * to) as f64 });
    }

    /// Residual stages: basic blocks (two 3x3 convolutions) or bottlenecks (1x1, 3x3, 1x1 with
    /// 4x expansion); a projection shortcut (1x1 convolution and BatchNorm) where the shape
    /// changes, if `projection` (otherwise the shortcut has no parameters).
    fn stages(&mut self, widths: &[usize], blocks: &[usize], bottleneck: bool, projection: bool) {
        for (s, (&w, &n)) in widths.iter().zip(blocks).enumerate() {
            for b in 0..n {
                let stride = if s > 0 && b == 0 { 2 } else { 1 };
                let (from, side) = (self.ch, self.side);
                let out = if bottleneck { 4 * w } else { w };
                if bottleneck {
                    self.conv(w, 1, 1, Norm::Batch);
                    self.conv(w, 3, stride, Norm::Batch);
                    self.conv(out, 1, 1, Norm::Batch);
                } else {
                    self.conv(w, 3, stride, Norm::Batch);
                    self.conv(w, 3, 1, Norm::Batch);
                }
                if projection && (stride != 1 || from != out) {
                    let (after_side, after_ch) = (self.side, self.ch);
                    self.side = side;
                    self.ch = from;
                    self.conv(out, 1, stride, Norm::Batch);
                    self.side = after_side;
                    self.ch = after_ch;
                }
            }
        }
    }
}

/// torchvision's ImageNet ResNets (224x224x3, 1,000 classes).
fn imagenet_resnet(blocks: &[usize], bottleneck: bool) -> Vec<Layer> {
    let mut b = Builder { side: 224, ch: 3, layers: Vec::new() };
    b.conv(64, 7, 2, Norm::Batch);
    b.side = (b.side - 1) / 2 + 1; // 3x3 max pool, stride 2, padding 1
    b.stages(&[64, 128, 256, 512], blocks, bottleneck, true);
    b.side = 1; // global average pool
    b.dense(1000);
    b.layers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_profiles_have_the_published_sizes() {
        let r18 = Profile::named("resnet18").unwrap();
        assert_eq!(r18.params(), 11_689_512);
        let macs: f64 = r18.layers.iter().map(|l| l.flops).sum();
        assert!((macs / 1.814e9 - 1.0).abs() < 0.01, "{macs}");
        assert_eq!(r18.layers.len(), 1 + 16 + 3 + 1, "stem, 16 convolutions, 3 projections, fc");
        let r50 = Profile::named("resnet50").unwrap();
        assert_eq!(r50.params(), 25_557_032);
        let macs: f64 = r50.layers.iter().map(|l| l.flops).sum();
        assert!((macs / 4.09e9 - 1.0).abs() < 0.02, "{macs}");
        assert!(Profile::named("vgg").is_none());
    }

    #[test]
    fn a_burn_mlp_profile_has_its_layers() {
        let p = Profile::of_net(&NetKind::Mlp { hidden: vec![128] }, 1, 10);
        assert_eq!(
            p.layers,
            vec![Layer { params: 784 * 128 + 128, flops: 784.0 * 128.0 }, Layer { params: 1290, flops: 1280.0 }]
        );
        assert_eq!(p.params() as usize, crate::nets::parameter_counts(&NetKind::Mlp { hidden: vec![128] }, 1, 10).0);
    }
}
