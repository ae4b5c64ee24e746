//! A connection as the application sees it: `AsyncRead` + `AsyncWrite` on
//! stream 0, split into halves, graceful close that waits for the peer's
//! acknowledgement (spec §4.4, §7); and the streams inside it (spec §13):
//! whole messages on any stream, per-stream byte I/O ([`StreamIo`]),
//! `wait_for_send`, stream finish, reset and stop, priorities.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use manyfold_proto::wire::ErrorCode;
use manyfold_proto::{CloseReason, ConnHandle, ConnStats, MessageOptions, SendError, State, StreamId, StreamItem};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::driver::now;
use crate::error::{CloseError, ConnectionError, ReadError, SendError as MessageError, WriteError};
use crate::message::{IntoMessage, Payload};
use crate::shared::{register, ConnState, Inner, Phase, Shared};

mod chunks;

/// The one reference to an engine connection behind a connection's halves.
/// Dropping it releases the connection (closing it gracefully if needed).
#[derive(Debug)]
pub(crate) struct ConnRef {
    shared: Arc<Shared>,
    handle: ConnHandle,
    peer: SocketAddr,
}

impl ConnRef {
    pub(crate) fn new(shared: Arc<Shared>, handle: ConnHandle, peer: SocketAddr) -> Self {
        ConnRef { shared, handle, peer }
    }

    /// Ready once the handshake completed or failed.
    pub(crate) fn poll_connected(&self, cx: &Context<'_>) -> Poll<Result<(), ConnectionError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let state = inner.engine.conn(self.handle).state();
        // A protected connection is ESTABLISHED at the SYN-ACK but connected
        // only once its handshake proved the peer (spec §19.2): its
        // `Connected` event says so.
        let protected = inner.engine.conn(self.handle).is_protected();
        let stopped = inner.phase == Phase::Stopped;
        let text = inner.engine.conn(self.handle).peer_close_text();
        let Some(c) = inner.conns.get_mut(&self.handle) else {
            return Poll::Ready(Err(ConnectionError::EndpointClosed));
        };
        if let Some(reason) = c.closed {
            return Poll::Ready(Err(ConnectionError::gone(Some(reason), text)));
        }
        let past_syn = !matches!(state, Some(State::SynSent) | Some(State::Closed) | None);
        if c.connected || (past_syn && !protected) {
            c.connected = true;
            return Poll::Ready(Ok(()));
        }
        if stopped {
            return Poll::Ready(Err(ConnectionError::EndpointClosed));
        }
        register(&mut c.connect, cx);
        Poll::Pending
    }

    /// Nothing to do yet: an error if the connection or its endpoint is
    /// gone (the close reason, for the caller to map), else the task's
    /// waker goes into the list `slot` picks and the caller returns Pending.
    fn park(
        &self,
        inner: &mut Inner,
        cx: &Context<'_>,
        slot: fn(&mut ConnState) -> &mut Vec<std::task::Waker>,
    ) -> Result<(), Option<CloseReason>> {
        let stopped = inner.phase == Phase::Stopped;
        let Some(c) = inner.conns.get_mut(&self.handle) else { return Err(None) };
        if let Some(reason) = c.closed {
            return Err(Some(reason));
        }
        if stopped {
            return Err(None);
        }
        register(slot(c), cx);
        Ok(())
    }

    /// [`Self::park`] for a reader. A client that waits to read before it
    /// wrote anything ends its cookie echo's hold for a first write (spec
    /// §6.2): its server is the one to speak first, and hears of the
    /// connection at once.
    fn park_reader(&self, inner: &mut Inner, cx: &Context<'_>) -> Result<(), Option<CloseReason>> {
        // The driver's last clock reading: no clock read per park.
        if inner.engine.conn_mut(self.handle).end_echo_hold(inner.clock) {
            self.shared.wake_driver();
        }
        self.park(inner, cx, |c| &mut c.read)
    }

    /// Whether the driver has work after the application took something:
    /// reading frees receive buffer and stream credit, but the driver is
    /// woken only if that is to be said now (a window reopened, a stream's
    /// credit, spec §7.3 and §13.7) or if room under the memory limit
    /// woke refused writers (§7.5); otherwise what reading freed rides on
    /// the next ack. A wake per read cost a chunk reader ~0.2 s of CPU
    /// per GB, and a reader of 32-byte messages a third of its time in
    /// the lock the woken driver then took (RESULTS §31).
    fn read_wants_driver(&self, inner: &Inner) -> bool {
        inner.engine.conn(self.handle).reply_due() || inner.engine.has_events()
    }

    /// The error of a connection (`Some(reason)`) or endpoint (`None`)
    /// that is gone, with the peer's words when its RST had some (spec §3.3.4).
    fn gone(&self, inner: &Inner, reason: Option<CloseReason>) -> ConnectionError {
        ConnectionError::gone(reason, inner.engine.conn(self.handle).peer_close_text())
    }

