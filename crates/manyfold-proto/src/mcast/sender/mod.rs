//! The multicast sender (spec §16): the stage machine (announce, data,
//! repair, ending; §16.1) and its sans-IO calls in quinn-proto's order:
//! `handle_datagram` / `handle_timeout` (input), `start` / `extend` /
//! `finish_source` / `abort` (commands), `poll_transmit` / `poll_event` /
//! `poll_timeout` (output). Everything that can wake it is one
//! [`SenderTimer`] table. Its parts, by spec section:
//!
//! - `config.rs`: parameters, events, errors, counters;
//! - `ceiling.rs`: the configured ceiling on the rate (§16.3);
//! - `control.rs`: packets to one receiver (confirmations, ENDs, refusals);
//! - `window.rs`: windows and paper 03's flow control (§16.3–§16.4);
//! - `members.rs`: the receiver table, liveness and limits (§16.6–§16.8);
//! - `repair.rs`: repair requests and the repair queue (§16.5, §16.9);
//! - `parity.rs`: parity first: proactive, automatic and topped-up parity
//!   per FEC block, and the shards (§16.9);
//! - `slow.rs`: receivers behind their network, rates, `min_rate` (§16.7);
//! - `grouping.rs`: receivers grouped by their observed losses (§16.12);
//! - `keys.rs`: a protected session's registrations (§19.7);
//! - `tests.rs`: unit tests of the parts, without the simulator.

mod ceiling;
mod config;
mod control;
mod grouping;
mod keys;
mod members;
mod parity;
mod repair;
mod slow;
#[cfg(test)]
mod tests;
mod window;

pub use config::{SenderConfig, SenderError, SenderEvent, SenderStats, WindowRecord};
pub use members::{ReceiverOutcome, ReceiverReport};
pub(crate) use window::packets_for;

use crate::congestion::pacer::Pacer;
use crate::mcast::bitmap::Bitmap;
use crate::mcast::fec;
use crate::mcast::secure::SEAL_OVERHEAD;
use crate::mcast::McTransmit;
use crate::timer::{TimerKind, Timers};
use crate::wire::mcast::{emit, emit_announcement, Announcement, McPacket, Phase, UNKNOWN_TOTAL};
use crate::wire::{ErrorCode, Flags, PacketType, HEADER_LEN};
use control::Control;
use keys::SenderSecurity;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use repair::RepairDest;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use window::Window;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Announcing,
    Data,
    Repair,
    Ending { sent: u8 },
    Done,
}

/// Everything that can wake the sender (spec §16.3–§16.8), in the order
/// `handle_timeout` takes their expiries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SenderTimer {
    /// The announce phase ends (`announce_wait`).
    AnnounceWait,
    /// The pacer lets the next packet go (spec §9.3).
    Pace,
    /// The earliest open window's timer (spec §16.3): it expired unconfirmed.
    WindowEnd,
    /// Send a window's last packet again if no network acked it yet.
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
    type Slots = [u64; 9];
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

/// ENDs a session's clean end sends (spec §16.1 step 4), `END_GAP` apart:
/// a receiver whose confirmation was lost ends on any of them.
const END_COPIES: u8 = 3;
const END_GAP: Duration = Duration::from_millis(20);

