//! The contention model: FIFO links, cut-through.
//!
//! A message of S bytes starts on its sender's egress when that link is free; its head reaches
//! the next link one latency later (switches forward cut-through, so no further latency is
//! added). At each link the head waits until the link is free, in order of head arrival, and the
//! tail leaves the link at `max(start + S/B_link, tail leaving the previous link)`: a fast link
//! cannot outrun a slow one upstream. The message is delivered when its tail leaves the last
//! link. Alone on an idle network this gives `latency + S/B`; k senders into one receiver finish
//! at `latency + k·S/B`. A link with a token bucket sends at its peak while it has tokens (see
//! [`super::TokenBucket`]). A message sent by rendezvous is at its sender's egress one round trip
//! after it is sent ([`Network::handshake`]), an event, so that what the sender sends meanwhile
//! goes first.
//!
//! Head arrivals are normally events (the engine calls [`advance`] at their time), so links
//! serve heads in arrival order. As an exact shortcut, a link is reserved without an event when
//! no other head can reach it first: at send time, when the head arrives after the minimum
//! latency of the network and no head is pending at that link (any later send arrives no
//! earlier); later on a path, when the head arrives at the link at the current instant and none
//! is pending there. The shortcut changes no result, only the number of events.

use super::{LinkId, Network, Next, Progress};
use crate::time::{SimDuration, SimTime};

/// Reserves the sender's egress at `now` (and the next link too when that is safe); a message
/// sent by rendezvous comes back (hop 0) when its handshake is over.
pub fn begin(net: &mut Network, now: SimTime, from: usize, to: usize, bytes: u64) -> Next {
    let wait = net.handshake(from, to, bytes);
    if wait > SimDuration::ZERO {
        return Next::Hop(now + wait, Progress { hop: 0, tail: SimTime::ZERO });
    }
    depart(net, now, from, to, bytes)
}

/// The message's data leaves its sender at `now`.
fn depart(net: &mut Network, now: SimTime, from: usize, to: usize, bytes: u64) -> Next {
    let (path, len) = net.path(from, to);
    let latency = net.latency(from, to);
    let (start, tail) = net.occupy(path[0], now, bytes, SimTime::ZERO);
    let head = start + latency;
    let p = Progress { hop: 1, tail: tail + latency };
    if head <= now + net.min_latency() && net.pending(path[1]) == 0 {
        return walk(net, head, &path[..len], bytes, p);
    }
    *net.pending_mut(path[1]) += 1;
    Next::Hop(head, p)
}

/// The message's head has reached link `p.hop` of its path at `now` (a scheduled event); hop 0:
/// its rendezvous handshake is over.
pub fn advance(net: &mut Network, now: SimTime, from: usize, to: usize, bytes: u64, p: Progress) -> Next {
    if p.hop == 0 {
        return depart(net, now, from, to, bytes);
    }
    let (path, len) = net.path(from, to);
    *net.pending_mut(path[p.hop as usize]) -= 1;
    walk(net, now, &path[..len], bytes, p)
}

/// Moves the head through link `p.hop`, arriving there at `head`, and on through the following
/// links for as long as it reaches them at `head` with nothing pending there.
fn walk(net: &mut Network, head: SimTime, path: &[LinkId], bytes: u64, mut p: Progress) -> Next {
    loop {
        let (start, tail) = net.occupy(path[p.hop as usize], head, bytes, p.tail);
        p = Progress { hop: p.hop + 1, tail };
        let Some(&next) = path.get(p.hop as usize) else { return Next::Deliver(tail) };
        if start != head || net.pending(next) != 0 {
            *net.pending_mut(next) += 1;
            return Next::Hop(start, p);
        }
    }
}
