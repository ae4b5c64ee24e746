//! Who is sent ACK_FREQUENCY requests (spec §5.6): only a peer that
//! announced the feature or sent one itself.

use super::{transfer, Pair};
use crate::wire::chunk::{parse_chunks, Chunk};
use crate::wire::{seal, Flags, Packet};

/// Requests carried by the datagrams one side sent.
fn requests(log: &[(bool, Vec<u8>)], to_b: bool) -> usize {
    log.iter()
        .filter(|(dir, _)| *dir == to_b)
        .filter_map(|(_, d)| Packet::parse(d).ok().map(|p| p.data.to_vec()))
        .map(|data| parse_chunks(&data).filter(|c| matches!(c, Ok(Chunk::AckFrequency { .. }))).count())
        .sum()
}

/// The listener's SYN-ACK as an older listener sends it: no feature bits.
fn strip_syn_ack_features(to_b: bool, d: &mut [u8]) {
    let Ok(p) = Packet::parse(d) else { return };
    if to_b || !p.header.flags.contains(Flags::SYN) {
        return;
    }
    // The params section follows the 24-byte header and the SACK section
    // (a SYN-ACK's echo of the SYN, spec §5.4.2); features are its last u16.
    let at = 24 + p.sack.map_or(0, |s| s.encoded_len());
    d[at + 6] = 0;
    d[at + 7] = 0;
    seal(d);
}

#[test]
fn peers_that_both_take_requests_exchange_them() {
    let mut p = Pair::new();
    p.log = Some(Vec::new());
    transfer(&mut p, 4 << 20);
    let log = p.log.take().unwrap();
    assert!(requests(&log, true) >= 1, "the client asks on its echo");
    assert!(requests(&log, false) >= 1, "the listener learned from it and asks too");
}

#[test]
fn a_client_sends_no_request_to_a_listener_that_did_not_announce_the_feature() {
    let mut p = Pair::new();
    p.log = Some(Vec::new());
    p.rewrite = Some(strip_syn_ack_features);
    transfer(&mut p, 4 << 20);
    let log = p.log.take().unwrap();
    assert_eq!(requests(&log, true), 0);
    // Nor does the listener, which never heard one.
    assert_eq!(requests(&log, false), 0);
}
