//! Building outgoing packets and running timers (spec §5, §7): what a
//! connection sends next, in priority order: a pending RST, a
//! retransmission, new data (or SYN, cookie echo, FIN), a probe, an ack.

use std::time::{Duration, Instant};

use super::qlog::{QlogData, SendTrigger};
use super::timer::Timer;
use super::{advertised_window, data_room, CloseReason, Connection, Limit, State, LONE_FIN_MAX_RTO};
use crate::ids::ConnId;
use crate::recovery::{PacketState, SentPacket};
use crate::seq::Seq;
use crate::wire::chunk::{emit_resent, Chunk, Chunks, DATA_HEADER_LEN, RESENT_LEN};
use crate::wire::{
    ErrorCode, Flags, HandshakeParams, Packet, PacketType, COOKIE_LEN, ECHO_LEN, HEADER_LEN, PARAMS_LEN,
};

/// SACK ranges on a data packet (each costs 8 bytes of payload).
const DATA_SACK_RANGES: usize = 4;
/// Tail-loss probes per flight before the RTO (spec §5.4).
const MAX_TLPS: u32 = 3;
/// Resends after an RTO before an ack must come (spec §5.4 step 7).
const RTO_RESENDS: u8 = 2;
/// SACK ranges on a pure ack.
const ACK_SACK_RANGES: usize = 16;
/// The least DATA payload sent as a second piece of its datagram (spec
/// §7.2): datagrams this large go one per send anyway (a GSO batch holds
/// at most 64 KiB), so keeping the payload apart costs no batching.
const GATHER_MIN: usize = 32 * 1024;

