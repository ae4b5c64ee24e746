//! Failure signals in the engine (spec §4.7, §4.8, §6.7): ICMP errors
//! matched by their quote (and forged ones ignored), the stall timeout,
//! and TIME-WAIT lingering before the endpoint may exit.

use std::time::Duration;

use super::{transfer, Pair};
use crate::{CloseReason, Event, State, UnreachableKind};

/// The first datagram `a` has put on the wire, taken off it (lost).
fn take_from_a(p: &mut Pair) -> Vec<u8> {
    p.drain();
    let i = p.wire.iter().position(|w| w.1).expect("a sent something");
    p.wire.remove(i).expect("present").2
}

/// A first exchange, so that the handshake is over (the cookie echo
/// acknowledged) and the RTT known.
fn exchange(p: &mut Pair, ca: crate::ConnHandle, cb: crate::ConnHandle) {
    p.a.conn_mut(ca).send(&[7u8; 3000]).unwrap();
    let mut buf = [0u8; 4000];
    let mut got = 0;
    p.run_until(|p| {
        while let Ok(Some(n)) = p.b.conn_mut(cb).recv(&mut buf) {
            if n == 0 {
                break;
            }
            got += n;
        }
        got == 3000 && p.wire.is_empty()
    });
}

/// a connected to b, the handshake over and a first exchange done.
fn connected(p: &mut Pair) -> (crate::ConnHandle, crate::ConnHandle) {
    let ca = p.a.connect(p.now, p.b_addr).unwrap();
    p.run_until(|p| p.a.conn(ca).state() == Some(State::Established) && !p.events_b.is_empty());
    let cb = p.b.accept().unwrap();
    exchange(p, ca, cb);
    (ca, cb)
}

#[test]
fn port_unreachable_for_a_syn_refuses_the_connect_at_once() {
    let mut p = Pair::new();
    let nobody = "127.0.0.1:3000".parse().unwrap();
    let ca = p.a.connect(p.now, nobody).unwrap();
    p.drain();
    let syn = p.wire.pop_front().expect("the SYN").2;
    p.a.handle_icmp(p.now, nobody, UnreachableKind::Port, &syn);
    assert_eq!(p.a.conn(ca).close_reason(), Some(CloseReason::Refused));
    assert_eq!(p.a.stats().icmp_received, 1);
    assert_eq!(p.a.stats().icmp_ignored, 0);
}

#[test]
fn host_unreachable_for_a_syn_says_unreachable() {
    let mut p = Pair::new();
    let nobody = "127.0.0.1:3000".parse().unwrap();
    let ca = p.a.connect(p.now, nobody).unwrap();
    p.drain();
    let syn = p.wire.pop_front().expect("the SYN").2;
    p.a.handle_icmp(p.now, nobody, UnreachableKind::Host, &syn);
    assert_eq!(p.a.conn(ca).close_reason(), Some(CloseReason::Unreachable(UnreachableKind::Host)));
}

#[test]
fn icmp_that_does_not_quote_our_ids_changes_nothing() {
    let mut p = Pair::new();
    let nobody = "127.0.0.1:3000".parse().unwrap();
    let ca = p.a.connect(p.now, nobody).unwrap();
    p.drain();
    let syn = p.wire.pop_front().expect("the SYN").2;
    // Another destination, a SYN with another connection id, a quote too
    // short to name anything, a quote of a RST: none names our connection.
    let mut other_id = syn.clone();
    other_id[24] ^= 0x55;
    p.a.handle_icmp(p.now, "127.0.0.1:3001".parse().unwrap(), UnreachableKind::Port, &syn);
    p.a.handle_icmp(p.now, nobody, UnreachableKind::Port, &other_id);
    p.a.handle_icmp(p.now, nobody, UnreachableKind::Port, &syn[..20]);
    p.a.handle_icmp(p.now, nobody, UnreachableKind::Port, &[]);
    let mut rst = syn.clone();
    rst[1] = 0x08;
    p.a.handle_icmp(p.now, nobody, UnreachableKind::Port, &rst);
    assert_eq!(p.a.conn(ca).state(), Some(State::SynSent));
    assert_eq!(p.a.stats().icmp_received, 5);
    assert_eq!(p.a.stats().icmp_ignored, 5);
}

