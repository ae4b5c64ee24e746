//! The record of sent sequenced packets (spec §5.2–§5.5): cumulative and
//! selective acknowledgement, RACK-style loss detection by transmission
//! order and time (RFC 8985), RTO marking, and the retransmission set.
//!
//! Sequence numbers here are extended to 64 bits; the wire carries the low
//! 32 (spec §5.1). A retransmission keeps its sequence number and gets a new
//! transmission number `tx`, which orders transmissions for loss detection
//! the way RACK orders them by send time.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::RttEstimator;
use crate::congestion::Controller;
use crate::wire::Flags;

/// RACK's reordering threshold in transmissions (RFC 9002 kPacketThreshold).
const PACKET_THRESHOLD: u64 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PacketState {
    InFlight,
    Sacked,
    Lost,
}

/// One sequenced packet: what to send again if it is lost.
#[derive(Debug, Clone)]
pub(crate) struct SentPacket {
    pub payload: Bytes,
    /// The sequenced control flags it carries (SYN, FIN, CKE).
    pub control: Flags,
    pub time_sent: Instant,
    pub tx: u64,
    /// Datagram bytes at its last transmission (what congestion control counts).
    pub size: u32,
    pub state: PacketState,
    pub retransmitted: bool,
    pub app_limited: bool,
}

/// What one acknowledgement changed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AckOutcome {
    pub newly_acked: u64,
    /// Payload bytes the cumulative ack released.
    pub released_data: u64,
    pub cumulative_advanced: bool,
    pub newly_lost: u64,
}

#[derive(Debug)]
pub(crate) struct SentQueue {
    /// Sequence number of `packets[0]`: the oldest unacknowledged (snd_una).
    base: u64,
    packets: VecDeque<SentPacket>,
    retransmit: BTreeSet<u64>,
    next_tx: u64,
    bytes_in_flight: u64,
    /// Payload bytes of every packet not cumulatively acked (flow control, spec §7).
    outstanding_data: u64,
    largest_acked_tx: Option<u64>,
    loss_time: Option<Instant>,
}

impl SentQueue {
    pub fn new(first_seq: u64) -> Self {
        SentQueue {
            base: first_seq,
            packets: VecDeque::new(),
            retransmit: BTreeSet::new(),
            next_tx: 0,
            bytes_in_flight: 0,
            outstanding_data: 0,
            largest_acked_tx: None,
            loss_time: None,
        }
    }

