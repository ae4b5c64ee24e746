//! The multicast receiver (spec §16): register, store, report gaps and
//! windows with suppressed feedback, ask for repairs, report completion.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use rand_chacha::{ChaCha20Rng, ChaCha8Rng};

use super::bitmap::Bitmap;
use super::fec;
use super::secure::{identity, Grant, GroupKeys, Ignored, Pattern, Unseal, MAX_SOURCES, SEAL_OVERHEAD};
use super::sender::packets_for;
use super::{uniform, McTransmit};
use crate::secure::{Handshake, SecurityConfig, KEY_LEN};
use crate::timer::{TimerKind, Timers};
use crate::wire::mcast::{emit, emit_bytes, emit_code, emit_ranges, parse_announcement, Announcement, McPacket, Phase};
use crate::wire::{ErrorCode, Flags, Header, PacketType};

/// Most gap ranges a receiver keeps for its next NACK; beyond it the
/// oldest merge (the report is a flow-control signal, the bitmap is truth).
const MAX_PENDING_RANGES: usize = 64;
/// A numbered shard: (index, bytes).
type Shard = (u16, Vec<u8>);

/// Most parity bytes a receiver holds for blocks it cannot rebuild yet.
const MAX_PARITY_BYTES: usize = 16 << 20;

#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Seeds the client id and the feedback delays.
    pub seed: u64,
    /// The network id (spec §16.4): receivers with the same id suppress
    /// each other's feedback. [`super::network_of`] derives one from an
    /// address.
    pub network: u32,
    /// Accept only this session, if set.
    pub session: Option<u32>,
    pub register_retry: Duration,
    pub status_interval: Duration,
    /// Largest file in packets (spec §16.8).
    pub max_packets: u32,
    /// Give up when nothing comes from the sender for this long after
    /// registering.
    pub sender_timeout: Duration,
    /// Join only protected sessions (spec §19.7), with these keys.
    pub security: Option<SecurityConfig>,
    /// The handshake's randomness (spec §19.1); all zeros derives it from `seed`.
    pub crypto_seed: [u8; 32],
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        ReceiverConfig {
            seed: 0,
            network: 0,
            session: None,
            register_retry: Duration::from_millis(200),
            status_interval: Duration::from_secs(1),
            max_packets: 1 << 26,
            sender_timeout: Duration::from_secs(30),
            security: None,
            crypto_seed: [0; 32],
        }
    }
}

/// Where a DATA packet's new bytes go: `payload` is the range of the
/// datagram passed to `handle_datagram` to write at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub offset: u64,
    pub payload: Range<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverEvent {
    /// A session was heard (first ANNOUNCE, or its size and hash became known).
    Announced(Announcement),
    Registered {
        from_sn: u32,
    },
    /// Every packet is held: verify the file, then call `finish`.
    Complete,
    /// The sender confirmed our report (or ended the session cleanly after
    /// it, the confirmation having been lost): done.
    Confirmed,
    /// The session ended (for everyone, or for us with an error code).
    Ended {
        error: Option<ErrorCode>,
    },
    /// Nothing from the sender for `sender_timeout`.
    SenderLost,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    pub data_packets: u64,
    pub duplicates: u64,
    pub repairs_received: u64,
    pub acks_sent: u64,
    pub acks_suppressed: u64,
    pub nacks_sent: u64,
    pub nacks_suppressed: u64,
    pub repair_requests: u64,
    pub status_sent: u64,
    pub dropped_malformed: u64,
    pub dropped_other_session: u64,
    pub dropped_beyond_limit: u64,
    pub parity_received: u64,
    /// Packets rebuilt from parity.
    pub fec_recovered: u64,
    /// Protected sessions (spec §19.7): plain packets a protected receiver
    /// does not take; sealed packets it has no key for (yet); sealed
    /// packets that failed authentication or came from the wrong source;
    /// replays.
    pub dropped_unprotected: u64,
    pub dropped_no_key: u64,
    pub dropped_unauthenticated: u64,
    pub dropped_replayed: u64,
}