#[test]
fn an_established_connection_ends_on_repeated_unreachables_after_an_rto_of_silence() {
    let mut p = Pair::new();
    let (ca, _) = connected(&mut p);
    p.a.conn_mut(ca).send(&[8u8; 1000]).unwrap();
    let data = take_from_a(&mut p);
    // A forged error: the right ids, a sequence number never sent.
    let mut forged = data.clone();
    forged[8..12].copy_from_slice(&(u32::from_be_bytes(data[8..12].try_into().unwrap()) ^ 0x4000_0000).to_be_bytes());
    for _ in 0..5 {
        p.a.handle_icmp(p.now, p.b_addr, UnreachableKind::Port, &forged);
    }
    assert_eq!(p.a.conn(ca).state(), Some(State::Established), "a forged sequence number is ignored");
    assert_eq!(p.a.stats().icmp_ignored, 5);
    // One real error right after the peer was heard: maybe a stray.
    p.a.handle_icmp(p.now, p.b_addr, UnreachableKind::Port, &data);
    p.a.handle_icmp(p.now, p.b_addr, UnreachableKind::Port, &data);
    assert_eq!(p.a.conn(ca).state(), Some(State::Established), "the peer was heard less than an RTO ago");
    p.now += Duration::from_secs(2);
    p.a.handle_icmp(p.now, p.b_addr, UnreachableKind::Port, &data);
    assert_eq!(p.a.conn(ca).close_reason(), Some(CloseReason::Unreachable(UnreachableKind::Port)));
    assert_eq!(p.a.conn(ca).stats().unwrap().icmp_errors, 3);
}

#[test]
fn an_idle_connection_whose_peer_died_ends_one_rto_after_its_first_keepalive_meets_icmp() {
    let mut p = Pair::new();
    let (ca, _) = connected(&mut p);
    p.run_until(|p| p.wire.is_empty() && p.a.conn(ca).stats().unwrap().unacked_bytes == 0);
    let keepalive = crate::ConnectionConfig::default().keepalive_interval.expect("keep-alives on by default");
    // b's process is gone: each datagram of a's draws port unreachable, and
    // only a runs from here.
    let idle_from = p.now;
    let mut buf = vec![0u8; 70_000];
    let mut errors = 0;
    for _ in 0..1_000 {
        if p.a.conn(ca).close_reason().is_some() {
            break;
        }
        p.now = p.a.poll_timeout().expect("an open connection keeps a timer");
        p.a.handle_timeout(p.now);
        while let Some(t) = p.a.poll_transmit(p.now, 1, &mut buf) {
            p.a.handle_icmp(p.now, p.b_addr, UnreachableKind::Port, &buf[..t.size]);
            errors += 1;
        }
    }
    let took = p.now - idle_from;
    assert_eq!(p.a.conn(ca).close_reason(), Some(CloseReason::Unreachable(UnreachableKind::Port)));
    assert_eq!(errors, 2, "the keep-alive and the one that confirms it");
    assert!(
        took >= keepalive && took < keepalive + Duration::from_secs(2),
        "ended {took:?} after going idle; the keep-alive interval is {keepalive:?}"
    );
}

