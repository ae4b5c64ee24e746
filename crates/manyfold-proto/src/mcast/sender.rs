//! The multicast sender (spec §16): announce, windows with paper 03's flow
//! control, repair, completion.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng};
use rand_chacha::{ChaCha20Rng, ChaCha8Rng};

use super::bitmap::Bitmap;
use super::fec;
use super::secure::{identity, Grant, GroupKeys, Pattern, Unseal, SEAL_OVERHEAD};
use super::McTransmit;
use crate::congestion::pacer::Pacer;
use crate::secure::{public_key, SecurityConfig, KEY_LEN};
use crate::timer::{TimerKind, Timers};
use crate::wire::mcast::{
    emit, emit_announcement, emit_bytes, emit_code, emit_invitation, Announcement, McPacket, Phase, UNKNOWN_TOTAL,
};
use crate::wire::{ErrorCode, Flags, Header, PacketType, HEADER_LEN};

/// The sender's parameters (spec §16.3–§16.8).
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// Seeds the session id.
    pub seed: u64,
    /// Largest datagram, header included; DATA carries `max_datagram − 24`.
    pub max_datagram: usize,
    pub announce_interval: Duration,
    /// Longest the data phase waits for `min_receivers`.
    pub announce_wait: Duration,
    /// Receivers to wait for before the data phase (at least 1).
    pub min_receivers: usize,
    /// The feedback backoff bound receivers use (`ARTP_max`), and its
    /// floor when adapted.
    pub artp_max: Duration,
    /// Raise `ARTP_max` (up to `artp_cap`) while windows draw more than 1.5
    /// ACKs per network, lower it back towards `artp_max` below 1.15
    /// (spec §16.4).
    pub adapt_artp: bool,
    pub artp_cap: Duration,
    /// Timer growth on expiry (α > 1).
    pub alpha: f64,
    /// Timer shrink on a confirmed window (β > α).
    pub beta: f64,
    /// The timer's floor, `dflt_Tout`.
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    pub initial_window: u32,
    pub max_window: u32,
    /// Double the window on each confirmed window until the first sign of
    /// congestion (a shrink or an expiry), then grow it by one as the
    /// paper does (spec §16.3). Off: the paper's growth from the start.
    pub slow_start: bool,
    /// Repair requests gathered this long before the repairs go out.
    pub repair_gather: Duration,
    /// Receivers asking for one packet in a round for it to go by multicast.
    pub repair_multicast_min: usize,
    pub completion_timeout: Duration,
    pub max_repair_passes: u32,
    pub receiver_timeout: Duration,
    /// Drop a receiver whose reported loss exceeds this fraction.
    pub max_loss: Option<f64>,
    pub max_receivers: usize,
    pub max_repair_queue: usize,
    pub max_packets: u32,
    /// Pace each window's packets at the rate of recently confirmed windows
    /// (the paper sends them back to back).
    pub pace: bool,
    /// Packets per FEC block (spec §16.9); 0 turns parity off.
    pub fec_k: u16,
    /// Parity shards multicast after each block in the data phase.
    pub fec_proactive: u16,
    /// 0: paper 03's rule, every NACK that names a new loss shrinks the
    /// window by one. Above 0: a window shrinks by one only when one
    /// receiver reported more losses while it was open than this fraction
    /// of it, so random loss on receivers' links does not throttle the
    /// session (timer expiries still do).
    pub loss_tolerance: f64,
    /// Protect the session (spec §19.7): a group key handed to each
    /// receiver in its registration's Noise handshake, every packet sealed.
    pub security: Option<SecurityConfig>,
    /// The group key's and the handshakes' randomness (spec §19.1): 256
    /// bits from the OS; all zeros derives it from `seed` (simulations).
    pub crypto_seed: [u8; 32],
    /// Most registration handshakes a protected sender runs per second
    /// (a burst of as many): each costs a few X25519 operations, and
    /// REGISTERs come unauthenticated (spec §19.7).
    pub max_handshakes_per_sec: u32,
}

impl Default for SenderConfig {
    fn default() -> Self {
        SenderConfig {
            seed: 0,
            max_datagram: 1452,
            announce_interval: Duration::from_millis(200),
            announce_wait: Duration::from_secs(3),
            min_receivers: 1,
            artp_max: Duration::from_micros(600),
            adapt_artp: true,
            artp_cap: Duration::from_millis(20),
            alpha: 1.5,
            beta: 2.0,
            default_timeout: Duration::from_millis(100),
            max_timeout: Duration::from_secs(2),
            initial_window: 1,
            max_window: 256,
            slow_start: true,
            repair_gather: Duration::from_millis(5),
            repair_multicast_min: 2,
            completion_timeout: Duration::from_secs(60),
            max_repair_passes: 100,
            receiver_timeout: Duration::from_secs(5),
            max_loss: None,
            max_receivers: 1024,
            max_repair_queue: 65_536,
            max_packets: 1 << 26,
            pace: false,
            fec_k: 32,
            fec_proactive: 0,
            loss_tolerance: 0.05,
            security: None,
            crypto_seed: [0; 32],
            max_handshakes_per_sec: 500,
        }
    }
}

/// How one receiver's part in the session ended (spec §16.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverOutcome {
    /// Still receiving.
    Active,
    /// Has the whole file and its hash matched.
    Completed,
    /// Has every packet but the hash did not match.
    HashMismatch,
    /// Still missing packets at the completion timeout.
    Incomplete,
    /// Nothing heard for `receiver_timeout`.
    Unresponsive,
    /// Asked for repairs more than `max_repair_passes` times.
    TooManyPasses,
    /// Reported loss above `max_loss`.
    TooLossy,
}

impl ReceiverOutcome {
    fn code(self) -> Option<ErrorCode> {
        match self {
            ReceiverOutcome::Active | ReceiverOutcome::Completed => None,
            ReceiverOutcome::HashMismatch => Some(ErrorCode::HASH_MISMATCH),
            ReceiverOutcome::Incomplete => Some(ErrorCode::INCOMPLETE),
            ReceiverOutcome::Unresponsive => Some(ErrorCode::UNRESPONSIVE),
            ReceiverOutcome::TooManyPasses => Some(ErrorCode::TOO_MANY_PASSES),
            ReceiverOutcome::TooLossy => Some(ErrorCode::TOO_LOSSY),
        }
    }
}

/// What the sender knows of one receiver.
#[derive(Debug, Clone)]
pub struct ReceiverReport {
    pub client: u32,
    pub addr: SocketAddr,
    pub network: u32,
    /// The SN it was told it receives from.
    pub joined_at: u32,
    /// Packets it last said it holds.
    pub held: u32,
    /// Losses it reported (NACK and ACK ranges).
    pub reported_lost: u64,
    pub repair_passes: u32,
    pub outcome: ReceiverOutcome,
    /// The code it left the session with, if it ended its part itself
    /// (its outcome is then `Incomplete`): `INTERRUPTED` when its process
    /// was interrupted (spec §16.7).
    pub left: Option<ErrorCode>,
    /// The static key it proved, in a protected session whose sender
    /// names its known peers (spec §19.7).
    pub peer_key: Option<[u8; KEY_LEN]>,
    /// Its source number under the group key (0: a plain session).
    source: u32,
    /// Its registration's Noise message 1 and our answer, sent again for
    /// a repeated REGISTER.
    registration: Option<Box<(Vec<u8>, Vec<u8>)>>,
    /// When that answer last went out.
    answered_at: Option<Instant>,
    last_heard: Instant,
    /// Losses reported since the last window resolved.
    window_lost: u64,
    /// The last ACK (true, LWSN) or NACK (false, digest) taken from it.
    last_feedback: Option<(bool, u32)>,
    /// Before this, a repair request only repeats the last pass.
    next_pass_at: Option<Instant>,
}

