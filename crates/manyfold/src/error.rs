//! Errors of the public API, one `thiserror` enum per kind of operation
//! (STYLE.md 7, in quinn's manner): each names what can really happen at
//! its calls, and each converts into `std::io::Error` with a matching
//! `io::ErrorKind`, so that `?` works in `io::Result` code and the
//! `AsyncRead`/`AsyncWrite` impls can carry them. [`close_reason`] finds
//! the connection's end inside any of them, however wrapped, and
//! [`peer_close_text`] the peer's words when its abort gave some (spec
//! §3.3.4). The errors that can report a connection's end share one
//! shape (`Closed`, `ClosedByPeer`, `EndpointClosed`), and one macro,
//! `connection_end!`, writes their `kind`, `close_reason`,
//! `peer_close_text` and conversions.
//!
//! | call | error |
//! |---|---|
//! | [`Endpoint::connect`](crate::Endpoint::connect) | [`ConnectError`] |
//! | reads of a [`Connection`](crate::Connection) or [`StreamIo`](crate::StreamIo) | [`ReadError`] (inside `io::Error`) |
//! | writes, [`Connection::finish`](crate::Connection::finish), [`Streams::finish_stream`](crate::Streams::finish_stream), [`Connection::open_stream`](crate::Connection::open_stream) | [`WriteError`] |
//! | [`Streams::send_message`](crate::Streams::send_message), [`Group::send`](crate::Group::send), [`Group::send_to`](crate::Group::send_to) | [`SendError`] |
//! | [`Streams::recv_message`](crate::Streams::recv_message), [`Connection::accept_stream`](crate::Connection::accept_stream) | [`ConnectionError`] |
//! | [`Connection::close`](crate::Connection::close), [`Streams::wait_for_send`](crate::Streams::wait_for_send), [`Group::close`](crate::Group::close) | [`CloseError`] |
//! | [`Endpoint::request`](crate::Endpoint::request) | [`RequestError`] |
//! | [`Endpoint::group`](crate::Endpoint::group), [`Group::join`](crate::Group::join), destinations | [`GroupError`](crate::GroupError) |

use std::error::Error as StdError;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use manyfold_proto::{CloseReason, UnreachableKind};

/// A peer's abort that said why in words (spec §3.3.4), as quinn's
/// `ApplicationClose`: what the `ClosedByPeer` variants hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {text:?}")]
pub struct PeerClose {
    /// How the connection ended, usually
    /// [`CloseReason::PeerReset`]`(Some(code))` with the peer's code.
    pub reason: CloseReason,
    /// The peer's words: UTF-8, at most
    /// [`MAX_CLOSE_REASON`](crate::MAX_CLOSE_REASON) bytes, shown quoted
    /// and escaped. For people: a program decides on the code.
    pub text: Arc<str>,
}

/// The connection is gone: what every per-call error says when the
/// connection ended under it, and the error of the calls that can fail in
/// no other way ([`Streams::recv_message`](crate::Streams::recv_message),
/// [`Connection::accept_stream`](crate::Connection::accept_stream)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The connection ended (otherwise than gracefully, where a graceful
    /// end is not an error of the call) for this reason. A peer's
    /// [`ErrorCode`](crate::ErrorCode) is in [`CloseReason::PeerReset`].
    #[error("{0}")]
    Closed(CloseReason),
    /// The peer aborted and said why in words (spec §3.3.4).
    #[error("{0}")]
    ClosedByPeer(PeerClose),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

/// Why [`Endpoint::connect`](crate::Endpoint::connect) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// Nothing listens at the address (the host's ICMP port unreachable,
    /// at once), or the listener refused: not listening, backlog or
    /// connection limit reached (spec §6.4).
    #[error("connection refused (nothing listens there, or the listener refused)")]
    Refused,
    /// Nothing answered the handshake within `connect_timeout`.
    #[error("peer did not answer the handshake")]
    TimedOut,
    /// The handshake ended otherwise: the network cannot reach the host
    /// ([`CloseReason::Unreachable`]), one side protects its packets and
    /// the other does not, the peer failed authentication, or the peer
    /// reset it with a code (spec §19.2, §4.6).
    #[error("the handshake failed: {0}")]
    Closed(CloseReason),
    /// This endpoint already holds its `max_connections`.
    #[error("the endpoint holds its maximum number of connections ({0})")]
    TooManyConnections(usize),
    /// The address cannot be connected to from this endpoint.
    #[error("cannot connect to {addr}: {why}")]
    InvalidAddress {
        /// The address asked for.
        addr: SocketAddr,
        /// Why not: an unspecified address or port 0, or an IPv6 address
        /// from an IPv4 socket.
        why: &'static str,
    },
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

