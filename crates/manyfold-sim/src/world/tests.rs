//! Unit tests of the world harness itself: routing, capture, drop rules,
//! the livelock guard, time keeping and determinism.

use std::time::Duration;

use manyfold_proto::wire::{Flags, HandshakeParams, Header, Packet, PacketType};
use manyfold_proto::{EndpointConfig, Event, State};

use super::*;
use crate::transfer::Transfer;

fn addr(last: u8) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, last], 5000))
}

/// A well-formed initial SYN, as a client would send it.
fn syn(client_id: u32, isn: u32) -> Vec<u8> {
    let mut p = Packet::bare(PacketType::Segment, Flags::SYN, 0, isn, 0, 65_535);
    p.params = Some(HandshakeParams::new(client_id, 1400));
    let mut v = vec![0u8; p.len()];
    p.emit(&mut v);
    v
}

#[test]
fn garbage_is_delivered_and_counted_as_malformed() {
    let mut w = World::new(1);
    w.add_node(addr(1), EndpointConfig::default());
    w.inject(addr(9), addr(1), vec![0xff; 40]);
    w.inject(addr(9), addr(1), vec![1, 2, 3]);
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.endpoint(addr(1)).stats().dropped_malformed_total(), 2);
    assert_eq!(w.node_stats(addr(1)).datagrams_received, 2);
    assert_eq!(w.elapsed(), Duration::from_secs(1));
}

#[test]
fn datagrams_to_nowhere_are_unroutable() {
    let mut w = World::new(2);
    w.inject(addr(1), addr(2), vec![0; 10]);
    assert!(w.step());
    assert_eq!(w.unroutable(), 1);
    assert!(!w.step());
}

#[test]
fn syn_to_a_non_listener_is_refused_on_the_wire() {
    // Needs only the endpoint, not connection internals.
    let mut w = World::new(3);
    w.add_node(addr(1), EndpointConfig::default());
    w.set_capture(true);
    w.inject(addr(2), addr(1), syn(77, 1000));
    w.run_for(Duration::from_millis(100));
    let answers: Vec<_> = w.captured().iter().filter(|c| c.from == addr(1)).collect();
    assert_eq!(answers.len(), 1);
    let h = Header::parse(&answers[0].data).unwrap();
    assert!(h.flags.contains(Flags::RST));
    assert_eq!(h.conn_id, 77);
    assert_eq!(answers[0].at, LinkConfig::default().delay);
    assert_eq!(w.endpoint(addr(1)).stats().refused_not_listening, 1);
}

#[test]
fn listener_answers_syn_statelessly() {
    let mut w = World::new(4);
    w.add_node(addr(1), EndpointConfig::default());
    w.endpoint_mut(addr(1)).set_listening(true);
    w.inject(addr(2), addr(1), syn(5, 1));
    w.run_for(Duration::from_millis(100));
    assert_eq!(w.endpoint(addr(1)).stats().syn_cookies_sent, 1);
    assert_eq!(w.endpoint(addr(1)).connection_count(), 0);
    assert_eq!(w.unroutable(), 1, "the SYN-ACK went to an address with no node");
}

#[test]
fn drop_rule_removes_matching_datagrams_before_the_link() {
    let mut w = World::new(5);
    w.set_capture(true);
    w.set_drop_rule(|_, _, d| d.first() == Some(&1));
    w.inject(addr(1), addr(2), vec![1]);
    w.inject(addr(1), addr(2), vec![2]);
    w.run_for(Duration::from_secs(1));
    assert_eq!(w.dropped_by_rule(), 1);
    assert_eq!(w.captured().len(), 1);
    assert_eq!(w.link_stats(addr(1), addr(2)).offered, 1);
}

#[test]
#[should_panic(expected = "livelock")]
fn livelock_guard_trips_on_endless_work_at_one_instant() {
    let mut w = World::new(6);
    w.set_default_link(LinkConfig::with_delay(Duration::ZERO));
    w.set_max_steps_per_instant(10);
    for _ in 0..20 {
        w.inject(addr(1), addr(2), vec![0]);
    }
    w.run_for(Duration::from_secs(1));
}

#[test]
fn run_until_stops_at_the_limit_when_the_condition_never_holds() {
    let mut w = World::new(7);
    w.inject(addr(1), addr(2), vec![0]);
    let mut calls = 0;
    let ok = w.run_until(
        |_| {
            calls += 1;
            false
        },
        Duration::from_secs(3),
    );
    assert!(!ok);
    assert_eq!(w.elapsed(), Duration::from_secs(3));
    assert!(calls >= 2);
}

fn small_transfer(seed: u64) -> (u64, u64) {
    let mut w = World::new(seed);
    w.add_node(addr(1), EndpointConfig::default());
    w.add_node(addr(2), EndpointConfig::default());
    w.set_link(
        addr(1),
        addr(2),
        LinkConfig::with_delay(Duration::from_millis(20))
            .loss(0.05)
            .jitter(Duration::from_millis(3))
            .reorder(0.05, Duration::from_millis(10)),
    );
    let t = Transfer::start(&mut w, addr(1), addr(2), 200_000, 50_000);
    t.run(&mut w, Duration::from_secs(120)).unwrap();
    (w.trace_digest(), w.steps())
}

#[test]
fn same_seed_gives_the_same_run() {
    let a = small_transfer(42);
    assert_eq!(a, small_transfer(42));
    assert_ne!(a.0, small_transfer(43).0);
}

#[test]
fn connection_establishes_on_a_clean_link() {
    let mut w = World::new(8);
    w.add_node(addr(1), EndpointConfig::default());
    w.add_node(addr(2), EndpointConfig::default());
    w.endpoint_mut(addr(2)).set_listening(true);
    let h = w.connect(addr(1), addr(2));
    assert!(w.run_until(|w| w.endpoint(addr(1)).conn(h).state() == Some(State::Established), Duration::from_secs(5)));
    assert!(w.saw(addr(1), h, Event::Connected).is_some());
    // One round trip: 2 x 10 ms.
    assert_eq!(w.elapsed(), Duration::from_millis(20));
}

#[test]
fn run_for_ends_exactly_at_its_deadline_while_timers_churn() {
    // Superseded timer entries must not drag the clock past a deadline.
    let mut w = World::new(9);
    w.add_node(addr(1), EndpointConfig::default());
    w.add_node(addr(2), EndpointConfig::default());
    let t = Transfer::start(&mut w, addr(1), addr(2), 100_000, 100_000);
    let mut t = Some(t);
    for ms in 1..=2000u32 {
        if let Some(x) = t.as_mut() {
            if x.pump(&mut w) {
                t = None;
            }
        }
        w.run_for(Duration::from_millis(1));
        assert_eq!(w.elapsed(), Duration::from_millis(u64::from(ms)));
    }
    assert!(t.is_none(), "transfer did not finish in 2 s");
}

#[test]
fn rule_can_delay_a_datagram_past_later_ones() {
    let mut w = World::new(10);
    w.set_capture(true);
    w.set_rule(|_, _, d| if d[0] == 1 { Verdict::Delay(Duration::from_millis(5)) } else { Verdict::Pass });
    w.inject(addr(1), addr(2), vec![1]);
    w.inject(addr(1), addr(2), vec![2]);
    assert!(w.step());
    assert_eq!(w.elapsed(), Duration::from_millis(10));
    assert!(w.step());
    assert_eq!(w.elapsed(), Duration::from_millis(15));
    assert_eq!(w.delayed_by_rule(), 1);
    assert_eq!(w.unroutable(), 2);
}
