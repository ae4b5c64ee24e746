//! Unit tests of the sender's parts without the simulator: the engine is
//! driven by hand with datagrams built by `wire::mcast` (spec §16.3–§16.9).

// A range list of one range is what most reports carry.
#![allow(clippy::single_range_in_vec_init)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::window::loss_allowance;
use super::{McastSender, ReceiverOutcome, SenderConfig, SenderEvent};
use crate::wire::mcast::{emit, emit_code, emit_ranges, Announcement, McPacket};
use crate::wire::{ErrorCode, Flags, PacketType};

const BLOCK: u64 = 1428;

fn group() -> SocketAddr {
    "239.1.2.3:5000".parse().expect("addr")
}

fn addr(client: u32) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, client as u8], 5000))
}

/// A sender of a `packets`-packet file, already past the announce phase
/// once `receivers` (client id, network) registered.
fn sender(cfg: SenderConfig, packets: u64, receivers: &[(u32, u32)], now: Instant) -> McastSender {
    let info = Announcement {
        size: Some(packets * BLOCK),
        block: 0,
        artp_max_us: 0,
        repair_interval_ms: 0,
        fec_k: 0,
        hash: Some([1; 32]),
        name: "f".into(),
    };
    let cfg = SenderConfig { min_receivers: receivers.len().max(1), adapt_artp: false, ..cfg };
    let mut s = McastSender::new(cfg, group(), info, now);
    assert_eq!(u64::from(s.block()), BLOCK);
    for &(client, network) in receivers {
        feed(&mut s, now, client, PacketType::McRegister, Flags::empty(), 0, network, |_| 0);
    }
    s
}

/// A packet from receiver `client`: `seq`, `ack` as the header carries them.
#[allow(clippy::too_many_arguments)]
fn feed(
    s: &mut McastSender,
    now: Instant,
    client: u32,
    ptype: PacketType,
    flags: Flags,
    seq: u32,
    ack: u32,
    body: impl FnOnce(&mut [u8]) -> usize,
) {
    let mut buf = [0u8; 1500];
    let n = emit(&mut buf, ptype, flags, s.session_id(), seq, ack, client, body).expect("fits");
    s.handle_datagram(now, addr(client), &buf[..n]);
}

fn ack(s: &mut McastSender, now: Instant, client: u32, network: u32, lwsn: u32) {
    feed(s, now, client, PacketType::McAck, Flags::empty(), lwsn, network, |o| emit_ranges(o, []).0);
}

/// What went out: (destination, type, seq, flags, error code).
type Sent = (SocketAddr, PacketType, u32, Flags, Option<ErrorCode>);

fn drain(s: &mut McastSender, now: Instant) -> Vec<Sent> {
    let mut out = Vec::new();
    let mut buf = [0u8; 1500];
    while let Some(t) = s.poll_transmit(now, &mut buf, &mut |_, o: &mut [u8]| o.len()) {
        let p = McPacket::parse(&buf[..t.size]).expect("parses");
        let h = crate::wire::Header::parse(&buf[..t.size]).expect("header");
        let error = match p {
            McPacket::End { error, .. } | McPacket::Status { error, .. } => error,
            _ => None,
        };
        out.push((t.destination, h.ptype, h.seq, h.flags, error));
        assert!(out.len() < 10_000, "poll_transmit must run dry");
    }
    out
}

/// Paper 03's stop-and-wait: one window awaits its ACKs at a time.
fn stop_and_wait() -> SenderConfig {
    SenderConfig { windows_in_flight: 1, ..SenderConfig::default() }
}

fn data_sns(sent: &[Sent]) -> Vec<u32> {
    sent.iter().filter(|x| x.1 == PacketType::McData).map(|x| x.2).collect()
}

// ---- window.rs: paper 03's flow control (spec §16.3) ----------------------

