//! The payload sections a header's flags announce (spec §3.3) and the whole
//! packet's parsed form, [`Packet`].

use super::header::{seal_gathered, Flags, Header, PacketType, HEADER_LEN};
use super::{DecodeError, PayloadCrcs};
use bytes::Bytes;

/// At most this many SACK ranges in one packet (spec §3.3.1).
pub const MAX_SACK_RANGES: usize = 16;
/// Encoded length of [`HandshakeParams`].
pub const PARAMS_LEN: usize = 8;
/// Encoded length of [`Cookie`].
pub const COOKIE_LEN: usize = 20;
/// Encoded length of [`Token`].
pub const TOKEN_LEN: usize = 12;

/// Selective acknowledgement ranges above the cumulative ack (spec §3.3.1):
/// a count byte, then `count` pairs of half-open `[start, end)` sequence
/// numbers, most recently changed range first, then (with the count byte's
/// `ECHO` bit) the [`Echo`] of the packet that drew the ack (spec §5.4.2).
/// Held inline: no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SackBlock {
    len: u8,
    ranges: [(u32, u32); MAX_SACK_RANGES],
    echo: Option<Echo>,
}

/// Which transmission of which packet drew an ack (spec §5.4.2): the
/// latest sequenced packet the receiver took, and the count of the RESENT
/// chunk it carried (0 for none: the first transmission).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    /// The packet's sequence number (low 32 bits).
    pub seq: u32,
    /// Its RESENT count: 0 for a first transmission.
    pub count: u8,
}

/// The count byte's bit that announces an [`Echo`] after the ranges.
const ECHO_BIT: u8 = 0x80;
/// Bytes of an [`Echo`] on the wire.
pub const ECHO_LEN: usize = 5;

impl SackBlock {
    /// No range.
    pub const fn new() -> Self {
        SackBlock { len: 0, ranges: [(0, 0); MAX_SACK_RANGES], echo: None }
    }
    /// The same ranges, followed by `echo`.
    pub fn with_echo(mut self, echo: Echo) -> Self {
        self.echo = Some(echo);
        self
    }
    /// The echo it carries, if any.
    pub fn echo(&self) -> Option<Echo> {
        self.echo
    }
    /// Appends a range; returns false (and drops it) when full.
    pub fn push(&mut self, start: u32, end: u32) -> bool {
        if self.len as usize == MAX_SACK_RANGES {
            return false;
        }
        self.ranges[self.len as usize] = (start, end);
        self.len += 1;
        true
    }
    /// The ranges `[start, end)`.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges[..self.len as usize]
    }
    /// Whether it holds no range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes it takes on the wire.
    pub fn encoded_len(&self) -> usize {
        1 + 8 * self.len as usize + if self.echo.is_some() { ECHO_LEN } else { 0 }
    }
    fn parse(b: &[u8]) -> Result<(SackBlock, usize), DecodeError> {
        let first = *b.first().ok_or(DecodeError::Malformed)?;
        let (n, echoed) = (usize::from(first & !ECHO_BIT), first & ECHO_BIT != 0);
        // spec §3.3.1: no ranges is malformed unless an echo follows.
        if (n == 0 && !echoed) || n > MAX_SACK_RANGES {
            return Err(DecodeError::Malformed);
        }
        let body = b.get(1..1 + 8 * n).ok_or(DecodeError::Malformed)?;
        let mut s = SackBlock::new();
        for pair in body.chunks_exact(8) {
            s.push(be32(&pair[..4]), be32(&pair[4..]));
        }
        let mut len = 1 + 8 * n;
        if echoed {
            let e = b.get(len..len + ECHO_LEN).ok_or(DecodeError::Malformed)?;
            s.echo = Some(Echo { seq: be32(&e[..4]), count: e[4] });
            len += ECHO_LEN;
        }
        Ok((s, len))
    }
    fn emit(&self, out: &mut [u8]) -> usize {
        out[0] = self.len | if self.echo.is_some() { ECHO_BIT } else { 0 };
        for (i, (a, b)) in self.ranges().iter().enumerate() {
            out[1 + 8 * i..5 + 8 * i].copy_from_slice(&a.to_be_bytes());
            out[5 + 8 * i..9 + 8 * i].copy_from_slice(&b.to_be_bytes());
        }
        if let Some(e) = self.echo {
            let at = 1 + 8 * self.len as usize;
            out[at..at + 4].copy_from_slice(&e.seq.to_be_bytes());
            out[at + 4] = e.count;
        }
        self.encoded_len()
    }
}

