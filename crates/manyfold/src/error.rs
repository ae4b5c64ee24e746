//! Errors of the public API and their mapping to `std::io::ErrorKind`
//! (STYLE.md 7: one `thiserror` enum, `#[non_exhaustive]`).

use std::io;

use manyfold_proto::{CloseReason, ConnectError, SendError, UnreachableKind};

/// Why a connection operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionError {
    /// The connection ended (or never started) for this reason.
    #[error("{0}")]
    Closed(CloseReason),
    /// The connection ended before everything we sent was acknowledged.
    #[error("{bytes} bytes were never acknowledged: {reason}")]
    Unacked {
        /// Bytes sent and never acknowledged.
        bytes: u64,
        /// How the connection ended.
        reason: CloseReason,
    },
    /// The socket failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
    /// The engine refused to start the connection.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// Data was written after the sending side (of the connection or the
    /// stream) was closed.
    #[error("the sending side was already closed")]
    Finished,
    /// A message larger than the configured maximum; nothing was sent.
    #[error("message of {size} bytes is larger than the maximum of {max} bytes; nothing was sent")]
    MessageTooLarge {
        /// The message's size.
        size: usize,
        /// The largest message the connection takes (`max_message`).
        max: usize,
    },
    /// The stream was reset (by us, or by the peer asking us to stop), with this code.
    #[error("the stream was reset (error code {0})")]
    StreamReset(u16),
    /// Opening another stream would pass the limit on open streams.
    #[error("too many open streams (the limit is {0})")]
    StreamLimit(usize),
}

impl From<SendError> for ConnectionError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Finished => ConnectionError::Finished,
            SendError::Closed(reason) => ConnectionError::Closed(reason),
            SendError::MessageTooLarge { size, max } => ConnectionError::MessageTooLarge { size, max },
            SendError::StreamReset(code) => ConnectionError::StreamReset(code),
            SendError::StreamLimit(max) => ConnectionError::StreamLimit(max),
            // Blocked is waited out by the callers; an unknown handle means
            // the endpoint dropped the connection.
            _ => ConnectionError::EndpointClosed,
        }
    }
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

impl ConnectionError {
    /// The `io::ErrorKind` this error maps to.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            ConnectionError::Closed(r) | ConnectionError::Unacked { reason: r, .. } => reason_kind(*r),
            ConnectionError::Io(e) => e.kind(),
            ConnectionError::EndpointClosed => io::ErrorKind::NotConnected,
            ConnectionError::Connect(ConnectError::InvalidAddress(_)) => io::ErrorKind::InvalidInput,
            ConnectionError::Connect(_) => io::ErrorKind::Other,
            ConnectionError::Finished => io::ErrorKind::BrokenPipe,
            ConnectionError::MessageTooLarge { .. } => io::ErrorKind::InvalidInput,
            ConnectionError::StreamReset(_) => io::ErrorKind::ConnectionReset,
            ConnectionError::StreamLimit(_) => io::ErrorKind::QuotaExceeded,
        }
    }

    /// Why the connection closed, if `e` (from a read, a write or a
    /// connect) says so: the `ConnectionError` inside it, as the
    /// `AsyncRead`/`AsyncWrite` impls wrap it.
    pub fn close_reason_of(e: &io::Error) -> Option<CloseReason> {
        e.get_ref()?.downcast_ref::<ConnectionError>()?.close_reason()
    }

    /// Why the connection closed, if that is what this error says.
    pub fn close_reason(&self) -> Option<CloseReason> {
        match self {
            ConnectionError::Closed(r) | ConnectionError::Unacked { reason: r, .. } => Some(*r),
            _ => None,
        }
    }
}

impl From<ConnectionError> for io::Error {
    fn from(e: ConnectionError) -> io::Error {
        match e {
            ConnectionError::Io(e) => e,
            other => io::Error::new(other.kind(), other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_reasons_map_to_io_kinds() {
        let refused: io::Error = ConnectionError::Closed(CloseReason::Refused).into();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        let timeout: io::Error = ConnectionError::Closed(CloseReason::ConnectTimeout).into();
        assert_eq!(timeout.kind(), io::ErrorKind::TimedOut);
        assert_eq!(timeout.to_string(), "peer did not answer the handshake");
        let reset: io::Error = ConnectionError::Unacked { bytes: 7, reason: CloseReason::PeerReset(None) }.into();
        assert_eq!(reset.kind(), io::ErrorKind::ConnectionReset);
        assert_eq!(reset.to_string(), "7 bytes were never acknowledged: reset by peer");
    }
}
