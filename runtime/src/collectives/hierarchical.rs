//! Hierarchical (two-level) all-reduce, as NCCL and Horovod run it across racks or hosts.
//!
//! The members fall into groups (one a rack). The vector is cut into `C` shards, `C` the nominal
//! group size. In three phases:
//! 1. **Reduce-scatter inside each group**: a ring over the group's members, on blocks of shards;
//!    afterwards member `i` of a group of `g` holds the group's sum of block `(i+1) mod g`.
//! 2. **All-reduce across groups, one ring per shard**: the owners of shard `c` in every group
//!    run a ring all-reduce of that shard. With equal groups every member owns one shard and the
//!    `C` rings run side by side; a member of a smaller group (after a crash) owns several and
//!    runs their rings one after another.
//! 3. **All-gather inside each group**: the second half of the ring of phase 1.
//!
//! With `r` equal groups of `g` and shards of `S/g` bytes, only phase 2 crosses the core, with
//! `g` messages of `S/(gr)` from each rack at a time:
//! `T = 2(g-1)(α + S/(gB)) + 2(r-1)(α + α_core + S/(gr)·max(1/B, g/U))`
//! ([`super::analytic::CostModel::hierarchical`]). Against a flat ring of `p = gr` members this
//! trades `2(p-1)` crossings of the core for `2(r-1)`.

use super::{chunk, ring, Step};
use std::ops::Range;

/// How the members fall into groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Groups {
    /// Group `j` is members `starts[j]..starts[j + 1]`.
    starts: Vec<usize>,
    /// Shards of the vector: the nominal group size, at least every group's size.
    shards: usize,
}

impl Groups {
    /// Groups of the members whose ranks share `rank / size` (a rack of `size` consecutive ranks);
    /// `ranks` is the membership, ascending.
    pub fn of_ranks(ranks: &[usize], size: usize) -> Self {
        let size = size.max(1);
        let mut starts = vec![0];
        for m in 1..ranks.len() {
            if ranks[m] / size != ranks[m - 1] / size {
                starts.push(m);
            }
        }
        starts.push(ranks.len());
        Groups { starts, shards: size }
    }
    /// Members `0..p` in groups of `size` consecutive members (the last may be smaller).
    pub fn consecutive(p: usize, size: usize) -> Self {
        Self::of_ranks(&(0..p).collect::<Vec<_>>(), size)
    }
    /// Number of groups.
    pub fn count(&self) -> usize {
        self.starts.len() - 1
    }
    /// Members in all.
    pub fn members(&self) -> usize {
        *self.starts.last().expect("starts has a last")
    }
    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards
    }
    /// Size of group `j`.
    pub fn size(&self, j: usize) -> usize {
        self.starts[j + 1] - self.starts[j]
    }
    /// The largest and smallest group sizes.
    pub fn size_range(&self) -> (usize, usize) {
        let sizes = (0..self.count()).map(|j| self.size(j));
        (sizes.clone().max().unwrap_or(0), sizes.min().unwrap_or(0))
    }
    /// Group of member `me`, and `me`'s index in it.
    pub fn locate(&self, me: usize) -> (usize, usize) {
        let j = self.starts.partition_point(|&s| s <= me) - 1;
        (j, me - self.starts[j])
    }
    /// Shards (a range of `0..shards`) that member `i` of a group of `g` holds after phase 1.
    fn owned(&self, g: usize, i: usize) -> Range<usize> {
        chunk(self.shards, g, (i + 1) % g)
    }
    /// The member of group `j` that holds shard `c` after phase 1.
    fn owner(&self, j: usize, c: usize) -> usize {
        let g = self.size(j);
        // The block of chunk(shards, g, ·) that contains c, held by the member before it.
        let block = ((c + 1) * g - 1) / self.shards;
        self.starts[j] + (block + g - 1) % g
    }
    /// Rounds of phase 1 (and of phase 3), the same for every group so that rounds never collide.
    fn inner_rounds(&self) -> usize {
        self.shards - 1
    }
    /// Steps of one shard's ring across the groups.
    fn cross_steps(&self) -> usize {
        ring::steps(self.count())
    }
    /// Rounds in all.
    pub fn rounds(&self) -> usize {
        2 * self.inner_rounds() + self.shards * self.cross_steps()
    }
    /// How many steps member `i` of group `j` (see [`Groups::locate`]) takes.
    pub fn steps(&self, (j, i): (usize, usize)) -> usize {
        let g = self.size(j);
        2 * (g - 1) + self.owned(g, i).len() * self.cross_steps()
    }

    /// Step `k` (of [`Self::steps`]) of member `i` of group `j` (see [`Groups::locate`]) in an
    /// all-reduce of `dim` elements.
    pub fn step(&self, (j, i): (usize, usize), dim: usize, k: usize) -> Option<Step> {
        let g = self.size(j);
        let start = self.starts[j];
        let block = |b: usize| {
            let shards = chunk(self.shards, g, b);
            (shards.start * dim / self.shards)..(shards.end * dim / self.shards)
        };
        let inner = g - 1;
        let cross = self.owned(g, i).len() * self.cross_steps();
        let local = |mut s: Step, round: usize| {
            s.round = round as u32;
            s.send = s.send.map(|(to, r)| (start + to, r));
            s.recv = s.recv.map(|(from, r, op)| (start + from, r, op));
            s
        };
        if k < inner {
            Some(local(ring::step_over(g, i, k, block), k))
        } else if k < inner + cross {
            let q = k - inner;
            let c = self.owned(g, i).start + q / self.cross_steps();
            let s = q % self.cross_steps();
            let shard = chunk(dim, self.shards, c);
            let r = self.count();
            let sub = |x: usize| {
                let part = chunk(shard.len(), r, x);
                (shard.start + part.start)..(shard.start + part.end)
            };
            let mut step = ring::step_over(r, j, s, sub);
            step.round = (self.inner_rounds() + c * self.cross_steps() + s) as u32;
            step.send = step.send.map(|(to, range)| (self.owner(to, c), range));
            step.recv = step.recv.map(|(from, range, op)| (self.owner(from, c), range, op));
            Some(step)
        } else if k < 2 * inner + cross {
            let s = k - inner - cross;
            let round = self.inner_rounds() + self.shards * self.cross_steps() + s;
            Some(local(ring::step_over(g, i, inner + s, block), round))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_of_a_shard_is_the_member_whose_block_holds_it() {
        for shards in 1..=12 {
            for g in 1..=shards {
                let groups = Groups::consecutive(g, shards);
                assert_eq!(groups.count(), 1);
                for c in 0..shards {
                    let brute = (0..g).find(|&i| groups.owned(g, i).contains(&c)).expect("someone holds it");
                    assert_eq!(groups.owner(0, c), brute, "shards={shards} g={g} c={c}");
                }
            }
        }
    }

    #[test]
    fn groups_follow_racks_of_ranks() {
        let g = Groups::of_ranks(&[0, 1, 2, 5, 6, 7, 8, 12], 4);
        assert_eq!(g.starts, vec![0, 3, 6, 7, 8]);
        assert_eq!(g.size_range(), (3, 1));
        assert_eq!(g.locate(4), (1, 1));
        let g = Groups::consecutive(10, 4);
        assert_eq!(g.starts, vec![0, 4, 8, 10]);
    }
}
