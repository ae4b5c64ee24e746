//! The application's view of one connection (spec §4, §7, §13):
//! [`Endpoint::conn`] answers questions about it ([`ConnRef`]) and
//! [`Endpoint::conn_mut`] acts on it ([`ConnMut`]): data on streams and
//! messages, closing, releasing. Each call finds the connection by its
//! handle once and forwards to it; the endpoint adds only the memory limit
//! (spec §7.5) and marks the connection for output. A handle that names
//! no connection (never did, or released) answers `None`, `false`, 0 or
//! `UnknownConnection`, and changes nothing.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use super::Endpoint;
use crate::conn_handle::ConnHandle;
use crate::connection::{
    CloseReason, ConnStats, Connection, MessageOptions, ReadItem, RecvError, SendError, State, StreamItem,
};
use crate::ids::StreamId;
use crate::wire::ErrorCode;

impl Endpoint {
    /// What the application may ask about connection `h`.
    pub fn conn(&self, h: ConnHandle) -> ConnRef<'_> {
        ConnRef { conn: self.table.get(h) }
    }

    /// The application's calls on connection `h`.
    pub fn conn_mut(&mut self, h: ConnHandle) -> ConnMut<'_> {
        ConnMut { ep: self, h }
    }
}

/// A read-only view of one connection ([`Endpoint::conn`]).
#[derive(Debug, Clone, Copy)]
pub struct ConnRef<'a> {
    conn: Option<&'a Connection>,
}

impl<'a> ConnRef<'a> {
    /// The connection's state (spec §4), `None` for an unknown handle.
    pub fn state(self) -> Option<State> {
        self.conn.map(|c| c.state())
    }

    /// The peer's address now (it follows a migration, spec §6.8).
    pub fn remote_addr(self) -> Option<SocketAddr> {
        self.conn.map(|c| c.remote())
    }

    /// The connection's counters.
    pub fn stats(self) -> Option<ConnStats> {
        self.conn.map(|c| c.stats())
    }

    /// Whether the connection protects its packets (spec §19).
    pub fn is_protected(self) -> bool {
        self.conn.is_some_and(Connection::is_protected)
    }

    /// The static public key the peer proved in its handshake (spec §19.2).
    pub fn peer_key(self) -> Option<[u8; 32]> {
        self.conn.and_then(Connection::peer_key)
    }

    /// How the connection ended, once it has.
    pub fn close_reason(self) -> Option<CloseReason> {
        self.conn.and_then(|c| c.close_reason())
    }

    /// The peer's reason in words, when the RST that ended the connection
    /// carried one (spec §3.3.4).
    pub fn peer_close_text(self) -> Option<&'a str> {
        self.conn.and_then(|c| c.peer_close_text())
    }

    /// Whether the peer has finished the connection and every message and
    /// stream event was taken (the end for [`ConnMut::recv_message`]).
    pub fn messages_done(self) -> bool {
        self.conn.is_some_and(|c| c.messages_done())
    }

    /// Whether `stream` has delivered its end or reset (the end for
    /// [`ConnMut::recv_message_on`]).
    pub fn stream_done(self, stream: StreamId) -> bool {
        self.conn.is_some_and(|c| c.stream_done(stream))
    }

    /// Whether anything queued on `stream` is not yet acknowledged
    /// (`wait_for_send`, paper 00 §4.2.7). False once the connection closed.
    pub fn stream_pending(self, stream: StreamId) -> bool {
        self.conn.is_some_and(|c| c.stream_pending(stream))
    }

    /// Whether the connection has something to tell the peer now: an ack
    /// due at once (a read reopened a closing window, spec §7.3) or credit
    /// for a stream (§13.7). A driver wakes its sender after a read only
    /// then; otherwise what reading freed rides on the next ack.
    pub fn reply_due(self) -> bool {
        self.conn.is_some_and(|c| c.reply_due())
    }
}

/// The application's calls on one connection ([`Endpoint::conn_mut`]).
#[derive(Debug)]
pub struct ConnMut<'a> {
    ep: &'a mut Endpoint,
    h: ConnHandle,
}

