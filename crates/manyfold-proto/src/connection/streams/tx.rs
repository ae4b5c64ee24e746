//! The sending side of one stream (spec §13.3): queued bytes and messages,
//! cut into data chunks in order, within the peer's credit.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::connection::send::SendBuffer;
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

#[derive(Debug)]
pub(crate) struct SendSide {
    buf: SendBuffer,
    segs: VecDeque<Seg>,
    /// Stream offset of the next byte to cut.
    pub next_off: u64,
    /// Highest offset the peer allows (flow control credit).
    pub credit: u64,
    /// Data bytes cut into chunks and not yet acknowledged.
    pub unacked: u64,
    pub fin_queued: bool,
    pub fin_sent: bool,
    pub fin_acked: bool,
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
    pub fn new(credit: u64) -> Self {
        SendSide {
            buf: SendBuffer::default(),
            segs: VecDeque::new(),
            next_off: 0,
            credit,
            unacked: 0,
            fin_queued: false,
            fin_sent: false,
            fin_acked: false,
            reset: None,
            reset_acked: false,
            stopped: None,
            priority: super::DEFAULT_PRIORITY,
            weight: 1,
            turn: 0,
            used: false,
        }
    }

    /// Whether the side has nothing more to do: finished and acked, or reset and acked.
    pub fn is_done(&self) -> bool {
        (self.fin_acked && self.unacked == 0) || (self.reset.is_some() && self.reset_acked)
    }

    /// Whether anything is queued or unacknowledged (`wait_for_send`).
    pub fn is_pending(&self) -> bool {
        self.reset.is_none() && (!self.segs.is_empty() || self.unacked > 0 || self.fin_unacked())
    }

    fn fin_unacked(&self) -> bool {
        self.fin_queued && !self.fin_acked
    }

    /// Whether a chunk could be cut now (ignoring the room in the packet).
    /// Every chunk of a message, an empty one too, takes credit.
    pub fn can_send(&self) -> bool {
        if self.reset.is_some() {
            return false;
        }
        match self.segs.front() {
            Some(_) => self.credit > self.next_off,
            None => self.fin_queued && !self.fin_sent,
        }
    }

    pub fn write(&mut self, data: &[u8]) {
        self.used = true;
        self.buf.push(data);
        match self.segs.back_mut() {
            Some(s) if s.kind == SegKind::Bytes => s.len += data.len(),
            _ => self.segs.push_back(Seg { len: data.len(), kind: SegKind::Bytes, cut: 0, start: 0 }),
        }
    }

    pub fn push_message(&mut self, data: &[u8], unordered: bool, msg: u64) {
        self.used = true;
        self.buf.push(data);
        self.segs.push_back(Seg { len: data.len(), kind: SegKind::Message { unordered, msg }, cut: 0, start: 0 });
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
    pub fn cut(&mut self, stream: u16, room: usize, flow: usize) -> Option<DataChunk<Bytes>> {
        if self.reset.is_some() {
            return None;
        }
        let Some(seg) = self.segs.front_mut() else {
            if self.fin_queued && !self.fin_sent {
                self.fin_sent = true;
                let c = DataChunk {
                    stream,
                    flags: data_flags::FIN,
                    offset: self.next_off,
                    in_msg: 0,
                    data: Bytes::new(),
                    msg: 0,
                };
                return Some(c);
            }
            return None;
        };
        let remaining = seg.len - seg.cut;
        let credit = usize::try_from(self.credit.saturating_sub(self.next_off)).unwrap_or(usize::MAX);
        let n = remaining.min(room).min(credit).min(flow);
        // An empty message takes one offset (`span`), so it needs credit too.
        if (n == 0 && remaining > 0) || credit == 0 {
            return None;
        }
        if seg.cut == 0 {
            seg.start = self.next_off;
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
        let offset = self.next_off;
        seg.cut += n;
        if seg.cut == seg.len {
            self.segs.pop_front();
        }
        let data = self.buf.take(n);
        self.next_off += span(n, flags);
        self.unacked += n as u64;
        if self.segs.is_empty() && self.fin_queued {
            flags |= data_flags::FIN;
            self.fin_sent = true;
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
        let start = if seg.cut == 0 { self.next_off } else { seg.start };
        self.segs.pop_front();
        drop(self.buf.take(released));
        Some(Dropped { start, end: self.next_off, unordered, msg, released })
    }

    /// Resets the side: everything queued is dropped. Returns the bytes
    /// released and the final size.
    pub fn reset(&mut self, code: u16) -> (usize, u64) {
        let released = self.buf.len();
        self.buf.clear();
        self.segs.clear();
        self.reset = Some(code);
        self.used = true;
        (released, self.next_off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_cut_with_begin_and_end_markers_within_the_credit() {
        let mut s = SendSide::new(6);
        s.push_message(b"abcdefgh", false, 0);
        let a = s.cut(1, 4, usize::MAX).unwrap();
        assert_eq!((a.flags, a.offset, &a.data[..]), (data_flags::BEGIN, 0, &b"abcd"[..]));
        // Two bytes of credit left.
        let b = s.cut(1, 4, usize::MAX).unwrap();
        assert_eq!((b.flags, b.offset, b.in_msg, &b.data[..]), (0, 4, 4, &b"ef"[..]));
        assert!(s.cut(1, 4, usize::MAX).is_none());
        s.credit = 100;
        let c = s.cut(1, 4, usize::MAX).unwrap();
        assert_eq!((c.flags, c.in_msg, &c.data[..]), (data_flags::END, 6, &b"gh"[..]));
        assert_eq!(s.unacked, 8);
    }

    #[test]
    fn fin_rides_on_the_last_chunk_or_alone() {
        let mut s = SendSide::new(100);
        s.write(b"xy");
        s.fin_queued = true;
        let c = s.cut(0, 10, usize::MAX).unwrap();
        assert_eq!(c.flags, data_flags::FIN);
        assert!(s.cut(0, 10, usize::MAX).is_none());
        let mut t = SendSide::new(100);
        t.fin_queued = true;
        let c = t.cut(0, 10, usize::MAX).unwrap();
        assert_eq!((c.flags, c.data.len()), (data_flags::FIN, 0));
    }

    #[test]
    fn an_empty_message_takes_one_offset_of_credit() {
        let mut s = SendSide::new(1);
        s.push_message(b"", false, 0);
        s.push_message(b"", false, 0);
        let c = s.cut(1, 10, usize::MAX).unwrap();
        assert_eq!((c.flags, c.offset, c.data.len()), (data_flags::BEGIN | data_flags::END, 0, 0));
        assert_eq!(s.next_off, 1);
        assert!(!s.can_send() && s.cut(1, 10, usize::MAX).is_none(), "no credit left");
        s.credit = 2;
        let c = s.cut(1, 10, usize::MAX).unwrap();
        assert_eq!((c.offset, c.data.len()), (1, 0));
        assert_eq!(s.next_off, 2);
    }

    #[test]
    fn dropping_a_half_sent_message_reports_the_range_to_skip() {
        let mut s = SendSide::new(100);
        s.push_message(b"0123456789", true, 7);
        s.push_message(b"next", false, 0);
        s.cut(2, 4, usize::MAX).unwrap();
        let d = s.drop_front_message().unwrap();
        assert_eq!(d, Dropped { start: 0, end: 4, unordered: true, msg: 7, released: 6 });
        let c = s.cut(2, 10, usize::MAX).unwrap();
        assert_eq!((&c.data[..], c.offset, c.flags), (&b"next"[..], 4, data_flags::BEGIN | data_flags::END));
    }
}
