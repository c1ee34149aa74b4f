//! Where a command's words go: lines for a person on stdout, or, with `--json`, one JSON document
//! and nothing else. Passed to each command as a value; there is no global flag.

use std::io::Write as _;

/// A command's stdout: human-readable lines, or (with `--json`) one JSON document only.
#[derive(Clone, Copy, Debug)]
pub struct Out {
    json: bool,
}

impl Out {
    /// Lines for a person, or JSON only when `json`.
    pub fn new(json: bool) -> Self {
        Out { json }
    }

    /// True when `--json` asked for one JSON document on stdout.
    pub fn json_mode(self) -> bool {
        self.json
    }

    /// Prints a line (unless `--json` asked for JSON only). A closed pipe (`dsgd ... | head`) is
    /// not worth a panic and the work goes on: output files are written regardless.
    pub fn line(self, args: std::fmt::Arguments) {
        if !self.json {
            let _ = writeln!(std::io::stdout(), "{args}");
        }
    }

    /// Prints `v` as the command's JSON document, only under `--json`.
    pub fn json(self, v: &serde_json::Value) {
        if self.json {
            let text = serde_json::to_string_pretty(v).expect("JSON values serialise");
            let _ = writeln!(std::io::stdout(), "{text}");
        }
    }
}

/// `say!(out, "format", args..)`: a line on stdout unless `--json`.
macro_rules! say {
    ($out:expr, $($t:tt)*) => {
        $out.line(format_args!($($t)*))
    };
}
pub(crate) use say;