#[test]
fn a_confirmed_window_doubles_in_slow_start_and_an_expired_one_shrinks_and_stretches_the_timer() {
    let t0 = Instant::now();
    let mut s = sender(stop_and_wait(), 50, &[(7, 1)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)), [0]);
    ack(&mut s, t0, 7, 1, 0);
    assert_eq!(s.window(), (2, Duration::from_millis(100)));
    assert_eq!(data_sns(&drain(&mut s, t0)), [1, 2]);
    ack(&mut s, t0, 7, 1, 2);
    assert_eq!(s.window().0, 4);
    assert_eq!(data_sns(&drain(&mut s, t0)), [3, 4, 5, 6]);
    // No ACK: the window's timer expires (its probe is overtaken).
    let expiry = s.poll_timeout().expect("timer");
    assert!(expiry <= t0 + Duration::from_millis(100));
    s.handle_timeout(t0 + Duration::from_millis(100));
    assert_eq!(s.window(), (3, Duration::from_millis(150)), "W − 1, Tout · α");
    assert_eq!(s.stats().windows_expired, 1);
    // Slow start is over: a confirmed window now grows by one.
    let t1 = t0 + Duration::from_millis(100);
    assert_eq!(data_sns(&drain(&mut s, t1)), [7, 8, 9]);
    ack(&mut s, t1, 7, 1, 9);
    assert_eq!(s.window(), (4, Duration::from_millis(100)), "W + 1, Tout / β floored at dflt_Tout");
}

#[test]
fn with_two_windows_in_flight_the_next_goes_out_before_the_last_is_acked_and_one_ack_confirms_both() {
    let t0 = Instant::now();
    let cfg = SenderConfig { initial_window: 4, slow_start: false, windows_in_flight: 2, ..SenderConfig::default() };
    let mut s = sender(cfg, 50, &[(7, 1)], t0);
    // Window 0..=3 and, without waiting for its ACK, window 4..=7.
    assert_eq!(data_sns(&drain(&mut s, t0)), [0, 1, 2, 3, 4, 5, 6, 7]);
    assert!(data_sns(&drain(&mut s, t0)).is_empty(), "two windows await their ACKs");
    // The first window's ACK lets a third go (W grew by one).
    ack(&mut s, t0, 7, 1, 3);
    assert_eq!(s.window().0, 5);
    assert_eq!(data_sns(&drain(&mut s, t0)), [8, 9, 10, 11, 12]);
    // An ACK of the third window's end (the second's ACK lost) confirms both.
    ack(&mut s, t0, 7, 1, 12);
    assert_eq!(s.stats().windows_confirmed, 3);
    assert_eq!(s.stats().late_acks, 0);
    // The second window's own ACK, late, changes nothing.
    ack(&mut s, t0, 7, 1, 7);
    assert_eq!(s.stats().windows_confirmed, 3);
    // With one window in flight (paper 03), the second waits for the first's ACK.
    let cfg = SenderConfig { initial_window: 4, slow_start: false, ..stop_and_wait() };
    let mut s = sender(cfg, 50, &[(7, 1)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)), [0, 1, 2, 3]);
    ack(&mut s, t0, 7, 1, 3);
    assert_eq!(data_sns(&drain(&mut s, t0)), [4, 5, 6, 7, 8]);
}

/// spec §16.3: with windows in flight, losses of later windows' packets
/// count against the next window to resolve, at once.
#[test]
fn with_windows_in_flight_a_loss_in_a_later_window_shrinks_the_next_to_resolve() {
    let t0 = Instant::now();
    let cfg = SenderConfig { initial_window: 20, slow_start: false, windows_in_flight: 3, ..SenderConfig::default() };
    let mut s = sender(cfg, 200, &[(7, 1)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)), (0..60).collect::<Vec<_>>());
    // Two losses in the first window: within the allowance of one
    // 20-packet window (about 3).
    feed(&mut s, t0, 7, PacketType::McAck, Flags::empty(), 19, 1, |o| emit_ranges(o, [5..6, 10..11]).0);
    assert_eq!(s.window().0, 21, "the first window grew");
    // The second window's ACK names two of its own packets and two of the
    // third window's: four since the first window resolved, above.
    feed(&mut s, t0, 7, PacketType::McAck, Flags::empty(), 39, 1, |o| {
        emit_ranges(o, [25..26, 30..31, 45..46, 50..51]).0
    });
    assert!(s.window().0 < 21, "the second shrank at once: {:?}", s.window());
}

