//! Behaviour of a connection's end: half-close (FIN-WAIT / CLOSE-WAIT),
//! simultaneous close (CLOSING), TIME-WAIT, resets, abort, idle timeout and
//! keep-alive (spec §4.4–§4.7, §6.5).

mod common;

use std::time::Duration;

use common::*;
use manyfold_proto::wire::ErrorCode;
use manyfold_proto::{CloseReason, EndpointConfig, Event, State};
use manyfold_sim::{LinkConfig, Sink, Source};

/// Short timers so the tests need little virtual time.
fn quick() -> EndpointConfig {
    let mut c = EndpointConfig::default();
    c.connection.time_wait = Duration::from_secs(5);
    c.connection.idle_timeout = Some(Duration::from_secs(10));
    c.connection.keepalive_interval = Some(Duration::from_secs(2));
    c
}

#[test]
fn half_close_keeps_receiving() {
    let seed = 301;
    let mut w = pair(seed, faulty(0.02), quick());
    let (c, s) = establish(&mut w);
    // The client sends a request and closes its side at once.
    let mut request = Source::new(1, 100_000);
    let mut request_in = Sink::new(1, 100_000);
    w.act(client(), |ep, _| request.push(ep, c)).unwrap();
    w.act(client(), |ep, _| ep.conn_mut(c).close());
    assert!(
        w.run_until(
            |w| w.act(server(), |ep, _| request_in.pull(ep, s, usize::MAX)).is_ok() && request_in.is_done(),
            Duration::from_secs(60)
        ),
        "server never read the request and its end (seed {seed})"
    );
    assert_eq!(w.endpoint(server()).conn(s).state(), Some(State::CloseWait), "seed {seed}");
    assert!(
        wait_state(&mut w, client(), c, State::FinWait2, Duration::from_secs(10)),
        "{:?} (seed {seed})",
        w.endpoint(client()).conn(c).state()
    );

    // Only now does the server answer, with much more than the request.
    let mut response = Source::new(2, 2_000_000);
    let mut response_in = Sink::new(2, 2_000_000);
    let ok = w.run_until(
        |w| {
            w.act(server(), |ep, _| response.push(ep, s)).unwrap();
            if response.is_done() {
                w.act(server(), |ep, _| ep.conn_mut(s).close());
            }
            let r = w.act(client(), |ep, _| response_in.pull(ep, c, usize::MAX));
            assert!(r.is_ok(), "{r:?} (seed {seed})");
            response_in.is_done()
        },
        Duration::from_secs(300),
    );
    assert!(ok, "half-closed client got {} of 2000000 bytes (seed {seed})", response_in.received());
    assert!(wait_state(&mut w, client(), c, State::TimeWait, Duration::from_secs(10)), "seed {seed}");
    assert!(w.run_until(|w| w.closed(server(), s).is_some(), Duration::from_secs(30)), "seed {seed}");
    assert_eq!(w.closed(server(), s).unwrap().1, CloseReason::Graceful, "seed {seed}");
}

#[test]
fn send_after_close_is_refused() {
    let seed = 302;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, _) = establish(&mut w);
    w.act(client(), |ep, _| ep.conn_mut(c).close());
    let r = w.act(client(), |ep, _| ep.conn_mut(c).send(b"late"));
    assert!(r.is_err(), "send after close accepted: {r:?} (seed {seed})");
}

