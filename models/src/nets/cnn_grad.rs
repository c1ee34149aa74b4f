//! The CNN's gradient on the CPU without a module, for the network of [`super::cnn`] (3×3
//! convolutions of 16 and 32 channels with padding 1, ReLU, 2×2 max-pools, a linear classifier),
//! on images kept channels-last: conv1 straight from the images (one input channel: each output
//! pixel's 16 channels as one vector), conv2 by im2col and the single-threaded `gemm` the MLP's
//! path uses, pooling before bias and ReLU, conv1's gradients summed from the pooled gradients,
//! and the softmax cross-entropy by hand. The code is compiled three times (AVX-512, AVX2, the
//! baseline) and the processor's best is taken; the bits are the same on each (tested).
//!
//! Through burn's autodiff a CNN gradient costs 18–22 ms at batch 32 on one of these cores; here
//! about 3 ms, 0.63 of the MLP's FLOP rate (docs/performance.md). The products sum in another order than
//! burn-flex's tiled convolutions and their transposed backward passes, so the bits differ from
//! autodiff's by rounding (a test in `nets` bounds the difference: 4.7e-7 of the largest
//! element); this is therefore the one path a CNN on the CPU takes, whatever the thread count,
//! load or executor (the simulator and the MPI executor reach it through the same workload), so
//! simulated and real runs agree bit for bit.

use super::mlp_grad::matmul;
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

/// The buffers of one gradient, kept per thread between gradients: allocating them afresh (7 MB
/// at batch 32) cost a third of the time in page faults.
#[derive(Default)]
struct Scratch {
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
#[inline(always)]
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

/// Each of the nine taps of a 3×3 kernel with padding 1 at output pixel `p` of a
/// `[n, side, side, c]` batch, in kernel order: its offset `ky·3 + kx` and where its pixel's
/// channels start, or `None` where it falls outside the image.
#[inline(always)]
fn every_tap(p: usize, side: usize, c: usize, mut each: impl FnMut(usize, Option<usize>)) {
    let (i, y, x) = (p / (side * side), p / side % side, p % side);
    for ky in 0..3 {
        let sy = (y + ky).wrapping_sub(1);
        for kx in 0..3 {
            let sx = (x + kx).wrapping_sub(1);
            let inside = sy < side && sx < side;
            each(ky * 3 + kx, inside.then(|| ((i * side + sy) * side + sx) * c));
        }
    }
}

/// im2col of a channels-last `[n, side, side, C]` image batch for a 3×3 kernel with padding 1:
/// `[n·side², 9·C]`, column `(ky·3 + kx)·C + ch`, so that each kernel offset copies one
/// contiguous run of channels (the weights are permuted to match, [`permute_in`]).
#[inline(always)]
fn im2col<const C: usize>(col: &mut Vec<f32>, x: &[f32], n: usize, side: usize) {
    // Every element is written (a copy or a padding zero), so the buffer is not cleared first.
    col.resize(n * side * side * 9 * C, 0.0);
    for (p, row) in col.chunks_exact_mut(9 * C).enumerate() {
        every_tap(p, side, C, |t, at| {
            let dst: &mut [f32; C] = (&mut row[t * C..t * C + C]).try_into().expect("C");
            *dst = match at {
                Some(at) => x[at..at + C].try_into().expect("C"),
                None => [0.0; C],
            };
        });
    }
}

/// The transpose of [`im2col`]: each pixel's gradient is the sum of the columns copied from it.
/// Gathered per pixel in registers, in the order a scatter over the output pixels in turn would
/// add them (from zero, the later kernel offsets first), so the bits are a scatter's.
#[inline(always)]
fn col2im<const C: usize>(x: &mut Vec<f32>, col: &[f32], n: usize, side: usize) {
    x.resize(n * side * side * C, 0.0);
    for (q, dst) in x.chunks_exact_mut(C).enumerate() {
        let (i, y, xx) = (q / (side * side), q / side % side, q % side);
        let mut acc = [0f32; C];
        // Output pixel (y + 1 − ky, x + 1 − kx) read this pixel through offset (ky, kx); output
        // pixels in increasing order are the offsets in decreasing order.
        for t in (0..9).rev() {
            let (oy, ox) = ((y + 1).wrapping_sub(t / 3), (xx + 1).wrapping_sub(t % 3));
            if oy < side && ox < side {
                let at = ((i * side + oy) * side + ox) * 9 * C + t * C;
                let src: &[f32; C] = col[at..at + C].try_into().expect("C");
                for ch in 0..C {
                    acc[ch] += src[ch];
                }
            }
        }
        dst.copy_from_slice(&acc);
    }
}

/// A `[out, c, 3, 3]` weight as `[out, 3, 3, c]` (the columns of [`im2col`]).
#[inline(always)]
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
#[inline(always)]
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
#[inline(always)]
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
        // In registers, then stored: selects on the whole window's channels, so that they run
        // as vectors; the first largest wins. (Selects, not `f32::max`, whose choice between -0
        // and +0 is the compiler's.)
        let mut best = *pixel(i, 2 * py, 2 * px);
        let mut arg = [0u32; C];
        for (w, (dy, dx)) in [(1u32, (0, 1)), (2, (1, 0)), (3, (1, 1))] {
            let v = pixel(i, 2 * py + dy, 2 * px + dx);
            for ch in 0..C {
                let better = v[ch] > best[ch];
                arg[ch] = if better { w } else { arg[ch] };
                best[ch] = if better { v[ch] } else { best[ch] };
            }
        }
        for ch in 0..C {
            let t = best[ch] + bias[ch];
            q[ch] = if t > 0.0 { t } else { 0.0 };
        }
        *which = arg;
    }
}