/// DATA datagrams a sender of `cfg` sends in one second of virtual time
/// to one receiver that acks every packet at once, driven as the I/O
/// driver does (transmit until dry, then sleep to the next deadline).
fn data_in_one_second(cfg: SenderConfig) -> u64 {
    let t0 = Instant::now();
    let mut s = sender(cfg, 10_000, &[(7, 1)], t0);
    let (mut now, mut sent) = (t0, 0u64);
    while now < t0 + Duration::from_secs(1) {
        s.handle_timeout(now);
        // What the acks let go, at once, as a driver polls after input.
        loop {
            let sns = data_sns(&drain(&mut s, now));
            if sns.is_empty() {
                break;
            }
            sent += sns.len() as u64;
            for sn in sns {
                ack(&mut s, now, 7, 1, sn);
            }
        }
        now = s.poll_timeout().map_or(now, |t| t.max(now)).max(now + Duration::from_micros(1));
    }
    sent
}

#[test]
fn a_configured_ceiling_paces_the_data_whatever_the_window_allows() {
    // spec §16.3, "A configured ceiling": 1,452,000 B/s is 1000 datagrams
    // of 1452 bytes a second, plus the bucket's first 20 ms.
    let capped = data_in_one_second(SenderConfig { max_rate: Some(1_452_000), ..SenderConfig::default() });
    assert!((995..=1021).contains(&capped), "{capped} datagrams in 1 s at a ceiling of 1000/s");
    // The same sender without it: only its window holds it back.
    let free = data_in_one_second(SenderConfig::default());
    assert!(free > 3 * capped, "without a ceiling: {free}");
}

#[test]
fn a_window_waits_for_every_awaited_network_and_a_late_ack_is_counted_and_ignored() {
    let t0 = Instant::now();
    let mut s = sender(stop_and_wait(), 50, &[(7, 1), (8, 2), (9, 2)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)), [0]);
    ack(&mut s, t0, 7, 1, 0);
    assert_eq!(s.window().0, 1, "network 2 has not acked");
    ack(&mut s, t0, 9, 2, 0);
    assert_eq!(s.window().0, 2, "one ACK per network confirms it");
    ack(&mut s, t0, 8, 2, 0);
    assert_eq!(s.stats().late_acks, 1);
    assert_eq!(s.window().0, 2);
}

#[test]
fn with_the_papers_rule_every_newly_reported_loss_shrinks_the_window() {
    let t0 = Instant::now();
    let cfg = SenderConfig { loss_tolerance: 0.0, initial_window: 8, ..stop_and_wait() };
    let mut s = sender(cfg, 50, &[(7, 1)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)).len(), 8);
    let nack = |s: &mut McastSender, highest: u32, ranges: &[std::ops::Range<u32>]| {
        feed(s, t0, 7, PacketType::McNack, Flags::empty(), highest, 1, |o| emit_ranges(o, ranges.iter().cloned()).0);
    };
    nack(&mut s, 5, &[1..2]);
    assert_eq!(s.window().0, 7);
    nack(&mut s, 6, &[1..3]);
    assert_eq!(s.window().0, 6, "only SN 2 was new");
    // The same NACK again (its unicast copy, spec §16.4) is taken once.
    nack(&mut s, 6, &[1..3]);
    assert_eq!(s.stats().nacks, 2);
    nack(&mut s, 7, &[1..2, 2..3]);
    assert_eq!(s.window().0, 6, "nothing new");
    assert_eq!(s.receivers()[0].reported_lost, 1 + 2 + 2);
}

#[test]
fn the_loss_allowance_is_the_poisson_tail_that_random_loss_passes_nineteen_windows_in_twenty() {
    // spec §16.3: at 5%, one receiver: 20 losses of 256 trip it, 19 do not.
    assert_eq!(loss_allowance(0.05, 256.0, 1), 19.0);
    // Four receivers, 23 packets: 5 trip it.
    assert_eq!(loss_allowance(0.05, 23.0, 4), 4.0);
    assert_eq!(loss_allowance(0.05, 1.0, 8), 1.0, "at least one");
    // The most of a thousand receivers' losses lies further out.
    assert_eq!(loss_allowance(0.05, 256.0, 1000), 29.0);
    // A small window: the normal approximation allowed a thousand
    // receivers 1.25 losses of 2 packets, which 1% random loss beats
    // nearly every window; the tail allows 3.
    assert_eq!(loss_allowance(0.05, 2.0, 1000), 3.0);
    // What it promises: random loss at the tolerated rate trips it at most
    // one window in twenty (checked by the tail itself, 20 packets, 50 receivers).
    let (m, k) = (0.05 * 20.0, loss_allowance(0.05, 20.0, 50) as i32);
    let below: f64 =
        (0..=k).map(|i| (-m + f64::from(i) * f64::ln(m)).exp() / (1..=i).map(f64::from).product::<f64>()).sum();
    assert!(50.0 * (1.0 - below) <= 0.05, "k {k}");
    let below_one_less = below - (-m + f64::from(k) * f64::ln(m)).exp() / (1..=k).map(f64::from).product::<f64>();
    assert!(50.0 * (1.0 - below_one_less) > 0.05, "k {k} is the least");
}

