//! The sending side of one stream (spec §13.3): queued bytes and messages,
//! cut into data chunks in order, within the peer's credit.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::connection::send::SendBuffer;
use crate::ids::StreamId;
use crate::wire::chunk::{data_flags, span, DataChunk};

/// What a run of queued bytes is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegKind {
    /// Byte-stream data: no boundaries.
    Bytes,
    /// One whole message. `msg` names its partial-reliability record (0: none).
    Message { unordered: bool, msg: u64 },
}

#[derive(Debug)]
struct Seg {
    len: usize,
    kind: SegKind,
    /// Bytes of it already cut into chunks.
    cut: usize,
    /// Stream offset of its first byte, once cut.
    start: u64,
}

/// What cutting the front message short left behind (spec §13.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub start: u64,
    pub end: u64,
    pub unordered: bool,
    pub msg: u64,
    /// Queued bytes released.
    pub released: usize,
}

/// One of a stream's two offset spaces (spec §13.4): ordered data, and
/// unordered messages, which thus never hold back ordered ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Space {
    /// Offset of the next byte to cut.
    pub next: u64,
    /// Offsets below this the peer allows (flow control credit).
    pub credit: u64,
    pub fin_sent: bool,
    pub fin_acked: bool,
}

impl Space {
    fn new(credit: u64) -> Self {
        Space { next: 0, credit, fin_sent: false, fin_acked: false }
    }
}

#[derive(Debug)]
pub(crate) struct SendSide {
    buf: SendBuffer,
    segs: VecDeque<Seg>,
    /// The ordered offset space (bytes and ordered messages).
    pub ord: Space,
    /// The unordered messages' offset space.
    pub uno: Space,
    /// Data bytes cut into chunks and not yet acknowledged.
    pub unacked: u64,
    pub fin_queued: bool,
    /// We reset the stream with this code; `reset_acked` once the peer has it.
    pub reset: Option<u16>,
    pub reset_acked: bool,
    /// The peer asked us to stop, with this code.
    pub stopped: Option<u16>,
    pub priority: u8,
    pub weight: u16,
    /// Chunks cut in a row in the current scheduling turn.
    pub turn: u16,
    /// The application has sent on it (or finished or reset it).
    pub used: bool,
}

impl SendSide {
    /// Takes the memory of `old` (a finished connection's side, issue 21)
    /// that is small, emptied: its segment queue and its send buffer's
    /// queue and small-write buffer. Everything else of `old` is dropped.
    pub fn keep_memory_of(&mut self, old: SendSide) {
        let SendSide { mut segs, buf, .. } = old;
        super::keep_small(&mut segs);
        if self.segs.is_empty() {
            self.segs = segs;
        }
        if self.buf.is_empty() {
            self.buf = buf.renewed();
        }
    }

    #[cfg(test)]
    pub fn segs_capacity(&self) -> usize {
        self.segs.capacity()
    }

    pub fn new(credit: u64) -> Self {
        SendSide {
            buf: SendBuffer::default(),
            segs: VecDeque::new(),
            ord: Space::new(credit),
            uno: Space::new(credit),
            unacked: 0,
            fin_queued: false,
            reset: None,
            reset_acked: false,
            stopped: None,
            priority: super::DEFAULT_PRIORITY,
            weight: 1,
            turn: 0,
            used: false,
        }
    }

    /// Whether the side has nothing more to do: finished and acked, or
    /// reset and acked, and in both cases no chunk of it still in flight.
    /// A reset side's chunks in flight are acked or stripped before they
    /// would be sent again (spec §13.9); forgotten earlier, the stream
    /// could be reborn by the peer's data and their acks counted against
    /// the new side (found by fuzzing: `unacked` went below zero).
    pub fn is_done(&self) -> bool {
        self.unacked == 0 && (self.fin_acked() || (self.reset.is_some() && self.reset_acked))
    }

    /// Both offset spaces' FINs are acknowledged.
    pub fn fin_acked(&self) -> bool {
        self.ord.fin_acked && self.uno.fin_acked
    }

