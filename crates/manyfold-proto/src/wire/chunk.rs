//! Chunks: what a sequenced packet carries after its sections (spec §13.2).
//!
//! The data area of every sequenced packet is a run of chunks, each naming
//! its stream. Stream data carries its stream offset, so a receiver places
//! it wherever the packet lands in sequence order: a loss delays only the
//! stream whose bytes were lost. The other chunks are stream control
//! (reset, stop, credit, abandoned message), delivered reliably because
//! they ride in sequenced packets. One chunk rides only on a RST: the
//! REASON, the text of an application's abort (spec §3.3.4).
//!
//! `D` is the data's storage: `&[u8]` when parsed from a datagram, `Bytes`
//! when held for retransmission.

use bytes::Bytes;

use super::DecodeError;
use crate::ids::StreamId;

/// Largest stream offset (48 bits on the wire).
pub const MAX_OFFSET: u64 = (1 << 48) - 1;

/// Bytes of a DATA chunk before its payload (spec §13.2).
pub const DATA_HEADER_LEN: usize = 16;
const RESET_LEN: usize = 12;
const STOP_LEN: usize = 6;
const CREDIT_LEN: usize = 10;
const ABANDON_LEN: usize = 16;
const ACK_FREQUENCY_LEN: usize = 12;
/// Bytes of a RESENT chunk (spec §5.4.2): kind and count.
pub const RESENT_LEN: usize = 2;

const KIND_DATA: u8 = 0;
const KIND_RESET: u8 = 1;
const KIND_STOP: u8 = 2;
const KIND_CREDIT: u8 = 3;
const KIND_ABANDON: u8 = 4;
const KIND_PAD: u8 = 5;
const KIND_HANDSHAKE: u8 = 6;
const KIND_ACK_FREQUENCY: u8 = 7;
const KIND_REASON: u8 = 8;
const KIND_RESENT: u8 = 9;
/// Kind, zero, length (u16) before a handshake message or a reason's text.
const HANDSHAKE_HEADER_LEN: usize = 4;
/// The longest close reason, in bytes of UTF-8, that an end sends or takes
/// (spec §3.3.4); a longer one is truncated on a character boundary when
/// sent, and dropped and counted when received.
pub const MAX_CLOSE_REASON: usize = 256;

/// Flags of a data chunk (spec §13.2).
pub mod data_flags {
    /// The chunk holds the first byte of a message.
    pub const BEGIN: u8 = 0x01;
    /// The chunk holds the last byte of a message.
    pub const END: u8 = 0x02;
    /// The message is delivered as soon as it is whole, not in stream order.
    pub const UNORDERED: u8 = 0x04;
    /// The stream's last byte is this chunk's last (stream FIN).
    pub const FIN: u8 = 0x08;
    /// Every flag defined; others are malformed.
    pub const ALL: u8 = BEGIN | END | UNORDERED | FIN;
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// A DATA chunk: bytes of one stream at one offset (spec §13.2).
pub struct DataChunk<D> {
    /// The stream.
    pub stream: StreamId,
    /// Its BEGIN, END, UNORDERED and FIN bits.
    pub flags: u8,
    /// Stream offset of the first byte.
    pub offset: u64,
    /// Offset of the first byte within its message (unordered messages
    /// only; 0 otherwise).
    pub in_msg: u32,
    /// The payload.
    pub data: D,
    /// The sender's record of the message under partial reliability (never
    /// on the wire; 0 for none).
    pub msg: u64,
}

/// Stream offsets taken by a data chunk of `len` bytes with `flags`: its
/// bytes, and one for an empty message (spec §13.5: one empty chunk with
/// BEGIN and END). Without a place of its own in the stream, an empty
/// message whose packet is lost would be overtaken by the message sent
/// after it, which starts at the same offset, and then dropped as passed.
pub fn span(len: usize, flags: u8) -> u64 {
    let whole = data_flags::BEGIN | data_flags::END;
    if len == 0 && flags & whole == whole {
        1
    } else {
        len as u64
    }
}

impl DataChunk<Bytes> {
    /// Splits the chunk at byte `at` (0 < `at` < its length): `self` keeps
    /// the first part and its BEGIN, the returned chunk the rest and the
    /// END and FIN marks (spec §13.2: chunks of one message are placed by
    /// their offsets, so any split is a valid pair of chunks).
    pub fn split_off(&mut self, at: usize) -> DataChunk<Bytes> {
        let rest = self.data.split_off(at);
        let unordered = self.flags & data_flags::UNORDERED;
        let tail_flags = self.flags & (data_flags::END | data_flags::FIN) | unordered;
        self.flags &= !(data_flags::END | data_flags::FIN);
        let in_msg = if unordered != 0 { self.in_msg + at as u32 } else { self.in_msg };
        DataChunk {
            stream: self.stream,
            flags: tail_flags,
            offset: self.offset + at as u64,
            in_msg,
            data: rest,
            msg: self.msg,
        }
    }
}

impl<D: AsRef<[u8]>> DataChunk<D> {
    /// Stream offsets the chunk takes (see [`span`]).
    pub fn span(&self) -> u64 {
        span(self.data.as_ref().len(), self.flags)
    }

