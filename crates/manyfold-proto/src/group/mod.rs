//! Groups (spec §14; papers 00 §3.3, §4.2 and 01): one sender, many
//! receivers over unicast. A group is its own state machine over
//! ordinary connections of one endpoint, one per peer: each peer keeps
//! its own handshake, sequence space, RTT, retransmission timers,
//! congestion and flow control, and the receivers are plain endpoints.
//! What the group adds is one copy of each message shared by every peer
//! (reference-counted, spec §14.4), the delivery modes' meaning of
//! "acknowledged" (§14.5), the load-balanced choice of peers (§14.6),
//! the parallel handshake (§14.3), live membership and eviction (§14.7).
//!
//! The group never touches a socket: the [`crate::Endpoint`] it belongs to
//! hosts it (host.rs), handing it its members' events and timer expiries
//! and lending it its member connections through the narrow
//! `host::Members` trait. One peer's state is in peer.rs; the settings
//! and delivery modes in config.rs; which peers a message goes to in
//! modes.rs; departures, the tick and the handshake retry in
//! membership.rs; what a group reports in events.rs.

mod config;
mod events;
pub(crate) mod host;
mod membership;
mod modes;
mod peer;

pub use config::{Eviction, GroupConfig, Mode};
pub use events::{GroupError, GroupEvent, GroupStats, Left, Unreachable};
pub(crate) use peer::SLOT_BITS;
pub use peer::{PeerId, PeerState, PeerStats};

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::conn_handle::ConnHandle;
use crate::connection::CloseReason;
use crate::ids::StreamId;
use peer::Peer;

/// Names a group of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupHandle(pub(crate) u32);

/// One stream to one peer: what paper 00 calls a destination (§14.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Destination {
    /// The peer.
    pub peer: PeerId,
    /// The stream to it (0 for the group's own).
    pub stream: StreamId,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The handshake: it ends at `deadline`; unanswered peers are asked
    /// again at `retry` (spec §14.3), once (`retry == started` once done).
    Connecting {
        started: Instant,
        deadline: Instant,
        retry: Option<Instant>,
    },
    Established,
    /// Closed by the application or failed: no more sending.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyState {
    Pending,
    Acked,
    Dropped,
}

/// One peer's copy of a group message: the tracked message on its connection.
#[derive(Debug)]
struct Copy {
    peer: u32,
    msg: u64,
    state: CopyState,
}

#[derive(Debug)]
struct GroupMsg {
    len: usize,
    copies: Vec<Copy>,
    done: bool,
}

/// Period of the load and rate measurements.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// The group state machine. It acts on its member connections only
/// through its host (host.rs), which runs it.
#[derive(Debug)]
pub struct Group {
    pub(crate) config: GroupConfig,
    pub(crate) phase: Phase,
    pub(crate) peers: Vec<Peer>,
    by_conn: HashMap<ConnHandle, u32>,
    /// Messages not yet delivered, and delivered ones behind them; `base`
    /// is the sequence number of the front one.
    msgs: VecDeque<GroupMsg>,
    base: u64,
    /// (peer, its connection's message id) -> group sequence number.
    copy_of: HashMap<(u32, u64), u64>,
    pub(crate) events: VecDeque<GroupEvent>,
    unreachable: Vec<(SocketAddr, Unreachable)>,
    want_writable: bool,
    pub(crate) next_tick: Option<Instant>,
    /// Where the round-robin over peers (receiving, tie-breaking) resumes.
    rr: usize,
    /// `Closed` was reported.
    close_reported: bool,
    stats: GroupStats,
}

impl Group {
    pub(crate) fn new(config: GroupConfig, now: Instant) -> Self {
        let deadline = now + config.overall_timeout;
        Group {
            config,
            phase: Phase::Connecting { started: now, deadline, retry: None },
            peers: Vec::new(),
            by_conn: HashMap::new(),
            msgs: VecDeque::new(),
            base: 0,
            copy_of: HashMap::new(),
            events: VecDeque::new(),
            unreachable: Vec::new(),
            want_writable: false,
            next_tick: None,
            rr: 0,
            close_reported: false,
            stats: GroupStats::default(),
        }
    }

