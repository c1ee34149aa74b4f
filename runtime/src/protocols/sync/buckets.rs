//! Gradient buckets as PyTorch DDP forms them, and when each is ready.
//!
//! DDP walks the parameters in reverse order (the order the backward pass produces their
//! gradients) and closes a bucket once it holds at least its cap: `first_mb` for the first
//! (1 MB by default, so that communication starts early), `cap_mb` after it (25 MB). A layer is
//! never split. Each bucket is all-reduced on its own, one after another (one communication
//! stream), starting when its last gradient is ready ([`BucketConfig::overlap`]) or after the
//! whole backward pass (overlap off: what a real run here does, since it cannot see inside the
//! backward pass).
//!
//! With `B` equal buckets whose gradients take `b` each and whose all-reduces take `c` each, the
//! `k`-th all-reduce starts at `max(F + k·b, end of the (k−1)-th)` and the last ends at
//! `F + b + (B−1)·max(b, c) + c` after the step began (`F` the forward pass); without overlap
//! at `F + B·b + B·c`.

use dsgd_models::profile::Profile;
use serde::{Deserialize, Serialize};

/// Bytes in one of DDP's megabytes (`bucket_cap_mb` counts 2^20 bytes).
pub const MB: f64 = (1u64 << 20) as f64;

/// The bucket options of synchronous SGD and local SGD (`algorithm.buckets`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BucketConfig {
    /// A bucket closes once it holds this many MB (2^20 bytes) of gradient (default 25).
    pub cap_mb: f64,
    /// The first bucket's cap (default 1).
    pub first_mb: f64,
    /// All-reduce each bucket as soon as the backward pass has produced it (default false:
    /// after the whole gradient). Simulator only.
    pub overlap: bool,
}

impl Default for BucketConfig {
    fn default() -> Self {
        BucketConfig { cap_mb: 25.0, first_mb: 1.0, overlap: false }
    }
}

impl BucketConfig {
    /// What is wrong with these options: (field, problem).
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        for (field, v) in [("cap_mb", self.cap_mb), ("first_mb", self.first_mb)] {
            if !(v.is_finite() && v > 0.0) {
                return Err((field, format!("is {v}; must be a positive number of MB")));
            }
        }
        Ok(())
    }
}

/// One bucket: the elements `lo..hi` of the nominal (wire) vector, and the share of the step
/// after which the backward pass has produced all of them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// First element on the wire.
    pub lo: usize,
    /// One past the last.
    pub hi: usize,
    /// Ready after this share of the step (1: at its end).
    pub ready: f64,
}

impl Bucket {
    /// Elements on the wire.
    pub fn wire(&self) -> usize {
        self.hi - self.lo
    }
    /// The bucket's slice of a real vector of `n` elements (in proportion, as collectives map
    /// a nominal vector onto a real one).
    pub fn real(&self, n: usize, wire: usize) -> std::ops::Range<usize> {
        let at = |x: usize| (x as u128 * n as u128 / wire.max(1) as u128) as usize;
        at(self.lo)..at(self.hi)
    }
}

/// The buckets of a gradient of `wire` elements, in the order they are all-reduced (the last
/// layers' first).
pub fn layout(cfg: &BucketConfig, profile: &Profile, wire: usize) -> Vec<Bucket> {
    let total = profile.params().max(1) as u128;
    // Where each layer starts on the wire, in forward order, and where the last one ends.
    let mut edges = Vec::with_capacity(profile.layers.len() + 1);
    let mut cum = 0u128;
    for l in &profile.layers {
        edges.push((cum * wire as u128 / total) as usize);
        cum += l.params as u128;
    }
    edges.push(wire);
    let flops: f64 = profile.layers.iter().map(|l| l.flops).sum();
    let phi = profile.forward_share;
    let mut buckets: Vec<Bucket> = Vec::new();
    let (mut hi, mut done_flops) = (wire, 0.0);
    for (l, layer) in profile.layers.iter().enumerate().rev() {
        done_flops += layer.flops;
        let lo = edges[l];
        let cap = if buckets.is_empty() { cfg.first_mb } else { cfg.cap_mb };
        if l == 0 || 4.0 * (hi - lo) as f64 >= cap * MB {
            let ready = if l == 0 { 1.0 } else { phi + (1.0 - phi) * done_flops / flops.max(f64::MIN_POSITIVE) };
            buckets.push(Bucket { lo, hi, ready });
            hi = lo;
        }
    }
    // A last bucket of layers too small to hold an element joins the one before.
    if buckets.len() > 1 && buckets.last().is_some_and(|b| b.wire() == 0) {
        buckets.pop();
        let b = buckets.last_mut().expect("more than one");
        b.ready = 1.0;
    }
    buckets
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsgd_models::profile::Layer;

    fn profile(layers: &[(u64, f64)]) -> Profile {
        Profile { layers: layers.iter().map(|&(params, flops)| Layer { params, flops }).collect(), forward_share: 0.25 }
    }

    #[test]
    fn buckets_follow_ddp_in_reverse_layer_order() {
        // 1 MB = 262,144 elements; layers of 0.5, 0.75 and 2 MB, the last first.
        let m = 262_144u64;
        let p = profile(&[(m / 2, 1.0), (3 * m / 4, 1.0), (2 * m, 2.0)]);
        let wire = (p.params()) as usize;
        let cfg = BucketConfig { cap_mb: 1.0, first_mb: 1.0, overlap: true };
        let b = layout(&cfg, &p, wire);
        // The 2 MB layer fills the first bucket alone; the other two make the second.
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].lo, b[0].hi), ((5 * m / 4) as usize, wire));
        assert_eq!((b[1].lo, b[1].hi), (0, (5 * m / 4) as usize));
        // Forward is a quarter; the last layer is half the backward arithmetic.
        assert_eq!(b[0].ready, 0.25 + 0.75 * 0.5);
        assert_eq!(b[1].ready, 1.0);
        // A cap larger than the model: one bucket, ready at the end.
        let one = layout(&BucketConfig { cap_mb: 100.0, first_mb: 100.0, overlap: true }, &p, wire);
        assert_eq!(one, vec![Bucket { lo: 0, hi: wire, ready: 1.0 }]);
    }

    #[test]
    fn buckets_cover_the_wire_vector_in_proportion() {
        let r18 = Profile::named("resnet18").unwrap();
        let b = layout(&BucketConfig::default(), &r18, 11_689_512);
        assert_eq!(b.last().unwrap().lo, 0);
        assert_eq!(b[0].hi, 11_689_512);
        for w in b.windows(2) {
            assert_eq!(w[1].hi, w[0].lo, "contiguous");
            assert!(w[1].ready >= w[0].ready, "ready in order");
        }
        assert!(b[0].wire() * 4 >= 1 << 20, "the first bucket holds at least 1 MB");
        // Laid over a smaller real vector: the slices partition it.
        let n = 101_770;
        let slices: Vec<_> = b.iter().map(|x| x.real(n, 11_689_512)).collect();
        assert_eq!(slices.last().unwrap().start, 0);
        assert_eq!(slices[0].end, n);
    }

    #[test]
    fn bad_caps_are_refused() {
        assert!(BucketConfig { cap_mb: 0.0, ..Default::default() }.check().is_err());
        assert!(BucketConfig { first_mb: f64::NAN, ..Default::default() }.check().is_err());
        assert!(BucketConfig::default().check().is_ok());
    }
}
