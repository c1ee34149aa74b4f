//! The event trace: what happened, when, on which node; exported as Chrome trace-event JSON by
//! [`crate::chrome`] (open it in Perfetto or `chrome://tracing`).

use crate::time::SimTime;

/// What a trace record (and a digest entry) describes. The numeric codes are part of the digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum EventKind {
    /// A node's timer fired.
    Timer = 1,
    /// A node finished a computation (span from its start).
    Compute = 2,
    /// A message's head reached the next link of its path (internal).
    NetHop = 3,
    /// A message was delivered (span from its send).
    Deliver = 4,
    /// A message was lost to a crash of either end.
    DropCrash = 5,
    /// A message was lost to a network partition.
    DropPartition = 6,
    /// A message was lost to random message loss.
    DropLoss = 7,
    /// A node crashed.
    Crash = 8,
    /// A node restarted.
    Restart = 9,
    /// A node's NIC changed speed (degraded or restored).
    NicChange = 10,
    /// An event of a crashed node (timer or computation) was discarded.
    Discard = 11,
    /// A message lost at random will be sent again (reliable transport).
    Retransmit = 12,
}

impl EventKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            EventKind::Timer => "timer",
            EventKind::Compute => "compute",
            EventKind::NetHop => "hop",
            EventKind::Deliver => "message",
            EventKind::DropCrash => "lost (crash)",
            EventKind::DropPartition => "lost (partition)",
            EventKind::DropLoss => "lost (loss)",
            EventKind::Crash => "crash",
            EventKind::Restart => "restart",
            EventKind::NicChange => "nic change",
            EventKind::Discard => "discarded",
            EventKind::Retransmit => "lost, to be sent again",
        }
    }
}

/// One traced event. Spans (computations, messages) carry their start time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// When the event was processed.
    pub at: SimTime,
    /// Start of the span (equal to `at` for instants).
    pub start: SimTime,
    /// What happened.
    pub kind: EventKind,
    /// The node whose track shows it (the receiver, for messages).
    pub node: u32,
    /// The other end (the sender, for messages), or `u32::MAX`.
    pub peer: u32,
    /// Bytes involved (messages), or 0.
    pub bytes: u64,
}

/// A recorded trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The records in processing order.
    pub records: Vec<TraceRecord>,
}
