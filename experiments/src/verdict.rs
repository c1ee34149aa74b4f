//! Verdicts that resolve: at each node count, which algorithm reaches the target first, and
//! whether it does so significantly.
//!
//! Each algorithm is represented by its best variant (the one the report's tables pick), and
//! each seed of it by its time to the target (a seed that never reached it counts as beyond
//! every time). The fastest is the best variant with the most seeds reaching the target and
//! then the shortest median. Against each other algorithm:
//! - the size of the difference: the ratio of their median times, other ÷ fastest, with a 95%
//!   percentile bootstrap interval (the seeds of both resampled with replacement 2,000 times);
//! - whether it is a difference at all: a one-sided rank test (Mann–Whitney) that the other's
//!   times are longer, exact over every way of splitting the pooled seeds into the two groups
//!   (or 20,000 random splits when there are more than 100,000 ways). It is significant at
//!   p < 0.05; otherwise the two tie. With 2 seeds each the smallest possible p is 1/6, so two
//!   seeds never separate two algorithms, which is the truth of two seeds.
//!
//! Every random draw comes from a fixed seed, so a report is the same every time it is written.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Resamples of the bootstrap.
pub const RESAMPLES: usize = 2000;

/// Significance level of the rank test.
pub const ALPHA: f64 = 0.05;

/// One algorithm's comparison with the fastest at a node count.
#[derive(Clone, Debug, PartialEq)]
pub struct Versus {
    /// The other algorithm.
    pub algorithm: String,
    /// Its median ÷ the fastest's median (infinite when its median is beyond every time).
    pub ratio: f64,
    /// The 95% bootstrap interval of the ratio.
    pub interval: (f64, f64),
    /// The rank test's one-sided p-value that this one's times are longer.
    pub p: f64,
    /// The seeds of the other algorithm.
    pub seeds: usize,
}

impl Versus {
    /// The fastest is significantly faster than this one.
    pub fn significant(&self) -> bool {
        self.p < ALPHA
    }
}

/// Mann–Whitney's statistic: pairs where `other` is longer than `best`, ties counting a half.
fn u_statistic(best: &[f64], other: &[f64]) -> f64 {
    other
        .iter()
        .map(|o| {
            best.iter()
                .map(|b| {
                    if o > b {
                        1.0
                    } else if o == b {
                        0.5
                    } else {
                        0.0
                    }
                })
                .sum::<f64>()
        })
        .sum()
}

/// The one-sided p-value that `other`'s times are longer than `best`'s (never reached: beyond
/// every time): the share of the splits of the pooled times into groups of these sizes whose
/// statistic is at least the observed one.
pub fn rank_test(best: &[Option<f64>], other: &[Option<f64>], seed: u64) -> f64 {
    let t = |x: &Option<f64>| x.unwrap_or(f64::INFINITY);
    let (b, o): (Vec<f64>, Vec<f64>) = (best.iter().map(t).collect(), other.iter().map(t).collect());
    if b.is_empty() || o.is_empty() {
        return 1.0;
    }
    let observed = u_statistic(&b, &o) - 1e-9;
    let pooled: Vec<f64> = b.iter().chain(&o).copied().collect();
    let (n, k) = (pooled.len(), o.len());
    let ways = (0..k).fold(1.0f64, |c, i| c * (n - i) as f64 / (i + 1) as f64);
    let stat = |chosen: &[bool]| {
        let (mut g1, mut g2) = (Vec::with_capacity(n - k), Vec::with_capacity(k));
        for (x, &c) in pooled.iter().zip(chosen) {
            if c {
                g2.push(*x)
            } else {
                g1.push(*x)
            }
        }
        u_statistic(&g1, &g2)
    };
    if ways <= 100_000.0 {
        // Every split: the k-subsets of n, in lexicographic order.
        let mut idx: Vec<usize> = (0..k).collect();
        let (mut at_least, mut total) = (0u64, 0u64);
        loop {
            let mut chosen = vec![false; n];
            idx.iter().for_each(|&i| chosen[i] = true);
            total += 1;
            if stat(&chosen) >= observed {
                at_least += 1;
            }
            let Some(i) = (0..k).rev().find(|&i| idx[i] != i + n - k) else { break };
            idx[i] += 1;
            for j in i + 1..k {
                idx[j] = idx[j - 1] + 1;
            }
        }
        at_least as f64 / total as f64
    } else {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let draws = 20_000u64;
        let mut at_least = 0u64;
        let mut order: Vec<usize> = (0..n).collect();
        for _ in 0..draws {
            for i in (1..n).rev() {
                order.swap(i, rng.random_range(0..=i));
            }
            let mut chosen = vec![false; n];
            order[..k].iter().for_each(|&i| chosen[i] = true);
            if stat(&chosen) >= observed {
                at_least += 1;
            }
        }
        (1 + at_least) as f64 / (1 + draws) as f64
    }
}

