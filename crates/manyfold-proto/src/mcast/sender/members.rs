//! The sender's receivers (spec §16.1, §16.6–§16.8): admission to the
//! table, registration, liveness, the loss and repair-pass limits, and how
//! each one's part ends; a receiver leaving stops being awaited at once.

use super::config::SenderEvent;
use super::slow::AwaitKey;
use super::{Control, McastSender, Stage};
use crate::mcast::signature::{Signature, SIG_KEPT};
use crate::secure::KEY_LEN;
use crate::wire::ErrorCode;
use std::net::SocketAddr;
use std::time::Instant;

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
    /// Took data slower than `min_rate` (spec §16.7).
    TooSlow,
}

impl ReceiverOutcome {
    pub(super) fn code(self) -> Option<ErrorCode> {
        match self {
            ReceiverOutcome::Active | ReceiverOutcome::Completed => None,
            ReceiverOutcome::HashMismatch => Some(ErrorCode::HASH_MISMATCH),
            ReceiverOutcome::Incomplete => Some(ErrorCode::INCOMPLETE),
            ReceiverOutcome::Unresponsive => Some(ErrorCode::UNRESPONSIVE),
            ReceiverOutcome::TooManyPasses => Some(ErrorCode::TOO_MANY_PASSES),
            ReceiverOutcome::TooLossy => Some(ErrorCode::TOO_LOSSY),
            ReceiverOutcome::TooSlow => Some(ErrorCode::TOO_SLOW),
        }
    }
}

/// What the sender knows of one receiver.
#[derive(Debug, Clone)]
pub struct ReceiverReport {
    /// Its client id.
    pub client: u32,
    /// Its address.
    pub addr: SocketAddr,
    /// Its network id (spec §16.4).
    pub network: u32,
    /// The SN it was told it receives from.
    pub joined_at: u32,
    /// Packets it last said it holds.
    pub held: u32,
    /// Losses it reported (NACK and ACK ranges).
    pub reported_lost: u64,
    /// Repair rounds it asked for (spec §16.7).
    pub repair_passes: u32,
    /// How its part ended, or `Active` while it lasts.
    pub outcome: ReceiverOutcome,
    /// The code it left the session with, if it ended its part itself
    /// (its outcome is then `Incomplete`): `INTERRUPTED` when its process
    /// was interrupted (spec §16.7).
    pub left: Option<ErrorCode>,
    /// The static key it proved, in a protected session whose sender
    /// names its known peers (spec §19.7).
    pub peer_key: Option<[u8; KEY_LEN]>,
    /// It reported itself behind its network (spec §16.7): awaited on its own.
    pub behind: bool,
    /// It registered without an operator's network id (KLV on REGISTER,
    /// spec §16.12): the sender groups it by its losses.
    pub regroupable: bool,
    /// The group the sender put it in (spec §16.12); `None`: its network's.
    pub group: Option<u32>,
    /// Its last STATUS's loss signatures (spec §16.12).
    pub(super) signatures: [Option<Signature>; SIG_KEPT],
    /// When its group was last told.
    pub(super) group_told_at: Option<Instant>,
    /// The rate it took data at over its last second of ACKs, bytes/s.
    pub rate: Option<f64>,
    /// Its ACK that began the current rate sample: (when, LWSN).
    pub(super) rate_anchor: Option<(Instant, u32)>,
    /// Its source number under the group key (0: a plain session).
    pub(super) source: u32,
    /// Its registration's Noise message 1 and our answer, sent again for
    /// a repeated REGISTER.
    pub(super) registration: Option<Box<(Vec<u8>, Vec<u8>)>>,
    /// When that answer last went out.
    pub(super) answered_at: Option<Instant>,
    pub(super) last_heard: Instant,
    /// The last ACK (true, LWSN) or NACK (false, digest) taken from it.
    /// Kept for the last `FEEDBACK_KEPT` of them: the group's copy and
    /// the unicast one come through two sockets, and a driver reading
    /// them in batches may take several of each in turn.
    pub(super) last_feedback: [Option<(bool, u32)>; FEEDBACK_KEPT],
    /// Before this, a repair request only repeats the last pass.
    pub(super) next_pass_at: Option<Instant>,
}

/// ACKs and NACKs remembered per receiver to take each copy once (spec §16.4).
pub(super) const FEEDBACK_KEPT: usize = 8;

impl McastSender {
    pub(super) fn live(&self) -> usize {
        self.receivers.iter().filter(|r| r.outcome == ReceiverOutcome::Active).count()
    }

