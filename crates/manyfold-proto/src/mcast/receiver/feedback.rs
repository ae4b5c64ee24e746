//! The receiver's feedback (spec §16.4–§16.5, §16.7, §16.12): ACK and
//! NACK after a backoff in `[0, ARTP_max]`, suppressed by its network's
//! (or the group the sender assigned), held once when found overdue after
//! a stall, copied to a sender on another network; REPAIR every repair
//! interval; STATUS with the loss signatures, and the STATUS with which
//! an aborting receiver leaves.

use super::gaps::Seen;
use super::{McastReceiver, ReceiverTimer};
use crate::mcast::{network_of, uniform, McTransmit};
use crate::wire::mcast::{emit, emit_code, emit_ranges, emit_signatures};
use crate::wire::{ErrorCode, Flags, PacketType};
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

/// Fewest packets short of a neighbour's ACK that count as lagging (spec
/// §16.7): in small windows a quarter is a packet or two, which a
/// scheduling hiccup of a busy host is.
const LAG_FLOOR: u32 = 8;
/// Of the last 8 neighbours' ACKs, how many found a receiver lagging
/// before it is `behind` (spec §16.7).
const LAGS_TO_FALL_BEHIND: u32 = 6;
/// Windows in a row held in time that end a receiver's `behind` (spec §16.7).
const CAUGHT_UP: u8 = 8;
/// A feedback timer found expired this long after its deadline says the
/// process was not running (spec §16.4): a driver's timers fire a
/// millisecond late at most.
const STALL_LATE: Duration = Duration::from_millis(2);
/// How much longer feedback found that late waits, once, so that what
/// queued during the stall (a neighbour's ACK among it) is read first.
const STALL_GRACE: Duration = Duration::from_millis(1);
/// How long a receiver lets its network's acker speak for it without
/// hearing it (spec §16.4): then the acker left, or its ACKs no longer
/// reach us, and we ACK again ourselves. Above a queue's delay (the lab's
/// tbf holds 50 ms), and at the window timer's floor (100 ms).
const ACKER_QUIET: Duration = Duration::from_millis(100);
/// How long a receiver that let the acker ACK a window for it waits to
/// hear it do so (spec §16.4) before it ACKs itself: an acker that lost
/// the window's last packet, or is slower, never ACKs it in time, and the
/// window would expire at the sender (`Tout`, 100 ms at least, from the
/// window's last packet). A quarter of that floor; an acker heard later
/// than this only through a queue costs one more ACK. In the simulator,
/// 50 ms left 3 windows of 40 to expire at 100 receivers (1.17× the
/// bottleneck time, against 1.11× with 25 ms).
const ACKER_DUE: Duration = Duration::from_millis(25);
/// Neighbours a receiver counts (spec §16.4), and how long one it no
/// longer hears is counted (above `ACK_KEEPALIVE`).
const MAX_NEIGHBOURS: usize = 256;
const NEIGHBOUR_FORGET: Duration = Duration::from_secs(3);
/// A receiver that lets the acker speak for it still ACKs this often, so
/// that the sender does not take it for gone (its `receiver_timeout`, 5 s
/// by default, must be well above this).
const ACK_KEEPALIVE: Duration = Duration::from_secs(1);
/// The longest a gap waits for a reordered packet before it is reported
/// (spec §16.4): a quarter of the window timer's floor.
pub(super) const REORDER_CAP: Duration = Duration::from_millis(25);

impl McastReceiver {
    /// spec §16.4: a NACK after a backoff for a gap early in its window
    /// (once per window), none while nothing is missing; the ACK after a
    /// backoff once the window's last packet came.
    pub(super) fn schedule_feedback(&mut self, now: Instant, sn: u32, lwsn: u32, early_gap: bool) {
        if early_gap && !self.timers.is_set(ReceiverTimer::Nack) && self.nacked_window != Some(lwsn) {
            let at = now + self.backoff();
            self.timers.set(ReceiverTimer::Nack, at);
            self.stall_held[1] = false;
        }
        if self.gaps.nothing_pending() {
            self.timers.cancel(ReceiverTimer::Nack);
        }
        if sn == lwsn {
            self.schedule_ack(now, lwsn);
        }
    }