#[test]
fn active_closer_waits_in_time_wait_then_frees_its_state() {
    let seed = 303;
    let mut w = pair(seed, faulty(0.0), quick());
    let (c, s) = establish(&mut w);
    w.act(client(), |ep, _| ep.conn_mut(c).close());
    // The server reads the end of stream and closes too.
    let mut sink = Sink::new(0, 0);
    assert!(w.run_until(
        |w| w.act(server(), |ep, _| sink.pull(ep, s, usize::MAX)).is_ok() && sink.is_done(),
        Duration::from_secs(10)
    ));
    w.act(server(), |ep, _| ep.conn_mut(s).close());
    assert!(wait_state(&mut w, client(), c, State::TimeWait, Duration::from_secs(10)), "seed {seed}");
    let entered = w.elapsed();
    w.act(client(), |ep, _| ep.conn_mut(c).release());
    w.act(server(), |ep, _| ep.conn_mut(s).release());
    assert!(
        w.run_until(|w| w.endpoint(server()).connection_count() == 0, Duration::from_secs(5)),
        "passive closer kept its state (seed {seed})"
    );
    // Still there during TIME-WAIT, even though released.
    w.run_for(Duration::from_secs(4));
    assert_eq!(w.endpoint(client()).connection_count(), 1, "TIME-WAIT ended early (seed {seed})");
    assert!(
        w.run_until(|w| w.endpoint(client()).connection_count() == 0, Duration::from_secs(10)),
        "TIME-WAIT never ended (seed {seed})"
    );
    let left = w.elapsed() - entered;
    assert!(
        left >= Duration::from_secs(5) && left <= Duration::from_millis(5100),
        "TIME-WAIT lasted {left:?} (seed {seed})"
    );
    let (_, why) = w.closed(client(), c).expect("Closed event");
    assert_eq!(why, CloseReason::Graceful, "seed {seed}");
}

#[test]
fn unreleased_connection_stays_counted_after_close() {
    let seed = 304;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, s) = establish(&mut w);
    w.act(client(), |ep, _| ep.conn_mut(c).close());
    w.act(server(), |ep, _| ep.conn_mut(s).close());
    w.run_for(Duration::from_secs(20));
    assert_eq!(w.endpoint(client()).conn(c).state(), Some(State::Closed), "seed {seed}");
    assert_eq!(w.endpoint(client()).connection_count(), 1, "the handle is still held (seed {seed})");
    w.act(client(), |ep, _| ep.conn_mut(c).release());
    assert_eq!(w.endpoint(client()).connection_count(), 0, "seed {seed}");
    assert_eq!(w.endpoint(client()).conn(c).state(), None, "stale handle (seed {seed})");
}

#[test]
fn lost_final_ack_is_repeated_from_time_wait() {
    let seed = 305;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, s) = establish(&mut w);
    w.act(client(), |ep, _| ep.conn_mut(c).close());
    assert!(wait_state(&mut w, client(), c, State::FinWait2, Duration::from_secs(5)), "seed {seed}");
    // The client's ack of the server's FIN is lost once.
    w.set_drop_rule(drop_first(1, client(), server(), is_pure_ack));
    w.act(server(), |ep, _| ep.conn_mut(s).close());
    assert!(wait_state(&mut w, client(), c, State::TimeWait, Duration::from_secs(5)), "seed {seed}");
    assert!(
        w.run_until(|w| w.closed(server(), s).is_some(), Duration::from_secs(5)),
        "server stuck in {:?} (seed {seed})",
        w.endpoint(server()).conn(s).state()
    );
    assert_eq!(w.dropped_by_rule(), 1, "seed {seed}");
    assert_eq!(w.closed(server(), s).unwrap().1, CloseReason::Graceful, "seed {seed}");
}

#[test]
fn simultaneous_close_goes_through_closing_to_time_wait_and_closed() {
    let seed = 306;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, s) = establish(&mut w);
    w.run_for(Duration::from_secs(1));
    // Both close at the same instant: the FINs cross.
    w.endpoint_mut(client()).conn_mut(c).close();
    w.endpoint_mut(server()).conn_mut(s).close();
    let mut seen = (Vec::new(), Vec::new());
    let ok = w.run_until(
        |w| {
            let a = w.endpoint(client()).conn(c).state().unwrap();
            let b = w.endpoint(server()).conn(s).state().unwrap();
            if seen.0.last() != Some(&a) {
                seen.0.push(a);
            }
            if seen.1.last() != Some(&b) {
                seen.1.push(b);
            }
            a == State::TimeWait && b == State::TimeWait
        },
        Duration::from_secs(10),
    );
    assert!(ok, "states went {seen:?} (seed {seed})");
    assert!(seen.0.contains(&State::Closing) && seen.1.contains(&State::Closing), "no CLOSING: {seen:?} (seed {seed})");
    let ok =
        w.run_until(|w| w.closed(client(), c).is_some() && w.closed(server(), s).is_some(), Duration::from_secs(10));
    assert!(ok, "seed {seed}");
    assert_eq!(w.closed(client(), c).unwrap().1, CloseReason::Graceful);
    assert_eq!(w.closed(server(), s).unwrap().1, CloseReason::Graceful);
}

