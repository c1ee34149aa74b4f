//! Stops a simulated run that is interrupted (Ctrl-C), that outgrows the process's memory budget
//! ([`crate::budget`]), or whose time cannot advance ([`dsgd_sim::STALL_EVENTS`] events at one
//! instant).
//!
//! The interrupt and the budget are checked every 16,384 events while memory is steady, and as
//! often as every 16 while it grows fast toward the budget (events that carry real gradients can
//! hold a megabyte each), so a run stops before it holds more than its budget by much; and
//! whenever the pending events have grown by a thirty-second since the last check (at least
//! 65,536), since one event can schedule ten thousand (a probe to every rank from each of 10,601
//! synchronous members took a 4 GB address space in 16,384 events, found by the fuzzer's
//! memory-heavy cases).

use crate::budget;
use dsgd_sim::{Sim, SimError, SimTime};

/// Events between checks when memory is steady, and at the least (when it grows fast).
const CALM: u64 = 16_384;
const HURRIED: u64 = 16;
/// Pending events added, at the least, that call for a check before the interval is over.
const SURGE: usize = 65_536;

/// Counts the events handled, and those at the current instant.
pub(super) struct Guard {
    instant: SimTime,
    at_instant: u64,
    handled: u64,
    next_check: u64,
    interval: u64,
    /// Pending events at which to check before the interval is over.
    next_pending: usize,
    /// What the process held at the last check (the measure nearest its limit).
    last_held: u64,
    /// The budget when the run started, and the meter that reads what the process holds (both
    /// taken at the first check).
    budget: Option<Option<(budget::Budget, budget::Meter)>>,
}

impl Default for Guard {
    fn default() -> Self {
        // The first checks come soon: a run's first events can already hold a lot (every node's
        // first message), and the interval doubles while memory is steady.
        Guard {
            instant: SimTime::ZERO,
            at_instant: 0,
            handled: 0,
            next_check: HURRIED,
            interval: HURRIED,
            next_pending: SURGE,
            last_held: 0,
            budget: None,
        }
    }
}

impl Guard {
    /// Called for each event handled at `now`: an error if the run was interrupted, holds more
    /// than its budget, or stalls.
    #[inline]
    pub fn check<M>(&mut self, now: SimTime, sim: &Sim<M>) -> Result<(), SimError> {
        self.handled += 1;
        if self.handled >= self.next_check || sim.pending_events() >= self.next_pending {
            self.every_while(now, sim)?;
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

    /// The checks made every `interval` events: the interrupt and the budget (out of the way of
    /// the per-event path).
    #[cold]
    #[inline(never)]
    fn every_while<M>(&mut self, now: SimTime, sim: &Sim<M>) -> Result<(), SimError> {
        if crate::cancel::requested() {
            return Err(SimError::Interrupted { at: now });
        }
        self.check_memory(now, sim)?;
        self.next_check = self.handled + self.interval;
        let pending = sim.pending_events();
        self.next_pending = pending + (pending / 32).max(SURGE);
        Ok(())
    }

    /// The budget and the meter, taken once (at the first check) and kept for the run.
    fn watch(&mut self) -> Option<&(budget::Budget, budget::Meter)> {
        self.budget.get_or_insert_with(|| budget::get().zip(budget::Meter::open())).as_ref()
    }

    /// What the process holds against its budget: an error if it is over; `None` without a
    /// budget (or a meter), else the held measure nearest its limit, and that limit.
    fn measure<M>(&mut self, now: SimTime, sim: &Sim<M>) -> Result<Option<(u64, u64)>, SimError> {
        let Some((b, meter)) = self.watch() else { return Ok(None) };
        let Some((resident, mapped)) = meter.held() else { return Ok(Some((0, u64::MAX))) };
        // The event queue's next growth counts already: it comes in one allocation, too large to
        // be seen in time otherwise.
        let growth = sim.pending_growth_bytes();
        let held = (resident.saturating_add(growth), mapped.saturating_add(growth));
        over_budget(now, sim, b, held)?;
        Ok(Some(b.nearest(held)))
    }

    /// Checks the budget now (after an evaluation, which can take much at once).
    pub fn check_now<M>(&mut self, now: SimTime, sim: &Sim<M>) -> Result<(), SimError> {
        self.measure(now, sim).map(|_| ())
    }

    /// Checks the budget, and checks sooner next time if memory grew by much of what is left.
    fn check_memory<M>(&mut self, now: SimTime, sim: &Sim<M>) -> Result<(), SimError> {
        let Some((used, limit)) = self.measure(now, sim)? else {
            self.interval = CALM; // no budget: only the interrupt is checked
            return Ok(());
        };
        let (left, grew) = (limit.saturating_sub(used), used.saturating_sub(self.last_held));
        self.interval = if grew.saturating_mul(8) > left {
            (self.interval / 4).max(HURRIED)
        } else if grew.saturating_mul(64) < left {
            (self.interval * 2).min(CALM)
        } else {
            self.interval
        };
        self.last_held = used;
        Ok(())
    }
}

/// An error naming what the run holds and why it grew, if `held` is over the budget `b`.
fn over_budget<M>(now: SimTime, sim: &Sim<M>, b: &budget::Budget, held: (u64, u64)) -> Result<(), SimError> {
    let Some((held, limit)) = b.exceeded(held) else { return Ok(()) };
    Err(SimError::OverBudget(Box::new(dsgd_sim::error::OverBudget {
        at: now,
        held_mb: held >> 20,
        budget_mb: limit >> 20,
        why: b.why.clone(),
        cause: sim.backlog().describe(),
    })))
}
