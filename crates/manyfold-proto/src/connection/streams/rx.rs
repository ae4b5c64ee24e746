//! The receiving side of one stream (spec §13.4): data placed by stream
//! offset, whatever order its packets arrive in; ordered bytes in a ring
//! with message boundaries marked; unordered messages, in an offset space
//! of their own, reassembled apart and handed out as soon as they are
//! whole; abandoned ranges skipped.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use super::UNREAD_ITEM_COST;
use crate::rangeset::RangeSet;
use crate::ring::ByteRing;
use crate::wire::chunk::{data_flags, span, DataChunk, MAX_OFFSET};

/// The least a piece must hold to be kept as a slice of its datagram
/// rather than copied: below it the copy costs less than the bookkeeping.
const KEEP_MIN: usize = 8 * 1024;

/// `data` as a slice of `source`, the datagram it was parsed from, when
/// keeping it saves a copy worth saving: it is at least [`KEEP_MIN`] bytes
/// and at least half of the datagram, so what a kept slice holds alive is
/// at most twice what it carries (the driver hands over datagrams that fill
/// most of their allocation; spec §7.2). `None` when `data` lies elsewhere
/// (an opened protected packet's plaintext).
fn kept_slice(source: Option<&Bytes>, data: &[u8]) -> Option<Bytes> {
    let source = source?;
    let inside = source.as_ptr_range().start <= data.as_ptr_range().start
        && data.as_ptr_range().end <= source.as_ptr_range().end;
    (inside && data.len() >= KEEP_MIN && 2 * data.len() >= source.len()).then(|| source.slice_ref(data))
}

/// What the application gets from a stream, in order (spec §13.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    /// A whole message (or, at the end, the bytes after the last boundary),
    /// reference-counted: handing it on or keeping it copies nothing.
    Message(Bytes),
    /// The sender abandoned a message (partial reliability).
    Abandoned,
    /// The sender finished the stream: nothing follows.
    Finished,
    /// The sender reset the stream with this code: nothing follows.
    Reset(u16),
}

/// What [`crate::ConnMut::recv_message_into`] took: a [`StreamItem`]
/// whose message bytes went into the caller's buffer, so that reading a
/// stream of messages allocates nothing per message (issue 21).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadItem {
    /// A whole message of `len` bytes, appended to the caller's buffer.
    Message {
        /// Its length: the last `len` bytes of the buffer.
        len: usize,
    },
    /// The sender abandoned a message (partial reliability).
    Abandoned,
    /// The sender finished the stream: nothing follows.
    Finished,
    /// The sender reset the stream with this code: nothing follows.
    Reset(u16),
}

/// The next item, either whole or with its bytes already copied out.
enum Popped {
    Item(StreamItem),
    /// A message of this many bytes, appended to the caller's buffer.
    Copied(usize),
}

#[derive(Debug)]
enum Piece {
    Data {
        data: Bytes,
        flags: u8,
        /// `data` is a kept slice of its datagram (spec §7.2), not a copy.
        kept: bool,
    },
    /// `[key, end)` was abandoned by the sender.
    Skip { end: u64 },
}

/// A boundary in the ring, as a count of bytes ever pushed.
#[derive(Debug, Clone, Copy)]
enum Mark {
    End(u64),
    Abandoned(u64),
}

#[derive(Debug, Default)]
struct Partial {
    /// Fragments by in-message offset; they never overlap.
    frags: BTreeMap<u32, Vec<u8>>,
    /// Bytes the fragments hold.
    got: usize,
    len: Option<usize>,
}

impl Partial {
    /// Keeps the bytes of `data`, which starts `at` bytes into the
    /// message, that no fragment holds yet, as fragments of their own;
    /// returns how many bytes and fragments that added. A resend may be
    /// cut elsewhere than its first transmission (a path that narrowed,
    /// spec §3.7), and both may arrive: counted twice, the overlap kept
    /// the message from ever being whole.
    fn add(&mut self, at: u32, data: &[u8]) -> (usize, usize) {
        let (start, end) = (u64::from(at), u64::from(at) + data.len() as u64);
        // The fragment that begins before `start` may reach into it.
        let before = self.frags.range(..at).next_back().map(|(&s, f)| (u64::from(s), u64::from(s) + f.len() as u64));
        let within = self.frags.range(at..).map(|(&s, f)| (u64::from(s), u64::from(s) + f.len() as u64));
        let held: Vec<(u64, u64)> = before.into_iter().chain(within.take_while(|&(s, _)| s < end)).collect();
        let (mut pos, mut added, mut pieces) = (start, 0, 0);
        for (s, e) in held.into_iter().chain(std::iter::once((end, end))) {
            if s > pos && pos < end {
                let upto = s.min(end);
                let piece = &data[(pos - start) as usize..(upto - start) as usize];
                self.frags.insert(pos as u32, piece.to_vec());
                added += piece.len();
                pieces += 1;
            }
            pos = pos.max(e);
        }
        self.got += added;
        (added, pieces)
    }
}