/// Why a read of a byte stream failed (inside the `io::Error` that
/// `AsyncRead` returns; [`close_reason`] finds the end in it). A graceful
/// end is no error: reads return 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The peer reset the stream, with this application code (spec §13.9).
    #[error("the peer reset the stream (error code {0})")]
    Reset(u16),
    /// The connection ended otherwise than gracefully.
    #[error("{0}")]
    Closed(CloseReason),
    /// The peer aborted and said why in words (spec §3.3.4).
    #[error("{0}")]
    ClosedByPeer(PeerClose),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

/// Why a write of bytes (or finishing our side) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// Our side of the stream or connection was already finished.
    #[error("the sending side was already closed")]
    Finished,
    /// The stream was reset, by us or because the peer asked us to stop
    /// (a STOP with this code, spec §13.9).
    #[error("the stream was reset (error code {0})")]
    Reset(u16),
    /// Opening this stream would pass the peer's limit on open streams.
    #[error("too many open streams (the limit is {0})")]
    StreamLimit(usize),
    /// The connection ended.
    #[error("{0}")]
    Closed(CloseReason),
    /// The peer aborted and said why in words (spec §3.3.4).
    #[error("{0}")]
    ClosedByPeer(PeerClose),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

/// Why a message was not sent: on a stream
/// ([`Streams::send_message`](crate::Streams::send_message)) or to a group
/// ([`Group::send`](crate::Group::send), [`Group::send_to`](crate::Group::send_to)).
/// A message is taken whole or not at all, so after any of these nothing
/// of it was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SendError {
    /// Larger than the configured maximum (`max_message`).
    #[error("message of {size} bytes is larger than the maximum of {max} bytes; nothing was sent")]
    TooLarge {
        /// The message's size.
        size: usize,
        /// The largest message taken.
        max: usize,
    },
    /// Our side of the stream, the connection or the group was already
    /// finished or closed.
    #[error("the sending side was already closed")]
    Finished,
    /// The stream was reset, by us or because the peer asked us to stop,
    /// with this code.
    #[error("the stream was reset (error code {0})")]
    Reset(u16),
    /// Opening this stream would pass the peer's limit on open streams.
    #[error("too many open streams (the limit is {0})")]
    StreamLimit(usize),
    /// A group has no live peer that can take it. Fewer live peers than
    /// `Mode::AtLeast(P)` asks for is not this error: the message is sent
    /// to those left and delivered once they all have it (spec §14.5).
    #[error("no peer can take the message (the group has no live peer)")]
    NoPeers,
    /// [`Group::send_to`](crate::Group::send_to): the destination is not
    /// (or no longer) in the group.
    #[error("no such destination in the group")]
    UnknownDestination,
    /// The connection ended.
    #[error("{0}")]
    Closed(CloseReason),
    /// The peer aborted and said why in words (spec §3.3.4).
    #[error("{0}")]
    ClosedByPeer(PeerClose),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

/// Why a graceful close, or a wait for acknowledgements, failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// The connection ended before everything we sent was acknowledged.
    #[error("{bytes} bytes were never acknowledged: {reason}")]
    Unacked {
        /// Bytes sent and never acknowledged.
        bytes: u64,
        /// How the connection ended.
        reason: CloseReason,
    },
    /// The connection had already ended otherwise than gracefully, with
    /// nothing of ours outstanding.
    #[error("{0}")]
    Closed(CloseReason),
    /// The peer aborted and said why in words (spec §3.3.4).
    #[error("{0}")]
    ClosedByPeer(PeerClose),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

/// Why [`Endpoint::request`](crate::Endpoint::request) got no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The connection to the server did not come up: refused (no server
    /// there), no answer, or a handshake failure.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The server reset the reply stream with this code:
    /// [`REQUEST_TOO_LARGE`](crate::REQUEST_TOO_LARGE) when the request was
    /// over its limit.
    #[error("the server reset the session (error code {0})")]
    Reset(u16),
    /// The reply is larger than the `max_reply` given.
    #[error("the reply is larger than the limit of {max} bytes")]
    ReplyTooLarge {
        /// The limit.
        max: usize,
    },
    /// The connection ended before the whole reply arrived.
    #[error("{0}")]
    Closed(CloseReason),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

