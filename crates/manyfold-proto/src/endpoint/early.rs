//! 0-RTT at the endpoint (spec §6.9): the listener hands out
//! address-validation tokens, takes the data of a SYN that presents a good
//! one (within its replay policy) by creating the connection at once, and
//! routes that SYN's retransmissions to it; a client keeps the latest
//! token of each server, bounded.

use std::net::SocketAddr;
use std::time::Instant;

use super::Endpoint;
use crate::config::EarlyData;
use crate::connection::{Connection, EarlySyn, Event};
use crate::ids::ConnId;
use crate::wire::{HandshakeParams, Packet, Token};

impl Endpoint {
    /// The fresh token a SYN-ACK to `from` carries: only if the SYN asked
    /// for one, the listener hands them out and connections are plain.
    pub(super) fn token_for(&mut self, now: Instant, from: SocketAddr, params: HandshakeParams) -> Option<Token> {
        let wanted = params.features & HandshakeParams::WANT_TOKEN != 0;
        if !wanted || self.config.token_lifetime.is_zero() || self.config.security.is_some() {
            return None;
        }
        self.stats.tokens_sent += 1;
        Some(self.listener.secrets.make_token(now, from))
    }

    /// spec §6.9: the connection a 0-RTT SYN from `from` already created
    /// (its SYN-ACK was lost, so the client sends the SYN again).
    pub(super) fn early_connection(&self, from: SocketAddr, syn: &Packet, params: HandshakeParams) -> Option<u32> {
        syn.token?;
        let idx = self.table.by_peer(from, ConnId::from_wire(params.conn_id)?)?;
        let c = self.table.at(idx)?;
        (c.state() != crate::connection::State::Closed).then_some(idx)
    }

    /// spec §6.9: takes a SYN that presents a good token as a connection,
    /// ESTABLISHED at once with the SYN's data delivered. Returns false
    /// (and takes nothing) when the SYN must run the full handshake: no
    /// token, a bad or expired one, a policy that takes no 0-RTT data, or
    /// a first packet the replay window has seen.
    pub(super) fn take_early(&mut self, now: Instant, from: SocketAddr, syn: &Packet, params: HandshakeParams) -> bool {
        let Some(token) = syn.token else { return false };
        let lifetime = self.config.token_lifetime;
        if lifetime.is_zero() || self.config.security.is_some() || self.config.early_data == EarlyData::Refuse {
            return false;
        }
        let secrets = &self.listener.secrets;
        if !secrets.check_token(now, lifetime, from, &token) {
            self.stats.tokens_rejected += 1;
            return false;
        }
        if let EarlyData::ReplayWindow(_) = self.config.early_data {
            let key = secrets.early_key(from, params.conn_id, syn.header.seq, &token);
            let now_ts = secrets.timestamp(now);
            if !self.listener.early_replay.admit(key, token.timestamp, now_ts, lifetime) {
                self.stats.early_replayed += 1;
                return false;
            }
        }
        let Some(client_id) = ConnId::from_wire(params.conn_id) else { return false };
        let server_id = self.table.fresh_id(&mut self.rng);
        let isn = self.listener.secrets.isn(now, from, (params.conn_id, server_id.wire()));
        let token = self.token_for(now, from, params);
        let early = EarlySyn { syn, client_id, params, token };
        let spare = self.spares.pop();
        let mut conn = Connection::new_early_server(self.conn_config.clone(), now, from, server_id, isn, early, spare);
        self.recall_rtt(now, &mut conn);
        let handle = self.table.insert(conn);
        self.stats.connections_accepted += 1;
        self.stats.early_accepted += 1;
        self.listener.accept_queue.push_back(handle);
        self.events.push_back((handle, Event::Incoming));
        self.touch(handle.index(), now);
        true
    }
}
