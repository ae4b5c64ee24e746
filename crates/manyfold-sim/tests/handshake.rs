//! Behaviour of connection establishment: SYN-SENT, the listener's
//! stateless cookie handshake, simultaneous open, refusal, connect timeout,
//! initial sequence numbers and SYN floods (spec §4.2, §4.3, §6).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use manyfold_proto::{CloseReason, EndpointConfig, Event, State};
use manyfold_sim::{LinkConfig, Transfer, Verdict, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Drops the first handshake packet matching `pred` (sent `from` -> `to`)
/// and checks a small transfer both ways still completes.
fn handshake_survives_losing(
    seed: u64,
    from: std::net::SocketAddr,
    to: std::net::SocketAddr,
    pred: fn(&[u8]) -> bool,
) -> Duration {
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.set_drop_rule(drop_first(1, from, to, pred));
    let t = Transfer::start(&mut w, client(), server(), 20_000, 20_000);
    let h = t.client_conn();
    let report = t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.dropped_by_rule(), 1, "the packet was never sent (seed {seed})");
    assert_eq!(report.client_close, Some(CloseReason::Graceful), "seed {seed}");
    w.saw(client(), h, Event::Connected).unwrap_or_else(|| panic!("no Connected event (seed {seed})"))
}

#[test]
fn handshake_survives_loss_of_the_syn() {
    let connected = handshake_survives_losing(101, client(), server(), is_syn);
    // The SYN is resent after the initial RTO (1 s).
    assert!(connected >= Duration::from_secs(1), "connected at {connected:?} (seed 101)");
}

#[test]
fn handshake_survives_loss_of_the_syn_ack() {
    let connected = handshake_survives_losing(102, server(), client(), is_syn_ack);
    assert!(connected >= Duration::from_secs(1), "connected at {connected:?} (seed 102)");
}

#[test]
fn handshake_survives_loss_of_the_cookie_echo() {
    handshake_survives_losing(103, client(), server(), is_cookie_echo);
}

#[test]
fn lost_bare_cookie_echo_is_resent_until_the_server_accepts() {
    // The client has nothing to send: only the echo's own retransmission
    // can complete the server's side.
    let seed = 104;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.set_drop_rule(drop_first(1, client(), server(), is_cookie_echo));
    w.endpoint_mut(server()).set_listening(true);
    w.connect(client(), server());
    let mut accepted = None;
    let ok = w.run_until(
        |w| {
            accepted = accepted.or_else(|| w.endpoint_mut(server()).accept());
            accepted.is_some()
        },
        Duration::from_secs(30),
    );
    assert!(ok, "server never accepted after a lost cookie echo (seed {seed})");
    assert_eq!(w.dropped_by_rule(), 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).state(accepted.unwrap()), Some(State::Established), "seed {seed}");
}

#[test]
fn handshake_survives_loss_of_the_first_two_syns() {
    let seed = 105;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.set_drop_rule(drop_first(2, client(), server(), is_syn));
    let t = Transfer::start(&mut w, client(), server(), 1000, 1000);
    let h = t.client_conn();
    t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    // RTO doubles: the third SYN leaves at 1 s + 2 s.
    let connected = w.saw(client(), h, Event::Connected).unwrap();
    assert!(connected >= Duration::from_secs(3), "connected at {connected:?} (seed {seed})");
}

