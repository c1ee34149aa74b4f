//! `dsgd diff`: which spec fields and summary figures differ between two run folders.

use super::out::{say, Out};
use std::path::PathBuf;
use std::process::ExitCode;

/// `dsgd diff A B`.
#[derive(clap::Args)]
pub struct Args {
    /// A run folder.
    a: PathBuf,
    /// Another run folder.
    b: PathBuf,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
}

/// Prints the differences; exit 0 if none, 1 if some.
pub fn run(a: Args, out: Out) -> anyhow::Result<ExitCode> {
    let d = dsgd_experiments::diff::diff_runs(&a.a, &a.b)?;
    say!(out, "{}", dsgd_experiments::diff::text(&d).trim_end());
    out.json(&serde_json::json!({"identical": d.is_empty(), "spec": d.spec, "summary": d.summary}));
    Ok(if d.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
