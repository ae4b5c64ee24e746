//! The world: manyfold endpoints at addresses, driven on the simulated
//! network in virtual time (spec §11; quinn-proto's `Pair`, generalized).
//!
//! One event queue holds both datagram arrivals and endpoint timers,
//! ordered by `(time, sequence number)`. [`World::step`] takes the earliest
//! event, moves the clock to it and feeds it to its endpoint
//! (`handle_datagram` or `handle_timeout`); then it drains that endpoint's
//! output in the order manyfold-proto documents: every `poll_transmit`
//! (GSO batches split into datagrams, each put on its link), every
//! `poll_event` (recorded in the node's event log), then `poll_timeout`
//! (re-arming the node's timer).
//!
//! Application commands go through [`World::endpoint_mut`] or
//! [`World::act`], which mark the node so its output is drained before the
//! next event: inputs, commands, output, as the engine expects.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use manyfold_proto::{CloseReason, ConnHandle, Endpoint, EndpointConfig, Event, GroupEvent, GroupHandle, QlogEvent};

use crate::link::{Arrival, LinkConfig, LinkStats};
use crate::net::Network;
use crate::time::{Clock, EventQueue};

/// Most datagrams asked of `poll_transmit` at once: enough to exercise GSO
/// batches, as a real driver would.
const MAX_BATCH: usize = 10;

/// Default bound on events processed without virtual time advancing.
const DEFAULT_MAX_STEPS_PER_INSTANT: u64 = 200_000;

/// An application event as a node saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedEvent {
    /// Virtual time since the world's origin.
    pub at: Duration,
    pub conn: ConnHandle,
    pub event: Event,
}

/// A group event as a node saw it (spec §14.8).
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedGroupEvent {
    pub at: Duration,
    pub group: GroupHandle,
    pub event: GroupEvent,
}

/// A datagram as it was put on the wire, before the link's faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub at: Duration,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub data: Vec<u8>,
}

/// Per-node counters kept by the world (the endpoint keeps its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeStats {
    pub datagrams_sent: u64,
    pub datagrams_received: u64,
    /// Received datagrams the network had corrupted: each must show up in
    /// the endpoint's `dropped_malformed_total()`.
    pub corrupted_received: u64,
    pub timeouts_handled: u64,
    /// Datagrams the node's interface refused as larger than its MTU
    /// ([`World::set_interface_mtu`]); each was reported to the endpoint
    /// as the kernel's EMSGSIZE would be, and never reached a link.
    pub refused_too_large: u64,
    /// Virtual time of the last datagram delivered to the node.
    pub last_received_at: Option<Duration>,
}

#[derive(Debug)]
struct Node {
    addr: SocketAddr,
    /// The source address its datagrams carry: `addr` until a NAT
    /// rebinding ([`World::rebind`]) gives it another.
    wire_addr: SocketAddr,
    endpoint: Endpoint,
    log: Vec<LoggedEvent>,
    group_log: Vec<LoggedGroupEvent>,
    /// Trace events (spec §18) of connections with `ConnectionConfig::qlog` set.
    qlog: Vec<(ConnHandle, QlogEvent)>,
    /// Deadline of the timer event currently queued for this node.
    armed: Option<Instant>,
    /// An application command may have created output to drain.
    dirty: bool,
    /// Largest UDP payload the node's own interface sends (DF set): a
    /// larger datagram is refused at the host, as Linux's EMSGSIZE.
    interface_mtu: Option<usize>,
    stats: NodeStats,
}

#[derive(Debug)]
enum Pending {
    Deliver { from: SocketAddr, to: SocketAddr, data: Vec<u8>, corrupted: bool },
    Timer { node: usize, deadline: Instant },
}

/// What a [`World::set_rule`] rule does with one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the link as usual.
    Pass,
    /// Drop it before it enters the network.
    Drop,
    /// Hand it to the link, then hold its copies back this much longer.
    Delay(Duration),
}

/// Decides the fate of a datagram about to enter the network.
type Rule = Box<dyn FnMut(SocketAddr, SocketAddr, &[u8]) -> Verdict>;

/// The network side of the world: links, queue, capture and trace.
struct Wire {
    net: Network,
    queue: EventQueue<Pending>,
    arrivals: Vec<Arrival>,
    capture: Option<Vec<Captured>>,
    rule: Option<Rule>,
    dropped_by_rule: u64,
    delayed_by_rule: u64,
    /// FNV-1a over every delivery (time, addresses, length, head bytes).
    trace: u64,
}

