//! The endpoint: every connection behind one socket, the listener's
//! stateless handshake, routing by connection id, RSTs for unknown
//! connections, and the timer and transmit queues that keep the cost per
//! call independent of the number of connections (spec §2, §6). Groups
//! (spec §14) live here too, over member connections: groups.rs.

mod groups;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{ConnectionConfig, EndpointConfig};
use crate::connection::{handshake_message, Security};
use crate::connection::{
    CloseReason, ConnStats, Connection, Event, MessageOptions, RecvError, SendError, State, StreamItem, UnreachableKind,
};
use crate::group::{Group, GroupEvent, GroupHandle};
use crate::handshake::{CookieBinding, ReplayCache, Secrets};
use crate::qlog::QlogEvent;
use crate::secure::{Handshake, Unprotect};
use crate::wire::{
    DecodeError, ErrorCode, Flags, HandshakeParams, Header, Packet, PacketType, PathPacket, HEADER_LEN, PATH_PACKET_LEN,
};

/// Names one connection of an endpoint. Stale handles (of a released
/// connection whose slot was reused) are detected by the generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnHandle {
    index: u32,
    generation: u32,
}

impl ConnHandle {
    /// A small integer unique among live connections (for logs and maps).
    pub fn index(self) -> u32 {
        self.index
    }

    #[cfg(test)]
    pub(crate) fn test(index: u32) -> Self {
        ConnHandle { index, generation: 0 }
    }
}

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
}

impl EndpointStats {
    /// All datagrams dropped as malformed, whatever the cause.
    pub fn dropped_malformed_total(&self) -> u64 {
        self.dropped_truncated + self.dropped_checksum + self.dropped_version + self.dropped_malformed
    }
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    conn: Option<Connection>,
    /// Deadline of this slot's live entry in the timer heap, if any; other
    /// entries for the slot are stale and skipped.
    scheduled: Option<Instant>,
    queued_for_transmit: bool,
    released: bool,
    /// The connection's memory as last counted in `buffered_total`.
    buffered: u64,
    /// A protected connection the engine holds until its handshake proves
    /// the peer (spec §19.2): the application knows nothing of it.
    held: bool,
    /// Its sends were refused at the memory limit (spec §7.5).
    waiting_for_memory: bool,
}

/// A datagram's source and length, for the stateless answer to it.
#[derive(Debug, Clone, Copy)]
struct Requester(SocketAddr, usize);

/// Most bytes a stateless answer may have per byte of the datagram it
/// answers (spec §6.6; QUIC's anti-amplification factor, RFC 9000 §8).
const AMPLIFICATION: usize = 3;

/// Most endpoint-generated packets (SYN-ACKs, RSTs) waiting to be sent.
const MAX_RESPONSES: usize = 4096;
/// Most cookies remembered against replay (~32 bytes each).
const REPLAY_CACHE_LIMIT: usize = 1 << 20;

/// The sans-IO endpoint. See the crate docs for the calling order.
#[derive(Debug)]
pub struct Endpoint {
    config: EndpointConfig,
    rng: ChaCha8Rng,
    /// Noise handshakes' randomness (spec §19.1), from `crypto_seed`.
    crypto_rng: rand_chacha::ChaCha20Rng,
    secrets: Secrets,
    listening: bool,
    slots: Vec<Slot>,
    free: Vec<u32>,
    live: usize,
    /// Our connection id -> slot (spec §6.1).
    by_id: HashMap<u32, u32>,
    /// (peer address, peer's connection id) -> slot, for RSTs from a peer
    /// that lost its state and for simultaneous open (spec §6.5, §4.3).
    by_peer: HashMap<(SocketAddr, u32), u32>,
    /// Connections in SYN-SENT by peer address, for simultaneous open.
    syn_sent: HashMap<SocketAddr, u32>,
    /// Connections held per peer IP address (spec §6.4).
    per_source: HashMap<IpAddr, usize>,
    timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    transmit_queue: VecDeque<u32>,
    responses: VecDeque<(SocketAddr, Vec<u8>)>,
    replay: ReplayCache,
    events: VecDeque<(ConnHandle, Event)>,
    /// Where a protected packet is opened (spec §19.3), kept to reuse its memory.
    opened: Vec<u8>,
    /// Bytes all connections hold (spec §7.5), and the connections whose
    /// sends were refused for it, to be told when room comes back.
    buffered_total: u64,
    memory_waiters: Vec<ConnHandle>,
    /// Connections' trace events (spec §18), oldest first.
    qlog: VecDeque<(ConnHandle, QlogEvent)>,
    accept_queue: VecDeque<ConnHandle>,
    reset_tokens: f64,
    reset_refill_at: Option<Instant>,
    stats: EndpointStats,
    /// Groups by id, and the group each member connection belongs to.
    groups: HashMap<u32, Group>,
    next_group: u32,
    member_of: HashMap<ConnHandle, u32>,
    /// Member connections' events, for their group to take (`run_groups`).
    group_inbox: VecDeque<(u32, ConnHandle, Event)>,
    group_events: VecDeque<(GroupHandle, GroupEvent)>,
}

