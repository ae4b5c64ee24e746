//! An abort's reason in words (spec §3.3.4, §4.6): it reaches the peer on
//! the RST's first copy, is cut to `MAX_CLOSE_REASON` bytes when sent, and
//! a peer's over-long or non-UTF-8 reason is dropped and counted while its
//! RST still closes the connection.

mod common;

use std::time::Duration;

use common::*;
use manyfold_proto::wire::chunk::{Chunk, MAX_CLOSE_REASON};
use manyfold_proto::wire::{ErrorCode, Flags, Packet, PacketType};
use manyfold_proto::{CloseReason, EndpointConfig};
use manyfold_sim::LinkConfig;

const CODE: ErrorCode = ErrorCode(300);

fn reasons_of(d: &[u8]) -> Vec<Vec<u8>> {
    chunks(d)
        .into_iter()
        .filter_map(|c| match c {
            Chunk::Reason(t) => Some(t.to_vec()),
            _ => None,
        })
        .collect()
}

#[test]
fn an_aborts_reason_reaches_the_peer_on_the_first_copy_of_its_rst() {
    let seed = 2401;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    let (c, s) = establish(&mut w);
    w.set_capture(true);
    w.act(server(), |ep, now| ep.conn_mut(s).abort_with_reason(now, CODE, "disk full on /srv"));
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(5)), "seed {seed}");
    assert_eq!(w.closed(client(), c).unwrap().1, CloseReason::PeerReset(Some(CODE)), "seed {seed}");
    assert_eq!(w.endpoint(client()).conn(c).peer_close_text(), Some("disk full on /srv"), "seed {seed}");
    // Our own end knows the code; the text is the peer's to read.
    assert_eq!(w.endpoint(server()).conn(s).close_reason(), Some(CloseReason::Aborted(CODE)));
    assert_eq!(w.endpoint(server()).conn(s).peer_close_text(), None);
    w.run_for(Duration::from_millis(100));
    let rsts: Vec<_> = w.captured().iter().filter(|p| p.from == server() && is_rst(&p.data)).cloned().collect();
    assert_eq!(rsts.len(), 2, "the RST goes twice (seed {seed})");
    assert_eq!(reasons_of(&rsts[0].data), vec![b"disk full on /srv".to_vec()], "seed {seed}");
    // spec §3.3.4: the second copy is the plain RST a peer without REASON
    // chunks understands.
    assert!(reasons_of(&rsts[1].data).is_empty(), "seed {seed}");
}

#[test]
fn when_the_copy_with_the_reason_is_lost_the_peer_still_closes_at_once_with_the_code() {
    let seed = 2402;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    let (c, s) = establish(&mut w);
    w.set_drop_rule(drop_first(1, server(), client(), is_rst));
    let start = w.elapsed();
    w.act(server(), |ep, now| ep.conn_mut(s).abort_with_reason(now, CODE, "bye"));
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(5)), "seed {seed}");
    let (at, why) = w.closed(client(), c).unwrap();
    assert_eq!(why, CloseReason::PeerReset(Some(CODE)), "seed {seed}");
    assert!(at - start <= Duration::from_millis(20), "closed after {:?} (seed {seed})", at - start);
    assert_eq!(w.endpoint(client()).conn(c).peer_close_text(), None, "seed {seed}");
}

#[test]
fn a_reason_longer_than_the_limit_is_cut_on_a_character_boundary_when_sent() {
    let seed = 2403;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    let (c, s) = establish(&mut w);
    // 255 bytes of 'a', then 'é' (2 bytes) would end at 257: it goes whole or not at all.
    let long = format!("{}é{}", "a".repeat(MAX_CLOSE_REASON - 1), "z".repeat(100));
    w.act(server(), |ep, now| ep.conn_mut(s).abort_with_reason(now, CODE, &long));
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(5)), "seed {seed}");
    let got = w.endpoint(client()).conn(c).peer_close_text().expect("a reason").to_string();
    assert_eq!(got, "a".repeat(MAX_CLOSE_REASON - 1), "seed {seed}");
}

/// A RST the server could have sent: its connection id toward the client
/// and a sequence number at its snd.nxt, with `reason` in a REASON chunk.
fn forged_rst(w: &mut manyfold_sim::World, s: manyfold_proto::ConnHandle, reason: &[u8]) -> Vec<u8> {
    w.set_capture(true);
    w.act(server(), |ep, _| ep.conn_mut(s).send(b"x")).unwrap();
    w.run_for(Duration::from_millis(100));
    let h = w.captured().iter().rev().find(|p| p.from == server()).and_then(|p| header(&p.data)).unwrap();
    let mut p = Packet::bare(PacketType::Segment, Flags::RST, h.conn_id, h.seq.wrapping_add(1), 0, 0);
    p.error = Some(CODE);
    let chunk = Chunk::Reason(reason);
    let mut v = vec![0u8; p.len_with(chunk.encoded_len())];
    p.emit_with(&mut v, chunk.encoded_len(), |d| {
        chunk.emit(d);
    });
    v
}

#[test]
fn a_peers_over_long_or_non_utf8_reason_is_dropped_and_counted_and_its_rst_still_closes() {
    for (seed, reason) in [(2404u64, vec![b'x'; MAX_CLOSE_REASON + 1]), (2405, vec![b'o', b'k', 0xff, 0xfe])] {
        let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
        let (c, s) = establish(&mut w);
        let rst = forged_rst(&mut w, s, &reason);
        w.inject(server(), client(), rst);
        assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(1)), "seed {seed}");
        assert_eq!(w.closed(client(), c).unwrap().1, CloseReason::PeerReset(Some(CODE)), "seed {seed}");
        let conn = w.endpoint(client()).conn(c);
        assert_eq!(conn.peer_close_text(), None, "seed {seed}");
        assert_eq!(conn.stats().unwrap().close_texts_dropped, 1, "seed {seed}");
    }
}

#[test]
fn a_reason_of_exactly_the_limit_is_taken() {
    let seed = 2406;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    let (c, s) = establish(&mut w);
    let reason = "é".repeat(MAX_CLOSE_REASON / 2);
    let rst = forged_rst(&mut w, s, reason.as_bytes());
    w.inject(server(), client(), rst);
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(1)), "seed {seed}");
    assert_eq!(w.endpoint(client()).conn(c).peer_close_text(), Some(reason.as_str()), "seed {seed}");
    assert_eq!(w.endpoint(client()).conn(c).stats().unwrap().close_texts_dropped, 0, "seed {seed}");
}
