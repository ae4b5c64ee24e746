//! One table of timers per connection, indexed by an enum; the next
//! deadline is its minimum (STYLE §2; spec §4.7).

use crate::timer::TimerKind;

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
    /// Send the final ack again, in TIME-WAIT (spec §4.8).
    Reack,
    /// Give up: data outstanding and no ack for `stall_timeout` (spec §4.7).
    Stall,
    /// The next path challenge may go (spec §6.8).
    Path,
    /// A held partial datagram may go (spec §5.7).
    Flush,
}

const COUNT: usize = 14;

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
        Timer::Reack,
        Timer::Stall,
        Timer::Path,
        Timer::Flush,
    ];
}

impl TimerKind for Timer {
    type Slots = [u64; COUNT];
    const ALL: &'static [Timer] = &Timer::ALL;
    fn index(self) -> usize {
        self as usize
    }
}

/// The connection's table (the generic one of [`crate::timer`]).
pub(crate) type Timers = crate::timer::Timers<Timer>;
