//! The listener (spec §6.2–§6.6): the stateless cookie handshake that
//! creates a connection only when a client echoes a valid cookie, the
//! secrets behind cookies and initial sequence numbers (§6.3), the limits
//! on what a listener takes (§6.4), RSTs for unknown connections with
//! their rate limit (§6.5), and the anti-amplification bound on every
//! stateless answer (§6.6).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand_chacha::ChaCha8Rng;

use super::{Endpoint, EndpointStats};
use crate::config::EarlyData;
use crate::config::EndpointConfig;
use crate::conn_handle::ConnHandle;
use crate::connection::{handshake_message, Connection, Event};
use crate::handshake::{CookieBinding, EarlyReplay, ReplayCache, Secrets};
use crate::ids::ConnId;
use crate::wire::{Echo, ErrorCode, Flags, HandshakeParams, Packet, PacketType, SackBlock};

/// Most bytes a stateless answer may have per byte of the datagram it
/// answers (spec §6.6; QUIC's anti-amplification factor, RFC 9000 §8).
const AMPLIFICATION: usize = 3;
/// Most endpoint-generated packets (SYN-ACKs, RSTs) waiting to be sent.
const MAX_RESPONSES: usize = 4096;
/// Most cookies remembered against replay (~32 bytes each).
const REPLAY_CACHE_LIMIT: usize = 1 << 20;
/// Buffers of sent stateless answers kept for the next ones, so that a
/// SYN-ACK or RST allocates nothing once the listener is warm.
const SPARE_RESPONSES: usize = 64;
/// Refusals kept for [`Endpoint::poll_refusal`]; more are counted only.
const MAX_REFUSALS: usize = 256;

/// Why the listener turned a peer away (spec §6.2, §6.4, §19.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalCause {
    /// The accept backlog or the connection table was full.
    Backlog,
    /// The peer's address already held `max_connections_per_source`.
    PerSource,
    /// One side protects its packets and the other does not.
    Protection,
    /// Its cookie echo failed the MAC or had expired.
    CookieRejected,
    /// Its cookie had already created a connection (a replay).
    CookieReplayed,
}

impl std::fmt::Display for RefusalCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusalCause::Backlog => "accept backlog full",
            RefusalCause::PerSource => "too many connections from its address",
            RefusalCause::Protection => "encryption mismatch (one side plain)",
            RefusalCause::CookieRejected => "bad or expired cookie",
            RefusalCause::CookieReplayed => "replayed cookie",
        })
    }
}

/// A peer the listener turned away, for a server's log (spec §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// Where its SYN or cookie echo came from.
    pub peer: SocketAddr,
    /// Why.
    pub cause: RefusalCause,
}

/// A datagram's source and length, for the stateless answer to it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Requester(pub SocketAddr, pub usize);

/// The listener's state: everything it keeps is bounded, and nothing of
/// it belongs to one client until a cookie echo creates the connection.
#[derive(Debug)]
pub(super) struct Listener {
    listening: bool,
    /// Cookie and ISN secrets (spec §6.2, §6.3).
    pub secrets: Secrets,
    replay: ReplayCache,
    /// First packets of 0-RTT connections, against their replay (spec §6.9).
    pub early_replay: EarlyReplay,
    /// Stateless answers (SYN-ACKs, RSTs) waiting to be sent.
    responses: VecDeque<(SocketAddr, Vec<u8>)>,
    /// Buffers of answers already sent, for reuse (at most [`SPARE_RESPONSES`]).
    spare: Vec<Vec<u8>>,
    /// The RST token bucket (spec §6.5).
    reset_rate: f64,
    reset_tokens: f64,
    reset_refill_at: Option<Instant>,
    /// Connections accepted and not yet taken by the application.
    pub accept_queue: VecDeque<ConnHandle>,
    /// Peers turned away, oldest first, at most [`MAX_REFUSALS`].
    pub refusals: VecDeque<Refusal>,
}

