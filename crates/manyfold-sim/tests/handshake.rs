//! Behaviour of connection establishment: SYN-SENT, the listener's
//! stateless cookie handshake, simultaneous open, refusal, connect timeout,
//! initial sequence numbers and SYN floods (spec §4.2, §4.3, §6).

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use manyfold_proto::wire::{Packet, HEADER_LEN};
use manyfold_proto::{CloseReason, EndpointConfig, Event, State};
use manyfold_sim::{LinkConfig, Transfer, Verdict, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The default configuration with `connect_timeout` of `secs`.
fn with_connect_timeout(secs: u64) -> EndpointConfig {
    let mut cfg = EndpointConfig::default();
    cfg.connection.connect_timeout = Duration::from_secs(secs);
    cfg
}

/// Runs until the listener accepts a connection (at most `max`).
fn accept_within(w: &mut World, max: Duration) -> Option<manyfold_proto::ConnHandle> {
    let mut accepted = None;
    w.run_until(
        |w| {
            accepted = accepted.or_else(|| w.endpoint_mut(server()).accept());
            accepted.is_some()
        },
        max,
    );
    accepted
}

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
    let c = w.connect(client(), server());
    let accepted = accept_within(&mut w, Duration::from_secs(30))
        .unwrap_or_else(|| panic!("server never accepted after a lost cookie echo (seed {seed})"));
    assert_eq!(w.dropped_by_rule(), 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).conn(accepted).state(), Some(State::Established), "seed {seed}");
    // spec §5.4: with nothing waiting behind it the echo keeps to its RTO
    // (a listener slow to answer a request riding in it costs no copies).
    assert_eq!(w.endpoint(client()).conn(c).stats().unwrap().tail_loss_probes, 0, "seed {seed}");
}

#[test]
fn handshake_survives_loss_of_the_syn_and_both_copies_of_its_resend() {
    let seed = 105;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.set_drop_rule(drop_first(3, client(), server(), is_syn));
    w.set_capture(true);
    let t = Transfer::start(&mut w, client(), server(), 1000, 1000);
    let h = t.client_conn();
    t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    // spec §5.5.1: each resend goes twice, back to back, naming its
    // transmission in its parameters (spec §3.3.2): the SYN at 0 s and
    // both at 1 s (transmissions 1 and 2) were dropped, and the capture
    // holds what arrived.
    let syns: Vec<(Duration, u8)> = w
        .captured()
        .iter()
        .filter(|c| c.from == client() && is_syn(&c.data))
        .map(|c| (c.at, Packet::parse(&c.data).ok().and_then(|p| p.params).map_or(0, |p| p.transmission())))
        .collect();
    let s = Duration::from_secs;
    assert_eq!(syns, [(s(3), 3), (s(3), 4)], "seed {seed}");
    // Nothing in their data area: a listener of before the RESENT chunk
    // (kind 9) drops a SYN that carries one, and ignores the bits.
    let areas = w.captured().iter().filter(|c| c.from == client() && is_syn(&c.data)).map(|c| c.data.len());
    assert!(areas.into_iter().all(|len| len == HEADER_LEN + 8), "seed {seed}");
    assert_eq!(w.dropped_by_rule(), 3, "seed {seed}");
    // RTO doubles: the third transmission leaves at 1 s + 2 s.
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
            w.endpoint(client()).conn(a).state() == Some(State::Established)
                && w.endpoint(server()).conn(b).state() == Some(State::Established)
        },
        Duration::from_secs(30),
    );
    assert!(
        ok,
        "simultaneous open did not establish: {:?} / {:?} (seed {seed})",
        w.endpoint(client()).conn(a).state(),
        w.endpoint(server()).conn(b).state()
    );
    assert!(w.saw(client(), a, Event::Connected).is_some(), "seed {seed}");
    assert!(w.saw(server(), b, Event::Connected).is_some(), "seed {seed}");
    assert_eq!(w.endpoint(client()).connection_count(), 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).connection_count(), 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).stats().refused_not_listening, 0, "seed {seed}");

    // Data flows both ways on the connection they share.
    w.act(client(), |ep, _| ep.conn_mut(a).send(b"from a").unwrap());
    w.act(server(), |ep, _| ep.conn_mut(b).send(b"from b").unwrap());
    let mut got = (Vec::new(), Vec::new());
    let ok = w.run_until(
        |w| {
            let mut buf = [0u8; 64];
            if let Ok(Some(n)) = w.endpoint_mut(server()).conn_mut(b).recv(&mut buf) {
                got.0.extend_from_slice(&buf[..n]);
            }
            if let Ok(Some(n)) = w.endpoint_mut(client()).conn_mut(a).recv(&mut buf) {
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
            w.endpoint(client()).conn(a).state() == Some(State::Established)
                && w.endpoint(server()).conn(b).state() == Some(State::Established)
        },
        Duration::from_secs(30),
    );
    assert!(
        ok,
        "{:?} / {:?} (seed {seed})",
        w.endpoint(client()).conn(a).state(),
        w.endpoint(server()).conn(b).state()
    );
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
    assert_eq!(w.endpoint(client()).conn(h).state(), Some(State::Closed));
    assert_eq!(w.endpoint(server()).connection_count(), 0);
    w.act(client(), |ep, _| ep.conn_mut(h).release());
    assert_eq!(w.endpoint(client()).connection_count(), 0, "seed {seed}");
}