/// The backward pass of [`pool`]: each pooled gradient goes to the input that was largest, if
/// the pooled activation is positive (ReLU's gradient is zero elsewhere); zero elsewhere.
#[inline(always)]
fn unpool<const C: usize>(out: &mut Vec<f32>, g: &[f32], arg: &[u32], q: &[f32], n: usize, side: usize) {
    let half = side / 2;
    // The windows tile the image and each of their inputs is written, so no clearing first.
    out.resize(n * side * side * C, 0.0);
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
/// image patch around the window's largest input, summed in pooled order. The channels run as
/// vectors: for each of a window's four inputs, the gradients of the channels whose largest it
/// was (zero for the others) times each of its patch's pixels.
#[inline(always)]
fn conv1_backward(g: &[f32], arg: &[u32], q: &[f32], x: &[f32], out: &mut [f32]) {
    let (mut dw, mut db) = ([[0f32; C1]; 9], [0f32; C1]);
    for (o, ((g, arg), q)) in g.chunks_exact(C1).zip(arg.chunks_exact(C1)).zip(q.chunks_exact(C1)).enumerate() {
        let (i, py, px) = (o / (S1 * S1), o / S1 % S1, o % S1);
        let (g, arg, q): (&[f32; C1], &[u32; C1], &[f32; C1]) =
            (g.try_into().expect("C1"), arg.try_into().expect("C1"), q.try_into().expect("C1"));
        for w in 0..4u32 {
            // A select by bit mask, as in `unpool` (a short-circuit `&&` kept it scalar).
            let mut m = [0f32; C1];
            for ch in 0..C1 {
                let hit = ((arg[ch] == w) & (q[ch] > 0.0)) as u32;
                m[ch] = f32::from_bits(g[ch].to_bits() & hit.wrapping_neg());
            }
            let pixel = (i * SIDE + 2 * py + w as usize / 2) * SIDE + 2 * px + w as usize % 2;
            taps(pixel, SIDE, 1, |t, at| {
                let v = x[at];
                for ch in 0..C1 {
                    dw[t][ch] += m[ch] * v;
                }
            });
        }
        for ch in 0..C1 {
            db[ch] += f32::from_bits(g[ch].to_bits() & ((q[ch] > 0.0) as u32).wrapping_neg());
        }
    }
    for (ch, row) in out[..C1 * 9].chunks_exact_mut(9).enumerate() {
        for (t, d) in row.iter_mut().enumerate() {
            *d = dw[t][ch];
        }
    }
    out[C1 * 9..].copy_from_slice(&db);
}

/// conv1 before its bias, straight from the images (one channel, so a product of depth 9 would
/// spend more time packing than multiplying): each output pixel's 16 channels as one vector,
/// the in-image taps added in order.
#[inline(always)]
fn conv1_forward(a1: &mut Vec<f32>, x: &[f32], w: &[f32], n: usize) {
    let mut wt = [[0f32; C1]; 9];
    for (ch, row) in w.chunks_exact(9).enumerate() {
        for t in 0..9 {
            wt[t][ch] = row[t];
        }
    }
    a1.resize(n * SIDE * SIDE * C1, 0.0);
    for (p, out) in a1.chunks_exact_mut(C1).enumerate() {
        let mut acc = [0f32; C1];
        taps(p, SIDE, 1, |t, at| {
            let v = x[at];
            for ch in 0..C1 {
                acc[ch] += v * wt[t][ch];
            }
        });
        out.copy_from_slice(&acc);
    }
}

/// The mean cross-entropy of `logits` (`[n, classes]`) against `labels` and its gradient with
/// respect to the logits, `(softmax − one-hot) / n`, each row from its largest logit.
#[inline(always)]
fn softmax_cross_entropy(logits: &[f32], labels: &[i64], classes: usize) -> (f64, Vec<f32>) {
    let n = labels.len();
    let mut grad = vec![0f32; logits.len()];
    let mut loss = 0f64;
    for ((row, d), &label) in logits.chunks_exact(classes).zip(grad.chunks_exact_mut(classes)).zip(labels) {
        let label = usize::try_from(label).ok().filter(|&l| l < classes).expect("a label is a class");
        let top = row.iter().copied().fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a });
        let mut sum = 0f32;
        for (e, &l) in d.iter_mut().zip(row) {
            *e = (l - top).exp();
            sum += *e;
        }
        loss += f64::from(top + sum.ln() - row[label]);
        for e in d.iter_mut() {
            *e = *e / sum / n as f32;
        }
        d[label] -= 1.0 / n as f32;
    }
    (loss / n as f64, grad)
}

