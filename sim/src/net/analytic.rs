//! The analytic (contention-free) model: a message arrives `latency + S/B` after it is sent, with
//! `B` the slowest link on its path, however much else is in flight (and a round trip more when
//! it goes by rendezvous). Fast, and the closed form
//! the contention model must agree with on an idle network.

use super::{Network, Next};
use crate::time::SimTime;

/// Arrival time of a message sent at `now`.
pub fn arrival(net: &Network, now: SimTime, from: usize, to: usize, bytes: u64) -> Next {
    let (path, len) = net.path(from, to);
    let slowest = path[..len].iter().map(|&l| net.link(l).now).min().expect("paths are non-empty");
    Next::Deliver(now + net.handshake(from, to, bytes) + net.latency(from, to) + slowest.transfer_time(bytes))
}
