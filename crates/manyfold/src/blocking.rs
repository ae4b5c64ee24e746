//! A blocking facade in the shape of librusp's API (paper 04 §2.2):
//! `listen`, `accept`, `connect`, `send`, `receive`, `close`, `local`,
//! `peer`; and [`Group`], in the shape of paper 00's (§4.2). Calls block
//! the calling thread on an internal multi-threaded tokio runtime, shared
//! by every blocking handle, which keeps driving the connections between
//! calls.
//!
//! # Panics
//!
//! Every blocking call panics when made from inside a tokio runtime
//! (tokio refuses to block a thread that drives tasks: "Cannot start a
//! runtime from within a runtime"); use the async API there, or move the
//! call to `tokio::task::spawn_blocking`.

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

use crate::{
    CloseError, Config, Connection, ConnectionError, Endpoint, IntoMessage, MessageOptions, SendError, StreamItem,
    WriteError,
};

/// The runtime behind every blocking handle.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("manyfold-blocking")
            .enable_all()
            .build()
            .expect("cannot start manyfold's internal tokio runtime")
    })
}

fn resolve(addr: impl ToSocketAddrs) -> io::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
    if addrs.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "address resolved to nothing"));
    }
    Ok(addrs)
}

/// A listening endpoint (librusp's `ruspListen` connection).
#[derive(Debug)]
pub struct Listener {
    endpoint: Endpoint,
}

impl Listener {
    /// Binds `addr` and starts accepting connections.
    ///
    /// # Errors
    ///
    /// The address does not resolve, or the socket cannot be bound (in
    /// use, not ours: the OS's error).
    pub fn listen(addr: impl ToSocketAddrs) -> io::Result<Listener> {
        Listener::listen_with(addr, Config::default())
    }

    /// [`Listener::listen`] with a chosen configuration.
    ///
    /// # Errors
    ///
    /// As [`Listener::listen`].
    pub fn listen_with(addr: impl ToSocketAddrs, config: Config) -> io::Result<Listener> {
        let addr = resolve(addr)?[0];
        let endpoint = runtime().block_on(Endpoint::bind(addr, config))?;
        endpoint.listen();
        Ok(Listener { endpoint })
    }

    /// Blocks until a peer completes the handshake.
    ///
    /// # Errors
    ///
    /// `NotConnected` once the listener's endpoint has stopped.
    pub fn accept(&self) -> io::Result<Stream> {
        match runtime().block_on(self.endpoint.accept()) {
            Some(conn) => Ok(Stream::new(conn, self.endpoint.clone(), false)),
            None => Err(io::Error::new(io::ErrorKind::NotConnected, "the listener is closed")),
        }
    }

    /// The address the listener is bound to.
    ///
    /// # Errors
    ///
    /// None in practice: the address is known from the bind.
    pub fn local(&self) -> io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// The async endpoint underneath.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Serves request/reply sessions with a synchronous `handler` run by
    /// the endpoint's driver ([`Endpoint::serve_inline`], spec §15.4):
    /// blocks the calling thread until the listener shuts down
    /// ([`Listener::shutdown`], from another thread). Each session's
    /// request is read to the client's FIN (at most `max_request` bytes; a
    /// larger one is refused with a stream reset, code
    /// [`crate::REQUEST_TOO_LARGE`]), the handler's reply is written and
    /// the session closed, with no thread or task per session. The
    /// handler's contract is [`Endpoint::serve_inline`]'s: short, never
    /// blocking; a panic ends its own session only (reset with
    /// [`crate::HANDLER_FAILED`]).
    ///
    /// A client reads the reply to its end: a blocking one with
    /// [`Stream`] (write the request, `shutdown(Write)`, `read_to_end`),
    /// an async one with [`Endpoint::request`].
    ///
    /// # Example
    ///
    /// ```
    /// use std::io::{Read, Write};
    /// use std::net::Shutdown;
    /// use std::sync::Arc;
    /// use manyfold::blocking::{Listener, Stream};
    ///
    /// # fn main() -> std::io::Result<()> {
    /// let listener = Arc::new(Listener::listen("127.0.0.1:0")?);
    /// let addr = listener.local()?;
    /// let server = listener.clone();
    /// let serving = std::thread::spawn(move || {
    ///     server.serve_inline(1 << 16, |_peer, request: &[u8]| request.iter().rev().copied().collect::<Vec<u8>>())
    /// });
    ///
    /// let mut session = Stream::connect(addr)?;
    /// session.write_all(b"ping")?;
    /// session.shutdown(Shutdown::Write)?;
    /// let mut reply = Vec::new();
    /// session.read_to_end(&mut reply)?;
    /// assert_eq!(reply, b"gnip");
    /// session.close()?;
    ///
    /// assert_eq!(listener.inline_stats().served, 1);
    /// listener.shutdown();
    /// serving.join().expect("the server thread");
    /// # Ok(()) }
    /// ```
    pub fn serve_inline<F, R>(&self, max_request: usize, handler: F)
    where
        F: Fn(SocketAddr, &[u8]) -> R + Send + Sync + 'static,
        R: AsRef<[u8]>,
    {
        runtime().block_on(self.endpoint.serve_inline(max_request, handler));
    }

