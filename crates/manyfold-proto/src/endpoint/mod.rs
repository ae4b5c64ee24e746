//! The endpoint (spec §2, §6): every connection behind one socket, and the
//! calls a driver makes on them, in the order the crate docs give. It owns
//! no protocol rule itself; each concern is a file of its own:
//!
//! - table.rs: the connection table and the maps that find a connection
//!   (spec §6.1, §6.4);
//! - route.rs: each datagram to its connection, ICMP errors, path
//!   changes (spec §6.1, §6.5, §6.7, §6.8, §19.3);
//! - listener.rs: the stateless cookie handshake, RSTs and the limits on
//!   stateless answers (spec §6.2–§6.6);
//! - schedule.rs: the timer heap and the transmit queue that keep the cost
//!   per call independent of the number of connections (spec §2);
//! - memory.rs: the endpoint-wide memory limit (spec §7.5);
//! - conn.rs: the application's view of one connection ([`ConnRef`],
//!   [`ConnMut`]): each call forwards to it once;
//! - members.rs: the endpoint as host of its groups (spec §14), which run
//!   in group/host.rs;
//! - peers.rs: what it remembers of each peer between connections, its
//!   tokens and its round trip (spec §5.4.1, §6.9).

mod conn;
mod early;
mod listener;
mod members;
mod memory;
mod peers;
mod route;
mod schedule;
mod table;

pub use conn::{ConnMut, ConnRef};
pub use listener::{Refusal, RefusalCause};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{ConnectionConfig, EndpointConfig};
use crate::conn_handle::ConnHandle;
use crate::connection::{CloseReason, Connection, Event, Security, Spare};
use crate::group::host::Groups;
use crate::qlog::QlogEvent;
use crate::secure::Handshake;
use crate::wire::{PayloadCrcs, PATH_PACKET_LEN};
use listener::Listener;
use memory::Memory;
use schedule::Schedule;
use table::Table;

/// One or more datagrams written contiguously into the caller's buffer, all
/// to one destination. With `segment_size` set, the buffer holds several
/// datagrams of that size (the last may be shorter): one GSO send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where the datagrams go.
    pub destination: SocketAddr,
    /// Bytes written into the buffer.
    pub size: usize,
    /// Size of each datagram when there are several (GSO); `None`: one datagram.
    pub segment_size: Option<usize>,
}

/// Makes `buf` at least `len` bytes long; what it held stays (scratch).
pub(crate) fn room(buf: &mut Vec<u8>, len: usize) {
    if buf.len() < len {
        buf.resize(len, 0);
    }
}

/// Why [`Endpoint::connect`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    #[error("endpoint holds its maximum number of connections ({0})")]
    /// The endpoint holds its `max_connections`.
    TooManyConnections(usize),
    #[error("cannot connect to an unspecified address or port 0: {0}")]
    /// The address is unspecified or its port 0.
    InvalidAddress(SocketAddr),
}

