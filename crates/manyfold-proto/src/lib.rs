//! manyfold-proto: the sans-IO protocol engine of manyfold (spec §1–§10).
//!
//! No sockets, threads, clock reads or global randomness live here. Every
//! call that changes state takes `now`; randomness comes from
//! [`EndpointConfig::seed`]. The engine is driven through an [`Endpoint`]
//! in this order (spec §2):
//!
//! 1. input: [`Endpoint::handle_datagram`] for each received datagram and
//!    [`Endpoint::handle_timeout`] once `now` has reached
//!    [`Endpoint::poll_timeout`];
//! 2. application commands: [`Endpoint::connect`], and on a connection
//!    ([`Endpoint::conn_mut`]) [`ConnMut::send`], [`ConnMut::recv`],
//!    [`ConnMut::close`], [`ConnMut::abort`], ...;
//! 3. output: [`Endpoint::poll_transmit`] until it returns `None`, then
//!    [`Endpoint::poll_event`] until `None`, then [`Endpoint::poll_timeout`]
//!    for the next deadline to sleep until.
//!
//! Any input or command may create work for step 3, so a driver runs step 3
//! after every batch of steps 1–2.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod congestion;
mod conn_handle;
mod connection;
mod endpoint;
pub mod group;
mod handshake;
mod ids;
pub mod mcast;
mod rangeset;
pub mod recovery;
mod ring;
pub mod secure;
mod seq;
mod timer;
pub mod wire;

pub use config::{CongestionAlgorithm, ConnectionConfig, EarlyData, EndpointConfig};
pub use conn_handle::ConnHandle;
pub use connection::qlog;
pub use connection::{
    CloseReason, ConnStats, Event, MessageOptions, PathStats, ReadItem, RecvError, SendError, SendLimits, State,
    StreamItem, UnreachableKind, INITIAL_STREAM_CREDIT,
};
pub use endpoint::{ConnMut, ConnRef, ConnectError, Endpoint, EndpointStats, Refusal, RefusalCause, Transmit};
pub use group::{
    Destination, Eviction, GroupConfig, GroupError, GroupEvent, GroupHandle, GroupStats, Left, Mode, PeerId, PeerState,
    PeerStats, Unreachable,
};
pub use ids::{ConnId, StreamId};
pub use qlog::{QlogData, QlogEvent};
pub use secure::SecurityConfig;

#[cfg(test)]
mod tests;