impl Listener {
    pub fn new(config: &EndpointConfig, rng: &mut ChaCha8Rng, now: Instant) -> Self {
        Listener {
            listening: false,
            secrets: Secrets::new(rng, now),
            replay: ReplayCache::new(REPLAY_CACHE_LIMIT),
            early_replay: EarlyReplay::new(match config.early_data {
                EarlyData::ReplayWindow(n) => n,
                _ => 1,
            }),
            responses: VecDeque::new(),
            spare: Vec::new(),
            reset_rate: f64::from(config.max_resets_per_sec),
            reset_tokens: f64::from(config.max_resets_per_sec),
            reset_refill_at: None,
            accept_queue: VecDeque::new(),
            refusals: VecDeque::new(),
        }
    }

    /// Remembers a refused peer for the application's log; past
    /// [`MAX_REFUSALS`] untaken ones it is only counted.
    fn note_refusal(&mut self, peer: SocketAddr, cause: RefusalCause, stats: &mut EndpointStats) {
        if self.refusals.len() < MAX_REFUSALS {
            self.refusals.push_back(Refusal { peer, cause });
        } else {
            stats.refusals_unreported += 1;
        }
    }

    pub fn set_listening(&mut self, on: bool) {
        self.listening = on;
    }

    pub fn is_listening(&self) -> bool {
        self.listening
    }

    /// Whether no stateless answer waits.
    pub fn is_quiet(&self) -> bool {
        self.responses.is_empty()
    }

    /// The next stateless answer to send; hand its buffer back with
    /// [`Listener::recycle`] once copied.
    pub fn poll_response(&mut self) -> Option<(SocketAddr, Vec<u8>)> {
        self.responses.pop_front()
    }

    /// Keeps a sent answer's buffer for the next answer.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE_RESPONSES {
            self.spare.push(buf);
        }
    }

    /// spec §6.5: RST (optionally with a refusal code) to a peer we hold no
    /// state for, rate-limited by a token bucket.
    pub fn send_reset(
        &mut self,
        now: Instant,
        to: Requester,
        (conn_id, seq): (u32, u32),
        code: Option<ErrorCode>,
        stats: &mut EndpointStats,
    ) {
        let rate = self.reset_rate;
        if let Some(last) = self.reset_refill_at {
            let dt = now.saturating_duration_since(last).as_secs_f64();
            self.reset_tokens = (self.reset_tokens + dt * rate).min(rate.max(1.0));
        }
        self.reset_refill_at = Some(now);
        if self.reset_tokens < 1.0 {
            stats.resets_suppressed += 1;
            return;
        }
        self.reset_tokens -= 1.0;
        let mut p = Packet::bare(PacketType::Segment, Flags::RST, conn_id, seq, 0, 0);
        p.error = code;
        stats.resets_sent += 1;
        self.queue_response(to, &p, stats);
    }

    /// Queues a stateless answer to a datagram of `to.1` bytes from `to.0`:
    /// at most [`AMPLIFICATION`] times its size, since that address is not
    /// validated (spec §6.6).
    pub(super) fn queue_response(&mut self, to: Requester, p: &Packet, stats: &mut EndpointStats) {
        if p.len() > AMPLIFICATION * to.1 {
            stats.amplification_refused += 1;
            return;
        }
        if self.responses.len() >= MAX_RESPONSES {
            stats.responses_dropped += 1;
            return;
        }
        let mut v = self.spare.pop().unwrap_or_default();
        v.clear();
        v.resize(p.len(), 0);
        p.emit(&mut v);
        self.responses.push_back((to.0, v));
    }
}

