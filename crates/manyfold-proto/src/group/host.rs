//! The host of an endpoint's groups (spec §14): the table of groups, the
//! member connections' events waiting for their group, and the one place
//! where a group runs ([`run`]): taken out of the table, it acts on its
//! member connections through the narrow [`Members`] trait that the
//! endpoint implements, then is put back and its events passed on.
//!
//! Every group call of the application (connect, send, membership,
//! close) and every input that reaches a group (a member's event, a
//! group deadline) goes through here; the endpoint only forwards.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use super::{
    Destination, Group, GroupConfig, GroupError, GroupEvent, GroupHandle, PeerId, PeerState, Phase, SLOT_BITS,
};
use crate::config::ConnectionConfig;
use crate::conn_handle::ConnHandle;
use crate::connection::{ConnStats, Event, MessageOptions, RecvError, SendError, State, StreamItem};
use crate::ids::StreamId;
use crate::wire::ErrorCode;

/// What a group needs of the endpoint its member connections live in.
pub(crate) trait Members {
    /// The groups' own state, which the endpoint keeps.
    fn groups(&mut self) -> &mut Groups;
    /// The settings a member connection starts from.
    fn connection_config(&self) -> &ConnectionConfig;
    /// Opens a member connection.
    fn connect(&mut self, now: Instant, addr: SocketAddr, config: ConnectionConfig) -> Result<ConnHandle, GroupError>;
    fn state(&self, h: ConnHandle) -> Option<State>;
    fn stats(&self, h: ConnHandle) -> Option<ConnStats>;
    /// Bytes `stream` of `h` takes now.
    fn room(&self, h: ConnHandle, stream: StreamId) -> usize;
    /// Asks for `Writable` once `stream` of `h` has room again.
    fn want_room(&mut self, h: ConnHandle, stream: StreamId);
    /// Queues one copy of a group message; `None` for an unknown handle.
    fn send_copy(
        &mut self,
        h: ConnHandle,
        now: Instant,
        stream: StreamId,
        data: Bytes,
        opts: MessageOptions,
    ) -> Option<Result<u64, SendError>>;
    /// Gives up a copy that is no longer needed.
    fn abandon(&mut self, h: ConnHandle, msg: u64);
    /// Sends a member's SYN again (spec §14.3's early retry).
    fn resend_syn(&mut self, h: ConnHandle, now: Instant);
    fn recv_message(&mut self, h: ConnHandle) -> Result<Option<(StreamId, StreamItem)>, RecvError>;
    /// Whether the peer finished the connection and everything before its
    /// FIN was taken.
    fn messages_done(&self, h: ConnHandle) -> bool;
    fn finish_stream(&mut self, h: ConnHandle, stream: StreamId) -> Result<(), SendError>;
    fn close(&mut self, h: ConnHandle);
    fn abort(&mut self, h: ConnHandle, now: Instant, code: ErrorCode);
    fn release(&mut self, h: ConnHandle);
}

/// An endpoint's groups, and what waits for them or for the application.
#[derive(Debug, Default)]
pub(crate) struct Groups {
    table: HashMap<u32, Group>,
    next: u32,
    /// The group each member connection belongs to.
    member_of: HashMap<ConnHandle, u32>,
    /// Member connections' events, for their group to take ([`settle`]).
    inbox: VecDeque<(u32, ConnHandle, Event)>,
    events: VecDeque<(GroupHandle, GroupEvent)>,
    /// Times a group let go of messages (done with them, or released):
    /// the endpoint's memo of payload checksums then lets go of its copies
    /// (spec §14.4), so that it never keeps a message alive.
    releases: u64,
}

impl Groups {
    /// A member connection's event is kept for its group; any other
    /// connection's is handed back.
    pub fn take_event(&mut self, h: ConnHandle, ev: Event) -> Option<Event> {
        // Most endpoints have no group: no hashing per event then (3% of
        // a bulk receiver's CPU at 1,452-byte datagrams).
        if self.member_of.is_empty() {
            return Some(ev);
        }
        match self.member_of.get(&h) {
            Some(&g) => {
                self.inbox.push_back((g, h, ev));
                None
            }
            None => Some(ev),
        }
    }

    /// Connections that are some group's members.
    pub fn member_count(&self) -> usize {
        self.member_of.len()
    }

    /// Times a group let go of messages, so far.
    pub fn releases(&self) -> u64 {
        self.releases
    }

    pub fn get(&self, g: GroupHandle) -> Option<&Group> {
        self.table.get(&g.0)
    }

    /// The next group event for the application.
    pub fn poll_event(&mut self) -> Option<(GroupHandle, GroupEvent)> {
        self.events.pop_front()
    }

