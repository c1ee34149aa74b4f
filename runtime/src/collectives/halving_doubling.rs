//! Recursive halving-doubling all-reduce (Rabenseifner): among the largest power of two q <= p
//! members, log2 q rounds of recursive halving (each member keeps half of its range and reduces
//! it) then log2 q rounds of recursive doubling (gathering). The p - q extra members first hand
//! their vector to a partner and get the result back at the end. Cost for a power of two:
//! 2·log2(p)·α + 2·S·(p-1)/(p·B).

use super::{Op, Step};
use std::ops::Range;

/// Member `me`'s steps.
pub fn schedule(p: usize, me: usize, dim: usize) -> Vec<Step> {
    if p < 2 {
        return Vec::new();
    }
    let q = 1usize << (usize::BITS - 1 - p.leading_zeros()); // largest power of two <= p
    let levels = q.trailing_zeros();
    let post = 2 * levels + 1;
    let all = 0..dim;
    if me >= q {
        return vec![
            Step { round: 0, send: Some((me - q, all.clone())), recv: None },
            Step { round: post, send: None, recv: Some((me - q, all, Op::Copy)) },
        ];
    }
    let mut steps = Vec::new();
    if me + q < p {
        steps.push(Step { round: 0, send: None, recv: Some((me + q, all.clone(), Op::Add)) });
    }
    // Halving: track the range this member is responsible for at each level.
    let mut ranges: Vec<Range<usize>> = vec![all.clone()];
    for k in 0..levels {
        let partner = me ^ (q >> (k + 1));
        let cur = ranges.last().expect("non-empty").clone();
        let mid = cur.start + (cur.end - cur.start) / 2;
        let (keep, give) = if me < partner { (cur.start..mid, mid..cur.end) } else { (mid..cur.end, cur.start..mid) };
        steps.push(Step { round: 1 + k, send: Some((partner, give)), recv: Some((partner, keep.clone(), Op::Add)) });
        ranges.push(keep);
    }
    // Doubling: send what this member holds, receive the partner's half of the level above.
    for k in (0..levels).rev() {
        let partner = me ^ (q >> (k + 1));
        let mine = ranges[k as usize + 1].clone();
        let parent = &ranges[k as usize];
        let theirs = if mine.start == parent.start { mine.end..parent.end } else { parent.start..mine.start };
        steps.push(Step {
            round: 1 + levels + (levels - 1 - k),
            send: Some((partner, mine)),
            recv: Some((partner, theirs, Op::Copy)),
        });
    }
    if me + q < p {
        steps.push(Step { round: post, send: Some((me + q, all)), recv: None });
    }
    steps
}
