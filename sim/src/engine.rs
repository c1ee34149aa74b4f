//! The engine: a single-threaded discrete-event simulation of a cluster.
//!
//! The caller (the training runtime) owns the behaviour of the nodes; the engine owns time, the
//! network, compute, faults, randomness and the digest. The caller acts through [`Sim::send`],
//! [`Sim::set_timer`], [`Sim::cancel_timer`], [`Sim::move_timer`] and [`Sim::start_compute`], and
//! learns what happened by calling [`Sim::step`], which processes internal events (message hops,
//! losses, NIC changes) silently and returns the next [`Occurrence`] a node must react to. Events
//! are ordered by `(time, sequence number)`; everything random comes from named streams of the
//! root seed; so the same configuration always yields the same occurrences and the same digest.

use crate::backlog::{Backlog, SenderBacklog};
use crate::compute::{ComputeConfig, ComputeModel};
use crate::digest::Digest;
use crate::error::{Result, SimError};
use crate::faults::{Fault, FaultConfig, LossWindow, PartitionWindow, RandomFailures};
use crate::net::{Network, NetworkConfig, Next, Progress};
use crate::queue::{EventKey, EventQueue, Popped, NO_HINT};
use crate::rng::{StreamRng, Streams};
use crate::time::{SimDuration, SimTime};
use crate::trace::{EventKind, Trace, TraceRecord};
use rand::Rng;
use rand_distr::{Distribution, Exp};
use std::collections::BTreeMap;

// The errors of the per-message checks, built out of the hot path.
#[cold]
#[inline(never)]
fn unknown_node(node: usize, nodes: usize) -> SimError {
    SimError::UnknownNode { node, nodes }
}

#[cold]
#[inline(never)]
fn node_down(node: usize, now: SimTime) -> SimError {
    SimError::NodeDown { node, now }
}

/// The peer recorded for an event that involves one node only.
const NO_PEER: u32 = u32::MAX;

/// Everything the engine needs to build a cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct SimConfig {
    /// Number of nodes (at least 1).
    pub nodes: usize,
    /// Root seed of every random stream.
    pub seed: u64,
    /// The network.
    pub network: NetworkConfig,
    /// Step times and stragglers.
    pub compute: ComputeConfig,
    /// Faults.
    pub faults: FaultConfig,
    /// Record a trace of every event (memory grows with the run).
    pub trace: bool,
}

impl SimConfig {
    /// A fault-free cluster of `nodes` nodes with default network and compute.
    pub fn new(nodes: usize, seed: u64) -> Self {
        SimConfig {
            nodes,
            seed,
            network: NetworkConfig::default(),
            compute: ComputeConfig::default(),
            faults: FaultConfig::default(),
            trace: false,
        }
    }
}

/// Handle of a pending timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimerId(pub u64);

/// Handle of a computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

/// Something a node must react to.
#[derive(Clone, Debug, PartialEq)]
pub enum Occurrence<M> {
    /// A timer set by `node` fired.
    Timer {
        /// The node.
        node: usize,
        /// The timer.
        timer: TimerId,
        /// The tag given when it was set.
        tag: u64,
    },
    /// A message arrived.
    Message {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
        /// Size on the wire.
        bytes: u64,
        /// When it was sent.
        sent_at: SimTime,
        /// What it carries.
        payload: M,
    },
    /// A computation finished.
    ComputeDone {
        /// The node.
        node: usize,
        /// The job.
        job: JobId,
        /// When it started running (after any earlier job on the node).
        started: SimTime,
    },
    /// A node crashed: its pending timers and computations are gone.
    Crashed {
        /// The node.
        node: usize,
    },
    /// A crashed node came back.
    Restarted {
        /// The node.
        node: usize,
    },
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Events processed (internal ones included).
    pub events: u64,
    /// Messages sent.
    pub messages_sent: u64,
    /// Messages delivered.
    pub messages_delivered: u64,
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Messages lost because an end crashed.
    pub lost_crash: u64,
    /// Messages lost to partitions.
    pub lost_partition: u64,
    /// Messages lost to random loss.
    pub lost_random: u64,
    /// Timers and computations of crashed nodes that were discarded.
    pub discarded: u64,
    /// Retransmissions of messages lost at random (reliable transport).
    pub retransmissions: u64,
    /// Bytes sent again by those retransmissions.
    pub bytes_retransmitted: u64,
    /// Time the retransmitted messages waited for their retransmission timeouts, summed.
    pub retransmission_wait: SimDuration,
    /// Crashes that happened.
    pub crashes: u64,
    /// Restarts that happened.
    pub restarts: u64,
}