    /// spec §16.3–§16.4: the ACK of the window ending at `lwsn`, after a
    /// backoff. Windows in flight: an ACK still waiting out its backoff
    /// when the next window ends names the newer LWSN, which confirms
    /// both, and keeps its time.
    pub(super) fn schedule_ack(&mut self, now: Instant, lwsn: u32) {
        if !self.timers.is_set(ReceiverTimer::Ack) {
            let at = now + self.backoff();
            self.timers.set(ReceiverTimer::Ack, at);
            self.stall_held[0] = false;
            self.ack_lwsn = lwsn;
        } else {
            if lwsn > self.ack_lwsn {
                // A new window's ACK now waits on this timer too.
                self.ack_recheck = false;
            }
            self.ack_lwsn = self.ack_lwsn.max(lwsn);
        }
    }

    /// The network id its feedback carries and heeds (spec §16.4): the
    /// group the sender assigned (spec §16.12), else its configured one.
    pub(super) fn feedback_network(&self) -> u32 {
        self.assigned.map_or(self.cfg.network, |(_, group)| group)
    }

    /// The group the sender put this receiver in (spec §16.12), if any.
    pub fn group(&self) -> Option<u32> {
        self.assigned.map(|(_, group)| group)
    }

    /// spec §16.12: REGISTER+ACK with KLV assigns group `group` at
    /// `epoch`; an older epoch (reordered) is ignored. Only a receiver
    /// that registered without an operator's id takes it. Its lag count
    /// stands: it measured its own pace against the data, which the move
    /// does not change.
    pub(super) fn on_group(&mut self, epoch: u32, group: u32) {
        if !self.cfg.auto_group {
            return;
        }
        let newer = self.assigned.is_none_or(|(e, _)| epoch.wrapping_sub(e) as i32 > 0);
        if newer {
            if self.feedback_network() != group {
                self.stats.regrouped += 1;
                // Another network: its acker and receivers are yet to be heard.
                self.acker = None;
                self.acker_owes = None;
                self.neighbours.clear();
            }
            self.assigned = Some((epoch, group));
        }
    }

    /// spec §16.4, a busy host: an ACK or NACK whose backoff ran out more
    /// than `STALL_LATE` ago was due while the process was not running,
    /// and what arrived meanwhile (a neighbour's ACK that suppresses it)
    /// may still wait to be read: it goes `STALL_GRACE` later, once.
    pub(super) fn hold_after_stall(&mut self, now: Instant) {
        for (i, t) in [ReceiverTimer::Ack, ReceiverTimer::Nack].into_iter().enumerate() {
            let late = self.timers.get(t).is_some_and(|d| now.saturating_duration_since(d) > STALL_LATE);
            if late && !self.stall_held[i] {
                self.stall_held[i] = true;
                self.timers.set(t, now + STALL_GRACE);
                self.stats.held_after_stall += 1;
            }
        }
    }

    /// spec §16.4: what a new first-sent packet said of the path's
    /// reordering. A gap it filled widens the reorder window to a quarter
    /// more than that gap waited (at most `REORDER_CAP`); each ACK sent
    /// narrows it by a sixteenth, down to the configured floor.
    pub(super) fn note_reordering(&mut self, seen: Seen) {
        if let Some(d) = seen.filled_after {
            self.reorder = self.reorder.max((d + d / 4).min(REORDER_CAP));
            self.stats.reordered += 1;
            self.stats.reorder_delay_max = self.stats.reorder_delay_max.max(d);
        }
        if seen.late_after_report {
            self.stats.late_after_report += 1;
        }
    }

    /// Counts `client` among the receivers heard on our network.
    fn note_neighbour(&mut self, now: Instant, client: u32) {
        if let Some(n) = self.neighbours.iter_mut().find(|(c, _)| *c == client) {
            n.1 = now;
            return;
        }
        self.neighbours.retain(|&(_, t)| now.saturating_duration_since(t) < NEIGHBOUR_FORGET);
        if self.neighbours.len() < MAX_NEIGHBOURS {
            self.neighbours.push((client, now));
        }
    }