#[test]
fn last_ack_ends_gracefully_when_the_peer_is_gone_with_only_our_fin_unacked() {
    let mut p = Pair::new();
    let ca = p.a.connect(p.now, p.b_addr).unwrap();
    p.run_until(|p| p.a.conn(ca).state() == Some(State::Established) && !p.events_b.is_empty());
    let cb = p.b.accept().unwrap();
    p.b.conn_mut(cb).close();
    p.run_until(|p| p.a.conn(ca).state() == Some(State::CloseWait) && p.b.conn(cb).state() == Some(State::FinWait2));
    p.a.conn_mut(ca).close();
    // a's FIN goes out; b's process is gone before it arrives.
    let fin = take_from_a(&mut p);
    assert_eq!(p.a.conn(ca).state(), Some(State::LastAck));
    p.a.handle_icmp(p.now, p.b_addr, UnreachableKind::Port, &fin);
    assert_eq!(p.a.conn(ca).close_reason(), Some(CloseReason::Graceful));
}

#[test]
fn a_lone_fin_is_repeated_every_250_ms_until_the_stall_timeout() {
    let mut p = Pair::new();
    let (ca, cb) = connected(&mut p);
    p.b.conn_mut(cb).close();
    p.run_until(|p| p.a.conn(ca).state() == Some(State::CloseWait) && p.b.conn(cb).state() == Some(State::FinWait2));
    // b falls silent (no ack, no ICMP) before a's FIN arrives.
    p.loss_percent = 100;
    let (silent_from, sent_before) = (p.now, p.a.conn(ca).stats().unwrap().packets_sent);
    p.a.conn_mut(ca).close();
    p.drain();
    assert_eq!(p.a.conn(ca).state(), Some(State::LastAck));
    p.run_until(|p| p.a.conn(ca).state() == Some(State::Closed));
    // Not max_retransmissions (12 repeats, 3 s): the stall timeout ends it.
    assert_eq!(p.a.conn(ca).close_reason(), Some(CloseReason::StallTimeout));
    let took = p.now - silent_from;
    assert!(took >= Duration::from_secs(15) && took < Duration::from_secs(16), "{took:?}");
    // Repeats at most 250 ms apart: 60 in 15 s, the first few sooner
    // (RTO·2^k below 250 ms), then the closing RST.
    let sent = p.a.conn(ca).stats().unwrap().packets_sent - sent_before;
    assert!((58..=70).contains(&sent), "{sent} packets in {took:?}");
}

#[test]
fn a_listeners_first_rtt_sample_leaves_out_the_wait_of_a_retransmitted_echo() {
    let mut p = Pair::new();
    let ca = p.a.connect(p.now, p.b_addr).unwrap();
    // The SYN is lost: a has no RTT sample (Karn) and waits its initial
    // 1 s RTO; then its cookie echo is lost too, and repeated a second
    // later. b's only sample is the cookie's age less the delay the echo
    // reports (spec §3.3.3): not that second, which would make b's RTO
    // over 3 s and let three lost repeats of its data run past its 15 s
    // stall timeout (RESULTS §32).
    take_from_a(&mut p);
    p.run_until(|p| p.a.conn(ca).state() == Some(State::Established));
    // The echo, with nothing to carry, goes after its hold (spec §6.2).
    p.run_until(|p| {
        p.drain();
        p.wire.iter().any(|w| w.1)
    });
    take_from_a(&mut p);
    p.run_until(|p| !p.events_b.is_empty());
    let cb = p.b.accept().unwrap();
    let srtt = p.b.conn(cb).stats().unwrap().srtt;
    assert!(srtt < Duration::from_millis(20), "b's RTT sample holds the echo's wait: {srtt:?}");
    p.a.conn_mut(ca).close();
    p.run_until(|p| p.b.conn(cb).state() == Some(State::CloseWait) && p.a.conn(ca).state() == Some(State::FinWait2));
    // a falls silent; b, the passive closer, is left with its lone FIN.
    p.loss_percent = 100;
    let (silent_from, sent_before) = (p.now, p.b.conn(cb).stats().unwrap().packets_sent);
    p.b.conn_mut(cb).close();
    p.run_until(|p| p.b.conn(cb).state() == Some(State::Closed));
    let took = p.now - silent_from;
    // Its lone FIN is repeated 250 ms apart at most.
    let sent = p.b.conn(cb).stats().unwrap().packets_sent - sent_before;
    assert!(sent >= 58, "{sent} packets in {took:?}");
    assert_eq!(p.b.conn(cb).close_reason(), Some(CloseReason::StallTimeout));
}

