//! Any bytes as a multicast datagram (spec §16.2): ANNOUNCE, REGISTER and
//! its confirmation, DATA, ACK, NACK, REPAIR, STATUS, END, PARITY.
//!
//! Like `datagram`, each input is tried as is, with its CRC fixed, and with
//! version, length and CRC fixed (the first byte's low nibble picks the
//! type). Invariants: no panic; what parses re-emits and parses back equal;
//! range lists are ascending, disjoint and non-empty.
#![no_main]

use libfuzzer_sys::fuzz_target;
use manyfold_fuzz::{check_mc, fixup};
use manyfold_proto::wire::{seal, HEADER_LEN};

fuzz_target!(|data: &[u8]| {
    let _ = check_mc(data);
    if data.len() >= HEADER_LEN {
        let mut sealed = data.to_vec();
        seal(&mut sealed);
        let _ = check_mc(&sealed);
        let mut fixed = data.to_vec();
        fixup(&mut fixed);
        let _ = check_mc(&fixed);
    }
});