/// The limits of one offset space as the receiver enforces them: the
/// credit given, the peer's FIN, and how far the peer has sent (spec §13.7).
#[derive(Debug)]
struct Bounds {
    credit_sent: u64,
    fin_at: Option<u64>,
    /// The end of the highest data received.
    highest: u64,
}

impl Bounds {
    fn new(credit: u64) -> Self {
        Bounds { credit_sent: credit, fin_at: None, highest: 0 }
    }

    /// Checks a chunk ending at `end` (a FIN if `fin`) against the credit
    /// and the FIN; `passed` is how far the space is already complete.
    fn admit(&mut self, end: u64, fin: bool, passed: u64) -> Result<(), Refused> {
        if end > self.credit_sent || self.fin_at.is_some_and(|f| end > f) {
            return Err(Refused::Violation);
        }
        if fin {
            if self.fin_at.is_some_and(|f| f != end) || end < passed {
                return Err(Refused::Violation);
            }
            self.fin_at = Some(end);
        }
        self.highest = self.highest.max(end);
        Ok(())
    }

    /// Grants `consumed + window` once the peer used half of its credit
    /// and the grant moves at least half a window; none after the FIN.
    fn grant(&mut self, consumed: u64, window: u64) -> Option<u64> {
        if self.fin_at.is_some() || self.highest * 2 < self.credit_sent {
            return None;
        }
        let want = consumed + window;
        if want >= self.credit_sent + window / 2 {
            self.credit_sent = want;
            return Some(want);
        }
        None
    }
}

/// The unordered messages' offset space: messages reassembled apart, and
/// which ranges are done (delivered or abandoned).
#[derive(Debug)]
struct Unordered {
    partial: BTreeMap<u64, Partial>,
    /// Every offset below it is done.
    floor: u64,
    /// Done ranges above `floor`.
    done: RangeSet,
    bounds: Bounds,
}

impl Unordered {
    fn is_done(&self, start: u64) -> bool {
        start < self.floor || self.done.contains(start)
    }

    /// Records `[start, end)` as done; returns the number of done ranges
    /// before and after.
    fn mark_done(&mut self, start: u64, end: u64) -> (usize, usize) {
        let before = self.done.len();
        if end > start {
            self.done.insert(start..end);
        }
        while let Some(r) = self.done.first().filter(|r| r.start <= self.floor) {
            self.floor = self.floor.max(r.end);
            self.done.remove_below(self.floor);
        }
        (before, self.done.len())
    }

    /// Every unordered message up to the space's FIN is done.
    fn complete(&self) -> bool {
        self.bounds.fin_at.is_some_and(|f| self.floor >= f) && self.partial.is_empty()
    }
}

/// Why a chunk was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Beyond the credit we gave, or past the stream's end.
    Violation,
}

#[derive(Debug)]
pub(crate) struct RecvSide {
    /// Every ordered byte below it is in the ring or was read or skipped.
    next: u64,
    held: BTreeMap<u64, Piece>,
    ring: ByteRing,
    marks: VecDeque<Mark>,
    pushed: u64,
    popped: u64,
    uno: Unordered,
    /// Unordered messages (or their abandonment) ready before the ordered ones.
    oob: VecDeque<StreamItem>,
    /// The bytes of the messages in `oob`.
    oob_bytes: usize,
    /// Credit, FIN and reach of the ordered space.
    bounds: Bounds,
    /// A message began in the ring and has not ended.
    in_message: bool,
    /// Ended by the connection's FIN (every stream ends with it).
    conn_fin: bool,
    finished_reported: bool,
    reset: Option<u16>,
    reset_reported: bool,
    /// Bytes held for the application (ring, out of order, unordered).
    pub buffered: usize,
    /// Entries of bookkeeping: held pieces, unordered fragments, done
    /// ranges. The connection bounds their sum (spec §13.8).
    pub pieces: usize,
    /// Bytes delivered in order as kept slices of their datagrams.
    pub kept: u64,
    window: u64,
    /// The peer has sent on it.
    pub used: bool,
    /// The application released the connection: data is counted, not kept.
    pub discard: bool,
}

/// Largest receive ring a spare keeps (issue 21, spec §15.3).
const SPARE_RING: usize = 1024;

impl RecvSide {
    /// Takes the ring's storage of `old` (a finished connection's side,
    /// issue 21), emptied, if it is at most [`SPARE_RING`] bytes; everything
    /// else of `old` is dropped.
    pub fn keep_memory_of(&mut self, old: RecvSide) {
        if self.ring.len() == 0 {
            self.ring = old.ring.emptied(SPARE_RING);
        }
    }

    pub fn new(credit: u64, window: u64) -> Self {
        RecvSide {
            next: 0,
            held: BTreeMap::new(),
            ring: ByteRing::default(),
            marks: VecDeque::new(),
            pushed: 0,
            popped: 0,
            uno: Unordered { partial: BTreeMap::new(), floor: 0, done: RangeSet::new(), bounds: Bounds::new(credit) },
            oob: VecDeque::new(),
            oob_bytes: 0,
            bounds: Bounds::new(credit),
            in_message: false,
            conn_fin: false,
            finished_reported: false,
            reset: None,
            reset_reported: false,
            buffered: 0,
            pieces: 0,
            kept: 0,
            window,
            used: false,
            discard: false,
        }
    }

