//! Asking the processor to bring a value's cache lines in before it is read.
//!
//! At thousands of nodes, an event's node state (its random streams, its NIC, its protocol) is
//! no longer in a cache, and a handler reads it piece by piece: each piece a miss that waits for
//! the one before it. Prefetching every piece when the node is known turns those waits into one.
//! A prefetch changes no value and cannot fault, whatever the address: this is the `sim` crate's
//! only `unsafe` code, one audited intrinsic call.

#![allow(unsafe_code)]

/// Prefetches the cache lines of `value` (into every cache level), at most `max_lines` of them.
#[inline(always)]
pub fn lines<T: ?Sized>(value: &T, max_lines: usize) {
    let start = (value as *const T).cast::<u8>();
    let end = start.wrapping_add(std::mem::size_of_val(value));
    // The line that holds the first byte (an address moved back, keeping its provenance).
    let mut at = start.wrapping_sub(start as usize & 63);
    for _ in 0..max_lines {
        if at >= end {
            break;
        }
        line(at);
        at = at.wrapping_add(64);
    }
}

/// Prefetches the cache line holding `p`.
#[inline(always)]
fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees, never faults, and any
    // address (even an invalid one) is allowed; SSE is part of every x86_64 processor.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
