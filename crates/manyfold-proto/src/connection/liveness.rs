//! A connection's liveness and its end (spec §4.7, §4.8, §6.7): the stall
//! timeout, ICMP errors quoting our packets, whether the process may exit,
//! and the final ack repeated by an exiting endpoint.

use std::time::{Duration, Instant};

use super::timer::Timer;
use super::{CloseReason, Connection, State, UnreachableKind, FINAL_ACK_REPEATS, LONE_FIN_MAX_RTO};
use crate::seq::Seq;
use crate::wire::ErrorCode;

impl Connection {
    /// A sequenced packet went out: if nothing was waiting for an ack
    /// before, a run of unanswered data starts now (spec §4.7).
    pub(super) fn arm_stall(&mut self, now: Instant) {
        // The handshake (the echo included) is connect_timeout's to bound.
        if self.stalled_since.is_some()
            || matches!(self.state, State::SynSent | State::SynReceived)
            || self.awaiting_echo_ack()
        {
            return;
        }
        self.stalled_since = Some(now);
        if let Some(limit) = self.config.stall_timeout {
            self.timers.set(Timer::Stall, now + limit);
        }
    }

    /// An ack from the peer, new or not, proves it alive (spec §4.7).
    pub(super) fn on_peer_answer(&mut self, now: Instant) {
        self.stalled_since = None;
        self.timers.cancel(Timer::Stall);
        if !self.sent.is_empty() {
            self.arm_stall(now);
        }
    }

    /// spec §4.7: data outstanding for `stall_timeout` and no ack at all.
    pub(super) fn on_stall(&mut self) {
        if self.stalled_since.is_none() || self.sent.is_empty() {
            return;
        }
        // In case only our direction of the path failed, tell the peer.
        if self.remote_id.is_some() {
            self.rst_pending = Some(ErrorCode::IDLE_TIMEOUT);
        }
        self.enter_closed(CloseReason::StallTimeout);
    }

    /// An ICMP error quoting a packet of this connection (spec §6.7): the
    /// endpoint matched the quote's ids; `seq` is its sequence number.
    /// Returns false when the quote cannot be a packet we sent.
    pub fn handle_icmp(&mut self, now: Instant, kind: UnreachableKind, seq: u32) -> bool {
        let s = Seq::from_wire(seq, self.sent.next_seq());
        if s < self.isn || s > self.sent.next_seq() {
            return false;
        }
        self.stats.icmp_errors += 1;
        let refusal = match kind {
            UnreachableKind::Port => CloseReason::Refused,
            UnreachableKind::Host => CloseReason::Unreachable(UnreachableKind::Host),
        };
        let all_acked = self.sent.outstanding_data() == 0 && self.streams.all_acked();
        match self.state {
            State::Closed | State::TimeWait => {}
            // Our SYN or cookie echo met no listener: refused at once, as
            // TCP's connect fails on a RST.
            State::SynSent | State::SynReceived => self.enter_closed(refusal),
            _ if self.awaiting_echo_ack() => self.enter_closed(refusal),
            // Only our FIN is unacknowledged, after the peer's own FIN: the
            // peer finished and exited before our FIN's ack (its last)
            // reached us. Nothing of ours is lost.
            State::LastAck | State::Closing if all_acked && kind == UnreachableKind::Port => {
                self.enter_closed(CloseReason::Graceful)
            }
            _ => {
                // One error may be a stray; repeated ones with nothing heard
                // for an RTO mean the peer is gone.
                self.unreachables += 1;
                if self.unreachables >= 2 && now >= self.last_heard + self.rtt.rto(0) {
                    self.enter_closed(CloseReason::Unreachable(kind));
                } else if self.unreachables == 1
                    && self.sent.is_empty()
                    && kind == UnreachableKind::Port
                    && self.config.keepalive_interval.is_some()
                {
                    // Idle: nothing of ours would draw the confirming
                    // error before the next keep-alive, a whole interval
                    // away. A closed port (the peer's process died) is
                    // asked again one RTO from now; a router's host
                    // unreachable may be a passing failure, and keeps the
                    // interval.
                    let confirm = now + self.rtt.rto(0);
                    if self.timers.get(Timer::KeepAlive).is_none_or(|t| t > confirm) {
                        self.timers.set(Timer::KeepAlive, confirm);
                    }
                }
            }
        }
        true
    }

