//! A server that handles one request at a time, each taking the same time: requests queue, first
//! come, first served. The parameter-server shards and the EASGD centre use it to charge their
//! measured time per update (`update_time_us`) in the simulator, so that a busy server slows its
//! workers as a real one does. With a time of zero, nothing queues: requests are served at once.

use crate::protocol::Context;
use dsgd_sim::SimDuration;
use std::collections::VecDeque;

/// True for a service time of zero (such a field is left out of a resolved spec, so specs written
/// before it existed keep their form and hash).
pub(crate) fn is_instant(time_us: &f64) -> bool {
    *time_us == 0.0
}

/// The queue of a server with a fixed service time.
pub struct Service<M> {
    time: SimDuration,
    /// Requests waiting, the first one being served.
    queue: VecDeque<(usize, M)>,
}

impl<M> Service<M> {
    /// A server taking `time_us` microseconds per request.
    pub fn new(time_us: f64) -> Self {
        Service { time: SimDuration::from_secs_f64(time_us * 1e-6), queue: VecDeque::new() }
    }

    /// True when requests take no time (they are served as they arrive).
    pub fn is_instant(&self) -> bool {
        self.time == SimDuration::ZERO
    }

    /// Queues the request `msg` from `from`; if the server was idle, arms the timer `tag`, which
    /// fires when this request is served.
    pub fn arrive(&mut self, ctx: &mut dyn Context<M>, from: usize, msg: M, tag: u64) {
        self.queue.push_back((from, msg));
        if self.queue.len() == 1 {
            ctx.set_timer(self.time, tag);
        }
    }

    /// The timer `tag` fired: the request whose service ended, and the timer armed again for the
    /// next one waiting.
    pub fn served(&mut self, ctx: &mut dyn Context<M>, tag: u64) -> Option<(usize, M)> {
        let done = self.queue.pop_front();
        if !self.queue.is_empty() {
            ctx.set_timer(self.time, tag);
        }
        done
    }

    /// Forgets every waiting request (the server crashed).
    pub fn clear(&mut self) {
        self.queue.clear();
    }
}