    /// Writes the chunk's 16-byte header (spec §13.2) into `out`.
    fn emit_header(&self, out: &mut [u8]) {
        out[0] = KIND_DATA;
        out[1] = self.flags;
        out[2..4].copy_from_slice(&self.stream.get().to_be_bytes());
        out[4..6].copy_from_slice(&(self.data.as_ref().len() as u16).to_be_bytes());
        put48(&mut out[6..12], self.offset);
        out[12..16].copy_from_slice(&self.in_msg.to_be_bytes());
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
/// One chunk of a packet's data area (spec §13.2).
pub enum Chunk<D> {
    /// Stream data.
    Data(DataChunk<D>),
    /// The sender abandons its side of the stream; `final_size` is where it ended.
    Reset {
        /// The stream.
        stream: StreamId,
        /// The application's error code.
        code: u16,
        /// The stream's final size.
        final_size: u64,
    },
    /// The receiver asks the sender to stop sending on the stream.
    Stop {
        /// The stream.
        stream: StreamId,
        /// The application's error code.
        code: u16,
    },
    /// The receiver allows stream offsets below `max` (flow control
    /// credit), of the unordered offset space if `unordered`.
    Credit {
        /// The stream.
        stream: StreamId,
        /// Of the unordered offset space.
        unordered: bool,
        /// Offsets below this may be sent.
        max: u64,
    },
    /// The sender abandoned the message occupying `[start, end)` of the stream.
    Abandon {
        /// The stream.
        stream: StreamId,
        /// Of the unordered offset space.
        unordered: bool,
        /// The message's first offset.
        start: u64,
        /// Its end offset.
        end: u64,
    },
    /// Nothing: keeps a retransmission whose chunks were all abandoned
    /// sequenced (one byte).
    Pad,
    /// A Noise handshake message (spec §19.2), alone in its packet.
    Handshake(D),
    /// Why the application aborted, in its own words: UTF-8 text, only on
    /// a RST (spec §3.3.4). Checked for length and UTF-8 by the receiver,
    /// not here.
    Reason(D),
    /// The sender asks its peer to acknowledge after `threshold`
    /// ack-eliciting packets or `max_delay_us` microseconds, whichever
    /// comes first (spec §5.6). Requests are numbered: a receiver applies
    /// only one newer than the last it applied.
    AckFrequency {
        /// The request's number.
        seq: u32,
        /// Packets an ack may wait for.
        threshold: u16,
        /// Longest an ack may wait, in microseconds.
        max_delay_us: u32,
    },
    /// The packet is the `count`-th retransmission of its sequence number
    /// (1 to 255, saturating), so that the ack it draws can say which
    /// transmission arrived (spec §5.4.2). First among the chunks; only
    /// to a peer that announced `TX_ECHO`.
    Resent {
        /// Which retransmission: 1 for the first.
        count: u8,
    },
}

impl<D> Chunk<D> {
    /// The same chunk with its payload mapped by `f`: a trace keeps only
    /// the payload's length, `chunk.map_payload(|d| d.len() as u32)`.
    pub fn map_payload<E>(self, f: impl FnOnce(D) -> E) -> Chunk<E> {
        match self {
            Chunk::Data(d) => Chunk::Data(DataChunk {
                stream: d.stream,
                flags: d.flags,
                offset: d.offset,
                in_msg: d.in_msg,
                data: f(d.data),
                msg: d.msg,
            }),
            Chunk::Reset { stream, code, final_size } => Chunk::Reset { stream, code, final_size },
            Chunk::Stop { stream, code } => Chunk::Stop { stream, code },
            Chunk::Credit { stream, unordered, max } => Chunk::Credit { stream, unordered, max },
            Chunk::Abandon { stream, unordered, start, end } => Chunk::Abandon { stream, unordered, start, end },
            Chunk::Pad => Chunk::Pad,
            Chunk::Handshake(m) => Chunk::Handshake(f(m)),
            Chunk::Reason(t) => Chunk::Reason(f(t)),
            Chunk::AckFrequency { seq, threshold, max_delay_us } => {
                Chunk::AckFrequency { seq, threshold, max_delay_us }
            }
            Chunk::Resent { count } => Chunk::Resent { count },
        }
    }
}

impl<D: AsRef<[u8]>> Chunk<D> {
    /// The stream it concerns (0 for padding, handshake, ack-frequency,
    /// reason and resent chunks).
    pub fn stream(&self) -> StreamId {
        match self {
            Chunk::Data(d) => d.stream,
            Chunk::Reset { stream, .. }
            | Chunk::Stop { stream, .. }
            | Chunk::Credit { stream, .. }
            | Chunk::Abandon { stream, .. } => *stream,
            Chunk::Pad | Chunk::Handshake(_) | Chunk::AckFrequency { .. } | Chunk::Reason(_) | Chunk::Resent { .. } => {
                StreamId::new(0)
            }
        }
    }

    /// Application bytes it carries.
    pub fn data_len(&self) -> usize {
        match self {
            Chunk::Data(d) => d.data.as_ref().len(),
            _ => 0,
        }
    }

    /// Bytes it takes on the wire.
    pub fn encoded_len(&self) -> usize {
        match self {
            Chunk::Data(d) => DATA_HEADER_LEN + d.data.as_ref().len(),
            Chunk::Reset { .. } => RESET_LEN,
            Chunk::Stop { .. } => STOP_LEN,
            Chunk::Credit { .. } => CREDIT_LEN,
            Chunk::Abandon { .. } => ABANDON_LEN,
            Chunk::Pad => 1,
            Chunk::Handshake(m) | Chunk::Reason(m) => HANDSHAKE_HEADER_LEN + m.as_ref().len(),
            Chunk::AckFrequency { .. } => ACK_FREQUENCY_LEN,
            Chunk::Resent { .. } => RESENT_LEN,
        }
    }

    /// Writes the chunk at the start of `out` (sized by the caller) and
    /// returns its length.
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let n = self.encoded_len();
        let out = &mut out[..n];
        if let Chunk::Pad = self {
            out[0] = KIND_PAD;
            return 1;
        }
        if let Chunk::Handshake(m) | Chunk::Reason(m) = self {
            let m = m.as_ref();
            out[0] = if matches!(self, Chunk::Reason(_)) { KIND_REASON } else { KIND_HANDSHAKE };
            out[1] = 0;
            out[2..4].copy_from_slice(&(m.len() as u16).to_be_bytes());
            out[HANDSHAKE_HEADER_LEN..].copy_from_slice(m);
            return n;
        }
        if let Chunk::AckFrequency { seq, threshold, max_delay_us } = self {
            out[0] = KIND_ACK_FREQUENCY;
            out[1] = 0;
            out[2..4].copy_from_slice(&threshold.to_be_bytes());
            out[4..8].copy_from_slice(&seq.to_be_bytes());
            out[8..12].copy_from_slice(&max_delay_us.to_be_bytes());
            return n;
        }
        if let Chunk::Resent { count } = self {
            out[0] = KIND_RESENT;
            out[1] = *count;
            return n;
        }
        out[2..4].copy_from_slice(&self.stream().get().to_be_bytes());
        match self {
            Chunk::Data(d) => {
                d.emit_header(out);
                out[DATA_HEADER_LEN..].copy_from_slice(d.data.as_ref());
            }
            Chunk::Reset { code, final_size, .. } => {
                out[0] = KIND_RESET;
                out[1] = 0;
                out[4..6].copy_from_slice(&code.to_be_bytes());
                put48(&mut out[6..12], *final_size);
            }
            Chunk::Stop { code, .. } => {
                out[0] = KIND_STOP;
                out[1] = 0;
                out[4..6].copy_from_slice(&code.to_be_bytes());
            }
            Chunk::Credit { max, unordered, .. } => {
                out[0] = KIND_CREDIT;
                out[1] = if *unordered { data_flags::UNORDERED } else { 0 };
                put48(&mut out[4..10], *max);
            }
            Chunk::Abandon { unordered, start, end, .. } => {
                out[0] = KIND_ABANDON;
                out[1] = if *unordered { data_flags::UNORDERED } else { 0 };
                put48(&mut out[4..10], *start);
                put48(&mut out[10..16], *end);
            }
            Chunk::Pad | Chunk::Handshake(_) | Chunk::AckFrequency { .. } | Chunk::Reason(_) | Chunk::Resent { .. } => {
            }
        }
        n
    }
}

/// Iterates over the chunks of a data area. Yields an error (and then
/// stops) at the first malformed chunk.
pub fn parse_chunks(mut b: &[u8]) -> impl Iterator<Item = Result<Chunk<&[u8]>, DecodeError>> {
    std::iter::from_fn(move || {
        if b.is_empty() {
            return None;
        }
        match parse_one(b) {
            Ok((c, n)) => {
                b = &b[n..];
                Some(Ok(c))
            }
            Err(e) => {
                b = &[];
                Some(Err(e))
            }
        }
    })
}

/// Of a (validated) data area: its application bytes, and how many of its
/// chunks may leave an entry behind at the receiver (data and abandon).
pub fn summary(b: &[u8]) -> (usize, usize) {
    parse_chunks(b).fold((0, 0), |(len, entries), c| match c {
        Ok(c @ Chunk::Data(_)) => (len + c.data_len(), entries + 1),
        Ok(Chunk::Abandon { .. }) => (len, entries + 1),
        _ => (len, entries),
    })
}

/// The RESENT count of a data area (spec §5.4.2): the first chunk's, or
/// 0 when the packet is a first transmission.
pub fn resent_count(b: &[u8]) -> u8 {
    match b {
        [KIND_RESENT, count, ..] => *count,
        _ => 0,
    }
}

/// Writes a RESENT chunk of `count` at the start of `out`; its length.
pub fn emit_resent(out: &mut [u8], count: u8) -> usize {
    Chunk::<&[u8]>::Resent { count }.emit(out)
}

/// Checks that a data area is a well-formed run of chunks (spec §3.5).
pub fn validate_chunks(b: &[u8]) -> Result<(), DecodeError> {
    parse_chunks(b).try_for_each(|c| c.map(|_| ()))
}

fn parse_one(b: &[u8]) -> Result<(Chunk<&[u8]>, usize), DecodeError> {
    let bad = DecodeError::Malformed;
    let kind = *b.first().ok_or(bad)?;
    let fixed = |n: usize| b.get(..n).ok_or(bad);
    let stream = |h: &[u8]| StreamId::new(u16::from_be_bytes([h[2], h[3]]));
    match kind {
        KIND_DATA => {
            let h = fixed(DATA_HEADER_LEN)?;
            let flags = h[1];
            if flags & !data_flags::ALL != 0 {
                return Err(bad);
            }
            let len = usize::from(u16::from_be_bytes([h[4], h[5]]));
            let data = b.get(DATA_HEADER_LEN..DATA_HEADER_LEN + len).ok_or(bad)?;
            let offset = get48(&h[6..12]);
            if offset + len as u64 > MAX_OFFSET {
                return Err(bad);
            }
            let in_msg = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
            if u64::from(in_msg) > offset {
                return Err(bad);
            }
            let c = DataChunk { stream: stream(h), flags, offset, in_msg, data, msg: 0 };
            Ok((Chunk::Data(c), DATA_HEADER_LEN + len))
        }
        KIND_RESET => {
            let h = fixed(RESET_LEN)?;
            let c = Chunk::Reset {
                stream: stream(h),
                code: u16::from_be_bytes([h[4], h[5]]),
                final_size: get48(&h[6..12]),
            };
            Ok((c, RESET_LEN))
        }
        KIND_STOP => {
            let h = fixed(STOP_LEN)?;
            Ok((Chunk::Stop { stream: stream(h), code: u16::from_be_bytes([h[4], h[5]]) }, STOP_LEN))
        }
        KIND_CREDIT => {
            let h = fixed(CREDIT_LEN)?;
            if h[1] & !data_flags::UNORDERED != 0 {
                return Err(bad);
            }
            let unordered = h[1] & data_flags::UNORDERED != 0;
            Ok((Chunk::Credit { stream: stream(h), unordered, max: get48(&h[4..10]) }, CREDIT_LEN))
        }
        KIND_ABANDON => {
            let h = fixed(ABANDON_LEN)?;
            let (start, end) = (get48(&h[4..10]), get48(&h[10..16]));
            if start > end || h[1] & !data_flags::UNORDERED != 0 {
                return Err(bad);
            }
            let unordered = h[1] & data_flags::UNORDERED != 0;
            Ok((Chunk::Abandon { stream: stream(h), unordered, start, end }, ABANDON_LEN))
        }
        KIND_PAD => Ok((Chunk::Pad, 1)),
        KIND_HANDSHAKE | KIND_REASON => {
            let h = fixed(HANDSHAKE_HEADER_LEN)?;
            if h[1] != 0 {
                return Err(bad);
            }
            let len = usize::from(u16::from_be_bytes([h[2], h[3]]));
            let m = b.get(HANDSHAKE_HEADER_LEN..HANDSHAKE_HEADER_LEN + len).ok_or(bad)?;
            let c = if kind == KIND_REASON { Chunk::Reason(m) } else { Chunk::Handshake(m) };
            Ok((c, HANDSHAKE_HEADER_LEN + len))
        }
        KIND_ACK_FREQUENCY => {
            let h = fixed(ACK_FREQUENCY_LEN)?;
            // spec §5.6: a threshold of 0 is malformed.
            let threshold = u16::from_be_bytes([h[2], h[3]]);
            if h[1] != 0 || threshold == 0 {
                return Err(bad);
            }
            let seq = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
            let max_delay_us = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
            Ok((Chunk::AckFrequency { seq, threshold, max_delay_us }, ACK_FREQUENCY_LEN))
        }
        // spec §5.4.2: a count of 0 is malformed (an original carries none).
        KIND_RESENT => match fixed(RESENT_LEN)?[1] {
            0 => Err(bad),
            count => Ok((Chunk::Resent { count }, RESENT_LEN)),
        },
        _ => Err(bad),
    }
}

fn put48(out: &mut [u8], v: u64) {
    out.copy_from_slice(&v.to_be_bytes()[2..8]);
}

fn get48(b: &[u8]) -> u64 {
    let mut x = [0u8; 8];
    x[2..8].copy_from_slice(b);
    u64::from_be_bytes(x)
}

/// The chunks of one sent packet, kept for retransmission. The common
/// case, one chunk, needs no allocation, and the record is no larger than
/// one chunk (64 bytes): a sender keeps one per packet in flight to every
/// peer (issue 20 item 6).
#[derive(Debug, Clone, Default)]
pub struct Chunks(Held);

#[derive(Debug, Clone, Default)]
enum Held {
    #[default]
    None,
    One(Chunk<Bytes>),
    Many(Vec<Chunk<Bytes>>),
    /// Chunks followed by this many one-byte PAD chunks (spec §3.7's probes).
    Padded(Vec<Chunk<Bytes>>, usize),
}

impl Chunks {
    /// `n` PAD chunks and nothing else: a path MTU probe's data area
    /// (spec §3.7).
    pub fn padding(n: usize) -> Self {
        Chunks(if n == 0 { Held::None } else { Held::Padded(Vec::new(), n) })
    }