    /// snd_una: lowest unacknowledged sequence number.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// snd_nxt: the sequence number the next new packet gets.
    pub fn next_seq(&self) -> u64 {
        self.base + self.packets.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    pub fn bytes_in_flight(&self) -> u64 {
        self.bytes_in_flight
    }

    pub fn outstanding_data(&self) -> u64 {
        self.outstanding_data
    }

    pub fn loss_time(&self) -> Option<Instant> {
        self.loss_time
    }

    pub fn get(&self, seq: u64) -> Option<&SentPacket> {
        self.packets.get(usize::try_from(seq.checked_sub(self.base)?).ok()?)
    }

    /// Records a new packet just sent with sequence number `next_seq()`.
    pub fn on_sent(&mut self, now: Instant, payload: Bytes, control: Flags, size: u32, app_limited: bool) {
        self.outstanding_data += payload.len() as u64;
        self.bytes_in_flight += u64::from(size);
        let tx = self.next_tx;
        self.next_tx += 1;
        self.packets.push_back(SentPacket {
            payload,
            control,
            time_sent: now,
            tx,
            size,
            state: PacketState::InFlight,
            retransmitted: false,
            app_limited,
        });
    }

    /// The lowest sequence number waiting to be retransmitted.
    pub fn peek_retransmit(&mut self) -> Option<u64> {
        while let Some(&seq) = self.retransmit.first() {
            if self.get(seq).is_some_and(|p| p.state == PacketState::Lost) {
                return Some(seq);
            }
            self.retransmit.pop_first();
        }
        None
    }

    /// Records that `seq` was sent again (spec §5.5: same sequence number).
    pub fn on_retransmitted(&mut self, now: Instant, seq: u64, size: u32) {
        self.retransmit.remove(&seq);
        let tx = self.next_tx;
        self.next_tx += 1;
        let Some(i) = seq.checked_sub(self.base) else {
            return;
        };
        let Some(p) = self.packets.get_mut(i as usize) else {
            return;
        };
        p.time_sent = now;
        p.tx = tx;
        p.size = size;
        p.state = PacketState::InFlight;
        p.retransmitted = true;
        self.bytes_in_flight += u64::from(size);
    }

    /// The newest packet still in flight: what a tail-loss probe resends.
    pub fn newest_in_flight(&self) -> Option<u64> {
        let i = self.packets.iter().rposition(|p| p.state == PacketState::InFlight)?;
        Some(self.base + i as u64)
    }

    /// Records a tail-loss probe: `seq`, still in flight, was sent again
    /// (RFC 8985 §7.3). It stays in flight; only its size may change.
    pub fn on_probe_sent(&mut self, now: Instant, seq: u64, size: u32) {
        let tx = self.next_tx;
        self.next_tx += 1;
        let Some(i) = seq.checked_sub(self.base) else { return };
        let Some(p) = self.packets.get_mut(i as usize) else { return };
        if p.state != PacketState::InFlight {
            return;
        }
        self.bytes_in_flight = self.bytes_in_flight - u64::from(p.size) + u64::from(size);
        p.time_sent = now;
        p.tx = tx;
        p.size = size;
        p.retransmitted = true;
    }

    /// Queues `seq` for sending again at once without calling it lost (the
    /// SYN of a simultaneous open, answered as SYN-ACK; spec §4.3).
    pub fn requeue(&mut self, seq: u64) {
        let Some(i) = seq.checked_sub(self.base) else {
            return;
        };
        let Some(p) = self.packets.get_mut(i as usize) else {
            return;
        };
        if p.state == PacketState::InFlight {
            self.bytes_in_flight -= u64::from(p.size);
        }
        p.state = PacketState::Lost;
        self.retransmit.insert(seq);
    }

    /// Applies a cumulative ack `cum` (next expected) and SACK ranges, then
    /// runs loss detection (spec §5.3, §5.4).
    pub fn on_ack(
        &mut self,
        now: Instant,
        cum: u64,
        sacks: impl Iterator<Item = (u64, u64)>,
        rtt: &mut RttEstimator,
        cc: &mut dyn Controller,
    ) -> AckOutcome {
        let mut out = AckOutcome::default();
        let mut newest: Option<(u64, Instant, bool)> = None; // (tx, time_sent, retransmitted)
        let note = |p: &SentPacket, out: &mut AckOutcome, newest: &mut Option<(u64, Instant, bool)>| {
            out.newly_acked += 1;
            if newest.is_none_or(|(tx, _, _)| p.tx > tx) {
                *newest = Some((p.tx, p.time_sent, p.retransmitted));
            }
        };
        // Cumulative part: everything below `cum` (never beyond what we sent).
        let cum = cum.min(self.next_seq());
        while self.base < cum {
            let Some(p) = self.packets.pop_front() else {
                break;
            };
            self.base += 1;
            out.cumulative_advanced = true;
            out.released_data += p.payload.len() as u64;
            self.outstanding_data -= p.payload.len() as u64;
            if p.state == PacketState::InFlight {
                self.bytes_in_flight -= u64::from(p.size);
                cc.on_ack(now, p.time_sent, u64::from(p.size), rtt, p.app_limited);
            }
            if p.state != PacketState::Sacked {
                note(&p, &mut out, &mut newest);
            }
        }
        // Selective part.
        for (start, end) in sacks {
            let start = start.max(self.base);
            let end = end.min(self.next_seq());
            for seq in start..end {
                let p = &mut self.packets[(seq - self.base) as usize];
                if p.state == PacketState::Sacked {
                    continue;
                }
                if p.state == PacketState::InFlight {
                    self.bytes_in_flight -= u64::from(p.size);
                    cc.on_ack(now, p.time_sent, u64::from(p.size), rtt, p.app_limited);
                }
                p.state = PacketState::Sacked;
                let p = &self.packets[(seq - self.base) as usize];
                note(p, &mut out, &mut newest);
            }
        }
        if let Some((tx, sent, retransmitted)) = newest {
            // Karn's rule (RFC 6298 (3)): no sample from a retransmitted packet.
            if !retransmitted {
                rtt.on_sample(now.saturating_duration_since(sent));
            }
            self.largest_acked_tx = Some(self.largest_acked_tx.map_or(tx, |l| l.max(tx)));
        }
        out.newly_lost = self.detect_lost(now, rtt, cc);
        out
    }

    /// RACK (RFC 8985) as RFC 9002 §6.1 states it: an unacknowledged packet
    /// transmitted before the newest acknowledged one is lost once three
    /// later transmissions were acked or 9/8 RTT has passed since it was sent.
    pub fn detect_lost(&mut self, now: Instant, rtt: &RttEstimator, cc: &mut dyn Controller) -> u64 {
        self.loss_time = None;
        let Some(largest) = self.largest_acked_tx else {
            return 0;
        };
        let window = (rtt.srtt().max(rtt.latest()) * 9 / 8).max(Duration::from_millis(1));
        let mut lost = 0;
        let mut lost_bytes = 0;
        let mut newest_lost_sent: Option<Instant> = None;
        for (i, p) in self.packets.iter_mut().enumerate() {
            if p.state != PacketState::InFlight {
                continue;
            }
            if p.tx >= largest {
                // First transmissions are in tx order along the queue: nothing
                // after an unacked one sent after the newest ack can be lost.
                if p.retransmitted {
                    continue;
                }
                break;
            }
            if largest - p.tx >= PACKET_THRESHOLD || p.time_sent + window <= now {
                p.state = PacketState::Lost;
                self.bytes_in_flight -= u64::from(p.size);
                self.retransmit.insert(self.base + i as u64);
                lost += 1;
                lost_bytes += u64::from(p.size);
                newest_lost_sent = Some(newest_lost_sent.map_or(p.time_sent, |t| t.max(p.time_sent)));
            } else {
                let t = p.time_sent + window;
                self.loss_time = Some(self.loss_time.map_or(t, |l| l.min(t)));
            }
        }
        if let Some(sent) = newest_lost_sent {
            cc.on_congestion_event(now, sent, lost_bytes);
        }
        lost
    }

    /// RTO expiry (spec §5.4): every packet not yet selectively acked is
    /// deemed lost (RFC 6675 §5.1) and queued for retransmission in order.
    pub fn on_rto(&mut self) -> u64 {
        let mut lost = 0;
        for (i, p) in self.packets.iter_mut().enumerate() {
            if p.state == PacketState::InFlight {
                p.state = PacketState::Lost;
                self.retransmit.insert(self.base + i as u64);
                lost += 1;
            }
        }
        self.bytes_in_flight = 0;
        self.loss_time = None;
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::congestion::NewReno;

    struct Fixture {
        t0: Instant,
        q: SentQueue,
        rtt: RttEstimator,
        cc: NewReno,
    }

    fn fixture(n: u64) -> Fixture {
        let t0 = Instant::now();
        let mut q = SentQueue::new(100);
        for i in 0..n {
            q.on_sent(t0 + Duration::from_millis(i), Bytes::from_static(b"abcd"), Flags::empty(), 100, false);
        }
        let rtt = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
            Duration::ZERO,
        );
        Fixture { t0, q, rtt, cc: NewReno::new(1000, 10) }
    }

    #[test]
    fn cumulative_ack_releases_packets_and_samples_rtt() {
        let mut f = fixture(5);
        let out = f.q.on_ack(f.t0 + Duration::from_millis(50), 103, std::iter::empty(), &mut f.rtt, &mut f.cc);
        assert_eq!(out.newly_acked, 3);
        assert_eq!(out.released_data, 12);
        assert_eq!(f.q.base(), 103);
        assert_eq!(f.q.bytes_in_flight(), 200);
        assert_eq!(f.rtt.latest(), Duration::from_millis(48));
    }

    #[test]
    fn three_later_sacks_declare_a_hole_lost() {
        let mut f = fixture(5);
        let now = f.t0 + Duration::from_millis(10);
        let out = f.q.on_ack(now, 100, [(101, 104)].into_iter(), &mut f.rtt, &mut f.cc);
        assert_eq!(out.newly_lost, 1);
        assert_eq!(f.q.peek_retransmit(), Some(100));
        f.q.on_retransmitted(now, 100, 100);
        assert_eq!(f.q.peek_retransmit(), None);
        assert!(f.q.get(100).unwrap().retransmitted);
    }

    #[test]
    fn fewer_than_three_later_sacks_wait_for_the_loss_timer() {
        let mut f = fixture(3);
        f.rtt.on_sample(Duration::from_millis(100));
        let now = f.t0 + Duration::from_millis(10);
        let out = f.q.on_ack(now, 100, [(101, 103)].into_iter(), &mut f.rtt, &mut f.cc);
        assert_eq!(out.newly_lost, 0);
        let t = f.q.loss_time().expect("loss timer armed");
        let lost = f.q.detect_lost(t, &f.rtt, &mut f.cc);
        assert_eq!(lost, 1);
    }

    #[test]
    fn rto_marks_everything_unsacked_lost() {
        let mut f = fixture(4);
        f.q.on_ack(f.t0, 100, [(102, 103)].into_iter(), &mut f.rtt, &mut f.cc);
        f.q.on_rto();
        assert_eq!(f.q.bytes_in_flight(), 0);
        let mut seqs = vec![];
        while let Some(s) = f.q.peek_retransmit() {
            seqs.push(s);
            f.q.on_retransmitted(f.t0, s, 100);
        }
        assert_eq!(seqs, vec![100, 101, 103]);
    }

    #[test]
    fn ack_beyond_what_was_sent_is_clamped() {
        let mut f = fixture(2);
        let out = f.q.on_ack(f.t0, 1_000_000, std::iter::empty(), &mut f.rtt, &mut f.cc);
        assert_eq!(out.newly_acked, 2);
        assert_eq!(f.q.base(), 102);
    }
}
