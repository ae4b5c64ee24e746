//! The PATH packet (type 12, spec §6.8): a challenge that a new address
//! of the peer must echo before anything but challenges goes there, and
//! the response that echoes it.
//!
//! ```text
//! +------------------------------+------+-------------------------------+
//! | header, 24 bytes, type 12    | kind |        token (8 bytes)        |
//! +------------------------------+------+-------------------------------+
//! ```
//!
//! The header's destination id names the receiver's connection; seq is
//! the sender's snd.nxt and ack its rcv.nxt (ACK set), as on a probe. A
//! PATH packet consumes no sequence number and is never retransmitted as
//! such: the challenger sends a new one when the last went unanswered.

use super::header::{seal, Flags, Header, PacketType, HEADER_LEN};
use super::DecodeError;

/// Header plus kind plus token.
pub const PATH_PACKET_LEN: usize = HEADER_LEN + 9;

/// What a PATH packet asks or answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Echo this token back from the address it reached.
    Challenge = 1,
    /// The echo of a challenge's token.
    Response = 2,
}

/// A parsed PATH packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPacket {
    /// The common header.
    pub header: Header,
    /// Challenge or response.
    pub kind: PathKind,
    /// The token a response echoes.
    pub token: [u8; 8],
}

mod field {
    pub const KIND: usize = super::HEADER_LEN;
    pub const TOKEN: std::ops::Range<usize> = super::HEADER_LEN + 1..super::HEADER_LEN + 9;
}

impl PathPacket {
    /// A PATH packet to the peer's connection `conn_id`.
    pub fn new(kind: PathKind, conn_id: u32, seq: u32, ack: u32, token: [u8; 8]) -> Self {
        let header =
            Header { ptype: PacketType::Path, flags: Flags::ACK, payload_len: 9, conn_id, seq, ack, window: 0 };
        PathPacket { header, kind, token }
    }

    /// Checks the whole datagram (length, CRC, type) and parses it.
    pub fn parse(datagram: &[u8]) -> Result<PathPacket, DecodeError> {
        let header = Header::parse(datagram)?;
        if header.ptype != PacketType::Path || datagram.len() != PATH_PACKET_LEN {
            return Err(DecodeError::Malformed);
        }
        let kind = match datagram[field::KIND] {
            1 => PathKind::Challenge,
            2 => PathKind::Response,
            _ => return Err(DecodeError::Malformed),
        };
        let mut token = [0u8; 8];
        token.copy_from_slice(&datagram[field::TOKEN]);
        Ok(PathPacket { header, kind, token })
    }

    /// Writes the packet into `out` (at least [`PATH_PACKET_LEN`] bytes)
    /// and returns its length.
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let out = &mut out[..PATH_PACKET_LEN];
        self.header.emit(out);
        out[field::KIND] = self.kind as u8;
        out[field::TOKEN].copy_from_slice(&self.token);
        seal(out);
        PATH_PACKET_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PathPacket {
        PathPacket::new(PathKind::Challenge, 0x0102_0304, 7, 9, *b"abcdefgh")
    }

    #[test]
    fn a_challenge_has_the_documented_bytes() {
        let mut out = [0u8; PATH_PACKET_LEN];
        assert_eq!(sample().emit(&mut out), 33);
        assert_eq!(
            &out[..20],
            &[0x1c, 0x02, 0, 9, 1, 2, 3, 4, 0, 0, 0, 7, 0, 0, 0, 9, 0, 0, 0, 0],
            "version 1, type 12, ACK, payload 9, id, seq, ack, window 0"
        );
        assert_eq!(out[24], 1);
        assert_eq!(&out[25..], b"abcdefgh");
    }

    #[test]
    fn round_trip() {
        let mut out = [0u8; PATH_PACKET_LEN];
        for kind in [PathKind::Challenge, PathKind::Response] {
            let p = PathPacket { kind, ..sample() };
            p.emit(&mut out);
            assert_eq!(PathPacket::parse(&out), Ok(p));
        }
    }

    #[test]
    fn every_truncated_prefix_and_any_other_kind_is_rejected() {
        let mut out = [0u8; PATH_PACKET_LEN];
        sample().emit(&mut out);
        for n in 0..PATH_PACKET_LEN {
            assert!(PathPacket::parse(&out[..n]).is_err(), "prefix of {n} bytes");
        }
        out[24] = 3;
        seal(&mut out);
        assert_eq!(PathPacket::parse(&out), Err(DecodeError::Malformed));
        let mut corrupt = [0u8; PATH_PACKET_LEN];
        sample().emit(&mut corrupt);
        corrupt[30] ^= 1;
        assert_eq!(PathPacket::parse(&corrupt), Err(DecodeError::Checksum));
    }
}