#[test]
fn connect_to_a_silent_address_times_out_after_connect_timeout() {
    let seed = 109;
    let cfg = with_connect_timeout(7);
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
    let cfg = with_connect_timeout(4);
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
    p.params = Some(HandshakeParams::new(client_id.max(1), 1400));
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
        p.cookie = Some(Cookie {
            timestamp: 0,
            client_id: rng.gen(),
            client_max_datagram: 1400,
            echo_delay: 0,
            mac: rng.gen(),
        });
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
    // sixth echo. connect_timeout bounds the handshake until the echo is
    // acknowledged (spec §4.7): 60 s here, so that the sixth echo is sent.
    let seed = 116;
    let cfg = with_connect_timeout(60);
    let mut w = pair(seed, LinkConfig::default(), cfg);
    w.set_drop_rule(either(
        drop_first(1, server(), client(), is_syn_ack),
        drop_first(5, client(), server(), is_cookie_echo),
    ));
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
    let mut cfg = with_connect_timeout(90);
    cfg.connection.idle_timeout = Some(Duration::from_secs(30));
    let mut w = World::new(seed);
    w.add_node(client(), cfg);
    let h = w.connect(client(), addr(50));
    assert!(w.run_until(|w| w.closed(client(), h).is_some(), Duration::from_secs(300)), "seed {seed}");
    assert_eq!(w.closed(client(), h), Some((Duration::from_secs(90), CloseReason::ConnectTimeout)), "seed {seed}");
}

/// Simultaneous open between A (client()) and B (server()) in which A's SYN
/// and the first `syn_acks_lost` SYN|ACKs of A are lost. B hears nothing
/// and resends its id-0 SYN at 1 s, which must reach A's connection in
/// SYN-RECEIVED (not the listener path, which would refuse it); A answers
/// it with its SYN|ACK again (spec §4.3). Checks both sides establish one
/// connection with no refusal, and data flows; returns when B connected.
fn simultaneous_open_losing_a_syn_and_syn_acks(seed: u64, syn_acks_lost: u32) -> Duration {
    let (a, b) = (client(), server());
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.set_drop_rule(either(drop_first(1, a, b, is_syn), drop_first(syn_acks_lost, a, b, is_syn_ack)));
    w.set_capture(true);
    let now = w.now();
    let ha = w.endpoint_mut(a).connect(now, b).unwrap();
    let hb = w.endpoint_mut(b).connect(now, a).unwrap();
    let ok = w.run_until(
        |w| {
            w.endpoint(a).conn(ha).state() == Some(State::Established)
                && w.endpoint(b).conn(hb).state() == Some(State::Established)
        },
        Duration::from_secs(30),
    );
    assert!(ok, "{:?} / {:?} (seed {seed})", w.endpoint(a).conn(ha).state(), w.endpoint(b).conn(hb).state());
    assert_eq!(w.dropped_by_rule(), 1 + u64::from(syn_acks_lost), "seed {seed}");
    for node in [a, b] {
        let st = w.endpoint(node).stats();
        let answered = (st.refused_not_listening, st.resets_sent, st.syn_cookies_sent);
        assert_eq!(answered, (0, 0, 0), "{node}: a SYN went to the listener path (seed {seed})");
        assert_eq!(w.endpoint(node).connection_count(), 1, "{node} (seed {seed})");
    }
    let resent_syn = w.captured().iter().filter(|p| p.from == b && is_syn(&p.data)).nth(1);
    assert!(resent_syn.is_some_and(|p| p.at == Duration::from_secs(1)), "B resends its SYN at 1 s (seed {seed})");
    w.act(a, |ep, _| ep.conn_mut(ha).send(b"ping")).unwrap();
    let mut buf = [0u8; 16];
    let ok = w.run_until(
        |w| w.endpoint_mut(b).conn_mut(hb).recv(&mut buf).is_ok_and(|n| n == Some(4)),
        Duration::from_secs(5),
    );
    assert!(ok && &buf[..4] == b"ping", "no data after the open (seed {seed})");
    w.saw(b, hb, Event::Connected).expect("B connected")
}