    fn poll_read(&self, cx: &Context<'_>, stream: u16, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let got = self.poll_read_with(cx, |c| c.stream_recv(StreamId::new(stream), buf.initialize_unfilled()), |n| *n);
        got.map(|r| match r {
            Ok(Some(n)) => {
                buf.advance(n);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(e) => Err(e.into()),
        })
    }

    /// Up to `max` bytes of `stream` as one buffer; `None` at its end. With
    /// `max` 0, an empty buffer at once (as a read into an empty buffer).
    fn poll_read_chunk(&self, cx: &Context<'_>, stream: u16, max: usize) -> Poll<Result<Option<Bytes>, ReadError>> {
        if max == 0 {
            return Poll::Ready(Ok(Some(Bytes::new())));
        }
        let got = self.poll_read_with(cx, |c| c.stream_recv_chunk(StreamId::new(stream), max), Bytes::len);
        got.map(|r| r.map(|b| b.filter(|b| !b.is_empty())))
    }

    /// The one waiting path of every byte read: what `recv` read (`len`
    /// bytes of it); `Ok(None)` at the end of a gracefully closed
    /// connection, pending while nothing is there yet.
    fn poll_read_with<T>(
        &self,
        cx: &Context<'_>,
        recv: impl FnOnce(&mut manyfold_proto::ConnMut<'_>) -> Result<Option<T>, manyfold_proto::RecvError>,
        len: impl Fn(&T) -> usize,
    ) -> Poll<Result<Option<T>, ReadError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let gone = |inner: &Inner, reason| match self.gone(inner, reason) {
            ConnectionError::Closed(CloseReason::Graceful) => Ok(None),
            other => Err(ReadError::from(other)),
        };
        match recv(&mut inner.engine.conn_mut(self.handle)) {
            Ok(Some(t)) => {
                let wake = len(&t) > 0 && self.read_wants_driver(inner);
                drop(guard);
                if wake {
                    self.shared.wake_driver();
                }
                Poll::Ready(Ok(Some(t)))
            }
            Ok(None) => match self.park_reader(inner, cx) {
                Ok(()) => Poll::Pending,
                Err(reason) => Poll::Ready(gone(inner, reason)),
            },
            Err(manyfold_proto::RecvError::Closed(reason)) => Poll::Ready(gone(inner, Some(reason))),
            Err(e) => Poll::Ready(Err(ReadError::from(e))),
        }
    }

    fn poll_write(&self, cx: &Context<'_>, stream: u16, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        self.poll_write_with(cx, |c| c.stream_send(StreamId::new(stream), data)).map_err(io::Error::from)
    }

    /// Queues what `send` takes (bytes copied or shared), waiting while
    /// it takes nothing.
    fn poll_write_with(
        &self,
        cx: &Context<'_>,
        send: impl FnOnce(&mut manyfold_proto::ConnMut<'_>) -> Result<usize, SendError>,
    ) -> Poll<Result<usize, WriteError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        match send(&mut inner.engine.conn_mut(self.handle)) {
            Ok(0) => match self.park(inner, cx, |c| &mut c.write) {
                Ok(()) => Poll::Pending,
                Err(reason) => Poll::Ready(Err(WriteError::from(self.gone(inner, reason)))),
            },
            Ok(n) => {
                drop(guard);
                self.shared.wake_driver();
                Poll::Ready(Ok(n))
            }
            Err(SendError::Closed(reason)) => Poll::Ready(Err(WriteError::from(self.gone(inner, Some(reason))))),
            Err(e) => Poll::Ready(Err(WriteError::from(e))),
        }
    }

    /// Queues one whole message, waiting while the send buffer has no room for it.
    fn poll_send_message(
        &self,
        cx: &Context<'_>,
        stream: u16,
        data: &Payload<'_>,
        opts: MessageOptions,
    ) -> Poll<Result<(), MessageError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        // Owned data is a reference-counted clone (the engine holds the
        // caller's buffer itself); borrowed data is copied into the send
        // buffer. No clock read unless the message has a lifetime.
        let t = inner.message_time(&opts);
        let queued = data.queue(&mut inner.engine.conn_mut(self.handle), t, StreamId::new(stream), opts);
        match queued {
            Ok(()) => {
                drop(guard);
                self.shared.wake_driver();
                Poll::Ready(Ok(()))
            }
            Err(SendError::Blocked) => match self.park(inner, cx, |c| &mut c.write) {
                Ok(()) => Poll::Pending,
                Err(reason) => Poll::Ready(Err(self.gone(inner, reason).into())),
            },
            Err(SendError::Closed(reason)) => Poll::Ready(Err(self.gone(inner, Some(reason)).into())),
            Err(e) => Poll::Ready(Err(e.into())),
        }
    }

    /// Queues `msgs[*done..]` in order on `stream` under one lock and at
    /// most one clock read, counting them in `done`; waits while the send
    /// buffer has no room for the next. The driver is woken once per call
    /// that queued any.
    fn poll_send_messages(
        &self,
        cx: &Context<'_>,
        stream: u16,
        msgs: &[Payload<'_>],
        done: &mut usize,
        opts: MessageOptions,
    ) -> Poll<Result<(), MessageError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let (before, t) = (*done, inner.message_time(&opts));
        let mut failed = None;
        while let Some(m) = msgs.get(*done) {
            match m.queue(&mut inner.engine.conn_mut(self.handle), t, StreamId::new(stream), opts) {
                Ok(()) => *done += 1,
                Err(SendError::Blocked) => break,
                Err(SendError::Closed(reason)) => {
                    failed = Some(self.gone(inner, Some(reason)).into());
                    break;
                }
                Err(e) => {
                    failed = Some(e.into());
                    break;
                }
            }
        }
        let poll = match failed {
            Some(e) => Poll::Ready(Err(e)),
            None if *done == msgs.len() => Poll::Ready(Ok(())),
            None => match self.park(inner, cx, |c| &mut c.write) {
                Ok(()) => Poll::Pending,
                Err(reason) => Poll::Ready(Err(self.gone(inner, reason).into())),
            },
        };
        drop(guard);
        if *done > before {
            self.shared.wake_driver();
        }
        poll
    }

