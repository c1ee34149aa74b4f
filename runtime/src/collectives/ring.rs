//! Ring all-reduce: p-1 rounds of reduce-scatter, then p-1 rounds of all-gather, each moving one
//! chunk of S/p bytes to the next member. Cost 2(p-1)(α + S/(pB)).

use super::{chunk, Op, Step};
use std::ops::Range;

/// Member `me`'s steps.
pub fn schedule(p: usize, me: usize, dim: usize) -> Vec<Step> {
    (0..steps(p)).map(|k| step(p, me, dim, k)).collect()
}

/// How many steps a member of a ring of `p` takes: 2(p-1).
pub fn steps(p: usize) -> usize {
    2 * p.saturating_sub(1)
}

/// Member `me`'s step `k` (of [`steps`]), computed on demand: a member never needs its whole
/// schedule at once, so a ring of p members holds O(p), not O(p²), steps.
pub fn step(p: usize, me: usize, dim: usize, k: usize) -> Step {
    step_over(p, me, k, |c| chunk(dim, p, c))
}

/// Step `k` of member `me` of a ring of `p` whose `c`-th chunk is `at(c)`. After the first p-1
/// steps (reduce-scatter) member `i` holds the sum of chunk `(i+1) mod p`; the last p-1 steps
/// (all-gather) hand the sums round. Members are `0..p` and the round is `k`; a caller that runs
/// the ring among other members or at other rounds maps them.
pub fn step_over(p: usize, me: usize, k: usize, at: impl Fn(usize) -> Range<usize>) -> Step {
    let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
    let at = |c: isize| at(c.rem_euclid(p as isize) as usize);
    let (i, half) = (me as isize, p - 1);
    if k < half {
        let s = k as isize;
        Step { round: k as u32, send: Some((next, at(i - s))), recv: Some((prev, at(i - s - 1), Op::Add)) }
    } else {
        let s = (k - half) as isize;
        Step { round: k as u32, send: Some((next, at(i + 1 - s))), recv: Some((prev, at(i - s), Op::Copy)) }
    }
}