/// One window's fate, for traces and the model checks (spec §16.3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowRecord {
    pub first: u32,
    pub lwsn: u32,
    pub size: u32,
    /// Sent (last packet) at.
    pub sent: Instant,
    /// Confirmed by every awaited network, or expired.
    pub confirmed: bool,
    pub resolved: Instant,
    /// Timer in force for this window.
    pub timeout: Duration,
    /// ACK and NACK packets that arrived while it was open.
    pub feedback: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum SenderEvent {
    ReceiverJoined {
        client: u32,
        addr: SocketAddr,
        from_sn: u32,
    },
    /// The data phase began.
    DataStarted,
    Window(WindowRecord),
    /// Every packet has gone out once; repairs follow.
    RepairStarted,
    ReceiverDone {
        client: u32,
        outcome: ReceiverOutcome,
    },
    /// A receiver ended its part itself with `code` (its STATUS with ERR),
    /// e.g. `INTERRUPTED`: its outcome is `Incomplete`, `left` says why.
    ReceiverLeft {
        client: u32,
        addr: SocketAddr,
        code: ErrorCode,
    },
    /// The session is over; every receiver's outcome is in `receivers()`.
    Finished,
    /// The session ended without a transfer.
    Failed(SenderError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SenderError {
    #[error("no receiver registered within the announce wait")]
    NoReceivers,
    #[error("every receiver was dropped")]
    AllDropped,
    /// `McastSender::abort` ended the session with this code.
    #[error("aborted with error code {}{}", .0 .0, if *.0 == ErrorCode::INTERRUPTED { " (interrupted)" } else { "" })]
    Aborted(ErrorCode),
}

/// Counters (spec §16.4's feedback figures among them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    pub data_packets: u64,
    pub data_bytes: u64,
    pub repair_multicast: u64,
    pub repair_unicast: u64,
    /// Parity shards multicast (proactive and repair).
    pub parity_packets: u64,
    pub announces: u64,
    pub acks: u64,
    pub late_acks: u64,
    pub nacks: u64,
    pub repair_requests: u64,
    pub status_reports: u64,
    pub windows_confirmed: u64,
    pub windows_expired: u64,
    /// Last packets of a window sent again because no ACK came (a lost LWSN).
    pub probes: u64,
    pub dropped_malformed: u64,
    pub dropped_other_session: u64,
    pub dropped_unknown_client: u64,
    pub refused: u64,
    /// Protected sessions (spec §19.7): plain packets other than a
    /// registration; sealed packets that failed authentication (or came
    /// under another receiver's source); replays.
    pub dropped_unprotected: u64,
    pub dropped_unauthenticated: u64,
    pub dropped_replayed: u64,
    /// Registrations whose handshake failed (another PSK, an unknown key).
    pub auth_failures: u64,
    /// REGISTERs not answered: over `max_handshakes_per_sec`, a repeat
    /// sooner than `REANSWER_GAP`, or a second handshake for a registered
    /// client id (spec §19.7).
    pub registrations_ignored: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Announcing,
    Data,
    Repair,
    Ending { sent: u8 },
    Done,
}

#[derive(Debug)]
struct Window {
    first: u32,
    lwsn: u32,
    next: u32,
    started: Option<Instant>,
    /// Its last packet is due again (`SenderTimer::Probe` expired).
    probe_due: bool,
    /// Its last packet had to be sent again: a loss, taken as congestion.
    probed: bool,
    sent_at: Option<Instant>,
    awaited: Vec<u32>,
    acked: Vec<u32>,
    feedback: u32,
    timeout: Duration,
}

/// Control packets waiting to go out, to one receiver.
#[derive(Debug, Clone, Copy)]
enum Control {
    RegisterAck {
        idx: usize,
    },
    StatusAck {
        idx: usize,
    },
    EndOne {
        idx: usize,
        code: ErrorCode,
    },
    /// The whole session aborted with `code`, to the group.
    EndAll {
        code: ErrorCode,
    },
    /// In the clear: the receiver has no group key.
    Refuse {
        addr: SocketAddr,
        client: u32,
        code: ErrorCode,
    },
}

/// A protected session's keys (spec §19.7).
struct SenderSecurity {
    config: SecurityConfig,
    pattern: Pattern,
    /// Our static public key, announced (zeros under NNpsk0).
    public: [u8; KEY_LEN],
    rng: ChaCha20Rng,
    group_key: [u8; KEY_LEN],
    keys: GroupKeys,
    next_source: u32,
    /// Source numbers granted, and to which receiver.
    granted: HashMap<u32, usize>,
    /// Handshakes left in this second's budget, and when it refills.
    tokens: f64,
    refilled: Instant,
}

/// Everything that can wake the sender (spec §16.3–§16.8), in the order
/// `handle_timeout` takes their expiries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SenderTimer {
    /// The announce phase ends (`announce_wait`).
    AnnounceWait,
    /// The pacer lets the next packet go (spec §9.3).
    Pace,
    /// The open window's timer (spec §16.3): it expired unconfirmed.
    WindowEnd,
    /// Send the window's last packet again if no network acked yet.
    Probe,
    /// Gathered repair requests go out (spec §16.5).
    Gather,
    /// Look for receivers silent for `receiver_timeout`.
    Sweep,
    /// Receivers still missing packets are dropped (`completion_timeout`).
    Completion,
    /// The next ANNOUNCE.
    Announce,
    /// The next END of an ending session.
    End,
}

impl TimerKind for SenderTimer {
    type Slots = [Option<Instant>; 9];
    const ALL: &'static [SenderTimer] = &[
        SenderTimer::AnnounceWait,
        SenderTimer::Pace,
        SenderTimer::WindowEnd,
        SenderTimer::Probe,
        SenderTimer::Gather,
        SenderTimer::Sweep,
        SenderTimer::Completion,
        SenderTimer::Announce,
        SenderTimer::End,
    ];
    fn index(self) -> usize {
        self as usize
    }
}

impl SenderTimer {
    /// The timers of a sender created at `now`.
    fn initial(now: Instant, cfg: &SenderConfig) -> Timers<SenderTimer> {
        let mut t = Timers::default();
        t.set(SenderTimer::AnnounceWait, now + cfg.announce_wait);
        t.set(SenderTimer::Announce, now);
        t.set(SenderTimer::Sweep, now + SWEEP_INTERVAL);
        t.set(SenderTimer::End, now);
        t
    }
}

/// ENDs an aborted session sends to the group (spec §16.7).
const ABORT_ENDS: usize = 3;

/// How often silent receivers are looked for.
const SWEEP_INTERVAL: Duration = Duration::from_millis(500);

/// A repeated REGISTER is answered again at most this often.
const REANSWER_GAP: Duration = Duration::from_millis(100);

impl std::fmt::Debug for SenderSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SenderSecurity").field("pattern", &self.pattern).field("keys", &self.keys).finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RepairDest {
    Group,
    One(usize),
}

#[derive(Debug)]
pub struct McastSender {
    cfg: SenderConfig,
    group: SocketAddr,
    session: u32,
    info: Announcement,
    /// Bytes of the source available so far; the total once known.
    available: u64,
    total: Option<u32>,
    stage: Stage,
    started: Instant,
    next_sn: u32,
    window: Option<Window>,
    w: u32,
    /// Still in the initial slow start (see `SenderConfig::slow_start`).
    slow_start: bool,
    /// The first SN of the last resolved window: losses from here on count
    /// against the loss tolerance.
    recent_from: u32,
    timeout: Duration,
    nacked: Bitmap,
    receivers: Vec<ReceiverReport>,
    by_client: HashMap<u32, usize>,
    control: VecDeque<Control>,
    gather: BTreeMap<u32, Vec<usize>>,
    gathered: usize,
    repairs: VecDeque<(u32, RepairDest)>,
    /// Parity to make: (block, first index, count).
    parity_jobs: VecDeque<(u32, u16, u16)>,
    /// Parity made, to send: (block, index, k, shard).
    parity_ready: VecDeque<(u32, u16, u16, Vec<u8>)>,
    /// Next parity index per FEC block.
    parity_next: BTreeMap<u32, u16>,
    timers: Timers<SenderTimer>,
    /// Recently confirmed windows' delivery rate, bytes/s.
    rate: Option<f64>,
    pacer: Pacer,
    /// ARTP adaptation: windows, awaited networks summed, ACKs at the start.
    artp_windows: u32,
    artp_networks: u64,
    artp_acks_at: u64,
    /// The most losses one receiver reported since the last window resolved.
    new_losses: u32,
    /// Smoothed time from a window's last packet to its first ACK.
    ack_time: Option<Duration>,
    security: Option<Box<SenderSecurity>>,
    /// The packet `poll_plain` just wrote goes out unsealed.
    send_clear: bool,
    /// A protected session's invitation follows its sealed ANNOUNCE.
    invite_due: bool,
    /// Scratch for opening sealed packets.
    opened: Vec<u8>,
    events: VecDeque<SenderEvent>,
    stats: SenderStats,
}