/// What an invitation offered: session, pattern, the sender's key.
type Invitation = (u32, Pattern, [u8; KEY_LEN]);

/// A registration under way in a protected session (spec §19.7).
struct Pending {
    handshake: Handshake,
    /// What it runs with, and where the invitation came from (neither is
    /// authenticated yet: the session is bound only once the grant opens).
    invitation: Invitation,
    from: SocketAddr,
    /// Its message 1, sent again until answered.
    m1: Vec<u8>,
    /// When it began: another invitation replaces it only after
    /// `PENDING_MIN_LIFE` register retries, so that forged invitations
    /// cannot keep a receiver from registering (or burn its CPU).
    since: Instant,
}

/// Register retries a pending registration lives before another
/// invitation may replace it.
const PENDING_MIN_LIFE: u32 = 3;

/// A protected receiver's keys (spec §19.7).
struct ReceiverSecurity {
    config: SecurityConfig,
    rng: ChaCha20Rng,
    pending: Option<Pending>,
    keys: Option<GroupKeys>,
}

impl std::fmt::Debug for ReceiverSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceiverSecurity").field("keys", &self.keys).finish()
    }
}

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
    /// Next SN expected in order; gaps below it are known.
    expected: Option<u32>,
    /// Gaps seen and not yet reported, ascending.
    pending: Vec<Range<u32>>,
    /// The window the pending ACK (`ReceiverTimer::Ack`) confirms.
    ack_lwsn: u32,
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
    /// The LWSN of the newest DATA seen, and of the window last NACKed.
    latest_lwsn: Option<u32>,
    /// The first SN of the window `latest_lwsn` ends (the one after the
    /// previous window's LWSN).
    window_first: u32,
    nacked_window: Option<u32>,
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
    type Slots = [Option<Instant>; 6];
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
    pub fn new(cfg: ReceiverConfig, group: SocketAddr) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let client = rng.next_u32().max(1);
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
            expected: None,
            pending: Vec::new(),
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
            latest_lwsn: None,
            window_first: 0,
            nacked_window: None,
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

    pub fn client_id(&self) -> u32 {
        self.client
    }

    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    pub fn announcement(&self) -> Option<&Announcement> {
        self.info.as_ref()
    }

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

    pub fn is_finished(&self) -> bool {
        self.confirmed || self.ended
    }

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

    // ---- input ------------------------------------------------------------

    /// Takes a datagram; a sealed one is opened in place, so the returned
    /// payload range is into `data` as it is afterwards.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) -> Option<Delivery> {
        if data.first().is_none_or(|b| b & 0x0f != PacketType::McSealed as u8) {
            return self.on_packet(now, from, data, 0, None);
        }
        let keys = self.security.as_mut().and_then(|s| s.keys.as_mut());
        let (Some(keys), Ok(_)) = (keys, Header::parse(data)) else {
            self.stats.dropped_no_key += 1;
            return None;
        };
        match keys.open(data) {
            Ok((source, plain)) => {
                let at = plain.start;
                self.on_packet(now, from, &data[plain], at, Some(source))
            }
            Err(Unseal::Ours) => None,
            Err(Unseal::Replayed) => {
                self.stats.dropped_replayed += 1;
                None
            }
            Err(Unseal::Forged) => {
                self.stats.dropped_unauthenticated += 1;
                None
            }
            Err(Unseal::Malformed | Unseal::TooManySources) => {
                self.stats.dropped_malformed += 1;
                None
            }
        }
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
        match p {
            McPacket::Announce { session, total, phase, info, .. } => {
                self.on_announce(now, from, session, total, phase, info);
                None
            }
            McPacket::RegisterAck { client, from_sn, info, .. } if client == self.client => {
                self.on_registered(now, from_sn, info);
                None
            }
            McPacket::Data { sn, lwsn, last, repair, payload, .. } => {
                let start = at + data.len() - payload.len();
                self.on_data(now, sn, lwsn, last, repair, start..at + data.len())
            }
            McPacket::Ack { network, lwsn, missing, .. } => {
                if network == self.cfg.network {
                    if self.timers.is_set(ReceiverTimer::Ack) && self.ack_lwsn == lwsn {
                        self.timers.cancel(ReceiverTimer::Ack);
                        self.stats.acks_suppressed += 1;
                    }
                    self.forget_reported(missing.iter());
                }
                None
            }
            McPacket::Nack { network, missing, .. } => {
                if network == self.cfg.network {
                    self.forget_reported(missing.iter());
                    // One NACK per window per network (spec §16.4): what
                    // this receiver still misses rides on an ACK, or on the
                    // network's NACK of a later window.
                    if self.timers.take(ReceiverTimer::Nack).is_some() {
                        self.stats.nacks_suppressed += 1;
                    }
                    self.nacked_window = self.latest_lwsn;
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

    /// spec §19.7: whether a packet may be taken. A protected receiver
    /// takes in the clear only the key exchange (and, before it has keys, a
    /// refusal), the sender's packets only from source 0 and feedback only
    /// from a receiver's; a plain one notes protected sessions it hears.
    fn takes(&mut self, p: &McPacket<'_>, session: u32, source: Option<u32>) -> bool {
        let protected = self.security.is_some();
        let ok = match (source, p) {
            (None, McPacket::Invite { .. }) if !protected => {
                self.ignored = Some((session, Ignored::ProtectedSession));
                false
            }
            (None, _) if !protected => true,
            // The key exchange, until it is done.
            (None, McPacket::Invite { .. } | McPacket::RegisterKeys { .. }) if !self.registered => true,
            (None, McPacket::End { error: Some(_), client, .. }) => !self.registered && *client == self.client,
            (None, other) => {
                if matches!(other, McPacket::Announce { .. }) && !self.registered {
                    self.ignored = Some((session, Ignored::PlainSession));
                }
                self.stats.dropped_unprotected += 1;
                return false;
            }
            (Some(s), McPacket::Ack { .. } | McPacket::Nack { .. }) => s != 0,
            (Some(s), _) => s == 0,
        };
        if !ok && source.is_some() {
            self.stats.dropped_unauthenticated += 1;
        }
        ok
    }

    /// A protected session's invitation (spec §19.7): start the
    /// registration's handshake, unless we cannot or are registered. The
    /// invitation is not authenticated: it binds nothing until the grant
    /// opens, and replaces a pending registration only once that has had
    /// its chance.
    fn on_invite(&mut self, now: Instant, from: SocketAddr, session: u32, pattern: Pattern, key: [u8; KEY_LEN]) {
        let Some(sec) = self.security.as_mut() else { return };
        if self.registered {
            return;
        }
        if let Some(why) = pattern.refusal(&sec.config, &key) {
            self.ignored = Some((session, why));
            return;
        }
        let invitation = (session, pattern, key);
        let young = now < sec.pending.as_ref().map_or(now, |p| p.since + self.cfg.register_retry * PENDING_MIN_LIFE);
        if sec.pending.as_ref().is_some_and(|p| p.invitation == invitation) || young {
            return;
        }
        let mut seed = [0u8; 32];
        sec.rng.fill_bytes(&mut seed);
        let mut handshake = pattern.handshake(&sec.config, session, &key, true, seed);
        let Ok(m1) = handshake.write_with(&identity(self.client, self.cfg.network)) else { return };
        sec.pending = Some(Pending { handshake, invitation, from, m1, since: now });
        self.timers.cancel(ReceiverTimer::Register);
        self.request_registration(now);
    }

    /// REGISTER+ACK of a protected session: Noise message 2, whose payload
    /// grants the group key, our source number and the session description.
    fn on_register_keys(&mut self, now: Instant, session: u32, noise: &[u8]) {
        if self.registered {
            return;
        }
        let Some(sec) = self.security.as_mut() else { return };
        let Some(p) = sec.pending.as_mut().filter(|p| p.invitation.0 == session) else { return };
        // A forgery fails and leaves the handshake as it was (snow restores
        // its state), so the real answer still opens.
        let Some(grant) = p.handshake.read_with(noise).ok().and_then(|p| Grant::decode(&p)) else {
            self.stats.dropped_unauthenticated += 1;
            return;
        };
        let mut keys = GroupKeys::new(&grant.key, grant.source, MAX_SOURCES);
        // The sender's packets sealed before the grant are old news: a
        // replay of them is refused from the start.
        keys.start_source(0, grant.pn);
        sec.keys = Some(keys);
        let from = p.from;
        sec.pending = None;
        // Only now is the session bound (spec §19.7).
        self.session = Some(session);
        self.sender = Some(from);
        self.heard_sender(now);
        self.on_registered(now, grant.from_sn, parse_announcement(&grant.info).ok());
    }

    /// The session and sender packets go to: the registered (or plain)
    /// one, else a protected registration's pending invitation.
    fn target(&self) -> Option<(u32, SocketAddr)> {
        if let (Some(session), Some(sender)) = (self.session, self.sender) {
            return Some((session, sender));
        }
        let p = self.security.as_ref()?.pending.as_ref()?;
        Some((p.invitation.0, p.from))
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
            if let Some(l) = self.latest_lwsn.filter(|&l| lwsn > l) {
                self.window_first = l + 1;
            }
            // spec §16.4: gaps in the first sending are reported, with a delay.
            match self.expected {
                Some(e) if sn > e => {
                    add_range(&mut self.pending, e..sn);
                    // One NACK per window at most, and only for a gap in
                    // the window's first half: later gaps ride on its ACK,
                    // which is about to come (spec §16.4).
                    let size = lwsn.wrapping_add(1).wrapping_sub(self.window_first);
                    let early = lwsn.wrapping_sub(sn).saturating_mul(2) >= size;
                    if early && !self.timers.is_set(ReceiverTimer::Nack) && self.nacked_window != Some(lwsn) {
                        let at = now + self.backoff();
                        self.timers.set(ReceiverTimer::Nack, at);
                    }
                    self.expected = Some(sn + 1);
                }
                Some(e) if sn < e => remove_range(&mut self.pending, sn..sn + 1),
                _ => self.expected = Some(sn + 1),
            }
            if self.pending.is_empty() {
                self.timers.cancel(ReceiverTimer::Nack);
            }
            self.latest_lwsn = Some(lwsn);
            if sn == lwsn {
                self.ack_lwsn = lwsn;
                let at = now + self.backoff();
                self.timers.set(ReceiverTimer::Ack, at);
            }
        }
        if let Some(k) = self.fec_k() {
            self.check_decodable(sn / u32::from(k));
        }
        self.check_complete();
        fresh.then(|| Delivery { offset: u64::from(sn) * u64::from(block), payload })
    }

    fn fec_k(&self) -> Option<u16> {
        self.info.as_ref().map(|i| i.fec_k).filter(|&k| k > 0)
    }

    fn on_parity(&mut self, block: u32, index: u16, k: u16, shard: &[u8]) {
        self.stats.parity_received += 1;
        let Some(fec_k) = self.fec_k() else { return };
        let Some(info) = self.info.as_ref() else { return };
        if k > fec_k || shard.len() != usize::from(info.block) || index > fec::MAX_PARITY {
            self.stats.dropped_malformed += 1;
            return;
        }
        let start = block.saturating_mul(u32::from(fec_k));
        if self.have.count_clear_upto(start..start.saturating_add(u32::from(k))) == 0 {
            return; // nothing missing there
        }
        let entry = self.parity.entry(block).or_insert_with(|| (k, Vec::new()));
        if entry.0 != k
            || entry.1.iter().any(|(i, _)| *i == index)
            || self.parity_bytes + shard.len() > MAX_PARITY_BYTES
        {
            return;
        }
        entry.1.push((index, shard.to_vec()));
        self.parity_bytes += shard.len();
        self.check_decodable(block);
    }

    fn check_decodable(&mut self, block: u32) {
        let (Some(fec_k), Some((k, shards))) = (self.fec_k(), self.parity.get(&block)) else { return };
        let start = block.saturating_mul(u32::from(fec_k));
        let range = start..start.saturating_add(u32::from(*k));
        let missing = self.have.count_clear_upto(range.clone());
        if missing == 0 {
            let freed: usize = shards.iter().map(|s| s.1.len()).sum();
            self.parity_bytes -= freed;
            self.parity.remove(&block);
            self.decodable.remove(&block);
        } else if shards.len() as u64 >= missing {
            self.decodable.insert(block);
        }
    }

    /// Rebuilds the packets of every block that now has enough shards
    /// (spec §16.9). `read(offset, out)` must fill `out` with the stored
    /// bytes at `offset` (what earlier deliveries wrote). Returns what to
    /// write: (offset, bytes).
    pub fn decode(&mut self, read: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        let (Some(fec_k), Some(info)) = (self.fec_k(), self.info.clone()) else { return out };
        while let Some(block) = self.decodable.pop_first() {
            let Some((k, shards)) = self.parity.remove(&block) else { continue };
            self.parity_bytes -= shards.iter().map(|s| s.1.len()).sum::<usize>();
            let shard = usize::from(info.block);
            let start = block * u32::from(fec_k);
            let present: Vec<(u16, Vec<u8>)> = (0..k)
                .filter(|&i| self.have.get(start + u32::from(i)))
                .map(|i| {
                    let mut v = vec![0u8; shard];
                    let offset = u64::from(start + u32::from(i)) * shard as u64;
                    let len = info.size.map_or(shard as u64, |s| s.saturating_sub(offset).min(shard as u64));
                    read(offset, &mut v[..len as usize]);
                    (i, v)
                })
                .collect();
            let Some(rebuilt) = fec::decode(k, &present, &shards) else { continue };
            for (i, data) in rebuilt {
                let sn = start + u32::from(i);
                if self.have.set(sn) != Some(true) {
                    continue;
                }
                self.stats.fec_recovered += 1;
                let offset = u64::from(sn) * shard as u64;
                let len = info.size.map_or(shard as u64, |s| s.saturating_sub(offset).min(shard as u64));
                out.push((offset, data[..len as usize].to_vec()));
            }
        }
        self.check_complete();
        out
    }

    fn check_complete(&mut self) {
        if !self.complete_told && self.is_complete() {
            self.complete_told = true;
            self.timers.cancel(ReceiverTimer::Repair);
            self.events.push_back(ReceiverEvent::Complete);
        }
    }

    /// A feedback delay drawn uniformly in `[0, ARTP_max]` (spec §16.4).
    fn backoff(&mut self) -> Duration {
        let max = self.artp_max();
        uniform(&mut self.rng, max)
    }

    fn artp_max(&self) -> Duration {
        Duration::from_micros(self.info.as_ref().map_or(600, |i| u64::from(i.artp_max_us)))
    }

    fn repair_interval(&self) -> Duration {
        Duration::from_millis(self.info.as_ref().map_or(50, |i| u64::from(i.repair_interval_ms)).max(1))
    }

    // ---- timers -----------------------------------------------------------

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

    // ---- output -----------------------------------------------------------

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
        let (client, network) = (self.client, self.cfg.network);
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
        // The first send timer due, in `ReceiverTimer::ALL`'s order.
        let due =
            ReceiverTimer::ALL.iter().find(|&&t| t != ReceiverTimer::SenderLost && self.timers.expired(t, now))?;
        match due {
            ReceiverTimer::Register => self.send_register(now, buf, session, sender),
            ReceiverTimer::Ack => {
                self.timers.cancel(ReceiverTimer::Ack);
                self.stats.acks_sent += 1;
                // The ACK carries the gaps not yet reported: no NACK needed.
                let ranges = std::mem::take(&mut self.pending);
                self.timers.cancel(ReceiverTimer::Nack);
                let lwsn = self.ack_lwsn;
                let n = emit(buf, PacketType::McAck, Flags::empty(), session, lwsn, network, client, |o| {
                    emit_ranges(o, ranges.iter().cloned()).0
                })?;
                self.copy_to_remote_sender(sender, &buf[..n]);
                Some(McTransmit { destination: self.group, size: n })
            }
            ReceiverTimer::Nack => {
                self.timers.cancel(ReceiverTimer::Nack);
                self.nacked_window = self.latest_lwsn;
                self.stats.nacks_sent += 1;
                let ranges = std::mem::take(&mut self.pending);
                let highest = self.expected.unwrap_or(0).saturating_sub(1);
                let n = emit(buf, PacketType::McNack, Flags::empty(), session, highest, network, client, |o| {
                    emit_ranges(o, ranges.iter().cloned()).0
                })?;
                self.copy_to_remote_sender(sender, &buf[..n]);
                Some(McTransmit { destination: self.group, size: n })
            }
            ReceiverTimer::Repair => self.send_repair(now, buf, session, sender),
            ReceiverTimer::Status => self.send_status(now, buf, session, sender),
            ReceiverTimer::SenderLost => None,
        }
    }

    /// Gaps another receiver of this network reported (in its ACK or
    /// NACK) are known to the sender: not reported again.
    fn forget_reported(&mut self, ranges: impl Iterator<Item = Range<u32>>) {
        for r in ranges {
            remove_range(&mut self.pending, r);
        }
    }

    /// spec §16.4: feedback goes to the group, where this network's other
    /// receivers hear it; a sender on another network may not (multicast
    /// routing is often one way, sender to receivers), so it also gets a
    /// unicast copy, which it counts once.
    fn copy_to_remote_sender(&mut self, sender: SocketAddr, datagram: &[u8]) {
        if super::network_of(sender) != self.cfg.network {
            self.feedback_copy = Some(datagram.to_vec());
        }
    }

    fn send_register(&mut self, now: Instant, buf: &mut [u8], session: u32, sender: SocketAddr) -> Option<McTransmit> {
        if self.registered {
            self.timers.cancel(ReceiverTimer::Register);
            return None;
        }
        self.timers.set(ReceiverTimer::Register, now + self.cfg.register_retry);
        let (network, client) = (self.cfg.network, self.client);
        let n = match self.security.as_ref() {
            None => emit(buf, PacketType::McRegister, Flags::empty(), session, 0, network, client, |_| 0)?,
            Some(sec) => {
                // Noise message 1, the same until answered (spec §19.7).
                let m1 = &sec.pending.as_ref()?.m1;
                let n =
                    emit(buf, PacketType::McRegister, Flags::CKE, session, 0, network, client, |o| emit_bytes(o, m1))?;
                self.send_clear = true;
                n
            }
        };
        Some(McTransmit { destination: sender, size: n })
    }

    fn send_repair(&mut self, now: Instant, buf: &mut [u8], session: u32, sender: SocketAddr) -> Option<McTransmit> {
        let Some(total) = self.total else {
            // Nothing to ask for until the size is known; ask again later
            // (a due timer left as it was kept the driver spinning: found
            // by fuzzing).
            self.timers.set(ReceiverTimer::Repair, now + self.repair_interval());
            return None;
        };
        if self.have.ones() >= u64::from(total) {
            // Nothing missing (a stream's description may still be on its way).
            self.timers.cancel(ReceiverTimer::Repair);
            return None;
        }
        self.timers.set(ReceiverTimer::Repair, now + self.repair_interval());
        self.repair_round += 1;
        self.stats.repair_requests += 1;
        let have = &self.have;
        let n = emit(
            buf,
            PacketType::McRepair,
            Flags::empty(),
            session,
            self.repair_round,
            self.cfg.network,
            self.client,
            |o| emit_ranges(o, have.gaps(0..total)).0,
        )?;
        Some(McTransmit { destination: sender, size: n })
    }

    /// spec §16.7: the STATUS with which `abort` leaves, its code in ERR.
    fn send_leave(&mut self, buf: &mut [u8], code: ErrorCode) -> Option<McTransmit> {
        let (session, sender) = self.target()?;
        let held = self.have.ones().min(u64::from(u32::MAX)) as u32;
        self.stats.status_sent += 1;
        let n = emit(buf, PacketType::McStatus, Flags::ERR, session, held, self.cfg.network, self.client, |o| {
            emit_code(o, code)
        })?;
        Some(McTransmit { destination: sender, size: n })
    }

    fn send_status(&mut self, now: Instant, buf: &mut [u8], session: u32, sender: SocketAddr) -> Option<McTransmit> {
        self.timers.set(ReceiverTimer::Status, now + self.cfg.status_interval);
        self.stats.status_sent += 1;
        let held = self.have.ones().min(u64::from(u32::MAX)) as u32;
        let (flags, code) = match self.verdict {
            Some(true) => (Flags::FIN, None),
            Some(false) => (Flags::ERR, Some(ErrorCode::HASH_MISMATCH)),
            None => (Flags::empty(), None),
        };
        if self.verdict.is_some() {
            // Repeated until the sender confirms, at the register pace.
            self.timers.set(ReceiverTimer::Status, now + self.cfg.register_retry);
        }
        if code.is_some() && buf.len() < crate::wire::HEADER_LEN + 2 {
            return None;
        }
        let n = emit(buf, PacketType::McStatus, flags, session, held, self.cfg.network, self.client, |o| match code {
            Some(c) => emit_code(o, c),
            None => 0,
        })?;
        Some(McTransmit { destination: sender, size: n })
    }
}

