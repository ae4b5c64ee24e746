//! Short request/reply sessions (paper 02, RUDP; spec §15): one
//! connection per exchange, with the request riding on the handshake's
//! last packet together with the client's FIN, so that an exchange costs
//! the handshake's round trip plus the reply's. The client, closing first,
//! holds TIME-WAIT; the server, closing second, keeps no state once its
//! FIN is acknowledged (spec §4.4).
//!
//! A repeat client can do it in one round trip (0-RTT, spec §6.9): with
//! [`manyfold_proto::EndpointConfig::reuse_tokens`] set, the endpoint asks
//! each server for an address-validation token, keeps the latest token of
//! each server address (at most `max_tokens` servers), and sends the next
//! request to that server on its SYN; the server's SYN-ACK brings the
//! reply. Only for requests the server may safely see twice, or servers
//! that keep a replay window (the default, [`crate::EarlyData`]).
//!
//! A handler that needs no `.await` can run inside the endpoint's driver
//! task instead ([`Endpoint::serve_inline`]): the request is read from the
//! engine and the reply written into it in the same iteration of the
//! driver that received the request's last datagram, so a session costs no
//! task, no channel hand-off and no wake-up beyond the driver's own, and
//! the reply carries the ack of the request (spec §15.4).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = manyfold::Endpoint::bind("127.0.0.1:4000".parse()?, Default::default()).await?;
//! tokio::spawn(async move {
//!     server.serve(1 << 20, |_peer, request: Vec<u8>| async move { request.into_iter().rev().collect() }).await
//! });
//! let client = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, Default::default()).await?;
//! let reply = client.request("127.0.0.1:4000".parse()?, b"ping", 1 << 20).await?;
//! assert_eq!(reply, b"gnip");
//! # Ok(()) }
//! ```

use std::future::{poll_fn, Future};
use std::io;
use std::net::SocketAddr;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::connection::{ConnRef, Connection};
use crate::driver::now;
use crate::endpoint::Endpoint;
use crate::error::{ConnectError, ReadError, RequestError, WriteError};
use crate::inline::{InlineHandler, InlineServer, InlineStats};
use crate::shared::ConnState;

/// The stream-reset code a server answers a request over its limit with.
pub const REQUEST_TOO_LARGE: u16 = 413;

/// The stream-reset code an inline handler's session ends with when the
/// handler panicked ([`Endpoint::serve_inline`]).
pub const HANDLER_FAILED: u16 = 500;