struct Transit<M> {
    from: u32,
    to: u32,
    src_inc: u32,
    dst_inc: u32,
    lost: bool,
    bytes: u64,
    sent_at: SimTime,
    /// When the current attempt left (`sent_at` for the first; later for retransmissions).
    attempt_at: SimTime,
    /// Retransmissions so far.
    attempt: u32,
    progress: Progress,
    payload: M,
}

/// A message in transit: its index in [`Sim`]'s slab of them.
#[derive(Clone, Copy)]
struct InFlight(u32);

/// Bits of an inline event's code that hold the message's index (the two above say its stage).
const INLINE_ID_BITS: u32 = 29;
const INLINE_ID_MAX: u32 = (1 << INLINE_ID_BITS) - 1;
const _: () = assert!((Stage::Resend as u32) << INLINE_ID_BITS | INLINE_ID_MAX == crate::queue::INLINE_MAX);

/// Which event of a message's journey is next.
#[derive(Clone, Copy)]
enum Stage {
    Hop = 0,
    Deliver = 1,
    Received = 2,
    Resend = 3,
}

impl Stage {
    #[inline]
    fn event(self, id: InFlight) -> Ev {
        match self {
            Stage::Hop => Ev::Hop(id),
            Stage::Deliver => Ev::Deliver(id),
            Stage::Received => Ev::Received(id),
            Stage::Resend => Ev::Resend(id),
        }
    }

    /// The event an inline code stands for.
    #[inline]
    fn decode(code: u32) -> Ev {
        const STAGES: [Stage; 4] = [Stage::Hop, Stage::Deliver, Stage::Received, Stage::Resend];
        STAGES[(code >> INLINE_ID_BITS) as usize].event(InFlight(code & INLINE_ID_MAX))
    }
}

enum Ev {
    Timer {
        node: u32,
        inc: u32,
        tag: u64,
    },
    Compute {
        node: u32,
        inc: u32,
        job: u64,
        started: SimTime,
    },
    // A message's events name it in `Sim::transits`: a pending event takes a slot of the queue
    // sized for the largest variant, and a message in transit (104 bytes with a gossip payload)
    // in every slot made each pending timer (16 bytes of its own) cost as much.
    Hop(InFlight),
    Deliver(InFlight),
    /// A delivered message whose receive time on its node's host has passed.
    Received(InFlight),
    Resend(InFlight),
    Crash {
        node: u32,
        random: bool,
    },
    Restart {
        node: u32,
        random: bool,
    },
    Nic {
        node: u32,
        factor: f64,
    },
}

#[derive(Clone, Copy)]
struct NodeState {
    up: bool,
    /// Bumped on every crash and restart: events and messages of an older incarnation are void.
    inc: u32,
    compute_free: SimTime,
    /// When the host has handled the messages it received so far (see `compute.receive`).
    receive_free: SimTime,
}

/// The simulation of one cluster.
pub struct Sim<M> {
    queue: EventQueue<Ev>,
    /// The messages in transit, each named by the one pending event that moves it on.
    transits: slab::Slab<Transit<M>>,
    nodes: Vec<NodeState>,
    net: Network,
    compute: ComputeModel,
    partitions: Vec<PartitionWindow>,
    losses: Vec<LossWindow>,
    loss_rng: StreamRng,
    transport: crate::net::Transport,
    random_failures: Option<(Exp<f64>, Exp<f64>)>,
    fault_rngs: Vec<StreamRng>,
    streams: Streams,
    digest: Digest,
    stats: SimStats,
    trace: Option<Trace>,
    next_job: u64,
}