impl Connection {
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(q) = self.qlog.as_mut() {
            q.tick(now);
        }
        if self.timers.next().is_none_or(|first| first > now) {
            return; // nothing due
        }
        for t in Timer::ALL {
            if self.timers.get(t).is_some_and(|w| w <= now) {
                self.timers.cancel(t);
                self.on_timer(now, t);
            }
        }
    }

    fn on_timer(&mut self, now: Instant, t: Timer) {
        if self.state == State::Closed {
            return;
        }
        match t {
            Timer::Connect => {
                let echo_unconfirmed = self.awaiting_echo_ack() && self.state != State::Closed;
                if echo_unconfirmed && self.remote_id.is_some() {
                    // The listener may have made the connection and only
                    // its acks were lost: tell it, as a stall does.
                    self.rst_pending = Some(ErrorCode::IDLE_TIMEOUT);
                }
                if matches!(self.state, State::SynSent | State::SynReceived)
                    || self.handshake_unfinished()
                    || echo_unconfirmed
                {
                    self.enter_closed(CloseReason::ConnectTimeout);
                }
            }
            Timer::Rto => self.on_rto(now),
            Timer::Tlp => {
                // RFC 8985 §7.3: resend the newest packet to draw a SACK that
                // lets RACK repair the tail, instead of waiting for the RTO.
                self.tlp_due = self.sent.newest_in_flight();
            }
            Timer::Loss => {
                let lost = self.detect_lost(now);
                self.stats.lost_packets += lost;
                if let Some(t) = self.sent.loss_time() {
                    self.timers.set(Timer::Loss, t);
                }
                self.check_probe(now);
            }
            Timer::DelayedAck => self.ack.immediate = true,
            // Nothing to do: the endpoint polls us for the packet it let go
            // (the pacer's, or the held partial datagram, spec §5.7).
            Timer::Pacing | Timer::Flush => {}
            Timer::Persist => {
                let limit = self.config.zero_window_timeout;
                if let (Some(since), Some(limit)) = (self.zero_window_since, limit) {
                    if now.saturating_duration_since(since) >= limit {
                        // spec §7.3: the peer stopped reading; tell it why.
                        if self.remote_id.is_some() {
                            self.rst_pending = Some(ErrorCode::WINDOW_TIMEOUT);
                        }
                        self.enter_closed(CloseReason::ZeroWindowTimeout);
                        return;
                    }
                }
                self.probe_pending = true;
                self.persist_backoff = self.persist_backoff.saturating_add(1);
            }
            Timer::KeepAlive => {
                if self.recv.is_some() && !matches!(self.state, State::SynSent | State::TimeWait) {
                    self.probe_pending = true;
                }
            }
            Timer::Idle => self.enter_closed(CloseReason::IdleTimeout),
            Timer::TimeWait => self.enter_closed(CloseReason::Graceful),
            Timer::Reack => {
                // spec §4.8: our final ack may have been lost, and the peer's
                // repeat of its FIN may come after we have exited.
                if self.state == State::TimeWait && self.reacks_left > 0 {
                    self.reacks_left -= 1;
                    self.ack.immediate = true;
                    if self.reacks_left > 0 {
                        // An RTO later, but within the exit's linger (at
                        // most a second, spec §4.8) whatever the RTO.
                        self.timers.set(Timer::Reack, now + self.rtt.rto(0).min(LONE_FIN_MAX_RTO * 2));
                    }
                }
            }
            Timer::Stall => self.on_stall(),
            // Nothing to do: the endpoint polls us for the challenge.
            Timer::Path => {}
        }
    }

    /// RFC 6298 (5.4)–(5.6): everything unacked is resent, the timer backs off.
    fn on_rto(&mut self, now: Instant) {
        if self.sent.is_empty() {
            return;
        }
        self.stats.rto_expiries += 1;
        self.rto_backoff += 1;
        self.record(now, QlogData::RtoExpired { backoff: self.rto_backoff });
        // A lone FIN's repeats are bounded by the stall timeout instead
        // (spec §5.4): they come every 250 ms, and twelve would be 3 s.
        if self.rto_backoff > self.config.max_retransmissions && !self.lone_fin() {
            let reason = match self.state {
                State::SynSent | State::SynReceived => CloseReason::ConnectTimeout,
                _ => CloseReason::RetransmitTimeout,
            };
            self.enter_closed(reason);
            return;
        }
        self.stats.lost_packets += self.sent.on_rto();
        self.rto_resends = 0;
        self.check_probe(now);
        self.check_black_hole();
        self.cc.on_rto(now);
        tracing::debug!(
            target: "manyfold::recovery",
            conn = %self.local_id,
            backoff = self.rto_backoff,
            cwnd = self.cc.window(),
            "retransmission timeout: everything in flight is resent"
        );
        self.timers.cancel(Timer::Loss);
        self.timers.cancel(Timer::Tlp);
        self.tlp_due = None;
        self.resend_copy_due = None;
    }

    /// The peer's SYN came (again): ours goes again at once, as SYN-ACK
    /// (spec §4.3), whatever an RTO holds back (the peer is there).
    pub(super) fn resend_syn_now(&mut self) {
        self.sent.requeue(self.isn);
        self.rto_resends = 0;
    }

    /// Writes the next datagram into `buf` (at most `buf.len()` bytes) and
    /// returns its length, or `None` when nothing is due or what is due does
    /// not fit (spec §2: the endpoint then ends its GSO batch). A protected
    /// connection builds the packet in the room protection leaves, then
    /// protects it (spec §19.3).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let room = buf.len().checked_sub(self.protection_overhead())?;
        let n = self.build_next(now, &mut buf[..room])?;
        Some(self.protect_written(buf, n))
    }

    /// The next packet, unprotected.
    fn build_next(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if let Some(code) = self.rst_pending.take() {
            return self.emit_rst(now, buf, code);
        }
        if self.state == State::Closed {
            return None;
        }
        if let Some(seq) = self.tlp_due.take() {
            if let Some(n) = self.send_probe(now, buf, seq) {
                return Some(n);
            }
        }
        if let Some(seq) = self.resend_copy_due.take() {
            if let Some(n) = self.send_resend_copy(now, buf, seq) {
                return Some(n);
            }
        }
        if self.state != State::TimeWait {
            if let Some(seq) = self.sent.peek_retransmit() {
                // spec §5.4 step 7: after an RTO, two resends, then nothing
                // until an ack comes (RFC 5682's first step, with a second
                // packet against random loss): the acks of a starved
                // receiver come late but come, and the first of them shows
                // whether the flight was lost at all.
                let after_rto = self.rto_backoff > 0 && self.rto_resends >= RTO_RESENDS;
                match if after_rto { Sent::Blocked } else { self.retransmit(now, buf, seq) } {
                    Sent::Yes(n) => return Some(n),
                    Sent::NoRoom => return None,
                    Sent::Blocked => {}
                }
            } else {
                if let Some(n) = self.send_pmtu_probe(now, buf) {
                    return Some(n);
                }
                match self.send_new(now, buf, false) {
                    Sent::Yes(n) => return Some(n),
                    Sent::NoRoom => return None,
                    Sent::Blocked => {}
                }
            }
        }
        // spec §6.2: while the cookie echo is unacknowledged the listener
        // may hold no state for us; anything but the echo would draw an RST.
        if self.awaiting_echo_ack() {
            self.probe_pending = false;
            self.ack.on_ack_sent();
            self.timers.cancel(Timer::DelayedAck);
            return None;
        }
        if self.probe_pending {
            // A keep-alive or window probe: elicits an ack, consumes no sequence number.
            let seq = self.sent.next_seq();
            let n = self.write(now, buf, Flags::KLV, seq, None, ACK_SACK_RANGES)?;
            self.probe_pending = false;
            return Some(n);
        }
        if self.recv.is_some() && self.ack.due() {
            let seq = self.sent.next_seq();
            return self.write(now, buf, Flags::empty(), seq, None, ACK_SACK_RANGES);
        }
        None
    }

    fn retransmit(&mut self, now: Instant, buf: &mut [u8], seq: Seq) -> Sent {
        // spec §13.6: data of reset streams and abandoned messages is not
        // sent again.
        let streams = &mut self.streams;
        self.sent.strip(seq, |chunks, retx| streams.before_retransmit(now, chunks, retx + 1));
        let Some(p) = self.sent.get(seq) else {
            return Sent::Blocked;
        };
        let room = data_room(self.max_datagram() as usize, self.sections_len(p.control) + self.resent_room());
        // spec §3.7: sent before the path narrowed, it is cut to the size in
        // use, unless it must go whole.
        if p.payload.encoded_len() > room && !self.goes_whole(seq) {
            self.fit_retransmission(seq, room);
        }
        let Some(p) = self.sent.get(seq) else {
            return Sent::Blocked;
        };
        let size = self.packet_size(p);
        let (payload, control) = (p.payload.clone(), p.control);
        // A packet larger than the window (one that goes whole after the
        // path narrowed, spec §3.7) goes when nothing else is in flight.
        let in_flight = self.sent.bytes_in_flight();
        if (in_flight > 0 && in_flight + size as u64 > self.cc.window()) || self.paced(now, size) {
            return Sent::Blocked;
        }
        // spec §5.3: a resend is what the peer waits for; ask for its ack now.
        match self.write(now, buf, control | Flags::KLV, seq, Some(&payload), DATA_SACK_RANGES) {
            Some(n) => {
                if self.rto_backoff > 0 {
                    self.rto_resends = self.rto_resends.saturating_add(1);
                }
                if self.sent.on_retransmitted(now, seq, n as u32) {
                    self.count_resend(SendTrigger::Retransmit);
                    let thin = control == Flags::empty() && payload.data_len() > 0 && self.thin_with_room(n as u64);
                    // spec §5.5.1: and our SYN's and cookie echo's (not a
                    // SYN-ACK that answers each SYN the peer sends again).
                    let handshake =
                        control.contains(Flags::CKE) || (control.contains(Flags::SYN) && self.state == State::SynSent);
                    if thin || handshake {
                        self.resend_copy_due = Some(seq);
                    }
                }
                self.arm_rto(now);
                Sent::Yes(n)
            }
            None => Sent::NoRoom,
        }
    }

    /// spec §5.5.1: whether a retransmission of `size` bytes just sent goes
    /// twice (the caller checked that it carries stream data and no SYN,
    /// cookie or FIN). Only a thin flow's: the application has less than a
    /// datagram queued, so what the copy costs is one datagram per loss
    /// and at most one message held back for a pacing interval (a bulk
    /// flow always has more queued); and only while the congestion window
    /// has room for the copy as well.
    fn thin_with_room(&self, size: u64) -> bool {
        self.streams.queued() < usize::from(self.max_datagram())
            && self.sent.bytes_in_flight() + size <= self.cc.window()
    }

    /// spec §5.5.1: the second copy of the retransmission of `seq`, right
    /// after the first, if `seq` is still unacknowledged. At 10% random
    /// loss, one in ten retransmissions is lost too, and its message waits
    /// a second round trip; with the copy, one in a hundred does. The copy
    /// is sent as a tail-loss probe is: the packet stays in flight once.
    fn send_resend_copy(&mut self, now: Instant, buf: &mut [u8], seq: Seq) -> Option<usize> {
        let p = self.sent.get(seq).filter(|p| p.state == PacketState::InFlight)?;
        if !self.streams.may_resend(now, &p.payload, p.retx()) {
            return None;
        }
        let (payload, control) = (p.payload.clone(), p.control);
        // spec §9.3: the copy waits for the pacer like any packet.
        if self.paced(now, HEADER_LEN + payload.encoded_len()) {
            self.resend_copy_due = Some(seq);
            return None;
        }
        let n = self.write(now, buf, control | Flags::KLV, seq, Some(&payload), DATA_SACK_RANGES)?;
        if self.sent.on_probe_sent(now, seq, n as u32, true) {
            self.count_resend(SendTrigger::Retransmit);
        }
        Some(n)
    }

    /// The next new sequenced packet: SYN, cookie echo, stream chunks, FIN.
    /// A `probe` (a tail-loss probe of new data, spec §5.4) goes whatever
    /// the congestion window, the pacer and the flush delay say; the peer's
    /// window still binds it.
    fn send_new(&mut self, now: Instant, buf: &mut [u8], probe: bool) -> Sent {
        if self.state == State::SynSent {
            if !self.sent.is_empty() {
                return Sent::Blocked;
            }
            if self.early_token_len() > 0 {
                return self.send_early_syn(now, buf);
            }
            return self.send_sequenced(now, buf, Flags::SYN, Chunks::default(), true, false);
        }
        if self.state == State::SynReceived {
            return Sent::Blocked;
        }
        // spec §19.2: our next handshake message, alone in its packet.
        if let Some(m) = self.security.as_mut().and_then(|s| s.outgoing.take()) {
            return self.send_handshake(now, buf, m);
        }
        if self.fin_seq.is_some() || self.awaiting_keys() {
            return Sent::Blocked;
        }
        // spec §6.2: nothing beyond the cookie echo until it is acknowledged;
        // what waits behind it has the echo probed once it is overdue.
        if self.awaiting_echo_ack() && self.cookie_seq.is_some() {
            if !self.timers.is_set(Timer::Tlp) {
                self.arm_echo_probe(now);
            }
            return Sent::Blocked;
        }
        let echo = self.cookie.is_some() && self.cookie_seq.is_none();
        // spec §6.9: an early connection's SYN-ACK, and 0-RTT data the
        // listener declined, must go whatever else is queued.
        let syn_ack = self.early_syn_due();
        if syn_ack && !self.early_syn_ack_wanted() {
            return Sent::Blocked;
        }
        let mut control = Flags::empty();
        if echo {
            control.insert(Flags::CKE);
        }
        if syn_ack {
            control.insert(Flags::SYN);
        }
        let must = echo || syn_ack || self.has_declined();
        // spec §6.2: an echo with nothing to carry waits a little for the
        // application's first write, which then rides on it.
        if echo && !syn_ack && !self.has_declined() && self.hold_echo(now) {
            self.note_limit(now, Some(Limit::Application));
            return Sent::Blocked;
        }
        let sack_len = self.ack_sections_len(DATA_SACK_RANGES);
        // spec §5.6: a new ack-frequency request rides ahead of the data.
        let ack_request = self.ack_freq.due(now, self.cc.window(), self.max_datagram(), self.rtt.srtt());
        let request = ack_request.map(|r| self.ack_freq.chunk::<bytes::Bytes>(r));
        let overhead = sack_len + self.sections_len(control) + request.as_ref().map_or(0, Chunk::encoded_len);
        // A new packet leaves room for its resend to say which one it is
        // (spec §5.4.2). The largest new datagram is that much smaller, so
        // a GSO batch's slots, sized by its first datagram, take the next
        // ones whole.
        let max_new = self.max_datagram() as usize - self.resent_room();
        let full_room = data_room(max_new, overhead);
        let outstanding = self.sent.outstanding_data();
        let flow_room = self.peer_window.saturating_sub(outstanding) as usize;
        let queued = self.streams.queued();
        let has_control = self.streams.has_control();
        let sendable = self.streams.has_sendable();
        let fin_due = self.fin_queued && queued == 0 && !sendable;
        // Data a full chunk of which could go now.
        let want = queued.min(full_room.saturating_sub(DATA_HEADER_LEN)).min(flow_room);
        if !has_control && !fin_due && !must {
            if !sendable {
                // Queued data a stream's credit holds back, or none at all.
                let limit = if queued > 0 { Limit::PeerWindow } else { Limit::Application };
                self.note_limit(now, Some(limit));
                return Sent::Blocked;
            }
            if flow_room == 0 {
                self.note_limit(now, Some(Limit::PeerWindow));
                if queued > 0 && outstanding == 0 {
                    // spec §7.3: closed to us with nothing in flight.
                    self.zero_window_since.get_or_insert(now);
                }
                if queued > 0 && outstanding == 0 && !self.timers.is_set(Timer::Persist) {
                    // spec §7.3: a zero window with nothing in flight: probe it.
                    self.timers.set(Timer::Persist, now + self.rtt.rto(self.persist_backoff));
                }
                return Sent::Blocked;
            }
            // Sender-side silly window avoidance (RFC 1122 4.2.3.4): while
            // acks are still due, don't send a runt cut short by the peer's window.
            if flow_room < full_room && flow_room < queued && outstanding > 0 {
                self.note_limit(now, Some(Limit::PeerWindow));
                return Sent::Blocked;
            }
        }
        let est = HEADER_LEN + overhead + (want + DATA_HEADER_LEN).min(full_room);
        let room = data_room(buf.len().min(max_new), overhead);
        if room < est - HEADER_LEN - overhead {
            return Sent::NoRoom;
        }
        // spec §5.7: plain stream data short of a full packet may wait for
        // more to join it. The wait runs while the window is closed too
        // (it is not added to a wait for the window), and is decided before
        // the pacer is asked, which would count the packet sent.
        let partial = queued.saturating_add(DATA_HEADER_LEN) < full_room && flow_room >= full_room;
        if !probe {
            let hold = !has_control && !fin_due && !must && self.hold_partial(now, partial);
            let window_full = self.sent.bytes_in_flight() + est as u64 > self.cc.window();
            if window_full || hold {
                // A hold waits for the application's next message, unless
                // a full packet could not go either.
                let limit = if window_full { Limit::Congestion } else { Limit::Application };
                self.note_limit(now, Some(limit));
                return Sent::Blocked;
            }
            if self.paced(now, est) {
                self.note_limit(now, Some(Limit::Pacing));
                return Sent::Blocked;
            }
        }
        let (mut chunks, declined_len, declined_data) = self.take_declined();
        if chunks.is_empty() {
            chunks = self.sent.chunk_list();
        }
        let cut = self.streams.fill(
            now,
            &mut chunks,
            room.saturating_sub(declined_len),
            flow_room.saturating_sub(declined_data),
        );
        let fin = self.fin_queued && self.streams.queued() == 0 && !self.streams.has_sendable();
        if chunks.is_empty() && !fin && !must {
            self.sent.keep_list(chunks);
            return Sent::Blocked;
        }
        if let Some(c) = request {
            chunks.push_front(c);
        }
        if fin {
            control.insert(Flags::FIN);
        }
        let size = HEADER_LEN + overhead + chunks.encoded_len();
        let seq = self.sent.next_seq();
        let app_limited = self.streams.queued() == 0;
        // spec §5.3: ask for an immediate ack (KLV) on the packet that ends a
        // burst or leaves no room for another: nothing follows it soon, so a
        // delayed ack would only stall the sender (RFC 5681's delayed-ack
        // stall at small windows; QUIC's IMMEDIATE_ACK does the same).
        // A window-filling packet stalls only a window smaller than two
        // of the peer's ack thresholds: a larger one keeps the acks coming
        // (spec §5.6).
        let room_after = self.cc.window().saturating_sub(self.sent.bytes_in_flight() + size as u64);
        let mss = u64::from(self.max_datagram());
        let small_window = self.cc.window() < 2 * u64::from(self.ack_freq.peer_threshold()) * mss;
        // A probe asks for its ack at once, as a resent one does (spec §5.4).
        let ack_now = probe || app_limited || (room_after < mss && small_window);
        let sent = self.send_sequenced(now, buf, control, chunks, app_limited, ack_now);
        if let Sent::Yes(_) = sent {
            self.note_limit(now, None);
            if let Some(r) = ack_request {
                self.ack_freq.on_sent(now, r);
            }
            self.stats.bytes_sent += cut as u64;
            if self.streams.queued() == 0 {
                // spec §5.7: what the hold waited for has gone.
                self.end_flush_hold();
            }
            if fin {
                self.fin_seq = Some(seq);
                self.streams.on_fin_sent();
            }
            if echo {
                self.cookie_seq = Some(seq);
                // spec §6.2: the echo's hold, if any, is over.
                self.end_flush_hold();
            }
        }
        sent
    }

    /// spec §5.7: whether a datagram of new stream data waits for more
    /// messages to join it: only if it is `partial` (less than a full
    /// packet) and something is in flight, whose acks bring the next
    /// sending chance anyway, and at most until `flush_delay` after data
    /// first waited with packets in flight. Nagle's rule: a sender with
    /// nothing in flight never waits.
    fn hold_partial(&mut self, now: Instant, partial: bool) -> bool {
        let delay = self.config.flush_delay;
        if delay.is_zero() {
            return false;
        }
        if self.sent.bytes_in_flight() == 0 {
            self.end_flush_hold();
            return false;
        }
        // The clock starts when data first waits behind packets in flight,
        // for whatever reason (the window, the pacer, this hold), so that
        // no wait adds to another.
        let end = *self.flush_hold_end.get_or_insert(now + delay);
        if !partial || end <= now {
            return false;
        }
        self.timers.set(Timer::Flush, end);
        true
    }

    /// spec §6.2: whether the cookie echo waits for the application's
    /// first write: only while there is nothing for it to carry (no data,
    /// empty message, stream FIN or control, nor the FIN), and at most
    /// `echo_delay` after it was first due. The hold shares the flush
    /// delay's clock and timer (§5.7): no data can wait behind the echo's
    /// hold, since data ends it.
    fn hold_echo(&mut self, now: Instant) -> bool {
        let delay = self.config.echo_delay;
        let idle = self.streams.queued() == 0
            && !self.streams.has_sendable()
            && !self.streams.has_control()
            && !self.fin_queued;
        if delay.is_zero() || !idle {
            return false;
        }
        let end = *self.flush_hold_end.get_or_insert(now + delay);
        if end <= now {
            return false;
        }
        self.timers.set(Timer::Flush, end);
        true
    }

    /// spec §6.2: the application waits to read before it wrote: the
    /// cookie echo held for its first write goes now. True if one was
    /// held (or not yet due, then it is not held at all).
    pub fn end_echo_hold(&mut self, now: Instant) -> bool {
        let pending = self.cookie.is_some() && self.cookie_seq.is_none();
        if !pending || self.flush_hold_end.is_some_and(|end| end <= now) {
            return false;
        }
        self.flush_hold_end = Some(now);
        self.timers.cancel(Timer::Flush);
        true
    }

    /// The data a hold waited for has gone, or nothing is in flight.
    fn end_flush_hold(&mut self) {
        if self.flush_hold_end.take().is_some() {
            self.timers.cancel(Timer::Flush);
        }
    }

    /// Sends a handshake message in a sequenced packet of its own; the
    /// initiator's first one is the cookie echo (spec §19.2).
    fn send_handshake(&mut self, now: Instant, buf: &mut [u8], m: bytes::Bytes) -> Sent {
        let echo = self.cookie.is_some() && self.cookie_seq.is_none();
        let control = if echo { Flags::CKE } else { Flags::empty() };
        let mut chunks = Chunks::default();
        chunks.push(Chunk::Handshake(m.clone()));
        let seq = self.sent.next_seq();
        let sent = self.send_sequenced(now, buf, control, chunks, true, true);
        match sent {
            Sent::Yes(_) if echo => self.cookie_seq = Some(seq),
            Sent::Yes(_) => {}
            Sent::NoRoom | Sent::Blocked => {
                if let Some(s) = self.security.as_mut() {
                    s.outgoing = Some(m);
                }
            }
        }
        sent
    }

    pub(super) fn send_sequenced(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        control: Flags,
        payload: Chunks,
        app_limited: bool,
        ack_now: bool,
    ) -> Sent {
        let seq = self.sent.next_seq();
        let flags = if ack_now { control | Flags::KLV } else { control };
        match self.write(now, buf, flags, seq, Some(&payload), DATA_SACK_RANGES) {
            Some(n) => {
                self.sent.on_sent(now, payload, control, n as u32, app_limited);
                self.arm_rto(now);
                Sent::Yes(n)
            }
            None => Sent::NoRoom,
        }
    }

    /// spec §9.3: whether the pacer holds a packet of `size` bytes back
    /// (arming the Pacing timer). Not before the first RTT sample.
    fn paced(&mut self, now: Instant, size: usize) -> bool {
        if !self.rtt.has_sample() {
            return false;
        }
        let srtt = self.rtt.srtt().max(std::time::Duration::from_micros(1)).as_secs_f64();
        let rate = self.cc.pacing_rate().unwrap_or(self.cc.pacing_gain() * self.cc.window() as f64 / srtt);
        match self.pacer.delay(now, rate, u64::from(self.max_datagram()), size as u64) {
            Some(at) => {
                self.timers.set(Timer::Pacing, at);
                true
            }
            None => {
                self.pacer.on_sent(size as u64);
                false
            }
        }
    }

    /// The RTO with its backoff (RFC 6298 (5.5)), except for a lone FIN:
    /// its repeats stay at most 250 ms apart, whatever the RTO (spec §5.4).
    /// A FIN is 24 bytes, and a peer that has exited answers the next one
    /// with ICMP port unreachable (spec §6.7): with loss on the path it
    /// takes a few repeats, and they must come within the peer's linger
    /// or soon after its exit. The RTO is no guide here: a connection that
    /// sent nothing but its FIN has only the handshake's RTT sample, which
    /// a retransmitted cookie echo inflates to seconds when its client does
    /// not report the echo's delay (spec §3.3.3).
    pub(super) fn backed_off_rto(&self) -> Duration {
        let rto = self.rtt.rto(self.rto_backoff);
        if self.lone_fin() {
            rto.min(LONE_FIN_MAX_RTO)
        } else {
            rto
        }
    }

    /// LAST-ACK or CLOSING with every byte of data acknowledged: only our
    /// FIN waits for the peer's last ack.
    fn lone_fin(&self) -> bool {
        matches!(self.state, State::LastAck | State::Closing) && self.sent.outstanding_data() == 0
    }

    pub(super) fn arm_rto(&mut self, now: Instant) {
        self.arm_stall(now);
        if !self.timers.is_set(Timer::Rto) {
            self.timers.set(Timer::Rto, now + self.backed_off_rto());
        }
        if !self.timers.is_set(Timer::Tlp) {
            self.arm_tlp(now);
        }
    }

    /// Arms the tail-loss probe (spec §5.4): like QUIC's PTO (RFC 9002
    /// §6.2) and unlike RACK-TLP's single probe, up to `MAX_TLPS` probes go
    /// out per flight, each wait twice the last, before the RTO (which is
    /// always later, see [`crate::recovery::RttEstimator::pto`]) collapses the window.
    pub(super) fn arm_tlp(&mut self, now: Instant) {
        if self.awaiting_echo_ack() {
            return self.arm_echo_probe(now);
        }
        if self.tlp_count >= MAX_TLPS || !self.rtt.has_sample() {
            self.timers.cancel(Timer::Tlp);
            return;
        }
        self.timers.set(Timer::Tlp, now + self.rtt.pto() * (1 << self.tlp_count));
    }

    /// spec §5.4, §6.2: while the cookie echo is unacknowledged nothing
    /// else may leave, so data queued behind it waits for its ack; a lost
    /// echo would hold that data until the RTO (about 3·SRTT after the
    /// handshake's one sample, then twice that). With data or a FIN
    /// waiting, the echo is sent again as a tail-loss probe once it is
    /// overdue ([`crate::recovery::RttEstimator::overdue_after`] since its
    /// last send, doubling per probe, at most `MAX_TLPS`). An echo with
    /// nothing behind it (a session's request rides in the echo itself)
    /// keeps to the RTO, so a listener that is slow to answer costs no
    /// spurious copies.
    fn arm_echo_probe(&mut self, now: Instant) {
        let waiting = self.streams.queued() > 0 || self.fin_queued;
        let last_sent = self.cookie_seq.and_then(|s| self.sent.get(s)).map(|p| p.time_sent);
        match last_sent {
            Some(at) if waiting && self.tlp_count < MAX_TLPS && self.rtt.has_sample() => {
                let due = at + self.rtt.overdue_after() * (1 << self.tlp_count);
                self.timers.set(Timer::Tlp, due.max(now));
            }
            _ => self.timers.cancel(Timer::Tlp),
        }
    }

    /// Sends a tail-loss probe (RFC 8985 §7.3, spec §5.4): a packet of new
    /// data if the application has some and the peer's window takes it,
    /// else the newest packet, `seq`, again if it is still in flight. A
    /// probe may exceed the congestion window by this one packet.
    fn send_probe(&mut self, now: Instant, buf: &mut [u8], seq: Seq) -> Option<usize> {
        // An ack handled since the timer fired (the same receive batch)
        // acked `seq` or declared it lost: the ack re-armed the timers,
        // and a lost packet goes as its retransmission, not as a probe.
        if self.sent.get(seq).is_none_or(|p| p.state != PacketState::InFlight) {
            return None;
        }
        if let Some(n) = self.send_new_probe(now, buf) {
            return Some(n);
        }
        let p = self.sent.get(seq)?;
        if !self.streams.may_resend(now, &p.payload, p.retx() + 1) {
            // spec §13.6: data past its partial-reliability limit is not
            // sent again by a probe; a keep-alive probe draws the ack.
            self.probe_pending = true;
            self.tlp_count += 1;
            self.arm_tlp(now);
            return None;
        }
        let (payload, control) = (p.payload.clone(), p.control);
        let n = self.write(now, buf, control | Flags::KLV, seq, Some(&payload), DATA_SACK_RANGES)?;
        if self.sent.on_probe_sent(now, seq, n as u32, false) {
            self.count_resend(SendTrigger::Probe);
        }
        self.check_probe(now);
        self.on_probe_sent(now);
        Some(n)
    }

    /// A tail-loss probe of new data (RFC 8985 §7.3: "if a previously
    /// unsent segment exists and the receive window allows"). Its ack, or
    /// the SACK of it, tells RACK whether the tail was lost, as a resend's
    /// would; a receiver that was only late (a host short of CPU) then
    /// costs the sender nothing resent. Only for a bulk flow (a whole
    /// datagram of data queued), while our FIN has not gone and no packet
    /// waits for its resend.
    fn send_new_probe(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let open = matches!(self.state, State::Established | State::CloseWait | State::FinWait1 | State::LastAck);
        // A thin flow's tail is resent instead: new data would repair it
        // only after its own ack and RACK's reordering window, about a
        // round trip later (RESULTS §22: the messages lab's p99 rose).
        let bulk = self.streams.queued() >= self.max_datagram() as usize;
        if !open || !bulk || self.fin_seq.is_some() || self.sent.peek_retransmit().is_some() || self.awaiting_echo_ack()
        {
            return None;
        }
        match self.send_new(now, buf, true) {
            Sent::Yes(n) => {
                self.on_probe_sent(now);
                Some(n)
            }
            Sent::NoRoom | Sent::Blocked => None,
        }
    }

    /// Counts a tail-loss probe and arms the next one and the RTO.
    fn on_probe_sent(&mut self, now: Instant) {
        self.stats.tail_loss_probes += 1;
        self.probe_tx = Some(self.sent.last_tx());
        self.tlp_count += 1;
        self.arm_tlp(now);
        // RFC 8985 §7.3: give the probe a whole RTO to be answered.
        self.timers.set(Timer::Rto, now + self.backed_off_rto());
    }

    /// spec §3.7: whether `seq`, if larger than the size in use, is resent
    /// whole rather than cut: a packet sent before our FIN. The cut-off
    /// part would take sequence numbers after the FIN, which the peer
    /// reaches without them, and its streams would end short.
    pub(super) fn goes_whole(&self, seq: Seq) -> bool {
        self.fin_seq.is_some_and(|fin| seq < fin)
    }

    /// Bytes of `p` sent again, unprotected and without SACK ranges.
    pub(super) fn packet_size(&self, p: &SentPacket) -> usize {
        HEADER_LEN + self.sections_len(p.control) + self.resent_room() + p.payload.encoded_len()
    }

    /// Bytes every sequenced packet keeps free for the RESENT chunk its
    /// resend carries to a peer that takes echoes (spec §5.4.2), so that a
    /// full packet's resend still fits the datagram.
    fn resent_room(&self) -> usize {
        if self.ack.peer_echoes {
            RESENT_LEN
        } else {
            0
        }
    }

    /// Bytes of the SACK section the next packet carries with at most
    /// `ranges` ranges: the ranges and the echo (spec §3.3.1, §5.4.2).
    fn ack_sections_len(&self, ranges: usize) -> usize {
        let sack = self.recv.as_ref().and_then(|r| r.sack_block(ranges)).map_or(0, |s| s.encoded_len());
        match self.echo_due() {
            Some(_) if sack == 0 => 1 + ECHO_LEN,
            Some(_) => sack + ECHO_LEN,
            None => sack,
        }
    }

    /// The echo the next ack carries (spec §5.4.2): the last arrival's, to
    /// a peer that takes echoes.
    fn echo_due(&self) -> Option<crate::wire::Echo> {
        self.ack.echo.filter(|_| self.ack.peer_echoes && self.recv.is_some())
    }

    /// The RESENT count `seq` carries if this write is a resend of it to a
    /// peer that takes echoes (spec §5.4.2). Never on a SYN or SYN-ACK,
    /// whose parameters say it (spec §3.3.2: our initial SYN goes before
    /// we know the peer's features, and a listener of before the RESENT
    /// chunk drops a SYN that carries one), nor on a protected handshake
    /// message, which keeps its layout.
    fn resent_count(&self, seq: Seq, flags: Flags, chunks: Option<&Chunks>) -> Option<u8> {
        let c = chunks?;
        if !self.ack.peer_echoes || flags.contains(Flags::SYN) {
            return None;
        }
        // A new packet has no record yet: only a resend's chunks are looked at.
        let count = self.sent.get(seq).map(SentPacket::next_resent_count)?;
        (!c.has_handshake()).then_some(count)
    }

    /// Bytes of the SYN parameters and cookie sections `control` implies.
    fn sections_len(&self, control: Flags) -> usize {
        let mut n = 0;
        if control.contains(Flags::SYN) {
            n += PARAMS_LEN + self.early_token_len();
        }
        if control.contains(Flags::CKE) {
            n += COOKIE_LEN;
        }
        n
    }

    /// Writes one packet with the current ack, window and as many SACK
    /// ranges as fit, and does the per-send bookkeeping.
    pub(super) fn write(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        flags: Flags,
        seq: Seq,
        chunks: Option<&Chunks>,
        sack_max: usize,
    ) -> Option<usize> {
        let (ack, window) = match &self.recv {
            Some(r) => {
                let window = r.window(self.streams.held_memory());
                self.ack.advertised = window;
                (r.next().wire(), advertised_window(window as usize))
            }
            None => (0, advertised_window(super::recv::initial_window(self.config.recv_buffer))),
        };
        let mut flags = flags;
        if self.recv.is_some() {
            flags.insert(Flags::ACK);
        }
        let mut p =
            Packet::bare(PacketType::Segment, flags, ConnId::wire_or_zero(self.remote_id), seq.wire(), ack, window);
        if flags.contains(Flags::SYN) {
            let (early, token) = self.early_params();
            p.token = token;
            // spec §3.3.2: a resend names its transmission in the parameters.
            let count = self.sent.get(seq).map_or(0, SentPacket::next_resent_count);
            let params = HandshakeParams {
                conn_id: self.local_id.wire(),
                max_datagram: self.config.max_accepted_datagram(),
                features: early | HandshakeParams::local_features(self.security.is_some()),
            };
            p.params = Some(params.with_transmission(count));
        }
        if flags.contains(Flags::CKE) {
            // spec §3.3.3: the echo says how long after the SYN-ACK it goes
            // (the hold for a first write, a retransmission's wait), which
            // the listener takes off the cookie's age, its RTT sample.
            let mut cookie = self.cookie?;
            let since = self.cookie_since.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
            cookie.echo_delay = u16::try_from(since.as_millis()).unwrap_or(u16::MAX);
            p.cookie = Some(cookie);
        }
        let resent = self.resent_count(seq, flags, chunks);
        let resent_len = resent.map_or(0, |_| RESENT_LEN);
        let data_len = chunks.map_or(0, Chunks::encoded_len) + resent_len;
        let base = p.len_with(data_len);
        if base > buf.len() {
            return None;
        }
        if let Some(r) = &self.recv {
            // spec §5.4.2: the echo goes when there is room for it.
            let room = buf.len() - base;
            let echo = self.echo_due().filter(|_| room > ECHO_LEN);
            let fit = room.saturating_sub(1 + echo.map_or(0, |_| ECHO_LEN)) / 8;
            p.sack = r.sack_block(fit.min(sack_max));
            if let Some(e) = echo {
                p.sack = Some(p.sack.unwrap_or_default().with_echo(e));
                self.ack.echo = None;
            }
        }
        // spec §7.2: a large DATA payload at the end goes as a second piece
        // of the datagram, not copied, when the caller takes such datagrams
        // (a protected packet is sealed in place, so it is always whole).
        let tail = chunks
            .filter(|_| self.gather.is_some() && self.security.is_none())
            .and_then(|c| c.gatherable_tail(GATHER_MIN))
            .cloned();
        let put_resent = |out: &mut [u8]| resent.map_or(0, |count| emit_resent(out, count));
        let n = match (&tail, chunks) {
            (Some(tail), Some(c)) => p.emit_gathered(buf, data_len, tail, self.gather.as_deref_mut(), |out| {
                let at = put_resent(out);
                c.emit_head(&mut out[at..]);
            }),
            _ => p.emit_with(buf, data_len, |out| {
                let at = put_resent(out);
                if let Some(c) = chunks {
                    c.emit(&mut out[at..]);
                }
            }),
        };
        if let Some(s) = self.security.as_mut() {
            s.last_was_handshake = chunks.is_some_and(Chunks::has_handshake);
        }
        self.stats.packets_sent += 1;
        match &tail {
            Some(t) if self.qlog.is_some() => {
                let whole = [&buf[..n - t.len()], &t[..]].concat();
                self.record_sent(now, &whole);
            }
            Some(_) => {}
            None => self.record_sent(now, &buf[..n]),
        }
        self.gathered = tail;
        if flags.contains(Flags::ACK) {
            self.ack.on_ack_sent();
            self.timers.cancel(Timer::DelayedAck);
        }
        if let (Some(k), false) =
            (self.config.keepalive_interval, matches!(self.state, State::SynSent | State::TimeWait))
        {
            self.timers.set(Timer::KeepAlive, now + k);
        }
        Some(n)
    }
}