/// The verdict at one node count.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Workers.
    pub nodes: usize,
    /// The fastest algorithm, its median time and its seeds (`None`: no algorithm had a median:
    /// at least half the seeds of each never reached the target).
    pub fastest: Option<(String, f64, usize)>,
    /// Every other algorithm against it.
    pub versus: Vec<Versus>,
}

/// The median, with `None` (never reached) above every time; infinite when the middle is.
pub fn median(times: &[Option<f64>]) -> f64 {
    let mut v: Vec<f64> = times.iter().map(|t| t.unwrap_or(f64::INFINITY)).collect();
    if v.is_empty() {
        return f64::INFINITY;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    match (a.is_finite(), b.is_finite()) {
        (true, true) => a / b,
        (false, true) => f64::INFINITY,
        _ => f64::NAN,
    }
}

/// The 95% percentile bootstrap interval of `median(other) / median(best)`.
pub fn bootstrap(best: &[Option<f64>], other: &[Option<f64>], seed: u64) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut draw =
        |xs: &[Option<f64>]| -> Vec<Option<f64>> { (0..xs.len()).map(|_| xs[rng.random_range(0..xs.len())]).collect() };
    let mut ratios: Vec<f64> = (0..RESAMPLES)
        .map(|_| {
            let b = median(&draw(best));
            let o = median(&draw(other));
            ratio(o, b)
        })
        .filter(|r| !r.is_nan())
        .collect();
    if ratios.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((q * (ratios.len() - 1) as f64).round() as usize).min(ratios.len() - 1)];
    (at(0.025), at(0.975))
}

/// An algorithm and each seed's time to the target.
type Seeds<'a> = (&'a String, &'a Vec<Option<f64>>);

/// Verdicts from each node count's best variants: `(nodes, algorithm) → each seed's time to the
/// target`.
pub fn verdicts(times: &BTreeMap<(usize, String), Vec<Option<f64>>>) -> Vec<Verdict> {
    let mut by_nodes: BTreeMap<usize, Vec<Seeds<'_>>> = BTreeMap::new();
    for ((n, a), t) in times {
        by_nodes.entry(*n).or_default().push((a, t));
    }
    by_nodes
        .into_iter()
        .map(|(nodes, algs)| {
            let key = |t: &[Option<f64>]| {
                let reached = t.iter().flatten().count() as f64 / t.len().max(1) as f64;
                (-reached, median(t))
            };
            let best = algs
                .iter()
                .min_by(|x, y| {
                    let (a, b) = (key(x.1), key(y.1));
                    a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1))
                })
                .filter(|b| median(b.1).is_finite());
            let Some(&(name, bt)) = best else { return Verdict { nodes, fastest: None, versus: Vec::new() } };
            let versus = algs
                .iter()
                .filter(|(a, _)| *a != name)
                .map(|(a, t)| {
                    let seed = dsgd_sim::rng::fnv1a64(format!("{nodes}/{name}/{a}").as_bytes());
                    Versus {
                        algorithm: a.to_string(),
                        ratio: ratio(median(t), median(bt)),
                        interval: bootstrap(bt, t, seed),
                        p: rank_test(bt, t, seed ^ 1),
                        seeds: t.len(),
                    }
                })
                .collect();
            Verdict { nodes, fastest: Some((name.clone(), median(bt), bt.len())), versus }
        })
        .collect()
}

fn times_text(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}×")
    } else {
        "∞".into()
    }
}

