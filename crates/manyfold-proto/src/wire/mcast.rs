//! The multicast session's packets (spec §16.2, §16.9, §16.12, §19.7):
//! the connection's 24-byte header and CRC (spec §3.1–§3.2) with its
//! fields reused per packet type, and the payloads: the session
//! description, range lists, the grouping fields (REGISTER's and ACK's
//! KLV, the group assignment, STATUS's loss-signature trailer).
//!
//! The header's fields by type (spec §16.2's table; [`McPacket`] names them):
//!
//! ```text
//! type          conn id   seq              ack                window
//! ANNOUNCE      session   next SN          total (2^32-1: ?)  phase
//! REGISTER      session   0                network id         client id
//! REGISTER+ACK  session   SN received from network id         client id
//! GROUP         session   epoch            group id           client id
//! DATA          session   SN               LWSN               W
//! ACK           session   LWSN             network id         client id
//! NACK          session   highest SN held  network id         client id
//! REPAIR        session   request round    network id         client id
//! STATUS        session   packets held     network id         client id
//! END           session   total packets    0                  client id (0: all)
//! PARITY        session   FEC block        parity index       packets in block
//! ```
//!
//! The payloads' fields are byte ranges (`field`), checked once up front
//! as in the unicast wire; with ERR set, a 2-byte [`ErrorCode`] comes first.

use std::ops::Range;

use crate::wire::{seal, DecodeError, ErrorCode, Flags, Header, PacketType, HEADER_LEN};

// Payload field byte ranges, smoltcp style.
mod field {
    use core::ops::Range;

    /// The error code before any other payload when ERR is set.
    pub const CODE: Range<usize> = 0..2;

    /// ANNOUNCE's (and REGISTER+ACK's) session description.
    pub mod announce {
        use core::ops::Range;
        pub const SIZE: Range<usize> = 0..8;
        pub const BLOCK: Range<usize> = 8..10;
        pub const ARTP_MAX: Range<usize> = 10..14;
        pub const REPAIR_INTERVAL: Range<usize> = 14..16;
        pub const FEC_K: Range<usize> = 16..18;
        pub const HASH_ALGO: usize = 18;
        pub const HASH: Range<usize> = 19..51;
        pub const NAME_LEN: usize = 51;
        /// The name follows, `NAME_LEN` bytes.
        pub const NAME: usize = 52;
    }

    /// A range list: a count, then that many `[start, end)` entries.
    pub mod ranges {
        use core::ops::Range;
        pub const COUNT: Range<usize> = 0..2;
        pub const ENTRIES: usize = 2;
        /// Within one entry.
        pub const START: Range<usize> = 0..4;
        pub const END: Range<usize> = 4..8;
        pub const ENTRY_LEN: usize = END.end;
    }

    /// STATUS's loss-signature trailer (spec §16.12).
    pub mod trailer {
        use core::ops::Range;
        pub const VERSION: usize = 0;
        pub const COUNT: usize = 1;
        pub const ENTRIES: usize = 2;
        /// Within one entry.
        pub const BLOCK: Range<usize> = 0..4;
        pub const BITS: Range<usize> = 4..36;
        pub const ENTRY_LEN: usize = BITS.end;
    }

    /// A protected session's invitation (spec §19.7).
    pub mod invite {
        use core::ops::Range;
        pub const PATTERN: usize = 0;
        pub const KEY: Range<usize> = 1..33;
    }
}

/// Bytes of a range-list entry: `[start, end)` as two `u32`.
const RANGE_LEN: usize = field::ranges::ENTRY_LEN;
/// Bytes of the fixed part of an ANNOUNCE payload, before the name.
const ANNOUNCE_FIXED: usize = field::announce::NAME;
/// Bytes of an invitation's payload.
const INVITE_LEN: usize = field::invite::KEY.end;
/// Bytes of one loss signature in STATUS's trailer: block and bits.
const SIGNATURE_LEN: usize = field::trailer::ENTRY_LEN;
/// Signatures a STATUS trailer carries at most (spec §16.12).
pub const MAX_SIGNATURES: usize = 4;
/// The STATUS trailer's version (spec §16.12): a trailer of another
/// version is ignored, the STATUS stands.
pub const SIGNATURE_VERSION: u8 = 1;
/// Bytes of the longest STATUS trailer.
pub const MAX_TRAILER_LEN: usize = field::trailer::ENTRIES + MAX_SIGNATURES * SIGNATURE_LEN;