pub(super) enum Sent {
    Yes(usize),
    /// Nothing to send now (or congestion / flow control says wait).
    Blocked,
    /// Something is due but does not fit the room given.
    NoRoom,
}

#[cfg(test)]
mod tests {
    //! spec §5.7: the flush delay, on two endpoints joined by a 20 ms
    //! lossless wire in virtual time.

    use std::net::SocketAddr;
    use std::time::{Duration, Instant};

    use crate::wire::chunk::{parse_chunks, Chunk};
    use crate::wire::Packet;
    use crate::{ConnHandle, Endpoint, EndpointConfig, MessageOptions, State, StreamId};

    const ONE_WAY: Duration = Duration::from_millis(20);
    const FLUSH: Duration = Duration::from_millis(5);

    struct Link {
        now: Instant,
        a: Endpoint,
        b: Endpoint,
        a_addr: SocketAddr,
        b_addr: SocketAddr,
        /// (arrival, to b, datagram), in arrival order.
        wire: Vec<(Instant, bool, Vec<u8>)>,
        /// a → b datagrams that carried stream data: when, and how many bytes.
        data_sent: Vec<(Instant, usize)>,
    }

    impl Link {
        /// Two endpoints with `flush_delay`, connected; returns a's handle.
        fn connected(flush_delay: Duration) -> (Link, ConnHandle) {
            let now = Instant::now();
            let mut cfg = EndpointConfig { seed: 7, ..Default::default() };
            cfg.connection.flush_delay = flush_delay;
            let mut b = Endpoint::new(EndpointConfig { seed: 8, ..cfg.clone() }, now);
            b.set_listening(true);
            let mut l = Link {
                now,
                a: Endpoint::new(cfg, now),
                b,
                a_addr: "127.0.0.1:1000".parse().unwrap(),
                b_addr: "127.0.0.1:2000".parse().unwrap(),
                wire: Vec::new(),
                data_sent: Vec::new(),
            };
            let c = l.a.connect(now, l.b_addr).unwrap();
            l.run_for(Duration::from_millis(200));
            assert_eq!(l.a.conn(c).state(), Some(State::Established));
            assert!(l.b.accept().is_some());
            l.data_sent.clear();
            (l, c)
        }