#[test]
fn simultaneous_close_with_data_in_flight_delivers_everything() {
    let seed = 307;
    let mut w = pair(seed, faulty(0.05), quick());
    let (c, s) = establish(&mut w);
    let (mut up, mut down) = (Source::new(1, 300_000), Source::new(2, 300_000));
    let (mut up_in, mut down_in) = (Sink::new(1, 300_000), Sink::new(2, 300_000));
    w.act(client(), |ep, _| up.push(ep, c)).unwrap();
    w.act(server(), |ep, _| down.push(ep, s)).unwrap();
    w.endpoint_mut(client()).conn_mut(c).close();
    w.endpoint_mut(server()).conn_mut(s).close();
    let ok = w.run_until(
        |w| {
            w.act(server(), |ep, _| up_in.pull(ep, s, usize::MAX)).unwrap();
            w.act(client(), |ep, _| down_in.pull(ep, c, usize::MAX)).unwrap();
            up_in.is_done() && down_in.is_done() && w.closed(client(), c).is_some() && w.closed(server(), s).is_some()
        },
        Duration::from_secs(300),
    );
    assert!(
        ok,
        "{} / {} bytes, {:?} / {:?} (seed {seed})",
        up_in.received(),
        down_in.received(),
        w.endpoint(client()).conn(c).state(),
        w.endpoint(server()).conn(s).state()
    );
}

#[test]
fn data_to_a_peer_that_lost_its_state_is_reset() {
    let seed = 308;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, _) = establish(&mut w);
    // The server reboots: a fresh endpoint at the same address.
    w.remove_node(server());
    w.add_node(server(), quick());
    w.endpoint_mut(server()).set_listening(true);
    w.act(client(), |ep, _| ep.conn_mut(c).send(b"anyone there?")).unwrap();
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(10)), "no reset (seed {seed})");
    let (_, why) = w.closed(client(), c).unwrap();
    assert!(matches!(why, CloseReason::PeerReset(_)), "closed with {why:?} (seed {seed})");
    assert!(w.endpoint(server()).stats().resets_sent >= 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).connection_count(), 0, "seed {seed}");
    let r = w.act(client(), |ep, _| ep.conn_mut(c).send(b"again"));
    assert!(r.is_err(), "send on a reset connection: {r:?} (seed {seed})");
}

#[test]
fn abort_resets_the_peer_with_its_code() {
    let seed = 309;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, s) = establish(&mut w);
    w.act(server(), |ep, now| ep.conn_mut(s).abort(now, ErrorCode::APPLICATION));
    assert_eq!(w.endpoint(server()).conn(s).close_reason(), Some(CloseReason::Aborted(ErrorCode::APPLICATION)));
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(5)), "seed {seed}");
    assert_eq!(w.closed(client(), c).unwrap().1, CloseReason::PeerReset(Some(ErrorCode::APPLICATION)), "seed {seed}");
    let mut buf = [0u8; 16];
    let r = w.act(client(), |ep, _| ep.conn_mut(c).recv(&mut buf));
    assert!(r.is_err(), "recv on a reset connection: {r:?} (seed {seed})");
}