    /// Whether a process may exit without stranding the peer (spec §4.8):
    /// CLOSED with nothing left to send, in FIN-WAIT-2 if `half_closed`
    /// (everything of ours acknowledged; the peer's later FIN meets ICMP and
    /// ends gracefully), or in TIME-WAIT and quiet for
    /// `linger` (four RTOs, at least 250 ms, at most one second and
    /// `time_wait`) since the last repeated FIN, so that a peer whose last
    /// ack was lost has had time to ask again: it repeats a lone FIN at
    /// least every `LONE_FIN_MAX_RTO` (250 ms) whatever its RTO, so a
    /// second holds four repeats even where a lossy path's RTT samples
    /// have blown our RTO up to a second or more.
    pub fn is_finished(&self, now: Instant, half_closed: bool) -> bool {
        match self.state {
            State::Closed => self.rst_pending.is_none(),
            State::FinWait2 => half_closed,
            // The final ack's repeats go first (an exiting endpoint's,
            // spec §4.8): a peer whose FIN rode with data repeats it only
            // after its whole RTO, and hears from us only through them.
            State::TimeWait if self.reacks_left > 0 => false,
            State::TimeWait => self.lingered(now),
            _ => false,
        }
    }

    /// In TIME-WAIT, whether `linger` has passed since it was entered or a
    /// repeated FIN was last acked (spec §4.8): a peer whose last ack was
    /// lost would have asked again by now.
    fn lingered(&self, now: Instant) -> bool {
        self.quiet_for(now) >= self.linger()
    }

    /// In TIME-WAIT, how long since it was entered or last re-acked a FIN
    /// (its timer was then set to `time_wait` from that moment); forever
    /// without the timer.
    fn quiet_for(&self, now: Instant) -> Duration {
        match self.timers.get(Timer::TimeWait) {
            Some(end) => (now + self.config.time_wait).saturating_duration_since(end),
            None => Duration::MAX,
        }
    }

    /// Four RTOs, at least 250 ms, at most a second and `time_wait`.
    fn linger(&self) -> Duration {
        (self.rtt.rto(0) * 4).clamp(LONE_FIN_MAX_RTO, LONE_FIN_MAX_RTO * 4).min(self.config.time_wait)
    }

    /// The process means to exit (spec §4.8): from TIME-WAIT, now or when
    /// it is entered, the final ack is sent again, unasked; not by a
    /// TIME-WAIT already quiet for twice the longer of its linger and its
    /// RTO, whose peer has had the ack (or would have asked again). A
    /// client that ran 10,000 short sessions holds them all in TIME-WAIT
    /// at its exit: it re-acked every one twice, and the server answered
    /// each repeat with a reset (four datagrams per session more than the
    /// session's five).
    pub fn prepare_exit(&mut self, now: Instant) {
        if !self.exiting {
            self.exiting = true;
            if self.state == State::TimeWait && !self.quiet_past_any_repeat(now) {
                self.repeat_final_ack(now);
            }
        }
    }

    /// In TIME-WAIT, quiet for twice the longer of the linger and the RTO
    /// since it was entered or last re-acked a FIN (spec §4.8): a peer
    /// whose FIN rode with data repeats it only after its whole RTO, which
    /// can exceed the linger's one-second cap.
    fn quiet_past_any_repeat(&self, now: Instant) -> bool {
        self.quiet_for(now) >= self.linger().max(self.rtt.rto(0)) * 2
    }

    /// spec §4.8: the final ack goes again a quarter RTT later (not in the
    /// same burst as the first) and a third time an RTO after that.
    pub(super) fn repeat_final_ack(&mut self, now: Instant) {
        self.reacks_left = FINAL_ACK_REPEATS;
        let gap = (self.rtt.srtt() / 4).max(Duration::from_millis(1));
        self.timers.set(Timer::Reack, now + gap);
    }
}
