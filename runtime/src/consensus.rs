//! The consensus model: what a run's evaluations score, shared by both executors.
//!
//! Each rank shows a [`View`] of its model (nothing while it is down). The consensus model is:
//! - **parameter server** (`async_ps`): the shards' slices put together. It exists only while
//!   *every* parameter is held by a live shard: with a shard down, its slice is unknown (not
//!   zero), so there is no model;
//! - **EASGD**: the centre variable; while the centre is down, the mean of the live workers'
//!   replicas (each is a full model that a user could deploy); with the centre and every worker
//!   down, no model;
//! - **synchronous SGD and gossip**: the mean of the live replicas (push-sum replicas divided by
//!   their weights); with every replica down or still waiting for its state, no model.
//!
//! An evaluation without a model records no loss and no accuracy and never meets a target; the
//! digest absorbs [`NO_MODEL`] in place of the loss.

use crate::protocol::View;
use dsgd_models::par::by_item;
use dsgd_models::{Evaluation, Workload};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// What the digest absorbs in place of a loss when there was no model to score.
pub const NO_MODEL: u64 = u64::MAX;

/// The consensus of the ranks' views at one instant.
#[derive(Clone, Debug)]
pub struct Consensus<'a> {
    /// The consensus parameters, or `None` when no model exists (see the module comment).
    pub model: Option<Vec<f32>>,
    /// Mean squared distance of the live replicas from their mean (0 without replicas).
    pub distance: f64,
    /// Each rank's replica (`params / weight`), `None` for ranks without one: the view's own
    /// parameters where the weight is one (nothing is copied), a vector of its own otherwise.
    pub replicas: Vec<Option<Cow<'a, [f32]>>>,
}

impl Consensus<'_> {
    /// Scores the model on `workload`: `None` when there is no model.
    pub fn evaluate(&self, workload: &dyn Workload) -> Option<Evaluation> {
        self.evaluate_on(workload, 1)
    }
    /// [`Consensus::evaluate`] on up to `threads` threads (the same bits).
    pub fn evaluate_on(&self, workload: &dyn Workload, threads: usize) -> Option<Evaluation> {
        self.model.as_ref().map(|m| workload.evaluate_on(m, threads))
    }
}

/// The consensus model of the ranks' `views` (one per rank, [`View::Nothing`] for a rank that
/// is down) for a model of `dim` parameters (0 for timing-only workloads).
pub fn consensus_of<'a>(views: impl Iterator<Item = View<'a>>, dim: usize) -> Consensus<'a> {
    consensus_on(views, dim, 1)
}

/// Elements (replicas × parameters) from which [`consensus_on`] spreads its work over threads:
/// below it a thread costs more than it saves.
const PARALLEL_ELEMENTS: usize = 1 << 20;