    /// Takes up to `max` more whole messages or stream events that are
    /// ready now, without waiting, under one lock (after a first one was
    /// taken by [`ConnRef::poll_recv_message`]).
    fn take_ready_messages(&self, out: &mut Vec<(u16, StreamItem)>, max: usize) {
        let mut guard = self.shared.lock();
        let before = out.len();
        while out.len() < max {
            match guard.engine.conn_mut(self.handle).recv_message() {
                Ok(Some((id, item))) => out.push((id.get(), item)),
                _ => break,
            }
        }
        let wake = out.len() > before && self.read_wants_driver(&guard);
        drop(guard);
        if wake {
            self.shared.wake_driver();
        }
    }

    /// Runs `take` on the connection under one lock; wakes the driver
    /// when it says it took something and the driver has work for it
    /// ([`Self::read_wants_driver`]).
    pub(crate) fn take_ready_with(&self, take: impl FnOnce(&mut manyfold_proto::ConnMut<'_>) -> bool) {
        let mut guard = self.shared.lock();
        let took = take(&mut guard.engine.conn_mut(self.handle));
        let wake = took && self.read_wants_driver(&guard);
        drop(guard);
        if wake {
            self.shared.wake_driver();
        }
    }

    /// The next message or stream event, of any stream or of `only`;
    /// `None` once the connection closed gracefully with nothing left.
    fn poll_recv_message(
        &self,
        cx: &Context<'_>,
        only: Option<u16>,
    ) -> Poll<Result<Option<(u16, StreamItem)>, ConnectionError>> {
        self.poll_recv_with(cx, only, |conn| match only {
            Some(id) => conn.recv_message_on(StreamId::new(id)).map(|o| o.map(|item| (id, item))),
            None => conn.recv_message().map(|o| o.map(|(id, item)| (id.get(), item))),
        })
    }

    /// The one waiting path of every read of messages: `take` takes the
    /// next item from the engine (whole, or into a caller's buffer).
    pub(crate) fn poll_recv_with<T>(
        &self,
        cx: &Context<'_>,
        only: Option<u16>,
        take: impl FnOnce(&mut manyfold_proto::ConnMut<'_>) -> Result<Option<T>, manyfold_proto::RecvError>,
    ) -> Poll<Result<Option<T>, ConnectionError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let got = take(&mut inner.engine.conn_mut(self.handle));
        match got {
            Ok(Some(item)) => {
                let wake = self.read_wants_driver(inner);
                drop(guard);
                if wake {
                    self.shared.wake_driver();
                }
                Poll::Ready(Ok(Some(item)))
            }
            Ok(None)
                if match only {
                    None => inner.engine.conn(self.handle).messages_done(),
                    Some(id) => inner.engine.conn(self.handle).stream_done(StreamId::new(id)),
                } =>
            {
                Poll::Ready(Ok(None))
            }
            Ok(None) => match self.park_reader(inner, cx) {
                Ok(()) => Poll::Pending,
                Err(Some(CloseReason::Graceful)) => Poll::Ready(Ok(None)),
                Err(reason) => Poll::Ready(Err(self.gone(inner, reason))),
            },
            Err(manyfold_proto::RecvError::Closed(CloseReason::Graceful)) => Poll::Ready(Ok(None)),
            Err(manyfold_proto::RecvError::Closed(reason)) => Poll::Ready(Err(self.gone(inner, Some(reason)))),
            Err(_) => Poll::Ready(Err(ConnectionError::EndpointClosed)),
        }
    }

    /// Ready once everything queued on `stream` is acknowledged.
    fn poll_wait_for_send(&self, cx: &Context<'_>, stream: u16) -> Poll<Result<(), CloseError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if !inner.engine.conn(self.handle).stream_pending(StreamId::new(stream)) {
            // Not pending because it is all acknowledged, or because the
            // connection died first.
            let unacked = inner.engine.conn(self.handle).stats().map_or(0, |s| s.unacked_bytes);
            return match inner.engine.conn(self.handle).close_reason() {
                Some(reason) if reason != CloseReason::Graceful && unacked > 0 => {
                    Poll::Ready(Err(CloseError::Unacked { bytes: unacked, reason }))
                }
                _ => Poll::Ready(Ok(())),
            };
        }
        match self.park(inner, cx, |c| &mut c.acked) {
            Ok(()) => Poll::Pending,
            Err(reason) => Poll::Ready(Err(self.gone(inner, reason).into())),
        }
    }

    /// A new stream of ours, its number chosen by the engine (spec §13.11).
    fn open_stream(&self) -> Result<u16, WriteError> {
        let mut guard = self.shared.lock();
        if guard.phase == Phase::Stopped {
            return Err(WriteError::EndpointClosed);
        }
        let id = guard.engine.conn_mut(self.handle).open_stream()?;
        Ok(id.get())
    }