    /// Both offset spaces reached their FIN, or the connection's FIN came.
    pub fn finished(&self) -> bool {
        (self.bounds.fin_at == Some(self.next) && self.uno.complete()) || self.conn_fin
    }

    /// Whether the side has nothing more to give the application.
    pub fn is_done(&self) -> bool {
        self.finished_reported || self.reset_reported
    }

    /// Whether [`RecvSide::pop_item`] would return something. A side the
    /// peer never sent on reports no end of its own.
    pub fn has_item(&self) -> bool {
        if self.is_done() || (!self.used && self.reset.is_none()) {
            return false;
        }
        self.reset.is_some()
            || !self.oob.is_empty()
            || !self.marks.is_empty()
            || (self.finished() && self.held.is_empty())
    }

    /// Takes one data chunk (spec §13.4). Returns the bytes newly held.
    #[cfg(test)]
    pub fn on_data(&mut self, c: &DataChunk<&[u8]>) -> Result<usize, Refused> {
        self.on_data_from(c, None)
    }

    /// [`RecvSide::on_data`] of a chunk parsed from `source`, the datagram
    /// as the driver handed it over, if it did (a large in-order piece is
    /// then kept as a slice of it; see [`kept_slice`]).
    pub fn on_data_from(&mut self, c: &DataChunk<&[u8]>, source: Option<&Bytes>) -> Result<usize, Refused> {
        self.used = true;
        if c.flags & data_flags::UNORDERED != 0 {
            return self.on_unordered(c);
        }
        let end = c.offset + c.span();
        self.bounds.admit(end, c.flags & data_flags::FIN != 0, self.next)?;
        if self.reset.is_some() || self.conn_fin {
            return Ok(0);
        }
        let before = self.buffered;
        if end > self.next && !self.covered(c.offset) {
            let skip = self.next.saturating_sub(c.offset) as usize;
            let data = &c.data[skip..];
            let off = c.offset.max(self.next);
            if off == self.next {
                match kept_slice(source, data) {
                    Some(kept) => self.deliver_shared(kept, c.flags, true),
                    None => self.deliver(data, c.flags),
                }
                self.pull();
            } else if c.span() > 0 && self.held_span(off).is_none_or(|held| held < c.span()) {
                // A piece already held at this offset (the same bytes, cut
                // otherwise when sent again, spec §3.7) gives way only to a
                // longer one: a shorter one would drop the bytes past it.
                let (data, kept) = match kept_slice(source, data) {
                    Some(slice) => (slice, true),
                    None => (Bytes::copy_from_slice(data), false),
                };
                let len = data.len();
                let old = self.held.insert(off, Piece::Data { data, flags: c.flags, kept });
                if let Some(Piece::Data { data: old, .. }) = old {
                    self.buffered -= old.len();
                    self.pieces -= 1;
                }
                self.buffered += len;
                self.pieces += 1;
            }
        } else if c.span() == 0 && c.offset == self.next {
            // A bare FIN.
            self.deliver(&[], c.flags);
        }
        Ok(self.buffered.saturating_sub(before))
    }

    /// Offsets the data piece held at exactly `off` takes, if one is.
    fn held_span(&self, off: u64) -> Option<u64> {
        match self.held.get(&off) {
            Some(Piece::Data { data, flags, .. }) => Some(span(data.len(), *flags)),
            _ => None,
        }
    }

    /// Whether `off` lies in a held skip (an abandoned range).
    fn covered(&self, off: u64) -> bool {
        self.held.range(..=off).next_back().is_some_and(|(_, p)| matches!(p, Piece::Skip { end } if *end > off))
    }

    /// A chunk of the unordered space: credit and FIN of its own, and
    /// reassembly by message start (offset − in-message offset).
    fn on_unordered(&mut self, c: &DataChunk<&[u8]>) -> Result<usize, Refused> {
        let u = &mut self.uno;
        let end = c.offset + c.span();
        u.bounds.admit(end, c.flags & data_flags::FIN != 0, u.floor)?;
        let whole = data_flags::BEGIN | data_flags::END;
        let bare = c.data.is_empty() && c.flags & whole != whole;
        let start = c.offset - u64::from(c.in_msg);
        if self.reset.is_some() || self.conn_fin || bare || u.is_done(start) {
            return Ok(0);
        }
        // A message whole in one chunk (every small one) skips reassembly:
        // one allocation, its own (issue 21).
        if c.in_msg == 0 && c.flags & whole == whole && !u.partial.contains_key(&start) {
            let (before, after) = u.mark_done(start, start + span(c.data.len(), whole));
            self.pieces = self.pieces + after - before;
            if !self.discard {
                self.buffered += c.data.len();
                self.oob_bytes += c.data.len();
                self.oob.push_back(StreamItem::Message(Bytes::copy_from_slice(c.data)));
            }
            return Ok(c.data.len());
        }
        let p = u.partial.entry(start).or_default();
        let (added, pieces) = p.add(c.in_msg, c.data);
        if c.flags & data_flags::END != 0 {
            p.len = Some(c.in_msg as usize + c.data.len());
        }
        self.buffered += added;
        self.pieces += pieces;
        if p.len != Some(p.got) {
            return Ok(added);
        }
        let Some(p) = u.partial.remove(&start) else { return Ok(added) };
        self.pieces -= p.frags.len();
        let mut msg = Vec::with_capacity(p.got);
        for f in p.frags.into_values() {
            msg.extend_from_slice(&f);
        }
        let (before, after) = u.mark_done(start, start + span(msg.len(), whole));
        self.pieces = self.pieces + after - before;
        if self.discard {
            self.buffered -= msg.len();
        } else {
            self.oob_bytes += msg.len();
            self.oob.push_back(StreamItem::Message(Bytes::from(msg)));
        }
        Ok(added)
    }

