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
    pub fn from_csv(text: &str, what: &str) -> Result<Self, RecordingError> {
        let mut lines = text.lines().enumerate();
        match lines.next() {
            Some((_, "rank,job,ns")) => {}
            _ => return Err(RecordingError::Header { what: what.to_string() }),
        }
        let mut rec = Recording::default();
        for (i, line) in lines {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |problem| RecordingError::Line { what: what.to_string(), line: i + 1, problem };
            let f: Vec<u64> = line
                .split(',')
                .map(|x| x.trim().parse::<u64>())
                .collect::<Result<_, _>>()
                .map_err(|_| bad(LineProblem::NotNumbers))?;
            let [r, k, ns] = f[..] else { return Err(bad(LineProblem::NotThreeFields)) };
            let r = r as usize;
            if rec.per_rank.len() <= r {
                rec.per_rank.resize(r + 1, Vec::new());
            }
            let expected = rec.per_rank[r].len() as u64;
            if expected != k {
                return Err(bad(LineProblem::OutOfOrder { rank: r, job: k, expected }));
            }
            rec.per_rank[r].push(ns);
        }
        Ok(rec)
    }
}

/// A recording of gradient durations that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RecordingError {
    /// The first line is not `rank,job,ns`.
    #[error("{what}: the first line must be the header `rank,job,ns`")]
    Header {
        /// The source (a file's path).
        what: String,
    },
    /// A line that is not a duration in order.
    #[error("{what}, line {line}: {problem} (expected `rank,job,ns` with whole numbers)")]
    Line {
        /// The source (a file's path).
        what: String,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        problem: LineProblem,
    },
}

/// What is wrong with a line of a recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    /// A field is not a whole number.
    #[error("not three whole numbers")]
    NotNumbers,
    /// Not three fields.
    #[error("not three fields")]
    NotThreeFields,
    /// A job of a rank out of order.
    #[error("job {job} of rank {rank} is out of order (expected job {expected})")]
    OutOfOrder {
        /// The rank.
        rank: usize,
        /// The job given.
        job: u64,
        /// The job expected next.
        expected: u64,
    },
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
        let problem = LineProblem::OutOfOrder { rank: 0, job: 1, expected: 0 };
        assert_eq!(e, RecordingError::Line { what: "f.csv".into(), line: 2, problem });
        let e = e.to_string();
        assert!(e.contains("f.csv, line 2") && e.contains("out of order"), "{e}");
        assert!(Recording::from_csv("r,j\n", "f.csv").unwrap_err().to_string().contains("header"));
        let e = Recording::from_csv("rank,job,ns\n0,0,x\n", "f.csv").unwrap_err();
        assert!(e.to_string().contains("whole numbers"), "{e}");
        assert!(matches!(e, RecordingError::Line { problem: LineProblem::NotNumbers, .. }));
    }
}
