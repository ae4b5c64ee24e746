//! Unit tests of the receiver without the simulator: the engine driven by
//! hand with datagrams built by `wire::mcast` (spec §16.4, §16.7, §16.8).

use super::*;
use crate::wire::mcast::{emit_announcement, emit_ranges};
use crate::wire::Header;
use std::time::Duration;

fn group() -> SocketAddr {
    "239.1.2.3:7000".parse().expect("addr")
}

fn sender() -> SocketAddr {
    "198.18.0.1:7000".parse().expect("addr")
}

/// A receiver of network 1 registered with session 5, whose file is 20
/// packets of 1000 bytes.
fn registered(now: Instant) -> McastReceiver {
    let cfg = ReceiverConfig { network: 1, seed: 3, ..ReceiverConfig::default() };
    let mut r = McastReceiver::new(cfg, group());
    let info = Announcement {
        size: Some(20_000),
        block: 1000,
        artp_max_us: 600,
        repair_interval_ms: 50,
        fec_k: 0,
        hash: Some([1; 32]),
        name: "f".into(),
    };
    let client = r.client_id();
    feed(&mut r, now, PacketType::McAnnounce, Flags::empty(), 0, 20, 0, |o| emit_announcement(o, &info));
    feed(&mut r, now, PacketType::McRegister, Flags::ACK, 0, 1, client, |o| emit_announcement(o, &info));
    assert!(r.is_registered());
    r
}

#[allow(clippy::too_many_arguments)]
fn feed(
    r: &mut McastReceiver,
    now: Instant,
    ptype: PacketType,
    flags: Flags,
    seq: u32,
    ack: u32,
    window: u32,
    body: impl FnOnce(&mut [u8]) -> usize,
) -> Option<Delivery> {
    let mut buf = vec![0u8; 2000];
    let n = emit(&mut buf, ptype, flags, 5, seq, ack, window, body).expect("fits");
    r.handle_datagram(now, sender(), &mut buf[..n])
}

/// What the receiver sends at `now`: (destination, type, seq, error).
fn drain(r: &mut McastReceiver, now: Instant) -> Vec<(SocketAddr, PacketType, u32, Option<ErrorCode>)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1500];
    while let Some(t) = r.poll_transmit(now, &mut buf) {
        let h = Header::parse(&buf[..t.size]).expect("header");
        let error = match McPacket::parse(&buf[..t.size]).expect("parses") {
            McPacket::Status { error, .. } => error,
            _ => None,
        };
        out.push((t.destination, h.ptype, h.seq, error));
        assert!(out.len() < 100);
    }
    out
}

#[test]
fn an_ack_heard_from_our_network_suppresses_ours_and_one_from_another_does_not() {
    for (network, suppressed) in [(1, true), (2, false)] {
        let t0 = Instant::now();
        let mut r = registered(t0);
        drain(&mut r, t0);
        for sn in 0..4 {
            assert!(feed(&mut r, t0, PacketType::McData, Flags::empty(), sn, 3, 4, |o| o[..1000].len()).is_some());
        }
        feed(&mut r, t0, PacketType::McAck, Flags::empty(), 3, network, 99, |o| emit_ranges(o, []).0);
        let later = t0 + Duration::from_millis(1);
        // (A sender on another network also gets a unicast copy, spec §16.4.)
        let acks = drain(&mut r, later).iter().filter(|x| x.1 == PacketType::McAck && x.0 == group()).count();
        assert_eq!((acks, r.stats().acks_suppressed), if suppressed { (0, 1) } else { (1, 0) }, "network {network}");
    }
}

#[test]
fn an_aborted_receiver_tells_the_sender_its_code_three_times_and_takes_nothing_more() {
    let t0 = Instant::now();
    let mut r = registered(t0);
    drain(&mut r, t0);
    r.abort(t0, ErrorCode::INTERRUPTED);
    assert!(r.is_finished() && r.poll_timeout().is_none());
    let sent = drain(&mut r, t0);
    assert_eq!(sent, vec![(sender(), PacketType::McStatus, 0, Some(ErrorCode::INTERRUPTED)); 3]);
    assert_eq!(feed(&mut r, t0, PacketType::McData, Flags::empty(), 0, 3, 4, |o| o[..10].len()), None);
    assert!(drain(&mut r, t0 + Duration::from_secs(5)).is_empty());
    // Not registered: nothing to end, nothing sent.
    let mut r = McastReceiver::new(ReceiverConfig::default(), group());
    r.abort(t0, ErrorCode::INTERRUPTED);
    assert!(r.is_finished() && drain(&mut r, t0).is_empty());
}

