//! What a connection tells the application: states, events, errors, stats
//! (spec §4, §8).

use std::time::Duration;

use crate::wire::ErrorCode;

/// Connection states (spec §4.1). LISTEN is a property of the endpoint
/// ([`crate::Endpoint::set_listening`]): a listener holds no per-peer state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Our SYN is sent; waiting for the SYN-ACK (spec §4.1).
    SynSent,
    /// A listener's half-open connection, the cookie echo received (spec §4.1).
    SynReceived,
    /// Open both ways.
    Established,
    /// Our FIN is sent, not yet acknowledged (spec §4.4).
    FinWait1,
    /// Our FIN is acknowledged; the peer's has not come.
    FinWait2,
    /// Both FINs crossed; ours is not yet acknowledged.
    Closing,
    /// Both sides finished; we linger to repeat a lost last ack (spec §4.4).
    TimeWait,
    /// The peer's FIN came; we may still send.
    CloseWait,
    /// The peer finished first and our FIN is not yet acknowledged.
    LastAck,
    /// Over; `close_reason` says how.
    Closed,
}

impl State {
    /// Upper-case name as in the spec's state diagram (used by traces).
    pub fn name(self) -> &'static str {
        match self {
            State::SynSent => "SYN-SENT",
            State::SynReceived => "SYN-RECEIVED",
            State::Established => "ESTABLISHED",
            State::FinWait1 => "FIN-WAIT-1",
            State::FinWait2 => "FIN-WAIT-2",
            State::Closing => "CLOSING",
            State::TimeWait => "TIME-WAIT",
            State::CloseWait => "CLOSE-WAIT",
            State::LastAck => "LAST-ACK",
            State::Closed => "CLOSED",
        }
    }
}

/// Why a connection ended (spec §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// Both sides finished and every byte was acknowledged.
    Graceful,
    /// The peer reset the connection, with its error code if it gave one.
    PeerReset(Option<ErrorCode>),
    /// The peer refused the connection (nothing listening, or backlog full).
    Refused,
    /// The handshake got no answer within `connect_timeout`.
    ConnectTimeout,
    /// Nothing was received for `idle_timeout`.
    IdleTimeout,
    /// `max_retransmissions` RTO expiries in a row without progress.
    RetransmitTimeout,
    /// The peer's receive window stayed at zero for `zero_window_timeout`
    /// while we had data to send (spec §7.3).
    ZeroWindowTimeout,
    /// One side protects its packets and the other does not (spec §19.2):
    /// nothing is sent in the clear to a peer that asked for protection.
    ProtectionMismatch,
    /// The Noise handshake failed: another pre-shared key, or a static key
    /// that is not among the known peers, on either side (spec §19.2).
    AuthenticationFailed,
    /// Data was outstanding for `stall_timeout` without any ack from the
    /// peer (spec §4.7): it stopped answering (its process or host is gone,
    /// or the path fails); a RST with code 4 is sent in case it is alive.
    StallTimeout,
    /// The peer's host answered with ICMP port or host unreachable (spec
    /// §6.7): nothing listens there any more, or the network cannot reach it.
    Unreachable(UnreachableKind),
    /// The application aborted the connection.
    Aborted(ErrorCode),
    /// The peer broke the protocol; we reset the connection.
    ProtocolViolation,
}

impl core::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CloseReason::Graceful => write!(f, "closed gracefully"),
            CloseReason::PeerReset(Some(ErrorCode::INTERRUPTED)) => write!(f, "the peer was interrupted"),
            CloseReason::PeerReset(Some(c)) => write!(f, "reset by peer (error code {})", c.0),
            CloseReason::PeerReset(None) => write!(f, "reset by peer"),
            CloseReason::Refused => write!(f, "connection refused by peer"),
            CloseReason::ConnectTimeout => write!(f, "peer did not answer the handshake"),
            CloseReason::IdleTimeout => write!(f, "idle timeout: nothing heard from peer"),
            CloseReason::RetransmitTimeout => write!(f, "peer stopped acknowledging (retransmission limit reached)"),
            CloseReason::ZeroWindowTimeout => {
                write!(f, "peer stopped reading: its receive window stayed closed (zero-window timeout)")
            }
            CloseReason::ProtectionMismatch => write!(
                f,
                "protection mismatch: one side requires protected (encrypted) connections, with a pre-shared key or \
                 static keys, and the other has none"
            ),
            CloseReason::AuthenticationFailed => write!(
                f,
                "authentication failed: the pre-shared keys differ, or a static key is not in the other side's known peers"
            ),
            CloseReason::StallTimeout => write!(f, "peer stopped answering: no acknowledgement within the stall timeout"),
            CloseReason::Unreachable(UnreachableKind::Port) => {
                write!(f, "peer is gone: its host answered port unreachable (nothing listens there any more)")
            }
            CloseReason::Unreachable(UnreachableKind::Host) => {
                write!(f, "peer is unreachable: the network answered host or network unreachable")
            }
            CloseReason::Aborted(ErrorCode::INTERRUPTED) => write!(f, "interrupted"),
            CloseReason::Aborted(c) => write!(f, "aborted locally (error code {})", c.0),
            CloseReason::ProtocolViolation => write!(f, "peer violated the protocol"),
        }
    }
}