/// The verdicts as a Markdown section.
pub fn verdicts_md(verdicts: &[Verdict]) -> String {
    let mut md = String::from("### Verdicts: the fastest to the target, and how sure\n\n");
    md.push_str(
        "At each node count, the algorithm whose best variant reaches the target first (most seeds reaching it, \
         then the shortest median), and every other algorithm's median time as a multiple of its, with a 95% \
         bootstrap interval over the seeds (∞: the median seed never reached the target). **significant**: a \
         one-sided rank test (Mann–Whitney, exact over the splits of the seeds) that the other is slower has \
         p < 0.05; *tie* otherwise (with 2 seeds each the smallest possible p is 1/6).\n\n",
    );
    md.push_str("| nodes | fastest (median s, seeds) | against the others |\n|---:|---|---|\n");
    for v in verdicts {
        let Some((name, t, seeds)) = &v.fastest else {
            let _ = writeln!(md, "| {} | none reached the target in at least half its seeds | |", v.nodes);
            continue;
        };
        let others: Vec<String> = v
            .versus
            .iter()
            .map(|o| {
                let how = if o.significant() { "**significant**" } else { "*tie*" };
                format!(
                    "{} {} [{}, {}] {how}, p = {:.3} ({} seeds)",
                    o.algorithm,
                    times_text(o.ratio),
                    times_text(o.interval.0),
                    times_text(o.interval.1),
                    o.p,
                    o.seeds
                )
            })
            .collect();
        let _ = writeln!(md, "| {} | {name} ({t:.1} s, {seeds} seeds) | {} |", v.nodes, others.join("; "));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(xs: &[f64]) -> Vec<Option<f64>> {
        xs.iter().map(|&x| if x.is_finite() { Some(x) } else { None }).collect()
    }

    #[test]
    fn medians_count_the_unreached_as_beyond_every_time() {
        assert_eq!(median(&times(&[3.0, 1.0, 2.0])), 2.0);
        assert_eq!(median(&times(&[4.0, 1.0, 2.0, 3.0])), 2.5);
        assert_eq!(median(&times(&[1.0, f64::INFINITY, f64::INFINITY])), f64::INFINITY);
        assert_eq!(median(&times(&[1.0, 2.0, f64::INFINITY])), 2.0);
    }

    #[test]
    fn a_clear_winner_is_significant_and_overlapping_seeds_tie() {
        let mut t = BTreeMap::new();
        t.insert((16, "sync".to_string()), times(&[10.0, 11.0, 10.5, 9.5, 10.2]));
        t.insert((16, "gossip".to_string()), times(&[20.0, 22.0, 19.0, 21.0, 20.5]));
        t.insert((16, "easgd".to_string()), times(&[10.4, 9.0, 12.0, 10.1, 11.5]));
        t.insert((16, "async_ps".to_string()), times(&[f64::INFINITY; 5]));
        let v = verdicts(&t);
        assert_eq!(v.len(), 1);
        let (name, med, seeds) = v[0].fastest.clone().unwrap();
        assert_eq!((name.as_str(), med, seeds), ("sync", 10.2, 5));
        let of = |a: &str| v[0].versus.iter().find(|x| x.algorithm == a).unwrap().clone();
        let g = of("gossip");
        assert!((g.ratio - 20.5 / 10.2).abs() < 1e-12);
        assert!(g.significant(), "{g:?}");
        assert!(g.interval.0 > 1.5 && g.interval.1 < 2.5, "{g:?}");
        assert!((g.p - 1.0 / 252.0).abs() < 1e-12, "every gossip seed slower: the most extreme of 252 splits");
        let e = of("easgd");
        assert!(!e.significant(), "overlapping seeds are a tie: {e:?}");
        assert!(e.interval.0 < 1.0 && e.interval.1 > 1.0, "{e:?}");
        let p = of("async_ps");
        assert_eq!(p.ratio, f64::INFINITY);
        assert!(p.significant(), "never reaching the target loses: {p:?}");
        // The same every time it is written.
        assert_eq!(verdicts(&t), v);
        let md = verdicts_md(&v);
        assert!(md.contains("| 16 | sync (10.2 s, 5 seeds) |"), "{md}");
        assert!(md.contains("gossip 2.01× ["), "{md}");
    }

    #[test]
    fn two_seeds_never_resolve_anything() {
        let mut t = BTreeMap::new();
        t.insert((4, "a".to_string()), times(&[10.0, 10.0]));
        t.insert((4, "b".to_string()), times(&[60.0, 60.0]));
        let v = verdicts(&t);
        assert!((v[0].versus[0].p - 1.0 / 6.0).abs() < 1e-12, "{v:?}");
        assert!(!v[0].versus[0].significant(), "{v:?}");
    }

    #[test]
    fn the_rank_test_agrees_with_its_exact_tables_and_samples_large_groups() {
        // Mann–Whitney, 3 against 3, complete separation: 1/20; one swap: 2/20.
        let s = |v: &[f64]| times(v);
        assert!((rank_test(&s(&[1.0, 2.0, 3.0]), &s(&[4.0, 5.0, 6.0]), 0) - 0.05).abs() < 1e-12);
        assert!((rank_test(&s(&[1.0, 2.0, 4.0]), &s(&[3.0, 5.0, 6.0]), 0) - 0.10).abs() < 1e-12);
        // The same times: every split is as extreme.
        assert_eq!(rank_test(&s(&[2.0, 2.0]), &s(&[2.0, 2.0]), 0), 1.0);
        // 12 against 12 (2.7 million splits): sampled, and still clear.
        let a: Vec<f64> = (0..12).map(|i| 10.0 + i as f64 * 0.1).collect();
        let b: Vec<f64> = (0..12).map(|i| 20.0 + i as f64 * 0.1).collect();
        let p = rank_test(&s(&a), &s(&b), 7);
        assert!(p < 0.001, "{p}");
        assert_eq!(p, rank_test(&s(&a), &s(&b), 7), "the same every time");
    }

    #[test]
    fn with_no_median_anywhere_there_is_no_winner() {
        let mut t = BTreeMap::new();
        t.insert((4, "a".to_string()), times(&[10.0, f64::INFINITY, f64::INFINITY]));
        t.insert((4, "b".to_string()), times(&[f64::INFINITY; 3]));
        let v = verdicts(&t);
        assert_eq!(v[0].fastest, None);
        assert!(verdicts_md(&v).contains("none reached the target"));
    }
}
