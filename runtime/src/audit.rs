//! What a protocol shows the simulation tester (`dsgd torture`, `dsgd run --check`) after each of
//! its events, and what it tells of a message: enough for the tester's invariants (see
//! [`crate::sim_exec`]'s checker) and no more. Showing changes nothing the protocol does; a run
//! without checks never asks.

/// A node's state as the invariants see it.
#[derive(Default)]
pub struct Audit<'a> {
    /// The role in words (`worker`, `shard`, `centre`, `node`), for the coverage table.
    pub role: &'static str,
    /// The protocol's own stage (`reducing`, `joining`, `exchanging`...), for the coverage table;
    /// `None`: the executor's phase is shown.
    pub stage: Option<&'static str>,
    /// Counts that never decrease while the node is up (a restart may reset them): completed
    /// iterations, a shard's version, local steps.
    pub progress: [Option<u64>; 2],
    /// Synchronous SGD: the membership view and its members, the completed iterations and the
    /// parameters after them, which every member of that view that completed them holds bit for
    /// bit.
    pub agreed: Option<(u64, &'a [usize], u64, &'a [f32])>,
    /// Push-sum: the node's weight, its pushes not yet acknowledged (the checker learns each
    /// push's weight from the message; it asks only which are still held, and only when their
    /// number fell without an acknowledgement), and the weight it has minted by renormalising,
    /// over all its lives.
    pub push_sum: Option<(i64, &'a dyn Held, i128)>,
}

/// A push-sum node's pushes not yet acknowledged, by sequence number.
pub trait Held {
    /// How many.
    fn count(&self) -> usize;
    /// Whether push `seq` is one of them.
    fn holds(&self, seq: u64) -> bool;
}

impl<V> Held for std::collections::BTreeMap<u64, V> {
    fn count(&self) -> usize {
        self.len()
    }
    fn holds(&self, seq: u64) -> bool {
        self.contains_key(&seq)
    }
}

/// What the tester needs of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsgAudit {
    /// Nothing.
    Other,
    /// A push-sum push carrying weight `w`.
    Push {
        /// Its sequence number (per sender).
        seq: u64,
        /// Its weight, in fixed point.
        w: i64,
    },
    /// The acknowledgement of push `seq` (sent back to the pusher).
    Ack {
        /// The push's sequence number.
        seq: u64,
    },
}