#[test]
fn simultaneous_open_establishes_both_sides() {
    let seed = 106;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    let now = w.now();
    let a = w.endpoint_mut(client()).connect(now, server()).unwrap();
    let b = w.endpoint_mut(server()).connect(now, client()).unwrap();
    let ok = w.run_until(
        |w| {
            w.endpoint(client()).state(a) == Some(State::Established)
                && w.endpoint(server()).state(b) == Some(State::Established)
        },
        Duration::from_secs(30),
    );
    assert!(
        ok,
        "simultaneous open did not establish: {:?} / {:?} (seed {seed})",
        w.endpoint(client()).state(a),
        w.endpoint(server()).state(b)
    );
    assert!(w.saw(client(), a, Event::Connected).is_some(), "seed {seed}");
    assert!(w.saw(server(), b, Event::Connected).is_some(), "seed {seed}");
    assert_eq!(w.endpoint(client()).connection_count(), 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).connection_count(), 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).stats().refused_not_listening, 0, "seed {seed}");

    // Data flows both ways on the connection they share.
    w.act(client(), |ep, _| ep.send(a, b"from a").unwrap());
    w.act(server(), |ep, _| ep.send(b, b"from b").unwrap());
    let mut got = (Vec::new(), Vec::new());
    let ok = w.run_until(
        |w| {
            let mut buf = [0u8; 64];
            if let Ok(Some(n)) = w.endpoint_mut(server()).recv(b, &mut buf) {
                got.0.extend_from_slice(&buf[..n]);
            }
            if let Ok(Some(n)) = w.endpoint_mut(client()).recv(a, &mut buf) {
                got.1.extend_from_slice(&buf[..n]);
            }
            got.0 == b"from a" && got.1 == b"from b"
        },
        Duration::from_secs(10),
    );
    assert!(ok, "data after simultaneous open: {got:?} (seed {seed})");
}

#[test]
fn simultaneous_open_survives_a_lost_syn() {
    let seed = 107;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.set_drop_rule(drop_first(1, client(), server(), is_syn));
    let now = w.now();
    let a = w.endpoint_mut(client()).connect(now, server()).unwrap();
    let b = w.endpoint_mut(server()).connect(now, client()).unwrap();
    let ok = w.run_until(
        |w| {
            w.endpoint(client()).state(a) == Some(State::Established)
                && w.endpoint(server()).state(b) == Some(State::Established)
        },
        Duration::from_secs(30),
    );
    assert!(ok, "{:?} / {:?} (seed {seed})", w.endpoint(client()).state(a), w.endpoint(server()).state(b));
}

#[test]
fn connect_to_a_non_listening_endpoint_is_refused() {
    let seed = 108;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    let h = w.connect(client(), server());
    let ok = w.run_until(|w| w.closed(client(), h).is_some(), Duration::from_secs(5));
    assert!(ok, "no answer to a SYN to a non-listener (seed {seed})");
    let (at, why) = w.closed(client(), h).unwrap();
    assert_eq!(why, CloseReason::Refused, "seed {seed}");
    assert_eq!(at, Duration::from_millis(20), "refused after one round trip (seed {seed})");
    assert_eq!(w.endpoint(client()).state(h), Some(State::Closed));
    assert_eq!(w.endpoint(server()).connection_count(), 0);
    w.act(client(), |ep, _| ep.release(h));
    assert_eq!(w.endpoint(client()).connection_count(), 0, "seed {seed}");
}

#[test]
fn connect_to_a_silent_address_times_out_after_connect_timeout() {
    let seed = 109;
    let mut cfg = EndpointConfig::default();
    cfg.connection.connect_timeout = Duration::from_secs(7);
    let mut w = World::new(seed);
    w.add_node(client(), cfg);
    // Nothing sits at addr(50): every SYN vanishes.
    let h = w.connect(client(), addr(50));
    let ok = w.run_until(|w| w.closed(client(), h).is_some(), Duration::from_secs(60));
    assert!(ok, "connect never gave up (seed {seed})");
    let (at, why) = w.closed(client(), h).unwrap();
    assert_eq!(why, CloseReason::ConnectTimeout, "seed {seed}");
    assert_eq!(at, Duration::from_secs(7), "seed {seed}");
    assert!(w.unroutable() >= 3, "SYN was retransmitted: {} sent (seed {seed})", w.unroutable());
}

#[test]
fn connect_through_a_dead_link_times_out() {
    let seed = 110;
    let mut cfg = EndpointConfig::default();
    cfg.connection.connect_timeout = Duration::from_secs(4);
    let mut w = pair(seed, LinkConfig::blackhole(), cfg);
    w.endpoint_mut(server()).set_listening(true);
    let h = w.connect(client(), server());
    assert!(w.run_until(|w| w.closed(client(), h).is_some(), Duration::from_secs(60)), "seed {seed}");
    assert_eq!(w.closed(client(), h), Some((Duration::from_secs(4), CloseReason::ConnectTimeout)), "seed {seed}");
}

