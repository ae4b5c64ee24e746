//! Helpers shared by the fuzz targets (fuzz_targets/) and the corpus
//! generator (examples/gen_corpus.rs): datagram fix-ups that get random
//! bytes past the CRC, round-trip checks of every wire decoder (spec §3,
//! §13.2, §16.2), and a minimal in-memory network of two endpoints on a
//! virtual clock.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use manyfold_proto::mcast::{Pattern, SEAL_OVERHEAD};
use manyfold_proto::wire::chunk::{parse_chunks, summary, validate_chunks, Chunk, MAX_OFFSET};
use manyfold_proto::wire::mcast::{
    emit, emit_announcement, emit_bytes, emit_code, emit_invitation, emit_ranges, emit_signatures, McPacket, Signature,
    MAX_SIGNATURES, UNKNOWN_TOTAL,
};
use manyfold_proto::wire::{
    seal, ErrorCode, Flags, Header, Packet, PacketType, COOKIE_LEN, HEADER_LEN, PARAMS_LEN, TOKEN_LEN,
};
use manyfold_proto::{Endpoint, EndpointConfig};

/// The virtual clock's origin: one `Instant` captured once per process, so
/// a run depends only on its input.
pub fn origin() -> Instant {
    static START: OnceLock<Instant> = OnceLock::new();
    *START.get_or_init(Instant::now)
}

/// Makes `d` a datagram that passes the header checks: version 1, the
/// payload length of what follows the header, and a correct CRC32C
/// (spec §3.1, §3.2). Shorter than a header: left alone. Longer than a
/// header can announce: cut.
pub fn fixup(d: &mut Vec<u8>) {
    if d.len() < HEADER_LEN {
        return;
    }
    d.truncate(HEADER_LEN + usize::from(u16::MAX));
    d[0] = (1 << 4) | (d[0] & 0x0f);
    let len = (d.len() - HEADER_LEN) as u16;
    d[2..4].copy_from_slice(&len.to_be_bytes());
    seal(d);
}

/// Parses `d` as a connection packet and, when it parses, checks the round
/// trip: `parse(emit(p)) == p`, and `emit(p)` is `d` byte for byte but for
/// the reserved bytes of the handshake parameters and cookie (spec §3.3.2,
/// §3.3.3), which are written as zero and ignored when read.
pub fn check_packet(d: &[u8]) -> Option<Packet<'_>> {
    let p = Packet::parse(d).ok()?;
    assert_eq!(Header::peek(d), Some(p.header), "peek disagrees with parse");
    assert_eq!(usize::from(p.header.payload_len) + HEADER_LEN, d.len());
    assert_eq!(p.len(), d.len(), "len() of a parsed packet");
    let mut out = vec![0u8; p.len()];
    assert_eq!(p.emit(&mut out), d.len());
    let q = Packet::parse(&out).expect("a re-emitted packet parses");
    assert_eq!(q, p, "parse(emit(p)) != p");
    // Reserved bytes are written as zero; any other byte is reproduced.
    let mut canonical = d.to_vec();
    let mut reserved = |range: std::ops::Range<usize>| {
        for i in range {
            assert!(out[i] == 0 || out[i] == d[i], "byte {i} re-emitted as neither zero nor itself");
            canonical[i] = out[i];
        }
    };
    let mut at = HEADER_LEN + p.sack.map_or(0, |s| s.encoded_len());
    if p.params.is_some() {
        reserved(at + 6..at + 8);
        at += PARAMS_LEN;
        // spec §3.3.5: the token section follows parameters whose TOKEN bit is set.
        if p.token.is_some() {
            at += TOKEN_LEN;
        }
    }
    if p.cookie.is_some() {
        reserved(at + 10..at + 12);
        at += COOKIE_LEN;
    }
    if p.error.is_some() {
        at += 2;
    }
    assert_eq!(&d[at..], p.data, "data area is the rest of the datagram");
    seal(&mut canonical);
    assert_eq!(canonical, out, "emit(parse(d)) differs from d");
    Some(p)
}

