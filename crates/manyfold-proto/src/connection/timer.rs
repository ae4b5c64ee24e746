//! One table of timers per connection, indexed by an enum; the next
//! deadline is its minimum (STYLE §2; spec §4.7).

use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The handshake's overall deadline (`connect_timeout`).
    Connect,
    /// Retransmission timeout (RFC 6298).
    Rto,
    /// Tail-loss probe (RFC 8985 §7).
    Tlp,
    /// The pacer lets the next packet go (spec §9.3).
    Pacing,
    /// RACK's time threshold for a packet not yet declared lost.
    Loss,
    /// Longest an acknowledgement waits (`max_ack_delay`).
    DelayedAck,
    /// Zero-window probe.
    Persist,
    /// Send a keep-alive after this much silence on our side.
    KeepAlive,
    /// Close after this much silence from the peer.
    Idle,
    /// End of TIME-WAIT.
    TimeWait,
    /// Give up: data outstanding and no ack for `stall_timeout` (spec §4.7).
    Stall,
    /// The next path challenge may go (spec §6.8).
    Path,
}

const COUNT: usize = 12;

impl Timer {
    pub const ALL: [Timer; COUNT] = [
        Timer::Connect,
        Timer::Rto,
        Timer::Tlp,
        Timer::Pacing,
        Timer::Loss,
        Timer::DelayedAck,
        Timer::Persist,
        Timer::KeepAlive,
        Timer::Idle,
        Timer::TimeWait,
        Timer::Stall,
        Timer::Path,
    ];
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Timers {
    at: [Option<Instant>; COUNT],
}

impl Timers {
    pub fn set(&mut self, t: Timer, when: Instant) {
        self.at[t as usize] = Some(when);
    }
    pub fn cancel(&mut self, t: Timer) {
        self.at[t as usize] = None;
    }
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.at[t as usize]
    }
    pub fn is_set(&self, t: Timer) -> bool {
        self.at[t as usize].is_some()
    }
    pub fn clear_all(&mut self) {
        self.at = [None; COUNT];
    }
    pub fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }
}