        fn pump(&mut self) {
            let mut buf = Vec::new();
            for to_b in [true, false] {
                let ep = if to_b { &mut self.a } else { &mut self.b };
                while let Some(t) = ep.poll_transmit(self.now, 1, &mut buf) {
                    let d = buf[..t.size].to_vec();
                    if to_b {
                        let data = Packet::parse(&d).ok().map_or(0, |p| {
                            parse_chunks(p.data)
                                .filter_map(|c| match c {
                                    Ok(Chunk::Data(dc)) => Some(dc.data.len()),
                                    _ => None,
                                })
                                .sum()
                        });
                        if data > 0 {
                            self.data_sent.push((self.now, data));
                        }
                    }
                    self.wire.push((self.now + ONE_WAY, to_b, d));
                }
            }
        }

        /// Runs everything due up to `now + d`.
        fn run_for(&mut self, d: Duration) {
            let end = self.now + d;
            loop {
                self.pump();
                let wire = self.wire.first().map(|w| w.0);
                let timers = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
                let next = [wire, timers].into_iter().flatten().min().filter(|&t| t <= end);
                let Some(t) = next else { break };
                self.now = self.now.max(t);
                while self.wire.first().is_some_and(|w| w.0 <= self.now) {
                    let (_, to_b, d) = self.wire.remove(0);
                    if to_b {
                        self.b.handle_datagram(self.now, self.a_addr, &d);
                    } else {
                        self.a.handle_datagram(self.now, self.b_addr, &d);
                    }
                }
                self.a.handle_timeout(self.now);
                self.b.handle_timeout(self.now);
            }
            self.now = end;
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
            self.pump();
        }

