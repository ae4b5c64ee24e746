//! Streams inside one connection (spec §13): up to 65,536 numbered,
//! bidirectional streams, each with its own ordering, credit and buffers;
//! messages with begin/end markers, unordered and partially reliable ones;
//! and the scheduler that shares each packet among the streams with data.
//!
//! Stream 0 always exists: it is the connection's byte stream
//! ([`crate::ConnMut::send`] and [`crate::ConnMut::recv`]).

mod open;
mod rx;
mod tx;

pub use rx::{ReadItem, StreamItem};

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::ops::Bound;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::ids::StreamId;
use crate::wire::chunk::{data_flags, Chunk, Chunks, DataChunk, DATA_HEADER_LEN, MAX_OFFSET};
use crate::wire::ErrorCode;
use rx::RecvSide;
use tx::SendSide;

/// Credit every stream has before its receiver says anything (spec §13.7).
pub const INITIAL_STREAM_CREDIT: u64 = 1 << 20;
/// Priority of a stream nobody set one for (0 is the most urgent).
pub const DEFAULT_PRIORITY: u8 = 128;

/// What the receive window and the memory limit count for each message or
/// stream event delivered and not yet read, beyond its bytes (spec §7.1):
/// its record (a boundary mark, 16 bytes, or a queued item, 40) and its
/// buffer's allocation, at most.
pub const UNREAD_ITEM_COST: usize = 64;

/// How one message is sent (spec §13.5, §13.6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageOptions {
    /// Deliver it as soon as it is whole, not in stream order (SCTP's U bit).
    pub unordered: bool,
    /// Abandon it if not delivered within this time of being queued.
    pub lifetime: Option<Duration>,
    /// Abandon it rather than retransmit any of its packets more often.
    pub max_retransmissions: Option<u32>,
}

impl MessageOptions {
    fn partially_reliable(&self) -> bool {
        self.lifetime.is_some() || self.max_retransmissions.is_some()
    }
}

/// Limits of the streams of one connection (spec §13.8).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_streams: usize,
    pub stream_window: u64,
    pub stream0_window: u64,
}

/// Why a stream operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StreamRefusal {
    Finished,
    Reset(u16),
    Limit(usize),
}

/// A partially reliable message the sender still tracks.
#[derive(Debug)]
struct PrMsg {
    stream: StreamId,
    unordered: bool,
    expires: Option<Instant>,
    max_retx: Option<u32>,
    start: Option<u64>,
    end: u64,
    /// Chunks of it in packets not yet acknowledged.
    live: u32,
    /// Its last byte has been cut.
    cut_all: bool,
    abandoned: bool,
    /// The receiver has been told of the abandonment (or needs no telling).
    told: bool,
    /// A group's copy (spec §14.4): its acknowledgement is reported, and
    /// if abandoned before any of it was sent the receiver hears nothing.
    tracked: bool,
}

impl PrMsg {
    fn expired(&self, now: Instant, retx: u32) -> bool {
        self.expires.is_some_and(|e| now >= e) || self.max_retx.is_some_and(|m| retx > m)
    }
}

#[derive(Debug)]
struct Stream {
    tx: SendSide,
    rx: RecvSide,
    in_sched: bool,
    in_ready: bool,
}

/// A set of stream ids (65,536 bits, allocated on first use).
#[derive(Debug, Default)]
struct IdSet(Vec<u64>);

impl IdSet {
    fn insert(&mut self, id: StreamId) {
        if self.0.is_empty() {
            self.0 = vec![0; 1024];
        }
        let id = id.get();
        self.0[usize::from(id) / 64] |= 1 << (id % 64);
    }
    fn contains(&self, id: StreamId) -> bool {
        let id = id.get();
        self.0.get(usize::from(id) / 64).is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
}

#[derive(Debug)]
pub(crate) struct Streams {
    /// Boxed: a B-tree leaf holds 11 values, and an idle connection
    /// (stream 0 only) should not pay for 11 streams' state (spec §15).
    map: BTreeMap<StreamId, Box<Stream>>,
    /// Streams with something to send, by priority, in round-robin order.
    sched: BTreeMap<u8, VecDeque<StreamId>>,
    /// An emptied queue of `sched`, kept (empty) for the next priority that
    /// gets one: a burst or a session does not allocate one each time
    /// (issue 21, spec §15.3).
    spare_queue: VecDeque<StreamId>,
    control: VecDeque<Chunk<Bytes>>,
    /// Streams with an item for `pop_item`, in the order they got one.
    ready: VecDeque<StreamId>,
    closed_tx: IdSet,
    closed_rx: IdSet,
    /// Codes of the forgotten streams whose sending side was reset (by us,
    /// or at the peer's request), so that later sends still report them.
    reset_codes: BTreeMap<StreamId, u16>,
    /// Streams of the peer's we refused (over the limit), told once.
    refused: BTreeSet<StreamId>,
    /// Streams the peer started, for `accept` (spec §13.11). Each number
    /// enters once per connection (a closed stream is not reopened), so
    /// it never holds more than 65,535.
    opened: VecDeque<StreamId>,
    /// The next number `open` tries (spec §13.11); `None` before the first.
    next_local: Option<u32>,
    pr: HashMap<u64, PrMsg>,
    next_msg: u64,
    /// Unsent bytes, all streams.
    queued: usize,
    /// Bytes held for the application, all streams.
    buffered: usize,
    /// Messages and stream events delivered and not yet read, all streams.
    items: usize,
    /// Bookkeeping entries of all receiving sides (spec §13.8).
    pieces: usize,
    limits: Limits,
    discard: bool,
    /// Our connection FIN is out: no more chunks, and credit is no longer
    /// enforced on arriving data (spec §13.7).
    fin_sent: bool,
    /// The peer's FIN arrived: it can give no more credit, so none is needed.
    peer_fin: bool,
    /// Chunks refused as protocol violations.
    pub violations: u64,
    /// Messages abandoned by partial reliability.
    pub abandoned: u64,
    /// Bytes received and kept as slices of their datagrams (spec §7.2).
    pub kept: u64,
    /// Tracked messages now wholly acknowledged, for the connection to report.
    pub acked_tracked: VecDeque<u64>,
}

/// Most entries a reused queue keeps room for (issue 21, spec §15.3).
pub(crate) const SPARE_ENTRIES: usize = 64;

/// Empties `q`, keeping its memory only if it is small.
pub(crate) fn keep_small<T>(q: &mut VecDeque<T>) {
    q.clear();
    if q.capacity() > SPARE_ENTRIES {
        *q = VecDeque::new();
    }
}

impl Streams {
    pub fn new(limits: Limits) -> Self {
        let mut s = Streams::empty(limits, VecDeque::new(), VecDeque::new(), HashMap::new());
        s.map.insert(StreamId::BYTES, Box::new(s.fresh(StreamId::BYTES)));
        s
    }