impl Endpoint {
    /// A datagram with connection id 0: only an initial SYN may carry it.
    pub(super) fn handle_initial_syn(&mut self, now: Instant, from: SocketAddr, packet: &Packet, len: usize) {
        let h = &packet.header;
        let flags = h.flags;
        if !flags.contains(Flags::SYN) || flags.contains(Flags::ACK) || flags.contains(Flags::RST) {
            self.stats.dropped_malformed += 1;
            return;
        }
        let Some(params) = packet.params.filter(|p| p.conn_id != 0) else {
            self.stats.dropped_malformed += 1;
            return;
        };
        // spec §4.3: simultaneous open, both sides in SYN-SENT.
        if let Some(idx) = self.table.syn_sent(from) {
            self.deliver(idx, now, packet, false);
            return;
        }
        // spec §6.9: a 0-RTT SYN again: the connection it created owes
        // its SYN-ACK.
        if let Some(idx) = self.early_connection(from, packet, params) {
            self.deliver(idx, now, packet, false);
            return;
        }
        let refusal = Requester(from, len);
        let answer = (params.conn_id, h.seq.wrapping_add(1));
        if self.refused(now, refusal, answer) {
            return;
        }
        // spec §19.2: no downgrade: protection on both sides or neither.
        if params.is_protected() != self.config.security.is_some() {
            self.stats.refused_protection += 1;
            self.listener.note_refusal(from, RefusalCause::Protection, &mut self.stats);
            let code = Some(ErrorCode::PROTECTION_MISMATCH);
            self.listener.send_reset(now, refusal, answer, code, &mut self.stats);
            return;
        }
        if self.take_early(now, from, packet, params) {
            return;
        }
        self.send_syn_cookie(now, from, packet, params);
    }

    /// spec §6.4: a SYN or cookie echo the listener may not take now is
    /// refused with a RST carrying REFUSED (`answer`: its id and sequence
    /// number). Returns whether it was.
    fn refused(&mut self, now: Instant, to: Requester, answer: (u32, u32)) -> bool {
        let stats = &mut self.stats;
        if !self.listener.is_listening() {
            stats.refused_not_listening += 1;
        } else if self.listener.accept_queue.len() >= self.config.accept_backlog
            || self.table.live() >= self.config.max_connections
        {
            stats.refused_backlog += 1;
            self.listener.note_refusal(to.0, RefusalCause::Backlog, stats);
        } else if self.table.conns_from(to.0) >= self.config.max_connections_per_source {
            stats.refused_per_source += 1;
            self.listener.note_refusal(to.0, RefusalCause::PerSource, stats);
        } else {
            return false;
        }
        self.listener.send_reset(now, to, answer, Some(ErrorCode::REFUSED), stats);
        true
    }

    /// spec §6.2: answer a SYN with a SYN-ACK carrying a cookie, keeping no state.
    fn send_syn_cookie(&mut self, now: Instant, from: SocketAddr, syn: &Packet, params: HandshakeParams) {
        let server_id = self.table.fresh_id(&mut self.rng);
        let client_isn = syn.header.seq;
        let secrets = &self.listener.secrets;
        let server_isn = secrets.isn(now, from, (params.conn_id, server_id.wire()));
        // spec §3.3.2: what we accept; the connection's sizes come from both.
        let max_datagram = self.config.connection.max_accepted_datagram();
        let binding = CookieBinding { peer: from, client_isn, server_isn, server_id };
        let cookie = secrets.make_cookie(now, params.conn_id, params.max_datagram, binding);
        let mut p = Packet::bare(
            PacketType::Segment,
            Flags::SYN | Flags::ACK,
            params.conn_id,
            server_isn,
            client_isn.wrapping_add(1),
            crate::connection::advertised_window(crate::connection::initial_window(self.config.connection.recv_buffer)),
        );
        let features = HandshakeParams::local_features(self.config.security.is_some());
        p.params = Some(HandshakeParams { conn_id: server_id.wire(), max_datagram, features });
        p.cookie = Some(cookie);
        p.token = self.token_for(now, from, params);
        // spec §5.4.2: it names the transmission of the SYN it answers, so
        // that a client whose SYN went more than once still has a round
        // trip to time its cookie echo by. A client of before the
        // transmission bits resends its SYN with KLV and transmission 0:
        // it gets no echo, which would tell it that its first SYN arrived.
        let known = params.transmission() > 0 || !syn.header.flags.contains(Flags::KLV);
        if params.takes_tx_echo() && known {
            let echo = Echo { seq: client_isn, count: params.transmission() };
            p.sack = Some(SackBlock::new().with_echo(echo));
        }
        self.stats.syn_cookies_sent += 1;
        self.listener.queue_response(Requester(from, syn.len()), &p, &mut self.stats);
    }

