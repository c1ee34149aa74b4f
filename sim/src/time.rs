//! Virtual time: integer nanoseconds, and the one rounding rule that turns real quantities into it.
//!
//! Everything on the simulated path is an integer number of nanoseconds. Real quantities (seconds as
//! `f64`, bytes at a bandwidth) are converted at the edges with **one rule: round to the nearest
//! nanosecond, halves rounded up**. Byte transfers are computed in exact integer arithmetic
//! (`u128`), so `transfer_time` never depends on floating-point rounding.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A point in virtual time, in nanoseconds since the start of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SimTime(pub u64);

/// A span of virtual time, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SimDuration(pub u64);

/// Rounds a non-negative real number of nanoseconds to the nearest integer, halves up.
/// Negative or NaN values become 0 and values beyond `u64::MAX` saturate; callers validate inputs.
fn round_nanos(ns: f64) -> u64 {
    if ns.is_nan() || ns <= 0.0 {
        0
    } else {
        (ns + 0.5).floor().min(u64::MAX as f64) as u64
    }
}

impl SimTime {
    /// The start of every run.
    pub const ZERO: SimTime = SimTime(0);
    /// The largest representable time (used as "never").
    pub const MAX: SimTime = SimTime(u64::MAX);

    /// Time from seconds, rounded to the nearest nanosecond.
    pub fn from_secs_f64(s: f64) -> Self {
        SimTime(round_nanos(s * NANOS_PER_SEC as f64))
    }
    /// This time in seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_SEC as f64
    }
    /// Nanoseconds since the start.
    pub fn as_nanos(self) -> u64 {
        self.0
    }
    /// The span from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    /// No time at all.
    pub const ZERO: SimDuration = SimDuration(0);

    /// A duration from whole nanoseconds.
    pub const fn from_nanos(ns: u64) -> Self {
        SimDuration(ns)
    }
    /// A duration from whole microseconds.
    pub const fn from_micros(us: u64) -> Self {
        SimDuration(us * 1_000)
    }
    /// A duration from whole milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        SimDuration(ms * 1_000_000)
    }
    /// A duration from seconds, rounded to the nearest nanosecond.
    pub fn from_secs_f64(s: f64) -> Self {
        SimDuration(round_nanos(s * NANOS_PER_SEC as f64))
    }
    /// This duration in seconds.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / NANOS_PER_SEC as f64
    }
    /// Whole nanoseconds.
    pub fn as_nanos(self) -> u64 {
        self.0
    }
    /// This duration scaled by a real factor, rounded to the nearest nanosecond.
    pub fn mul_f64(self, factor: f64) -> Self {
        SimDuration(round_nanos(self.0 as f64 * factor))
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, d: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(d.0))
    }
}
impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, d: SimDuration) {
        self.0 = self.0.saturating_add(d.0);
    }
}
impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, d: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(d.0))
    }
}
impl Sub for SimTime {
    type Output = SimDuration;
    /// The span between two times; panics in debug builds if `rhs` is later (an internal bug).
    fn sub(self, rhs: SimTime) -> SimDuration {
        debug_assert!(self >= rhs, "time went backwards: {self} - {rhs}");
        SimDuration(self.0.saturating_sub(rhs.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}
impl fmt::Display for SimDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.9}s", self.as_secs_f64())
    }
}

/// A link bandwidth in bits per second (an integer, so transfer times are exact).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bandwidth(pub u64);