    /// The earliest deadline of any group.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.table.values().filter_map(|g| g.poll_timeout()).min()
    }

    /// The connection that serves `peer`.
    pub fn peer_conn(&self, g: GroupHandle, peer: PeerId) -> Option<ConnHandle> {
        let group = self.table.get(&g.0)?;
        Some(group.peers.get(group.slot_of(peer)? as usize)?.conn)
    }

    /// Every member connection of the group, gone ones included.
    pub fn conns(&self, g: GroupHandle) -> Vec<ConnHandle> {
        self.table.get(&g.0).map_or_else(Vec::new, |group| group.peers.iter().map(|p| p.conn).collect())
    }

    fn put_back(&mut self, id: u32, mut group: Group) {
        while let Some(ev) = group.events.pop_front() {
            self.events.push_back((GroupHandle(id), ev));
        }
        self.table.insert(id, group);
    }
}

/// The one place a group runs: taken out of the table so that `f` can act
/// on the endpoint's connections through `m`, then put back, its events
/// passed on. `None` when there is no such group.
fn run<M: Members, R>(m: &mut M, id: u32, f: impl FnOnce(&mut M, &mut Group) -> R) -> Option<R> {
    let mut group = m.groups().table.remove(&id)?;
    let done = |g: &Group| g.stats.messages_delivered + g.stats.messages_undeliverable;
    let before = done(&group);
    let r = f(m, &mut group);
    if done(&group) != before {
        m.groups().releases += 1;
    }
    m.groups().put_back(id, group);
    Some(r)
}

/// Runs an application's call on group `g`, then hands the events it
/// caused to their groups.
fn with_group<M: Members, R>(
    m: &mut M,
    g: GroupHandle,
    now: Instant,
    f: impl FnOnce(&mut M, &mut Group) -> Result<R, GroupError>,
) -> Result<R, GroupError> {
    let Some(r) = run(m, g.0, f) else { return Err(GroupError::UnknownGroup) };
    settle(m, now);
    r
}

/// Hands member connections' events to their groups.
pub(crate) fn settle<M: Members>(m: &mut M, now: Instant) {
    while let Some((id, h, ev)) = m.groups().inbox.pop_front() {
        run(m, id, |m, group| member_event(m, group, now, h, ev));
    }
}

/// Opens a group: a handshake with every peer at once (spec §14.3, paper 01).
pub(crate) fn connect<M: Members>(
    m: &mut M,
    now: Instant,
    peers: &[SocketAddr],
    config: GroupConfig,
) -> Result<GroupHandle, GroupError> {
    config.mode.check().map_err(|_| GroupError::InvalidMode(config.mode))?;
    if peers.is_empty() {
        return Err(GroupError::NoPeers);
    }
    if peers.len() > config.max_peers {
        return Err(GroupError::TooManyPeers(config.max_peers));
    }
    let id = m.groups().next;
    m.groups().next += 1;
    let mut g = Group::new(config, now);
    let mut made = Vec::new();
    for &addr in peers {
        match connect_member(m, now, &g.config, addr) {
            Ok(h) => made.push((addr, h)),
            Err(e) => {
                for (_, h) in made {
                    m.release(h);
                }
                return Err(e);
            }
        }
    }
    for (addr, h) in made {
        g.add_peer(addr, h);
        m.groups().member_of.insert(h, id);
    }
    m.groups().table.insert(id, g);
    Ok(GroupHandle(id))
}

/// A member connection: its first SYN retransmission after the group's
/// response timeout, and no handshake limit of its own before the
/// group's overall timeout.
fn connect_member<M: Members>(
    m: &mut M,
    now: Instant,
    config: &GroupConfig,
    addr: SocketAddr,
) -> Result<ConnHandle, GroupError> {
    let mut cc = m.connection_config().clone();
    cc.initial_rto = config.response_timeout;
    cc.connect_timeout = cc.connect_timeout.max(config.overall_timeout + config.response_timeout);
    m.connect(now, addr, cc)
}

/// Sends one message to the group (spec §14.4–§14.6): to every
/// destination, or to K of them in subset mode. Returns its sequence number.
pub(crate) fn send<M: Members>(
    m: &mut M,
    g: GroupHandle,
    now: Instant,
    data: Bytes,
    opts: MessageOptions,
) -> Result<u64, GroupError> {
    let max = m.connection_config().max_message;
    if data.len() > max {
        return Err(GroupError::MessageTooLarge { size: data.len(), max });
    }
    with_group(m, g, now, |m, group| {
        let len = data.len();
        let chosen = choose(m, group, len)?;
        let mut copies = Vec::with_capacity(chosen.len());
        for (p, s) in chosen {
            let h = group.peers[p as usize].conn;
            match m.send_copy(h, now, s, data.clone(), opts) {
                Some(Ok(msg)) => copies.push((p, msg)),
                // A stream the peer stopped, or a connection closing:
                // this copy is left out; its events follow.
                Some(Err(e)) => tracing::debug!(peer = p, error = %e, "group copy not queued"),
                None => {}
            }
        }
        if copies.is_empty() {
            return Err(GroupError::NoPeers);
        }
        Ok(group.record(now, len, copies))
    })
}