/// [`consensus_of`] on up to `threads` threads: the replicas' copies and distances are spread
/// by replica, the mean by element, every sum in the same order as on one thread, so the bits do
/// not depend on `threads`. (At 100 replicas of 100,000 parameters, evaluated every simulated
/// second, this is a fifth of a push-sum run's work on the simulator's thread.)
pub fn consensus_on<'a>(views: impl Iterator<Item = View<'a>>, dim: usize, threads: usize) -> Consensus<'a> {
    let mut server = vec![0f32; dim];
    let mut covered = 0usize;
    let mut has_server = false;
    let mut shown: Vec<Option<(Cow<'a, [f32]>, f64)>> = Vec::new();
    for view in views {
        let mut replica = None;
        match view {
            View::Shard { offset, params } => {
                has_server = true;
                if let Some(slot) = server.get_mut(offset..offset + params.len()) {
                    slot.copy_from_slice(params);
                    covered += params.len();
                }
            }
            View::Replica { params, weight } if params.len() == dim && weight > 0.0 => replica = Some((params, weight)),
            _ => {}
        }
        shown.push(replica);
    }
    let threads = if shown.len() * dim >= PARALLEL_ELEMENTS { threads.max(1) } else { 1 };
    // A weight of one divides nothing out: the view's values are the replica (the same bits as
    // `x / 1` for every value arithmetic makes, without a division or a copy).
    let replicas: Vec<Option<Cow<'a, [f32]>>> = by_item(shown, threads, |r| {
        r.map(|(params, weight)| {
            if weight == 1.0 {
                params
            } else {
                Cow::Owned(params.iter().map(|&x| (x as f64 / weight) as f32).collect())
            }
        })
    });
    let live: Vec<&[f32]> = replicas.iter().flatten().map(|r| &**r).collect();
    // Replicas with the same bits (synchronous SGD's, every replica at the start): the mean is
    // any one of them and each is as far from it as the first, so one is read instead of all.
    let identical =
        live.len() < EXACT_COPIES && live.split_first().is_some_and(|(f, rest)| rest.iter().all(|r| same_bits(f, r)));
    let mean: Option<Vec<f64>> = match live.first() {
        None => None,
        Some(first) if identical => Some(first.iter().map(|&x| mean_of_copies(x)).collect()),
        Some(_) => Some(mean_of(&live, dim, threads)),
    };
    let distance = mean.as_ref().map_or(0.0, |mean| {
        let each: Vec<f64> = if identical {
            vec![squared_distances(&live[..1], mean)[0]; live.len()]
        } else {
            let groups: Vec<&[&[f32]]> = live.chunks(DISTANCES_AT_ONCE).collect();
            by_item(groups, threads, |g| squared_distances(g, mean)).into_iter().flatten().collect()
        };
        each.into_iter().sum::<f64>() / live.len() as f64
    });
    let model = if has_server {
        (covered == dim).then_some(server)
    } else {
        mean.map(|m| m.iter().map(|&x| x as f32).collect())
    };
    Consensus { model, distance, replicas }
}

/// Replicas below which the mean of identical replicas is exactly each one: `k · x` is exact
/// in f64 for an f32 `x` while `k < 2^29`, so the sum of `n` copies is `n · x` and its mean `x`.
const EXACT_COPIES: usize = 1 << 29;

/// Whether two replicas have the same bits (the same slice, or equal element by element).
fn same_bits(a: &[f32], b: &[f32]) -> bool {
    std::ptr::eq(a, b) || (a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()))
}

/// The mean of copies of `x` as [`mean_of`] computes it (fewer than [`EXACT_COPIES`]): the
/// first addition to the sum's neutral element decides a zero's sign; every later sum is exact,
/// and the division gives `x` back.
fn mean_of_copies(x: f32) -> f64 {
    let neutral: f64 = std::iter::empty::<f64>().sum();
    neutral + x as f64
}

/// For each replica, the first replica with the same bits (itself when none before it has
/// them; `None` for a rank without one). Identical replicas — every replica at the start, all of
/// synchronous SGD's — are then evaluated once: an evaluation is a pure function of the bits.
pub fn first_equal<R: std::ops::Deref<Target = [f32]>>(replicas: &[Option<R>]) -> Vec<Option<usize>> {
    // Candidates are found by a key of the length and every 97th element's bits (cheap next
    // to an evaluation), then compared in full.
    let key = |v: &[f32]| -> (usize, Vec<u32>) { (v.len(), v.iter().step_by(97).map(|x| x.to_bits()).collect()) };
    let mut seen: BTreeMap<(usize, Vec<u32>), Vec<usize>> = BTreeMap::new();
    let mut out = Vec::with_capacity(replicas.len());
    for (i, r) in replicas.iter().enumerate() {
        out.push(r.as_deref().map(|v| {
            let bucket = seen.entry(key(v)).or_default();
            match bucket.iter().find(|&&j| replicas[j].as_deref().is_some_and(|u| same_bits(u, v))) {
                Some(&j) => j,
                None => {
                    bucket.push(i);
                    i
                }
            }
        }));
    }
    out
}

/// Each replica's loss, evaluating each distinct replica once ([`first_equal`]) with `losses`
/// (which may spread its list over threads): the same values as evaluating every one.
pub fn replica_losses<R: std::ops::Deref<Target = [f32]>>(
    replicas: &[Option<R>],
    losses: impl FnOnce(&[&[f32]]) -> Vec<f64>,
) -> Vec<Option<f64>> {
    let first = first_equal(replicas);
    let distinct: Vec<usize> = first.iter().enumerate().filter(|&(i, f)| *f == Some(i)).map(|(i, _)| i).collect();
    let params: Vec<&[f32]> = distinct.iter().map(|&i| replicas[i].as_deref().expect("a replica")).collect();
    let values = losses(&params);
    let at: BTreeMap<usize, f64> = distinct.into_iter().zip(values).collect();
    first.iter().map(|f| f.map(|j| at[&j])).collect()
}

