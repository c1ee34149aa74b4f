//! A radix heap of `(time, seq, slot, hint)` entries for the event queue: a min-queue for keys that
//! never go below the last popped one, as simulated time never goes backwards.
//!
//! Bucket 0 holds the entries at the last popped time, in `seq` order; bucket `b > 0` those whose
//! time first differs from it at bit `b - 1`. A pop from an empty bucket 0 finds the smallest time
//! in the first non-empty bucket, makes it the new base and spreads that bucket over the lower
//! ones; each entry moves at most 64 times and usually once or twice, so a pop costs O(1)
//! amortized where a binary heap pays O(log n) comparisons. Pops come out in exactly
//! `(time, seq)` order, as from a binary heap.

use std::collections::VecDeque;

/// An entry: time (ns), sequence number, slab slot, and a hint that plays no part in the order
/// (the event queue keeps the node an event concerns there, for prefetching; it fills what would
/// be the entry's padding, so an entry is 24 bytes either way).
pub type Entry = (u64, u64, u32, u32);

const _: () = assert!(std::mem::size_of::<Entry>() == 24, "the hint rides in the padding");

/// The heap.
pub struct RadixHeap {
    /// Every entry's time is at least this: the time of the entries in `now`.
    base: u64,
    /// Entries at time `base`, ascending `seq`.
    now: VecDeque<Entry>,
    /// Bucket `b`: entries whose time first differs from `base` at bit `b`.
    buckets: Vec<Vec<Entry>>,
    /// Bit `b` set: bucket `b` is not empty.
    full: u64,
    len: usize,
    /// The smallest entry, where it is (bucket and index), once looked for while `now` is empty.
    min: Option<(usize, usize, Entry)>,
}

impl Default for RadixHeap {
    fn default() -> Self {
        Self::new()
    }
}

