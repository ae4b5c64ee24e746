//! The multicast session's packets (spec §16.2): the connection's 24-byte
//! header and CRC with the fields reused per type, and the payloads.

use std::ops::Range;

pub use super::secure::Pattern;
use crate::wire::{seal, DecodeError, Flags, Header, PacketType, HEADER_LEN};

/// Bytes of a range-list entry: `[start, end)` as two `u32`.
const RANGE_LEN: usize = 8;
/// Bytes of the fixed part of an ANNOUNCE payload, before the name.
const ANNOUNCE_FIXED: usize = 8 + 2 + 4 + 2 + 2 + 1 + 32 + 1;
/// Hash algorithm number of BLAKE3 in ANNOUNCE.
pub const HASH_BLAKE3: u8 = 1;
/// ANNOUNCE's total-packets value while the length is unknown.
pub const UNKNOWN_TOTAL: u32 = u32::MAX;

/// Session phases as ANNOUNCE carries them in its window field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Data = 0,
    Repair = 1,
    Ended = 2,
}

/// What ANNOUNCE says about the session (spec §16.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    /// File size in bytes; `None` while a stream's length is unknown.
    pub size: Option<u64>,
    /// Payload bytes per DATA packet.
    pub block: u16,
    /// The ACK/NACK backoff bound receivers use, in µs.
    pub artp_max_us: u32,
    /// How often a receiver repeats its REPAIR while it misses packets, in ms.
    pub repair_interval_ms: u16,
    /// Packets per FEC block (spec §16.9); 0: no parity.
    pub fec_k: u16,
    /// BLAKE3 of the whole file; `None` while unknown.
    pub hash: Option<[u8; 32]>,
    /// File name, without any directory.
    pub name: String,
}

/// A validated range list (spec §16.2): ascending, disjoint, non-empty ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RangeList<'a> {
    raw: &'a [u8],
}

impl<'a> RangeList<'a> {
    fn parse(p: &'a [u8]) -> Result<(RangeList<'a>, &'a [u8]), DecodeError> {
        let n = p.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]) as usize).ok_or(DecodeError::Malformed)?;
        let raw = p.get(2..2 + n * RANGE_LEN).ok_or(DecodeError::Malformed)?;
        let list = RangeList { raw };
        let mut prev_end: Option<u32> = None;
        for r in list.iter() {
            if r.start >= r.end || prev_end.is_some_and(|e| r.start < e) {
                return Err(DecodeError::Malformed);
            }
            prev_end = Some(r.end);
        }
        Ok((list, &p[2 + raw.len()..]))
    }

    pub fn iter(&self) -> impl Iterator<Item = Range<u32>> + 'a {
        self.raw.chunks_exact(RANGE_LEN).map(|c| be32(&c[..4])..be32(&c[4..]))
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Sequence numbers covered.
    pub fn count(&self) -> u64 {
        self.iter().map(|r| u64::from(r.end - r.start)).sum()
    }
}

/// Writes a range list into `out` from `ranges` (ascending, disjoint),
/// as many as fit; returns bytes written and ranges taken.
pub fn emit_ranges(out: &mut [u8], ranges: impl IntoIterator<Item = Range<u32>>) -> (usize, usize) {
    if out.len() < 2 {
        return (0, 0);
    }
    let room = (out.len() - 2) / RANGE_LEN;
    let mut n = 0;
    for r in ranges.into_iter().take(room.min(u16::MAX as usize)) {
        let at = 2 + n * RANGE_LEN;
        out[at..at + 4].copy_from_slice(&r.start.to_be_bytes());
        out[at + 4..at + 8].copy_from_slice(&r.end.to_be_bytes());
        n += 1;
    }
    out[..2].copy_from_slice(&(n as u16).to_be_bytes());
    (2 + n * RANGE_LEN, n)
}

