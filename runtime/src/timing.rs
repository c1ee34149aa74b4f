//! Where the simulated duration of a gradient comes from.
//!
//! By default the engine's compute model decides (base step time, jitter, stragglers), so a run
//! is a pure function of its spec and seed. With [`GradientTiming::Measure`] each real gradient
//! is timed on the device as it is computed and that wall time becomes its simulated duration
//! (stragglers still multiply it); the durations are returned as a [`Recording`]. Measuring reads
//! the wall clock, so two measured runs differ; a run driven by its recording
//! ([`GradientTiming::Replay`]) reproduces the measured run bit for bit.

use std::fmt::Write as _;
use std::sync::Arc;

/// The source of gradient durations.
#[derive(Clone, Debug, Default)]
pub enum GradientTiming {
    /// The engine's compute model (deterministic; the default).
    #[default]
    Model,
    /// The measured wall time of each real gradient.
    Measure,
    /// The durations of an earlier measured run.
    Replay(Arc<Recording>),
}

/// Measured gradient durations: per rank, in the order the rank started its gradients.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recording {
    /// `per_rank[r][k]`: nanoseconds of rank `r`'s `k`-th gradient.
    pub per_rank: Vec<Vec<u64>>,
}

impl Recording {
    /// An empty recording for `ranks` ranks.
    pub fn new(ranks: usize) -> Self {
        Recording { per_rank: vec![Vec::new(); ranks] }
    }

    /// Number of recorded gradients.
    pub fn len(&self) -> usize {
        self.per_rank.iter().map(Vec::len).sum()
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The recording as CSV: `rank,job,ns`, one line per gradient.
    pub fn to_csv(&self) -> String {
        let mut s = String::from("rank,job,ns\n");
        for (r, times) in self.per_rank.iter().enumerate() {
            for (k, ns) in times.iter().enumerate() {
                let _ = writeln!(s, "{r},{k},{ns}");
            }
        }
        s
    }

    /// Parses [`Recording::to_csv`]'s format; `what` names the source in errors. Lines of a rank
    /// must come in job order without gaps.
    pub fn from_csv(text: &str, what: &str) -> Result<Self, String> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, "rank,job,ns")) => {}
            _ => return Err(format!("{what}: the first line must be the header `rank,job,ns`")),
        }
        let mut rec = Recording::default();
        for (i, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |p: &str| format!("{what}, line {}: {p} (expected `rank,job,ns` with whole numbers)", i + 1);
            let f: Vec<u64> = line
                .split(',')
                .map(|x| x.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad("not three whole numbers"))?;
            let [r, k, ns] = f[..] else { return Err(bad("not three fields")) };
            let r = r as usize;
            if rec.per_rank.len() <= r {
                rec.per_rank.resize(r + 1, Vec::new());
            }
            if rec.per_rank[r].len() as u64 != k {
                return Err(bad(&format!(
                    "job {k} of rank {r} is out of order (expected job {})",
                    rec.per_rank[r].len()
                )));
            }
            rec.per_rank[r].push(ns);
        }
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips_and_rejects_gaps() {
        let rec = Recording { per_rank: vec![vec![5, 7], vec![], vec![1]] };
        let back = Recording::from_csv(&rec.to_csv(), "t").unwrap();
        assert_eq!(back.per_rank[..], rec.per_rank[..]);
        assert_eq!(rec.len(), 3);
        let e = Recording::from_csv("rank,job,ns\n0,1,5\n", "f.csv").unwrap_err();
        assert!(e.contains("f.csv, line 2") && e.contains("out of order"), "{e}");
        assert!(Recording::from_csv("r,j\n", "f.csv").unwrap_err().contains("header"));
        assert!(Recording::from_csv("rank,job,ns\n0,0,x\n", "f.csv").unwrap_err().contains("whole numbers"));
    }
}
