//! A protected connection's side of spec §19: which packets it takes in
//! the clear, its Noise messages in `HANDSHAKE` chunks, and packet
//! protection on the way out and in. The cryptography is in
//! `crate::secure`.

use std::time::Instant;

use bytes::Bytes;

use super::timer::Timer;
use super::{CloseReason, Connection, Event, State};
use crate::secure::{Handshake, HandshakeFailure, Protection, Unprotect, PROTECTION_OVERHEAD};
use crate::wire::chunk::{parse_chunks, Chunk};
use crate::wire::{ErrorCode, Flags, Packet};

/// The protection state of one connection.
#[derive(Debug)]
pub(crate) struct Security {
    handshake: Handshake,
    initiator: bool,
    protection: Option<Protection>,
    /// Our next handshake message, waiting for a packet to carry it.
    pub(super) outgoing: Option<Bytes>,
    /// A protected packet from the peer opened: it has its keys too.
    peer_confirmed: bool,
    /// The packet last written carried a handshake message (so it goes out
    /// in the clear; the peer may not have keys yet).
    pub(super) last_was_handshake: bool,
}

impl Security {
    pub(crate) fn new(handshake: Handshake, initiator: bool) -> Box<Self> {
        Box::new(Security {
            handshake,
            initiator,
            protection: None,
            outgoing: None,
            peer_confirmed: false,
            last_was_handshake: false,
        })
    }
}

/// What a protected connection does with a packet that came in the clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plain {
    Take,
    /// Acknowledge it again, change nothing else.
    Reack,
    Drop,
}

/// spec §19.4: a handshake packet carries one HANDSHAKE chunk and nothing
/// else, and no SYN, FIN, RST or ERR.
fn is_handshake_packet(p: &Packet) -> bool {
    let f = p.header.flags;
    if [Flags::SYN, Flags::FIN, Flags::RST, Flags::ERR].iter().any(|&x| f.contains(x)) {
        return false;
    }
    let mut chunks = parse_chunks(p.data);
    matches!((chunks.next(), chunks.next()), (Some(Ok(Chunk::Handshake(_))), None))
}

/// The Noise message a packet carries, if any.
pub(crate) fn handshake_message<'a>(p: &Packet<'a>) -> Option<&'a [u8]> {
    parse_chunks(p.data).map_while(Result::ok).find_map(|c| match c {
        Chunk::Handshake(m) => Some(m),
        _ => None,
    })
}

impl Connection {
    /// Bytes protection takes from every datagram (0 for a plain connection).
    pub(super) fn protection_overhead(&self) -> usize {
        if self.security.is_some() {
            PROTECTION_OVERHEAD
        } else {
            0
        }
    }

    /// A protected connection whose keys are not there yet sends nothing but
    /// handshake messages.
    pub(super) fn awaiting_keys(&self) -> bool {
        self.security.as_ref().is_some_and(|s| s.protection.is_none())
    }

    /// Whether this connection protects its packets (spec §19).
    pub fn is_protected(&self) -> bool {
        self.security.is_some()
    }

    /// The peer's static public key, once its handshake message proved it.
    pub fn peer_key(&self) -> Option<[u8; 32]> {
        self.security.as_ref().and_then(|s| s.handshake.peer_key())
    }

    /// Queues our first handshake message (the initiator's, once the
    /// SYN-ACK came) for the next packet.
    pub(super) fn start_handshake(&mut self) {
        let Some(s) = self.security.as_mut() else { return };
        match s.handshake.write() {
            Ok(m) => s.outgoing = Some(Bytes::from(m)),
            Err(f) => self.fail_handshake(f),
        }
    }

    /// spec §19.2: what a protected connection does with a packet that came
    /// in the clear. It takes the SYN-ACK, a handshake packet while its
    /// handshake runs, and RSTs until the peer has shown it holds keys (so
    /// that a refusal of our handshake still reaches us). A handshake
    /// packet after that is a repeat: it only draws an ack. Anything else
    /// is dropped: its header is not authenticated.
    pub(super) fn plain_verdict(&self, p: &Packet) -> Plain {
        let Some(s) = self.security.as_ref() else { return Plain::Take };
        let f = p.header.flags;
        if f.contains(Flags::SYN) && self.state == State::SynSent {
            return Plain::Take;
        }
        if f.contains(Flags::RST) {
            return if s.peer_confirmed { Plain::Drop } else { Plain::Take };
        }
        if !is_handshake_packet(p) {
            return Plain::Drop;
        }
        if s.handshake.is_finished() {
            Plain::Reack
        } else {
            Plain::Take
        }
    }

    /// Takes the peer's handshake message from a packet seen for the first
    /// time. A repeat (a retransmission) changes nothing.
    pub(super) fn on_handshake_message(&mut self, now: Instant, message: &[u8]) {
        let Some(s) = self.security.as_mut() else { return };
        if s.handshake.is_finished() || s.handshake.is_my_turn() {
            return;
        }
        if let Err(f) = s.handshake.read(message) {
            self.fail_handshake(f);
            return;
        }
        if s.handshake.is_my_turn() {
            match s.handshake.write() {
                Ok(m) => s.outgoing = Some(Bytes::from(m)),
                Err(f) => {
                    self.fail_handshake(f);
                    return;
                }
            }
        }
        if s.handshake.is_finished() {
            s.protection = Some(s.handshake.keys(s.initiator));
            let initiator = s.initiator;
            // Both ends: connect_timeout covered the handshake until now
            // (and still does while a cookie echo waits for its ack).
            if !self.awaiting_echo_ack() {
                self.timers.cancel(Timer::Connect);
            }
            self.touch_idle(now);
            if initiator {
                self.events.push_back(Event::Connected);
            } else {
                // spec §19.2: only an authenticated peer reaches accept().
                self.events.push_back(Event::Incoming);
            }
            tracing::debug!(target: "manyfold::state", conn = %self.local_id, "handshake complete, packets protected");
        }
    }

    /// The handshake failed: tell the peer (in the clear: there are no
    /// keys) and close.
    fn fail_handshake(&mut self, f: HandshakeFailure) {
        tracing::debug!(target: "manyfold::state", conn = %self.local_id, failure = ?f, "handshake failed");
        if self.remote_id.is_some() {
            self.rst_pending = Some(ErrorCode::AUTHENTICATION_FAILED);
        }
        self.enter_closed(CloseReason::AuthenticationFailed);
    }

    /// Opens a protected datagram into `out` (spec §19.3).
    pub(crate) fn unprotect(&mut self, datagram: &[u8], out: &mut Vec<u8>) -> Result<(), Unprotect> {
        let s = self.security.as_mut().ok_or(Unprotect::Malformed)?;
        let p = s.protection.as_mut().ok_or(Unprotect::Malformed)?;
        p.unprotect(datagram, out)?;
        s.peer_confirmed = true;
        Ok(())
    }

    /// Protects the packet just written into `buf[..n]` unless it carries a
    /// handshake message or there are no keys yet; returns its length.
    pub(super) fn protect_written(&mut self, buf: &mut [u8], n: usize) -> usize {
        let Some(s) = self.security.as_mut() else { return n };
        match s.protection.as_mut() {
            Some(p) if !s.last_was_handshake => p.protect(buf, n),
            _ => n,
        }
    }

    /// The server's handshake did not finish within `connect_timeout`.
    pub(super) fn handshake_unfinished(&self) -> bool {
        self.awaiting_keys() && self.state != State::Closed
    }
}