/// Endpoint-wide counters (spec §3.5, §6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Datagrams passed to `handle_datagram`.
    pub datagrams_received: u64,
    /// Datagrams `poll_transmit_gather` gave in two pieces, the large DATA
    /// payload not copied (spec §7.2).
    pub datagrams_gathered: u64,
    /// Of those, datagrams whose payload's checksum was not computed again:
    /// a group member's copy of a payload another member already got
    /// (spec §14.4).
    pub payload_crcs_reused: u64,
    /// Datagrams dropped because they failed to decode, by cause.
    pub dropped_truncated: u64,
    /// Dropped: bad checksum.
    pub dropped_checksum: u64,
    /// Dropped: unknown version.
    pub dropped_version: u64,
    /// Dropped: malformed.
    pub dropped_malformed: u64,
    /// Well-formed packets for no connection we know (answered by RST).
    pub unknown_connection: u64,
    /// SYN-ACKs sent with a cookie (spec §6.2).
    pub syn_cookies_sent: u64,
    /// Cookie echoes refused (bad MAC, expired, or malformed).
    pub cookies_rejected: u64,
    /// Echoes of a cookie that already created a connection (spec §6.2).
    pub cookies_replayed: u64,
    /// RSTs sent.
    pub resets_sent: u64,
    /// RSTs or refusals we did not send because of the rate limit.
    pub resets_suppressed: u64,
    /// SYN-ACKs or RSTs dropped because the response queue was full.
    pub responses_dropped: u64,
    /// SYNs refused because the accept backlog was full.
    pub refused_backlog: u64,
    /// Refusals not kept for [`Endpoint::poll_refusal`]: its queue was
    /// full (256 untaken).
    pub refusals_unreported: u64,
    /// SYNs refused because the endpoint was not listening.
    pub refused_not_listening: u64,
    /// Connections that reached `accept`.
    pub connections_accepted: u64,
    /// SYNs and echoes refused because their source address already held
    /// `max_connections_per_source` connections (spec §6.4).
    pub refused_per_source: u64,
    /// Stateless answers not sent because they would exceed three times
    /// the datagram they answer (spec §6.6).
    pub amplification_refused: u64,
    /// SYNs and echoes refused because one side protects its packets and
    /// the other does not (spec §19.2).
    pub refused_protection: u64,
    /// Protected packets that failed authentication (spec §19.3).
    pub dropped_unauthenticated: u64,
    /// Protected packets whose packet number was seen before (spec §19.3).
    pub dropped_replayed: u64,
    /// Protected connections a listener held whose handshake failed
    /// authentication (another PSK, a key not among the known peers), and
    /// those that ended otherwise before proving the peer (most often its
    /// `connect_timeout`): neither reached `accept()` (spec §19.2).
    pub handshakes_failed: u64,
    /// Handshakes given up before they completed (no answer within `connect_timeout`).
    pub handshakes_abandoned: u64,
    /// Sends refused because the endpoint held `max_buffered_bytes` (spec §7.5).
    pub sends_refused_memory: u64,
    /// Trace events dropped because [`EndpointConfig::max_qlog_events`]
    /// were waiting for [`Endpoint::poll_qlog`] (spec §18).
    pub qlog_dropped: u64,
    /// ICMP errors the driver passed in (spec §6.7), and of those the ones
    /// that named no connection of ours by their quote (short quotes,
    /// unknown ids, sequence numbers we never sent): ignored.
    pub icmp_received: u64,
    /// ICMP errors ignored (no connection of ours quoted).
    pub icmp_ignored: u64,
    /// Packets of a known connection from a new address dropped because
    /// they could not start a path challenge: an old sequence number, or
    /// a connection not synchronized (spec §6.8).
    pub dropped_stale_path: u64,
    /// Address-validation tokens handed out on SYN-ACKs (spec §6.9).
    pub tokens_sent: u64,
    /// Tokens presented on SYNs that were bad (another listener's, another
    /// address's) or expired: those SYNs ran the full handshake.
    pub tokens_rejected: u64,
    /// SYNs whose data was taken at once: 0-RTT connections (spec §6.9).
    pub early_accepted: u64,
    /// SYNs with a good token whose first packet the replay window had
    /// seen (or whose token was below its floor): they ran the full
    /// handshake, and their data was not taken (spec §6.9).
    pub early_replayed: u64,
}

impl EndpointStats {
    /// All datagrams dropped as malformed, whatever the cause.
    pub fn dropped_malformed_total(&self) -> u64 {
        self.dropped_truncated + self.dropped_checksum + self.dropped_version + self.dropped_malformed
    }
}

/// The sans-IO endpoint. See the crate docs for the calling order.
#[derive(Debug)]
pub struct Endpoint {
    config: EndpointConfig,
    /// `config.connection`, shared by every connection made with it: an
    /// idle connection does not carry its own copy (spec §15.3).
    conn_config: Arc<ConnectionConfig>,
    rng: ChaCha8Rng,
    /// Noise handshakes' randomness (spec §19.1), from `crypto_seed`.
    crypto_rng: rand_chacha::ChaCha20Rng,
    table: Table,
    listener: Listener,
    schedule: Schedule,
    memory: Memory,
    /// Connections' events for the application, oldest first.
    events: VecDeque<(ConnHandle, Event)>,
    /// Connections' trace events (spec §18), oldest first.
    qlog: VecDeque<(ConnHandle, QlogEvent)>,
    /// Where a protected packet is opened (spec §19.3), kept to reuse its memory.
    opened: Vec<u8>,
    stats: EndpointStats,
    groups: Groups,
    /// Checksums of payloads a group sends to each of its members, computed
    /// once (spec §14.4); `None` only while lent to a connection.
    payload_crcs: Option<Box<PayloadCrcs>>,
    /// As a client: the latest token of each server (spec §6.9).
    tokens: peers::PeerMap<crate::wire::Token>,
    /// Each peer's round trip as finished connections left it (spec §5.4.1).
    rtts: peers::RttMemory,
    /// What finished connections left for new ones (issue 21, spec §15.3),
    /// at most `config.max_spare_connections`.
    spares: Vec<Spare>,
    /// The datagram being routed, when handed over owned
    /// ([`Endpoint::handle_datagram_owned`]).
    rx_source: Option<Bytes>,
}