impl McastSender {
    /// A sender of `info` (its size and hash may come later for a stream,
    /// spec §16.6) to `group`. The announce phase starts at `now`.
    pub fn new(mut cfg: SenderConfig, group: SocketAddr, mut info: Announcement, now: Instant) -> Self {
        cfg.fec_k = cfg.fec_k.min(fec::MAX_FEC_K);
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let session = rng.next_u32().max(1);
        let security = cfg.security.clone().map(|config| {
            let mut rng = crate::secure::crypto_rng(cfg.seed, cfg.crypto_seed);
            let mut group_key = [0u8; KEY_LEN];
            rng.fill_bytes(&mut group_key);
            Box::new(SenderSecurity {
                pattern: Pattern::of_sender(&config),
                public: config.private_key.map(|k| public_key(&k)).unwrap_or_default(),
                keys: GroupKeys::new(&group_key, 0, cfg.max_receivers.saturating_mul(2) + 1),
                config,
                rng,
                group_key,
                next_source: 1,
                granted: HashMap::new(),
                tokens: f64::from(cfg.max_handshakes_per_sec),
                refilled: now,
            })
        });
        // A sealed DATA packet keeps the datagram size (spec §19.7).
        let overhead = if security.is_some() { SEAL_OVERHEAD } else { 0 };
        // Even: Reed-Solomon shards are whole 16-bit words (spec §16.9).
        info.block =
            ((cfg.max_datagram.saturating_sub(HEADER_LEN + overhead)).clamp(64, u16::MAX as usize) & !1) as u16;
        info.fec_k = cfg.fec_k;
        info.artp_max_us = cfg.artp_max.as_micros().min(u128::from(u32::MAX)) as u32;
        info.repair_interval_ms = 50;
        let total = info.size.map(|s| packets_for(s, info.block));
        McastSender {
            group,
            session,
            available: info.size.unwrap_or(0),
            total,
            info,
            stage: Stage::Announcing,
            started: now,
            next_sn: 0,
            window: None,
            w: cfg.initial_window.max(1),
            slow_start: cfg.slow_start,
            recent_from: 0,
            timeout: cfg.default_timeout,
            nacked: Bitmap::new(cfg.max_packets),
            receivers: Vec::new(),
            by_client: HashMap::new(),
            control: VecDeque::new(),
            gather: BTreeMap::new(),
            gathered: 0,
            repairs: VecDeque::new(),
            parity_jobs: VecDeque::new(),
            parity_ready: VecDeque::new(),
            parity_next: BTreeMap::new(),
            timers: SenderTimer::initial(now, &cfg),
            rate: None,
            pacer: Pacer::default(),
            artp_windows: 0,
            artp_networks: 0,
            artp_acks_at: 0,
            new_losses: 0,
            ack_time: None,
            security,
            send_clear: false,
            invite_due: false,
            opened: Vec::new(),
            events: VecDeque::new(),
            stats: SenderStats::default(),
            cfg,
        }
    }

    /// Whether the session is protected (spec §19.7).
    pub fn is_protected(&self) -> bool {
        self.security.is_some()
    }

    pub fn session_id(&self) -> u32 {
        self.session
    }

    pub fn block(&self) -> u16 {
        self.info.block
    }

    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    pub fn receivers(&self) -> &[ReceiverReport] {
        &self.receivers
    }

    /// Current window size and timer.
    pub fn window(&self) -> (u32, Duration) {
        (self.w, self.timeout)
    }

    /// Packets sent once so far, and the total when known.
    pub fn progress(&self) -> (u32, Option<u32>) {
        (self.next_sn, self.total)
    }

    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// More of a stream's bytes are available to send (spec §16.6).
    pub fn extend(&mut self, available: u64) {
        if self.total.is_none() {
            self.available = self.available.max(available);
        }
    }

    /// A stream ended: its length and hash are now known.
    pub fn finish_source(&mut self, size: u64, hash: [u8; 32]) {
        self.available = size;
        self.info.size = Some(size);
        self.info.hash = Some(hash);
        self.total = Some(packets_for(size, self.info.block));
        // Tell the receivers now: they cannot verify before.
        self.timers.set(SenderTimer::Announce, self.started);
    }