    pub(crate) fn add_peer(&mut self, addr: SocketAddr, conn: ConnHandle) -> PeerId {
        let id = self.peers.len() as u32;
        self.peers.push(Peer::new(addr, conn));
        self.by_conn.insert(conn, id);
        self.id(id)
    }

    /// spec §14.7: a peer that has gone, owes nothing and whose connection
    /// `closed` says is over, frees its slot for a joiner; returns the slot.
    pub(crate) fn reusable_slot(&self, closed: impl Fn(ConnHandle) -> bool) -> Option<u32> {
        let free = |p: &Peer| p.state == PeerState::Gone && p.pending == 0 && closed(p.conn);
        self.peers.iter().position(free).map(|i| i as u32)
    }

    /// A joiner takes slot `idx` of a gone peer, under a new id. Returns
    /// the old peer's connection, to be released.
    pub(crate) fn reuse_slot(&mut self, idx: u32, addr: SocketAddr, conn: ConnHandle) -> (PeerId, ConnHandle) {
        let old = &mut self.peers[idx as usize];
        let generation = old.generation.wrapping_add(1);
        let old_conn = old.conn;
        *old = Peer::new(addr, conn);
        old.generation = generation;
        self.by_conn.remove(&old_conn);
        self.by_conn.insert(conn, idx);
        self.stats.slots_reused += 1;
        (self.id(idx), old_conn)
    }

    /// The id of the peer in slot `idx`.
    pub(crate) fn id(&self, idx: u32) -> PeerId {
        PeerId::new(idx, self.peers.get(idx as usize).map_or(0, |p| p.generation))
    }

    /// The slot of peer `id`, if it still names the peer there.
    pub(crate) fn slot_of(&self, id: PeerId) -> Option<u32> {
        let idx = id.slot();
        (self.peers.get(idx as usize).is_some_and(|p| PeerId::new(idx, p.generation) == id)).then_some(idx)
    }

    pub(crate) fn peer_of(&self, conn: ConnHandle) -> Option<u32> {
        self.by_conn.get(&conn).copied()
    }

    pub(crate) fn find_peer(&self, addr: SocketAddr) -> Option<u32> {
        let live = |p: &Peer| p.addr == addr && matches!(p.state, PeerState::Connecting | PeerState::Up);
        self.peers.iter().position(live).map(|i| i as u32)
    }

    /// The sequence number the next message will get.
    pub fn next_seq(&self) -> u64 {
        self.base + self.msgs.len() as u64
    }

    /// When a message counts as delivered.
    pub fn mode(&self) -> Mode {
        self.config.mode
    }

    /// Whether the handshake ended with enough peers.
    pub fn is_established(&self) -> bool {
        self.phase == Phase::Established
    }

    /// Group-wide counters.
    pub fn stats(&self) -> GroupStats {
        let mut s = self.stats;
        s.peers_up = self.peers.iter().filter(|p| p.state == PeerState::Up).count();
        s.peer_slots = self.peers.len();
        s
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.stats.outstanding_bytes as usize
    }