/// Parses a data area as chunks (spec §13.2) and checks each chunk's round
/// trip and the agreement of `parse_chunks`, `validate_chunks` and
/// `summary`. Returns whether the area is well formed.
pub fn check_chunks(b: &[u8]) -> bool {
    let mut at = 0;
    let mut ok = true;
    let mut data_len = 0;
    let mut entries = 0;
    for c in parse_chunks(b) {
        let c = match c {
            Ok(c) => c,
            Err(_) => {
                ok = false;
                break;
            }
        };
        let n = c.encoded_len();
        let mut out = vec![0u8; n];
        assert_eq!(c.emit(&mut out), n);
        let mut orig = b[at..at + n].to_vec();
        match &c {
            // Byte 1 of RESET and STOP is reserved: written 0, not checked.
            Chunk::Reset { .. } | Chunk::Stop { .. } => orig[1] = 0,
            Chunk::Data(d) => {
                assert!(d.offset + d.data.len() as u64 <= MAX_OFFSET);
                assert!(u64::from(d.in_msg) <= d.offset);
                data_len += d.data.len();
                entries += 1;
            }
            Chunk::Abandon { start, end, .. } => {
                assert!(start <= end);
                entries += 1;
            }
            _ => {}
        }
        assert_eq!(orig, out, "emit(parse(chunk)) differs: {c:?}");
        let back: Vec<_> = parse_chunks(&out).collect();
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].as_ref().expect("re-emitted chunk parses"), &c);
        at += n;
    }
    assert_eq!(validate_chunks(b).is_ok(), ok, "validate_chunks disagrees with parse_chunks");
    if ok {
        assert_eq!(at, b.len());
        assert_eq!(summary(b), (data_len, entries));
    }
    ok
}

/// Writes `p` as a datagram with the canonical flags for what it holds.
pub fn emit_mc(p: &McPacket, out: &mut [u8]) -> Option<usize> {
    let none = Flags::empty();
    let on = |c: bool, f: Flags| if c { f } else { none };
    match p {
        McPacket::Announce { session, next_sn, total, phase, info } => emit(
            out,
            PacketType::McAnnounce,
            none,
            *session,
            *next_sn,
            total.unwrap_or(UNKNOWN_TOTAL),
            *phase as u32,
            |o| emit_announcement(o, info),
        ),
        McPacket::Invite { session, pattern, key } => {
            emit(out, PacketType::McAnnounce, Flags::CKE, *session, 0, 0, 0, |o| emit_invitation(o, *pattern, key))
        }
        McPacket::Register { session, client, network, auto_group, noise } => {
            let flags = on(noise.is_some(), Flags::CKE) | on(*auto_group, Flags::KLV);
            emit(out, PacketType::McRegister, flags, *session, 0, *network, *client, |o| {
                emit_bytes(o, noise.unwrap_or_default())
            })
        }
        McPacket::RegisterKeys { session, client, noise } => {
            emit(out, PacketType::McRegister, Flags::ACK | Flags::CKE, *session, 0, 0, *client, |o| {
                emit_bytes(o, noise)
            })
        }
        McPacket::RegisterAck { session, client, network, from_sn, info } => {
            emit(out, PacketType::McRegister, Flags::ACK, *session, *from_sn, *network, *client, |o| {
                info.as_ref().map_or(0, |i| emit_announcement(o, i))
            })
        }
        McPacket::GroupAssignment { session, client, epoch, group } => {
            emit(out, PacketType::McRegister, Flags::ACK | Flags::KLV, *session, *epoch, *group, *client, |_| 0)
        }
        McPacket::Data { session, sn, lwsn, window, last, repair, payload } => emit(
            out,
            PacketType::McData,
            on(*last, Flags::FIN) | on(*repair, Flags::KLV),
            *session,
            *sn,
            *lwsn,
            *window,
            |o| {
                o[..payload.len()].copy_from_slice(payload);
                payload.len()
            },
        ),
        McPacket::Ack { session, client, network, lwsn, behind, missing } => {
            emit(out, PacketType::McAck, on(*behind, Flags::KLV), *session, *lwsn, *network, *client, |o| {
                emit_ranges(o, missing.iter()).0
            })
        }
        McPacket::Nack { session, client, network, highest, missing } => {
            emit(out, PacketType::McNack, none, *session, *highest, *network, *client, |o| {
                emit_ranges(o, missing.iter()).0
            })
        }
        McPacket::Repair { session, client, network, round, missing } => {
            emit(out, PacketType::McRepair, none, *session, *round, *network, *client, |o| {
                emit_ranges(o, missing.iter()).0
            })
        }
        McPacket::Status { session, client, network, held, complete, error, confirm, signatures } => emit(
            out,
            PacketType::McStatus,
            on(*complete, Flags::FIN) | on(*confirm, Flags::ACK) | on(error.is_some(), Flags::ERR),
            *session,
            *held,
            *network,
            *client,
            |o| {
                let n = emit_error(o, *error);
                n + signatures.map_or(0, |s| emit_signatures(&mut o[n..], s.iter()))
            },
        ),
        McPacket::End { session, client, total, error } => {
            emit(out, PacketType::McEnd, on(error.is_some(), Flags::ERR), *session, *total, 0, *client, |o| {
                emit_error(o, *error)
            })
        }
        McPacket::Parity { session, block, index, k, shard } => {
            emit(out, PacketType::McParity, none, *session, *block, u32::from(*index), u32::from(*k), |o| {
                o[..shard.len()].copy_from_slice(shard);
                shard.len()
            })
        }
    }
}