    /// The next stream the peer started; `None` once it can start no more
    /// (its FIN arrived, or the connection closed gracefully).
    fn poll_accept_stream(&self, cx: &Context<'_>) -> Poll<Result<Option<u16>, ConnectionError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        if let Some(id) = inner.engine.conn_mut(self.handle).accept_stream() {
            return Poll::Ready(Ok(Some(id.get())));
        }
        // spec §4.4: after the peer's FIN it sends nothing new.
        let peer_done = matches!(
            inner.engine.conn(self.handle).state(),
            Some(State::CloseWait | State::LastAck | State::Closing | State::TimeWait)
        );
        if peer_done {
            return Poll::Ready(Ok(None));
        }
        match self.park_reader(inner, cx) {
            Ok(()) => Poll::Pending,
            Err(Some(CloseReason::Graceful)) => Poll::Ready(Ok(None)),
            Err(reason) => Poll::Ready(Err(self.gone(inner, reason))),
        }
    }

    /// Runs a stream command on the engine and wakes the driver.
    fn command<R>(&self, f: impl FnOnce(&mut manyfold_proto::Endpoint, ConnHandle) -> R) -> R {
        let r = f(&mut self.shared.lock().engine, self.handle);
        self.shared.wake_driver();
        r
    }

    /// Abortive close (spec §4.6): a RST with `code` goes to the peer, whose
    /// reads and writes then fail with `PeerReset(Some(code))`; everything
    /// queued or unread here is discarded. Does nothing once closed.
    /// With `reason` (may be empty), the first copy of the RST carries it
    /// in words (spec §3.3.4).
    fn abort(&self, code: ErrorCode, reason: &str) {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        inner.engine.conn_mut(self.handle).abort_with_reason(now(), code, reason);
        if let Some(c) = inner.conns.get_mut(&self.handle) {
            c.close_requested = true;
        }
        drop(guard);
        self.shared.wake_driver();
    }

    /// The engine's current address of the peer (it moves on migration).
    fn peer_addr(&self) -> SocketAddr {
        self.shared.lock().engine.conn(self.handle).remote_addr().unwrap_or(self.peer)
    }

    /// Queues FIN after the data written so far (once), without waiting.
    fn finish(&self) -> Result<(), WriteError> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let text = inner.engine.conn(self.handle).peer_close_text();
        let Some(c) = inner.conns.get_mut(&self.handle) else {
            return Err(WriteError::EndpointClosed);
        };
        if let Some(reason) = c.closed {
            return Err(ConnectionError::gone(Some(reason), text).into());
        }
        if c.close_requested {
            return Ok(());
        }
        inner.engine.conn_mut(self.handle).close();
        c.close_requested = true;
        drop(guard);
        self.shared.wake_driver();
        Ok(())
    }

    /// Sends FIN after the queued data (once) and is ready when the peer has
    /// acknowledged everything including the FIN.
    fn poll_close(&self, cx: &Context<'_>) -> Poll<Result<(), CloseError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let stopped = inner.phase == Phase::Stopped;
        let Some(c) = inner.conns.get_mut(&self.handle) else {
            return Poll::Ready(Err(CloseError::EndpointClosed));
        };
        let mut requested_now = false;
        if c.closed.is_none() && !c.close_requested {
            inner.engine.conn_mut(self.handle).close();
            c.close_requested = true;
            requested_now = true;
        }
        let result = match inner.engine.conn(self.handle).state() {
            // Our FIN is acknowledged in these states (spec §4.4).
            Some(State::FinWait2) | Some(State::TimeWait) => Poll::Ready(Ok(())),
            Some(State::Closed) | None => {
                let reason = inner.engine.conn(self.handle).close_reason().or(c.closed);
                let unacked = inner.engine.conn(self.handle).stats().map_or(0, |s| s.unacked_bytes);
                Poll::Ready(match reason {
                    Some(CloseReason::Graceful) => Ok(()),
                    Some(reason) if unacked > 0 => Err(CloseError::Unacked { bytes: unacked, reason }),
                    Some(reason) => {
                        Err(ConnectionError::gone(Some(reason), inner.engine.conn(self.handle).peer_close_text())
                            .into())
                    }
                    None => Err(CloseError::EndpointClosed),
                })
            }
            _ if stopped => Poll::Ready(Err(CloseError::EndpointClosed)),
            _ => {
                register(&mut c.close, cx);
                Poll::Pending
            }
        };
        drop(guard);
        if requested_now {
            self.shared.wake_driver();
        }
        result
    }

    fn stats(&self) -> ConnStats {
        self.shared.lock().engine.conn(self.handle).stats().unwrap_or_default()
    }

    fn protection(&self) -> Protection {
        let inner = self.shared.lock();
        if inner.engine.conn(self.handle).is_protected() {
            Protection::Encrypted { peer_key: inner.engine.conn(self.handle).peer_key() }
        } else {
            Protection::Plain
        }
    }
}

/// How a connection's packets travel (spec §19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    /// The papers' plain protocol: readable and forgeable on the path.
    Plain,
    /// Noise XX handshake, then ChaCha20-Poly1305 on every packet; the
    /// peer's static key as its handshake proved it.
    Encrypted {
        /// The peer's static public key, when the handshake proved one.
        peer_key: Option<[u8; 32]>,
    },
}

impl std::fmt::Display for Protection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Protection::Plain => write!(f, "plain (not encrypted: the endpoint has no security configured)"),
            Protection::Encrypted { peer_key: Some(k) } => {
                write!(f, "encrypted (Noise XX + ChaCha20-Poly1305), peer key {}", manyfold_proto::secure::hex(k))
            }
            Protection::Encrypted { peer_key: None } => write!(f, "encrypted (Noise XX + ChaCha20-Poly1305)"),
        }
    }
}

impl Drop for ConnRef {
    fn drop(&mut self) {
        self.shared.lock().release(self.handle, now());
        self.shared.wake_driver();
    }
}

/// A reliable, ordered byte stream to one peer. Reads return 0 at the end of
/// the peer's stream; `poll_shutdown` (and [`Connection::close`]) is the
/// graceful close, complete when the peer acknowledged everything.
///
/// The byte stream is stream 0. Do not also send messages on stream 0
/// ([`Connection::send_message`]): nothing refuses it, but the receiver
/// gets them merged into the byte stream, their boundaries lost. Use other
/// streams for messages.
///
/// Dropping it (both halves, and every [`Streams`] handle) closes it
/// gracefully in the background: FIN after what is queued, data arriving
/// afterwards acknowledged and discarded. That happens only while the
/// endpoint's runtime runs; await [`Connection::close`] and then
/// [`crate::Endpoint::wait_idle`] before a process exits. If the runtime
/// goes first (a program returns from `main` with connections open), the
/// peers get a reset (`PeerReset(Some(ErrorCode::APPLICATION))`, spec §8.3).
#[derive(Debug)]
pub struct Connection {
    send: SendHalf,
    recv: RecvHalf,
}