    /// The streams of a new connection, built from those of a finished one
    /// (issue 21, spec §15.3: no malloc per session): every field as
    /// [`Streams::new`] makes it, but the containers that keep their memory
    /// when emptied are emptied and kept — stream 0's box and its B-tree
    /// leaf, its segment queue, send buffer and receive ring, the
    /// scheduler's leaf and one of its queues, the ready and control
    /// queues and the message table. Nothing of the old
    /// connection's state survives.
    pub fn renew(mut self, limits: Limits) -> Self {
        let mut map = std::mem::take(&mut self.map);
        // Stream 0 stays, so that the map keeps its leaf; any other goes.
        map.retain(|&id, _| id == StreamId::BYTES);
        let (mut ready, mut control, mut pr) = (self.ready, self.control, self.pr);
        // A bulk transfer's large queues are not kept (spec §15.3: a spare
        // holds a short session's memory, ~1.5 KB).
        keep_small(&mut ready);
        keep_small(&mut control);
        pr.clear();
        if pr.capacity() > SPARE_ENTRIES {
            pr = HashMap::new();
        }
        // The scheduler's map keeps its leaf (entries are removed, the map
        // not cleared), and one emptied queue is kept.
        let (mut sched, mut spare_queue) = (std::mem::take(&mut self.sched), self.spare_queue);
        sched.retain(|_, q| {
            if spare_queue.capacity() == 0 && q.capacity() <= SPARE_ENTRIES {
                spare_queue = std::mem::take(q);
                spare_queue.clear();
            }
            false
        });
        keep_small(&mut spare_queue);
        let mut s = Streams::empty(limits, ready, control, pr);
        (s.sched, s.spare_queue) = (sched, spare_queue);
        let fresh = s.fresh(StreamId::BYTES);
        match map.get_mut(&StreamId::BYTES) {
            Some(zero) => {
                let old = std::mem::replace(&mut **zero, fresh);
                zero.tx.keep_memory_of(old.tx);
                zero.rx.keep_memory_of(old.rx);
            }
            None => {
                map.insert(StreamId::BYTES, Box::new(fresh));
            }
        }
        s.map = map;
        s
    }

    /// Hands every container over (for [`Streams::renew`] in the next
    /// connection) and leaves streams that hold and allocate nothing: all
    /// a released connection in TIME-WAIT needs of them (spec §15.3).
    pub fn take_containers(&mut self) -> Streams {
        let none = Streams {
            discard: true,
            // stats() still reports it.
            abandoned: self.abandoned,
            ..Streams::empty(self.limits, VecDeque::new(), VecDeque::new(), HashMap::new())
        };
        std::mem::replace(self, none)
    }

    /// Every field at its start, with these (empty) containers and no stream.
    fn empty(
        limits: Limits,
        ready: VecDeque<StreamId>,
        control: VecDeque<Chunk<Bytes>>,
        pr: HashMap<u64, PrMsg>,
    ) -> Self {
        Streams {
            map: BTreeMap::new(),
            sched: BTreeMap::new(),
            spare_queue: VecDeque::new(),
            control,
            ready,
            closed_tx: IdSet::default(),
            closed_rx: IdSet::default(),
            reset_codes: BTreeMap::new(),
            refused: BTreeSet::new(),
            opened: VecDeque::new(),
            next_local: None,
            pr,
            next_msg: 1,
            queued: 0,
            buffered: 0,
            items: 0,
            pieces: 0,
            limits,
            discard: false,
            fin_sent: false,
            peer_fin: false,
            violations: 0,
            abandoned: 0,
            kept: 0,
            acked_tracked: VecDeque::new(),
        }
    }

