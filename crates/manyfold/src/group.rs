//! Groups as the application sees them (spec §14): one sender, many
//! receivers over unicast, on one endpoint. [`Endpoint::group`] runs the
//! parallel handshake; a [`Group`] sends messages that every peer (or the
//! mode's share of them) receives, held once in memory whatever the
//! number of peers; peers join and leave while it runs.
//!
//! ```no_run
//! # async fn demo(ep: manyfold::Endpoint, peers: Vec<std::net::SocketAddr>) -> Result<(), Box<dyn std::error::Error>> {
//! use manyfold::{GroupConfig, Mode};
//! let config = GroupConfig { mode: Mode::All, ..Default::default() };
//! let (group, unreachable) = ep.group(&peers, config).await?;
//! for (addr, why) in unreachable {
//!     eprintln!("warning: {addr} not in the group: {why}");
//! }
//! group.send(&b"to everyone"[..]).await?;
//! group.close().await?; // once every peer has it all
//! # Ok(()) }
//! ```

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use manyfold_proto::{
    CloseReason, Destination, GroupConfig, GroupEvent, GroupHandle, GroupStats, MessageOptions, PeerId, PeerState,
    PeerStats, RecvError, StreamItem, Unreachable,
};

use crate::driver::now;
use crate::endpoint::Endpoint;
use crate::error::{CloseError, ReadError, SendError};
use crate::message::IntoMessage;
use crate::shared::{register, Inner, Phase, Shared};

/// Why a group operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// Fewer than `min_peers` peers answered the handshake.
    #[error("group not established: {}", list(.0))]
    Unreachable(Vec<(SocketAddr, Unreachable)>),
    /// The engine refused the operation: too many peers, an invalid
    /// address, an unknown peer or destination, or a closed group.
    #[error(transparent)]
    Engine(#[from] manyfold_proto::GroupError),
    /// The endpoint was shut down, or its driver stopped.
    #[error("the endpoint is closed")]
    EndpointClosed,
}

fn list(peers: &[(SocketAddr, Unreachable)]) -> String {
    let names: Vec<String> = peers.iter().map(|(a, why)| format!("{a} ({why})")).collect();
    if names.is_empty() {
        "no peer answered".into()
    } else {
        format!("unreachable: {}", names.join(", "))
    }
}

/// The application-side state of one group, behind the endpoint's lock.
#[derive(Debug, Default)]
pub(crate) struct GroupState {
    /// Membership events for [`Group::next_event`].
    events: VecDeque<GroupEvent>,
    /// The handshake outcome, until `Endpoint::group` takes it.
    outcome: Option<GroupEvent>,
    closed: bool,
    /// Tasks waiting for room, delivery, events, data, the handshake or the close.
    wakers: Vec<Waker>,
}

/// Most membership events kept for [`Group::next_event`]; older ones go.
const MAX_EVENTS: usize = 4096;

impl Inner {
    /// Turns one group event into state and waker calls.
    pub(crate) fn dispatch_group(&mut self, g: GroupHandle, ev: GroupEvent) {
        let Some(s) = self.groups.get_mut(&g) else { return };
        match ev {
            GroupEvent::Established { .. } | GroupEvent::Failed { .. } => s.outcome = Some(ev),
            GroupEvent::Closed => s.closed = true,
            GroupEvent::PeerJoined { .. } | GroupEvent::PeerUnreachable { .. } | GroupEvent::PeerLeft { .. } => {
                if s.events.len() == MAX_EVENTS {
                    s.events.pop_front();
                }
                s.events.push_back(ev);
            }
            GroupEvent::Writable | GroupEvent::Acked | GroupEvent::Readable => {}
        }
        for w in s.wakers.drain(..) {
            w.wake();
        }
    }

    /// Wakes every group task (the driver stopped).
    pub(crate) fn wake_groups(&mut self) {
        for s in self.groups.values_mut() {
            for w in s.wakers.drain(..) {
                w.wake();
            }
        }
    }
}