#[test]
fn a_last_packet_at_the_highest_sequence_number_is_dropped_beyond_the_limit_not_overflowed() {
    let group: SocketAddr = "239.1.2.3:7000".parse().expect("addr");
    let sender: SocketAddr = "198.18.0.1:7000".parse().expect("addr");
    let mut r = McastReceiver::new(ReceiverConfig { max_packets: 64, ..ReceiverConfig::default() }, group);
    let now = Instant::now();
    let info = Announcement {
        size: None,
        block: 1000,
        artp_max_us: 600,
        repair_interval_ms: 50,
        fec_k: 0,
        hash: None,
        name: "f".into(),
    };
    let mut buf = vec![0u8; 2000];
    let n = emit(&mut buf, PacketType::McAnnounce, Flags::empty(), 5, 0, u32::MAX, 0, |o| {
        crate::wire::mcast::emit_announcement(o, &info)
    })
    .expect("fits");
    r.handle_datagram(now, sender, &mut buf[..n]);
    let n = emit(&mut buf, PacketType::McData, Flags::FIN, 5, u32::MAX, u32::MAX, 1, |o| {
        o[..10].fill(1);
        10
    })
    .expect("fits");
    assert_eq!(r.handle_datagram(now, sender, &mut buf[..n]), None);
    assert_eq!(r.stats().dropped_beyond_limit, 1);
    assert_eq!(r.progress(), (0, None), "no total from a packet beyond the limit");
}

/// An ACK of `lwsn` heard from receiver `client` of network 1.
fn heard_ack(r: &mut McastReceiver, now: Instant, client: u32, lwsn: u32) {
    let mut buf = vec![0u8; 200];
    let n =
        emit(&mut buf, PacketType::McAck, Flags::empty(), 5, lwsn, 1, client, |o| emit_ranges(o, []).0).expect("fits");
    let from: SocketAddr = "198.18.1.77:7000".parse().expect("addr");
    r.handle_datagram(now, from, &mut buf[..n]);
}

#[test]
fn a_receiver_lagging_its_neighbours_at_six_of_eight_windows_acks_unsuppressed_with_klv_until_it_catches_up() {
    let t0 = Instant::now();
    let mut r = registered(t0);
    drain(&mut r, t0);
    let data = |r: &mut McastReceiver, sn: u32, lwsn: u32| {
        feed(r, t0, PacketType::McData, Flags::empty(), sn, lwsn, 10, |o| {
            o[..1000].fill(1);
            1000
        });
    };
    // Windows of 10: a neighbour acks each while we hold only its first
    // packet (9 short: more than a quarter window and the 8-packet floor).
    for k in 0..6u32 {
        assert!(!r.is_behind(), "{k} lags of 8 are not yet behind (a busy host stalls now and then)");
        data(&mut r, k * 10, k * 10 + 9);
        heard_ack(&mut r, t0, 99, k * 10 + 9);
        for sn in k * 10 + 1..k * 10 + 10 {
            data(&mut r, sn, k * 10 + 9);
        }
    }
    assert!(r.is_behind() && r.stats().lagged == 6);
    // Its ACK of window 69 is not suppressed by the neighbour's, and says KLV.
    for sn in 60..70 {
        data(&mut r, sn, 69);
    }
    heard_ack(&mut r, t0, 99, 69);
    let mut buf = vec![0u8; 1500];
    // Polled 50 ms late, the ACK waits a millisecond more (spec §16.4, a
    // stalled process reads first), then goes.
    let later = t0 + Duration::from_millis(50);
    let mut acks = Vec::new();
    for at in [later, later + Duration::from_millis(2)] {
        while let Some(t) = r.poll_transmit(at, &mut buf) {
            let h = Header::parse(&buf[..t.size]).expect("header");
            if h.ptype == PacketType::McAck {
                acks.push((h.seq, h.flags.contains(Flags::KLV)));
            }
        }
    }
    assert!(acks.contains(&(69, true)), "{acks:?}");
    // Seven more windows held before the neighbour's ACK (eight with 69):
    // caught up (the sender now paced to it), suppressed again.
    for k in 7..14 {
        for sn in k * 10..k * 10 + 10 {
            data(&mut r, sn, k * 10 + 9);
        }
        heard_ack(&mut r, t0, 99, k * 10 + 9);
    }
    assert!(!r.is_behind(), "eight windows in time end it");
}