    fn fresh(&self, id: StreamId) -> Stream {
        let window = if id == StreamId::BYTES { self.limits.stream0_window } else { self.limits.stream_window };
        let rx_credit = if self.fin_sent { MAX_OFFSET } else { INITIAL_STREAM_CREDIT };
        let tx_credit = if self.peer_fin { MAX_OFFSET } else { INITIAL_STREAM_CREDIT };
        let mut rx = RecvSide::new(rx_credit, window);
        rx.discard = self.discard;
        Stream { tx: SendSide::new(tx_credit), rx, in_sched: false, in_ready: false }
    }

    pub fn queued(&self) -> usize {
        self.queued
    }

    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// What the receiving side holds for the application, as the receive
    /// window and the memory limit count it (spec §7.1, §7.5): its bytes,
    /// and [`UNREAD_ITEM_COST`] for every message or stream event not yet
    /// read, so that a peer's one-byte messages cannot make it hold many
    /// times its receive buffer in records (as Linux counts an skb's
    /// truesize, not its length, against the socket's buffer).
    pub fn held_memory(&self) -> usize {
        self.buffered + self.items * UNREAD_ITEM_COST
    }

    /// Held pieces, unordered fragments and done ranges, all streams.
    pub fn pieces(&self) -> usize {
        self.pieces
    }

    pub fn open_count(&self) -> usize {
        self.map.len()
    }

    /// Whether stream `id` has given the application its end (or reset).
    pub fn rx_done(&self, id: StreamId) -> bool {
        match self.map.get(&id) {
            Some(s) => s.rx.is_done(),
            None => self.closed_rx.contains(id),
        }
    }

    /// Whether some stream has an item for `pop_any`.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    pub fn has_control(&self) -> bool {
        !self.control.is_empty()
    }

    /// Whether everything queued on every stream is sent and acknowledged.
    pub fn all_acked(&self) -> bool {
        self.queued == 0 && self.control.is_empty() && self.map.values().all(|s| !s.tx.is_pending())
    }

    /// Whether something could be cut into a packet now.
    pub fn has_sendable(&self) -> bool {
        !self.control.is_empty() || self.sched.values().any(|q| !q.is_empty())
    }

    // ---- application side -------------------------------------------------

    /// The stream for a local send, opened if new.
    fn tx_stream(&mut self, id: StreamId) -> Result<&mut Stream, StreamRefusal> {
        // Checked first: the peer's chunks may have brought the stream back
        // for its receiving side after ours was closed and forgotten; its
        // fresh sending side must not reopen (the peer would drop what it
        // got: found by fuzzing).
        if self.closed_tx.contains(id) {
            return Err(self.reset_codes.get(&id).map_or(StreamRefusal::Finished, |&c| StreamRefusal::Reset(c)));
        }
        if !self.map.contains_key(&id) {
            if self.map.len() >= self.limits.max_streams {
                return Err(StreamRefusal::Limit(self.limits.max_streams));
            }
            let s = self.fresh(id);
            self.map.insert(id, Box::new(s));
        }
        let s = self.map.get_mut(&id).ok_or(StreamRefusal::Finished)?;
        if let Some(code) = s.tx.reset.or(s.tx.stopped) {
            return Err(StreamRefusal::Reset(code));
        }
        if s.tx.fin_queued {
            return Err(StreamRefusal::Finished);
        }
        Ok(s)
    }

    fn schedule(&mut self, id: StreamId) {
        let Some(s) = self.map.get_mut(&id) else { return };
        if !s.in_sched && s.tx.can_send() {
            s.in_sched = true;
            let spare = &mut self.spare_queue;
            self.sched.entry(s.tx.priority).or_insert_with(|| std::mem::take(spare)).push_back(id);
        }
    }

    /// Checks that a stream could take data now (for all-or-nothing messages).
    pub fn check_send(&mut self, id: StreamId) -> Result<(), StreamRefusal> {
        self.tx_stream(id).map(|_| ())
    }

    /// Queues bytes (`data` already fits the connection's send buffer).
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<(), StreamRefusal> {
        self.tx_stream(id)?.tx.write(data);
        self.wrote(id, data.len());
        Ok(())
    }

    /// [`Streams::write`] without copying `data`.
    pub fn write_shared(&mut self, id: StreamId, data: Bytes) -> Result<(), StreamRefusal> {
        let len = data.len();
        self.tx_stream(id)?.tx.write_shared(data);
        self.wrote(id, len);
        Ok(())
    }

    fn wrote(&mut self, id: StreamId, len: usize) {
        self.queued += len;
        self.schedule(id);
    }

    /// Queues one whole message (size checked by the caller).
    pub fn push_message(
        &mut self,
        now: Instant,
        id: StreamId,
        data: &[u8],
        opts: MessageOptions,
    ) -> Result<(), StreamRefusal> {
        let track = opts.partially_reliable();
        self.push_with(now, id, data.len(), opts, track, false, |tx, msg| tx.push_message(data, opts.unordered, msg))
            .map(|_| ())
    }

    /// Like `push_message`, without copying: packets will be slices of
    /// `data` (spec §13.5), held until acknowledged.
    pub fn push_shared_message(
        &mut self,
        now: Instant,
        id: StreamId,
        data: Bytes,
        opts: MessageOptions,
    ) -> Result<(), StreamRefusal> {
        let track = opts.partially_reliable();
        self.push_with(now, id, data.len(), opts, track, false, |tx, msg| tx.push_shared(data, opts.unordered, msg))
            .map(|_| ())
    }