/// The destinations of a message of `len` bytes, from each member's room
/// and load; when blocked, the short members are asked for `Writable`.
fn choose<M: Members>(m: &mut M, group: &mut Group, len: usize) -> Result<Vec<(u32, StreamId)>, GroupError> {
    let room = |p: u32, s: StreamId| m.room(group.peers[p as usize].conn, s);
    let load = |p: u32| {
        let peer = &group.peers[p as usize];
        m.stats(peer.conn).map_or(f64::MAX, |s| peer.load_score(&s))
    };
    // Each closure borrows `group` immutably; `choose` needs it mutably,
    // so the inputs are gathered first.
    let rooms: Vec<((u32, StreamId), usize)> = group
        .peers
        .iter()
        .enumerate()
        .filter(|(_, p)| p.takes_new())
        .flat_map(|(i, p)| p.streams.iter().map(move |&s| (i as u32, s)))
        .map(|d| (d, room(d.0, d.1)))
        .collect();
    let loads: Vec<f64> = (0..group.peers.len() as u32).map(load).collect();
    let room_of = |p: u32, s: StreamId| rooms.iter().find(|(d, _)| *d == (p, s)).map_or(0, |x| x.1);
    let chosen = group.choose(len, room_of, |p| loads[p as usize]);
    if chosen == Err(GroupError::Blocked) {
        // Be told when a short peer has room again.
        for &((p, s), r) in &rooms {
            if r < len {
                m.want_room(group.peers[p as usize].conn, s);
            }
        }
    }
    chosen
}

/// The next message, notice or stream end from any peer, peers taking turns.
pub(crate) fn recv_message<M: Members>(m: &mut M, g: GroupHandle) -> Option<(Destination, StreamItem)> {
    let group = m.groups().table.get_mut(&g.0)?;
    let n = group.peers.len();
    let start = group.rotate();
    let members: Vec<(usize, ConnHandle, PeerId, bool)> = (0..n)
        .map(|k| (start + k) % n)
        .map(|i| (i, group.peers[i].conn, group.id(i as u32), group.peers[i].fin_taken))
        .collect();
    for (i, h, peer, fin_taken) in members {
        if let Ok(Some((stream, item))) = m.recv_message(h) {
            return Some((Destination { peer, stream }, item));
        }
        // spec §14.8: the peer finished its connection (a server that
        // closes, a receiver that is done): the end of its byte stream,
        // once, as a one-to-one connection's reader sees it.
        if !fin_taken && m.messages_done(h) {
            if let Some(p) = m.groups().table.get_mut(&g.0).and_then(|g| g.peers.get_mut(i)) {
                p.fin_taken = true;
            }
            return Some((Destination { peer, stream: StreamId::BYTES }, StreamItem::Finished));
        }
    }
    None
}

/// Adds a destination (spec §14.7): one more stream to a peer already in
/// the group, or a new peer.
pub(crate) fn add_destination<M: Members>(
    m: &mut M,
    g: GroupHandle,
    now: Instant,
    addr: SocketAddr,
) -> Result<Destination, GroupError> {
    with_group(m, g, now, |m, group| {
        if let Some(i) = group.find_peer(addr) {
            return Ok(group.add_stream(i));
        }
        // spec §14.7: a slot of a peer that has gone is taken first,
        // so a group with churn holds only the peers present.
        let reusable = group.reusable_slot(|h| matches!(m.state(h), None | Some(State::Closed)));
        if reusable.is_none() && group.peers.len() >= group.config.max_peers.min(1 << SLOT_BITS) {
            return Err(GroupError::TooManyPeers(group.config.max_peers));
        }
        let h = connect_member(m, now, &group.config, addr)?;
        let peer = match reusable {
            Some(idx) => {
                let (peer, old) = group.reuse_slot(idx, addr, h);
                m.groups().member_of.remove(&old);
                m.release(old);
                peer
            }
            None => group.add_peer(addr, h),
        };
        m.groups().member_of.insert(h, g.0);
        Ok(Destination { peer, stream: StreamId::BYTES })
    })
}

/// Removes one destination: its stream is finished after what was sent
/// on it; the last one to a peer removes the peer.
pub(crate) fn remove_destination<M: Members>(
    m: &mut M,
    g: GroupHandle,
    now: Instant,
    d: Destination,
) -> Result<(), GroupError> {
    let last = m.groups().table.get_mut(&g.0).ok_or(GroupError::UnknownGroup)?.remove_stream(d)?;
    if last {
        return remove_peer(m, g, now, d.peer);
    }
    let h = m.groups().peer_conn(g, d.peer).ok_or(GroupError::UnknownPeer)?;
    // A failure means the stream or the connection is already over.
    let _ = m.finish_stream(h, d.stream);
    Ok(())
}