impl Connection {
    pub(crate) fn new(conn: ConnRef) -> Self {
        let conn = Arc::new(conn);
        Connection { send: SendHalf { conn: conn.clone() }, recv: RecvHalf { conn } }
    }

    /// As [`SendHalf::finish`]: FIN after the data written so far, without
    /// waiting for its acknowledgement; reading goes on to the peer's FIN.
    ///
    /// # Errors
    ///
    /// The connection's end if it is already closed.
    pub fn finish(&mut self) -> Result<(), WriteError> {
        self.send.finish()
    }

    /// Separates the sending and receiving sides, to use them from
    /// different tasks. The sending half comes first, as quinn's `open_bi`
    /// gives them (tokio's `TcpStream::into_split` gives the reading half
    /// first): `let (mut tx, mut rx) = conn.split();`.
    pub fn split(self) -> (SendHalf, RecvHalf) {
        (self.send, self.recv)
    }

    /// The peer's address: where it was reached, or where it moved to
    /// after a validated address change (spec §6.8).
    pub fn peer_addr(&self) -> SocketAddr {
        self.send.conn.peer_addr()
    }

    /// The address of the endpoint's socket (with the port the OS chose).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.send.conn.shared.local_addr)
    }

    /// The connection's counters now (RTT, window, bytes, retransmissions; spec §9).
    pub fn stats(&self) -> ConnStats {
        self.send.stats()
    }

    /// Whether and how this connection is encrypted (spec §19).
    pub fn protection(&self) -> Protection {
        self.send.conn.protection()
    }

    /// Finishes our side (FIN after the queued data) and waits until the peer
    /// has acknowledged everything. Reading goes on until the peer's FIN.
    ///
    /// # Errors
    ///
    /// [`CloseError::Unacked`] saying how many bytes were never
    /// acknowledged and why, when the connection dies first;
    /// [`CloseError::Closed`] when it had already ended otherwise than
    /// gracefully; [`CloseError::EndpointClosed`] when the endpoint
    /// stopped.
    ///
    /// # Cancel safety
    ///
    /// The FIN is queued on the first poll and stays queued: dropping the
    /// future only stops the waiting; a later `close` waits again.
    pub async fn close(&mut self) -> Result<(), CloseError> {
        self.send.close().await
    }

    /// Ends the connection at once (spec §4.6): the peer gets a RST with
    /// `code` and its reads and writes fail with
    /// [`CloseReason::PeerReset`]`(Some(code))` within one trip across the
    /// network; whatever is queued or unread here is discarded, and our own
    /// calls fail with [`CloseReason::Aborted`]. Use it when giving up
    /// (an interrupted program aborts with [`ErrorCode::INTERRUPTED`]);
    /// [`Connection::close`] is the graceful end. Does nothing once closed.
    ///
    /// [`abort_with`](Self::abort_with) also says why in words. The peer
    /// finds the code with [`close_reason`](crate::close_reason) on any
    /// error it then gets:
    ///
    /// ```no_run
    /// # async fn demo(conn: manyfold::Connection) {
    /// use manyfold::{CloseReason, ErrorCode};
    /// use tokio::io::AsyncReadExt;
    /// # let mut conn = conn;
    /// let mut buf = [0u8; 1024];
    /// if let Err(e) = conn.read(&mut buf).await {
    ///     if let Some(CloseReason::PeerReset(Some(ErrorCode(code)))) = manyfold::close_reason(&e) {
    ///         eprintln!("the peer gave up with code {code}");
    ///     }
    /// }
    /// # }
    /// ```
    ///
    /// Codes 1–25 have protocol meanings (spec §8.3), and 3 (`REFUSED`)
    /// reaches the peer as [`CloseReason::Refused`] rather than as a code:
    /// give your application's codes numbers of their own (from 256, say).
    pub fn abort(&self, code: ErrorCode) {
        self.send.conn.abort(code, "");
    }

    /// [`abort`](Self::abort) with the reason in words: quinn's
    /// `close(code, reason)`. The first copy of the RST carries `reason`
    /// (spec §3.3.4), cut to [`MAX_CLOSE_REASON`](crate::MAX_CLOSE_REASON)
    /// bytes on a character boundary; the peer's calls then fail with a
    /// `ClosedByPeer` error ([`ReadError::ClosedByPeer`], ...) that holds it,
    /// which [`peer_close_text`](crate::peer_close_text) finds in any error:
    ///
    /// ```no_run
    /// # async fn demo(conn: manyfold::Connection) {
    /// use manyfold::ErrorCode;
    /// use tokio::io::AsyncReadExt;
    /// # let mut conn = conn;
    /// // One end gives up, saying why:
    /// conn.abort_with(ErrorCode(300), "disk full on /srv");
    /// // The other end's next read fails:
    /// # let mut peer = conn;
    /// let mut buf = [0u8; 1024];
    /// if let Err(e) = peer.read(&mut buf).await {
    ///     eprintln!("{e}"); // reset by peer (error code 300): "disk full on /srv"
    ///     assert_eq!(manyfold::peer_close_text(&e), Some("disk full on /srv"));
    /// }
    /// # }
    /// ```
    ///
    /// A peer that predates reasons in words still closes with the code
    /// (spec §3.3.4). Does nothing once closed.
    pub fn abort_with(&self, code: ErrorCode, reason: &str) {
        self.send.conn.abort(code, reason);
    }

    /// Opens a new stream without choosing its number (quinn's `open_bi`;
    /// see [`Streams::open_stream`]).
    ///
    /// # Errors
    ///
    /// As [`Streams::open_stream`].
    pub fn open_stream(&self) -> Result<StreamIo, WriteError> {
        self.streams().open_stream()
    }

    /// The next stream the peer opened (quinn's `accept_bi`; see
    /// [`Streams::accept_stream`]).
    ///
    /// # Errors
    ///
    /// As [`Streams::accept_stream`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a stream is taken only when the future returns it.
    pub async fn accept_stream(&self) -> Result<Option<StreamIo>, ConnectionError> {
        self.streams().accept_stream().await
    }

    /// A handle on the connection's streams, to share between tasks.
    pub fn streams(&self) -> Streams {
        Streams { conn: self.send.conn.clone() }
    }

    /// Sends one whole message on `stream` (see [`Streams::send_message`]).
    /// Stream 0 is also this connection's byte stream (`AsyncWrite`): do
    /// not mix the two on it, or on any stream.
    ///
    /// # Errors
    ///
    /// As [`Streams::send_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the message is queued whole or not at all.
    pub async fn send_message(&self, stream: u16, data: impl IntoMessage) -> Result<(), MessageError> {
        self.streams().send_message(stream, data).await
    }

    /// The next whole message of any stream (see [`Streams::recv_message`]).
    ///
    /// # Errors
    ///
    /// As [`Streams::recv_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an item is taken only when the future returns it.
    pub async fn recv_message(&self) -> Result<Option<(u16, StreamItem)>, ConnectionError> {
        self.streams().recv_message().await
    }
}

