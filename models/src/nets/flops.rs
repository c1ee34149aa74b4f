//! Arithmetic of a training step, counted from the layer shapes: multiply-adds of the forward
//! pass of one 28x28 image. A training step costs about 3x the forward pass (the backward pass
//! computes gradients of activations and of weights), so its FLOPs are `6 · MACs · batch`; that is
//! the usual "model FLOPs" against which a device's achieved throughput is compared.

use super::NetKind;

/// Output side of a convolution or pooling window.
fn out(side: usize, k: usize, stride: usize, pad: usize) -> usize {
    (side + 2 * pad - k) / stride + 1
}

/// Multiply-adds of a `k`x`k` convolution from `from` to `to` channels on a `side`² input; returns
/// them with the output side.
fn conv(side: usize, from: usize, to: usize, k: usize, stride: usize) -> (u64, usize) {
    let o = out(side, k, stride, k / 2);
    ((o * o * to * from * k * k) as u64, o)
}

/// Multiply-adds of residual stages of basic blocks, starting at `side` with `from` channels.
fn stages(mut side: usize, mut from: usize, widths: &[usize], blocks: usize, projection: bool) -> (u64, usize) {
    let mut macs = 0;
    for (s, &w) in widths.iter().enumerate() {
        for b in 0..blocks {
            let stride = if s > 0 && b == 0 { 2 } else { 1 };
            let (m1, o) = conv(side, from, w, 3, stride);
            let (m2, _) = conv(o, w, w, 3, 1);
            macs += m1 + m2;
            if projection && (stride != 1 || from != w) {
                macs += conv(side, from, w, 1, stride).0;
            }
            side = o;
            from = w;
        }
    }
    (macs, from)
}

/// Forward multiply-adds of one 28x28 one-channel image.
pub fn forward_macs(kind: &NetKind) -> u64 {
    match kind {
        NetKind::Mlp { hidden } => {
            let w = super::widths(hidden, 784, 10);
            w.windows(2).map(|p| (p[0] * p[1]) as u64).sum()
        }
        NetKind::Cnn => conv(28, 1, 16, 3, 1).0 + conv(14, 16, 32, 3, 1).0 + 32 * 49 * 10,
        NetKind::ResNet20 => {
            let (stem, side) = conv(28, 1, 16, 3, 1);
            let (body, c) = stages(side, 16, &[16, 32, 64], 3, false);
            stem + body + (c * 10) as u64
        }
        NetKind::ResNet18 => {
            let (stem, side) = conv(28, 1, 64, 7, 2);
            let side = out(side, 3, 2, 1);
            let (body, c) = stages(side, 64, &[64, 128, 256, 512], 2, true);
            stem + body + (c * 10) as u64
        }
    }
}

/// FLOPs of one training step (forward and backward) on `batch` images: `6 · MACs · batch`.
pub fn step_flops(kind: &NetKind, batch: usize) -> f64 {
    6.0 * forward_macs(kind) as f64 * batch as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_layer_shapes() {
        assert_eq!(forward_macs(&NetKind::Mlp { hidden: vec![128] }), 784 * 128 + 128 * 10);
        assert_eq!(forward_macs(&NetKind::Cnn), 28 * 28 * 16 * 9 + 14 * 14 * 32 * 16 * 9 + 32 * 49 * 10);
        // ResNet-20 on 32x32x3 is the published 41 MMACs; on 28x28x1 the maps are (28/32)² as large.
        let r20 = forward_macs(&NetKind::ResNet20) as f64;
        assert!((r20 / (40.55e6 * (28.0f64 / 32.0).powi(2)) - 1.0).abs() < 0.01, "{r20}");
        // ResNet-18's stem on 28x28: 14·14·64·49 multiply-adds.
        assert!(forward_macs(&NetKind::ResNet18) > 14 * 14 * 64 * 49);
        assert_eq!(step_flops(&NetKind::Cnn, 2), 12.0 * forward_macs(&NetKind::Cnn) as f64);
    }
}