impl Endpoint {
    /// An endpoint with `config`, created at `now`.
    pub fn new(config: EndpointConfig, now: Instant) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let crypto_rng = crate::secure::crypto_rng(config.seed, config.crypto_seed);
        let secrets = Secrets::new(&mut rng, now);
        Endpoint {
            reset_tokens: f64::from(config.max_resets_per_sec),
            config,
            rng,
            crypto_rng,
            secrets,
            listening: false,
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            by_id: HashMap::new(),
            by_peer: HashMap::new(),
            syn_sent: HashMap::new(),
            per_source: HashMap::new(),
            timers: BinaryHeap::new(),
            transmit_queue: VecDeque::new(),
            responses: VecDeque::new(),
            replay: ReplayCache::new(REPLAY_CACHE_LIMIT),
            events: VecDeque::new(),
            qlog: VecDeque::new(),
            opened: Vec::new(),
            buffered_total: 0,
            memory_waiters: Vec::new(),
            accept_queue: VecDeque::new(),
            reset_refill_at: None,
            stats: EndpointStats::default(),
            groups: HashMap::new(),
            next_group: 0,
            member_of: HashMap::new(),
            group_inbox: VecDeque::new(),
            group_events: VecDeque::new(),
        }
    }

    /// The endpoint's settings.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Accept (or stop accepting) new connections: the LISTEN state (spec §4.1).
    pub fn set_listening(&mut self, on: bool) {
        self.listening = on;
    }

    /// Whether it accepts connections (the LISTEN state, spec §4.1).
    pub fn is_listening(&self) -> bool {
        self.listening
    }

    /// Number of connection entries held, in any state (closed but
    /// unreleased ones included). A listener under a SYN flood keeps this at 0.
    pub fn connection_count(&self) -> usize {
        self.live
    }

    /// Endpoint-wide counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Bytes all connections hold, to send or received (spec §7.5).
    pub fn buffered_bytes(&self) -> u64 {
        self.buffered_total
    }

    /// Starts an active open (spec §4.2): sends a SYN and enters SYN-SENT.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> Result<ConnHandle, ConnectError> {
        self.connect_with(now, remote, self.config.connection.clone())
    }

    /// Like [`Endpoint::connect`], with settings of its own for this connection.
    pub fn connect_with(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        config: ConnectionConfig,
    ) -> Result<ConnHandle, ConnectError> {
        if remote.ip().is_unspecified() || remote.port() == 0 {
            return Err(ConnectError::InvalidAddress(remote));
        }
        if self.live >= self.config.max_connections {
            return Err(ConnectError::TooManyConnections(self.config.max_connections));
        }
        let local_id = self.fresh_id();
        let isn = self.secrets.isn(now, remote, (local_id, 0));
        let security = self.security(true);
        let conn = Connection::new_client(config, now, remote, local_id, isn, security);
        let h = self.insert(conn);
        self.syn_sent.insert(remote, h.index);
        self.touch(h.index, now);
        Ok(h)
    }

    /// A packet of connection `idx` from `from`, not its peer's address
    /// (spec §6.8): the connection decides whether it starts (or feeds) a
    /// path challenge and is processed.
    fn packet_on_new_path(&mut self, idx: u32, now: Instant, from: SocketAddr, p: &Packet, len: usize) -> bool {
        let token = self.rng.next_u64().to_le_bytes();
        let Some(c) = self.slots[idx as usize].conn.as_mut() else { return false };
        let take = c.on_new_path(now, from, p, len, token);
        if !take {
            self.stats.dropped_stale_path += 1;
        }
        self.touch(idx, now);
        take
    }

    /// A PATH packet (spec §6.8): a challenge to answer, or the answer to
    /// ours that moves the connection. Unknown ids are dropped unanswered.
    fn route_path(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let p = match PathPacket::parse(datagram) {
            Ok(p) => p,
            Err(e) => {
                self.count_decode_error(e);
                return;
            }
        };
        let Some(&idx) = self.by_id.get(&p.header.conn_id) else {
            self.stats.unknown_connection += 1;
            return;
        };
        let Some(c) = self.slots[idx as usize].conn.as_mut() else { return };
        c.on_path_packet(now, from, &p);
        if let Some(old) = c.take_moved_from() {
            let (new, rid) = (c.remote(), c.remote_id());
            if let Some(rid) = rid {
                if self.by_peer.get(&(old, rid)) == Some(&idx) {
                    self.by_peer.remove(&(old, rid));
                }
                self.by_peer.insert((new, rid), idx);
            }
            self.forget_source(old.ip());
            *self.per_source.entry(new.ip()).or_insert(0) += 1;
        }
        self.touch(idx, now);
    }

    /// Feeds an ICMP error about a datagram we sent (spec §6.7), as the
    /// driver read it from the socket's error queue: `destination` is where
    /// that datagram went and `quote` what the error quotes of it, our
    /// header first. It reaches a connection only if the quote names it by
    /// its ids and a sequence number it sent; anything else is counted in
    /// `icmp_ignored` and changes nothing.
    pub fn handle_icmp(&mut self, now: Instant, destination: SocketAddr, kind: UnreachableKind, quote: &[u8]) {
        self.stats.icmp_received += 1;
        let matched = self.icmp_target(destination, quote).filter(|&(idx, seq)| {
            self.slots[idx as usize].conn.as_mut().is_some_and(|c| c.handle_icmp(now, kind, seq))
        });
        match matched {
            Some((idx, _)) => {
                self.touch(idx, now);
                self.run_groups(now);
            }
            None => self.stats.icmp_ignored += 1,
        }
    }

    /// The connection an ICMP quote names, and the quoted sequence number.
    fn icmp_target(&self, destination: SocketAddr, quote: &[u8]) -> Option<(u32, u32)> {
        let h = Header::peek(quote)?;
        if !matches!(h.ptype, PacketType::Segment | PacketType::Protected) || h.flags.contains(Flags::RST) {
            return None;
        }
        if h.conn_id != 0 {
            return self.by_peer.get(&(destination, h.conn_id)).map(|&idx| (idx, h.seq));
        }
        // An initial SYN: its parameters carry the id we chose (spec §3.3.2).
        let idx = *self.syn_sent.get(&destination)?;
        let ours = quote.get(HEADER_LEN..HEADER_LEN + 4)?;
        let c = self.slot_conn(idx)?;
        (h.flags.contains(Flags::SYN) && ours == c.local_id().to_be_bytes()).then_some((idx, h.seq))
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
        for idx in 0..self.slots.len() as u32 {
            if let Some(c) = self.slots[idx as usize].conn.as_mut() {
                c.prepare_exit(now);
                self.touch(idx, now);
            }
        }
    }

    fn all_finished(&self, now: Instant, half_closed: bool) -> bool {
        self.responses.is_empty()
            && self.slots.iter().filter_map(|s| s.conn.as_ref()).all(|c| c.is_finished(now, half_closed))
    }

    /// Feeds one received datagram (spec §6.1). Malformed datagrams are
    /// dropped and counted; nothing here panics on any input.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.route_datagram(now, from, datagram);
        self.run_groups(now);
    }

    fn route_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        self.stats.datagrams_received += 1;
        if datagram.first().is_some_and(|b| b & 0x0f == PacketType::Protected as u8) {
            self.route_protected(now, from, datagram);
            return;
        }
        if datagram.first().is_some_and(|b| b & 0x0f == PacketType::Path as u8) {
            self.route_path(now, from, datagram);
            return;
        }
        let packet = match Packet::parse(datagram) {
            Ok(p) => p,
            Err(e) => {
                self.count_decode_error(e);
                tracing::trace!(%from, error = %e, "dropped malformed datagram");
                return;
            }
        };
        let h = &packet.header;
        if h.ptype != PacketType::Segment {
            self.stats.dropped_malformed += 1;
            return;
        }
        let flags = h.flags;

        // spec §6.1: route by our connection id.
        if h.conn_id != 0 {
            if let Some(&idx) = self.by_id.get(&h.conn_id) {
                // A CLOSED connection the application has not released yet
                // answers like an unknown one (spec §6.5).
                match self.slot_conn(idx) {
                    Some(c) if c.state() != State::Closed && c.remote() == from => {
                        self.deliver(idx, now, &packet, false);
                        return;
                    }
                    // spec §6.8: the peer's address changed. A protected
                    // connection moves only on protected packets; RSTs and
                    // SYNs never move anything.
                    Some(c)
                        if c.state() != State::Closed
                            && !c.is_protected()
                            && !flags.contains(Flags::RST)
                            && !flags.contains(Flags::SYN) =>
                    {
                        if self.packet_on_new_path(idx, now, from, &packet, datagram.len()) {
                            self.deliver(idx, now, &packet, false);
                        }
                        return;
                    }
                    // spec §4.6: it aborted and its RST, with the code that
                    // says why, is about to go: no codeless reset before it.
                    Some(c) if c.state() == State::Closed && !c.is_drained() && c.remote() == from => return,
                    _ => {}
                }
            }
            if flags.contains(Flags::RST) {
                // spec §6.5: a peer without state echoes the id we addressed it by.
                if let Some(&idx) = self.by_peer.get(&(from, h.conn_id)) {
                    self.deliver(idx, now, &packet, false);
                }
                return;
            }
            if packet.cookie.is_some() && !flags.contains(Flags::SYN) {
                self.handle_cookie_echo(now, from, &packet);
                return;
            }
            self.stats.unknown_connection += 1;
            self.send_reset(now, Requester(from, datagram.len()), h.conn_id, h.ack, None);
            return;
        }

        // conn_id 0: only an initial SYN may carry it.
        if !flags.contains(Flags::SYN) || flags.contains(Flags::ACK) || flags.contains(Flags::RST) {
            self.stats.dropped_malformed += 1;
            return;
        }
        let Some(params) = packet.params.filter(|p| p.conn_id != 0) else {
            self.stats.dropped_malformed += 1;
            return;
        };
        // spec §4.3: simultaneous open, both sides in SYN-SENT.
        if let Some(&idx) = self.syn_sent.get(&from) {
            self.deliver(idx, now, &packet, false);
            return;
        }
        let refusal = Requester(from, datagram.len());
        if !self.listening {
            self.stats.refused_not_listening += 1;
            self.send_reset(now, refusal, params.conn_id, h.seq.wrapping_add(1), Some(ErrorCode::REFUSED));
            return;
        }
        if self.accept_queue.len() >= self.config.accept_backlog || self.live >= self.config.max_connections {
            self.stats.refused_backlog += 1;
            self.send_reset(now, refusal, params.conn_id, h.seq.wrapping_add(1), Some(ErrorCode::REFUSED));
            return;
        }
        if self.conns_from(from) >= self.config.max_connections_per_source {
            self.stats.refused_per_source += 1;
            self.send_reset(now, refusal, params.conn_id, h.seq.wrapping_add(1), Some(ErrorCode::REFUSED));
            return;
        }
        // spec §19.2: no downgrade: protection on both sides or neither.
        if params.is_protected() != self.config.security.is_some() {
            self.stats.refused_protection += 1;
            let code = Some(ErrorCode::PROTECTION_MISMATCH);
            self.send_reset(now, refusal, params.conn_id, h.seq.wrapping_add(1), code);
            return;
        }
        self.send_syn_cookie(now, from, &packet, params);
    }

    /// spec §19.3: a protected packet is opened by its connection before
    /// anything else looks at it; one that does not open changes nothing.
    /// Unknown ones get no RST: a protected peer would not believe a plain one.
    fn route_protected(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let header = match Header::parse(datagram) {
            Ok(h) => h,
            Err(e) => {
                self.count_decode_error(e);
                return;
            }
        };
        let Some(&idx) = self.by_id.get(&header.conn_id) else {
            self.stats.unknown_connection += 1;
            return;
        };
        let mut opened = std::mem::take(&mut self.opened);
        let moved;
        let result = match self.slots[idx as usize].conn.as_mut() {
            Some(c) if c.state() != State::Closed => {
                moved = c.remote() != from;
                c.unprotect(datagram, &mut opened)
            }
            _ => {
                self.stats.unknown_connection += 1;
                self.opened = opened;
                return;
            }
        };
        match result {
            Ok(()) => match Packet::parse_opened(&opened) {
                Ok(p) if moved => {
                    if self.packet_on_new_path(idx, now, from, &p, datagram.len()) {
                        self.deliver(idx, now, &p, true);
                    }
                }
                Ok(p) => self.deliver(idx, now, &p, true),
                Err(e) => self.count_decode_error(e),
            },
            Err(Unprotect::Replayed) => self.stats.dropped_replayed += 1,
            Err(Unprotect::Forged | Unprotect::Malformed) => self.stats.dropped_unauthenticated += 1,
        }
        self.opened = opened;
    }

    /// spec §6.2: answer a SYN with a SYN-ACK carrying a cookie, keeping no state.
    fn send_syn_cookie(&mut self, now: Instant, from: SocketAddr, syn: &Packet, params: HandshakeParams) {
        let server_id = self.fresh_id();
        let client_isn = syn.header.seq;
        let server_isn = self.secrets.isn(now, from, (params.conn_id, server_id));
        let max_datagram =
            self.config.connection.max_datagram.min(params.max_datagram.max(crate::connection::MIN_DATAGRAM));
        let cookie = self.secrets.make_cookie(
            now,
            params.conn_id,
            params.max_datagram,
            CookieBinding { peer: from, client_isn, server_isn, server_id },
        );
        let mut p = Packet::bare(
            PacketType::Segment,
            Flags::SYN | Flags::ACK,
            params.conn_id,
            server_isn,
            client_isn.wrapping_add(1),
            crate::connection::advertised_window(crate::connection::initial_window(self.config.connection.recv_buffer)),
        );
        let features = if self.config.security.is_some() { HandshakeParams::PROTECTED } else { 0 };
        p.params = Some(HandshakeParams { conn_id: server_id, max_datagram, features });
        p.cookie = Some(cookie);
        self.stats.syn_cookies_sent += 1;
        self.queue_response(Requester(from, syn.len()), &p);
    }

    /// spec §6.2: a valid cookie echo creates the connection, ESTABLISHED.
    fn handle_cookie_echo(&mut self, now: Instant, from: SocketAddr, packet: &Packet) {
        let Some(cookie) = packet.cookie else { return };
        let h = &packet.header;
        let binding = CookieBinding {
            peer: from,
            client_isn: h.seq.wrapping_sub(1),
            server_isn: h.ack.wrapping_sub(1),
            server_id: h.conn_id,
        };
        if !h.flags.contains(Flags::ACK)
            || !self.secrets.check_cookie(now, self.config.cookie_lifetime, &cookie, &binding)
        {
            self.stats.cookies_rejected += 1;
            return;
        }
        let refusal = Requester(from, packet.len());
        if !self.listening {
            self.stats.refused_not_listening += 1;
            self.send_reset(now, refusal, cookie.client_id, h.seq.wrapping_add(1), Some(ErrorCode::REFUSED));
            return;
        }
        if self.accept_queue.len() >= self.config.accept_backlog || self.live >= self.config.max_connections {
            self.stats.refused_backlog += 1;
            self.send_reset(now, refusal, cookie.client_id, h.seq.wrapping_add(1), Some(ErrorCode::REFUSED));
            return;
        }
        if self.conns_from(from) >= self.config.max_connections_per_source {
            self.stats.refused_per_source += 1;
            self.send_reset(now, refusal, cookie.client_id, h.seq.wrapping_add(1), Some(ErrorCode::REFUSED));
            return;
        }
        if self.by_id.contains_key(&h.conn_id) || h.conn_id == 0 || cookie.client_id == 0 {
            // Our id collides with a live connection of another peer (a
            // 2^-32 event): drop; the client's echo retransmissions fail
            // alike until it gives up with RetransmitTimeout.
            self.stats.cookies_rejected += 1;
            return;
        }
        // spec §6.2: each cookie creates at most one connection.
        if !self.replay.admit(now, &cookie, self.config.cookie_lifetime, self.secrets.timestamp(now)) {
            self.stats.cookies_replayed += 1;
            return;
        }
        // spec §19.2: a protected listener takes only an echo that carries
        // the client's first handshake message, and a plain one none.
        let protected = self.config.security.is_some();
        if protected != handshake_message(packet).is_some() {
            self.stats.refused_protection += 1;
            let code = Some(ErrorCode::PROTECTION_MISMATCH);
            self.send_reset(now, refusal, cookie.client_id, h.seq.wrapping_add(1), code);
            return;
        }
        let security = self.security(false);
        let max_datagram = self.config.connection.max_datagram.min(cookie.client_max_datagram);
        let conn = Connection::new_server(
            self.config.connection.clone(),
            now,
            from,
            h.conn_id,
            cookie.client_id,
            binding.server_isn,
            binding.client_isn,
            max_datagram,
            // The cookie's age is the SYN-ACK round trip (ms resolution).
            std::time::Duration::from_millis(u64::from(self.secrets.timestamp(now).wrapping_sub(cookie.timestamp))),
            security,
        );
        let handle = self.insert(conn);
        self.stats.connections_accepted += 1;
        if protected {
            // spec §19.2: the engine holds it until its handshake proves
            // the peer; then its Incoming event queues it for accept().
            // Closed before that, it is freed unseen (released).
            let slot = &mut self.slots[handle.index as usize];
            slot.held = true;
            slot.released = true;
        } else {
            self.accept_queue.push_back(handle);
            self.events.push_back((handle, Event::Incoming));
        }
        // The echo itself is the client's first sequenced packet: let the
        // connection process it like any other (it may carry data, or the
        // first handshake message).
        self.deliver(handle.index, now, packet, false);
    }

    /// Takes the next connection a listener accepted, if any.
    pub fn accept(&mut self) -> Option<ConnHandle> {
        self.accept_queue.pop_front()
    }

    /// Advances timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.connection_timeouts(now);
        self.run_groups(now);
        self.group_timeouts(now);
    }

    fn connection_timeouts(&mut self, now: Instant) {
        while let Some(&Reverse((t, idx, gen))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let slot = &mut self.slots[idx as usize];
            if slot.generation != gen || slot.scheduled != Some(t) {
                continue; // stale entry
            }
            slot.scheduled = None;
            if let Some(c) = slot.conn.as_mut() {
                c.handle_timeout(now);
            }
            self.touch(idx, now);
        }
    }

    /// The earliest deadline of any connection or group.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let groups = self.groups.values().filter_map(|g| g.poll_timeout()).min();
        while let Some(&Reverse((t, idx, gen))) = self.timers.peek() {
            let slot = &self.slots[idx as usize];
            if slot.generation == gen && slot.scheduled == Some(t) {
                return Some(groups.map_or(t, |g| g.min(t)));
            }
            self.timers.pop();
        }
        groups
    }

    /// Writes the next datagram(s) to send into `buf` (cleared first). Up to
    /// `max_datagrams` datagrams of one connection are batched for GSO.
    pub fn poll_transmit(&mut self, now: Instant, max_datagrams: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        if let Some((to, bytes)) = self.responses.pop_front() {
            buf.extend_from_slice(&bytes);
            return Some(Transmit { destination: to, size: bytes.len(), segment_size: None });
        }
        while let Some(idx) = self.transmit_queue.pop_front() {
            self.slots[idx as usize].queued_for_transmit = false;
            let Some(conn) = self.slots[idx as usize].conn.as_mut() else {
                continue;
            };
            // spec §6.8: a path challenge or response goes alone, to its own address.
            if conn.path_due(now) {
                buf.resize(PATH_PACKET_LEN, 0);
                if let Some((destination, size)) = conn.poll_path(now, buf) {
                    buf.truncate(size);
                    self.mark(idx);
                    self.touch_timers_and_events(idx, now);
                    return Some(Transmit { destination, size, segment_size: None });
                }
                buf.clear();
            }
            // spec §2: a batch is datagrams of one size (the first one's), the
            // last possibly shorter; the connection never writes more than the
            // room it is given, and declines what does not fit.
            let mut count = 0;
            let mut segment = conn.wire_max_datagram() as usize;
            while count < max_datagrams.max(1) {
                let start = buf.len();
                buf.resize(start + segment, 0);
                match conn.poll_transmit(now, &mut buf[start..]) {
                    Some(n) => {
                        buf.truncate(start + n);
                        count += 1;
                        if count == 1 {
                            segment = n;
                        } else if n < segment {
                            break;
                        }
                    }
                    None => {
                        buf.truncate(start);
                        break;
                    }
                }
            }
            let destination = conn.remote();
            if count == 0 {
                self.touch_timers_and_events(idx, now);
                self.run_groups(now);
                continue;
            }
            // It may have more: back of the queue, round-robin between connections.
            self.mark(idx);
            self.touch_timers_and_events(idx, now);
            self.run_groups(now);
            return Some(Transmit { destination, size: buf.len(), segment_size: (count > 1).then_some(segment) });
        }
        None
    }

    /// The next application event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnHandle, Event)> {
        self.events.pop_front()
    }

    /// The next trace event of any connection, oldest first (spec §18; only
    /// with [`crate::ConnectionConfig::qlog`] set).
    pub fn poll_qlog(&mut self) -> Option<(ConnHandle, QlogEvent)> {
        self.qlog.pop_front()
    }

    /// Runs `f` on connection `h` and marks it for output.
    fn with_conn<R>(&mut self, h: ConnHandle, f: impl FnOnce(&mut Connection) -> R) -> Option<R> {
        let r = f(self.conn_mut(h)?);
        self.account(h.index);
        self.mark(h.index);
        Some(r)
    }

    /// spec §7.5: recounts a connection's memory in the endpoint's total,
    /// and tells those who waited for room when there is some again.
    fn account(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        let memory = slot.conn.as_ref().map_or(0, Connection::memory);
        self.buffered_total = self.buffered_total - slot.buffered + memory;
        slot.buffered = memory;
        if !self.memory_waiters.is_empty() && self.buffered_total < self.config.max_buffered_bytes / 8 * 7 {
            for w in std::mem::take(&mut self.memory_waiters) {
                let Some(slot) = self.slots.get_mut(w.index as usize) else { continue };
                if slot.generation == w.generation && slot.waiting_for_memory {
                    slot.waiting_for_memory = false;
                    self.events.push_back((w, Event::Writable));
                }
            }
        }
    }

    /// Queues application data on stream 0, the connection's byte stream
    /// (spec §7). Returns how many bytes were taken: fewer than offered
    /// when the send buffer is full, 0 when it has no room.
    pub fn send(&mut self, h: ConnHandle, data: &[u8]) -> Result<usize, SendError> {
        self.stream_send(h, 0, data)
    }

    /// Reads stream 0 in order. `Ok(Some(0))` is the end of the peer's
    /// stream (its FIN, after all data); `Ok(None)` means nothing yet.
    pub fn recv(&mut self, h: ConnHandle, buf: &mut [u8]) -> Result<Option<usize>, RecvError> {
        self.stream_recv(h, 0, buf)
    }

    /// Queues bytes on `stream`, opening it if new (spec §13). Takes
    /// nothing (`Ok(0)`, `Writable` follows) while the endpoint is at its
    /// memory limit (spec §7.5).
    pub fn stream_send(&mut self, h: ConnHandle, stream: u16, data: &[u8]) -> Result<usize, SendError> {
        if self.refuse_for_memory(h) && !data.is_empty() {
            self.stats.sends_refused_memory += 1;
            return Ok(0);
        }
        // No further past the limit than what the limit leaves.
        let room = self.config.max_buffered_bytes.saturating_sub(self.buffered_total);
        let data = &data[..data.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        self.with_conn(h, |c| c.send(stream, data)).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// spec §7.5: whether the endpoint is at its memory limit; if so, `h`
    /// is told (`Writable`) when it no longer is.
    fn refuse_for_memory(&mut self, h: ConnHandle) -> bool {
        if self.buffered_total < self.config.max_buffered_bytes || self.conn(h).is_none() {
            return false;
        }
        let slot = &mut self.slots[h.index as usize];
        if !slot.waiting_for_memory {
            slot.waiting_for_memory = true;
            self.memory_waiters.push(h);
        }
        true
    }

    /// Reads `stream`'s bytes in order, across message boundaries.
    pub fn stream_recv(&mut self, h: ConnHandle, stream: u16, buf: &mut [u8]) -> Result<Option<usize>, RecvError> {
        self.with_conn(h, |c| c.recv(stream, buf)).unwrap_or(Err(RecvError::UnknownConnection))
    }

    /// Queues one whole message on `stream` (spec §13.5): all of it, or
    /// nothing and an error ([`SendError::Blocked`] when the send buffer
    /// has no room for it yet).
    pub fn send_message(
        &mut self,
        h: ConnHandle,
        now: Instant,
        stream: u16,
        data: &[u8],
        opts: MessageOptions,
    ) -> Result<(), SendError> {
        if self.refuse_for_memory(h) {
            self.stats.sends_refused_memory += 1;
            return Err(SendError::Blocked);
        }
        self.with_conn(h, |c| c.send_message(now, stream, data, opts)).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// The next whole message, abandoned-message notice or end of any
    /// stream, streams taking turns (spec §13.5); `Ok(None)`: nothing yet.
    pub fn recv_message(&mut self, h: ConnHandle) -> Result<Option<(u16, StreamItem)>, RecvError> {
        self.with_conn(h, |c| c.recv_message(None)).unwrap_or(Err(RecvError::UnknownConnection))
    }

    /// Whether the peer has finished the connection and every message and
    /// stream event was taken (the end for [`Endpoint::recv_message`]).
    pub fn messages_done(&self, h: ConnHandle) -> bool {
        self.conn(h).is_some_and(|c| c.messages_done())
    }

    /// Whether `stream` has delivered its end or reset (the end for
    /// [`Endpoint::recv_message_on`]).
    pub fn stream_done(&self, h: ConnHandle, stream: u16) -> bool {
        self.conn(h).is_some_and(|c| c.stream_done(stream))
    }

    /// Like [`Endpoint::recv_message`], for one stream.
    pub fn recv_message_on(&mut self, h: ConnHandle, stream: u16) -> Result<Option<StreamItem>, RecvError> {
        let r = self.with_conn(h, |c| c.recv_message(Some(stream))).unwrap_or(Err(RecvError::UnknownConnection));
        r.map(|o| o.map(|(_, item)| item))
    }

    /// Ends our side of `stream` after what is queued on it (stream FIN).
    pub fn finish_stream(&mut self, h: ConnHandle, stream: u16) -> Result<(), SendError> {
        self.with_conn(h, |c| c.finish_stream(stream)).unwrap_or(Err(SendError::UnknownConnection))
    }

    /// Abandons our side of `stream`: queued data is dropped and the peer
    /// reads [`StreamItem::Reset`] with `code` (spec §13.9).
    pub fn reset_stream(&mut self, h: ConnHandle, stream: u16, code: u16) {
        self.with_conn(h, |c| c.reset_stream(stream, code));
    }

    /// Asks the peer to stop sending on `stream`; it resets its side with `code`.
    pub fn stop_stream(&mut self, h: ConnHandle, stream: u16, code: u16) {
        self.with_conn(h, |c| c.stop_stream(stream, code));
    }

    /// Scheduling of `stream` (spec §13.10): lower `priority` goes first;
    /// among equals, `weight` chunks per round-robin turn.
    pub fn set_stream_priority(&mut self, h: ConnHandle, stream: u16, priority: u8, weight: u16) {
        self.with_conn(h, |c| c.set_stream_priority(stream, priority, weight));
    }

    /// Whether anything queued on `stream` is not yet acknowledged
    /// (`wait_for_send`, paper 00 §4.2.7). False once the connection closed.
    pub fn stream_pending(&self, h: ConnHandle, stream: u16) -> bool {
        self.conn(h).is_some_and(|c| c.stream_pending(stream))
    }

    /// Graceful close of our sending side (spec §4.4): a FIN follows the data
    /// already queued; we keep receiving until the peer finishes too (half-close).
    pub fn close(&mut self, h: ConnHandle) {
        if let Some(c) = self.conn_mut(h) {
            c.close();
            self.mark(h.index);
        }
    }

    /// Abortive close: sends RST with `code` and discards everything.
    pub fn abort(&mut self, h: ConnHandle, now: Instant, code: ErrorCode) {
        if let Some(c) = self.conn_mut(h) {
            c.abort(code);
            self.mark(h.index);
            self.touch(h.index, now);
        }
    }

    /// The application no longer holds `h`. Its state is freed once the
    /// connection is CLOSED (immediately if it already is).
    pub fn release(&mut self, h: ConnHandle) {
        let Some(slot) = self.slots.get_mut(h.index as usize) else {
            return;
        };
        if slot.generation != h.generation || slot.conn.is_none() {
            return;
        }
        slot.released = true;
        if let Some(c) = slot.conn.as_mut() {
            c.on_released();
        }
        self.mark(h.index);
        self.reap(h.index);
    }

    /// The connection's state (spec §4), `None` for an unknown handle.
    pub fn state(&self, h: ConnHandle) -> Option<State> {
        self.conn(h).map(|c| c.state())
    }

    /// The peer's address now (it follows a migration, spec §6.8).
    pub fn remote_addr(&self, h: ConnHandle) -> Option<SocketAddr> {
        self.conn(h).map(|c| c.remote())
    }

    /// The connection's counters.
    pub fn conn_stats(&self, h: ConnHandle) -> Option<ConnStats> {
        self.conn(h).map(|c| c.stats())
    }

    /// Why the connection closed, once it has.
    /// Whether the connection protects its packets (spec §19).
    pub fn is_protected(&self, h: ConnHandle) -> bool {
        self.conn(h).is_some_and(Connection::is_protected)
    }

    /// The static public key the peer proved in its handshake (spec §19.2).
    pub fn peer_key(&self, h: ConnHandle) -> Option<[u8; 32]> {
        self.conn(h).and_then(Connection::peer_key)
    }

    /// How the connection ended, once it has.
    pub fn close_reason(&self, h: ConnHandle) -> Option<CloseReason> {
        self.conn(h).and_then(|c| c.close_reason())
    }

    /// Bytes `send` (stream 0) would take now: none while the endpoint is
    /// at its memory limit (then `Writable` follows when it no longer is).
    pub fn send_capacity(&mut self, h: ConnHandle) -> usize {
        if self.refuse_for_memory(h) {
            return 0;
        }
        self.conn(h).map_or(0, |c| c.stream_capacity(0))
    }

    // ---- internals -------------------------------------------------------

    fn conn(&self, h: ConnHandle) -> Option<&Connection> {
        let slot = self.slots.get(h.index as usize)?;
        (slot.generation == h.generation).then_some(())?;
        slot.conn.as_ref()
    }

    fn conn_mut(&mut self, h: ConnHandle) -> Option<&mut Connection> {
        let slot = self.slots.get_mut(h.index as usize)?;
        (slot.generation == h.generation).then_some(())?;
        slot.conn.as_mut()
    }

    fn slot_conn(&self, idx: u32) -> Option<&Connection> {
        self.slots.get(idx as usize)?.conn.as_ref()
    }

    fn handle_of(&self, idx: u32) -> ConnHandle {
        ConnHandle { index: idx, generation: self.slots[idx as usize].generation }
    }

    /// A connection's handshake state, if this endpoint protects its
    /// connections (spec §19), seeded from the endpoint's RNG.
    fn security(&mut self, initiator: bool) -> Option<Box<Security>> {
        let config = self.config.security.as_ref()?;
        let mut seed = [0u8; 32];
        self.crypto_rng.fill_bytes(&mut seed);
        Some(Security::new(Handshake::new(config, initiator, seed), initiator))
    }

    fn fresh_id(&mut self) -> u32 {
        loop {
            let id = self.rng.next_u32();
            if id != 0 && !self.by_id.contains_key(&id) {
                return id;
            }
        }
    }

    fn insert(&mut self, conn: Connection) -> ConnHandle {
        let local_id = conn.local_id();
        let idx = match self.free.pop() {
            Some(i) => {
                let slot = &mut self.slots[i as usize];
                slot.generation = slot.generation.wrapping_add(1);
                slot.conn = Some(conn);
                slot.scheduled = None;
                slot.queued_for_transmit = false;
                slot.released = false;
                slot.held = false;
                slot.waiting_for_memory = false;
                i
            }
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    conn: Some(conn),
                    scheduled: None,
                    queued_for_transmit: false,
                    released: false,
                    buffered: 0,
                    held: false,
                    waiting_for_memory: false,
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.live += 1;
        if let Some(c) = self.slots[idx as usize].conn.as_ref() {
            *self.per_source.entry(c.remote().ip()).or_insert(0) += 1;
        }
        self.by_id.insert(local_id, idx);
        if let Some(remote_id) = self.slots[idx as usize].conn.as_ref().and_then(|c| c.remote_id()) {
            let remote = self.slots[idx as usize].conn.as_ref().map(|c| c.remote()).expect("just inserted");
            self.by_peer.insert((remote, remote_id), idx);
        }
        self.handle_of(idx)
    }

    fn deliver(&mut self, idx: u32, now: Instant, packet: &Packet, protected: bool) {
        let Some(conn) = self.slots[idx as usize].conn.as_mut() else {
            return;
        };
        let had_remote_id = conn.remote_id();
        conn.set_memory_pressure(self.buffered_total >= self.config.max_buffered_bytes);
        conn.handle_packet(now, packet, protected);
        let remote = conn.remote();
        // A connection learns its peer's id from the peer's SYN or SYN-ACK.
        if had_remote_id.is_none() {
            if let Some(rid) = conn.remote_id() {
                self.by_peer.insert((remote, rid), idx);
            }
        }
        // spec §4.3: until synchronized, a retransmitted id-0 SYN of the
        // peer must still reach this connection, not the listener.
        if !matches!(conn.state(), State::SynSent | State::SynReceived) && self.syn_sent.get(&remote) == Some(&idx) {
            self.syn_sent.remove(&remote);
        }
        self.touch(idx, now);
    }

    /// Marks a connection as possibly having something to send.
    fn mark(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        if slot.conn.is_some() && !slot.queued_for_transmit {
            slot.queued_for_transmit = true;
            self.transmit_queue.push_back(idx);
        }
    }

    /// After any input to a connection: queue it for transmit, refresh its
    /// timer entry, collect its events, and free it if it is done.
    fn touch(&mut self, idx: u32, now: Instant) {
        self.mark(idx);
        self.touch_timers_and_events(idx, now);
    }

    fn touch_timers_and_events(&mut self, idx: u32, now: Instant) {
        let handle = self.handle_of(idx);
        let slot = &mut self.slots[idx as usize];
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        while let Some(ev) = conn.poll_event() {
            if ev == Event::Incoming {
                // spec §19.2: a protected connection proved its peer.
                slot.held = false;
                slot.released = false;
                self.accept_queue.push_back(handle);
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
            match self.member_of.get(&handle) {
                Some(&g) => self.group_inbox.push_back((g, handle, ev)),
                None => self.events.push_back((handle, ev)),
            }
        }
        for ev in conn.drain_qlog(now) {
            if self.qlog.len() < self.config.max_qlog_events {
                self.qlog.push_back((handle, ev));
            } else {
                self.stats.qlog_dropped += 1;
            }
        }
        // A heap entry is pushed only when the deadline moves earlier: a
        // later deadline leaves the old entry, which fires early, finds
        // nothing due and reschedules. The heap thus stays near one entry
        // per connection although the keep-alive moves with every packet.
        if let Some(t) = conn.poll_timeout() {
            if slot.scheduled.is_none_or(|s| t < s) {
                slot.scheduled = Some(t);
                self.timers.push(Reverse((t, idx, slot.generation)));
            }
        }
        self.account(idx);
        self.reap(idx);
    }

    /// Frees a connection that is CLOSED, released, and has nothing left to send.
    fn reap(&mut self, idx: u32) {
        let slot = &mut self.slots[idx as usize];
        let done = slot.released && slot.conn.as_ref().is_some_and(|c| c.is_drained());
        if !done {
            return;
        }
        let conn = slot.conn.take().expect("checked above");
        slot.scheduled = None;
        self.buffered_total -= std::mem::take(&mut slot.buffered);
        self.live -= 1;
        self.forget_source(conn.remote().ip());
        self.by_id.remove(&conn.local_id());
        if let Some(rid) = conn.remote_id() {
            if self.by_peer.get(&(conn.remote(), rid)) == Some(&idx) {
                self.by_peer.remove(&(conn.remote(), rid));
            }
        }
        if self.syn_sent.get(&conn.remote()) == Some(&idx) {
            self.syn_sent.remove(&conn.remote());
        }
        // The index may still sit in the transmit queue; a reused slot is
        // simply polled once more, which is harmless.
        self.free.push(idx);
    }

    /// One connection fewer with a peer at `ip` (spec §6.4).
    fn forget_source(&mut self, ip: IpAddr) {
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.per_source.entry(ip) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    fn count_decode_error(&mut self, e: DecodeError) {
        match e {
            DecodeError::Truncated | DecodeError::TrailingBytes => self.stats.dropped_truncated += 1,
            DecodeError::Checksum => self.stats.dropped_checksum += 1,
            DecodeError::Version(_) => self.stats.dropped_version += 1,
            _ => self.stats.dropped_malformed += 1,
        }
    }

    /// spec §6.5: RST (optionally with a refusal code) to a peer we hold no
    /// state for, rate-limited by a token bucket.
    fn send_reset(&mut self, now: Instant, to: Requester, conn_id: u32, seq: u32, code: Option<ErrorCode>) {
        let rate = f64::from(self.config.max_resets_per_sec);
        if let Some(last) = self.reset_refill_at {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.reset_tokens = (self.reset_tokens + dt * rate).min(rate.max(1.0));
        }
        self.reset_refill_at = Some(now);
        if self.reset_tokens < 1.0 {
            self.stats.resets_suppressed += 1;
            return;
        }
        self.reset_tokens -= 1.0;
        let mut p = Packet::bare(PacketType::Segment, Flags::RST, conn_id, seq, 0, 0);
        p.error = code;
        self.stats.resets_sent += 1;
        self.queue_response(to, &p);
    }

    /// Queues a stateless answer to a datagram of `to.1` bytes from `to.0`:
    /// at most [`AMPLIFICATION`] times its size, since that address is not
    /// validated (spec §6.6).
    fn queue_response(&mut self, to: Requester, p: &Packet) {
        if p.len() > AMPLIFICATION * to.1 {
            self.stats.amplification_refused += 1;
            return;
        }
        if self.responses.len() >= MAX_RESPONSES {
            self.stats.responses_dropped += 1;
            return;
        }
        let mut v = vec![0u8; p.len()];
        p.emit(&mut v);
        self.responses.push_back((to.0, v));
    }

    /// Connections held with peers at `from`'s IP address (spec §6.4).
    fn conns_from(&self, from: SocketAddr) -> usize {
        self.per_source.get(&from.ip()).copied().unwrap_or(0)
    }
}
