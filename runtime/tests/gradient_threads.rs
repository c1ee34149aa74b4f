//! The gradient threads change the wall time only: every algorithm, under jitter and a crash
//! that drops jobs in flight, gives the same digest, losses, final parameters and per-replica
//! final losses with the threads off (one thread) and with 2 or 5. One test in its own binary, because it sets
//! `DSGD_THREADS` for the process.

mod common;
use common::*;
use dsgd_models::softmax::{Softmax, SoftmaxConfig};
use dsgd_models::{Evaluation, GradRequest, Workload};
use dsgd_runtime::collectives::CollectiveKind;
use dsgd_runtime::protocols::async_ps::PsConfig;
use dsgd_runtime::protocols::easgd::EasgdConfig;
use dsgd_runtime::protocols::gossip::{GossipConfig, GossipMode};
use dsgd_runtime::protocols::sync::SyncConfig;
use dsgd_runtime::runner::AlgorithmConfig;
use dsgd_sim::{Fault, Jitter, SimTime};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Softmax regression that asks for the pool, and counts the gradients it computes and the
/// models it evaluates.
struct Pooled {
    inner: Softmax,
    computed: AtomicU64,
    evaluated: AtomicU64,
}

impl Workload for Pooled {
    fn name(&self) -> &str {
        "pooled softmax"
    }
    fn param_count(&self) -> usize {
        self.inner.param_count()
    }
    fn init(&self) -> Vec<f32> {
        self.inner.init()
    }
    fn gradient(&self, params: &[f32], req: GradRequest, grad: &mut [f32]) -> f64 {
        self.computed.fetch_add(1, Ordering::Relaxed);
        self.inner.gradient(params, req, grad)
    }
    fn evaluate(&self, params: &[f32]) -> Evaluation {
        self.evaluated.fetch_add(1, Ordering::Relaxed);
        self.inner.evaluate(params)
    }
    fn parallel_gradients(&self) -> bool {
        true
    }
}

/// (digest, final parameters, losses, each replica's final loss, gradients delivered).
type Outcome = (u64, Vec<u32>, Vec<u64>, Vec<Option<u64>>, u64);

fn once(alg: AlgorithmConfig) -> (Outcome, u64) {
    let mut sim = cluster(3, 20, 30, 10.0);
    sim.compute.jitter = Jitter::LogNormal { sigma: 0.4 };
    sim.faults.schedule = vec![Fault::Crash { node: 1, at: SimTime::from_secs_f64(1.01) }];
    let mut t = train(3.0);
    t.optimizer.lr = 0.1;
    t.optimizer.momentum = 0.5;
    let wl = Arc::new(Pooled {
        inner: Softmax::new(SoftmaxConfig { train: 2_000, test: 500, ..Default::default() }),
        computed: AtomicU64::new(0),
        evaluated: AtomicU64::new(0),
    });
    let r = go(alg, 6, &sim, wl.clone(), t);
    let bits = r.final_params.iter().map(|x| x.to_bits()).collect();
    let losses = r.metrics.samples.iter().map(|s| loss(s).to_bits()).collect();
    let last = r.metrics.samples.last().expect("a final evaluation");
    let node_losses = last.node_losses.iter().map(|l| l.map(f64::to_bits)).collect();
    // The run counts the models it evaluated: the consensus at each sample, each distinct
    // replica at the end (what a report weighs as model work beside the gradients).
    assert_eq!(r.metrics.evaluations, wl.evaluated.load(Ordering::Relaxed), "{}", alg.label());
    ((r.digest, bits, losses, node_losses, r.metrics.gradients), wl.computed.load(Ordering::Relaxed))
}

#[test]
fn results_do_not_depend_on_the_gradient_threads() {
    let algorithms = [
        AlgorithmConfig::Sync(SyncConfig::default()),
        AlgorithmConfig::Sync(SyncConfig { collective: CollectiveKind::Tree, backup_workers: 1, ..Default::default() }),
        AlgorithmConfig::AsyncPs(PsConfig { shards: 2, ..Default::default() }),
        AlgorithmConfig::Easgd(EasgdConfig::default()),
        AlgorithmConfig::Gossip(GossipConfig::default()),
        AlgorithmConfig::Gossip(GossipConfig { mode: GossipMode::Push, ..Default::default() }),
    ];
    for alg in algorithms {
        std::env::set_var("DSGD_THREADS", "1");
        let (inline, computed) = once(alg);
        // Without the pool, exactly the gradients delivered are computed.
        assert_eq!(computed, inline.4, "{}", alg.label());
        assert!(inline.4 > 100, "{}: {} gradients", alg.label(), inline.4);
        // The final evaluation scores every live replica (on the threads when there are several);
        // a parameter server's workers hold none.
        let scored = inline.3.iter().filter(|l| l.is_some()).count();
        assert!(scored >= 4 || matches!(alg, AlgorithmConfig::AsyncPs(_)), "{}: {:?}", alg.label(), inline.3);
        for threads in ["2", "5"] {
            std::env::set_var("DSGD_THREADS", threads);
            let (pooled, computed) = once(alg);
            assert_eq!(pooled, inline, "{} on {threads} threads", alg.label());
            // The pool may compute a job whose node then crashed, never fewer than delivered.
            assert!(computed >= inline.4, "{}", alg.label());
        }
    }
    std::env::remove_var("DSGD_THREADS");
}
