//! The contention model: FIFO links, cut-through.
//!
//! A message of S bytes starts on its sender's egress when that link is free; its head reaches
//! the next link one latency later (switches forward cut-through, so no further latency is
//! added). At each link the head waits until the link is free, in order of head arrival (the
//! engine processes hops in time order), and the tail leaves the link at
//! `max(start + S/B_link, tail leaving the previous link)`: a fast link cannot outrun a slow one
//! upstream. The message is delivered when its tail leaves the last link. Alone on an idle
//! network this gives `latency + S/B`; k senders into one receiver finish at `latency + k·S/B`.

use super::{Network, Next, Progress};
use crate::time::SimTime;

/// Reserves the sender's egress at `now`.
pub fn begin(net: &mut Network, now: SimTime, from: usize, to: usize, bytes: u64) -> Next {
    let (path, _) = net.path(from, to);
    let latency = net.latency(from, to);
    let link = net.link_mut(path[0]);
    let start = now.max(link.free_at);
    let tail = start + link.now.transfer_time(bytes);
    link.free_at = tail;
    Next::Hop(start + latency, Progress { hop: 1, tail: tail + latency })
}

/// The message's head has reached link `p.hop` of its path at `now`.
pub fn advance(net: &mut Network, now: SimTime, from: usize, to: usize, bytes: u64, p: Progress) -> Next {
    let (path, len) = net.path(from, to);
    let link = net.link_mut(path[p.hop as usize]);
    let start = now.max(link.free_at);
    let tail = (start + link.now.transfer_time(bytes)).max(p.tail);
    link.free_at = tail;
    let hop = p.hop + 1;
    if hop as usize == len {
        Next::Deliver(tail)
    } else {
        Next::Hop(start, Progress { hop, tail })
    }
}