    /// No chunk yet, in `spare`'s memory (emptied): a packet of many small
    /// messages holds thousands of chunks, and a list grown anew for each
    /// packet costs a dozen reallocations (RESULTS §34).
    pub fn with_spare(mut spare: Vec<Chunk<Bytes>>) -> Self {
        spare.clear();
        Chunks(if spare.capacity() == 0 { Held::None } else { Held::Many(spare) })
    }

    /// The list's memory, emptied, if it has more than one chunk's room.
    pub fn into_spare(self) -> Option<Vec<Chunk<Bytes>>> {
        match self.0 {
            Held::Many(mut v) | Held::Padded(mut v, _) if v.capacity() > 1 => {
                v.clear();
                Some(v)
            }
            _ => None,
        }
    }

    /// Appends a chunk (ahead of any padding).
    pub fn push(&mut self, c: Chunk<Bytes>) {
        self.0 = match std::mem::take(&mut self.0) {
            Held::None => Held::One(c),
            Held::One(first) => Held::Many(vec![first, c]),
            Held::Many(mut v) => {
                v.push(c);
                Held::Many(v)
            }
            Held::Padded(mut v, pad) => {
                v.push(c);
                Held::Padded(v, pad)
            }
        };
    }

    /// Puts a chunk ahead of the others (control chunks go first, spec §13.2).
    pub fn push_front(&mut self, c: Chunk<Bytes>) {
        self.0 = match std::mem::take(&mut self.0) {
            Held::None => Held::One(c),
            Held::One(first) => Held::Many(vec![c, first]),
            Held::Many(mut v) => {
                v.insert(0, c);
                Held::Many(v)
            }
            Held::Padded(mut v, pad) => {
                v.insert(0, c);
                Held::Padded(v, pad)
            }
        };
    }