/// Replicas whose squared distances from the mean are summed side by side in one pass.
const DISTANCES_AT_ONCE: usize = 4;

/// Each replica's squared distance from `mean`, each summed element after element as
/// `Iterator::sum` does (the same bits); four replicas are summed side by side, so that the four
/// sums' additions overlap where one sum's must wait for each other (and the mean is read once
/// for the four).
fn squared_distances(group: &[&[f32]], mean: &[f64]) -> Vec<f64> {
    let one = |v: &[f32]| v.iter().zip(mean).map(|(&x, m)| (x as f64 - m).powi(2)).sum::<f64>();
    match group {
        [a, b, c, d] if [a, b, c, d].iter().all(|v| v.len() == mean.len()) => {
            let neutral: f64 = std::iter::empty::<f64>().sum();
            let mut s = [neutral; 4];
            for ((((&m, &a), &b), &c), &d) in mean.iter().zip(a.iter()).zip(b.iter()).zip(c.iter()).zip(d.iter()) {
                s[0] += (a as f64 - m).powi(2);
                s[1] += (b as f64 - m).powi(2);
                s[2] += (c as f64 - m).powi(2);
                s[3] += (d as f64 - m).powi(2);
            }
            s.to_vec()
        }
        _ => group.iter().map(|v| one(v)).collect(),
    }
}

/// Elements of the mean summed at a time over every replica (a block of the sums stays in the
/// first-level cache while the replicas are added to it).
const MEAN_BLOCK: usize = 1024;