/// What an ICMP error said about the peer (spec §6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnreachableKind {
    /// Port unreachable: the host is up and nothing listens on the port.
    Port,
    /// Host, network or protocol unreachable, or administratively prohibited.
    Host,
}

/// Something the application may want to react to. Readable and Writable are
/// edge notifications: they are raised once per change, not queued per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A connection we initiated completed its handshake.
    Connected,
    /// A new connection is waiting in [`crate::Endpoint::accept`].
    Incoming,
    /// Data, or the end of the peer's stream, can be read.
    Readable,
    /// The send buffer has room again.
    Writable,
    /// Everything we queued (and our FIN, if we finished) is acknowledged.
    SendAcked,
    /// Some stream has nothing unacknowledged left (`wait_for_send`, spec §13.5).
    StreamAcked,
    /// A tracked message (a group message, spec §14.4) is wholly acknowledged.
    MessageAcked(u64),
    /// The connection ended; the handle stays valid until released. When
    /// the peer's RST said why in words, [`crate::ConnRef::peer_close_text`]
    /// has them (spec §3.3.4).
    Closed(CloseReason),
}

/// Why [`crate::ConnMut::send`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    #[error("the sending side was already closed")]
    /// The sending side was already closed.
    Finished,
    #[error("message of {size} bytes is larger than the maximum of {max} bytes; nothing was sent")]
    /// A message larger than the connection's maximum; nothing was sent.
    MessageTooLarge {
        /// The message's size.
        size: usize,
        /// The largest message taken.
        max: usize,
    },
    #[error("the send buffer has no room for the whole message now")]
    /// The send buffer has no room for the whole message now; retry once writable.
    Blocked,
    #[error("the stream was reset (error code {0})")]
    /// The stream was reset, with this code.
    StreamReset(u16),
    #[error("too many open streams (the limit is {0})")]
    /// Opening the stream would pass the limit on open streams.
    StreamLimit(usize),
    #[error("connection ended: {0}")]
    /// The connection ended, for this reason.
    Closed(CloseReason),
    #[error("no such connection")]
    /// The handle names no connection.
    UnknownConnection,
}

/// Why [`crate::ConnMut::recv`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    #[error("connection ended: {0}")]
    /// The connection ended, for this reason.
    Closed(CloseReason),
    #[error("the peer reset the stream (error code {0})")]
    /// The peer reset the stream, with this code.
    StreamReset(u16),
    #[error("no such connection")]
    /// The handle names no connection.
    UnknownConnection,
}

