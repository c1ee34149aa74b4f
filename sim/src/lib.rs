//! `dsgd-sim`: a deterministic discrete-event engine for simulating a training cluster.
//!
//! Virtual time is integer nanoseconds ([`SimTime`], [`SimDuration`]); events are ordered by
//! `(time, sequence number)` ([`queue`], over the radix heap of [`radix`]); every random number comes from a named ChaCha stream of
//! one root seed ([`Streams`]); the network ([`net`]) models NICs as FIFO links with cut-through
//! transfers, on a flat switch or racks with an oversubscribed core; [`compute`] draws step times
//! with jitter and stragglers; [`faults`] describes crashes, restarts, degraded NICs, partitions and
//! message loss; every processed event feeds a 64-bit [`Digest`], and a [`Trace`] can be exported
//! for Perfetto. [`spec`] is the engine's configuration as a user writes it (units, defaults,
//! validation with relative paths). The engine knows nothing about SGD: [`Sim`] is driven by a caller that owns the
//! nodes' behaviour.

pub mod backlog;
pub mod chrome;
pub mod compute;
pub mod digest;
pub mod engine;
pub mod error;
pub mod faults;
pub mod net;
pub mod prefetch;
pub mod queue;
pub mod radix;
pub mod rng;
pub mod spec;
pub mod time;
pub mod trace;

pub use backlog::{Backlog, SenderBacklog};
pub use compute::{ComputeConfig, Jitter, Slowdown};
pub use digest::Digest;
pub use engine::{JobId, Occurrence, Sim, SimConfig, SimStats, TimerId};
pub use error::{Result, SimError, STALL_EVENTS};
pub use faults::{Fault, FaultConfig, RandomFailures};
pub use net::{NetMode, NetworkConfig, NicOverride, TokenBucket, Topology, Transport};
pub use rng::{StreamRng, Streams};
pub use time::{Bandwidth, SimDuration, SimTime};
pub use trace::{EventKind, Trace, TraceRecord};