    /// Whether there is no chunk.
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Held::None => true,
            Held::One(_) => false,
            Held::Many(v) => v.is_empty(),
            Held::Padded(v, pad) => v.is_empty() && *pad == 0,
        }
    }

    /// The chunks in order.
    pub fn iter(&self) -> std::slice::Iter<'_, Chunk<Bytes>> {
        match &self.0 {
            Held::None => [].iter(),
            Held::One(c) => std::slice::from_ref(c).iter(),
            Held::Many(v) | Held::Padded(v, _) => v.iter(),
        }
    }

    fn pad(&self) -> usize {
        match self.0 {
            Held::Padded(_, pad) => pad,
            _ => 0,
        }
    }

    /// Takes every chunk out, leaving nothing (padding included).
    fn take_all(&mut self) -> Vec<Chunk<Bytes>> {
        match std::mem::take(&mut self.0) {
            Held::None => Vec::new(),
            Held::One(c) => vec![c],
            Held::Many(v) | Held::Padded(v, _) => v,
        }
    }

    /// Application bytes they carry.
    pub fn data_len(&self) -> usize {
        self.iter().map(Chunk::data_len).sum()
    }

    /// Whether they hold a protected handshake message (spec §19.2), which
    /// its resends carry without a RESENT chunk (spec §5.4.2).
    pub fn has_handshake(&self) -> bool {
        self.iter().any(|c| matches!(c, Chunk::Handshake(_)))
    }

    /// Bytes they take on the wire.
    pub fn encoded_len(&self) -> usize {
        self.iter().map(Chunk::encoded_len).sum::<usize>() + self.pad()
    }

    /// Keeps only the chunks `keep` accepts; returns the data bytes removed.
    /// Padding is kept.
    pub fn retain(&mut self, mut keep: impl FnMut(&Chunk<Bytes>) -> bool) -> usize {
        let before = self.data_len();
        match &mut self.0 {
            Held::None => {}
            Held::One(c) => {
                if !keep(c) {
                    self.0 = Held::None;
                }
            }
            Held::Many(v) | Held::Padded(v, _) => v.retain(|c| keep(c)),
        }
        before - self.data_len()
    }

    /// The payload of the last chunk, when it is a DATA chunk of at least
    /// `min` bytes and nothing follows it: the datagram can then go as what
    /// [`Chunks::emit_head`] writes followed by these bytes, not copied
    /// (spec §7.2).
    pub fn gatherable_tail(&self, min: usize) -> Option<&Bytes> {
        if self.pad() > 0 {
            return None;
        }
        match self.iter().last()? {
            Chunk::Data(d) if d.data.len() >= min => Some(&d.data),
            _ => None,
        }
    }

    /// [`Chunks::emit`] less the last chunk's payload (see
    /// [`Chunks::gatherable_tail`]); returns the length written.
    pub fn emit_head(&self, out: &mut [u8]) -> usize {
        let Some((Chunk::Data(last), before)) = self.iter().as_slice().split_last() else {
            return self.emit(out);
        };
        let mut at = 0;
        for c in before {
            at += c.emit(&mut out[at..]);
        }
        last.emit_header(&mut out[at..]);
        at + DATA_HEADER_LEN
    }

    /// Writes every chunk into `out` (sized by the caller); returns the length.
    pub fn emit(&self, out: &mut [u8]) -> usize {
        let mut at = 0;
        for c in self.iter() {
            at += c.emit(&mut out[at..]);
        }
        let pad = self.pad();
        out[at..at + pad].fill(KIND_PAD);
        at + pad
    }

    /// Splits off what does not fit in `room` bytes of data area: the
    /// chunks that follow, and the tail of a data chunk that straddles the
    /// limit (spec §3.7: packets resent after the path narrowed). Returns
    /// the rest, empty when everything fits, and the sender's message
    /// record (`msg`) of the data chunk cut in two, if one was. Padding is
    /// dropped.
    pub fn split_off(&mut self, room: usize) -> (Chunks, Option<u64>) {
        let mut all = self.take_all();
        let mut used = 0;
        let mut keep = 0;
        let mut tail = Chunks::default();
        let mut cut = None;
        while keep < all.len() {
            let len = all[keep].encoded_len();
            if used + len <= room {
                used += len;
                keep += 1;
                continue;
            }
            // A data chunk is cut where the room ends, if a useful part fits.
            if let Chunk::Data(d) = &mut all[keep] {
                let fits = room.saturating_sub(used + DATA_HEADER_LEN);
                if fits > 0 && fits < d.data.len() {
                    let rest = d.split_off(fits);
                    cut = Some(d.msg);
                    keep += 1;
                    tail.push(Chunk::Data(rest));
                }
            }
            break;
        }
        for c in all.drain(keep..) {
            tail.push(c);
        }
        for c in all {
            self.push(c);
        }
        (tail, cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(c: Chunk<Bytes>) {
        let mut buf = vec![0u8; c.encoded_len()];
        assert_eq!(c.emit(&mut buf), buf.len());
        let parsed: Vec<_> = parse_chunks(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(parsed.len(), 1);
        let back = match &parsed[0] {
            Chunk::Data(d) => Chunk::Data(DataChunk {
                stream: d.stream,
                flags: d.flags,
                offset: d.offset,
                in_msg: d.in_msg,
                data: Bytes::copy_from_slice(d.data),
                msg: 0,
            }),
            Chunk::Reset { stream, code, final_size } => {
                Chunk::Reset { stream: *stream, code: *code, final_size: *final_size }
            }
            Chunk::Stop { stream, code } => Chunk::Stop { stream: *stream, code: *code },
            Chunk::Credit { stream, unordered, max } => {
                Chunk::Credit { stream: *stream, unordered: *unordered, max: *max }
            }
            Chunk::Abandon { stream, unordered, start, end } => {
                Chunk::Abandon { stream: *stream, unordered: *unordered, start: *start, end: *end }
            }
            Chunk::Pad => Chunk::Pad,
            Chunk::Handshake(m) => Chunk::Handshake(Bytes::copy_from_slice(m)),
            Chunk::Reason(t) => Chunk::Reason(Bytes::copy_from_slice(t)),
            &Chunk::AckFrequency { seq, threshold, max_delay_us } => {
                Chunk::AckFrequency { seq, threshold, max_delay_us }
            }
            &Chunk::Resent { count } => Chunk::Resent { count },
        };
        assert_eq!(back, c);
    }

    #[test]
    fn every_chunk_kind_roundtrips() {
        let data = Chunk::Data(DataChunk {
            stream: StreamId::new(65535),
            flags: data_flags::BEGIN | data_flags::UNORDERED,
            offset: MAX_OFFSET - 3,
            in_msg: 7,
            data: Bytes::from_static(b"abc"),
            msg: 0,
        });
        roundtrip(data);
        roundtrip(Chunk::Reset { stream: StreamId::new(3), code: 9, final_size: 1 << 40 });
        roundtrip(Chunk::Handshake(Bytes::from_static(&[7; 48])));
        roundtrip(Chunk::Stop { stream: StreamId::new(4), code: 2 });
        roundtrip(Chunk::Credit { stream: StreamId::new(5), unordered: false, max: 123_456_789 });
        roundtrip(Chunk::Credit { stream: StreamId::new(5), unordered: true, max: 7 });
        roundtrip(Chunk::Abandon { stream: StreamId::new(6), unordered: true, start: 10, end: 20 });
        roundtrip(Chunk::Pad);
        roundtrip(Chunk::AckFrequency { seq: u32::MAX, threshold: 64, max_delay_us: 25_000 });
        roundtrip(Chunk::Reason(Bytes::from_static("disk full: 0 B free".as_bytes())));
        roundtrip(Chunk::Reason(Bytes::new()));
        roundtrip(Chunk::Resent { count: 1 });
        roundtrip(Chunk::Resent { count: u8::MAX });
    }

    #[test]
    fn a_reason_chunk_is_kind_zero_length_text_and_every_prefix_is_refused() {
        let wire = [8, 0, 0, 3, b'b', b'y', b'e'];
        let c: Vec<_> = parse_chunks(&wire).collect::<Result<_, _>>().expect("well formed");
        assert_eq!(c, vec![Chunk::Reason(&b"bye"[..])]);
        let mut out = [0u8; 7];
        assert_eq!(Chunk::Reason(&b"bye"[..]).emit(&mut out), 7);
        assert_eq!(out, wire);
        for n in 1..wire.len() {
            assert!(validate_chunks(&wire[..n]).is_err(), "prefix of {n} bytes");
        }
        // The second byte is zero, as in a HANDSHAKE chunk.
        assert!(validate_chunks(&[8, 1, 0, 0]).is_err());
        // Length is checked by the connection (spec §3.3.4), not the wire:
        // a long text still parses, so the RST around it still counts.
        let mut long = vec![8, 0, 0x01, 0x2c];
        long.extend_from_slice(&[b'x'; 300]);
        assert!(validate_chunks(&long).is_ok());
    }

    #[test]
    fn malformed_chunks_are_rejected() {
        // Unknown kind, truncated header, data running past the end,
        // unknown flag bits, an abandon range that runs backwards.
        assert!(validate_chunks(&[10]).is_err());
        assert!(validate_chunks(&[0, 0, 0]).is_err());
        let mut d = [0u8; 17];
        d[5] = 2;
        assert!(validate_chunks(&d).is_err());
        d[5] = 1;
        assert!(validate_chunks(&d).is_ok());
        d[1] = 0x80;
        assert!(validate_chunks(&d).is_err());
        let mut a = [0u8; 16];
        a[0] = KIND_ABANDON;
        a[9] = 5;
        assert!(validate_chunks(&a).is_err());
        // spec §5.6: an ACK_FREQUENCY with threshold 0 or flags set.
        let mut f = [0u8; 12];
        f[0] = KIND_ACK_FREQUENCY;
        assert!(validate_chunks(&f).is_err());
        f[3] = 1;
        assert!(validate_chunks(&f).is_ok());
        f[1] = 1;
        assert!(validate_chunks(&f).is_err());
        // spec §5.4.2: a RESENT chunk cut short, or counting 0.
        assert!(validate_chunks(&[KIND_RESENT]).is_err());
        assert!(validate_chunks(&[KIND_RESENT, 0]).is_err());
        assert!(validate_chunks(&[KIND_RESENT, 3]).is_ok());
    }

    #[test]
    fn an_empty_message_takes_one_offset_and_a_bare_fin_none() {
        use data_flags::{BEGIN, END, FIN, UNORDERED};
        assert_eq!(span(0, BEGIN | END), 1);
        assert_eq!(span(0, BEGIN | END | UNORDERED | FIN), 1);
        assert_eq!(span(0, FIN), 0);
        assert_eq!(span(0, 0), 0);
        assert_eq!(span(5, BEGIN | END), 5);
        assert_eq!(span(5, BEGIN), 5);
    }

    #[test]
    fn a_gathered_data_area_is_the_head_then_the_last_payload() {
        let big = Chunk::Data(DataChunk {
            stream: StreamId::new(3),
            flags: data_flags::BEGIN,
            offset: 1 << 33,
            in_msg: 5,
            data: Bytes::from((0..40_000).map(|i| (i * 7) as u8).collect::<Vec<u8>>()),
            msg: 0,
        });
        let mut cs = Chunks::default();
        cs.push(Chunk::Credit { stream: StreamId::new(5), unordered: false, max: 99 });
        cs.push(big);
        let tail = cs.gatherable_tail(32 * 1024).expect("a 40,000-byte payload ends it").clone();
        assert!(cs.gatherable_tail(40_001).is_none(), "below the minimum");
        let mut whole = vec![0u8; cs.encoded_len()];
        assert_eq!(cs.emit(&mut whole), whole.len());
        let mut head = vec![0u8; cs.encoded_len() - tail.len()];
        assert_eq!(cs.emit_head(&mut head), head.len());
        assert!([&head[..], &tail[..]].concat() == whole, "head then payload is the data area");
        cs.push(Chunk::Stop { stream: StreamId::new(1), code: 2 });
        assert!(cs.gatherable_tail(1).is_none(), "a chunk after the data");
        let mut padded = Chunks::padding(3);
        padded.push_front(Chunk::Stop { stream: StreamId::new(1), code: 2 });
        assert!(padded.gatherable_tail(1).is_none(), "padding after the chunks");
    }

    #[test]
    fn padding_is_one_byte_pad_chunks_after_the_others() {
        let mut cs = Chunks::padding(5);
        assert_eq!((cs.encoded_len(), cs.data_len(), cs.is_empty()), (5, 0, false));
        let mut buf = [0xaau8; 5];
        assert_eq!(cs.emit(&mut buf), 5);
        assert!(parse_chunks(&buf).all(|c| matches!(c, Ok(Chunk::Pad))));
        assert!(cs.split_off(100).0.is_empty());
        assert!(cs.is_empty(), "splitting drops the padding");
    }

    #[test]
    fn a_data_chunk_split_keeps_begin_on_the_head_and_end_fin_on_the_tail() {
        let flags = data_flags::BEGIN | data_flags::END | data_flags::UNORDERED | data_flags::FIN;
        let data = Bytes::from_static(b"abcdefgh");
        let mut d = DataChunk { stream: StreamId::new(2), flags, offset: 100, in_msg: 10, data, msg: 9 };
        let tail = d.split_off(3);
        assert_eq!(
            (d.flags, d.offset, d.in_msg, &d.data[..]),
            (data_flags::BEGIN | data_flags::UNORDERED, 100, 10, &b"abc"[..])
        );
        let tail_flags = data_flags::END | data_flags::FIN | data_flags::UNORDERED;
        assert_eq!((tail.flags, tail.offset, tail.in_msg, &tail.data[..]), (tail_flags, 103, 13, &b"defgh"[..]));
        assert_eq!((tail.stream, tail.msg), (StreamId::new(2), 9));
    }

    #[test]
    fn split_off_cuts_the_straddling_data_chunk_and_moves_what_follows() {
        let chunk = |offset: u64, len: usize| {
            let data = Bytes::from(vec![1u8; len]);
            Chunk::Data(DataChunk { stream: StreamId::new(1), flags: 0, offset, in_msg: 0, data, msg: 0 })
        };
        let mut cs = Chunks::default();
        cs.push(Chunk::Stop { stream: StreamId::new(3), code: 1 });
        cs.push(chunk(0, 1000));
        cs.push(chunk(1000, 10));
        let before = cs.encoded_len();
        let (tail, cut) = cs.split_off(STOP_LEN + DATA_HEADER_LEN + 600);
        assert_eq!(cut, Some(0), "a byte-stream chunk (no message record) was cut");
        assert_eq!(cs.encoded_len(), STOP_LEN + DATA_HEADER_LEN + 600, "the room is filled");
        assert_eq!(cs.data_len() + tail.data_len(), 1010, "no byte lost");
        assert_eq!(cs.encoded_len() + tail.encoded_len(), before + DATA_HEADER_LEN, "one more chunk header");
        let offsets: Vec<u64> =
            tail.iter().filter_map(|c| if let Chunk::Data(d) = c { Some(d.offset) } else { None }).collect();
        assert_eq!(offsets, vec![600, 1000]);
        assert_eq!(cs.split_off(10_000).1, None, "what fits stays whole");
        let mut small = Chunks::default();
        small.push(chunk(0, 100));
        let (all, _) = small.split_off(DATA_HEADER_LEN);
        assert!(small.is_empty() && all.data_len() == 100, "no empty head chunk");
    }

    #[test]
    fn retain_reports_the_data_removed() {
        let mut cs = Chunks::default();
        for s in 0..3u16 {
            cs.push(Chunk::Data(DataChunk {
                stream: StreamId::new(s),
                flags: 0,
                offset: 0,
                in_msg: 0,
                data: Bytes::from(vec![0u8; 10 + s as usize]),
                msg: 0,
            }));
        }
        assert_eq!(cs.retain(|c| c.stream() != StreamId::new(1)), 11);
        assert_eq!(cs.iter().map(|c| c.stream().get()).collect::<Vec<_>>(), vec![0, 2]);
    }

    #[test]
    fn chunks_keep_their_order_through_push_front_and_retain_and_stay_one_chunk_in_size() {
        let stop = |s: u16| Chunk::Stop { stream: StreamId::new(s), code: 0 };
        let mut cs = Chunks::default();
        cs.push(stop(2));
        cs.push_front(stop(1));
        cs.push(stop(3));
        assert_eq!(cs.iter().map(|c| c.stream().get()).collect::<Vec<_>>(), vec![1, 2, 3]);
        cs.retain(|c| c.stream().get() == 2);
        assert_eq!(cs.iter().map(|c| c.stream().get()).collect::<Vec<_>>(), vec![2]);
        cs.retain(|_| false);
        assert!(cs.is_empty());
        let mut padded = Chunks::padding(3);
        padded.push_front(stop(7));
        assert_eq!(padded.encoded_len(), STOP_LEN + 3, "padding stays after the chunks");
        // One record per packet in flight to every peer (issue 20 item 6).
        assert_eq!(std::mem::size_of::<Chunks>(), std::mem::size_of::<Chunk<Bytes>>());
    }
}
