//! Gradients computed ahead of time on background threads while the simulator's thread runs the
//! protocols.
//!
//! A gradient job is a pure function of its parameters (fixed when it starts), its minibatch size
//! and its seed, so it may be computed at any moment between its start and its completion, on any
//! thread, and give the same bits. The simulator's thread submits every job when it starts
//! ([`GradientPool::submit`]) with the simulated time it completes; background threads take the
//! jobs that complete soonest first. When a job completes in simulated time the simulator's
//! thread takes its result ([`GradientPool::take`]): computed already, being computed (it waits),
//! or not begun (it computes the job itself). So the threads change the wall time only: no
//! result, order or digest depends on their number, on the machine's load or on which thread
//! computed what.

use dsgd_models::{GradRequest, Workload};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Threads for the simulator's parallel work (gradients computed ahead of time by the
/// [`GradientPool`], for workloads that ask for it; the in-process ring's sums): `$DSGD_THREADS`,
/// else the machine's cores; 1 does everything on the simulator's thread. The work is made of
/// pure functions of their inputs, so the thread count changes the wall time only, never a
/// result.
pub fn threads() -> usize {
    std::env::var("DSGD_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

/// What one gradient job computes from.
#[derive(Debug)]
pub struct GradientInput {
    /// The worker computing it.
    pub node: usize,
    /// The parameters, fixed when the job started.
    pub params: Arc<Vec<f32>>,
    /// Minibatch size.
    pub batch: usize,
    /// Seed of the job's random choices.
    pub seed: u64,
}

/// A computed gradient and the minibatch loss.
pub type GradientOutput = (Vec<f32>, f64);

impl GradientInput {
    /// Computes the gradient (empty parameters: a timing-only workload, loss NaN).
    pub fn compute(&self, workload: &dyn Workload) -> GradientOutput {
        if self.params.is_empty() {
            return (Vec::new(), f64::NAN);
        }
        workload.gradient_owned(&self.params, GradRequest { worker: self.node, batch: self.batch, seed: self.seed })
    }
}

enum State {
    /// Not begun: the input is held until a thread claims it, and dropped once computed, so
    /// that a protocol that shares its parameters with the job may write them again without a
    /// copy.
    Queued(GradientInput),
    Running,
    Done(GradientOutput),
    /// The computation panicked on a background thread; the panic is resumed where the result
    /// is taken, as if it had been computed there.
    Panicked(Box<dyn std::any::Any + Send>),
    Dropped,
}

/// A submitted job.
pub struct Task {
    /// The worker computing it.
    node: usize,
    state: Mutex<State>,
    finished: Condvar,
}

impl Task {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims a queued job for the calling thread, with its input; none if another has it or
    /// it was dropped.
    fn claim(&self) -> Option<GradientInput> {
        let mut s = self.state();
        if !matches!(*s, State::Queued(_)) {
            return None;
        }
        match std::mem::replace(&mut *s, State::Running) {
            State::Queued(input) => Some(input),
            _ => unreachable!("checked above"),
        }
    }

    fn finish(&self, out: std::thread::Result<GradientOutput>) {
        let mut s = self.state();
        if !matches!(*s, State::Dropped) {
            *s = match out {
                Ok(out) => State::Done(out),
                Err(panic) => State::Panicked(panic),
            };
        }
        self.finished.notify_all();
    }

    /// The worker computing it.
    pub fn node(&self) -> usize {
        self.node
    }
}

struct Queue {
    /// Jobs not yet taken by a thread, soonest completion first (then the engine's job order).
    waiting: BTreeMap<(u64, u64), Arc<Task>>,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    work: Condvar,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Background threads computing submitted gradient jobs.
pub struct GradientPool {
    shared: Arc<Shared>,
    workload: Arc<dyn Workload>,
    threads: Vec<JoinHandle<()>>,
}

impl GradientPool {
    /// Starts `threads` background threads computing gradients of `workload`.
    pub fn new(workload: Arc<dyn Workload>, threads: usize) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { waiting: BTreeMap::new(), closed: false }),
            work: Condvar::new(),
        });
        let threads = (0..threads)
            .map(|_| {
                let (shared, workload) = (shared.clone(), workload.clone());
                std::thread::Builder::new()
                    .name("dsgd-gradients".into())
                    .spawn(move || {
                        behind_the_simulator();
                        serve(&shared, &*workload)
                    })
                    .expect("the system starts a thread")
            })
            .collect();
        GradientPool { shared, workload, threads }
    }

    /// Submits a job that completes at simulated time `due_ns` (engine job number `job`).
    pub fn submit(&self, due_ns: u64, job: u64, input: GradientInput) -> Arc<Task> {
        let task =
            Arc::new(Task { node: input.node, state: Mutex::new(State::Queued(input)), finished: Condvar::new() });
        self.shared.queue().waiting.insert((due_ns, job), task.clone());
        self.shared.work.notify_one();
        task
    }

    /// The job's result: taken if computed, waited for if being computed, computed here if not
    /// begun.
    pub fn take(&self, task: &Task) -> GradientOutput {
        if let Some(input) = task.claim() {
            // Claimed (running), a background thread that reaches it later passes it by.
            return input.compute(&*self.workload);
        }
        let mut s = task.state();
        loop {
            match std::mem::replace(&mut *s, State::Dropped) {
                State::Done(out) => return out,
                State::Panicked(panic) => std::panic::resume_unwind(panic),
                State::Running => {
                    *s = State::Running;
                    s = task.finished.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                State::Queued(_) | State::Dropped => unreachable!("a job is taken once, after it was claimed"),
            }
        }
    }

    /// Forgets a job whose result will not be wanted (its node crashed): not computed if not
    /// begun.
    pub fn drop_task(&self, task: &Task) {
        *task.state() = State::Dropped;
    }
}

