//! The flat topology: one non-blocking switch. A message crosses its sender's egress link and its
//! receiver's ingress link, nothing else.

use super::{egress, ingress, LinkId};

/// The path from `from` to `to`: egress, ingress.
pub fn path(from: usize, to: usize) -> ([LinkId; 4], usize) {
    ([egress(from), ingress(to), 0, 0], 2)
}