/// Sequence numbers of the SYNs (or SYN-ACKs) captured on the wire.
fn captured_seqs(w: &World, pred: fn(&[u8]) -> bool) -> Vec<u32> {
    w.captured().iter().filter(|c| pred(&c.data)).filter_map(|c| header(&c.data)).map(|h| h.seq).collect()
}

fn assert_unpredictable(what: &str, seqs: &[u32], seed: u64) {
    let distinct: HashSet<_> = seqs.iter().collect();
    assert_eq!(distinct.len(), seqs.len(), "{what}: repeated initial sequence numbers (seed {seed}): {seqs:?}");
    let diffs: HashSet<u32> = seqs.windows(2).map(|p| p[1].wrapping_sub(p[0])).collect();
    assert!(diffs.len() > seqs.len() * 9 / 10, "{what}: sequence numbers step predictably (seed {seed}): {seqs:?}");
    // Spread over the whole 32-bit space, not a small counter.
    let high_bits: HashSet<u32> = seqs.iter().map(|s| s >> 28).collect();
    assert!(high_bits.len() >= 8, "{what}: initial sequence numbers cluster (seed {seed}): {seqs:?}");
}

#[test]
fn initial_sequence_numbers_differ_unpredictably_across_connections() {
    let seed = 111;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    w.set_capture(true);
    for _ in 0..100 {
        w.connect(client(), server());
        w.run_for(Duration::from_millis(1));
    }
    w.run_for(Duration::from_secs(1));
    let syns = captured_seqs(&w, is_syn);
    let syn_acks = captured_seqs(&w, is_syn_ack);
    assert_eq!(syns.len(), 100, "seed {seed}");
    assert_eq!(syn_acks.len(), 100, "seed {seed}");
    assert_unpredictable("client ISNs", &syns, seed);
    assert_unpredictable("server ISNs", &syn_acks, seed);
    assert_eq!(w.endpoint(server()).stats().connections_accepted, 100, "seed {seed}");
}

#[test]
fn initial_sequence_numbers_differ_between_endpoints_connecting_at_once() {
    // Many clients, one SYN each, all at the same instant, to one server.
    let seed = 112;
    let mut w = World::new(seed);
    w.add_node(server(), EndpointConfig::default());
    w.set_capture(true);
    let clients: Vec<_> = (10..60).map(addr).collect();
    for &c in &clients {
        w.add_node(c, EndpointConfig::default());
    }
    for &c in &clients {
        w.connect(c, server());
    }
    w.run_for(Duration::from_millis(1));
    let syns = captured_seqs(&w, is_syn);
    assert_eq!(syns.len(), clients.len());
    assert_unpredictable("ISNs of distinct endpoints", &syns, seed);
}

#[test]
fn syn_flood_leaves_no_state_and_a_legitimate_client_still_connects() {
    let seed = 113;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut transfer = None;
    let mut max_conns = 0;
    let mut flooded = 0u64;
    // 20 SYNs per millisecond from random addresses for 2 s; the real
    // client connects half a second in.
    for ms in 0..2000u32 {
        for _ in 0..20 {
            let from = std::net::SocketAddr::from(([198, 19, rng.gen(), rng.gen()], rng.gen_range(1024..65535)));
            let syn = forged_syn(rng.gen(), rng.gen());
            w.inject(from, server(), syn);
            flooded += 1;
        }
        if ms == 500 {
            transfer = Some(Transfer::start(&mut w, client(), server(), 100_000, 100_000));
        }
        if let Some(t) = transfer.as_mut() {
            t.pump(&mut w);
        }
        w.run_for(Duration::from_millis(1));
        max_conns = max_conns.max(w.endpoint(server()).connection_count());
    }
    let t = transfer.expect("started");
    assert!(t.error().is_none(), "{:?} (seed {seed})", t.error());
    let report = t.run(&mut w, Duration::from_secs(30)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.client_close, Some(CloseReason::Graceful), "seed {seed}");
    assert!(max_conns <= 1, "flood created state: {max_conns} connections (seed {seed})");
    let stats = *w.endpoint(server()).stats();
    assert_eq!(stats.connections_accepted, 1, "seed {seed}");
    assert!(stats.syn_cookies_sent >= flooded, "{stats:?} (seed {seed})");
}