/// Sums of each column of a row-major `[rows, C]` matrix, into `out`.
#[inline(always)]
fn column_sums<const C: usize>(g: &[f32], out: &mut [f32]) {
    let mut acc = [0f32; C];
    for row in g.chunks_exact(C) {
        for ch in 0..C {
            acc[ch] += row[ch];
        }
    }
    out.copy_from_slice(&acc);
}

/// A call of the best of a function's three clones (see [`clones`]) for this processor.
macro_rules! best {
    ($avx512:ident, $avx2:ident, $portable:ident ($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vl") {
                // SAFETY: the features this clone is compiled for were detected just now.
                #[allow(unsafe_code)]
                unsafe {
                    $avx512($($arg),*)
                }
            } else if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: as above.
                #[allow(unsafe_code)]
                unsafe {
                    $avx2($($arg),*)
                }
            } else {
                $portable($($arg),*)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            $portable($($arg),*)
        }
    }};
}

/// The same code compiled for wider vectors, chosen by what the processor has. The bits are the
/// same on every path: each element's operations and their order are the code's, whatever the
/// vector width (no sum is reordered and nothing is fused; a test compares the paths).
macro_rules! clones {
    ($body:ident: $avx512:ident, $avx2:ident, $portable:ident, $out:ty => $ret:ty) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq")]
        fn $avx512(s: &mut Scratch, params: &[f32], x: &[f32], labels: &[i64], out: $out) -> $ret {
            $body(s, params, x, labels, out)
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx2(s: &mut Scratch, params: &[f32], x: &[f32], labels: &[i64], out: $out) -> $ret {
            $body(s, params, x, labels, out)
        }
        fn $portable(s: &mut Scratch, params: &[f32], x: &[f32], labels: &[i64], out: $out) -> $ret {
            $body(s, params, x, labels, out)
        }
    };
}
clones!(gradient_with: gradient_avx512, gradient_avx2, gradient_portable, &mut [f32] => f64);
clones!(evaluate_with: evaluate_avx512, evaluate_avx2, evaluate_portable, () => (f64, usize));

