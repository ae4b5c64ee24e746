//! The multicast receiver (spec §16): registering, storing, reporting,
//! completing, and its sans-IO calls in quinn-proto's order:
//! `handle_datagram` / `handle_timeout` (input), `finish` / `abort`
//! (commands), `poll_transmit` / `poll_event` / `poll_timeout` (output).
//! Everything that can wake it is one [`ReceiverTimer`] table. Its parts:
//!
//! - `config.rs`: parameters, deliveries, events, counters;
//! - `gaps.rs`: gaps in the first sending, on a `RangeSet<u32>` (§16.4);
//! - `feedback.rs`: ACK/NACK backoff and suppression (and their hold
//!   after a stall), REPAIR, STATUS with its loss signatures, the group
//!   the sender assigns (§16.4–§16.5, §16.7, §16.12);
//! - `parity.rs`: Reed-Solomon shards and rebuilt blocks (§16.9);
//! - `keys.rs`: a protected session's registration (§19.7);
//! - `tests.rs`: unit tests without the simulator.

mod config;
mod feedback;
mod gaps;
mod keys;
mod parity;
#[cfg(test)]
mod tests;

pub use config::{Delivery, ReceiverConfig, ReceiverEvent, ReceiverStats};

use crate::mcast::bitmap::Bitmap;
use crate::mcast::secure::{Ignored, SEAL_OVERHEAD};
use crate::mcast::sender::packets_for;
use crate::mcast::signature::LossSignatures;
use crate::mcast::McTransmit;
use crate::timer::{TimerKind, Timers};
use crate::wire::mcast::{emit, emit_bytes, Announcement, McPacket, Phase};
use crate::wire::{ErrorCode, Flags, PacketType};
use gaps::Gaps;
use keys::ReceiverSecurity;
use parity::Shard;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

/// One receiver of a multicast file session (spec §16), sans-IO: fed datagrams from the group and from the sender, it reports what to write where ([`Delivery`]), the feedback to send, and its events.
#[derive(Debug)]
pub struct McastReceiver {
    cfg: ReceiverConfig,
    group: SocketAddr,
    client: u32,
    rng: ChaCha8Rng,
    session: Option<u32>,
    sender: Option<SocketAddr>,
    info: Option<Announcement>,
    phase: Phase,
    total: Option<u32>,
    registered: bool,
    have: Bitmap,
    /// Gaps seen in the first sending, and those not yet reported.
    gaps: Gaps,
    /// The window the pending ACK (`ReceiverTimer::Ack`) confirms.
    ack_lwsn: u32,
    /// How long a gap stays open before it is reported (spec §16.4).
    reorder: Duration,
    repair_round: u32,
    timers: Timers<ReceiverTimer>,
    complete_told: bool,
    verdict: Option<bool>,
    confirmed: bool,
    ended: bool,
    /// Parity shards of FEC blocks with missing packets (spec §16.9):
    /// block → (k, shards); `parity_bytes` bounds them.
    parity: BTreeMap<u32, (u16, Vec<Shard>)>,
    parity_bytes: usize,
    /// Blocks with enough shards to rebuild what they miss.
    decodable: BTreeSet<u32>,
    /// One-shot transmissions queued by input (REGISTER at once).
    urgent: VecDeque<Urgent>,
    /// The last ACK or NACK, to send again to a sender on another network.
    feedback_copy: Option<Vec<u8>>,
    /// The LWSN of the window last NACKed (by us or our network).
    nacked_window: Option<u32>,
    /// The window size W the newest DATA carried.
    last_w: u32,
    /// Whether we lagged at each of the last 8 neighbours' ACKs, newest
    /// in the lowest bit (spec §16.7).
    lag_history: u8,
    /// Windows in a row held in time since it fell behind (spec §16.7).
    caught_up_run: u8,
    /// It was behind and caught up: its next ACK (without KLV) goes
    /// whatever it hears, so that the sender, which awaits it on its own
    /// until such an ACK comes, learns it (spec §16.7).
    tell_caught_up: bool,
    /// The network's acker (spec §16.4): the lowest client id heard
    /// ACKing on our feedback network (not behind it), if below ours, and
    /// when we last heard it.
    acker: Option<(u32, Instant)>,
    /// The oldest window whose ACK we let the acker send and have not yet
    /// heard the acker ACK (it or a later one, without KLV), and when
    /// (spec §16.4); our own ACK settles it too.
    acker_owes: Option<(u32, Instant)>,
    /// The pending ACK timer only looks again at a window let go to the
    /// acker (spec §16.4): its cancelling is no ACK suppressed.
    ack_recheck: bool,
    /// When we last sent an ACK (a deferring receiver still sends one
    /// every `ACK_KEEPALIVE`, so that the sender hears it, spec §16.7).
    last_ack_sent: Option<Instant>,
    /// ACKs let go in a row (spec §16.4): a deferring receiver sends one
    /// of every 2n, n the receivers heard on its network.
    deferred_run: u32,
    /// Receivers heard ACKing on our network, and when last (at most
    /// `MAX_NEIGHBOURS`, forgotten after `NEIGHBOUR_FORGET`).
    neighbours: Vec<(u32, Instant)>,
    /// This receiver falls behind its network (spec §16.7): its ACKs carry
    /// KLV and are never suppressed.
    behind: bool,
    /// What it lost of the first sending, per block, for its STATUS
    /// (spec §16.12).
    signatures: LossSignatures,
    /// The group the sender put it in (spec §16.12): (epoch, group id).
    assigned: Option<(u32, u32)>,
    /// The pending ACK / NACK was already held back once after a stall
    /// (spec §16.4).
    stall_held: [bool; 2],
    events: VecDeque<ReceiverEvent>,
    stats: ReceiverStats,
    security: Option<Box<ReceiverSecurity>>,
    /// The packet `poll_plain` just wrote goes out unsealed.
    send_clear: bool,
    /// The last session heard and not joined, and why.
    ignored: Option<(u32, Ignored)>,
    /// `abort`'s code and the copies of its STATUS still to send.
    leaving: Option<(ErrorCode, u8)>,
}

