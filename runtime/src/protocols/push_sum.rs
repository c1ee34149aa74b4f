//! Push-sum's per-gradient arithmetic in one pass over a node's state (see [`super::gossip`]).
//!
//! A push node holds `x` in fixed point and its weight `w`; its model is `z = x / w`. After a
//! gradient it takes the optimizer's step at `z`, adds `w` times the step to `x`, and (when it
//! gossips) splits `x` in two. Written as separate passes (the model, a copy, the step, the
//! update, the split, the next model) that was six trips through a node's memory for each
//! gradient, with two divisions and a rounding an element; with 100 nodes of a 100,000-parameter
//! model nothing stays in cache, and push ran at a third of pull's gradients per second. Here it
//! is one trip, with every element's arithmetic exactly as before (the same operations in the
//! same order, so the same bits), and where the processor has AVX-512 the loop is compiled for
//! it (its conversions between `f64` and `i64` are single instructions there); the bits are the
//! same either way, since every operation is exactly rounded.

use crate::optimizer::StepRule;

/// Fixed-point scale of push-sum parameters.
pub const X_ONE: f64 = (1u64 << 32) as f64;

/// `v.round() as i64` (to nearest, ties away from zero, saturating, NaN to 0), bit for bit,
/// without the call to libm's `round` that baseline x86-64 cannot inline.
///
/// Exact: adding the largest `f64` below one half, with `v`'s sign, and truncating rounds to
/// nearest with ties away from zero for every `f64`. Below 2^52 a fraction of a half or more
/// carries the sum (rounded to nearest, ties to even) over the next integer, and anything less
/// stays below it (0.49999999999999994 + 0.5 rounds to 1, 0.49999999999999994 +
/// 0.49999999999999994 does not); from 2^52 on `v` is an integer and less than half its spacing
/// is added, which rounds back to `v`.
///
/// Written so that it vectorises: `as` saturates and sends NaN to 0, which no vector
/// instruction does, so the value is first brought into `i64`'s range (NaN to 0, above it to
/// the largest `f64` below 2^63, below it to -2^63, all exact where it matters), and the
/// saturated top is chosen after.
#[inline(always)]
pub fn round_to_i64(v: f64) -> i64 {
    const TOP: f64 = 9_223_372_036_854_774_784.0; // the largest f64 below 2^63
    const BELOW_HALF: f64 = 0.499_999_999_999_999_94; // 0.5 - 2^-54
    let c = if v.is_nan() { 0.0 } else { v.clamp(-TOP - 1024.0, TOP) };
    let r = c + BELOW_HALF.copysign(c); // in [-2^63, TOP]: at the ends the spacing is 1024
                                        // SAFETY: `r` is finite and in [-2^63, 2^63), so it truncates to an `i64` (the checked
                                        // `as` would do the same, element by element, with a range test no vector unit has).
    #[allow(unsafe_code)]
    let t: i64 = unsafe { r.to_int_unchecked() };
    if v > TOP {
        i64::MAX
    } else {
        t
    }
}

/// `v` in units of 2^-32.
#[inline(always)]
pub fn to_fixed(v: f64) -> i64 {
    round_to_i64(v * X_ONE) // saturates on overflow (only a diverged run gets there)
}

/// Element `i` of the model `z = x / w`: `x` in units of 2^-32, `w` in units.
#[inline(always)]
pub fn z_of(x: i64, w: f64) -> f32 {
    (x as f64 / X_ONE / w) as f32
}

/// `floor(v / 2)`, taken out of `v`: the two parts sum to `v` exactly.
#[inline(always)]
pub fn split(v: &mut i64) -> i64 {
    let half = v.div_euclid(2);
    *v -= half;
    half
}

