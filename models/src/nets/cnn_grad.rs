//! The CNN's gradient on the CPU without a module: im2col and the single-threaded `gemm` the MLP's
//! path uses, on images kept channels-last, for the network of [`super::cnn`] (3×3 convolutions
//! of 16 and 32 channels with padding 1, ReLU, 2×2 max-pools, a linear classifier).
//!
//! Through burn's autodiff a CNN gradient costs 18–22 ms at batch 32 on one of these cores; here
//! about a quarter of that (docs/performance.md). The products sum in another order than
//! burn-flex's tiled convolutions and their transposed backward passes, so the bits differ from
//! autodiff's by rounding (a test in `nets` bounds the difference: 4.7e-7 of the largest
//! element); this is therefore the one path a CNN on the CPU
//! takes, whatever the thread count, load or executor (the simulator and the MPI executor reach
//! it through the same workload), so simulated and real runs agree bit for bit. The loss and its
//! gradient with respect to the logits are burn's cross-entropy, as for the MLP.

use super::mlp_grad::{cross_entropy, matmul};
use std::mem::MaybeUninit;

/// Input side, first and second convolution's channels, pooled side after each, classes.
const SIDE: usize = 28;
const C1: usize = 16;
const C2: usize = 32;
const S1: usize = 14;
const S2: usize = 7;
const CLASSES: usize = 10;
/// Where each tensor lies in the flat parameters: conv1's weight `[16, 1, 3, 3]` and bias, conv2's
/// weight `[32, 16, 3, 3]` and bias, the classifier's weight `[1568, 10]` (burn's `[in, out]`)
/// and bias; burn's visiting order.
const W1: usize = 0;
const B1: usize = W1 + C1 * 9;
const W2: usize = B1 + C1;
const B2: usize = W2 + C2 * C1 * 9;
const WF: usize = B2 + C2;
const FEATURES: usize = C2 * S2 * S2;
const BF: usize = WF + FEATURES * CLASSES;
/// The CNN's parameters.
pub const PARAMS: usize = BF + CLASSES;

/// `buf` as `len` elements that `fill` (a `matmul`, which writes every element) writes; its old
/// values are never read.
fn product(buf: &mut Vec<f32>, len: usize, fill: impl FnOnce(&mut [MaybeUninit<f32>])) {
    buf.resize(len, 0.0);
    fill(into(&mut buf[..len]));
}

/// `buf` as `len` zeros.
fn zeros(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buf.clear();
    buf.resize(len, 0.0);
    buf
}

