//! The endpoint as the host of its groups (spec §14): it lends its
//! connections to groups through [`Members`], and forwards each of the
//! application's group calls to group/host.rs, where groups run.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use super::{ConnectError, Endpoint};
use crate::config::ConnectionConfig;
use crate::conn_handle::ConnHandle;
use crate::connection::{ConnStats, MessageOptions, RecvError, SendError, State, StreamItem};
use crate::group::host::{self, Groups, Members};
use crate::group::{Destination, Group, GroupConfig, GroupError, GroupEvent, GroupHandle, PeerId, PeerStats};
use crate::ids::StreamId;
use crate::wire::ErrorCode;

impl Members for Endpoint {
    fn groups(&mut self) -> &mut Groups {
        &mut self.groups
    }

    fn connection_config(&self) -> &ConnectionConfig {
        &self.config.connection
    }

    fn connect(&mut self, now: Instant, addr: SocketAddr, config: ConnectionConfig) -> Result<ConnHandle, GroupError> {
        self.connect_with(now, addr, config).map_err(|e| match e {
            ConnectError::InvalidAddress(a) => GroupError::InvalidAddress(a),
            ConnectError::TooManyConnections(n) => GroupError::TooManyPeers(n),
        })
    }

    fn state(&self, h: ConnHandle) -> Option<State> {
        self.table.get(h).map(|c| c.state())
    }

    fn stats(&self, h: ConnHandle) -> Option<ConnStats> {
        self.table.get(h).map(|c| c.stats())
    }

    fn room(&self, h: ConnHandle, stream: StreamId) -> usize {
        self.table.get(h).map_or(0, |c| c.stream_capacity(stream))
    }

    fn want_room(&mut self, h: ConnHandle, stream: StreamId) {
        self.with_conn(h, |c| c.want_room(stream));
    }

    fn send_copy(
        &mut self,
        h: ConnHandle,
        now: Instant,
        stream: StreamId,
        data: Bytes,
        opts: MessageOptions,
    ) -> Option<Result<u64, SendError>> {
        self.with_conn(h, |c| c.send_tracked(now, stream, data, opts))
    }

    fn abandon(&mut self, h: ConnHandle, msg: u64) {
        self.with_conn(h, |c| c.abandon_message(msg));
    }

    fn resend_syn(&mut self, h: ConnHandle, now: Instant) {
        self.with_conn(h, |c| c.resend_syn(now));
        self.touch(h.index(), now);
    }

    fn recv_message(&mut self, h: ConnHandle) -> Result<Option<(StreamId, StreamItem)>, RecvError> {
        self.conn_mut(h).recv_message()
    }

    fn messages_done(&self, h: ConnHandle) -> bool {
        self.conn(h).messages_done()
    }

    fn finish_stream(&mut self, h: ConnHandle, stream: StreamId) -> Result<(), SendError> {
        self.conn_mut(h).finish_stream(stream)
    }

    fn close(&mut self, h: ConnHandle) {
        self.conn_mut(h).close()
    }

    fn abort(&mut self, h: ConnHandle, now: Instant, code: ErrorCode) {
        self.conn_mut(h).abort(now, code)
    }

    fn release(&mut self, h: ConnHandle) {
        self.conn_mut(h).release()
    }
}

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
        host::connect(self, now, peers, config)
    }

    /// The group, for its sequence numbers, mode and figures.
    pub fn group(&self, g: GroupHandle) -> Option<&Group> {
        self.groups.get(g)
    }

    /// One peer's figures, its connection's included.
    pub fn group_peer_stats(&self, g: GroupHandle, peer: PeerId) -> Option<PeerStats> {
        let group = self.groups.get(g)?;
        let idx = group.slot_of(peer)?;
        let conn = group.peers.get(idx as usize).and_then(|p| self.table.get(p.conn));
        group.peer_stats(idx, conn.map(|c| c.stats()), conn.and_then(|c| c.peer_key()))
    }

    /// The connection that serves `peer`, for calls on it alone.
    pub fn group_peer_conn(&self, g: GroupHandle, peer: PeerId) -> Option<ConnHandle> {
        self.groups.peer_conn(g, peer)
    }

    /// Every member connection of the group, gone ones included.
    pub fn group_conns(&self, g: GroupHandle) -> Vec<ConnHandle> {
        self.groups.conns(g)
    }

    /// The group's sender waits to read before its first message (spec
    /// §6.2): every member's cookie echo held for a first write goes at
    /// the next `poll_transmit`, as [`crate::ConnMut::end_echo_hold`]
    /// does for one connection. Cheap when nothing is held.
    pub fn group_end_echo_holds(&mut self, g: GroupHandle, now: Instant) {
        let Some(group) = self.groups.get(g) else { return };
        for conn in group.peers.iter().map(|p| p.conn) {
            if self.table.get_mut(conn).is_some_and(|c| c.end_echo_hold(now)) {
                self.schedule.mark(conn.index(), self.table.slot_mut(conn.index()));
            }
        }
    }

    /// The next group event.
    pub fn poll_group_event(&mut self) -> Option<(GroupHandle, GroupEvent)> {
        self.groups.poll_event()
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
        host::send(self, g, now, data, opts)
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
        self.conn_mut(h).send_message(now, dest.stream, data, opts)
    }

    /// The next message, notice or stream end from any peer, peers taking turns.
    pub fn group_recv_message(&mut self, g: GroupHandle) -> Option<(Destination, StreamItem)> {
        host::recv_message(self, g)
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
        host::add_destination(self, g, now, addr)
    }

    /// Removes one destination (paper 00's RemoveDestination): its stream
    /// is finished after what was sent on it; the last one to a peer
    /// removes the peer.
    pub fn group_remove_destination(&mut self, g: GroupHandle, now: Instant, d: Destination) -> Result<(), GroupError> {
        host::remove_destination(self, g, now, d)
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
        host::remove_peer(self, g, now, peer)
    }

    /// Ends the group gracefully: every member connection closes after
    /// what it holds is delivered; [`GroupEvent::Closed`] follows once
    /// every peer has acknowledged it all, or is gone. Peers still in
    /// their handshake are aborted.
    pub fn group_close(&mut self, g: GroupHandle, now: Instant) {
        host::close(self, g, now, None);
    }

    /// Ends the group at once: every member connection is aborted with
    /// `code` (a RST carrying it, spec §4.6), nothing more is delivered,
    /// and [`GroupEvent::Closed`] follows as the members close.
    pub fn group_abort(&mut self, g: GroupHandle, now: Instant, code: ErrorCode) {
        host::close(self, g, now, Some(code));
    }

    /// Forgets the group; its connections are freed once closed.
    pub fn group_release(&mut self, g: GroupHandle) {
        host::release(self, g);
    }

    /// Hands member connections' events to their groups (group/host.rs
    /// runs them). Called once an input is fully routed (`handle_datagram`,
    /// `handle_icmp`, `handle_timeout`) and after each connection's output
    /// in `poll_transmit`, whose events (acks, room) a group acts on at once.
    pub(super) fn run_groups(&mut self, now: Instant) {
        host::settle(self, now);
    }
}