#[test]
fn simultaneous_open_survives_losing_one_sides_syn_and_its_first_syn_ack() {
    // A's RTO resends its SYN|ACK at 1 s as B resends its SYN: both arrive.
    let connected = simultaneous_open_losing_a_syn_and_syn_acks(119, 1);
    assert_eq!(connected, Duration::from_millis(1010), "seed 119");
}

#[test]
fn syn_resent_to_a_connection_in_syn_received_draws_its_syn_ack_again() {
    // A's RTO resend at 1 s is lost too: only A's answer to B's resent SYN
    // connects B, one round trip later, instead of A's next RTO at 3 s.
    let connected = simultaneous_open_losing_a_syn_and_syn_acks(120, 2);
    assert_eq!(connected, Duration::from_millis(1020), "seed 120");
}

#[test]
fn replayed_cookie_echo_creates_no_second_connection_and_its_request_arrives_once() {
    // spec §6.2: the listener remembers each cookie that created a
    // connection. An attacker (or a late duplicate) replays the echo, with
    // its request, after the first connection was closed and freed.
    let seed = 121;
    let request = b"transfer 100 to account 7\n";
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    w.set_capture(true);
    let c = w.connect(client(), server());
    // Queued before the SYN-ACK arrives: the request and the FIN ride on the echo.
    w.act(client(), |ep, _| {
        ep.conn_mut(c).send(request).unwrap();
        ep.conn_mut(c).close();
    });
    let mut s = None;
    let mut got = Vec::new();
    let ok = w.run_until(
        |w| {
            let ep = w.endpoint_mut(server());
            s = s.or_else(|| ep.accept());
            let Some(s) = s else { return false };
            let mut buf = [0u8; 64];
            loop {
                match ep.conn_mut(s).recv(&mut buf) {
                    Ok(Some(0)) => return true,
                    Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                    _ => return false,
                }
            }
        },
        Duration::from_secs(5),
    );
    assert!(ok, "request not read to its end (seed {seed})");
    assert_eq!(got, request, "seed {seed}");
    let s = s.unwrap();
    w.act(server(), |ep, _| {
        ep.conn_mut(s).close();
        ep.conn_mut(s).release();
    });
    w.act(client(), |ep, _| ep.conn_mut(c).release());
    let freed = w.run_until(|w| w.endpoint(server()).connection_count() == 0, Duration::from_secs(5));
    assert!(freed, "server kept the connection (seed {seed})");

    let echoes: Vec<_> = w.captured().iter().filter(|p| p.from == client() && is_cookie_echo(&p.data)).collect();
    assert_eq!(echoes.len(), 1, "seed {seed}");
    let echo = echoes[0].data.clone();
    let area = manyfold_proto::wire::Packet::parse(&echo).unwrap().data;
    let chunks: Vec<_> = manyfold_proto::wire::chunk::parse_chunks(area).map(Result::unwrap).collect();
    // The request, after the client's first ack-frequency request (spec §5.6).
    let carried = match chunks.as_slice() {
        [manyfold_proto::wire::chunk::Chunk::AckFrequency { .. }, manyfold_proto::wire::chunk::Chunk::Data(d)] => {
            d.data
        }
        other => panic!("the echo carried {other:?}"),
    };
    assert_eq!(carried, request, "the echo carried the request");
    let sent_before = w.node_stats(server()).datagrams_sent;
    w.inject(client(), server(), echo);
    w.run_for(Duration::from_secs(1));

    let ep = w.endpoint_mut(server());
    assert_eq!(ep.accept(), None, "a second connection was accepted (seed {seed})");
    assert_eq!(ep.connection_count(), 0, "seed {seed}");
    let st = *ep.stats();
    assert_eq!((st.connections_accepted, st.cookies_replayed), (1, 1), "{st:?} (seed {seed})");
    let incoming = w.events(server()).iter().filter(|e| e.event == Event::Incoming).count();
    assert_eq!(incoming, 1, "seed {seed}");
    assert_eq!(w.node_stats(server()).datagrams_sent, sent_before, "the replay was answered (seed {seed})");
}