/// The buffers of one gradient, kept per thread between gradients: allocating them afresh (7 MB
/// at batch 32) cost a third of the time in page faults.
#[derive(Default)]
struct Scratch {
    col1: Vec<f32>,
    a1: Vec<f32>,
    q1: Vec<f32>,
    arg1: Vec<u32>,
    col2: Vec<f32>,
    a2: Vec<f32>,
    q2: Vec<f32>,
    arg2: Vec<u32>,
    f: Vec<f32>,
    df: Vec<f32>,
    dq2: Vec<f32>,
    dy2: Vec<f32>,
    dcol2: Vec<f32>,
    dq1: Vec<f32>,
    /// conv2's weight and its gradient in [`im2col`]'s column order.
    w2: Vec<f32>,
    dw2: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// The same, writing into `out`.
fn into(out: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: as in `product`: `out` holds valid `f32`s and `matmul` writes only `f32`s.
    #[allow(unsafe_code)]
    unsafe {
        &mut *(out as *mut [f32] as *mut [MaybeUninit<f32>])
    }
}

/// The taps of a 3×3 kernel with padding 1 at output pixel `p` of a `[n, side, side, c]` batch
/// that fall inside the image: each kernel offset `ky·3 + kx` and where its pixel's channels
/// start.
fn taps(p: usize, side: usize, c: usize, mut each: impl FnMut(usize, usize)) {
    let (i, y, x) = (p / (side * side), p / side % side, p % side);
    for ky in 0..3 {
        let sy = (y + ky).wrapping_sub(1);
        if sy >= side {
            continue;
        }
        for kx in 0..3 {
            let sx = (x + kx).wrapping_sub(1);
            if sx < side {
                each(ky * 3 + kx, ((i * side + sy) * side + sx) * c);
            }
        }
    }
}

/// im2col of a channels-last `[n, side, side, C]` image batch for a 3×3 kernel with padding 1:
/// `[n·side², 9·C]`, column `(ky·3 + kx)·C + ch`, so that each kernel offset copies one
/// contiguous run of channels (the weights are permuted to match, [`permute_in`]).
fn im2col<const C: usize>(col: &mut Vec<f32>, x: &[f32], n: usize, side: usize) {
    let col = zeros(col, n * side * side * 9 * C);
    for (p, row) in col.chunks_exact_mut(9 * C).enumerate() {
        taps(p, side, C, |t, at| {
            let (dst, src): (&mut [f32; C], &[f32; C]) =
                ((&mut row[t * C..t * C + C]).try_into().expect("C"), (&x[at..at + C]).try_into().expect("C"));
            *dst = *src;
        });
    }
}

/// The transpose of [`im2col`]: each column's gradient added back to the pixel it came from.
fn col2im<const C: usize>(x: &mut Vec<f32>, col: &[f32], n: usize, side: usize) {
    let x = zeros(x, n * side * side * C);
    for (p, row) in col.chunks_exact(9 * C).enumerate() {
        taps(p, side, C, |t, at| {
            let (dst, src): (&mut [f32; C], &[f32; C]) =
                ((&mut x[at..at + C]).try_into().expect("C"), (&row[t * C..t * C + C]).try_into().expect("C"));
            for ch in 0..C {
                dst[ch] += src[ch];
            }
        });
    }
}

/// A `[out, c, 3, 3]` weight as `[out, 3, 3, c]` (the columns of [`im2col`]).
fn permute_in(w: &[f32], c: usize, into: &mut Vec<f32>) {
    into.resize(w.len(), 0.0);
    for (src, dst) in w.chunks_exact(9 * c).zip(into.chunks_exact_mut(9 * c)) {
        for ch in 0..c {
            for t in 0..9 {
                dst[t * c + ch] = src[ch * 9 + t];
            }
        }
    }
}

/// The inverse of [`permute_in`], written into `out`.
fn permute_out(w: &[f32], c: usize, out: &mut [f32]) {
    for (src, dst) in w.chunks_exact(9 * c).zip(out.chunks_exact_mut(9 * c)) {
        for ch in 0..c {
            for t in 0..9 {
                dst[ch * 9 + t] = src[t * c + ch];
            }
        }
    }
}

/// Bias, ReLU and 2×2 max-pool of a convolution's output `y` (channels-last `[n, side, side, C]`,
/// before its bias): the pooled activations and, for each, which of its four inputs was the first
/// largest. The bias is the same across a window and ReLU is monotone, so pooling first and
/// adding the bias and ReLU to the pooled values gives the same values at a quarter of the work.
/// (`C` is a constant so that each window's channels run as vectors.)
fn pool<const C: usize>(out: &mut Vec<f32>, arg: &mut Vec<u32>, y: &[f32], bias: &[f32], n: usize, side: usize) {
    let half = side / 2;
    let bias: &[f32; C] = bias.try_into().expect("one bias per channel");
    out.resize(n * half * half * C, 0.0);
    arg.resize(n * half * half * C, 0);
    let pixel = |i: usize, yy: usize, xx: usize| -> &[f32; C] {
        y[((i * side + yy) * side + xx) * C..][..C].try_into().expect("C channels")
    };
    let outs = out.chunks_exact_mut(C).zip(arg.chunks_exact_mut(C));
    for (o, (q, which)) in outs.enumerate() {
        let (i, py, px) = (o / (half * half), o / half % half, o % half);
        let (q, which): (&mut [f32; C], &mut [u32; C]) =
            (q.try_into().expect("C channels"), which.try_into().expect("C channels"));
        *q = *pixel(i, 2 * py, 2 * px);
        *which = [0; C];
        for (w, (dy, dx)) in [(1u32, (0, 1)), (2, (1, 0)), (3, (1, 1))] {
            let v = pixel(i, 2 * py + dy, 2 * px + dx);
            // Arithmetic selects, so that the channels run as vectors: the first largest wins.
            for ch in 0..C {
                let better = (v[ch] > q[ch]) as u32;
                which[ch] += better * (w - which[ch]);
                q[ch] = q[ch].max(v[ch]);
            }
        }
        for ch in 0..C {
            q[ch] = (q[ch] + bias[ch]).max(0.0);
        }
    }
}

/// The backward pass of [`pool`]: each pooled gradient goes to the input that was largest, if
/// the pooled activation is positive (ReLU's gradient is zero elsewhere); zero elsewhere.
fn unpool<const C: usize>(out: &mut Vec<f32>, g: &[f32], arg: &[u32], q: &[f32], n: usize, side: usize) {
    let half = side / 2;
    let out = zeros(out, n * side * side * C);
    for (o, ((g, arg), q)) in g.chunks_exact(C).zip(arg.chunks_exact(C)).zip(q.chunks_exact(C)).enumerate() {
        let (i, py, px) = (o / (half * half), o / half % half, o % half);
        for w in 0..4 {
            let at = ((i * side + 2 * py + w / 2) * side + 2 * px + w % 2) * C;
            let dst: &mut [f32; C] = (&mut out[at..at + C]).try_into().expect("C channels");
            // A select by bit mask (exact for every value), so that the channels run as vectors.
            for ch in 0..C {
                let hit = ((arg[ch] == w as u32) & (q[ch] > 0.0)) as u32;
                dst[ch] = f32::from_bits(g[ch].to_bits() & hit.wrapping_neg());
            }
        }
    }
}

/// conv1's weight and bias gradients (`out`: `[16, 9]` then `[16]`) from the gradient of its
/// pooled activations `g`: each pooled gradient, where the activation is positive, times the
/// image patch of the window's largest input (the rows of `col1`), summed in pooled order.
fn conv1_backward(g: &[f32], arg: &[u32], q: &[f32], col1: &[f32], out: &mut [f32]) {
    let (mut dw, mut db) = ([[0f32; 9]; C1], [0f32; C1]);
    for (o, ((g, arg), q)) in g.chunks_exact(C1).zip(arg.chunks_exact(C1)).zip(q.chunks_exact(C1)).enumerate() {
        let (i, py, px) = (o / (S1 * S1), o / S1 % S1, o % S1);
        for ch in 0..C1 {
            if q[ch] > 0.0 {
                let w = arg[ch] as usize;
                let pixel = (i * SIDE + 2 * py + w / 2) * SIDE + 2 * px + w % 2;
                let patch = &col1[pixel * 9..pixel * 9 + 9];
                dw[ch].iter_mut().zip(patch).for_each(|(d, x)| *d += g[ch] * x);
                db[ch] += g[ch];
            }
        }
    }
    out[..C1 * 9].copy_from_slice(dw.as_flattened());
    out[C1 * 9..].copy_from_slice(&db);
}

/// Sums of each column of a row-major `[rows, C]` matrix, into `out`.
fn column_sums<const C: usize>(g: &[f32], out: &mut [f32]) {
    let mut acc = [0f32; C];
    for row in g.chunks_exact(C) {
        for ch in 0..C {
            acc[ch] += row[ch];
        }
    }
    out.copy_from_slice(&acc);
}

/// The minibatch gradient of the CNN at the flat parameters `params`, for images `x` (`[n, 784]`,
/// row-major) with `labels`, written into `out` (every element); returns the mean loss.
pub fn gradient(params: &[f32], x: &[f32], labels: &[i64], out: &mut [f32]) -> f64 {
    SCRATCH.with(|s| gradient_with(&mut s.borrow_mut(), params, x, labels, out))
}

fn gradient_with(s: &mut Scratch, params: &[f32], x: &[f32], labels: &[i64], out: &mut [f32]) -> f64 {
    let n = labels.len();
    assert_eq!(params.len(), PARAMS, "the CNN's parameters");
    assert_eq!(out.len(), PARAMS, "one gradient per parameter");
    assert_eq!(x.len(), n * SIDE * SIDE, "images");
    let (p1, p2) = (n * SIDE * SIDE, n * S1 * S1);
    let Scratch { col1, a1, q1, arg1, col2, a2, q2, arg2, f, df, dq2, dy2, dcol2, dq1, w2, dw2 } = s;
    permute_in(&params[W2..B2], C1, w2);

    // Forward. conv1: [n·784, 9] · W1ᵀ (W1 is [16, 9] row-major).
    im2col::<1>(col1, x, n, SIDE);
    product(a1, p1 * C1, |y| matmul(p1, C1, 9, y, col1, 1, 9, &params[W1..B1], 9, 1));
    pool::<C1>(q1, arg1, a1, &params[B1..W2], n, SIDE);
    // conv2: [n·196, 144] · W2ᵀ (W2 is [32, 144] row-major).
    im2col::<C1>(col2, q1, n, S1);
    product(a2, p2 * C2, |y| matmul(p2, C2, C1 * 9, y, col2, 1, C1 * 9, w2, C1 * 9, 1));
    pool::<C2>(q2, arg2, a2, &params[B2..WF], n, S1);
    // The classifier reads the pooled maps channels-first, as burn's reshape of `[n, 32, 7, 7]`.
    f.resize(n * FEATURES, 0.0);
    for i in 0..n {
        for sp in 0..S2 * S2 {
            for ch in 0..C2 {
                f[i * FEATURES + ch * S2 * S2 + sp] = q2[(i * S2 * S2 + sp) * C2 + ch];
            }
        }
    }
    let mut logits = Vec::new();
    product(&mut logits, n * CLASSES, |y| matmul(n, CLASSES, FEATURES, y, f, 1, FEATURES, &params[WF..BF], 1, CLASSES));
    for row in logits.chunks_exact_mut(CLASSES) {
        row.iter_mut().zip(&params[BF..]).for_each(|(v, b)| *v += b);
    }
    let (loss, dl) = cross_entropy(logits, labels, CLASSES);

    // Backward. The classifier: fᵀ · dl, the bias's sums, dl · Wfᵀ.
    matmul(FEATURES, CLASSES, n, into(&mut out[WF..BF]), f, FEATURES, 1, &dl, 1, CLASSES);
    column_sums::<CLASSES>(&dl, &mut out[BF..]);
    product(df, n * FEATURES, |y| matmul(n, FEATURES, CLASSES, y, &dl, 1, CLASSES, &params[WF..BF], CLASSES, 1));
    dq2.resize(n * S2 * S2 * C2, 0.0);
    for i in 0..n {
        for sp in 0..S2 * S2 {
            for ch in 0..C2 {
                dq2[(i * S2 * S2 + sp) * C2 + ch] = df[i * FEATURES + ch * S2 * S2 + sp];
            }
        }
    }
    // conv2: dW2 = dy2ᵀ · col2, the bias's sums, dcol2 = dy2 · W2, then back to the pixels.
    unpool::<C2>(dy2, dq2, arg2, q2, n, S1);
    product(dw2, C2 * C1 * 9, |y| matmul(C2, C1 * 9, p2, y, dy2, C2, 1, col2, 1, C1 * 9));
    permute_out(dw2, C1, &mut out[W2..B2]);
    column_sums::<C2>(dy2, &mut out[B2..WF]);
    product(dcol2, p2 * C1 * 9, |y| matmul(p2, C1 * 9, C2, y, dy2, 1, C2, w2, 1, C1 * 9));
    col2im::<C1>(dq1, dcol2, n, S1);
    // conv1: dW1 = dy1ᵀ · col1 and the bias's sums (the images need no gradient), summed
    // straight from the pooled gradients: dy1 is zero but at each window's largest input.
    conv1_backward(dq1, arg1, q1, col1, &mut out[W1..W2]);
    loss
}
