//! Distributed-SGD algorithms as executor-agnostic state machines (to come).
