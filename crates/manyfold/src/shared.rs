//! State shared between the driver task and the application's handles: the
//! engine, the wakers of each connection, the accept waiters, and the
//! endpoint's lifecycle. One `std::sync::Mutex` guards it; nobody holds it
//! across an `.await`.
//!
//! Engine events (manyfold-proto's `Event`) become waker calls here:
//! Connected wakes `connect`, Readable the readers, Writable the writers,
//! SendAcked the closer, StreamAcked the `wait_for_send` callers, Closed
//! everyone, Incoming the accept waiters. Readers and writers are lists:
//! with streams, several tasks may wait on one connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Waker};
use std::time::Instant;

use manyfold_proto::wire::ErrorCode;
use manyfold_proto::{CloseReason, ConnHandle, Event, State};
use tokio::sync::Notify;

use crate::config::DriverStats;
use crate::fault::Faults;
use crate::inline::InlineServer;

/// What the driver task and every handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Wakes the driver task after an application command.
    notify: Notify,
    pub(crate) local_addr: SocketAddr,
    /// An inline server is installed (spec §15.4): the driver runs its
    /// round each iteration. Read without the lock.
    inline: AtomicBool,
}

impl Shared {
    pub(crate) fn new(inner: Inner, local_addr: SocketAddr) -> Self {
        Shared { inner: Mutex::new(inner), notify: Notify::new(), local_addr, inline: AtomicBool::new(false) }
    }

    /// Whether an inline server is installed ([`Inner::inline`]).
    pub(crate) fn inline_on(&self) -> bool {
        self.inline.load(Ordering::Acquire)
    }

    /// Set under the lock, together with [`Inner::inline`].
    pub(crate) fn set_inline(&self, on: bool) {
        self.inline.store(on, Ordering::Release);
    }

    /// Locks the state. A panic elsewhere (an engine bug) poisons the mutex;
    /// we keep going so that handles can still observe that the driver stopped.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the driver there may be something to send.
    pub(crate) fn wake_driver(&self) {
        self.notify.notify_one();
    }

    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }
}

/// Lifecycle of a driven endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    /// `shutdown` was called: connections are closing; the driver stops when
    /// they are done or at the deadline.
    ShuttingDown {
        deadline: Instant,
    },
    /// The driver task has ended; nothing moves any more.
    Stopped,
}

/// The application-side state of one connection.
#[derive(Debug, Default)]
pub(crate) struct ConnState {
    /// The handshake completed (Connected event, or accepted).
    pub(crate) connected: bool,
    /// Set by the Closed event.
    pub(crate) closed: Option<CloseReason>,
    /// `close` was called on the engine (by the app or on release).
    pub(crate) close_requested: bool,
    /// The application dropped its last handle.
    pub(crate) released: bool,
    pub(crate) read: Vec<Waker>,
    pub(crate) write: Vec<Waker>,
    /// Tasks in `wait_for_send`.
    pub(crate) acked: Vec<Waker>,
    pub(crate) connect: Vec<Waker>,
    pub(crate) close: Vec<Waker>,
}

impl ConnState {
    /// Its waker lists.
    fn lists(&mut self) -> [&mut Vec<Waker>; 5] {
        [&mut self.read, &mut self.write, &mut self.acked, &mut self.connect, &mut self.close]
    }

    fn wake_all(&mut self) {
        for list in self.lists() {
            wake(list);
        }
    }
}

/// Waker lists a spare [`ConnState`] may keep, each (spec §15.3): more
/// tasks than this waiting on one connection is not a short session's.
const SPARE_WAKERS: usize = 8;

/// The application-side states of the connections, by handle, with the
/// emptied states of finished ones kept for new ones (issue 21, spec
/// §15.3: no malloc per session; a connection's first waker would
/// otherwise allocate its list). At most the engine's
/// `max_spare_connections` are kept, each holding only small lists. Reads
/// go to the map; [`Conns::insert`], [`Conns::entry`] and
/// [`Conns::remove`] pass through the pool.
#[derive(Debug, Default)]
pub(crate) struct Conns {
    map: HashMap<ConnHandle, ConnState>,
    spares: Vec<ConnState>,
    max_spares: usize,
}

