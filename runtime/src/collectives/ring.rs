//! Ring all-reduce: p-1 rounds of reduce-scatter, then p-1 rounds of all-gather, each moving one
//! chunk of S/p bytes to the next member. Cost 2(p-1)(α + S/(pB)).

use super::{chunk, Op, Step};

/// Member `me`'s steps.
pub fn schedule(p: usize, me: usize, dim: usize) -> Vec<Step> {
    if p < 2 {
        return Vec::new();
    }
    let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
    let at = |k: isize| chunk(dim, p, k.rem_euclid(p as isize) as usize);
    let i = me as isize;
    let mut steps = Vec::with_capacity(2 * (p - 1));
    for s in 0..p as isize - 1 {
        steps.push(Step { round: s as u32, send: Some((next, at(i - s))), recv: Some((prev, at(i - s - 1), Op::Add)) });
    }
    for s in 0..p as isize - 1 {
        steps.push(Step {
            round: (p as isize - 1 + s) as u32,
            send: Some((next, at(i + 1 - s))),
            recv: Some((prev, at(i - s), Op::Copy)),
        });
    }
    steps
}
