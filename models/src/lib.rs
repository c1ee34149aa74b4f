//! Gradient sources (to come).
