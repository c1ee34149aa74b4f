//! The run digest: one 64-bit number that changes if anything about a run changes.
//!
//! Every processed event is folded in as `(time, kind, node, peer, bytes)`; callers (the training
//! runtime) fold in their own numbers too (losses, final parameters), so that a replay checks the
//! arithmetic and not only the order of events. The hash is SplitMix64 chaining, fixed and
//! platform-independent (it sees integers only, never pointers or hash-map order).

use crate::rng::splitmix64;

/// A running, order-sensitive 64-bit digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Digest(u64);

impl Default for Digest {
    fn default() -> Self {
        Digest::new()
    }
}

impl Digest {
    /// The digest of nothing.
    pub const fn new() -> Self {
        Digest(0x6473_6764_2d73_696d) // "dsgd-sim"
    }
    /// Folds in one integer.
    #[inline]
    pub fn absorb(&mut self, x: u64) {
        self.0 = splitmix64(self.0 ^ x);
    }
    /// Folds in one event record.
    #[inline]
    pub fn absorb_event(&mut self, time: u64, kind: u8, node: u32, peer: u32, bytes: u64) {
        self.absorb(time);
        self.absorb(((kind as u64) << 56) ^ ((node as u64) << 28) ^ peer as u64);
        self.absorb(bytes);
    }
    /// Folds in the exact bits of a float.
    pub fn absorb_f64(&mut self, x: f64) {
        self.absorb(x.to_bits());
    }
    /// Folds in the exact bits of every element of a slice, and its length.
    pub fn absorb_f32s(&mut self, xs: &[f32]) {
        self.absorb(xs.len() as u64);
        for pair in xs.chunks(2) {
            let lo = pair[0].to_bits() as u64;
            let hi = pair.get(1).map_or(0, |x| x.to_bits() as u64);
            self.absorb(lo | hi << 32);
        }
    }
    /// The current value.
    pub fn value(&self) -> u64 {
        self.0
    }
    /// The current value as 16 hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_content_matter() {
        let mut a = Digest::new();
        a.absorb_event(1, 1, 0, 1, 100);
        a.absorb_event(2, 1, 1, 0, 100);
        let mut b = Digest::new();
        b.absorb_event(2, 1, 1, 0, 100);
        b.absorb_event(1, 1, 0, 1, 100);
        assert_ne!(a, b);
        let mut c = Digest::new();
        c.absorb_f32s(&[1.0, 2.0]);
        let mut d = Digest::new();
        d.absorb_f32s(&[1.0, 2.000_000_2]);
        assert_ne!(c, d);
        assert_eq!(Digest::new().hex().len(), 16);
    }
}