/// The `io::ErrorKind` that best describes a close reason.
pub(crate) fn reason_kind(reason: CloseReason) -> io::ErrorKind {
    match reason {
        CloseReason::Graceful => io::ErrorKind::BrokenPipe,
        CloseReason::Refused => io::ErrorKind::ConnectionRefused,
        CloseReason::ConnectTimeout
        | CloseReason::IdleTimeout
        | CloseReason::RetransmitTimeout
        | CloseReason::ZeroWindowTimeout
        | CloseReason::StallTimeout => io::ErrorKind::TimedOut,
        CloseReason::Unreachable(UnreachableKind::Port) => io::ErrorKind::ConnectionReset,
        CloseReason::Unreachable(UnreachableKind::Host) => io::ErrorKind::HostUnreachable,
        CloseReason::PeerReset(_) | CloseReason::ProtocolViolation => io::ErrorKind::ConnectionReset,
        CloseReason::Aborted(_) => io::ErrorKind::ConnectionAborted,
        CloseReason::ProtectionMismatch | CloseReason::AuthenticationFailed => io::ErrorKind::PermissionDenied,
    }
}

/// Applies `$f` to each error type of this crate: the one list that
/// [`close_reason`] and [`peer_close_text`] look through and that converts
/// into `io::Error`.
macro_rules! for_each_error {
    ($f:ident) => {
        $f! { ConnectionError, ConnectError, ReadError, WriteError, SendError, CloseError, RequestError }
    };
}

