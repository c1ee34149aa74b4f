//! The protocols' handlers one call at a time, through the recording context of
//! `dsgd_runtime::testkit` (no executor, no network): what each handler sends, sets and records.

use dsgd_models::quadratic::Quadratic;
use dsgd_models::Workload;
use dsgd_runtime::optimizer::OptimizerConfig;
use dsgd_runtime::protocol::{Phase, Protocol, View};
use dsgd_runtime::protocols::async_ps::{PsConfig, PsMsg, Shard, StalenessLr};
use dsgd_runtime::protocols::easgd::{Centre, EasgdConfig, EasgdMsg, EasgdWorker};
use dsgd_runtime::protocols::gossip::{GossipConfig, GossipMsg, GossipNode};
use dsgd_runtime::protocols::sync::{view_id, Stage, StateMsg, SyncConfig, SyncMsg, SyncWorker};
use dsgd_runtime::testkit::Recorder;
use std::sync::Arc;

fn quadratic() -> Arc<dyn Workload> {
    Arc::new(Quadratic::new(4, 1.0, 0.1, 1.0, 1.0))
}

/// The answers (`Params`) a shard sent, by receiver.
fn answered(ctx: &mut Recorder<PsMsg>) -> Vec<usize> {
    ctx.take_sent().into_iter().filter(|(_, m, _)| matches!(m, PsMsg::Params { .. })).map(|(to, _, _)| to).collect()
}

fn push(grad: f32) -> PsMsg {
    PsMsg::Push { read: 0, grad: vec![grad; 4] }
}

#[test]
fn a_shard_holds_back_a_worker_more_than_the_bound_ahead_of_the_slowest() {
    // Two workers (ranks 0 and 1), one shard (rank 2), bound 1, timeout 5 s.
    let cfg = PsConfig { shards: 1, staleness_bound: Some(1), timeout_s: 5.0, ..Default::default() };
    let mut shard = Shard::new(0, 1, 2, cfg, OptimizerConfig::default());
    let mut ctx: Recorder<PsMsg> = Recorder::new(2, 3, quadratic());
    shard.on_start(&mut ctx);
    assert_eq!(ctx.phase, Some(Phase::Idle));
    shard.on_message(ctx.at(0.1), 1, PsMsg::Pull);
    shard.on_message(ctx.at(0.2), 0, push(0.1));
    assert_eq!(answered(&mut ctx), [1, 0], "one push ahead of worker 1: within the bound");
    shard.on_message(ctx.at(0.3), 0, push(0.1));
    assert_eq!(answered(&mut ctx), Vec::<usize>::new(), "two ahead of worker 1: held");
    assert_eq!(shard.version(), 2);
    assert_eq!(ctx.updates, [0, 1], "the second push read version 0 after one update");
    let release = ctx.timers.last().copied().expect("a release timer");
    assert_eq!(release.at.as_secs_f64(), 5.3);
    // Worker 1 pushes: now 1 behind, so worker 0 (2) is within the bound and is answered too.
    shard.on_message(ctx.at(0.4), 1, push(0.1));
    assert_eq!(answered(&mut ctx), [1, 0]);

    // Held again (3 pushes against 1), and worker 1 falls silent: after the timeout it no longer
    // counts as live.
    shard.on_message(ctx.at(0.5), 0, push(0.1));
    assert_eq!(answered(&mut ctx), Vec::<usize>::new(), "3 pushes against 1: held");
    let release = ctx.timers.last().copied().expect("a release timer");
    assert_eq!(release.at.as_secs_f64(), 5.5);
    shard.on_timer(ctx.at(3.0), release.tag);
    assert_eq!(answered(&mut ctx), Vec::<usize>::new(), "worker 1 was heard 2.6 s ago: still live");
    shard.on_timer(ctx.at(5.5), release.tag);
    assert_eq!(answered(&mut ctx), [0], "worker 1 silent for 5.1 s: the bound no longer waits for it");
}