#[test]
fn listener_drops_a_syn_with_client_id_0() {
    // spec §3.5, §6.1: the id the client wants to be addressed by must be
    // nonzero; such a SYN is malformed and draws no SYN-ACK.
    use manyfold_proto::wire::{Flags, HandshakeParams, Packet, PacketType};
    let seed = 122;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    let mut p = Packet::bare(PacketType::Segment, Flags::SYN, 0, 12_345, 0, 65_535);
    p.params = Some(HandshakeParams::new(0, 1400));
    let mut syn = vec![0u8; p.len()];
    p.emit(&mut syn);
    w.inject(client(), server(), syn);
    w.run_for(Duration::from_secs(1));
    let st = *w.endpoint(server()).stats();
    assert_eq!(st.dropped_malformed, 1, "{st:?} (seed {seed})");
    assert_eq!((st.syn_cookies_sent, st.resets_sent), (0, 0), "{st:?} (seed {seed})");
    assert_eq!(w.node_stats(server()).datagrams_sent, 0, "seed {seed}");
    assert_eq!(w.endpoint(server()).connection_count(), 0, "seed {seed}");
}

#[test]
fn full_response_queue_drops_syn_acks_and_counts_them() {
    // 5000 SYNs arrive before the driver polls once: the 4096-entry
    // response queue keeps the first 4096 SYN-ACKs (spec §6.2, §6.5).
    let seed = 123;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    let now = w.now();
    let ep = w.endpoint_mut(server());
    for i in 0..5000u32 {
        let from = std::net::SocketAddr::from(([198, 19, (i >> 8) as u8, i as u8], 5000));
        ep.handle_datagram(now, from, &forged_syn(i + 1, i));
    }
    let st = *ep.stats();
    assert_eq!(st.syn_cookies_sent, 5000, "seed {seed}");
    assert_eq!(st.responses_dropped, 5000 - 4096, "{st:?} (seed {seed})");
    assert_eq!(st.resets_suppressed, 0, "{st:?} (seed {seed})");
    w.flush();
    assert_eq!(w.node_stats(server()).datagrams_sent, 4096, "seed {seed}");
}

/// spec §4.7: the handshake is bounded by `connect_timeout` until the
/// cookie echo is acknowledged, not only until the SYN-ACK. Here every
/// datagram of the listener after its SYN-ACK is lost: the listener makes
/// the connection from the echo, but its acks never arrive. The client
/// gives up at `connect_timeout` (before: only after `max_retransmissions`
/// backed-off RTOs, minutes) and its RST ends the listener's side at once
/// rather than at the idle timeout.
#[test]
fn an_unacknowledged_cookie_echo_ends_at_connect_timeout_and_tells_the_listener() {
    let seed = 124;
    let cfg = with_connect_timeout(7);
    let mut w = pair(seed, LinkConfig::default(), cfg);
    let mut from_server = 0;
    w.set_drop_rule(move |from, _, _| {
        if from != server() {
            return false;
        }
        from_server += 1;
        from_server > 1
    });
    w.endpoint_mut(server()).set_listening(true);
    let h = w.connect(client(), server());
    let mut accepted = None;
    let ok = w.run_until(
        |w| {
            accepted = accepted.or_else(|| w.endpoint_mut(server()).accept());
            w.closed(client(), h).is_some() && accepted.is_some_and(|s| w.closed(server(), s).is_some())
        },
        Duration::from_secs(60),
    );
    assert!(ok, "client closed: {:?}, listener's side: {accepted:?} (seed {seed})", w.closed(client(), h));
    w.saw(client(), h, Event::Connected).unwrap_or_else(|| panic!("no Connected event (seed {seed})"));
    assert_eq!(w.closed(client(), h), Some((Duration::from_secs(7), CloseReason::ConnectTimeout)), "seed {seed}");
    let (at, why) = w.closed(server(), accepted.expect("accepted")).expect("closed");
    assert!(at <= Duration::from_secs(8), "the listener's side lasted until {at:?} ({why:?}) (seed {seed})");
    assert!(matches!(why, CloseReason::PeerReset(_)), "{why:?} (seed {seed})");
}