    /// Queues one whole message without copying it (a group's shared
    /// data, spec §14.4) and tracks it: returns the id that
    /// [`Streams::abandon_tracked`] takes and `acked_tracked` reports.
    pub fn push_tracked(
        &mut self,
        now: Instant,
        id: StreamId,
        data: Bytes,
        opts: MessageOptions,
    ) -> Result<u64, StreamRefusal> {
        let len = data.len();
        self.push_with(now, id, len, opts, true, true, |tx, msg| tx.push_shared(data, opts.unordered, msg))
    }

    #[allow(clippy::too_many_arguments)]
    fn push_with(
        &mut self,
        now: Instant,
        id: StreamId,
        len: usize,
        opts: MessageOptions,
        record: bool,
        tracked: bool,
        push: impl FnOnce(&mut SendSide, u64),
    ) -> Result<u64, StreamRefusal> {
        let msg = if record { self.next_msg } else { 0 };
        let s = self.tx_stream(id)?;
        push(&mut s.tx, msg);
        self.queued += len;
        if msg != 0 {
            self.next_msg += 1;
            self.pr.insert(
                msg,
                PrMsg {
                    stream: id,
                    unordered: opts.unordered,
                    expires: opts.lifetime.map(|l| now + l),
                    max_retx: opts.max_retransmissions,
                    start: None,
                    end: 0,
                    live: 0,
                    cut_all: false,
                    abandoned: false,
                    told: false,
                    tracked,
                },
            );
        }
        self.schedule(id);
        Ok(msg)
    }

    /// Gives up a tracked message (spec §14.4): what is unsent of it is
    /// dropped, its packets are not sent again, and the receiver skips
    /// what of it was sent. Nothing happens once it is acknowledged.
    pub fn abandon_tracked(&mut self, msg: u64) {
        if self.pr.get(&msg).is_some_and(|r| r.tracked && !r.abandoned) {
            self.abandon(msg);
        }
    }

    /// Closes our sending side of a stream gracefully (stream FIN).
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamRefusal> {
        let s = self.tx_stream(id)?;
        s.tx.fin_queued = true;
        s.tx.used = true;
        self.schedule(id);
        Ok(())
    }

    /// Abandons our sending side of a stream with `code` (spec §13.9).
    pub fn reset(&mut self, id: StreamId, code: u16) {
        let Some(s) = self.map.get_mut(&id) else { return };
        if s.tx.reset.is_some() || s.tx.is_done() {
            return;
        }
        let (released, final_size) = s.tx.reset(code);
        // A reset ends our side even if it never sent: once forgotten, the
        // stream must stay closed rather than reopen on the next send, whose
        // bytes the peer would drop unseen (found by fuzzing).
        s.tx.used = true;
        self.queued -= released;
        if !self.fin_sent {
            self.control.push_back(Chunk::Reset { stream: id, code, final_size });
        }
    }

    /// Asks the peer to stop sending on a stream; what arrives meanwhile is dropped.
    pub fn stop(&mut self, id: StreamId, code: u16) {
        let Some(s) = self.map.get(&id) else { return };
        if s.rx.is_done() || s.rx.reset_code().is_some() {
            return;
        }
        self.with_rx(id, false, RecvSide::set_discard);
        if !self.fin_sent {
            self.control.push_back(Chunk::Stop { stream: id, code });
        }
    }

    /// Sets a stream's scheduling, opening it if new (spec §13.10).
    pub fn set_priority(&mut self, id: StreamId, priority: u8, weight: u16) {
        if self.tx_stream(id).is_err() {
            return;
        }
        let Some(s) = self.map.get_mut(&id) else { return };
        if s.in_sched {
            if let Some(q) = self.sched.get_mut(&s.tx.priority) {
                q.retain(|&x| x != id);
            }
            s.in_sched = false;
        }
        s.tx.priority = priority;
        s.tx.weight = weight.max(1);
        self.schedule(id);
    }

    /// Bytes stream `id` holds on the sending side: queued and unacknowledged.
    pub fn held_by(&self, id: StreamId) -> usize {
        self.map.get(&id).map_or(0, |s| s.tx.held())
    }

    /// Whether anything sent or queued on `id` is still unacknowledged.
    pub fn is_pending(&self, id: StreamId) -> bool {
        self.map.get(&id).is_some_and(|s| s.tx.is_pending())
    }

    /// Runs `f` on the receiving side of `id` (opening it for arriving
    /// data if `open`), keeping the byte count, credit and ready list
    /// up to date.
    fn with_rx<R>(&mut self, id: StreamId, open: bool, f: impl FnOnce(&mut RecvSide) -> R) -> Option<R> {
        let fin_sent = self.fin_sent;
        if open && !self.open_rx(id) {
            return None;
        }
        let s = self.map.get_mut(&id)?;
        let (before, pieces_before, kept_before) = (s.rx.buffered, s.rx.pieces, s.rx.kept);
        let items_before = s.rx.unread_items();
        let r = f(&mut s.rx);
        self.buffered = self.buffered - before + s.rx.buffered;
        self.items = self.items - items_before + s.rx.unread_items();
        self.kept += s.rx.kept - kept_before;
        self.pieces = self.pieces - pieces_before + s.rx.pieces;
        // The credit and ready list, without looking the stream up again.
        if !fin_sent {
            let (ordered, unordered) = s.rx.credit_updates();
            if let Some(max) = ordered {
                self.control.push_back(Chunk::Credit { stream: id, unordered: false, max });
            }
            if let Some(max) = unordered {
                self.control.push_back(Chunk::Credit { stream: id, unordered: true, max });
            }
        }
        if !s.in_ready && s.rx.has_item() {
            s.in_ready = true;
            self.ready.push_back(id);
        }
        Some(r)
    }

