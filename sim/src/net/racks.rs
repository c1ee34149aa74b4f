//! Racks joined by an oversubscribed core. Within a rack the switch is non-blocking; a message to
//! another rack also crosses its rack's uplink and the destination rack's downlink, which all the
//! rack's nodes share.

use super::{egress, ingress, LinkId};

/// Link id of rack `r`'s uplink, given `nodes` nodes.
fn uplink(nodes: usize, r: usize) -> LinkId {
    (2 * nodes + 2 * r) as LinkId
}
/// Link id of rack `r`'s downlink.
fn downlink(nodes: usize, r: usize) -> LinkId {
    (2 * nodes + 2 * r + 1) as LinkId
}

/// The path from `from` to `to`.
pub fn path(nodes: usize, rack_size: usize, from: usize, to: usize) -> ([LinkId; 4], usize) {
    let (ra, rb) = (from / rack_size, to / rack_size);
    if ra == rb {
        ([egress(from), ingress(to), 0, 0], 2)
    } else {
        ([egress(from), uplink(nodes, ra), downlink(nodes, rb), ingress(to)], 4)
    }
}