    /// spec §6.2: a valid cookie echo creates the connection, ESTABLISHED.
    pub(super) fn handle_cookie_echo(&mut self, now: Instant, from: SocketAddr, id: ConnId, packet: &Packet) {
        let Some(cookie) = packet.cookie else { return };
        let h = &packet.header;
        let binding = CookieBinding {
            peer: from,
            client_isn: h.seq.wrapping_sub(1),
            server_isn: h.ack.wrapping_sub(1),
            server_id: id,
        };
        if !h.flags.contains(Flags::ACK)
            || !self.listener.secrets.check_cookie(now, self.config.cookie_lifetime, &cookie, &binding)
        {
            self.stats.cookies_rejected += 1;
            self.listener.note_refusal(from, RefusalCause::CookieRejected, &mut self.stats);
            return;
        }
        let refusal = Requester(from, packet.len());
        let answer = (cookie.client_id, h.seq.wrapping_add(1));
        if self.refused(now, refusal, answer) {
            return;
        }
        let client_id = ConnId::from_wire(cookie.client_id);
        let Some(client_id) = client_id.filter(|_| self.table.by_id(id).is_none()) else {
            // Our id collides with a live connection of another peer (a
            // 2^-32 event): drop; the client's echo retransmissions fail
            // alike until it gives up with RetransmitTimeout.
            self.stats.cookies_rejected += 1;
            self.listener.note_refusal(from, RefusalCause::CookieRejected, &mut self.stats);
            return;
        };
        // spec §6.2: each cookie creates at most one connection.
        let timestamp = self.listener.secrets.timestamp(now);
        if !self.listener.replay.admit(now, &cookie, self.config.cookie_lifetime, timestamp) {
            self.stats.cookies_replayed += 1;
            self.listener.note_refusal(from, RefusalCause::CookieReplayed, &mut self.stats);
            return;
        }
        // spec §19.2: a protected listener takes only an echo that carries
        // the client's first handshake message, and a plain one none.
        let protected = self.config.security.is_some();
        if protected != handshake_message(packet).is_some() {
            self.stats.refused_protection += 1;
            self.listener.note_refusal(from, RefusalCause::Protection, &mut self.stats);
            let code = Some(ErrorCode::PROTECTION_MISMATCH);
            self.listener.send_reset(now, refusal, answer, code, &mut self.stats);
            return;
        }
        let security = self.security(false);
        let max_datagram = cookie.client_max_datagram;
        // The cookie's age less the echo's delay after the SYN-ACK arrived
        // is the SYN-ACK round trip (ms resolution, spec §6.2).
        let age = timestamp.wrapping_sub(cookie.timestamp);
        let rtt = Duration::from_millis(u64::from(age.saturating_sub(u32::from(cookie.echo_delay))));
        let mut conn = Connection::new_server(
            self.conn_config.clone(),
            now,
            from,
            id,
            client_id,
            binding.server_isn,
            binding.client_isn,
            max_datagram,
            rtt,
            security,
            self.spares.pop(),
        );
        self.recall_rtt(now, &mut conn);
        self.accept_new(now, conn, protected, packet);
    }

