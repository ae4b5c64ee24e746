//! 0-RTT on one connection (spec §6.9): a client's SYN that presents an
//! address-validation token and carries the queued request; the
//! listener's early connection, created from that SYN, whose SYN-ACK
//! hands back a fresh token and may carry the reply; and what the client
//! does when the listener takes its SYN's data or declines it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::recv::Receiver;
use super::transmit::Sent;
use super::{data_room, Connection};
use crate::config::ConnectionConfig;
use crate::ids::ConnId;
use crate::seq::Seq;
use crate::wire::chunk::Chunks;
use crate::wire::{Flags, HandshakeParams, Packet, Token, PARAMS_LEN, TOKEN_LEN};

/// A connection's 0-RTT state. Empty (and never consulted) on connections
/// that use no token.
#[derive(Debug, Default)]
pub(crate) struct Early {
    /// A client: the token its SYN presents. The listener's early
    /// connection: the fresh token its SYN-ACK hands over.
    send: Option<Token>,
    /// A client: ask the listener for a token on the SYN.
    want: bool,
    /// A client: the token a SYN-ACK handed it, for the endpoint to keep.
    received: Option<Token>,
    /// A client: its SYN's data, which the listener declined; it leaves
    /// again first on the next packet (the cookie echo).
    declined: Chunks,
}

/// What a listener learned from a SYN that it takes as 0-RTT (spec §6.9).
pub(crate) struct EarlySyn<'p, 'a> {
    /// The SYN itself: its data is the connection's first.
    pub syn: &'p Packet<'a>,
    /// The client's id, and the SYN's parameters.
    pub client_id: ConnId,
    pub params: HandshakeParams,
    /// The token the SYN-ACK hands over, if the client asked for one.
    pub token: Option<Token>,
}

/// A SYN-ACK from a listener that took our SYN's data (spec §6.9): its own
/// sequence number carries data (the reply's start) and possibly FIN.
pub(super) fn is_early_answer(p: &Packet) -> bool {
    p.header.flags.contains(Flags::ACK) && p.params.is_some_and(|pp| pp.features & HandshakeParams::EARLY != 0)
}

impl Connection {
    /// spec §6.9: the listener's connection for a SYN whose token it took.
    /// It starts ESTABLISHED (the token proved the address), takes the
    /// SYN's data as the first packet, and owes the client its SYN-ACK
    /// (sequence number `isn`), which goes with the ack of that data and
    /// with whatever reply is queued by then.
    pub fn new_early_server(
        config: Arc<ConnectionConfig>,
        now: Instant,
        remote: SocketAddr,
        local_id: ConnId,
        isn: u32,
        early: EarlySyn<'_, '_>,
        spare: Option<super::Spare>,
    ) -> Self {
        let recv_buffer = config.recv_buffer;
        let mut c = Connection::new(config, now, remote, local_id, isn, super::State::Established, spare);
        c.remote_id = Some(early.client_id);
        c.set_peer_max_datagram(early.params.max_datagram);
        c.ack_freq.peer_takes_it = early.params.takes_ack_frequency();
        c.ack.peer_echoes = early.params.takes_tx_echo();
        c.peer_window = u64::from(early.syn.header.window);
        // The SYN's own sequence number carries the data: receive from it.
        c.recv = Some(Receiver::new(Seq::from_isn(early.syn.header.seq), recv_buffer));
        if early.token.is_some() {
            c.early().send = early.token;
        }
        c.start_qlog(now, false);
        c.stats.packets_received += 1;
        c.handle_sequenced(now, early.syn, false);
        // Without a whole request to answer, the SYN-ACK goes at once.
        if !c.ack.reply_wait {
            c.ack.immediate = true;
        }
        tracing::debug!(target: "manyfold::state", conn = %local_id, to = "ESTABLISHED", %remote, "accepted 0-RTT");
        c
    }

    /// A client that reuses tokens (spec §6.9): asks for one on its SYN
    /// and, holding `token`, presents it with the queued data.
    pub fn use_tokens(&mut self, token: Option<Token>) {
        let e = self.early();
        e.want = true;
        e.send = token;
    }

    /// The token a listener handed us, once.
    pub fn take_token(&mut self) -> Option<Token> {
        self.early.as_deref_mut().and_then(|e| e.received.take())
    }

    /// The listener's early connection has not yet had its SYN-ACK
    /// acknowledged (or sent).
    pub(super) fn early_syn_outstanding(&self) -> bool {
        !self.opener && self.sent.base() <= self.isn
    }

    /// The listener's early connection still has to send its SYN-ACK.
    pub(super) fn early_syn_due(&self) -> bool {
        !self.opener && self.sent.next_seq() == self.isn
    }

