//! The simulation tester's invariants fail when a protocol breaks them: a small protocol with a
//! planted defect of each kind runs on the simulator with checks on, and the run must stop with
//! that invariant named. The same protocol without a defect passes, so each test can tell.

use dsgd_models::quadratic::Quadratic;
use dsgd_models::Workload;
use dsgd_runtime::audit::{Audit, MsgAudit};
use dsgd_runtime::protocol::{Context, JobId, Protocol, View};
use dsgd_runtime::sim_exec::{Checks, SimExecutor};
use dsgd_runtime::train::TrainConfig;
use dsgd_sim::{Fault, SimConfig, SimDuration, SimError, SimTime};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Defect {
    None,
    /// The step count goes back at step 5.
    Regress,
    /// Node 1 holds other parameters than node 0 after the same rounds of the same view.
    Disagree,
    /// A push loses a unit of weight on the way.
    LeakWeight,
    /// Every node stops stepping (no update any more) before the faults heal.
    Stall,
}

#[derive(Clone, Debug)]
enum Msg {
    Push { seq: u64, w: i64 },
    Ack { seq: u64 },
}

/// Each node steps every millisecond (shrinking its parameters toward the optimum at zero) and
/// pushes half its weight to the next node, which acknowledges it (push-sum's weights, without
/// the parameters).
struct Toy {
    defect: Defect,
    steps: u64,
    w: i64,
    unacked: BTreeMap<u64, i64>,
    next: u64,
    x: Vec<f32>,
}

const ONE: i64 = 1 << 40;

impl Protocol for Toy {
    type Msg = Msg;
    fn on_start(&mut self, ctx: &mut dyn Context<Msg>) {
        self.x = ctx.workload().init();
        ctx.set_timer(SimDuration::from_secs_f64(1e-3), 0);
    }
    fn on_message(&mut self, ctx: &mut dyn Context<Msg>, from: usize, msg: Msg) {
        match msg {
            Msg::Push { seq, w } => {
                self.w += w;
                ctx.send(from, Msg::Ack { seq }, 8);
            }
            Msg::Ack { seq } => {
                self.unacked.remove(&seq);
            }
        }
    }
    fn on_timer(&mut self, ctx: &mut dyn Context<Msg>, _tag: u64) {
        ctx.set_timer(SimDuration::from_secs_f64(1e-3), 0);
        if self.defect == Defect::Stall && ctx.now() > SimTime::from_secs_f64(0.15) {
            return;
        }
        self.steps += 1;
        ctx.record_update(0);
        self.x.iter_mut().for_each(|v| *v *= 0.99);
        if self.defect == Defect::Disagree && ctx.rank() == 1 {
            self.x[0] += 1e-3;
        }
        let half = self.w / 2;
        self.w -= half;
        self.next += 1;
        self.unacked.insert(self.next, half);
        let w = if self.defect == Defect::LeakWeight && self.steps == 7 { half - 1 } else { half };
        ctx.send((ctx.rank() + 1) % ctx.ranks(), Msg::Push { seq: self.next, w }, 64);
    }
    fn on_gradient(&mut self, _: &mut dyn Context<Msg>, _: JobId, _: Vec<f32>, _: f64) {}
    fn on_crash(&mut self) {
        self.unacked.clear();
    }
    fn on_restart(&mut self, _: &mut dyn Context<Msg>) {
        (self.w, self.steps) = (0, 0);
    }
    fn view(&self) -> View<'_> {
        View::Replica { params: (&self.x[..]).into(), weight: 1.0 }
    }
    fn audit(&self) -> Audit<'_> {
        let steps = if self.defect == Defect::Regress && self.steps == 5 { 3 } else { self.steps };
        let agreed = (self.defect == Defect::Disagree).then_some((7, &[0, 1, 2][..], self.steps, &self.x[..]));
        Audit {
            role: "node",
            stage: Some("stepping"),
            progress: [Some(steps), None],
            agreed,
            push_sum: Some((self.w, &self.unacked, 0)),
        }
    }
    fn audit_msg(msg: &Msg) -> MsgAudit {
        match *msg {
            Msg::Push { seq, w } => MsgAudit::Push { seq, w },
            Msg::Ack { seq } => MsgAudit::Ack { seq },
        }
    }
}

fn run(defect: Defect, checks: Checks, faults: Vec<Fault>) -> Result<u64, SimError> {
    let wl: Arc<dyn Workload> = Arc::new(Quadratic::new(4, 1.0, 0.1, 0.0, 1.0));
    let mut sim = SimConfig::new(3, 1);
    sim.faults.schedule = faults;
    let toy = |_| Toy { defect, steps: 0, w: ONE, unacked: BTreeMap::new(), next: 0, x: Vec::new() };
    let roles: Vec<Toy> = (0..3).map(toy).collect();
    let mut train = TrainConfig::default();
    train.stop.sim_time_s = 1.0;
    train.eval.every_s = 0.05;
    let r = SimExecutor::new(&sim, roles, wl, train)?.with_checks(&sim, checks).run()?;
    Ok(r.metrics.updates)
}

fn violated(r: Result<u64, SimError>) -> &'static str {
    match r {
        Err(SimError::Invariant { invariant, .. }) => invariant,
        other => panic!("expected an invariant violation, got {other:?}"),
    }
}

fn crash_and_restart() -> Vec<Fault> {
    vec![
        Fault::Crash { node: 2, at: SimTime::from_secs_f64(0.1) },
        Fault::Restart { node: 2, at: SimTime::from_secs_f64(0.2) },
    ]
}

#[test]
fn a_sound_protocol_passes_every_check() {
    let live = Checks { liveness: Some((0.2, 0.5)) };
    let updates = run(Defect::None, live, crash_and_restart()).expect("every invariant holds");
    assert!(updates > 2000, "{updates}");
}

#[test]
fn each_planted_defect_is_named() {
    assert_eq!(violated(run(Defect::Regress, Checks::default(), Vec::new())), "progress");
    assert_eq!(violated(run(Defect::Disagree, Checks::default(), Vec::new())), "agreement");
    assert_eq!(violated(run(Defect::LeakWeight, Checks::default(), Vec::new())), "push_sum_mass");
    let live = Checks { liveness: Some((0.2, 0.5)) };
    assert_eq!(violated(run(Defect::Stall, live, crash_and_restart())), "liveness");
}
