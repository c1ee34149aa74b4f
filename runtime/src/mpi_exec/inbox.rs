//! A rank's incoming messages: a matched probe, then a non-blocking receive into a buffer this
//! inbox owns, so that a large message arriving never holds the rank's loop.
//!
//! A blocking receive of a large message lasts as long as its transfer (MPI's rendezvous
//! protocol moves the body only once the receive is posted): 32 ms for 4 MB through a 1 Gbit/s
//! NIC, during which the rank handled nothing else, and a server's next push could not flow
//! while it applied the last one. The simulator's NICs receive while their node works, and so
//! does this inbox: the next arrival is matched and its receive posted (`MPI_Improbe`,
//! `MPI_Imrecv`) while the rank works; the kernel's socket buffers take in the body and the
//! rank's loop collects it. One receive is in flight at a time, so that bodies come in one
//! after another, in the order they were matched, as messages cross the simulator's ingress
//! link first come, first served (several at once would share the link, and a server's
//! updates would come later than first come, first served predicts). Messages are handed out
//! in that order, each sender's in the order it sent them (MPI's order between a pair of ranks,
//! which the protocols rely on).
//!
//! Like the outbox, this is `unsafe` code: the `mpi` crate's non-blocking receives borrow their
//! buffer for `'static`, and a buffer is handed back to its `Box` only once its receive completed.
#![allow(unsafe_code)]

use mpi::request::{Request, StaticScope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use std::collections::VecDeque;

/// A receive posted, and the buffer it fills.
struct Receiving {
    request: Request<'static, [u8]>,
    buf: *mut [u8],
    source: i32,
    tag: i32,
}

/// A message received: its bytes, its sender and its tag.
pub struct Received {
    /// The message's bytes.
    pub buf: Vec<u8>,
    /// The sending rank.
    pub source: i32,
    /// The message's tag.
    pub tag: i32,
}

/// The receive in flight and the messages received, in the order they were matched.
pub struct Inbox {
    world: SimpleCommunicator,
    receiving: Option<Receiving>,
    ready: VecDeque<Received>,
}

impl Default for Inbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Inbox {
    /// An empty inbox on `MPI_COMM_WORLD`.
    pub fn new() -> Self {
        Inbox { world: SimpleCommunicator::world(), receiving: None, ready: VecDeque::new() }
    }

    /// Advances the receive in flight and, once it is complete, posts the next arrival's; true
    /// if a receive was posted or completed.
    pub fn progress(&mut self) -> bool {
        let mut busy = false;
        loop {
            if let Some(r) = self.receiving.take() {
                match r.request.test() {
                    Ok(_) => {
                        // SAFETY: `r.buf` came from `Box::into_raw` below, its receive completed,
                        // and it is taken back once (its `Receiving` was consumed).
                        let buf = unsafe { Box::from_raw(r.buf) }.into_vec();
                        self.ready.push_back(Received { buf, source: r.source, tag: r.tag });
                        busy = true;
                    }
                    Err(request) => {
                        self.receiving = Some(Receiving { request, ..r });
                        return busy;
                    }
                }
            }
            let Some((message, status)) = self.world.any_process().immediate_matched_probe() else { return busy };
            let len = status.count(u8::equivalent_datatype()).max(0) as usize;
            let buf: *mut [u8] = Box::into_raw(vec![0u8; len].into_boxed_slice());
            // SAFETY: `buf` came from `Box::into_raw` just above and is handed back to its `Box`
            // only above, after MPI reported this receive complete, or never (see `Drop`);
            // nothing else reads or writes it meanwhile.
            let data: &'static mut [u8] = unsafe { &mut *buf };
            let request = message.immediate_matched_receive_into(StaticScope, data);
            self.receiving = Some(Receiving { request, buf, source: status.source_rank(), tag: status.tag() });
            busy = true;
        }
    }

    /// The next message received in full, in the order they were matched.
    pub fn take(&mut self) -> Option<Received> {
        self.ready.pop_front()
    }

    /// Advances and returns the next message received in full, if there is one.
    pub fn poll(&mut self) -> Option<Received> {
        self.progress();
        self.take()
    }

    /// Messages matched and not yet handed out.
    pub fn pending(&self) -> usize {
        self.ready.len() + usize::from(self.receiving.is_some())
    }
}

impl Drop for Inbox {
    /// A receive still in flight (an error path left before draining) is left to MPI: its
    /// request is forgotten and its buffer leaked, never freed under a running receive.
    fn drop(&mut self) {
        if let Some(r) = self.receiving.take() {
            std::mem::forget(r.request);
        }
    }
}