    /// A deferring receiver sends one ACK in this many (spec §16.4): 2n,
    /// n the receivers heard on its network, counting itself.
    fn defer_period(&self) -> u32 {
        2 * (self.neighbours.len() as u32 + 1)
    }

    /// A feedback delay drawn uniformly in `[0, ARTP_max]` (spec §16.4).
    pub(super) fn backoff(&mut self) -> Duration {
        let max = self.artp_max();
        uniform(&mut self.rng, max)
    }

    pub(super) fn artp_max(&self) -> Duration {
        Duration::from_micros(self.info.as_ref().map_or(600, |i| u64::from(i.artp_max_us)))
    }

    pub(super) fn repair_interval(&self) -> Duration {
        Duration::from_millis(self.info.as_ref().map_or(50, |i| u64::from(i.repair_interval_ms)).max(1))
    }

    /// spec §16.4: an ACK heard from this network suppresses ours for the
    /// same window, or an earlier one (ACKs are cumulative, §16.3); the
    /// gaps it names are reported. Its sender, if its client id is the
    /// lowest heard and below ours (and it is not behind), is the
    /// network's acker.
    pub(super) fn on_heard_ack(
        &mut self,
        now: Instant,
        client: u32,
        behind: bool,
        lwsn: u32,
        missing: impl Iterator<Item = Range<u32>>,
    ) {
        if client != self.client {
            self.note_neighbour(now, client);
        }
        let from_acker = self.acker.is_some_and(|(a, _)| a == client);
        if behind && from_acker {
            // Our acker fell behind the network (spec §16.7): the sender
            // awaits it on its own now, so it no longer speaks for us.
            self.acker = None;
        }
        // The acker's ACK of the owed window or a later one, not behind
        // (the sender counts it for the network, §16.7), settles the debt.
        // Only the acker's: a neighbour's ACK confirms the window as well,
        // but the acker may still be slower than we are, and our ACKs are
        // what shows it (in the simulator, settling on any ACK let an
        // acker at half its neighbours' rate go unseen: 1.65× the
        // bottleneck time against 1.12×).
        if from_acker && !behind && self.acker_owes.is_some_and(|(owed, _)| lwsn >= owed) {
            self.acker_owes = None;
        }
        if !behind && client < self.client {
            let keep = self.acker.is_some_and(|(a, heard)| a < client && acker_heard_within(now, heard));
            if !keep {
                self.acker = Some((client, now));
            }
        }
        self.check_lag(lwsn);
        if !self.speaks_for_itself() && self.timers.is_set(ReceiverTimer::Ack) && self.ack_lwsn <= lwsn {
            self.timers.cancel(ReceiverTimer::Ack);
            // A look at a window already let go is no ACK suppressed.
            if !std::mem::take(&mut self.ack_recheck) {
                self.stats.acks_suppressed += 1;
            }
        }
        self.forget_reported(missing);
    }

    /// spec §16.7, slow receivers: a neighbour's ACK of `lwsn` came while
    /// this receiver was more than a quarter window (and `LAG_FLOOR`
    /// packets) short of it: a bottleneck of its own, not a lost packet or
    /// two. Lagging at `LAGS_TO_FALL_BEHIND` of the last 8 such ACKs makes
    /// it `behind` (a bottleneck lags at every window, a busy host's
    /// stalls now and then): from then on its ACKs say so (KLV) and no
    /// neighbour's ACK suppresses them, so that the sender sees its pace.
    /// `CAUGHT_UP` windows in a row that it held when its neighbour's ACK
    /// came end that (the sender now paced to it, or the stall over): its
    /// ACKs drop KLV and are suppressed again.
    fn check_lag(&mut self, lwsn: u32) {
        let Some(highest) = self.gaps.latest_sn() else { return };
        let short = lwsn.saturating_sub(highest);
        let lagged = short > (self.last_w / 4).max(LAG_FLOOR);
        self.lag_history = (self.lag_history << 1) | u8::from(lagged);
        if lagged {
            self.stats.lagged += 1;
            self.caught_up_run = 0;
            self.behind |= self.lag_history.count_ones() >= LAGS_TO_FALL_BEHIND;
        } else if highest >= lwsn && self.behind {
            self.caught_up_run = self.caught_up_run.saturating_add(1);
            if self.caught_up_run >= CAUGHT_UP {
                self.behind = false;
                self.tell_caught_up = true;
                self.caught_up_run = 0;
                self.lag_history = 0;
            }
        }
    }

