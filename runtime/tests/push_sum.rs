//! Push-sum conserves the sums of weights and of weighted parameters exactly, counting messages
//! in flight. Driven through the protocol test kit's recording contexts by a minimal in-test
//! executor, which delivers messages and finishes gradients in an adversarial (seeded, shuffled)
//! order.

use dsgd_models::quadratic::Quadratic;
use dsgd_models::Workload;
use dsgd_runtime::optimizer::OptimizerConfig;
use dsgd_runtime::protocol::{JobId, Protocol};
use dsgd_runtime::protocols::gossip::{GossipConfig, GossipMode, GossipMsg, GossipNode};
use dsgd_runtime::testkit::Recorder;
use std::sync::Arc;

type Flight = Vec<(usize, usize, GossipMsg)>;
type Jobs = Vec<(usize, JobId, Vec<f32>)>;
/// The exact sums of x (per coordinate) and of w.
type Mass = (Vec<i128>, i128);

/// Moves what rank `r`'s last handler sent and started into the shared flight and job lists;
/// returns how many messages it sent.
fn collect(r: usize, c: &mut Recorder<GossipMsg>, flight: &mut Flight, jobs: &mut Jobs) -> usize {
    let sent = c.take_sent();
    let count = sent.len();
    flight.extend(sent.into_iter().map(|(to, m, _)| (r, to, m)));
    jobs.extend(c.take_gradients().into_iter().map(|(job, params, _)| (r, job, params)));
    count
}

/// Sum of x (per coordinate) and of w over nodes and messages in flight, exactly (fixed point).
fn mass(nodes: &[GossipNode], flight: &[(usize, usize, GossipMsg)]) -> Mass {
    let dim = nodes[0].mass().0.len();
    let mut x = vec![0i128; dim];
    let mut w = 0i128;
    for n in nodes {
        let (nx, nw) = n.mass();
        x.iter_mut().zip(nx.iter()).for_each(|(a, &b)| *a += b as i128);
        w += nw as i128;
    }
    for (_, _, m) in flight {
        if let GossipMsg::PushSum { x: mx, w: mw, .. } = m {
            x.iter_mut().zip(mx.iter()).for_each(|(a, &b)| *a += b as i128);
            w += *mw as i128;
        }
    }
    (x, w)
}

/// The mass after every step of `rounds` (`deliveries` of every three steps deliver a message,
/// the others finish a gradient), the mass the gradient steps added, and the most pushes any
/// node held unacknowledged.
fn drive_with(cfg: GossipConfig, lr: f64, rounds: usize, deliveries: usize) -> (Vec<Mass>, Vec<i128>, usize) {
    let n = 6;
    let wl = Quadratic::new(8, 1.0, 0.1, 1.0, 1.0);
    let opt = OptimizerConfig { lr, ..Default::default() };
    let mut nodes: Vec<GossipNode> = (0..n).map(|_| GossipNode::new(cfg, 4, opt)).collect();
    let shared: Arc<dyn Workload> = Arc::new(wl.clone());
    let mut ctxs: Vec<Recorder<GossipMsg>> = (0..n).map(|r| Recorder::new(r, n, shared.clone())).collect();
    let (mut flight, mut jobs, mut next): (Flight, Jobs, u64) = (Vec::new(), Vec::new(), 12345);
    for (r, node) in nodes.iter_mut().enumerate() {
        node.on_start(&mut ctxs[r]);
        collect(r, &mut ctxs[r], &mut flight, &mut jobs);
    }
    let mut trace = vec![mass(&nodes, &flight)];
    let mut gradient_mass = vec![0i128; 8];
    let mut most_in_flight = 0;
    for step in 0..rounds {
        // Alternate: finish a random job, or deliver a random message.
        let pick = (next >> 7) as usize;
        next = next.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if step % 3 >= 3 - deliveries && !flight.is_empty() {
            let (from, to, msg) = flight.swap_remove(pick % flight.len());
            nodes[to].on_message(&mut ctxs[to], from, msg);
            collect(to, &mut ctxs[to], &mut flight, &mut jobs);
        } else if !jobs.is_empty() {
            let (r, job, params) = jobs.swap_remove(pick % jobs.len());
            let before = nodes[r].mass().0.to_vec();
            let mut g = vec![0.0; params.len()];
            wl.gradient(&params, dsgd_models::GradRequest { worker: r, batch: 4, seed: step as u64 }, &mut g);
            nodes[r].on_gradient(&mut ctxs[r], job, g, 0.0);
            let pushed = collect(r, &mut ctxs[r], &mut flight, &mut jobs);
            // The gradient step's own change of x (before the node halved for gossip).
            let (after, _) = nodes[r].mass();
            let sent: Vec<i64> = match flight[flight.len() - pushed..].iter().find_map(|(_, _, m)| match m {
                GossipMsg::PushSum { x, .. } => Some(Vec::clone(x)),
                _ => None,
            }) {
                Some(x) => x,
                None => vec![0; 8],
            };
            for i in 0..8 {
                gradient_mass[i] += after[i] as i128 + sent[i] as i128 - before[i] as i128;
            }
        }
        trace.push(mass(&nodes, &flight));
        most_in_flight = nodes.iter().map(GossipNode::pushes_in_flight).max().unwrap_or(0).max(most_in_flight);
    }
    (trace, gradient_mass, most_in_flight)
}

