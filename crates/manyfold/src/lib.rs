//! manyfold: a reliable transport over UDP, to one peer or to many.
//!
//! It gives an application what TCP gives, over UDP datagrams: ordered,
//! reliable, flow- and congestion-controlled byte streams between two
//! endpoints, opened by a three-way handshake with a stateless cookie and
//! closed gracefully. On top of that a connection carries up to 65,536
//! independent streams of bytes or whole messages; a *group* sends one
//! message to many receivers at once; a *session* is one request and one
//! reply on a connection of its own; and *multicast replication* pushes a
//! file to every host of an IP multicast group. This crate is the I/O
//! driver (tokio) around the sans-IO engine of `manyfold-proto`, with an
//! async API and a blocking one ([`blocking`], in the shape of librusp).
//!
//! # The model
//!
//! - An [`Endpoint`] is one UDP socket and the task that drives every
//!   connection on it. It connects ([`Endpoint::connect`]), and accepts
//!   once [`Endpoint::listen`] was called ([`Endpoint::accept`]). One
//!   endpoint serves any number of connections, in both roles.
//! - A [`Connection`] is one peer: `AsyncRead + AsyncWrite` on its byte
//!   stream (stream 0), [`Connection::split`] into halves for two tasks,
//!   [`Connection::close`] to finish gracefully, [`Connection::abort`] to
//!   end it at once with an [`ErrorCode`] ([`Connection::abort_with`]
//!   adds the reason in words, which the peer's errors carry:
//!   [`peer_close_text`]). [`Connection::stats`] has its
//!   RTT, window and retransmissions. Data already in a [`Bytes`] goes
//!   without a copy through [`Connection::write_chunk`] (on any stream:
//!   [`StreamIo::write_chunk`]), as quinn's `write_chunk`;
//!   [`Connection::write_chunk_some`] takes what fits and is cancel safe
//!   (for a `select!` or a timeout around it); a
//!   [`BufferPool`] gives you those buffers again once the peer has
//!   acknowledged them, instead of a fresh allocation each. What a client
//!   writes as soon as `connect` returns rides on the handshake's last
//!   packet: that packet waits up to [`ConnectionConfig::echo_delay`]
//!   (10 ms) for it, or until the client first waits to read (a server
//!   that speaks first hears of the client at once).
//! - [`Streams`] ([`Connection::streams`]) are the connection's numbered
//!   streams 1–65,535: each a byte stream ([`Streams::io`]) or a sequence
//!   of whole messages ([`Streams::send_message`],
//!   [`Streams::recv_message`]); a loss on one stream does not delay the
//!   others, and a message can be unordered or given up after a lifetime
//!   ([`MessageOptions`]). [`Connection::open_stream`] picks a number for
//!   you and the peer's [`Connection::accept_stream`] hands it the stream
//!   (quinn's `open_bi`/`accept_bi`); or both sides agree on numbers.
//! - A [`Group`] ([`Endpoint::group`]) is one sender's connections to many
//!   receivers, opened by one parallel handshake: a message is held once
//!   and delivered to all of them, any one, at least P (or every live
//!   one, when fewer are left: see [`Group`]), or K chosen by load
//!   ([`Mode`]); peers join ([`Group::join`]) and leave while it runs
//!   ([`GroupEvent`]). Receivers are ordinary endpoints that accept.
//! - A session ([`Endpoint::request`], [`Endpoint::serve`]) is one request
//!   and one reply: the request rides on the handshake, so an exchange
//!   costs two round trips and the server keeps nothing afterwards.
//! - [`mcast`] sends one file over IP multicast to every receiver that
//!   joined the group, repairing what each lost.
//!
//! # Which to use when
//!
//! | you have | use |
//! |---|---|
//! | one peer, a byte stream (a file, a pipe, a protocol of your own) | [`Connection`] as `AsyncRead + AsyncWrite` |
//! | one peer, several independent flows, or records | [`Streams`]: one stream per flow, messages for records |
//! | many short exchanges with servers (RPC, queries) | [`Endpoint::request`] / [`Endpoint::serve`] |
//! | the same data to several peers over unicast, or work spread over them | [`Group`] |
//! | one file to many hosts of one network that routes multicast | [`mcast`] |
//! | a thread-per-connection program, or C-style code | [`blocking`] |
//!
//! Settings are in [`Config`] (the endpoint's [`EndpointConfig`], with
//! each connection's [`ConnectionConfig`]: timeouts, windows, the
//! [`CongestionAlgorithm`]); [`SecurityConfig`] turns on encryption.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! let server = manyfold::Endpoint::bind("127.0.0.1:4000".parse()?, Default::default()).await?;
//! server.listen();
//! let client = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, Default::default()).await?;
//! let mut conn = client.connect("127.0.0.1:4000".parse()?).await?;
//! conn.write_all(b"hello").await?;
//! conn.close().await?; // returns once the peer acknowledged everything
//! let mut incoming = server.accept().await.expect("endpoint open");
//! let mut got = Vec::new();
//! incoming.read_to_end(&mut got).await?;
//! incoming.close().await?; // our FIN: the client's connection can finish
//! client.wait_idle().await; // nothing left to finish: the process may exit
//! # Ok(()) }
//! ```
//!
//! Whole programs, run by the crate's tests, are in `crates/manyfold/examples`:
//! `echo`, `file`, `streams`, `group`, `request_reply`, `mcast`.
//!
//! References of the form "spec §N" name sections of the protocol's
//! specification, shipped as the [`spec`] page; "paper NN" names the
//! papers each design comes from, listed in its §1.
//!
//! # Ending cleanly
//!
//! Connections live in their endpoint's driver task, on your tokio
//! runtime: nothing moves once the runtime or the process is gone. So a
//! program that returns from `main` right after `write_all` loses its
//! unsent data and never sends its FIN. End like this:
//!
//! 1. [`Connection::close`] (or `shutdown()` from `AsyncWriteExt`): FIN after
//!    the queued data; returns once the peer acknowledged all of it.
//! 2. [`Endpoint::wait_idle`]: returns once every connection has finished
//!    with its peer, including the short TIME-WAIT linger that repeats a
//!    lost last ack (a fraction of a second; spec §4.8). Then exit. A
//!    connection has finished only once both sides closed: if the peer
//!    keeps its side open (it read to the end but never closed or dropped
//!    its connection), `wait_idle` waits for it, at most twice
//!    `time_wait` (30 s by default).
//!
//! Dropping a [`Connection`] closes it gracefully *in the background*
//! (it finishes only while the runtime runs); dropping the last
//! [`Endpoint`] stops accepting, and its driver ends once its connections
//! are done. To give up instead, [`Connection::abort`] or
//! [`Endpoint::abort_all`] sends the peer a RST with your error code
//! ([`ErrorCode::INTERRUPTED`] when a signal stopped you), so that it
//! knows at once rather than after a timeout.
//!
//! A peer that vanishes is noticed, at a speed that depends on what this
//! side is doing (spec §4.7, §6.7; defaults of [`ConnectionConfig`]):
//!
//! - A connect to a port where nothing listens fails at once with
//!   `Refused` (from ICMP).
//! - A peer whose process died leaves a closed port, which answers with
//!   ICMP port unreachable; the connection ends with
//!   [`CloseReason::Unreachable`] on the second such error once nothing
//!   has been heard from the peer for an RTO. While this side sends data,
//!   that is about an RTO. An idle connection learns only when it next
//!   sends: its keep-alive goes after `keepalive_interval` (15 s) without
//!   sending, draws the first error, and a second keep-alive one RTO later
//!   confirms it, so it ends within about `keepalive_interval` plus an RTO
//!   of falling idle.
//! - A peer that no longer answers at all (frozen by SIGSTOP, its host
//!   gone, or no ICMP: the errors are read on Linux only) ends the
//!   connection with [`CloseReason::StallTimeout`] once data has been
//!   unacknowledged for `stall_timeout` (15 s), or, when idle, with
//!   [`CloseReason::IdleTimeout`] after `idle_timeout` (60 s) with nothing
//!   received.
//!
//! For faster detection, shorten these in
//! `Config::endpoint.connection`: a dead process is found within about
//! `keepalive_interval` and a silent one within `idle_timeout`. Each
//! keep-alive draws an ack that keeps a healthy idle connection open, so
//! keep `idle_timeout` a few times `keepalive_interval`.
//!
//! # Choosing a tokio runtime
//!
//! An endpoint's driver is a task on the runtime that bound it; your
//! tasks wake it and it wakes them. Which runtime serves best depends on
//! the work (measured on a 2-core machine, RESULTS §28):
//!
//! - **Bulk transfer on one connection** (a file, a backup stream): a
//!   current-thread runtime (`#[tokio::main(flavor = "current_thread")]`,
//!   as quinn's own bulk benchmark runs) keeps the driver and the task
//!   writing or reading on one thread, with no hand-off between threads.
//!   A gigabyte over loopback took 0.63–0.77 s (medians of five, in
//!   several sets) against 1.08 s on the multi-thread runtime with the
//!   work in `#[tokio::main]`'s body, with 30–45% less CPU per byte on
//!   each side.
//! - **Many small messages on one connection**: the multi-thread runtime.
//!   The task sending and the driver packing run on two cores at once
//!   (32-byte messages one at a time: 2.3 against 1.5 million a second;
//!   [`Streams::send_messages`], the batch call, does well on either).
//! - **Servers of many connections or sessions**: the multi-thread runtime,
//!   so that the application's work spreads over the cores beside the
//!   driver's.
//!
//! If you stay on the multi-thread runtime for a bulk connection whose
//! task does little per byte besides moving it, run that work in a
//! spawned task (`tokio::spawn`) rather than in `Runtime::block_on`'s
//! future, which `#[tokio::main]`'s body is: a task woken by the driver
//! then runs on the same worker, where `block_on`'s future always runs on
//! another thread (0.91 against 1.08 s for the gigabyte; in RESULTS §41,
//! 1,485–1,526 against 1,292–1,345 MB/s). A task with real work per byte
//! (reading and hashing a file, as `manyfold send` does) is better off
//! in `block_on`: there its work overlaps the driver's instead of taking
//! turns with it on one worker (`manyfold send` over a 1 Gbit/s emulated
//! link: 743–792 Mbit/s from `block_on`, 647–768 as a task).
//!
//! Public modules: [`config`] (settings, fault model), [`blocking`],
//! [`mcast`], [`qlog`] (trace files), [`spec`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod batch;
pub mod blocking;
pub mod config;
mod connection;
mod driver;
mod endpoint;
mod error;
mod fault;
mod group;
mod icmp;
mod inline;
pub mod mcast;
mod message;
mod message_batch;
mod pool;
pub mod qlog;
/// The protocol's specification, docs/spec.md, as shipped: the wire
/// format and state machines in the numbered sections (§N) that the rest
/// of this documentation cites.
///
// Plain Markdown written for readers of the repository too: its bracketed
// flag names ([FIN], [SCK]) are notation, not links.
#[allow(rustdoc::broken_intra_doc_links)]
#[doc = include_str!("../../../docs/spec.md")]
pub mod spec {}
mod session;
mod shared;
mod socket;
mod trace;

