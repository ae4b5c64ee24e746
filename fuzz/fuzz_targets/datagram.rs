//! Any bytes as a datagram (spec §3): the header checks, then every
//! section the flags announce (SACK block, handshake parameters, cookie,
//! error code) and the chunks of the data area (spec §13.2).
//!
//! Random bytes almost never carry a valid CRC32C, so each input is tried
//! three ways: as is; with only its CRC fixed; and with version, payload
//! length and CRC fixed, which reaches the section and chunk decoders.
//! Invariants: no panic; what parses round-trips (`parse(emit(p)) == p`,
//! bytes equal but for reserved fields); the data area of a parsed packet
//! is a well-formed run of chunks that round-trip too; the multicast
//! decoder never panics on the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use manyfold_fuzz::{check_chunks, check_mc, check_packet, fixup};
use manyfold_proto::wire::{seal, Header, HEADER_LEN};

fn one(d: &[u8]) {
    let header = Header::parse(d);
    if let Some(p) = check_packet(d) {
        assert_eq!(header, Ok(p.header));
        assert!(check_chunks(p.data), "a parsed packet's data area is malformed");
    }
    let _ = check_mc(d);
}

fuzz_target!(|data: &[u8]| {
    one(data);
    if data.len() >= HEADER_LEN {
        let mut sealed = data.to_vec();
        seal(&mut sealed);
        one(&sealed);
        let mut fixed = data.to_vec();
        fixup(&mut fixed);
        one(&fixed);
    }
});