impl<M> Sim<M> {
    /// Builds a cluster, validating the whole configuration, and schedules its faults.
    pub fn new(cfg: &SimConfig) -> Result<Self> {
        let n = cfg.nodes;
        if n == 0 {
            return Err(SimError::config("nodes", "must be at least 1"));
        }
        if n > u32::MAX as usize / 4 {
            return Err(SimError::config("nodes", "is too large"));
        }
        cfg.faults.validate(n)?;
        let streams = Streams::new(cfg.seed);
        let mut sim = Sim {
            queue: EventQueue::with_capacity(4 * n),
            transits: slab::Slab::with_capacity(n),
            nodes: vec![NodeState { up: true, inc: 0, compute_free: SimTime::ZERO, receive_free: SimTime::ZERO }; n],
            net: Network::new(&cfg.network, n)?,
            compute: ComputeModel::new(&cfg.compute, n, &streams)?,
            partitions: cfg.faults.partitions(n),
            losses: cfg.faults.losses(),
            loss_rng: streams.stream("net.loss", 0),
            transport: cfg.network.transport,
            random_failures: None,
            fault_rngs: Vec::new(),
            streams,
            digest: Digest::new(),
            stats: SimStats::default(),
            trace: cfg.trace.then(Trace::default),
            next_job: 0,
        };
        sim.schedule_faults(&cfg.faults)?;
        Ok(sim)
    }

    fn schedule_faults(&mut self, faults: &FaultConfig) -> Result<()> {
        for f in &faults.schedule {
            match *f {
                Fault::Crash { node, at } => {
                    self.push(at, Ev::Crash { node: node as u32, random: false })?;
                }
                Fault::Restart { node, at } => {
                    self.push(at, Ev::Restart { node: node as u32, random: false })?;
                }
                Fault::NicDegrade { node, from, until, factor } => {
                    self.push(from, Ev::Nic { node: node as u32, factor })?;
                    self.push(until, Ev::Nic { node: node as u32, factor: 1.0 })?;
                }
                Fault::Partition { .. } | Fault::MessageLoss { .. } => {}
            }
        }
        if let Some(RandomFailures { mtbf, mttr, nodes }) = &faults.random {
            let up = Exp::new(1.0 / mtbf.as_secs_f64())
                .map_err(|_| SimError::config("faults.random.mtbf", "must be positive"))?;
            let down = Exp::new(1.0 / mttr.as_secs_f64())
                .map_err(|_| SimError::config("faults.random.mttr", "must be positive"))?;
            self.fault_rngs = (0..self.nodes.len()).map(|i| self.streams.stream("faults", i as u64)).collect();
            self.random_failures = Some((up, down));
            let who: Vec<usize> = if nodes.is_empty() { (0..self.nodes.len()).collect() } else { nodes.clone() };
            for node in who {
                let at = SimTime::ZERO + self.draw_fault_delay(node, true);
                self.push(at, Ev::Crash { node: node as u32, random: true })?;
            }
        }
        Ok(())
    }

    fn draw_fault_delay(&mut self, node: usize, uptime: bool) -> SimDuration {
        let (up, down) = self.random_failures.expect("random failures configured");
        let d = if uptime { up } else { down };
        SimDuration::from_secs_f64(d.sample(&mut self.fault_rngs[node]))
    }

    /// Schedules `ev` with the node of a timer or computation as the queue's hint
    /// ([`Self::next_node`]; a message's events are scheduled by [`Self::schedule_transit`]).
    fn push(&mut self, at: SimTime, ev: Ev) -> Result<EventKey> {
        let hint = match ev {
            Ev::Timer { node, .. } | Ev::Compute { node, .. } => node,
            _ => NO_HINT,
        };
        self.queue.schedule_hinted(at, ev, hint)
    }