// ---- members.rs: the receiver table (spec §16.7–§16.8) ---------------------

#[test]
fn a_full_table_refuses_and_a_silent_receiver_is_dropped_as_unresponsive() {
    let t0 = Instant::now();
    let cfg = SenderConfig { max_receivers: 1, ..SenderConfig::default() };
    let mut s = sender(cfg, 50, &[(7, 1)], t0);
    feed(&mut s, t0, 8, PacketType::McRegister, Flags::empty(), 0, 1, |_| 0);
    let sent = drain(&mut s, t0);
    assert!(sent.contains(&(addr(8), PacketType::McEnd, 0, Flags::ERR, Some(ErrorCode::REFUSED))), "{sent:?}");
    assert_eq!(s.stats().refused, 1);
    // Nothing from receiver 7 for longer than receiver_timeout (5 s).
    let later = t0 + Duration::from_secs(6);
    s.handle_timeout(later);
    assert_eq!(s.receivers()[0].outcome, ReceiverOutcome::Unresponsive);
    let sent = drain(&mut s, later);
    assert!(
        sent.iter().any(|x| x.0 == addr(7) && x.1 == PacketType::McEnd && x.4 == Some(ErrorCode::UNRESPONSIVE)),
        "it is told why: {sent:?}"
    );
}

#[test]
fn a_receiver_that_leaves_with_a_code_is_reported_and_no_longer_awaited() {
    let t0 = Instant::now();
    let mut s = sender(stop_and_wait(), 50, &[(7, 1), (8, 2)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)), [0]);
    ack(&mut s, t0, 7, 1, 0);
    assert_eq!(s.window().0, 1, "network 2 still awaited");
    feed(&mut s, t0, 8, PacketType::McStatus, Flags::ERR, 0, 2, |o| emit_code(o, ErrorCode::INTERRUPTED));
    assert_eq!(s.window().0, 2, "its leaving confirmed the window");
    let r = &s.receivers()[1];
    assert_eq!((r.outcome, r.left), (ReceiverOutcome::Incomplete, Some(ErrorCode::INTERRUPTED)));
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(events.contains(&SenderEvent::ReceiverLeft { client: 8, addr: addr(8), code: ErrorCode::INTERRUPTED }));
    // The only receiver leaving ends the session at once.
    let mut s = sender(SenderConfig::default(), 50, &[(7, 1)], t0);
    feed(&mut s, t0, 7, PacketType::McStatus, Flags::ERR, 0, 1, |o| emit_code(o, ErrorCode::INTERRUPTED));
    let events: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
    assert!(events.contains(&SenderEvent::Failed(super::SenderError::AllDropped)), "{events:?}");
    assert!(drain(&mut s, t0).iter().all(|x| x.1 != PacketType::McData), "no data to nobody");
    // A hash mismatch is still a hash mismatch.
    let mut s = sender(SenderConfig::default(), 50, &[(7, 1)], t0);
    feed(&mut s, t0, 7, PacketType::McStatus, Flags::ERR, 0, 1, |o| emit_code(o, ErrorCode::HASH_MISMATCH));
    assert_eq!((s.receivers()[0].outcome, s.receivers()[0].left), (ReceiverOutcome::HashMismatch, None));
}

// ---- repair.rs: gathering and sending repairs (spec §16.5, §16.9) ----------

/// A sender whose 4-packet file went out in one window, confirmed: in the
/// repair phase.
fn repairing(cfg: SenderConfig, t0: Instant) -> McastSender {
    let cfg = SenderConfig { initial_window: 8, ..cfg };
    let mut s = sender(cfg, 4, &[(7, 1), (8, 1)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)), [0, 1, 2, 3]);
    ack(&mut s, t0, 7, 1, 3);
    assert!(std::iter::from_fn(|| s.poll_event()).any(|e| e == SenderEvent::RepairStarted));
    s
}

