//! The record of sent sequenced packets (spec §5.2–§5.5): cumulative and
//! selective acknowledgement, RACK-style loss detection by transmission
//! order and time (RFC 8985), RTO marking, and the retransmission set.
//!
//! Sequence numbers here are extended to 64 bits; the wire carries the low
//! 32 (spec §5.1). A retransmission keeps its sequence number and gets a new
//! transmission number `tx`, which orders transmissions for loss detection
//! the way RACK orders them by send time.
//!
//! Per-ack work does not grow with the window: loss detection walks a queue
//! of transmissions in `tx` order and stops at the first that is not lost
//! (RACK's conditions are monotone in `tx` and send time), dropping stale
//! entries as it goes; SACK ranges are applied only where they add to what
//! was already selectively acked. A 1 Gbit/s × 200 ms window holds ~17,000
//! packets, and scanning it on every ack made loss recovery CPU-bound.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::rangeset::RangeSet;
use crate::seq::Seq;

use super::delivery::{Delivery, Stamp};
use super::{LossTrigger, RateSample, RttEstimator};
use bytes::Bytes;

use crate::wire::chunk::{Chunk, Chunks};
use crate::wire::Flags;

/// RACK's initial reordering threshold in transmissions (RFC 9002
/// kPacketThreshold); it grows with the reordering the path shows.
const PACKET_THRESHOLD: u64 = 3;
/// Ceiling of the adapted packet threshold; reordering beyond it switches
/// the packet threshold off, leaving the time window to decide.
const MAX_PACKET_THRESHOLD: u64 = 256;
/// Ceiling of the reordering window's multiplier (RFC 8985 §6.2.4 step 4).
const MAX_REO_MULT: u32 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PacketState {
    InFlight,
    Sacked,
    Lost,
}

/// Longest wait between a retransmission and its copy (spec §5.5.1) for
/// an echo of either to take the copy's send time (spec §5.4.2): the RTT
/// sample is then at most this much short.
const COPY_GAP: Duration = Duration::from_millis(1);

/// One sequenced packet: what to send again if it is lost. A sender keeps
/// one per packet in flight to every peer, so it is kept small: 128 bytes
/// (issue 20 item 6: 184 before; 120, then 8 more for the transmission
/// count and first send time an echo needs, spec §5.4.2; a test holds it).
#[derive(Debug, Clone)]
pub(crate) struct SentPacket {
    /// The chunks it carries (spec §13.2).
    pub payload: Chunks,
    pub time_sent: Instant,
    pub tx: u64,
    /// Delivery state when it was last sent (spec §9.4).
    stamp: Stamp,
    /// Datagram bytes at its last transmission (what congestion control counts).
    pub size: u32,
    /// `tx - first_tx`, where `first_tx` is the `tx` of its first
    /// transmission: how far a late original was overtaken (saturating).
    since_first_tx: u32,
    /// Times it was retransmitted (saturating; see [`SentPacket::retx`]).
    retx: u16,
    /// Transmissions after the first, probes included (saturating): the
    /// RESENT count its latest transmission carried (spec §5.4.2).
    sends: u8,
    /// Microseconds from its first transmission to its latest
    /// (saturating): when an echo names the first, its RTT sample starts
    /// there.
    sent_span_us: u32,
    /// Its latest transmission is the copy of the one before, sent right
    /// after it (spec §5.5.1): an echo of either has that send time.
    latest_is_copy: bool,
    /// The sequenced control flags it carries (SYN, FIN, CKE).
    pub control: Flags,
    pub state: PacketState,
    pub retransmitted: bool,
    /// Declared lost at least once (by RACK or an RTO).
    pub declared_lost: bool,
    pub app_limited: bool,
    /// A path MTU probe (spec §3.7): its loss says the path is narrower,
    /// not that it is congested.
    pub probe: bool,
}

impl SentPacket {
    /// Times it was retransmitted (partial reliability counts them).
    pub fn retx(&self) -> u32 {
        u32::from(self.retx)
    }

    /// `tx` of its first transmission.
    pub fn first_tx(&self) -> u64 {
        self.tx - u64::from(self.since_first_tx)
    }

    /// The RESENT count its next transmission carries (spec §5.4.2).
    pub fn next_resent_count(&self) -> u8 {
        self.sends.saturating_add(1)
    }

    /// When its first transmission left.
    fn first_sent(&self) -> Instant {
        let span = Duration::from_micros(u64::from(self.sent_span_us));
        self.time_sent.checked_sub(span).unwrap_or(self.time_sent)
    }

    /// spec §5.4.2: the send time of the transmission an echo of RESENT
    /// count `count` names, when the record still knows it (the first or
    /// the latest; not past 255 transmissions, where counts saturate).
    fn echoed_send_time(&self, count: u8) -> Option<Instant> {
        if self.sends == u8::MAX {
            None
        } else if count == self.sends || (self.latest_is_copy && self.sends.checked_sub(1) == Some(count)) {
            Some(self.time_sent)
        } else if count == 0 {
            Some(self.first_sent())
        } else {
            None
        }
    }

    /// Records a new transmission `tx` at `now` (a resend or a probe).
    fn resent(&mut self, now: Instant, tx: u64, stamp: Stamp) {
        let first = self.first_tx();
        self.since_first_tx = u32::try_from(tx - first).unwrap_or(u32::MAX);
        let gap = u32::try_from(now.saturating_duration_since(self.time_sent).as_micros()).unwrap_or(u32::MAX);
        self.sent_span_us = self.sent_span_us.saturating_add(gap);
        self.sends = self.sends.saturating_add(1);
        self.latest_is_copy = false;
        self.tx = tx;
        self.time_sent = now;
        self.stamp = stamp;
    }
}

/// What one acknowledgement changed. The connection feeds the congestion
/// controller from it (spec §9): the packets in [`SentQueue::take_acked`],
/// then `undo_reduction`, then the RTT sample, then the losses
/// [`SentQueue::detect_lost`] finds, then the rate sample.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AckOutcome {
    pub newly_acked: u64,
    /// Payload bytes the cumulative ack released.
    pub released_data: u64,
    pub cumulative_advanced: bool,
    /// Packets declared lost whose first transmission turned out to arrive.
    pub spurious: u64,
    /// Every loss of the episode proved spurious: the window reduction it
    /// caused is to be undone (spec §9).
    pub undo_reduction: bool,
    /// Time since the newest newly acknowledged packet was sent, unless it
    /// was a retransmission (Karn's rule, RFC 6298 (3)).
    pub rtt_sample: Option<Duration>,
    /// That sample is of a SYN or a lone cookie echo (spec §5.4.1).
    pub rtt_sample_handshake: bool,
    /// The last RTO proved spurious (spec §5.4 step 7): the ack took a
    /// packet the RTO declared lost before its resend went out. The
    /// packets still waiting for theirs went back in flight.
    pub spurious_rto: bool,
    /// The earliest transmission this ack proves arrived: the smallest
    /// transmission number of the newly acknowledged packets that were
    /// sent once, or whose first transmission the echo names (spec §5.4
    /// step 8).
    pub earliest_arrived_tx: Option<u64>,
}