impl RadixHeap {
    /// An empty heap at time 0.
    pub fn new() -> Self {
        RadixHeap { base: 0, now: VecDeque::new(), buckets: vec![Vec::new(); 64], full: 0, len: 0, min: None }
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn place(&mut self, e: Entry) {
        if e.0 == self.base {
            self.now.push_back(e);
        } else {
            let b = 63 - (e.0 ^ self.base).leading_zeros() as usize;
            self.buckets[b].push(e);
            self.full |= 1 << b;
        }
    }
    /// Adds an entry. An entry before the base (possible only after a pop of an entry later than
    /// any the caller will add, which the event queue does not do) re-buckets everything.
    pub fn push(&mut self, e: Entry) {
        if self.len == 0 {
            self.base = e.0;
        } else if e.0 < self.base {
            self.rebase(e.0);
        }
        if let Some((_, _, m)) = self.min {
            if e.0 != self.base && (e.0, e.1) < (m.0, m.1) {
                self.min = None;
            }
        }
        debug_assert!(e.0 != self.base || self.now.back().is_none_or(|b| b.1 < e.1), "seq grows");
        self.place(e);
        self.len += 1;
    }
    fn rebase(&mut self, to: u64) {
        let mut all: Vec<Entry> = self.now.drain(..).collect();
        for b in &mut self.buckets {
            all.append(b);
        }
        self.full = 0;
        self.base = to;
        self.min = None;
        for e in all {
            self.place(e);
        }
    }
    /// The lowest non-empty bucket's smallest entry (with `now` empty).
    fn bucket_min(&mut self) -> Option<(usize, usize, Entry)> {
        if self.min.is_none() && self.full != 0 {
            let b = self.full.trailing_zeros() as usize;
            let (i, &e) = self.buckets[b].iter().enumerate().min_by_key(|(_, e)| (e.0, e.1)).expect("non-empty");
            self.min = Some((b, i, e));
        }
        self.min
    }
    /// The smallest entry, without moving the base.
    pub fn peek(&mut self) -> Option<Entry> {
        match self.now.front() {
            Some(&e) => Some(e),
            None => self.bucket_min().map(|m| m.2),
        }
    }
    /// Removes the entry [`RadixHeap::peek`] returned, without moving the base.
    pub fn remove_peeked(&mut self) {
        if self.now.pop_front().is_none() {
            let (b, i, _) = self.bucket_min().expect("peeked");
            self.buckets[b].swap_remove(i);
            if self.buckets[b].is_empty() {
                self.full &= !(1 << b);
            }
        }
        self.min = None;
        self.len -= 1;
    }
    /// Removes and returns the smallest entry if its time is at most `limit`, making its time
    /// the base.
    pub fn pop_at_most(&mut self, limit: u64) -> Option<Entry> {
        if self.now.is_empty() {
            let (b, _, m) = self.bucket_min()?;
            if m.0 > limit {
                return None;
            }
            let spread = std::mem::take(&mut self.buckets[b]);
            self.full &= !(1 << b);
            self.base = m.0;
            for &e in &spread {
                self.place(e);
            }
            // Keep the bucket's allocation for later.
            if self.buckets[b].is_empty() {
                let mut spread = spread;
                spread.clear();
                self.buckets[b] = spread;
            }
            if self.now.len() > 1 {
                self.now.make_contiguous().sort_unstable_by_key(|e| e.1);
            }
        } else if self.now.front().is_some_and(|e| e.0 > limit) {
            return None;
        }
        self.min = None;
        let e = self.now.pop_front()?;
        self.len -= 1;
        Some(e)
    }
    /// Removes and returns the smallest entry, making its time the base.
    pub fn pop(&mut self) -> Option<Entry> {
        self.pop_at_most(u64::MAX)
    }
    /// Keeps only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&Entry) -> bool) {
        self.now.retain(&mut keep);
        self.full = 0;
        for (b, v) in self.buckets.iter_mut().enumerate() {
            v.retain(&mut keep);
            if !v.is_empty() {
                self.full |= 1 << b;
            }
        }
        self.len = self.now.len() + self.buckets.iter().map(Vec::len).sum::<usize>();
        self.min = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Pops, peeks, removals of peeked entries and pushes at or after the last pop, checked
    /// against a sorted reference.
    #[test]
    fn pops_exactly_as_a_sorted_list_would() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut h = RadixHeap::new();
        let mut reference: Vec<Entry> = Vec::new();
        let (mut now, mut seq) = (0u64, 0u64);
        for _ in 0..200_000 {
            match rng.random_range(0..11) {
                0..=4 => {
                    let spread = [0, 1, 10, 1000, 1 << 40][rng.random_range(0..5)];
                    // Now and then an entry before the last pop (a caller that popped past it).
                    let at =
                        if rng.random_range(0..50) == 0 { now.saturating_sub(rng.random_range(0..100)) } else { now };
                    let e = (at + rng.random_range(0..=spread), seq, seq as u32, rng.random());
                    seq += 1;
                    h.push(e);
                    reference.push(e);
                }
                5..=7 => {
                    reference.sort_by_key(|e| std::cmp::Reverse((e.0, e.1)));
                    let want = reference.pop();
                    assert_eq!(h.pop(), want);
                    if let Some(e) = want {
                        now = e.0;
                    }
                }
                8 => {
                    reference.sort_by_key(|e| std::cmp::Reverse((e.0, e.1)));
                    assert_eq!(h.peek(), reference.last().copied());
                }
                9 => {
                    reference.sort_by_key(|e| std::cmp::Reverse((e.0, e.1)));
                    let limit = now + rng.random_range(0..2000);
                    let want = reference.last().copied().filter(|e| e.0 <= limit);
                    assert_eq!(h.pop_at_most(limit), want);
                    if let Some(e) = want {
                        reference.pop();
                        now = e.0;
                    }
                }
                _ => {
                    reference.sort_by_key(|e| std::cmp::Reverse((e.0, e.1)));
                    if h.peek().is_some() {
                        h.remove_peeked();
                        reference.pop();
                    }
                }
            }
            assert_eq!(h.len(), reference.len());
        }
    }
}