#[test]
fn a_receiver_a_packet_or_two_short_in_small_windows_is_not_behind() {
    let t0 = Instant::now();
    let mut r = registered(t0);
    drain(&mut r, t0);
    // Windows of 8: a neighbour's ACK while 3 short (more than a quarter,
    // within the 8-packet floor), window after window.
    for k in 0..6u32 {
        for sn in k * 8..k * 8 + 5 {
            feed(&mut r, t0, PacketType::McData, Flags::empty(), sn, k * 8 + 7, 8, |o| {
                o[..1000].fill(1);
                1000
            });
        }
        heard_ack(&mut r, t0, 99, k * 8 + 7);
    }
    assert!(!r.is_behind() && r.stats().lagged == 0);
}

#[test]
fn a_window_whose_last_packet_was_lost_is_acked_when_the_next_window_begins() {
    let t0 = Instant::now();
    let mut r = registered(t0);
    drain(&mut r, t0);
    for sn in 0..9 {
        feed(&mut r, t0, PacketType::McData, Flags::empty(), sn, 9, 10, |o| {
            o[..1000].fill(1);
            1000
        });
    }
    // SN 9, the window's end, is lost; the next window's first packet comes.
    feed(&mut r, t0, PacketType::McData, Flags::empty(), 10, 15, 6, |o| {
        o[..1000].fill(1);
        1000
    });
    let later = t0 + Duration::from_millis(50);
    let mut sent = drain(&mut r, later);
    sent.extend(drain(&mut r, later + Duration::from_millis(2)));
    assert!(sent.iter().any(|x| x.1 == PacketType::McAck && x.2 == 9), "{sent:?}");
}

#[test]
fn a_repair_names_per_fec_block_only_the_packets_missing_beyond_the_parity_held() {
    // spec §16.9: blocks of 8 packets; block 0 misses 5 and holds 2 shards
    // (names 3), block 1 misses 1 and holds 1 (names none: it is rebuilt),
    // block 2 misses 2 and holds none (names both).
    let t0 = Instant::now();
    let cfg = ReceiverConfig { network: 1, seed: 3, ..ReceiverConfig::default() };
    let mut r = McastReceiver::new(cfg, group());
    let info = Announcement {
        size: Some(24_000),
        block: 1000,
        artp_max_us: 600,
        repair_interval_ms: 50,
        fec_k: 8,
        hash: Some([1; 32]),
        name: "f".into(),
    };
    let client = r.client_id();
    feed(&mut r, t0, PacketType::McAnnounce, Flags::empty(), 0, 24, 0, |o| emit_announcement(o, &info));
    feed(&mut r, t0, PacketType::McRegister, Flags::ACK, 0, 1, client, |o| emit_announcement(o, &info));
    let lost = [1, 2, 4, 5, 6, 12, 17, 20];
    for sn in (0..24).filter(|sn| !lost.contains(sn)) {
        feed(&mut r, t0, PacketType::McData, Flags::empty(), sn, 23, 24, |o| o[..1000].len());
    }
    for (block, index) in [(0, 0), (0, 1), (1, 0)] {
        feed(&mut r, t0, PacketType::McParity, Flags::empty(), block, index, 8, |o| o[..1000].len());
    }
    assert_eq!(r.repair_ranges(24), [1..3, 4..5, 17..18, 20..21]);
}

