//! Protected connections (spec §19): a Noise XX handshake (psk3 with a
//! pre-shared key) inside the connection handshake, then every packet
//! encrypted and authenticated. Data arrives intact under loss, nothing
//! readable crosses the wire, strangers and plain peers are refused on both
//! sides, and forged, replayed or plain packets change nothing.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use manyfold_proto::secure::public_key;
use manyfold_proto::wire::{Header, PacketType};
use manyfold_proto::{CloseReason, EndpointConfig, SecurityConfig, State};
use manyfold_sim::{LinkConfig, Transfer, World};

const MB: u64 = 1 << 20;

fn psk(b: u8) -> EndpointConfig {
    EndpointConfig { security: Some(SecurityConfig { psk: Some([b; 32]), ..Default::default() }), ..Default::default() }
}

/// Static key `me`, accepting the peers whose private keys are `peers`.
fn keyed(me: u8, peers: &[u8]) -> EndpointConfig {
    let security = SecurityConfig {
        psk: None,
        private_key: Some([me; 32]),
        known_peers: peers.iter().map(|&p| public_key(&[p; 32])).collect(),
    };
    EndpointConfig { security: Some(security), ..Default::default() }
}

fn world(seed: u64, link: LinkConfig, client_cfg: EndpointConfig, server_cfg: EndpointConfig) -> World {
    let mut w = World::new(seed);
    w.add_node(client(), client_cfg);
    w.add_node(server(), server_cfg);
    w.set_link(client(), server(), link);
    w
}

/// Connects client -> server and runs until the client's connection
/// settles (established and connected, or closed); returns how it ended.
fn try_connect(w: &mut World) -> (State, Option<CloseReason>) {
    w.endpoint_mut(server()).set_listening(true);
    let c = w.connect(client(), server());
    w.run_until(|w| w.endpoint(client()).conn(c).state() == Some(State::Closed), Duration::from_secs(15));
    w.run_for(Duration::from_millis(200));
    let ep = w.endpoint(client());
    (ep.conn(c).state().expect("unreleased"), ep.conn(c).close_reason())
}

#[test]
fn a_transfer_between_psk_endpoints_arrives_intact_under_loss_and_nothing_readable_crosses_the_wire() {
    let seed = 301;
    let mut w = world(seed, faulty(0.05), psk(7), psk(7));
    w.set_capture(true);
    let t = Transfer::start(&mut w, client(), server(), 2 * MB, MB / 2);
    let c = t.client_conn();
    let r = t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.client_close, Some(CloseReason::Graceful), "seed {seed}");
    assert!(r.client.retransmissions > 0, "loss exercised (seed {seed})");
    assert!(w.endpoint(client()).conn(c).is_protected(), "seed {seed}");

    // Past the handshake, every datagram is protected; no plain one carries data.
    let mut protected = 0;
    for d in w.captured() {
        let Ok(h) = Header::parse(&d.data) else { continue }; // corrupted by the link
        if h.ptype == PacketType::Protected {
            protected += 1;
        } else if let Ok(p) = manyfold_proto::wire::Packet::parse(&d.data) {
            let chunks = chunks(&d.data);
            assert!(
                chunks.iter().all(|c| matches!(c, manyfold_proto::wire::chunk::Chunk::Handshake(_))),
                "a plain packet carried {chunks:?}: {:?} (seed {seed})",
                p.header
            );
        }
    }
    assert!(protected > 1500, "{protected} protected datagrams (seed {seed})");
    // The same transfer in the clear shows its data on the wire; protected, none of it.
    let probe = plaintext_sample(seed);
    for d in w.captured() {
        assert!(!d.data.windows(probe.len()).any(|win| win == probe), "plaintext on the wire (seed {seed})");
    }
}

/// 32 bytes of the data a plain transfer with this seed sends, as its
/// first full data packet carries them on the wire.
fn plaintext_sample(seed: u64) -> Vec<u8> {
    let mut w = world(
        seed,
        LinkConfig::with_delay(Duration::from_millis(10)),
        EndpointConfig::default(),
        EndpointConfig::default(),
    );
    w.set_capture(true);
    let t = Transfer::start(&mut w, client(), server(), 256 << 10, 0);
    t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    let sample = w
        .captured()
        .iter()
        .filter(|c| c.from == client())
        .flat_map(|c| data_chunks(&c.data).into_iter().map(|d| d.data.to_vec()).collect::<Vec<_>>())
        .find(|d| d.len() >= 1000)
        .expect("a full data chunk");
    assert!(w.captured().iter().any(|c| c.data.windows(32).any(|win| win == &sample[500..532])));
    sample[500..532].to_vec()
}

#[test]
fn known_static_keys_authenticate_both_ways_and_each_side_learns_the_others_key() {
    let seed = 302;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), keyed(1, &[2]), keyed(2, &[1]));
    let t = Transfer::start(&mut w, client(), server(), MB, MB);
    let c = t.client_conn();
    let mut t = t;
    assert!(w.run_until(|w| t.pump(w), Duration::from_secs(60)), "seed {seed}");
    let s = t.server_conn().expect("accepted");
    assert_eq!(w.endpoint(client()).conn(c).peer_key(), Some(public_key(&[2; 32])), "seed {seed}");
    assert_eq!(w.endpoint(server()).conn(s).peer_key(), Some(public_key(&[1; 32])), "seed {seed}");
}

