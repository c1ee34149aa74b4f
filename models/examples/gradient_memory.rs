//! What memory outside the cache costs one MLP gradient (784-128-10, batch 32, the lean CPU path
//! `mlp_grad::gradient_owned`): the floor under `dsgd bench-real` at 100 workers.
//!
//! Four ways of running the same gradients, each the best of 20 rounds of 500 (the machine's
//! neighbours move single rounds by tens of percent):
//! - warm: one parameter vector, each gradient dropped at once (its memory reused while cached);
//! - cold output: the last 100 gradients kept alive, as a sync step keeps every member's until the
//!   ring's sum;
//! - cold parameters: 100 parameter vectors in turn, as 100 gossip replicas or async_ps snapshots;
//! - both.
//!
//! Run: `cargo run --release -p dsgd-models --example gradient_memory`.

use dsgd_models::nets::mlp_grad;
use std::collections::VecDeque;
use std::time::Instant;

const WIDTHS: [usize; 3] = [784, 128, 10];
const BATCH: usize = 32;
const REPLICAS: usize = 100;

fn main() {
    let count: usize = WIDTHS.windows(2).map(|w| w[0] * w[1] + w[1]).sum();
    let mut state = 1u64;
    let mut uniform = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 40) as f32 / (1u64 << 24) as f32
    };
    let params: Vec<Vec<f32>> = (0..REPLICAS).map(|_| (0..count).map(|_| (uniform() - 0.5) * 0.1).collect()).collect();
    let x: Vec<f32> = (0..BATCH * WIDTHS[0]).map(|_| uniform()).collect();
    let labels: Vec<i64> = (0..BATCH as i64).map(|i| i % 10).collect();
    let modes = ["warm", "cold output", "cold parameters", "cold output and parameters"];
    let (rounds, steps) = (20, 500);
    let mut best = [f64::MAX; 4];
    for _ in 0..rounds {
        for (mode, best) in best.iter_mut().enumerate() {
            let (keep_outputs, rotate_params) = (mode & 1 == 1, mode & 2 == 2);
            let mut kept = VecDeque::with_capacity(REPLICAS + 1);
            let start = Instant::now();
            for step in 0..steps {
                let p = &params[if rotate_params { step % REPLICAS } else { 0 }];
                let (g, _loss) = mlp_grad::gradient_owned(&WIDTHS, p, &x, &labels);
                if keep_outputs {
                    kept.push_back(g);
                    if kept.len() > REPLICAS {
                        kept.pop_front();
                    }
                }
            }
            *best = best.min(start.elapsed().as_secs_f64() * 1e3 / steps as f64);
        }
    }
    println!("MLP {WIDTHS:?} gradient at batch {BATCH}, best of {rounds} rounds of {steps}:");
    for (name, ms) in modes.iter().zip(best) {
        println!("  {name:>27}: {ms:.3} ms ({:+.3} ms over warm)", ms - best[0]);
    }
}
