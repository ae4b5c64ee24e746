//! Routing (spec §6.1, §6.5, §6.7, §6.8, §19.3): each received datagram
//! to the connection its id names, or to the listener; RSTs of a peer
//! that lost its state by the id it echoes; protected packets opened by
//! their connection first; ICMP errors by the header they quote; packets
//! from a new address of a peer through a path challenge.

use std::net::SocketAddr;
use std::time::Instant;

use rand::RngCore;

use super::listener::Requester;
use super::Endpoint;
use crate::connection::{State, UnreachableKind};
use crate::ids::ConnId;
use crate::secure::Unprotect;
use crate::wire::{DecodeError, Flags, Header, Packet, PacketType, PathPacket, HEADER_LEN};

impl Endpoint {
    pub(super) fn route_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
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
        if packet.header.ptype != PacketType::Segment {
            self.stats.dropped_malformed += 1;
            return;
        }
        match ConnId::from_wire(packet.header.conn_id) {
            None => self.handle_initial_syn(now, from, &packet, datagram.len()),
            Some(id) => self.route_by_id(now, from, id, &packet, datagram.len()),
        }
    }

    /// spec §6.1: route by our connection id.
    fn route_by_id(&mut self, now: Instant, from: SocketAddr, id: ConnId, packet: &Packet, len: usize) {
        let h = &packet.header;
        let flags = h.flags;
        if let Some(idx) = self.table.by_id(id) {
            // A CLOSED connection the application has not released yet
            // answers like an unknown one (spec §6.5).
            match self.table.at(idx) {
                Some(c) if c.state() != State::Closed && c.remote() == from => {
                    self.deliver(idx, now, packet, false);
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
                    if self.packet_on_new_path(idx, now, from, packet, len) {
                        self.deliver(idx, now, packet, false);
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
            if let Some(idx) = self.table.by_peer(from, id) {
                self.deliver(idx, now, packet, false);
            }
            return;
        }
        if packet.cookie.is_some() && !flags.contains(Flags::SYN) {
            self.handle_cookie_echo(now, from, id, packet);
            return;
        }
        self.stats.unknown_connection += 1;
        self.listener.send_reset(now, Requester(from, len), (h.conn_id, h.ack), None, &mut self.stats);
    }

    /// spec §19.3: a protected packet is opened by its connection before
    /// anything else looks at it; one that does not open changes nothing.
    /// Unknown ones get no RST: a protected peer would not believe a plain one.
    fn route_protected(&mut self, now: Instant, from: SocketAddr, datagram: &[u8]) {
        let Some(header) = self.decoded(Header::parse(datagram)) else { return };
        let Some(idx) = ConnId::from_wire(header.conn_id).and_then(|id| self.table.by_id(id)) else {
            self.stats.unknown_connection += 1;
            return;
        };
        let mut opened = std::mem::take(&mut self.opened);
        let moved;
        let result = match self.table.at_mut(idx) {
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

    /// A packet of connection `idx` from `from`, not its peer's address
    /// (spec §6.8): the connection decides whether it starts (or feeds) a
    /// path challenge and is processed.
    fn packet_on_new_path(&mut self, idx: u32, now: Instant, from: SocketAddr, p: &Packet, len: usize) -> bool {
        let token = self.rng.next_u64().to_le_bytes();
        let Some(c) = self.table.at_mut(idx) else { return false };
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
        let Some(p) = self.decoded(PathPacket::parse(datagram)) else { return };
        let Some(idx) = ConnId::from_wire(p.header.conn_id).and_then(|id| self.table.by_id(id)) else {
            self.stats.unknown_connection += 1;
            return;
        };
        let Some(c) = self.table.at_mut(idx) else { return };
        c.on_path_packet(now, from, &p);
        if let Some(old) = c.take_moved_from() {
            self.table.moved(idx, old);
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
        let matched = self
            .icmp_target(destination, quote)
            .filter(|&(idx, seq)| self.table.at_mut(idx).is_some_and(|c| c.handle_icmp(now, kind, seq)));
        match matched {
            Some((idx, _)) => {
                self.touch(idx, now);
                self.run_groups(now);
            }
            None => self.stats.icmp_ignored += 1,
        }
    }

    /// The kernel refused to send `datagram` to `destination` as larger
    /// than the interface allows (EMSGSIZE; the driver reports it). When
    /// it was a connection's path MTU probe, the probe is lost at once and
    /// its size ruled out (spec §3.7); anything else changes nothing. Returns
    /// whether it was such a probe.
    pub fn handle_too_large(&mut self, now: Instant, destination: SocketAddr, datagram: &[u8]) -> bool {
        let Some((idx, seq)) = self.icmp_target(destination, datagram) else { return false };
        let refused = self.table.at_mut(idx).is_some_and(|c| c.handle_too_large(now, seq));
        if refused {
            self.touch(idx, now);
        }
        refused
    }

    /// The connection an ICMP quote names, and the quoted sequence number.
    fn icmp_target(&self, destination: SocketAddr, quote: &[u8]) -> Option<(u32, u32)> {
        let h = Header::peek(quote)?;
        if !matches!(h.ptype, PacketType::Segment | PacketType::Protected) || h.flags.contains(Flags::RST) {
            return None;
        }
        if let Some(id) = ConnId::from_wire(h.conn_id) {
            return self.table.by_peer(destination, id).map(|idx| (idx, h.seq));
        }
        // An initial SYN: its parameters carry the id we chose (spec §3.3.2).
        let idx = self.table.syn_sent(destination)?;
        let ours = quote.get(HEADER_LEN..HEADER_LEN + 4)?;
        let c = self.table.at(idx)?;
        (h.flags.contains(Flags::SYN) && ours == c.local_id().wire().to_be_bytes()).then_some((idx, h.seq))
    }

    /// Hands a packet to connection `idx`.
    pub(super) fn deliver(&mut self, idx: u32, now: Instant, packet: &Packet, protected: bool) {
        let at_limit = self.memory.at_limit();
        let Some(conn) = self.table.at_mut(idx) else {
            return;
        };
        let had_remote_id = conn.remote_id();
        conn.set_memory_pressure(at_limit);
        conn.handle_packet_from(now, packet, protected, self.rx_source.as_ref());
        if let Some(token) = conn.take_token() {
            self.tokens.insert(conn.remote(), token);
        }
        self.table.after_packet(idx, had_remote_id);
        self.touch(idx, now);
    }

    /// What was decoded; a decode error is counted (spec §3.5) and dropped.
    fn decoded<T>(&mut self, r: Result<T, DecodeError>) -> Option<T> {
        r.map_err(|e| self.count_decode_error(e)).ok()
    }

    fn count_decode_error(&mut self, e: DecodeError) {
        match e {
            DecodeError::Truncated | DecodeError::TrailingBytes => self.stats.dropped_truncated += 1,
            DecodeError::Checksum => self.stats.dropped_checksum += 1,
            DecodeError::Version(_) => self.stats.dropped_version += 1,
            _ => self.stats.dropped_malformed += 1,
        }
    }
}