/// Counters and estimates of one connection (spec §8.2).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConnStats {
    /// Application bytes handed to the network for the first time.
    pub bytes_sent: u64,
    /// Application bytes delivered in order to the application's buffer.
    pub bytes_received: u64,
    /// Of those, bytes kept as slices of their datagrams until read
    /// instead of copied into the stream's buffer (spec §7.2).
    pub bytes_kept: u64,
    /// Datagrams sent.
    pub packets_sent: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// Packets sent again: resends of packets declared lost, tail-loss
    /// probes that resent a packet, and thin-flow copies (spec §5.4, §5.5).
    pub retransmissions: u64,
    /// Tail-loss probes sent (spec §5.4): new data sent past the congestion
    /// window, or the newest packet resent (those also count in
    /// `retransmissions`).
    pub tail_loss_probes: u64,
    /// Of the tail-loss probes, those that resent a packet (also counted
    /// in `retransmissions`); the others sent new data.
    pub probe_resends: u64,
    /// Tail-loss probes an ack proved premature: the first ack after the
    /// probe showed that a transmission sent before it had arrived (spec
    /// §5.4 step 8).
    pub late_probes: u64,
    /// Packets declared lost (by SACK/RACK or RTO).
    pub lost_packets: u64,
    /// Packets declared lost whose first transmission arrived after all
    /// (reordering), detected as spec §5.4 says.
    pub spurious_losses: u64,
    /// Retransmission timeouts that an ack proved premature (spec §5.4
    /// step 7): a packet sent before the timeout arrived, so the packets
    /// still waiting for their resend went back in flight and the window
    /// cut was undone.
    pub spurious_rtos: u64,
    /// Received packets that were already held (duplicates).
    pub duplicate_packets: u64,
    /// Received data dropped for lack of buffer space (stays 0 with a compliant peer).
    pub dropped_no_buffer: u64,
    /// Retransmission timeouts that fired.
    pub rto_expiries: u64,
    /// Smoothed RTT (RFC 6298).
    pub srtt: Duration,
    /// RTT variation (RFC 6298).
    pub rttvar: Duration,
    /// Smallest RTT sample.
    pub min_rtt: Duration,
    /// Congestion window in bytes.
    pub cwnd: u64,
    /// Bytes queued but not yet acknowledged.
    pub unacked_bytes: u64,
    /// Streams with state, stream 0 included (spec §13.8).
    pub open_streams: usize,
    /// Messages we abandoned under partial reliability (spec §13.6).
    pub abandoned_messages: u64,
    /// Stream chunks from the peer refused as protocol violations.
    pub stream_violations: u64,
    /// Packets that came in the clear to a protected connection and were
    /// dropped (spec §19.2).
    pub dropped_unprotected: u64,
    /// Sequenced packets too far ahead to be anything but forged (spec §5.2).
    pub out_of_window: u64,
    /// Since when data has been outstanding without any ack from the peer
    /// (spec §4.7); `None` while the peer keeps answering or nothing is
    /// outstanding. A progress display says "no answer for N s" from it.
    pub stalled_since: Option<std::time::Instant>,
    /// ICMP errors matched to this connection (spec §6.7).
    pub icmp_errors: u64,
    /// Path validation and migration (spec §6.8).
    pub path: super::PathStats,
    /// Datagram size in use, as on the wire: what path MTU discovery
    /// found, or the configured size (spec §3.7).
    pub datagram_size: u16,
    /// Path MTU probes sent, and those lost (spec §3.7).
    pub pmtu_probes_sent: u64,
    /// Path MTU probes declared lost.
    pub pmtu_probes_lost: u64,
    /// Falls back to the base datagram size after a black hole (spec §3.7).
    pub pmtu_black_holes: u64,
    /// Reasons in words on a peer's RST dropped as longer than
    /// `MAX_CLOSE_REASON` bytes or not UTF-8 (spec §3.3.4); the RST acted.
    pub close_texts_dropped: u64,
    /// How long new data was held back, and by what (spec §8.2).
    pub limited: SendLimits,
}

/// How long the sender was held back from sending new data, by each
/// cause (spec §8.2), modelled on the chrono of Linux's TCP_INFO: a span
/// starts when an attempt to send new data finds the cause and ends at
/// the next new data sent or another cause; a span still running is not
/// counted yet.
/// On a bulk transfer, `application` says the application did not keep
/// up, `peer_window` that the receiver did not, `congestion` and
/// `pacing` that the path (or its estimate) did not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendLimits {
    /// Nothing queued to send, or a partial datagram held for more
    /// (`flush_delay`, spec §5.7).
    pub application: Duration,
    /// The peer's receive window or a stream's credit was used up (spec §7.3, §13.7).
    pub peer_window: Duration,
    /// The congestion window was full (spec §9).
    pub congestion: Duration,
    /// The pacer held the next packet (spec §9.3).
    pub pacing: Duration,
}

/// One cause of [`SendLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    Application,
    PeerWindow,
    Congestion,
    Pacing,
}

impl SendLimits {
    /// Adds `d` to `limit`'s span.
    pub(crate) fn add(&mut self, limit: Limit, d: Duration) {
        let total = match limit {
            Limit::Application => &mut self.application,
            Limit::PeerWindow => &mut self.peer_window,
            Limit::Congestion => &mut self.congestion,
            Limit::Pacing => &mut self.pacing,
        };
        *total += d;
    }
}
