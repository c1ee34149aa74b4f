//! `dsgd`: run, sweep, replay and plot distributed-SGD experiments on a simulated cluster. The
//! commands live in [`cli`], one module each; this file only starts them.

mod cli;

/// mimalloc: gradient and parameter vectors of hundreds of kilobytes are allocated and freed at
/// every gradient and message; glibc's allocator returns such blocks to the system and faults
/// their pages in again each time, which cost real-gradient runs a third of their time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    dsgd_experiments::pages::small();
    cli::main()
}

/// mimalloc gives freed memory back to the system a second (of wall time) after it was freed,
/// and the next allocation faults it in again, the kernel zeroing each 2 MiB huge page: in a
/// 100-node gossip-push run of the paper cluster with real gradients, 21% of the CPU was the
/// kernel clearing pages. The process keeps what it freed instead (its peak is what it holds
/// anyway; the memory budget is checked against it).
#[allow(unsafe_code)]
fn keep_freed_memory() {
    /// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (libmimalloc-sys names no
    /// constant for it); -1: never purge.
    const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets a process-wide option of the allocator; any thread may call it at any time.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}