/// The Noise pattern of a protected session's registrations, announced in
/// its invitation (spec §19.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// The receiver knows the sender's static key (from the invitation,
    /// checked against its known peers) and proves its own in message 1.
    Ik = 1,
    /// IK with the PSK mixed in at message 1.
    IkPsk1 = 2,
    /// Only the PSK authenticates, both ways; no static keys.
    NnPsk0 = 3,
}

impl Pattern {
    pub(crate) fn from_u8(v: u8) -> Result<Pattern, DecodeError> {
        match v {
            1 => Ok(Pattern::Ik),
            2 => Ok(Pattern::IkPsk1),
            3 => Ok(Pattern::NnPsk0),
            _ => Err(DecodeError::Malformed),
        }
    }
}
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
        use field::ranges::{COUNT, ENTRIES};
        let n = p.get(COUNT).map(be16).ok_or(DecodeError::Malformed)? as usize;
        let raw = p.get(ENTRIES..ENTRIES + n * RANGE_LEN).ok_or(DecodeError::Malformed)?;
        let list = RangeList { raw };
        let mut prev_end: Option<u32> = None;
        for r in list.iter() {
            if r.start >= r.end || prev_end.is_some_and(|e| r.start < e) {
                return Err(DecodeError::Malformed);
            }
            prev_end = Some(r.end);
        }
        Ok((list, &p[ENTRIES + raw.len()..]))
    }

    pub fn iter(&self) -> impl Iterator<Item = Range<u32>> + 'a {
        use field::ranges::{END, START};
        self.raw.chunks_exact(RANGE_LEN).map(|c| be32(&c[START])..be32(&c[END]))
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
    use field::ranges::{COUNT, END, ENTRIES, START};
    if out.len() < ENTRIES {
        return (0, 0);
    }
    let mut n = 0;
    // Entries first, so that no range is drawn beyond the room.
    for (entry, r) in out[ENTRIES..].chunks_exact_mut(RANGE_LEN).take(u16::MAX as usize).zip(ranges) {
        entry[START].copy_from_slice(&r.start.to_be_bytes());
        entry[END].copy_from_slice(&r.end.to_be_bytes());
        n += 1;
    }
    out[COUNT].copy_from_slice(&(n as u16).to_be_bytes());
    (ENTRIES + n * RANGE_LEN, n)
}

/// The losses of one signature block (spec §16.12): bit `mix(sn) mod 256`
/// (of `bits`, word 0's low bit first) for every SN of block `block` lost
/// in the first sending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signature {
    pub block: u32,
    pub bits: [u64; 4],
}

/// A validated STATUS trailer of version 1 (spec §16.12): 1 to
/// `MAX_SIGNATURES` signatures, oldest block first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signatures<'a> {
    raw: &'a [u8],
}

impl<'a> Signatures<'a> {
    /// Parses what follows a STATUS's header (and error code): nothing, or
    /// a trailer of another version, is `None`; a version-1 trailer whose
    /// count is 0 or above `MAX_SIGNATURES`, or whose entries run past
    /// the payload, is malformed. Bytes after the entries are ignored
    /// (room for later extensions, as after a range list).
    fn parse(p: &'a [u8]) -> Result<Option<Signatures<'a>>, DecodeError> {
        use field::trailer::{COUNT, ENTRIES, VERSION};
        match p.get(VERSION) {
            None => return Ok(None),
            Some(&v) if v != SIGNATURE_VERSION => return Ok(None),
            Some(_) => {}
        }
        let n = usize::from(*p.get(COUNT).ok_or(DecodeError::Malformed)?);
        if n == 0 || n > MAX_SIGNATURES {
            return Err(DecodeError::Malformed);
        }
        let raw = p.get(ENTRIES..ENTRIES + n * SIGNATURE_LEN).ok_or(DecodeError::Malformed)?;
        Ok(Some(Signatures { raw }))
    }

    pub fn iter(&self) -> impl Iterator<Item = Signature> + 'a {
        use field::trailer::{BITS, BLOCK};
        self.raw.chunks_exact(SIGNATURE_LEN).map(|e| {
            let mut bits = [0u64; 4];
            for (w, b) in bits.iter_mut().zip(e[BITS].chunks_exact(8)) {
                *w = be64(b);
            }
            Signature { block: be32(&e[BLOCK]), bits }
        })
    }