#[test]
fn a_sender_whose_peer_falls_silent_gives_up_after_the_stall_timeout() {
    let mut p = Pair::new();
    let (ca, _) = connected(&mut p);
    // From now on nothing arrives either way, and no ICMP tells why.
    p.loss_percent = 100;
    let silent_from = p.now;
    p.a.conn_mut(ca).send(&[1u8; 50_000]).unwrap();
    p.drain();
    assert!(p.a.conn(ca).stats().unwrap().stalled_since.is_some());
    p.run_until(|p| p.a.conn(ca).state() == Some(State::Closed));
    assert_eq!(p.a.conn(ca).close_reason(), Some(CloseReason::StallTimeout));
    let took = p.now - silent_from;
    assert!(took >= Duration::from_secs(15) && took < Duration::from_secs(16), "{took:?}");
    assert!(p.events_a.iter().any(|e| e.1 == Event::Closed(CloseReason::StallTimeout)));
}

#[test]
fn stalled_since_clears_while_the_peer_keeps_acking() {
    let mut p = Pair::new();
    p.loss_percent = 10;
    let (ca, _) = transfer(&mut p, 500_000);
    assert_eq!(p.a.conn(ca).stats().unwrap().stalled_since, None);
    assert_eq!(p.a.conn(ca).close_reason(), None);
}

#[test]
fn time_wait_lingers_before_the_endpoint_may_exit() {
    let mut p = Pair::new();
    let (ca, _) = transfer(&mut p, 10_000);
    assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait));
    assert!(!p.a.is_idle(p.now), "a peer whose last ack was lost could still ask");
    assert!(p.b.is_idle(p.now), "the passive closer is done");
    p.now += Duration::from_millis(260);
    assert!(p.a.is_idle(p.now), "four RTOs on a 10 ms path are under the 250 ms floor");
    assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait), "TIME-WAIT itself lasts on");
}

/// spec §4.8: the linger is four RTOs, but at most a second: the peer
/// repeats a lone FIN every 250 ms at most whatever its RTO, and a lossy
/// path's RTT samples can blow an RTO up to seconds (a `--once` receiver's
/// sender lingered 4 s after it at 30% loss).
#[test]
fn a_long_rto_keeps_an_exiting_endpoint_lingering_a_second_at_most() {
    let mut p = Pair::new();
    p.delay = Duration::from_millis(300);
    let (ca, _) = transfer(&mut p, 10_000);
    assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait));
    let st = p.a.conn(ca).stats().unwrap();
    let rto = st.srtt + st.rttvar * 4;
    assert!(rto * 4 > Duration::from_secs(2), "the path's RTO is {rto:?}");
    assert!(!p.a.is_idle(p.now), "a peer whose last ack was lost could still ask");
    let start = p.now;
    while !p.a.is_idle(p.now) {
        p.now += Duration::from_millis(10);
        assert!(p.now - start <= Duration::from_secs(1), "still lingering with an RTO of {rto:?}");
    }
    assert!(p.now - start >= Duration::from_millis(100), "it lingered at all");
}