    /// What [`Listener::serve_inline`] did so far (all zero without it).
    pub fn inline_stats(&self) -> crate::InlineStats {
        self.endpoint.inline_stats()
    }

    /// Shuts the listener's endpoint down gracefully ([`Endpoint::shutdown`]):
    /// sessions under way finish, a [`Listener::serve_inline`] on another
    /// thread returns, and later `accept`s fail. Blocks until done.
    pub fn shutdown(&self) {
        runtime().block_on(self.endpoint.shutdown());
    }
}

/// A connection driven by the internal runtime (librusp's connection id).
/// Implements `std::io::Read` and `Write`. Dropping it closes gracefully in
/// the background; [`Stream::close`] waits for the peer's acknowledgement.
#[derive(Debug)]
pub struct Stream {
    conn: Connection,
    /// Keeps the socket of a connecting stream alive (and counts the
    /// listener's clients); its driver ends after the connection does.
    _endpoint: Endpoint,
    /// The endpoint is this stream's alone (a connecting stream).
    owns_endpoint: bool,
    /// Longest a read (`receive`, `Read::read`) blocks; `None`: no limit.
    read_timeout: Option<Duration>,
    /// Longest a write (`send`, `Write::write`) blocks; `None`: no limit.
    write_timeout: Option<Duration>,
    /// After `shutdown(Read)`: reads return 0.
    read_shut: bool,
}

/// Runs `f` on the blocking runtime, giving up after `limit` with
/// `WouldBlock` as `std::net::TcpStream` does on Unix.
fn block_within<T>(limit: Option<Duration>, f: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    match limit {
        None => runtime().block_on(f),
        Some(limit) => runtime().block_on(async {
            tokio::time::timeout(limit, f)
                .await
                .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::WouldBlock, "timed out")))
        }),
    }
}

/// A zero timeout, which std refuses too.
fn check_timeout(limit: Option<Duration>) -> io::Result<()> {
    if limit == Some(Duration::ZERO) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "cannot set a 0 duration timeout"));
    }
    Ok(())
}