impl Endpoint {
    /// An endpoint with `config`, created at `now`.
    pub fn new(config: EndpointConfig, now: Instant) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let crypto_rng = crate::secure::crypto_rng(config.seed, config.crypto_seed);
        let listener = Listener::new(&config, &mut rng, now);
        let tokens = peers::PeerMap::new(config.max_tokens);
        let rtts = peers::RttMemory::new(config.max_peer_rtts, config.peer_rtt_lifetime);
        Endpoint {
            memory: Memory::new(config.max_buffered_bytes),
            conn_config: Arc::new(config.connection.clone()),
            config,
            rng,
            crypto_rng,
            table: Table::default(),
            listener,
            schedule: Schedule::default(),
            events: VecDeque::new(),
            qlog: VecDeque::new(),
            opened: Vec::new(),
            stats: EndpointStats::default(),
            groups: Groups::default(),
            payload_crcs: Some(Box::default()),
            tokens,
            rtts,
            spares: Vec::new(),
            rx_source: None,
        }
    }

    /// The endpoint's settings.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Accept (or stop accepting) new connections: the LISTEN state (spec §4.1).
    pub fn set_listening(&mut self, on: bool) {
        self.listener.set_listening(on);
    }

    /// Whether it accepts connections (the LISTEN state, spec §4.1).
    pub fn is_listening(&self) -> bool {
        self.listener.is_listening()
    }

    /// Number of connection entries held, in any state (closed but
    /// unreleased ones included). A listener under a SYN flood keeps this at 0.
    pub fn connection_count(&self) -> usize {
        self.table.live()
    }

    /// Endpoint-wide counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Bytes all connections hold, to send or received (spec §7.5).
    pub fn buffered_bytes(&self) -> u64 {
        self.memory.total()
    }

    /// Starts an active open (spec §4.2): sends a SYN and enters SYN-SENT.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> Result<ConnHandle, ConnectError> {
        self.connect_sharing(now, remote, self.conn_config.clone())
    }

    /// Like [`Endpoint::connect`], with settings of its own for this connection.
    pub fn connect_with(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        config: ConnectionConfig,
    ) -> Result<ConnHandle, ConnectError> {
        self.connect_sharing(now, remote, Arc::new(config))
    }

    fn connect_sharing(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        config: Arc<ConnectionConfig>,
    ) -> Result<ConnHandle, ConnectError> {
        if remote.ip().is_unspecified() || remote.port() == 0 {
            return Err(ConnectError::InvalidAddress(remote));
        }
        if self.table.live() >= self.config.max_connections {
            return Err(ConnectError::TooManyConnections(self.config.max_connections));
        }
        let local_id = self.table.fresh_id(&mut self.rng);
        let isn = self.listener.secrets.isn(now, remote, (local_id.wire(), 0));
        let security = self.security(true);
        let spare = self.spares.pop();
        let mut conn = Connection::new_client(config, now, remote, local_id, isn, security, spare);
        if self.config.reuse_tokens && self.config.security.is_none() {
            conn.use_tokens(self.tokens.get(remote).copied());
        }
        self.recall_rtt(now, &mut conn);
        let h = self.table.insert(conn);
        self.table.note_syn_sent(remote, h.index());
        self.touch(h.index(), now);
        Ok(h)
    }

    /// Whether this endpoint, as a client that reuses tokens, holds one
    /// from the server at `server` (spec §6.9).
    pub fn has_token(&self, server: SocketAddr) -> bool {
        self.tokens.get(server).is_some()
    }

    /// Takes the next connection a listener accepted, if any.
    pub fn accept(&mut self) -> Option<ConnHandle> {
        self.listener.accept_queue.pop_front()
    }

    /// Whether the process may exit without stranding a peer (spec §4.8):
    /// every connection is closed with its RST sent, or lingered in
    /// TIME-WAIT long enough to answer a peer whose last ack was lost, and
    /// no stateless answer waits. Drivers poll it before exiting.
    pub fn is_idle(&self, now: Instant) -> bool {
        self.all_finished(now, true)
    }

    /// [`Endpoint::is_idle`] without counting FIN-WAIT-2 as finished: a
    /// shutdown that closed everything waits for the peers' FINs too.
    pub fn is_closed_down(&self, now: Instant) -> bool {
        self.all_finished(now, false)
    }

    /// The process means to exit once [`Endpoint::is_idle`] says so (spec
    /// §4.8): connections in TIME-WAIT, and those that enter it from now
    /// on, send their final ack twice more, unasked.
    pub fn prepare_exit(&mut self, now: Instant) {
        for idx in 0..self.table.slot_count() {
            if let Some(c) = self.table.at_mut(idx) {
                c.prepare_exit(now);
                self.touch(idx, now);
            }
        }
    }

    fn all_finished(&self, now: Instant, half_closed: bool) -> bool {
        self.listener.is_quiet() && self.table.conns().all(|c| c.is_finished(now, half_closed))
    }

    // ---- input (spec §2, step 1) ------------------------------------------

    /// Feeds one received datagram (spec §6.1). Malformed datagrams are
    /// dropped and counted; nothing here panics on any input.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.route_datagram(now, from, datagram);
        self.run_groups(now);
    }

    /// [`Endpoint::handle_datagram`] of a datagram the caller hands over:
    /// a large in-order piece of stream data is then kept as a slice of it
    /// until the application reads it, instead of copied (spec §7.2). A
    /// kept slice holds at least half of its datagram, so a caller that
    /// passes only datagrams filling at least half of their allocation
    /// keeps memory within about four times what is buffered; small
    /// datagrams in large buffers are better passed to `handle_datagram`.
    pub fn handle_datagram_owned(&mut self, now: Instant, from: SocketAddr, datagram: Bytes) {
        self.rx_source = Some(datagram.clone());
        self.route_datagram(now, from, &datagram);
        self.rx_source = None;
        self.run_groups(now);
    }

    /// Advances timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(idx) = self.schedule.pop_due(now, &mut self.table) {
            if let Some(c) = self.table.at_mut(idx) {
                c.handle_timeout(now);
            }
            self.touch(idx, now);
        }
        self.run_groups(now);
        crate::group::host::handle_timeout(self, now);
    }

    // ---- output (spec §2, step 3) -----------------------------------------

    /// The earliest deadline of any connection or group.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let groups = self.groups.next_deadline();
        match self.schedule.next_deadline(&self.table) {
            Some(t) => Some(groups.map_or(t, |g| g.min(t))),
            None => groups,
        }
    }

    /// Writes the next datagram(s) to send into the first
    /// [`Transmit::size`] bytes of `buf`. Up to `max_datagrams` datagrams of
    /// one connection are batched for GSO. `buf` is scratch: it is grown as
    /// needed and never shrunk, so that its memory is not zeroed again for
    /// every datagram (3% of a bulk sender's CPU); read only `buf[..size]`.
    pub fn poll_transmit(&mut self, now: Instant, max_datagrams: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.next_transmit(now, max_datagrams, buf, false).map(|(t, _)| t)
    }

    /// [`Endpoint::poll_transmit`] for a caller that can send a datagram in
    /// two pieces (spec §7.2; `sendmsg` with two iovecs): a datagram whose
    /// last DATA chunk carries at least 32 KiB may come with that payload
    /// left out of `buf` and returned here, not copied. The datagram is then
    /// `buf[..size - tail.len()]` followed by `tail`, alone (no
    /// `segment_size`); its checksum covers both pieces.
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<(Transmit, Option<Bytes>)> {
        self.next_transmit(now, max_datagrams, buf, true)
    }

    fn next_transmit(
        &mut self,
        now: Instant,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
        gather: bool,
    ) -> Option<(Transmit, Option<Bytes>)> {
        // A group's members share their payloads' checksums (spec §14.4).
        if let Some(memo) = self.payload_crcs.as_mut() {
            memo.fit(self.groups.member_count(), self.groups.releases());
        }
        if let Some((to, bytes)) = self.listener.poll_response() {
            let size = bytes.len();
            room(buf, size);
            buf[..size].copy_from_slice(&bytes);
            self.listener.recycle(bytes);
            return Some((Transmit { destination: to, size, segment_size: None }, None));
        }
        while let Some(idx) = self.schedule.next_to_transmit(&mut self.table) {
            let Some(conn) = self.table.at_mut(idx) else {
                continue;
            };
            // spec §6.8: a path challenge or response goes alone, to its own address.
            if conn.path_due(now) {
                room(buf, PATH_PACKET_LEN);
                if let Some((destination, size)) = conn.poll_path(now, &mut buf[..PATH_PACKET_LEN]) {
                    self.mark(idx);
                    self.touch_timers_and_events(idx, now);
                    return Some((Transmit { destination, size, segment_size: None }, None));
                }
            }
            // Lent to the connection for a gathered datagram (taken, so
            // that a datagram sent whole takes nothing).
            let mut lent = if gather { self.payload_crcs.take() } else { None };
            let (count, segment, size, tail) = schedule::fill_batch(conn, now, max_datagrams, buf, &mut lent);
            if lent.is_some() {
                self.payload_crcs = lent;
            }
            let destination = conn.remote();
            if count > 0 {
                // It may have more: back of the queue, round-robin between connections.
                self.mark(idx);
            }
            self.touch_timers_and_events(idx, now);
            self.run_groups(now);
            if count > 0 {
                self.stats.datagrams_gathered += u64::from(tail.is_some());
                self.stats.payload_crcs_reused = self.payload_crcs.as_ref().map_or(0, |m| m.hits);
                return Some((Transmit { destination, size, segment_size: (count > 1).then_some(segment) }, tail));
            }
        }
        None
    }

    /// The next peer the listener turned away, oldest first (spec §6.4):
    /// what a server logs, with the peer's address. At most 256 wait;
    /// later ones are counted in `refusals_unreported` only.
    pub fn poll_refusal(&mut self) -> Option<Refusal> {
        self.listener.refusals.pop_front()
    }

    /// The next application event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnHandle, Event)> {
        self.events.pop_front()
    }

    /// Whether application events wait for [`Endpoint::poll_event`]: a
    /// read that freed room under the memory limit (spec §7.5) queues
    /// `Writable` for the connections refused, which only a driver's pass
    /// delivers.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The next trace event of any connection, oldest first (spec §18; only
    /// with [`crate::ConnectionConfig::qlog`] set).
    pub fn poll_qlog(&mut self) -> Option<(ConnHandle, QlogEvent)> {
        self.qlog.pop_front()
    }

    // ---- internals ---------------------------------------------------------

    /// A connection's handshake state, if this endpoint protects its
    /// connections (spec §19), seeded from the endpoint's RNG.
    fn security(&mut self, initiator: bool) -> Option<Box<Security>> {
        let config = self.config.security.as_ref()?;
        let mut seed = [0u8; 32];
        self.crypto_rng.fill_bytes(&mut seed);
        Some(Security::new(Handshake::new(config, initiator, seed), initiator))
    }

    /// Runs `f` on connection `h` and marks it for output.
    fn with_conn<R>(&mut self, h: ConnHandle, f: impl FnOnce(&mut Connection) -> R) -> Option<R> {
        let r = f(self.table.get_mut(h)?);
        self.account(h.index());
        self.mark(h.index());
        Some(r)
    }

    /// Marks a connection as possibly having something to send.
    fn mark(&mut self, idx: u32) {
        self.schedule.mark(idx, self.table.slot_mut(idx));
    }

    /// spec §7.5: recounts a connection's memory in the endpoint's total.
    fn account(&mut self, idx: u32) {
        self.memory.account(idx, &mut self.table, &mut self.events);
    }

    /// After any input to a connection: queue it for transmit, refresh its
    /// timer entry, collect its events, and free it if it is done.
    fn touch(&mut self, idx: u32, now: Instant) {
        self.mark(idx);
        self.touch_timers_and_events(idx, now);
    }

    fn touch_timers_and_events(&mut self, idx: u32, now: Instant) {
        let handle = self.table.handle_of(idx);
        let slot = self.table.slot_mut(idx);
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        while let Some(ev) = conn.poll_event() {
            if ev == Event::Incoming {
                // spec §19.2: a protected connection proved its peer.
                slot.held = false;
                slot.released = false;
                self.listener.accept_queue.push_back(handle);
            } else if slot.held {
                // Nothing of a held connection reaches the application;
                // how its handshake ended is counted (spec §19.2).
                if let Event::Closed(reason) = ev {
                    if reason == CloseReason::AuthenticationFailed {
                        self.stats.handshakes_failed += 1;
                    } else {
                        self.stats.handshakes_abandoned += 1;
                    }
                }
                continue;
            }
            if let Some(ev) = self.groups.take_event(handle, ev) {
                self.events.push_back((handle, ev));
            }
        }
        for ev in conn.drain_qlog(now) {
            if self.qlog.len() < self.config.max_qlog_events {
                self.qlog.push_back((handle, ev));
            } else {
                self.stats.qlog_dropped += 1;
            }
        }
        if let Some(t) = conn.poll_timeout() {
            self.schedule.arm(idx, slot, t);
        }
        self.account(idx);
        self.reap(idx);
    }

    /// Frees a connection that is CLOSED, released, and has nothing left
    /// to send; its emptied containers wait for the next connection, at
    /// most [`EndpointConfig::max_spare_connections`] of them (issue 21).
    /// Its round trip goes to the endpoint's memory of the peer first
    /// (spec §5.4.1).
    fn reap(&mut self, idx: u32) {
        if let Some(c) = self.table.slot_mut(idx).conn.as_mut() {
            if let Some((report, at)) = c.take_rtt_report() {
                self.rtts.learn(at, c.remote(), report);
            }
        }
        let room = self.spares.len() < self.config.max_spare_connections;
        if let Some((buffered, conn)) = self.table.reap(idx) {
            self.memory.forget(buffered);
            if let Some(spare) = conn.into_spare().filter(|_| room) {
                self.spares.push(spare);
            }
        } else if let Some(spare) = self.table.slot_mut(idx).conn.as_mut().and_then(|c| c.shed_for_time_wait()) {
            // A released TIME-WAIT's containers (spec §15.3), kept if
            // there is room, freed otherwise: either way it holds none.
            if room {
                self.spares.push(spare);
            }
        }
    }

    /// spec §5.4.1: a new connection starts from what earlier ones to the
    /// same peer measured.
    fn recall_rtt(&self, now: Instant, conn: &mut Connection) {
        if let Some((srtt, rttvar)) = self.rtts.get(now, conn.remote()) {
            conn.remember_rtt(srtt, rttvar);
        }
    }

    /// Finished connections held for reuse now (spec §15.3).
    pub fn spare_connections(&self) -> usize {
        self.spares.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ErrorCode;

    /// An endpoint with `max_spare_connections` set to `max` after `n`
    /// connections were opened and aborted together.
    fn after_burst(max: usize, n: usize) -> (Endpoint, Instant) {
        let now = Instant::now();
        let cfg = EndpointConfig { seed: 1, max_spare_connections: max, ..EndpointConfig::default() };
        let mut ep = Endpoint::new(cfg, now);
        let server = SocketAddr::from(([198, 18, 0, 2], 4433));
        let handles: Vec<ConnHandle> = (0..n).map(|_| ep.connect(now, server).expect("connect")).collect();
        let mut buf = Vec::new();
        while ep.poll_transmit(now, 1, &mut buf).is_some() {}
        for &h in &handles {
            ep.conn_mut(h).abort(now, ErrorCode::APPLICATION);
            ep.conn_mut(h).release();
            assert!(ep.spare_connections() <= max, "never more than the setting");
        }
        while ep.poll_transmit(now, 1, &mut buf).is_some() {
            assert!(ep.spare_connections() <= max, "never more than the setting");
        }
        assert_eq!(ep.connection_count(), 0, "all reaped");
        (ep, now)
    }

    #[test]
    fn the_spare_pool_never_holds_more_than_max_spare_connections() {
        assert_eq!(EndpointConfig::default().max_spare_connections, 256);
        for (max, n) in [(256, 296), (5, 40), (40, 5)] {
            let (mut ep, now) = after_burst(max, n);
            assert_eq!(ep.spare_connections(), max.min(n), "max {max}, {n} finished");
            // New connections take from it, and work as any.
            let server = SocketAddr::from(([198, 18, 0, 3], 4433));
            let h = ep.connect(now, server).expect("connect");
            assert_eq!(ep.spare_connections(), max.min(n) - 1);
            let mut buf = Vec::new();
            assert!(ep.poll_transmit(now, 1, &mut buf).is_some(), "its SYN goes");
            assert_eq!(ep.conn(h).state(), Some(crate::State::SynSent));
        }
    }

    #[test]
    fn max_spare_connections_zero_keeps_no_spare_and_connections_still_work() {
        let (mut ep, now) = after_burst(0, 20);
        assert_eq!(ep.spare_connections(), 0);
        let h = ep.connect(now, SocketAddr::from(([198, 18, 0, 3], 4433))).expect("connect");
        let mut buf = Vec::new();
        assert!(ep.poll_transmit(now, 1, &mut buf).is_some(), "its SYN goes");
        assert_eq!(ep.conn(h).state(), Some(crate::State::SynSent));
    }
}