/// The streams of a connection (spec §13). Cloning gives another handle on
/// the same connection; any number of tasks may send and receive at once.
///
/// ```no_run
/// # async fn demo(conn: manyfold::Connection) -> Result<(), Box<dyn std::error::Error>> {
/// use manyfold::{MessageOptions, StreamItem};
/// let streams = conn.streams();
/// streams.send_message(1, &b"order 42"[..]).await?;
/// // Dropped if not delivered within 200 ms; delivered as soon as whole.
/// let opts = MessageOptions { unordered: true, lifetime: Some(std::time::Duration::from_millis(200)), ..Default::default() };
/// streams.send_message_with(2, &b"position 3,4"[..], opts).await?;
/// streams.wait_for_send(1).await?;
/// while let Some((stream, item)) = streams.recv_message().await? {
///     if let StreamItem::Message(m) = item {
///         println!("stream {stream}: {} bytes", m.len());
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Streams {
    pub(crate) conn: Arc<ConnRef>,
}

impl Streams {
    /// Sends `data` as one message on `stream` (opening the stream if new),
    /// reliably and in stream order. Waits while the send buffer has no
    /// room for the whole message; a message larger than the configured
    /// maximum is refused with [`SendError::TooLarge`](MessageError::TooLarge)
    /// and nothing is sent. `data` is any [`IntoMessage`]: an owned buffer
    /// (`Vec<u8>`, `String`, [`Bytes`](bytes::Bytes)) is held as it is until
    /// acknowledged, not copied; borrowed bytes (`&[u8]`, `b"..."`) are
    /// copied once.
    ///
    /// A stream carries messages or bytes, not both: do not also write
    /// bytes to `stream` ([`Streams::io`], or the [`Connection`]'s own
    /// `AsyncWrite` for stream 0). Nothing refuses the mix, but the
    /// receiver gets the messages merged into the byte stream, their
    /// boundaries lost.
    ///
    /// # Errors
    ///
    /// [`SendError::TooLarge`](MessageError::TooLarge);
    /// [`SendError::Finished`](MessageError::Finished) after our side of
    /// the stream or connection was finished;
    /// [`SendError::Reset`](MessageError::Reset) when the stream was reset
    /// or the peer asked us to stop;
    /// [`SendError::StreamLimit`](MessageError::StreamLimit) when a new
    /// stream would pass the limit; [`SendError::Closed`](MessageError::Closed)
    /// once the connection ended; [`SendError::EndpointClosed`](MessageError::EndpointClosed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the message is queued whole or not at all, so a
    /// future dropped while it waits for room has sent nothing.
    pub async fn send_message(&self, stream: u16, data: impl IntoMessage) -> Result<(), MessageError> {
        self.send_message_with(stream, data, MessageOptions::default()).await
    }

    /// [`Streams::send_message`] with delivery options: unordered, and
    /// partial reliability by lifetime or retransmission count (the
    /// receiver then reads [`StreamItem::Abandoned`] in its place).
    ///
    /// # Errors
    ///
    /// As [`Streams::send_message`].
    ///
    /// # Cancel safety
    ///
    /// As [`Streams::send_message`]: the message is queued whole or not at all.
    pub async fn send_message_with(
        &self,
        stream: u16,
        data: impl IntoMessage,
        opts: MessageOptions,
    ) -> Result<(), MessageError> {
        let data = data.into_payload();
        poll_fn(|cx| self.conn.poll_send_message(cx, stream, &data, opts)).await
    }

    /// The next whole message, abandoned-message notice, end or reset of
    /// any stream, streams taking turns. `None` once the connection has
    /// closed gracefully and everything was read.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Closed`] when the connection ended otherwise than
    /// gracefully, [`ConnectionError::EndpointClosed`] when the endpoint
    /// stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an item is taken only when the future returns it.
    pub async fn recv_message(&self) -> Result<Option<(u16, StreamItem)>, ConnectionError> {
        poll_fn(|cx| self.conn.poll_recv_message(cx, None)).await
    }