#[test]
fn an_easgd_exchange_moves_worker_and_centre_toward_each_other_by_alpha() {
    let cfg = EasgdConfig { tau: 2, alpha: Some(0.25), ..Default::default() };
    let opt = OptimizerConfig { lr: 0.5, ..Default::default() };
    let mut worker = EasgdWorker::new(cfg, 8, opt, 2);
    let mut centre = Centre::new(cfg.alpha_for(2), 0.0);
    let (mut w, mut c): (Recorder<EasgdMsg>, Recorder<EasgdMsg>) =
        (Recorder::new(0, 3, quadratic()), Recorder::new(2, 3, quadratic()));
    worker.on_start(&mut w);
    centre.on_start(&mut c);
    let x0 = quadratic().init();
    // Two local steps of gradient 1 at lr 0.5: x = x0 - 1, then the exchange (tau = 2).
    for step in 0..2 {
        let (job, params, batch) = w.take_gradients().pop().expect("a gradient was started");
        assert_eq!(batch, 8);
        assert_eq!(params.len(), 4, "step {step}");
        worker.on_gradient(&mut w, job, vec![1.0; 4], 0.0);
    }
    assert!(w.gradients.is_empty(), "waiting for the centre, not computing");
    assert_eq!(w.phase, Some(Phase::Communicating));
    let (to, msg, bytes) = w.take_sent().pop().expect("an exchange");
    assert_eq!((to, bytes), (2, quadratic().message_bytes()));
    let EasgdMsg::Exchange { x } = msg.clone() else { panic!("{msg:?}") };
    let want: Vec<f32> = x0.iter().map(|v| v - 1.0).collect();
    assert_eq!(x, want);
    centre.on_message(&mut c, 0, msg);
    let (to, reply, _) = c.take_sent().pop().expect("a diff");
    assert_eq!(to, 0);
    let EasgdMsg::Diff { diff } = reply.clone() else { panic!("{reply:?}") };
    // diff = alpha (x - c) with c = x0: -0.25 on every coordinate.
    assert!(diff.iter().all(|&d| (d + 0.25).abs() < 1e-6), "{diff:?}");
    worker.on_message(&mut w, 2, reply);
    let (_, after, _) = w.take_gradients().pop().expect("local steps resume");
    for i in 0..4 {
        assert!((after[i] - (want[i] + 0.25)).abs() < 1e-6, "worker moved toward the centre");
    }
    let centre_now = match centre.view() {
        dsgd_runtime::protocol::View::Shard { params, .. } => params.to_vec(),
        _ => panic!("the centre is a shard view"),
    };
    for i in 0..4 {
        assert!((centre_now[i] - (x0[i] - 0.25)).abs() < 1e-6, "centre moved toward the worker");
        assert!((centre_now[i] + after[i] - (x0[i] + want[i])).abs() < 1e-5, "the sum is conserved");
    }
}

#[test]
fn an_unanswered_easgd_exchange_times_out_once_and_a_late_answer_is_ignored() {
    let cfg = EasgdConfig { tau: 1, timeout_s: 2.0, ..Default::default() };
    let mut worker = EasgdWorker::new(cfg, 8, OptimizerConfig::default(), 2);
    let mut w: Recorder<EasgdMsg> = Recorder::new(0, 3, quadratic());
    worker.on_start(&mut w);
    let (job, _, _) = w.take_gradients().pop().unwrap();
    worker.on_gradient(w.at(1.0), job, vec![0.5; 4], 0.0);
    let timeout = w.timers.last().copied().expect("a timeout");
    assert_eq!(timeout.at.as_secs_f64(), 3.0);
    worker.on_timer(w.at(3.0), timeout.tag);
    assert_eq!(w.notes, ["elastic exchange timed out; continuing locally"]);
    let (job, before, _) = w.take_gradients().pop().expect("goes on locally");
    worker.on_message(w.at(3.5), 2, EasgdMsg::Diff { diff: vec![100.0; 4] });
    assert!(w.gradients.is_empty(), "the late diff started nothing");
    worker.on_timer(w.at(4.0), timeout.tag);
    assert_eq!(w.notes.len(), 1, "the old timer is void");
    // The late diff changed nothing: the next gradient step starts from `before`.
    worker.on_gradient(&mut w, job, vec![0.0; 4], 0.0);
    let (_, EasgdMsg::Exchange { x }, _) = w.take_sent().pop().unwrap() else { panic!("an exchange") };
    assert_eq!(x, before);
}

/// The peers a gossip node sent pull requests to.
fn pulled(ctx: &mut Recorder<GossipMsg>) -> Vec<usize> {
    ctx.take_sent().into_iter().filter(|(_, m, _)| *m == GossipMsg::PullRequest).map(|(to, _, _)| to).collect()
}