impl Default for SackBlock {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for SackBlock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut l = f.debug_list();
        l.entries(self.ranges().iter().map(|(a, b)| a..b));
        if let Some(e) = self.echo {
            l.entry(&e);
        }
        l.finish()
    }
}

/// What each side announces in its SYN or SYN-ACK (spec §3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeParams {
    /// The connection id the sender wants to be addressed by.
    pub conn_id: u32,
    /// Largest datagram the sender accepts.
    pub max_datagram: u16,
    /// Feature bits (spec §3.3.2): [`HandshakeParams::PROTECTED`],
    /// [`HandshakeParams::ACK_FREQUENCY`], [`HandshakeParams::TOKEN`],
    /// [`HandshakeParams::WANT_TOKEN`], [`HandshakeParams::EARLY`],
    /// [`HandshakeParams::TX_ECHO`], and in bits 8–15 the packet's
    /// transmission ([`HandshakeParams::TRANSMISSION`]).
    pub features: u16,
}

impl HandshakeParams {
    /// The sender protects its packets (spec §19) and accepts nothing else.
    pub const PROTECTED: u16 = 0x0001;
    /// The sender understands the ACK_FREQUENCY chunk (spec §5.6).
    pub const ACK_FREQUENCY: u16 = 0x0002;
    /// An address-validation token section follows the parameters (spec
    /// §3.3.5, §6.9). [`Packet::emit`] sets it exactly when the packet has a
    /// [`Token`]; a parser reads the section when it is set.
    pub const TOKEN: u16 = 0x0004;
    /// The sender of a SYN asks the listener for a token (spec §6.9).
    pub const WANT_TOKEN: u16 = 0x0008;
    /// On a SYN-ACK: the listener took the data of the SYN it answers
    /// (0-RTT, spec §6.9). Without it, that data must be sent again.
    pub const EARLY: u16 = 0x0010;
    /// The sender understands RESENT chunks and echoes in SACK sections
    /// (spec §5.4.2): it may be sent both.
    pub const TX_ECHO: u16 = 0x0020;
    /// Bits 8–15: which transmission of its packet a SYN or SYN-ACK is
    /// (0 the first, saturating at 255), as a RESENT chunk says of other
    /// packets (spec §3.3.2, §5.4.2). A peer that does not know them
    /// ignores them, as it does any bit it does not know.
    pub const TRANSMISSION: u16 = 0xff00;

    /// What this end announces: it understands ACK_FREQUENCY and
    /// TX_ECHO, and protects its packets if `protected`.
    pub fn local_features(protected: bool) -> u16 {
        Self::ACK_FREQUENCY | Self::TX_ECHO | if protected { Self::PROTECTED } else { 0 }
    }

    /// Plain parameters: no feature bits.
    pub fn new(conn_id: u32, max_datagram: u16) -> Self {
        HandshakeParams { conn_id, max_datagram, features: 0 }
    }

    /// Whether the `PROTECTED` feature bit is set (spec §19.2).
    pub fn is_protected(&self) -> bool {
        self.features & Self::PROTECTED != 0
    }

    /// Whether the `TX_ECHO` feature bit is set (spec §5.4.2).
    pub fn takes_tx_echo(&self) -> bool {
        self.features & Self::TX_ECHO != 0
    }

    /// Whether the `ACK_FREQUENCY` feature bit is set (spec §5.6).
    pub fn takes_ack_frequency(&self) -> bool {
        self.features & Self::ACK_FREQUENCY != 0
    }

    /// Which transmission of its packet these parameters' SYN or SYN-ACK
    /// is: 0 for the first (spec §3.3.2).
    pub fn transmission(&self) -> u8 {
        (self.features >> 8) as u8
    }

    /// The same parameters, naming transmission `count`.
    pub fn with_transmission(mut self, count: u8) -> Self {
        self.features = (self.features & !Self::TRANSMISSION) | (u16::from(count) << 8);
        self
    }