/// What one ack's packets showed, gathered as they are acknowledged.
#[derive(Debug)]
struct AckScan {
    now: Instant,
    min_rtt: Option<Duration>,
    prior_largest: Option<u64>,
    out: AckOutcome,
    /// `(tx, time_sent, retransmitted)` of the newest acknowledged.
    /// The newest acknowledged packet: (tx, sent, retransmitted, handshake).
    newest: Option<(u64, Instant, bool, bool)>,
    reorder_distance: u64,
    /// Packets declared lost whose loss proved real.
    resolved_real: u64,
    /// `tx` below which packets were in flight when the last RTO fired,
    /// while some of them wait for their resend (spec §5.4 step 7).
    rto_mark: Option<u64>,
    /// The ack's echo (spec §5.4.2): which transmission of which packet drew it.
    echo: Option<(Seq, u8)>,
    /// The RTT sample the echo gave: from the send time of the
    /// transmission it names, retransmitted or not.
    echo_sample: Option<Duration>,
    /// A loss proved spurious by timing (spec §5.4 step 5): RACK's
    /// reordering window widens.
    widen: bool,
}

impl AckScan {
    /// Notes newly acknowledged packet `seq`, judged before its state changes.
    fn note(&mut self, seq: Seq, p: &SentPacket) {
        self.out.newly_acked += 1;
        // A packet declared lost whose ack comes before a resend could
        // have been acked: its first transmission arrived (spec §5.4).
        let resend_too_recent = self.min_rtt.is_some_and(|m| self.now.saturating_duration_since(p.time_sent) < m);
        // spec §5.4.2: the echo says which transmission arrived; one that
        // names the first of a resent packet proves the resend needless.
        // A protected handshake message carries no RESENT chunk: an echo of
        // it always says 0, whichever transmission arrived.
        let echoed = self.echo.filter(|&(s, _)| s == seq && !p.payload.has_handshake()).map(|(_, count)| count);
        let original_arrived = p.sends > 0 && echoed == Some(0);
        if let Some(sent) = echoed.and_then(|count| p.echoed_send_time(count)) {
            self.echo_sample = Some(self.now.saturating_duration_since(sent));
        }
        if p.sends == 0 || original_arrived {
            let tx = p.first_tx();
            self.out.earliest_arrived_tx = Some(self.out.earliest_arrived_tx.map_or(tx, |e| e.min(tx)));
        }
        // RFC 8985 §6.2 step 2: the late ack of a packet that was in flight
        // at the last RTO and resent after it, come too soon for the resend,
        // is for the transmission from before the RTO: it places the packet
        // there in send order, not at the resend. Otherwise each late ack
        // of a just-resent packet would make the packets sent between the
        // two look overtaken and declare them lost in turn, and under CPU
        // starvation the resends would run ahead of the late acks.
        let before_rto = self.rto_mark.is_some_and(|mark| p.first_tx() < mark && p.tx >= mark);
        let acked_tx = if (before_rto && resend_too_recent) || original_arrived { p.first_tx() } else { p.tx };
        if self.newest.is_none_or(|(tx, ..)| acked_tx > tx) {
            // spec §5.4.1: a SYN or a lone cookie echo measures the
            // handshake, which the peer answers without its application.
            let handshake =
                (p.control.contains(Flags::SYN) || p.control.contains(Flags::CKE)) && p.payload.data_len() == 0;
            self.newest = Some((acked_tx, p.time_sent, p.retransmitted, handshake));
        }
        if p.probe {
            // A probe's loss opened no episode and says nothing of reordering.
            return;
        }
        let waiting = p.state == PacketState::Lost;
        let timed = waiting || resend_too_recent;
        let spurious = p.declared_lost && (timed || original_arrived);
        // spec §5.4 step 5: only the timing proof widens RACK's window, the
        // evidence its widening was tuned on; a loss only the echo proves
        // spurious leaves the episode (step 6) without it. (The thin-stream
        // tests measured no difference either way.)
        self.widen |= p.declared_lost && timed;
        // spec §5.4 step 7: a transmission from before the RTO arrived: one
        // still waiting for its resend, or a resent one the echo names first.
        let arrived_tx = if original_arrived { Some(p.first_tx()) } else { waiting.then_some(p.tx) };
        if arrived_tx.is_some_and(|tx| self.rto_mark.is_some_and(|mark| tx < mark)) {
            self.out.spurious_rto = true;
        }
        if spurious {
            self.out.spurious += 1;
        } else if p.declared_lost {
            self.resolved_real += 1;
        }
        // RFC 8985 §6.2.1: an original transmission acked after a later
        // one was is reordering, not loss; remember how far.
        if let (true, Some(l)) = (!p.retransmitted || spurious, self.prior_largest) {
            if p.first_tx() < l {
                self.reorder_distance = self.reorder_distance.max(l - p.first_tx());
            }
        }
    }
}

/// A newly acknowledged packet that was in flight: what congestion control
/// counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acked {
    pub time_sent: Instant,
    pub bytes: u64,
    /// The window was not the constraint when it was sent.
    pub app_limited: bool,
}

/// What one run of loss detection declared lost.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Losses {
    pub packets: u64,
    pub bytes: u64,
    /// When the newest of them was sent: the congestion event's start.
    pub newest_sent: Option<Instant>,
    /// Path MTU probes among them, counted apart (spec §3.7).
    pub probes: u64,
}

