//! A connection as the application sees it: `AsyncRead` + `AsyncWrite`,
//! split into halves, graceful close that waits for the peer's
//! acknowledgement (spec §4.4, §7).

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use manyfold_proto::{CloseReason, ConnHandle, ConnStats, RecvError, SendError, State};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::driver::now;
use crate::error::ConnectionError;
use crate::shared::{register, Phase, Shared};

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
        let state = inner.engine.state(self.handle);
        let stopped = inner.phase == Phase::Stopped;
        let Some(c) = inner.conns.get_mut(&self.handle) else {
            return Poll::Ready(Err(ConnectionError::EndpointClosed));
        };
        if let Some(reason) = c.closed {
            return Poll::Ready(Err(ConnectionError::Closed(reason)));
        }
        if c.connected || !matches!(state, Some(State::SynSent) | Some(State::Closed) | None) {
            c.connected = true;
            return Poll::Ready(Ok(()));
        }
        if stopped {
            return Poll::Ready(Err(ConnectionError::EndpointClosed));
        }
        register(&mut c.connect, cx);
        Poll::Pending
    }

    fn poll_read(&self, cx: &Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        match inner.engine.recv(self.handle, buf.initialize_unfilled()) {
            Ok(Some(n)) => {
                buf.advance(n);
                drop(guard);
                if n > 0 {
                    // Reading frees receive buffer: the window may open.
                    self.shared.wake_driver();
                }
                Poll::Ready(Ok(()))
            }
            Ok(None) => {
                let stopped = inner.phase == Phase::Stopped;
                let Some(c) = inner.conns.get_mut(&self.handle) else {
                    return Poll::Ready(Err(ConnectionError::EndpointClosed.into()));
                };
                if let Some(reason) = c.closed {
                    return Poll::Ready(read_end(reason));
                }
                if stopped {
                    return Poll::Ready(Err(ConnectionError::EndpointClosed.into()));
                }
                register(&mut c.read, cx);
                Poll::Pending
            }
            Err(RecvError::Closed(reason)) => Poll::Ready(read_end(reason)),
            Err(_) => Poll::Ready(Err(ConnectionError::EndpointClosed.into())),
        }
    }

    fn poll_write(&self, cx: &Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        match inner.engine.send(self.handle, data) {
            Ok(0) => {
                let stopped = inner.phase == Phase::Stopped;
                let Some(c) = inner.conns.get_mut(&self.handle) else {
                    return Poll::Ready(Err(ConnectionError::EndpointClosed.into()));
                };
                if let Some(reason) = c.closed {
                    return Poll::Ready(Err(ConnectionError::Closed(reason).into()));
                }
                if stopped {
                    return Poll::Ready(Err(ConnectionError::EndpointClosed.into()));
                }
                register(&mut c.write, cx);
                Poll::Pending
            }
            Ok(n) => {
                drop(guard);
                self.shared.wake_driver();
                Poll::Ready(Ok(n))
            }
            Err(SendError::Finished) => Poll::Ready(Err(ConnectionError::Finished.into())),
            Err(SendError::Closed(reason)) => Poll::Ready(Err(ConnectionError::Closed(reason).into())),
            Err(_) => Poll::Ready(Err(ConnectionError::EndpointClosed.into())),
        }
    }

    /// Queues FIN after the data written so far (once), without waiting.
    fn finish(&self) -> Result<(), ConnectionError> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let Some(c) = inner.conns.get_mut(&self.handle) else {
            return Err(ConnectionError::EndpointClosed);
        };
        if let Some(reason) = c.closed {
            return Err(ConnectionError::Closed(reason));
        }
        if c.close_requested {
            return Ok(());
        }
        inner.engine.close(self.handle);
        c.close_requested = true;
        drop(guard);
        self.shared.wake_driver();
        Ok(())
    }

    /// Sends FIN after the queued data (once) and is ready when the peer has
    /// acknowledged everything including the FIN.
    fn poll_close(&self, cx: &Context<'_>) -> Poll<Result<(), ConnectionError>> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let stopped = inner.phase == Phase::Stopped;
        let Some(c) = inner.conns.get_mut(&self.handle) else {
            return Poll::Ready(Err(ConnectionError::EndpointClosed));
        };
        let mut requested_now = false;
        if c.closed.is_none() && !c.close_requested {
            inner.engine.close(self.handle);
            c.close_requested = true;
            requested_now = true;
        }
        let result = match inner.engine.state(self.handle) {
            // Our FIN is acknowledged in these states (spec §4.4).
            Some(State::FinWait2) | Some(State::TimeWait) => Poll::Ready(Ok(())),
            Some(State::Closed) | None => {
                let reason = inner.engine.close_reason(self.handle).or(c.closed);
                let unacked = inner.engine.conn_stats(self.handle).map_or(0, |s| s.unacked_bytes);
                Poll::Ready(match reason {
                    Some(CloseReason::Graceful) => Ok(()),
                    Some(reason) if unacked > 0 => Err(ConnectionError::Unacked { bytes: unacked, reason }),
                    Some(reason) => Err(ConnectionError::Closed(reason)),
                    None => Err(ConnectionError::EndpointClosed),
                })
            }
            _ if stopped => Poll::Ready(Err(ConnectionError::EndpointClosed)),
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
        self.shared.lock().engine.conn_stats(self.handle).unwrap_or_default()
    }
}

/// What a read returns once the connection has closed: end of stream after a
/// graceful close, an error otherwise.
fn read_end(reason: CloseReason) -> io::Result<()> {
    match reason {
        CloseReason::Graceful => Ok(()),
        other => Err(ConnectionError::Closed(other).into()),
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

    /// Separates the sending and receiving sides, to use them from different tasks.
    pub fn split(self) -> (SendHalf, RecvHalf) {
        (self.send, self.recv)
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.send.conn.peer
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.send.conn.shared.local_addr)
    }

    pub fn stats(&self) -> ConnStats {
        self.send.stats()
    }

    /// Finishes our side (FIN after the queued data) and waits until the peer
    /// has acknowledged everything. If the connection dies first, the error
    /// says how many bytes were never acknowledged.
    pub async fn close(&mut self) -> Result<(), ConnectionError> {
        self.send.close().await
    }
}

impl AsyncRead for Connection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.recv.conn.poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.send.conn.poll_write(cx, buf)
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
    pub fn peer_addr(&self) -> SocketAddr {
        self.conn.peer
    }

    pub fn stats(&self) -> ConnStats {
        self.conn.stats()
    }

    /// As [`Connection::close`].
    pub async fn close(&mut self) -> Result<(), ConnectionError> {
        poll_fn(|cx| self.conn.poll_close(cx)).await
    }

    /// Finishes our side (FIN after the data written so far) without
    /// waiting for the acknowledgement, so that the close handshake overlaps
    /// whatever comes next (reading the peer's answer, say); a later
    /// [`close`](Self::close) then usually returns at once. Writing after
    /// it fails.
    pub fn finish(&mut self) -> Result<(), ConnectionError> {
        self.conn.finish()
    }
}

impl AsyncWrite for SendHalf {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.conn.poll_write(cx, buf)
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
    pub fn peer_addr(&self) -> SocketAddr {
        self.conn.peer
    }

    pub fn stats(&self) -> ConnStats {
        self.conn.stats()
    }
}

impl AsyncRead for RecvHalf {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.conn.poll_read(cx, buf)
    }
}