/// Copies of the STATUS with which an aborting receiver leaves (spec §16.7).
const LEAVE_COPIES: u8 = 3;

/// Everything that can wake the receiver (spec §16.4–§16.7); the send
/// timers in the order `poll_transmit` serves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReceiverTimer {
    /// Send REGISTER (again, every `register_retry` until answered).
    Register,
    /// The window ACK, after its backoff (spec §16.4).
    Ack,
    /// The NACK of the window's first gaps, after its backoff.
    Nack,
    /// The next REPAIR request (every repair interval while missing).
    Repair,
    /// The next STATUS.
    Status,
    /// Nothing from the sender for `sender_timeout`.
    SenderLost,
}

impl TimerKind for ReceiverTimer {
    type Slots = [u64; 6];
    const ALL: &'static [ReceiverTimer] = &[
        ReceiverTimer::Register,
        ReceiverTimer::Ack,
        ReceiverTimer::Nack,
        ReceiverTimer::Repair,
        ReceiverTimer::Status,
        ReceiverTimer::SenderLost,
    ];
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Clone, Copy)]
enum Urgent {
    Register,
    Status,
}

impl McastReceiver {
    /// A receiver listening for sessions on `group`.
    pub fn new(cfg: ReceiverConfig, group: SocketAddr) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let drawn = rng.next_u32().max(1);
        let client = cfg.client_id.filter(|&c| c != 0).unwrap_or(drawn);
        McastReceiver {
            group,
            client,
            rng,
            session: cfg.session,
            sender: None,
            info: None,
            phase: Phase::Data,
            total: None,
            registered: false,
            have: Bitmap::new(cfg.max_packets),
            gaps: Gaps::default(),
            reorder: cfg.reorder_window,
            ack_lwsn: 0,
            timers: Timers::default(),
            repair_round: 0,
            complete_told: false,
            verdict: None,
            confirmed: false,
            ended: false,
            parity: BTreeMap::new(),
            parity_bytes: 0,
            decodable: BTreeSet::new(),
            urgent: VecDeque::new(),
            feedback_copy: None,
            nacked_window: None,
            last_w: 1,
            lag_history: 0,
            caught_up_run: 0,
            tell_caught_up: false,
            acker: None,
            acker_owes: None,
            ack_recheck: false,
            last_ack_sent: None,
            deferred_run: 0,
            neighbours: Vec::new(),
            behind: false,
            signatures: LossSignatures::default(),
            assigned: None,
            stall_held: [false; 2],
            events: VecDeque::new(),
            stats: ReceiverStats::default(),
            security: cfg.security.clone().map(|config| {
                Box::new(ReceiverSecurity {
                    config,
                    rng: crate::secure::crypto_rng(cfg.seed, cfg.crypto_seed),
                    pending: None,
                    keys: None,
                })
            }),
            send_clear: false,
            ignored: None,
            leaving: None,
            cfg,
        }
    }

    /// Whether the sender confirmed our registration.
    pub fn is_registered(&self) -> bool {
        self.registered
    }

    /// Whether this receiver joins only protected sessions (spec §19.7).
    pub fn is_protected(&self) -> bool {
        self.security.is_some()
    }

    /// The last session heard but not joined, and why (spec §19.7): a
    /// receiver that waits in vain can say what it heard.
    pub fn ignored(&self) -> Option<(u32, Ignored)> {
        self.ignored
    }

    /// Our client id in REGISTER and feedback.
    pub fn client_id(&self) -> u32 {
        self.client
    }

    /// The session joined (or configured), once there is one.
    pub fn session_id(&self) -> Option<u32> {
        self.session
    }

    /// The counters so far.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// The session joined (or heard), once an ANNOUNCE came.
    pub fn announcement(&self) -> Option<&Announcement> {
        self.info.as_ref()
    }

    /// The sender's unicast address, once heard.
    pub fn sender(&self) -> Option<SocketAddr> {
        self.sender
    }

    /// Packets held, and the total once known.
    pub fn progress(&self) -> (u64, Option<u32>) {
        (self.have.ones(), self.total)
    }

    /// Every packet is held and the whole file's size and hash are known
    /// (a stream's come with the ANNOUNCE after its end, spec §16.6).
    pub fn is_complete(&self) -> bool {
        let described = self.info.as_ref().is_some_and(|i| i.size.is_some() && i.hash.is_some());
        described && self.total.is_some_and(|t| self.have.ones() >= u64::from(t))
    }

    /// Whether our part is over (confirmed, ended or the sender lost): nothing more will be sent.
    pub fn is_finished(&self) -> bool {
        self.confirmed || self.ended
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<ReceiverEvent> {
        self.events.pop_front()
    }

    /// The application checked the whole file: report it (spec §16.1 step 4).
    pub fn finish(&mut self, verified: bool) {
        if self.verdict.is_none() {
            self.verdict = Some(verified);
            self.urgent.push_back(Urgent::Status);
        }
    }

    /// Leaves the session at once with `code` (spec §16.7), e.g.
    /// [`ErrorCode::INTERRUPTED`] when the process is interrupted: a
    /// STATUS with ERR and that code goes to the sender `LEAVE_COPIES`
    /// times (with the next `poll_transmit` calls), so that it stops
    /// awaiting this receiver and reports why. The receiver is finished at
    /// once and takes nothing more.
    pub fn abort(&mut self, _now: Instant, code: ErrorCode) {
        if self.is_finished() {
            return;
        }
        self.ended = true;
        // Only a registration has anything to end (a protected one can
        // seal only once it has the group key).
        if self.registered {
            self.leaving = Some((code, LEAVE_COPIES));
        }
    }

    /// Takes a datagram; a sealed one is opened in place, so the returned
    /// payload range is into `data` as it is afterwards.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) -> Option<Delivery> {
        if data.first().is_none_or(|b| b & 0x0f != PacketType::McSealed as u8) {
            return self.on_packet(now, from, data, 0, None);
        }
        self.on_sealed(now, from, data)
    }

    /// A packet, plain or opened from `source`; `at` is where `data`
    /// starts in the caller's datagram.
    fn on_packet(
        &mut self,
        now: Instant,
        from: SocketAddr,
        data: &[u8],
        at: usize,
        source: Option<u32>,
    ) -> Option<Delivery> {
        let parsed = if source.is_some() { McPacket::parse_opened(data) } else { McPacket::parse(data) };
        let p = match parsed {
            Ok(p) => p,
            Err(_) => {
                self.stats.dropped_malformed += 1;
                return None;
            }
        };
        let session = match &p {
            McPacket::Announce { session, .. }
            | McPacket::Invite { session, .. }
            | McPacket::RegisterKeys { session, .. }
            | McPacket::RegisterAck { session, .. }
            | McPacket::GroupAssignment { session, .. }
            | McPacket::Data { session, .. }
            | McPacket::Ack { session, .. }
            | McPacket::Nack { session, .. }
            | McPacket::Status { session, .. }
            | McPacket::End { session, .. }
            | McPacket::Parity { session, .. } => *session,
            _ => return None,
        };
        if self.ended || self.session.is_some_and(|s| s != session) {
            self.stats.dropped_other_session += 1;
            return None;
        }
        if !self.takes(&p, session, source) {
            return None;
        }
        if let McPacket::Invite { pattern, key, .. } = p {
            self.on_invite(now, from, session, pattern, key);
            return None;
        }
        if let McPacket::RegisterKeys { client, noise, .. } = p {
            if client == self.client {
                self.on_register_keys(now, session, noise);
            }
            return None;
        }
        let from_sender = matches!(
            p,
            McPacket::Announce { .. }
                | McPacket::RegisterAck { .. }
                | McPacket::GroupAssignment { .. }
                | McPacket::Data { .. }
                | McPacket::Status { .. }
                | McPacket::End { .. }
                | McPacket::Parity { .. }
        );
        if from_sender {
            if self.session.is_none() {
                match p {
                    McPacket::Announce { .. } => {}
                    // The refusal of a protected registration under way.
                    McPacket::End { .. } if self.target().is_some_and(|t| t.0 == session) => {}
                    McPacket::Data { .. } => {
                        // A session under way: register now; REGISTER+ACK
                        // describes it (spec §16.6). Data before that is
                        // repaired later.
                        self.session = Some(session);
                        self.sender = Some(from);
                        self.request_registration(now);
                        return None;
                    }
                    _ => return None,
                }
            }
            // A protected receiver hears the sender only in sealed packets
            // (source 0): a clear one proves nothing (spec §19.7).
            if source.is_some() || self.security.is_none() {
                self.heard_sender(now);
            }
        }
        if let McPacket::GroupAssignment { client, epoch, group, .. } = p {
            // spec §16.12: REGISTER+ACK with KLV assigns a group.
            if client == self.client {
                self.on_group(epoch, group);
            }
            return None;
        }
        self.on_session_packet(now, from, p, at + data.len())
    }

    /// A packet of our session, taken; `end` is where its payload ends in
    /// the caller's datagram.
    fn on_session_packet(&mut self, now: Instant, from: SocketAddr, p: McPacket<'_>, end: usize) -> Option<Delivery> {
        match p {
            McPacket::Announce { session, total, phase, info, .. } => {
                self.on_announce(now, from, session, total, phase, info);
                None
            }
            McPacket::RegisterAck { client, from_sn, info, .. } if client == self.client => {
                self.on_registered(now, from_sn, info);
                None
            }
            McPacket::Data { sn, lwsn, window, last, repair, payload, .. } => {
                if !repair {
                    self.last_w = window.max(1);
                }
                self.on_data(now, sn, lwsn, last, repair, end - payload.len()..end)
            }
            McPacket::Ack { network, lwsn, missing, client, behind, .. } => {
                if network == self.feedback_network() {
                    self.on_heard_ack(now, client, behind, lwsn, missing.iter());
                }
                None
            }
            McPacket::Nack { network, missing, .. } => {
                if network == self.feedback_network() {
                    self.on_heard_nack(missing.iter());
                }
                None
            }
            McPacket::Status { client, confirm: true, .. } if client == self.client => {
                if self.verdict.is_some() && !self.confirmed {
                    self.confirmed = true;
                    self.events.push_back(ReceiverEvent::Confirmed);
                }
                None
            }
            McPacket::End { client, error, .. } if client == 0 || client == self.client => {
                if self.confirmed {
                    return None;
                }
                if error.is_none() && self.verdict.is_some() {
                    // A clean end after our report: the confirmation was
                    // lost, and the sender only ends once every report is in.
                    self.confirmed = true;
                    self.events.push_back(ReceiverEvent::Confirmed);
                } else {
                    self.ended = true;
                    self.events.push_back(ReceiverEvent::Ended { error });
                }
                None
            }
            McPacket::Parity { block, index, k, shard, .. } => {
                self.on_parity(block, index, k, shard);
                None
            }
            _ => None,
        }
    }

    fn on_registered(&mut self, now: Instant, from_sn: u32, info: Option<Announcement>) {
        if let (None, Some(info)) = (&self.info, info) {
            self.learn(info, None);
        }
        if !self.registered {
            self.registered = true;
            self.timers.cancel(ReceiverTimer::Register);
            self.timers.set(ReceiverTimer::Status, now + self.cfg.status_interval);
            self.events.push_back(ReceiverEvent::Registered { from_sn });
        }
    }

    fn on_announce(
        &mut self,
        now: Instant,
        from: SocketAddr,
        session: u32,
        total: Option<u32>,
        phase: Phase,
        info: Announcement,
    ) {
        if self.session.is_none() {
            self.session = Some(session);
        }
        self.sender = Some(from);
        self.learn(info, total);
        self.request_registration(now);
        if phase == Phase::Repair && self.phase == Phase::Data {
            // Spread the first requests over a feedback interval.
            let at = now + self.backoff();
            self.timers.set(ReceiverTimer::Repair, at);
        }
        self.phase = phase;
        self.check_complete();
    }

    /// Takes in the session description (spec §16.2).
    fn learn(&mut self, info: Announcement, total: Option<u32>) {
        let news = self.info.as_ref().is_none_or(|i| i.size != info.size || i.hash != info.hash);
        if let Some(t) = total.or(info.size.map(|s| packets_for(s, info.block))) {
            self.total = Some(t);
        }
        if news {
            self.events.push_back(ReceiverEvent::Announced(info.clone()));
        }
        self.info = Some(info);
    }

    fn request_registration(&mut self, now: Instant) {
        if !self.registered && !self.timers.is_set(ReceiverTimer::Register) {
            self.timers.set(ReceiverTimer::Register, now);
            self.urgent.push_back(Urgent::Register);
        }
    }

    fn on_data(
        &mut self,
        now: Instant,
        sn: u32,
        lwsn: u32,
        last: bool,
        repair: bool,
        payload: Range<usize>,
    ) -> Option<Delivery> {
        let block = self.info.as_ref()?.block;
        let fresh = match self.have.set(sn) {
            None => {
                self.stats.dropped_beyond_limit += 1;
                return None;
            }
            Some(f) => f,
        };
        // Below `max_packets` now, so `sn + 1` cannot overflow (a FIN on SN
        // 2^32 − 1 did, before the check: found by CI's fuzz smoke).
        if last {
            self.total = Some(sn + 1);
        }
        if repair {
            self.stats.repairs_received += 1;
        } else {
            self.stats.data_packets += 1;
        }
        if !fresh {
            self.stats.duplicates += 1;
        }
        if !repair {
            // spec §16.12: the losses of the first sending, for the signature.
            let expected = self.gaps.latest_sn().map(|h| h.saturating_add(1));
            self.signatures.advance(sn);
            if let Some(e) = expected.filter(|&e| sn > e) {
                self.signatures.on_lost(e..sn);
            }
            let previous = self.gaps.latest_lwsn();
            let seen = self.gaps.on_first_send(now, sn, lwsn);
            if fresh {
                self.note_reordering(seen);
            }
            let early_gap = seen.early_gap;
            // spec §16.3: the first packet of a later window says the last
            // one ended, though its own last packet was lost (a tail drop,
            // often): ACK it now, as its LWSN would have.
            if let Some(prev) = previous.filter(|&p| lwsn > p && !self.have.get(p)) {
                self.schedule_ack(now, prev);
            }
            self.schedule_feedback(now, sn, lwsn, early_gap);
        }
        if let Some(k) = self.fec_k() {
            self.check_decodable(sn / u32::from(k));
        }
        self.check_complete();
        fresh.then(|| Delivery { offset: u64::from(sn) * u64::from(block), payload })
    }

    fn check_complete(&mut self) {
        if !self.complete_told && self.is_complete() {
            self.complete_told = true;
            self.timers.cancel(ReceiverTimer::Repair);
            self.events.push_back(ReceiverEvent::Complete);
        }
    }

    /// The next deadline to call [`McastReceiver::handle_timeout`] at.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.is_finished() {
            return None;
        }
        // Nothing can be sent without a target: a due send timer would
        // only make the driver spin (found by fuzzing).
        let can_send = self.target().is_some();
        self.timers.next_of(|t| match t {
            ReceiverTimer::SenderLost => self.registered,
            _ => can_send,
        })
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for &t in ReceiverTimer::ALL {
            if !self.is_finished() && self.timers.expired(t, now) {
                self.on_timer(t);
            }
        }
    }

    /// Timer `t` expired.
    fn on_timer(&mut self, t: ReceiverTimer) {
        match t {
            ReceiverTimer::SenderLost => {
                if self.registered {
                    self.ended = true;
                    self.events.push_back(ReceiverEvent::SenderLost);
                }
            }
            // What they time is sent by `poll_transmit`.
            ReceiverTimer::Register
            | ReceiverTimer::Ack
            | ReceiverTimer::Nack
            | ReceiverTimer::Repair
            | ReceiverTimer::Status => {}
        }
    }

    /// A packet from the sender arrived: it is alive for `sender_timeout` more.
    fn heard_sender(&mut self, now: Instant) {
        self.timers.set(ReceiverTimer::SenderLost, now + self.cfg.sender_timeout);
    }

    /// Writes the next datagram to send into `buf`, if any.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<McTransmit> {
        if self.security.is_none() {
            return self.poll_plain(now, buf);
        }
        // spec §19.7: every packet is sealed but REGISTER.
        self.send_clear = false;
        let room = buf.len().checked_sub(SEAL_OVERHEAD)?;
        let t = self.poll_plain(now, &mut buf[..room])?;
        if std::mem::take(&mut self.send_clear) {
            return Some(t);
        }
        let keys = self.security.as_mut().and_then(|s| s.keys.as_mut())?;
        Some(McTransmit { size: keys.seal(buf, t.size), ..t })
    }

    fn poll_plain(&mut self, now: Instant, buf: &mut [u8]) -> Option<McTransmit> {
        if let Some((code, left)) = self.leaving {
            self.leaving = left.checked_sub(1).filter(|&n| n > 0).map(|n| (code, n));
            return self.send_leave(buf, code);
        }
        if self.is_finished() {
            return None;
        }
        let (session, sender) = self.target()?;
        // Nothing larger than the session's own DATA packets: a REPAIR
        // naming thousands of gaps sends the first that fit (spec §16.5).
        // Never below 576 bytes, whatever block a sender announces (a 1-byte
        // block left no room for a STATUS's error code: found by fuzzing).
        let limit = self.info.as_ref().map_or(1452, |i| usize::from(i.block) + crate::wire::HEADER_LEN).max(576);
        let cap = limit.min(buf.len());
        let buf = &mut buf[..cap];
        if let Some(copy) = self.feedback_copy.take() {
            buf[..copy.len()].copy_from_slice(&copy);
            return Some(McTransmit { destination: sender, size: copy.len() });
        }
        if let Some(u) = self.urgent.pop_front() {
            return match u {
                Urgent::Register => self.send_register(now, buf, session, sender),
                Urgent::Status => self.send_status(now, buf, session, sender),
            };
        }
        self.hold_after_stall(now);
        // The first send timer due, in `ReceiverTimer::ALL`'s order.
        let due =
            ReceiverTimer::ALL.iter().find(|&&t| t != ReceiverTimer::SenderLost && self.timers.expired(t, now))?;
        match due {
            ReceiverTimer::Register => self.send_register(now, buf, session, sender),
            ReceiverTimer::Ack => self.send_ack(now, buf, session, sender),
            ReceiverTimer::Nack => self.send_nack(now, buf, session, sender),
            ReceiverTimer::Repair => self.send_repair(now, buf, session, sender),
            ReceiverTimer::Status => self.send_status(now, buf, session, sender),
            ReceiverTimer::SenderLost => None,
        }
    }

    fn send_register(&mut self, now: Instant, buf: &mut [u8], session: u32, sender: SocketAddr) -> Option<McTransmit> {
        if self.registered {
            self.timers.cancel(ReceiverTimer::Register);
            return None;
        }
        self.timers.set(ReceiverTimer::Register, now + self.cfg.register_retry);
        let (network, client) = (self.cfg.network, self.client);
        // spec §16.12: KLV: no operator network id, the sender may regroup it.
        let regroupable = if self.cfg.auto_group { Flags::KLV } else { Flags::empty() };
        let n = match self.security.as_ref() {
            None => emit(buf, PacketType::McRegister, regroupable, session, 0, network, client, |_| 0)?,
            Some(sec) => {
                // Noise message 1, the same until answered (spec §19.7).
                let m1 = &sec.pending.as_ref()?.m1;
                let n =
                    emit(buf, PacketType::McRegister, Flags::CKE | regroupable, session, 0, network, client, |o| {
                        emit_bytes(o, m1)
                    })?;
                self.send_clear = true;
                n
            }
        };
        Some(McTransmit { destination: sender, size: n })
    }
}