    fn space(&mut self, unordered: bool) -> &mut Space {
        if unordered {
            &mut self.uno
        } else {
            &mut self.ord
        }
    }

    /// Records that a chunk with the FIN flag was acknowledged.
    pub fn on_fin_acked(&mut self, unordered: bool) {
        self.space(unordered).fin_acked = true;
    }

    /// Bytes queued or cut and not yet acknowledged.
    pub fn held(&self) -> usize {
        self.buf.len() + self.unacked as usize
    }

    /// Whether anything is queued or unacknowledged (`wait_for_send`).
    pub fn is_pending(&self) -> bool {
        self.reset.is_none() && (!self.segs.is_empty() || self.unacked > 0 || self.fin_unacked())
    }

    fn fin_unacked(&self) -> bool {
        self.fin_queued && !self.fin_acked()
    }

    /// The offset space the front run uses.
    fn front_space(&self) -> Option<&Space> {
        let unordered = matches!(self.segs.front()?.kind, SegKind::Message { unordered: true, .. });
        Some(if unordered { &self.uno } else { &self.ord })
    }

    /// Whether a chunk could be cut now (ignoring the room in the packet).
    /// Every chunk of a message, an empty one too, takes credit.
    pub fn can_send(&self) -> bool {
        if self.reset.is_some() {
            return false;
        }
        match self.front_space() {
            Some(sp) => sp.credit > sp.next,
            None => self.fin_queued && !(self.ord.fin_sent && self.uno.fin_sent),
        }
    }

    pub fn write(&mut self, data: &[u8]) {
        self.buf.push(data);
        self.queued_bytes(data.len());
    }

    /// Like `write`, without copying: packets will be slices of `data`.
    pub fn write_shared(&mut self, data: Bytes) {
        let len = data.len();
        self.buf.push_shared(data);
        self.queued_bytes(len);
    }

    /// `len` bytes of byte-stream data joined the buffer.
    fn queued_bytes(&mut self, len: usize) {
        self.used = true;
        match self.segs.back_mut() {
            Some(s) if s.kind == SegKind::Bytes => s.len += len,
            _ => self.segs.push_back(Seg { len, kind: SegKind::Bytes, cut: 0, start: 0 }),
        }
    }

    pub fn push_message(&mut self, data: &[u8], unordered: bool, msg: u64) {
        self.used = true;
        self.buf.push(data);
        self.segs.push_back(Seg { len: data.len(), kind: SegKind::Message { unordered, msg }, cut: 0, start: 0 });
    }

    /// Like `push_message`, without copying: packets will be slices of `data`.
    pub fn push_shared(&mut self, data: Bytes, unordered: bool, msg: u64) {
        self.used = true;
        let len = data.len();
        self.buf.push_shared(data);
        self.segs.push_back(Seg { len, kind: SegKind::Message { unordered, msg }, cut: 0, start: 0 });
    }

    /// The message at the front, if the next chunk would belong to one.
    pub fn front_message(&self) -> Option<u64> {
        match self.segs.front()?.kind {
            SegKind::Message { msg, .. } => Some(msg),
            SegKind::Bytes => None,
        }
    }

