//! The errors of the `dsgd` library, one enum a caller can match. Each lower layer's error is a
//! variant of its own (the spec's, the engine's, a recording's, a device's, the dataset's, a real
//! run's); what this layer adds names the file or the flag it is about. The command line adds its
//! context (`anyhow`) only at its edge.

use crate::load::SpecError;
use crate::spec::FieldError;
use std::path::{Path, PathBuf};

/// Why a `dsgd` operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A spec or sweep file that cannot be read as one.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A field of a spec, or a field path, that is refused.
    #[error(transparent)]
    Field(#[from] FieldError),
    /// The engine or the runtime refused or stopped a run.
    #[error(transparent)]
    Sim(#[from] dsgd_sim::SimError),
    /// A recording of gradient durations that cannot be read.
    #[error(transparent)]
    Recording(#[from] dsgd_runtime::timing::RecordingError),
    /// A device that cannot be named or used.
    #[error(transparent)]
    Device(#[from] dsgd_models::nets::DeviceError),
    /// The dataset cannot be read.
    #[error(transparent)]
    Data(#[from] dsgd_models::idx::DataError),
    /// A real run that cannot start or finish.
    #[cfg(feature = "mpi")]
    #[error(transparent)]
    Real(#[from] dsgd_runtime::mpi_exec::RealError),
    /// A file or folder that cannot be read, written, created or removed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was tried: `read`, `write`, `create`, `remove`.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file that is not what dsgd writes there (a result, a run folder's JSON).
    #[error("{}: {problem}", path.display())]
    File {
        /// The file or folder.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A figure that could not be drawn.
    #[error("{}: {problem}", path.display())]
    Figure {
        /// The figure's file.
        path: PathBuf,
        /// What the drawing library said.
        problem: String,
    },
    /// The run's memory estimate exceeds what the machine has (see [`crate::bounds`]).
    #[error(
        "this run needs about {needed} of memory and {available} is available; it is driven by {drivers}. Lower \
         those fields, or add --force to run it anyway"
    )]
    Memory {
        /// The estimate, in words (`3.2 GiB`).
        needed: String,
        /// What is available, in words.
        available: String,
        /// The fields that drive the estimate, with their shares.
        drivers: String,
    },
    /// A command-line value that is refused.
    #[error("{flag}: {problem}")]
    Argument {
        /// The flag (`--nodes`) or value (`model`).
        flag: &'static str,
        /// What is wrong and what is allowed.
        problem: String,
    },
    /// A sweep folder holds runs of another grid.
    #[error(
        "{} holds runs of another grid ({} of them):\n  {}{}\nthe sweep file changed since they ran; nothing was \
         run. Use a new --out, or add --rerun-changed to remove these runs and run the changed points again",
        out.display(), changed.len(), changed.iter().take(10).cloned().collect::<Vec<_>>().join("\n  "),
        if changed.len() > 10 { "\n  ..." } else { "" }
    )]
    ChangedGrid {
        /// The sweep's folder.
        out: PathBuf,
        /// The runs that differ, with why (`runs/0003 has another spec`).
        changed: Vec<String>,
    },
    /// A benchmark's child process failed or disagreed with itself.
    #[error("{case}: {problem}")]
    Bench {
        /// The case (`sync at 100 nodes`).
        case: String,
        /// What went wrong.
        problem: String,
    },
    /// The MPI library cannot be used as a real run needs it.
    #[error("{0}")]
    Mpi(String),
    /// Ctrl-C.
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    /// `action` on `path` failed with `source`.
    pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.to_path_buf();
        move |source| Error::Io { action, path, source }
    }

    /// `path` is not what it should be: `problem`.
    pub fn file(path: &Path, problem: impl std::fmt::Display) -> Error {
        Error::File { path: path.to_path_buf(), problem: problem.to_string() }
    }

    /// A command-line value `flag` is refused: `problem`.
    pub fn argument(flag: &'static str, problem: impl Into<String>) -> Error {
        Error::Argument { flag, problem: problem.into() }
    }
}

/// What the library's fallible functions return.
pub type Result<T, E = Error> = std::result::Result<T, E>;
