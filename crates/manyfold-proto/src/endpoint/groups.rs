//! The endpoint's side of groups (spec §14): creating them, handing each
//! group its members' events and its timer, and the application's group
//! calls. A group is taken out of the table while it runs, so that it can
//! act on the endpoint's connections (send copies, give them up, connect,
//! close) through the same calls the application uses.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use super::{ConnHandle, ConnectError, Endpoint};
use crate::connection::{Event, MessageOptions, SendError, State, StreamItem};
use crate::group::{
    Destination, Group, GroupConfig, GroupError, GroupEvent, GroupHandle, PeerId, PeerState, PeerStats, SLOT_BITS,
};
use crate::wire::ErrorCode;

impl Endpoint {
    /// Opens a group: a handshake with every peer at once (spec §14.3,
    /// paper 01). [`GroupEvent::Established`] or [`GroupEvent::Failed`]
    /// follows as soon as every peer has answered, or at the overall timeout.
    pub fn group_connect(
        &mut self,
        now: Instant,
        peers: &[SocketAddr],
        config: GroupConfig,
    ) -> Result<GroupHandle, GroupError> {
        config.mode.check().map_err(|_| GroupError::NoPeers)?;
        if peers.is_empty() {
            return Err(GroupError::NoPeers);
        }
        if peers.len() > config.max_peers {
            return Err(GroupError::TooManyPeers(config.max_peers));
        }
        let id = self.next_group;
        self.next_group += 1;
        let mut g = Group::new(config, now);
        let mut made = Vec::new();
        for &addr in peers {
            match self.connect_member(now, &g.config, addr) {
                Ok(h) => made.push((addr, h)),
                Err(e) => {
                    for (_, h) in made {
                        self.release(h);
                    }
                    return Err(e);
                }
            }
        }
        for (addr, h) in made {
            g.add_peer(addr, h);
            self.member_of.insert(h, id);
        }
        self.groups.insert(id, g);
        Ok(GroupHandle(id))
    }

    /// A member connection: its first SYN retransmission after the group's
    /// response timeout, and no handshake limit of its own before the
    /// group's overall timeout.
    fn connect_member(
        &mut self,
        now: Instant,
        config: &GroupConfig,
        addr: SocketAddr,
    ) -> Result<ConnHandle, GroupError> {
        let mut cc = self.config.connection.clone();
        cc.initial_rto = config.response_timeout;
        cc.connect_timeout = cc.connect_timeout.max(config.overall_timeout + config.response_timeout);
        self.connect_with(now, addr, cc).map_err(|e| match e {
            ConnectError::InvalidAddress(a) => GroupError::InvalidAddress(a),
            ConnectError::TooManyConnections(n) => GroupError::TooManyPeers(n),
        })
    }

    /// The group, for its sequence numbers, mode and figures.
    pub fn group(&self, g: GroupHandle) -> Option<&Group> {
        self.groups.get(&g.0)
    }

    /// One peer's figures, its connection's included.
    pub fn group_peer_stats(&self, g: GroupHandle, peer: PeerId) -> Option<PeerStats> {
        let group = self.groups.get(&g.0)?;
        let idx = group.slot_of(peer)?;
        let conn = group.peers.get(idx as usize).and_then(|p| self.conn(p.conn));
        group.peer_stats(idx, conn.map(|c| c.stats()), conn.and_then(|c| c.peer_key()))
    }

    /// The connection that serves `peer`, for calls on it alone.
    pub fn group_peer_conn(&self, g: GroupHandle, peer: PeerId) -> Option<ConnHandle> {
        let group = self.groups.get(&g.0)?;
        Some(group.peers.get(group.slot_of(peer)? as usize)?.conn)
    }

    /// Every member connection of the group, gone ones included.
    pub fn group_conns(&self, g: GroupHandle) -> Vec<ConnHandle> {
        self.groups.get(&g.0).map_or_else(Vec::new, |group| group.peers.iter().map(|p| p.conn).collect())
    }