#[test]
fn a_listener_measures_the_round_trip_not_the_wait_of_a_retransmitted_echo() {
    // spec §3.3.3, §6.2: the echo says how long after the SYN-ACK it went,
    // and the listener takes that off the cookie's age. Two lost echoes
    // (the SYN-ACK lost first, so no RTT sample: resent 1 s, then 2 s
    // later) made the listener's only sample 3 s, its RTO 9 s, and three
    // lost repeats of its reply overran its 15 s stall timeout (RESULTS §32,
    // the soak's "reset by peer (error code 4)"). Now its sample is the
    // path's 20 ms, and its reply's losses are repaired at that pace.
    let seed = 1201;
    let mut w = pair(seed, LinkConfig::with_delay(Duration::from_millis(10)), EndpointConfig::default());
    w.set_drop_rule(either(
        drop_first(1, server(), client(), is_syn_ack),
        drop_first(2, client(), server(), is_cookie_echo),
    ));
    // Then every fourth data packet of the reply is lost.
    let mut t = Transfer::start(&mut w, client(), server(), 1000, 200_000);
    let ok = w.run_until(|w| t.server_conn().is_some() || t.pump(w), Duration::from_secs(30));
    assert!(ok && t.server_conn().is_some(), "never accepted (seed {seed})");
    assert_eq!(w.dropped_by_rule(), 3, "seed {seed}");
    let s = t.server_conn().unwrap();
    let srtt = w.endpoint(server()).conn(s).stats().unwrap().srtt;
    assert!(
        srtt >= Duration::from_millis(15) && srtt <= Duration::from_millis(40),
        "the listener's first sample: {srtt:?}, the path's round trip 20 ms (seed {seed})"
    );
    let mut n = 0u32;
    w.set_drop_rule(move |f, _, d| {
        n += u32::from(f == server() && is_data(d));
        f == server() && is_data(d) && n.is_multiple_of(4)
    });
    let start = w.elapsed();
    let ok = w.run_until(|w| t.pump(w), Duration::from_secs(60));
    assert!(ok && t.error().is_none(), "{:?} (seed {seed})", t.error());
    let took = w.elapsed() - start;
    assert!(took < Duration::from_secs(3), "the reply under loss took {took:?} (seed {seed})");
}

/// The client's connect returns at the SYN-ACK, its bare cookie echo
/// leaves after `echo_delay` and is lost; 200 ms later the application
/// writes. Returns when the listener accepted, from the write, and the
/// client's tail-loss probes.
fn lost_echo_with_a_write_behind_it(seed: u64) -> (Duration, u64) {
    let mut w = pair(seed, LinkConfig::with_delay(Duration::from_millis(50)), EndpointConfig::default());
    w.set_drop_rule(drop_first(1, client(), server(), is_cookie_echo));
    w.endpoint_mut(server()).set_listening(true);
    let c = w.connect(client(), server());
    let ok = w.run_until(|w| w.saw(client(), c, Event::Connected).is_some(), Duration::from_secs(5));
    assert!(ok, "never connected (seed {seed})");
    w.run_for(Duration::from_millis(200));
    assert_eq!(w.dropped_by_rule(), 1, "the bare echo was not sent and lost (seed {seed})");
    w.act(client(), |ep, _| ep.conn_mut(c).send(b"first message")).unwrap();
    let wrote = w.elapsed();
    accept_within(&mut w, Duration::from_secs(10)).unwrap_or_else(|| panic!("never accepted (seed {seed})"));
    let probes = w.endpoint(client()).conn(c).stats().unwrap().tail_loss_probes;
    (w.elapsed() - wrote, probes)
}