impl ConnMut<'_> {
    /// Queues application data on stream 0, the connection's byte stream
    /// (spec §7). Returns how many bytes were taken: fewer than offered
    /// when the send buffer is full, 0 when it has no room.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, SendError> {
        self.stream_send(StreamId::BYTES, data)
    }

    /// Reads stream 0 in order. `Ok(Some(0))` is the end of the peer's
    /// stream (its FIN, after all data); `Ok(None)` means nothing yet.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Option<usize>, RecvError> {
        self.stream_recv(StreamId::BYTES, buf)
    }

    /// Queues bytes on `stream`, opening it if new (spec §13). Takes
    /// nothing (`Ok(0)`, `Writable` follows) while the endpoint is at its
    /// memory limit (spec §7.5).
    pub fn stream_send(&mut self, stream: StreamId, data: &[u8]) -> Result<usize, SendError> {
        let ep = &mut *self.ep;
        if ep.memory.refuse(self.h, &mut ep.table) && !data.is_empty() {
            ep.stats.sends_refused_memory += 1;
            return Ok(0);
        }
        // No further past the limit than what the limit leaves.
        let data = &data[..data.len().min(ep.memory.room())];
        ep.with_conn(self.h, |c| c.send(stream, data)).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// [`ConnMut::stream_send`] without copying: the bytes that fit are
    /// split off the front of `data` and held as they are (reference
    /// counted) until acknowledged; packets are slices of them.
    pub fn stream_send_shared(&mut self, stream: StreamId, data: &mut Bytes) -> Result<usize, SendError> {
        let ep = &mut *self.ep;
        if ep.memory.refuse(self.h, &mut ep.table) && !data.is_empty() {
            ep.stats.sends_refused_memory += 1;
            return Ok(0);
        }
        // No further past the limit than what the limit leaves.
        let room = ep.memory.room();
        ep.with_conn(self.h, |c| c.send_shared(stream, data, room)).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// Reads `stream`'s bytes in order, across message boundaries.
    pub fn stream_recv(&mut self, stream: StreamId, buf: &mut [u8]) -> Result<Option<usize>, RecvError> {
        self.ep.with_conn(self.h, |c| c.recv(stream, buf)).unwrap_or(Err(RecvError::UnknownConnection))
    }

    /// [`ConnMut::stream_recv`] of up to `max` bytes as one buffer (empty
    /// at the end): a large piece the driver handed over owned comes
    /// without a copy (spec §7.2).
    pub fn stream_recv_chunk(&mut self, stream: StreamId, max: usize) -> Result<Option<Bytes>, RecvError> {
        self.ep.with_conn(self.h, |c| c.recv_chunk(stream, max)).unwrap_or(Err(RecvError::UnknownConnection))
    }

    /// Queues one whole message on `stream` (spec §13.5): all of it, or
    /// nothing and an error ([`SendError::Blocked`] when the send buffer
    /// has no room for it yet, or the endpoint is at its memory limit).
    pub fn send_message(
        &mut self,
        now: Instant,
        stream: StreamId,
        data: &[u8],
        opts: MessageOptions,
    ) -> Result<(), SendError> {
        self.queue_message(|c| c.send_message(now, stream, data, opts))
    }

    /// [`ConnMut::send_message`] without copying `data`: it is held as it
    /// is (reference-counted) until acknowledged, and packets are slices
    /// of it.
    pub fn send_shared_message(
        &mut self,
        now: Instant,
        stream: StreamId,
        data: Bytes,
        opts: MessageOptions,
    ) -> Result<(), SendError> {
        self.queue_message(|c| c.send_shared_message(now, stream, data, opts))
    }

    /// The one path of both: the memory limit (spec §7.5), then `push` on
    /// the connection.
    fn queue_message(&mut self, push: impl FnOnce(&mut Connection) -> Result<(), SendError>) -> Result<(), SendError> {
        let ep = &mut *self.ep;
        if ep.memory.refuse(self.h, &mut ep.table) {
            ep.stats.sends_refused_memory += 1;
            return Err(SendError::Blocked);
        }
        ep.with_conn(self.h, push).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// The next whole message, abandoned-message notice or end of any
    /// stream, streams taking turns (spec §13.5); `Ok(None)`: nothing yet.
    pub fn recv_message(&mut self) -> Result<Option<(StreamId, StreamItem)>, RecvError> {
        self.ep.with_conn(self.h, |c| c.recv_message(None)).unwrap_or(Err(RecvError::UnknownConnection))
    }

    /// [`ConnMut::recv_message`] with a message's bytes appended to `buf`
    /// (a [`ReadItem::Message`] says how many): a reader that reuses
    /// `buf` allocates nothing per message (issue 21).
    pub fn recv_message_into(&mut self, buf: &mut Vec<u8>) -> Result<Option<(StreamId, ReadItem)>, RecvError> {
        self.ep.with_conn(self.h, |c| c.recv_message_into(None, buf)).unwrap_or(Err(RecvError::UnknownConnection))
    }

    /// Like [`ConnMut::recv_message`], for one stream.
    pub fn recv_message_on(&mut self, stream: StreamId) -> Result<Option<StreamItem>, RecvError> {
        let r = self.ep.with_conn(self.h, |c| c.recv_message(Some(stream)));
        r.unwrap_or(Err(RecvError::UnknownConnection)).map(|o| o.map(|(_, item)| item))
    }

    /// Ends our side of `stream` after what is queued on it (stream FIN).
    pub fn finish_stream(&mut self, stream: StreamId) -> Result<(), SendError> {
        self.ep.with_conn(self.h, |c| c.finish_stream(stream)).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// Abandons our side of `stream`: queued data is dropped and the peer
    /// reads [`StreamItem::Reset`] with `code` (spec §13.9).
    pub fn reset_stream(&mut self, stream: StreamId, code: u16) {
        self.ep.with_conn(self.h, |c| c.reset_stream(stream, code));
    }

    /// Asks the peer to stop sending on `stream`; it resets its side with `code`.
    pub fn stop_stream(&mut self, stream: StreamId, code: u16) {
        self.ep.with_conn(self.h, |c| c.stop_stream(stream, code));
    }

    /// Opens a stream without choosing its number (spec §13.11): one this
    /// connection never used, odd when we sent the SYN and even when the
    /// peer did. What is sent on it opens it at the peer, whose
    /// [`ConnMut::accept_stream`] then returns it.
    pub fn open_stream(&mut self) -> Result<StreamId, SendError> {
        self.ep.with_conn(self.h, |c| c.open_stream()).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// The next stream the peer started (its first chunk named a number
    /// we had not used), in order of arrival, each once (spec §13.11);
    /// `None` when there is none now. [`crate::Event::Readable`] follows
    /// the arrival of a new stream's data.
    pub fn accept_stream(&mut self) -> Option<StreamId> {
        self.ep.with_conn(self.h, |c| c.accept_stream()).flatten()
    }

    /// Scheduling of `stream` (spec §13.10): lower `priority` goes first;
    /// among equals, `weight` chunks per round-robin turn.
    pub fn set_stream_priority(&mut self, stream: StreamId, priority: u8, weight: u16) {
        self.ep.with_conn(self.h, |c| c.set_stream_priority(stream, priority, weight));
    }

    /// Bytes `send` (stream 0) would take now: none while the endpoint is
    /// at its memory limit (then `Writable` follows when it no longer is).
    pub fn send_capacity(&mut self) -> usize {
        let ep = &mut *self.ep;
        if ep.memory.refuse(self.h, &mut ep.table) {
            return 0;
        }
        ep.table.get(self.h).map_or(0, |c| c.stream_capacity(StreamId::BYTES))
    }

    /// The application waits to read before it wrote anything (spec
    /// §6.2): a client's cookie echo that waits up to `echo_delay` for
    /// the first write goes at the next `poll_transmit`, so that a
    /// server that speaks first hears of the connection at once. Returns
    /// whether an echo was held (the driver then has something to send).
    /// Cheap when nothing is held: a driver calls it whenever a reader
    /// waits, and only a released echo marks the connection for output.
    pub fn end_echo_hold(&mut self, now: Instant) -> bool {
        let ended = self.ep.table.get_mut(self.h).is_some_and(|c| c.end_echo_hold(now));
        if ended {
            self.ep.mark(self.h.index());
        }
        ended
    }

    /// Graceful close of our sending side (spec §4.4): a FIN follows the data
    /// already queued; we keep receiving until the peer finishes too (half-close).
    pub fn close(&mut self) {
        if let Some(c) = self.ep.table.get_mut(self.h) {
            c.close();
            self.ep.mark(self.h.index());
        }
    }

    /// Abortive close: sends RST with `code` and discards everything.
    pub fn abort(&mut self, now: Instant, code: ErrorCode) {
        self.abort_with_reason(now, code, "");
    }

    /// [`ConnMut::abort`] with a reason in words for the peer (spec
    /// §3.3.4), cut to [`MAX_CLOSE_REASON`](crate::wire::chunk::MAX_CLOSE_REASON)
    /// bytes on a character boundary; `""` sends none.
    pub fn abort_with_reason(&mut self, now: Instant, code: ErrorCode, reason: &str) {
        if let Some(c) = self.ep.table.get_mut(self.h) {
            c.abort_with_reason(code, reason);
            self.ep.mark(self.h.index());
            self.ep.touch(self.h.index(), now);
        }
    }

    /// The application no longer holds the connection. Its state is freed
    /// once it is CLOSED (immediately if it already is).
    pub fn release(&mut self) {
        let Some(slot) = self.ep.table.slot_of_mut(self.h).filter(|s| s.conn.is_some()) else {
            return;
        };
        slot.released = true;
        if let Some(c) = slot.conn.as_mut() {
            c.on_released();
        }
        self.ep.mark(self.h.index());
        self.ep.reap(self.h.index());
    }
}