/// The connection's end that `e` reports, looking inside an `io::Error`
/// (as the `AsyncRead`/`AsyncWrite` impls and the blocking API wrap these
/// errors) and at any of this crate's error types. `None` when `e` is not
/// about a connection's end.
///
/// ```
/// use manyfold::{CloseReason, ReadError};
/// let e: std::io::Error = ReadError::Closed(CloseReason::IdleTimeout).into();
/// assert_eq!(manyfold::close_reason(&e), Some(CloseReason::IdleTimeout));
/// ```
pub fn close_reason(e: &(dyn StdError + 'static)) -> Option<CloseReason> {
    if let Some(io) = e.downcast_ref::<io::Error>() {
        return io.get_ref().and_then(|inner| close_reason(inner));
    }
    macro_rules! look {
        ($($t:ty),*) => {$(
            if let Some(e) = e.downcast_ref::<$t>() {
                return e.close_reason();
            }
        )*};
    }
    for_each_error!(look);
    None
}

/// The peer's words on why it aborted (spec §3.3.4) that `e` carries,
/// looking inside an `io::Error` as [`close_reason`] does. `None` when the
/// peer gave none, or `e` is not about a peer's abort.
///
/// ```
/// use manyfold::{CloseReason, ErrorCode, PeerClose, ReadError};
/// let said = PeerClose { reason: CloseReason::PeerReset(Some(ErrorCode(300))), text: "disk full".into() };
/// let e: std::io::Error = ReadError::ClosedByPeer(said).into();
/// assert_eq!(manyfold::peer_close_text(&e), Some("disk full"));
/// assert_eq!(e.to_string(), "reset by peer (error code 300): \"disk full\"");
/// ```
pub fn peer_close_text<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a str> {
    if let Some(io) = e.downcast_ref::<io::Error>() {
        return io.get_ref().and_then(|inner| peer_close_text(inner));
    }
    macro_rules! look {
        ($($t:ty),*) => {$(
            if let Some(e) = e.downcast_ref::<$t>() {
                return e.peer_close_text();
            }
        )*};
    }
    for_each_error!(look);
    None
}

/// `kind`, `close_reason` and `peer_close_text` of an error with the
/// variants `Closed(CloseReason)`, `ClosedByPeer(PeerClose)` and
/// `EndpointClosed`, and its conversion from [`ConnectionError`]. The other
/// variants' kinds, and any other variant holding a close reason, are
/// listed after the type.
macro_rules! connection_end {
    ($t:ident { $($pat:pat => $kind:expr),* $(,)? } $(reasons { $($rpat:pat => $reason:expr),* })?) => {
        impl $t {
            /// The `io::ErrorKind` this error maps to.
            pub fn kind(&self) -> io::ErrorKind {
                match self {
                    $t::Closed(r) => reason_kind(*r),
                    $t::ClosedByPeer(p) => reason_kind(p.reason),
                    $t::EndpointClosed => io::ErrorKind::NotConnected,
                    $($pat => $kind,)*
                }
            }

            /// Why the connection closed, if that is what this error says.
            pub fn close_reason(&self) -> Option<CloseReason> {
                match self {
                    $t::Closed(r) => Some(*r),
                    $t::ClosedByPeer(p) => Some(p.reason),
                    $($($rpat => Some($reason),)*)?
                    _ => None,
                }
            }

            /// The peer's words on why it aborted, when it gave some
            /// (spec §3.3.4).
            pub fn peer_close_text(&self) -> Option<&str> {
                match self {
                    $t::ClosedByPeer(p) => Some(&p.text),
                    _ => None,
                }
            }
        }

        connection_end!(@from $t);
    };
    (@from ConnectionError) => {};
    (@from $t:ident) => {
        impl From<ConnectionError> for $t {
            fn from(e: ConnectionError) -> Self {
                match e {
                    ConnectionError::Closed(r) => $t::Closed(r),
                    ConnectionError::ClosedByPeer(p) => $t::ClosedByPeer(p),
                    ConnectionError::EndpointClosed => $t::EndpointClosed,
                }
            }
        }
    };
}

connection_end!(ConnectionError {});
connection_end!(ReadError { ReadError::Reset(_) => io::ErrorKind::ConnectionReset });
connection_end!(WriteError {
    WriteError::Finished => io::ErrorKind::BrokenPipe,
    WriteError::Reset(_) => io::ErrorKind::ConnectionReset,
    WriteError::StreamLimit(_) => io::ErrorKind::QuotaExceeded,
});
connection_end!(SendError {
    SendError::TooLarge { .. } => io::ErrorKind::InvalidInput,
    SendError::Finished => io::ErrorKind::BrokenPipe,
    SendError::Reset(_) => io::ErrorKind::ConnectionReset,
    SendError::StreamLimit(_) => io::ErrorKind::QuotaExceeded,
    SendError::NoPeers => io::ErrorKind::NotConnected,
    SendError::UnknownDestination => io::ErrorKind::NotFound,
});
connection_end!(
    CloseError { CloseError::Unacked { reason, .. } => reason_kind(*reason) }
    reasons { CloseError::Unacked { reason, .. } => *reason }
);

impl ConnectionError {
    /// The error of a connection (`Some(reason)`) or endpoint (`None`)
    /// that is gone, with the peer's words when its RST carried some.
    pub(crate) fn gone(reason: Option<CloseReason>, text: Option<&str>) -> Self {
        match (reason, text) {
            (None, _) => ConnectionError::EndpointClosed,
            (Some(reason), Some(text)) => ConnectionError::ClosedByPeer(PeerClose { reason, text: text.into() }),
            (Some(reason), None) => ConnectionError::Closed(reason),
        }
    }
}

/// `ConnectError` and `RequestError` say more than the connection's end
/// (a refusal and a timeout are variants of their own), so their mapping
/// is written out; the peer's words do not reach them (a handshake's
/// refusal has none).
impl ConnectError {
    /// The `io::ErrorKind` this error maps to.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            ConnectError::Refused => io::ErrorKind::ConnectionRefused,
            ConnectError::TimedOut => io::ErrorKind::TimedOut,
            ConnectError::Closed(r) => reason_kind(*r),
            ConnectError::TooManyConnections(_) => io::ErrorKind::QuotaExceeded,
            ConnectError::InvalidAddress { .. } => io::ErrorKind::InvalidInput,
            ConnectError::EndpointClosed => io::ErrorKind::NotConnected,
        }
    }

    /// Why the handshake ended, if it started and ended.
    pub fn close_reason(&self) -> Option<CloseReason> {
        match self {
            ConnectError::Refused => Some(CloseReason::Refused),
            ConnectError::TimedOut => Some(CloseReason::ConnectTimeout),
            ConnectError::Closed(r) => Some(*r),
            _ => None,
        }
    }

    /// Always `None`: a handshake's end carries no words (spec §3.3.4).
    pub fn peer_close_text(&self) -> Option<&str> {
        None
    }

    /// The error for a handshake that ended for `reason`.
    pub(crate) fn ended(reason: CloseReason) -> Self {
        match reason {
            CloseReason::Refused => ConnectError::Refused,
            CloseReason::ConnectTimeout => ConnectError::TimedOut,
            other => ConnectError::Closed(other),
        }
    }
}