    /// The next group event.
    pub fn poll_group_event(&mut self) -> Option<(GroupHandle, GroupEvent)> {
        self.group_events.pop_front()
    }

    /// Sends one message to the group (spec §14.4–§14.6): to every
    /// destination, or to K of them in subset mode. The data is shared by
    /// every copy, never copied. Returns its group sequence number.
    pub fn group_send(
        &mut self,
        g: GroupHandle,
        now: Instant,
        data: Bytes,
        opts: MessageOptions,
    ) -> Result<u64, GroupError> {
        let max = self.config.connection.max_message;
        if data.len() > max {
            return Err(GroupError::MessageTooLarge { size: data.len(), max });
        }
        self.with_group(g, now, |ep, group| {
            let len = data.len();
            let chosen = {
                let room = |p: u32, s: u16| ep.conn(group.peers[p as usize].conn).map_or(0, |c| c.stream_capacity(s));
                let load = |p: u32| {
                    let peer = &group.peers[p as usize];
                    ep.conn(peer.conn).map_or(f64::MAX, |c| peer.load_score(&c.stats()))
                };
                // Each closure borrows `group` immutably; `choose` needs it
                // mutably, so the inputs are gathered first.
                let rooms: Vec<((u32, u16), usize)> = group
                    .peers
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.takes_new())
                    .flat_map(|(i, p)| p.streams.iter().map(move |&s| (i as u32, s)))
                    .map(|d| (d, room(d.0, d.1)))
                    .collect();
                let loads: Vec<f64> = (0..group.peers.len() as u32).map(load).collect();
                let room_of = |p: u32, s: u16| rooms.iter().find(|(d, _)| *d == (p, s)).map_or(0, |x| x.1);
                let chosen = group.choose(len, room_of, |p| loads[p as usize]);
                if chosen == Err(GroupError::Blocked) {
                    // Be told when a short peer has room again.
                    for &((p, s), r) in &rooms {
                        if r < len {
                            let h = group.peers[p as usize].conn;
                            ep.with_conn(h, |c| c.want_room(s));
                        }
                    }
                }
                chosen?
            };
            let mut copies = Vec::with_capacity(chosen.len());
            for (p, s) in chosen {
                let h = group.peers[p as usize].conn;
                match ep.with_conn(h, |c| c.send_tracked(now, s, data.clone(), opts)) {
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

    /// Sends a message to one destination only (a request to one server,
    /// say). It is not a group message: the group does not track it.
    pub fn group_send_to(
        &mut self,
        g: GroupHandle,
        now: Instant,
        dest: Destination,
        data: &[u8],
        opts: MessageOptions,
    ) -> Result<(), SendError> {
        let h = self.group_peer_conn(g, dest.peer).ok_or(SendError::UnknownConnection)?;
        self.send_message(h, now, dest.stream, data, opts)
    }

    /// The next message, notice or stream end from any peer, peers taking turns.
    pub fn group_recv_message(&mut self, g: GroupHandle) -> Option<(Destination, StreamItem)> {
        let group = self.groups.get_mut(&g.0)?;
        let n = group.peers.len();
        let start = group.rotate();
        let conns: Vec<ConnHandle> = (0..n).map(|i| group.peers[(start + i) % n].conn).collect();
        let ids: Vec<PeerId> = (0..n).map(|i| group.id(((start + i) % n) as u32)).collect();
        for (i, h) in conns.into_iter().enumerate() {
            if let Ok(Some((stream, item))) = self.recv_message(h) {
                let peer = ids[i];
                return Some((Destination { peer, stream }, item));
            }
        }
        None
    }

    /// Adds a destination (spec §14.7, paper 00's AddDestination): one
    /// more stream to a peer already in the group, or a new peer, which
    /// receives messages from the point [`GroupEvent::PeerJoined`] names.
    pub fn group_add_destination(
        &mut self,
        g: GroupHandle,
        now: Instant,
        addr: SocketAddr,
    ) -> Result<Destination, GroupError> {
        self.with_group(g, now, |ep, group| {
            if let Some(i) = group.find_peer(addr) {
                return Ok(group.add_stream(i));
            }
            // spec §14.7: a slot of a peer that has gone is taken first,
            // so a group with churn holds only the peers present.
            let reusable = group.reusable_slot(|h| matches!(ep.state(h), None | Some(State::Closed)));
            if reusable.is_none() && group.peers.len() >= group.config.max_peers.min(1 << SLOT_BITS) {
                return Err(GroupError::TooManyPeers(group.config.max_peers));
            }
            let h = ep.connect_member(now, &group.config, addr)?;
            let peer = match reusable {
                Some(idx) => {
                    let (peer, old) = group.reuse_slot(idx, addr, h);
                    ep.member_of.remove(&old);
                    ep.release(old);
                    peer
                }
                None => group.add_peer(addr, h),
            };
            ep.member_of.insert(h, g.0);
            Ok(Destination { peer, stream: 0 })
        })
    }

    /// Removes one destination (paper 00's RemoveDestination): its stream
    /// is finished after what was sent on it; the last one to a peer
    /// removes the peer.
    pub fn group_remove_destination(&mut self, g: GroupHandle, now: Instant, d: Destination) -> Result<(), GroupError> {
        let last = self.groups.get_mut(&g.0).ok_or(GroupError::UnknownGroup)?.remove_stream(d)?;
        if last {
            return self.group_fully_remove_destination(g, now, d.peer);
        }
        let h = self.group_peer_conn(g, d.peer).ok_or(GroupError::UnknownPeer)?;
        // A failure means the stream or the connection is already over.
        let _ = self.finish_stream(h, d.stream);
        Ok(())
    }

    /// Removes a peer with every stream to it (paper 00's
    /// FullyRemoveDestination): it gets what it was already sent, then
    /// its connection closes gracefully; no message waits for it.
    pub fn group_fully_remove_destination(
        &mut self,
        g: GroupHandle,
        now: Instant,
        peer: PeerId,
    ) -> Result<(), GroupError> {
        self.with_group(g, now, |ep, group| {
            let idx = group.slot_of(peer).ok_or(GroupError::UnknownPeer)?;
            let p = &group.peers[idx as usize];
            let (h, was) = (p.conn, p.state);
            let give_up = group.start_leaving(idx);
            ep.give_up(group, give_up);
            if was == PeerState::Connecting {
                ep.abort(h, now, ErrorCode::APPLICATION);
            } else {
                ep.close(h);
            }
            Ok(())
        })
    }

    /// Ends the group gracefully: every member connection closes after
    /// what it holds is delivered; [`GroupEvent::Closed`] follows once
    /// every peer has acknowledged it all, or is gone. Peers still in
    /// their handshake are aborted.
    pub fn group_close(&mut self, g: GroupHandle, now: Instant) {
        let _ = self.with_group(g, now, |ep, group| {
            let (close, abort) = group.start_close(now);
            for h in close {
                ep.close(h);
            }
            for h in abort {
                ep.abort(h, now, ErrorCode::APPLICATION);
            }
            group.check_closed();
            Ok(())
        });
    }

    /// Ends the group at once: every member connection is aborted with
    /// `code` (a RST carrying it, spec §4.6), nothing more is delivered,
    /// and [`GroupEvent::Closed`] follows as the members close.
    pub fn group_abort(&mut self, g: GroupHandle, now: Instant, code: ErrorCode) {
        let _ = self.with_group(g, now, |ep, group| {
            let (close, abort) = group.start_close(now);
            for h in close.into_iter().chain(abort) {
                ep.abort(h, now, code);
            }
            group.check_closed();
            Ok(())
        });
    }

    /// Forgets the group; its connections are freed once closed.
    pub fn group_release(&mut self, g: GroupHandle) {
        let Some(group) = self.groups.remove(&g.0) else { return };
        for p in &group.peers {
            self.member_of.remove(&p.conn);
            self.release(p.conn);
        }
    }

    // ---- internals -------------------------------------------------------

    /// Runs `f` with the group taken out of the table, then passes on its events.
    fn with_group<R>(
        &mut self,
        g: GroupHandle,
        now: Instant,
        f: impl FnOnce(&mut Endpoint, &mut Group) -> Result<R, GroupError>,
    ) -> Result<R, GroupError> {
        let mut group = self.groups.remove(&g.0).ok_or(GroupError::UnknownGroup)?;
        let r = f(self, &mut group);
        self.put_back(g.0, group);
        self.run_groups(now);
        r
    }

    fn put_back(&mut self, id: u32, mut group: Group) {
        while let Some(ev) = group.events.pop_front() {
            self.group_events.push_back((GroupHandle(id), ev));
        }
        self.groups.insert(id, group);
    }

    /// Gives up copies whose message was delivered without them.
    fn give_up(&mut self, group: &Group, copies: Vec<(u32, u64)>) {
        for (p, msg) in copies {
            let h = group.peers[p as usize].conn;
            self.with_conn(h, |c| c.abandon_message(msg));
        }
    }

    /// Hands member connections' events to their groups.
    pub(super) fn run_groups(&mut self, now: Instant) {
        while let Some((id, h, ev)) = self.group_inbox.pop_front() {
            let Some(mut group) = self.groups.remove(&id) else { continue };
            self.member_event(&mut group, now, h, ev);
            self.put_back(id, group);
        }
    }

    fn member_event(&mut self, group: &mut Group, now: Instant, h: ConnHandle, ev: Event) {
        let Some(idx) = group.peer_of(h) else { return };
        let connecting = matches!(group.phase, crate::group::Phase::Connecting { .. });
        match ev {
            Event::Connected => group.on_connected(idx, now),
            Event::Closed(reason) => {
                let give_up = group.on_closed(idx, reason);
                self.give_up(group, give_up);
            }
            Event::MessageAcked(msg) => {
                let give_up = group.on_acked(idx, msg);
                self.give_up(group, give_up);
            }
            Event::Writable => group.on_member_writable(),
            Event::SendAcked => group.on_member_drained(idx),
            Event::Readable => group.events.push_back(GroupEvent::Readable),
            _ => {}
        }
        if connecting && group.all_answered() {
            self.end_handshake(group, now);
        }
        group.check_closed();
    }

    fn end_handshake(&mut self, group: &mut Group, now: Instant) {
        for h in group.finish_handshake(now) {
            self.abort(h, now, ErrorCode::APPLICATION);
        }
    }

    /// Group deadlines: the handshake's overall timeout, and the tick of
    /// load and rate measurements (which may evict a peer).
    pub(super) fn group_timeouts(&mut self, now: Instant) {
        let due: Vec<u32> =
            self.groups.iter().filter(|(_, g)| g.poll_timeout().is_some_and(|t| t <= now)).map(|(&id, _)| id).collect();
        for id in due {
            let Some(mut group) = self.groups.remove(&id) else { continue };
            match group.phase {
                crate::group::Phase::Connecting { deadline, .. } if deadline <= now => {
                    self.end_handshake(&mut group, now)
                }
                crate::group::Phase::Connecting { .. } => {
                    for h in group.take_retry(now) {
                        self.with_conn(h, |c| c.resend_syn(now));
                        self.touch(h.index, now);
                    }
                }
                crate::group::Phase::Established | crate::group::Phase::Closed => {
                    let evict = group.on_tick(now, |h| self.conn(h).map(|c| c.stats()));
                    for i in evict {
                        let h = group.peers[i as usize].conn;
                        tracing::debug!(peer = i, "evicting a slow group member");
                        self.abort(h, now, ErrorCode::EVICTED);
                    }
                    for i in group.unresponsive(now) {
                        let h = group.peers[i as usize].conn;
                        tracing::debug!(peer = i, "dropping an unresponsive group member");
                        self.abort(h, now, ErrorCode::IDLE_TIMEOUT);
                    }
                }
            }
            self.put_back(id, group);
        }
        self.run_groups(now);
    }
}