    fn parse(b: &[u8]) -> Result<Self, DecodeError> {
        let b = b.get(..PARAMS_LEN).ok_or(DecodeError::Malformed)?;
        Ok(HandshakeParams { conn_id: be32(&b[..4]), max_datagram: be16(&b[4..6]), features: be16(&b[6..8]) })
    }
    fn emit(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.conn_id.to_be_bytes());
        out[4..6].copy_from_slice(&self.max_datagram.to_be_bytes());
        out[6..8].copy_from_slice(&self.features.to_be_bytes());
    }
}

/// The listener's stateless cookie (spec §6.2): sent in its SYN-ACK, echoed
/// by the client in the first packet after it (flag `CKE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cookie {
    /// Milliseconds on the listener's clock when the cookie was made.
    pub timestamp: u32,
    /// The client's connection id from its SYN.
    pub client_id: u32,
    /// The client's `max_datagram` from its SYN.
    pub client_max_datagram: u16,
    /// Milliseconds the client's echo of it was sent after the SYN-ACK
    /// arrived (its hold, its retransmissions; spec §3.3.3): zero in the
    /// SYN-ACK; outside the MAC.
    pub echo_delay: u16,
    /// SipHash-2-4 under the listener's secret over everything above plus the
    /// client's address, both initial sequence numbers and the listener's id.
    pub mac: u64,
}

impl Cookie {
    fn parse(b: &[u8]) -> Result<Self, DecodeError> {
        let b = b.get(..COOKIE_LEN).ok_or(DecodeError::Malformed)?;
        Ok(Cookie {
            timestamp: be32(&b[..4]),
            client_id: be32(&b[4..8]),
            client_max_datagram: be16(&b[8..10]),
            echo_delay: be16(&b[10..12]),
            mac: u64::from_be_bytes(b[12..20].try_into().map_err(|_| DecodeError::Malformed)?),
        })
    }
    fn emit(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.timestamp.to_be_bytes());
        out[4..8].copy_from_slice(&self.client_id.to_be_bytes());
        out[8..10].copy_from_slice(&self.client_max_datagram.to_be_bytes());
        out[10..12].copy_from_slice(&self.echo_delay.to_be_bytes());
        out[12..20].copy_from_slice(&self.mac.to_be_bytes());
    }
}

/// An address-validation token (spec §3.3.5, §6.9): handed to a client by a
/// listener, presented on a later SYN from the same IP address to send
/// data with it. Opaque to the client; only its listener reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token {
    /// Milliseconds on the listener's clock when it was made.
    pub timestamp: u32,
    /// SipHash-2-4 under the listener's token key over the client's IP
    /// address and the timestamp.
    pub mac: u64,
}

impl Token {
    fn parse(b: &[u8]) -> Result<Self, DecodeError> {
        let b = b.get(..TOKEN_LEN).ok_or(DecodeError::Malformed)?;
        Ok(Token {
            timestamp: be32(&b[..4]),
            mac: u64::from_be_bytes(b[4..12].try_into().map_err(|_| DecodeError::Malformed)?),
        })
    }
    fn emit(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.timestamp.to_be_bytes());
        out[4..12].copy_from_slice(&self.mac.to_be_bytes());
    }
}

/// Error code carried with `ERR` (spec §3.3.4, codes in §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u16);

impl ErrorCode {
    /// The application aborted the connection.
    pub const APPLICATION: ErrorCode = ErrorCode(1);
    /// The peer broke the protocol.
    pub const PROTOCOL_VIOLATION: ErrorCode = ErrorCode(2);
    /// The listener refuses new connections (backlog full or not listening).
    pub const REFUSED: ErrorCode = ErrorCode(3);
    /// The sender gave up after its idle timeout.
    pub const IDLE_TIMEOUT: ErrorCode = ErrorCode(4);
    /// A stream was refused: the receiver's limit on open streams was reached (spec §13.8).
    pub const STREAM_LIMIT: ErrorCode = ErrorCode(5);
    /// A group evicted this receiver as too slow (spec §14.7).
    pub const EVICTED: ErrorCode = ErrorCode(6);
    /// The receiver's window stayed at zero for the sender's
    /// `zero_window_timeout` (spec §7.3).
    pub const WINDOW_TIMEOUT: ErrorCode = ErrorCode(7);
    /// One side protects its packets and the other does not (spec §19.2).
    pub const PROTECTION_MISMATCH: ErrorCode = ErrorCode(8);
    /// The Noise handshake failed: another pre-shared key, or a static key
    /// not among the known peers (spec §19.2).
    pub const AUTHENTICATION_FAILED: ErrorCode = ErrorCode(9);
    /// The peer's process was interrupted (SIGINT or SIGTERM) and aborted
    /// its connections on the way out (spec §8.3).
    pub const INTERRUPTED: ErrorCode = ErrorCode(10);