/// The element-wise mean of `live` (non-empty, each of `dim`), each element summed over the
/// replicas in order in f64: the bits of `live.iter().map(|v| v[i] as f64).sum::<f64>() / n`,
/// computed a block of elements at a time, replica after replica, so that each replica is read
/// once in order instead of every replica being read an element at a time.
/// Elements are independent, so the vector is cut into `threads` parts summed side by side.
fn mean_of(live: &[&[f32]], dim: usize, threads: usize) -> Vec<f64> {
    // `Sum for f64` folds from its own neutral element (-0.0 on recent toolchains): start there.
    let neutral: f64 = std::iter::empty::<f64>().sum();
    let mut acc = vec![neutral; dim];
    // Each element's sum adds the replicas in their order, as one pass per replica would.
    let part = |from: usize, acc: &mut [f64]| {
        for (k, block) in acc.chunks_mut(MEAN_BLOCK).enumerate() {
            let (at, len) = (from + k * MEAN_BLOCK, block.len());
            for v in live {
                block.iter_mut().zip(&v[at..at + len]).for_each(|(a, &x)| *a += x as f64);
            }
        }
    };
    if threads < 2 || dim < 2 {
        part(0, &mut acc);
    } else {
        let per = dim.div_ceil(threads);
        std::thread::scope(|s| {
            let mut chunks = acc.chunks_mut(per).enumerate();
            let mine = chunks.next();
            for (k, chunk) in chunks {
                s.spawn(move || part(k * per, chunk));
            }
            if let Some((_, chunk)) = mine {
                part(0, chunk);
            }
        });
    }
    let n = live.len() as f64;
    acc.iter_mut().for_each(|a| *a /= n);
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(p: &[f32]) -> View<'_> {
        View::Replica { params: p.into(), weight: 1.0 }
    }

    #[test]
    fn identical_replicas_are_evaluated_once_with_the_same_losses() {
        // Equal bits share an evaluation; -0 and +0, or a difference past the sampled elements,
        // do not.
        let base: Vec<f32> = (0..500).map(|i| i as f32 * 0.25).collect();
        let mut late = base.clone();
        late[401] += 1.0; // not a sampled element (every 97th)
        let mut signed = base.clone();
        signed[0] = -0.0;
        let replicas = vec![Some(base.clone()), None, Some(late.clone()), Some(base.clone()), Some(signed), Some(late)];
        assert_eq!(first_equal(&replicas), [Some(0), None, Some(2), Some(0), Some(4), Some(2)]);
        let mut calls = 0;
        let loss = |p: &[f32]| p.iter().map(|&x| f64::from(x) * 1e-3).sum::<f64>() + f64::from(p[0].to_bits() >> 31);
        let got = replica_losses(&replicas, |ps| {
            calls += ps.len();
            ps.iter().map(|p| loss(p)).collect()
        });
        let each: Vec<Option<f64>> = replicas.iter().map(|r| r.as_deref().map(loss)).collect();
        assert_eq!(got, each);
        assert_eq!(calls, 3, "three distinct replicas");
    }

    #[test]
    fn the_mean_of_live_replicas() {
        let (a, b) = ([1.0f32, 2.0], [3.0f32, 6.0]);
        let c = consensus_of([replica(&a), View::Nothing, replica(&b)].into_iter(), 2);
        assert_eq!(c.model, Some(vec![2.0, 4.0]));
        assert_eq!(c.distance, (1.0 + 4.0 + 1.0 + 4.0) / 2.0);
        assert_eq!(c.replicas[1], None);
    }

    #[test]
    fn the_mean_has_the_bits_of_a_sum_per_element_in_replica_order() {
        // Values whose f64 sums depend on the order, signed zeros, and a negative-zero column.
        let vs: Vec<Vec<f32>> = (0..7)
            .map(|r| {
                (0..50)
                    .map(|i| match i % 5 {
                        0 => -0.0,
                        1 => 0.0,
                        _ => ((r * 31 + i * 17) as f32).sin() * 10f32.powi((r % 9) - 4),
                    })
                    .collect()
            })
            .collect();
        let live: Vec<&[f32]> = vs.iter().map(|v| v.as_slice()).collect();
        let by_element: Vec<u64> =
            (0..50).map(|i| (live.iter().map(|v| v[i] as f64).sum::<f64>() / live.len() as f64).to_bits()).collect();
        for threads in [1, 2, 3, 7] {
            let fast: Vec<u64> = mean_of(&live, 50, threads).iter().map(|x| x.to_bits()).collect();
            assert_eq!(fast, by_element, "{threads} threads");
        }
    }

    #[test]
    fn blocked_means_and_side_by_side_distances_have_the_bits_of_one_pass_each() {
        // Three blocks of the mean and a part; two groups of four distances and one alone.
        let dim = 2 * MEAN_BLOCK + 333;
        let vs: Vec<Vec<f32>> = (0..9)
            .map(|r| (0..dim).map(|i| ((r * 131 + i * 7) as f32).sin() * 10f32.powi((r as i32 % 7) - 3)).collect())
            .collect();
        let live: Vec<&[f32]> = vs.iter().map(|v| v.as_slice()).collect();
        let mean = mean_of(&live, dim, 1);
        let plain: Vec<f64> =
            (0..dim).map(|i| live.iter().map(|v| v[i] as f64).sum::<f64>() / live.len() as f64).collect();
        assert_eq!(
            mean.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            plain.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        let one_by_one: Vec<u64> = live
            .iter()
            .map(|v| v.iter().zip(&mean).map(|(&x, m)| (x as f64 - m).powi(2)).sum::<f64>().to_bits())
            .collect();
        let grouped: Vec<u64> =
            live.chunks(DISTANCES_AT_ONCE).flat_map(|g| squared_distances(g, &mean)).map(|d| d.to_bits()).collect();
        assert_eq!(grouped, one_by_one);
    }

    #[test]
    fn the_consensus_on_threads_has_the_bits_of_one_thread() {
        // Past the size from which the work is spread: 20 replicas of 60,000, one down, and
        // push-sum weights other than one.
        let dim = 60_000;
        let vs: Vec<Vec<f32>> = (0..20)
            .map(|r| (0..dim).map(|i| ((r * 7919 + i * 31) as f32).sin() * (1.0 + r as f32)).collect())
            .collect();
        let views = || {
            vs.iter().enumerate().map(|(r, v)| match r {
                3 => View::Nothing,
                _ => View::Replica { params: v.as_slice().into(), weight: if r % 4 == 1 { 0.75 } else { 1.0 } },
            })
        };
        assert!(vs.len() * dim >= PARALLEL_ELEMENTS, "spread over threads");
        let one = consensus_on(views(), dim, 1);
        for threads in [2, 3] {
            let many = consensus_on(views(), dim, threads);
            assert_eq!(many.distance.to_bits(), one.distance.to_bits(), "{threads} threads");
            assert_eq!(many.model, one.model);
            assert_eq!(many.replicas, one.replicas);
        }
        assert_eq!(one.replicas[3], None);
        assert_eq!(one.replicas[1].as_ref().map(|r| r[5]), Some((vs[1][5] as f64 / 0.75) as f32));
    }

    #[test]
    fn identical_replicas_have_the_bits_of_the_summed_mean_and_distances() {
        // Signed zeros, subnormals, the extremes, infinities and NaNs: read once, the mean and
        // the distance are what summing every replica gives.
        let v: Vec<f32> = vec![
            0.0,
            -0.0,
            1.0,
            -3.5,
            f32::MIN_POSITIVE / 8.0,
            f32::MAX,
            f32::MIN,
            1e-30,
            7.0e12,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            0.1,
            -0.3,
        ];
        let finite: Vec<f32> = v.iter().copied().filter(|x| x.is_finite()).collect();
        for v in [v, finite] {
            let dim = v.len();
            for n in [1, 2, 3, 4, 5, 9] {
                let copies: Vec<Vec<f32>> = vec![v.clone(); n];
                let views = copies.iter().map(|c| View::Replica { params: c.as_slice().into(), weight: 1.0 });
                let c = consensus_of(views, dim);
                let live: Vec<&[f32]> = copies.iter().map(|c| c.as_slice()).collect();
                let mean = mean_of(&live, dim, 1);
                let model: Vec<u32> = mean.iter().map(|&x| (x as f32).to_bits()).collect();
                let each: Vec<f64> = live.iter().flat_map(|r| squared_distances(&[r], &mean)).collect();
                let distance = each.into_iter().sum::<f64>() / n as f64;
                let got: Vec<u32> = c.model.expect("a model").iter().map(|x| x.to_bits()).collect();
                assert_eq!(got, model, "{n} copies");
                assert_eq!(c.distance.to_bits(), distance.to_bits(), "{n} copies");
                assert!(c.replicas.iter().all(|r| matches!(r, Some(Cow::Borrowed(_)))), "nothing copied");
            }
        }
    }

    #[test]
    fn no_live_replica_is_no_model() {
        let c = consensus_of([View::Nothing, View::Nothing].into_iter(), 3);
        assert_eq!(c.model, None);
        assert_eq!(c.distance, 0.0);
    }

    #[test]
    fn shards_make_the_model_only_when_all_are_up() {
        let (s0, s1) = ([1.0f32, 2.0], [3.0f32]);
        let all = [View::Nothing, View::Shard { offset: 0, params: &s0 }, View::Shard { offset: 2, params: &s1 }];
        assert_eq!(consensus_of(all.into_iter(), 3).model, Some(vec![1.0, 2.0, 3.0]));
        let one_down = [View::Nothing, View::Shard { offset: 0, params: &s0 }, View::Nothing];
        assert_eq!(consensus_of(one_down.into_iter(), 3).model, None, "a down shard's slice is unknown, not zero");
    }

    #[test]
    fn a_down_centre_falls_back_to_the_workers_replicas() {
        let (w, centre) = ([4.0f32, 4.0], [1.0f32, 1.0]);
        let up = [replica(&w), View::Shard { offset: 0, params: &centre }];
        assert_eq!(consensus_of(up.into_iter(), 2).model, Some(vec![1.0, 1.0]));
        let down = [replica(&w), View::Nothing];
        assert_eq!(consensus_of(down.into_iter(), 2).model, Some(vec![4.0, 4.0]));
    }

    #[test]
    fn timing_only_shards_at_any_offset_are_fine() {
        let empty: [f32; 0] = [];
        let v = [View::Shard { offset: 0, params: &empty }, View::Shard { offset: 5, params: &empty }];
        assert_eq!(consensus_of(v.into_iter(), 0).model, Some(vec![]));
    }
}