#[test]
fn a_client_outside_the_servers_known_peers_is_refused_and_never_accepted() {
    let seed = 303;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), keyed(3, &[2]), keyed(2, &[1]));
    let (state, why) = try_connect(&mut w);
    assert_eq!((state, why), (State::Closed, Some(CloseReason::AuthenticationFailed)), "seed {seed}");
    assert!(w.endpoint_mut(server()).accept().is_none(), "an unknown peer reached accept() (seed {seed})");
    w.run_for(Duration::from_secs(15));
    assert_eq!(w.endpoint(server()).connection_count(), 0, "the refused attempt left no state (seed {seed})");
    let st = w.endpoint(server()).stats();
    assert_eq!((st.handshakes_failed, st.handshakes_abandoned), (1, 0), "the listener counts it (seed {seed})");
}

#[test]
fn a_server_outside_the_clients_known_peers_is_refused() {
    let seed = 304;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), keyed(1, &[9]), keyed(2, &[1]));
    let (state, why) = try_connect(&mut w);
    assert_eq!((state, why), (State::Closed, Some(CloseReason::AuthenticationFailed)), "seed {seed}");
    assert!(w.endpoint_mut(server()).accept().is_none(), "seed {seed}");
}

#[test]
fn different_pre_shared_keys_fail_authentication() {
    let seed = 305;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), psk(1), psk(2));
    let (state, why) = try_connect(&mut w);
    assert_eq!((state, why), (State::Closed, Some(CloseReason::AuthenticationFailed)), "seed {seed}");
    assert!(w.endpoint_mut(server()).accept().is_none(), "seed {seed}");
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.endpoint(server()).stats().handshakes_failed, 1, "seed {seed}");
}

#[test]
fn plain_and_protected_endpoints_refuse_each_other_both_ways() {
    for (seed, client_cfg, server_cfg) in
        [(306, EndpointConfig::default(), psk(1)), (307, psk(1), EndpointConfig::default())]
    {
        let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), client_cfg, server_cfg);
        let (state, why) = try_connect(&mut w);
        assert_eq!((state, why), (State::Closed, Some(CloseReason::ProtectionMismatch)), "seed {seed}");
        assert_eq!(w.endpoint(server()).stats().refused_protection, 1, "seed {seed}");
        assert!(w.endpoint_mut(server()).accept().is_none(), "seed {seed}");
    }
}

#[test]
fn forged_replayed_and_plain_packets_change_nothing() {
    let seed = 308;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), psk(4), psk(4));
    w.set_capture(true);
    let mut t = Transfer::start(&mut w, client(), server(), 2 * MB, 0);
    let mut next = 0;
    let mut replayed = std::collections::HashSet::new();
    let deadline = Duration::from_secs(120);
    while !t.pump(&mut w) {
        assert!(w.elapsed() < deadline, "unfinished: {:?} (seed {seed})", t.progress());
        let mut inject: Vec<(SocketAddr, SocketAddr, Vec<u8>)> = Vec::new();
        for c in &w.captured()[next..] {
            next += 1;
            let protected = Header::parse(&c.data).is_ok_and(|h| h.ptype == PacketType::Protected);
            if !protected || !replayed.insert(c.data.clone()) {
                continue;
            }
            // The same packet again, then with one byte changed (CRC fixed
            // up, so only the AEAD can tell), then its payload sent in the clear.
            inject.push((c.from, c.to, c.data.clone()));
            let mut forged = c.data.clone();
            let at = 24 + (next % (forged.len() - 24));
            forged[at] ^= 0x01;
            manyfold_proto::wire::seal(&mut forged);
            inject.push((c.from, c.to, forged));
            let mut plain = c.data.clone();
            plain[0] = (plain[0] & 0xf0) | PacketType::Segment as u8;
            manyfold_proto::wire::seal(&mut plain);
            inject.push((c.from, c.to, plain));
        }
        for (from, to, d) in inject {
            w.inject(from, to, d);
        }
        w.run_for(Duration::from_millis(1));
    }
    assert!(t.error().is_none(), "{:?} (seed {seed})", t.error());
    let s = *w.endpoint(server()).stats();
    assert!(s.dropped_replayed > 500, "{s:?} (seed {seed})");
    assert!(s.dropped_unauthenticated > 500, "{s:?} (seed {seed})");
    // The plain copies either failed to parse or were refused in the clear.
    let conn = w.endpoint(server()).conn(t.server_conn().expect("accepted")).stats().expect("server");
    assert!(conn.dropped_unprotected + s.dropped_malformed_total() > 500, "{conn:?} {s:?} (seed {seed})");
}