    /// Ends the announce phase now, with whoever registered.
    pub fn start(&mut self, now: Instant) {
        if self.stage == Stage::Announcing {
            if self.live() == 0 {
                self.fail(SenderError::NoReceivers);
            } else {
                self.stage = Stage::Data;
                self.events.push_back(SenderEvent::DataStarted);
                self.timers.set(SenderTimer::Announce, now);
            }
        }
    }

    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
    }

    fn live(&self) -> usize {
        self.receivers.iter().filter(|r| r.outcome == ReceiverOutcome::Active).count()
    }

    /// Ends the session at once, for every receiver, with `code` (spec
    /// §16.7): e.g. [`ErrorCode::INTERRUPTED`] when the process is
    /// interrupted. END with that code goes to the group `ABORT_ENDS`
    /// times (multicast is unreliable) and once by unicast to every live
    /// receiver; the next `poll_transmit` calls write them, and nothing
    /// else follows. `is_done` is true at once; the event is
    /// `Failed(SenderError::Aborted(code))`.
    pub fn abort(&mut self, _now: Instant, code: ErrorCode) {
        if self.stage == Stage::Done {
            return;
        }
        self.control.clear();
        self.control.push_back(Control::EndAll { code });
        for idx in 0..self.receivers.len() {
            if self.receivers[idx].outcome == ReceiverOutcome::Active {
                self.control.push_back(Control::EndOne { idx, code });
            }
        }
        for _ in 1..ABORT_ENDS {
            self.control.push_back(Control::EndAll { code });
        }
        self.window = None;
        self.repairs.clear();
        self.parity_jobs.clear();
        self.parity_ready.clear();
        self.invite_due = false;
        self.timers.clear_all();
        self.stage = Stage::Done;
        self.events.push_back(SenderEvent::Failed(SenderError::Aborted(code)));
    }

    fn fail(&mut self, e: SenderError) {
        self.stage = Stage::Ending { sent: 0 };
        self.events.push_back(SenderEvent::Failed(e));
    }

    // ---- input ------------------------------------------------------------

    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        if data.first().is_none_or(|b| b & 0x0f != PacketType::McSealed as u8) {
            return self.on_packet(now, from, data, None);
        }
        let (Some(sec), Ok(_)) = (self.security.as_mut(), Header::parse(data)) else {
            self.stats.dropped_malformed += 1;
            return;
        };
        // Only sources we granted (and our own, looped back) are opened at
        // all: made-up ones would fill the replay table (spec §19.7).
        match GroupKeys::source_of(data) {
            Some(0) => return,
            Some(s) if sec.granted.contains_key(&s) => {}
            _ => {
                self.stats.dropped_unauthenticated += 1;
                return;
            }
        }
        let mut buf = std::mem::take(&mut self.opened);
        buf.clear();
        buf.extend_from_slice(data);
        match sec.keys.open(&mut buf) {
            Ok((source, plain)) => self.on_packet(now, from, &buf[plain], Some(source)),
            Err(Unseal::Ours) => {}
            Err(Unseal::Replayed) => self.stats.dropped_replayed += 1,
            Err(Unseal::Forged) => self.stats.dropped_unauthenticated += 1,
            Err(Unseal::Malformed | Unseal::TooManySources) => self.stats.dropped_malformed += 1,
        }
        self.opened = buf;
    }

    /// A packet, plain or opened from `source` (spec §19.7).
    fn on_packet(&mut self, now: Instant, from: SocketAddr, data: &[u8], source: Option<u32>) {
        let parsed = if source.is_some() { McPacket::parse_opened(data) } else { McPacket::parse(data) };
        let p = match parsed {
            Ok(p) => p,
            Err(_) => {
                self.stats.dropped_malformed += 1;
                return;
            }
        };
        let (session, client) = match &p {
            McPacket::Register { session, client, .. }
            | McPacket::Ack { session, client, .. }
            | McPacket::Nack { session, client, .. }
            | McPacket::Repair { session, client, .. }
            | McPacket::Status { session, client, confirm: false, .. } => (*session, *client),
            // Our own multicast looped back, or another sender's.
            _ => return,
        };
        if session != self.session {
            self.stats.dropped_other_session += 1;
            return;
        }
        if let McPacket::Register { network, noise, .. } = p {
            // Registrations go in the clear: the receiver has no key yet.
            if source.is_none() {
                self.on_register(now, from, client, network, noise);
            }
            return;
        }
        if self.security.is_some() && source.is_none() {
            self.stats.dropped_unprotected += 1;
            return;
        }
        let Some(&idx) = self.by_client.get(&client) else {
            self.stats.dropped_unknown_client += 1;
            return;
        };
        if source.is_some_and(|s| s != self.receivers[idx].source) {
            // A member speaking for another: the group key is shared, the
            // source number is each registration's own.
            self.stats.dropped_unauthenticated += 1;
            return;
        }
        self.receivers[idx].last_heard = now;
        // A receiver on another network sends its ACKs and NACKs twice
        // (group and unicast, spec §16.4): take each once.
        let key = match &p {
            McPacket::Ack { lwsn, .. } => Some((true, *lwsn)),
            McPacket::Nack { highest, missing, .. } => {
                Some((false, highest ^ (missing.count() as u32).rotate_left(16)))
            }
            _ => None,
        };
        if key.is_some() {
            if self.receivers[idx].last_feedback == key {
                return;
            }
            self.receivers[idx].last_feedback = key;
        }
        if let McPacket::Ack { lwsn, .. } = p {
            // A window ack counts for its network whatever this receiver's
            // state: the network it registered from (authenticated in a
            // protected session), not the one the header names.
            self.stats.acks += 1;
            let network = self.receivers[idx].network;
            self.on_window_ack(now, network, lwsn);
        }
        if self.receivers[idx].outcome != ReceiverOutcome::Active {
            // A late report from a finished receiver: confirm again if asked.
            if let McPacket::Status { complete: true, .. } | McPacket::Status { error: Some(_), .. } = p {
                self.control.push_back(Control::StatusAck { idx });
            }
            return;
        }
        match p {
            McPacket::Ack { missing, .. } => {
                let lost = self.count_losses(missing.iter());
                self.note_losses(idx, lost);
            }
            McPacket::Nack { missing, .. } => {
                self.stats.nacks += 1;
                if let Some(w) = self.window.as_mut() {
                    w.feedback += 1;
                }
                let lost = self.count_losses(missing.iter());
                self.note_losses(idx, lost);
            }
            McPacket::Repair { missing, .. } => self.on_repair(now, idx, missing.iter()),
            McPacket::Status { held, complete, error, .. } => {
                self.stats.status_reports += 1;
                self.receivers[idx].held = held;
                match error {
                    None if complete => self.finish_receiver(now, idx, ReceiverOutcome::Completed),
                    None => {}
                    Some(ErrorCode::HASH_MISMATCH) => self.finish_receiver(now, idx, ReceiverOutcome::HashMismatch),
                    // spec §16.7: the receiver left (interrupted, say): known at once.
                    Some(code) => self.receiver_left(now, idx, code),
                }
                if complete || error.is_some() {
                    self.control.push_back(Control::StatusAck { idx });
                }
            }
            _ => {}
        }
        self.check_loss(now, idx);
    }

    fn on_register(&mut self, now: Instant, from: SocketAddr, client: u32, network: u32, noise: Option<&[u8]>) {
        if client == 0 {
            self.stats.dropped_malformed += 1;
            return;
        }
        match (self.security.is_some(), noise) {
            (false, None) => {}
            (true, Some(m1)) => return self.on_keyed_register(now, from, client, network, m1),
            // No downgrade, either way (spec §19.7).
            _ => {
                self.stats.refused += 1;
                let code = ErrorCode::PROTECTION_MISMATCH;
                self.control.push_back(Control::Refuse { addr: from, client, code });
                return;
            }
        }
        if let Some(&idx) = self.by_client.get(&client) {
            let r = &mut self.receivers[idx];
            r.addr = from;
            r.last_heard = now;
            self.control.push_back(Control::RegisterAck { idx });
            return;
        }
        if let Some(idx) = self.admit(now, from, client, network) {
            self.control.push_back(Control::RegisterAck { idx });
        }
    }

    /// Whether a new receiver would be refused (spec §16.8).
    fn full(&self) -> bool {
        self.receivers.len() >= self.cfg.max_receivers || matches!(self.stage, Stage::Ending { .. } | Stage::Done)
    }

    /// Adds a receiver to the table; refuses it if the table is full or
    /// the session ending.
    fn admit(&mut self, now: Instant, from: SocketAddr, client: u32, network: u32) -> Option<usize> {
        if self.full() {
            self.stats.refused += 1;
            self.control.push_back(Control::Refuse { addr: from, client, code: ErrorCode::REFUSED });
            return None;
        }
        let idx = self.receivers.len();
        let joined_at = self.joining_sn();
        self.receivers.push(ReceiverReport {
            client,
            addr: from,
            network,
            joined_at,
            held: 0,
            reported_lost: 0,
            repair_passes: 0,
            outcome: ReceiverOutcome::Active,
            left: None,
            peer_key: None,
            source: 0,
            registration: None,
            answered_at: None,
            last_heard: now,
            window_lost: 0,
            last_feedback: None,
            next_pass_at: None,
        });
        self.by_client.insert(client, idx);
        self.events.push_back(SenderEvent::ReceiverJoined { client, addr: from, from_sn: joined_at });
        if self.stage == Stage::Announcing && self.live() >= self.cfg.min_receivers.max(1) {
            self.start(now);
        }
        Some(idx)
    }

    /// The SN a receiver registering now receives from.
    fn joining_sn(&self) -> u32 {
        if self.stage == Stage::Announcing {
            0
        } else {
            self.next_sn
        }
    }

    /// spec §19.7: REGISTER carries Noise message 1; once it proves the
    /// receiver, REGISTER+ACK carries message 2 with the group key, the
    /// receiver's source number and the session description.
    fn on_keyed_register(&mut self, now: Instant, from: SocketAddr, client: u32, network: u32, m1: &[u8]) {
        let known = self.by_client.get(&client).copied();
        if let Some(idx) = known {
            // Its registration stands: only the same message 1 (our answer
            // was lost) is answered again, to the address it registered
            // from, and at most every REANSWER_GAP. A replayed REGISTER
            // moves nothing and keeps nobody alive; a second handshake for
            // a registered client id (another member naming it) is refused.
            let r = &mut self.receivers[idx];
            let same = r.registration.as_ref().is_some_and(|reg| reg.0 == m1);
            if same && r.answered_at.is_none_or(|t| now >= t + REANSWER_GAP) {
                r.answered_at = Some(now);
                self.control.push_back(Control::RegisterAck { idx });
            } else {
                self.stats.registrations_ignored += 1;
            }
            return;
        }
        if self.full() {
            self.stats.refused += 1;
            self.control.push_back(Control::Refuse { addr: from, client, code: ErrorCode::REFUSED });
            return;
        }
        let from_sn = self.joining_sn();
        let mut info = vec![0u8; 64 + 255];
        let n = emit_announcement(&mut info, &self.info);
        info.truncate(n);
        let sec = self.security.as_mut().expect("a keyed registration is only taken when protected");
        // Each handshake costs a few X25519 operations, for a packet anyone
        // can send: a budget per second, as for resets (spec §6.5).
        let rate = f64::from(self.cfg.max_handshakes_per_sec);
        sec.tokens = (sec.tokens + now.saturating_duration_since(sec.refilled).as_secs_f64() * rate).min(rate);
        sec.refilled = now;
        if sec.tokens < 1.0 {
            self.stats.registrations_ignored += 1;
            return;
        }
        sec.tokens -= 1.0;
        let mut seed = [0u8; 32];
        sec.rng.fill_bytes(&mut seed);
        let mut hs = sec.pattern.handshake(&sec.config, self.session, &sec.public, false, seed);
        // The ids inside message 1 are authenticated; the header's must match.
        let proven = hs.read_with(m1).is_ok_and(|id| id == identity(client, network));
        if !proven || sec.next_source == u32::MAX {
            self.stats.auth_failures += 1;
            let code = ErrorCode::AUTHENTICATION_FAILED;
            self.control.push_back(Control::Refuse { addr: from, client, code });
            return;
        }
        let source = sec.next_source;
        let grant = Grant { source, from_sn, pn: sec.keys.sealed(), key: sec.group_key, info };
        let Ok(reply) = hs.write_with(&grant.encode()) else {
            self.stats.auth_failures += 1;
            return;
        };
        sec.next_source += 1;
        let peer_key = hs.peer_key();
        let Some(idx) = self.admit(now, from, client, network) else { return };
        let sec = self.security.as_mut().expect("checked");
        sec.granted.insert(source, idx);
        let r = &mut self.receivers[idx];
        r.source = source;
        r.peer_key = peer_key;
        r.registration = Some(Box::new((m1.to_vec(), reply)));
        r.answered_at = Some(now);
        self.control.push_back(Control::RegisterAck { idx });
    }

    /// spec §16.3: the window shrinks by one for each report that names a
    /// loss not reported before. Returns how many SNs the report names.
    /// Also returns how many of them were sent since the previous window
    /// began: the losses that speak of the path now (a receiver whose
    /// reports were suppressed may report older ones late).
    fn count_losses(&mut self, ranges: impl Iterator<Item = std::ops::Range<u32>>) -> (u64, u64) {
        let mut named = 0u64;
        let mut recent = 0u64;
        let mut new = 0u32;
        for r in ranges {
            let r = r.start..r.end.min(self.next_sn);
            named += u64::from(r.end.saturating_sub(r.start));
            recent += u64::from(r.end.saturating_sub(r.start.max(self.recent_from)));
            for sn in r {
                new += u32::from(self.nacked.set(sn) == Some(true));
            }
        }
        if new > 0 && self.cfg.loss_tolerance <= 0.0 {
            self.w = self.w.saturating_sub(1).max(1);
            self.slow_start = false;
        }
        (named, recent)
    }

    /// A receiver reported `lost` packets: its total, and the most any one
    /// receiver reported since the last window resolved (the loss
    /// tolerance's measure: one receiver's rate, not the sum of all).
    fn note_losses(&mut self, idx: usize, (lost, recent): (u64, u64)) {
        let r = &mut self.receivers[idx];
        r.reported_lost += lost;
        r.window_lost += recent;
        self.new_losses = self.new_losses.max(r.window_lost.min(u64::from(u32::MAX)) as u32);
    }

    fn on_window_ack(&mut self, now: Instant, network: u32, lwsn: u32) {
        let Some(w) = self.window.as_mut() else {
            self.stats.late_acks += 1;
            return;
        };
        w.feedback += 1;
        if w.lwsn != lwsn || w.sent_at.is_none() {
            self.stats.late_acks += 1;
            return;
        }
        if w.awaited.contains(&network) && !w.acked.contains(&network) {
            if w.acked.is_empty() {
                if let Some(sent) = w.sent_at {
                    let sample = now.saturating_duration_since(sent);
                    self.ack_time = Some(self.ack_time.map_or(sample, |t| (t * 7 + sample) / 8));
                }
            }
            w.acked.push(network);
        }
        if w.acked.len() >= w.awaited.len() {
            self.resolve_window(now, true);
        }
    }

    fn on_repair(&mut self, now: Instant, idx: usize, ranges: impl Iterator<Item = std::ops::Range<u32>>) {
        self.stats.repair_requests += 1;
        // spec §16.5: a receiver repeats its request every repair interval
        // while it misses packets; a repeat that comes while the answers to
        // its last pass are still going out is not a new pass.
        if self.receivers[idx].next_pass_at.is_some_and(|t| now < t) {
            return;
        }
        let r = &mut self.receivers[idx];
        r.repair_passes += 1;
        if r.repair_passes > self.cfg.max_repair_passes {
            self.drop_receiver(now, idx, ReceiverOutcome::TooManyPasses);
            return;
        }
        let limit = self.next_sn;
        let before = self.gathered;
        for range in ranges {
            for sn in range.start..range.end.min(limit) {
                if self.gathered >= self.cfg.max_repair_queue {
                    break;
                }
                let who = self.gather.entry(sn).or_default();
                if !who.contains(&idx) {
                    who.push(idx);
                    self.gathered += 1;
                }
            }
        }
        if !self.gather.is_empty() && !self.timers.is_set(SenderTimer::Gather) {
            self.timers.set(SenderTimer::Gather, now + self.cfg.repair_gather);
        }
        // The next pass may start once everything queued now has gone out
        // at the recent rate, plus a round trip's margin.
        let queued = (self.gathered - before + self.repairs.len() + self.parity_ready.len()) as f64;
        let drain = self.rate.map_or(0.0, |r| queued * f64::from(self.info.block) / r.max(1.0));
        let margin = self.ack_time.unwrap_or(Duration::from_millis(10)) * 2 + self.cfg.repair_gather;
        self.receivers[idx].next_pass_at = Some(now + Duration::from_secs_f64(drain.min(60.0)) + margin);
    }

    fn check_loss(&mut self, now: Instant, idx: usize) {
        let Some(max) = self.cfg.max_loss else { return };
        let r = &self.receivers[idx];
        let sent = u64::from(self.next_sn.saturating_sub(r.joined_at));
        if r.outcome == ReceiverOutcome::Active && sent >= 1000 && r.reported_lost as f64 > max * sent as f64 {
            self.drop_receiver(now, idx, ReceiverOutcome::TooLossy);
        }
    }

    /// A receiver leaves the session: completed, failed or dropped. Its
    /// network is no longer awaited unless another receiver of it is live,
    /// which may confirm the open window.
    fn finish_receiver(&mut self, now: Instant, idx: usize, outcome: ReceiverOutcome) {
        let r = &mut self.receivers[idx];
        if r.outcome != ReceiverOutcome::Active {
            return;
        }
        r.outcome = outcome;
        let network = r.network;
        self.events.push_back(SenderEvent::ReceiverDone { client: r.client, outcome });
        let still = self.receivers.iter().any(|r| r.network == network && r.outcome == ReceiverOutcome::Active);
        if let (Some(w), false) = (self.window.as_mut(), still) {
            w.awaited.retain(|&n| n != network);
            if w.sent_at.is_some() && w.awaited.iter().all(|n| w.acked.contains(n)) {
                self.resolve_window(now, true);
            }
        }
    }

    /// A receiver ended its part with `code`: it is no longer awaited.
    fn receiver_left(&mut self, now: Instant, idx: usize, code: ErrorCode) {
        let r = &mut self.receivers[idx];
        r.left = Some(code);
        let (client, addr) = (r.client, r.addr);
        self.events.push_back(SenderEvent::ReceiverLeft { client, addr, code });
        self.finish_receiver(now, idx, ReceiverOutcome::Incomplete);
    }

    fn drop_receiver(&mut self, now: Instant, idx: usize, outcome: ReceiverOutcome) {
        self.finish_receiver(now, idx, outcome);
        if let Some(code) = outcome.code() {
            self.control.push_back(Control::EndOne { idx, code });
        }
    }

    // ---- timers -----------------------------------------------------------

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_of(|t| self.wakes(t))
    }

    /// Whether timer `t` may wake the engine in this stage: another
    /// stage's timers stay set but are moot.
    fn wakes(&self, t: SenderTimer) -> bool {
        use SenderTimer::*;
        match (t, self.stage) {
            (_, Stage::Done) => false,
            (Sweep | Gather | Pace, _) => true,
            (AnnounceWait, Stage::Announcing) => true,
            (Announce, Stage::Announcing | Stage::Data | Stage::Repair) => true,
            (WindowEnd | Probe | Completion, Stage::Data | Stage::Repair) => true,
            (End, Stage::Ending { .. }) => true,
            _ => false,
        }
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        for &t in SenderTimer::ALL {
            if self.timers.expired(t, now) {
                self.on_timer(now, t);
            }
        }
        self.check_end();
    }

    /// Timer `t` expired at `now`.
    fn on_timer(&mut self, now: Instant, t: SenderTimer) {
        match t {
            SenderTimer::AnnounceWait => {
                if self.stage == Stage::Announcing {
                    self.start(now);
                }
            }
            SenderTimer::Pace => self.timers.cancel(SenderTimer::Pace),
            SenderTimer::WindowEnd => self.resolve_window(now, false),
            SenderTimer::Probe => {
                self.timers.cancel(SenderTimer::Probe);
                if let Some(w) = self.window.as_mut().filter(|w| w.acked.is_empty()) {
                    w.probe_due = true;
                }
            }
            SenderTimer::Gather => self.release_repairs(),
            SenderTimer::Sweep => {
                self.timers.set(SenderTimer::Sweep, now + SWEEP_INTERVAL);
                for idx in 0..self.receivers.len() {
                    let r = &self.receivers[idx];
                    if r.outcome == ReceiverOutcome::Active
                        && now.saturating_duration_since(r.last_heard) > self.cfg.receiver_timeout
                    {
                        self.drop_receiver(now, idx, ReceiverOutcome::Unresponsive);
                    }
                }
            }
            SenderTimer::Completion => {
                if self.stage == Stage::Repair {
                    for idx in 0..self.receivers.len() {
                        if self.receivers[idx].outcome == ReceiverOutcome::Active {
                            self.drop_receiver(now, idx, ReceiverOutcome::Incomplete);
                        }
                    }
                }
            }
            // Sent by `poll_transmit`.
            SenderTimer::Announce | SenderTimer::End => {}
        }
    }

    fn check_end(&mut self) {
        if matches!(self.stage, Stage::Data | Stage::Repair) && self.live() == 0 {
            let any_done = self.receivers.iter().any(|r| r.outcome == ReceiverOutcome::Completed);
            let all_settled = self.stage == Stage::Repair;
            if !all_settled && !any_done {
                self.fail(SenderError::AllDropped);
            } else {
                self.stage = Stage::Ending { sent: 0 };
            }
        }
    }

    /// spec §16.3: a window is confirmed (every awaited network acked) or
    /// its timer expired.
    fn resolve_window(&mut self, now: Instant, confirmed: bool) {
        let Some(w) = self.window.take() else { return };
        self.timers.cancel(SenderTimer::WindowEnd);
        self.timers.cancel(SenderTimer::Probe);
        let sent = w.sent_at.unwrap_or(now);
        // A window confirmed only thanks to a probe lost its last packet
        // everywhere: the flow control reacts as to an expiry (the paper's
        // congestion signal), though the window was saved in time.
        if confirmed && !w.probed {
            self.stats.windows_confirmed += 1;
            self.timeout = self.timeout.div_f64(self.cfg.beta).max(self.cfg.default_timeout);
            // With a loss tolerance, losses shrink the window only above
            // that fraction of what went out (spec §16.3).
            let size = f64::from(w.lwsn + 1 - w.first);
            if self.cfg.loss_tolerance > 0.0
                && f64::from(self.new_losses) > loss_allowance(self.cfg.loss_tolerance, size)
            {
                // Shrink in proportion to the loss (a receiver losing half
                // a window behind its own bottleneck halves it in two
                // windows), by one at least.
                let f = (f64::from(self.new_losses) / size).min(1.0);
                let scaled = (f64::from(self.w) * (1.0 - f / 2.0)) as u32;
                self.w = scaled.min(self.w.saturating_sub(1)).max(1);
                self.slow_start = false;
            } else if self.slow_start {
                self.w = self.w.saturating_mul(2).min(self.cfg.max_window.max(1));
            } else {
                self.w = (self.w + 1).min(self.cfg.max_window.max(1));
            }
            if let Some(start) = w.started {
                let took = now.saturating_duration_since(start).as_secs_f64().max(1e-6);
                let bytes = f64::from(w.lwsn + 1 - w.first) * f64::from(self.info.block);
                let sample = bytes / took;
                self.rate = Some(self.rate.map_or(sample, |r| 0.75 * r + 0.25 * sample));
            }
        } else {
            if confirmed {
                self.stats.windows_confirmed += 1;
            } else {
                self.stats.windows_expired += 1;
            }
            self.timeout = self.timeout.mul_f64(self.cfg.alpha).min(self.cfg.max_timeout);
            self.w = self.w.saturating_sub(1).max(1);
            self.slow_start = false;
        }
        self.new_losses = 0;
        self.recent_from = w.first;
        for r in &mut self.receivers {
            r.window_lost = 0;
        }
        self.adapt_artp(now, w.awaited.len());
        self.events.push_back(SenderEvent::Window(WindowRecord {
            first: w.first,
            lwsn: w.lwsn,
            size: w.lwsn + 1 - w.first,
            sent,
            confirmed,
            resolved: now,
            timeout: w.timeout,
            feedback: w.feedback,
        }));
        if self.total.is_some_and(|t| self.next_sn >= t) {
            self.enter_repair(now);
        }
    }

    /// spec §16.4: suppression works when the backoff spread is wide
    /// against the delay between receivers; every 4 windows the ACKs per
    /// window per network steer `ARTP_max`, announced at once.
    fn adapt_artp(&mut self, now: Instant, networks: usize) {
        if !self.cfg.adapt_artp {
            return;
        }
        self.artp_windows += 1;
        self.artp_networks += networks as u64;
        // While the window doubles, windows are few: adapt after each.
        if self.artp_windows < if self.slow_start { 1 } else { 4 } {
            return;
        }
        let per = (self.stats.acks - self.artp_acks_at) as f64 / self.artp_networks.max(1) as f64;
        let current = Duration::from_micros(u64::from(self.info.artp_max_us));
        // With n receivers a delay d apart, a window draws about
        // 1 + (n − 1)·d / ARTP_max ACKs: scale towards 1.3 per network
        // (room for a NACK within the target of 2 feedback packets), by at
        // most ×4 up and ×0.9 down per step.
        let next = if !(1.15..=1.5).contains(&per) {
            current.mul_f64(((per - 1.0) / 0.3).clamp(0.9, 4.0)).clamp(self.cfg.artp_max, self.cfg.artp_cap)
        } else {
            current
        };
        if next != current {
            self.info.artp_max_us = next.as_micros().min(u128::from(u32::MAX)) as u32;
            self.timers.set(SenderTimer::Announce, now);
        }
        self.artp_windows = 0;
        self.artp_networks = 0;
        self.artp_acks_at = self.stats.acks;
    }

    /// The feedback backoff bound in force (spec §16.4).
    pub fn artp_max(&self) -> Duration {
        Duration::from_micros(u64::from(self.info.artp_max_us))
    }

    fn enter_repair(&mut self, now: Instant) {
        if self.stage == Stage::Data {
            self.stage = Stage::Repair;
            self.timers.set(SenderTimer::Completion, now + self.cfg.completion_timeout);
            self.timers.set(SenderTimer::Announce, now);
            self.events.push_back(SenderEvent::RepairStarted);
        }
    }

    /// spec §16.5, §16.9: each requested packet goes by multicast when
    /// enough receivers asked for it, else by unicast; with FEC, a block in
    /// which enough receivers miss packets (not necessarily the same ones)
    /// gets as many new parity shards as the worst of them misses instead.
    fn release_repairs(&mut self) {
        self.timers.cancel(SenderTimer::Gather);
        self.gathered = 0;
        let gathered = std::mem::take(&mut self.gather);
        let min = self.cfg.repair_multicast_min.max(1);
        let k = self.cfg.fec_k;
        let mut by_parity = std::collections::BTreeSet::new();
        if k > 0 {
            // Per block: how many packets each requester misses.
            let mut blocks: BTreeMap<u32, HashMap<usize, u16>> = BTreeMap::new();
            for (&sn, who) in &gathered {
                let per = blocks.entry(sn / u32::from(k)).or_default();
                for &i in who {
                    *per.entry(i).or_default() += 1;
                }
            }
            for (block, per) in blocks {
                let live = per.iter().filter(|(&i, _)| self.receivers[i].outcome == ReceiverOutcome::Active);
                let (count, worst) = live.fold((0, 0), |(c, w), (_, &n)| (c + 1, w.max(n)));
                let next = self.parity_next.get(&block).copied().unwrap_or(0);
                if count >= min && next.saturating_add(worst) <= fec::PARITY_SHARDS {
                    self.parity_jobs.push_back((block, next, worst));
                    self.parity_next.insert(block, next + worst);
                    by_parity.insert(block);
                }
            }
        }
        for (sn, who) in gathered {
            if k > 0 && by_parity.contains(&(sn / u32::from(k))) {
                continue;
            }
            let who: Vec<usize> =
                who.into_iter().filter(|&i| self.receivers[i].outcome == ReceiverOutcome::Active).collect();
            if who.len() >= min {
                self.repairs.push_back((sn, RepairDest::Group));
            } else {
                self.repairs.extend(who.into_iter().map(|i| (sn, RepairDest::One(i))));
            }
        }
    }

    /// The next parity shard to send, making a job's shards if needed.
    fn send_parity(&mut self, buf: &mut [u8], source: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> Option<McTransmit> {
        while self.parity_ready.is_empty() {
            let (block, from, count) = self.parity_jobs.pop_front()?;
            let total = self.total.unwrap_or(self.next_sn);
            let range = fec::block_range(block, self.cfg.fec_k, total);
            let shard = usize::from(self.info.block);
            let originals: Vec<Vec<u8>> = range
                .clone()
                .map(|sn| {
                    let mut v = vec![0u8; shard];
                    let offset = u64::from(sn) * shard as u64;
                    let want = (self.available.saturating_sub(offset)).min(shard as u64) as usize;
                    source(offset, &mut v[..want]);
                    v
                })
                .collect();
            let k = (range.end - range.start) as u16;
            if let Some(shards) = fec::encode(&originals, from, count) {
                for (j, p) in shards.into_iter().enumerate() {
                    self.parity_ready.push_back((block, from + j as u16, k, p));
                }
            }
        }
        let (block, index, k, shard) = self.parity_ready.pop_front()?;
        let n = emit(
            buf,
            PacketType::McParity,
            Flags::empty(),
            self.session,
            block,
            u32::from(index),
            u32::from(k),
            |o| emit_bytes(o, &shard),
        )?;
        self.stats.parity_packets += 1;
        Some(McTransmit { destination: self.group, size: n })
    }

    // ---- output -----------------------------------------------------------

    /// The next datagram to send, written into `buf`. `source(offset, out)`
    /// copies file bytes at `offset` into `out` and returns how many.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<McTransmit> {
        if self.security.is_none() {
            return self.poll_plain(now, buf, source);
        }
        // spec §19.7: every packet is sealed but the key exchange's.
        self.send_clear = false;
        let room = buf.len().checked_sub(SEAL_OVERHEAD)?;
        let t = self.poll_plain(now, &mut buf[..room], source)?;
        if std::mem::take(&mut self.send_clear) {
            return Some(t);
        }
        let sec = self.security.as_mut().expect("checked");
        Some(McTransmit { size: sec.keys.seal(buf, t.size), ..t })
    }

    fn poll_plain(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<McTransmit> {
        if let Some(c) = self.control.pop_front() {
            return self.send_control(buf, c);
        }
        if std::mem::take(&mut self.invite_due) {
            if let Some(t) = self.send_invitation(buf) {
                return Some(t);
            }
        }
        match self.stage {
            Stage::Done => return None,
            Stage::Ending { sent } => {
                if !self.timers.expired(SenderTimer::End, now) {
                    return None;
                }
                if sent >= 3 {
                    self.stage = Stage::Done;
                    if !self.events.iter().any(|e| matches!(e, SenderEvent::Failed(_))) {
                        self.events.push_back(SenderEvent::Finished);
                    }
                    return None;
                }
                self.stage = Stage::Ending { sent: sent + 1 };
                self.timers.set(SenderTimer::End, now + self.cfg.announce_interval);
                let total = self.total.unwrap_or(self.next_sn);
                let n = emit(buf, PacketType::McEnd, Flags::FIN, self.session, total, 0, 0, |_| 0)?;
                return Some(McTransmit { destination: self.group, size: n });
            }
            _ => {}
        }
        if self.timers.expired(SenderTimer::Announce, now) {
            self.timers.set(SenderTimer::Announce, now + self.cfg.announce_interval);
            return self.send_announce(buf);
        }
        if self.timers.get(SenderTimer::Pace).is_some_and(|t| now < t) {
            return None;
        }
        let parity = if self.parity_ready.is_empty() && self.parity_jobs.is_empty() {
            None
        } else {
            self.send_parity(buf, source)
        };
        let sent = match (parity, self.stage) {
            (Some(p), _) => Some(p),
            (None, Stage::Data) => self.send_data(now, buf, source),
            (None, Stage::Repair) => self.send_repair(buf, source),
            _ => None,
        }?;
        if self.cfg.pace || self.stage == Stage::Repair {
            if let Some(rate) = self.rate {
                self.pacer.on_sent(sent.size as u64);
                let until = self.pacer.delay(now, rate * 1.25, self.cfg.max_datagram as u64, sent.size as u64);
                self.timers.set_or_cancel(SenderTimer::Pace, until);
            }
        }
        Some(sent)
    }

    /// A protected session's invitation, in the clear (spec §19.7): how to
    /// register, and nothing of the session itself.
    fn send_invitation(&mut self, buf: &mut [u8]) -> Option<McTransmit> {
        let sec = self.security.as_ref()?;
        let (pattern, key) = (sec.pattern, sec.public);
        let n = emit(buf, PacketType::McAnnounce, Flags::CKE, self.session, 0, 0, 0, |o| {
            emit_invitation(o, pattern, &key)
        })?;
        self.send_clear = true;
        Some(McTransmit { destination: self.group, size: n })
    }

    fn send_announce(&mut self, buf: &mut [u8]) -> Option<McTransmit> {
        self.stats.announces += 1;
        self.invite_due = self.security.is_some();
        let phase = match self.stage {
            Stage::Announcing | Stage::Data => Phase::Data,
            Stage::Repair => Phase::Repair,
            _ => Phase::Ended,
        };
        let total = self.total.unwrap_or(UNKNOWN_TOTAL);
        let info = &self.info;
        let n =
            emit(buf, PacketType::McAnnounce, Flags::empty(), self.session, self.next_sn, total, phase as u32, |o| {
                emit_announcement(o, info)
            })?;
        Some(McTransmit { destination: self.group, size: n })
    }

    fn send_control(&mut self, buf: &mut [u8], c: Control) -> Option<McTransmit> {
        let s = self.session;
        let (dest, n) = match c {
            Control::RegisterAck { idx } if self.security.is_some() => {
                let r = &self.receivers[idx];
                let reply = &r.registration.as_ref()?.1;
                let flags = Flags::ACK | Flags::CKE;
                let n = emit(buf, PacketType::McRegister, flags, s, 0, r.network, r.client, |o| emit_bytes(o, reply))?;
                self.send_clear = true;
                (r.addr, n)
            }
            Control::RegisterAck { idx } => {
                let r = &self.receivers[idx];
                let info = &self.info;
                let n = emit(buf, PacketType::McRegister, Flags::ACK, s, r.joined_at, r.network, r.client, |o| {
                    emit_announcement(o, info)
                })?;
                (r.addr, n)
            }
            Control::StatusAck { idx } => {
                let r = &self.receivers[idx];
                (r.addr, emit(buf, PacketType::McStatus, Flags::ACK, s, r.held, r.network, r.client, |_| 0)?)
            }
            Control::EndAll { code } => {
                let total = self.total.unwrap_or(self.next_sn);
                (self.group, emit(buf, PacketType::McEnd, Flags::ERR, s, total, 0, 0, |o| emit_code(o, code))?)
            }
            Control::EndOne { idx, code } => {
                let r = &self.receivers[idx];
                (
                    r.addr,
                    emit(buf, PacketType::McEnd, Flags::ERR, s, self.next_sn, 0, r.client, |o| emit_code(o, code))?,
                )
            }
            Control::Refuse { addr, client, code } => {
                self.send_clear = true;
                (addr, emit(buf, PacketType::McEnd, Flags::ERR, s, 0, 0, client, |o| emit_code(o, code))?)
            }
        };
        Some(McTransmit { destination: dest, size: n })
    }

    fn send_data(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<McTransmit> {
        if let Some(w) = self.window.as_mut().filter(|w| w.probe_due) {
            w.probe_due = false;
            w.probed = true;
            let lwsn = w.lwsn;
            self.stats.probes += 1;
            let (n, _) = self.write_data(buf, lwsn, lwsn, false, source)?;
            return Some(McTransmit { destination: self.group, size: n });
        }
        if self.window.is_none() {
            let available = packets_available(self.available, self.info.block, self.total);
            let first = self.next_sn;
            if first >= available {
                if self.total.is_some_and(|t| first >= t) {
                    self.enter_repair(now);
                }
                return None;
            }
            let lwsn = (first + self.w - 1).min(available - 1);
            let awaited = self.awaited_networks();
            self.window = Some(Window {
                first,
                lwsn,
                next: first,
                started: None,
                probe_due: false,
                probed: false,
                sent_at: None,
                awaited,
                acked: Vec::new(),
                feedback: 0,
                timeout: self.timeout,
            });
        }
        let (sn, lwsn) = {
            let w = self.window.as_ref().expect("just made");
            if w.next > w.lwsn {
                return None;
            }
            (w.next, w.lwsn)
        };
        let n = self.write_data(buf, sn, lwsn, false, source)?;
        self.stats.data_packets += 1;
        self.stats.data_bytes += n.1 as u64;
        self.next_sn = self.next_sn.max(sn + 1);
        let k = u32::from(self.cfg.fec_k);
        let block_done = k > 0 && ((sn + 1) % k == 0 || self.total.is_some_and(|t| sn + 1 == t));
        if block_done && self.cfg.fec_proactive > 0 {
            // spec §16.9: parity follows each block in the data phase.
            let p = self.cfg.fec_proactive.min(fec::PARITY_SHARDS / 2);
            self.parity_jobs.push_back((sn / k, 0, p));
            self.parity_next.insert(sn / k, p);
        }
        let timeout = self.timeout;
        // A lost last packet leaves every receiver waiting for the window's
        // end: probe with it well before the timer, at twice the usual time
        // to the first ACK (at least 4 ARTP_max).
        let probe = self.ack_time.map_or(timeout / 2, |t| (t * 2).max(self.artp_max() * 4));
        let w = self.window.as_mut().expect("open");
        w.started.get_or_insert(now);
        w.next += 1;
        if w.next > w.lwsn {
            w.sent_at = Some(now);
            self.timers.set(SenderTimer::WindowEnd, now + timeout);
            if probe < timeout {
                // spec §16.3: the window's last packet goes again, once, if
                // no network has acked by then (a lost LWSN packet).
                self.timers.set(SenderTimer::Probe, now + probe.max(Duration::from_millis(1)));
            }
            if w.awaited.is_empty() {
                // Nobody to wait for (every receiver dropped): settle at once.
                self.resolve_window(now, true);
            }
        }
        Some(McTransmit { destination: self.group, size: n.0 })
    }

    fn send_repair(&mut self, buf: &mut [u8], source: &mut dyn FnMut(u64, &mut [u8]) -> usize) -> Option<McTransmit> {
        let (sn, dest) = loop {
            let (sn, dest) = self.repairs.pop_front()?;
            match dest {
                RepairDest::One(i) if self.receivers[i].outcome != ReceiverOutcome::Active => continue,
                _ => break (sn, dest),
            }
        };
        let (n, _) = self.write_data(buf, sn, sn, true, source)?;
        let destination = match dest {
            RepairDest::Group => {
                self.stats.repair_multicast += 1;
                self.group
            }
            RepairDest::One(i) => {
                self.stats.repair_unicast += 1;
                self.receivers[i].addr
            }
        };
        Some(McTransmit { destination, size: n })
    }

    /// A DATA packet for `sn`: (datagram length, payload length).
    fn write_data(
        &mut self,
        buf: &mut [u8],
        sn: u32,
        lwsn: u32,
        repair: bool,
        source: &mut dyn FnMut(u64, &mut [u8]) -> usize,
    ) -> Option<(usize, usize)> {
        let block = usize::from(self.info.block);
        let offset = u64::from(sn) * block as u64;
        let want = (self.available.saturating_sub(offset)).min(block as u64) as usize;
        let last = self.total.is_some_and(|t| sn + 1 == t);
        let mut flags = if last { Flags::FIN } else { Flags::empty() };
        if repair {
            flags.insert(Flags::KLV);
        }
        let mut got = 0;
        let n = emit(buf, PacketType::McData, flags, self.session, sn, lwsn, self.w, |o| {
            let len = want.min(o.len());
            let o = &mut o[..len];
            got = source(offset, o).min(o.len());
            got
        })?;
        Some((n, got))
    }

    fn awaited_networks(&self) -> Vec<u32> {
        let mut v: Vec<u32> =
            self.receivers.iter().filter(|r| r.outcome == ReceiverOutcome::Active).map(|r| r.network).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// Packets a file of `size` bytes takes (an empty file is one empty packet).
pub(crate) fn packets_for(size: u64, block: u16) -> u32 {
    size.div_ceil(u64::from(block)).max(1).min(u64::from(u32::MAX - 1)) as u32
}

/// Whole packets that can go now: all of them once the total is known,
/// else the full blocks available so far.
fn packets_available(available: u64, block: u16, total: Option<u32>) -> u32 {
    match total {
        Some(t) => t,
        None => (available / u64::from(block)).min(u64::from(u32::MAX - 1)) as u32,
    }
}

/// spec §16.3: the losses one receiver may report while a window of
/// `size` packets is open without the window shrinking: the tolerated
/// fraction plus two standard deviations of what independent loss at that
/// rate gives, so that random loss (whose reports may also fall into the
/// next window) is not read as congestion, while a bottleneck's burst is.
fn loss_allowance(tolerance: f64, size: f64) -> f64 {
    let mean = tolerance * size;
    (mean + 2.0 * (mean * (1.0 - tolerance)).sqrt()).max(1.0)
}