/// Reads `r` to its end: `Ok(None)` once it holds more than `limit` bytes.
async fn read_limited(r: &mut (impl AsyncRead + Unpin), limit: usize) -> io::Result<Option<Vec<u8>>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(Some(out));
        }
        if out.len() + n > limit {
            return Ok(None);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// What a failed read or write of a session says, as a [`RequestError`]:
/// the read and write errors travel inside `io::Error`.
fn session_error(e: io::Error) -> RequestError {
    let inner = e.get_ref();
    if let Some(r) = inner.and_then(|i| i.downcast_ref::<ReadError>()) {
        return match *r {
            ReadError::Reset(code) => RequestError::Reset(code),
            ReadError::Closed(reason) => RequestError::ended(reason),
            _ => RequestError::EndpointClosed,
        };
    }
    if let Some(w) = inner.and_then(|i| i.downcast_ref::<WriteError>()) {
        return match *w {
            WriteError::Reset(code) => RequestError::Reset(code),
            WriteError::Closed(reason) => RequestError::ended(reason),
            _ => RequestError::EndpointClosed,
        };
    }
    // Nothing else fails a connection's reads and writes.
    RequestError::EndpointClosed
}

impl Endpoint {
    /// One request, one reply (spec §15): opens a connection to `addr`,
    /// sends `request` and our FIN (on the handshake's last packet when
    /// they fit in it), and reads the reply to its end, at most
    /// `max_reply` bytes.
    ///
    /// # Errors
    ///
    /// [`RequestError::Connect`] when no connection came up:
    /// [`ConnectError::Refused`] when nothing serves there,
    /// [`ConnectError::TimedOut`] when nothing answers;
    /// [`RequestError::Reset`] with the server's code when it reset the
    /// session ([`REQUEST_TOO_LARGE`] for a request over its limit);
    /// [`RequestError::ReplyTooLarge`] for a reply over `max_reply`;
    /// [`RequestError::Closed`] when the connection ended before the
    /// reply's end; [`RequestError::EndpointClosed`] after a shutdown.
    /// Each converts into an `io::Error` of the matching kind.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the connection, which then closes in the
    /// background; the request may have reached the server.
    pub async fn request(&self, addr: SocketAddr, request: &[u8], max_reply: usize) -> Result<Vec<u8>, RequestError> {
        let (conn, queued) = self.open(addr, request)?;
        let (mut tx, mut rx) = conn.split();
        if queued < request.len() {
            // The rest leaves once the handshake is done.
            tx.write_all(&request[queued..]).await.map_err(session_error)?;
            tx.finish().map_err(|e| session_error(e.into()))?;
        }
        match read_limited(&mut rx, max_reply).await {
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => Err(RequestError::ReplyTooLarge { max: max_reply }),
            Err(e) => Err(session_error(e)),
        }
    }

    /// Serves request/reply sessions until the endpoint shuts down: for
    /// each connection, reads the request to the client's FIN (at most
    /// `max_request` bytes; a larger one resets the connection), calls
    /// `handler` with the peer and the request, writes its reply and
    /// closes. Sessions run concurrently, each in a task of its own.
    ///
    /// It starts listening itself ([`Endpoint::listen`]), so the endpoint
    /// needs nothing else first; other connections the endpoint accepts
    /// are served as sessions too, so give a server its own endpoint.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops accepting new sessions; those under way
    /// finish in their tasks. The endpoint keeps listening.
    pub async fn serve<F, Fut>(&self, max_request: usize, handler: F)
    where
        F: Fn(SocketAddr, Vec<u8>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Vec<u8>> + Send + 'static,
    {
        self.listen();
        while let Some(conn) = self.accept().await {
            let handler = handler.clone();
            tokio::spawn(async move {
                if let Err(e) = serve_one(conn, max_request, handler).await {
                    tracing::debug!(error = %e, "session failed");
                }
            });
        }
    }

    /// Serves request/reply sessions as [`Endpoint::serve`] does, with a
    /// synchronous `handler` that the endpoint's driver task runs itself,
    /// as soon as a request is complete (its FIN arrived): the request is
    /// read from the engine's receive buffer into a buffer the driver
    /// reuses, and the reply is written into the engine before the driver
    /// next sends, so that it leaves with the ack of the request and our
    /// FIN in one datagram when it fits (spec §15.4). A session costs no
    /// task, no channel and no wake-up beyond the driver's own. Runs until
    /// the endpoint shuts down.
    ///
    /// A request over `max_request` bytes is refused: the client reads a
    /// stream reset with [`REQUEST_TOO_LARGE`]. Replies of any size go;
    /// what the send buffer cannot take at once follows as it drains.
    ///
    /// # The handler's contract
    ///
    /// - It must be short and must not block: while it runs, no datagram
    ///   of this endpoint moves (the driver's lock is not held, so it may
    ///   call this endpoint's methods). A call that takes over 10 ms is
    ///   logged (`tracing` warn) and counted in
    ///   [`InlineStats::slow_handlers`]. A handler that awaits I/O or
    ///   takes long belongs in [`Endpoint::serve`].
    /// - A panic in it is caught: that session alone ends, the client
    ///   reads a stream reset with [`HANDLER_FAILED`], the panic is logged
    ///   and counted in [`InlineStats::handler_panics`], and the endpoint
    ///   serves on. (With `panic = "abort"` in the build profile a panic
    ///   ends the process, as anywhere.)
    /// - Handlers of sessions completed in the same driver iteration run
    ///   one after another, on the driver's thread.
    ///
    /// It starts listening itself, and takes every connection the endpoint
    /// accepts while it runs (give a server its own endpoint). A second
    /// call replaces the handler and the limit for the sessions that
    /// follow.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops taking new sessions (later ones wait for
    /// [`Endpoint::accept`]); those under way are finished by the driver.
    ///
    /// # Example
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, Default::default()).await?;
    /// let addr = server.local_addr()?;
    /// let serving = server.clone();
    /// tokio::spawn(async move {
    ///     serving.serve_inline(1 << 16, |_peer, request: &[u8]| request.iter().rev().copied().collect::<Vec<u8>>()).await
    /// });
    /// let client = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, Default::default()).await?;
    /// let reply = client.request(addr, b"ping", 1 << 16).await?;
    /// assert_eq!(reply, b"gnip");
    /// assert_eq!(server.inline_stats().served, 1);
    /// client.shutdown().await;
    /// server.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn serve_inline<F, R>(&self, max_request: usize, handler: F)
    where
        F: Fn(SocketAddr, &[u8]) -> R + Send + Sync + 'static,
        R: AsRef<[u8]>,
    {
        let handler: Box<InlineHandler> = Box::new(move |peer: SocketAddr, request: &[u8], out: &mut Vec<u8>| {
            out.extend_from_slice(handler(peer, request).as_ref())
        });
        let generation = {
            let mut inner = self.shared().lock();
            if !inner.is_running() {
                return;
            }
            inner.engine.set_listening(true);
            let generation = match inner.inline.as_mut() {
                Some(server) => server.replace(handler.into(), max_request),
                None => {
                    inner.inline = Some(InlineServer::new(handler.into(), max_request));
                    0
                }
            };
            self.shared().set_inline(true);
            generation
        };
        // Connections accepted before the call are taken at once.
        self.shared().wake_driver();
        let _stop = StopInline { endpoint: self, generation };
        poll_fn(|cx| {
            let mut inner = self.shared().lock();
            if !inner.is_running() {
                return Poll::Ready(());
            }
            if !inner.accept_waiters.iter().any(|w| w.will_wake(cx.waker())) {
                inner.accept_waiters.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await;
    }

    /// What [`Endpoint::serve_inline`] did so far (all zero without it).
    pub fn inline_stats(&self) -> InlineStats {
        self.shared().lock().inline.as_ref().map(|s| s.stats).unwrap_or_default()
    }

    /// Has the endpoint a token from the server at `addr`, so that the
    /// next [`Endpoint::request`] there goes on the SYN (spec §6.9)? Only
    /// with [`manyfold_proto::EndpointConfig::reuse_tokens`].
    pub fn has_token(&self, addr: SocketAddr) -> bool {
        self.shared().lock().engine.has_token(addr)
    }

    /// Starts a connection without waiting for its handshake, with as much
    /// of `request` queued as the send buffer takes and, if that is all of
    /// it, the FIN: all before the driver first polls it, so that the SYN
    /// (0-RTT, spec §6.9) or the cookie echo carries them. Returns the
    /// connection and the bytes queued.
    fn open(&self, addr: SocketAddr, request: &[u8]) -> Result<(Connection, usize), ConnectError> {
        let shared = self.shared();
        let (handle, queued) = {
            let mut inner = shared.lock();
            if !inner.is_running() {
                return Err(ConnectError::EndpointClosed);
            }
            let h = inner.engine.connect(now(), addr)?;
            let mut c = inner.engine.conn_mut(h);
            let queued = c.send(request).unwrap_or(0);
            let whole = queued == request.len();
            if whole {
                c.close();
            }
            inner.conns.insert(h, ConnState { close_requested: whole, ..ConnState::default() });
            (h, queued)
        };
        shared.wake_driver();
        Ok((Connection::new(ConnRef::new(shared.clone(), handle, addr)), queued))
    }
}

/// Stops an [`Endpoint::serve_inline`] from taking new sessions when its
/// future ends or is dropped (unless a later call replaced it).
struct StopInline<'a> {
    endpoint: &'a Endpoint,
    generation: u64,
}

impl Drop for StopInline<'_> {
    fn drop(&mut self) {
        let shared = self.endpoint.shared();
        let mut inner = shared.lock();
        let Some(server) = inner.inline.as_mut() else { return };
        if server.generation() != self.generation {
            return;
        }
        server.stop_accepting();
        if server.is_idle() {
            shared.set_inline(false);
        }
        // Whatever the engine accepted from now on waits for `accept`.
        for w in inner.accept_waiters.drain(..) {
            w.wake();
        }
    }
}

async fn serve_one<F, Fut>(conn: Connection, max_request: usize, handler: F) -> io::Result<()>
where
    F: Fn(SocketAddr, Vec<u8>) -> Fut,
    Fut: Future<Output = Vec<u8>>,
{
    let peer = conn.peer_addr();
    let streams = conn.streams();
    let (mut tx, mut rx) = conn.split();
    let Some(request) = read_limited(&mut rx, max_request).await? else {
        // spec §15: the client reads a reset with REQUEST_TOO_LARGE, and
        // stops sending the rest (spec §13.9).
        streams.stop_stream(0, REQUEST_TOO_LARGE);
        streams.reset_stream(0, REQUEST_TOO_LARGE);
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a request over {max_request} bytes")));
    };
    let reply = handler(peer, request).await;
    tx.write_all(&reply).await?;
    // The client closed first: our FIN ends the session, and once it is
    // acknowledged the connection is gone (no TIME-WAIT here).
    Ok(tx.close().await?)
}
