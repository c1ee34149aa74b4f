//! Closed-form costs of the all-reduce algorithms (α: latency per message, B: bandwidth, S: bytes,
//! p: members, γ: reduction time per byte), as in Thakur, Rabenseifner and Gropp (2005).

use dsgd_sim::{Bandwidth, SimDuration};
use serde::{Deserialize, Serialize};

/// The network figures the analytic mode charges with.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    /// One-way latency per message.
    pub latency: SimDuration,
    /// Link bandwidth.
    pub bandwidth: Bandwidth,
    /// Reduction time per byte, in nanoseconds (0 by default).
    #[serde(default)]
    pub gamma_ns_per_byte: f64,
}

impl CostModel {
    fn bytes_time(&self, bytes: f64) -> f64 {
        bytes * 8.0 / self.bandwidth.0.max(1) as f64
    }
    /// Ring: 2(p-1)·α + 2·S·(p-1)/(p·B) + γ·S·(p-1)/p.
    pub fn ring(&self, p: usize, bytes: u64) -> SimDuration {
        if p < 2 {
            return SimDuration::ZERO;
        }
        let (pf, s) = (p as f64, bytes as f64);
        let secs = 2.0 * (pf - 1.0) * self.latency.as_secs_f64()
            + 2.0 * self.bytes_time(s * (pf - 1.0) / pf)
            + self.gamma_ns_per_byte * 1e-9 * s * (pf - 1.0) / pf;
        SimDuration::from_secs_f64(secs)
    }
    /// Recursive halving-doubling for a power of two p: 2·log2(p)·α + 2·S·(p-1)/(p·B) + γ·S·(p-1)/p.
    pub fn halving_doubling(&self, p: usize, bytes: u64) -> SimDuration {
        if p < 2 {
            return SimDuration::ZERO;
        }
        let (pf, s) = (p as f64, bytes as f64);
        let secs = 2.0 * pf.log2() * self.latency.as_secs_f64()
            + 2.0 * self.bytes_time(s * (pf - 1.0) / pf)
            + self.gamma_ns_per_byte * 1e-9 * s * (pf - 1.0) / pf;
        SimDuration::from_secs_f64(secs)
    }
    /// Binomial tree reduce + broadcast: 2·ceil(log2 p)·(α + S/B).
    pub fn tree(&self, p: usize, bytes: u64) -> SimDuration {
        let levels = (p.max(1) as f64).log2().ceil();
        SimDuration::from_secs_f64(2.0 * levels * (self.latency.as_secs_f64() + self.bytes_time(bytes as f64)))
    }
}
