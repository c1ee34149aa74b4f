//! Cancelling runs from outside: a process-wide flag that the simulator executor checks every
//! few thousand events and answers with [`dsgd_sim::SimError::Interrupted`]. The command line
//! sets it on SIGINT or SIGTERM (so a sweep keeps its finished runs and removes the unfinished
//! ones), and the spec fuzzer on its time bound. It never changes what a finished run computes.

use std::sync::atomic::{AtomicBool, Ordering};

static CANCEL: AtomicBool = AtomicBool::new(false);

/// Asks every run in this process to stop at its next check.
pub fn request() {
    CANCEL.store(true, Ordering::SeqCst);
}

/// Withdraws the request (for a process that runs more after an interruption, like the fuzzer).
pub fn clear() {
    CANCEL.store(false, Ordering::SeqCst);
}

/// True once a stop was requested.
pub fn requested() -> bool {
    CANCEL.load(Ordering::Relaxed)
}