fn drive(lr: f64, rounds: usize) -> (Vec<Mass>, Vec<i128>) {
    let (trace, gradient_mass, _) =
        drive_with(GossipConfig { mode: GossipMode::Push, ..Default::default() }, lr, rounds, 2);
    (trace, gradient_mass)
}

#[test]
fn push_sum_conserves_mass_exactly_without_gradient_steps() {
    // lr = 0: gossip alone.
    let (trace, _) = drive(0.0, 3_000);
    let (x0, w0) = trace[0].clone();
    assert_eq!(w0, 6 << 40);
    assert!(x0.iter().all(|&x| x == 6 << 32));
    for (i, (x, w)) in trace.iter().enumerate() {
        assert_eq!(*w, w0, "weight sum changed at step {i}");
        assert_eq!(x, &x0, "parameter sum changed at step {i}");
    }
}

#[test]
fn push_sum_conserves_weights_exactly_and_parameters_exactly_up_to_the_gradient_steps() {
    let (trace, gradient_mass) = drive(0.05, 3_000);
    let (x0, w0) = trace[0].clone();
    let (x, w) = trace.last().unwrap();
    assert_eq!(*w, w0);
    for i in 0..x.len() {
        assert_eq!(x[i], x0[i] + gradient_mass[i], "coordinate {i}");
        assert_ne!(gradient_mass[i], 0, "coordinate {i}: no gradient step was taken");
    }
}

#[test]
fn push_sum_with_flow_control_conserves_mass_exactly_and_holds_one_push() {
    // Gradients finish faster than messages are delivered here (two steps in three finish a
    // gradient, the third delivers one message, a push or an acknowledgement), so without a limit
    // nodes hold several pushes at once; with max_in_flight = 1 a node skips its push while one
    // is unacknowledged, and its share goes out with the next.
    let unlimited = GossipConfig { mode: GossipMode::Push, ..Default::default() };
    let (_, _, most) = drive_with(unlimited, 0.05, 3_000, 1);
    assert!(most > 1, "the schedule must pile pushes up without a limit (most {most})");
    let limited = GossipConfig { max_in_flight: Some(1), ..unlimited };
    for lr in [0.0, 0.05] {
        let (trace, gradient_mass, most) = drive_with(limited, lr, 3_000, 1);
        assert_eq!(most, 1, "lr {lr}: a node held {most} pushes");
        let (x0, w0) = trace[0].clone();
        let (x, _) = trace.last().unwrap();
        assert!(trace.iter().all(|(_, w)| *w == w0), "lr {lr}: the weight sum changed");
        for i in 0..x.len() {
            assert_eq!(x[i], x0[i] + gradient_mass[i], "lr {lr}, coordinate {i}");
        }
    }
}