/// spec §4.8: the cap on the linger does not cut off the final ack's
/// repeats. A peer whose FIN rode with its last data (an "ok" reply, then
/// close) repeats them only after its whole RTO, over a second here: with
/// the first two acks lost, the third must still go before the exit, or
/// the peer's repeat meets port unreachable and it ends `Unreachable`.
#[test]
fn with_a_long_rto_the_last_final_ack_still_goes_before_the_exit() {
    let mut p = Pair::new();
    p.delay = Duration::from_millis(300);
    let (ca, cb) = connected(&mut p);
    exchange(&mut p, ca, cb);
    p.a.conn_mut(ca).close();
    p.a.prepare_exit(p.now);
    p.run_until(|p| p.b.conn(cb).state() == Some(State::CloseWait) && p.a.conn(ca).state() == Some(State::FinWait2));
    p.b.conn_mut(cb).send(b"ok").unwrap();
    p.b.conn_mut(cb).close();
    p.run_until(|p| p.a.conn(ca).state() == Some(State::TimeWait));
    let entered = p.now;
    take_from_a(&mut p);
    // The second ack, a quarter SRTT later, is lost too.
    let sent = p.a.conn(ca).stats().unwrap().packets_sent;
    p.run_until(|p| p.a.conn(ca).stats().unwrap().packets_sent > sent);
    take_from_a(&mut p);
    // a's process exits once it may: from then on what reaches its port
    // draws port unreachable, and it sends nothing.
    let mut exit_at = None;
    for _ in 0..100_000 {
        if p.b.conn(cb).state() == Some(State::Closed) {
            break;
        }
        if exit_at.is_none() && p.a.is_idle(p.now) {
            exit_at = Some(p.now);
        }
        if exit_at.is_some() {
            p.drain();
            let wire = std::mem::take(&mut p.wire);
            for (at, to_b, d) in wire {
                if to_b {
                    continue; // a is gone: nothing more of it leaves
                }
                if at <= p.now {
                    p.b.handle_icmp(p.now, p.a_addr, UnreachableKind::Port, &d);
                } else {
                    p.wire.push_back((at, to_b, d));
                }
            }
        }
        assert!(p.step(), "nothing left to do");
    }
    assert_eq!(p.b.conn(cb).close_reason(), Some(CloseReason::Graceful), "the third ack reached b");
    let exit_at = exit_at.unwrap_or_else(|| {
        p.run_until(|p| p.a.is_idle(p.now));
        p.now
    });
    // b's own repeat, after its RTO, may restart a's linger once.
    assert!(exit_at - entered <= Duration::from_secs(2), "a exited {:?} after TIME-WAIT", exit_at - entered);
}

#[test]
fn an_exiting_endpoint_sends_its_lost_final_ack_again_before_the_peer_repeats_its_fin() {
    let mut p = Pair::new();
    p.delay = Duration::from_millis(10);
    let (ca, cb) = connected(&mut p);
    p.a.conn_mut(ca).close();
    // What wait_idle does first: a's process means to exit.
    p.a.prepare_exit(p.now);
    p.run_until(|p| p.b.conn(cb).state() == Some(State::CloseWait) && p.a.conn(ca).state() == Some(State::FinWait2));
    p.b.conn_mut(cb).close();
    p.run_until(|p| p.a.conn(ca).state() == Some(State::TimeWait));
    // a's final ack is lost.
    take_from_a(&mut p);
    let b_sent = p.b.conn(cb).stats().unwrap().packets_sent;
    p.run_until(|p| p.b.conn(cb).state() == Some(State::Closed));
    assert_eq!(p.b.conn(cb).close_reason(), Some(CloseReason::Graceful));
    assert_eq!(p.b.conn(cb).stats().unwrap().packets_sent, b_sent, "b never had to repeat its FIN");
    assert!(!p.a.is_idle(p.now), "a still lingers");
}

#[test]
fn time_wait_of_an_endpoint_that_stays_sends_nothing_unasked() {
    let mut p = Pair::new();
    let (ca, _) = transfer(&mut p, 10_000);
    assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait));
    let before = p.a.conn(ca).stats().unwrap().packets_sent;
    p.now += Duration::from_secs(1);
    p.a.handle_timeout(p.now);
    p.drain();
    assert_eq!(p.a.conn(ca).stats().unwrap().packets_sent, before, "no repeat of the final ack");
}

