//! The MLP's gradient on the CPU without a module: the same arithmetic as burn's autodiff on the
//! `flex` backend, bit for bit, at about two thirds of its cost.
//!
//! Through autodiff a gradient loads the flat parameters into a fresh module (a copy of every
//! weight), records a graph, and copies each weight gradient out again. Here the weights are read
//! from the flat vector where they lie and the weight gradients are written into the output where
//! they belong. Every product is the very `gemm` call that burn-flex makes for the same operation
//! (same shapes, strides, scaling and parallelism; burn-flex has no `rayon` feature here, so never
//! parallel), bias additions and ReLU are one IEEE operation per element, each bias gradient is
//! burn-flex's own `sum_dim`, and the loss and its gradient with respect to the logits come from
//! burn's cross-entropy under autodiff on a graph that starts at the logits. So the gradient and
//! the loss are the bits of [`super::BurnNet`]'s autodiff path (asserted by this module's tests
//! for several widths, depths, batches and parameter vectors), and it is the one path an MLP on
//! the CPU takes, whatever the thread count or load.

use burn::backend::{Autodiff, Flex};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{ElementConversion, Int, Tensor, TensorData};
use std::mem::MaybeUninit;

/// `dst[m×n] = lhs[m×k] · rhs[k×n]`, each operand addressed by (column stride, row stride) as
/// burn-flex passes them to `gemm` (`dst` is row-major and contiguous). Every element of `dst`
/// is written and none is read, so `dst` may be uninitialised.
#[allow(clippy::too_many_arguments)]
pub(super) fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [MaybeUninit<f32>],
    lhs: &[f32],
    l_cs: usize,
    l_rs: usize,
    rhs: &[f32],
    r_cs: usize,
    r_rs: usize,
) {
    assert_eq!(dst.len(), m * n, "output size");
    // The last element each operand addresses lies inside it.
    assert!(m > 0 && n > 0 && k > 0, "empty product");
    assert!((m - 1) * l_rs + (k - 1) * l_cs < lhs.len(), "lhs out of bounds");
    assert!((k - 1) * r_rs + (n - 1) * r_cs < rhs.len(), "rhs out of bounds");
    // SAFETY: the asserts above keep every address gemm forms (row·rs + col·cs, within the
    // given shapes) inside the three slices; `dst` is borrowed mutably and does not alias the
    // shared `lhs` and `rhs`; `read_dst` is false, so gemm sets its scale of `dst` to zero and
    // writes every element of the m×n product before it reads any (gemm-common's `gemm_basic`:
    // the first depth block stores, later blocks add to what it stored), so `dst` may hold
    // uninitialised memory.
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr().cast::<f32>(),
            1,
            n as isize,
            false,
            lhs.as_ptr(),
            l_cs as isize,
            l_rs as isize,
            rhs.as_ptr(),
            r_cs as isize,
            r_rs as isize,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// A fresh `len`-element vector filled by `fill` (it is not zeroed first: zeroing a gradient's
/// 400 kB costs as much as a tenth of computing it).
///
/// # Safety
/// `fill` must write every element of the slice it is given; the vector's length is then set to
/// `len` without checking, so an element left unwritten would be read as uninitialised memory.
#[allow(unsafe_code)]
unsafe fn filled(len: usize, fill: impl FnOnce(&mut [MaybeUninit<f32>])) -> Vec<f32> {
    let mut v = Vec::with_capacity(len);
    fill(&mut v.spare_capacity_mut()[..len]);
    // SAFETY: the caller's contract: `fill` wrote all `len` elements.
    unsafe { v.set_len(len) };
    v
}

/// `src` copied into `dst` (of the same length).
fn write(dst: &mut [MaybeUninit<f32>], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "lengths");
    dst.iter_mut().zip(src).for_each(|(d, &s)| {
        d.write(s);
    });
}

/// burn-flex's `sum_dim(·, 0)` of a row-major `[rows, cols]` matrix, written into `out`.
fn column_sums(g: &[f32], rows: usize, cols: usize, out: &mut [MaybeUninit<f32>]) {
    let t = Tensor::<Flex, 2>::from_data(TensorData::new(g.to_vec(), [rows, cols]), &Default::default());
    let s = t.sum_dim(0).into_data();
    write(out, s.as_slice::<f32>().expect("f32 sums"));
}

/// Burn's mean cross-entropy of `logits` (`[n, classes]`) against `labels`, and its gradient with
/// respect to the logits.
pub(super) fn cross_entropy(logits: Vec<f32>, labels: &[i64], classes: usize) -> (f64, Vec<f32>) {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let n = labels.len();
    let l = Tensor::<B, 2>::from_data(TensorData::new(logits, [n, classes]), &device).require_grad();
    let y = Tensor::<B, 1, Int>::from_data(TensorData::new(labels.to_vec(), [n]), &device);
    let loss = CrossEntropyLossConfig::new().init(&device).forward(l.clone(), y);
    let value = loss.clone().into_scalar().elem::<f64>();
    let grads = loss.backward();
    let g = l.grad(&grads).expect("the logits take part in the loss");
    (value, g.into_data().to_vec::<f32>().expect("f32 gradient"))
}

/// The minibatch gradient of an MLP of layer `widths` (`[784, hidden.., classes]`) at the flat
/// parameters `params` (each layer's weight `[in, out]` row-major, then its bias), for images `x`
/// (`[n, widths[0]]` row-major) with `labels`, written into `out` in the same order; returns the
/// mean loss.
pub fn gradient(widths: &[usize], params: &[f32], x: &[f32], labels: &[i64], out: &mut [f32]) -> f64 {
    // SAFETY: `[f32]` and `[MaybeUninit<f32>]` have the same layout, and `gradient_into` only
    // writes initialised values, so `out` holds valid `f32`s afterwards.
    #[allow(unsafe_code)]
    let out = unsafe { &mut *(out as *mut [f32] as *mut [MaybeUninit<f32>]) };
    gradient_into(widths, params, x, labels, out)
}

