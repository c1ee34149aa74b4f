#![allow(missing_docs)]
//! Raw engine throughput: schedule + pop of timer events with 10^4 pending, on one core.
//!
//! `queue`: the bare event queue. `sim_timers`: the full engine (`Sim::set_timer` + `Sim::step`,
//! with stale-event checks and the digest). `sim_messages`: one message hop chain per event pair on
//! a flat 64-node network. Each iteration processes `BATCH` events; criterion reports elements/s.

use criterion::measurement::WallTime;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use dsgd_sim::queue::EventQueue;
use dsgd_sim::rng::splitmix64;
use dsgd_sim::{Occurrence, Sim, SimConfig, SimDuration, SimTime};
use std::cmp::Reverse;

const PENDING: u64 = 10_000;
const BATCH: u64 = 100_000;

fn delay(i: u64) -> u64 {
    1 + splitmix64(i) % 1_000_000
}

type Group<'a> = BenchmarkGroup<'a, WallTime>;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine");
    g.throughput(Throughput::Elements(BATCH));
    queue(&mut g);
    binary_heap(&mut g);
    priority_queue_crate(&mut g);
    sim_timers(&mut g);
    sim_messages(&mut g);
    g.finish();
}

/// The bare event queue.
fn queue(g: &mut Group) {
    let mut q = EventQueue::with_capacity(PENDING as usize);
    let mut i = 0;
    for _ in 0..PENDING {
        q.schedule(SimTime(delay(i)), i).unwrap();
        i += 1;
    }
    g.bench_function("queue", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                let (t, _, e) = q.pop().unwrap();
                black_box(e);
                q.schedule(t + SimDuration(delay(i)), i).unwrap();
                i += 1;
            }
        })
    });
}

/// The same workload on std's binary heap of (time, seq) (the queue's structure before the radix
/// heap), for comparison.
fn binary_heap(g: &mut Group) {
    let mut bh: std::collections::BinaryHeap<Reverse<(u64, u64)>> = std::collections::BinaryHeap::new();
    let mut h = 0;
    for _ in 0..PENDING {
        bh.push(Reverse((delay(h), h)));
        h += 1;
    }
    g.bench_function("binary_heap", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                let Reverse((t, s)) = bh.pop().unwrap();
                black_box(s);
                bh.push(Reverse((t + delay(h), h)));
                h += 1;
            }
        })
    });
}

/// The same workload on the `priority-queue` crate, for comparison.
fn priority_queue_crate(g: &mut Group) {
    let mut pq: priority_queue::PriorityQueue<u64, Reverse<(u64, u64)>, rustc_hash::FxBuildHasher> =
        priority_queue::PriorityQueue::with_default_hasher();
    let mut j = 0;
    for _ in 0..PENDING {
        pq.push(j, Reverse((delay(j), j)));
        j += 1;
    }
    g.bench_function("priority_queue_crate", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                let (k, Reverse((t, _))) = pq.pop().unwrap();
                black_box(k);
                pq.push(j, Reverse((t + delay(j), j)));
                j += 1;
            }
        })
    });
}

/// The full engine's timers.
fn sim_timers(g: &mut Group) {
    let mut sim: Sim<()> = Sim::new(&SimConfig::new(100, 1)).unwrap();
    for k in 0..PENDING {
        sim.set_timer((k % 100) as usize, SimDuration(delay(k)), k).unwrap();
    }
    let mut k = PENDING;
    g.bench_function("sim_timers", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                let (_, occ) = sim.step().unwrap();
                let Occurrence::Timer { node, .. } = occ else { unreachable!() };
                sim.set_timer(node, SimDuration(delay(k)), k).unwrap();
                k += 1;
            }
        })
    });
}

/// Message hops on a flat 64-node network.
fn sim_messages(g: &mut Group) {
    let mut sim: Sim<u64> = Sim::new(&SimConfig::new(64, 1)).unwrap();
    for k in 0..64 {
        sim.send(k, (k + 1) % 64, 1_000, k as u64).unwrap();
    }
    g.bench_function("sim_messages", |b| {
        b.iter(|| {
            let mut delivered = 0;
            while delivered < BATCH / 2 {
                if let (_, Occurrence::Message { to, payload, .. }) = sim.step().unwrap() {
                    sim.send(to, (to + 1 + payload as usize % 7) % 64, 1_000, payload + 1).unwrap();
                    delivered += 1;
                }
            }
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