#[derive(Debug)]
pub(crate) struct SentQueue {
    /// Sequence number of `packets[0]`: the oldest unacknowledged (snd_una).
    base: Seq,
    packets: VecDeque<SentPacket>,
    /// Transmissions `(seq, tx)` in `tx` order. An entry is live while its
    /// packet is in flight with that `tx`; others are dropped when reached.
    order: VecDeque<(Seq, u64)>,
    /// Sequence numbers above `base` already selectively acked.
    sacked: RangeSet<Seq>,
    retransmit: BTreeSet<Seq>,
    next_tx: u64,
    bytes_in_flight: u64,
    /// Payload bytes of every packet not cumulatively acked (flow control, spec §7).
    outstanding_data: u64,
    largest_acked_tx: Option<u64>,
    loss_time: Option<Instant>,
    /// Reordering tolerance in transmissions, adapted (spec §5.4).
    packet_threshold: u64,
    /// Multiplier of the RACK reordering window; grows on spurious losses.
    reo_mult: u32,
    /// Packets declared lost since the last [`SentQueue::take_lost`], when
    /// the connection traces (spec §18); `None` records nothing.
    lost_log: Option<Vec<(Seq, u32, LossTrigger)>>,
    /// The loss episode: packets declared lost and not yet acked, and
    /// whether any of them proved a real loss. The window reduction is
    /// undone only when every loss of the episode proved spurious.
    episode_open: u64,
    episode_real: bool,
    /// `next_tx` when the last RTO fired, while packets it declared lost
    /// still wait for their resend (spec §5.4 step 7).
    rto_mark: Option<u64>,
    delivery: Delivery,
    /// In-flight packets the last ack acknowledged, in the order it did.
    acked: Vec<Acked>,
    /// Chunk lists of acknowledged packets, emptied, for the next packets
    /// (each of at most [`SPARE_LIST_ROOM`]; a list without capacity is an
    /// empty slot, so the slots themselves never allocate).
    spare_lists: [Vec<Chunk<Bytes>>; SPARE_LISTS],
}

/// Chunk lists a queue keeps for its next packets: a packet of 32-byte
/// messages holds ~2,000 chunks, grown anew per packet before (RESULTS §34).
const SPARE_LISTS: usize = 2;

/// Largest chunk list kept, in chunks: a 64 KiB packet of the smallest
/// messages' chunks.
const SPARE_LIST_ROOM: usize = 4096;

impl SentQueue {
    pub fn new(first_seq: Seq) -> Self {
        SentQueue {
            base: first_seq,
            packets: VecDeque::new(),
            order: VecDeque::new(),
            sacked: RangeSet::new(),
            retransmit: BTreeSet::new(),
            next_tx: 0,
            bytes_in_flight: 0,
            outstanding_data: 0,
            largest_acked_tx: None,
            loss_time: None,
            packet_threshold: PACKET_THRESHOLD,
            reo_mult: 0,
            lost_log: None,
            episode_open: 0,
            episode_real: false,
            rto_mark: None,
            acked: Vec::new(),
            delivery: Delivery::default(),
            spare_lists: Default::default(),
        }
    }

    /// A new queue starting at `first_seq` that keeps this one's containers'
    /// memory, emptied (spec §15.3: a spare connection's queue serves the
    /// next connection, which then allocates none). A container that grew
    /// past [`SPARE_ENTRIES`] is dropped, so a spare never keeps a large
    /// window's worth. Nothing of the old connection's state is kept.
    pub fn renew(self, first_seq: Seq) -> Self {
        let SentQueue { packets, order, acked, .. } = self;
        SentQueue {
            packets: emptied_deque(packets),
            order: emptied_deque(order),
            acked: if acked.capacity() > SPARE_ENTRIES { Vec::new() } else { emptied(acked) },
            ..SentQueue::new(first_seq)
        }
    }

    /// An empty chunk list for the next packet, in the memory of an
    /// acknowledged one's where there is one.
    pub fn chunk_list(&mut self) -> Chunks {
        match self.spare_lists.iter_mut().find(|v| v.capacity() > 0) {
            Some(v) => Chunks::with_spare(std::mem::take(v)),
            None => Chunks::default(),
        }
    }

    /// Keeps `chunks`' list for a next packet (it is emptied), if there is
    /// room among the spares and it is not too large.
    pub fn keep_list(&mut self, chunks: Chunks) {
        if let Some(slot) = self.spare_lists.iter_mut().find(|v| v.capacity() == 0) {
            if let Some(v) = chunks.into_spare().filter(|v| v.capacity() <= SPARE_LIST_ROOM) {
                *slot = v;
            }
        }
    }

    /// Starts recording the packets declared lost (spec §18).
    pub fn log_losses(&mut self) {
        self.lost_log.get_or_insert_with(Vec::new);
    }

