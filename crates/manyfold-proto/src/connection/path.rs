//! Path validation and migration (spec §6.8): a peer whose address changes
//! (a NAT rebinding, a phone moving between networks) keeps its
//! connection. A packet of the connection from a new address starts a
//! challenge to that address; only the echo of its token, from there,
//! moves the connection. Until then everything but challenges still goes
//! to the old address, and what goes to the new one is limited to three
//! times what came from it (RFC 9000 §8's anti-amplification factor).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use super::timer::Timer;
use super::{Connection, State, RST_WINDOW};
use crate::seq::Seq;
use crate::wire::{Packet, PathKind, PathPacket, PATH_PACKET_LEN};

/// Challenges sent to one new address before it is given up.
const MAX_CHALLENGES: u32 = 3;
/// Responses waiting to be sent; more challenges than this are dropped.
const MAX_RESPONSES: usize = 4;
/// Bytes sent to an unvalidated address per byte received from it.
const AMPLIFICATION: usize = 3;

/// An address being validated.
#[derive(Debug)]
struct Probe {
    addr: SocketAddr,
    token: [u8; 8],
    tries: u32,
    /// When the next challenge may go.
    due: Instant,
    received: usize,
    sent: usize,
}

/// The connection's path state.
#[derive(Debug, Default)]
pub(crate) struct Paths {
    probe: Option<Probe>,
    /// Challenges to answer: (where from, token).
    responses: VecDeque<(SocketAddr, [u8; 8])>,
    /// The address we left on the last migration, for the endpoint's tables.
    moved_from: Option<SocketAddr>,
}

/// What the path figures count (spec §8.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PathStats {
    /// New addresses challenged, and of those validated (the connection moved).
    pub challenges: u64,
    /// Of those, validated: the connection moved.
    pub migrations: u64,
    /// Packets from a new address dropped as stale (an old sequence number).
    pub stale: u64,
    /// Challenged addresses that never answered.
    pub failed: u64,
}

impl Connection {
    /// A packet of this connection, already authenticated where the
    /// connection is protected, came from `from`, which is not the peer's
    /// address (spec §6.8). Returns whether to process it. `token` is fresh
    /// randomness from the endpoint, used if a challenge starts.
    pub(crate) fn on_new_path(
        &mut self,
        now: Instant,
        from: SocketAddr,
        p: &Packet,
        len: usize,
        token: [u8; 8],
    ) -> bool {
        let synchronized = matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2 | State::CloseWait | State::Closing | State::LastAck
        );
        let Some(next) = self.recv.as_ref().map(|r| r.next()) else { return false };
        if !synchronized || self.awaiting_echo_ack() {
            return false;
        }
        // A replayed old packet must not even start a challenge. After a
        // rebinding the peer resends what we may have had already (its acks
        // went to the dead address), so "old" is what the RST rule calls
        // old (spec §4.6): more than 2^16 packets below rcv.nxt.
        if Seq::from_wire(p.header.seq, next) + RST_WINDOW < next {
            self.stats.path.stale += 1;
            return false;
        }
        match self.paths.as_deref_mut().and_then(|p| p.probe.as_mut()) {
            Some(pr) if pr.addr == from => pr.received += len,
            _ => {
                self.stats.path.challenges += 1;
                self.paths().probe = Some(Probe { addr: from, token, tries: 0, due: now, received: len, sent: 0 });
                self.timers.set(Timer::Path, now);
            }
        }
        true
    }

    /// A PATH packet for this connection came from `from` (spec §6.8).
    pub(crate) fn on_path_packet(&mut self, now: Instant, from: SocketAddr, p: &PathPacket) {
        if self.state == State::Closed || self.state == State::TimeWait {
            return;
        }
        match p.kind {
            PathKind::Challenge => {
                let paths = self.paths();
                if paths.responses.len() < MAX_RESPONSES {
                    paths.responses.push_back((from, p.token));
                }
            }
            PathKind::Response => {
                let probe = self.paths.as_deref().and_then(|p| p.probe.as_ref());
                let matches = probe.is_some_and(|pr| pr.addr == from && pr.token == p.token);
                if matches {
                    self.migrate(now, from);
                }
            }
        }
    }

    /// The new address answered: it becomes the peer's address.
    fn migrate(&mut self, now: Instant, to: SocketAddr) {
        let from = std::mem::replace(&mut self.remote, to);
        let paths = self.paths();
        paths.probe = None;
        paths.moved_from = Some(from);
        self.timers.cancel(Timer::Path);
        self.stats.path.migrations += 1;
        tracing::debug!(target: "manyfold::state", conn = %self.local_id, %from, %to, "path validated: migrated");
        // What was in flight went to the old address, which may be dead
        // (a NAT rebinding): resend it now rather than after an RTO.
        if !self.sent.is_empty() {
            self.stats.lost_packets += self.sent.on_rto();
            self.timers.cancel(Timer::Loss);
            self.timers.cancel(Timer::Tlp);
            self.tlp_due = None;
        }
        self.ack.immediate = true;
        self.last_heard = now;
    }

    /// Takes the address this connection moved away from, once (the
    /// endpoint updates its tables by it).
    pub(crate) fn take_moved_from(&mut self) -> Option<SocketAddr> {
        self.paths.as_deref_mut().and_then(|p| p.moved_from.take())
    }

    /// The next PATH packet to send, and where: a response first, then a
    /// due challenge within the amplification limit.
    pub(crate) fn poll_path(&mut self, now: Instant, buf: &mut [u8]) -> Option<(SocketAddr, usize)> {
        if buf.len() < PATH_PACKET_LEN {
            return None;
        }
        let (Some(id), seq) = (self.remote_id, self.sent.next_seq().wire()) else { return None };
        let ack = self.recv.as_ref().map_or(0, |r| r.next().wire());
        if let Some((to, token)) = self.paths.as_deref_mut().and_then(|p| p.responses.pop_front()) {
            let n = PathPacket::new(PathKind::Response, id.wire(), seq, ack, token).emit(buf);
            self.stats.packets_sent += 1;
            return Some((to, n));
        }
        let rto = self.rtt.rto(0);
        let pr = self.paths.as_deref_mut()?.probe.as_mut()?;
        if pr.due > now {
            return None;
        }
        if pr.tries >= MAX_CHALLENGES {
            self.paths().probe = None;
            self.stats.path.failed += 1;
            self.timers.cancel(Timer::Path);
            return None;
        }
        if pr.sent + PATH_PACKET_LEN > AMPLIFICATION * pr.received {
            // spec §6.8: wait for more from it (its next packet re-arms us).
            self.timers.cancel(Timer::Path);
            return None;
        }
        pr.tries += 1;
        pr.sent += PATH_PACKET_LEN;
        pr.due = now + rto * 2u32.pow(pr.tries);
        let (to, token, due) = (pr.addr, pr.token, pr.due);
        self.timers.set(Timer::Path, due);
        self.stats.packets_sent += 1;
        Some((to, PathPacket::new(PathKind::Challenge, id.wire(), seq, ack, token).emit(buf)))
    }

    /// Whether a challenge or response waits to go out now.
    pub(crate) fn path_due(&self, now: Instant) -> bool {
        self.paths
            .as_deref()
            .is_some_and(|p| !p.responses.is_empty() || p.probe.as_ref().is_some_and(|pr| pr.due <= now))
    }

    /// The connection's path state, made on first use.
    fn paths(&mut self) -> &mut Paths {
        self.paths.get_or_insert_with(Box::default)
    }
}