impl Endpoint {
    /// Opens a group to `peers` (spec §14.3): a handshake with all of them
    /// at once. Returns as soon as every peer has answered, or at the
    /// overall timeout, with the peers that are not in the group and why
    /// (paper 01's partial establishment with a warning). Fails with
    /// [`GroupError::Unreachable`] if fewer than `min_peers` answered.
    pub async fn group(
        &self,
        peers: &[SocketAddr],
        config: GroupConfig,
    ) -> Result<(Group, Vec<(SocketAddr, Unreachable)>), GroupError> {
        let shared = self.shared().clone();
        let handle = {
            let mut inner = shared.lock();
            if !inner.is_running() {
                return Err(GroupError::EndpointClosed);
            }
            let g = inner.engine.group_connect(now(), peers, config)?;
            inner.groups.insert(g, GroupState::default());
            g
        };
        shared.wake_driver();
        let group = Group { shared, handle };
        let outcome =
            poll_fn(|cx| group.poll_with(cx, |inner, s| s.outcome.take().map(Ok).or_else(|| stopped(inner).map(Err))))
                .await?;
        match outcome {
            GroupEvent::Established { unreachable } => Ok((group, unreachable)),
            GroupEvent::Failed { unreachable } => Err(GroupError::Unreachable(unreachable)),
            _ => unreachable!("only handshake outcomes are stored there"),
        }
    }
}

fn stopped(inner: &Inner) -> Option<GroupError> {
    (inner.phase == Phase::Stopped).then_some(GroupError::EndpointClosed)
}

/// One sender's connection to many receivers (spec §14). Dropping it
/// closes the group gracefully in the background.
///
/// # Fewer live peers than the mode asks for
///
/// [`Mode::AtLeast`](crate::Mode::AtLeast)`(P)` and
/// `Mode::Subset { p: P, .. }` count a message as delivered once
/// min(P, live copies) are acknowledged (spec §14.5): a
/// copy whose peer left, died or was evicted no longer counts. With fewer
/// than P peers up, a message is delivered once every live peer has it,
/// and [`Group::send`] and [`Group::wait_for_send`] do not fail; `send`
/// fails with [`SendError::NoPeers`] only when no peer is left.
/// [`GroupConfig::min_peers`](crate::GroupConfig::min_peers) is checked
/// once, when the group is opened, not afterwards. For a hard minimum,
/// watch [`Group::next_event`] for [`GroupEvent::PeerLeft`] and
/// [`GroupEvent::PeerUnreachable`] (or [`Group::stats`]'s `peers_up`) and
/// stop sending, or [`Group::abort`], once fewer than P peers are up; what
/// each peer acknowledged is in [`Group::peers`] (`acked_messages`).
#[derive(Debug)]
pub struct Group {
    shared: Arc<Shared>,
    handle: GroupHandle,
}