fn emit_error(o: &mut [u8], error: Option<ErrorCode>) -> usize {
    error.map_or(0, |e| emit_code(o, e))
}

/// Parses a multicast datagram and, when it parses, checks that
/// re-emitting it parses back to the same packet.
pub fn check_mc(d: &[u8]) -> Option<McPacket<'_>> {
    let p = McPacket::parse(d).ok()?;
    let mut out = vec![0u8; d.len() + 64];
    let n = emit_mc(&p, &mut out).expect("room for the header");
    let q = McPacket::parse(&out[..n]).expect("a re-emitted multicast packet parses");
    assert_eq!(q, p, "McPacket round trip");
    if let McPacket::Status { signatures: Some(s), .. } = &p {
        assert!((1..=MAX_SIGNATURES).contains(&s.len()), "a trailer of {} signatures", s.len());
    }
    if let McPacket::Ack { missing, .. } | McPacket::Nack { missing, .. } | McPacket::Repair { missing, .. } = &p {
        let mut prev = None;
        for r in missing.iter() {
            assert!(r.start < r.end);
            assert!(prev.is_none_or(|e| r.start >= e));
            prev = Some(r.end);
        }
    }
    Some(p)
}

/// Checks a datagram a multicast engine sent: a packet that parses, or a
/// sealed one (spec §19.7) with a sound header and room for its seal.
pub fn check_sent_mc(d: &[u8], what: &str) {
    match Header::parse(d) {
        Ok(h) if h.ptype == PacketType::McSealed => {
            assert!(d.len() >= HEADER_LEN + SEAL_OVERHEAD, "{what} sent a sealed packet of {} bytes", d.len())
        }
        _ => {
            McPacket::parse(d).unwrap_or_else(|e| panic!("{what} sent a datagram that does not parse: {e:?}"));
        }
    }
}

/// Keys for a protected multicast session (spec §19.7): a PSK, and a
/// static key when `statics` (then the IK pattern).
pub fn mcast_keys(statics: bool) -> manyfold_proto::SecurityConfig {
    manyfold_proto::SecurityConfig {
        psk: Some([5; 32]),
        private_key: statics.then_some([6; 32]),
        known_peers: Vec::new(),
    }
}

/// Splits a transmit written by [`Endpoint::poll_transmit`] into datagrams.
pub fn datagrams(buf: &[u8], size: usize, segment: Option<usize>) -> impl Iterator<Item = &[u8]> {
    let seg = segment.unwrap_or(size).max(1);
    buf[..size].chunks(seg)
}

