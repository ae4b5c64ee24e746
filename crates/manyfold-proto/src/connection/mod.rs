//! One connection's state: the state machine (spec §4), sending and
//! receiving (spec §5, §7), timers, events.

mod types;

pub use types::{CloseReason, ConnStats, Event, RecvError, SendError, State};

use std::net::SocketAddr;
use std::time::Instant;

use crate::config::ConnectionConfig;
use crate::wire::{ErrorCode, Packet};

/// Smallest datagram a peer may announce; smaller values are raised to it.
pub(crate) const MIN_DATAGRAM: u16 = 576;

/// The window field for a receive buffer of `bytes` (spec §3.1: bytes, saturating).
pub(crate) fn advertised_window(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

#[derive(Debug)]
pub(crate) struct Connection {
    config: ConnectionConfig,
    remote: SocketAddr,
    local_id: u32,
    remote_id: Option<u32>,
    state: State,
}

#[allow(clippy::todo, unused_variables)]
impl Connection {
    pub fn new_client(config: ConnectionConfig, now: Instant, remote: SocketAddr, local_id: u32, isn: u32) -> Self {
        todo!()
    }
    #[allow(clippy::too_many_arguments)]
    pub fn new_server(
        config: ConnectionConfig,
        now: Instant,
        remote: SocketAddr,
        local_id: u32,
        remote_id: u32,
        isn: u32,
        peer_isn: u32,
        max_datagram: u16,
    ) -> Self {
        todo!()
    }
    pub fn remote(&self) -> SocketAddr {
        self.remote
    }
    pub fn local_id(&self) -> u32 {
        self.local_id
    }
    pub fn remote_id(&self) -> Option<u32> {
        self.remote_id
    }
    pub fn state(&self) -> State {
        self.state
    }
    pub fn max_datagram(&self) -> u16 {
        todo!()
    }
    pub fn handle_packet(&mut self, now: Instant, p: &Packet) {
        todo!()
    }
    pub fn handle_timeout(&mut self, now: Instant) {
        todo!()
    }
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        todo!()
    }
    pub fn poll_timeout(&self) -> Option<Instant> {
        todo!()
    }
    pub fn poll_event(&mut self) -> Option<Event> {
        todo!()
    }
    pub fn send(&mut self, data: &[u8]) -> Result<usize, SendError> {
        todo!()
    }
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<Option<usize>, RecvError> {
        todo!()
    }
    pub fn close(&mut self) {
        todo!()
    }
    pub fn abort(&mut self, now: Instant, code: ErrorCode) {
        todo!()
    }
    pub fn stats(&self) -> ConnStats {
        todo!()
    }
    pub fn close_reason(&self) -> Option<CloseReason> {
        todo!()
    }
    pub fn send_capacity(&self) -> usize {
        todo!()
    }
    pub fn is_drained(&self) -> bool {
        todo!()
    }
}