    /// A connection a cookie echo created: queued for `accept`, or held
    /// until its handshake proves the peer.
    fn accept_new(&mut self, now: Instant, conn: Connection, protected: bool, echo: &Packet) {
        let handle = self.table.insert(conn);
        self.stats.connections_accepted += 1;
        if protected {
            // spec §19.2: the engine holds it until its handshake proves
            // the peer; then its Incoming event queues it for accept().
            // Closed before that, it is freed unseen (released).
            let slot = self.table.slot_mut(handle.index());
            slot.held = true;
            slot.released = true;
        } else {
            self.listener.accept_queue.push_back(handle);
            self.events.push_back((handle, Event::Incoming));
        }
        // The echo itself is the client's first sequenced packet: let the
        // connection process it like any other (it may carry data, or the
        // first handshake message).
        self.deliver(handle.index(), now, echo, false);
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::wire::HEADER_LEN;

    fn listener(resets_per_sec: u32, now: Instant) -> Listener {
        let config = EndpointConfig { max_resets_per_sec: resets_per_sec, ..EndpointConfig::default() };
        Listener::new(&config, &mut ChaCha8Rng::seed_from_u64(1), now)
    }

    fn from() -> SocketAddr {
        SocketAddr::from(([198, 18, 0, 9], 4433))
    }

    #[test]
    fn resets_are_limited_by_a_token_bucket_that_refills_with_time() {
        let now = Instant::now();
        let mut l = listener(2, now);
        let mut stats = EndpointStats::default();
        for _ in 0..3 {
            l.send_reset(now, Requester(from(), 1500), (7, 1), None, &mut stats);
        }
        assert_eq!((stats.resets_sent, stats.resets_suppressed), (2, 1), "a burst of the rate, then none");
        l.send_reset(now + Duration::from_millis(500), Requester(from(), 1500), (7, 1), None, &mut stats);
        assert_eq!((stats.resets_sent, stats.resets_suppressed), (3, 1), "half a second refills one token");
        let mut sent = 0;
        while let Some((to, bytes)) = l.poll_response() {
            let p = Packet::parse(&bytes).expect("a valid RST");
            assert!(to == from() && p.header.flags.contains(Flags::RST) && p.header.conn_id == 7);
            sent += 1;
        }
        assert_eq!(sent, 3);
        assert!(l.is_quiet());
    }

    #[test]
    fn no_stateless_answer_is_larger_than_three_times_what_it_answers() {
        let now = Instant::now();
        let mut l = listener(1000, now);
        let mut stats = EndpointStats::default();
        // spec §6.6: a bare RST is a header; it may answer a third of that, not less.
        let least = HEADER_LEN.div_ceil(AMPLIFICATION);
        l.send_reset(now, Requester(from(), least - 1), (7, 1), None, &mut stats);
        assert_eq!((stats.amplification_refused, l.is_quiet()), (1, true));
        l.send_reset(now, Requester(from(), least), (7, 1), None, &mut stats);
        assert_eq!((stats.amplification_refused, l.is_quiet()), (1, false));
    }

    #[test]
    fn refused_peers_are_kept_with_their_address_up_to_the_limit_then_counted() {
        let now = Instant::now();
        let mut l = listener(10, now);
        let mut stats = EndpointStats::default();
        for _ in 0..MAX_REFUSALS + 3 {
            l.note_refusal(from(), RefusalCause::Backlog, &mut stats);
        }
        assert_eq!((l.refusals.len(), stats.refusals_unreported), (MAX_REFUSALS, 3));
        assert_eq!(l.refusals.front(), Some(&Refusal { peer: from(), cause: RefusalCause::Backlog }));
        assert_eq!(RefusalCause::Protection.to_string(), "encryption mismatch (one side plain)");
    }

    #[test]
    fn a_syn_at_a_full_backlog_is_refused_naming_its_source() {
        let now = Instant::now();
        let server_addr = SocketAddr::from(([198, 18, 0, 2], 4433));
        let config = EndpointConfig { accept_backlog: 0, ..EndpointConfig::default() };
        let mut server = Endpoint::new(config, now);
        server.set_listening(true);
        let mut client = Endpoint::new(EndpointConfig::default(), now);
        client.connect(now, server_addr).expect("a SYN");
        let mut buf = Vec::new();
        let t = client.poll_transmit(now, 1, &mut buf).expect("the SYN");
        server.handle_datagram(now, from(), &buf[..t.size]);
        assert_eq!(server.poll_refusal(), Some(Refusal { peer: from(), cause: RefusalCause::Backlog }));
        assert_eq!(server.poll_refusal(), None);
    }
}