    /// The packets declared lost since the last call: sequence number,
    /// size, and what declared them lost.
    pub fn take_lost(&mut self) -> impl Iterator<Item = (Seq, u32, LossTrigger)> + '_ {
        self.lost_log.iter_mut().flat_map(|l| l.drain(..))
    }

    fn log_lost(log: &mut Option<Vec<(Seq, u32, LossTrigger)>>, seq: Seq, size: u32, trigger: LossTrigger) {
        if let Some(l) = log {
            l.push((seq, size, trigger));
        }
    }

    /// snd_una: lowest unacknowledged sequence number.
    pub fn base(&self) -> Seq {
        self.base
    }

    /// The transmission number of the last transmission sent.
    pub fn last_tx(&self) -> u64 {
        self.next_tx.saturating_sub(1)
    }

    /// snd_nxt: the sequence number the next new packet gets.
    pub fn next_seq(&self) -> Seq {
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

    pub fn get(&self, seq: Seq) -> Option<&SentPacket> {
        self.packets.get(self.index(seq)?)
    }

    /// Where `seq` is in `packets`, if at or above the base.
    fn index(&self, seq: Seq) -> Option<usize> {
        usize::try_from(seq.get().checked_sub(self.base.get())?).ok()
    }

    /// Lets `f` edit the chunks of `seq` before it is sent again (given its
    /// retransmission count so far); `f` returns the data bytes it removed.
    pub fn strip(&mut self, seq: Seq, f: impl FnOnce(&mut Chunks, u32) -> usize) {
        let Some(p) = self.index(seq).and_then(|i| self.packets.get_mut(i)) else { return };
        let retx = p.retx();
        let removed = f(&mut p.payload, retx);
        self.outstanding_data -= removed as u64;
    }

    /// Records a new packet just sent with sequence number `next_seq()`.
    pub fn on_sent(&mut self, now: Instant, payload: Chunks, control: Flags, size: u32, app_limited: bool) {
        self.outstanding_data += payload.data_len() as u64;
        let stamp = self.delivery.stamp(now, self.bytes_in_flight == 0);
        self.bytes_in_flight += u64::from(size);
        let tx = self.next_tx;
        self.next_tx += 1;
        self.order.push_back((self.next_seq(), tx));
        self.packets.push_back(SentPacket {
            payload,
            time_sent: now,
            tx,
            stamp,
            size,
            since_first_tx: 0,
            retx: 0,
            sends: 0,
            sent_span_us: 0,
            latest_is_copy: false,
            control,
            state: PacketState::InFlight,
            retransmitted: false,
            declared_lost: false,
            app_limited,
            probe: false,
        });
    }

    /// spec §3.7: lost packet `seq`, larger than the path now carries, is
    /// cut to `room` bytes of data area; the rest becomes new packets (new
    /// sequence numbers, the control flags moving to the last), lost and
    /// queued for retransmission like it. Returns the new sequence numbers
    /// and the message records of the data chunks cut in two.
    pub fn split(&mut self, seq: Seq, room: usize) -> (Vec<Seq>, Vec<u64>) {
        let (mut new, mut cut) = (Vec::new(), Vec::new());
        let Some(i) = self.index(seq) else { return (new, cut) };
        let head = &mut self.packets[i];
        let (mut rest, c) = head.payload.split_off(room);
        if head.payload.is_empty() {
            // Its first chunk cannot be cut: it goes whole, or not at all.
            head.payload = rest;
            return (new, cut);
        }
        cut.extend(c);
        if rest.is_empty() {
            return (new, cut);
        }
        let template = SentPacket {
            payload: Chunks::default(),
            control: std::mem::replace(&mut head.control, Flags::empty()),
            size: 0,
            state: PacketState::Lost,
            retransmitted: true,
            declared_lost: true,
            ..head.clone()
        };
        while !rest.is_empty() {
            let (mut next, c) = rest.split_off(room);
            if rest.is_empty() {
                std::mem::swap(&mut rest, &mut next);
            }
            cut.extend(c);
            let last = next.is_empty();
            let control = if last { template.control } else { Flags::empty() };
            new.push(self.next_seq());
            self.retransmit.insert(self.next_seq());
            self.packets.push_back(SentPacket { payload: rest, control, ..template.clone() });
            rest = next;
        }
        (new, cut)
    }

    /// Marks the newest packet sent as a path MTU probe (spec §3.7).
    pub fn mark_probe(&mut self) {
        if let Some(p) = self.packets.back_mut() {
            p.probe = true;
        }
    }

    /// The lowest sequence number waiting to be retransmitted.
    pub fn peek_retransmit(&mut self) -> Option<Seq> {
        while let Some(&seq) = self.retransmit.first() {
            if self.get(seq).is_some_and(|p| p.state == PacketState::Lost) {
                return Some(seq);
            }
            self.retransmit.pop_first();
        }
        None
    }

    /// The lowest packet waiting to be retransmitted, without dropping
    /// stale entries ([`SentQueue::peek_retransmit`] does that).
    pub fn first_lost(&self) -> Option<(Seq, &SentPacket)> {
        self.retransmit.iter().find_map(|&seq| self.get(seq).filter(|p| p.state == PacketState::Lost).map(|p| (seq, p)))
    }

    /// Records that `seq` was sent again (spec §5.5: same sequence number).
    /// Returns whether that counts as a retransmission: a lost path MTU
    /// probe's small repeat carries no data (spec §3.7).
    pub fn on_retransmitted(&mut self, now: Instant, seq: Seq, size: u32) -> bool {
        self.retransmit.remove(&seq);
        let tx = self.next_tx;
        self.next_tx += 1;
        let Some(i) = self.index(seq) else {
            return false;
        };
        let stamp = self.delivery.stamp(now, self.bytes_in_flight == 0);
        let Some(p) = self.packets.get_mut(i) else {
            return false;
        };
        p.resent(now, tx, stamp);
        p.size = size;
        p.state = PacketState::InFlight;
        p.retransmitted = true;
        p.retx = p.retx.saturating_add(1);
        self.bytes_in_flight += u64::from(size);
        self.order.push_back((seq, tx));
        !p.probe
    }

    /// The newest packet still in flight: what a tail-loss probe resends.
    pub fn newest_in_flight(&self) -> Option<Seq> {
        let i = self.packets.iter().rposition(|p| p.state == PacketState::InFlight)?;
        Some(self.base + i as u64)
    }

    /// Records a tail-loss probe: `seq`, still in flight, was sent again
    /// (RFC 8985 §7.3), or, with `copy`, the second copy of its
    /// retransmission right after it (spec §5.5.1). It stays in flight;
    /// only its size may change. Returns whether that counts as a
    /// retransmission, as [`SentQueue::on_retransmitted`] does.
    pub fn on_probe_sent(&mut self, now: Instant, seq: Seq, size: u32, copy: bool) -> bool {
        let tx = self.next_tx;
        self.next_tx += 1;
        let Some(p) = self.index(seq).and_then(|i| self.packets.get_mut(i)) else { return false };
        if p.state != PacketState::InFlight {
            return false;
        }
        self.bytes_in_flight = self.bytes_in_flight - u64::from(p.size) + u64::from(size);
        // The probe carries the stamp of its last send, moved to now.
        let stamp = p.stamp.moved(p.time_sent, now);
        // spec §5.4.2: a copy the pacer held back is no longer the one
        // before's time.
        let back_to_back = now.saturating_duration_since(p.time_sent) <= COPY_GAP;
        p.resent(now, tx, stamp);
        p.latest_is_copy = copy && back_to_back;
        p.size = size;
        p.retransmitted = true;
        // spec §3.7: a path MTU probe unanswered for a probe timeout is
        // lost; the small repeat only lets the cumulative ack pass it.
        p.declared_lost |= p.probe;
        self.order.push_back((seq, tx));
        !p.probe
    }

    /// Path MTU probe `seq`, still in flight, never left this host (the
    /// kernel refused a datagram that large, spec §3.7): it is lost now,
    /// not after a round trip, so that it stops holding congestion window.
    /// Returns whether `seq` was such a probe.
    pub fn refuse_probe(&mut self, seq: Seq) -> bool {
        let Some(p) = self.index(seq).and_then(|i| self.packets.get_mut(i)) else { return false };
        if !p.probe || p.state != PacketState::InFlight {
            return false;
        }
        p.state = PacketState::Lost;
        p.declared_lost = true;
        self.bytes_in_flight -= u64::from(p.size);
        Self::log_lost(&mut self.lost_log, seq, p.size, LossTrigger::Refused);
        self.retransmit.insert(seq);
        true
    }

    /// Queues `seq` for sending again at once without calling it lost (the
    /// SYN of a simultaneous open, answered as SYN-ACK; spec §4.3).
    pub fn requeue(&mut self, seq: Seq) {
        let Some(p) = self.index(seq).and_then(|i| self.packets.get_mut(i)) else {
            return;
        };
        if p.state == PacketState::InFlight {
            self.bytes_in_flight -= u64::from(p.size);
        }
        p.state = PacketState::Lost;
        self.retransmit.insert(seq);
    }

    /// Applies a cumulative ack `cum` (next expected) and SACK ranges (spec
    /// §5.3); `min_rtt` is the RTT estimator's minimum, if it has a sample.
    /// Loss detection is the caller's next step ([`SentQueue::detect_lost`]).
    pub fn on_ack(
        &mut self,
        now: Instant,
        cum: Seq,
        sacks: impl Iterator<Item = (Seq, Seq)>,
        echo: Option<(Seq, u8)>,
        min_rtt: Option<Duration>,
        mut on_acked: impl FnMut(&SentPacket),
    ) -> AckOutcome {
        self.acked.clear();
        let mut scan = AckScan {
            now,
            min_rtt,
            prior_largest: self.largest_acked_tx,
            out: AckOutcome::default(),
            newest: None,
            reorder_distance: 0,
            resolved_real: 0,
            rto_mark: self.rto_mark,
            echo,
            echo_sample: None,
            widen: false,
        };
        self.ack_cumulative(cum, &mut scan, &mut on_acked);
        self.ack_selective(sacks, &mut scan, &mut on_acked);
        let mut out = scan.out;
        // An RTO's flight was still being judged when this ack came.
        let after_rto = scan.rto_mark.is_some() || out.spurious_rto;
        if self.retransmit.is_empty() {
            // Nothing the RTO declared lost still waits: no ack can judge it now.
            self.rto_mark = None;
        }
        if out.spurious_rto {
            self.rto_mark = None;
            scan.resolved_real = 0;
            out.spurious += self.restore_after_spurious_rto(scan.rto_mark.unwrap_or(0));
        }
        if scan.reorder_distance > 0 {
            // Beyond the cap, counting is no guide: as RFC 8985 does once
            // reordering is seen, only the time window decides.
            let wanted = scan.reorder_distance + 1;
            let threshold = if wanted > MAX_PACKET_THRESHOLD { u64::MAX } else { wanted };
            self.packet_threshold = self.packet_threshold.max(threshold);
        }
        self.episode_open = self.episode_open.saturating_sub(out.spurious + scan.resolved_real);
        self.episode_real |= scan.resolved_real > 0;
        if out.spurious > 0 {
            if scan.widen {
                // RFC 8985 §6.2.4: widen the reordering window.
                self.reo_mult = (self.reo_mult + 1).min(MAX_REO_MULT);
            }
            out.undo_reduction = self.episode_open == 0 && !self.episode_real;
        }
        // spec §5.4 step 7: Eifel's response (RFC 4015): the RTO's
        // reduction is undone.
        out.undo_reduction |= out.spurious_rto;
        if let Some((tx, sent, retransmitted, handshake)) = scan.newest {
            if !retransmitted {
                out.rtt_sample = Some(now.saturating_duration_since(sent));
                out.rtt_sample_handshake = handshake;
            } else if let Some(sample) = scan.echo_sample.filter(|_| handshake || after_rto) {
                // Karn's rule (RFC 6298 (3)) leaves a retransmitted packet
                // without a sample; after an RTO that keeps the RTO where
                // it fired, and a path whose acks come later than that
                // fires it flight after flight. spec §5.4.2: the echo names
                // the transmission that drew the ack, which gives the
                // sample then. (Taken for every resent packet, it moved a
                // thin flow's p99 from 2.17 to 2.36 RTT in the simulator.)
                // A resent SYN or lone cookie echo takes it always: the
                // handshake has no other sample, and without one a lossy
                // path's echo kept to the 1 s initial RTO.
                out.rtt_sample = Some(sample);
                out.rtt_sample_handshake = handshake;
            }
            self.largest_acked_tx = Some(self.largest_acked_tx.map_or(tx, |l| l.max(tx)));
        }
        out
    }

    /// The cumulative part of an ack: every packet below `cum` (never
    /// beyond what we sent) leaves the queue.
    fn ack_cumulative(&mut self, cum: Seq, scan: &mut AckScan, on_acked: &mut impl FnMut(&SentPacket)) {
        let cum = cum.min(self.next_seq());
        while self.base < cum {
            let Some(p) = self.packets.pop_front() else {
                break;
            };
            let seq = self.base;
            self.base += 1;
            scan.out.cumulative_advanced = true;
            let data = p.payload.data_len() as u64;
            scan.out.released_data += data;
            self.outstanding_data -= data;
            // A SACKed packet was settled when its SACK came.
            if p.state != PacketState::Sacked {
                on_acked(&p);
                scan.note(seq, &p);
                settle(&p, scan.now, &mut self.bytes_in_flight, &mut self.acked, &mut self.delivery);
            }
            self.keep_list(p.payload);
        }
        self.sacked.remove_below(self.base);
        shrink_to_use(&mut self.packets);
    }

    /// The selective part of an ack: only what it adds to the SACKed set.
    fn ack_selective(
        &mut self,
        sacks: impl Iterator<Item = (Seq, Seq)>,
        scan: &mut AckScan,
        on_acked: &mut impl FnMut(&SentPacket),
    ) {
        let next_seq = self.next_seq();
        for (start, end) in sacks {
            let start = start.max(self.base);
            let end = end.min(next_seq);
            if start >= end {
                continue;
            }
            let base = self.base;
            for i in self.sacked.gaps(start..end).flat_map(|gap| (gap.start - base)..(gap.end - base)) {
                let p = &mut self.packets[i as usize];
                if p.state == PacketState::Sacked {
                    continue;
                }
                on_acked(p);
                scan.note(base + i, p);
                settle(p, scan.now, &mut self.bytes_in_flight, &mut self.acked, &mut self.delivery);
                p.state = PacketState::Sacked;
            }
            self.sacked.insert(start..end);
        }
    }

    /// The in-flight packets the last [`SentQueue::on_ack`] acknowledged,
    /// in order.
    pub fn take_acked(&mut self) -> std::vec::Drain<'_, Acked> {
        self.acked.drain(..)
    }

    /// The delivery-rate sample of the last ack (spec §9.4), after loss
    /// detection.
    pub fn take_rate_sample(&mut self, now: Instant, rtt: &RttEstimator) -> Option<RateSample> {
        let min_rtt = if rtt.has_sample() { rtt.min() } else { Duration::ZERO };
        self.delivery.take_sample(now, self.bytes_in_flight, min_rtt)
    }

    /// RACK (RFC 8985) as RFC 9002 §6.1 states it: an unacknowledged packet
    /// transmitted before the newest acknowledged one is lost once three
    /// later transmissions were acked or 9/8 RTT has passed since it was sent.
    pub fn detect_lost(&mut self, now: Instant, rtt: &RttEstimator) -> Losses {
        self.loss_time = None;
        let mut losses = Losses::default();
        let Some(largest) = self.largest_acked_tx else {
            return losses;
        };
        // RFC 8985 §6.2: RTT plus a reordering window, srtt/8 until the path
        // showed spurious losses, then min_rtt/4 per such episode (≤ srtt).
        let base = rtt.srtt().max(rtt.latest());
        let reo_wnd = (rtt.min() / 4 * self.reo_mult).max(rtt.srtt() / 8).min(rtt.srtt());
        let window = (base + reo_wnd).max(Duration::from_millis(1));
        let threshold = self.packet_threshold;
        // In tx order, send times never decrease: once one transmission is
        // not lost, no later one is.
        while let Some(&(seq, tx)) = self.order.front() {
            let live = self.index(seq).and_then(|i| self.packets.get_mut(i));
            let Some(p) = live.filter(|p| p.state == PacketState::InFlight && p.tx == tx) else {
                self.order.pop_front();
                continue;
            };
            if tx >= largest {
                break;
            }
            if largest - tx < threshold && p.time_sent + window > now {
                self.loss_time = Some(p.time_sent + window);
                break;
            }
            p.state = PacketState::Lost;
            let trigger = if largest - tx >= threshold { LossTrigger::Reordering } else { LossTrigger::Time };
            Self::log_lost(&mut self.lost_log, seq, p.size, trigger);
            self.bytes_in_flight -= u64::from(p.size);
            self.retransmit.insert(seq);
            if p.probe {
                // spec §3.7: the path is narrower, not congested.
                p.declared_lost = true;
                losses.probes += 1;
            } else {
                open_episode(p, &mut self.episode_open, &mut self.episode_real);
                losses.packets += 1;
                losses.bytes += u64::from(p.size);
                losses.newest_sent = Some(losses.newest_sent.map_or(p.time_sent, |t| t.max(p.time_sent)));
            }
            self.order.pop_front();
        }
        shrink_to_use(&mut self.order);
        losses
    }

    /// spec §5.4 step 7 (F-RTO's response, RFC 5682): the RTO was
    /// spurious, so the packets it declared lost that still wait for their
    /// resend (transmitted before `mark`) go back in flight as they were
    /// and leave the loss episode; RACK judges them again like any packet.
    /// Returns how many of the episode's losses that undid.
    fn restore_after_spurious_rto(&mut self, mark: u64) -> u64 {
        let mut back = Vec::new();
        let mut spurious = 0;
        for (i, p) in self.packets.iter_mut().enumerate() {
            let seq = self.base + i as u64;
            if p.state != PacketState::Lost || p.tx >= mark || !self.retransmit.remove(&seq) {
                continue;
            }
            p.state = PacketState::InFlight;
            self.bytes_in_flight += u64::from(p.size);
            // The caller closes their part of the episode as spurious.
            spurious += u64::from(p.declared_lost && !p.probe);
            p.declared_lost = false;
            back.push((seq, p.tx));
        }
        // Every transmission since the RTO has a larger tx than these.
        back.sort_unstable_by_key(|&(_, tx)| tx);
        for &entry in back.iter().rev() {
            self.order.push_front(entry);
        }
        spurious
    }

    /// RTO expiry (spec §5.4): every packet not yet selectively acked is
    /// deemed lost (RFC 6675 §5.1) and queued for retransmission in order.
    pub fn on_rto(&mut self) -> u64 {
        self.rto_mark = Some(self.next_tx);
        let mut lost = 0;
        for (i, p) in self.packets.iter_mut().enumerate() {
            if p.state == PacketState::InFlight {
                p.state = PacketState::Lost;
                if p.probe {
                    p.declared_lost = true;
                } else {
                    open_episode(p, &mut self.episode_open, &mut self.episode_real);
                }
                Self::log_lost(&mut self.lost_log, self.base + i as u64, p.size, LossTrigger::Rto);
                self.retransmit.insert(self.base + i as u64);
                lost += 1;
            }
        }
        self.bytes_in_flight = 0;
        self.loss_time = None;
        self.order.clear();
        lost
    }
}

