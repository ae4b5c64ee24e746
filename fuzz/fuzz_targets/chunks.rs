//! Any bytes as the data area of a sequenced packet (spec §13.2): DATA,
//! RESET, STOP, CREDIT, ABANDON and PAD chunks.
//!
//! Invariants: no panic; each chunk parsed re-emits to the same bytes (but
//! for the reserved byte of RESET and STOP) and parses back equal;
//! `validate_chunks` agrees with `parse_chunks`; `summary` counts the data
//! bytes and entries of a valid area; DATA offsets stay within 48 bits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use manyfold_fuzz::check_chunks;

fuzz_target!(|data: &[u8]| {
    check_chunks(data);
});