#[test]
fn blind_rst_with_a_wrong_sequence_number_is_ignored() {
    use manyfold_proto::wire::{Flags, Packet, PacketType};
    let seed = 310;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, s) = establish(&mut w);
    // The attacker knows the addresses but not the connection id or sequence.
    w.set_capture(true);
    w.act(server(), |ep, _| ep.conn_mut(s).send(b"x")).unwrap();
    w.run_for(Duration::from_millis(100));
    let conn_id = w.captured().iter().find(|p| p.from == server()).and_then(|p| header(&p.data)).unwrap().conn_id;
    for k in 0..100u32 {
        let p = Packet::bare(PacketType::Segment, Flags::RST, conn_id, k.wrapping_mul(0x9e37_79b9), 0, 0);
        let mut v = vec![0u8; p.len()];
        p.emit(&mut v);
        w.inject(server(), client(), v);
    }
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.endpoint(client()).conn(c).state(), Some(State::Established), "seed {seed}");
}

#[test]
fn idle_connection_closes_after_idle_timeout_when_the_peer_vanishes() {
    let seed = 311;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, s) = establish(&mut w);
    w.run_for(Duration::from_secs(30));
    assert_eq!(
        w.endpoint(client()).conn(c).state(),
        Some(State::Established),
        "keep-alives failed to keep it open (seed {seed})"
    );
    // The path dies.
    w.set_link(client(), server(), LinkConfig::blackhole());
    assert!(
        w.run_until(|w| w.closed(client(), c).is_some() && w.closed(server(), s).is_some(), Duration::from_secs(60)),
        "seed {seed}"
    );
    for (node, h) in [(client(), c), (server(), s)] {
        let (at, why) = w.closed(node, h).unwrap();
        assert_eq!(why, CloseReason::IdleTimeout, "{node} (seed {seed})");
        // Nothing heard for idle_timeout (10 s), give or take the last keep-alive round trip.
        let last_heard = w.node_stats(node).last_received_at.unwrap();
        let silent = at.saturating_sub(last_heard);
        assert!(
            silent >= Duration::from_secs(9) && silent <= Duration::from_secs(11),
            "{node} closed after {silent:?} of silence (seed {seed})"
        );
    }
}

#[test]
fn connection_with_data_in_flight_gives_up_when_the_peer_vanishes() {
    let seed = 312;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, _) = establish(&mut w);
    let mut src = Source::new(1, 5_000_000);
    w.act(client(), |ep, _| src.push(ep, c)).unwrap();
    w.run_for(Duration::from_millis(200));
    let cut = w.elapsed();
    w.set_link(client(), server(), LinkConfig::blackhole());
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(600)), "never gave up (seed {seed})");
    let (at, why) = w.closed(client(), c).unwrap();
    assert!(matches!(why, CloseReason::IdleTimeout | CloseReason::RetransmitTimeout), "{why:?} (seed {seed})");
    assert!(at - cut <= Duration::from_secs(11), "gave up {:?} after the cut (seed {seed})", at - cut);
}

#[test]
fn keepalives_hold_an_idle_connection_open() {
    let seed = 313;
    let mut w = pair(seed, faulty(0.05), quick());
    let (c, s) = establish(&mut w);
    w.run_for(Duration::from_secs(120));
    assert_eq!(w.endpoint(client()).conn(c).state(), Some(State::Established), "seed {seed}");
    assert_eq!(w.endpoint(server()).conn(s).state(), Some(State::Established), "seed {seed}");
    assert!(w.closed(client(), c).is_none() && w.closed(server(), s).is_none());
}

#[test]
fn without_keepalive_an_idle_connection_times_out() {
    let seed = 314;
    let mut cfg = quick();
    cfg.connection.keepalive_interval = None;
    let mut w = pair(seed, LinkConfig::default(), cfg);
    let (c, s) = establish(&mut w);
    let start = w.elapsed();
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(60)), "seed {seed}");
    let (at, why) = w.closed(client(), c).unwrap();
    assert_eq!(why, CloseReason::IdleTimeout, "seed {seed}");
    assert!(at - start <= Duration::from_secs(11), "after {:?} (seed {seed})", at - start);
    let _ = s;
}