impl Conns {
    fn new(max_spares: usize) -> Self {
        Conns { map: HashMap::new(), spares: Vec::new(), max_spares }
    }

    /// Emptied states kept for new connections.
    #[cfg(test)]
    fn spares(&self) -> usize {
        self.spares.len()
    }

    /// `state`, with a spare's waker lists in place of its empty ones.
    fn furnished(&mut self, mut state: ConnState) -> ConnState {
        if let Some(mut spare) = self.spares.pop() {
            for (list, kept) in state.lists().into_iter().zip(spare.lists()) {
                if list.capacity() == 0 {
                    std::mem::swap(list, kept);
                }
            }
        }
        state
    }

    /// Tracks `h` with `state` (its waker lists from a spare when it has
    /// none of its own).
    pub(crate) fn insert(&mut self, h: ConnHandle, state: ConnState) {
        let state = self.furnished(state);
        if let Some(old) = self.map.insert(h, state) {
            self.keep(old);
        }
    }

    /// `h`'s state, made by `make` (and furnished from a spare) if absent.
    pub(crate) fn entry(&mut self, h: ConnHandle) -> ConnEntry<'_> {
        ConnEntry { conns: self, h }
    }

    /// Stops tracking `h`; its state's memory is kept for the next one.
    /// Wakers still listed are dropped unwoken, as a removed state's are.
    pub(crate) fn remove(&mut self, h: &ConnHandle) -> bool {
        match self.map.remove(h) {
            Some(state) => {
                self.keep(state);
                true
            }
            None => false,
        }
    }

    fn keep(&mut self, mut state: ConnState) {
        if self.spares.len() >= self.max_spares {
            return;
        }
        let mut spare = ConnState::default();
        for (list, kept) in state.lists().into_iter().zip(spare.lists()) {
            if list.capacity() <= SPARE_WAKERS {
                list.clear();
                std::mem::swap(list, kept);
            }
        }
        self.spares.push(spare);
    }
}

impl std::ops::Deref for Conns {
    type Target = HashMap<ConnHandle, ConnState>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl std::ops::DerefMut for Conns {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

/// [`Conns::entry`]: one handle's place in the table.
pub(crate) struct ConnEntry<'a> {
    conns: &'a mut Conns,
    h: ConnHandle,
}

impl<'a> ConnEntry<'a> {
    /// The state of the handle, inserting `make()`'s if it has none.
    pub(crate) fn or_insert_with(self, make: impl FnOnce() -> ConnState) -> &'a mut ConnState {
        let ConnEntry { conns, h } = self;
        if !conns.map.contains_key(&h) {
            let state = conns.furnished(make());
            conns.map.insert(h, state);
        }
        conns.map.entry(h).or_default()
    }
}

/// Adds the task's waker to `list` unless an equivalent one is there.
pub(crate) fn register(list: &mut Vec<Waker>, cx: &Context<'_>) {
    if !list.iter().any(|w| w.will_wake(cx.waker())) {
        list.push(cx.waker().clone());
    }
}

fn wake(list: &mut Vec<Waker>) {
    for w in list.drain(..) {
        w.wake();
    }
}