    /// The SYN-ACK of an early connection goes when there is something to
    /// put on it or when the ack of the SYN is due (spec §6.9: with the
    /// reply, if that comes within `reply_ack_delay`).
    pub(super) fn early_syn_ack_wanted(&self) -> bool {
        self.streams.queued() > 0
            || self.streams.has_sendable()
            || self.streams.has_control()
            || self.fin_queued
            || self.ack.due()
    }

    /// Feature bits and token for a SYN or SYN-ACK we write (spec §3.3.2).
    pub(super) fn early_params(&self) -> (u16, Option<Token>) {
        let mut features = 0;
        if self.opener && self.wants_tokens() {
            features |= HandshakeParams::WANT_TOKEN;
        }
        if !self.opener {
            // Only an early connection writes a SYN as the passive side.
            features |= HandshakeParams::EARLY;
        }
        (features, self.early.as_deref().and_then(|e| e.send))
    }

    /// Bytes the token section adds to a SYN we write.
    pub(super) fn early_token_len(&self) -> usize {
        if self.early.as_deref().is_some_and(|e| e.send.is_some()) {
            TOKEN_LEN
        } else {
            0
        }
    }

    /// A client's SYN that presents a token: it carries as much queued
    /// data as fits one datagram, and FIN if that is all (spec §6.9). The
    /// listener's window is not known yet; one datagram is what it takes.
    pub(super) fn send_early_syn(&mut self, now: Instant, buf: &mut [u8]) -> Sent {
        let room = data_room(buf.len().min(self.max_datagram() as usize), PARAMS_LEN + TOKEN_LEN);
        let mut chunks = Chunks::default();
        let cut = self.streams.fill(now, &mut chunks, room, room);
        let fin = self.fin_queued && self.streams.queued() == 0 && !self.streams.has_sendable();
        let control = if fin { Flags::SYN | Flags::FIN } else { Flags::SYN };
        let sent = self.send_sequenced(now, buf, control, chunks, true, false);
        if let Sent::Yes(_) = sent {
            self.stats.bytes_sent += cut as u64;
            if fin {
                self.fin_seq = Some(self.isn);
                self.streams.on_fin_sent();
            }
        }
        sent
    }

    /// A client in SYN-SENT got the listener's SYN-ACK (spec §6.9): keeps
    /// the token it hands over; if our SYN presented one, its data was
    /// taken (`EARLY`: the SYN-ACK's own sequence number then carries the
    /// reply's start) or must go again.
    pub(super) fn on_early_answer(&mut self, p: &Packet, params: HandshakeParams) {
        let Some(e) = self.early.as_deref_mut() else { return };
        if e.want {
            e.received = p.token.or(e.received);
        }
        if e.send.is_none() {
            return;
        }
        if params.features & HandshakeParams::EARLY != 0 {
            e.send = None;
            self.recv = Some(Receiver::new(Seq::from_isn(p.header.seq), self.config.recv_buffer));
        } else {
            self.decline_early();
        }
    }

    /// Our SYN's data was not taken (a stale or foreign token, a replay
    /// window that refused it, a listener that takes none, or a
    /// simultaneous open): the ack of the SYN must not acknowledge it. Its
    /// chunks leave the SYN's record and go first on the next packet, and
    /// a FIN that rode the SYN is sent again after them.
    pub(super) fn decline_early(&mut self) {
        if self.early.as_deref_mut().and_then(|e| e.send.take()).is_none() {
            return;
        }
        let mut taken = Chunks::default();
        self.sent.strip(self.isn, |c, _| {
            taken = std::mem::take(c);
            taken.data_len()
        });
        self.early().declined = taken;
        if self.fin_seq == Some(self.isn) {
            self.fin_seq = None;
        }
    }

    /// The connection's 0-RTT state, made on first use.
    fn early(&mut self) -> &mut Early {
        self.early.get_or_insert_with(Box::default)
    }

    /// A client that asks listeners for tokens.
    fn wants_tokens(&self) -> bool {
        self.early.as_deref().is_some_and(|e| e.want)
    }

    /// Declined 0-RTT data waits to go again (spec §6.9).
    pub(super) fn has_declined(&self) -> bool {
        self.early.as_deref().is_some_and(|e| !e.declined.is_empty())
    }

    /// The declined chunks, to lead the next packet, and their encoded
    /// and data lengths.
    pub(super) fn take_declined(&mut self) -> (Chunks, usize, usize) {
        let c = self.early.as_deref_mut().map(|e| std::mem::take(&mut e.declined)).unwrap_or_default();
        let (enc, data) = (c.encoded_len(), c.data_len());
        (c, enc, data)
    }
}