    /// Reads bytes from a stream. `Ok(None)`: nothing yet; `Ok(Some(0))`: its end.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<Option<usize>, u16> {
        self.read_by(id, 0, |rx| {
            let n = rx.read(buf);
            (n, n)
        })
    }

    /// [`Streams::read`] of up to `max` bytes as one buffer, a kept slice
    /// of a datagram uncopied (spec §7.2); empty at the end.
    pub fn read_chunk(&mut self, id: StreamId, max: usize) -> Result<Option<Bytes>, u16> {
        self.read_by(id, Bytes::new(), |rx| {
            let b = rx.read_chunk(max);
            (b.len(), b)
        })
    }

    /// What `take` read of stream `id` (and how many bytes), `at_end` once
    /// the stream is gone, `None` while nothing is there yet.
    fn read_by<T>(
        &mut self,
        id: StreamId,
        at_end: T,
        take: impl FnOnce(&mut RecvSide) -> (usize, T),
    ) -> Result<Option<T>, u16> {
        if !self.map.contains_key(&id) {
            return Ok(self.closed_rx.contains(id).then_some(at_end));
        }
        let got = self.with_rx(id, false, |rx| match rx.reset_code() {
            Some(code) => Err(code),
            None => {
                let (n, t) = take(rx);
                Ok(if n > 0 || rx.at_eof() { Some(t) } else { None })
            }
        });
        got.unwrap_or(Ok(None))
    }

    /// The next item of any stream, streams taking turns (spec §13.5).
    pub fn pop_any(&mut self) -> Option<(StreamId, StreamItem)> {
        while let Some(id) = self.ready.pop_front() {
            let Some(s) = self.map.get_mut(&id) else { continue };
            s.in_ready = false;
            if let Some(item) = self.pop_on(id) {
                return Some((id, item));
            }
        }
        None
    }

    /// The next item of stream `id`.
    pub fn pop_on(&mut self, id: StreamId) -> Option<StreamItem> {
        let item = self.with_rx(id, false, RecvSide::pop_item)?;
        self.reap(id);
        item
    }

    /// [`Streams::pop_any`] with a message's bytes appended to `buf`
    /// (issue 21: no allocation per message read).
    pub fn pop_any_into(&mut self, buf: &mut Vec<u8>) -> Option<(StreamId, ReadItem)> {
        while let Some(id) = self.ready.pop_front() {
            let Some(s) = self.map.get_mut(&id) else { continue };
            s.in_ready = false;
            if let Some(item) = self.pop_on_into(id, buf) {
                return Some((id, item));
            }
        }
        None
    }

    /// [`Streams::pop_on`] with a message's bytes appended to `buf`.
    pub fn pop_on_into(&mut self, id: StreamId, buf: &mut Vec<u8>) -> Option<ReadItem> {
        let item = self.with_rx(id, false, |rx| rx.pop_item_into(buf))?;
        self.reap(id);
        item
    }

    fn mark_ready(&mut self, id: StreamId) {
        if let Some(s) = self.map.get_mut(&id) {
            if !s.in_ready && s.rx.has_item() {
                s.in_ready = true;
                self.ready.push_back(id);
            }
        }
    }

    /// Forgets a stream both of whose used sides are done (spec §13.9).
    fn reap(&mut self, id: StreamId) {
        let Some(s) = self.map.get(&id) else { return };
        let tx_done = !s.tx.used || s.tx.is_done();
        let rx_done = !s.rx.used || s.rx.is_done();
        if id == StreamId::BYTES || !tx_done || !rx_done || s.in_sched || (s.in_ready && s.rx.has_item()) {
            return;
        }
        // Nothing left to give: the stream's place in the ready list is
        // stale (its end was taken with `pop_on`, which leaves the list to
        // `pop_any`), and would otherwise keep it from being forgotten.
        if s.in_ready {
            self.ready.retain(|&x| x != id);
        }
        let s = self.map.remove(&id).expect("stream present");
        // Normally nothing is left; whatever is goes with the stream.
        self.buffered -= s.rx.buffered;
        self.items -= s.rx.unread_items();
        self.pieces -= s.rx.pieces;
        if s.tx.used {
            self.closed_tx.insert(id);
            if let Some(code) = s.tx.reset {
                self.reset_codes.insert(id, code);
            }
        }
        if s.rx.used {
            self.closed_rx.insert(id);
        }
    }

    /// The application released the connection: data is counted, not kept.
    pub fn set_discard(&mut self) {
        self.discard = true;
        for s in self.map.values_mut() {
            s.rx.set_discard();
        }
        self.buffered = 0;
        self.items = 0;
        self.pieces = 0;
    }

    /// The connection's FIN arrived: every stream's receiving side ends,
    /// and credit no longer limits our sending (spec §13.7).
    pub fn on_conn_fin(&mut self) {
        self.peer_fin = true;
        // Stream by stream in order, without collecting the ids (no
        // allocation per connection, issue 21).
        let mut next = self.map.keys().next().copied();
        while let Some(id) = next {
            if let Some(s) = self.map.get_mut(&id) {
                s.rx.on_conn_fin();
                s.tx.ord.credit = MAX_OFFSET;
                s.tx.uno.credit = MAX_OFFSET;
            }
            self.mark_ready(id);
            self.schedule(id);
            next = self.map.range((Bound::Excluded(id), Bound::Unbounded)).next().map(|(&k, _)| k);
        }
    }

    /// Our connection FIN went out: it is our last sequenced packet, so no
    /// chunk can follow; the peer may now send beyond our credit (spec §13.7).
    pub fn on_fin_sent(&mut self) {
        self.fin_sent = true;
        for s in self.map.values_mut() {
            s.rx.lift_credit();
        }
    }

    /// Drops everything queued (the connection ended abortively).
    pub fn clear_queued(&mut self) {
        for s in self.map.values_mut() {
            if s.tx.reset.is_none() {
                s.tx.reset(0);
            }
        }
        self.queued = 0;
        self.sched.clear();
        self.control.clear();
    }

    // ---- packets out --------------------------------------------------------

    /// Fills `chunks` with control chunks and then data, at most `room`
    /// encoded bytes and `flow` data bytes. Returns the data bytes cut.
    pub fn fill(&mut self, now: Instant, chunks: &mut Chunks, mut room: usize, mut flow: usize) -> usize {
        while let Some(c) = self.control.front() {
            if c.encoded_len() > room {
                return 0;
            }
            room -= c.encoded_len();
            chunks.push(self.control.pop_front().expect("front exists"));
        }
        let mut data = 0;
        while room > DATA_HEADER_LEN && flow > 0 {
            let Some(c) = self.next_chunk(now, room - DATA_HEADER_LEN, flow) else { break };
            let n = c.data.len();
            room -= DATA_HEADER_LEN + n;
            flow -= n;
            data += n;
            chunks.push(Chunk::Data(c));
        }
        data
    }

    fn next_chunk(&mut self, now: Instant, room: usize, flow: usize) -> Option<DataChunk<Bytes>> {
        loop {
            // The front stream of the most urgent priority; empty queues
            // go (one is kept for the next, if small).
            let (prio, id) = loop {
                let first = self.sched.first_entry()?;
                match first.get().front() {
                    Some(&id) => break (*first.key(), id),
                    None => {
                        let q = first.remove();
                        if self.spare_queue.capacity() == 0 && q.capacity() <= SPARE_ENTRIES {
                            self.spare_queue = q;
                        }
                    }
                }
            };
            let Some(s) = self.map.get_mut(&id) else {
                self.sched.get_mut(&prio).map(VecDeque::pop_front);
                continue;
            };
            // spec §13.6: a message whose lifetime ran out before it was
            // all sent is abandoned here.
            if let Some(msg) = s.tx.front_message().filter(|&m| m != 0) {
                if self.pr.get(&msg).is_none_or(|r| r.abandoned || r.expired(now, 0)) {
                    self.abandon(msg);
                    continue;
                }
            }
            let s = self.map.get_mut(&id).expect("stream present");
            let cut = s.tx.cut(id, room, flow);
            let keep = s.tx.can_send();
            let rotate = cut.is_none() || !keep || {
                s.tx.turn += 1;
                s.tx.turn >= s.tx.weight
            };
            if rotate {
                s.tx.turn = 0;
                let q = self.sched.get_mut(&prio).expect("queue exists");
                q.pop_front();
                if keep && cut.is_some() {
                    q.push_back(id);
                } else {
                    s.in_sched = false;
                }
            }
            let Some(c) = cut else {
                if keep {
                    // No room for a chunk of it; a later stream may fit.
                    self.schedule(id);
                    return None;
                }
                continue;
            };
            self.queued -= c.data.len();
            if c.msg != 0 {
                if let Some(r) = self.pr.get_mut(&c.msg) {
                    r.start.get_or_insert(c.offset);
                    r.end = c.offset + c.span();
                    r.live += 1;
                    r.cut_all = c.flags & data_flags::END != 0;
                }
            }
            return Some(c);
        }
    }

    /// Abandons a partially reliable message (spec §13.6): its unsent rest
    /// is dropped and the receiver told which range to skip.
    fn abandon(&mut self, msg: u64) {
        let Some(r) = self.pr.get_mut(&msg) else { return };
        r.abandoned = true;
        let (id, unordered, tracked) = (r.stream, r.unordered, r.tracked);
        // Where it lies is known once part of it was cut, or once it is
        // the front message (dropped now); otherwise it is dropped, and the
        // receiver told, when it reaches the front (`next_chunk`).
        let mut range = r.start.map(|s| (s, r.end));
        if let Some(s) = self.map.get_mut(&id) {
            if s.tx.front_message() == Some(msg) {
                if let Some(d) = s.tx.drop_front_message() {
                    self.queued -= d.released;
                    range = Some((d.start, d.end));
                }
            }
        }
        let r = self.pr.get_mut(&msg).expect("present above");
        if let (Some((start, end)), false) = (range, r.told) {
            r.told = true;
            self.abandoned += 1;
            // A group's copy that never left needs no notice (spec §14.4).
            if !(tracked && start == end) {
                self.control.push_back(Chunk::Abandon { stream: id, unordered, start, end });
            }
        }
        if r.told && r.live == 0 {
            self.pr.remove(&msg);
        }
        self.schedule(id);
    }

    /// Before `chunks` are sent again (retransmission number `retx`):
    /// drops data of reset streams and of abandoned or now-expired
    /// messages. Returns the data bytes removed.
    pub fn before_retransmit(&mut self, now: Instant, chunks: &mut Chunks, retx: u32) -> usize {
        // After our FIN no abandon notice could follow: send it all again.
        let may_abandon = !self.fin_sent;
        for c in chunks.iter().filter(|_| may_abandon) {
            if let Chunk::Data(d) = c {
                if self.pr.get(&d.msg).is_some_and(|r| !r.abandoned && r.expired(now, retx)) {
                    self.abandon(d.msg);
                }
            }
        }
        let dead = |s: &Self, c: &Chunk<Bytes>| {
            let Chunk::Data(d) = c else { return false };
            s.map.get(&d.stream).is_none_or(|x| x.tx.reset.is_some())
                || (d.msg != 0 && s.pr.get(&d.msg).is_none_or(|r| r.abandoned))
        };
        // The common case: nothing to leave out, nothing to allocate.
        if !chunks.iter().any(|c| dead(self, c)) {
            return 0;
        }
        let mut gone = Vec::new();
        let removed = chunks.retain(|c| {
            let is_dead = dead(self, c);
            if let (true, Chunk::Data(d)) = (is_dead, c) {
                gone.push((d.stream, d.msg, d.data.len()));
            }
            !is_dead
        });
        for (id, msg, len) in gone {
            self.forget_chunk(id, msg, len);
            // Its last chunk in flight gone, a reset side may be forgotten.
            self.reap(id);
        }
        if chunks.is_empty() {
            chunks.push(Chunk::Pad);
        }
        removed
    }

    /// Whether `chunks` may go out again as they are (retransmission number
    /// `retx`): no data of a reset stream or of a message given up, or
    /// that would be given up now.
    pub fn may_resend(&self, now: Instant, chunks: &Chunks, retx: u32) -> bool {
        chunks.iter().all(|c| {
            let Chunk::Data(d) = c else { return true };
            let live = self.map.get(&d.stream).is_some_and(|x| x.tx.reset.is_none());
            live && (d.msg == 0 || self.pr.get(&d.msg).is_some_and(|r| !r.abandoned && !r.expired(now, retx)))
        })
    }

    /// A data chunk of message record `msg` was cut in two for a narrower
    /// path (spec §3.7): the message has one more chunk to see acknowledged.
    pub fn on_chunk_split(&mut self, msg: u64) {
        if let Some(r) = self.pr.get_mut(&msg) {
            r.live += 1;
        }
    }

    /// A data chunk will not be acknowledged as such (stripped or acked).
    fn forget_chunk(&mut self, id: StreamId, msg: u64, len: usize) {
        if let Some(s) = self.map.get_mut(&id) {
            // A side is forgotten only once none of its chunks is in
            // flight (`TxSide::is_done`), so this cannot go below zero;
            // checked where fuzzing runs, saturating where a wrong count
            // must not become a panic on a peer's input.
            debug_assert!(s.tx.unacked >= len as u64, "stream {id:?}: a chunk forgotten twice");
            s.tx.unacked = s.tx.unacked.saturating_sub(len as u64);
        }
        if msg != 0 {
            if let Some(r) = self.pr.get_mut(&msg) {
                r.live = r.live.saturating_sub(1);
                if r.live == 0 && r.cut_all && !r.abandoned {
                    if r.tracked {
                        self.acked_tracked.push_back(msg);
                    }
                    self.pr.remove(&msg);
                } else if r.live == 0 && r.abandoned && r.told {
                    self.pr.remove(&msg);
                }
            }
        }
    }

    /// The packet carrying `chunks` was acknowledged. Returns whether a
    /// stream it carried has nothing unacknowledged left (`wait_for_send`).
    pub fn on_acked(&mut self, chunks: &Chunks) -> bool {
        let mut idle = false;
        for c in chunks.iter() {
            let id = match c {
                Chunk::Data(d) => {
                    self.forget_chunk(d.stream, d.msg, d.data.len());
                    if d.flags & data_flags::FIN != 0 {
                        if let Some(s) = self.map.get_mut(&d.stream) {
                            s.tx.on_fin_acked(d.flags & data_flags::UNORDERED != 0);
                        }
                    }
                    d.stream
                }
                Chunk::Reset { stream, .. } => {
                    if let Some(s) = self.map.get_mut(stream) {
                        s.tx.reset_acked = true;
                    }
                    *stream
                }
                _ => continue,
            };
            idle |= !self.is_pending(id);
            self.reap(id);
        }
        idle
    }

    // ---- packets in ---------------------------------------------------------

    /// Takes the chunks of one new sequenced packet. Returns the data
    /// bytes it carried.
    #[cfg(test)]
    pub fn on_chunks(&mut self, data: &[u8]) -> usize {
        self.on_chunks_from(data, None)
    }

    /// [`Streams::on_chunks`] of a packet parsed from `source`, the
    /// datagram as the driver handed it over (`Endpoint::handle_datagram_owned`):
    /// large in-order data is then kept as slices of it, not copied.
    pub fn on_chunks_from(&mut self, data: &[u8], source: Option<&Bytes>) -> usize {
        let mut arrived = 0;
        for c in crate::wire::chunk::parse_chunks(data) {
            // The endpoint validated the chunks before handing the packet on.
            let Ok(c) = c else { break };
            arrived += c.data_len();
            self.on_chunk(&c, source);
        }
        arrived
    }

    fn on_chunk(&mut self, c: &Chunk<&[u8]>, source: Option<&Bytes>) {
        let id = c.stream();
        match c {
            Chunk::Data(d) => {
                if let Some(Err(_)) = self.with_rx(id, true, |rx| rx.on_data_from(d, source)) {
                    self.violations += 1;
                }
            }
            Chunk::Abandon { start, end, unordered, .. } => {
                self.with_rx(id, true, |rx| rx.on_abandon(*start, *end, *unordered));
            }
            Chunk::Reset { code, .. } => {
                self.with_rx(id, true, |rx| rx.on_reset(*code));
            }
            Chunk::Stop { code, .. } => {
                // The peer wants no more: reset our side with its code.
                if let Some(s) = self.map.get_mut(&id) {
                    if s.tx.stopped.is_none() {
                        s.tx.stopped = Some(*code);
                    }
                }
                self.reset(id, *code);
            }
            Chunk::Credit { max, unordered, .. } => {
                if let Some(s) = self.map.get_mut(&id) {
                    let sp = if *unordered { &mut s.tx.uno } else { &mut s.tx.ord };
                    sp.credit = sp.credit.max(*max);
                }
                self.schedule(id);
            }
            // The connection takes handshake messages before its streams see the packet.
            // spec §3.3.4: a REASON chunk counts only on a RST.
            Chunk::Pad | Chunk::Handshake(_) | Chunk::AckFrequency { .. } | Chunk::Reason(_) | Chunk::Resent { .. } => {
            }
        }
    }

    /// The stream for arriving data, opened if new and within the limit;
    /// over the limit the peer is told to stop (spec §13.8).
    fn open_rx(&mut self, id: StreamId) -> bool {
        if self.map.contains_key(&id) {
            return true;
        }
        if self.closed_rx.contains(id) || self.refused.contains(&id) {
            return false;
        }
        if self.map.len() >= self.limits.max_streams {
            self.refused.insert(id);
            if !self.fin_sent {
                self.control.push_back(Chunk::Stop { stream: id, code: ErrorCode::STREAM_LIMIT.0 });
            }
            return false;
        }
        let s = self.fresh(id);
        self.map.insert(id, Box::new(s));
        if id != StreamId::BYTES {
            self.opened.push_back(id); // spec §13.11: the peer started it
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits { max_streams: 16, stream_window: 1 << 16, stream0_window: 1 << 16 }
    }

    #[test]
    fn renewed_streams_are_in_the_state_new_ones_start_in() {
        let mut used = Streams::new(limits());
        used.write(StreamId::BYTES, &[7u8; 3000]).expect("stream 0 takes data");
        used.write(StreamId::new(5), b"another stream").expect("stream 5 opens");
        used.finish(StreamId::BYTES).expect("finish");
        used.on_conn_fin();
        used.set_discard();
        assert_ne!(format!("{used:?}"), format!("{:?}", Streams::new(limits())), "the test used them");
        let renewed = used.renew(limits());
        // Debug shows every field's contents (not the capacities kept).
        assert_eq!(format!("{renewed:?}"), format!("{:?}", Streams::new(limits())));
    }

    #[test]
    fn renewed_streams_keep_no_large_queue() {
        let mut used = Streams::new(limits());
        let now = Instant::now();
        for i in 0..1000u16 {
            // Messages queue a segment each.
            used.push_message(now, StreamId::BYTES, &i.to_be_bytes(), MessageOptions::default()).expect("queued");
        }
        assert!(used.map.get(&StreamId::BYTES).expect("stream 0").tx.segs_capacity() > SPARE_ENTRIES);
        let renewed = used.renew(limits());
        let zero = renewed.map.get(&StreamId::BYTES).expect("stream 0");
        assert!(zero.tx.segs_capacity() <= SPARE_ENTRIES, "{}", zero.tx.segs_capacity());
        assert!(renewed.ready.capacity() <= SPARE_ENTRIES);
        assert!(renewed.spare_queue.capacity() <= SPARE_ENTRIES);
    }

    #[test]
    fn renewed_streams_keep_the_scheduler_queue_and_still_send_in_order() {
        let now = Instant::now();
        let mut used = Streams::new(limits());
        used.write(StreamId::BYTES, b"first session").expect("write");
        let mut chunks = Chunks::default();
        assert_eq!(used.fill(now, &mut chunks, 1400, 1 << 16), 13);
        // The emptied queue went to the spare at the next fill.
        assert_eq!(used.fill(now, &mut Chunks::default(), 1400, 1 << 16), 0);
        assert!(used.sched.is_empty() && used.spare_queue.capacity() > 0);
        let mut renewed = used.renew(limits());
        assert!(renewed.spare_queue.capacity() > 0, "kept for the next connection");
        renewed.write(StreamId::BYTES, b"second").expect("write");
        renewed.write(StreamId::new(5), b"other").expect("write");
        let mut chunks = Chunks::default();
        assert_eq!(renewed.fill(now, &mut chunks, 1400, 1 << 16), 11, "both streams' data goes");
    }
}