    /// spec §16.7: its ACKs go whatever it hears (no neighbour's ACK
    /// suppresses them, no acker speaks for it): while it is behind its
    /// network, and for its first ACK after it caught up, the one that
    /// tells the sender to stop awaiting it on its own.
    fn speaks_for_itself(&self) -> bool {
        self.behind || self.tell_caught_up
    }

    /// Whether this receiver reports itself as behind its network.
    pub fn is_behind(&self) -> bool {
        self.behind
    }

    /// spec §16.4: one NACK per window per network: what this receiver
    /// still misses rides on an ACK, or on the network's NACK of a later
    /// window.
    pub(super) fn on_heard_nack(&mut self, missing: impl Iterator<Item = Range<u32>>) {
        self.forget_reported(missing);
        if self.timers.take(ReceiverTimer::Nack).is_some() {
            self.stats.nacks_suppressed += 1;
        }
        self.nacked_window = self.gaps.latest_lwsn();
    }

    /// Gaps another receiver of this network reported (in its ACK or
    /// NACK) are known to the sender: not reported again.
    pub(super) fn forget_reported(&mut self, ranges: impl Iterator<Item = Range<u32>>) {
        for r in ranges {
            self.gaps.forget(r);
        }
    }

    /// spec §16.4: feedback goes to the group, where this network's other
    /// receivers hear it; a sender on another network may not (multicast
    /// routing is often one way, sender to receivers), so it also gets a
    /// unicast copy, which it counts once.
    pub(super) fn copy_to_remote_sender(&mut self, sender: SocketAddr, datagram: &[u8]) {
        if network_of(sender) != self.cfg.network {
            self.feedback_copy = Some(datagram.to_vec());
        }
    }

    /// spec §16.4: the window's ACK, to the group, with the gaps not yet
    /// reported (so no NACK is needed).
    pub(super) fn send_ack(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        session: u32,
        sender: SocketAddr,
    ) -> Option<McTransmit> {
        self.timers.cancel(ReceiverTimer::Ack);
        self.ack_recheck = false;
        let ranges = self.gaps.take_pending(now, self.reorder);
        self.reorder = (self.reorder - self.reorder / 16).max(self.cfg.reorder_window);
        // spec §16.4: with nothing to report, a receiver that is not
        // behind lets its network's acker speak for it while it hears it,
        // and ACKs once a second itself at least.
        let acker_heard = self.acker.is_some_and(|(_, heard)| acker_heard_within(now, heard));
        let keepalive_due = self.last_ack_sent.is_none_or(|t| now.saturating_duration_since(t) >= ACK_KEEPALIVE);
        // An acker that has not ACKed a window we let it ACK within
        // `ACKER_DUE` lost its last packet or is slower than we are: we
        // ACK ourselves, and our ACKs show it its lag.
        let acker_late = self.acker_owes.is_some_and(|(_, since)| now.saturating_duration_since(since) >= ACKER_DUE);
        let may_defer =
            self.cfg.defer_to_acker && ranges.is_empty() && !self.speaks_for_itself() && acker_heard && !keepalive_due;
        if may_defer && acker_late {
            self.stats.acker_overtaken += 1;
        }
        if may_defer && !acker_late {
            // One ACK in 2n goes anyway (n: the receivers heard here),
            // so that an acker stalled for a moment (a busy host) does not
            // leave the network's windows to expire: about one such ACK
            // every two windows, whatever n, and cumulative, it confirms
            // the windows before it too (spec §16.3).
            if self.deferred_run + 1 < self.defer_period() {
                self.deferred_run += 1;
                self.stats.acks_deferred += 1;
                // Looked at again when the acker's time is up, unless an
                // ACK heard (the acker's or a neighbour's) covers the
                // window first and cancels the timer.
                let (_, since) = *self.acker_owes.get_or_insert((self.ack_lwsn, now));
                self.timers.set(ReceiverTimer::Ack, since + ACKER_DUE);
                self.ack_recheck = true;
                self.stall_held[0] = false;
                return None;
            }
        }
        // Our ACK confirms the owed window (its LWSN is at least that).
        self.acker_owes = None;
        // Each receiver starts its count elsewhere, so that they take turns.
        self.deferred_run = self.client % self.defer_period();
        self.last_ack_sent = Some(now);
        self.stats.acks_sent += 1;
        self.timers.cancel(ReceiverTimer::Nack);
        let (lwsn, network, client) = (self.ack_lwsn, self.feedback_network(), self.client);
        // spec §16.7: KLV on an ACK: this receiver is behind its network.
        let flags = if self.behind { Flags::KLV } else { Flags::empty() };
        let n =
            emit(buf, PacketType::McAck, flags, session, lwsn, network, client, |o| emit_ranges(o, ranges.iter()).0)?;
        self.tell_caught_up = false;
        self.copy_to_remote_sender(sender, &buf[..n]);
        Some(McTransmit { destination: self.group, size: n })
    }