    /// Cuts the next chunk, with at most `room` data bytes (and at most
    /// `flow` under connection flow control).
    pub fn cut(&mut self, stream: StreamId, room: usize, flow: usize) -> Option<DataChunk<Bytes>> {
        if self.reset.is_some() {
            return None;
        }
        let Some(seg) = self.segs.front_mut() else {
            // spec §13.9: each offset space ends with a FIN of its own.
            if !self.fin_queued {
                return None;
            }
            let unordered = self.ord.fin_sent;
            let sp = self.space(unordered);
            if sp.fin_sent {
                return None;
            }
            sp.fin_sent = true;
            let flags = data_flags::FIN | if unordered { data_flags::UNORDERED } else { 0 };
            return Some(DataChunk { stream, flags, offset: sp.next, in_msg: 0, data: Bytes::new(), msg: 0 });
        };
        let unordered = matches!(seg.kind, SegKind::Message { unordered: true, .. });
        let sp = if unordered { &mut self.uno } else { &mut self.ord };
        let remaining = seg.len - seg.cut;
        let credit = usize::try_from(sp.credit.saturating_sub(sp.next)).unwrap_or(usize::MAX);
        let n = remaining.min(room).min(credit).min(flow);
        // An empty message takes one offset (`span`), so it needs credit too.
        if (n == 0 && remaining > 0) || credit == 0 {
            return None;
        }
        if seg.cut == 0 {
            seg.start = sp.next;
        }
        let (mut flags, in_msg, msg) = match seg.kind {
            SegKind::Bytes => (0, 0, 0),
            SegKind::Message { unordered, msg } => {
                let mut f = 0;
                if seg.cut == 0 {
                    f |= data_flags::BEGIN;
                }
                if n == remaining {
                    f |= data_flags::END;
                }
                if unordered {
                    f |= data_flags::UNORDERED;
                }
                (f, seg.cut as u32, msg)
            }
        };
        let offset = sp.next;
        sp.next += span(n, flags);
        seg.cut += n;
        if seg.cut == seg.len {
            self.segs.pop_front();
        }
        let data = self.buf.take(n);
        self.unacked += n as u64;
        // The ordered space's FIN rides on its last chunk.
        if self.segs.is_empty() && self.fin_queued && !unordered {
            flags |= data_flags::FIN;
            self.ord.fin_sent = true;
        }
        Some(DataChunk { stream, flags, offset, in_msg, data, msg })
    }

    /// Drops the rest of the front message (partial reliability, spec
    /// §13.6): its unsent bytes go, and the receiver is to skip
    /// `[start, end)`, what of it was already cut.
    pub fn drop_front_message(&mut self) -> Option<Dropped> {
        let seg = self.segs.front()?;
        let SegKind::Message { unordered, msg } = seg.kind else {
            return None;
        };
        let released = seg.len - seg.cut;
        let next = if unordered { self.uno.next } else { self.ord.next };
        let start = if seg.cut == 0 { next } else { seg.start };
        self.segs.pop_front();
        drop(self.buf.take(released));
        Some(Dropped { start, end: next, unordered, msg, released })
    }