    /// The sender abandoned `[start, end)` (spec §13.6). An empty range is
    /// a message that was never sent; one already passed was either
    /// delivered whole or reported when the next message began.
    pub fn on_abandon(&mut self, start: u64, end: u64, unordered: bool) {
        if self.reset.is_some() {
            return;
        }
        if start == end {
            if !self.discard {
                self.oob.push_back(StreamItem::Abandoned);
            }
            return;
        }
        if unordered {
            if self.uno.is_done(start) {
                return;
            }
            if let Some(p) = self.uno.partial.remove(&start) {
                self.buffered -= p.got;
                self.pieces -= p.frags.len();
            }
            let (before, after) = self.uno.mark_done(start, end);
            self.pieces = self.pieces + after - before;
            if !self.discard {
                self.oob.push_back(StreamItem::Abandoned);
            }
            return;
        }
        if end <= self.next || self.covered(start) {
            // The message in progress, all of it that was sent read: it
            // ends here.
            if self.in_message && end == self.next {
                self.mark_abandoned();
            }
            return;
        }
        self.skip(start, end);
    }

    /// Skips the abandoned ordered range `[start, end)`.
    fn skip(&mut self, start: u64, end: u64) {
        if start <= self.next {
            // A range from here on is another message's: the one in
            // progress has ended short (its own range starts before here).
            if start == self.next {
                self.end_message();
            }
            self.mark_abandoned();
            self.next = self.next.max(end);
            self.pull();
            return;
        }
        let inside: Vec<u64> = self.held.range(start..end).map(|(k, _)| *k).collect();
        for k in inside {
            if let Some(Piece::Data { data, .. }) = self.held.remove(&k) {
                self.buffered -= data.len();
            }
            self.pieces -= 1;
        }
        self.pieces += 1;
        self.held.insert(start, Piece::Skip { end });
    }

    fn deliver(&mut self, data: &[u8], flags: u8) {
        if self.accept(data.len(), flags) {
            self.ring.push(data);
            self.after_push(data.len(), flags);
        }
    }

    /// [`RecvSide::deliver`] of bytes already in a buffer of their own (a
    /// kept slice of the received datagram, see [`kept_slice`], or a held
    /// piece's copy): pushed as they are, not copied again. `kept`: a slice
    /// of a datagram.
    fn deliver_shared(&mut self, data: Bytes, flags: u8, kept: bool) {
        let len = data.len();
        if self.accept(len, flags) {
            if kept {
                self.kept += len as u64;
            }
            self.ring.push_shared(data);
            self.after_push(len, flags);
        }
    }

    /// The stream moves past `len` bytes that arrived in order; whether the
    /// application is to get them.
    fn accept(&mut self, len: usize, flags: u8) -> bool {
        self.next += span(len, flags);
        if self.discard {
            return false;
        }
        if flags & data_flags::BEGIN != 0 {
            self.end_message();
            self.in_message = true;
        }
        true
    }

    fn after_push(&mut self, len: usize, flags: u8) {
        self.buffered += len;
        self.pushed += len as u64;
        if flags & data_flags::END != 0 {
            self.marks.push_back(Mark::End(self.pushed));
            self.in_message = false;
        }
    }

    /// What follows is not the rest of the message in progress, if any: it
    /// was abandoned, and its notice is still on the way (or was passed).
    fn end_message(&mut self) {
        if self.in_message {
            self.mark_abandoned();
        }
    }

    /// The bytes since the last boundary belong to an abandoned message.
    fn mark_abandoned(&mut self) {
        // A released connection's notices would never be read.
        if !self.discard {
            self.marks.push_back(Mark::Abandoned(self.pushed));
        }
        self.in_message = false;
    }

    /// Moves what now follows in order from the held pieces into the ring.
    fn pull(&mut self) {
        while let Some(entry) = self.held.first_entry() {
            if *entry.key() > self.next {
                break;
            }
            let off = *entry.key();
            match entry.remove() {
                Piece::Data { data, flags, kept } => {
                    self.buffered -= data.len();
                    self.pieces -= 1;
                    if off + span(data.len(), flags) > self.next {
                        self.deliver_shared(data.slice((self.next - off) as usize..), flags, kept);
                    }
                }
                Piece::Skip { end } => {
                    self.pieces -= 1;
                    if off == self.next {
                        self.end_message();
                    }
                    self.mark_abandoned();
                    self.next = self.next.max(end);
                }
            }
        }
    }