        fn send(&mut self, c: ConnHandle, size: usize) {
            let msg = vec![0x5a; size];
            self.a.conn_mut(c).send_message(self.now, StreamId::new(1), &msg, MessageOptions::default()).unwrap();
            self.pump();
        }
    }

    #[test]
    fn a_partial_datagram_waits_while_data_is_in_flight_and_goes_at_the_deadline() {
        let (mut l, c) = Link::connected(FLUSH);
        // Nothing in flight: the first message goes at once (Nagle's rule).
        l.send(c, 32);
        assert_eq!(l.data_sent.len(), 1, "the first message waited with nothing in flight");
        // In flight now: the next ones wait for company, up to FLUSH.
        let held_at = l.now;
        l.send(c, 32);
        assert_eq!(l.data_sent.len(), 1, "a partial datagram went while data was in flight");
        assert!(l.a.poll_timeout().is_some_and(|t| t <= held_at + FLUSH), "no wake-up at the flush deadline");
        l.run_for(FLUSH / 2);
        l.send(c, 32);
        assert_eq!(l.data_sent.len(), 1, "the hold ended early");
        l.run_for(FLUSH / 2);
        assert_eq!(l.data_sent.len(), 2, "the held data did not go at the deadline");
        let (at, bytes) = l.data_sent[1];
        assert_eq!(at, held_at + FLUSH, "it went at the deadline, measured from the oldest message");
        assert_eq!(bytes, 64, "both waiting messages share the datagram");
    }

