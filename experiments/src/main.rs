//! The dsgd command line (to come).
fn main() {}