/// spec §4.8: at the exit, the final ack goes again only where the peer
/// could still be waiting for it: a TIME-WAIT within its linger repeats it,
/// one past its linger (its peer would have asked again) stays
/// quiet. A client that held 10,000 short sessions in TIME-WAIT sent
/// 20,000 repeats at its exit, each answered by a reset.
#[test]
fn an_exiting_endpoint_repeats_the_final_ack_only_within_the_linger() {
    for (waited, repeats) in [(Duration::from_millis(20), true), (Duration::from_millis(1100), false)] {
        let mut p = Pair::new();
        let (ca, _) = transfer(&mut p, 10_000);
        assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait));
        p.now += waited;
        p.a.handle_timeout(p.now);
        p.drain();
        let before = p.a.conn(ca).stats().unwrap().packets_sent;
        assert_eq!(p.a.is_idle(p.now), !repeats, "after {waited:?} in TIME-WAIT");
        p.a.prepare_exit(p.now);
        for _ in 0..20 {
            p.step();
        }
        let sent = p.a.conn(ca).stats().unwrap().packets_sent - before;
        assert_eq!(sent > 0, repeats, "after {waited:?} in TIME-WAIT");
    }
}

/// spec §4.8: a peer that holds nothing answers a repeated final ack with
/// a RST; the repeats stop there (one repeat and one RST, not two of
/// each), and TIME-WAIT itself stays (RFC 1337). With the RST lost, both
/// repeats go.
#[test]
fn a_reset_for_a_repeated_final_ack_stops_the_repeats() {
    for rst_arrives in [true, false] {
        let mut p = Pair::new();
        let (ca, cb) = transfer(&mut p, 10_000);
        assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait));
        p.b.conn_mut(cb).release();
        p.run_until(|p| p.b.connection_count() == 0);
        let before = p.a.conn(ca).stats().unwrap().packets_sent;
        p.a.prepare_exit(p.now);
        let start = p.now;
        while p.now - start < Duration::from_secs(2) {
            p.drain();
            p.now += Duration::from_millis(5);
            while p.wire.front().is_some_and(|w| w.0 <= p.now) {
                let (_, to_b, d) = p.wire.pop_front().unwrap();
                if to_b {
                    p.b.handle_datagram(p.now, p.a_addr, &d);
                } else if rst_arrives {
                    p.a.handle_datagram(p.now, p.b_addr, &d);
                }
            }
            p.a.handle_timeout(p.now);
            p.b.handle_timeout(p.now);
        }
        let repeats = p.a.conn(ca).stats().unwrap().packets_sent - before;
        assert_eq!(repeats, if rst_arrives { 1 } else { 2 }, "the RST arrives: {rst_arrives}");
        assert!(p.a.is_idle(p.now), "the linger is over");
        assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait), "TIME-WAIT ignores the RST otherwise");
    }
}

/// A client connected (its SYN-ACK in) with nothing written: its cookie
/// echo is held for a first write (spec §6.2), nothing of it on the wire.
fn echo_held() -> (Pair, crate::ConnHandle) {
    let mut p = Pair::new();
    let ca = p.a.connect(p.now, p.b_addr).unwrap();
    p.run_until(|p| p.a.conn(ca).state() == Some(State::Established));
    p.drain();
    assert!(!p.wire.iter().any(|w| w.1), "the echo waits for a write");
    (p, ca)
}