/// Gradient steps every 0.1 s from `from` until `until`, each pull answered at once by the peer
/// asked; returns the peers asked, in order.
fn steps_answered(node: &mut GossipNode, ctx: &mut Recorder<GossipMsg>, from: f64, until: f64) -> Vec<usize> {
    let mut asked = Vec::new();
    let mut at = from;
    while at < until {
        let (job, _, _) = ctx.take_gradients().pop().expect("computing");
        node.on_gradient(ctx.at(at), job, vec![0.0; 4], 0.0);
        let now = pulled(ctx);
        if let Some(&p) = now.first() {
            node.on_message(ctx.at(at), p, GossipMsg::PullReply { x: Arc::new(quadratic().init()) });
        }
        asked.extend(now);
        at += 0.1;
    }
    asked
}

#[test]
fn a_gossip_peer_that_does_not_answer_is_skipped_for_four_timeouts() {
    // Node 0 of 3, pull, uniform peers, one step between exchanges, 1 s timeout.
    let cfg = GossipConfig { timeout_s: 1.0, ..Default::default() };
    let mut node = GossipNode::new(cfg, 8, OptimizerConfig::default());
    let mut ctx: Recorder<GossipMsg> = Recorder::new(0, 3, quadratic());
    node.on_start(&mut ctx);
    // Step until a request goes to node 1.
    let mut t = 0.0;
    let step = |node: &mut GossipNode, ctx: &mut Recorder<GossipMsg>, at: f64| {
        let (job, _, _) = ctx.take_gradients().pop().expect("computing");
        node.on_gradient(ctx.at(at), job, vec![0.0; 4], 0.0);
    };
    let first = loop {
        t += 0.1;
        step(&mut node, &mut ctx, t);
        if let Some(&p) = pulled(&mut ctx).first() {
            if p == 1 {
                break t;
            }
            // Node 2 answers at once.
            node.on_message(ctx.at(t), 2, GossipMsg::PullReply { x: Arc::new(quadratic().init()) });
        }
    };
    // While the request is outstanding the node keeps computing but asks no one else.
    step(&mut node, &mut ctx, first + 0.1);
    assert!(pulled(&mut ctx).is_empty(), "one request outstanding at most");
    assert!(!ctx.gradients.is_empty(), "computing while it waits");
    let timeout = ctx.timers.last().copied().expect("a timeout");
    assert!((timeout.at.as_secs_f64() - (first + 1.0)).abs() < 1e-9);
    node.on_timer(ctx.at(first + 1.0), timeout.tag);
    assert_eq!(ctx.notes, ["peer 1 did not answer; skipping it for a while"]);
    // For the next four timeouts every request goes to node 2; a late reply from 1 is ignored.
    node.on_message(ctx.at(first + 1.05), 1, GossipMsg::PullReply { x: Arc::new(vec![1e6; 4]) });
    let during = steps_answered(&mut node, &mut ctx, first + 1.1, first + 4.9);
    assert!(during.len() > 20 && during.iter().all(|&p| p == 2), "{during:?}");
    let params = match node.view() {
        dsgd_runtime::protocol::View::Replica { params, .. } => params.to_vec(),
        _ => panic!("a replica"),
    };
    assert!(params.iter().all(|&x| x.abs() < 10.0), "the late reply was not averaged in: {params:?}");
    // Afterwards node 1 is a candidate again.
    let after = steps_answered(&mut node, &mut ctx, first + 5.1, first + 8.0);
    assert!(after.contains(&1) && after.contains(&2), "{after:?}");
}