    pub(super) fn on_register(
        &mut self,
        now: Instant,
        from: SocketAddr,
        client: u32,
        network: u32,
        regroupable: bool,
        noise: Option<&[u8]>,
    ) {
        if client == 0 {
            self.stats.dropped_malformed += 1;
            return;
        }
        match (self.security.is_some(), noise) {
            (false, None) => {}
            (true, Some(m1)) => return self.on_keyed_register(now, from, client, network, regroupable, m1),
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
            let grouped = r.group.is_some();
            self.control.push_back(Control::RegisterAck { idx });
            if grouped {
                self.control.push_back(Control::Group { idx });
            }
            return;
        }
        if let Some(idx) = self.admit(now, from, client, network, regroupable) {
            self.control.push_back(Control::RegisterAck { idx });
        }
    }

    /// Whether a new receiver would be refused (spec §16.8).
    pub(super) fn full(&self) -> bool {
        self.receivers.len() >= self.cfg.max_receivers || matches!(self.stage, Stage::Ending { .. } | Stage::Done)
    }

    /// Adds a receiver to the table; refuses it if the table is full or
    /// the session ending.
    pub(super) fn admit(
        &mut self,
        now: Instant,
        from: SocketAddr,
        client: u32,
        network: u32,
        regroupable: bool,
    ) -> Option<usize> {
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
            behind: false,
            regroupable,
            group: None,
            signatures: [None; SIG_KEPT],
            group_told_at: None,
            rate: None,
            rate_anchor: None,
            source: 0,
            registration: None,
            answered_at: None,
            last_heard: now,
            last_feedback: [None; FEEDBACK_KEPT],
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
    pub(super) fn joining_sn(&self) -> u32 {
        if self.stage == Stage::Announcing {
            0
        } else {
            self.next_sn
        }
    }

    pub(super) fn check_loss(&mut self, now: Instant, idx: usize) {
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
    pub(super) fn finish_receiver(&mut self, now: Instant, idx: usize, outcome: ReceiverOutcome) {
        let r = &mut self.receivers[idx];
        if r.outcome != ReceiverOutcome::Active {
            return;
        }
        r.outcome = outcome;
        self.events.push_back(SenderEvent::ReceiverDone { client: r.client, outcome });
        // spec §16.7: the data stays paced only while a live receiver is behind.
        self.slowest_paced = self.receivers.iter().any(|r| r.behind && r.outcome == ReceiverOutcome::Active);
        let network = self.await_key(idx);
        let still = (0..self.receivers.len())
            .any(|i| self.receivers[i].outcome == ReceiverOutcome::Active && self.await_key(i) == network);
        if !still {
            for w in &mut self.windows {
                w.awaited.retain(|&n| n != network);
            }
            self.resolve_ready(now);
        }
        // The last one done: the session ends now, not at the next timer
        // (data would go on to nobody, a finished session would linger).
        self.check_end();
    }

    /// A receiver ended its part with `code`: it is no longer awaited.
    pub(super) fn receiver_left(&mut self, now: Instant, idx: usize, code: ErrorCode) {
        let r = &mut self.receivers[idx];
        r.left = Some(code);
        let (client, addr) = (r.client, r.addr);
        self.events.push_back(SenderEvent::ReceiverLeft { client, addr, code });
        self.finish_receiver(now, idx, ReceiverOutcome::Incomplete);
    }

    /// spec §16.7: receivers silent for `receiver_timeout` are dropped.
    pub(super) fn drop_silent(&mut self, now: Instant) {
        for idx in 0..self.receivers.len() {
            let r = &self.receivers[idx];
            if r.outcome == ReceiverOutcome::Active
                && now.saturating_duration_since(r.last_heard) > self.cfg.receiver_timeout
            {
                self.drop_receiver(now, idx, ReceiverOutcome::Unresponsive);
            }
        }
    }

    /// Drops every live receiver with `outcome`.
    pub(super) fn drop_all(&mut self, now: Instant, outcome: ReceiverOutcome) {
        for idx in 0..self.receivers.len() {
            if self.receivers[idx].outcome == ReceiverOutcome::Active {
                self.drop_receiver(now, idx, outcome);
            }
        }
    }

    pub(super) fn drop_receiver(&mut self, now: Instant, idx: usize, outcome: ReceiverOutcome) {
        self.finish_receiver(now, idx, outcome);
        if let Some(code) = outcome.code() {
            self.control.push_back(Control::EndOne { idx, code });
        }
    }

    pub(super) fn awaited_networks(&self) -> Vec<AwaitKey> {
        let mut v: Vec<AwaitKey> = (0..self.receivers.len())
            .filter(|&i| self.receivers[i].outcome == ReceiverOutcome::Active)
            .map(|i| self.await_key(i))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}