    /// Queues `messages` in order on `stream`, as [`Streams::send_message`]
    /// does one, but under one lock hand-off and one wake-up of the driver
    /// for as many as the send buffer takes at once (issue 21: small
    /// messages at a high rate pay per call, not per byte). Waits while the
    /// send buffer is full.
    ///
    /// ```no_run
    /// # async fn demo(streams: manyfold::Streams) -> Result<(), manyfold::BatchSendError> {
    /// let ticks: Vec<Vec<u8>> = (0..100u32).map(|i| i.to_be_bytes().to_vec()).collect();
    /// streams.send_messages(1, ticks).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`BatchSendError`] with the error [`Streams::send_message`] would
    /// have returned for the first message not queued, and how many before
    /// it were queued (they stay queued and are delivered).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe as a whole: a future dropped while it waits for room
    /// has queued a prefix of the messages (each whole or not at all).
    pub async fn send_messages<M: IntoMessage>(
        &self,
        stream: u16,
        messages: impl IntoIterator<Item = M>,
    ) -> Result<(), BatchSendError> {
        let msgs: Vec<Payload<'_>> = messages.into_iter().map(IntoMessage::into_payload).collect();
        let mut done = 0;
        poll_fn(|cx| self.conn.poll_send_messages(cx, stream, &msgs, &mut done, MessageOptions::default()))
            .await
            .map_err(|error| BatchSendError { queued: done, error })
    }

    /// Up to `max` whole messages or stream events of any stream, as
    /// [`Streams::recv_message`] returns one: waits for the first, then
    /// takes whatever else is ready under one lock. Empty once the
    /// connection has closed gracefully and everything was read.
    ///
    /// # Errors
    ///
    /// As [`Streams::recv_message`], when the first is awaited.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: items are taken only when the future returns them.
    pub async fn recv_messages(&self, max: usize) -> Result<Vec<(u16, StreamItem)>, ConnectionError> {
        let Some(first) = self.recv_message().await? else { return Ok(Vec::new()) };
        let mut out = Vec::with_capacity(max.clamp(1, 256));
        out.push(first);
        self.conn.take_ready_messages(&mut out, max);
        Ok(out)
    }

    /// [`Streams::recv_message`] for one stream; `None` after its end or reset was read.
    ///
    /// # Errors
    ///
    /// As [`Streams::recv_message`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an item is taken only when the future returns it.
    pub async fn recv_message_on(&self, stream: u16) -> Result<Option<StreamItem>, ConnectionError> {
        let got = poll_fn(|cx| self.conn.poll_recv_message(cx, Some(stream))).await?;
        Ok(got.map(|(_, item)| item))
    }

    /// Waits until everything queued on `stream` is acknowledged (paper 00
    /// §4.2.7's WaitForSend).
    ///
    /// # Errors
    ///
    /// [`CloseError::Unacked`] with the bytes never acknowledged and
    /// why, when the connection ended otherwise than gracefully first;
    /// the error of the connection's end when it ends while we wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits; nothing is queued or taken.
    pub async fn wait_for_send(&self, stream: u16) -> Result<(), CloseError> {
        poll_fn(|cx| self.conn.poll_wait_for_send(cx, stream)).await
    }

    /// Ends our side of `stream` after what is queued on it; the peer reads
    /// [`StreamItem::Finished`] (or end of file) after the data.
    ///
    /// # Errors
    ///
    /// [`WriteError::Finished`] when the stream was already finished,
    /// [`WriteError::Reset`] when it was reset, [`WriteError::StreamLimit`]
    /// when a new stream would pass the limit, [`WriteError::Closed`] once
    /// the connection ended.
    pub fn finish_stream(&self, stream: u16) -> Result<(), WriteError> {
        self.conn.command(|e, h| e.conn_mut(h).finish_stream(StreamId::new(stream))).map_err(WriteError::from)
    }

    /// Abandons our side of `stream`: queued data is dropped and the peer
    /// reads [`StreamItem::Reset`] with `code`.
    pub fn reset_stream(&self, stream: u16, code: u16) {
        self.conn.command(|e, h| e.conn_mut(h).reset_stream(StreamId::new(stream), code));
    }

    /// Asks the peer to stop sending on `stream`; it resets its side with `code`.
    pub fn stop_stream(&self, stream: u16, code: u16) {
        self.conn.command(|e, h| e.conn_mut(h).stop_stream(StreamId::new(stream), code));
    }

    /// Scheduling of `stream`: lower `priority` is sent first; streams of
    /// equal priority take turns, `weight` packets each (default 128 and 1).
    pub fn set_priority(&self, stream: u16, priority: u8, weight: u16) {
        self.conn.command(|e, h| e.conn_mut(h).set_stream_priority(StreamId::new(stream), priority, weight));
    }

    /// Opens a new stream of ours without choosing its number (spec
    /// §13.11), as quinn's `open_bi`: one this connection has never used,
    /// odd on the end that connected and even on the end that accepted, so
    /// that both ends can open streams at once without meeting. The peer
    /// learns of it with the first byte or message sent on it, from its
    /// [`Streams::accept_stream`]. Use the returned [`StreamIo`] as a byte
    /// stream, or its [`id`](StreamIo::id) with the message calls.
    ///
    /// Numbered streams ([`Streams::io`], [`Streams::send_message`]) stay
    /// usable beside it: numbers already used are skipped.
    ///
    /// # Errors
    ///
    /// [`WriteError::StreamLimit`] at the limit of open streams
    /// (`max_streams`) or once every number of our parity was used;
    /// [`WriteError::Finished`] after our side of the connection was
    /// finished; [`WriteError::Closed`] once the connection ended;
    /// [`WriteError::EndpointClosed`] after a shutdown.
    ///
    /// ```no_run
    /// # async fn demo(conn: manyfold::Connection) -> Result<(), Box<dyn std::error::Error>> {
    /// use tokio::io::AsyncWriteExt;
    /// let mut upload = conn.open_stream()?; // say, stream 1
    /// upload.write_all(b"file contents").await?;
    /// upload.shutdown().await?; // finishes this stream only
    /// # Ok(()) }
    /// ```
    pub fn open_stream(&self) -> Result<StreamIo, WriteError> {
        let id = self.conn.open_stream()?;
        Ok(self.io(id))
    }