/// One parsed multicast packet. Fields follow spec §16.2's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McPacket<'a> {
    Announce {
        session: u32,
        next_sn: u32,
        total: Option<u32>,
        phase: Phase,
        info: Announcement,
    },
    /// A protected session's invitation (ANNOUNCE with CKE, spec §19.7):
    /// the registration's Noise pattern and the sender's static key.
    Invite {
        session: u32,
        pattern: Pattern,
        key: [u8; 32],
    },
    /// `noise`: Noise message 1 of a protected registration (CKE).
    Register {
        session: u32,
        client: u32,
        network: u32,
        noise: Option<&'a [u8]>,
    },
    /// A protected registration's answer (REGISTER with ACK and CKE):
    /// Noise message 2, whose payload holds the group key (spec §19.7).
    RegisterKeys {
        session: u32,
        client: u32,
        noise: &'a [u8],
    },
    /// Carries the session description, so that a receiver that heard
    /// only DATA can register at once (spec §16.6).
    RegisterAck {
        session: u32,
        client: u32,
        network: u32,
        from_sn: u32,
        info: Option<Announcement>,
    },
    Data {
        session: u32,
        sn: u32,
        lwsn: u32,
        window: u32,
        last: bool,
        repair: bool,
        payload: &'a [u8],
    },
    Ack {
        session: u32,
        client: u32,
        network: u32,
        lwsn: u32,
        missing: RangeList<'a>,
    },
    Nack {
        session: u32,
        client: u32,
        network: u32,
        highest: u32,
        missing: RangeList<'a>,
    },
    Repair {
        session: u32,
        client: u32,
        network: u32,
        round: u32,
        missing: RangeList<'a>,
    },
    Status {
        session: u32,
        client: u32,
        network: u32,
        held: u32,
        complete: bool,
        error: Option<u16>,
        confirm: bool,
    },
    End {
        session: u32,
        client: u32,
        total: u32,
        error: Option<u16>,
    },
    /// Parity shard `index` of FEC block `block`, whose first `k` packets
    /// (fewer in the last block) it protects (spec §16.9).
    Parity {
        session: u32,
        block: u32,
        index: u16,
        k: u16,
        shard: &'a [u8],
    },
}