impl Group {
    /// Runs `f` on the group's state; parks the task if it returns `None`.
    fn poll_with<R>(&self, cx: &Context<'_>, mut f: impl FnMut(&mut Inner, &mut GroupState) -> Option<R>) -> Poll<R> {
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let Some(mut s) = inner.groups.remove(&self.handle) else {
            // Only `Drop` removes it.
            unreachable!("group state outlives its handle");
        };
        let r = f(inner, &mut s);
        if r.is_none() {
            register(&mut s.wakers, cx);
        }
        inner.groups.insert(self.handle, s);
        drop(guard);
        self.shared.wake_driver();
        match r {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    /// Sends one message to the group, waiting while the shared send
    /// buffer (or a peer the mode needs) has no room. The data is held
    /// once whatever the number of peers. Returns its group sequence number.
    ///
    /// # Errors
    ///
    /// [`SendError::NoPeers`] when no peer is left to take it (fewer live
    /// peers than `Mode::AtLeast(P)` asks for is not an error: the message
    /// is delivered once every live peer has it; see [`Group`]);
    /// [`SendError::TooLarge`] when it is larger than the maximum;
    /// [`SendError::Finished`] once the group is closed;
    /// [`SendError::EndpointClosed`] when the endpoint stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the message is taken whole or not at all.
    pub async fn send(&self, data: impl IntoMessage) -> Result<u64, SendError> {
        self.send_with(data, MessageOptions::default()).await
    }

    /// [`Group::send`] with delivery options (unordered, lifetime, ...).
    ///
    /// # Errors
    ///
    /// As [`Group::send`].
    ///
    /// # Cancel safety
    ///
    /// As [`Group::send`]: the message is taken whole or not at all.
    pub async fn send_with(&self, data: impl IntoMessage, opts: MessageOptions) -> Result<u64, SendError> {
        let data = data.into_message();
        poll_fn(|cx| {
            self.poll_with(cx, |inner, _| {
                if inner.phase == Phase::Stopped {
                    return Some(Err(SendError::EndpointClosed));
                }
                match inner.engine.group_send(self.handle, now(), data.clone(), opts) {
                    Err(manyfold_proto::GroupError::Blocked) => None,
                    r => Some(r.map_err(SendError::from)),
                }
            })
        })
        .await
    }

    /// Sends a message to one destination only (not a group message).
    ///
    /// # Errors
    ///
    /// [`SendError::UnknownDestination`] when the destination is not in
    /// the group; what its connection refuses the message with otherwise
    /// ([`SendError::TooLarge`], [`SendError::Finished`] after the stream
    /// to it ended, [`SendError::Closed`] once its connection ended);
    /// [`SendError::EndpointClosed`] when the endpoint stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the message is queued whole when the future returns
    /// `Ok`, and not at all before.
    pub async fn send_to(&self, dest: Destination, data: impl IntoMessage) -> Result<(), SendError> {
        let data = data.into_message();
        poll_fn(|cx| {
            self.poll_with(cx, |inner, _| {
                if inner.phase == Phase::Stopped {
                    return Some(Err(SendError::EndpointClosed));
                }
                let opts = MessageOptions::default();
                match inner.engine.group_send_to(self.handle, now(), dest, &data, opts) {
                    Err(manyfold_proto::SendError::Blocked) => None,
                    r => Some(r.map_err(SendError::from)),
                }
            })
        })
        .await
    }

    /// Waits until every message sent is delivered in the mode's sense
    /// (paper 00's WaitForSend): for `Mode::AtLeast(P)`, acknowledged by
    /// min(P, live copies) peers, so fewer than P once peers are gone.
    ///
    /// # Errors
    ///
    /// [`CloseError::EndpointClosed`] when the endpoint stopped first.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn wait_for_send(&self) -> Result<(), CloseError> {
        poll_fn(|cx| {
            self.poll_with(cx, |inner, _| {
                let done = inner.engine.group(self.handle).is_none_or(|g| g.all_delivered());
                if done {
                    return Some(Ok(()));
                }
                (inner.phase == Phase::Stopped).then_some(Err(CloseError::EndpointClosed))
            })
        })
        .await
    }

    /// The next message, notice or stream end from any peer; `None` once
    /// the group is closed and nothing is left to read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a message is taken only when the future returns it.
    pub async fn recv_message(&self) -> Option<(Destination, StreamItem)> {
        poll_fn(|cx| {
            self.poll_with(cx, |inner, s| {
                if let Some(m) = inner.engine.group_recv_message(self.handle) {
                    return Some(Some(m));
                }
                if s.closed || inner.phase == Phase::Stopped {
                    return Some(None);
                }
                // spec §6.2: waiting to read before the first message ends
                // every member's echo hold (the receivers speak first).
                inner.engine.group_end_echo_holds(self.handle, inner.clock);
                None
            })
        })
        .await
    }

    /// The next membership event (a peer joined, could not be reached, or
    /// left, and why); `None` once the group is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an event is taken only when the future returns it.
    pub async fn next_event(&self) -> Option<GroupEvent> {
        poll_fn(|cx| {
            self.poll_with(cx, |inner, s| match s.events.pop_front() {
                Some(ev) => Some(Some(ev)),
                None => (s.closed || inner.phase == Phase::Stopped).then_some(None),
            })
        })
        .await
    }

    /// A membership event if one is waiting.
    pub fn try_event(&self) -> Option<GroupEvent> {
        self.shared.lock().groups.get_mut(&self.handle)?.events.pop_front()
    }

    /// Adds a destination (spec §14.7): one more stream to a peer present,
    /// or a new peer, which receives from the point its
    /// [`GroupEvent::PeerJoined`] names.
    pub fn add_destination(&self, addr: SocketAddr) -> Result<Destination, GroupError> {
        let r = self.shared.lock().engine.group_add_destination(self.handle, now(), addr);
        self.shared.wake_driver();
        Ok(r?)
    }

    /// Adds a peer and waits for its handshake (spec §14.7): returns where
    /// it joined once [`GroupEvent::PeerJoined`] is due, so that the caller
    /// knows which messages it will receive (those from
    /// [`Joined::first_msg`] on). The event itself stays queued for
    /// [`Group::next_event`]. An address already in the group returns at
    /// once (one more stream to it).
    ///
    /// # Errors
    ///
    /// [`GroupError::Unreachable`] naming the address and why, when its
    /// handshake fails or it does not answer within `connect_timeout`;
    /// what [`Group::add_destination`] fails with otherwise.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not remove the peer: its handshake goes on
    /// and its join is reported by event.
    pub async fn join(&self, addr: SocketAddr) -> Result<Joined, GroupError> {
        let dest = self.add_destination(addr)?;
        poll_fn(|cx| {
            self.poll_with(cx, |inner, s| {
                let Some(p) = inner.engine.group_peer_stats(self.handle, dest.peer) else {
                    return Some(Err(GroupError::Engine(manyfold_proto::GroupError::UnknownPeer)));
                };
                match p.state {
                    PeerState::Connecting => stopped(inner).map(Err),
                    PeerState::Up | PeerState::Leaving => {
                        Some(Ok(Joined { destination: dest, first_msg: p.first_msg }))
                    }
                    PeerState::Gone => {
                        let why = s.events.iter().find_map(|ev| match ev {
                            GroupEvent::PeerUnreachable { peer, why, .. } if *peer == dest.peer => Some(*why),
                            _ => None,
                        });
                        Some(Err(GroupError::Unreachable(vec![(addr, why.unwrap_or(Unreachable::NoAnswer))])))
                    }
                }
            })
        })
        .await
    }

    /// Removes one destination (its stream ends after what was sent on it).
    pub fn remove_destination(&self, dest: Destination) -> Result<(), GroupError> {
        let r = self.shared.lock().engine.group_remove_destination(self.handle, now(), dest);
        self.shared.wake_driver();
        Ok(r?)
    }

    /// Removes a peer and every stream to it; it still gets what it was sent.
    pub fn fully_remove_destination(&self, peer: PeerId) -> Result<(), GroupError> {
        let r = self.shared.lock().engine.group_fully_remove_destination(self.handle, now(), peer);
        self.shared.wake_driver();
        Ok(r?)
    }

    /// Group-wide counters.
    pub fn stats(&self) -> GroupStats {
        self.shared.lock().engine.group(self.handle).map(|g| g.stats()).unwrap_or_default()
    }

    /// Every peer's figures, in the order they were added.
    pub fn peers(&self) -> Vec<(PeerId, PeerStats)> {
        let inner = self.shared.lock();
        let Some(g) = inner.engine.group(self.handle) else { return Vec::new() };
        g.peer_ids().filter_map(|p| Some((p, inner.engine.group_peer_stats(self.handle, p)?))).collect()
    }

    /// Reads what `peer` sent on `stream` as bytes (its replies, say):
    /// an `AsyncRead` that ends at the peer's end of the stream.
    pub fn reader(&self, peer: PeerId, stream: u16) -> PeerReader {
        PeerReader { shared: self.shared.clone(), group: self.handle, peer, stream }
    }

    /// Ends the group at once: every peer gets a RST with `code` (spec
    /// §4.6) and nothing more is delivered. Later sends fail.
    pub fn abort(&self, code: manyfold_proto::wire::ErrorCode) {
        self.shared.lock().engine.group_abort(self.handle, now(), code);
        self.shared.wake_driver();
    }

    /// Closes the group gracefully and waits until every peer has
    /// acknowledged all it was sent and the end of its stream, or is gone.
    ///
    /// A peer still joining (added by [`Group::add_destination`], its
    /// handshake under way) is waited for first, at most its
    /// `connect_timeout`: it then receives what it is owed and the end of
    /// its stream rather than being dropped unannounced.
    ///
    /// # Errors
    ///
    /// [`CloseError::EndpointClosed`] if the endpoint stopped first.
    ///
    /// # Cancel safety
    ///
    /// The close begins once no peer is still joining, in the poll that
    /// sees it, and then goes on in the driver: dropping the future after
    /// that only stops the waiting, and a later `close` waits again.
    /// Dropped earlier, while a joiner's handshake runs, nothing is
    /// closed yet (dropping the [`Group`] still closes it).
    pub async fn close(&self) -> Result<(), CloseError> {
        let stopped = |inner: &Inner| (inner.phase == Phase::Stopped).then_some(Err(CloseError::EndpointClosed));
        poll_fn(|cx| {
            self.poll_with(cx, |inner, _| {
                let joining = inner.engine.group(self.handle).is_some_and(|g| {
                    g.peer_ids().any(|p| {
                        inner.engine.group_peer_stats(self.handle, p).is_some_and(|s| s.state == PeerState::Connecting)
                    })
                });
                if joining {
                    stopped(inner)
                } else {
                    Some(Ok(()))
                }
            })
        })
        .await?;
        self.shared.lock().engine.group_close(self.handle, now());
        self.shared.wake_driver();
        poll_fn(|cx| self.poll_with(cx, |inner, s| if s.closed { Some(Ok(())) } else { stopped(inner) })).await
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        {
            let mut inner = self.shared.lock();
            inner.groups.remove(&self.handle);
            let t = now();
            inner.engine.group_close(self.handle, t);
            // Its connections finish closing in the background and are then freed.
            inner.engine.group_release(self.handle);
        }
        self.shared.wake_driver();
    }
}

/// Where a peer added by [`Group::join`] came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Joined {
    /// The peer and the stream to it.
    pub destination: Destination,
    /// The first group message it receives: every message sent from
    /// this sequence number on.
    pub first_msg: u64,
}

