//! A rank's outgoing messages: non-blocking MPI sends that own their buffers until MPI is done.
//!
//! A blocking send of a large message waits until its receiver posts the matching receive (MPI's
//! rendezvous protocol), so it cannot run on the rank's own loop (two ranks sending to each other
//! would wait forever), and from a sender thread of its own the transfer only advanced when the
//! receiver happened to poll: on Open MPI's shared-memory transport a 1 MiB message took 17 ms one
//! way that way, against 0.13 ms here. Each message is an `MPI_Isend` from a buffer this outbox
//! owns; [`Outbox::progress`], called from the rank's poll loop, tests the sends and frees the
//! buffers of those that completed.
//!
//! This is the crate's only `unsafe` code: the `mpi` crate's non-blocking sends borrow their
//! buffer for `'static`, and a buffer is handed back to its `Box` only once its send completed.
#![allow(unsafe_code)]

use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

/// A send in flight and the buffer it reads.
struct Pending {
    request: Request<'static, [u8]>,
    buf: *mut [u8],
}

/// Sends in flight, in the order they were started.
pub struct Outbox {
    world: SimpleCommunicator,
    pending: Vec<Pending>,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbox {
    /// An empty outbox on `MPI_COMM_WORLD`.
    pub fn new() -> Self {
        Outbox { world: SimpleCommunicator::world(), pending: Vec::new() }
    }

    /// Starts sending `buf` to rank `to` with `tag`; returns at once.
    pub fn send(&mut self, to: i32, tag: i32, buf: Vec<u8>) {
        let buf: *mut [u8] = Box::into_raw(buf.into_boxed_slice());
        // SAFETY: `buf` came from `Box::into_raw` just above and is freed only in `reap`, after
        // MPI reported this send complete, or never (see `Drop`); nothing writes to it meanwhile.
        let data: &'static [u8] = unsafe { &*buf };
        let request = self.world.process_at_rank(to).immediate_send_with_tag(StaticScope, data, tag);
        self.pending.push(Pending { request, buf });
    }

    /// Advances MPI and frees the buffers of the sends that completed; true if any did.
    pub fn progress(&mut self) -> bool {
        let before = self.pending.len();
        let mut still = Vec::with_capacity(before);
        for p in self.pending.drain(..) {
            match p.request.test() {
                Ok(_) => reap(p.buf),
                Err(request) => still.push(Pending { request, buf: p.buf }),
            }
        }
        self.pending = still;
        self.pending.len() < before
    }

    /// Sends not yet complete.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
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
        self.progress();
        for p in self.pending.drain(..) {
            std::mem::forget(p.request);
        }
    }
}