/// An initial SYN with the given client id and ISN, as an attacker forges it.
fn forged_syn(client_id: u32, isn: u32) -> Vec<u8> {
    use manyfold_proto::wire::{Flags, HandshakeParams, Packet, PacketType};
    let mut p = Packet::bare(PacketType::Segment, Flags::SYN, 0, isn, 0, 65_535);
    p.params = Some(HandshakeParams { conn_id: client_id.max(1), max_datagram: 1400 });
    let mut v = vec![0u8; p.len()];
    p.emit(&mut v);
    v
}

#[test]
fn forged_cookie_echo_creates_no_connection() {
    // A blind attacker echoes a cookie it made up.
    use manyfold_proto::wire::{Cookie, Flags, Packet, PacketType};
    let seed = 114;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..1000 {
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, rng.gen::<u32>() | 1, rng.gen(), rng.gen(), 65_535);
        p.cookie = Some(Cookie { timestamp: 0, client_id: rng.gen(), client_max_datagram: 1400, mac: rng.gen() });
        let mut v = vec![0u8; p.len()];
        p.emit(&mut v);
        w.inject(addr(300), server(), v);
    }
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.endpoint(server()).connection_count(), 0, "seed {seed}");
    assert_eq!(w.endpoint(server()).stats().cookies_rejected, 1000, "seed {seed}");
}

#[test]
fn handshake_survives_a_lost_cookie_echo_and_a_duplicated_syn_ack() {
    // The duplicate SYN-ACK makes the client acknowledge again while the
    // server still holds no state for it.
    let seed = 115;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.set_link_one_way(server(), client(), LinkConfig::default().duplicate(1.0));
    w.set_drop_rule(drop_first(1, client(), server(), is_cookie_echo));
    let t = Transfer::start(&mut w, client(), server(), 20_000, 20_000);
    let report = t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.client_close, Some(CloseReason::Graceful), "seed {seed}");
}

#[test]
fn handshake_survives_five_lost_cookie_echoes_after_a_lost_syn_ack() {
    // With the first SYN-ACK lost there is no RTT sample (Karn), so the echo
    // is resent 1, 2, 4, 8 s apart and the 15 s keep-alive comes before the
    // sixth echo.
    let seed = 116;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    let mut syn_ack = drop_first(1, server(), client(), is_syn_ack);
    let mut echoes = drop_first(5, client(), server(), is_cookie_echo);
    w.set_drop_rule(move |f, t, d| syn_ack(f, t, d) || echoes(f, t, d));
    let t = Transfer::start(&mut w, client(), server(), 20_000, 20_000);
    let report = t.run(&mut w, Duration::from_secs(300)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.dropped_by_rule(), 6, "seed {seed}");
    assert_eq!(report.client_close, Some(CloseReason::Graceful), "seed {seed}");
}

#[test]
fn handshake_survives_a_duplicated_syn() {
    let seed = 117;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    // The SYN arrives twice, and the cookie echo is held back 5 ms so
    // the client's answer to the second SYN-ACK overtakes it.
    w.set_link_one_way(client(), server(), LinkConfig::default().duplicate(1.0));
    w.set_rule(|_, _, d| if is_cookie_echo(d) { Verdict::Delay(Duration::from_millis(5)) } else { Verdict::Pass });
    let t = Transfer::start(&mut w, client(), server(), 20_000, 20_000);
    let report = t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.client_close, Some(CloseReason::Graceful), "seed {seed}");
}

#[test]
fn connect_timeout_governs_the_handshake_even_when_longer_than_idle_timeout() {
    let seed = 118;
    let mut cfg = EndpointConfig::default();
    cfg.connection.connect_timeout = Duration::from_secs(90);
    cfg.connection.idle_timeout = Some(Duration::from_secs(30));
    let mut w = World::new(seed);
    w.add_node(client(), cfg);
    let h = w.connect(client(), addr(50));
    assert!(w.run_until(|w| w.closed(client(), h).is_some(), Duration::from_secs(300)), "seed {seed}");
    assert_eq!(w.closed(client(), h), Some((Duration::from_secs(90), CloseReason::ConnectTimeout)), "seed {seed}");
}
