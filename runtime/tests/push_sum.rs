//! Push-sum conserves the sums of weights and of weighted parameters exactly, counting messages
//! in flight. Driven through a minimal in-test executor of the protocol API, which delivers
//! messages in an adversarial (seeded, shuffled) order.

use dsgd_models::quadratic::Quadratic;
use dsgd_models::Workload;
use dsgd_runtime::optimizer::OptimizerConfig;
use dsgd_runtime::protocol::{Context, JobId, Phase, Protocol};
use dsgd_runtime::protocols::gossip::{GossipConfig, GossipMode, GossipMsg, GossipNode};
use dsgd_sim::{SimDuration, SimTime, TimerId};

struct Ctx<'a> {
    rank: usize,
    ranks: usize,
    wl: &'a Quadratic,
    out: &'a mut Vec<(usize, usize, GossipMsg)>,
    jobs: &'a mut Vec<(usize, JobId, Vec<f32>)>,
    next: &'a mut u64,
}

impl Context<GossipMsg> for Ctx<'_> {
    fn now(&self) -> SimTime {
        SimTime::ZERO
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn ranks(&self) -> usize {
        self.ranks
    }
    fn send(&mut self, to: usize, msg: GossipMsg, _bytes: u64) {
        self.out.push((self.rank, to, msg));
    }
    fn set_timer(&mut self, _after: SimDuration, _tag: u64) -> TimerId {
        TimerId(0)
    }
    fn cancel_timer(&mut self, _timer: TimerId) {}
    fn start_gradient(&mut self, params: Vec<f32>, _batch: usize) -> JobId {
        *self.next += 1;
        let job = dsgd_sim::JobId(*self.next);
        self.jobs.push((self.rank, job, params));
        job
    }
    fn workload(&self) -> &dyn Workload {
        self.wl
    }
    fn set_phase(&mut self, _phase: Phase) {}
    fn record_update(&mut self, _staleness: u64) {}
    fn record_iteration(&mut self, _took: SimDuration) {}
    fn random(&mut self) -> u64 {
        *self.next = self.next.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *self.next >> 11
    }
    fn absorb(&mut self, _x: u64) {}
    fn note(&mut self, _what: String) {}
}

/// Sum of x (per coordinate) and of w over nodes and messages in flight, exactly (fixed point).
fn mass(nodes: &[GossipNode], flight: &[(usize, usize, GossipMsg)]) -> (Vec<i128>, i128) {
    let dim = nodes[0].mass().0.len();
    let mut x = vec![0i128; dim];
    let mut w = 0i128;
    for n in nodes {
        let (nx, nw) = n.mass();
        x.iter_mut().zip(nx).for_each(|(a, &b)| *a += b as i128);
        w += nw as i128;
    }
    for (_, _, m) in flight {
        if let GossipMsg::PushSum { x: mx, w: mw, .. } = m {
            x.iter_mut().zip(mx).for_each(|(a, &b)| *a += b as i128);
            w += *mw as i128;
        }
    }
    (x, w)
}

fn drive(lr: f64, rounds: usize) -> (Vec<(Vec<i128>, i128)>, Vec<i128>) {
    let n = 6;
    let wl = Quadratic::new(8, 1.0, 0.1, 1.0, 1.0);
    let cfg = GossipConfig { mode: GossipMode::Push, ..Default::default() };
    let opt = OptimizerConfig { lr, ..Default::default() };
    let mut nodes: Vec<GossipNode> = (0..n).map(|_| GossipNode::new(cfg, 4, opt)).collect();
    let (mut flight, mut jobs, mut next) = (Vec::new(), Vec::new(), 12345u64);
    for (r, node) in nodes.iter_mut().enumerate() {
        let mut c = Ctx { rank: r, ranks: n, wl: &wl, out: &mut flight, jobs: &mut jobs, next: &mut next };
        node.on_start(&mut c);
    }
    let mut trace = vec![mass(&nodes, &flight)];
    let mut gradient_mass = vec![0i128; 8];
    for step in 0..rounds {
        // Alternate: finish a random job, or deliver a random message.
        let pick = (next >> 7) as usize;
        next = next.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        if step % 3 != 0 && !flight.is_empty() {
            let (from, to, msg) = flight.swap_remove(pick % flight.len());
            let mut c = Ctx { rank: to, ranks: n, wl: &wl, out: &mut flight, jobs: &mut jobs, next: &mut next };
            nodes[to].on_message(&mut c, from, msg);
        } else if !jobs.is_empty() {
            let (r, job, params) = jobs.swap_remove(pick % jobs.len());
            let before = nodes[r].mass().0.to_vec();
            let mut g = vec![0.0; params.len()];
            wl.gradient(&params, dsgd_models::GradRequest { worker: r, batch: 4, seed: step as u64 }, &mut g);
            let mut c = Ctx { rank: r, ranks: n, wl: &wl, out: &mut flight, jobs: &mut jobs, next: &mut next };
            nodes[r].on_gradient(&mut c, job, g, 0.0);
            // The gradient step's own change of x (before the node halved for gossip).
            let (after, _) = nodes[r].mass();
            let sent: Vec<i64> = match flight.last() {
                Some((_, _, GossipMsg::PushSum { x, .. })) => x.clone(),
                _ => vec![0; 8],
            };
            for i in 0..8 {
                gradient_mass[i] += after[i] as i128 + sent[i] as i128 - before[i] as i128;
            }
        }
        trace.push(mass(&nodes, &flight));
    }
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