#[test]
fn a_lost_cookie_echo_with_data_behind_it_is_probed_once_overdue_not_at_the_rto() {
    // spec §5.4, §6.2: nothing may pass an unacknowledged echo, and after
    // the handshake's one RTT sample (100 ms) its RTO is about 3 RTTs.
    // With data waiting, the echo is overdue at 1.25 SRTT + the ack delay,
    // long past by the write here: it goes again at once, and the listener
    // accepts half a round trip later (the messages lab's first messages
    // waited 300–900 ms after a lost echo, RESULTS §37).
    let seed = 1202;
    let (took, probes) = lost_echo_with_a_write_behind_it(seed);
    assert_eq!(probes, 1, "seed {seed}");
    assert!(
        took <= Duration::from_millis(60),
        "accepted {took:?} after the write; the one-way delay is 50 ms (seed {seed})"
    );
}

/// One handshake over a path of 90–150 ms round trip that loses `loss` of
/// the datagrams each way, with the default 10 s `connect_timeout`. Returns
/// whether it completed: the listener accepted it and the client is still
/// open after the timeout (its cookie echo was acknowledged in time).
fn handshake_through_loss(seed: u64, loss: f64) -> bool {
    let link = LinkConfig::with_delay(Duration::from_millis(45)).jitter(Duration::from_millis(30)).loss(loss);
    let mut w = pair(seed, link, EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    let h = w.connect(client(), server());
    let mut accepted = false;
    w.run_until(
        |w| {
            accepted |= w.endpoint_mut(server()).accept().is_some();
            w.closed(client(), h).is_some()
        },
        Duration::from_secs(11),
    );
    accepted && w.closed(client(), h).is_none()
}

#[test]
fn a_handshake_whose_syn_went_again_still_times_its_cookie_echo() {
    // spec §5.4.2, §5.5.1: the first SYN is lost; its resend goes twice,
    // and the SYN-ACK that answers the first copy echoes it. The client
    // takes its round trip (100 ms) from that, so its lost cookie echo
    // goes again after about 300 ms, not after the 1 s initial RTO.
    let seed = 131;
    let mut w = pair(seed, LinkConfig::with_delay(Duration::from_millis(50)), EndpointConfig::default());
    w.set_drop_rule(either(
        drop_first(1, client(), server(), is_syn),
        drop_first(1, client(), server(), is_cookie_echo),
    ));
    w.endpoint_mut(server()).set_listening(true);
    let h = w.connect(client(), server());
    let accepted = accept_within(&mut w, Duration::from_secs(10));
    assert!(accepted.is_some(), "never accepted (seed {seed})");
    assert_eq!(w.dropped_by_rule(), 2, "seed {seed}");
    let stats = w.endpoint(client()).conn(h).stats().unwrap();
    assert_eq!(stats.min_rtt, Duration::from_millis(100), "the SYN's round trip (seed {seed})");
    // SYN-ACK at 1.1 s, the echo lost, its resend at about 1.1 + 0.3 s.
    let at = w.elapsed();
    assert!(at < Duration::from_millis(1600), "accepted at {at:?} (seed {seed})");
}

#[test]
fn handshakes_through_ten_percent_loss_each_way_complete_within_connect_timeout() {
    // spec §4.2, §5.4.2, §5.5.1: at 10% loss each way a SYN's round trip
    // fails one time in five. Four SYNs fit in 10 s (0, 1, 3, 7 s), and
    // one answered by a resent SYN had, by Karn's rule, no round-trip
    // sample, so its cookie echo kept to the 1 s initial RTO: sent once
    // each, 42 of 30,000 handshakes failed (RESULTS §45).
    // HANDSHAKES and HANDSHAKE_LOSS change the count and the loss, for
    // RESULTS' figures.
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
    let (n, loss): (u64, f64) = (env("HANDSHAKES").unwrap_or(10_000.0) as u64, env("HANDSHAKE_LOSS").unwrap_or(0.10));
    let failed: Vec<u64> = (0..n).map(|i| 7_000 + i).filter(|&seed| !handshake_through_loss(seed, loss)).collect();
    eprintln!("{} of {n} handshakes missed connect_timeout: seeds {failed:?}", failed.len());
    assert!(failed.is_empty(), "{} of {n} handshakes missed connect_timeout: seeds {failed:?}", failed.len());
}