/// Everything behind the mutex.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) engine: manyfold_proto::Endpoint,
    /// Connections the application holds or has not finished with. An entry
    /// goes when the connection is both released and closed.
    pub(crate) conns: Conns,
    pub(crate) accept_waiters: Vec<Waker>,
    /// Live `Endpoint` handles; at 0 the endpoint stops accepting, and the
    /// driver ends once its connections are gone.
    pub(crate) endpoint_refs: usize,
    pub(crate) phase: Phase,
    /// Tasks waiting in `shutdown` for the driver to stop.
    pub(crate) stop_waiters: Vec<Waker>,
    pub(crate) faults: Option<Faults>,
    pub(crate) driver_stats: DriverStats,
    /// Groups the application holds (spec §14).
    pub(crate) groups: HashMap<manyfold_proto::GroupHandle, crate::group::GroupState>,
    /// The driver's last clock reading: what a message send passes the
    /// engine as `now` when nothing about the message depends on the time
    /// (issue 21: no clock read per message); at most one driver
    /// iteration old.
    pub(crate) clock: Instant,
    /// Sessions served by the driver itself (`serve_inline`, spec §15.4).
    pub(crate) inline: Option<InlineServer>,
}

impl Inner {
    pub(crate) fn new(engine: manyfold_proto::Endpoint, faults: Option<Faults>) -> Self {
        Inner {
            conns: Conns::new(engine.config().max_spare_connections),
            engine,
            accept_waiters: Vec::new(),
            endpoint_refs: 1,
            phase: Phase::Running,
            stop_waiters: Vec::new(),
            faults,
            driver_stats: DriverStats::default(),
            groups: HashMap::new(),
            clock: crate::driver::now(),
            inline: None,
        }
    }

    /// The `now` for queueing a message with `opts`: a message with a
    /// lifetime reads the clock (its lifetime counts from now, spec
    /// §13.6); any other takes the driver's last reading, which the engine
    /// does not use for it.
    pub(crate) fn message_time(&self, opts: &manyfold_proto::MessageOptions) -> Instant {
        if opts.lifetime.is_some() {
            crate::driver::now()
        } else {
            self.clock
        }
    }

    pub(crate) fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    /// Turns one engine event into waker calls.
    pub(crate) fn dispatch(&mut self, h: ConnHandle, ev: Event) {
        if ev == Event::Incoming {
            if self.endpoint_refs == 0 || self.phase != Phase::Running {
                // Nobody can accept it any more (a protected handshake that
                // finished after the last handle went): refuse it now.
                self.engine.conn_mut(h).abort(crate::driver::now(), ErrorCode::REFUSED);
                self.engine.conn_mut(h).release();
                return;
            }
            if self.inline.as_ref().is_some_and(InlineServer::is_accepting) {
                // The driver takes it from the accept queue itself.
                return;
            }
            self.conns.entry(h).or_insert_with(|| ConnState { connected: true, ..ConnState::default() });
            for w in self.accept_waiters.drain(..) {
                w.wake();
            }
            return;
        }
        let Some(c) = self.conns.get_mut(&h) else {
            if let Some(server) = self.inline.as_mut() {
                server.note_event(h);
            }
            return;
        };
        match ev {
            Event::Connected => {
                c.connected = true;
                wake(&mut c.connect);
            }
            Event::Readable => wake(&mut c.read),
            Event::Writable => wake(&mut c.write),
            Event::SendAcked => {
                wake(&mut c.close);
                wake(&mut c.write);
                wake(&mut c.acked);
            }
            Event::StreamAcked => wake(&mut c.acked),
            Event::Closed(reason) => {
                c.closed = Some(reason);
                c.wake_all();
                if c.released {
                    self.conns.remove(&h);
                }
            }
            // Group members' events go to their group, never here.
            Event::Incoming | Event::MessageAcked(_) => {}
        }
    }

    /// The application dropped its last handle of `h` (spec §2: the driver
    /// must call `release`). A connection still open closes gracefully in the
    /// background; one still in the handshake is aborted.
    pub(crate) fn release(&mut self, h: ConnHandle, now: Instant) {
        if let Some(c) = self.conns.get_mut(&h) {
            close_once(&mut self.engine, h, c, now);
            c.released = true;
            // A connection in TIME-WAIT (spec §4.8) has nothing more for
            // the application, which holds no handle of it: its state goes
            // back to the pool now, not when TIME-WAIT ends (a client's
            // sessions would otherwise each build a new one).
            let state = self.engine.conn(h).state();
            let done = c.closed.is_some() || matches!(state, None | Some(State::Closed) | Some(State::TimeWait));
            if done {
                self.conns.remove(&h);
            }
        }
        self.engine.conn_mut(h).release();
    }

