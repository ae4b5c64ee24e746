//! Deterministic network simulator (spec §11).
