//! What a group reports (spec §14.8): its events, why a peer is not or
//! no longer part of it, why a call was refused, and its counters.

use std::net::SocketAddr;

use super::PeerId;
use crate::connection::CloseReason;

/// Why a peer is not part of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// No answer by the overall timeout.
    NoAnswer,
    /// It answered with a refusal (nothing listening, or its backlog full).
    Refused,
    /// Its handshake failed otherwise.
    Failed(CloseReason),
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreachable::NoAnswer => write!(f, "no answer"),
            Unreachable::Refused => write!(f, "refused"),
            Unreachable::Failed(r) => write!(f, "{r}"),
        }
    }
}

/// Why a peer left the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// The application removed it; its connection closed gracefully.
    Removed,
    /// Its connection ended (the peer died, reset or timed out).
    Lost(CloseReason),
    /// It was too slow for too long (spec §14.7).
    Evicted,
    /// It owed acknowledgements and gave none for `peer_timeout`.
    Unresponsive,
    /// The group was closed and its connection closed gracefully.
    Closed,
}

impl std::fmt::Display for Left {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Left::Removed => write!(f, "removed"),
            Left::Lost(r) => write!(f, "lost: {r}"),
            Left::Evicted => write!(f, "evicted as too slow"),
            Left::Unresponsive => write!(f, "unresponsive (no acknowledgement within the peer timeout)"),
            Left::Closed => write!(f, "closed with the group"),
        }
    }
}

/// What a group tells its application (spec §14.8).
#[derive(Debug, Clone, PartialEq)]
pub enum GroupEvent {
    /// The handshake ended with at least `min_peers` peers; the others
    /// are named (paper 01's partial establishment with a warning).
    Established {
        /// The peers not in the group, and why.
        unreachable: Vec<(SocketAddr, Unreachable)>,
    },
    /// Too few peers answered; the group is closed.
    Failed {
        /// The peers that did not answer, and why.
        unreachable: Vec<(SocketAddr, Unreachable)>,
    },
    /// A peer added later completed its handshake; it receives the group's
    /// messages from `first_msg` on.
    PeerJoined {
        /// The new peer.
        peer: PeerId,
        /// Its address.
        addr: SocketAddr,
        /// The first group message it receives.
        first_msg: u64,
    },
    /// A peer added later could not be reached.
    PeerUnreachable {
        /// The peer.
        peer: PeerId,
        /// Its address.
        addr: SocketAddr,
        /// Why.
        why: Unreachable,
    },
    /// A peer left the group (spec §14.7).
    PeerLeft {
        /// The peer.
        peer: PeerId,
        /// Its address.
        addr: SocketAddr,
        /// Why it left.
        why: Left,
    },
    /// The shared send buffer has room again.
    Writable,
    /// Every message sent is delivered in the mode's sense (`wait_for_send`).
    Acked,
    /// A peer sent something to read.
    Readable,
    /// After [`crate::Endpoint::group_close`]: every peer has acknowledged
    /// everything it was sent and the end of its stream, or is gone.
    Closed,
}

/// Why a group operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    #[error("the group handshake has not completed")]
    /// The group's handshake has not completed.
    NotEstablished,
    #[error("the group is closed")]
    /// The group is closed.
    Closed,
    #[error("invalid delivery mode {0}: at-least=P needs P >= 1, subset=K/P needs 1 <= P <= K")]
    /// The configured delivery mode's numbers are impossible (`Mode::check`).
    InvalidMode(crate::group::Mode),
    #[error("no peer can take the message (the group has no live peer)")]
    /// No peer can take the message: none is live.
    NoPeers,
    #[error("the shared send buffer, or a peer's, has no room for the whole message now")]
    /// The shared send buffer, or a peer's, has no room for the whole message now.
    Blocked,
    #[error("message of {size} bytes is larger than the maximum of {max} bytes")]
    /// A message larger than the group's maximum.
    MessageTooLarge {
        /// The message's size.
        size: usize,
        /// The largest message taken.
        max: usize,
    },
    #[error("no such group")]
    /// The handle names no group.
    UnknownGroup,
    #[error("no such peer or destination")]
    /// No such peer or destination.
    UnknownPeer,
    #[error("the group holds its maximum number of peers ({0})")]
    /// The group holds its `max_peers`.
    TooManyPeers(usize),
    #[error("cannot connect to {0}")]
    /// The address cannot be connected to.
    InvalidAddress(SocketAddr),
}

/// Group-wide counters (spec §14.8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupStats {
    /// Group messages sent.
    pub messages_sent: u64,
    /// Bytes of group messages sent (each counted once, whatever the number of peers).
    pub bytes_sent: u64,
    /// Messages delivered in the mode's sense.
    pub messages_delivered: u64,
    /// Messages whose every copy was lost with its peer.
    pub messages_undeliverable: u64,
    /// Bytes of messages not yet delivered (the shared buffer's use).
    pub outstanding_bytes: u64,
    /// Peers up now.
    pub peers_up: usize,
    /// Slots of gone peers taken by joiners (spec §14.7).
    pub slots_reused: u64,
    /// Peer slots held: the most peers present at once, not all ever added.
    pub peer_slots: usize,
}