/// Lowers the calling background thread's scheduling priority (nice 10; on Linux nice is per
/// thread). The simulator's thread is the run's critical path: it hands out every job and takes
/// every result, and while it waits for a core the background threads run out of work. With
/// as many background threads as cores, on 2 cores, 100 push-sum workers of the paper cluster
/// went from 2.97 to 2.44 s and pull from 1.84 to 1.63 s (medians of 5, alternated); the
/// results are the same bits whatever the priorities.
fn behind_the_simulator() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

/// A background thread: computes the soonest-due waiting job until the pool closes.
fn serve(shared: &Shared, workload: &dyn Workload) {
    loop {
        let task = {
            let mut q = shared.queue();
            loop {
                if q.closed {
                    return;
                }
                if let Some((_, t)) = q.waiting.pop_first() {
                    break t;
                }
                q = shared.work.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        if let Some(input) = task.claim() {
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| input.compute(workload)));
            drop(input);
            task.finish(out);
        }
    }
}

impl Drop for GradientPool {
    fn drop(&mut self) {
        self.shared.queue().closed = true;
        self.shared.work.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsgd_models::quadratic::Quadratic;

    #[test]
    fn pooled_results_are_the_inline_results_whoever_computes_them() {
        let w: Arc<dyn Workload> = Arc::new(Quadratic::new(64, 1.0, 0.1, 0.5, 3.0));
        let inputs = |k: u64| GradientInput {
            node: k as usize % 5,
            params: Arc::new(vec![0.5 + k as f32; 64]),
            batch: 8,
            seed: k,
        };
        let inline: Vec<GradientOutput> = (0..200).map(|k| inputs(k).compute(&*w)).collect();
        for threads in [1, 2, 4] {
            let pool = GradientPool::new(w.clone(), threads);
            // Due times in reverse: the threads take the later-submitted jobs first.
            let tasks: Vec<Arc<Task>> = (0..200).map(|k| pool.submit(1_000 - k, k, inputs(k))).collect();
            pool.drop_task(&tasks[7]);
            for (k, t) in tasks.iter().enumerate().filter(|(k, _)| *k != 7) {
                let (g, l) = pool.take(t);
                assert_eq!(g, inline[k].0, "job {k} on {threads} threads");
                assert_eq!(l.to_bits(), inline[k].1.to_bits());
            }
        }
    }

    /// A workload whose gradient panics for one seed.
    struct Faulty;
    impl Workload for Faulty {
        fn name(&self) -> &str {
            "faulty"
        }
        fn param_count(&self) -> usize {
            1
        }
        fn init(&self) -> Vec<f32> {
            vec![0.0]
        }
        fn gradient(&self, _: &[f32], req: GradRequest, _: &mut [f32]) -> f64 {
            assert_ne!(req.seed, 3, "seed 3 fails");
            1.0
        }
        fn evaluate(&self, _: &[f32]) -> dsgd_models::Evaluation {
            dsgd_models::Evaluation { loss: 0.0, accuracy: None }
        }
    }

    #[test]
    fn a_panic_on_a_background_thread_reaches_the_taker_instead_of_hanging_it() {
        let pool = GradientPool::new(Arc::new(Faulty), 2);
        let tasks: Vec<Arc<Task>> = (0..6)
            .map(|k| pool.submit(k, k, GradientInput { node: 0, params: Arc::new(vec![0.0]), batch: 1, seed: k }))
            .collect();
        // Let the threads reach the failing job before it is taken.
        while tasks.iter().any(|t| matches!(*t.state(), State::Queued(_))) {
            std::thread::yield_now();
        }
        assert_eq!(pool.take(&tasks[2]).1, 1.0);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.take(&tasks[3])));
        let msg = caught.expect_err("the panic is resumed").downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("seed 3 fails"), "{msg}");
        // The threads live on.
        assert_eq!(pool.take(&tasks[5]).1, 1.0);
    }
}
