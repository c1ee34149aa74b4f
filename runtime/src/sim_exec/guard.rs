//! Stops a simulated run that is interrupted (Ctrl-C, checked every 4,096 events) or whose time
//! cannot advance ([`dsgd_sim::STALL_EVENTS`] events at one instant).

use dsgd_sim::{SimError, SimTime};

/// Counts the events handled, and those at the current instant.
#[derive(Default)]
pub(super) struct Guard {
    instant: SimTime,
    at_instant: u64,
    handled: u64,
}

impl Guard {
    /// Called for each event handled at `now`: an error if the run was interrupted or stalls.
    pub fn check(&mut self, now: SimTime) -> Result<(), SimError> {
        self.handled += 1;
        if self.handled & 0xFFF == 0 && crate::cancel::requested() {
            return Err(SimError::Interrupted { at: now });
        }
        if now == self.instant {
            self.at_instant += 1;
            if self.at_instant > dsgd_sim::STALL_EVENTS {
                return Err(SimError::Stalled { at: now, events: self.at_instant });
            }
        } else {
            (self.instant, self.at_instant) = (now, 1);
        }
        Ok(())
    }
}