    // The multicast session's own codes (spec §16.7), in END and STATUS.

    /// The receiver's whole-file hash did not match.
    pub const HASH_MISMATCH: ErrorCode = ErrorCode(20);
    /// Dropped: still missing packets at the completion timeout.
    pub const INCOMPLETE: ErrorCode = ErrorCode(21);
    /// Dropped: nothing heard for `receiver_timeout`.
    pub const UNRESPONSIVE: ErrorCode = ErrorCode(22);
    /// Dropped: more repair passes than `max_repair_passes`.
    pub const TOO_MANY_PASSES: ErrorCode = ErrorCode(23);
    /// Dropped: reported loss above `max_loss`.
    pub const TOO_LOSSY: ErrorCode = ErrorCode(24);
    /// The sender gave up the whole session.
    pub const ABORTED: ErrorCode = ErrorCode(25);
    /// Dropped: took data slower than the sender's `min_rate` (spec §16.7).
    pub const TOO_SLOW: ErrorCode = ErrorCode(26);
}

/// A whole parsed packet: header plus payload sections (spec §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The common header.
    pub header: Header,
    /// The SACK block, when the SACK flag says there is one.
    pub sack: Option<SackBlock>,
    /// The handshake parameters (SYN, SYN-ACK).
    pub params: Option<HandshakeParams>,
    /// The address-validation token (spec §3.3.5): only with `params`.
    pub token: Option<Token>,
    /// The cookie (SYN-ACK, cookie echo).
    pub cookie: Option<Cookie>,
    /// The error code (RST).
    pub error: Option<ErrorCode>,
    /// The data area.
    pub data: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Validates a datagram and parses every section its flags announce.
    pub fn parse(datagram: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        Self::sections(Header::parse(datagram)?, datagram)
    }

    /// [`Packet::parse`] of a protected packet just opened (spec §19.3):
    /// the AEAD proved it whole, so no CRC is checked.
    pub(crate) fn parse_opened(datagram: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        Self::sections(Header::parse_opened(datagram)?, datagram)
    }

    fn sections(header: Header, datagram: &'a [u8]) -> Result<Packet<'a>, DecodeError> {
        // Header::parse guarantees the datagram is exactly header + payload.
        let mut rest = &datagram[HEADER_LEN..];
        let flags = header.flags;
        let sack = if flags.contains(Flags::SCK) {
            let (s, n) = SackBlock::parse(rest)?;
            rest = &rest[n..];
            Some(s)
        } else {
            None
        };
        let params = if flags.contains(Flags::SYN) {
            let p = HandshakeParams::parse(rest)?;
            rest = &rest[PARAMS_LEN..];
            Some(p)
        } else {
            None
        };
        let token = if params.is_some_and(|p| p.features & HandshakeParams::TOKEN != 0) {
            let t = Token::parse(rest)?;
            rest = &rest[TOKEN_LEN..];
            Some(t)
        } else {
            None
        };
        let cookie = if flags.contains(Flags::CKE) {
            let c = Cookie::parse(rest)?;
            rest = &rest[COOKIE_LEN..];
            Some(c)
        } else {
            None
        };
        let error = if flags.contains(Flags::ERR) {
            let b = rest.get(..2).ok_or(DecodeError::Malformed)?;
            rest = &rest[2..];
            Some(ErrorCode(be16(b)))
        } else {
            None
        };
        // spec §13.2: the data area is a run of well-formed chunks.
        super::chunk::validate_chunks(rest)?;
        Ok(Packet { header, sack, params, token, cookie, error, data: rest })
    }

    /// Encoded length of the whole datagram.
    pub fn len(&self) -> usize {
        self.len_with(self.data.len())
    }

    /// Encoded length with `data_len` bytes of data in place of `self.data`.
    pub fn len_with(&self, data_len: usize) -> usize {
        HEADER_LEN + self.sections_len() + data_len
    }

    /// Never true: a packet always has a header.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn sections_len(&self) -> usize {
        self.sack.map_or(0, |s| s.encoded_len())
            + self.params.map_or(0, |_| PARAMS_LEN)
            + self.token.filter(|_| self.params.is_some()).map_or(0, |_| TOKEN_LEN)
            + self.cookie.map_or(0, |_| COOKIE_LEN)
            + self.error.map_or(0, |_| 2)
    }

    /// Writes the datagram into `out[..self.len()]`, setting the flag bits of
    /// the sections present and the payload length, and seals the CRC.
    /// Returns the length written.
    ///
    /// Panics if `out` is shorter than [`Packet::len`]: the caller sized it.
    pub fn emit(&self, out: &mut [u8]) -> usize {
        self.emit_with(out, self.data.len(), |d| d.copy_from_slice(self.data))
    }

    /// Like [`Packet::emit`], with `data_len` bytes of data (in place of
    /// `self.data`) written by `write_data` into the slice it is given.
    pub fn emit_with(&self, out: &mut [u8], data_len: usize, write_data: impl FnOnce(&mut [u8])) -> usize {
        self.emit_gathered(out, data_len, &Bytes::new(), None, write_data)
    }

    /// Like [`Packet::emit_with`] for a datagram sent as two pieces: `out`
    /// gets all but its last `tail.len()` bytes, which are `tail` (the
    /// payload of its last DATA chunk, not copied; spec §3.2, §7.2).
    /// `write_data` writes the data area less `tail`. The CRC covers both;
    /// with `crcs`, `tail`'s part of it may come from that memo (a group's
    /// members get the same payloads, spec §14.4). Returns the whole
    /// datagram's length.
    pub(crate) fn emit_gathered(
        &self,
        out: &mut [u8],
        data_len: usize,
        tail: &Bytes,
        crcs: Option<&mut PayloadCrcs>,
        write_data: impl FnOnce(&mut [u8]),
    ) -> usize {
        let total = HEADER_LEN + self.sections_len() + data_len;
        let out = &mut out[..total - tail.len()];
        let mut header = self.header;
        header.payload_len = (total - HEADER_LEN) as u16;
        let mut set = |on: bool, f: Flags| {
            if on {
                header.flags.insert(f)
            } else {
                header.flags.0 &= !f.0
            }
        };
        set(self.sack.is_some(), Flags::SCK);
        set(self.params.is_some(), Flags::SYN);
        set(self.cookie.is_some(), Flags::CKE);
        set(self.error.is_some(), Flags::ERR);
        header.emit(out);
        let mut at = HEADER_LEN;
        if let Some(s) = &self.sack {
            at += s.emit(&mut out[at..]);
        }
        if let Some(p) = &self.params {
            let mut p = *p;
            // spec §3.3.5: the TOKEN bit announces exactly the token section.
            p.features &= !HandshakeParams::TOKEN;
            if self.token.is_some() {
                p.features |= HandshakeParams::TOKEN;
            }
            p.emit(&mut out[at..]);
            at += PARAMS_LEN;
            if let Some(t) = &self.token {
                t.emit(&mut out[at..]);
                at += TOKEN_LEN;
            }
        }
        if let Some(c) = &self.cookie {
            c.emit(&mut out[at..]);
            at += COOKIE_LEN;
        }
        if let Some(e) = self.error {
            out[at..at + 2].copy_from_slice(&e.0.to_be_bytes());
            at += 2;
        }
        write_data(&mut out[at..]);
        match crcs {
            Some(memo) if !tail.is_empty() => memo.seal(out, tail),
            _ => seal_gathered(out, tail),
        }
        total
    }

    /// A packet with only a header; sections and data are added by the caller.
    pub fn bare(ptype: PacketType, flags: Flags, conn_id: u32, seq: u32, ack: u32, window: u32) -> Self {
        Packet {
            header: Header { ptype, flags, payload_len: 0, conn_id, seq, ack, window },
            sack: None,
            params: None,
            token: None,
            cookie: None,
            error: None,
            data: &[],
        }
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::seal;
    use proptest::prelude::*;

    fn full() -> Packet<'static> {
        let mut sack = SackBlock::new();
        sack.push(10, 12);
        sack.push(20, 25);
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 9, 100, 5, 4096);
        p.sack = Some(sack);
        p.params = Some(HandshakeParams::new(0xdead_beef, 1452));
        p.token = Some(Token { timestamp: 6, mac: 7 });
        p.cookie = Some(Cookie { timestamp: 1, client_id: 2, client_max_datagram: 3, echo_delay: 5, mac: 4 });
        p.error = Some(ErrorCode::REFUSED);
        p.data = &[5, 5, 5, 5, 5]; // five one-byte pad chunks (spec §13.2)
        p
    }

    fn encode(p: &Packet) -> Vec<u8> {
        let mut v = vec![0u8; p.len()];
        assert_eq!(p.emit(&mut v), v.len());
        v
    }

    #[test]
    fn packet_with_every_section_emits_literal_payload() {
        let v = encode(&full());
        assert_eq!(v[1], 0x02 | 0x01 | 0x20 | 0x40 | 0x80);
        let payload: &[u8] = &v[HEADER_LEN..];
        let expected: &[u8] = &[
            2, 0, 0, 0, 10, 0, 0, 0, 12, 0, 0, 0, 20, 0, 0, 0, 25, // sack
            0xde, 0xad, 0xbe, 0xef, 0x05, 0xac, 0, 4, // params, TOKEN
            0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0, 7, // token
            0, 0, 0, 1, 0, 0, 0, 2, 0, 3, 0, 5, 0, 0, 0, 0, 0, 0, 0, 4, // cookie, echo delay 5
            0, 3, // error
            5, 5, 5, 5, 5,
        ];
        assert_eq!(payload, expected);
    }

    #[test]
    fn packet_round_trips() {
        let v = encode(&full());
        let mut expect = full();
        expect.header.flags = Flags(v[1]);
        expect.params = expect.params.map(|p| HandshakeParams { features: HandshakeParams::TOKEN, ..p });
        expect.header.payload_len = (v.len() - HEADER_LEN) as u16;
        assert_eq!(Packet::parse(&v), Ok(expect));
    }

    #[test]
    fn every_truncated_packet_prefix_is_rejected() {
        let v = encode(&full());
        for n in 0..v.len() {
            assert!(Packet::parse(&v[..n]).is_err(), "prefix {n} accepted");
        }
    }

    #[test]
    fn sections_longer_than_payload_are_malformed() {
        // SYN flag set but no room for params: a correctly sealed lie.
        let mut v = encode(&Packet::bare(PacketType::Segment, Flags::ACK, 1, 2, 3, 4));
        v[1] |= Flags::SYN.0;
        seal(&mut v);
        assert_eq!(Packet::parse(&v), Err(DecodeError::Malformed));
    }

    #[test]
    fn zero_or_oversized_sack_counts_are_malformed() {
        for count in [0u8, MAX_SACK_RANGES as u8 + 1] {
            let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 1, 2, 3, 4);
            let data = [count; 200];
            p.data = &data;
            let mut v = encode(&p);
            v[1] |= Flags::SCK.0;
            seal(&mut v);
            assert_eq!(Packet::parse(&v), Err(DecodeError::Malformed), "count {count}");
        }
    }

    #[test]
    fn an_echo_follows_the_ranges_and_may_stand_alone() {
        // spec §3.3.1, §5.4.2: count byte 0x80 | N, N ranges, seq u32, count u8.
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 1, 2, 3, 4);
        p.sack = Some(SackBlock::new().with_echo(Echo { seq: 0x0102_0304, count: 2 }));
        let v = encode(&p);
        assert_eq!(&v[HEADER_LEN..], &[0x80, 1, 2, 3, 4, 2]);
        assert_eq!(Packet::parse(&v).unwrap().sack, p.sack);
        let mut s = SackBlock::new();
        s.push(10, 12);
        p.sack = Some(s.with_echo(Echo { seq: 9, count: 0 }));
        let v = encode(&p);
        assert_eq!(&v[HEADER_LEN..], &[0x81, 0, 0, 0, 10, 0, 0, 0, 12, 0, 0, 0, 9, 0]);
        assert_eq!(Packet::parse(&v).unwrap().sack, p.sack);
        // Cut short of its echo, or 17 ranges with the bit: malformed.
        for bad in [&[0x80u8, 1, 2, 3][..], &[0x91; 200][..]] {
            let mut q = Packet::bare(PacketType::Segment, Flags::ACK, 1, 2, 3, 4);
            q.data = bad;
            let mut v = encode(&q);
            v[1] |= Flags::SCK.0;
            seal(&mut v);
            assert_eq!(Packet::parse(&v), Err(DecodeError::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn a_token_without_parameters_is_not_emitted_and_a_stray_token_bit_is_cleared() {
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 1, 2, 3, 4);
        p.token = Some(Token { timestamp: 1, mac: 2 });
        assert_eq!(encode(&p).len(), HEADER_LEN, "no SYN: no token section");
        let mut p = Packet::bare(PacketType::Segment, Flags::empty(), 0, 2, 0, 4);
        p.params = Some(HandshakeParams { conn_id: 5, max_datagram: 1452, features: HandshakeParams::TOKEN });
        let v = encode(&p);
        let back = Packet::parse(&v).expect("parses");
        assert_eq!((back.token, back.params.map(|p| p.features)), (None, Some(0)));
    }

    proptest! {
        #[test]
        fn any_packet_round_trips(
            flags in 0u8..=0xff,
            conn_id: u32, seq: u32, ack: u32, window: u32,
            ranges in proptest::collection::vec((any::<u32>(), any::<u32>()), 0..=MAX_SACK_RANGES),
            echo in proptest::option::of((any::<u32>(), any::<u8>())),
            params in proptest::option::of((any::<u32>(), any::<u16>())),
            token in proptest::option::of((any::<u32>(), any::<u64>())),
            cookie in proptest::option::of((any::<u32>(), any::<u32>(), any::<u16>(), any::<u64>())),
            error in proptest::option::of(any::<u16>()),
            body in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let chunk = super::super::chunk::Chunk::Data(super::super::chunk::DataChunk {
                stream: crate::StreamId::new(1), flags: 0, offset: 0, in_msg: 0, data: &body[..], msg: 0,
            });
            let mut data = vec![0u8; chunk.encoded_len()];
            chunk.emit(&mut data);
            let mut p = Packet::bare(PacketType::Segment, Flags(flags), conn_id, seq, ack, window);
            if !ranges.is_empty() || echo.is_some() {
                let mut s = SackBlock::new();
                for (a, b) in &ranges { s.push(*a, *b); }
                if let Some((seq, count)) = echo { s = s.with_echo(Echo { seq, count }); }
                p.sack = Some(s);
            }
            p.params = params.map(|(conn_id, max_datagram)| HandshakeParams::new(conn_id, max_datagram));
            p.token = token.map(|(timestamp, mac)| Token { timestamp, mac });
            p.cookie = cookie.map(|(timestamp, client_id, client_max_datagram, mac)| Cookie { timestamp, client_id, client_max_datagram, echo_delay: 0, mac });
            p.error = error.map(ErrorCode);
            p.data = &data;
            let v = encode(&p);
            let back = Packet::parse(&v).unwrap();
            prop_assert_eq!(back.sack, p.sack);
            let expect_params = p.params.map(|pp| HandshakeParams {
                features: if p.token.is_some() { HandshakeParams::TOKEN } else { 0 }, ..pp
            });
            prop_assert_eq!(back.params, expect_params);
            prop_assert_eq!(back.token, p.token.filter(|_| p.params.is_some()));
            prop_assert_eq!(back.cookie, p.cookie);
            prop_assert_eq!(back.error, p.error);
            prop_assert_eq!(back.data, &data[..]);
            prop_assert_eq!((back.header.conn_id, back.header.seq, back.header.ack, back.header.window), (conn_id, seq, ack, window));
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Packet::parse(&data);
        }
    }
}