fn repair(s: &mut McastSender, now: Instant, client: u32, ranges: &[std::ops::Range<u32>]) {
    feed(s, now, client, PacketType::McRepair, Flags::empty(), 1, 1, |o| emit_ranges(o, ranges.iter().cloned()).0);
}

#[test]
fn a_packet_several_receivers_ask_for_goes_by_multicast_and_one_only_one_asked_for_by_unicast() {
    let t0 = Instant::now();
    let mut s = repairing(SenderConfig { fec_k: 0, ..SenderConfig::default() }, t0);
    drain(&mut s, t0);
    repair(&mut s, t0, 7, &[0..2]);
    repair(&mut s, t0, 8, &[1..2]);
    assert!(drain(&mut s, t0).iter().all(|x| x.1 != PacketType::McData), "gathered first");
    let t1 = t0 + Duration::from_millis(5);
    s.handle_timeout(t1);
    let mut sent = drain(&mut s, t1);
    sent.extend(drain(&mut s, t1 + Duration::from_secs(1)));
    let repairs: Vec<_> = sent.iter().filter(|x| x.1 == PacketType::McData).map(|x| (x.0, x.2, x.3)).collect();
    assert_eq!(repairs, [(addr(7), 0, Flags::KLV), (group(), 1, Flags::KLV)]);
    assert_eq!((s.stats().repair_unicast, s.stats().repair_multicast), (1, 1));
    assert_eq!(s.receivers()[0].repair_passes, 1);
}

#[test]
fn receivers_missing_different_packets_of_one_block_get_one_parity_shard() {
    let t0 = Instant::now();
    let mut s = repairing(SenderConfig { fec_k: 4, ..SenderConfig::default() }, t0);
    drain(&mut s, t0);
    repair(&mut s, t0, 7, &[0..1]);
    repair(&mut s, t0, 8, &[2..3]);
    let t1 = t0 + Duration::from_millis(5);
    s.handle_timeout(t1);
    let sent = drain(&mut s, t1);
    let kinds: Vec<_> = sent.iter().filter(|x| x.1 != PacketType::McAnnounce).map(|x| (x.0, x.1, x.2)).collect();
    assert_eq!(kinds, [(group(), PacketType::McParity, 0)], "one shard of block 0 repairs both");
    assert_eq!(s.stats().parity_packets, 1);
}

#[test]
fn a_repeated_request_before_the_last_pass_went_out_is_not_a_new_pass() {
    let t0 = Instant::now();
    let cfg = SenderConfig { fec_k: 0, max_repair_passes: 1, ..SenderConfig::default() };
    let mut s = repairing(cfg, t0);
    repair(&mut s, t0, 7, &[0..1]);
    repair(&mut s, t0 + Duration::from_millis(1), 7, &[0..1]);
    assert_eq!(s.receivers()[0].repair_passes, 1);
    assert_eq!(s.receivers()[0].outcome, ReceiverOutcome::Active);
    // Much later, a second pass is one too many.
    repair(&mut s, t0 + Duration::from_secs(2), 7, &[0..1]);
    assert_eq!(s.receivers()[0].outcome, ReceiverOutcome::TooManyPasses);
}

// ---- parity.rs: parity first (spec §16.9) ----------------------------------

fn parity_blocks(sent: &[Sent]) -> Vec<u32> {
    sent.iter().filter(|x| x.1 == PacketType::McParity).map(|x| x.2).collect()
}

#[test]
fn a_block_only_one_receiver_misses_is_repaired_by_parity_before_any_unicast() {
    let t0 = Instant::now();
    let mut s = repairing(SenderConfig { fec_k: 4, ..SenderConfig::default() }, t0);
    drain(&mut s, t0);
    repair(&mut s, t0, 7, &[1..3]);
    let t1 = t0 + Duration::from_millis(5);
    s.handle_timeout(t1);
    let sent = drain(&mut s, t1);
    assert_eq!(parity_blocks(&sent), [0, 0], "two shards of block 0, multicast: {sent:?}");
    assert!(sent.iter().all(|x| x.1 != PacketType::McData), "no unicast repair: {sent:?}");
    assert_eq!(s.stats().repair_unicast, 0);
}

