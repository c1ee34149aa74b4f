//! Closed-form costs of the all-reduce algorithms (α: latency per message, B: bandwidth, S: bytes,
//! p: members, γ: reduction time per byte), as in Thakur, Rabenseifner and Gropp (2005).

use super::Groups;
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
    /// Extra one-way latency of a message between groups (racks), the hierarchical cost's α_core.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub core_latency: SimDuration,
    /// Bandwidth of a group's uplink, shared by its members' messages to other groups; none: the
    /// uplinks never limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink: Option<Bandwidth>,
}

fn is_zero(d: &SimDuration) -> bool {
    *d == SimDuration::ZERO
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
    /// Hierarchical all-reduce over `groups` (see [`super::hierarchical`]): with `r` groups of
    /// at most `g`, `C` shards and `m = ceil(C / smallest group)` shards a member holds,
    /// `2(g-1)(α + S/(gB)) + 2(r-1)·m·(α + α_core + S/(Cr)·max(1/B, g/U)) + γ·S((g-1)/g + m(r-1)/(Cr))`.
    /// Exact for equal groups on an idle network (then `m = 1` and `C = g`).
    pub fn hierarchical(&self, groups: &Groups, bytes: u64) -> SimDuration {
        let (big, small) = groups.size_range();
        if groups.members() < 2 {
            return SimDuration::ZERO;
        }
        let (g, r, c, s) = (big as f64, groups.count() as f64, groups.shards() as f64, bytes as f64);
        let m = groups.shards().div_ceil(small.max(1)) as f64;
        let alpha = self.latency.as_secs_f64();
        let cross_rate = match self.uplink {
            Some(u) => (1.0 / self.bandwidth.0.max(1) as f64).max(g / u.0.max(1) as f64),
            None => 1.0 / self.bandwidth.0.max(1) as f64,
        };
        let secs = 2.0 * (g - 1.0) * (alpha + self.bytes_time(s / g))
            + 2.0 * (r - 1.0) * m * (alpha + self.core_latency.as_secs_f64() + s / (c * r) * 8.0 * cross_rate)
            + self.gamma_ns_per_byte * 1e-9 * s * ((g - 1.0) / g + m * (r - 1.0) / (c * r));
        SimDuration::from_secs_f64(secs)
    }
    /// Binomial tree reduce + broadcast: 2·ceil(log2 p)·(α + S/B).
    pub fn tree(&self, p: usize, bytes: u64) -> SimDuration {
        let levels = (p.max(1) as f64).log2().ceil();
        SimDuration::from_secs_f64(2.0 * levels * (self.latency.as_secs_f64() + self.bytes_time(bytes as f64)))
    }
}