    /// Peers in the order added, with their current state.
    pub fn peer_ids(&self) -> impl Iterator<Item = PeerId> + '_ {
        (0..self.peers.len() as u32).map(|i| self.id(i))
    }

    // ---- handshake (spec §14.3) --------------------------------------------

    /// A member finished its handshake at `now`.
    pub(crate) fn on_connected(&mut self, idx: u32, now: Instant) {
        // spec §14.3: the answers show how long an answer takes; a peer
        // still silent after twice the latest of them (plus 10 ms) has
        // probably lost its SYN or SYN-ACK and is asked again, rather than
        // after the response timeout. A later answer moves the retry later.
        if let Phase::Connecting { started, deadline, retry } = self.phase {
            if retry != Some(started) {
                let at = now + now.saturating_duration_since(started) + Duration::from_millis(10);
                self.phase = Phase::Connecting { started, deadline, retry: Some(retry.map_or(at, |r| r.max(at))) };
            }
        }
        let first = self.next_seq();
        let peer = self.id(idx);
        let p = &mut self.peers[idx as usize];
        if p.state != PeerState::Connecting {
            return;
        }
        p.state = PeerState::Up;
        p.first_msg = first;
        if self.phase == Phase::Established {
            self.events.push_back(GroupEvent::PeerJoined { peer, addr: p.addr, first_msg: first });
        }
    }

    /// Whether every peer has answered one way or the other.
    pub(crate) fn all_answered(&self) -> bool {
        self.peers.iter().all(|p| p.state != PeerState::Connecting)
    }

    /// Ends the handshake phase: at least `min_peers` up makes the group
    /// established. Returns the connections to abort (unanswered ones, or
    /// all of them when the group failed).
    pub(crate) fn finish_handshake(&mut self, now: Instant) -> Vec<ConnHandle> {
        let mut abort = Vec::new();
        for p in self.peers.iter_mut().filter(|p| p.state == PeerState::Connecting) {
            p.state = PeerState::Gone;
            self.unreachable.push((p.addr, Unreachable::NoAnswer));
            abort.push(p.conn);
        }
        let up = self.peers.iter().filter(|p| p.state == PeerState::Up).count();
        let unreachable = std::mem::take(&mut self.unreachable);
        if up >= self.config.min_peers.max(1) {
            self.phase = Phase::Established;
            self.next_tick = Some(now + TICK);
            self.events.push_back(GroupEvent::Established { unreachable });
        } else {
            self.phase = Phase::Closed;
            for p in self.peers.iter_mut().filter(|p| p.state == PeerState::Up) {
                p.state = PeerState::Gone;
                abort.push(p.conn);
            }
            self.events.push_back(GroupEvent::Failed { unreachable });
        }
        abort
    }

    /// A member's connection ended. Returns copies to give up (messages
    /// now delivered without this peer).
    pub(crate) fn on_closed(&mut self, idx: u32, reason: CloseReason) -> Vec<(u32, u64)> {
        let peer = self.id(idx);
        let p = &mut self.peers[idx as usize];
        let was = p.state;
        p.state = PeerState::Gone;
        match was {
            PeerState::Connecting => {
                let why = match reason {
                    CloseReason::Refused => Unreachable::Refused,
                    CloseReason::ConnectTimeout => Unreachable::NoAnswer,
                    r => Unreachable::Failed(r),
                };
                if matches!(self.phase, Phase::Connecting { .. }) {
                    self.unreachable.push((p.addr, why));
                } else {
                    self.events.push_back(GroupEvent::PeerUnreachable { peer, addr: p.addr, why });
                }
            }
            PeerState::Up => {
                let why = match reason {
                    CloseReason::Aborted(crate::wire::ErrorCode::EVICTED) => Left::Evicted,
                    CloseReason::Aborted(crate::wire::ErrorCode::IDLE_TIMEOUT) => Left::Unresponsive,
                    CloseReason::Graceful if self.phase == Phase::Closed => Left::Closed,
                    r => Left::Lost(r),
                };
                self.events.push_back(GroupEvent::PeerLeft { peer, addr: p.addr, why });
            }
            PeerState::Leaving => {
                self.events.push_back(GroupEvent::PeerLeft { peer, addr: p.addr, why: Left::Removed })
            }
            PeerState::Gone => {}
        }
        self.drop_copies_of(idx)
    }

    // ---- sending (spec §14.4–§14.6) ------------------------------------------

    /// Records a message sent: `copies` are (peer, connection message id).
    pub(crate) fn record(&mut self, now: Instant, len: usize, copies: Vec<(u32, u64)>) -> u64 {
        let seq = self.next_seq();
        for &(peer, msg) in &copies {
            self.copy_of.insert((peer, msg), seq);
            let p = &mut self.peers[peer as usize];
            if p.pending == 0 {
                p.quiet_since = Some(now);
            }
            p.pending += len as u64;
        }
        let copies = copies.into_iter().map(|(peer, msg)| Copy { peer, msg, state: CopyState::Pending }).collect();
        self.msgs.push_back(GroupMsg { len, copies, done: false });
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += len as u64;
        self.stats.outstanding_bytes += len as u64;
        seq
    }

    /// A peer acknowledged its copy. Returns copies to give up (the
    /// message is delivered without them).
    pub(crate) fn on_acked(&mut self, peer: u32, msg: u64) -> Vec<(u32, u64)> {
        let Some(seq) = self.copy_of.remove(&(peer, msg)) else { return Vec::new() };
        let Some(m) = self.msgs.get_mut((seq - self.base) as usize) else { return Vec::new() };
        if let Some(c) = m.copies.iter_mut().find(|c| c.peer == peer && c.msg == msg) {
            c.state = CopyState::Acked;
        }
        let p = &mut self.peers[peer as usize];
        p.pending -= m.len as u64;
        p.acked_messages += 1;
        p.acked_bytes += m.len as u64;
        self.settle(seq)
    }

    /// The peer will not acknowledge any copy it holds: it is gone, or
    /// leaving (what it was sent is still delivered, but nothing waits).
    fn drop_copies_of(&mut self, peer: u32) -> Vec<(u32, u64)> {
        let mut touched = Vec::new();
        self.copy_of.retain(|&(p, _), &mut seq| {
            if p == peer {
                touched.push(seq);
            }
            p != peer
        });
        touched.sort_unstable();
        let mut give_up = Vec::new();
        for seq in touched {
            let Some(m) = self.msgs.get_mut((seq - self.base) as usize) else { continue };
            for c in m.copies.iter_mut().filter(|c| c.peer == peer && c.state == CopyState::Pending) {
                c.state = CopyState::Dropped;
                self.peers[peer as usize].pending -= m.len as u64;
            }
            give_up.extend(self.settle(seq));
        }
        give_up
    }

    /// spec §14.5: a message is delivered once its live copies' acks meet
    /// the mode; the pending copies left are then given up.
    fn settle(&mut self, seq: u64) -> Vec<(u32, u64)> {
        let mode = self.config.mode;
        let Some(m) = self.msgs.get_mut((seq - self.base) as usize) else { return Vec::new() };
        if m.done {
            return Vec::new();
        }
        let live = m.copies.iter().filter(|c| c.state != CopyState::Dropped).count();
        let acked = m.copies.iter().filter(|c| c.state == CopyState::Acked).count();
        if live > 0 && acked < mode.needed(live) {
            return Vec::new();
        }
        m.done = true;
        let len = m.len;
        let mut give_up = Vec::new();
        for c in m.copies.iter_mut().filter(|c| c.state == CopyState::Pending) {
            c.state = CopyState::Dropped;
            give_up.push((c.peer, c.msg));
        }
        for &(peer, msg) in &give_up {
            self.copy_of.remove(&(peer, msg));
            self.peers[peer as usize].pending -= len as u64;
        }
        if live == 0 {
            self.stats.messages_undeliverable += 1;
        } else {
            self.stats.messages_delivered += 1;
        }
        self.stats.outstanding_bytes -= len as u64;
        while self.msgs.front().is_some_and(|m| m.done) {
            self.msgs.pop_front();
            self.base += 1;
        }
        if self.want_writable {
            self.want_writable = false;
            self.events.push_back(GroupEvent::Writable);
        }
        if self.stats.outstanding_bytes == 0 {
            self.events.push_back(GroupEvent::Acked);
        }
        give_up
    }

    /// After the group closed: a member has everything acknowledged, FIN
    /// included (its connection's SendAcked).
    pub(crate) fn on_member_drained(&mut self, idx: u32) {
        if self.phase == Phase::Closed {
            self.peers[idx as usize].drained = true;
        }
    }

    /// Starts the group's close: returns (connections to close
    /// gracefully, connections to abort, still in their handshake).
    pub(crate) fn start_close(&mut self, now: Instant) -> (Vec<ConnHandle>, Vec<ConnHandle>) {
        self.phase = Phase::Closed;
        // The peer timeout keeps watching until every peer has it all.
        self.next_tick.get_or_insert(now + TICK);
        for p in self.peers.iter_mut().filter(|p| p.pending == 0) {
            p.quiet_since = Some(now);
        }
        let (mut close, mut abort) = (Vec::new(), Vec::new());
        for p in &mut self.peers {
            match p.state {
                PeerState::Connecting => {
                    p.state = PeerState::Gone;
                    abort.push(p.conn);
                }
                PeerState::Up | PeerState::Leaving => close.push(p.conn),
                PeerState::Gone => {}
            }
        }
        (close, abort)
    }

    /// Reports `Closed` once every peer is drained or gone after a close.
    pub(crate) fn check_closed(&mut self) {
        let done = self.peers.iter().all(|p| p.drained || p.state == PeerState::Gone);
        if self.phase == Phase::Closed && done && !self.close_reported {
            self.close_reported = true;
            self.events.push_back(GroupEvent::Closed);
        }
    }

    /// Whether the close has completed (`Closed` reported).
    pub fn is_closed(&self) -> bool {
        self.close_reported
    }

    /// A member's own send buffer has room again.
    pub(crate) fn on_member_writable(&mut self) {
        if self.want_writable {
            self.want_writable = false;
            self.events.push_back(GroupEvent::Writable);
        }
    }

    /// Whether every message sent is delivered in the mode's sense.
    pub fn all_delivered(&self) -> bool {
        self.stats.outstanding_bytes == 0
    }

    /// Whether message `seq` is delivered in the mode's sense.
    pub fn is_delivered(&self, seq: u64) -> bool {
        seq < self.base || self.msgs.get((seq - self.base) as usize).is_some_and(|m| m.done)
    }

    // ---- membership (spec §14.7) -------------------------------------------

    /// Adds one more destination (stream) to a peer already present.
    pub(crate) fn add_stream(&mut self, idx: u32) -> Destination {
        let peer = self.id(idx);
        let p = &mut self.peers[idx as usize];
        let stream = p.next_stream;
        p.next_stream = StreamId::new(p.next_stream.get().wrapping_add(1).max(1));
        p.streams.push(stream);
        Destination { peer, stream }
    }

    /// Removes one destination; returns whether the peer has none left.
    pub(crate) fn remove_stream(&mut self, d: Destination) -> Result<bool, GroupError> {
        let idx = self.slot_of(d.peer).ok_or(GroupError::UnknownPeer)?;
        let p = &mut self.peers[idx as usize];
        let at = p.streams.iter().position(|&s| s == d.stream).ok_or(GroupError::UnknownPeer)?;
        p.streams.remove(at);
        Ok(p.streams.is_empty())
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self.phase {
            Phase::Connecting { started, deadline, retry } => {
                Some(retry.filter(|&r| r != started).map_or(deadline, |r| r.min(deadline)))
            }
            Phase::Established => self.next_tick,
            Phase::Closed if self.close_reported => None,
            Phase::Closed => self.next_tick,
        }
    }

    /// Peer index `i`'s figures, given its connection's.
    pub(crate) fn peer_stats(
        &self,
        i: u32,
        conn: Option<crate::ConnStats>,
        peer_key: Option<[u8; 32]>,
    ) -> Option<PeerStats> {
        let p = self.peers.get(i as usize)?;
        Some(PeerStats {
            addr: p.addr,
            state: p.state,
            first_msg: p.first_msg,
            acked_messages: p.acked_messages,
            acked_bytes: p.acked_bytes,
            pending_bytes: p.pending,
            conn,
            peer_key,
        })
    }

    /// The next peer to read from, round-robin.
    pub(crate) fn rotate(&mut self) -> usize {
        self.rr = self.rr.wrapping_add(1);
        self.rr
    }
}