#[test]
fn a_sync_member_that_hears_nothing_probes_and_goes_on_with_those_who_answer() {
    // Rank 0 of 3, ring, 1 s timeout; rank 2 is gone, rank 1 answers the probe.
    let cfg = SyncConfig { timeout_s: 1.0, ..Default::default() };
    let mut w = SyncWorker::new(cfg, 8, OptimizerConfig::default(), 3);
    let mut ctx: Recorder<SyncMsg> = Recorder::new(0, 3, quadratic());
    w.on_start(&mut ctx);
    let (job, _, _) = ctx.take_gradients().pop().expect("computing");
    w.on_gradient(ctx.at(0.1), job, vec![1.0; 4], 0.0);
    assert_eq!(w.stage(), Stage::Reducing);
    let sent = ctx.take_sent();
    assert!(
        matches!(&sent[..], [(1, SyncMsg::Chunk { round: 0, iter: 0, .. }, _)]),
        "the ring's first chunk to the next member: {sent:?}"
    );
    let watchdog = *ctx.timers.iter().find(|t| t.at.as_secs_f64() == 1.1).expect("a watchdog for the timeout");
    w.on_timer(ctx.at(1.1), watchdog.tag);
    assert_eq!(ctx.notes, ["timeout in iteration 0 (epoch 0)"]);
    let probes: Vec<usize> = ctx
        .take_sent()
        .into_iter()
        .filter(|(_, m, _)| *m == SyncMsg::Probe { epoch: 1, done: 0, view: view_id(0, &[0, 1, 2]) })
        .map(|s| s.0)
        .collect();
    assert_eq!(probes, [1, 2], "the probe goes to every other rank");
    let end = ctx.timers.last().copied().expect("the probe's end");
    assert!((end.at.as_secs_f64() - 1.6).abs() < 1e-9, "half a timeout to collect answers");
    // Rank 1 answers as a member that lost its state would (its replica is not the view's).
    w.on_message(ctx.at(1.2), 1, SyncMsg::Probe { epoch: 1, done: 0, view: u64::MAX });
    w.on_timer(ctx.at(1.6), end.tag);
    assert_eq!(w.members(), [0, 1]);
    assert_eq!(ctx.notes[1], "epoch 1: members [0, 1] at iteration 0");
    let sent = ctx.take_sent();
    // The donor (most iterations, lowest rank: itself) hands its state to the new member, then
    // the all-reduce of the same gradient restarts among the two, in the new view.
    let view = view_id(1, &[0, 1]);
    assert!(matches!(&sent[0], (1, SyncMsg::State(s), _) if s.epoch == 1 && s.done == 0), "{sent:?}");
    assert!(matches!(&sent[1], (1, SyncMsg::Chunk { view: v, iter: 0, round: 0, .. }, _) if *v == view), "{sent:?}");
    assert_eq!(sent.len(), 2, "nothing to rank 2: {sent:?}");
    // A chunk of the old view is ignored; the new view's completes the iteration.
    w.on_message(
        ctx.at(1.7),
        2,
        SyncMsg::Chunk { view: view_id(0, &[0, 1, 2]), iter: 0, bucket: 0, round: 0, data: vec![] },
    );
    assert_eq!(w.iterations(), 0);
    w.on_message(ctx.at(1.7), 1, SyncMsg::Chunk { view, iter: 0, bucket: 0, round: 0, data: vec![1.0; 2] });
    w.on_message(ctx.at(1.8), 1, SyncMsg::Chunk { view, iter: 0, bucket: 0, round: 1, data: vec![2.0; 2] });
    assert_eq!(w.iterations(), 1, "two members: a ring of two rounds");
    assert_eq!(ctx.iterations.len(), 1, "member 0 records the iteration");
}

#[test]
fn members_in_step_after_a_probe_go_on_without_a_state_hand_off() {
    // As above, but rank 1 answers from the same view after as many iterations: it holds the
    // donor's replica already, so the donor sends it no state (found by `dsgd torture`: sending
    // the whole model to every member from one NIC outlasted the timeout, and the next probe
    // started the same transfer again, forever) and the all-reduce restarts at once.
    let cfg = SyncConfig { timeout_s: 1.0, ..Default::default() };
    let (mut w0, mut w1) = (
        SyncWorker::new(cfg, 8, OptimizerConfig::default(), 3),
        SyncWorker::new(cfg, 8, OptimizerConfig::default(), 3),
    );
    let (mut c0, mut c1): (Recorder<SyncMsg>, Recorder<SyncMsg>) =
        (Recorder::new(0, 3, quadratic()), Recorder::new(1, 3, quadratic()));
    w0.on_start(&mut c0);
    w1.on_start(&mut c1);
    let (job, _, _) = c0.take_gradients().pop().expect("computing");
    w0.on_gradient(c0.at(0.1), job, vec![1.0; 4], 0.0);
    let watchdog = *c0.timers.iter().find(|t| t.at.as_secs_f64() == 1.1).expect("a watchdog");
    w0.on_timer(c0.at(1.1), watchdog.tag);
    let probe = c0.take_sent().into_iter().find(|(to, m, _)| *to == 1 && matches!(m, SyncMsg::Probe { .. }));
    let probe = probe.expect("a probe to rank 1").1;
    w1.on_message(c1.at(1.2), 0, probe);
    let answer = c1.take_sent().into_iter().find(|(to, m, _)| *to == 0 && matches!(m, SyncMsg::Probe { .. }));
    let answer = answer.expect("rank 1 joins the probe").1;
    assert_eq!(answer, SyncMsg::Probe { epoch: 1, done: 0, view: view_id(0, &[0, 1, 2]) });
    w0.on_message(c0.at(1.2), 1, answer);
    let end = c0.timers.last().copied().expect("the probe's end");
    w0.on_timer(c0.at(1.6), end.tag);
    assert_eq!(w0.members(), [0, 1]);
    let sent = c0.take_sent();
    assert!(sent.iter().all(|(_, m, _)| !matches!(m, SyncMsg::State(_))), "no state hand-off: {sent:?}");
    assert!(matches!(&sent[..], [(1, SyncMsg::Chunk { iter: 0, round: 0, .. }, _)]), "{sent:?}");
    // Rank 1's own probe ends the same way: it goes on as a member, not waiting for a state.
    let end1 = c1.timers.last().copied().expect("rank 1's probe end");
    w1.on_message(c1.at(1.3), 0, SyncMsg::Probe { epoch: 1, done: 0, view: view_id(0, &[0, 1, 2]) });
    w1.on_timer(c1.at(1.7), end1.tag);
    assert_eq!(w1.members(), [0, 1]);
    assert_eq!(w1.stage(), Stage::Computing, "its gradient is still being computed");
}