    /// Waits for the next stream the peer opened (spec §13.11), as quinn's
    /// `accept_bi`: a stream whose first data, reset or abandoned message
    /// arrived on a number this end had not used, whether the peer chose
    /// the number with [`Streams::open_stream`] or by hand. Streams come
    /// in the order their first data arrived, each once; stream 0 and our
    /// own streams never do. `None` once the peer can open no more: its
    /// side of the connection is finished.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Closed`] when the connection ended otherwise than
    /// gracefully, [`ConnectionError::EndpointClosed`] after a shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a stream is taken only when the future returns it.
    ///
    /// ```no_run
    /// # async fn demo(conn: manyfold::Connection) -> Result<(), Box<dyn std::error::Error>> {
    /// use tokio::io::AsyncReadExt;
    /// while let Some(mut incoming) = conn.accept_stream().await? {
    ///     let mut data = Vec::new();
    ///     incoming.read_to_end(&mut data).await?;
    ///     println!("stream {}: {} bytes", incoming.id(), data.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn accept_stream(&self) -> Result<Option<StreamIo>, ConnectionError> {
        let id = poll_fn(|cx| self.conn.poll_accept_stream(cx)).await?;
        Ok(id.map(|id| self.io(id)))
    }

    /// `stream` as a byte stream: `AsyncRead` + `AsyncWrite`. Do not also
    /// send messages on it ([`Streams::send_message`]): their boundaries
    /// would be merged into the bytes at the receiver.
    pub fn io(&self, stream: u16) -> StreamIo {
        StreamIo { conn: self.conn.clone(), stream }
    }
}

/// One stream as a byte stream. Reads return 0 at the stream's end;
/// shutdown finishes our side of the stream (not the connection).
#[derive(Debug, Clone)]
pub struct StreamIo {
    conn: Arc<ConnRef>,
    stream: u16,
}

impl StreamIo {
    /// The stream's number.
    pub fn id(&self) -> u16 {
        self.stream
    }
}

impl AsyncRead for StreamIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.conn.poll_read(cx, self.stream, buf)
    }
}

impl AsyncWrite for StreamIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.conn.poll_write(cx, self.stream, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = self.conn.command(|e, h| e.conn_mut(h).finish_stream(StreamId::new(self.stream)));
        Poll::Ready(match r {
            Ok(()) | Err(SendError::Finished) => Ok(()),
            Err(e) => Err(WriteError::from(e).into()),
        })
    }
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.recv.conn.poll_read(cx, 0, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.send.conn.poll_write(cx, 0, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.send.conn.poll_close(cx).map_err(io::Error::from)
    }
}

/// The sending side of a [`Connection`].
#[derive(Debug)]
pub struct SendHalf {
    conn: Arc<ConnRef>,
}

impl SendHalf {
    /// As [`Connection::peer_addr`].
    pub fn peer_addr(&self) -> SocketAddr {
        self.conn.peer_addr()
    }

    /// As [`Connection::stats`].
    pub fn stats(&self) -> ConnStats {
        self.conn.stats()
    }

    /// As [`Connection::protection`].
    pub fn protection(&self) -> Protection {
        self.conn.protection()
    }

    /// As [`Connection::close`].
    pub async fn close(&mut self) -> Result<(), CloseError> {
        poll_fn(|cx| self.conn.poll_close(cx)).await
    }

    /// As [`Connection::abort`].
    pub fn abort(&self, code: ErrorCode) {
        self.conn.abort(code, "");
    }

    /// Finishes our side (FIN after the data written so far) without
    /// waiting for the acknowledgement, so that the close handshake overlaps
    /// whatever comes next (reading the peer's answer, say); a later
    /// [`close`](Self::close) then usually returns at once. Writing after
    /// it fails.
    pub fn finish(&mut self) -> Result<(), WriteError> {
        self.conn.finish()
    }
}

impl AsyncWrite for SendHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.conn.poll_write(cx, 0, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.conn.poll_close(cx).map_err(io::Error::from)
    }
}

/// The receiving side of a [`Connection`]; reads return 0 at the end of stream.
#[derive(Debug)]
pub struct RecvHalf {
    conn: Arc<ConnRef>,
}

impl RecvHalf {
    /// As [`Connection::peer_addr`].
    pub fn peer_addr(&self) -> SocketAddr {
        self.conn.peer_addr()
    }

    /// As [`Connection::stats`].
    pub fn stats(&self) -> ConnStats {
        self.conn.stats()
    }

    /// As [`Connection::protection`].
    pub fn protection(&self) -> Protection {
        self.conn.protection()
    }

    /// As [`Connection::abort`].
    pub fn abort(&self, code: ErrorCode) {
        self.conn.abort(code, "");
    }
}

impl AsyncRead for RecvHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.conn.poll_read(cx, 0, buf)
    }
}

/// [`Streams::send_messages`] stopped at a message it could not queue:
/// `queued` messages before it are queued and will be delivered.
#[derive(Debug)]
pub struct BatchSendError {
    /// Messages queued before the one refused.
    pub queued: usize,
    /// Why the next one was refused.
    pub error: MessageError,
}

impl std::fmt::Display for BatchSendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (after {} messages of the batch were queued)", self.error, self.queued)
    }
}

impl std::error::Error for BatchSendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
