//! Wire format: the packet header and the payload sections it announces (spec §3).
//!
//! A datagram is one packet: a fixed 24-byte [`Header`] followed by a payload
//! whose layout the header's flags announce, in this order (spec §3.3):
//! SACK block (`SCK`), handshake parameters (`SYN`) and the token they may
//! announce, cookie (`CKE`, or a
//! SYN-ACK from a listener), error code (`ERR`), then application data.
//!
//! Parsing follows smoltcp's discipline: every length is checked once, up
//! front, against the datagram; no accessor can panic on untrusted input.

pub mod chunk;
mod crc;
mod header;
// The multicast packets' items are not all documented yet (see lib.rs).
#[allow(missing_docs)]
pub mod mcast;
mod path;
mod payload;

pub(crate) use crc::PayloadCrcs;
pub use header::{seal, seal_gathered, Flags, Header, PacketType, HEADER_LEN, VERSION};
pub use path::{PathKind, PathPacket, PATH_PACKET_LEN};
pub use payload::{
    Cookie, Echo, ErrorCode, HandshakeParams, Packet, SackBlock, Token, COOKIE_LEN, ECHO_LEN, MAX_SACK_RANGES,
    PARAMS_LEN, TOKEN_LEN,
};

/// Why a datagram was rejected. Every variant is a silent drop plus a counter
/// at the endpoint (spec §3.5); none is ever answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("datagram shorter than the header or than its payload length")]
    /// Shorter than the header or than its payload length.
    Truncated,
    #[error("datagram longer than header plus payload length")]
    /// Longer than header plus payload length.
    TrailingBytes,
    #[error("unsupported protocol version {0}")]
    /// An unsupported protocol version.
    Version(u8),
    #[error("unknown packet type {0}")]
    /// An unknown packet type.
    PacketType(u8),
    #[error("CRC32C mismatch")]
    /// The CRC32C does not match.
    Checksum,
    #[error("malformed payload section")]
    /// A malformed payload section.
    Malformed,
}