/// One gradient's pass over a node's state.
pub struct Step<'a> {
    /// The node's `x` (fixed point), updated in place.
    pub xs: &'a mut [i64],
    /// Pushed halves received and not yet added to `xs`, at most two, in arrival order: added
    /// first, one after the other (each addition saturating, as [`absorb`] would add them).
    pub incoming: [Option<&'a [i64]>; 2],
    /// The gradient, taken at the node's current model.
    pub grad: &'a [f32],
    /// The optimizer's step.
    pub rule: StepRule,
    /// The optimizer's velocity (`None` without momentum).
    pub velocity: Option<&'a mut [f32]>,
    /// The node's weight, in units.
    pub w: f64,
    /// Gossip: the half of `x` sent (filled), and the weight kept, in units.
    pub sent: Option<(&'a mut Vec<i64>, f64)>,
    /// The buffer of `sent` holds, coming in, the first message waiting (added before those in
    /// `incoming`, so up to three are added in the pass), and the half is written over it: the
    /// half's lines are then in cache when written, where a fresh buffer's would each be read
    /// from memory first.
    pub sent_holds_first: bool,
    /// The model `z = x / w` after the step (and the split), filled for the next gradient.
    /// Coming in, it may hold the model of `x` and `w` as they are (see `z_valid`).
    pub z: &'a mut Vec<f32>,
    /// `z` holds `x / w` for this `x` and `w` (nothing came in since the last pass wrote it):
    /// it is read instead of divided out again.
    pub z_valid: bool,
}

impl Step<'_> {
    /// Takes the step: for each element, the model `z = x / w`, the optimizer's step at it, `x`
    /// plus `w` times the step, the split, and the next model.
    pub fn run(self) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
            // SAFETY: the features this clone is compiled for were detected just now.
            #[allow(unsafe_code)]
            unsafe {
                return step_avx512(self);
            }
        }
        step_portable(self)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn step_avx512(s: Step<'_>) {
    step_body(s)
}

fn step_portable(s: Step<'_>) {
    step_body(s)
}

#[inline(always)]
fn step_body(s: Step<'_>) {
    let w = s.w;
    let valid = s.z_valid && s.incoming.iter().all(Option::is_none) && s.z.len() == s.xs.len();
    if s.sent_holds_first {
        assert!(s.sent.as_ref().is_some_and(|(h, _)| h.len() == s.xs.len()), "no first message to write over");
        return match s.incoming {
            [Some(a), Some(b)] => step_shapes::<true>(s, a.iter().copied().zip(b.iter().copied()), |x, _| z_of(x, w)),
            [Some(m), None] | [None, Some(m)] => {
                step_shapes::<true>(s, m.iter().copied().zip(std::iter::repeat(0)), |x, _| z_of(x, w))
            }
            [None, None] => step_shapes::<true>(s, std::iter::repeat((0, 0)), |x, _| z_of(x, w)),
        };
    }
    match s.incoming {
        [Some(a), Some(b)] => step_shapes::<false>(s, a.iter().copied().zip(b.iter().copied()), |x, _| z_of(x, w)),
        [Some(m), None] | [None, Some(m)] => {
            step_shapes::<false>(s, m.iter().copied().zip(std::iter::repeat(0)), |x, _| z_of(x, w))
        }
        [None, None] if valid => step_shapes::<false>(s, std::iter::repeat((0, 0)), |_, z| z),
        [None, None] => step_shapes::<false>(s, std::iter::repeat((0, 0)), |x, _| z_of(x, w)),
    }
}

