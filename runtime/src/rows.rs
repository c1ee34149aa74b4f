//! Vectors added element by element in a fixed order, several at a pass.
//!
//! The in-process ring's average and the gathered modes' sums add a hundred gradients of a
//! model element by element, in an order that fixes the bits. Added one vector after another,
//! each element of the sum is loaded and stored once for every vector; [`add_rows`] adds eight
//! vectors in one pass, the same additions in the same order, so the sum is loaded and stored
//! once for eight. A hundred gradients of 101,770 parameters, summed from memory the ring's way,
//! took 2.0-2.6 ms instead of 4.6-5.8 ms on the 2-core Intel Xeon VM (docs/performance.md).

/// Vectors added in one pass over the sum (sixteen were no faster).
const PASS: usize = 8;

/// Adds `rows` to `acc` in the order given: element `i` becomes
/// `(…((acc[i] + rows[0][i]) + rows[1][i]) + …)`, the very additions, in the very order, of
/// adding one row after another, so the same bits. A row shorter than `acc` is added over its
/// length only, as a `zip` would.
///
/// NaNs are NaNs either way, but which NaN (its sign and payload) is not a matter of the order:
/// where both operands of an x86 addition are NaNs it returns the first, and the compiler may
/// swap the operands of an addition (the one-row-at-a-time loop swaps them on every other
/// vector of its unrolled body). So a NaN's bits follow the compiled code, as they did before.
pub fn add_rows(acc: &mut [f32], rows: &[&[f32]]) {
    let n = acc.len();
    let mut groups = rows.chunks_exact(PASS);
    for group in &mut groups {
        if group.iter().all(|r| r.len() >= n) {
            let g: [&[f32]; PASS] = std::array::from_fn(|j| &group[j][..n]);
            for (i, a) in acc.iter_mut().enumerate() {
                let mut s = *a;
                for r in &g {
                    s += r[i];
                }
                *a = s;
            }
        } else {
            group.iter().for_each(|r| add_row(acc, r));
        }
    }
    groups.remainder().iter().for_each(|r| add_row(acc, r));
}

fn add_row(acc: &mut [f32], row: &[f32]) {
    acc.iter_mut().zip(row).for_each(|(a, b)| *a += b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// The bits of one row after another, whatever the number of rows (below, at and past a
    /// pass), with values whose sums round differently in another order, signed zeros,
    /// infinities and NaNs, and rows shorter than the sum. A NaN is compared as a NaN, not by its
    /// bits (see [`add_rows`]).
    #[test]
    fn the_bits_of_adding_one_row_after_another() {
        let mut rng = dsgd_sim::rng::Streams::new(5).stream("rows test", 0);
        let special = [0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MIN_POSITIVE / 3.0, f32::MAX];
        for rows in [0, 1, 7, 8, 9, 16, 23, 99] {
            for short in [false, true] {
                let n = 37;
                let vs: Vec<Vec<f32>> = (0..rows)
                    .map(|r| {
                        let len = if short && r % 5 == 3 { n - 4 } else { n };
                        (0..len)
                            .map(|_| match rng.random_range(0..20) {
                                0 => special[rng.random_range(0..special.len())],
                                1 => -f32::from_bits(rng.random_range(0..0x7f80_0000)),
                                _ => (rng.random::<f32>() - 0.5) * 10f32.powi(rng.random_range(-8..9)),
                            })
                            .collect()
                    })
                    .collect();
                let start: Vec<f32> = (0..n).map(|i| i as f32 * 0.1 - 1.7).collect();
                let mut expect = start.clone();
                vs.iter().for_each(|v| add_row(&mut expect, v));
                let mut got = start;
                add_rows(&mut got, &vs.iter().map(|v| &v[..]).collect::<Vec<_>>());
                let bits =
                    |v: &[f32]| v.iter().map(|x| if x.is_nan() { u32::MAX } else { x.to_bits() }).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&expect), "{rows} rows, short {short}");
            }
        }
    }
}