    /// Resets the side: everything queued is dropped. Returns the bytes
    /// released and the final size.
    pub fn reset(&mut self, code: u16) -> (usize, u64) {
        let released = self.buf.len();
        self.buf.clear();
        self.segs.clear();
        self.reset = Some(code);
        self.used = true;
        (released, self.ord.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_cut_with_begin_and_end_markers_within_the_credit() {
        let mut s = SendSide::new(6);
        s.push_message(b"abcdefgh", false, 0);
        let a = s.cut(StreamId::new(1), 4, usize::MAX).unwrap();
        assert_eq!((a.flags, a.offset, &a.data[..]), (data_flags::BEGIN, 0, &b"abcd"[..]));
        // Two bytes of credit left.
        let b = s.cut(StreamId::new(1), 4, usize::MAX).unwrap();
        assert_eq!((b.flags, b.offset, b.in_msg, &b.data[..]), (0, 4, 4, &b"ef"[..]));
        assert!(s.cut(StreamId::new(1), 4, usize::MAX).is_none());
        s.ord.credit = 100;
        let c = s.cut(StreamId::new(1), 4, usize::MAX).unwrap();
        assert_eq!((c.flags, c.in_msg, &c.data[..]), (data_flags::END, 6, &b"gh"[..]));
        assert_eq!(s.unacked, 8);
    }

    #[test]
    fn a_shared_message_is_cut_from_the_callers_buffer_without_a_copy() {
        let mut s = SendSide::new(1 << 20);
        let data = Bytes::from(vec![9u8; 3000]);
        s.push_shared(data.clone(), false, 0);
        let a = s.cut(StreamId::new(1), 1200, usize::MAX).unwrap();
        let b = s.cut(StreamId::new(1), 1200, usize::MAX).unwrap();
        assert_eq!(a.data.as_ptr(), data.as_ptr(), "the first chunk is a slice of the caller's buffer");
        assert_eq!(b.data.as_ptr(), data[1200..].as_ptr());
        assert_eq!((a.flags, b.offset), (data_flags::BEGIN, 1200));
    }

    #[test]
    fn a_reset_side_is_not_done_while_a_chunk_of_it_is_in_flight() {
        let mut s = SendSide::new(100);
        s.write(b"abcd");
        let c = s.cut(StreamId::new(3), 10, usize::MAX).unwrap();
        s.reset(7);
        s.reset_acked = true;
        // Forgotten now, the stream could be reborn by the peer's data and
        // this chunk's ack counted against the new side.
        assert!(!s.is_done());
        s.unacked -= c.data.len() as u64;
        assert!(s.is_done());
    }

    #[test]
    fn fin_rides_on_the_last_chunk_or_alone() {
        let mut s = SendSide::new(100);
        s.write(b"xy");
        s.fin_queued = true;
        let c = s.cut(StreamId::new(0), 10, usize::MAX).unwrap();
        assert_eq!(c.flags, data_flags::FIN);
        // The unordered space ends with a bare FIN of its own.
        let u = s.cut(StreamId::new(0), 10, usize::MAX).unwrap();
        assert_eq!((u.flags, u.offset, u.data.len()), (data_flags::FIN | data_flags::UNORDERED, 0, 0));
        assert!(s.cut(StreamId::new(0), 10, usize::MAX).is_none());
        let mut t = SendSide::new(100);
        t.fin_queued = true;
        let c = t.cut(StreamId::new(0), 10, usize::MAX).unwrap();
        assert_eq!((c.flags, c.data.len()), (data_flags::FIN, 0));
        assert!(!t.fin_acked());
        t.on_fin_acked(false);
        t.on_fin_acked(true);
        assert!(t.fin_acked());
    }

    #[test]
    fn unordered_messages_take_offsets_and_credit_of_their_own_space() {
        let mut s = SendSide::new(4);
        s.push_message(b"uuu", true, 0);
        s.push_message(b"oo", false, 0);
        let u = s.cut(StreamId::new(1), 10, usize::MAX).unwrap();
        assert_eq!((u.offset, u.flags & data_flags::UNORDERED), (0, data_flags::UNORDERED));
        let o = s.cut(StreamId::new(1), 10, usize::MAX).unwrap();
        assert_eq!((o.offset, &o.data[..]), (0, &b"oo"[..]));
        assert_eq!((s.uno.next, s.ord.next), (3, 2));
    }

    #[test]
    fn an_empty_message_takes_one_offset_of_credit() {
        let mut s = SendSide::new(1);
        s.push_message(b"", false, 0);
        s.push_message(b"", false, 0);
        let c = s.cut(StreamId::new(1), 10, usize::MAX).unwrap();
        assert_eq!((c.flags, c.offset, c.data.len()), (data_flags::BEGIN | data_flags::END, 0, 0));
        assert_eq!(s.ord.next, 1);
        assert!(!s.can_send() && s.cut(StreamId::new(1), 10, usize::MAX).is_none(), "no credit left");
        s.ord.credit = 2;
        let c = s.cut(StreamId::new(1), 10, usize::MAX).unwrap();
        assert_eq!((c.offset, c.data.len()), (1, 0));
        assert_eq!(s.ord.next, 2);
    }

    #[test]
    fn dropping_a_half_sent_message_reports_the_range_to_skip() {
        let mut s = SendSide::new(100);
        s.push_message(b"0123456789", true, 7);
        s.push_message(b"next", false, 0);
        s.cut(StreamId::new(2), 4, usize::MAX).unwrap();
        let d = s.drop_front_message().unwrap();
        assert_eq!(d, Dropped { start: 0, end: 4, unordered: true, msg: 7, released: 6 });
        let c = s.cut(StreamId::new(2), 10, usize::MAX).unwrap();
        assert_eq!((&c.data[..], c.offset, c.flags), (&b"next"[..], 0, data_flags::BEGIN | data_flags::END));
    }
}