#[test]
fn losses_reported_in_the_data_phase_are_topped_up_with_parity_at_once() {
    let t0 = Instant::now();
    let cfg = SenderConfig { fec_k: 16, initial_window: 16, fec_auto: false, ..stop_and_wait() };
    let mut s = sender(cfg, 50, &[(7, 1), (8, 1)], t0);
    assert_eq!(data_sns(&drain(&mut s, t0)), (0..16).collect::<Vec<_>>());
    // Receiver 7 lost two packets of block 0, receiver 8 one other.
    feed(&mut s, t0, 7, PacketType::McNack, Flags::empty(), 7, 1, |o| emit_ranges(o, [1..3]).0);
    feed(&mut s, t0, 8, PacketType::McNack, Flags::empty(), 7, 1, |o| emit_ranges(o, [3..4]).0);
    let sent = drain(&mut s, t0);
    assert_eq!(parity_blocks(&sent), [0, 0], "as many shards as the worst receiver lost: {sent:?}");
    // The same receiver reports one more: one more shard, not three.
    feed(&mut s, t0, 7, PacketType::McNack, Flags::empty(), 7, 1, |o| emit_ranges(o, [0..1]).0);
    assert_eq!(parity_blocks(&drain(&mut s, t0)), [0]);
}

/// A sender with blocks of 4 and windows of 8 whose one receiver
/// reports `lost(first)` of each of 12 windows (first: its first SN) in
/// its ACK; returns the sender and the blocks of the last window that got
/// parity before any report of them (proactive).
fn proactive_after(lost: fn(u32) -> Vec<std::ops::Range<u32>>, t0: Instant) -> (McastSender, Vec<u32>) {
    let cfg = SenderConfig {
        fec_k: 4,
        initial_window: 8,
        slow_start: false,
        max_window: 8,
        loss_tolerance: 0.99,
        ..stop_and_wait()
    };
    let mut s = sender(cfg, 400, &[(7, 1)], t0);
    let mut proactive = Vec::new();
    for _ in 0..12 {
        let sent = drain(&mut s, t0);
        let sns = data_sns(&sent);
        let (first, last) = (sns[0], sns[sns.len() - 1]);
        // Parity sent before any report of this window's blocks.
        proactive = parity_blocks(&sent).into_iter().filter(|&b| b >= first / 4).collect();
        feed(&mut s, t0, 7, PacketType::McAck, Flags::empty(), last, 1, |o| emit_ranges(o, lost(first)).0);
    }
    (s, proactive)
}

#[test]
fn automatic_parity_follows_each_block_once_receivers_report_loss() {
    let t0 = Instant::now();
    // Two losses in each block of the window.
    let (mut s, proactive) = proactive_after(|first| vec![first..first + 2, first + 4..first + 6], t0);
    // Smoothed, the worst loss per block grew past one: each new block
    // gets a shard as it goes, before anyone reports.
    assert!(!proactive.is_empty(), "proactive parity once loss was reported");
    // Without loss reports, the automatic parity decays back to none.
    let mut last_parity = usize::MAX;
    for _ in 0..60 {
        let sent = drain(&mut s, t0);
        let sns = data_sns(&sent);
        if sns.is_empty() {
            break;
        }
        last_parity = parity_blocks(&sent).len();
        ack(&mut s, t0, 7, 1, sns[sns.len() - 1]);
    }
    assert_eq!(last_parity, 0, "no loss, no proactive parity");
}

#[test]
fn bursts_of_loss_are_topped_up_but_get_no_parity_in_advance() {
    let t0 = Instant::now();
    // A queue's overflow: the last three packets of each block, in a row.
    let (s, proactive) = proactive_after(|first| vec![first + 1..first + 4, first + 5..first + 8], t0);
    assert_eq!(proactive, Vec::<u32>::new(), "no parity in advance for bursts");
    let st = s.stats();
    assert_eq!(st.parity_proactive, 0);
    // Each block topped up once reported: by a quarter of its 4 packets,
    // the most in the data phase (the rest waits for the repair phase).
    assert_eq!(st.parity_topped_up, 2 * 12, "{st:?}");
}

// ---- grouping.rs: receivers grouped by their losses (spec §16.12) -------

/// A STATUS trailer of version 1 (spec §16.12) with these blocks' bits.
fn trailer(out: &mut [u8], blocks: &[(u32, [u64; 4])]) -> usize {
    out[0] = 1;
    out[1] = blocks.len() as u8;
    let mut at = 2;
    for (block, bits) in blocks {
        out[at..at + 4].copy_from_slice(&block.to_be_bytes());
        for (i, w) in bits.iter().enumerate() {
            out[at + 4 + 8 * i..at + 12 + 8 * i].copy_from_slice(&w.to_be_bytes());
        }
        at += 36;
    }
    at
}