impl Stream {
    /// Connects to `addr` from a fresh socket on an ephemeral port.
    ///
    /// # Errors
    ///
    /// `ConnectionRefused` when nothing listens there (the host's ICMP
    /// port unreachable, or the listener's refusal), `TimedOut` when the
    /// handshake got no answer within `connect_timeout`, the kind of the
    /// [`ConnectError`](crate::ConnectError) inside for other ends (see
    /// [`close_reason`](crate::close_reason)), or the OS's error when no
    /// socket can be bound.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<Stream> {
        Stream::connect_with(addr, Config::default())
    }

    /// [`Stream::connect`] with a chosen configuration (e.g. `connect_timeout`).
    /// Tries each resolved address in turn.
    ///
    /// # Errors
    ///
    /// As [`Stream::connect`], for the last address tried; `InvalidInput`
    /// when `addr` resolves to no address.
    pub fn connect_with(addr: impl ToSocketAddrs, config: Config) -> io::Result<Stream> {
        let mut last = None;
        for addr in resolve(addr)? {
            let local: SocketAddr = if addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
            let attempt = runtime().block_on(async {
                let endpoint = Endpoint::bind(local, config.clone()).await?;
                let conn = endpoint.connect(addr).await?;
                io::Result::Ok(Stream::new(conn, endpoint, true))
            });
            match attempt {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to")))
    }

    fn new(conn: Connection, endpoint: Endpoint, owns_endpoint: bool) -> Stream {
        Stream { conn, _endpoint: endpoint, owns_endpoint, read_timeout: None, write_timeout: None, read_shut: false }
    }

    /// Sends all of `data`, blocking while the send buffer is full. Returns
    /// `data.len()`.
    ///
    /// # Errors
    ///
    /// The connection's end ([`WriteError`] inside the `io::Error`),
    /// or `WouldBlock` when a write timeout passed first; part of `data`
    /// may then be queued.
    pub fn send(&mut self, data: &[u8]) -> io::Result<usize> {
        block_within(self.write_timeout, self.conn.write_all(data))?;
        Ok(data.len())
    }

    /// Receives into `buf`, blocking until something arrives. Returns 0 at
    /// the end of the peer's stream.
    ///
    /// # Errors
    ///
    /// The connection's end other than graceful ([`ReadError`](crate::ReadError)
    /// inside the `io::Error`), or `WouldBlock` when a read timeout passed
    /// with nothing to read.
    pub fn receive(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.read_shut {
            return Ok(0);
        }
        block_within(self.read_timeout, self.conn.read(buf))
    }

    /// Sets how long a read blocks before failing with `WouldBlock`
    /// (`None`: for ever), as [`std::net::TcpStream::set_read_timeout`].
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_read_timeout(&mut self, limit: Option<Duration>) -> io::Result<()> {
        check_timeout(limit)?;
        self.read_timeout = limit;
        Ok(())
    }

    /// Sets how long a write blocks before failing with `WouldBlock`
    /// (`None`: for ever), as [`std::net::TcpStream::set_write_timeout`].
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a zero duration.
    pub fn set_write_timeout(&mut self, limit: Option<Duration>) -> io::Result<()> {
        check_timeout(limit)?;
        self.write_timeout = limit;
        Ok(())
    }

    /// The read timeout ([`Stream::set_read_timeout`]).
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// The write timeout ([`Stream::set_write_timeout`]).
    pub fn write_timeout(&self) -> Option<Duration> {
        self.write_timeout
    }

    /// Shuts down a direction as [`std::net::TcpStream::shutdown`] does:
    /// `Write` sends our FIN after the queued data (spec §4.4) without
    /// waiting, and reads go on to the peer's FIN; `Read` makes later
    /// reads return 0 (what arrives is still acknowledged, and the peer is
    /// not told); `Both` does both. [`Stream::close`] instead waits for
    /// the peer's acknowledgement.
    ///
    /// # Errors
    ///
    /// `Write` on a connection already closed other than gracefully fails
    /// with its end; a second `Write` does nothing.
    pub fn shutdown(&mut self, how: Shutdown) -> io::Result<()> {
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            self.read_shut = true;
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) {
            match self.conn.finish() {
                Ok(()) | Err(WriteError::Closed(crate::CloseReason::Graceful)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Sends FIN and blocks until the peer acknowledged everything. A
    /// stream from [`Stream::connect`] owns its socket, and then also
    /// waits until the connection has finished with its peer
    /// ([`Endpoint::wait_idle`], spec §4.8): the process may exit right
    /// after without stranding the peer.
    ///
    /// # Errors
    ///
    /// As [`Connection::close`](crate::Connection::close), inside an
    /// `io::Error` of the matching kind.
    pub fn close(&mut self) -> io::Result<()> {
        runtime().block_on(self.conn.close()).map_err(io::Error::from)?;
        if self.owns_endpoint {
            runtime().block_on(self._endpoint.wait_idle());
        }
        Ok(())
    }

    /// Ends the connection at once (spec §4.6): the peer gets a RST with
    /// `code` and its calls fail with `PeerReset(Some(code))`.
    pub fn abort(&mut self, code: crate::ErrorCode) {
        self.conn.abort(code);
        if self.owns_endpoint {
            runtime().block_on(self._endpoint.wait_idle());
        }
    }

    /// [`abort`](Self::abort) with the reason in words for the peer (spec
    /// §3.3.4): see [`Connection::abort_with`](crate::Connection::abort_with).
    pub fn abort_with(&mut self, code: crate::ErrorCode, reason: &str) {
        self.conn.abort_with(code, reason);
        if self.owns_endpoint {
            runtime().block_on(self._endpoint.wait_idle());
        }
    }

    /// Our address.
    ///
    /// # Errors
    ///
    /// None in practice: the address is known from the bind.
    pub fn local(&self) -> io::Result<SocketAddr> {
        self.conn.local_addr()
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.conn.peer_addr()
    }

    /// The connection's counters.
    pub fn stats(&self) -> manyfold_proto::ConnStats {
        self.conn.stats()
    }

    // ---- streams (spec §13): the async `Streams` calls, blocking ----------

    /// Sends one whole message on `stream`, blocking while the send buffer
    /// has no room for it. Too large a message is refused; nothing is sent.
    /// Do not mix messages and bytes ([`Stream::send`], [`Stream::send_on`],
    /// `Write`) on one stream: stream 0 is also the byte stream, and the
    /// receiver gets the messages merged into it, their boundaries lost.
    ///
    /// # Errors
    ///
    /// As [`Streams::send_message`](crate::Streams::send_message).
    pub fn send_message(&mut self, stream: u16, data: impl IntoMessage) -> Result<(), SendError> {
        runtime().block_on(self.conn.streams().send_message(stream, data))
    }

    /// [`Stream::send_message`] with delivery options (unordered, lifetime,
    /// retransmission limit).
    ///
    /// # Errors
    ///
    /// As [`Streams::send_message`](crate::Streams::send_message).
    pub fn send_message_with(
        &mut self,
        stream: u16,
        data: impl IntoMessage,
        opts: MessageOptions,
    ) -> Result<(), SendError> {
        runtime().block_on(self.conn.streams().send_message_with(stream, data, opts))
    }

    /// Blocks until a message (or notice) of any stream arrives; `None` once
    /// the connection closed gracefully and everything was read.
    ///
    /// # Errors
    ///
    /// As [`Streams::recv_message`](crate::Streams::recv_message).
    pub fn recv_message(&mut self) -> Result<Option<(u16, StreamItem)>, ConnectionError> {
        runtime().block_on(self.conn.streams().recv_message())
    }

    /// [`Stream::recv_message`] for one stream.
    ///
    /// # Errors
    ///
    /// As [`Streams::recv_message`](crate::Streams::recv_message).
    pub fn recv_message_on(&mut self, stream: u16) -> Result<Option<StreamItem>, ConnectionError> {
        runtime().block_on(self.conn.streams().recv_message_on(stream))
    }

    /// Blocks until everything queued on `stream` is acknowledged.
    ///
    /// # Errors
    ///
    /// As [`Streams::wait_for_send`](crate::Streams::wait_for_send).
    pub fn wait_for_send(&mut self, stream: u16) -> Result<(), CloseError> {
        runtime().block_on(self.conn.streams().wait_for_send(stream))
    }

    /// Opens a new stream without choosing its number (spec §13.11):
    /// odd on the end that connected, even on the end that accepted, never
    /// one used before. Returns its number for [`Stream::send_on`],
    /// [`Stream::send_message`] and the rest.
    ///
    /// # Errors
    ///
    /// As [`Streams::open_stream`](crate::Streams::open_stream).
    pub fn open_stream(&mut self) -> Result<u16, WriteError> {
        Ok(self.conn.open_stream()?.id())
    }

    /// Blocks until the peer opens a stream (spec §13.11) and returns its
    /// number; `None` once the peer can open no more (its side finished).
    ///
    /// # Errors
    ///
    /// As [`Streams::accept_stream`](crate::Streams::accept_stream).
    pub fn accept_stream(&mut self) -> Result<Option<u16>, ConnectionError> {
        Ok(runtime().block_on(self.conn.accept_stream())?.map(|s| s.id()))
    }

    /// Sends all of `data` as bytes on `stream`. Do not also send messages
    /// on it ([`Stream::send_message`]).
    ///
    /// # Errors
    ///
    /// The connection's or the stream's end, inside an `io::Error`.
    pub fn send_on(&mut self, stream: u16, data: &[u8]) -> io::Result<usize> {
        runtime().block_on(self.conn.streams().io(stream).write_all(data))?;
        Ok(data.len())
    }

    /// Receives bytes of `stream`; 0 at its end.
    ///
    /// # Errors
    ///
    /// The connection's end (other than graceful) or the stream's reset,
    /// inside an `io::Error`.
    pub fn receive_on(&mut self, stream: u16, buf: &mut [u8]) -> io::Result<usize> {
        runtime().block_on(self.conn.streams().io(stream).read(buf))
    }

    /// Ends our side of `stream` after its queued data.
    ///
    /// # Errors
    ///
    /// As [`Streams::finish_stream`](crate::Streams::finish_stream).
    pub fn finish_stream(&mut self, stream: u16) -> Result<(), WriteError> {
        self.conn.streams().finish_stream(stream)
    }

    /// Abandons our side of `stream` with an error code.
    pub fn reset_stream(&mut self, stream: u16, code: u16) {
        self.conn.streams().reset_stream(stream, code)
    }

    /// Asks the peer to stop sending on `stream`, with an error code.
    pub fn stop_stream(&mut self, stream: u16, code: u16) {
        self.conn.streams().stop_stream(stream, code)
    }

    /// Scheduling of `stream`: lower priority first, `weight` packets per turn.
    pub fn set_priority(&mut self, stream: u16, priority: u8, weight: u16) {
        self.conn.streams().set_priority(stream, priority, weight)
    }

    /// Writes all of `data` without copying it, as the async
    /// [`Connection::write_chunk`] does; blocks at most the write timeout
    /// (then `WouldBlock`, with an unknown part of `data` queued).
    pub fn write_chunk(&mut self, data: bytes::Bytes) -> io::Result<()> {
        block_within(self.write_timeout, async { self.conn.write_chunk(data).await.map_err(io::Error::from) })
    }

    /// Reads up to `max` bytes as one buffer, as the async
    /// [`Connection::read_chunk`] does (a large piece of a received
    /// datagram uncopied); `None` at the end of the peer's stream. Blocks
    /// at most the read timeout (then `WouldBlock`).
    pub fn read_chunk(&mut self, max: usize) -> io::Result<Option<bytes::Bytes>> {
        if self.read_shut {
            return Ok(None);
        }
        block_within(self.read_timeout, async { self.conn.read_chunk(max).await.map_err(io::Error::from) })
    }

    /// Reads a batch of chunks into the front of `bufs`, as the async
    /// [`Connection::read_chunks`] does (the bulk reader's call: no copy,
    /// one lock per batch); how many were filled, `None` at the end of the
    /// peer's stream. Blocks at most the read timeout (then `WouldBlock`).
    pub fn read_chunks(&mut self, bufs: &mut [bytes::Bytes]) -> io::Result<Option<usize>> {
        if self.read_shut {
            return Ok(None);
        }
        block_within(self.read_timeout, async { self.conn.read_chunks(bufs).await.map_err(io::Error::from) })
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.receive(buf)
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        block_within(self.write_timeout, self.conn.write(buf))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A group in the shape of paper 00's API (§4.2): `connect` to many
/// destinations at once, `send` to them in the group's mode,
/// `wait_for_send`, `add_destination`, `remove_destination`,
/// `fully_remove_destination`, `close`. Dropping it closes the group
/// gracefully in the background.
#[derive(Debug)]
pub struct Group {
    group: crate::Group,
    _endpoint: Endpoint,
}

impl Group {
    /// Opens a group from a fresh endpoint on an ephemeral port to every
    /// address in `peers` (paper 01's parallel handshake). Returns it with
    /// the peers that are not in it and why; fails if fewer than
    /// `config.min_peers` answered.
    #[allow(clippy::type_complexity)]
    pub fn connect(
        peers: &[SocketAddr],
        config: crate::GroupConfig,
    ) -> Result<(Group, Vec<(SocketAddr, crate::Unreachable)>), crate::GroupError> {
        Group::connect_with(peers, config, Config::default())
    }

    /// [`Group::connect`] with the endpoint's configuration.
    #[allow(clippy::type_complexity)]
    pub fn connect_with(
        peers: &[SocketAddr],
        config: crate::GroupConfig,
        endpoint: Config,
    ) -> Result<(Group, Vec<(SocketAddr, crate::Unreachable)>), crate::GroupError> {
        let v6 = peers.first().is_some_and(SocketAddr::is_ipv6);
        let local: SocketAddr = if v6 { "[::]:0".parse() } else { "0.0.0.0:0".parse() }.expect("literal address");
        runtime().block_on(async {
            let ep = Endpoint::bind(local, endpoint).await.map_err(|_| crate::GroupError::EndpointClosed)?;
            let (group, unreachable) = ep.group(peers, config).await?;
            Ok((Group { group, _endpoint: ep }, unreachable))
        })
    }

    /// Sends one message to the group; blocks while the shared send
    /// buffer is full. Returns its group sequence number.
    ///
    /// # Errors
    ///
    /// As [`Group::send`](crate::Group::send).
    pub fn send(&self, data: impl IntoMessage) -> Result<u64, SendError> {
        runtime().block_on(self.group.send(data))
    }

    /// Blocks until every message sent is delivered in the mode's sense.
    ///
    /// # Errors
    ///
    /// As [`Group::wait_for_send`](crate::Group::wait_for_send).
    pub fn wait_for_send(&self) -> Result<(), CloseError> {
        runtime().block_on(self.group.wait_for_send())
    }

    /// The next message (or notice) from any peer; `None` once closed.
    pub fn recv_message(&self) -> Option<(crate::Destination, StreamItem)> {
        runtime().block_on(self.group.recv_message())
    }

    /// Adds a destination (spec §14.7); its join is reported by [`Group::try_event`]. See [`crate::Group::add_destination`] and [`crate::Group::join`], which waits for it.
    ///
    /// # Errors
    ///
    /// As [`Group::add_destination`](crate::Group::add_destination).
    pub fn add_destination(&self, addr: SocketAddr) -> Result<crate::Destination, crate::GroupError> {
        self.group.add_destination(addr)
    }

    /// Removes one destination: its stream ends after what was sent on it.
    ///
    /// # Errors
    ///
    /// As [`Group::remove_destination`](crate::Group::remove_destination).
    pub fn remove_destination(&self, dest: crate::Destination) -> Result<(), crate::GroupError> {
        self.group.remove_destination(dest)
    }

    /// Removes a peer and every stream to it; it still gets what it was sent.
    ///
    /// # Errors
    ///
    /// As [`Group::fully_remove_destination`](crate::Group::fully_remove_destination).
    pub fn fully_remove_destination(&self, peer: crate::PeerId) -> Result<(), crate::GroupError> {
        self.group.fully_remove_destination(peer)
    }

    /// A membership event if one is waiting.
    pub fn try_event(&self) -> Option<crate::GroupEvent> {
        self.group.try_event()
    }

    /// Group-wide counters.
    pub fn stats(&self) -> crate::GroupStats {
        self.group.stats()
    }

    /// Every peer's figures, in the order they were added.
    pub fn peers(&self) -> Vec<(crate::PeerId, crate::PeerStats)> {
        self.group.peers()
    }

    /// Closes gracefully; returns once every peer has everything, or is gone.
    ///
    /// # Errors
    ///
    /// As [`Group::close`](crate::Group::close).
    pub fn close(&self) -> Result<(), CloseError> {
        runtime().block_on(self.group.close())
    }

    /// The async group underneath.
    pub fn group(&self) -> &crate::Group {
        &self.group
    }
}
