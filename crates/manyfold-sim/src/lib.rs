//! Deterministic network simulator for manyfold, with virtual time (spec §11).
//!
//! A [`World`] holds nodes, each a `manyfold_proto::Endpoint` at an
//! address, joined by per-direction links ([`LinkConfig`]: loss, delay,
//! jitter, reordering, duplication, corruption, a rate-limited bottleneck
//! with a bounded queue, MTU). All randomness comes from one seed; time
//! advances from event to event and nothing ever sleeps, so a test that
//! spans minutes of protocol time runs in milliseconds and repeats exactly.
//!
//! Modules: [`time`] (clock, event queue), [`link`] (one direction of a
//! path), [`net`] (the links), [`world`] (nodes driven on the network),
//! [`transfer`] (a verified bulk transfer for tests), [`mcast`] (a multicast
//! session: one sender, many receivers, per-receiver links).

#![forbid(unsafe_code)]

pub mod link;
pub mod mcast;
pub mod net;
pub mod time;
pub mod transfer;
pub mod world;

pub use link::{Arrival, LinkConfig, LinkStats};
pub use net::Network;
pub use time::{Clock, EventQueue};
pub use transfer::{pattern, Sink, Source, Transfer, TransferReport};
pub use world::{Captured, LoggedEvent, LoggedGroupEvent, NodeStats, Verdict, World};