impl<'a> McPacket<'a> {
    /// Checks and parses a whole datagram; segments and malformed packets
    /// are errors (the caller drops and counts them, spec §3.5).
    pub fn parse(data: &'a [u8]) -> Result<McPacket<'a>, DecodeError> {
        Self::parse_header(Header::parse(data)?, &data[HEADER_LEN..])
    }

    /// Parses a datagram a group key just opened: the AEAD vouches for it,
    /// its CRC field is stale (spec §19.7).
    pub(crate) fn parse_opened(data: &'a [u8]) -> Result<McPacket<'a>, DecodeError> {
        Self::parse_header(Header::parse_opened(data)?, &data[HEADER_LEN..])
    }

    fn parse_header(h: Header, p: &'a [u8]) -> Result<McPacket<'a>, DecodeError> {
        let session = h.conn_id;
        if session == 0 {
            return Err(DecodeError::Malformed);
        }
        let (error, p) = if h.flags.contains(Flags::ERR) {
            let b = p.get(..2).ok_or(DecodeError::Malformed)?;
            (Some(u16::from_be_bytes([b[0], b[1]])), &p[2..])
        } else {
            (None, p)
        };
        let (client, network) = (h.window, h.ack);
        // CKE marks the clear packets of a protected session's key exchange.
        let keyed = h.flags.contains(Flags::CKE);
        Ok(match h.ptype {
            PacketType::McAnnounce if keyed => {
                let (&pattern, key) = p.split_first().ok_or(DecodeError::Malformed)?;
                let key = key.try_into().map_err(|_| DecodeError::Malformed)?;
                McPacket::Invite { session, pattern: Pattern::from_u8(pattern)?, key }
            }
            PacketType::McAnnounce => {
                let phase = match h.window {
                    0 => Phase::Data,
                    1 => Phase::Repair,
                    2 => Phase::Ended,
                    _ => return Err(DecodeError::Malformed),
                };
                let total = (h.ack != UNKNOWN_TOTAL).then_some(h.ack);
                McPacket::Announce { session, next_sn: h.seq, total, phase, info: parse_announcement(p)? }
            }
            PacketType::McRegister if keyed => {
                if p.is_empty() {
                    return Err(DecodeError::Malformed);
                }
                if h.flags.contains(Flags::ACK) {
                    McPacket::RegisterKeys { session, client, noise: p }
                } else {
                    McPacket::Register { session, client, network, noise: Some(p) }
                }
            }
            PacketType::McRegister if h.flags.contains(Flags::ACK) => {
                let info = if p.is_empty() { None } else { Some(parse_announcement(p)?) };
                McPacket::RegisterAck { session, client, network, from_sn: h.seq, info }
            }
            PacketType::McRegister => McPacket::Register { session, client, network, noise: None },
            PacketType::McData => McPacket::Data {
                session,
                sn: h.seq,
                lwsn: h.ack,
                window: h.window,
                last: h.flags.contains(Flags::FIN),
                repair: h.flags.contains(Flags::KLV),
                payload: p,
            },
            PacketType::McAck => {
                McPacket::Ack { session, client, network, lwsn: h.seq, missing: RangeList::parse(p)?.0 }
            }
            PacketType::McNack => {
                McPacket::Nack { session, client, network, highest: h.seq, missing: RangeList::parse(p)?.0 }
            }
            PacketType::McRepair => {
                McPacket::Repair { session, client, network, round: h.seq, missing: RangeList::parse(p)?.0 }
            }
            PacketType::McStatus => McPacket::Status {
                session,
                client,
                network,
                held: h.seq,
                complete: h.flags.contains(Flags::FIN),
                error,
                confirm: h.flags.contains(Flags::ACK),
            },
            PacketType::McEnd => McPacket::End { session, client: h.window, total: h.seq, error },
            PacketType::McParity => {
                let (Ok(index), Ok(k)) = (u16::try_from(h.ack), u16::try_from(h.window)) else {
                    return Err(DecodeError::Malformed);
                };
                if k == 0 || p.is_empty() {
                    return Err(DecodeError::Malformed);
                }
                McPacket::Parity { session, block: h.seq, index, k, shard: p }
            }
            PacketType::Segment | PacketType::Protected | PacketType::Path | PacketType::McSealed => {
                return Err(DecodeError::PacketType(h.ptype as u8))
            }
        })
    }
}

pub(crate) fn parse_announcement(p: &[u8]) -> Result<Announcement, DecodeError> {
    let fixed = p.get(..ANNOUNCE_FIXED).ok_or(DecodeError::Malformed)?;
    let size = u64::from_be_bytes(fixed[..8].try_into().expect("8 bytes"));
    let block = u16::from_be_bytes([fixed[8], fixed[9]]);
    let artp_max_us = be32(&fixed[10..14]);
    let repair_interval_ms = u16::from_be_bytes([fixed[14], fixed[15]]);
    let fec_k = u16::from_be_bytes([fixed[16], fixed[17]]);
    let algo = fixed[18];
    let hash: [u8; 32] = fixed[19..51].try_into().expect("32 bytes");
    let name_len = fixed[51] as usize;
    let name = p.get(ANNOUNCE_FIXED..ANNOUNCE_FIXED + name_len).ok_or(DecodeError::Malformed)?;
    let name = std::str::from_utf8(name).map_err(|_| DecodeError::Malformed)?;
    if block == 0 || algo != HASH_BLAKE3 || name.contains('/') || p.len() != ANNOUNCE_FIXED + name_len {
        return Err(DecodeError::Malformed);
    }
    Ok(Announcement {
        size: (size != u64::MAX).then_some(size),
        block,
        artp_max_us,
        repair_interval_ms,
        fec_k,
        hash: (hash != [0; 32]).then_some(hash),
        name: name.to_string(),
    })
}

/// Writes the header of a multicast packet, lets `body` fill the payload
/// (returning its length), and seals the CRC. Returns the datagram length,
/// or `None` if `out` is too short for the header.
#[allow(clippy::too_many_arguments)]
pub fn emit(
    out: &mut [u8],
    ptype: PacketType,
    flags: Flags,
    session: u32,
    seq: u32,
    ack: u32,
    window: u32,
    body: impl FnOnce(&mut [u8]) -> usize,
) -> Option<usize> {
    if out.len() < HEADER_LEN {
        return None;
    }
    let len = body(&mut out[HEADER_LEN..]);
    let h = Header { ptype, flags, payload_len: len as u16, conn_id: session, seq, ack, window };
    h.emit(out);
    let n = HEADER_LEN + len;
    seal(&mut out[..n]);
    Some(n)
}

/// Writes an ANNOUNCE payload; returns its length (0 if `out` is too short).
pub fn emit_announcement(out: &mut [u8], a: &Announcement) -> usize {
    let name = a.name.as_bytes();
    let name = &name[..name.len().min(255)];
    let n = ANNOUNCE_FIXED + name.len();
    if out.len() < n {
        return 0;
    }
    out[..8].copy_from_slice(&a.size.unwrap_or(u64::MAX).to_be_bytes());
    out[8..10].copy_from_slice(&a.block.to_be_bytes());
    out[10..14].copy_from_slice(&a.artp_max_us.to_be_bytes());
    out[14..16].copy_from_slice(&a.repair_interval_ms.to_be_bytes());
    out[16..18].copy_from_slice(&a.fec_k.to_be_bytes());
    out[18] = HASH_BLAKE3;
    out[19..51].copy_from_slice(&a.hash.unwrap_or([0; 32]));
    out[51] = name.len() as u8;
    out[ANNOUNCE_FIXED..n].copy_from_slice(name);
    n
}

/// Writes as much of `bytes` as fits into a payload; returns its length.
pub fn emit_bytes(out: &mut [u8], bytes: &[u8]) -> usize {
    let n = bytes.len().min(out.len());
    out[..n].copy_from_slice(&bytes[..n]);
    n
}

/// Writes an invitation's payload (spec §19.7); returns its length.
pub fn emit_invitation(out: &mut [u8], pattern: Pattern, key: &[u8; 32]) -> usize {
    if out.len() < 33 {
        return 0;
    }
    out[0] = pattern as u8;
    out[1..33].copy_from_slice(key);
    33
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn announce() -> Announcement {
        Announcement {
            size: Some(10_000),
            block: 1428,
            artp_max_us: 600,
            repair_interval_ms: 50,
            fec_k: 32,
            hash: Some([7; 32]),
            name: "disk.img".into(),
        }
    }

    #[test]
    fn every_packet_kind_round_trips() {
        let mut buf = [0u8; 1500];
        let a = announce();
        let n = emit(&mut buf, PacketType::McAnnounce, Flags::empty(), 9, 5, 8, 1, |o| emit_announcement(o, &a))
            .expect("fits");
        let want = McPacket::Announce { session: 9, next_sn: 5, total: Some(8), phase: Phase::Repair, info: a };
        assert_eq!(McPacket::parse(&buf[..n]), Ok(want));

        let n = emit(&mut buf, PacketType::McAck, Flags::empty(), 9, 99, 3, 4, |o| emit_ranges(o, [2..5, 7..8]).0)
            .expect("fits");
        match McPacket::parse(&buf[..n]).expect("parses") {
            McPacket::Ack { session: 9, client: 4, network: 3, lwsn: 99, missing } => {
                assert_eq!(missing.iter().collect::<Vec<_>>(), [2..5, 7..8]);
                assert_eq!(missing.count(), 4);
            }
            other => panic!("{other:?}"),
        }

        let n = emit(&mut buf, PacketType::McStatus, Flags::ERR, 9, 10, 3, 4, |o| {
            o[..2].copy_from_slice(&5u16.to_be_bytes());
            2
        })
        .expect("fits");
        assert!(matches!(
            McPacket::parse(&buf[..n]),
            Ok(McPacket::Status { held: 10, complete: false, error: Some(5), confirm: false, .. })
        ));

        let n = emit(&mut buf, PacketType::McData, Flags::FIN | Flags::KLV, 9, 41, 41, 12, |o| {
            o[..3].copy_from_slice(b"abc");
            3
        })
        .expect("fits");
        assert_eq!(
            McPacket::parse(&buf[..n]),
            Ok(McPacket::Data { session: 9, sn: 41, lwsn: 41, window: 12, last: true, repair: true, payload: b"abc" })
        );
    }

    #[test]
    fn overlapping_or_empty_ranges_and_bad_announcements_are_malformed() {
        let mut buf = [0u8; 200];
        for bad in [[5..9, 8..10], [5..5, 6..7], [6..7, 1..2]] {
            let n = emit(&mut buf, PacketType::McNack, Flags::empty(), 1, 0, 0, 0, |o| emit_ranges(o, bad.clone()).0)
                .expect("fits");
            assert_eq!(McPacket::parse(&buf[..n]), Err(DecodeError::Malformed), "{bad:?}");
        }
        let mut a = announce();
        a.name = "../etc".into();
        let n = emit(&mut buf, PacketType::McAnnounce, Flags::empty(), 1, 0, 0, 0, |o| emit_announcement(o, &a))
            .expect("fits");
        assert_eq!(McPacket::parse(&buf[..n]), Err(DecodeError::Malformed));
        let n = emit(&mut buf, PacketType::McEnd, Flags::empty(), 0, 0, 0, 0, |_| 0).expect("fits");
        assert_eq!(McPacket::parse(&buf[..n]), Err(DecodeError::Malformed), "session 0");
    }

    #[test]
    fn range_lists_stop_at_the_room_left() {
        let mut out = [0u8; 2 + 3 * RANGE_LEN + 5];
        let (len, n) = emit_ranges(&mut out, (0..10).map(|i| i * 10..i * 10 + 1));
        assert_eq!((len, n), (2 + 3 * RANGE_LEN, 3));
    }
}
