//! `dsgd plot`: the figures of finished runs or sweeps.

use super::out::{say, Out};
use dsgd_experiments::{plot, sweep};
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd plot DIR...`.
#[derive(clap::Args)]
pub struct Args {
    /// Run or sweep folders.
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where to put the figures (default: DIR/plots of the first folder).
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Draws the figures of the best variants of the runs in the folders.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let mut runs = Vec::new();
    for d in &a.dirs {
        runs.extend(sweep::collect_runs(d)?);
    }
    let dest = a.out.unwrap_or_else(|| a.dirs[0].join("plots"));
    for f in &plot::all(&runs, &dest)? {
        say!(out, "{}", f.display());
    }
    Ok(ExitCode::SUCCESS)
}