    #[test]
    fn nothing_waits_when_nothing_is_in_flight() {
        let (mut l, c) = Link::connected(FLUSH);
        for _ in 0..3 {
            l.send(c, 32);
            let n = l.data_sent.len();
            assert_eq!(l.data_sent[n - 1].0, l.now, "sent at once");
            // Everything acknowledged before the next one.
            l.run_for(Duration::from_millis(100));
        }
        assert_eq!(l.data_sent.len(), 3);
    }

    #[test]
    fn a_full_packet_never_waits() {
        let (mut l, c) = Link::connected(FLUSH);
        l.send(c, 32);
        // With data in flight, a message bigger than a packet: its full
        // packets go at once; only its tail may wait.
        l.send(c, 4000);
        assert!(l.data_sent.len() >= 3, "full packets were held: {:?}", l.data_sent);
        assert!(l.data_sent.iter().all(|&(at, _)| at == l.now));
        let sent: usize = l.data_sent.iter().map(|d| d.1).sum();
        assert!(sent < 32 + 4000, "the tail should have waited");
        l.run_for(FLUSH);
        let sent: usize = l.data_sent.iter().map(|d| d.1).sum();
        assert_eq!(sent, 32 + 4000, "the tail went at the deadline");
    }

    /// When the last of a 200 kB message and a 32-byte one queued behind
    /// it leave, from the moment they were queued.
    fn window_wait(flush_delay: Duration) -> Duration {
        let (mut l, c) = Link::connected(flush_delay);
        let start = l.now;
        // More than the initial window of 10 packets: the window closes.
        l.send(c, 200_000);
        l.send(c, 32);
        assert!(l.data_sent.len() < 20, "the window did not close");
        for _ in 0..5000 {
            if l.data_sent.iter().map(|d| d.1).sum::<usize>() == 200_032 {
                return l.data_sent[l.data_sent.len() - 1].0 - start;
            }
            l.run_for(Duration::from_millis(1));
        }
        panic!("not all sent within 5 s");
    }