/// As [`gradient`], into a fresh vector that is never zeroed (every element is written once):
/// the same bits.
pub fn gradient_owned(widths: &[usize], params: &[f32], x: &[f32], labels: &[i64]) -> (Vec<f32>, f64) {
    let mut loss = 0.0;
    // SAFETY: `gradient_into` writes every element of `out` (every weight by `matmul`, every
    // bias by `column_sums`, the layers tiling the vector as it asserts).
    #[allow(unsafe_code)]
    let g = unsafe { filled(params.len(), |out| loss = gradient_into(widths, params, x, labels, out)) };
    (g, loss)
}

/// [`gradient`] into `out`, which may be uninitialised: every element is written (the layers'
/// weights and biases tile it, asserted below).
fn gradient_into(widths: &[usize], params: &[f32], x: &[f32], labels: &[i64], out: &mut [MaybeUninit<f32>]) -> f64 {
    let n = labels.len();
    let layers = widths.len() - 1;
    assert_eq!(x.len(), n * widths[0], "images");
    assert_eq!(params.len(), out.len(), "one gradient per parameter");
    // Where each layer's weight starts; its bias follows it.
    let mut at = Vec::with_capacity(layers);
    let mut pos = 0;
    for w in widths.windows(2) {
        at.push(pos);
        pos += w[0] * w[1] + w[1];
    }
    assert_eq!(pos, params.len(), "parameter count of widths {widths:?}");
    let weight = |l: usize| at[l]..at[l] + widths[l] * widths[l + 1];
    let bias = |l: usize| at[l] + widths[l] * widths[l + 1]..at[l] + widths[l] * widths[l + 1] + widths[l + 1];

    // Forward: acts[l] is layer l's input (the ReLU output of layer l - 1).
    let mut acts: Vec<Vec<f32>> = Vec::with_capacity(layers);
    let mut logits = Vec::new();
    for l in 0..layers {
        let (i, o) = (widths[l], widths[l + 1]);
        let input: &[f32] = if l == 0 { x } else { &acts[l - 1] };
        // burn's linear: x [n, i] · W [i, o], both contiguous, then + bias broadcast over rows.
        // SAFETY: `matmul` writes its whole m×n product.
        #[allow(unsafe_code)]
        let mut y = unsafe { filled(n * o, |y| matmul(n, o, i, y, input, 1, i, &params[weight(l)], 1, o)) };
        let b = &params[bias(l)];
        for row in y.chunks_exact_mut(o) {
            row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
        }
        if l + 1 < layers {
            // burn-flex's ReLU.
            y.iter_mut().for_each(|v| *v = v.max(0.0));
            acts.push(y);
        } else {
            logits = y;
        }
    }
    let (loss, mut g) = cross_entropy(logits, labels, widths[layers]);

    // Backward: g is the gradient of layer l's output.
    for l in (0..layers).rev() {
        let (i, o) = (widths[l], widths[l + 1]);
        let input: &[f32] = if l == 0 { x } else { &acts[l - 1] };
        // linear_weight_backward: swap_dims(x) [i, n] (strides 1, i) · g [n, o].
        matmul(i, o, n, &mut out[weight(l)], input, i, 1, &g, 1, o);
        // linear_bias_backward: sum over the batch.
        column_sums(&g, n, o, &mut out[bias(l)]);
        if l > 0 {
            // linear_x_backward: g [n, o] · swap_dims(W) [o, i] (strides 1, o).
            // SAFETY: `matmul` writes its whole m×n product.
            #[allow(unsafe_code)]
            let mut dx = unsafe { filled(n * i, |dx| matmul(n, i, o, dx, &g, 1, o, &params[weight(l)], o, 1)) };
            // relu_backward against the ReLU's output.
            dx.iter_mut().zip(&acts[l - 1]).for_each(|(d, &a)| *d = if a > 0.0 { *d } else { 0.0 });
            g = dx;
        }
    }
    loss
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_of_the_output_is_written() {
        // Small random weights and images; the output starts as NaNs, which any element left
        // unwritten would keep.
        let mut rng = 12345u64;
        let mut next = move || {
            rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((rng >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        for (widths, n) in [(vec![784, 128, 10], 32), (vec![784, 16, 8, 10], 5), (vec![784, 10], 1)] {
            let count: usize = widths.windows(2).map(|w| w[0] * w[1] + w[1]).sum();
            let params: Vec<f32> = (0..count).map(|_| next() * 0.1).collect();
            let x: Vec<f32> = (0..n * 784).map(|_| next() + 0.5).collect();
            let labels: Vec<i64> = (0..n as i64).map(|i| i % 10).collect();
            let mut out = vec![MaybeUninit::new(f32::NAN); count];
            let loss = gradient_into(&widths, &params, &x, &labels, &mut out);
            let written: Vec<f32> = out.iter().map(read_initialised).collect();
            assert!(written.iter().all(|g| g.is_finite()), "{widths:?}: an element left unwritten");
            let (owned, l2) = gradient_owned(&widths, &params, &x, &labels);
            let bits = |v: &[f32]| v.iter().map(|g| g.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&written), bits(&owned), "{widths:?}");
            assert_eq!(loss.to_bits(), l2.to_bits());
        }
    }

    /// The value of an element the test initialised itself (with NaN, then maybe overwritten).
    fn read_initialised(v: &MaybeUninit<f32>) -> f32 {
        // SAFETY: every element of the test's buffer was initialised to NaN before the call.
        #[allow(unsafe_code)]
        unsafe {
            v.assume_init()
        }
    }
}
