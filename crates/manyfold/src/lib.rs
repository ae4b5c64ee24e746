//! manyfold: a reliable transport over UDP. This crate is the I/O driver on
//! tokio around the sans-IO engine in `manyfold-proto`, and the public APIs:
//! async ([`Endpoint`], [`Connection`]) and blocking ([`blocking`], in the
//! shape of librusp, paper 04 §2.2).
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
//! # Ok(()) }
//! ```
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
//!    lost last ack (a fraction of a second; spec §4.8). Then exit.
//!
//! Dropping a [`Connection`] closes it gracefully *in the background*
//! (it finishes only while the runtime runs); dropping the last
//! [`Endpoint`] stops accepting, and its driver ends once its connections
//! are done. To give up instead, [`Connection::abort`] or
//! [`Endpoint::abort_all`] sends the peer a RST with your error code
//! ([`ErrorCode::INTERRUPTED`] when a signal stopped you), so that it
//! knows at once rather than after a timeout.
//!
//! A peer that vanishes is noticed: a connect to a port where nothing
//! listens fails at once with `Refused` (from ICMP), a peer whose process
//! died is reported as [`CloseReason::Unreachable`] within about an RTO,
//! and data unacknowledged for `stall_timeout` (15 s) ends with
//! [`CloseReason::StallTimeout`] (spec §4.7, §6.7).
//!
//! Layout: [`config`] (settings, fault model), `driver` (the task that owns
//! the socket), `shared` (state behind the lock, waker dispatch), `socket`
//! (quinn-udp batching), `fault` (injection), `trace` (packet log), [`qlog`] (trace files),
//! `endpoint` / `connection` (async API), [`blocking`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod blocking;
pub mod config;
mod connection;
mod driver;
mod endpoint;
mod error;
mod fault;
mod group;
mod icmp;
pub mod mcast;
pub mod qlog;
mod session;
mod shared;
mod socket;
mod trace;

pub use config::{Config, DriverStats, FaultConfig, FaultStats};
pub use connection::{Connection, Protection, RecvHalf, SendHalf, StreamIo, Streams};
pub use endpoint::{Endpoint, DEFAULT_SHUTDOWN_TIMEOUT};
pub use error::ConnectionError;
pub use group::{Group, GroupError, Joined, PeerReader};
pub use manyfold_proto::wire::ErrorCode;
pub use manyfold_proto::{
    CloseReason, ConnStats, Destination, EndpointConfig, EndpointStats, Eviction, GroupConfig, GroupEvent, GroupStats,
    Left, MessageOptions, Mode, PeerId, PeerState, PeerStats, SecurityConfig, StreamItem, Unreachable,
};
pub use manyfold_proto::{CongestionAlgorithm, ConnectError, ConnectionConfig, PathStats, UnreachableKind};
pub use session::REQUEST_TOO_LARGE;