    /// Schedules the next event of message `id` (`stage` names which): inline in the queue (a
    /// message's events are never cancelled or moved), through a slot when its index does not
    /// fit in an inline code. The message stays in its slot of the slab from its send to its
    /// end, changed in place, so that no event copies it. `to` is the message's receiver, the
    /// node its events concern (the queue's hint).
    #[inline]
    fn schedule_transit(&mut self, at: SimTime, stage: Stage, id: InFlight, to: u32) -> Result<()> {
        if id.0 <= INLINE_ID_MAX {
            self.queue.schedule_inline(at, (stage as u32) << INLINE_ID_BITS | id.0, to)
        } else {
            self.queue.schedule_hinted(at, stage.event(id), to).map(|_| ())
        }
    }

    /// Ends message `id`'s journey: it leaves the slab.
    fn take_transit(&mut self, id: InFlight) -> Transit<M> {
        self.transits.remove(id.0 as usize)
    }

    #[inline]
    fn check_node(&self, node: usize) -> Result<()> {
        if node < self.nodes.len() {
            Ok(())
        } else {
            Err(unknown_node(node, self.nodes.len()))
        }
    }

    #[inline]
    fn check_up(&self, node: usize) -> Result<()> {
        self.check_node(node)?;
        if self.nodes[node].up {
            Ok(())
        } else {
            Err(node_down(node, self.now()))
        }
    }