/// The reference-counted buffer messages travel in (the `bytes` crate's),
/// so that it can be named without depending on that crate.
pub use bytes::Bytes;
pub use config::{Config, DriverStats, FaultConfig, FaultStats};
pub use connection::{BatchSendError, Connection, Protection, RecvHalf, SendHalf, StreamIo, Streams};
pub use endpoint::{Endpoint, DEFAULT_SHUTDOWN_TIMEOUT};
pub use error::{
    close_reason, peer_close_text, CloseError, ConnectError, ConnectionError, PeerClose, ReadError, RequestError,
    SendError, WriteError,
};
pub use group::{Group, GroupError, Joined, PeerReader};
pub use inline::InlineStats;
pub use manyfold_proto::wire::chunk::MAX_CLOSE_REASON;
pub use manyfold_proto::wire::ErrorCode;
pub use manyfold_proto::{
    CloseReason, ConnStats, Destination, EndpointConfig, EndpointStats, Eviction, GroupConfig, GroupEvent, GroupStats,
    Left, MessageOptions, Mode, PathStats, PeerId, PeerState, PeerStats, SecurityConfig, SendLimits, StreamId,
    StreamItem, Unreachable, UnreachableKind,
};
pub use manyfold_proto::{CongestionAlgorithm, ConnectionConfig, EarlyData, Refusal, RefusalCause};
pub use message::IntoMessage;
pub use message_batch::{BatchItem, MessageBatch};
pub use pool::BufferPool;
pub use session::{HANDLER_FAILED, REQUEST_TOO_LARGE};