    /// spec §16.4: the NACK of the gaps seen, to the group.
    pub(super) fn send_nack(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        session: u32,
        sender: SocketAddr,
    ) -> Option<McTransmit> {
        self.timers.cancel(ReceiverTimer::Nack);
        let ranges = self.gaps.take_pending(now, self.reorder);
        if ranges.is_empty() {
            // Every gap is still young (it may be reordering): look again
            // once the oldest is old enough.
            if let Some(at) = self.gaps.first_ready(now, self.reorder) {
                self.timers.set(ReceiverTimer::Nack, at);
            }
            return None;
        }
        self.nacked_window = self.gaps.latest_lwsn();
        self.stats.nacks_sent += 1;
        let (highest, network, client) = (self.gaps.highest(), self.feedback_network(), self.client);
        let n = emit(buf, PacketType::McNack, Flags::empty(), session, highest, network, client, |o| {
            emit_ranges(o, ranges.iter()).0
        })?;
        self.copy_to_remote_sender(sender, &buf[..n]);
        Some(McTransmit { destination: self.group, size: n })
    }

    pub(super) fn send_repair(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        session: u32,
        sender: SocketAddr,
    ) -> Option<McTransmit> {
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
        // spec §16.9: per FEC block, only the deficit beyond the parity held.
        let ranges = self.repair_ranges(total);
        let n = emit(
            buf,
            PacketType::McRepair,
            Flags::empty(),
            session,
            self.repair_round,
            self.feedback_network(),
            self.client,
            |o| emit_ranges(o, ranges.iter().cloned()).0,
        )?;
        Some(McTransmit { destination: sender, size: n })
    }

    /// spec §16.7: the STATUS with which `abort` leaves, its code in ERR.
    pub(super) fn send_leave(&mut self, buf: &mut [u8], code: ErrorCode) -> Option<McTransmit> {
        let (session, sender) = self.target()?;
        let held = self.have.ones().min(u64::from(u32::MAX)) as u32;
        self.stats.status_sent += 1;
        let n =
            emit(buf, PacketType::McStatus, Flags::ERR, session, held, self.feedback_network(), self.client, |o| {
                emit_code(o, code)
            })?;
        Some(McTransmit { destination: sender, size: n })
    }

    pub(super) fn send_status(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        session: u32,
        sender: SocketAddr,
    ) -> Option<McTransmit> {
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
        let (network, signatures) = (self.feedback_network(), &self.signatures);
        let n = emit(buf, PacketType::McStatus, flags, session, held, network, self.client, |o| match code {
            Some(c) => emit_code(o, c),
            // spec §16.12: the loss signatures ride on a plain STATUS.
            None => emit_signatures(o, signatures.complete()),
        })?;
        Some(McTransmit { destination: sender, size: n })
    }
}

/// Whether an acker last heard at `heard` still speaks for us (spec §16.4).
fn acker_heard_within(now: Instant, heard: Instant) -> bool {
    now.saturating_duration_since(heard) < ACKER_QUIET
}