/// spec §6.2: with nothing queued when the SYN-ACK comes, the cookie echo
/// waits up to `echo_delay` (10 ms) for the application's first write; a
/// request written within it rides on the echo (the client's second and
/// last datagram before the reply), and without one the echo goes alone
/// when the delay ends.
#[test]
fn the_cookie_echo_waits_for_the_first_write_and_carries_it() {
    for write_after in [Some(Duration::from_millis(8)), None] {
        let (mut p, ca) = echo_held();
        let connected = p.now;
        assert_eq!(p.a.conn(ca).stats().unwrap().packets_sent, 1, "the SYN");
        if let Some(d) = write_after {
            p.now += d;
            p.a.handle_timeout(p.now);
            p.drain();
            assert!(!p.wire.iter().any(|w| w.1), "the echo still waits after {d:?}");
            p.a.conn_mut(ca).send(&[9u8; 1000]).unwrap();
            p.a.conn_mut(ca).close();
            p.drain();
            let echo = take_from_a(&mut p);
            assert!(echo.len() > 1000, "the echo carries the request: {} bytes", echo.len());
            assert_eq!(p.a.conn(ca).stats().unwrap().packets_sent, 2, "SYN, then the echo with the request");
        } else {
            p.run_until(|p| {
                p.drain();
                p.wire.iter().any(|w| w.1)
            });
            assert_eq!(p.now - connected, Duration::from_millis(10), "the echo goes alone after echo_delay");
        }
        p.run_until(|p| p.events_b.iter().any(|e| e.1 == Event::Incoming));
    }
}

/// spec §15.3: a released connection in TIME-WAIT hands its containers
/// (streams, sent queue, events, controller) to the next connection at
/// once, not 15 s later when TIME-WAIT ends; it still sends its final
/// ack, and it ends in TIME-WAIT's time without handing on a second set.
#[test]
fn a_released_time_wait_hands_its_containers_to_the_next_connection_at_once() {
    let mut p = Pair::new();
    let (ca, _) = transfer(&mut p, 10_000);
    assert_eq!(p.a.conn(ca).state(), Some(State::TimeWait));
    assert_eq!(p.a.spare_connections(), 0);
    p.a.conn_mut(ca).release();
    assert_eq!(p.a.spare_connections(), 1, "handed on in TIME-WAIT");
    assert_eq!(p.a.connection_count(), 1, "TIME-WAIT itself stays");
    // It still sends its final ack (here the exit's repeat, spec §4.8).
    let sent = p.a.conn(ca).stats().unwrap().packets_sent;
    p.a.prepare_exit(p.now);
    p.run_until(|p| p.a.conn(ca).stats().unwrap().packets_sent > sent);
    // The next connection takes the containers.
    let next = p.a.connect(p.now, p.b_addr).unwrap();
    assert_eq!(p.a.spare_connections(), 0, "the next connection took them");
    p.run_until(|p| p.a.conn(next).state() == Some(State::Established));
    p.a.conn_mut(next).abort(p.now, crate::wire::ErrorCode::APPLICATION);
    p.a.conn_mut(next).release();
    p.run_until(|p| p.a.connection_count() == 0);
    assert_eq!(p.a.spare_connections(), 1, "the next connection's set only; the shed one holds none");
}

/// spec §6.2: a stream's FIN with no data queued also ends the echo's
/// hold: the echo carries it at once.
#[test]
fn a_stream_fin_queued_after_the_syn_ack_sends_the_echo_at_once() {
    let (mut p, ca) = echo_held();
    p.a.conn_mut(ca).finish_stream(crate::StreamId::BYTES).unwrap();
    p.drain();
    assert!(p.wire.iter().any(|w| w.1), "the echo left with the stream's FIN, without waiting");
}

/// spec §6.2: an application that waits to read before it wrote (its
/// server speaks first) ends the echo's hold: the echo goes at once.
#[test]
fn a_client_that_waits_to_read_first_sends_the_echo_at_once() {
    let (mut p, ca) = echo_held();
    let at = p.now;
    assert!(p.a.conn_mut(ca).end_echo_hold(p.now), "an echo was held");
    p.drain();
    assert!(p.wire.iter().any(|w| w.1), "the echo left at once");
    assert!(!p.a.conn_mut(ca).end_echo_hold(p.now), "nothing held any more");
    p.run_until(|p| p.events_b.iter().any(|e| e.1 == Event::Incoming));
    assert_eq!(p.now - at, p.delay, "the server knows one way later");
}
