//! `dsgd`: run, sweep, replay and plot distributed-SGD experiments on a simulated cluster. The
//! commands live in [`cli`], one module each; this file only starts them.

mod cli;

/// mimalloc: gradient and parameter vectors of hundreds of kilobytes are allocated and freed at
/// every gradient and message; glibc's allocator returns such blocks to the system and faults
/// their pages in again each time, which cost real-gradient runs a third of their time.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
