//! Binomial-tree all-reduce: reduce the whole vector to member 0 in ceil(log2 p) rounds, then
//! broadcast it back down the same tree. Cost 2·ceil(log2 p)·(α + S/B).

use super::{Op, Step};

/// Member `me`'s steps.
pub fn schedule(p: usize, me: usize, dim: usize) -> Vec<Step> {
    let levels = usize::BITS - (p.max(1) - 1).leading_zeros(); // ceil(log2 p)
    let all = 0..dim;
    let mut steps = Vec::new();
    for k in 0..levels {
        let mask = 1usize << k;
        if me & mask != 0 && me & (mask - 1) == 0 {
            steps.push(Step { round: k, send: Some((me - mask, all.clone())), recv: None });
        } else if me & (2 * mask - 1) == 0 && me + mask < p {
            steps.push(Step { round: k, send: None, recv: Some((me + mask, all.clone(), Op::Add)) });
        }
    }
    for k in (0..levels).rev() {
        let mask = 1usize << k;
        let round = levels + (levels - 1 - k);
        if me & (2 * mask - 1) == 0 && me + mask < p {
            steps.push(Step { round, send: Some((me + mask, all.clone())), recv: None });
        } else if me & (2 * mask - 1) == mask {
            steps.push(Step { round, send: None, recv: Some((me - mask, all.clone(), Op::Copy)) });
        }
    }
    steps
}