    #[test]
    fn a_wait_for_the_window_counts_toward_the_flush_delay() {
        // The tail and the small message waited for the window far longer
        // than the flush delay: they go as soon as the window lets them.
        assert_eq!(window_wait(FLUSH), window_wait(Duration::ZERO));
    }

    #[test]
    fn a_probe_due_for_a_packet_acked_meanwhile_is_not_sent() {
        // RFC 8985 §7.3: the probe timer picks the newest packet in flight;
        // an ack of that packet handled before the next transmit (the same
        // receive batch) makes the probe needless. Two messages, the first
        // lost on the wire and the second's ack held past the probe timer.
        let (mut l, c) = Link::connected(Duration::ZERO);
        l.send(c, 32);
        let first = l.wire.pop().expect("the first message's datagram");
        assert!(first.1, "it goes to b");
        l.send(c, 32);
        assert_eq!(l.data_sent.len(), 2);
        // b gets the second and answers with an ack naming it (SACK).
        let at = l.wire[0].0;
        l.run_for(at - l.now);
        let ack_at = l.wire.iter().position(|w| !w.1).expect("b's ack of the second message");
        let ack = l.wire.remove(ack_at).2;
        // a's probe timer fires before that ack arrives; the ack then comes
        // in the same instant, before a transmits.
        let probe_at = l.a.poll_timeout().expect("a's probe timer");
        l.now = probe_at;
        l.a.handle_timeout(l.now);
        l.a.handle_datagram(l.now, l.b_addr, &ack);
        let probes = l.a.conn(c).stats().expect("open").tail_loss_probes;
        l.pump();
        assert_eq!(l.data_sent.len(), 2, "the acked second message was sent again as a probe");
        assert_eq!(l.a.conn(c).stats().expect("open").tail_loss_probes, probes, "a probe counted that did not go");
        // The lost first message is still repaired (a thin flow's resend
        // goes twice, spec §5.5.1), and nothing else goes again.
        l.run_for(Duration::from_secs(2));
        assert_eq!(l.data_sent.len(), 4, "the first message was not resent, or more went: {:?}", l.data_sent);
        assert!(l.data_sent[2..].iter().all(|d| d.0 > probe_at && d.0 == l.data_sent[2].0));
        assert_eq!(l.a.conn(c).stats().expect("open").retransmissions, 2, "the resend and its copy");
    }

    #[test]
    fn without_a_flush_delay_every_message_goes_at_once() {
        let (mut l, c) = Link::connected(Duration::ZERO);
        for i in 1..=3 {
            l.send(c, 32);
            assert_eq!(l.data_sent.len(), i, "message {i} waited");
        }
    }
}