/// The bytes one peer of a group sends on one stream ([`Group::reader`]).
#[derive(Debug)]
pub struct PeerReader {
    shared: Arc<Shared>,
    group: GroupHandle,
    peer: PeerId,
    stream: u16,
}

impl tokio::io::AsyncRead for PeerReader {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        let mut guard = self.shared.lock();
        let inner = &mut *guard;
        let Some(h) = inner.engine.group_peer_conn(self.group, self.peer) else {
            return Poll::Ready(Err(ReadError::EndpointClosed.into()));
        };
        let closed = |r: CloseReason| match r {
            CloseReason::Graceful => Ok(()),
            other => Err(ReadError::Closed(other).into()),
        };
        let r = match inner
            .engine
            .conn_mut(h)
            .stream_recv(manyfold_proto::StreamId::new(self.stream), buf.initialize_unfilled())
        {
            Ok(Some(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Ok(None) => match inner.engine.conn(h).close_reason() {
                Some(reason) => Poll::Ready(closed(reason)),
                None if inner.phase == Phase::Stopped => Poll::Ready(Err(ReadError::EndpointClosed.into())),
                None => {
                    // spec §6.2: a sender that reads before it wrote ends
                    // this member's echo hold, as a connection's reader does.
                    inner.engine.conn_mut(h).end_echo_hold(inner.clock);
                    if let Some(s) = inner.groups.get_mut(&self.group) {
                        register(&mut s.wakers, cx);
                    }
                    Poll::Pending
                }
            },
            Err(RecvError::Closed(reason)) => Poll::Ready(closed(reason)),
            Err(e) => Poll::Ready(Err(ReadError::from(e).into())),
        };
        drop(guard);
        // Reading frees receive buffer: the window may open.
        self.shared.wake_driver();
        r
    }
}