    /// Refuses connections nobody will accept any more: those accepted by
    /// the engine but never taken by the application are aborted.
    pub(crate) fn abort_unaccepted(&mut self, now: Instant) {
        while let Some(h) = self.engine.accept() {
            self.engine.conn_mut(h).abort(now, ErrorCode::APPLICATION);
            self.conns.remove(&h);
            self.engine.conn_mut(h).release();
        }
    }

    /// Starts `shutdown`: no new connections, every open one closes gracefully.
    pub(crate) fn begin_shutdown(&mut self, now: Instant, deadline: Instant) {
        if self.phase != Phase::Running {
            return;
        }
        self.phase = Phase::ShuttingDown { deadline };
        // spec §4.8: the process means to exit; TIME-WAIT repeats its final ack.
        self.engine.prepare_exit(now);
        self.engine.set_listening(false);
        self.abort_unaccepted(now);
        for (&h, c) in self.conns.iter_mut() {
            close_once(&mut self.engine, h, c, now);
        }
        for &g in self.groups.keys() {
            self.engine.group_close(g, now);
        }
        for w in self.accept_waiters.drain(..) {
            w.wake();
        }
    }

    /// Aborts everything at once with `code` (an interrupted program's
    /// exit): every connection and group member gets a RST with it, and
    /// the driver stops as soon as they are sent.
    pub(crate) fn begin_abort(&mut self, now: Instant, code: ErrorCode) {
        if self.phase == Phase::Stopped {
            return;
        }
        self.phase = Phase::ShuttingDown { deadline: now };
        self.abort_everything(now, code);
    }

    /// [`Inner::begin_abort`]'s aborts, whatever the phase: the RSTs wait
    /// in the engine for the caller to send.
    pub(crate) fn abort_everything(&mut self, now: Instant, code: ErrorCode) {
        self.engine.set_listening(false);
        while let Some(h) = self.engine.accept() {
            self.engine.conn_mut(h).abort(now, code);
            self.conns.remove(&h);
            self.engine.conn_mut(h).release();
        }
        let handles: Vec<ConnHandle> = self.conns.keys().copied().collect();
        for h in handles {
            self.engine.conn_mut(h).abort(now, code);
        }
        let groups: Vec<_> = self.groups.keys().copied().collect();
        for g in groups {
            self.engine.group_abort(g, now, code);
        }
        if let Some(server) = self.inline.as_mut() {
            server.abort_sessions(&mut self.engine, now, code);
        }
        for w in self.accept_waiters.drain(..) {
            w.wake();
        }
    }

    /// Whether every connection has finished with its peer (spec §4.8):
    /// closed, or lingered in TIME-WAIT long enough to repeat a lost last
    /// ack; and every group has closed.
    pub(crate) fn all_closed(&self, now: Instant) -> bool {
        self.engine.is_closed_down(now)
            && self.groups.keys().all(|&g| self.engine.group(g).is_none_or(|g| g.is_closed()))
    }

    /// Aborts whatever is still open (shutdown deadline reached).
    pub(crate) fn abort_all(&mut self, now: Instant) {
        let members: Vec<ConnHandle> = self.groups.keys().flat_map(|&g| self.engine.group_conns(g)).collect();
        let open: Vec<ConnHandle> = self
            .conns
            .keys()
            .copied()
            .chain(members)
            .filter(|&h| !matches!(self.engine.conn(h).state(), None | Some(State::Closed) | Some(State::TimeWait)))
            .collect();
        for h in open {
            self.engine.conn_mut(h).abort(now, ErrorCode::APPLICATION);
        }
        if let Some(server) = self.inline.as_mut() {
            server.abort_sessions(&mut self.engine, now, ErrorCode::APPLICATION);
        }
    }