/// The pass, with the two `incoming` halves added to each element of `x` first, one after the
/// other (zeros where nothing came), and the model at `x` given by `model(x, z as it was)`.
/// With `FIRST_IN_HALF`, the half's buffer holds a message added before those two.
#[inline(always)]
fn step_shapes<const FIRST_IN_HALF: bool>(
    s: Step<'_>,
    incoming: impl Iterator<Item = (i64, i64)>,
    model: impl Fn(i64, f32) -> f32,
) {
    let Step { xs, grad, rule, velocity, w, sent, z, .. } = s;
    let n = xs.len();
    sized(z, n);
    let (half, w_after) = match sent {
        Some((half, kept)) => {
            if !FIRST_IN_HALF {
                sized(half, n);
            }
            (Some(half), kept)
        }
        None => (None, w),
    };
    // Adding zero, where the half's buffer holds no message, is compiled away.
    let first = |h: &i64| if FIRST_IN_HALF { *h } else { 0 };
    // Four loops for the four shapes, each branch-free inside, so that each vectorises.
    let update = |x: i64, s: f32, z0: f32| x.saturating_add(to_fixed(w * (s - z0) as f64));
    match (velocity, half) {
        (Some(v), Some(h)) => {
            for (((((x, m), g), v), h), z) in
                xs.iter_mut().zip(incoming).zip(grad).zip(v.iter_mut()).zip(h.iter_mut()).zip(z.iter_mut())
            {
                *x = x.saturating_add(first(h)).saturating_add(m.0).saturating_add(m.1);
                let z0 = model(*x, *z);
                let mut x1 = update(*x, rule.momentum(z0, *g, v), z0);
                *h = split(&mut x1);
                *x = x1;
                *z = z_of(x1, w_after);
            }
        }
        (Some(v), None) => {
            for ((((x, m), g), v), z) in xs.iter_mut().zip(incoming).zip(grad).zip(v.iter_mut()).zip(z.iter_mut()) {
                *x = x.saturating_add(m.0).saturating_add(m.1);
                let z0 = model(*x, *z);
                *x = update(*x, rule.momentum(z0, *g, v), z0);
                *z = z_of(*x, w_after);
            }
        }
        (None, Some(h)) => {
            for ((((x, m), g), h), z) in xs.iter_mut().zip(incoming).zip(grad).zip(h.iter_mut()).zip(z.iter_mut()) {
                *x = x.saturating_add(first(h)).saturating_add(m.0).saturating_add(m.1);
                let z0 = model(*x, *z);
                let mut x1 = update(*x, rule.plain(z0, *g), z0);
                *h = split(&mut x1);
                *x = x1;
                *z = z_of(x1, w_after);
            }
        }
        (None, None) => {
            for (((x, m), g), z) in xs.iter_mut().zip(incoming).zip(grad).zip(z.iter_mut()) {
                *x = x.saturating_add(m.0).saturating_add(m.1);
                let z0 = model(*x, *z);
                *x = update(*x, rule.plain(z0, *g), z0);
                *z = z_of(*x, w_after);
            }
        }
    }
}

/// Makes `v` `n` long; a reused buffer of that length is left as it is (every element is
/// written next), saving a pass that would zero it.
fn sized<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
    if v.len() != n {
        v.clear();
        v.resize(n, T::default());
    }
}

/// The model `z = x / w` of `xs` with up to two messages added to it (in order, each addition
/// saturating, as [`absorb`] would add them), without changing `xs`: the model an evaluation
/// reads of a node with messages waiting.
pub fn model_of(xs: &[i64], messages: [Option<&[i64]>; 2], w: f64) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
        // SAFETY: the features this clone is compiled for were detected just now.
        #[allow(unsafe_code)]
        unsafe {
            return model_avx512(xs, messages, w);
        }
    }
    model_body(xs, messages, w)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn model_avx512(xs: &[i64], messages: [Option<&[i64]>; 2], w: f64) -> Vec<f32> {
    model_body(xs, messages, w)
}

/// Collected, not written into a zeroed vector: zeroing 400 kB costs a third of the pass.
#[inline(always)]
fn model_body(xs: &[i64], messages: [Option<&[i64]>; 2], w: f64) -> Vec<f32> {
    match messages {
        [Some(a), Some(b)] => {
            xs.iter().zip(a).zip(b).map(|((&x, &a), &b)| z_of(x.saturating_add(a).saturating_add(b), w)).collect()
        }
        [Some(m), None] | [None, Some(m)] => xs.iter().zip(m).map(|(&x, &m)| z_of(x.saturating_add(m), w)).collect(),
        [None, None] => xs.iter().map(|&x| z_of(x, w)).collect(),
    }
}