impl From<manyfold_proto::ConnectError> for ConnectError {
    fn from(e: manyfold_proto::ConnectError) -> Self {
        match e {
            manyfold_proto::ConnectError::TooManyConnections(n) => ConnectError::TooManyConnections(n),
            manyfold_proto::ConnectError::InvalidAddress(addr) => {
                ConnectError::InvalidAddress { addr, why: "an unspecified address or port 0" }
            } // What the engine may add later: it refused to start it.
            _ => ConnectError::EndpointClosed,
        }
    }
}

impl From<ConnectionError> for ConnectError {
    fn from(e: ConnectionError) -> Self {
        match e.close_reason() {
            Some(r) => ConnectError::ended(r),
            None => ConnectError::EndpointClosed,
        }
    }
}

impl From<manyfold_proto::RecvError> for ReadError {
    fn from(e: manyfold_proto::RecvError) -> Self {
        match e {
            manyfold_proto::RecvError::Closed(r) => ReadError::Closed(r),
            manyfold_proto::RecvError::StreamReset(code) => ReadError::Reset(code),
            // An unknown handle: the endpoint dropped the connection.
            _ => ReadError::EndpointClosed,
        }
    }
}

impl From<manyfold_proto::SendError> for WriteError {
    fn from(e: manyfold_proto::SendError) -> Self {
        use manyfold_proto::SendError as E;
        match e {
            E::Finished => WriteError::Finished,
            E::StreamReset(code) => WriteError::Reset(code),
            E::StreamLimit(max) => WriteError::StreamLimit(max),
            E::Closed(r) => WriteError::Closed(r),
            // Byte writes are never too large (they take what fits) and
            // Blocked is waited out; an unknown handle means the endpoint
            // dropped the connection.
            _ => WriteError::EndpointClosed,
        }
    }
}

impl From<manyfold_proto::SendError> for SendError {
    fn from(e: manyfold_proto::SendError) -> Self {
        use manyfold_proto::SendError as E;
        match e {
            E::Finished => SendError::Finished,
            E::MessageTooLarge { size, max } => SendError::TooLarge { size, max },
            E::StreamReset(code) => SendError::Reset(code),
            E::StreamLimit(max) => SendError::StreamLimit(max),
            E::Closed(r) => SendError::Closed(r),
            E::UnknownConnection => SendError::UnknownDestination,
            // Blocked is waited out by the callers.
            _ => SendError::EndpointClosed,
        }
    }
}

impl From<manyfold_proto::GroupError> for SendError {
    fn from(e: manyfold_proto::GroupError) -> Self {
        use manyfold_proto::GroupError as E;
        match e {
            E::MessageTooLarge { size, max } => SendError::TooLarge { size, max },
            E::NoPeers => SendError::NoPeers,
            E::UnknownPeer => SendError::UnknownDestination,
            // Closed, or a handle the group no longer has: nothing more goes out.
            _ => SendError::Finished,
        }
    }
}

impl RequestError {
    /// The `io::ErrorKind` this error maps to.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            RequestError::Connect(e) => e.kind(),
            RequestError::Reset(_) => io::ErrorKind::ConnectionReset,
            RequestError::ReplyTooLarge { .. } => io::ErrorKind::InvalidData,
            RequestError::Closed(r) => reason_kind(*r),
            RequestError::EndpointClosed => io::ErrorKind::NotConnected,
        }
    }

    /// Why the connection closed, if that is what this error says.
    pub fn close_reason(&self) -> Option<CloseReason> {
        match self {
            RequestError::Connect(e) => e.close_reason(),
            RequestError::Closed(r) => Some(*r),
            _ => None,
        }
    }

    /// Always `None`: a session's errors keep the code, not the words.
    pub fn peer_close_text(&self) -> Option<&str> {
        None
    }

    /// The error for a session whose connection ended for `reason`: a
    /// handshake that failed is a [`RequestError::Connect`].
    pub(crate) fn ended(reason: CloseReason) -> Self {
        match reason {
            CloseReason::Refused
            | CloseReason::ConnectTimeout
            | CloseReason::ProtectionMismatch
            | CloseReason::AuthenticationFailed => RequestError::Connect(ConnectError::ended(reason)),
            other => RequestError::Closed(other),
        }
    }
}