#[test]
fn a_restarted_sync_member_asks_three_times_to_join_then_probes_and_adopts_the_donors_state() {
    // Rank 2 of 3 crashes and restarts; nobody answers its joins at first.
    let cfg = SyncConfig { timeout_s: 1.0, ..Default::default() };
    let mut w = SyncWorker::new(cfg, 8, OptimizerConfig::default(), 3);
    let mut ctx: Recorder<SyncMsg> = Recorder::new(2, 3, quadratic());
    w.on_start(&mut ctx);
    assert_eq!(w.stage(), Stage::Computing);
    w.on_crash();
    assert_eq!(w.stage(), Stage::Crashed);
    ctx.timers.clear();
    w.on_restart(ctx.at(3.0));
    w.on_start(&mut ctx);
    assert_eq!(w.stage(), Stage::Joining { asked: 1 });
    assert!(ctx.take_gradients().len() == 1, "only the first start computed a gradient");
    assert!(matches!(w.view(), dsgd_runtime::protocol::View::Nothing), "no model to score while joining");
    let joins = |ctx: &mut Recorder<SyncMsg>| -> Vec<usize> {
        ctx.take_sent().into_iter().filter(|(_, m, _)| matches!(m, SyncMsg::Join { .. })).map(|s| s.0).collect()
    };
    assert_eq!(joins(&mut ctx), vec![0usize, 1]);
    // The watchdog (1 s) asks again twice, then gives up and probes on its own.
    let watchdog = |ctx: &Recorder<SyncMsg>| ctx.timers.iter().rev().find(|t| t.tag == 1).copied().expect("watchdog");
    for (k, at) in [(2, 4.0), (3, 5.0)] {
        let t = watchdog(&ctx);
        assert!((t.at.as_secs_f64() - at).abs() < 1e-9, "{t:?}");
        w.on_timer(ctx.at(at), t.tag);
        assert_eq!(w.stage(), Stage::Joining { asked: k });
        assert_eq!(joins(&mut ctx), vec![0usize, 1], "join request {k}");
    }
    let t = watchdog(&ctx);
    w.on_timer(ctx.at(6.0), t.tag);
    assert_eq!(ctx.notes, ["timeout in iteration 0 (epoch 0)"]);
    let probes: Vec<usize> = ctx
        .take_sent()
        .into_iter()
        .filter(|(_, m, _)| matches!(m, SyncMsg::Probe { epoch: 1, .. }))
        .map(|s| s.0)
        .collect();
    assert_eq!(probes, [0, 1]);
    // Rank 0 answers with 7 iterations done: it is the donor; rank 2 waits for its state.
    w.on_message(ctx.at(6.1), 0, SyncMsg::Probe { epoch: 1, done: 7, view: view_id(0, &[0, 1, 2]) });
    let end = ctx.timers.last().copied().expect("the probe's end");
    w.on_timer(ctx.at(6.5), end.tag);
    assert_eq!(w.members(), [0, 2]);
    assert_eq!(w.stage(), Stage::AwaitingState);
    // A state of an older epoch, or of another view of this epoch, is ignored; the donor's is
    // adopted and the next iteration starts.
    let state = |epoch, members: &[usize]| {
        SyncMsg::State(Box::new(StateMsg {
            epoch,
            view: view_id(epoch, members),
            done: 7,
            params: vec![0.5; 100],
            velocity: vec![0.0; 100],
            steps: 7,
        }))
    };
    w.on_message(ctx.at(6.6), 1, state(0, &[0, 1, 2]));
    assert_eq!(w.stage(), Stage::AwaitingState);
    w.on_message(ctx.at(6.65), 1, state(1, &[1, 2]));
    assert_eq!(w.stage(), Stage::AwaitingState, "another view's donor");
    w.on_message(ctx.at(6.7), 0, state(1, &[0, 2]));
    assert_eq!(w.stage(), Stage::Computing);
    assert_eq!(w.iterations(), 7);
    assert_eq!(w.params(), &[0.5; 100][..]);
    assert_eq!(ctx.take_gradients().len(), 1, "iteration 7 computes at the donor's parameters");
}