/// Adds `r` to ascending disjoint `v`, merging; beyond the bound the two
/// lowest ranges merge.
fn add_range(v: &mut Vec<Range<u32>>, r: Range<u32>) {
    match v.last_mut() {
        Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
        _ => v.push(r),
    }
    if v.len() > MAX_PENDING_RANGES {
        let second = v.remove(1);
        v[0].end = second.end;
    }
}

/// Removes `r` from ascending disjoint `v`, in place: only the ranges that
/// overlap `r` are touched (at most one split adds an element).
fn remove_range(v: &mut Vec<Range<u32>>, r: Range<u32>) {
    if r.start >= r.end {
        return;
    }
    let first = v.partition_point(|x| x.end <= r.start);
    let last = v.partition_point(|x| x.start < r.end);
    if first >= last {
        return;
    }
    let left = (v[first].start < r.start).then(|| v[first].start..r.start);
    let right = (r.end < v[last - 1].end).then(|| r.end..v[last - 1].end);
    v.splice(first..last, left.into_iter().chain(right));
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn pending_ranges_merge_split_and_stay_bounded() {
        let mut v = Vec::new();
        add_range(&mut v, 3..5);
        add_range(&mut v, 5..7);
        add_range(&mut v, 9..12);
        assert_eq!(v, [3..7, 9..12]);
        remove_range(&mut v, 4..10);
        assert_eq!(v, [3..4, 10..12]);
        remove_range(&mut v, 11..12);
        remove_range(&mut v, 5..9);
        assert_eq!(v, [3..4, 10..11]);
        add_range(&mut v, 14..20);
        remove_range(&mut v, 16..17);
        assert_eq!(v, [3..4, 10..11, 14..16, 17..20]);
        remove_range(&mut v, 0..100);
        assert!(v.is_empty());
        for i in 0..100 {
            add_range(&mut v, 20 + 2 * i..21 + 2 * i);
        }
        assert_eq!(v.len(), MAX_PENDING_RANGES);
    }
}