    /// The current virtual time.
    pub fn now(&self) -> SimTime {
        self.queue.now()
    }
    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }
    /// True if `node` is up.
    pub fn is_up(&self, node: usize) -> bool {
        self.nodes.get(node).is_some_and(|s| s.up)
    }
    /// The time of the next pending event, if any.
    pub fn peek_time(&mut self) -> Option<SimTime> {
        self.queue.peek_time()
    }
    /// The run's named random streams (derive the caller's own streams from these).
    pub fn streams(&self) -> &Streams {
        &self.streams
    }
    /// The running digest.
    pub fn digest(&self) -> Digest {
        self.digest
    }
    /// Folds a caller's number (a loss, a parameter's bits) into the digest.
    pub fn absorb(&mut self, x: u64) {
        self.digest.absorb(x)
    }
    /// Folds the bits of a parameter vector into the digest.
    pub fn absorb_f32s(&mut self, xs: &[f32]) {
        self.digest.absorb_f32s(xs)
    }
    /// The run's counters.
    pub fn stats(&self) -> SimStats {
        self.stats
    }

    /// What the engine holds now: pending events, and messages in flight by sender.
    pub fn backlog(&self) -> Backlog {
        let mut per_sender: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let mut b =
            Backlog { events: self.queue.len(), growth_bytes: self.pending_growth_bytes(), ..Backlog::default() };
        // Every message in transit has one pending event.
        for (_, tr) in &self.transits {
            b.messages += 1;
            b.wire_bytes += tr.bytes;
            let e = per_sender.entry(tr.from).or_default();
            e.0 += 1;
            e.1 += tr.bytes;
        }
        let now = self.now();
        (b.senders, b.nodes) = (per_sender.len(), self.nodes());
        b.worst = per_sender.into_iter().max_by_key(|&(node, (m, _))| (m, std::cmp::Reverse(node))).map(
            |(node, (messages, wire_bytes))| SenderBacklog {
                node: node as usize,
                messages,
                wire_bytes,
                booked: self.net.link(crate::net::egress(node as usize)).free_at.saturating_since(now),
            },
        );
        b
    }
    /// Events pending.
    #[inline]
    pub fn pending_events(&self) -> usize {
        self.queue.len()
    }
    /// Bytes the event queue will allocate at once when it next grows, once it is nearly full
    /// (see [`EventQueue::pending_growth_bytes`]); 0 otherwise.
    pub fn pending_growth_bytes(&self) -> u64 {
        // The slab of messages in transit doubles too, when every entry it has is taken.
        let (len, cap) = (self.transits.len(), self.transits.capacity());
        let transits = if len > 0 && len * 16 >= cap * 15 {
            (2 * cap.max(4) * (std::mem::size_of::<Transit<M>>() + 8)) as u64
        } else {
            0
        };
        self.queue.pending_growth_bytes() + transits
    }
    /// The recorded trace (if tracing is on).
    pub fn trace(&self) -> Option<&Trace> {
        self.trace.as_ref()
    }
    /// The network's one-way latency between two nodes.
    pub fn latency(&self, from: usize, to: usize) -> SimDuration {
        self.net.latency(from, to)
    }

    /// Sends `bytes` carrying `payload` from `from` to `to` now. Delivery (or loss) happens later.
    pub fn send(&mut self, from: usize, to: usize, bytes: u64, payload: M) -> Result<()> {
        self.check_up(from)?;
        self.check_node(to)?;
        let now = self.now();
        let lost = self.draw_loss(now);
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += bytes;
        let tr = Transit {
            from: from as u32,
            to: to as u32,
            src_inc: self.nodes[from].inc,
            dst_inc: self.nodes[to].inc,
            lost,
            bytes,
            sent_at: now,
            attempt_at: now,
            attempt: 0,
            progress: Progress { hop: 0, tail: now },
            payload,
        };
        let id = InFlight(u32::try_from(self.transits.insert(tr)).expect("fewer than 2^32 messages in transit"));
        let launched = self.launch(now, id);
        if launched.is_err() {
            self.transits.remove(id.0 as usize);
        }
        launched
    }

    /// Puts (an attempt of) a message on the wire at `now`.
    fn launch(&mut self, now: SimTime, id: InFlight) -> Result<()> {
        let tr = &mut self.transits[id.0 as usize];
        let to = tr.to;
        match self.net.begin(now, tr.from as usize, to as usize, tr.bytes) {
            Next::Hop(at, p) => {
                tr.progress = p;
                self.schedule_transit(at, Stage::Hop, id, to)
            }
            Next::Deliver(at) => self.schedule_transit(at, Stage::Deliver, id, to),
        }
    }

    fn draw_loss(&mut self, now: SimTime) -> bool {
        let p = self
            .losses
            .iter()
            .filter(|w| w.from <= now && now < w.until)
            .fold(1.0, |keep, w| keep * (1.0 - w.probability));
        if self.losses.is_empty() || p == 1.0 {
            return false;
        }
        self.loss_rng.random::<f64>() >= p
    }

    /// Sets a timer on `node` that fires after `after` with `tag`.
    pub fn set_timer(&mut self, node: usize, after: SimDuration, tag: u64) -> Result<TimerId> {
        self.check_up(node)?;
        let inc = self.nodes[node].inc;
        let at = self.now() + after;
        Ok(TimerId(self.push(at, Ev::Timer { node: node as u32, inc, tag })?.0))
    }

    /// Cancels a pending timer.
    pub fn cancel_timer(&mut self, timer: TimerId) -> Result<()> {
        self.ensure_timer(timer)?;
        self.queue.cancel(EventKey(timer.0)).map(|_| ())
    }

    /// Moves a pending timer to fire at `at` (not in the past).
    pub fn move_timer(&mut self, timer: TimerId, at: SimTime) -> Result<()> {
        self.ensure_timer(timer)?;
        self.queue.reschedule(EventKey(timer.0), at)
    }

    fn ensure_timer(&self, timer: TimerId) -> Result<()> {
        match self.queue.get(EventKey(timer.0)) {
            Some(Ev::Timer { .. }) => Ok(()),
            _ => Err(SimError::UnknownTimer(timer.0)),
        }
    }

    /// Starts a computation of `work` standard steps on `node`; it runs after any computation
    /// already queued on the node. Returns the job and the time it will finish.
    pub fn start_compute(&mut self, node: usize, work: f64) -> Result<(JobId, SimTime)> {
        self.check_up(node)?;
        if !(work.is_finite() && work >= 0.0) {
            return Err(SimError::config("work", format!("is {work}; must be a non-negative finite number")));
        }
        let state = self.nodes[node];
        let start = self.now().max(state.compute_free);
        let end = start + self.compute.step_time(node, start, work);
        self.nodes[node].compute_free = end;
        let job = self.next_job;
        self.next_job += 1;
        self.push(end, Ev::Compute { node: node as u32, inc: state.inc, job, started: start })?;
        Ok((JobId(job), end))
    }

    /// Starts a computation on `node` whose healthy duration was measured elsewhere (a real
    /// gradient timed on the device, or read back from a recording): the engine's stragglers
    /// still apply, its jitter does not (no jitter number is drawn).
    pub fn start_compute_measured(&mut self, node: usize, measured: SimDuration) -> Result<(JobId, SimTime)> {
        self.check_up(node)?;
        let state = self.nodes[node];
        let start = self.now().max(state.compute_free);
        let end = start + measured.mul_f64(self.compute.straggling(node, start));
        self.nodes[node].compute_free = end;
        let job = self.next_job;
        self.next_job += 1;
        self.push(end, Ev::Compute { node: node as u32, inc: state.inc, job, started: start })?;
        Ok((JobId(job), end))
    }

    fn record(&mut self, at: SimTime, start: SimTime, kind: EventKind, node: u32, peer: u32, bytes: u64) {
        self.digest.absorb_event(at.as_nanos(), kind as u8, node, peer, bytes);
        if let Some(t) = &mut self.trace {
            t.records.push(TraceRecord { at, start, kind, node, peer, bytes });
        }
    }

    /// Processes events until one a node must react to, and returns it with its time.
    /// Returns `None` when nothing is pending.
    pub fn step(&mut self) -> Option<(SimTime, Occurrence<M>)> {
        loop {
            let (now, key, ev) = self.pop_until(SimTime(u64::MAX))?;
            self.stats.events += 1;
            if let Some(occ) = self.process(now, key, ev) {
                return Some((now, occ));
            }
        }
    }

    /// Moves the clock forward to `to` (for observing the cluster at a given time). Events before
    /// `to` must have been processed first; an earlier `to` or a pending earlier event is an error.
    pub fn advance_to(&mut self, to: SimTime) -> Result<()> {
        self.queue.advance_to(to)
    }

    /// The node the next event concerns, as a hint for prefetching (`None` where there is no
    /// next event or it concerns no node); changes nothing.
    #[inline]
    pub fn next_node(&mut self) -> Option<usize> {
        // The node rides in the queue's entry, so that finding it reads neither the event's
        // payload nor its message, each of which is a cache miss at 10,000 nodes.
        self.queue.peek_hint().filter(|&h| h != NO_HINT).map(|h| h as usize)
    }

    /// Prefetches the next event itself: its slot in the queue, or the message it moves on (the
    /// message is looked up, so call this after the prefetches that need no lookup).
    #[inline]
    pub fn prefetch_next_event(&mut self) {
        if let Some(code) = self.queue.prefetch_first() {
            let id = match Stage::decode(code) {
                Ev::Hop(id) | Ev::Deliver(id) | Ev::Received(id) | Ev::Resend(id) => id,
                _ => return,
            };
            if let Some(t) = self.transits.get(id.0 as usize) {
                crate::prefetch::lines(t, 3);
            }
        }
    }

    /// Prefetches what an event of `node` reads of the engine's state: its compute stream and
    /// step time, its incarnation and its NIC (see [`crate::prefetch`]).
    #[inline]
    pub fn prefetch_node(&self, node: usize) {
        if let Some(n) = self.nodes.get(node) {
            crate::prefetch::lines(n, 1);
        }
        self.compute.prefetch(node);
        self.net.prefetch(node);
    }

    /// Like [`Sim::step`], but stops (returning `None`) before any event later than `until`.
    pub fn step_until(&mut self, until: SimTime) -> Option<(SimTime, Occurrence<M>)> {
        while let Some((now, key, ev)) = self.pop_until(until) {
            self.stats.events += 1;
            if let Some(occ) = self.process(now, key, ev) {
                return Some((now, occ));
            }
        }
        None
    }

    /// The next event due at or before `until` (a message's inline one with no key).
    #[inline]
    fn pop_until(&mut self, until: SimTime) -> Option<(SimTime, EventKey, Ev)> {
        Some(match self.queue.pop_any_until(until)? {
            (now, Popped::Slot(key, ev)) => (now, key, ev),
            (now, Popped::Inline(code)) => (now, EventKey(u64::MAX), Stage::decode(code)),
        })
    }

    /// Handles one event popped at `now`; `Some` when a protocol must see it.
    fn process(&mut self, now: SimTime, key: EventKey, ev: Ev) -> Option<Occurrence<M>> {
        match ev {
            Ev::Timer { node, inc, tag } => {
                if self.stale(node, inc, now) {
                    return None;
                }
                self.record(now, now, EventKind::Timer, node, NO_PEER, tag);
                Some(Occurrence::Timer { node: node as usize, timer: TimerId(key.0), tag })
            }
            Ev::Compute { node, inc, job, started } => {
                if self.stale(node, inc, now) {
                    return None;
                }
                self.record(now, started, EventKind::Compute, node, NO_PEER, job);
                Some(Occurrence::ComputeDone { node: node as usize, job: JobId(job), started })
            }
            Ev::Hop(id) => {
                self.hop(now, id);
                None
            }
            Ev::Deliver(id) => self.deliver(now, id),
            Ev::Received(id) => {
                let tr = &self.transits[id.0 as usize];
                let to = tr.to as usize;
                // A node that crashed while the message waited never handles it.
                let up = self.nodes[to].up && self.nodes[to].inc == tr.dst_inc;
                if !up {
                    self.stats.lost_crash += 1;
                }
                self.hand_over(now, if up { EventKind::Deliver } else { EventKind::DropCrash }, id)
            }
            Ev::Resend(id) => {
                self.resend(now, id);
                None
            }
            Ev::Crash { node, random } => self.set_up(now, node, random, false),
            Ev::Restart { node, random } => self.set_up(now, node, random, true),
            Ev::Nic { node, factor } => {
                self.net.set_nic_factor(node as usize, factor);
                self.record(now, now, EventKind::NicChange, node, NO_PEER, factor.to_bits());
                None
            }
        }
    }

    /// A message's head reached its next link: it moves on, or is delivered when it has arrived.
    fn hop(&mut self, now: SimTime, id: InFlight) {
        let tr = &self.transits[id.0 as usize];
        let (from, to, bytes, progress) = (tr.from, tr.to, tr.bytes, tr.progress);
        self.record(now, now, EventKind::NetHop, to, from, bytes);
        match self.net.advance(now, from as usize, to as usize, bytes, progress) {
            Next::Hop(at, p) => {
                self.transits[id.0 as usize].progress = p;
                self.schedule_transit(at, Stage::Hop, id, to).expect("hops move forward in time");
            }
            Next::Deliver(at) => {
                self.schedule_transit(at, Stage::Deliver, id, to).expect("deliveries move forward in time");
            }
        }
    }

    /// A message arrived: a lost one is sent again (reliable transport) or dropped, one to or
    /// from a crashed incarnation or across a partition is dropped, and a delivered one waits
    /// for its host's receive time if there is one.
    fn deliver(&mut self, now: SimTime, id: InFlight) -> Option<Occurrence<M>> {
        let tr = &mut self.transits[id.0 as usize];
        let (from, to) = (tr.from as usize, tr.to as usize);
        if let (true, crate::net::Transport::Reliable { rto }) = (tr.lost, self.transport) {
            // The sender's timeout for this attempt: rto, doubled per earlier loss.
            let wait = rto.mul_f64(f64::from(1u32 << tr.attempt.min(6)));
            let at = (tr.attempt_at + wait).max(now);
            let (attempt_at, node, peer, bytes) = (tr.attempt_at, tr.to, tr.from, tr.bytes);
            tr.attempt += 1;
            self.stats.retransmissions += 1;
            self.stats.retransmission_wait = self.stats.retransmission_wait + (at - attempt_at);
            self.record(now, attempt_at, EventKind::Retransmit, node, peer, bytes);
            self.schedule_transit(at, Stage::Resend, id, to as u32).expect("retransmissions move forward in time");
            return None;
        }
        let kind = if tr.lost {
            self.stats.lost_random += 1;
            EventKind::DropLoss
        } else if !self.nodes[to].up || self.nodes[to].inc != tr.dst_inc || self.nodes[from].inc != tr.src_inc {
            self.stats.lost_crash += 1;
            EventKind::DropCrash
        } else if self.partitions.iter().any(|p| p.cuts(from, to, tr.attempt_at, now)) {
            self.stats.lost_partition += 1;
            EventKind::DropPartition
        } else {
            EventKind::Deliver
        };
        if kind == EventKind::Deliver {
            if let Some(t) = self.compute.receive_time(to) {
                // The host handles one received message after another.
                let at = now.max(self.nodes[to].receive_free) + t;
                self.nodes[to].receive_free = at;
                self.schedule_transit(at, Stage::Received, id, to as u32).expect("handling moves forward in time");
                return None;
            }
        }
        self.hand_over(now, kind, id)
    }

    /// A lost message's retransmission timer fired: it is sent again unless its sender crashed.
    fn resend(&mut self, now: SimTime, id: InFlight) {
        let tr = &self.transits[id.0 as usize];
        let from = tr.from as usize;
        if !self.nodes[from].up || self.nodes[from].inc != tr.src_inc {
            let tr = self.take_transit(id);
            self.stats.lost_crash += 1;
            self.record(now, tr.sent_at, EventKind::DropCrash, tr.to, tr.from, tr.bytes);
            return;
        }
        let lost = self.draw_loss(now);
        let tr = &mut self.transits[id.0 as usize];
        tr.lost = lost;
        tr.attempt_at = now;
        self.stats.bytes_retransmitted += tr.bytes;
        self.launch(now, id).expect("a retransmission starts now");
    }

    /// A crash (`up` false) or a restart (`up` true) of `node`; a random one schedules its
    /// opposite. A node already in that state is left as it is. A new incarnation starts either
    /// way, so the old one's timers, computations and messages are void.
    fn set_up(&mut self, now: SimTime, node: u32, random: bool, up: bool) -> Option<Occurrence<M>> {
        let n = node as usize;
        if random {
            let at = now + self.draw_fault_delay(n, up);
            let next = if up { Ev::Crash { node, random: true } } else { Ev::Restart { node, random: true } };
            self.push(at, next).expect("future");
        }
        if self.nodes[n].up == up {
            return None;
        }
        let s = &mut self.nodes[n];
        s.up = up;
        s.inc += 1;
        s.compute_free = now;
        s.receive_free = now;
        if up {
            self.stats.restarts += 1;
            self.record(now, now, EventKind::Restart, node, NO_PEER, 0);
            Some(Occurrence::Restarted { node: n })
        } else {
            self.stats.crashes += 1;
            self.record(now, now, EventKind::Crash, node, NO_PEER, 0);
            Some(Occurrence::Crashed { node: n })
        }
    }

    /// Records the end of message `id`'s journey (`kind`: delivered, or why it was dropped) and,
    /// if it was delivered, hands the message to its node.
    fn hand_over(&mut self, now: SimTime, kind: EventKind, id: InFlight) -> Option<Occurrence<M>> {
        let tr = self.take_transit(id);
        self.record(now, tr.sent_at, kind, tr.to, tr.from, tr.bytes);
        if kind != EventKind::Deliver {
            return None;
        }
        self.stats.messages_delivered += 1;
        let (from, to) = (tr.from as usize, tr.to as usize);
        Some(Occurrence::Message { from, to, bytes: tr.bytes, sent_at: tr.sent_at, payload: tr.payload })
    }

    /// True (and recorded) if an event belongs to an earlier incarnation of its node.
    fn stale(&mut self, node: u32, inc: u32, now: SimTime) -> bool {
        if self.nodes[node as usize].inc == inc {
            return false;
        }
        self.stats.discarded += 1;
        self.record(now, now, EventKind::Discard, node, u32::MAX, 0);
        true
    }
}