/// The shard's slice.
fn slice(shard: &Shard) -> Vec<f32> {
    match shard.view() {
        View::Shard { params, .. } => params.to_vec(),
        _ => panic!("a shard shows its slice"),
    }
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g as f64 - w).abs() < 1e-6, "{what}: element {i} is {g}, hand-computed {w}");
    }
}

#[test]
fn the_staleness_aware_rate_divides_a_stale_gradients_step_by_its_staleness() {
    // Three workers read version 0 of a shard at 1.0 everywhere (lr 0.1, plain SGD) and push a
    // gradient of 1 each: staleness 0, 1 and 2. Inverse: steps 0.1, 0.1, 0.05; none: 0.1 each.
    for (rule, want) in [(StalenessLr::Inverse, 0.75), (StalenessLr::None, 0.7)] {
        let cfg = PsConfig { staleness_lr: rule, ..Default::default() };
        let mut shard = Shard::new(0, 1, 3, cfg, OptimizerConfig { lr: 0.1, ..Default::default() });
        let mut ctx: Recorder<PsMsg> = Recorder::new(3, 4, quadratic());
        shard.on_start(&mut ctx);
        for w in 0..3 {
            shard.on_message(ctx.at(0.1), w, PsMsg::Pull);
        }
        for w in 0..3 {
            shard.on_message(ctx.at(0.2), w, PsMsg::Push { read: 0, grad: vec![1.0; 4] });
        }
        assert_eq!(ctx.updates, [0, 1, 2], "{rule:?}: staleness of each push");
        assert_close(&slice(&shard), &[want; 4], &format!("{rule:?}"));
    }
}

#[test]
fn delay_compensation_adds_lambda_g_g_times_the_drift_since_the_read() {
    // Two workers read the shard at 1.0 everywhere (lr 0.1, λ = 1). Worker 0 pushes g: nothing
    // moved since its read, so the shard steps by 0.1·g to w = 1 − 0.1·g. Worker 1 pushes the
    // same g read at 1.0: DC-ASGD applies g + λ·g⊙g⊙(w − 1) = g − 0.1·g³.
    let g = [1.0f32, 2.0, 0.5, -1.0];
    let cfg = PsConfig { delay_compensation: 1.0, ..Default::default() };
    let mut shard = Shard::new(0, 1, 2, cfg, OptimizerConfig { lr: 0.1, ..Default::default() });
    let mut ctx: Recorder<PsMsg> = Recorder::new(2, 3, quadratic());
    shard.on_start(&mut ctx);
    shard.on_message(ctx.at(0.1), 0, PsMsg::Pull);
    shard.on_message(ctx.at(0.1), 1, PsMsg::Pull);
    shard.on_message(ctx.at(0.2), 0, PsMsg::Push { read: 0, grad: g.to_vec() });
    assert_close(&slice(&shard), &[0.9, 0.8, 0.95, 1.1], "worker 0's push, no drift");
    shard.on_message(ctx.at(0.3), 1, PsMsg::Push { read: 0, grad: g.to_vec() });
    // g̃ = [0.9, 1.2, 0.4875, -0.9]; w = [0.9, 0.8, 0.95, 1.1] − 0.1·g̃.
    assert_close(&slice(&shard), &[0.81, 0.68, 0.90125, 1.19], "worker 1's compensated push");
    // Without compensation the second push is a plain step: w = 1 − 0.2·g.
    let mut plain = Shard::new(0, 1, 2, PsConfig::default(), OptimizerConfig { lr: 0.1, ..Default::default() });
    plain.on_start(&mut ctx);
    for w in 0..2 {
        plain.on_message(ctx.at(0.1), w, PsMsg::Pull);
    }
    for w in 0..2 {
        plain.on_message(ctx.at(0.2), w, PsMsg::Push { read: 0, grad: g.to_vec() });
    }
    assert_close(&slice(&plain), &[0.8, 0.6, 0.9, 1.2], "no compensation");
}