#[test]
fn a_client_that_never_finishes_its_handshake_is_dropped_without_reaching_accept() {
    let seed = 309;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), psk(5), psk(5));
    w.endpoint_mut(server()).set_listening(true);
    // Drop every packet the client sends after its cookie echo: the
    // listener holds a connection that never proves its peer.
    let mut echoes = 0;
    w.set_drop_rule(move |from, _, d| {
        if from != client() {
            return false;
        }
        if is_cookie_echo(d) && echoes == 0 {
            echoes += 1;
            return false;
        }
        echoes > 0
    });
    let _c = w.connect(client(), server());
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.endpoint(server()).connection_count(), 1, "the echo made a connection (seed {seed})");
    assert!(w.endpoint_mut(server()).accept().is_none(), "seed {seed}");
    w.run_for(Duration::from_secs(12));
    assert_eq!(w.endpoint(server()).connection_count(), 0, "connect_timeout freed it (seed {seed})");
    assert!(w.events(server()).is_empty(), "the application heard of it: {:?} (seed {seed})", w.events(server()));
    let st = w.endpoint(server()).stats();
    assert_eq!((st.handshakes_failed, st.handshakes_abandoned), (0, 1), "counted as abandoned (seed {seed})");
}

/// A plain packet with the header fields of a protected one (visible on the
/// wire), the given flags, and optionally an empty HANDSHAKE chunk.
fn plain_like(protected: &[u8], flags: manyfold_proto::wire::Flags, handshake: bool) -> Vec<u8> {
    use manyfold_proto::wire::chunk::Chunk;
    use manyfold_proto::wire::Packet;
    let h = Header::parse(protected).expect("captured intact");
    let mut area = Vec::new();
    if handshake {
        let c: Chunk<&[u8]> = Chunk::Handshake(&[]);
        area = vec![0u8; c.encoded_len()];
        c.emit(&mut area);
    }
    let mut p = Packet::bare(PacketType::Segment, flags, h.conn_id, h.seq, h.ack, h.window);
    p.data = &area;
    let mut v = vec![0u8; p.len()];
    p.emit(&mut v);
    v
}

#[test]
fn plain_packets_with_the_real_ids_and_numbers_cannot_end_truncate_or_ack_a_protected_connection() {
    use manyfold_proto::wire::Flags;
    let seed = 310;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), psk(6), psk(6));
    w.set_capture(true);
    let mut t = Transfer::start(&mut w, client(), server(), 2 * MB, MB / 4);
    let c = t.client_conn();
    let mut next = 0;
    let deadline = Duration::from_secs(120);
    // An on-path attacker copies each protected packet's clear header into
    // plain packets: a RST, a FIN, an ack of everything, each also dressed
    // as a handshake packet; all sent right behind the original.
    while !t.pump(&mut w) {
        assert!(w.elapsed() < deadline, "unfinished: {:?} (seed {seed})", t.progress());
        let mut inject = Vec::new();
        for cap in &w.captured()[next..] {
            next += 1;
            if !Header::parse(&cap.data).is_ok_and(|h| h.ptype == PacketType::Protected) {
                continue;
            }
            for flags in [Flags::RST, Flags::ACK | Flags::FIN, Flags::ACK] {
                for handshake in [false, true] {
                    inject.push((cap.from, cap.to, plain_like(&cap.data, flags, handshake)));
                }
            }
        }
        for (from, to, d) in inject {
            w.inject(from, to, d);
        }
        w.run_for(Duration::from_millis(1));
    }
    assert!(t.error().is_none(), "{:?} (seed {seed})", t.error());
    let s = t.server_conn().expect("accepted");
    let dropped = w.endpoint(server()).conn(s).stats().expect("server").dropped_unprotected
        + w.endpoint(client()).conn(c).stats().expect("client").dropped_unprotected;
    assert!(dropped > 5000, "{dropped} forgeries dropped (seed {seed})");
    let r = t.run(&mut w, Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((r.client_close, r.server_close), (Some(CloseReason::Graceful), Some(CloseReason::Graceful)));
}

#[test]
fn a_client_whose_handshake_never_completes_gives_up_after_connect_timeout() {
    let seed = 311;
    let mut w = world(seed, LinkConfig::with_delay(Duration::from_millis(10)), psk(3), psk(3));
    w.endpoint_mut(server()).set_listening(true);
    // Everything the listener sends after its SYN-ACK is lost: message 2 never arrives.
    let mut syn_acks = 0;
    w.set_drop_rule(move |from, _, d| {
        if from != server() {
            return false;
        }
        if is_syn_ack(d) && syn_acks == 0 {
            syn_acks += 1;
            return false;
        }
        true
    });
    let c = w.connect(client(), server());
    let closed = w.run_until(|w| w.endpoint(client()).conn(c).state() == Some(State::Closed), Duration::from_secs(30));
    assert!(closed, "seed {seed}");
    let (at, why) = w.closed(client(), c).expect("closed");
    assert_eq!(why, CloseReason::ConnectTimeout, "seed {seed}");
    assert!(at <= Duration::from_secs(11), "gave up only at {at:?} (seed {seed})");
    assert!(w.saw(client(), c, manyfold_proto::Event::Connected).is_none(), "never connected (seed {seed})");
}
