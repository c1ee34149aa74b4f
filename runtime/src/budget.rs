//! The process's memory budget: how much a run may hold before the simulator executor stops it
//! with [`dsgd_sim::SimError::OverBudget`], naming what grew, instead of letting the kernel's
//! out-of-memory killer end it. Process-wide, like the interrupt flag ([`crate::cancel`]): memory
//! is the process's, whatever runs share it (a sweep's parallel runs). The command line sets it
//! from the spec's estimate and the machine's memory; checking it never changes what a finished
//! run computes.

use std::sync::RwLock;

/// A memory budget and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Resident bytes the process may hold.
    pub resident: u64,
    /// Address space the process may map (an address-space limit, `ulimit -v`), if any.
    pub address_space: Option<u64>,
    /// Where the budget comes from, in words.
    pub why: String,
}

static BUDGET: RwLock<Option<Budget>> = RwLock::new(None);

/// Sets (or, with `None`, lifts) the budget of every run in this process.
pub fn set(budget: Option<Budget>) {
    *BUDGET.write().unwrap_or_else(|e| e.into_inner()) = budget;
}

/// The budget, if one is set.
pub fn get() -> Option<Budget> {
    BUDGET.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// What the process holds now: (resident, mapped) bytes, where the system says (Linux).
pub fn held() -> Option<(u64, u64)> {
    Meter::open()?.held()
}

/// The process's memory as the system reports it, read again and again through one open file.
pub struct Meter(std::fs::File);

impl Meter {
    /// Opens `/proc/self/statm`; `None` where there is none.
    pub fn open() -> Option<Meter> {
        std::fs::File::open("/proc/self/statm").ok().map(Meter)
    }

    /// (resident, mapped) bytes now.
    pub fn held(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 128];
        let n = self.0.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let mut f = text.split_whitespace().map(|x| x.parse::<u64>().ok());
        let (size, resident) = (f.next()??, f.next()??);
        Some((resident * PAGE, size * PAGE))
    }
}

/// Bytes a page (4 KiB on the machines this runs on; `/proc/self/statm` counts pages).
const PAGE: u64 = 4096;

impl Budget {
    /// Of `held` (resident, mapped bytes), the measure nearest its limit: (held, limit).
    pub fn nearest(&self, (resident, mapped): (u64, u64)) -> (u64, u64) {
        match self.address_space {
            Some(limit) if limit.saturating_sub(mapped) < self.resident.saturating_sub(resident) => (mapped, limit),
            _ => (resident, self.resident),
        }
    }

    /// Whether `held` (resident, mapped bytes) is over the budget; `Some((held, limit))` in bytes
    /// of the exceeded measure.
    pub fn exceeded(&self, (resident, mapped): (u64, u64)) -> Option<(u64, u64)> {
        if resident > self.resident {
            return Some((resident, self.resident));
        }
        match self.address_space {
            Some(limit) if mapped > limit => Some((mapped, limit)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_holds_some_memory_and_a_budget_below_it_is_exceeded() {
        let (resident, mapped) = held().expect("Linux reports the process's memory");
        assert!(resident > 0 && mapped >= resident);
        let b = Budget { resident: resident / 2, address_space: None, why: "a test".into() };
        assert_eq!(b.exceeded((resident, mapped)), Some((resident, resident / 2)));
        let b = Budget { resident: u64::MAX, address_space: Some(mapped / 2), why: "a test".into() };
        assert_eq!(b.exceeded((resident, mapped)), Some((mapped, mapped / 2)));
        assert_eq!(Budget { address_space: None, ..b }.exceeded((resident, mapped)), None);
    }
}