/// Adds pushed mass `from` to `xs`, saturating.
pub fn absorb(xs: &mut [i64], from: &[i64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature this clone is compiled for was detected just now.
        #[allow(unsafe_code)]
        unsafe {
            return absorb_avx512(xs, from);
        }
    }
    absorb_body(xs, from)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
fn absorb_avx512(xs: &mut [i64], from: &[i64]) {
    absorb_body(xs, from)
}

#[inline(always)]
fn absorb_body(xs: &mut [i64], from: &[i64]) {
    xs.iter_mut().zip(from).for_each(|(a, b)| *a = a.saturating_add(*b));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimizer::{OptimizerConfig, Sgd};

    #[test]
    fn rounding_to_fixed_point_is_libms_round_bit_for_bit() {
        let mut v = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -1.5,
            2.5,
            -2.5,
            0.49999999999999994,
            -0.49999999999999994,
            4503599627370495.5,
            -4503599627370495.5,
            4503599627370496.0,
            9007199254740993.0,
            9.223372036854776e18,
            -9.223372036854776e18,
            1e300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
            123456789.49999997,
        ];
        // And values of every magnitude, with their halves.
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..200_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let mag = 2f64.powi((s % 70) as i32 - 5);
            let x = (s >> 11) as f64 / (1u64 << 53) as f64 * mag * if s & 1 == 0 { 1.0 } else { -1.0 };
            v.push(x);
            let half = x.trunc() + 0.5 * x.signum();
            v.extend([half, half.next_up(), half.next_down()]);
        }
        for x in v {
            assert_eq!(round_to_i64(x), x.round() as i64, "{x:e}");
        }
    }

    /// The passes the one-pass step replaced, as they were written.
    fn by_passes(xs: &mut [i64], w_units: &mut i64, grad: &[f32], opt: &mut Sgd, gossip: bool) -> Vec<i64> {
        let w = *w_units as f64 / (1i64 << 40) as f64;
        let z: Vec<f32> = xs.iter().map(|&x| (x as f64 / X_ONE / w) as f32).collect();
        let mut stepped = z.clone();
        opt.apply(&mut stepped, grad);
        for (x, (s, z)) in xs.iter_mut().zip(stepped.iter().zip(&z)) {
            *x = x.saturating_add(((w * (s - z) as f64) * X_ONE).round() as i64);
        }
        if gossip {
            let half = xs.iter_mut().map(split).collect();
            split(w_units);
            half
        } else {
            Vec::new()
        }
    }

    #[test]
    fn the_one_pass_step_gives_the_bits_of_the_passes_it_replaced() {
        let n = 1001;
        for (momentum, nesterov, gossip) in
            [(0.0, false, true), (0.9, true, true), (0.9, false, false), (0.0, false, false)]
        {
            let cfg = OptimizerConfig { lr: 0.05, momentum, nesterov, weight_decay: 1e-4, ..Default::default() };
            let xs0: Vec<i64> = (0..n).map(|i| ((i as i64 * 7919) % 2003 - 1000) << 26).collect();
            let grad: Vec<f32> = (0..n).map(|i| ((i * 31 % 97) as f32 - 48.0) / 17.0).collect();
            let (mut a, mut b) = (xs0.clone(), xs0);
            let (mut oa, mut ob) = (Sgd::new(cfg, n, 1), Sgd::new(cfg, n, 1));
            for round in 0..3 {
                let mut wa = (1i64 << 40) + 12345 * round;
                let w = wa as f64 / (1i64 << 40) as f64;
                // A pushed half arrives before odd rounds: added at once, or by the pass.
                let msg: Vec<i64> = (0..n as i64).map(|i| (i * 104729 % 4001 - 2000) << 24).collect();
                if round % 2 == 1 {
                    absorb(&mut a, &msg);
                }
                let expected_half = by_passes(&mut a, &mut wa, &grad, &mut oa, gossip);
                let (mut half, mut z) = (Vec::new(), Vec::new());
                let mut wb = (1i64 << 40) + 12345 * round;
                let kept = if gossip {
                    split(&mut wb);
                    Some(wb as f64 / (1i64 << 40) as f64)
                } else {
                    None
                };
                let (rule, velocity) = ob.take_step(1.0);
                Step {
                    xs: &mut b,
                    incoming: [(round % 2 == 1).then_some(&msg[..]), None],
                    grad: &grad,
                    rule,
                    velocity,
                    w,
                    sent: kept.map(|k| (&mut half, k)),
                    sent_holds_first: false,
                    z: &mut z,
                    z_valid: false,
                }
                .run();
                assert_eq!(a, b, "x, momentum {momentum}, round {round}");
                assert_eq!(half, expected_half, "the half sent");
                assert_eq!(oa.velocity(), ob.velocity());
                let w_after = if gossip { wa as f64 / (1i64 << 40) as f64 } else { w };
                let z_expected: Vec<f32> = a.iter().map(|&x| (x as f64 / X_ONE / w_after) as f32).collect();
                assert_eq!(z, z_expected, "the next model");
            }
        }
    }

    #[test]
    fn messages_added_in_the_pass_give_the_bits_of_adding_them_one_after_the_other() {
        // Values near the ends of i64, where the order of two saturating additions shows.
        let n = 777;
        let top = i64::MAX - (1 << 20);
        let xs0: Vec<i64> = (0..n as i64)
            .map(|i| {
                if i % 3 == 0 {
                    top - i
                } else if i % 3 == 1 {
                    -top + i
                } else {
                    (i - 300) << 30
                }
            })
            .collect();
        let a: Vec<i64> = (0..n as i64).map(|i| if i % 2 == 0 { 1 << 30 } else { -(1 << 30) } * (i % 7 + 1)).collect();
        let b: Vec<i64> = (0..n as i64).map(|i| if i % 2 == 0 { -(1 << 29) } else { 1 << 29 } * (i % 5 + 1)).collect();
        let grad: Vec<f32> = (0..n).map(|i| ((i * 17 % 41) as f32 - 20.0) / 9.0).collect();
        let in_turn = |i: usize| xs0[i].saturating_add(a[i]).saturating_add(b[i]);
        assert!((0..n).any(|i| in_turn(i) != xs0[i].saturating_add(a[i] + b[i])), "inputs where the order shows");
        for (momentum, gossip) in [(0.9, true), (0.0, false)] {
            let cfg = OptimizerConfig { lr: 0.1, momentum, weight_decay: 1e-4, ..Default::default() };
            let (mut oa, mut ob) = (Sgd::new(cfg, n, 1), Sgd::new(cfg, n, 1));
            let (mut one, mut two) = (xs0.clone(), xs0.clone());
            absorb(&mut one, &a);
            let mut runs = Vec::new();
            for (xs, opt, incoming) in
                [(&mut one, &mut oa, [Some(&b[..]), None]), (&mut two, &mut ob, [Some(&a[..]), Some(&b[..])])]
            {
                let (mut half, mut z) = (Vec::new(), Vec::new());
                let (rule, velocity) = opt.take_step(1.0);
                let sent = gossip.then_some((&mut half, 0.5));
                let sent_holds_first = false;
                Step {
                    xs,
                    incoming,
                    grad: &grad,
                    rule,
                    velocity,
                    w: 1.0,
                    sent,
                    sent_holds_first,
                    z: &mut z,
                    z_valid: false,
                }
                .run();
                runs.push((half, z));
            }
            assert_eq!(one, two, "x, momentum {momentum}");
            assert_eq!(runs[0], runs[1], "the half sent and the next model");
            assert_eq!(oa.velocity(), ob.velocity());
            if gossip {
                // The first message's own buffer takes the half sent, written over it.
                let mut oc = Sgd::new(cfg, n, 1);
                let (mut three, mut half, mut z) = (xs0.clone(), a.clone(), Vec::new());
                let (rule, velocity) = oc.take_step(1.0);
                Step {
                    xs: &mut three,
                    incoming: [Some(&b[..]), None],
                    grad: &grad,
                    rule,
                    velocity,
                    w: 1.0,
                    sent: Some((&mut half, 0.5)),
                    sent_holds_first: true,
                    z: &mut z,
                    z_valid: false,
                }
                .run();
                assert_eq!(three, two, "x, the half written over the first message");
                assert_eq!((half, z), runs[1], "the half sent and the next model, written over the first message");
                assert_eq!(oc.velocity(), ob.velocity());
                // Three messages: the first in the half's buffer, two more in the pass; as
                // adding the first two at once and the third in the pass.
                let c: Vec<i64> = b.iter().rev().map(|v| v.wrapping_mul(3)).collect();
                let mut outs = Vec::new();
                for fused in [false, true] {
                    let mut o = Sgd::new(cfg, n, 1);
                    let (mut xs, mut z) = (xs0.clone(), Vec::new());
                    let mut half = if fused { a.clone() } else { Vec::new() };
                    if !fused {
                        absorb(&mut xs, &a);
                        absorb(&mut xs, &b);
                    }
                    let incoming = if fused { [Some(&b[..]), Some(&c[..])] } else { [Some(&c[..]), None] };
                    let (rule, velocity) = o.take_step(1.0);
                    let sent = Some((&mut half, 0.5));
                    Step {
                        xs: &mut xs,
                        incoming,
                        grad: &grad,
                        rule,
                        velocity,
                        w: 1.0,
                        sent,
                        sent_holds_first: fused,
                        z: &mut z,
                        z_valid: false,
                    }
                    .run();
                    outs.push((xs, half, z, o.velocity().to_vec()));
                }
                assert_eq!(outs[0], outs[1], "three messages in one pass");
            }
        }
    }

    #[test]
    fn the_model_of_a_node_with_messages_waiting_adds_them_in_order() {
        let n = 1001;
        let top = i64::MAX - (1 << 20);
        let xs: Vec<i64> =
            (0..n as i64).map(|i| if i % 4 == 0 { top - i } else { (i * 7919 % 2001 - 1000) << 26 }).collect();
        let a: Vec<i64> = (0..n as i64).map(|i| (1 << 30) * (i % 9 - 4)).collect();
        let b: Vec<i64> = (0..n as i64).map(|i| -(1 << 29) * (i % 5 - 2)).collect();
        let w = 0.8125;
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        let expect = |f: &dyn Fn(usize) -> i64| bits((0..n).map(|i| z_of(f(i), w)).collect());
        assert_eq!(bits(model_of(&xs, [None, None], w)), expect(&|i| xs[i]));
        assert_eq!(bits(model_of(&xs, [Some(&a), None], w)), expect(&|i| xs[i].saturating_add(a[i])));
        assert_eq!(
            bits(model_of(&xs, [Some(&a), Some(&b)], w)),
            expect(&|i| xs[i].saturating_add(a[i]).saturating_add(b[i]))
        );
    }

    #[test]
    fn the_model_left_by_the_last_pass_is_read_instead_of_divided_out_again() {
        let n = 513;
        let cfg = OptimizerConfig { lr: 0.1, momentum: 0.9, ..Default::default() };
        let grad: Vec<f32> = (0..n).map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0).collect();
        let xs0: Vec<i64> = (0..n).map(|i| ((i as i64 * 977) % 301 - 150) << 28).collect();
        let w = 0.75;
        let (mut a, mut b) = (xs0.clone(), xs0);
        let (mut oa, mut ob) = (Sgd::new(cfg, n, 1), Sgd::new(cfg, n, 1));
        let (mut za, mut zb) = (Vec::new(), Vec::new());
        for round in 0..3 {
            for (xs, opt, z, valid) in [(&mut a, &mut oa, &mut za, false), (&mut b, &mut ob, &mut zb, round > 0)] {
                let (rule, velocity) = opt.take_step(1.0);
                let incoming = [None, None];
                Step {
                    xs,
                    incoming,
                    grad: &grad,
                    rule,
                    velocity,
                    w,
                    sent: None,
                    sent_holds_first: false,
                    z,
                    z_valid: valid,
                }
                .run();
            }
            assert_eq!(a, b, "round {round}");
            assert_eq!(za, zb, "round {round}");
        }
    }
}