impl Bandwidth {
    /// Bandwidth from gigabits per second (10^9 bits/s), rounded to the nearest bit per second.
    pub fn from_gbps(gbps: f64) -> Self {
        Bandwidth(round_nanos(gbps * 1e9))
    }
    /// Bandwidth in gigabits per second.
    pub fn as_gbps(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// Bandwidth in bytes per second.
    pub fn bytes_per_sec(self) -> f64 {
        self.0 as f64 / 8.0
    }
    /// This bandwidth scaled by a factor (for degraded links), at least 1 bit/s.
    pub fn scaled(self, factor: f64) -> Self {
        Bandwidth(round_nanos(self.0 as f64 * factor).max(1))
    }
    /// Time to push `bytes` through a link of this bandwidth: `bytes·8/bps` seconds, rounded to the
    /// nearest nanosecond (halves up), computed exactly in integers. A zero bandwidth is treated as
    /// 1 bit/s; configurations reject it before it gets here.
    pub fn transfer_time(self, bytes: u64) -> SimDuration {
        // The same integers in 64 bits where they fit (below 1 GiB and 10^17 bit/s), as a 128-bit
        // division costs several times more.
        if bytes < 1 << 30 && self.0 < 100_000_000_000_000_000 {
            let bps = self.0.max(1);
            let num = bytes * 8 * NANOS_PER_SEC;
            return SimDuration((2 * num + bps) / (2 * bps));
        }
        let bps = self.0.max(1) as u128;
        let num = bytes as u128 * 8 * NANOS_PER_SEC as u128;
        let ns = (2 * num + bps) / (2 * bps);
        SimDuration(ns.min(u64::MAX as u128) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_to_nearest_nanosecond() {
        assert_eq!(SimDuration::from_secs_f64(1e-3).as_nanos(), 1_000_000);
        assert_eq!(SimDuration::from_secs_f64(1.4e-9).as_nanos(), 1);
        assert_eq!(SimDuration::from_secs_f64(1.5e-9).as_nanos(), 2);
        assert_eq!(SimDuration::from_secs_f64(-3.0).as_nanos(), 0);
        assert_eq!(SimTime::from_secs_f64(2.5).as_nanos(), 2_500_000_000);
    }

    #[test]
    fn the_64_bit_transfer_time_is_the_128_bit_one() {
        let exact = |bps: u64, bytes: u64| {
            let (bps, num) = (bps.max(1) as u128, bytes as u128 * 8 * NANOS_PER_SEC as u128);
            ((2 * num + bps) / (2 * bps)) as u64
        };
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..100_000 {
            x = crate::rng::splitmix64(x);
            let bytes = x % (1 << 31);
            let bps = crate::rng::splitmix64(x) % 200_000_000_000_000_000;
            assert_eq!(Bandwidth(bps).transfer_time(bytes).as_nanos(), exact(bps, bytes), "{bytes} B at {bps} bit/s");
        }
        for (bps, bytes) in [(1, (1 << 30) - 1), (99_999_999_999_999_999, (1 << 30) - 1), (u64::MAX, 1 << 30)] {
            assert_eq!(Bandwidth(bps).transfer_time(bytes).as_nanos(), exact(bps, bytes));
        }
    }

    #[test]
    fn transfer_time_is_exact_and_rounds_halves_up() {
        // 1 MB at 10 Gb/s = 8e6 bits / 1e10 = 0.8 ms.
        assert_eq!(Bandwidth::from_gbps(10.0).transfer_time(1_000_000).as_nanos(), 800_000);
        // 1 byte at 16 bit/s = 0.5 s exactly.
        assert_eq!(Bandwidth(16).transfer_time(1).as_nanos(), 500_000_000);
        // 1 byte at 3 Gb/s = 2.666.. ns -> 3 ns; 3 bytes at 16 Gb/s = 1.5 ns -> 2 ns.
        assert_eq!(Bandwidth::from_gbps(3.0).transfer_time(1).as_nanos(), 3);
        assert_eq!(Bandwidth::from_gbps(16.0).transfer_time(3).as_nanos(), 2);
        // 46.8 MB (ResNet-18) over 10 GbE.
        assert_eq!(Bandwidth::from_gbps(10.0).transfer_time(46_758_048).as_nanos(), 37_406_438);
    }

    #[test]
    fn time_arithmetic_saturates_instead_of_wrapping() {
        assert_eq!(SimTime::MAX + SimDuration(5), SimTime::MAX);
        assert_eq!(SimTime(5).saturating_since(SimTime(9)), SimDuration::ZERO);
        assert_eq!(SimTime(9) - SimTime(5), SimDuration(4));
    }
}