/// The minibatch gradient of the CNN at the flat parameters `params`, for images `x` (`[n, 784]`,
/// row-major) with `labels`, written into `out` (every element); returns the mean loss.
pub fn gradient(params: &[f32], x: &[f32], labels: &[i64], out: &mut [f32]) -> f64 {
    SCRATCH
        .with(|s| best!(gradient_avx512, gradient_avx2, gradient_portable(&mut s.borrow_mut(), params, x, labels, out)))
}

/// Images evaluated at once by [`evaluate`]: a constant, so that the scratch buffers stay a few
/// megabytes (and within a run's estimate) whatever the test set's size.
pub const EVAL_CHUNK: usize = 64;

/// The CNN's forward pass on images `x` (`[n, 784]`) with `labels`, in chunks of
/// [`EVAL_CHUNK`]: the summed cross-entropy (each image's in `f32`, as the gradient's loss, summed
/// in `f64`) and how many images' first largest logit is their label.
pub fn evaluate(params: &[f32], x: &[f32], labels: &[i64]) -> (f64, usize) {
    SCRATCH.with(|s| {
        let s = &mut s.borrow_mut();
        let (mut loss, mut right) = (0.0, 0);
        for (x, labels) in x.chunks(EVAL_CHUNK * SIDE * SIDE).zip(labels.chunks(EVAL_CHUNK)) {
            let (l, r) = best!(evaluate_avx512, evaluate_avx2, evaluate_portable(s, params, x, labels, ()));
            loss += l;
            right += r;
        }
        (loss, right)
    })
}

/// The forward pass to the logits (`[n, 10]`), leaving in `s` what the backward pass reads.
#[inline(always)]
fn forward(s: &mut Scratch, params: &[f32], x: &[f32], n: usize) -> Vec<f32> {
    assert_eq!(params.len(), PARAMS, "the CNN's parameters");
    assert_eq!(x.len(), n * SIDE * SIDE, "images");
    let p2 = n * S1 * S1;
    let Scratch { a1, q1, arg1, col2, a2, q2, arg2, f, w2, .. } = s;
    permute_in(&params[W2..B2], C1, w2);
    // conv1 from the images, then conv2 as [n·196, 144] · W2ᵀ (W2 is [32, 144]).
    conv1_forward(a1, x, &params[W1..B1], n);
    pool::<C1>(q1, arg1, a1, &params[B1..W2], n, SIDE);
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
    logits
}

/// One chunk of [`evaluate`]: the summed loss and the right answers.
#[inline(always)]
fn evaluate_with(s: &mut Scratch, params: &[f32], x: &[f32], labels: &[i64], (): ()) -> (f64, usize) {
    let logits = forward(s, params, x, labels.len());
    let (mut loss, mut right) = (0f64, 0);
    for (row, &label) in logits.chunks_exact(CLASSES).zip(labels) {
        let label = usize::try_from(label).ok().filter(|&l| l < CLASSES).expect("a label is a class");
        let (mut top, mut arg) = (row[0], 0);
        for (c, &v) in row.iter().enumerate().skip(1) {
            if v > top {
                (top, arg) = (v, c);
            }
        }
        let sum: f32 = row.iter().map(|&l| (l - top).exp()).fold(0.0, |a, e| a + e);
        loss += f64::from(top + sum.ln() - row[label]);
        right += usize::from(arg == label);
    }
    (loss, right)
}

