//! Push-sum's per-gradient pass ([`dsgd_runtime::protocols::push_sum::Step`]) at the MLP's size
//! (101,770 parameters) over 100 nodes' state, visited in turn so that, as in a 100-node run,
//! no node's state is in cache when its step comes: Nesterov momentum, half of `x` sent, with
//! one message waiting (most steps of a push run) and with none (the model read, not divided).
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion};
use dsgd_runtime::optimizer::{OptimizerConfig, Sgd};
use dsgd_runtime::protocols::push_sum::{to_fixed, Step};

const DIM: usize = 101_770;
fn nodes_count() -> usize {
    std::env::var("DSGD_BENCH_NODES").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
}

struct Node {
    xs: Vec<i64>,
    opt: Sgd,
    z: Vec<f32>,
    grad: Vec<f32>,
}

fn bench(c: &mut Criterion) {
    let cfg = OptimizerConfig { lr: 0.05, momentum: 0.9, nesterov: true, ..Default::default() };
    let count = nodes_count();
    let mut nodes: Vec<Node> = (0..count)
        .map(|n| Node {
            xs: (0..DIM).map(|i| to_fixed(((i * 7 + n) % 1000) as f64 * 1e-3 - 0.5)).collect(),
            opt: Sgd::new(cfg, DIM, 1),
            z: vec![0.0; DIM],
            grad: (0..DIM).map(|i| ((i * 13 + n) % 97) as f32 * 1e-3 - 0.05).collect(),
        })
        .collect();
    // Messages in flight, one per node: each step adds one and sends its own half in its place.
    let mut messages: Vec<Vec<i64>> = (0..count).map(|n| nodes[(n + 1) % count].xs.clone()).collect();
    let mut halves: Vec<Vec<i64>> = (0..count).map(|_| vec![0; DIM]).collect();
    let mut g = c.benchmark_group("push_step_mlp_100_nodes");
    g.sample_size(20);
    for (incoming, over) in [(true, false), (true, true), (false, false)] {
        let name = match (incoming, over) {
            (true, false) => "one_message_waiting",
            (true, true) => "one_message_waiting_half_written_over_it",
            _ => "none_waiting",
        };
        let mut k = 0usize;
        g.bench_function(name, |b| {
            b.iter(|| {
                let n = k % count;
                k += 1;
                let node = &mut nodes[n];
                let (rule, velocity) = node.opt.take_step(1.0);
                let msg = std::mem::take(&mut messages[n]);
                if over {
                    // The message's buffer takes the half: the next message is that half.
                    let mut half = msg;
                    Step {
                        xs: &mut node.xs,
                        incoming: [None, None],
                        grad: &node.grad,
                        rule,
                        velocity,
                        w: 1.0,
                        sent: Some((&mut half, 1.0)),
                        sent_holds_first: true,
                        z: &mut node.z,
                        z_valid: false,
                    }
                    .run();
                    messages[n] = half;
                    return;
                }
                let mut half = std::mem::take(&mut halves[n]);
                Step {
                    xs: &mut node.xs,
                    incoming: [incoming.then_some(msg.as_slice()), None],
                    grad: &node.grad,
                    rule,
                    velocity,
                    w: 1.0,
                    sent: Some((&mut half, 1.0)),
                    sent_holds_first: false,
                    z: &mut node.z,
                    z_valid: !incoming,
                }
                .run();
                // Keep `x` from drifting: the half sent comes back as the next message.
                messages[n] = half;
                halves[n] = msg;
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