/// Records a queue keeps room for whatever it holds: below this, a
/// ring is left alone.
const KEPT_ENTRIES: usize = 64;

/// Gives back a ring's memory once it holds under a quarter of its room,
/// keeping twice what it holds (spec §14.4): a flight that peaked (a slow
/// start's overshoot into a deep queue) no longer holds its peak's memory
/// for the rest of the connection, which a group's sender pays N times
/// over (RESULTS §38). The gap between a quarter and twice keeps a flight
/// that swings around one size from reallocating each round.
fn shrink_to_use<T>(q: &mut VecDeque<T>) {
    if q.capacity() > KEPT_ENTRIES && q.len() < q.capacity() / 4 {
        q.shrink_to((q.len() * 2).max(KEPT_ENTRIES));
    }
}

/// Entries a spare queue's container may keep (spec §15.3): a short
/// session's packets in flight, at most 1,920 bytes of [`SentPacket`]s.
const SPARE_ENTRIES: usize = 16;

/// `q`, emptied, or a new deque if it grew past [`SPARE_ENTRIES`].
fn emptied_deque<T>(mut q: VecDeque<T>) -> VecDeque<T> {
    if q.capacity() > SPARE_ENTRIES {
        return VecDeque::new();
    }
    q.clear();
    q
}

/// `v`, emptied.
fn emptied<T>(mut v: Vec<T>) -> Vec<T> {
    v.clear();
    v
}