impl core::fmt::Debug for Wire {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Wire")
            .field("net", &self.net)
            .field("queued", &self.queue.len())
            .field("capturing", &self.capture.is_some())
            .field("dropped_by_rule", &self.dropped_by_rule)
            .field("delayed_by_rule", &self.delayed_by_rule)
            .finish_non_exhaustive()
    }
}

impl Wire {
    fn send(&mut self, now: Instant, elapsed: Duration, from: SocketAddr, to: SocketAddr, data: Vec<u8>) {
        let verdict = self.rule.as_mut().map_or(Verdict::Pass, |rule| rule(from, to, &data));
        let extra = match verdict {
            Verdict::Pass => Duration::ZERO,
            Verdict::Drop => {
                self.dropped_by_rule += 1;
                return;
            }
            Verdict::Delay(d) => {
                self.delayed_by_rule += 1;
                d
            }
        };
        if let Some(c) = self.capture.as_mut() {
            c.push(Captured { at: elapsed, from, to, data: data.clone() });
        }
        self.net.transmit(now, from, to, data, &mut self.arrivals);
        for a in self.arrivals.drain(..) {
            self.queue.push(a.at + extra, Pending::Deliver { from, to, data: a.data, corrupted: a.corrupted });
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    h
}

/// SplitMix64: derives independent seeds from one.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Nodes on a simulated network, in virtual time.
#[derive(Debug)]
pub struct World {
    seed: u64,
    clock: Clock,
    wire: Wire,
    nodes: Vec<Node>,
    by_addr: HashMap<SocketAddr, usize>,
    buf: Vec<u8>,
    steps: u64,
    steps_at_instant: u64,
    max_steps_per_instant: u64,
    unroutable: u64,
    /// Addresses a NAT no longer maps (their node was rebound).
    unbound: std::collections::HashSet<SocketAddr>,
}

impl World {
    /// An empty world. Every random choice (the network's, and the
    /// endpoints' through their derived seeds) follows from `seed`.
    pub fn new(seed: u64) -> Self {
        World {
            seed,
            clock: Clock::new(),
            wire: Wire {
                net: Network::new(splitmix64(seed)),
                queue: EventQueue::new(),
                arrivals: Vec::new(),
                capture: None,
                rule: None,
                dropped_by_rule: 0,
                delayed_by_rule: 0,
                trace: FNV_OFFSET,
            },
            nodes: Vec::new(),
            by_addr: HashMap::new(),
            buf: Vec::with_capacity(MAX_BATCH * 1500),
            steps: 0,
            steps_at_instant: 0,
            max_steps_per_instant: DEFAULT_MAX_STEPS_PER_INSTANT,
            unroutable: 0,
            unbound: std::collections::HashSet::new(),
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Virtual time since the world began.
    pub fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    /// Events processed so far (stale timer entries not counted).
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Datagrams that arrived at an address with no node.
    pub fn unroutable(&self) -> u64 {
        self.unroutable
    }

    /// Bounds the events processed at one virtual instant before the world
    /// declares a livelock and panics.
    pub fn set_max_steps_per_instant(&mut self, n: u64) {
        self.max_steps_per_instant = n;
    }

    /// A digest of every delivery so far: equal digests mean equal runs.
    pub fn trace_digest(&self) -> u64 {
        self.wire.trace
    }

    // ---- nodes ------------------------------------------------------------

    /// Adds an endpoint at `addr`. Its seed is derived from the world's seed
    /// and the address (`config.seed` is overwritten), so one seed fixes the
    /// whole run.
    ///
    /// # Panics
    /// If a node already sits at `addr`.
    pub fn add_node(&mut self, addr: SocketAddr, mut config: EndpointConfig) {
        assert!(!self.by_addr.contains_key(&addr), "a node already sits at {addr}");
        config.seed = splitmix64(self.seed ^ fnv(FNV_OFFSET, addr.to_string().as_bytes()));
        let endpoint = Endpoint::new(config, self.now());
        self.by_addr.insert(addr, self.nodes.len());
        self.nodes.push(Node {
            addr,
            wire_addr: addr,
            endpoint,
            log: Vec::new(),
            group_log: Vec::new(),
            qlog: Vec::new(),
            armed: None,
            dirty: true,
            interface_mtu: None,
            stats: NodeStats::default(),
        });
    }

    /// Removes the node at `addr` (a host that vanished: its datagrams go
    /// nowhere from now on). Returns its endpoint.
    pub fn remove_node(&mut self, addr: SocketAddr) -> Option<Endpoint> {
        let i = self.by_addr.remove(&addr)?;
        let node = self.nodes.remove(i);
        for idx in self.by_addr.values_mut() {
            if *idx > i {
                *idx -= 1;
            }
        }
        // Queued timers name nodes by index: disarm every node so stale
        // entries are ignored, and re-arm from the endpoints.
        for n in &mut self.nodes {
            n.armed = None;
            n.dirty = true;
        }
        Some(node.endpoint)
    }

    /// A NAT in front of the node at `addr` rebinds it to `to` (spec §6.8):
    /// its datagrams carry `to` as their source from now on, datagrams to
    /// `to` reach it, and datagrams to its old wire address go nowhere. The
    /// node is still named `addr` in this API.
    pub fn rebind(&mut self, addr: SocketAddr, to: SocketAddr) {
        let i = self.index(addr);
        let old = std::mem::replace(&mut self.nodes[i].wire_addr, to);
        self.unbound.insert(old);
        self.unbound.remove(&to);
        self.by_addr.insert(to, i);
    }

    /// The node at `addr` sends through an interface that carries UDP
    /// payloads of at most `mtu` bytes with fragmentation forbidden: a
    /// larger datagram never leaves the host, and the endpoint is told at
    /// once (`Endpoint::handle_too_large`), as a driver told by the
    /// kernel's EMSGSIZE tells it. Links' own MTUs drop silently instead.
    pub fn set_interface_mtu(&mut self, addr: SocketAddr, mtu: usize) {
        let i = self.index(addr);
        self.nodes[i].interface_mtu = Some(mtu);
    }

    pub fn addresses(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.nodes.iter().map(|n| n.addr)
    }

    fn index(&self, addr: SocketAddr) -> usize {
        *self.by_addr.get(&addr).unwrap_or_else(|| panic!("no node at {addr} (seed {})", self.seed))
    }

    /// The endpoint at `addr`, for inspection.
    pub fn endpoint(&self, addr: SocketAddr) -> &Endpoint {
        &self.nodes[self.index(addr)].endpoint
    }

    /// The endpoint at `addr`, for application commands; its output is
    /// drained before the next event.
    pub fn endpoint_mut(&mut self, addr: SocketAddr) -> &mut Endpoint {
        let i = self.index(addr);
        let node = &mut self.nodes[i];
        node.dirty = true;
        &mut node.endpoint
    }

    /// Runs application commands on the endpoint at `addr` at the current
    /// virtual time, then drains its output.
    pub fn act<R>(&mut self, addr: SocketAddr, f: impl FnOnce(&mut Endpoint, Instant) -> R) -> R {
        let now = self.now();
        let r = f(self.endpoint_mut(addr), now);
        self.flush();
        r
    }

    /// `connect` from `from` to `to`.
    ///
    /// # Panics
    /// If the endpoint refuses to start the connection.
    pub fn connect(&mut self, from: SocketAddr, to: SocketAddr) -> ConnHandle {
        let seed = self.seed;
        self.act(from, |ep, now| ep.connect(now, to))
            .unwrap_or_else(|e| panic!("connect {from} -> {to}: {e} (seed {seed})"))
    }

    /// Node-level counters of the node at `addr`.
    pub fn node_stats(&self, addr: SocketAddr) -> NodeStats {
        self.nodes[self.index(addr)].stats
    }

    /// Every application event the node at `addr` has seen, in order.
    pub fn events(&self, addr: SocketAddr) -> &[LoggedEvent] {
        &self.nodes[self.index(addr)].log
    }

    /// Every group event the node at `addr` has seen, in order.
    pub fn group_events(&self, addr: SocketAddr) -> &[LoggedGroupEvent] {
        &self.nodes[self.index(addr)].group_log
    }

    /// The events of one connection of the node at `addr`.
    /// Trace events (spec §18) of connection `conn` at `addr`, oldest first;
    /// empty unless its endpoint's connections record them
    /// (`ConnectionConfig::qlog`).
    pub fn qlog(&self, addr: SocketAddr, conn: ConnHandle) -> Vec<QlogEvent> {
        self.nodes[self.index(addr)].qlog.iter().filter(|(c, _)| *c == conn).map(|(_, e)| e.clone()).collect()
    }

    pub fn conn_events(&self, addr: SocketAddr, conn: ConnHandle) -> Vec<LoggedEvent> {
        self.events(addr).iter().filter(|e| e.conn == conn).copied().collect()
    }

    /// When and why the connection reported `Closed`, if it has.
    pub fn closed(&self, addr: SocketAddr, conn: ConnHandle) -> Option<(Duration, CloseReason)> {
        self.events(addr).iter().find_map(|e| match e.event {
            Event::Closed(r) if e.conn == conn => Some((e.at, r)),
            _ => None,
        })
    }

    /// When the connection first reported `event`, if it has.
    pub fn saw(&self, addr: SocketAddr, conn: ConnHandle, event: Event) -> Option<Duration> {
        self.events(addr).iter().find(|e| e.conn == conn && e.event == event).map(|e| e.at)
    }

    // ---- network ----------------------------------------------------------

    /// Sets both directions between `a` and `b`.
    pub fn set_link(&mut self, a: SocketAddr, b: SocketAddr, config: LinkConfig) {
        self.wire.net.set_link(a, b, config.clone());
        self.wire.net.set_link(b, a, config);
    }

    /// Sets the direction `from` -> `to` only.
    pub fn set_link_one_way(&mut self, from: SocketAddr, to: SocketAddr, config: LinkConfig) {
        self.wire.net.set_link(from, to, config);
    }

    /// The link configuration for pairs not set explicitly.
    pub fn set_default_link(&mut self, config: LinkConfig) {
        self.wire.net.set_default_link(config);
    }

    pub fn link_stats(&self, from: SocketAddr, to: SocketAddr) -> LinkStats {
        self.wire.net.link_stats(from, to)
    }

    pub fn network(&self) -> &Network {
        &self.wire.net
    }

    /// Puts a datagram on the link `from` -> `to` now, as if sent from
    /// `from` (which need not be a node: spoofed or foreign traffic).
    pub fn inject(&mut self, from: SocketAddr, to: SocketAddr, data: Vec<u8>) {
        let (now, elapsed) = (self.now(), self.elapsed());
        self.wire.send(now, elapsed, from, to, data);
    }

    /// Starts (or stops, discarding it) recording every datagram sent.
    pub fn set_capture(&mut self, on: bool) {
        self.wire.capture = on.then(Vec::new);
    }

    /// Datagrams recorded since capture started.
    pub fn captured(&self) -> &[Captured] {
        self.wire.capture.as_deref().unwrap_or(&[])
    }

    /// Drops every datagram for which `rule(from, to, bytes)` is true before
    /// it enters the network: targeted loss ("the first SYN-ACK").
    pub fn set_drop_rule(&mut self, mut rule: impl FnMut(SocketAddr, SocketAddr, &[u8]) -> bool + 'static) {
        self.set_rule(move |f, t, d| if rule(f, t, d) { Verdict::Drop } else { Verdict::Pass });
    }

    /// Lets `rule` decide the fate of every datagram before it enters the
    /// network: targeted loss or delay. Replaces any earlier rule.
    pub fn set_rule(&mut self, rule: impl FnMut(SocketAddr, SocketAddr, &[u8]) -> Verdict + 'static) {
        self.wire.rule = Some(Box::new(rule));
    }

    pub fn clear_rule(&mut self) {
        self.wire.rule = None;
    }

    /// Datagrams the rule has delayed.
    pub fn delayed_by_rule(&self) -> u64 {
        self.wire.delayed_by_rule
    }

    /// Datagrams the rule has dropped.
    pub fn dropped_by_rule(&self) -> u64 {
        self.wire.dropped_by_rule
    }

    // ---- running ----------------------------------------------------------

    /// Drains the output of every node an application command touched.
    pub fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].dirty {
                self.drain(i);
            }
        }
    }

    /// After any input or command: every transmit, every event, the timer.
    fn drain(&mut self, i: usize) {
        let now = self.clock.now();
        let elapsed = self.clock.elapsed();
        let node = &mut self.nodes[i];
        node.dirty = false;
        // Taken as the driver takes them: a datagram may come in two pieces
        // (spec §7.2), joined here on the wire.
        while let Some((t, tail)) = node.endpoint.poll_transmit_gather(now, MAX_BATCH, &mut self.buf) {
            let head = t.size - tail.as_ref().map_or(0, |t| t.len());
            assert!(
                head <= self.buf.len(),
                "transmit of {} bytes in a buffer of {} (seed {})",
                t.size,
                self.buf.len(),
                self.seed
            );
            assert!(
                tail.is_none() || t.segment_size.is_none(),
                "a datagram in two pieces in a batch (seed {})",
                self.seed
            );
            let joined;
            let out = match &tail {
                Some(tail) => {
                    joined = [&self.buf[..head], &tail[..]].concat();
                    &joined[..]
                }
                None => &self.buf[..t.size],
            };
            let segment = t.segment_size.unwrap_or(t.size);
            assert!(segment > 0 || t.size == 0, "GSO batch with segment size 0 (seed {})", self.seed);
            for datagram in out.chunks(segment.max(1)) {
                if node.interface_mtu.is_some_and(|mtu| datagram.len() > mtu) {
                    node.stats.refused_too_large += 1;
                    node.endpoint.handle_too_large(now, t.destination, datagram);
                    continue;
                }
                node.stats.datagrams_sent += 1;
                self.wire.send(now, elapsed, node.wire_addr, t.destination, datagram.to_vec());
            }
        }
        while let Some((conn, event)) = node.endpoint.poll_event() {
            node.log.push(LoggedEvent { at: elapsed, conn, event });
        }
        while let Some((group, event)) = node.endpoint.poll_group_event() {
            node.group_log.push(LoggedGroupEvent { at: elapsed, group, event });
        }
        while let Some(e) = node.endpoint.poll_qlog() {
            node.qlog.push(e);
        }
        let deadline = node.endpoint.poll_timeout();
        if deadline != node.armed {
            node.armed = deadline;
            if let Some(d) = deadline {
                // A deadline already past fires at once, never in the past.
                self.wire.queue.push(d.max(now), Pending::Timer { node: i, deadline: d });
            }
        }
    }

    /// Time of the next queued event, if any.
    pub fn next_event_time(&self) -> Option<Instant> {
        self.wire.queue.peek_time()
    }

    /// Processes the next event. Returns false when nothing is queued.
    ///
    /// # Panics
    /// When more than the allowed number of events happen at one virtual
    /// instant: the protocol (or the harness) is livelocked.
    pub fn step(&mut self) -> bool {
        self.flush();
        let Some((at, pending)) = self.wire.queue.pop() else { return false };
        if let Pending::Timer { node, deadline } = pending {
            if self.nodes.get(node).is_none_or(|n| n.armed != Some(deadline)) {
                // Superseded by a later poll_timeout: not an event, and the
                // clock stays (the caller may have a deadline before `at`).
                return true;
            }
        }
        if at > self.clock.now() {
            self.steps_at_instant = 0;
        }
        self.clock.advance_to(at);
        self.count_step();
        match pending {
            Pending::Deliver { from, to, data, corrupted } => {
                let elapsed = self.clock.elapsed().as_nanos() as u64;
                let mut h = fnv(self.wire.trace, &elapsed.to_le_bytes());
                h = fnv(h, from.to_string().as_bytes());
                h = fnv(h, to.to_string().as_bytes());
                h = fnv(h, &(data.len() as u64).to_le_bytes());
                self.wire.trace = fnv(h, &data[..data.len().min(32)]);
                let Some(&i) = self.by_addr.get(&to).filter(|_| !self.unbound.contains(&to)) else {
                    self.unroutable += 1;
                    return true;
                };
                let node = &mut self.nodes[i];
                node.stats.datagrams_received += 1;
                node.stats.last_received_at = Some(self.clock.elapsed());
                node.stats.corrupted_received += u64::from(corrupted);
                // Handed over owned, as the driver hands over a datagram
                // that fills its buffer: large in-order data is kept as
                // slices of it (spec §7.2), so every test runs that path.
                node.endpoint.handle_datagram_owned(at, from, data.into());
                self.drain(i);
            }
            Pending::Timer { node: i, .. } => {
                let node = &mut self.nodes[i];
                node.armed = None;
                node.stats.timeouts_handled += 1;
                node.endpoint.handle_timeout(at);
                self.drain(i);
            }
        }
        true
    }

    fn count_step(&mut self) {
        self.steps += 1;
        self.steps_at_instant += 1;
        assert!(
            self.steps_at_instant <= self.max_steps_per_instant,
            "livelock: {} events at virtual time {:?} without time advancing (seed {})",
            self.steps_at_instant,
            self.elapsed(),
            self.seed
        );
    }

    /// Runs until `cond` holds, checking it before every event (it may also
    /// issue application commands), for at most `max` of virtual time.
    /// Returns whether `cond` held; on failure the clock stands at the limit.
    pub fn run_until(&mut self, mut cond: impl FnMut(&mut World) -> bool, max: Duration) -> bool {
        let deadline = self.now() + max;
        loop {
            self.flush();
            if cond(self) {
                self.flush();
                return true;
            }
            self.flush();
            match self.next_event_time() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => {
                    self.clock.advance_to(deadline.max(self.now()));
                    let done = cond(self);
                    self.flush();
                    return done;
                }
            }
        }
    }

    /// Processes every event due within `d`, then sets the clock to now + `d`.
    pub fn run_for(&mut self, d: Duration) {
        let deadline = self.now() + d;
        loop {
            self.flush();
            match self.next_event_time() {
                Some(t) if t <= deadline => {
                    self.step();
                }
                _ => break,
            }
        }
        self.clock.advance_to(deadline);
    }
}

#[cfg(test)]
mod tests;