    /// The peer reset the stream.
    pub fn on_reset(&mut self, code: u16) {
        if self.reset.is_some() || self.finished_reported {
            return;
        }
        self.reset = Some(code);
        self.ring.clear();
        self.held.clear();
        self.uno.partial.clear();
        self.uno.done = RangeSet::new();
        self.pieces = 0;
        self.oob.clear();
        self.oob_bytes = 0;
        self.marks.clear();
        self.buffered = 0;
    }

    /// The connection's FIN arrived: the stream ends where it is.
    pub fn on_conn_fin(&mut self) {
        self.conn_fin = true;
    }

    /// Copies ordered bytes into `buf`, ignoring message boundaries.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = self.ring.read(buf);
        self.consume(n);
        n
    }

    /// Up to `max` ordered bytes as one buffer, ignoring message
    /// boundaries; a kept slice of a datagram is handed over uncopied.
    pub fn read_chunk(&mut self, max: usize) -> Bytes {
        let b = self.ring.read_chunk(max);
        self.consume(b.len());
        b
    }

    /// Byte reads pass over the boundaries they read across.
    fn consume(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.popped += n as u64;
        self.buffered -= n;
        while let Some(Mark::End(p) | Mark::Abandoned(p)) = self.marks.front() {
            if *p > self.popped {
                break;
            }
            self.marks.pop_front();
        }
    }

    /// The next item for the application (spec §13.5).
    pub fn pop_item(&mut self) -> Option<StreamItem> {
        let mut m = Vec::new();
        Some(match self.pop(&mut m)? {
            Popped::Item(item) => item,
            Popped::Copied(_) => StreamItem::Message(Bytes::from(m)),
        })
    }

    /// [`RecvSide::pop_item`] with a message's bytes appended to `buf`,
    /// which the caller reuses: no allocation once it is large enough.
    pub fn pop_item_into(&mut self, buf: &mut Vec<u8>) -> Option<ReadItem> {
        Some(match self.pop(buf)? {
            Popped::Copied(len) => ReadItem::Message { len },
            Popped::Item(StreamItem::Message(m)) => {
                buf.extend_from_slice(&m);
                ReadItem::Message { len: m.len() }
            }
            Popped::Item(StreamItem::Abandoned) => ReadItem::Abandoned,
            Popped::Item(StreamItem::Finished) => ReadItem::Finished,
            Popped::Item(StreamItem::Reset(code)) => ReadItem::Reset(code),
        })
    }

    /// The one path of both: an ordered message is copied out of the ring
    /// to the end of `out`; anything else is handed whole.
    fn pop(&mut self, out: &mut Vec<u8>) -> Option<Popped> {
        if self.is_done() || (!self.used && self.reset.is_none()) {
            return None;
        }
        if let Some(code) = self.reset {
            self.reset_reported = true;
            return Some(Popped::Item(StreamItem::Reset(code)));
        }
        if let Some(item) = self.oob.pop_front() {
            if let StreamItem::Message(m) = &item {
                self.buffered -= m.len();
                self.oob_bytes -= m.len();
            }
            return Some(Popped::Item(item));
        }
        match self.marks.pop_front() {
            Some(Mark::End(pos)) => {
                let n = self.read_out((pos - self.popped) as usize, out);
                self.popped += n as u64;
                self.buffered -= n;
                Some(Popped::Copied(n))
            }
            Some(Mark::Abandoned(pos)) => {
                let n = self.ring.discard((pos - self.popped) as usize);
                self.popped += n as u64;
                self.buffered -= n;
                Some(Popped::Item(StreamItem::Abandoned))
            }
            None if self.finished() && self.held.is_empty() => {
                // A message the stream ended in the middle of was abandoned.
                if self.in_message {
                    self.mark_abandoned();
                    return self.pop(out);
                }
                if self.ring.len() > 0 {
                    let n = self.read_out(self.ring.len(), out);
                    self.consume(n);
                    return Some(Popped::Copied(n));
                }
                self.finished_reported = true;
                Some(Popped::Item(StreamItem::Finished))
            }
            None => None,
        }
    }

    /// Moves `len` bytes from the ring to the end of `out`; how many came.
    fn read_out(&mut self, len: usize, out: &mut Vec<u8>) -> usize {
        let at = out.len();
        if out.capacity() == 0 {
            // A fresh buffer (`pop_item`'s) is made exactly as large: a
            // `Bytes` taken from it then needs no allocation of its own.
            out.reserve_exact(len);
        }
        out.resize(at + len, 0);
        let n = self.ring.read(&mut out[at..]);
        out.truncate(at + n);
        n
    }

    /// Byte-stream end of data: finished and everything read.
    pub fn at_eof(&self) -> bool {
        self.finished() && self.ring.len() == 0 && self.held.is_empty()
    }

    pub fn reset_code(&self) -> Option<u16> {
        self.reset
    }

    /// Credit updates for (the ordered, the unordered) space, if the reader
    /// moved far enough (spec §13.7): the peer may send up to `window`
    /// beyond what was consumed, in the unordered space beyond what is
    /// done. None while the peer has used less than half of what it may
    /// send, so a short exchange costs no credit packet.
    pub fn credit_updates(&mut self) -> (Option<u64>, Option<u64>) {
        if self.reset.is_some() || self.conn_fin {
            return (None, None);
        }
        // spec §13.7: what the application has not read counts against the
        // stream's credit as against the connection's window (§7.1): the
        // ordered space's unread messages by their records (their bytes
        // are in the ring, not yet consumed), the unordered space's by
        // their bytes and records (done, so past its floor, but unread).
        let cost = |items: usize| (items * UNREAD_ITEM_COST) as u64;
        let consumed = self.next - self.ring.len() as u64;
        let ordered = consumed.saturating_sub(cost(self.marks.len()));
        let unordered = self.uno.floor.saturating_sub(self.oob_bytes as u64 + cost(self.oob.len()));
        (self.bounds.grant(ordered, self.window), self.uno.bounds.grant(unordered, self.window))
    }

    /// Our connection FIN is out: no credit limits the peer any more.
    pub fn lift_credit(&mut self) {
        self.bounds.credit_sent = MAX_OFFSET;
        self.uno.bounds.credit_sent = MAX_OFFSET;
    }

    /// Messages and stream events delivered and not yet read: each holds a
    /// record (a boundary mark, or a queued item and its buffer) beside
    /// its bytes.
    pub fn unread_items(&self) -> usize {
        self.marks.len() + self.oob.len()
    }

    /// Drops everything held (the application released the connection).
    pub fn set_discard(&mut self) {
        self.discard = true;
        // A short session's ring is kept, empty, for the spare the
        // connection leaves when it is freed (issue 21, spec §15.3).
        self.ring = std::mem::take(&mut self.ring).emptied(SPARE_RING);
        self.held.clear();
        self.uno.partial.clear();
        self.uno.done = RangeSet::new();
        self.pieces = 0;
        self.oob.clear();
        self.oob_bytes = 0;
        self.marks.clear();
        self.buffered = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::StreamId;

    #[test]
    fn only_large_pieces_of_the_datagram_itself_are_kept() {
        let datagram = Bytes::from(vec![7u8; 20_000]);
        let kept = kept_slice(Some(&datagram), &datagram[100..19_000]).expect("most of it");
        assert_eq!(kept.as_ptr(), datagram[100..].as_ptr(), "a slice, not a copy");
        assert!(kept_slice(Some(&datagram), &datagram[..9_000]).is_none(), "less than half of it");
        let small = Bytes::from(vec![7u8; 6_000]);
        assert!(kept_slice(Some(&small), &small[..5_000]).is_none(), "below KEEP_MIN");
        let elsewhere = vec![7u8; 20_000];
        assert!(kept_slice(Some(&datagram), &elsewhere[..19_000]).is_none(), "an opened packet's plaintext");
        assert!(kept_slice(None, &datagram[..19_000]).is_none(), "a borrowed datagram");
    }

    fn chunk(offset: u64, in_msg: u32, flags: u8, data: &[u8]) -> DataChunk<&[u8]> {
        DataChunk { stream: StreamId::new(1), flags, offset, in_msg, data, msg: 0 }
    }
    const B: u8 = data_flags::BEGIN;
    const E: u8 = data_flags::END;
    const U: u8 = data_flags::UNORDERED;

    fn side() -> RecvSide {
        RecvSide::new(1 << 20, 1 << 20)
    }

    #[test]
    fn messages_come_out_whole_and_in_order_whatever_the_arrival_order() {
        let mut r = side();
        r.on_data(&chunk(3, 0, B | E, b"de")).unwrap();
        assert!(!r.has_item());
        r.on_data(&chunk(0, 0, B, b"ab")).unwrap();
        assert!(!r.has_item());
        r.on_data(&chunk(2, 2, E, b"c")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"abc"))));
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"de"))));
        assert_eq!(r.pop_item(), None);
        assert_eq!(r.buffered, 0);
    }

    #[test]
    fn bytes_held_past_a_gap_survive_a_shorter_copy_at_the_same_offset() {
        // [4, 10) is held behind the gap [0, 4); the same bytes come again
        // cut shorter ([4, 6), a resend fitted to a narrower path) and must
        // not replace the longer piece, nor count twice.
        let mut r = side();
        r.on_data(&chunk(4, 0, 0, b"efghij")).unwrap();
        r.on_data(&chunk(4, 0, 0, b"ef")).unwrap();
        assert_eq!((r.buffered, r.pieces), (6, 1));
        // A longer copy replaces a shorter one.
        let mut l = side();
        l.on_data(&chunk(4, 0, 0, b"ef")).unwrap();
        l.on_data(&chunk(4, 0, 0, b"efghij")).unwrap();
        assert_eq!((l.buffered, l.pieces), (6, 1));
        for r in [&mut r, &mut l] {
            r.on_data(&chunk(0, 0, 0, b"abcd")).unwrap();
            assert_eq!(r.next, 10, "every byte is in order");
            assert_eq!((r.buffered, r.pieces), (10, 0), "all ten wait to be read, nothing held");
        }
    }

    #[test]
    fn messages_read_into_a_buffer_are_appended_whole_of_either_space() {
        let mut r = side();
        r.on_data(&chunk(0, 0, B | E, b"abc")).unwrap();
        r.on_data(&chunk(3, 0, B | E, b"de")).unwrap();
        r.on_data(&chunk(0, 0, B | E | U, b"uu")).unwrap();
        let mut buf = b">".to_vec();
        // The unordered message is whole first; then the ordered ones.
        assert_eq!(r.pop_item_into(&mut buf), Some(ReadItem::Message { len: 2 }));
        assert_eq!(r.pop_item_into(&mut buf), Some(ReadItem::Message { len: 3 }));
        assert_eq!(r.pop_item_into(&mut buf), Some(ReadItem::Message { len: 2 }));
        assert_eq!(r.pop_item_into(&mut buf), None);
        assert_eq!(&buf[..], b">uuabcde");
        assert_eq!(r.buffered, 0);
    }

    #[test]
    fn an_unordered_message_whose_pieces_overlap_comes_out_whole_once() {
        // "abcdefghij" as [0, 6) then [8, 10) with END, then a resend cut
        // elsewhere (spec §3.7): [4, 9), overlapping both. The overlap once
        // counted twice and the message never came out (a proptest under
        // 16% loss, with a path that narrowed).
        let mut r = side();
        r.on_data(&chunk(0, 0, B | U, b"abcdef")).unwrap();
        r.on_data(&chunk(8, 8, E | U, b"ij")).unwrap();
        assert!(!r.has_item());
        r.on_data(&chunk(4, 4, U, b"efghi")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"abcdefghij"))));
        assert_eq!((r.buffered, r.pieces), (0, 0));
        // A piece inside one held adds nothing; the same bytes again neither.
        let mut q = side();
        q.on_data(&chunk(0, 0, B | U, b"abcdef")).unwrap();
        assert_eq!(q.on_data(&chunk(2, 2, U, b"cd")).unwrap(), 0);
        assert_eq!((q.buffered, q.pieces), (6, 1));
        q.on_data(&chunk(6, 6, E | U, b"g")).unwrap();
        assert_eq!(q.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"abcdefg"))));
    }

    #[test]
    fn unordered_and_ordered_messages_never_wait_for_each_other() {
        let mut r = side();
        // The unordered space's first message [0, 4) is lost; the second,
        // [4, 7), arrives in two pieces, the second piece first.
        r.on_data(&chunk(6, 2, E | U, b"z")).unwrap();
        r.on_data(&chunk(4, 0, B | U, b"xy")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"xyz"))));
        // Ordered messages are not held behind the lost unordered one.
        r.on_data(&chunk(0, 0, B | E, b"hello")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"hello"))));
        r.on_data(&chunk(0, 0, B | E | U, b"late")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"late"))));
        // Both spaces end with a FIN of their own.
        r.on_data(&chunk(5, 0, data_flags::FIN, b"")).unwrap();
        assert_eq!(r.pop_item(), None, "the unordered space has not ended");
        r.on_data(&chunk(7, 0, data_flags::FIN | U, b"")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Finished));
        assert_eq!(r.buffered, 0);
    }

    #[test]
    fn an_abandoned_message_is_reported_in_its_place_and_its_bytes_dropped() {
        let mut r = side();
        r.on_data(&chunk(0, 0, B, b"par")).unwrap();
        r.on_data(&chunk(10, 0, B | E, b"ok")).unwrap();
        r.on_abandon(0, 10, false);
        assert_eq!(r.pop_item(), Some(StreamItem::Abandoned));
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"ok"))));
        // A late fragment of the abandoned message is ignored.
        r.on_data(&chunk(5, 5, 0, b"xx")).unwrap();
        assert_eq!(r.pop_item(), None);
        assert_eq!(r.buffered, 0);
    }

    #[test]
    fn a_message_beginning_before_the_last_ended_reports_the_last_abandoned() {
        let mut r = side();
        r.on_data(&chunk(0, 0, B, b"part")).unwrap();
        r.on_data(&chunk(4, 0, B | E, b"next")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Abandoned));
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"next"))));
        // The notice arriving late changes nothing.
        r.on_abandon(0, 4, false);
        assert_eq!(r.pop_item(), None);
    }

    #[test]
    fn a_notice_for_the_message_in_progress_after_all_its_sent_bytes_reports_it_at_once() {
        let mut r = side();
        r.on_data(&chunk(0, 0, B, b"abc")).unwrap();
        // The sender cut no more of it before giving up.
        r.on_abandon(0, 3, false);
        assert_eq!(r.pop_item(), Some(StreamItem::Abandoned));
        assert_eq!(r.pop_item(), None);
        assert_eq!(r.buffered, 0);
    }

    #[test]
    fn a_message_cut_short_and_a_whole_one_abandoned_after_it_are_two_notices() {
        let mut r = side();
        r.on_data(&chunk(0, 0, B, b"abc")).unwrap();
        // The next message, [3, 6), was lost and abandoned; its notice
        // overtakes the one for the first.
        r.on_abandon(3, 6, false);
        r.on_abandon(0, 3, false);
        r.on_data(&chunk(6, 0, B | E, b"ok")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Abandoned));
        assert_eq!(r.pop_item(), Some(StreamItem::Abandoned));
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"ok"))));
        assert_eq!(r.pop_item(), None);
    }

    #[test]
    fn a_message_cut_short_is_never_handed_out_as_whole_at_the_end_of_the_stream() {
        // Cut short, then an unordered message, then the end.
        let mut r = side();
        r.on_data(&chunk(0, 0, B, b"abc")).unwrap();
        r.on_data(&chunk(0, 0, B | E | U, b"xy")).unwrap();
        r.on_data(&chunk(3, 0, data_flags::FIN, b"")).unwrap();
        r.on_data(&chunk(2, 0, data_flags::FIN | U, b"")).unwrap();
        r.on_abandon(0, 3, false);
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"xy"))));
        assert_eq!(r.pop_item(), Some(StreamItem::Abandoned));
        assert_eq!(r.pop_item(), Some(StreamItem::Finished));
        // Cut short by the end of the stream, its notice not yet arrived.
        let mut r = side();
        r.on_data(&chunk(0, 0, B, b"abc")).unwrap();
        r.on_data(&chunk(3, 0, data_flags::FIN, b"")).unwrap();
        r.on_data(&chunk(0, 0, data_flags::FIN | U, b"")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Abandoned));
        assert_eq!(r.pop_item(), Some(StreamItem::Finished));
        assert_eq!(r.buffered, 0);
    }

    #[test]
    fn an_empty_message_keeps_its_place_when_the_next_one_arrives_first() {
        let mut r = side();
        r.on_data(&chunk(1, 0, B | E, b"x")).unwrap();
        assert!(!r.has_item(), "offset 0 is still missing");
        r.on_data(&chunk(0, 0, B | E, b"")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::new())));
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"x"))));
        // An empty unordered message takes a place in its own space.
        let mut r = side();
        r.on_data(&chunk(0, 0, B | E, b"x")).unwrap();
        r.on_data(&chunk(0, 0, B | E | U, b"")).unwrap();
        r.on_data(&chunk(1, 0, B | E | U, b"")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::new())));
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::new())));
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"x"))));
        assert_eq!(r.pop_item(), None);
    }

    #[test]
    fn pieces_are_counted_and_empty_ones_not_kept() {
        // spec §13.8: the connection bounds the bookkeeping entries.
        let mut r = side();
        for i in 0..1000u64 {
            r.on_data(&chunk(2 * i + 1, 0, 0, b"x")).unwrap();
            r.on_data(&chunk(2 * i + 5000, 0, B | U, b"y")).unwrap();
            r.on_data(&chunk(2 * i + 1, 0, 0, b"")).unwrap();
        }
        assert_eq!((r.buffered, r.pieces), (2000, 2000));
        // Offset 0 pulls the piece at 1 into the ring; 2 is still missing.
        r.on_data(&chunk(0, 0, 0, b"x")).unwrap();
        assert_eq!((r.buffered, r.pieces), (2001, 1999));
        r.on_reset(3);
        assert_eq!((r.buffered, r.pieces), (0, 0));
    }

    #[test]
    fn after_our_fin_neither_offset_space_enforces_credit() {
        // spec §13.7: we can grant no more, so both spaces stop counting.
        let mut r = RecvSide::new(4, 4);
        assert_eq!(r.on_data(&chunk(10, 0, B | E | U, b"u")), Err(Refused::Violation));
        r.lift_credit();
        assert_eq!(r.on_data(&chunk(10, 0, B | E | U, b"u")), Ok(1));
        assert_eq!(r.on_data(&chunk(0, 0, 0, b"0123456789")), Ok(10));
        assert_eq!(r.credit_updates(), (None, None));
    }

    #[test]
    fn data_beyond_the_credit_is_refused() {
        let mut r = RecvSide::new(4, 4);
        assert_eq!(r.on_data(&chunk(2, 0, 0, b"abc")), Err(Refused::Violation));
        assert_eq!(r.on_data(&chunk(0, 0, 0, b"abcd")), Ok(4));
    }

    #[test]
    fn fin_ends_the_stream_after_its_data() {
        let mut r = side();
        r.on_data(&chunk(2, 0, data_flags::FIN, b"cd")).unwrap();
        r.on_data(&chunk(0, 0, data_flags::FIN | U, b"")).unwrap();
        assert!(!r.has_item());
        r.on_data(&chunk(0, 0, 0, b"ab")).unwrap();
        assert_eq!(r.pop_item(), Some(StreamItem::Message(Bytes::from_static(b"abcd"))));
        assert_eq!(r.pop_item(), Some(StreamItem::Finished));
        assert!(r.is_done());
    }
}