/// A newly acknowledged packet leaves the flight if it was in it (and is
/// reported for congestion control) and counts toward the delivery rate
/// (spec §9.4).
fn settle(p: &SentPacket, now: Instant, in_flight: &mut u64, acked: &mut Vec<Acked>, delivery: &mut Delivery) {
    let bytes = u64::from(p.size);
    if p.state == PacketState::InFlight {
        *in_flight -= bytes;
        acked.push(Acked { time_sent: p.time_sent, bytes, app_limited: p.app_limited });
    }
    delivery.on_acked(now, p.stamp, p.time_sent, bytes, (p.app_limited, p.retransmitted));
}

/// Marks `p` as declared lost, opening a loss episode if none is open.
fn open_episode(p: &mut SentPacket, open: &mut u64, real: &mut bool) {
    if !p.declared_lost {
        p.declared_lost = true;
        if *open == 0 {
            *real = false;
        }
        *open += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::StreamId;
    use crate::wire::chunk::{Chunk, DataChunk};

    #[test]
    fn a_sent_packet_record_takes_at_most_128_bytes() {
        // A group sender keeps one per packet in flight to every peer
        // (issue 20 item 6: 184 bytes before).
        assert!(std::mem::size_of::<SentPacket>() <= 128, "{}", std::mem::size_of::<SentPacket>());
    }

    /// Sequence number `n` (its wire value is `n`).
    fn s(n: u32) -> Seq {
        Seq::from_isn(n)
    }

    struct Fixture {
        t0: Instant,
        q: SentQueue,
        rtt: RttEstimator,
    }

    /// An ack as the connection applies it: the queue's part, the RTT
    /// sample, then loss detection. Returns the outcome and the losses.
    fn ack(f: &mut Fixture, now: Instant, cum: u32, sacks: &[(u32, u32)]) -> (AckOutcome, u64) {
        let min_rtt = f.rtt.has_sample().then(|| f.rtt.min());
        let sacks = sacks.iter().map(|&(a, b)| (s(a), s(b)));
        let out = f.q.on_ack(now, s(cum), sacks, None, min_rtt, |_| {});
        if let Some(sample) = out.rtt_sample {
            f.rtt.on_sample(sample);
        }
        (out, f.q.detect_lost(now, &f.rtt).packets)
    }

    fn fixture(n: u64) -> Fixture {
        let t0 = Instant::now();
        let mut q = SentQueue::new(s(100));
        for i in 0..n {
            let mut c = Chunks::default();
            let data = bytes::Bytes::from_static(b"abcd");
            c.push(Chunk::Data(DataChunk {
                stream: StreamId::new(0),
                flags: 0,
                offset: 4 * i,
                in_msg: 0,
                data,
                msg: 0,
            }));
            q.on_sent(t0 + Duration::from_millis(i), c, Flags::empty(), 100, false);
        }
        let rtt = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
            Duration::ZERO,
        );
        Fixture { t0, q, rtt }
    }

    /// Runs a fixed history on `f`'s queue from its base `b`: sends, a
    /// SACK that declares a loss, its resend, an RTO, a cumulative ack.
    /// Returns every outcome and the queue's final state.
    fn history(f: &mut Fixture, b: u32) -> Vec<String> {
        let mut seen = Vec::new();
        let t = f.t0 + Duration::from_millis(30);
        for i in 0..6 {
            let flags = if i == 0 { Flags::SYN } else { Flags::empty() };
            f.q.on_sent(t + Duration::from_millis(i), Chunks::default(), flags, 200, i % 2 == 0);
        }
        let (out, lost) = ack(f, t + Duration::from_millis(40), b + 1, &[(b + 2, b + 6)]);
        seen.push(format!("{out:?} {lost} {:?}", f.q.take_acked().collect::<Vec<_>>()));
        let resend = f.q.peek_retransmit();
        seen.push(format!("{resend:?}"));
        if let Some(r) = resend {
            f.q.on_retransmitted(t + Duration::from_millis(41), r, 200);
        }
        seen.push(format!("{} {:?}", f.q.on_rto(), f.q.peek_retransmit()));
        let (out, lost) = ack(f, t + Duration::from_millis(90), b + 6, &[]);
        seen.push(format!("{out:?} {lost} {:?}", f.q.take_rate_sample(t + Duration::from_millis(90), &f.rtt)));
        seen.push(format!("{:?}", f.q));
        seen
    }

    #[test]
    fn a_renewed_sent_queue_behaves_exactly_like_a_new_one() {
        let mut used = fixture(12);
        used.q.log_losses();
        let now = used.t0 + Duration::from_millis(20);
        ack(&mut used, now, 103, &[(105, 108)]);
        used.q.on_rto();
        let (pk, ord) = (used.q.packets.capacity(), used.q.order.capacity());
        assert!(pk > 0 && ord > 0 && used.q.acked.capacity() > 0);
        let renewed = used.q.renew(s(7));
        assert_eq!(format!("{renewed:?}"), format!("{:?}", SentQueue::new(s(7))), "no state kept");
        assert_eq!((renewed.packets.capacity(), renewed.order.capacity()), (pk, ord), "memory kept");
        assert!(renewed.acked.capacity() > 0);
        let mut a = Fixture { q: renewed, ..fixture(0) };
        let mut b = Fixture { q: SentQueue::new(s(7)), ..fixture(0) };
        b.t0 = a.t0;
        assert_eq!(history(&mut a, 7), history(&mut b, 7));
    }

    #[test]
    fn a_queue_gives_back_a_peak_flights_memory_once_the_flight_shrinks() {
        // A slow start's overshoot: 2,000 packets in flight (fixture base 100).
        let mut f = fixture(2_000);
        let peak = f.q.packets.capacity();
        assert!(peak >= 2_000);
        let now = f.t0 + Duration::from_secs(3);
        // Half acknowledged: still over a quarter of the room, kept.
        ack(&mut f, now, 1_100, &[]);
        assert_eq!(f.q.packets.capacity(), peak, "no reallocation while the flight is near its size");
        // 100 left: room for twice that.
        ack(&mut f, now, 2_000, &[]);
        assert!(f.q.packets.capacity() <= 256 && f.q.order.capacity() <= 256, "{}", f.q.packets.capacity());
        // All acknowledged: what an idle connection keeps.
        ack(&mut f, now, 2_100, &[]);
        assert!(f.q.packets.capacity() <= 2 * KEPT_ENTRIES, "{}", f.q.packets.capacity());
    }

    #[test]
    fn a_renewed_sent_queue_drops_a_large_window() {
        let mut f = fixture(200);
        let now = f.t0 + Duration::from_millis(300);
        ack(&mut f, now, 300, &[]);
        assert!(f.q.packets.capacity() > SPARE_ENTRIES && f.q.acked.capacity() > SPARE_ENTRIES);
        let renewed = f.q.renew(s(1));
        assert_eq!(renewed.packets.capacity(), 0);
        assert!(renewed.order.capacity() <= SPARE_ENTRIES);
        assert_eq!(renewed.acked.capacity(), 0);
    }

    #[test]
    fn cumulative_ack_releases_packets_and_samples_rtt() {
        let mut f = fixture(5);
        let now = f.t0 + Duration::from_millis(50);
        let (out, _) = ack(&mut f, now, 103, &[]);
        assert_eq!(out.newly_acked, 3);
        assert_eq!(out.released_data, 12);
        assert_eq!(f.q.base(), s(103));
        assert_eq!(f.q.bytes_in_flight(), 200);
        assert_eq!(out.rtt_sample, Some(Duration::from_millis(48)));
        assert_eq!(f.rtt.latest(), Duration::from_millis(48));
    }

    #[test]
    fn three_later_sacks_declare_a_hole_lost() {
        let mut f = fixture(5);
        let now = f.t0 + Duration::from_millis(10);
        let (_, lost) = ack(&mut f, now, 100, &[(101, 104)]);
        assert_eq!(lost, 1);
        assert_eq!(f.q.peek_retransmit(), Some(s(100)));
        f.q.on_retransmitted(now, s(100), 100);
        assert_eq!(f.q.peek_retransmit(), None);
        assert!(f.q.get(s(100)).unwrap().retransmitted);
    }

    #[test]
    fn fewer_than_three_later_sacks_wait_for_the_loss_timer() {
        let mut f = fixture(3);
        f.rtt.on_sample(Duration::from_millis(100));
        let now = f.t0 + Duration::from_millis(10);
        let (_, lost) = ack(&mut f, now, 100, &[(101, 103)]);
        assert_eq!(lost, 0);
        let t = f.q.loss_time().expect("loss timer armed");
        let losses = f.q.detect_lost(t, &f.rtt);
        assert_eq!(losses.packets, 1);
        assert_eq!(losses.bytes, 100);
        assert_eq!(losses.newest_sent, Some(f.t0));
    }

    #[test]
    fn a_late_original_raises_the_packet_threshold() {
        let mut f = fixture(10);
        let now = f.t0 + Duration::from_millis(10);
        // 105..110 acked first; then 100..105 arrive late (reordered, not lost).
        ack(&mut f, now, 100, &[(105, 110)]);
        let before = f.q.packet_threshold;
        let (out, _) = ack(&mut f, now, 110, &[]);
        assert_eq!(out.spurious, 5, "they had been declared lost");
        assert!(out.undo_reduction, "every loss of the episode was spurious");
        assert!(f.q.packet_threshold > before.max(PACKET_THRESHOLD));
        assert_eq!(f.q.reo_mult, 1);
    }

    #[test]
    fn an_ack_soon_after_a_resend_is_for_the_original() {
        let mut f = fixture(5);
        f.rtt.on_sample(Duration::from_millis(40));
        let now = f.t0 + Duration::from_millis(10);
        let (_, lost) = ack(&mut f, now, 100, &[(101, 105)]);
        assert_eq!(lost, 1);
        f.q.on_retransmitted(now, s(100), 100);
        // Acked 5 ms after the resend: far sooner than any round trip.
        let (out, _) = ack(&mut f, now + Duration::from_millis(5), 105, &[]);
        assert_eq!(out.spurious, 1);
        assert_eq!(out.rtt_sample, None, "Karn: no sample from a retransmitted packet");
    }

    #[test]
    fn late_acks_after_a_spurious_rto_do_not_declare_the_restored_flight_lost() {
        // spec §5.4 step 7: ten packets in flight, the RTO fires, two are
        // resent; then the receiver's late acks arrive (a starved receiver).
        let mut f = fixture(10);
        f.rtt.on_sample(Duration::from_millis(40));
        let rto = f.t0 + Duration::from_millis(100);
        assert_eq!(f.q.on_rto(), 10);
        f.q.on_retransmitted(rto, s(100), 100);
        f.q.on_retransmitted(rto, s(101), 100);
        // 5 ms after the resends: the acks are for the first transmissions.
        let late = rto + Duration::from_millis(5);
        let (out, lost) = ack(&mut f, late, 102, &[]);
        assert!(!out.spurious_rto, "resent packets prove nothing");
        assert_eq!(lost, 0);
        let (out, lost) = ack(&mut f, late, 103, &[]);
        assert!(out.spurious_rto, "102 still waited for its resend");
        assert_eq!(f.q.bytes_in_flight(), 700, "103..110 are back in flight");
        // The acks of 100 and 101 counted as their first transmissions, so
        // nothing sent after those looks overtaken by the resends: no loss
        // timer runs for the restored packets, and while the receiver
        // stays silent none of them is declared lost again (counted as
        // the resends, the time threshold declared all seven lost 30 ms on).
        assert_eq!(lost, 0);
        assert_eq!(f.q.loss_time(), None);
        let losses = f.q.detect_lost(late + Duration::from_millis(30), &f.rtt);
        assert_eq!(losses.packets, 0);
        assert_eq!(f.q.peek_retransmit(), None);
    }

    #[test]
    fn rto_marks_everything_unsacked_lost() {
        let mut f = fixture(4);
        let t0 = f.t0;
        ack(&mut f, t0, 100, &[(102, 103)]);
        f.q.on_rto();
        assert_eq!(f.q.bytes_in_flight(), 0);
        let mut seqs = vec![];
        while let Some(s) = f.q.peek_retransmit() {
            seqs.push(s);
            f.q.on_retransmitted(f.t0, s, 100);
        }
        assert_eq!(seqs, vec![s(100), s(101), s(103)]);
    }

    #[test]
    fn ack_beyond_what_was_sent_is_clamped() {
        let mut f = fixture(2);
        let t0 = f.t0;
        let (out, _) = ack(&mut f, t0, 1_000_000, &[]);
        assert_eq!(out.newly_acked, 2);
        assert_eq!(f.q.base(), s(102));
    }

    #[test]
    fn an_echo_of_a_resent_syn_or_of_its_copy_gives_the_handshake_its_sample() {
        // spec §5.4.2, §5.5.1: a SYN lost at t0, resent at 1 s with its copy
        // right after (transmissions 1 and 2), answered 100 ms later.
        let t0 = Instant::now();
        let resend = t0 + Duration::from_secs(1);
        let syn = |copy_after: Duration| {
            let mut q = SentQueue::new(s(100));
            q.on_sent(t0, Chunks::default(), Flags::SYN, 32, false);
            q.on_rto();
            q.on_retransmitted(resend, s(100), 32);
            q.on_probe_sent(resend + copy_after, s(100), 32, true);
            q
        };
        let answer = resend + Duration::from_millis(100);
        for count in [1, 2] {
            let out =
                syn(Duration::ZERO).on_ack(answer, s(101), std::iter::empty(), Some((s(100), count)), None, |_| {});
            assert_eq!(out.rtt_sample, Some(Duration::from_millis(100)), "echo of transmission {count}");
            assert!(out.rtt_sample_handshake);
        }
        // A copy the pacer held back 5 ms no longer gives the time of the
        // transmission before it; an echo a peer made up gives nothing,
        // and no count overflows.
        let held =
            syn(Duration::from_millis(5)).on_ack(answer, s(101), std::iter::empty(), Some((s(100), 1)), None, |_| {});
        assert_eq!(held.rtt_sample, None);
        let bogus = syn(Duration::ZERO).on_ack(answer, s(101), std::iter::empty(), Some((s(100), 255)), None, |_| {});
        assert_eq!(bogus.rtt_sample, None);
    }
}
