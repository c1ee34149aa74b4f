//! What a run holds that grows with simulated time: pending events and messages in flight, by
//! sender. A run that outgrows its memory is stopped with this in words, naming the NIC that
//! holds the most (a node that sends faster than its bandwidth allows).

use crate::time::SimDuration;

/// What the engine holds that grows with simulated time, for a run that outgrows its memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Pending events of every kind.
    pub events: usize,
    /// Messages sent and not yet handled by their receiver (on the wire, or waiting for the
    /// receiver's host).
    pub messages: u64,
    /// Their bytes on the wire.
    pub wire_bytes: u64,
    /// The sender with the most such messages (the lowest rank on ties), if any.
    pub worst: Option<SenderBacklog>,
    /// Bytes the event queue will allocate at once when it next grows (0 unless nearly full).
    pub growth_bytes: u64,
    /// Nodes with messages in flight.
    pub senders: usize,
    /// Nodes in the cluster.
    pub nodes: usize,
}

/// One sender's messages in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SenderBacklog {
    /// The sender.
    pub node: usize,
    /// Its messages in flight.
    pub messages: u64,
    /// Their bytes on the wire.
    pub wire_bytes: u64,
    /// How far ahead of now its NIC is booked: the time its queue takes to drain.
    pub booked: SimDuration,
}

/// How long a NIC may be booked ahead by a burst, not a sending rate beyond its bandwidth.
const BURST: SimDuration = SimDuration(100_000_000);

impl Backlog {
    /// The backlog in words, naming the sender that holds most of it.
    pub fn describe(&self) -> String {
        let gb = |b: u64| b as f64 / 1e9;
        let total = format!(
            "{} events are pending, {} of them messages in flight ({:.2} GB on the wire)",
            self.events,
            self.messages,
            gb(self.wire_bytes)
        );
        let growth = if self.growth_bytes > 0 {
            format!("; the event queue would next take {:.2} GB at once", gb(self.growth_bytes))
        } else {
            String::new()
        };
        match &self.worst {
            // A burst to many peers from many senders (every member probing every rank at once):
            // none holds more than a message for each node, and none's NIC is booked for long
            // (a node that pushes 46.8 MB every 10 ms holds 25 messages, booked 0.9 s ahead).
            Some(w) if w.messages < self.nodes as u64 && self.senders > 4 && w.booked < BURST => format!(
                "{total} from {} senders (at most {} from one, node {}): the nodes send to many others at \
                 once{growth}",
                self.senders, w.messages, w.node
            ),
            Some(w) if w.messages > 1 => format!(
                "node {}'s NIC holds {} messages not yet delivered ({:.2} GB on the wire, booked {} ahead): it sends \
                 faster than its bandwidth allows; {total}{growth}",
                w.node,
                w.messages,
                gb(w.wire_bytes),
                w.booked
            ),
            _ => format!("{total}{growth}"),
        }
    }
}
