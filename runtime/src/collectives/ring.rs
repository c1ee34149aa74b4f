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
#[inline(always)]
pub fn step(p: usize, me: usize, dim: usize, k: usize) -> Step {
    step_over(p, me, k, |c| chunk(dim, p, c))
}

/// Step `k` of member `me` of a ring of `p` whose `c`-th chunk is `at(c)`. After the first p-1
/// steps (reduce-scatter) member `i` holds the sum of chunk `(i+1) mod p`; the last p-1 steps
/// (all-gather) hand the sums round. Members are `0..p` and the round is `k`; a caller that runs
/// the ring among other members or at other rounds maps them.
#[inline(always)]
pub fn step_over(p: usize, me: usize, k: usize, at: impl Fn(usize) -> Range<usize>) -> Step {
    let (next, prev) = (if me + 1 == p { 0 } else { me + 1 }, if me == 0 { p - 1 } else { me - 1 });
    // Chunk (me + p + 1 - s - back) mod p, without a division: the argument is below 3p.
    let chunk = |s: usize, back: usize| {
        let mut c = me + p + 1 - s - back;
        while c >= p {
            c -= p;
        }
        at(c)
    };
    let half = p - 1;
    if k < half {
        Step { round: k as u32, send: Some((next, chunk(k, 1))), recv: Some((prev, chunk(k, 2), Op::Add)) }
    } else {
        let s = k - half;
        Step { round: k as u32, send: Some((next, chunk(s, 0))), recv: Some((prev, chunk(s, 1), Op::Copy)) }
    }
}

/// What every member of a ring holds at the end, computed in one place from all `p`
/// contributions (in member order) instead of message by message: the same additions in the
/// same order, so the same bits as [`super::Run`]s of [`schedule`]s over a nominal vector of
/// `wire` elements (mapped onto the contributions as `Run` maps them). Chunk `c` starts as member
/// `c`'s values; member `c + k` (round the ring) adds its own values to the partial sum it
/// receives; the all-gather only copies. Every element is summed on its own, so the vector is
/// cut into `threads` parts summed side by side: the bits do not depend on `threads`.
pub fn result(contributions: &[&[f32]], wire: usize, threads: usize) -> Vec<f32> {
    let n = contributions.first().map_or(0, |c| c.len());
    debug_assert!(contributions.iter().all(|c| c.len() == n), "contributions of unequal lengths");
    let mut out = vec![0.0f32; n];
    // A part is worth a thread when it is a few hundred kilobytes of additions.
    let threads = threads.clamp(1, (n * contributions.len() / (1 << 16)).max(1));
    std::thread::scope(|s| {
        let mut rest = &mut out[..];
        let mut start = 0;
        for t in 0..threads {
            let end = n * (t + 1) / threads;
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(end - start);
            rest = tail;
            if t + 1 == threads {
                sum_part(contributions, wire, start, part);
            } else {
                s.spawn(move || sum_part(contributions, wire, start, part));
            }
            start = end;
        }
    });
    out
}

/// Elements `from..from + out.len()` of [`result`], chunk by chunk.
fn sum_part(contributions: &[&[f32]], wire: usize, from: usize, out: &mut [f32]) {
    let (p, n) = (contributions.len(), contributions.first().map_or(0, |c| c.len()));
    let wire = wire.max(1);
    let at = |x: usize| (x as u128 * n as u128 / wire as u128) as usize;
    let to = from + out.len();
    let mut rows = Vec::with_capacity(p);
    for c in 0..p {
        let nominal = chunk(wire, p, c);
        let r = at(nominal.start).max(from)..at(nominal.end).min(to);
        if r.is_empty() {
            continue;
        }
        let acc = &mut out[r.start - from..r.end - from];
        acc.copy_from_slice(&contributions[c][r.clone()]);
        rows.clear();
        rows.extend((1..p).map(|k| &contributions[(c + k) % p][r.clone()]));
        crate::rows::add_rows(acc, &rows);
    }
}