/// Each error into an `io::Error` of its kind, the error itself inside
/// (for [`close_reason`] and `downcast`).
macro_rules! into_io {
    ($($t:ty),*) => {$(
        impl From<$t> for io::Error {
            fn from(e: $t) -> io::Error {
                io::Error::new(e.kind(), e)
            }
        }
    )*};
}

for_each_error!(into_io);

#[cfg(test)]
mod tests {
    use super::*;
    use manyfold_proto::wire::ErrorCode;

    #[test]
    fn close_reasons_map_to_io_kinds() {
        let refused: io::Error = ConnectError::Refused.into();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        let timeout: io::Error = ConnectError::TimedOut.into();
        assert_eq!(timeout.kind(), io::ErrorKind::TimedOut);
        assert_eq!(timeout.to_string(), "peer did not answer the handshake");
        let reset: io::Error = CloseError::Unacked { bytes: 7, reason: CloseReason::PeerReset(None) }.into();
        assert_eq!(reset.kind(), io::ErrorKind::ConnectionReset);
        assert_eq!(reset.to_string(), "7 bytes were never acknowledged: reset by peer");
    }

    #[test]
    fn close_reason_is_found_inside_io_errors_of_every_kind() {
        let peer = CloseReason::PeerReset(Some(ErrorCode(77)));
        let errors: Vec<io::Error> = vec![
            ReadError::Closed(peer).into(),
            WriteError::Closed(peer).into(),
            SendError::Closed(peer).into(),
            CloseError::Unacked { bytes: 1, reason: peer }.into(),
            ConnectionError::Closed(peer).into(),
            RequestError::Closed(peer).into(),
            ConnectError::Closed(peer).into(),
        ];
        for e in &errors {
            assert_eq!(close_reason(e), Some(peer), "{e}");
        }
        let plain = io::Error::other("nothing to do with a connection");
        assert_eq!(close_reason(&plain), None);
        assert_eq!(close_reason(&ReadError::Reset(3)), None);
    }

    #[test]
    fn a_peers_words_travel_through_every_conversion_and_io_error() {
        let peer = CloseReason::PeerReset(Some(ErrorCode(300)));
        let gone = ConnectionError::gone(Some(peer), Some("disk full"));
        let errors: Vec<io::Error> = vec![
            gone.clone().into(),
            ReadError::from(gone.clone()).into(),
            WriteError::from(gone.clone()).into(),
            SendError::from(gone.clone()).into(),
            CloseError::from(gone.clone()).into(),
        ];
        for e in &errors {
            assert_eq!(close_reason(e), Some(peer), "{e}");
            assert_eq!(peer_close_text(e), Some("disk full"), "{e}");
            assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}");
            assert_eq!(e.to_string(), r#"reset by peer (error code 300): "disk full""#);
        }
        // Without words it stays the plain end; a connect error keeps the reason.
        assert_eq!(ConnectionError::gone(Some(peer), None), ConnectionError::Closed(peer));
        assert_eq!(ConnectError::from(gone), ConnectError::Closed(peer));
        assert_eq!(ConnectionError::gone(None, Some("x")), ConnectionError::EndpointClosed);
        // A peer's control characters are escaped, not printed raw.
        let sly = ConnectionError::gone(Some(peer), Some("ok\n\x1b[2J"));
        assert!(!sly.to_string().contains('\n'), "{sly}");
    }

    #[test]
    fn a_failed_handshake_is_a_connect_error_of_a_request() {
        assert_eq!(RequestError::ended(CloseReason::Refused), RequestError::Connect(ConnectError::Refused));
        assert_eq!(RequestError::ended(CloseReason::ConnectTimeout), RequestError::Connect(ConnectError::TimedOut));
        assert_eq!(RequestError::ended(CloseReason::IdleTimeout), RequestError::Closed(CloseReason::IdleTimeout));
    }

    #[test]
    fn engine_refusals_map_to_the_call_errors() {
        use manyfold_proto::SendError as E;
        assert_eq!(SendError::from(E::MessageTooLarge { size: 9, max: 8 }), SendError::TooLarge { size: 9, max: 8 });
        assert_eq!(WriteError::from(E::StreamReset(5)), WriteError::Reset(5));
        assert_eq!(SendError::from(manyfold_proto::GroupError::NoPeers), SendError::NoPeers);
        let bad = "0.0.0.0:0".parse().expect("literal");
        assert!(matches!(
            ConnectError::from(manyfold_proto::ConnectError::InvalidAddress(bad)),
            ConnectError::InvalidAddress { addr, .. } if addr == bad
        ));
    }
}
