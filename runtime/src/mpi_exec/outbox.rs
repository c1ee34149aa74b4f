//! A rank's outgoing messages: non-blocking MPI sends that own their buffers until MPI is done,
//! one at a time, in order.
//!
//! A blocking send of a large message waits until its receiver posts the matching receive (MPI's
//! rendezvous protocol), so it cannot run on the rank's own loop (two ranks sending to each other
//! would wait forever), and from a sender thread of its own the transfer only advanced when the
//! receiver happened to poll: on Open MPI's shared-memory transport a 1 MiB message took 17 ms one
//! way that way, against 0.13 ms here. Each message is an `MPI_Isend` from a buffer this outbox
//! owns; [`Outbox::progress`], called from the rank's poll loop, tests the sends and frees the
//! buffers of those that completed.
//!
//! One message is sent at a time, the next when the last completed, as the simulator's NIC sends
//! first come, first served (several large sends at once would share the NIC, each ending
//! later). A send of a small message completes as soon as it is handed over.
//!
//! This is the crate's only `unsafe` code: the `mpi` crate's non-blocking sends borrow their
//! buffer for `'static`, and a buffer is handed back to its `Box` only once its send completed.
#![allow(unsafe_code)]

use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::collections::VecDeque;

/// A send in flight and the buffer it reads.
struct Pending {
    request: Request<'static, [u8]>,
    buf: *mut [u8],
}

/// The send in flight and those waiting their turn.
pub struct Outbox {
    world: SimpleCommunicator,
    pending: Option<Pending>,
    queued: VecDeque<(i32, i32, Vec<u8>)>,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbox {
    /// An empty outbox on `MPI_COMM_WORLD`.
    pub fn new() -> Self {
        Outbox { world: SimpleCommunicator::world(), pending: None, queued: VecDeque::new() }
    }

    /// Sends `buf` to rank `to` with `tag` after the messages before it; returns at once.
    pub fn send(&mut self, to: i32, tag: i32, buf: Vec<u8>) {
        self.queued.push_back((to, tag, buf));
        self.progress();
    }

    /// Starts the send of `buf`.
    fn start(&mut self, to: i32, tag: i32, buf: Vec<u8>) {
        let buf: *mut [u8] = Box::into_raw(buf.into_boxed_slice());
        // SAFETY: `buf` came from `Box::into_raw` just above and is freed only in `reap`, after
        // MPI reported this send complete, or never (see `Drop`); nothing writes to it meanwhile.
        let data: &'static [u8] = unsafe { &*buf };
        let request = self.world.process_at_rank(to).immediate_send_with_tag(StaticScope, data, tag);
        self.pending = Some(Pending { request, buf });
    }

    /// Advances the send in flight, frees its buffer once it completed and starts the next;
    /// true if a send completed.
    pub fn progress(&mut self) -> bool {
        let mut done = false;
        loop {
            if let Some(p) = self.pending.take() {
                match p.request.test() {
                    Ok(_) => {
                        reap(p.buf);
                        done = true;
                    }
                    Err(request) => {
                        self.pending = Some(Pending { request, buf: p.buf });
                        return done;
                    }
                }
            }
            let Some((to, tag, buf)) = self.queued.pop_front() else { return done };
            self.start(to, tag, buf);
        }
    }

    /// Sends not yet complete (in flight or waiting their turn).
    pub fn in_flight(&self) -> usize {
        usize::from(self.pending.is_some()) + self.queued.len()
    }
}

/// Frees the buffer of a completed send.
fn reap(buf: *mut [u8]) {
    // SAFETY: `buf` came from `Box::into_raw` in `send`, its send completed, and it is reaped
    // once (its `Pending` was consumed).
    drop(unsafe { Box::from_raw(buf) });
}

impl Drop for Outbox {
    /// Sends still in flight (an error path left before draining) are left to MPI: their
    /// requests are forgotten and their buffers leaked, never freed under a running send.
    fn drop(&mut self) {
        self.queued.clear();
        self.progress();
        if let Some(p) = self.pending.take() {
            std::mem::forget(p.request);
        }
    }
}