    /// The driver has stopped: wake everyone so they observe it.
    pub(crate) fn stopped(&mut self) {
        self.phase = Phase::Stopped;
        for c in self.conns.values_mut() {
            c.wake_all();
        }
        self.wake_groups();
        for w in self.accept_waiters.drain(..).chain(self.stop_waiters.drain(..)) {
            w.wake();
        }
    }
}

/// Closes `h` once on the application's behalf: gracefully, or by abort if
/// the handshake has not finished (nothing was sent that could be lost).
fn close_once(engine: &mut manyfold_proto::Endpoint, h: ConnHandle, c: &mut ConnState, now: Instant) {
    if c.closed.is_none() && !c.close_requested {
        if engine.conn(h).state() == Some(State::SynSent) {
            engine.conn_mut(h).abort(now, ErrorCode::APPLICATION);
        } else {
            engine.conn_mut(h).close();
        }
        c.close_requested = true;
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::task::Waker;

    use manyfold_proto::{ConnHandle, Endpoint, EndpointConfig};

    use super::*;

    /// `n` distinct handles (the table is keyed by them; the engine makes them).
    fn handles(n: usize) -> Vec<ConnHandle> {
        let mut ep = Endpoint::new(EndpointConfig::default(), Instant::now());
        let server = SocketAddr::from(([198, 18, 0, 2], 4433));
        (0..n).map(|_| ep.connect(Instant::now(), server).expect("connect")).collect()
    }

    /// A state whose read list holds a waker, as after a first poll.
    fn waited_on() -> ConnState {
        let mut c = ConnState::default();
        c.read.push(Waker::noop().clone());
        c
    }

    #[test]
    fn a_finished_connections_waker_lists_serve_the_next_one_emptied() {
        let h = handles(2);
        let mut conns = Conns::new(4);
        conns.insert(h[0], waited_on());
        let kept = conns[&h[0]].read.as_ptr();
        assert!(conns.remove(&h[0]));
        assert_eq!(conns.spares(), 1);
        conns.insert(h[1], ConnState { connected: true, ..ConnState::default() });
        let c = &conns[&h[1]];
        assert_eq!(c.read.as_ptr(), kept, "the list's memory was reused");
        assert!(c.read.is_empty() && c.read.capacity() > 0 && c.connected && c.closed.is_none());
        assert_eq!(conns.spares(), 0);
        assert!(!conns.remove(&h[0]), "already gone");
    }

    #[test]
    fn entry_furnishes_a_new_state_from_a_spare_and_keeps_an_existing_one() {
        let h = handles(2);
        let mut conns = Conns::new(4);
        conns.insert(h[0], waited_on());
        conns.remove(&h[0]);
        let c = conns.entry(h[1]).or_insert_with(|| ConnState { connected: true, ..ConnState::default() });
        assert!(c.connected && c.read.is_empty() && c.read.capacity() > 0);
        c.close_requested = true;
        let again = conns.entry(h[1]).or_insert_with(ConnState::default);
        assert!(again.close_requested, "an existing state is left as it is");
    }

    #[test]
    fn the_pool_keeps_at_most_max_spare_connections_and_no_long_list() {
        let h = handles(10);
        let mut conns = Conns::new(3);
        for &x in &h {
            conns.insert(x, waited_on());
        }
        for x in &h {
            conns.remove(x);
        }
        assert_eq!(conns.spares(), 3);
        let mut none = Conns::new(0);
        none.insert(h[0], waited_on());
        none.remove(&h[0]);
        assert_eq!(none.spares(), 0, "max_spare_connections 0 keeps nothing");
        let mut long = ConnState::default();
        long.write.extend((0..=SPARE_WAKERS).map(|_| Waker::noop().clone()));
        conns.insert(h[0], long);
        conns.spares.clear();
        conns.remove(&h[0]);
        conns.insert(h[1], ConnState::default());
        assert_eq!(conns[&h[1]].write.capacity(), 0, "a list past SPARE_WAKERS is not kept");
    }
}
