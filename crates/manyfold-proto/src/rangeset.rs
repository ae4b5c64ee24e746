//! Sets of half-open u64 ranges.
