//! Behaviour of acknowledgement timing and loss recovery in ESTABLISHED:
//! immediate acks (KLV on the packet that ends a burst, a filled gap),
//! tail-loss probes ahead of the RTO, and silence on a clean path
//! (spec §5.3, §5.4, §5.5).

mod common;

use std::cell::Cell;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use manyfold_proto::{CongestionAlgorithm, ConnHandle, ConnStats, ConnectionConfig};
use manyfold_sim::{Captured, LinkConfig, Sink, Source, Transfer, Verdict, World};

/// Data bytes in a full packet without SACK ranges: 1452 − 24 (header)
/// − 16 (data chunk header, spec §13.2) − 2 kept free for the RESENT
/// chunk of its resend (spec §5.4.2).
const FULL: u64 = 1410;

/// Default settings with path MTU discovery and ack-frequency requests
/// off: these tests count packets of one size (`FULL`), and a probe is a
/// packet more (spec §3.7), as is data pushed out by a 12-byte request
/// (spec §5.6).
fn fixed_size(cc: CongestionAlgorithm) -> manyfold_proto::EndpointConfig {
    let mut cfg = config(cc);
    cfg.connection.path_mtu_discovery = None;
    cfg.connection.adaptive_acks = false;
    cfg
}

/// Pushes `source` into the client's connection and reads the server's
/// side into `sink` until `sink` has everything, for at most `max`.
fn deliver(
    w: &mut World,
    (c, s): (ConnHandle, ConnHandle),
    source: &mut Source,
    sink: &mut Sink,
    max: Duration,
) -> bool {
    let seed = w.seed();
    w.run_until(
        |w| {
            w.act(client(), |ep, _| source.push(ep, c)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
            w.act(server(), |ep, _| sink.pull(ep, s, usize::MAX)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
            source.is_done() && sink.received() == source.sent()
        },
        max,
    )
}

/// The RTO and PTO the spec gives for these RTT statistics (spec §5.4).
fn timeouts(st: &ConnStats, cfg: &ConnectionConfig) -> (Duration, Duration) {
    let g = Duration::from_millis(1);
    let var = (st.rttvar * 4).max(g);
    let rto = (st.srtt + var + cfg.max_ack_delay).max(cfg.min_rto);
    let pto = st.srtt + var + g;
    (rto, pto)
}

/// Drops, once each, the data packets client -> server whose sequence
/// number is `skip..skip + count` past the first data packet it sees;
/// `first` reports that packet's sequence number.
fn drop_data(skip: u32, count: u32, first: Rc<Cell<Option<u32>>>) -> impl FnMut(SocketAddr, SocketAddr, &[u8]) -> bool {
    let mut dropped = HashSet::new();
    move |f, _, d| {
        if f != client() || !is_data(d) {
            return false;
        }
        let seq = header(d).expect("parsed").seq;
        let base = *first.get().get_or_insert(seq);
        first.set(Some(base));
        let i = seq.wrapping_sub(base);
        i >= skip && i < skip + count && dropped.insert(seq)
    }
}

/// Client -> server data packets with sequence number `seq`, in order sent.
fn sends_of(w: &World, seq: u32) -> Vec<&Captured> {
    w.captured()
        .iter()
        .filter(|p| p.from == client() && is_data(&p.data) && header(&p.data).unwrap().seq == seq)
        .collect()
}

#[test]
fn retransmission_that_fills_the_last_gap_is_acked_at_once() {
    // The resend arrives in order and alone; its ack leaves at once (spec
    // §5.3: a resend carries KLV, and it fills a gap), not one
    // `max_ack_delay` (25 ms) later. The gap rule alone is tested in the
    // engine (a_packet_filling_the_last_gap_is_acked_at_once_without_klv).
    let seed = 401;
    let link = LinkConfig::default();
    let one_way = link.delay;
    for &cc in CONTROLLERS {
        let mut w = pair(seed, link.clone(), fixed_size(cc));
        let conns = establish(&mut w);
        let first = Rc::new(Cell::new(None));
        w.set_drop_rule(drop_data(1, 1, first.clone()));
        w.set_capture(true);
        // Three packets; the middle one is lost once.
        let (mut source, mut sink) = (Source::new(seed, 3 * FULL), Sink::new(seed, 3 * FULL));
        assert!(deliver(&mut w, conns, &mut source, &mut sink, Duration::from_secs(10)), "{cc:?} seed {seed}");
        let c = conns.0;
        let acked =
            w.run_until(|w| w.endpoint(client()).conn(c).stats().unwrap().unacked_bytes == 0, Duration::from_secs(5));
        assert!(acked, "{cc:?} seed {seed}");
        assert_eq!(w.dropped_by_rule(), 1, "{cc:?} seed {seed}");
        let lost = first.get().expect("data was sent").wrapping_add(1);
        let resent = sends_of(&w, lost);
        // spec §5.5.1: the sender has nothing else to send, so the resend
        // goes twice, back to back.
        assert_eq!(resent.len(), 2, "the lost packet was resent once, with its copy ({cc:?} seed {seed})");
        assert_eq!(resent[0].at, resent[1].at, "the copy follows the resend at once ({cc:?} seed {seed})");
        let arrived = resent[0].at + one_way;
        // The server's first packet acknowledging all three.
        let ack = w
            .captured()
            .iter()
            .find(|p| p.from == server() && header(&p.data).is_some_and(|h| h.ack == lost.wrapping_add(2)))
            .unwrap_or_else(|| panic!("no ack of the whole burst ({cc:?} seed {seed})"));
        assert_eq!(ack.at, arrived, "gap filled at {arrived:?} but acked at {:?} ({cc:?} seed {seed})", ack.at);
        let st = w.endpoint(client()).conn(conns.0).stats().unwrap();
        assert_eq!(st.rto_expiries, 0, "{cc:?} seed {seed}");
    }
}

#[test]
fn burst_ends_with_a_klv_packet_that_is_acked_at_once() {
    // spec §5.3: the last packet of a burst asks for an immediate ack (KLV),
    // so the odd packet at its end does not wait for the delayed-ack timer.
    let seed = 402;
    let link = LinkConfig::default();
    let one_way = link.delay;
    for &cc in CONTROLLERS {
        let mut w = pair(seed, link.clone(), fixed_size(cc));
        let conns = establish(&mut w);
        w.set_capture(true);
        let (mut source, mut sink) = (Source::new(seed, 3 * FULL), Sink::new(seed, 3 * FULL));
        assert!(deliver(&mut w, conns, &mut source, &mut sink, Duration::from_secs(10)), "{cc:?} seed {seed}");
        let c = conns.0;
        let acked =
            w.run_until(|w| w.endpoint(client()).conn(c).stats().unwrap().unacked_bytes == 0, Duration::from_secs(5));
        assert!(acked, "{cc:?} seed {seed}");
        let data: Vec<_> = w.captured().iter().filter(|p| p.from == client() && is_data(&p.data)).collect();
        assert_eq!(data.len(), 3, "{cc:?} seed {seed}");
        let klv: Vec<bool> = data.iter().map(|p| is_klv(&p.data)).collect();
        assert_eq!(klv, [false, false, true], "only the burst's last packet asks for an ack now ({cc:?} seed {seed})");
        let last = header(&data[2].data).unwrap().seq;
        let ack = w
            .captured()
            .iter()
            .find(|p| p.from == server() && header(&p.data).is_some_and(|h| h.ack == last.wrapping_add(1)))
            .unwrap_or_else(|| panic!("no ack of the burst ({cc:?} seed {seed})"));
        assert_eq!(ack.at, data[2].at + one_way, "{cc:?} seed {seed}");
    }
}

/// A client -> server burst on a clean 40 ms-RTT path whose last packets
/// were lost. Times are since the world began.
struct LostTail {
    w: World,
    cfg: ConnectionConfig,
    /// When the burst was handed to the client.
    start: Duration,
    /// Sequence number of the burst's last packet: the one probed.
    newest: u32,
    /// When the last ack before the probe reached the client.
    last_ack: Duration,
    /// When the probe left the client.
    probe: Duration,
    /// When the server had read the whole burst.
    repaired: Duration,
    /// The client's stats before the burst and once all of it was acked.
    before: ConnStats,
    after: ConnStats,
    /// Its stats just before the probe left: the RTT estimate the probe
    /// was timed with (the probe's own ack gives a sample, spec §5.4.2).
    timed: ConnStats,
}

const TAIL_ONE_WAY: Duration = Duration::from_millis(20);

/// Settles the RTT estimate with 300 kB, then sends `n` full packets of
/// which the last `lost` are dropped once, and waits until the burst is
/// read and acknowledged.
fn lost_tail(seed: u64, cc: CongestionAlgorithm, n: u32, lost: u32) -> LostTail {
    let cfg = fixed_size(cc);
    let mut w = pair(seed, LinkConfig::with_delay(TAIL_ONE_WAY), cfg.clone());
    let conns = establish(&mut w);
    let (mut source, mut sink) = (Source::new(seed, 300_000), Sink::new(seed, 300_000));
    assert!(deliver(&mut w, conns, &mut source, &mut sink, Duration::from_secs(10)), "{cc:?} seed {seed}");
    w.run_for(Duration::from_millis(100));
    let before = w.endpoint(client()).conn(conns.0).stats().unwrap();

    let first = Rc::new(Cell::new(None));
    w.set_drop_rule(drop_data(n - lost, lost, first.clone()));
    w.set_capture(true);
    let start = w.elapsed();
    let total = u64::from(n) * FULL;
    let (mut source, mut sink) = (Source::new(seed ^ 1, total), Sink::new(seed ^ 1, total));
    let (c, s) = conns;
    let mut timed = before;
    let delivered = w.run_until(
        |w| {
            w.act(client(), |ep, _| source.push(ep, c)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
            w.act(server(), |ep, _| sink.pull(ep, s, usize::MAX)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
            let probed = first.get().is_some_and(|f| !sends_of(w, f.wrapping_add(n - 1)).is_empty());
            if !probed {
                timed = w.endpoint(client()).conn(c).stats().unwrap();
            }
            source.is_done() && sink.received() == source.sent()
        },
        Duration::from_secs(10),
    );
    assert!(delivered, "{cc:?} seed {seed}");
    let repaired = w.elapsed();
    let acked =
        w.run_until(|w| w.endpoint(client()).conn(c).stats().unwrap().unacked_bytes == 0, Duration::from_secs(10));
    assert!(acked, "burst never fully acknowledged ({cc:?} seed {seed})");
    let after = w.endpoint(client()).conn(c).stats().unwrap();

    assert_eq!(w.dropped_by_rule(), u64::from(lost), "{cc:?} seed {seed}");
    let seqs: HashSet<u32> = w
        .captured()
        .iter()
        .filter(|p| p.from == client() && is_data(&p.data))
        .map(|p| header(&p.data).unwrap().seq)
        .collect();
    assert_eq!(seqs.len(), n as usize, "a burst of {n} full packets ({cc:?} seed {seed})");
    let newest = first.get().expect("data was sent").wrapping_add(n - 1);
    // Its original was dropped: the first send on the wire is the probe.
    let probe = sends_of(&w, newest).first().map(|p| p.at).unwrap_or_else(|| panic!("no probe ({cc:?} seed {seed})"));
    let last_ack = w
        .captured()
        .iter()
        .filter(|p| p.from == server())
        .map(|p| p.at + TAIL_ONE_WAY)
        .filter(|&at| at <= probe)
        .max()
        .expect("acks before the probe");
    LostTail { w, cfg: cfg.connection, start, newest, last_ack, probe, repaired, before, after, timed }
}

impl LostTail {
    /// What every lost tail must show: no RTO; the probe a PTO after the
    /// last ack, well before the RTO; the window kept.
    fn check(&self, what: &str, seed: u64, cc: CongestionAlgorithm) {
        let (rto, pto) = timeouts(&self.timed, &self.cfg);
        let wait = self.probe - self.last_ack;
        eprintln!(
            "{cc:?} {what}: srtt {:?} rttvar {:?}; PTO {pto:?}, RTO {rto:?}; after the burst: last ack {:?}, \
             probe {:?}, all read {:?}; {} retransmissions; cwnd {} -> {}",
            self.timed.srtt,
            self.timed.rttvar,
            self.last_ack - self.start,
            self.probe - self.start,
            self.repaired - self.start,
            self.after.retransmissions - self.before.retransmissions,
            self.before.cwnd,
            self.after.cwnd
        );
        assert_eq!(self.after.rto_expiries, self.before.rto_expiries, "{what}: the RTO fired ({cc:?} seed {seed})");
        assert!(wait <= pto, "{what}: probe {wait:?} after the last ack, PTO {pto:?} ({cc:?} seed {seed})");
        // spec §5.4: the PTO leaves out the peer's ack delay that the RTO allows for.
        let ahead = rto.saturating_sub(wait);
        assert!(
            ahead + Duration::from_millis(1) >= self.cfg.max_ack_delay,
            "{what}: probe only {ahead:?} before the RTO ({cc:?} seed {seed})"
        );
        assert_eq!(sends_of(&self.w, self.newest).len(), 1, "{what}: one probe ({cc:?} seed {seed})");
        // RACK halves the window at most; an RTO would cut it to two datagrams.
        assert!(
            self.after.cwnd >= self.before.cwnd / 2,
            "{what}: cwnd {} -> {} ({cc:?} seed {seed})",
            self.before.cwnd,
            self.after.cwnd
        );
    }
}

#[test]
fn lost_tail_is_repaired_by_a_probe_before_the_rto() {
    // The last two of 20 packets are lost: the probe resends the 20th, the
    // SACK it draws lets RACK declare the 19th lost, and that resend fills the gap.
    let seed = 403;
    for &cc in CONTROLLERS {
        let t = lost_tail(seed, cc, 20, 2);
        t.check("last 2 of 20 lost", seed, cc);
        let resent = t.after.retransmissions - t.before.retransmissions;
        // spec §5.5.1: the RACK resend of a flow with nothing queued goes twice.
        assert_eq!(resent, 3, "the probe and one RACK resend with its copy ({cc:?} seed {seed})");
        let rtt = TAIL_ONE_WAY * 2;
        assert!(
            t.repaired <= t.probe + rtt * 2,
            "read {:?} after the probe ({cc:?} seed {seed})",
            t.repaired - t.probe
        );
    }
}

#[test]
fn lost_last_packet_is_repaired_by_its_probe_before_the_rto() {
    // After an odd count of packets the receiver delays its last ack,
    // whose RTT sample widens RTTVAR and so the PTO; after an even count
    // the probe is timed from the burst's immediate acks.
    let seed = 404;
    for &cc in CONTROLLERS {
        for n in [20, 21] {
            let t = lost_tail(seed, cc, n, 1);
            t.check(&format!("last of {n} lost"), seed, cc);
            let resent = t.after.retransmissions - t.before.retransmissions;
            assert_eq!(resent, 1, "the probe alone (n = {n}, {cc:?} seed {seed})");
            assert!(t.repaired == t.probe + TAIL_ONE_WAY, "n = {n} ({cc:?} seed {seed})");
        }
    }
}

#[test]
fn probe_for_a_lost_last_packet_is_acked_at_once() {
    // spec §5.4 leaves the peer's ack delay out of the PTO because the
    // packet that ends a flight asks for an immediate ack (§5.3); a probe
    // ends its flight too.
    let seed = 405;
    for &cc in CONTROLLERS {
        let t = lost_tail(seed, cc, 21, 1);
        let arrived = t.probe + TAIL_ONE_WAY;
        let acked =
            t.w.captured()
                .iter()
                .find(|p| p.from == server() && header(&p.data).is_some_and(|h| h.ack == t.newest.wrapping_add(1)))
                .map(|p| p.at)
                .unwrap_or_else(|| panic!("probe never acked ({cc:?} seed {seed})"));
        assert_eq!(acked, arrived, "probe arrived at {arrived:?}, acked at {acked:?} ({cc:?} seed {seed})");
    }
}

/// Sequenced packets (data, FIN, SYN, echo) sent more than once, by sender.
fn resent_on_the_wire(w: &World) -> Vec<(SocketAddr, u32)> {
    let mut seen = HashSet::new();
    w.captured()
        .iter()
        .filter(|p| is_sequenced(&p.data))
        .map(|p| (p.from, header(&p.data).expect("parsed").seq))
        .filter(|&k| !seen.insert(k))
        .collect()
}

#[test]
fn clean_path_sees_no_probe_or_retransmission_whatever_the_sending_pattern() {
    // Bulk both ways, a sender held back by a small receive window, and
    // request-response rounds of odd sizes: every flight ends with a packet
    // that is acked at once (spec §5.3), so no probe timer may fire.
    let seed = 406;
    let link = LinkConfig::with_delay(Duration::from_millis(20));
    for &cc in CONTROLLERS {
        for recv_buffer in [8 << 20, 16 * 1024] {
            let mut cfg = fixed_size(cc);
            cfg.connection.recv_buffer = recv_buffer;
            let mut w = pair(seed, link.clone(), cfg);
            w.set_capture(true);
            let t = Transfer::start(&mut w, client(), server(), 2 << 20, 1 << 20);
            let r = t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{cc:?}: {e}"));
            let what = format!("bulk, recv_buffer {recv_buffer}");
            for st in [r.client, r.server] {
                assert_eq!((st.retransmissions, st.rto_expiries), (0, 0), "{what}: {st:?} ({cc:?} seed {seed})");
            }
            assert_eq!(resent_on_the_wire(&w), [], "{what} ({cc:?} seed {seed})");
        }

        let mut w = pair(seed, link.clone(), fixed_size(cc));
        let (c, s) = establish(&mut w);
        w.set_capture(true);
        let mut buf = vec![0u8; 64 * 1024];
        for round in 0..40u64 {
            let (up, down) = ((round % 5) * FULL + round * 37 % 1000 + 1, round * 53 % 3000 + 1);
            let mut got = (0, 0);
            w.act(client(), |ep, _| ep.conn_mut(c).send(&buf[..up as usize])).unwrap();
            let ok = w.run_until(
                |w| {
                    while let Ok(Some(n)) = w.endpoint_mut(server()).conn_mut(s).recv(&mut buf) {
                        got.0 += n as u64;
                    }
                    got.0 == up
                },
                Duration::from_secs(5),
            );
            assert!(ok, "round {round}: request stalled ({cc:?} seed {seed})");
            w.act(server(), |ep, _| ep.conn_mut(s).send(&buf[..down as usize])).unwrap();
            let ok = w.run_until(
                |w| {
                    while let Ok(Some(n)) = w.endpoint_mut(client()).conn_mut(c).recv(&mut buf) {
                        got.1 += n as u64;
                    }
                    got.1 == down
                },
                Duration::from_secs(5),
            );
            assert!(ok, "round {round}: response stalled ({cc:?} seed {seed})");
            // Think time longer than any timer but the keep-alive.
            w.run_for(Duration::from_millis(137 * (round % 3)));
        }
        for (node, h) in [(client(), c), (server(), s)] {
            let st = w.endpoint(node).conn(h).stats().unwrap();
            assert_eq!((st.retransmissions, st.rto_expiries), (0, 0), "rounds: {node} {st:?} ({cc:?} seed {seed})");
        }
        assert_eq!(resent_on_the_wire(&w), [], "rounds ({cc:?} seed {seed})");
    }
}

#[test]
fn sixty_data_packets_lost_in_a_row_are_all_resent() {
    // A short outage: 60 consecutive data packets are lost; recovery
    // (RACK, probes, the RTO) resends every one and the transfer completes.
    let seed = 408;
    let link = LinkConfig::with_delay(Duration::from_millis(10));
    for &cc in CONTROLLERS {
        let mut w = pair(seed, link.clone(), fixed_size(cc));
        let first = Rc::new(Cell::new(None));
        w.set_drop_rule(drop_data(300, 60, first));
        let t = Transfer::start(&mut w, client(), server(), 4 << 20, 1 << 20);
        let r = t.run(&mut w, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{cc:?}: {e}"));
        assert!(w.dropped_by_rule() >= 1, "({cc:?} seed {seed})");
        assert!(r.client.retransmissions >= w.dropped_by_rule(), "{:?} ({cc:?} seed {seed})", r.client);
    }
}

/// Acks held back `hold` in a row after the first `skip` the server sent:
/// a receiver starved of CPU that sends them late, all at once.
fn hold_acks(skip: u32, count: u32, hold: Duration) -> impl FnMut(SocketAddr, SocketAddr, &[u8]) -> Verdict {
    let mut n = 0u32;
    move |from, _, _| {
        if from != server() {
            return Verdict::Pass;
        }
        n += 1;
        if n > skip && n <= skip + count {
            Verdict::Delay(hold)
        } else {
            Verdict::Pass
        }
    }
}

#[test]
fn an_rto_that_late_acks_prove_spurious_resends_almost_nothing_and_undoes_the_cut() {
    // spec §5.4 step 7: acks held 300 ms (far beyond the RTO) while the
    // whole window is in flight. The RTO fires and declares the window
    // lost; the first late ack names a packet that was never resent, so
    // the rest goes back in flight instead of being resent.
    let seed = 611;
    for &cc in CONTROLLERS {
        let link = LinkConfig::with_delay(Duration::from_millis(10)).rate(100_000_000, 4 << 20);
        let mut cfg = fixed_size(cc);
        cfg.connection.adaptive_acks = true;
        let mut w = pair(seed, link, cfg);
        w.set_rule(hold_acks(40, 30, Duration::from_millis(300)));
        let t = Transfer::start(&mut w, client(), server(), 8 << 20, 0);
        let r = t.run(&mut w, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{cc:?}: {e} (seed {seed})"));
        let c = r.client;
        eprintln!(
            "{cc:?}: {} RTOs, {} spurious; {} packets lost, {} retransmitted, {} data packets; {:?}",
            c.rto_expiries, c.spurious_rtos, c.lost_packets, c.retransmissions, c.packets_sent, r.duration
        );
        assert!(c.rto_expiries >= 1, "{cc:?}: the held acks must outlast the RTO: {c:?} (seed {seed})");
        assert!(c.spurious_rtos >= 1, "{cc:?}: {c:?} (seed {seed})");
        assert!(c.lost_packets >= 50, "{cc:?}: the RTO must have declared a whole window lost: {c:?} (seed {seed})");
        // Two resends per RTO until an ack comes, and a late ack of a
        // packet just resent counts as its transmission from before the
        // RTO, so the resends do not run ahead of the late acks: 7 of ~120
        // under every controller (18-19 of 250 and 69 of 216 under BBR
        // before either; 19 for BBR with the second only).
        assert!(
            c.retransmissions <= 4 * c.rto_expiries,
            "{cc:?}: {} resends after {} RTOs, {} packets declared lost (seed {seed})",
            c.retransmissions,
            c.rto_expiries,
            c.lost_packets
        );
    }
}

#[test]
fn a_probe_while_acks_are_late_sends_new_data_and_resends_nothing() {
    // RFC 8985 §7.3, spec §5.4: acks held past the probe timeout but not
    // the RTO (a receiver short of CPU) while the sender has data queued.
    // The probes carry new data, so the late acks find nothing resent.
    let seed = 612;
    for &cc in CONTROLLERS {
        let link = LinkConfig::with_delay(Duration::from_millis(10)).rate(100_000_000, 4 << 20);
        let mut cfg = fixed_size(cc);
        cfg.connection.adaptive_acks = true;
        let mut w = pair(seed, link, cfg);
        // 60 ms: two RTTs, past the probe timeout (~25 ms), short of the
        // RTO after the probe restarted it.
        w.set_rule(hold_acks(40, 30, Duration::from_millis(60)));
        let t = Transfer::start(&mut w, client(), server(), 8 << 20, 0);
        let r = t.run(&mut w, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{cc:?}: {e} (seed {seed})"));
        let c = r.client;
        eprintln!(
            "{cc:?}: {} probes, {} RTOs; {} lost, {} retransmitted; {:?}",
            c.tail_loss_probes, c.rto_expiries, c.lost_packets, c.retransmissions, r.duration
        );
        assert!(c.tail_loss_probes >= 1, "{cc:?}: the held acks must outlast the probe timeout: {c:?} (seed {seed})");
        assert_eq!(c.rto_expiries, 0, "{cc:?}: {c:?} (seed {seed})");
        // Resending the newest packet instead cost one retransmission per probe.
        assert_eq!((c.retransmissions, c.lost_packets), (0, 0), "{cc:?}: {c:?} (seed {seed})");
    }
}

/// A receiver that loses the CPU now and then: the acks the server sends
/// in the first `stall` of every `period` of virtual time (read from
/// `clock`, which the test keeps at the world's elapsed time) leave only
/// when the stall ends.
fn stall_acks(
    clock: Rc<Cell<Duration>>,
    period: Duration,
    stall: Duration,
) -> impl FnMut(SocketAddr, SocketAddr, &[u8]) -> Verdict {
    move |from, _, _| {
        let into = Duration::from_nanos((clock.get().as_nanos() % period.as_nanos()) as u64);
        if from != server() || into >= stall {
            return Verdict::Pass;
        }
        Verdict::Delay(stall - into)
    }
}

#[test]
fn acks_late_again_and_again_lengthen_the_probe_timeout_instead_of_drawing_probes_each_time() {
    // spec §5.4 step 8: every 300 ms the receiver's acks stall 40 ms, past
    // the probe timeout (~25 ms on this 20 ms path) and short of the RTO;
    // the receive window holds the flight, so a probe can only resend.
    // Without step 8 every stall drew a probe that resent a packet (39 of
    // 39 under NewReno). With it the first probe's late ack doubles the
    // probe timeout, the next stalls pass without one, and the doubling
    // comes off after a quiet second: 10 probes.
    let seed = 613;
    for &cc in CONTROLLERS {
        let link = LinkConfig::with_delay(Duration::from_millis(10));
        let mut cfg = fixed_size(cc);
        cfg.connection.adaptive_acks = true;
        // The receive window (about the path's 250 KB of bandwidth × delay)
        // holds the flight, so no queue overflows: a loss would bar the
        // doubling (step 8), and these controllers fill any queue.
        cfg.connection.recv_buffer = 256 << 10;
        let mut w = pair(seed, link, cfg);
        let clock = Rc::new(Cell::new(Duration::ZERO));
        w.set_rule(stall_acks(clock.clone(), Duration::from_millis(300), Duration::from_millis(40)));
        let mut t = Transfer::start(&mut w, client(), server(), 64 << 20, 0);
        let done = w.run_until(
            |w| {
                clock.set(w.elapsed());
                t.pump(w)
            },
            Duration::from_secs(120),
        );
        assert!(done && t.error().is_none(), "{cc:?}: {:?} (seed {seed})", t.error());
        let r = t.report(&w);
        let c = r.client;
        let stalls = r.duration.as_millis() / 300;
        eprintln!(
            "{cc:?}: {stalls} stalls; {} probes, {} premature; {} RTOs; {} lost, {} retransmitted; {:?}",
            c.tail_loss_probes, c.late_probes, c.rto_expiries, c.lost_packets, c.retransmissions, r.duration
        );
        assert!(stalls >= 20, "{cc:?}: too few stalls to judge: {stalls} (seed {seed})");
        assert!(c.late_probes >= 1, "{cc:?}: {c:?} (seed {seed})");
        assert!(
            u128::from(c.tail_loss_probes) * 3 <= stalls,
            "{cc:?}: {} probes for {stalls} stalls (seed {seed})",
            c.tail_loss_probes
        );
        assert!(u128::from(c.retransmissions) * 3 <= stalls, "{cc:?}: {c:?} (seed {seed})");
        assert_eq!(c.rto_expiries, 0, "{cc:?}: {c:?} (seed {seed})");
    }
}

/// spec §5.4.2: a slow link (200 kbit/s, 5 ms each way) whose queue holds
/// 256 KB, ten seconds of it. The first flight outlasts the RTO that the
/// handshake's round trip gave, which fires with the originals still
/// queued. Without the echo every ack after it named a packet resent
/// since, so it gave no RTT sample (Karn) and could not prove the RTO
/// spurious: an RTO per flight, 2 MB in 174 s with 1,397 of 3,506
/// packets declared lost. The echo names the originals: the first such
/// ack undoes the RTO, and its sample takes the queue's delay into the RTO.
#[test]
fn a_deep_queue_on_a_slow_link_costs_one_spurious_rto_not_a_storm() {
    let seed = 421;
    let mut cfg = config(CongestionAlgorithm::Bbr);
    cfg.connection.path_mtu_discovery = None;
    let link = LinkConfig::with_delay(Duration::from_millis(5)).rate(200_000, 256 << 10);
    let mut w = pair(seed, link, cfg);
    let bytes = 2u64 << 20;
    let t = Transfer::start(&mut w, client(), server(), bytes, 0);
    let r = t.run(&mut w, Duration::from_secs(600)).unwrap_or_else(|e| panic!("{e} (seed {seed})"));
    let c = &r.client;
    let ideal = Duration::from_secs_f64(bytes as f64 * 8.0 / 200_000.0);
    eprintln!(
        "{:?} (the link alone: {ideal:?}); packets {}, resent {}, lost {}, RTOs {} ({} spurious), srtt {:?}",
        r.duration, c.packets_sent, c.retransmissions, c.lost_packets, c.rto_expiries, c.spurious_rtos, c.srtt
    );
    assert!(c.spurious_rtos >= 1, "the echo proved no RTO spurious (seed {seed})");
    assert!(c.rto_expiries <= 5, "{} RTOs (seed {seed})", c.rto_expiries);
    assert!(
        c.retransmissions * 10 <= c.packets_sent,
        "{} of {} resent (seed {seed})",
        c.retransmissions,
        c.packets_sent
    );
    assert!(
        r.duration.as_secs_f64() <= ideal.as_secs_f64() * 1.10,
        "{:?} for {ideal:?} of link time (seed {seed})",
        r.duration
    );
}