/// Two endpoints on a virtual clock with the datagrams in flight between
/// them held in two queues the caller delivers, drops or mangles.
#[derive(Debug)]
pub struct Net {
    pub now: Instant,
    pub a: Endpoint,
    pub b: Endpoint,
    pub a_addr: SocketAddr,
    pub b_addr: SocketAddr,
    /// In flight towards b and towards a, oldest first.
    pub to_b: Vec<Vec<u8>>,
    pub to_a: Vec<Vec<u8>>,
    /// Most datagrams held per direction; the oldest beyond it is lost.
    pub max_in_flight: usize,
    /// Every datagram either endpoint sent, when set (the corpus generator).
    pub record: Option<Vec<Vec<u8>>>,
    buf: Vec<u8>,
}

impl Net {
    /// `b` listens; nothing is connected yet.
    pub fn new(a: EndpointConfig, b: EndpointConfig) -> Self {
        let now = origin();
        let mut b = Endpoint::new(b, now);
        b.set_listening(true);
        Net {
            now,
            a: Endpoint::new(a, now),
            b,
            a_addr: "10.0.0.1:1000".parse().expect("address"),
            b_addr: "10.0.0.2:2000".parse().expect("address"),
            to_b: Vec::new(),
            to_a: Vec::new(),
            max_in_flight: 256,
            record: None,
            buf: Vec::new(),
        }
    }

    /// Takes everything both endpoints have to send into the queues, and
    /// checks that each datagram parses and goes to the other endpoint.
    /// Returns how many datagrams were sent. Panics past `limit`: an
    /// endpoint that never stops sending is a bug.
    pub fn pump(&mut self, limit: usize) -> usize {
        let mut sent = 0;
        for to_b in [true, false] {
            let (ep, dest) = if to_b { (&mut self.a, self.b_addr) } else { (&mut self.b, self.a_addr) };
            // spec §3.7: path MTU discovery may go up to what an end accepts.
            let max = ep.config().connection.max_accepted_datagram() as usize;
            while let Some(t) = ep.poll_transmit(self.now, 4, &mut self.buf) {
                assert_eq!(t.destination, dest, "a datagram to an unknown peer");
                assert!(t.size <= self.buf.len());
                for d in datagrams(&self.buf, t.size, t.segment_size) {
                    assert!(d.len() <= max, "datagram of {} bytes over the {max} an end accepts", d.len());
                    let p = Packet::parse(d).expect("an endpoint sent a datagram that does not parse");
                    assert_eq!(p.header.ptype, PacketType::Segment);
                    if let Some(r) = self.record.as_mut() {
                        r.push(d.to_vec());
                    }
                    let q = if to_b { &mut self.to_b } else { &mut self.to_a };
                    q.push(d.to_vec());
                    if q.len() > self.max_in_flight {
                        q.remove(0);
                    }
                    sent += 1;
                    assert!(sent <= limit, "more than {limit} datagrams without any input");
                }
            }
        }
        sent
    }

    /// Delivers datagram `idx` of a queue (removing it).
    pub fn deliver(&mut self, to_b: bool, idx: usize) {
        let q = if to_b { &mut self.to_b } else { &mut self.to_a };
        if q.is_empty() {
            return;
        }
        let d = q.remove(idx % q.len());
        self.inject(to_b, &d);
    }

    /// Hands `d` to b (from a's address) or to a (from b's).
    pub fn inject(&mut self, to_b: bool, d: &[u8]) {
        if to_b {
            self.b.handle_datagram(self.now, self.a_addr, d);
        } else {
            self.a.handle_datagram(self.now, self.b_addr, d);
        }
    }

