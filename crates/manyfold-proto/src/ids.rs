//! Identifiers that name what they count: a stream of a connection
//! ([`StreamId`], spec §9) and a connection at one end ([`ConnId`], spec §3.1,
//! §6.1). The wire structs in `wire/` hold the raw field values; the engine
//! wraps them here, at the one place each is read.

use std::fmt;
use std::num::NonZeroU32;

/// A stream of a connection (spec §9): the 16-bit number its chunks carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId(u16);

impl StreamId {
    /// Stream 0: the connection's byte stream, which always exists
    /// (spec §13.8).
    pub const BYTES: StreamId = StreamId(0);

    /// The stream numbered `n`.
    pub const fn new(n: u16) -> StreamId {
        StreamId(n)
    }

    /// Its number, as chunks carry it.
    pub const fn get(self) -> u16 {
        self.0
    }
}

impl From<u16> for StreamId {
    fn from(n: u16) -> StreamId {
        StreamId(n)
    }
}

impl From<StreamId> for u16 {
    fn from(id: StreamId) -> u16 {
        id.0
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The id one end of a connection is addressed by (spec §3.1): chosen by
/// that end, never 0 (the header's 0 means "no connection yet", spec §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(NonZeroU32);

impl ConnId {
    /// The id a header or handshake field names; `None` for the wire's 0.
    pub const fn from_wire(v: u32) -> Option<ConnId> {
        match NonZeroU32::new(v) {
            Some(n) => Some(ConnId(n)),
            None => None,
        }
    }

    /// The value as the wire carries it.
    pub const fn wire(self) -> u32 {
        self.0.get()
    }

    /// What the wire carries for a connection id that may be unknown yet:
    /// the id, or 0 (spec §6.1).
    pub fn wire_or_zero(id: Option<ConnId>) -> u32 {
        id.map_or(0, ConnId::wire)
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_zero_is_no_connection_id() {
        assert_eq!(ConnId::from_wire(0), None);
        assert_eq!(ConnId::from_wire(7).map(ConnId::wire), Some(7));
        assert_eq!(ConnId::wire_or_zero(None), 0);
        assert_eq!(std::mem::size_of::<Option<ConnId>>(), 4);
    }

    #[test]
    fn a_stream_id_is_its_chunk_number() {
        assert_eq!(StreamId::from(9).get(), 9);
        assert_eq!(u16::from(StreamId::new(3)), 3);
        assert_eq!(StreamId::new(5).to_string(), "5");
    }
}
