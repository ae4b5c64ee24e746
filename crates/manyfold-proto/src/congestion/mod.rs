//! Congestion control behind the `Controller` trait (spec §9).