    /// Moves the clock forward and fires what is due.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
    }

    /// Jumps to the earliest deadline of either endpoint (if any) and fires it.
    pub fn next_timer(&mut self) -> bool {
        let next = [self.a.poll_timeout(), self.b.poll_timeout()].into_iter().flatten().min();
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                self.a.handle_timeout(self.now);
                self.b.handle_timeout(self.now);
                true
            }
            None => false,
        }
    }

    /// Delivers everything in flight in order, both ways, `rounds` times
    /// (a round trip per round), with `delay` on the clock per round.
    pub fn flush(&mut self, rounds: usize, delay: Duration) {
        for _ in 0..rounds {
            self.pump(100_000);
            if self.to_a.is_empty() && self.to_b.is_empty() {
                return;
            }
            self.now += delay;
            for d in std::mem::take(&mut self.to_b) {
                self.b.handle_datagram(self.now, self.a_addr, &d);
            }
            for d in std::mem::take(&mut self.to_a) {
                self.a.handle_datagram(self.now, self.b_addr, &d);
            }
            self.a.handle_timeout(self.now);
            self.b.handle_timeout(self.now);
        }
        self.pump(100_000);
    }
}

/// Reads a fuzz input as a sequence of operations: fixed-size integers,
/// big-endian, and byte strings with a 16-bit length. Running out of input
/// reads zeros, so every input decodes; [`Writer`] builds the seeds.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        head
    }
    fn fixed<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let got = self.take(N);
        out[..got.len()].copy_from_slice(got);
        out
    }
    pub fn u8(&mut self) -> u8 {
        self.fixed::<1>()[0]
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.fixed())
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.fixed())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.fixed())
    }
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
    /// A byte string: a 16-bit length, then that many bytes (fewer at the end).
    pub fn bytes(&mut self) -> &'a [u8] {
        let n = self.u16() as usize;
        self.take(n)
    }
}

/// Writes what [`Reader`] reads.
#[derive(Debug, Default)]
pub struct Writer {
    pub out: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.out.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        let n = b.len().min(usize::from(u16::MAX));
        self.u16(n as u16);
        self.out.extend_from_slice(&b[..n]);
        self
    }
}

/// A deterministic source address for a fuzzer-chosen byte: 0 is `fixed`,
/// the rest spread over IPv4 and (from 200) IPv6 peers.
pub fn address(n: u8, fixed: SocketAddr) -> SocketAddr {
    match n {
        0 => fixed,
        1..=199 => SocketAddr::from(([10, 1, n / 16, n % 16 + 1], 4000 + u16::from(n))),
        _ => SocketAddr::from(([0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n)], 5000 + u16::from(n))),
    }
}

