//! The algorithms, one a file. Each has a serde configuration with documented defaults, a
//! message type and one or more roles implementing [`crate::protocol::Protocol`].

pub mod async_ps;
pub mod easgd;
pub mod gossip;
pub mod push_sum;
pub mod service;
pub mod sync;

/// Every algorithm's default failure-detection timeout, seconds (`algorithm.timeout_s`).
pub const DEFAULT_TIMEOUT_S: f64 = 5.0;