    /// Signatures carried (1 to `MAX_SIGNATURES`).
    pub fn len(&self) -> usize {
        self.raw.len() / SIGNATURE_LEN
    }

    /// Never: a trailer carries at least one signature.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// Writes a STATUS trailer (spec §16.12) of the first `MAX_SIGNATURES`
/// of `sigs` into `out`; returns its length: 0 for no signature, or if
/// `out` is too short for them all.
pub fn emit_signatures(out: &mut [u8], sigs: impl IntoIterator<Item = Signature>) -> usize {
    use field::trailer::{BITS, BLOCK, COUNT, ENTRIES, VERSION};
    let mut n = 0;
    for s in sigs.into_iter().take(MAX_SIGNATURES) {
        let Some(e) = out.get_mut(ENTRIES + n * SIGNATURE_LEN..ENTRIES + (n + 1) * SIGNATURE_LEN) else {
            return 0;
        };
        e[BLOCK].copy_from_slice(&s.block.to_be_bytes());
        for (w, b) in s.bits.iter().zip(e[BITS].chunks_exact_mut(8)) {
            b.copy_from_slice(&w.to_be_bytes());
        }
        n += 1;
    }
    if n == 0 {
        return 0;
    }
    out[VERSION] = SIGNATURE_VERSION;
    out[COUNT] = n as u8;
    ENTRIES + n * SIGNATURE_LEN
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
    /// `auto_group` (KLV): registered without an operator's network id,
    /// the sender may regroup it (spec §16.12).
    Register {
        session: u32,
        client: u32,
        network: u32,
        auto_group: bool,
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
    /// The group the sender assigns a receiver (REGISTER with ACK and
    /// KLV, spec §16.12): at `epoch` (serial, mod 2^32; an older one is
    /// stale), feedback carries and heeds network id `group`.
    GroupAssignment {
        session: u32,
        client: u32,
        epoch: u32,
        group: u32,
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
    /// `behind` (KLV): the receiver lags its network (spec §16.7).
    Ack {
        session: u32,
        client: u32,
        network: u32,
        lwsn: u32,
        behind: bool,
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
    /// `signatures`: the receiver's loss signatures (spec §16.12), if
    /// its trailer is of a version this parser knows.
    Status {
        session: u32,
        client: u32,
        network: u32,
        held: u32,
        complete: bool,
        error: Option<ErrorCode>,
        confirm: bool,
        signatures: Option<Signatures<'a>>,
    },
    End {
        session: u32,
        client: u32,
        total: u32,
        error: Option<ErrorCode>,
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
            let code = p.get(field::CODE).map(be16).ok_or(DecodeError::Malformed)?;
            (Some(ErrorCode(code)), &p[field::CODE.end..])
        } else {
            (None, p)
        };
        let (client, network) = (h.window, h.ack);
        // CKE marks the clear packets of a protected session's key exchange.
        let keyed = h.flags.contains(Flags::CKE);
        // spec §16.7, §16.12: KLV on REGISTER, REGISTER+ACK and ACK.
        let klv = h.flags.contains(Flags::KLV);
        Ok(match h.ptype {
            PacketType::McAnnounce if keyed => {
                if p.len() != INVITE_LEN {
                    return Err(DecodeError::Malformed);
                }
                let mut key = [0u8; 32];
                key.copy_from_slice(&p[field::invite::KEY]);
                McPacket::Invite { session, pattern: Pattern::from_u8(p[field::invite::PATTERN])?, key }
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
                    McPacket::Register { session, client, network, auto_group: klv, noise: Some(p) }
                }
            }
            PacketType::McRegister if h.flags.contains(Flags::ACK) && klv => {
                // spec §16.12: a group assignment is the header alone.
                if !p.is_empty() {
                    return Err(DecodeError::Malformed);
                }
                McPacket::GroupAssignment { session, client, epoch: h.seq, group: h.ack }
            }
            PacketType::McRegister if h.flags.contains(Flags::ACK) => {
                let info = if p.is_empty() { None } else { Some(parse_announcement(p)?) };
                McPacket::RegisterAck { session, client, network, from_sn: h.seq, info }
            }
            PacketType::McRegister => McPacket::Register { session, client, network, auto_group: klv, noise: None },
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
                McPacket::Ack { session, client, network, lwsn: h.seq, behind: klv, missing: RangeList::parse(p)?.0 }
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
                signatures: Signatures::parse(p)?,
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
    use field::announce::*;
    // Checked once: every fixed field is in range below.
    let fixed = p.get(..ANNOUNCE_FIXED).ok_or(DecodeError::Malformed)?;
    let size = be64(&fixed[SIZE]);
    let block = be16(&fixed[BLOCK]);
    let artp_max_us = be32(&fixed[ARTP_MAX]);
    let repair_interval_ms = be16(&fixed[REPAIR_INTERVAL]);
    let fec_k = be16(&fixed[FEC_K]);
    let algo = fixed[HASH_ALGO];
    let mut hash = [0u8; 32];
    hash.copy_from_slice(&fixed[HASH]);
    let name_len = usize::from(fixed[NAME_LEN]);
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
    use field::announce::*;
    out[SIZE].copy_from_slice(&a.size.unwrap_or(u64::MAX).to_be_bytes());
    out[BLOCK].copy_from_slice(&a.block.to_be_bytes());
    out[ARTP_MAX].copy_from_slice(&a.artp_max_us.to_be_bytes());
    out[REPAIR_INTERVAL].copy_from_slice(&a.repair_interval_ms.to_be_bytes());
    out[FEC_K].copy_from_slice(&a.fec_k.to_be_bytes());
    out[HASH_ALGO] = HASH_BLAKE3;
    out[HASH].copy_from_slice(&a.hash.unwrap_or([0; 32]));
    out[NAME_LEN] = name.len() as u8;
    out[NAME..n].copy_from_slice(name);
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
    if out.len() < INVITE_LEN {
        return 0;
    }
    out[field::invite::PATTERN] = pattern as u8;
    out[field::invite::KEY].copy_from_slice(key);
    INVITE_LEN
}

/// Writes an ERR packet's error code, first in its payload; returns its
/// length (0 if `out` is too short).
pub fn emit_code(out: &mut [u8], code: ErrorCode) -> usize {
    match out.get_mut(field::CODE) {
        Some(o) => {
            o.copy_from_slice(&code.0.to_be_bytes());
            field::CODE.end
        }
        None => 0,
    }
}

// Callers pass slices of exactly the width named.
fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_be_bytes(a)
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
            McPacket::Ack { session: 9, client: 4, network: 3, lwsn: 99, behind: false, missing } => {
                assert_eq!(missing.iter().collect::<Vec<_>>(), [2..5, 7..8]);
                assert_eq!(missing.count(), 4);
            }
            other => panic!("{other:?}"),
        }

        let n = emit(&mut buf, PacketType::McStatus, Flags::ERR, 9, 10, 3, 4, |o| emit_code(o, ErrorCode(5)))
            .expect("fits");
        assert!(matches!(
            McPacket::parse(&buf[..n]),
            Ok(McPacket::Status { held: 10, complete: false, error: Some(ErrorCode(5)), confirm: false, .. })
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

    /// One datagram of every kind whose payload has a structure.
    fn structured() -> Vec<(&'static str, Vec<u8>)> {
        let mut out = Vec::new();
        let mut buf = [0u8; 1500];
        let a = announce();
        let mut add = |name, n: Option<usize>, buf: &[u8]| out.push((name, buf[..n.expect("fits")].to_vec()));
        let n = emit(&mut buf, PacketType::McAnnounce, Flags::empty(), 9, 5, 8, 1, |o| emit_announcement(o, &a));
        add("announce", n, &buf);
        let n = emit(&mut buf, PacketType::McRegister, Flags::ACK, 9, 5, 3, 4, |o| emit_announcement(o, &a));
        add("register+ack", n, &buf);
        let n = emit(&mut buf, PacketType::McAnnounce, Flags::CKE, 9, 0, 0, 0, |o| {
            emit_invitation(o, Pattern::IkPsk1, &[3; 32])
        });
        add("invite", n, &buf);
        for ptype in [PacketType::McAck, PacketType::McNack, PacketType::McRepair] {
            let n = emit(&mut buf, ptype, Flags::empty(), 9, 99, 3, 4, |o| emit_ranges(o, [2..5, 7..8]).0);
            add("ranges", n, &buf);
        }
        let n =
            emit(&mut buf, PacketType::McStatus, Flags::ERR, 9, 10, 3, 4, |o| emit_code(o, ErrorCode::HASH_MISMATCH));
        add("status+err", n, &buf);
        let n = emit(&mut buf, PacketType::McEnd, Flags::ERR, 9, 7, 0, 4, |o| emit_code(o, ErrorCode::INTERRUPTED));
        add("end+err", n, &buf);
        let n = emit(&mut buf, PacketType::McParity, Flags::empty(), 9, 2, 1, 32, |o| emit_bytes(o, &[5; 4]));
        add("parity", n, &buf);
        let n = emit(&mut buf, PacketType::McStatus, Flags::FIN, 9, 10, 3, 4, |o| emit_signatures(o, sigs()));
        add("status+signatures", n, &buf);
        let n = emit(&mut buf, PacketType::McStatus, Flags::ERR, 9, 10, 3, 4, |o| {
            let c = emit_code(o, ErrorCode::INTERRUPTED);
            c + emit_signatures(&mut o[c..], sigs().take(1))
        });
        add("status+err+signatures", n, &buf);
        out
    }

    /// Four signatures with every bit pattern kind: empty, one bit, full.
    fn sigs() -> impl Iterator<Item = Signature> + Clone {
        [
            Signature { block: 7, bits: [0; 4] },
            Signature { block: 8, bits: [1, 0, 0, 1 << 63] },
            Signature { block: 9, bits: [u64::MAX; 4] },
            Signature { block: u32::MAX, bits: [0x0102_0304_0506_0708, 0, 0, 0] },
        ]
        .into_iter()
    }

    #[test]
    fn announce_emits_literal_bytes() {
        let mut buf = [0u8; 200];
        let n =
            emit(&mut buf, PacketType::McAnnounce, Flags::empty(), 9, 5, 8, 1, |o| emit_announcement(o, &announce()))
                .expect("fits");
        let mut want = vec![
            0x11, 0x00, 0x00, 0x3c, // version 1, type 1 (ANNOUNCE), no flags, payload 60
            0x00, 0x00, 0x00, 0x09, // session
            0x00, 0x00, 0x00, 0x05, // seq: next SN
            0x00, 0x00, 0x00, 0x08, // ack: total packets
            0x00, 0x00, 0x00, 0x01, // window: phase 1 (repair)
            0x00, 0x00, 0x00, 0x00, // CRC, checked below
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x27, 0x10, // size 10,000
            0x05, 0x94, // block 1428
            0x00, 0x00, 0x02, 0x58, // ARTP_max 600 µs
            0x00, 0x32, // repair interval 50 ms
            0x00, 0x20, // fec_k 32
            0x01, // BLAKE3
        ];
        want.extend_from_slice(&[7; 32]);
        want.push(8);
        want.extend_from_slice(b"disk.img");
        let mut zeroed = buf[..n].to_vec();
        zeroed[20..24].fill(0);
        assert_eq!(zeroed, want);
        assert_eq!(u32::from_be_bytes(buf[20..24].try_into().expect("4")), crc32c::crc32c(&zeroed));
    }

    #[test]
    fn range_lists_error_codes_and_invitations_emit_literal_bytes() {
        let mut out = [0u8; 64];
        let n = emit_ranges(&mut out, [2..5, 7..8]).0;
        assert_eq!(out[..n], [0, 2, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 8]);
        assert_eq!(emit_code(&mut out, ErrorCode::INTERRUPTED), 2);
        assert_eq!(out[..2], [0, 10]);
        assert_eq!(emit_code(&mut out[..1], ErrorCode::INTERRUPTED), 0, "no room");
        let n = emit_invitation(&mut out, Pattern::NnPsk0, &[0xab; 32]);
        assert_eq!(n, 33);
        assert_eq!(out[0], 3);
        assert!(out[1..33].iter().all(|&b| b == 0xab));
        let mut buf = [0u8; 64];
        let n = emit(&mut buf, PacketType::McEnd, Flags::ERR, 0x0102_0304, 7, 0, 4, |o| emit_code(o, ErrorCode(25)))
            .expect("fits");
        assert_eq!(buf[..20], [0x18, 0x20, 0, 2, 1, 2, 3, 4, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 4]);
        assert_eq!(buf[24..n], [0, 25]);
    }

    #[test]
    fn the_other_kinds_round_trip() {
        let parsed: Vec<_> =
            structured().into_iter().map(|(name, d)| (name, McPacket::parse(&d).map(|p| format!("{p:?}")))).collect();
        let get = |i: usize| parsed[i].1.clone().unwrap_or_else(|e| panic!("{}: {e:?}", parsed[i].0));
        let a = announce();
        let want = McPacket::RegisterAck { session: 9, client: 4, network: 3, from_sn: 5, info: Some(a) };
        assert_eq!(get(1), format!("{want:?}"));
        let want = McPacket::Invite { session: 9, pattern: Pattern::IkPsk1, key: [3; 32] };
        assert_eq!(get(2), format!("{want:?}"));
        let s = McPacket::Status {
            session: 9,
            client: 4,
            network: 3,
            held: 10,
            complete: false,
            error: Some(ErrorCode::HASH_MISMATCH),
            confirm: false,
            signatures: None,
        };
        assert_eq!(get(6), format!("{s:?}"));
        let end = McPacket::End { session: 9, client: 4, total: 7, error: Some(ErrorCode::INTERRUPTED) };
        assert_eq!(get(7), format!("{end:?}"));
        let parity = McPacket::Parity { session: 9, block: 2, index: 1, k: 32, shard: &[5; 4] };
        assert_eq!(get(8), format!("{parity:?}"));
    }

    #[test]
    fn every_truncated_prefix_is_rejected() {
        for (name, d) in structured() {
            for n in 0..d.len() {
                assert!(McPacket::parse(&d[..n]).is_err(), "{name}: datagram prefix {n}");
            }
            // The payload cut short under a header that says so (and a
            // valid CRC): the fields' own lengths reject it.
            let payload = &d[HEADER_LEN..];
            // REGISTER+ACK without a payload is a valid bare confirmation.
            let from = usize::from(name == "register+ack");
            for n in from..payload.len() {
                let mut cut = d[..HEADER_LEN + n].to_vec();
                cut[2..4].copy_from_slice(&(n as u16).to_be_bytes());
                seal(&mut cut);
                let got = McPacket::parse(&cut);
                // A STATUS without its trailer stands (the trailer is
                // optional); with a part of it, it is malformed.
                let ok = (name == "parity" && n > 0)
                    || (name == "status+signatures" && n == 0)
                    || (name == "status+err+signatures" && n == 2);
                assert_eq!(got.is_ok(), ok, "{name}: payload prefix {n}: {got:?}");
            }
        }
    }

    #[test]
    fn group_fields_emit_literal_bytes() {
        let mut buf = [0u8; 200];
        // spec §16.12: the group assignment is REGISTER with ACK and KLV.
        let n =
            emit(&mut buf, PacketType::McRegister, Flags::ACK | Flags::KLV, 9, 3, 0xa000_0001, 4, |_| 0).expect("fits");
        assert_eq!(buf[..20], [0x12, 0x12, 0, 0, 0, 0, 0, 9, 0, 0, 0, 3, 0xa0, 0, 0, 1, 0, 0, 0, 4]);
        assert_eq!(
            McPacket::parse(&buf[..n]),
            Ok(McPacket::GroupAssignment { session: 9, client: 4, epoch: 3, group: 0xa000_0001 })
        );
        // The STATUS trailer: version, count, then block and 256 bits.
        let mut out = [0u8; MAX_TRAILER_LEN];
        let n = emit_signatures(&mut out, sigs().skip(1).take(1));
        let mut want = vec![1, 1, 0, 0, 0, 8];
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
        want.extend_from_slice(&[0; 16]);
        want.extend_from_slice(&[0x80, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(out[..n], want[..]);
        assert_eq!(emit_signatures(&mut out, sigs()), MAX_TRAILER_LEN);
        assert_eq!(emit_signatures(&mut out, sigs().chain(sigs())), MAX_TRAILER_LEN, "at most four");
        assert_eq!(emit_signatures(&mut out[..MAX_TRAILER_LEN - 1], sigs()), 0, "no room: nothing");
        assert_eq!(emit_signatures(&mut out, std::iter::empty()), 0, "no signature: no trailer");
    }

    #[test]
    fn group_fields_round_trip() {
        let mut buf = [0u8; 400];
        for (flags, auto_group) in [(Flags::empty(), false), (Flags::KLV, true)] {
            let n = emit(&mut buf, PacketType::McRegister, flags, 9, 0, 0x0a0b0c, 4, |_| 0).expect("fits");
            assert_eq!(
                McPacket::parse(&buf[..n]),
                Ok(McPacket::Register { session: 9, client: 4, network: 0x0a0b0c, auto_group, noise: None })
            );
            let n = emit(&mut buf, PacketType::McAck, flags, 9, 99, 3, 4, |o| emit_ranges(o, [2..5, 7..8]).0)
                .expect("fits");
            assert!(matches!(McPacket::parse(&buf[..n]), Ok(McPacket::Ack { behind, .. }) if behind == auto_group));
        }
        let n = emit(&mut buf, PacketType::McRegister, Flags::CKE | Flags::KLV, 9, 0, 3, 4, |o| emit_bytes(o, b"m1"))
            .expect("fits");
        assert!(matches!(
            McPacket::parse(&buf[..n]),
            Ok(McPacket::Register { auto_group: true, noise: Some(b"m1"), .. })
        ));
        for (name, d) in structured().into_iter().filter(|(name, _)| name.ends_with("+signatures")) {
            let Ok(McPacket::Status { signatures: Some(got), .. }) = McPacket::parse(&d) else {
                panic!("{name}: {:?}", McPacket::parse(&d))
            };
            let want: Vec<Signature> = if name.contains("err") { sigs().take(1).collect() } else { sigs().collect() };
            assert_eq!(got.iter().collect::<Vec<_>>(), want, "{name}");
            assert_eq!(got.len(), want.len());
        }
        // A STATUS without a trailer has none.
        let n = emit(&mut buf, PacketType::McStatus, Flags::empty(), 9, 1, 3, 4, |_| 0).expect("fits");
        assert!(matches!(McPacket::parse(&buf[..n]), Ok(McPacket::Status { signatures: None, .. })));
    }

    #[test]
    fn a_bad_trailer_is_malformed_and_another_version_is_ignored() {
        let mut buf = [0u8; 400];
        let mut status = |trailer: &[u8]| {
            let n = emit(&mut buf, PacketType::McStatus, Flags::empty(), 9, 1, 3, 4, |o| emit_bytes(o, trailer))
                .expect("fits");
            McPacket::parse(&buf[..n]).map(|p| match p {
                McPacket::Status { signatures, .. } => signatures.map(|s| s.len()),
                other => panic!("{other:?}"),
            })
        };
        let mut t = [0u8; MAX_TRAILER_LEN + 36];
        let len = emit_signatures(&mut t, sigs());
        assert_eq!(status(&t[..len]), Ok(Some(4)));
        assert_eq!(status(&t[..len + 3]), Ok(Some(4)), "bytes after the entries are ignored");
        t[1] = 0;
        assert_eq!(status(&t[..len]), Err(DecodeError::Malformed), "count 0");
        t[1] = 5;
        assert_eq!(status(&t[..]), Err(DecodeError::Malformed), "count above four");
        t[1] = 4;
        t[0] = 2;
        assert_eq!(status(&t[..len]), Ok(None), "another version: ignored, the STATUS stands");
        // A group assignment carries nothing else.
        let n = emit(&mut buf, PacketType::McRegister, Flags::ACK | Flags::KLV, 9, 3, 5, 4, |o| emit_bytes(o, b"x"))
            .expect("fits");
        assert_eq!(McPacket::parse(&buf[..n]), Err(DecodeError::Malformed));
    }

    #[test]
    fn range_lists_stop_at_the_room_left() {
        let mut out = [0u8; 2 + 3 * RANGE_LEN + 5];
        let (len, n) = emit_ranges(&mut out, (0..10).map(|i| i * 10..i * 10 + 1));
        assert_eq!((len, n), (2 + 3 * RANGE_LEN, 3));
    }
}