/// Reads one multicast packet's fields from `r` and writes it into `out`
/// (spec §16.2), for `session` unless the fuzzer picks another. The first
/// byte picks the type; range lists come out ascending and disjoint, names
/// printable, so that most packets get past the decoder. Returns its length.
pub fn write_mc(r: &mut Reader, out: &mut [u8], session: u32, client: u32) -> usize {
    let kind = r.u8();
    let session = if kind & 0x80 != 0 { r.u32() } else { session };
    let client = if kind & 0x40 != 0 { r.u32() } else { client };
    let flags = Flags(r.u8() & !Flags::ERR.0);
    let (seq, ack, window) = (r.u32(), r.u32(), r.u32());
    let network = ack;
    let n = match kind % 12 {
        0 => {
            let phase = u32::from(r.u8() % 3);
            let total = if r.bool() { ack } else { UNKNOWN_TOTAL };
            let info = read_announcement(r);
            emit(out, PacketType::McAnnounce, flags, session, seq, total, phase, |o| emit_announcement(o, &info))
        }
        1 => emit(out, PacketType::McRegister, Flags(flags.0 & !Flags::ACK.0), session, seq, network, client, |_| 0),
        2 => {
            let info = r.bool().then(|| read_announcement(r));
            emit(out, PacketType::McRegister, flags | Flags::ACK, session, seq, network, client, |o| {
                info.as_ref().map_or(0, |i| emit_announcement(o, i))
            })
        }
        3 => {
            let payload = r.bytes();
            emit(out, PacketType::McData, flags, session, seq, ack, window, |o| emit_bytes(o, payload))
        }
        k @ 4..=6 => {
            let count = usize::from(r.u8() % 17);
            let mut at = r.u32() % 4096;
            let mut ranges = Vec::with_capacity(count);
            for _ in 0..count {
                let (gap, len) = (r.u8() as u32, 1 + r.u8() as u32);
                let start = at.saturating_add(gap);
                let end = start.saturating_add(len);
                if end <= start {
                    break;
                }
                ranges.push(start..end);
                at = end;
            }
            let ptype = [PacketType::McAck, PacketType::McNack, PacketType::McRepair][usize::from(k - 4)];
            emit(out, ptype, flags, session, seq, network, client, |o| emit_ranges(o, ranges).0)
        }
        7 | 8 => {
            let error = r.bool().then(|| ErrorCode(r.u16()));
            let flags = if error.is_some() { flags | Flags::ERR } else { flags };
            let status = kind % 12 == 7;
            let (ptype, ack) = if status { (PacketType::McStatus, network) } else { (PacketType::McEnd, 0) };
            // spec §16.12: a STATUS may carry loss signatures (0 to 4).
            let sigs: Vec<Signature> = if status {
                (0..r.u8() % 5).map(|_| Signature { block: r.u32(), bits: [r.u64(), r.u64(), r.u64(), r.u64()] }).collect()
            } else {
                Vec::new()
            };
            emit(out, ptype, flags, session, seq, ack, client, |o| {
                let n = emit_error(o, error);
                n + emit_signatures(&mut o[n..], sigs)
            })
        }
        // A protected session's key exchange (spec §19.7): an invitation,
        // or a REGISTER (+ACK) carrying fuzzer bytes as its Noise message.
        10 => {
            let pattern = [Pattern::Ik, Pattern::IkPsk1, Pattern::NnPsk0][usize::from(r.u8() % 3)];
            let key = [r.u8(); 32];
            emit(out, PacketType::McAnnounce, Flags::CKE, session, 0, 0, 0, |o| emit_invitation(o, pattern, &key))
        }
        11 => {
            let ack = if r.bool() { Flags::ACK } else { Flags::empty() };
            let noise = r.bytes();
            emit(out, PacketType::McRegister, ack | Flags::CKE, session, 0, network, client, |o| emit_bytes(o, noise))
        }
        _ => {
            let (index, k) = (u32::from(r.u8()), u32::from(r.u8() % 40));
            let shard = r.bytes();
            emit(out, PacketType::McParity, flags, session, seq, index, k, |o| emit_bytes(o, shard))
        }
    };
    n.unwrap_or(0)
}

fn read_announcement(r: &mut Reader) -> manyfold_proto::mcast::Announcement {
    let size = match r.u8() {
        0 => None,
        1 => Some(u64::from(r.u32()) << 16),
        _ => Some(u64::from(r.u32() % (1 << 20))),
    };
    let block = r.u16().max(1);
    let artp_max_us = r.u32() % 1_000_000;
    let repair_interval_ms = r.u16();
    let fec_k = u16::from(r.u8());
    let hash = r.bool().then(|| [r.u8() | 1; 32]);
    let name: String = r.bytes().iter().take(64).map(|&b| char::from(b'a' + b % 26)).collect();
    manyfold_proto::mcast::Announcement { size, block, artp_max_us, repair_interval_ms, fec_k, hash, name }
}

/// The session id a [`manyfold_proto::mcast::McastSender`] with `seed`
/// picks (the seed corpus's sender uses seed 7).
pub fn mcast_session(seed: u64) -> u32 {
    let info = manyfold_proto::mcast::Announcement {
        size: Some(1),
        block: 0,
        artp_max_us: 0,
        repair_interval_ms: 0,
        fec_k: 0,
        hash: None,
        name: "x".into(),
    };
    let cfg = manyfold_proto::mcast::SenderConfig { seed, ..Default::default() };
    manyfold_proto::mcast::McastSender::new(cfg, "239.0.0.1:1".parse().expect("address"), info, origin()).session_id()
}