#[test]
fn closed_event_is_reported_exactly_once() {
    let seed = 315;
    let mut w = pair(seed, faulty(0.1), quick());
    let (c, s) = establish(&mut w);
    w.endpoint_mut(client()).conn_mut(c).close();
    w.endpoint_mut(server()).conn_mut(s).close();
    w.run_for(Duration::from_secs(60));
    for (node, h) in [(client(), c), (server(), s)] {
        let closes = w.conn_events(node, h).iter().filter(|e| matches!(e.event, Event::Closed(_))).count();
        assert_eq!(closes, 1, "{node}: {:?} (seed {seed})", w.conn_events(node, h));
    }
}

#[test]
fn idle_timer_closes_a_simultaneous_open_whose_peer_vanished() {
    // A enters ESTABLISHED from SYN-RECEIVED on B's SYN|ACK and never hears
    // from B again (B's later acks are lost, then B is gone). The idle timer
    // must be armed on that transition, or A would send keep-alives forever.
    let seed = 316;
    let (a, b) = (client(), server());
    let mut w = pair(seed, LinkConfig::default(), quick());
    // Only B's handshake packets get through.
    w.set_drop_rule(move |f, _, d| f == b && !is_syn(d) && !is_syn_ack(d));
    let now = w.now();
    let ha = w.endpoint_mut(a).connect(now, b).unwrap();
    let hb = w.endpoint_mut(b).connect(now, a).unwrap();
    assert!(wait_state(&mut w, a, ha, State::Established, Duration::from_secs(5)), "seed {seed}");
    let established = w.elapsed();
    assert!(w.saw(a, ha, Event::Connected).is_some(), "seed {seed}");
    assert!(wait_state(&mut w, b, hb, State::Established, Duration::from_secs(5)), "seed {seed}");
    let heard = w.node_stats(a).last_received_at;
    w.remove_node(b);
    assert!(w.run_until(|w| w.closed(a, ha).is_some(), Duration::from_secs(60)), "A never gave up (seed {seed})");
    let (at, why) = w.closed(a, ha).unwrap();
    assert_eq!(why, CloseReason::IdleTimeout, "seed {seed}");
    assert_eq!(w.node_stats(a).last_received_at, heard, "A heard from B after ESTABLISHED (seed {seed})");
    assert_eq!(at - established, Duration::from_secs(10), "idle_timeout after ESTABLISHED (seed {seed})");
}

#[test]
fn data_to_a_closed_but_unreleased_connection_is_reset() {
    // spec §4.5, §6.5: the server aborted (both copies of its RST were
    // lost, spec §4.6) and still holds the handle; the client's next packet
    // is answered like one for an unknown connection, so the client learns
    // at once.
    let seed = 317;
    let mut w = pair(seed, LinkConfig::default(), quick());
    let (c, s) = establish(&mut w);
    w.set_drop_rule(drop_first(2, server(), client(), is_rst));
    w.act(server(), |ep, now| ep.conn_mut(s).abort(now, ErrorCode::APPLICATION));
    w.run_for(Duration::from_millis(100));
    assert_eq!(w.dropped_by_rule(), 2, "seed {seed}");
    assert_eq!(w.endpoint(client()).conn(c).state(), Some(State::Established), "seed {seed}");
    let sent = w.elapsed();
    w.act(client(), |ep, _| ep.conn_mut(c).send(b"still there?")).unwrap();
    assert!(w.run_until(|w| w.closed(client(), c).is_some(), Duration::from_secs(5)), "no reset (seed {seed})");
    let (at, why) = w.closed(client(), c).unwrap();
    assert_eq!(why, CloseReason::PeerReset(None), "seed {seed}");
    assert_eq!(at - sent, Duration::from_millis(20), "reset after one round trip (seed {seed})");
    assert_eq!(w.endpoint(server()).stats().unknown_connection, 1, "seed {seed}");
    assert_eq!(w.endpoint(server()).conn(s).state(), Some(State::Closed), "still held (seed {seed})");
}