/// Removes a peer with every stream to it: it gets what it was already
/// sent, then its connection closes gracefully.
pub(crate) fn remove_peer<M: Members>(m: &mut M, g: GroupHandle, now: Instant, peer: PeerId) -> Result<(), GroupError> {
    with_group(m, g, now, |m, group| {
        let idx = group.slot_of(peer).ok_or(GroupError::UnknownPeer)?;
        let p = &group.peers[idx as usize];
        let (h, was) = (p.conn, p.state);
        let give_up = group.start_leaving(idx);
        abandon(m, group, give_up);
        if was == PeerState::Connecting {
            m.abort(h, now, ErrorCode::APPLICATION);
        } else {
            m.close(h);
        }
        Ok(())
    })
}

/// Ends the group: members close gracefully (`code` `None`) or are
/// aborted with `code`; those still in their handshake are aborted.
pub(crate) fn close<M: Members>(m: &mut M, g: GroupHandle, now: Instant, code: Option<ErrorCode>) {
    let _ = with_group(m, g, now, |m, group| {
        let (close, abort) = group.start_close(now);
        match code {
            None => {
                for h in close {
                    m.close(h);
                }
                for h in abort {
                    m.abort(h, now, ErrorCode::APPLICATION);
                }
            }
            Some(code) => {
                for h in close.into_iter().chain(abort) {
                    m.abort(h, now, code);
                }
            }
        }
        group.check_closed();
        Ok(())
    });
}

/// Forgets the group; its connections are freed once closed.
pub(crate) fn release<M: Members>(m: &mut M, g: GroupHandle) {
    let Some(group) = m.groups().table.remove(&g.0) else { return };
    m.groups().releases += 1;
    for p in &group.peers {
        m.groups().member_of.remove(&p.conn);
        m.release(p.conn);
    }
}

/// Gives up copies whose message was delivered without them.
fn abandon<M: Members>(m: &mut M, group: &Group, copies: Vec<(u32, u64)>) {
    for (p, msg) in copies {
        m.abandon(group.peers[p as usize].conn, msg);
    }
}

fn member_event<M: Members>(m: &mut M, group: &mut Group, now: Instant, h: ConnHandle, ev: Event) {
    let Some(idx) = group.peer_of(h) else { return };
    let connecting = matches!(group.phase, Phase::Connecting { .. });
    match ev {
        Event::Connected => group.on_connected(idx, now),
        Event::Closed(reason) => {
            let give_up = group.on_closed(idx, reason);
            abandon(m, group, give_up);
        }
        Event::MessageAcked(msg) => {
            let give_up = group.on_acked(idx, msg);
            abandon(m, group, give_up);
        }
        Event::Writable => group.on_member_writable(),
        Event::SendAcked => group.on_member_drained(idx),
        Event::Readable => group.events.push_back(GroupEvent::Readable),
        _ => {}
    }
    if connecting && group.all_answered() {
        end_handshake(m, group, now);
    }
    group.check_closed();
}

fn end_handshake<M: Members>(m: &mut M, group: &mut Group, now: Instant) {
    for h in group.finish_handshake(now) {
        m.abort(h, now, ErrorCode::APPLICATION);
    }
}

/// Group deadlines: the handshake's overall timeout and early retry, and
/// the tick of load and rate measurements (which may evict a peer).
pub(crate) fn handle_timeout<M: Members>(m: &mut M, now: Instant) {
    let groups = m.groups();
    let due: Vec<u32> =
        groups.table.iter().filter(|(_, g)| g.poll_timeout().is_some_and(|t| t <= now)).map(|(&id, _)| id).collect();
    for id in due {
        run(m, id, |m, group| group_timeout(m, group, now));
    }
    settle(m, now);
}

fn group_timeout<M: Members>(m: &mut M, group: &mut Group, now: Instant) {
    match group.phase {
        Phase::Connecting { deadline, .. } if deadline <= now => end_handshake(m, group, now),
        Phase::Connecting { .. } => {
            for h in group.take_retry(now) {
                m.resend_syn(h, now);
            }
        }
        Phase::Established | Phase::Closed => {
            let evict = group.on_tick(now, |h| m.stats(h));
            for i in evict {
                let h = group.peers[i as usize].conn;
                tracing::debug!(peer = i, "evicting a slow group member");
                m.abort(h, now, ErrorCode::EVICTED);
            }
            for i in group.unresponsive(now) {
                let h = group.peers[i as usize].conn;
                tracing::debug!(peer = i, "dropping an unresponsive group member");
                m.abort(h, now, ErrorCode::IDLE_TIMEOUT);
            }
        }
    }
}