/// The sender of one multicast file session (spec §16), sans-IO: announce, windows of DATA, repairs, completion; fed the receivers' feedback, it says what to send to the group or to one receiver, and reports events.
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
    /// The open windows, oldest first (spec §16.3, windows in flight).
    windows: VecDeque<Window>,
    /// When the last window was confirmed or expired.
    last_resolved: Option<Instant>,
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
    /// Losses reported per FEC block, and the automatic parity (spec §16.9).
    plan: parity::ParityPlan,
    timers: Timers<SenderTimer>,
    /// Recently confirmed windows' delivery rate, bytes/s.
    rate: Option<f64>,
    pacer: Pacer,
    /// `max_rate`, if configured (spec §16.3, "A configured ceiling").
    ceiling: Option<ceiling::Ceiling>,
    /// ARTP adaptation: windows, awaited networks summed, ACKs at the start.
    artp_windows: u32,
    artp_networks: u64,
    artp_acks_at: u64,
    /// Smoothed time from a window's last packet to its first ACK.
    ack_time: Option<Duration>,
    /// The least time from a confirmed window's last packet to its
    /// confirmation, and the windows confirmed since it was taken (spec
    /// §16.3, "Queue delay").
    least_delay: Option<(Duration, u32)>,
    /// Slow start's rounds (spec §16.3, "Slow start"): the least delay of
    /// the previous round of `windows_in_flight` confirmed windows and the
    /// size of the window that had it; the current round's so far, with
    /// its windows counted.
    round_least: Option<(Duration, u32)>,
    this_round: Option<(Duration, u32, u32)>,
    /// The highest delivery rate a confirmed window has shown, bytes/s.
    peak_rate: f64,
    /// Some live receiver is behind its network: the data is paced to the
    /// windows' rate, which is the slowest admitted receiver's (spec §16.7).
    slowest_paced: bool,
    /// When the data phase began.
    data_started: Option<Instant>,
    /// The epoch of the latest regrouping (spec §16.12).
    group_epoch: u32,
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
        let security = cfg.security.clone().map(|config| Box::new(SenderSecurity::new(config, &cfg, now)));
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
            windows: VecDeque::new(),
            last_resolved: None,
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
            plan: parity::ParityPlan::default(),
            timers: SenderTimer::initial(now, &cfg),
            rate: None,
            pacer: Pacer::default(),
            ceiling: ceiling::Ceiling::new(cfg.max_rate, cfg.max_datagram),
            artp_windows: 0,
            artp_networks: 0,
            artp_acks_at: 0,
            ack_time: None,
            least_delay: None,
            round_least: None,
            this_round: None,
            peak_rate: 0.0,
            slowest_paced: false,
            data_started: None,
            group_epoch: 0,
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

    /// The session id every packet carries.
    pub fn session_id(&self) -> u32 {
        self.session
    }

    /// Payload bytes per DATA packet.
    pub fn block(&self) -> u16 {
        self.info.block
    }

    /// The counters so far.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// Every receiver that registered, with its outcome so far.
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

    /// Whether the session is over (finished, failed or aborted) and its ENDs sent.
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
                self.data_started = Some(now);
                self.events.push_back(SenderEvent::DataStarted);
                self.timers.set(SenderTimer::Announce, now);
            }
        }
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
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
        self.windows.clear();
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

    /// Takes one datagram from a receiver (REGISTER, ACK, NACK, REPAIR, STATUS); malformed ones are dropped and counted.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &[u8]) {
        let ptype = data.first().map(|b| b & 0x0f);
        if ptype == Some(PacketType::McData as u8) || ptype == Some(PacketType::McParity as u8) {
            // Our own multicast looped back, or another sender's: not
            // parsed (its checksum is not worth checking).
            return;
        }
        if ptype != Some(PacketType::McSealed as u8) {
            return self.on_packet(now, from, data, None);
        }
        self.on_sealed(now, from, data);
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
        if let McPacket::Register { network, auto_group, noise, .. } = p {
            // Registrations go in the clear: the receiver has no key yet.
            if source.is_none() {
                // spec §16.12: KLV: registered without an operator's id.
                self.on_register(now, from, client, network, auto_group, noise);
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
        // (group and unicast, spec §16.4): take each once, though the
        // copies of several come in turn (two sockets read in batches).
        // A copy is the same report: the same LWSN (highest SN), range
        // count and flags; a later ACK of the same window (a probe's, or
        // one that says it caught up) is not a copy.
        let key = match &p {
            McPacket::Ack { lwsn, missing, behind, .. } => {
                // The flags a receiver sets on an ACK: KLV alone (spec §16.7).
                let flags = if *behind { Flags::KLV } else { Flags::empty() };
                Some((true, lwsn ^ (missing.count() as u32).rotate_left(16) ^ u32::from(flags.0).rotate_right(8)))
            }
            McPacket::Nack { highest, missing, .. } => {
                Some((false, highest ^ (missing.count() as u32).rotate_left(16)))
            }
            _ => None,
        };
        if key.is_some() {
            let seen = &mut self.receivers[idx].last_feedback;
            if seen.contains(&key) {
                return;
            }
            seen.rotate_right(1);
            seen[0] = key;
        }
        // spec §16.7: KLV on an ACK: the receiver is behind its network.
        let (ack, behind) =
            if let McPacket::Ack { lwsn, behind, .. } = p { (Some(lwsn), behind) } else { (None, false) };
        // spec §16.12: the group its feedback names, and its signatures.
        match p {
            McPacket::Ack { network, .. } | McPacket::Nack { network, .. } => self.check_group(now, idx, network),
            McPacket::Status { network, error: None, signatures, .. } => {
                self.check_group(now, idx, network);
                self.on_signatures(idx, signatures);
            }
            _ => {}
        }
        // The losses an ACK reports count against the window it confirms
        // (spec §16.3), so they are taken first.
        self.on_report(now, idx, p);
        if let Some(lwsn) = ack {
            // A window ack counts for its network whatever this receiver's
            // state: the network it registered from (authenticated in a
            // protected session), not the one the header names.
            self.stats.acks += 1;
            let key = self.await_key(idx);
            self.on_window_ack(now, key, lwsn);
            self.on_receiver_ack(now, idx, lwsn, behind);
        }
    }

    /// A registered receiver's report (spec §16.4–§16.7), its window ACK
    /// already counted.
    fn on_report(&mut self, now: Instant, idx: usize, p: McPacket<'_>) {
        let outcome = self.receivers[idx].outcome;
        if outcome != ReceiverOutcome::Active {
            // A late report from a finished receiver: confirm again if asked.
            if let McPacket::Status { complete: true, .. } | McPacket::Status { error: Some(_), .. } = p {
                self.control.push_back(Control::StatusAck { idx });
            } else if let Some(code) = outcome.code().filter(|_| self.receivers[idx].left.is_none()) {
                // spec §16.7: a dropped receiver still speaking missed its
                // END (it went once, by unicast): tell it again.
                self.control.push_back(Control::EndOne { idx, code });
            }
            return;
        }
        match p {
            McPacket::Ack { missing, .. } => {
                self.note_losses(idx, missing.iter());
                self.note_block_losses(idx, missing.iter());
            }
            McPacket::Nack { missing, .. } => {
                self.stats.nacks += 1;
                if let Some(w) = self.windows.back_mut() {
                    w.feedback += 1;
                }
                self.note_losses(idx, missing.iter());
                self.note_block_losses(idx, missing.iter());
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

    /// The next deadline to call [`McastSender::handle_timeout`] at.
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

    /// Runs the timers due at `now`.
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
            SenderTimer::WindowEnd => self.expire_windows(now),
            SenderTimer::Probe => self.probe_windows(now),
            SenderTimer::Gather => self.release_repairs(),
            SenderTimer::Sweep => {
                self.timers.set(SenderTimer::Sweep, now + SWEEP_INTERVAL);
                self.drop_silent(now);
                if matches!(self.stage, Stage::Data | Stage::Repair) {
                    self.regroup(now);
                }
            }
            SenderTimer::Completion => {
                if self.stage == Stage::Repair {
                    self.drop_all(now, ReceiverOutcome::Incomplete);
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

    fn enter_repair(&mut self, now: Instant) {
        if self.stage == Stage::Data {
            self.stage = Stage::Repair;
            self.timers.set(SenderTimer::Completion, now + self.cfg.completion_timeout);
            self.timers.set(SenderTimer::Announce, now);
            self.events.push_back(SenderEvent::RepairStarted);
        }
    }

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
        let sec = self.security.as_mut()?;
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
                // spec §16.1 step 4: the last END handed out ends the session.
                if sent >= END_COPIES {
                    self.stage = Stage::Done;
                    if !self.events.iter().any(|e| matches!(e, SenderEvent::Failed(_))) {
                        self.events.push_back(SenderEvent::Finished);
                    }
                    return None;
                }
                if !self.timers.expired(SenderTimer::End, now) {
                    return None;
                }
                self.stage = Stage::Ending { sent: sent + 1 };
                self.timers.set(SenderTimer::End, now + END_GAP);
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
        // The flow control's pacing (spec §16.3, §9.3) and the configured
        // ceiling each say when the next packet may go; the later wins.
        let flow = self.pacing_rate().and_then(|rate| {
            self.pacer.on_sent(sent.size as u64);
            self.pacer.delay(now, rate, self.cfg.max_datagram as u64, sent.size as u64)
        });
        let ceiling = self.ceiling.as_mut().and_then(|c| c.on_sent(now, sent.size));
        if self.ceiling.is_some() || self.pacing_rate().is_some() {
            self.timers.set_or_cancel(SenderTimer::Pace, flow.max(ceiling));
        }
        Some(sent)
    }

    /// The flow control's pacing rate, bytes per second: recent windows'
    /// rate, with `pace`, while a live receiver is behind its network
    /// (spec §16.7: the windows then wait for it, so their rate is its own)
    /// or while repairing (spec §16.3); `None`: the window's packets go
    /// back to back (the ceiling aside).
    fn pacing_rate(&self) -> Option<f64> {
        let paced = self.cfg.pace || self.stage == Stage::Repair || self.slowest_paced;
        self.rate.filter(|_| paced).map(|r| r * 1.25)
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
}