#[test]
fn a_group_assignment_is_taken_only_newer_and_only_by_a_receiver_without_an_operators_id() {
    let now = Instant::now();
    let mut r = registered(now);
    let client = r.client_id();
    let assign = |r: &mut McastReceiver, epoch: u32, group: u32| {
        feed(r, now, PacketType::McRegister, Flags::ACK | Flags::KLV, epoch, group, client, |_| 0);
    };
    assign(&mut r, 5, 0xa000_0001);
    assert_eq!(r.group(), None, "an operator's id holds");
    r.cfg.auto_group = true;
    assign(&mut r, 5, 0xa000_0001);
    assert_eq!(r.group(), Some(0xa000_0001));
    assign(&mut r, 4, 0xa000_0002);
    assert_eq!(r.group(), Some(0xa000_0001), "an older epoch, reordered, is ignored");
    assign(&mut r, 6, 0xa000_0002);
    assert_eq!(r.group(), Some(0xa000_0002));
    // Its feedback now names the group, and heeds the group's ACKs.
    assert_eq!(r.feedback_network(), 0xa000_0002);
    // Another client's assignment is not ours.
    feed(&mut r, now, PacketType::McRegister, Flags::ACK | Flags::KLV, 7, 9, client ^ 1, |_| 0);
    assert_eq!(r.group(), Some(0xa000_0002));
}

#[test]
fn an_assignment_registers_nobody() {
    let now = Instant::now();
    let cfg = ReceiverConfig { network: 1, seed: 3, auto_group: true, ..ReceiverConfig::default() };
    let mut r = McastReceiver::new(cfg, group());
    let info = Announcement {
        size: Some(20_000),
        block: 1000,
        artp_max_us: 600,
        repair_interval_ms: 50,
        fec_k: 0,
        hash: Some([1; 32]),
        name: "f".into(),
    };
    feed(&mut r, now, PacketType::McAnnounce, Flags::empty(), 0, 20, 0, |o| emit_announcement(o, &info));
    let client = r.client_id();
    feed(&mut r, now, PacketType::McRegister, Flags::ACK | Flags::KLV, 1, 0xa000_0001, client, |_| 0);
    assert!(!r.is_registered());
    // Its REGISTER says it may be regrouped (KLV).
    let mut buf = vec![0u8; 1500];
    let t = r.poll_transmit(now, &mut buf).expect("REGISTER");
    let h = Header::parse(&buf[..t.size]).expect("header");
    assert_eq!(h.ptype, PacketType::McRegister);
    assert!(h.flags.contains(Flags::KLV));
}

#[test]
fn an_ack_found_overdue_after_a_stall_waits_for_what_queued_and_a_neighbours_ack_suppresses_it() {
    // spec §16.4: a process descheduled past its ACK's backoff reads what
    // queued first; the neighbour's ACK of the same window among it
    // suppresses ours. Without it (next window), the held ACK goes.
    let t0 = Instant::now();
    let mut r = registered(t0);
    drain(&mut r, t0);
    for sn in 0..10 {
        feed(&mut r, t0, PacketType::McData, Flags::empty(), sn, 9, 10, |o| {
            o[..1000].fill(1);
            1000
        });
    }
    let woke = t0 + Duration::from_millis(30);
    assert!(drain(&mut r, woke).iter().all(|x| x.1 != PacketType::McAck), "held after the stall");
    heard_ack(&mut r, woke, 99, 9);
    assert!(drain(&mut r, woke + Duration::from_millis(2)).iter().all(|x| x.1 != PacketType::McAck));
    assert_eq!((r.stats().held_after_stall, r.stats().acks_suppressed, r.stats().acks_sent), (1, 1, 0));
    for sn in 10..20 {
        feed(&mut r, woke, PacketType::McData, Flags::empty(), sn, 19, 10, |o| {
            o[..1000].fill(1);
            1000
        });
    }
    let woke = woke + Duration::from_millis(40);
    assert!(drain(&mut r, woke).iter().all(|x| x.1 != PacketType::McAck));
    let sent = drain(&mut r, woke + Duration::from_millis(2));
    assert!(sent.iter().any(|x| x.1 == PacketType::McAck && x.2 == 19), "held once, then sent: {sent:?}");
}