#[test]
fn regroupable_receivers_sharing_losses_are_grouped_and_told_and_garbled_trailers_change_nothing() {
    let t0 = Instant::now();
    let mut s = sender(SenderConfig::default(), 50_000, &[], t0);
    // Clients 1-4 register with KLV (no operator id), 5 without.
    for c in 1..=4 {
        feed(&mut s, t0, c, PacketType::McRegister, Flags::KLV, 0, 1, |_| 0);
    }
    feed(&mut s, t0, 5, PacketType::McRegister, Flags::empty(), 0, 1, |_| 0);
    s.start(t0);
    drain(&mut s, t0);
    let a = [0x0000_0000_000f_ffff, 0, 0x00ff, 0];
    let b = [0, 0xffff_f000_0000_0000, 0, 0xff00];
    for (c, bits) in [(1, a), (2, a), (3, b), (4, b), (5, a)] {
        feed(&mut s, t0, c, PacketType::McStatus, Flags::empty(), 0, 1, |o| trailer(o, &[(0, bits), (1, bits)]));
    }
    // Garbled trailers: a count past the entries, another version, a
    // stray byte. Dropped as hints; the STATUS stands, nothing panics.
    feed(&mut s, t0, 1, PacketType::McStatus, Flags::empty(), 0, 1, |o| {
        o[..3].copy_from_slice(&[1, 4, 0]);
        3
    });
    feed(&mut s, t0, 2, PacketType::McStatus, Flags::empty(), 0, 1, |o| {
        let n = trailer(o, &[(0, a)]);
        o[0] = 9;
        n
    });
    feed(&mut s, t0, 3, PacketType::McStatus, Flags::empty(), 0, 1, |o| {
        o[0] = 1;
        1
    });
    let sweep = t0 + Duration::from_millis(600);
    s.handle_timeout(sweep);
    let told: Vec<Sent> = drain(&mut s, sweep)
        .into_iter()
        .filter(|x| x.1 == PacketType::McRegister && x.3.contains(Flags::ACK | Flags::KLV))
        .collect();
    let g: Vec<Option<u32>> = s.receivers().iter().map(|r| r.group).collect();
    assert!(g[0].is_some() && g[0] == g[1], "{g:x?}");
    assert!(g[2].is_some() && g[2] == g[3] && g[2] != g[0], "{g:x?}");
    assert_eq!(g[4], None, "an operator's id stays");
    let mut dests: Vec<SocketAddr> = told.iter().map(|x| x.0).collect();
    dests.sort();
    assert_eq!(dests, [addr(1), addr(2), addr(3), addr(4)], "each moved receiver is told once");
    assert!(told.iter().all(|x| x.2 == 1), "the first regrouping's epoch");
    // Feedback naming the old network: told again, at most every 100 ms.
    ack(&mut s, sweep, 1, 1, 0);
    assert_eq!(drain(&mut s, sweep).iter().filter(|x| x.1 == PacketType::McRegister).count(), 0, "just told");
    let after = sweep + Duration::from_millis(150);
    feed(&mut s, after, 1, PacketType::McStatus, Flags::empty(), 0, 1, |_| 0);
    feed(&mut s, after, 1, PacketType::McStatus, Flags::empty(), 0, 1, |_| 0);
    assert_eq!(drain(&mut s, after).iter().filter(|x| x.1 == PacketType::McRegister).count(), 1);
    // The same losses again: nobody moves, nobody is told.
    let later = sweep + Duration::from_millis(500);
    s.handle_timeout(later);
    assert_eq!(drain(&mut s, later).iter().filter(|x| x.1 == PacketType::McRegister).count(), 0);
    assert_eq!(s.stats().regrouped, 4);
}

#[test]
fn copies_of_several_acks_read_in_turn_from_two_sockets_count_once() {
    let t0 = Instant::now();
    let mut s = sender(SenderConfig::default(), 5_000, &[(7, 1)], t0);
    drain(&mut s, t0);
    // The group's copies of three ACKs, then the unicast copies (spec §16.4).
    for lwsn in [0, 2, 6, 0, 2, 6] {
        ack(&mut s, t0, 7, 1, lwsn);
    }
    assert_eq!(s.stats().acks, 3);
}
