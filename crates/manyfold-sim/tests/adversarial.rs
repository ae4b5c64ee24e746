//! Behaviour under hostile peers and off-path attackers (issue 10, spec
//! §6.4–§6.6, §7.3): injected packets with guessed connection ids and
//! sequence numbers, replayed packets, a spoofed-SYN flood while several
//! clients connect, a peer that never reads, a host that opens too many
//! connections, and answers to unvalidated addresses bounded at 3×.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use manyfold_proto::wire::{ErrorCode, Flags, HandshakeParams, Packet, PacketType};
use manyfold_proto::{CloseReason, ConnHandle, EndpointConfig, State};
use manyfold_sim::{LinkConfig, Sink, Source, Transfer, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MB: u64 = 1 << 20;

fn emit(p: &Packet) -> Vec<u8> {
    let mut v = vec![0u8; p.len()];
    p.emit(&mut v);
    v
}

/// A data segment as a blind attacker forges it: some id, some sequence
/// number, bytes of stream 0 at some offset.
fn forged_data(rng: &mut ChaCha8Rng, conn_id: u32) -> Vec<u8> {
    use manyfold_proto::wire::chunk::{data_flags, Chunk, DataChunk};
    let payload: Vec<u8> = (0..rng.gen_range(1..600)).map(|_| rng.gen()).collect();
    let chunk = Chunk::Data(DataChunk {
        stream: manyfold_proto::StreamId::BYTES,
        flags: if rng.gen_bool(0.1) { data_flags::FIN } else { 0 },
        offset: rng.gen_range(0..4 * MB),
        in_msg: 0,
        data: &payload[..],
        msg: 0,
    });
    let mut area = vec![0u8; chunk.encoded_len()];
    chunk.emit(&mut area);
    let mut p = Packet::bare(PacketType::Segment, Flags::ACK, conn_id, rng.gen(), rng.gen(), rng.gen());
    p.data = &area;
    emit(&p)
}

/// 10 ms each way at 20 Mbit/s: a 3 MB exchange lasts over a second.
fn paced() -> LinkConfig {
    LinkConfig::with_delay(Duration::from_millis(10)).rate(20_000_000, 256 << 10)
}

/// Runs `t` to its end (data verified, both sides closed) within `max`,
/// calling `each_ms` once per millisecond of virtual time.
fn run_with(w: &mut World, t: &mut Transfer, max: Duration, mut each_ms: impl FnMut(&mut World)) {
    let seed = w.seed();
    let deadline = w.elapsed() + max;
    while !t.pump(w) {
        assert!(w.elapsed() < deadline, "transfer unfinished: {:?} (seed {seed})", t.progress());
        each_ms(w);
        w.run_for(Duration::from_millis(1));
    }
    assert!(t.error().is_none(), "{:?} (seed {seed})", t.error());
}

#[test]
fn injected_packets_with_guessed_ids_and_sequence_numbers_change_nothing() {
    let seed = 191;
    let mut w = pair(seed, paced(), EndpointConfig::default());
    w.set_capture(true);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t = Transfer::start(&mut w, client(), server(), 2 * MB, MB);
    let mut injected = 0u64;
    let mut aimed = 0u64;
    // 10 forged segments per millisecond: half from the attacker's own
    // address, half spoofing the client's, with guessed ids; and, every
    // fifth millisecond, one more spoofing the client with the server's
    // real id (as if it had leaked) and a guessed sequence number. The
    // plain protocol's defence against those is the in-window check (a
    // ~2^-14 chance per guess); `--key-file` makes it cryptographic.
    run_with(&mut w, &mut t, Duration::from_secs(60), |w| {
        let real_id =
            w.captured().iter().rev().find(|c| c.from == client()).and_then(|c| header(&c.data)).map(|h| h.conn_id);
        for i in 0..10 {
            let from = if i % 2 == 0 { addr(66) } else { client() };
            let id = rng.gen::<u32>() | 1;
            let forged = forged_data(&mut rng, id);
            w.inject(from, server(), forged);
            injected += 1;
        }
        if let Some(id) = real_id.filter(|&id| id != 0 && injected.is_multiple_of(50)) {
            let forged = forged_data(&mut rng, id);
            w.inject(client(), server(), forged);
            aimed += 1;
        }
    });
    w.run_for(Duration::from_millis(100));
    assert!(aimed > 200, "{aimed} aimed forgeries (seed {seed})");
    // The aimed ones reached the connection: out of window (dropped), or
    // by chance inside it, where they are caught by the stream check (the
    // transfer verified every byte either way).
    let sc = w.endpoint(server()).conn(t.server_conn().expect("accepted")).stats().expect("server");
    // About half the guesses land ahead of the window (out of window),
    // half behind it (duplicates); 57 of 590 counted ahead in one run (a
    // 1 ms shift of the handshake moved it from above a tenth); the client link's queue, full at times under the
    // upload's bursts, drops some of them like any packet before they
    // arrive (a third or more with acks per eighth of a window, spec §5.6).
    assert!(sc.out_of_window > aimed / 20, "{aimed}: {sc:?} (seed {seed})");
    let s = *w.endpoint(server()).stats();
    // All but the few the client link's full queue dropped reached the
    // server, and none reached a connection (some aimed ones, arriving
    // after the connection ended, count here too).
    assert!(
        s.unknown_connection <= injected + aimed && s.unknown_connection * 100 >= injected * 99,
        "{injected} forged, {s:?} (seed {seed})"
    );
    // Answers to them are rate limited (1000 per second by default).
    let secs = w.elapsed().as_secs_f64();
    assert!((s.resets_sent as f64) <= 1000.0 * (secs + 1.0), "{s:?} over {secs:.1} s (seed {seed})");
}

#[test]
fn replayed_packets_are_dropped_as_duplicates_and_change_nothing() {
    let seed = 192;
    let mut w = pair(seed, paced(), EndpointConfig::default());
    w.set_capture(true);
    let mut t = Transfer::start(&mut w, client(), server(), 2 * MB, MB);
    let mut replay: Vec<(SocketAddr, SocketAddr, Vec<u8>)> = Vec::new();
    let mut replayed = std::collections::HashSet::new();
    let mut next = 0;
    // Every datagram either side sent is sent again 50 ms after it was
    // seen (the capture records it, and the replay too: each is sent once).
    run_with(&mut w, &mut t, Duration::from_secs(60), |w| {
        let captured = w.captured();
        while let Some(c) = captured.get(next).filter(|c| c.at + Duration::from_millis(50) <= w.elapsed()) {
            if replayed.insert(c.data.clone()) {
                replay.push((c.from, c.to, c.data.clone()));
            }
            next += 1;
        }
        for (from, to, data) in replay.drain(..) {
            w.inject(from, to, data);
        }
    });
    let next = replayed.len();
    assert!(next > 1000, "replayed {next} datagrams (seed {seed})");
    let s = w.endpoint(server()).conn(t.server_conn().expect("accepted")).stats().expect("server");
    assert!(s.duplicate_packets > 500, "{s:?} (seed {seed})");
    assert_eq!(w.endpoint(server()).stats().connections_accepted, 1, "the replayed echo made no second connection");
}

#[test]
fn legitimate_clients_all_connect_during_a_spoofed_syn_flood() {
    let seed = 193;
    let mut w = World::new(seed);
    let server_cfg = EndpointConfig::default();
    w.add_node(server(), server_cfg.clone());
    let clients: Vec<SocketAddr> = (10..30).map(addr).collect();
    for &c in &clients {
        w.add_node(c, EndpointConfig::default());
        w.set_link(c, server(), LinkConfig::with_delay(Duration::from_millis(5)));
    }
    w.endpoint_mut(server()).set_listening(true);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut handles: Vec<(SocketAddr, ConnHandle)> = Vec::new();
    // 50 spoofed SYNs per millisecond for 3 s; a client starts every 100 ms.
    for ms in 0..3000u32 {
        for _ in 0..50 {
            let from = SocketAddr::from(([198, 19, rng.gen(), rng.gen()], rng.gen_range(1024..65535)));
            let mut syn = Packet::bare(PacketType::Segment, Flags::SYN, 0, rng.gen(), 0, 65_535);
            syn.params = Some(HandshakeParams::new(rng.gen::<u32>() | 1, 1400));
            w.inject(from, server(), emit(&syn));
        }
        if ms % 100 == 0 && (ms / 100) < clients.len() as u32 {
            let c = clients[(ms / 100) as usize];
            handles.push((c, w.connect(c, server())));
        }
        w.run_for(Duration::from_millis(1));
        while w.endpoint_mut(server()).accept().is_some() {}
    }
    w.run_for(Duration::from_secs(2));
    for (c, h) in &handles {
        assert_eq!(w.endpoint(*c).conn(*h).state(), Some(State::Established), "{c} (seed {seed})");
    }
    let s = *w.endpoint(server()).stats();
    assert_eq!(s.connections_accepted, clients.len() as u64, "{s:?} (seed {seed})");
}

#[test]
fn a_peer_that_never_reads_is_given_up_after_the_zero_window_timeout() {
    let seed = 194;
    let mut cfg = EndpointConfig::default();
    cfg.connection.recv_buffer = 256 << 10;
    cfg.connection.send_buffer = 1 << 20;
    cfg.connection.zero_window_timeout = Some(Duration::from_secs(20));
    let mut w = pair(seed, LinkConfig::with_delay(Duration::from_millis(10)), cfg.clone());
    let (c, s) = establish(&mut w);
    let mut source = Source::new(seed, 64 * MB);
    let mut most_unacked = 0;
    // The server's application never reads; the client keeps offering data.
    let closed = w.run_until(
        |w| {
            let _ = w.act(client(), |ep, _| source.push(ep, c));
            let st = w.endpoint(client()).conn(c).stats().expect("client");
            most_unacked = most_unacked.max(st.unacked_bytes);
            w.endpoint(client()).conn(c).state() == Some(State::Closed)
        },
        Duration::from_secs(300),
    );
    assert!(closed, "still {:?} (seed {seed})", w.endpoint(client()).conn(c).state());
    let (at, why) = w.closed(client(), c).expect("closed");
    assert_eq!(why, CloseReason::ZeroWindowTimeout, "seed {seed}");
    // The window closed within a second or two; then 20 s, plus at most
    // one persist-probe interval.
    assert!(at < Duration::from_secs(90), "closed only at {at:?} (seed {seed})");
    assert!(most_unacked <= cfg.connection.send_buffer as u64, "{most_unacked} buffered (seed {seed})");
    w.run_for(Duration::from_secs(1));
    assert_eq!(
        w.closed(server(), s).map(|(_, r)| r),
        Some(CloseReason::PeerReset(Some(ErrorCode::WINDOW_TIMEOUT))),
        "the reader learns why (seed {seed})"
    );
}

#[test]
fn a_slow_reader_that_keeps_reading_is_not_timed_out() {
    let seed = 195;
    let mut cfg = EndpointConfig::default();
    cfg.connection.recv_buffer = 64 << 10;
    cfg.connection.zero_window_timeout = Some(Duration::from_secs(5));
    let mut w = pair(seed, LinkConfig::with_delay(Duration::from_millis(10)), cfg);
    let (c, s) = establish(&mut w);
    let mut source = Source::new(seed, 4 * MB);
    let mut sink = Sink::new(seed, 4 * MB);
    // 64 KiB every 3 s: the window is shut most of the time, but opens
    // again well before the timeout runs out.
    let mut done = false;
    for _ in 0..200 {
        let _ = w.act(client(), |ep, _| source.push(ep, c));
        w.act(server(), |ep, _| sink.pull(ep, s, 64 << 10)).expect("intact");
        if sink.received() == 4 * MB {
            done = true;
            break;
        }
        for _ in 0..30 {
            let _ = w.act(client(), |ep, _| source.push(ep, c));
            w.run_for(Duration::from_millis(100));
        }
    }
    assert!(done, "{} bytes read, client {:?} (seed {seed})", sink.received(), w.closed(client(), c));
}

#[test]
fn one_address_cannot_hold_more_than_its_share_of_connections() {
    let seed = 196;
    let mut w = World::new(seed);
    w.add_node(server(), EndpointConfig { max_connections_per_source: 5, ..Default::default() });
    let crowd: Vec<SocketAddr> = (0..8).map(|i| SocketAddr::new(addr(40).ip(), 5000 + i)).collect();
    for &c in crowd.iter().chain([addr(41)].iter()) {
        w.add_node(c, EndpointConfig::default());
        w.set_link(c, server(), LinkConfig::with_delay(Duration::from_millis(5)));
    }
    w.endpoint_mut(server()).set_listening(true);
    let mut handles = HashMap::new();
    for &c in &crowd {
        handles.insert(c, w.connect(c, server()));
        w.run_for(Duration::from_millis(50));
    }
    let other = w.connect(addr(41), server());
    w.run_for(Duration::from_secs(1));
    let established =
        crowd.iter().filter(|c| w.endpoint(**c).conn(handles[*c]).state() == Some(State::Established)).count();
    let refused =
        crowd.iter().filter(|c| w.endpoint(**c).conn(handles[*c]).close_reason() == Some(CloseReason::Refused)).count();
    assert_eq!((established, refused), (5, 3), "seed {seed}");
    assert_eq!(w.endpoint(addr(41)).conn(other).state(), Some(State::Established), "another host still gets in");
    assert_eq!(w.endpoint(server()).stats().refused_per_source, 3, "seed {seed}");
}

#[test]
fn answers_to_unvalidated_addresses_are_at_most_three_times_what_they_sent() {
    let seed = 197;
    let mut w = pair(seed, LinkConfig::default(), EndpointConfig::default());
    w.endpoint_mut(server()).set_listening(true);
    w.set_capture(true);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut sent: HashMap<SocketAddr, usize> = HashMap::new();
    // SYNs, forged echoes and data for unknown connections, from 200
    // spoofed addresses, each as short as it can be.
    for i in 0..2000u32 {
        let from = SocketAddr::from(([198, 19, 1, (i % 200) as u8], 4000));
        let d = match i % 3 {
            0 => {
                let mut syn = Packet::bare(PacketType::Segment, Flags::SYN, 0, rng.gen(), 0, 0);
                syn.params = Some(HandshakeParams::new(rng.gen::<u32>() | 1, 576));
                emit(&syn)
            }
            1 => emit(&Packet::bare(PacketType::Segment, Flags::ACK, rng.gen::<u32>() | 1, rng.gen(), rng.gen(), 0)),
            _ => {
                let id = rng.gen::<u32>() | 1;
                forged_data(&mut rng, id)
            }
        };
        *sent.entry(from).or_default() += d.len();
        w.inject(from, server(), d);
        w.run_for(Duration::from_millis(1));
    }
    let mut answered: HashMap<SocketAddr, usize> = HashMap::new();
    for c in w.captured().iter().filter(|c| c.from == server()) {
        *answered.entry(c.to).or_default() += c.data.len();
    }
    assert!(!answered.is_empty(), "seed {seed}");
    for (to, bytes) in answered {
        let got = sent.get(&to).copied().unwrap_or(0);
        assert!(bytes <= 3 * got, "{to}: answered {bytes} bytes to {got} (seed {seed})");
    }
}

#[test]
fn an_endpoint_holds_no_more_than_its_memory_limit_and_every_transfer_still_completes() {
    let seed = 198;
    const LIMIT: u64 = 1 << 20;
    let mut w = World::new(seed);
    w.add_node(server(), EndpointConfig { max_buffered_bytes: LIMIT, ..Default::default() });
    let clients: Vec<SocketAddr> = (50..54).map(addr).collect();
    for &c in &clients {
        // The senders are limited too, below what their connections would queue.
        w.add_node(c, EndpointConfig { max_buffered_bytes: 256 << 10, ..Default::default() });
        w.set_link(c, server(), LinkConfig::with_delay(Duration::from_millis(5)));
    }
    w.endpoint_mut(server()).set_listening(true);
    let mut handles = Vec::new();
    for &c in &clients {
        let h = w.connect(c, server());
        // One payload for all: whichever accepted connection is whose, the check holds.
        handles.push((c, h, Source::new(seed, 4 * MB)));
    }
    let mut accepted: Vec<ConnHandle> = Vec::new();
    let mut most_held = 0;
    let mut most_sending = 0;
    // The server does not read for 3 s: its memory fills to the limit and stays there.
    for _ in 0..3000u32 {
        for (c, h, src) in handles.iter_mut() {
            let _ = w.act(*c, |ep, _| src.push(ep, *h));
        }
        while let Some(a) = w.endpoint_mut(server()).accept() {
            accepted.push(a);
        }
        w.run_for(Duration::from_millis(1));
        most_held = most_held.max(w.endpoint(server()).buffered_bytes());
        most_sending = most_sending.max(w.endpoint(clients[0]).buffered_bytes());
    }
    // At most a packet per connection beyond the limit: the pressure is
    // judged when a packet arrives.
    assert!((LIMIT..=LIMIT + 4 * 1452).contains(&most_held), "held {most_held} (seed {seed})");
    assert_eq!(accepted.len(), 4, "seed {seed}");
    // The senders filled their own limit and went no further.
    assert!((200 << 10..=256 << 10).contains(&most_sending), "a sender held {most_sending} (seed {seed})");
    // Then it reads everything: every byte arrives (what was dropped at
    // the limit is sent again).
    let mut sinks: Vec<Sink> = handles.iter().map(|_| Sink::new(seed, 4 * MB)).collect();
    let done = w.run_until(
        |w| {
            for (c, h, src) in handles.iter_mut() {
                let _ = w.act(*c, |ep, _| src.push(ep, *h));
            }
            for (sink, &a) in sinks.iter_mut().zip(&accepted) {
                w.act(server(), |ep, _| sink.pull(ep, a, usize::MAX)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
            }
            sinks.iter().all(|s| s.received() == 4 * MB)
        },
        Duration::from_secs(120),
    );
    assert!(done, "{:?} (seed {seed})", sinks.iter().map(Sink::received).collect::<Vec<_>>());
}