#[inline(always)]
fn gradient_with(s: &mut Scratch, params: &[f32], x: &[f32], labels: &[i64], out: &mut [f32]) -> f64 {
    let n = labels.len();
    assert_eq!(out.len(), PARAMS, "one gradient per parameter");
    let p2 = n * S1 * S1;
    let logits = forward(s, params, x, n);
    let Scratch { q1, arg1, col2, q2, arg2, f, df, dq2, dy2, dcol2, dq1, w2, dw2, .. } = s;
    let (loss, dl) = softmax_cross_entropy(&logits, labels, CLASSES);

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
    // conv1: dW1 and the bias's sums (the images need no gradient), summed straight from the
    // pooled gradients: dy1 is zero but at each window's largest input.
    conv1_backward(dq1, arg1, q1, x, &mut out[W1..W2]);
    loss
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters, images and labels of a batch of 8 (of 7 for the evaluation, so that its last
    /// chunk is short when the chunk is smaller).
    fn inputs(n: usize) -> (Vec<f32>, Vec<f32>, Vec<i64>) {
        let params: Vec<f32> = (0..PARAMS).map(|i| ((i * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.3).collect();
        // Images with zero pixels (as Fashion-MNIST's borders), so that signed zeros and ties
        // in the pools are met.
        let x: Vec<f32> =
            (0..n * SIDE * SIDE).map(|i| if i % 5 < 2 { 0.0 } else { (i * 104_729 % 255) as f32 / 255.0 }).collect();
        let labels: Vec<i64> = (0..n as i64).map(|i| i * 3 % 10).collect();
        (params, x, labels)
    }

    /// The gradient's bits on each path (loss, then every element).
    fn bits(path: impl Fn(&mut Scratch, &[f32], &[f32], &[i64], &mut [f32]) -> f64) -> Vec<u32> {
        let (params, x, labels) = inputs(8);
        let mut g = vec![f32::NAN; PARAMS];
        let loss = path(&mut Scratch::default(), &params, &x, &labels, &mut g);
        assert!(g.iter().all(|v| v.is_finite()), "every element is written");
        [(loss as f32).to_bits()].into_iter().chain(g.iter().map(|v| v.to_bits())).collect()
    }

    /// The evaluation's summed loss (its bits) and right answers on each path.
    fn evaluation(path: impl Fn(&mut Scratch, &[f32], &[f32], &[i64], ()) -> (f64, usize)) -> (u64, usize) {
        let (params, x, labels) = inputs(7);
        let (loss, right) = path(&mut Scratch::default(), &params, &x, &labels, ());
        (loss.to_bits(), right)
    }

    /// Asserts that each wider clone this processor can run gives `portable`'s result.
    fn as_portable<T: PartialEq>(what: &str, portable: &T, avx2: impl FnOnce() -> T, avx512: impl FnOnce() -> T) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                assert!(avx2() == *portable, "AVX2's {what} differs from the portable path");
            }
            if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512vl") {
                assert!(avx512() == *portable, "AVX-512's {what} differs from the portable path");
            }
        }
    }

    #[test]
    #[allow(unsafe_code)]
    fn every_vector_width_gives_the_same_bits() {
        // SAFETY (every `unsafe` below): `as_portable` calls a clone only where the processor
        // has the features it is compiled for.
        as_portable(
            "gradient",
            &bits(gradient_portable),
            || bits(|s, p, x, l, o| unsafe { gradient_avx2(s, p, x, l, o) }),
            || bits(|s, p, x, l, o| unsafe { gradient_avx512(s, p, x, l, o) }),
        );
        as_portable(
            "evaluation",
            &evaluation(evaluate_portable),
            || evaluation(|s, p, x, l, o| unsafe { evaluate_avx2(s, p, x, l, o) }),
            || evaluation(|s, p, x, l, o| unsafe { evaluate_avx512(s, p, x, l, o) }),
        );
    }
}
