//! One connection's state: the state machine (spec §4), sequenced sending
//! with acknowledgement and retransmission (spec §5), flow control (spec §7),
//! timers, and the events the application sees.
//!
//! The packet-building half lives in `transmit.rs`, timers in `timer.rs`,
//! the feeding of the congestion controller from loss recovery in `loss.rs`,
//! a sequenced packet's arrival in `sequenced.rs`, ack timing in `acks.rs`.

mod acks;
mod close;
mod early;
mod liveness;
mod loss;
mod path;
mod pmtu;
pub mod qlog;
mod recv;
mod secure;
mod send;
mod sequenced;
mod streams;
mod timer;
mod transmit;
mod types;

pub(crate) use early::EarlySyn;
pub use path::PathStats;
pub(crate) use secure::{handshake_message, Security};
pub use streams::{MessageOptions, ReadItem, StreamItem, INITIAL_STREAM_CREDIT};
use types::Limit;
pub use types::{CloseReason, ConnStats, Event, RecvError, SendError, SendLimits, State, UnreachableKind};

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::config::ConnectionConfig;
use crate::congestion::pacer::Pacer;
use crate::congestion::{self, Controller};
use crate::ids::{ConnId, StreamId};
use crate::recovery::{RttEstimator, RttReport, SentQueue};
use crate::seq::Seq;
use crate::wire::{Cookie, ErrorCode, Flags, HandshakeParams, Packet, PayloadCrcs, HEADER_LEN};
use acks::{AckFrequency, AckState};
use pmtu::PathMtu;
use qlog::{Metrics, PacketInfo, QlogData, QlogEvent, Recorder, SendTrigger};
use recv::Receiver;
use streams::{Limits, StreamRefusal, Streams};
use timer::{Timer, Timers};

/// Smallest datagram a peer may announce; smaller values are raised to it.
pub(crate) const MIN_DATAGRAM: u16 = 576;

/// Send buffer kept free of any one stream for the others (spec §13.5).
const STREAM_RESERVE: usize = 1 << 20;

/// Longest wait between repeats of a lone FIN (spec §5.4).
const LONE_FIN_MAX_RTO: Duration = Duration::from_millis(250);

/// Times the final ack is sent again in TIME-WAIT (spec §4.8).
const FINAL_ACK_REPEATS: u8 = 2;

/// RSTs are accepted only with a sequence number this close to what we expect
/// (spec §6.5; blind injection must also guess the 32-bit connection id).
const RST_WINDOW: u64 = 1 << 16;

pub(crate) use recv::initial_window;

/// The window field for a receive buffer of `bytes` (spec §3.1: bytes, saturating).
pub(crate) fn advertised_window(bytes: usize) -> u32 {
    u32::try_from(bytes).unwrap_or(u32::MAX)
}

#[derive(Debug)]
pub(crate) struct Connection {
    /// Shared with the endpoint's other connections made with the same
    /// settings (an idle connection's memory, spec §15.3).
    config: Arc<ConnectionConfig>,
    remote: SocketAddr,
    local_id: ConnId,
    remote_id: Option<ConnId>,
    state: State,
    /// Our initial sequence number (extended).
    isn: Seq,
    sent: SentQueue,
    /// Every stream's queues and buffers (spec §13).
    streams: Streams,
    /// The application closed its side: FIN follows the queued data.
    fin_queued: bool,
    /// We sent the SYN (spec §13.11: our own streams get odd numbers).
    opener: bool,
    fin_seq: Option<Seq>,
    /// The listener's cookie to echo on our first packet after its SYN-ACK,
    /// and when that SYN-ACK arrived (the echo says how long after, §3.3.3).
    cookie: Option<Cookie>,
    cookie_since: Option<Instant>,
    cookie_seq: Option<Seq>,
    /// Tokens and 0-RTT data (spec §6.9), made when tokens are used: an
    /// idle connection that used none does not carry it (spec §15.3).
    early: Option<Box<early::Early>>,
    recv: Option<Receiver>,
    peer_window: u64,
    /// The datagram size in use and the search for a larger one (spec §3.7).
    pmtu: PathMtu,
    rtt: RttEstimator,
    cc: Box<dyn Controller>,
    pacer: Pacer,
    rto_backoff: u32,
    persist_backoff: u32,
    /// Since when the peer's window has been closed to data we hold (spec §7.3).
    zero_window_since: Option<Instant>,
    /// When the current hold of partial datagrams ends (spec §5.7), kept
    /// until the data queued during it is sent.
    flush_hold_end: Option<Instant>,
    /// What holds new data back since when (`ConnStats::limited`).
    limit: Option<(Limit, Instant)>,
    /// A tail-loss probe is due (the sequence number to resend).
    tlp_due: Option<Seq>,
    /// The second copy of a thin flow's retransmission is due (spec §5.5.1).
    resend_copy_due: Option<Seq>,
    /// Resends since the last RTO while no ack has come (spec §5.4 step
    /// 7): at `RTO_RESENDS`, nothing more is resent until one comes.
    rto_resends: u8,
    /// The process means to exit: repeat the final ack (spec §4.8).
    exiting: bool,
    /// Repeats of the final ack still to send in TIME-WAIT (spec §4.8).
    reacks_left: u8,
    /// Released in TIME-WAIT, its containers handed on (spec §15.3).
    shed: bool,
    /// Its round trip went to the endpoint's memory of the peer (spec §5.4.1).
    rtt_reported: bool,
    /// Probes sent since an ack last made progress (spec §5.4: at most
    /// `MAX_TLPS` per flight, each after twice the previous wait).
    tlp_count: u32,
    /// The transmission number of the last tail-loss probe, until the
    /// first ack after it that acknowledges anything judges it (spec §5.4
    /// step 8).
    probe_tx: Option<u64>,
    timers: Timers,
    ack: AckState,
    /// What we last asked the peer's acks to be (spec §5.6).
    ack_freq: AckFrequency,
    probe_pending: bool,
    rst_pending: Option<ErrorCode>,
    /// Copies of an abort's RST still to send after the pending one (spec
    /// §4.6: sent twice, so that one loss does not leave the peer with a
    /// codeless reset from a later packet, or none at all).
    rst_repeats: u8,
    /// An abort's reason in words, ours to send and the peer's (spec §3.3.4).
    close_text: close::CloseText,
    events: VecDeque<Event>,
    readable_signalled: bool,
    want_writable: bool,
    send_acked_signalled: bool,
    close_reason: Option<CloseReason>,
    released: bool,
    stats: ConnStats,
    /// Trace events of the current call, when tracing (spec §18).
    qlog: Option<Box<Recorder>>,
    /// Handshake and packet protection, for a protected connection (spec §19).
    security: Option<Box<Security>>,
    /// The endpoint holds its `max_buffered_bytes`: new data is not stored
    /// and windows do not grow (spec §7.5).
    memory_pressure: bool,
    /// The datagram being handled, when the driver handed it over owned
    /// (`Endpoint::handle_datagram_owned`): large in-order data is kept as
    /// slices of it. Set only for the length of one `handle_packet`.
    rx_source: Option<Bytes>,
    /// The caller takes a datagram in two pieces (spec §7.2), and lends
    /// the endpoint's memo of payload checksums with it: set only for the
    /// length of one `poll_transmit`.
    gather: Option<Box<PayloadCrcs>>,
    /// The second piece of the datagram just written, if it was split.
    gathered: Option<Bytes>,
    /// Since when data has been outstanding without an ack (spec §4.7).
    stalled_since: Option<Instant>,
    /// When the peer last sent us anything, and ICMP unreachables matched
    /// since then (spec §6.7).
    last_heard: Instant,
    unreachables: u32,
    /// Path validation after the peer's address changed (spec §6.8),
    /// made on the first packet from a new address or PATH challenge: an
    /// idle connection does not carry it (spec §15.3).
    paths: Option<Box<path::Paths>>,
}

/// What a finished connection leaves for the next one the endpoint builds
/// (issue 21, spec §15.3: no malloc per session): the containers of its
/// state that keep their memory when emptied, emptied. It holds no state
/// of the old connection.
#[derive(Debug)]
pub struct Spare {
    streams: Streams,
    events: VecDeque<Event>,
    sent: SentQueue,
    /// Reset in place when the next connection runs the same algorithm.
    cc: Box<dyn Controller>,
    /// A 0-RTT user's early state, emptied (its box is all it keeps).
    early: Option<Box<early::Early>>,
}

impl Connection {
    /// Takes a finished connection apart for [`Spare`]; `None` if it was
    /// shed (its containers went on already, it holds only empty ones).
    pub(crate) fn into_spare(self) -> Option<Spare> {
        let Connection { streams, mut events, sent, cc, shed, early, .. } = self;
        streams::keep_small(&mut events);
        (!shed).then_some(Spare { streams, events, sent, cc, early })
    }

    /// spec §15.3: a released connection in TIME-WAIT only answers a
    /// repeated FIN (§4.4) and repeats its final ack (§4.8). Its streams,
    /// sent queue, event queue and congestion controller go to the next
    /// connection now, not when TIME-WAIT ends 15 s later: a client
    /// running one short session after another otherwise allocated them
    /// all anew for each (the pool stayed empty while every session of the
    /// last 15 s held its own), and held ~8 KB per session. Once per
    /// connection; `None` otherwise.
    pub(crate) fn shed_for_time_wait(&mut self) -> Option<Spare> {
        if self.shed || !self.released || self.state != State::TimeWait || !self.events.is_empty() {
            return None;
        }
        self.shed = true;
        let next = self.sent.next_seq();
        let mut events = std::mem::take(&mut self.events);
        streams::keep_small(&mut events);
        Some(Spare {
            streams: self.streams.take_containers(),
            events,
            sent: std::mem::replace(&mut self.sent, SentQueue::new(next)),
            cc: std::mem::replace(&mut self.cc, Box::new(congestion::Finished)),
            // Its token went to the endpoint when it came (route.rs), and
            // nothing declined waits once the connection is done.
            early: self.early.take(),
        })
    }

    /// spec §5.4.1: the peer's round trip as earlier connections left it.
    pub(crate) fn remember_rtt(&mut self, srtt: Duration, rttvar: Duration) {
        self.rtt.remember(srtt, rttvar);
    }

    /// spec §5.4.1: what this connection tells the endpoint's memory of
    /// its peer, once, when it is released and done with data (TIME-WAIT
    /// or CLOSED): `Failed` if it ended by a timeout or an unreachable
    /// peer; otherwise the estimate of its samples of data, if it took
    /// any and no RTO is backed off. With it, when the peer was last
    /// heard: the report's age.
    pub(crate) fn take_rtt_report(&mut self) -> Option<(RttReport, Instant)> {
        if self.rtt_reported || !self.released || !matches!(self.state, State::TimeWait | State::Closed) {
            return None;
        }
        self.rtt_reported = true;
        let report = match self.close_reason {
            Some(
                CloseReason::ConnectTimeout
                | CloseReason::RetransmitTimeout
                | CloseReason::StallTimeout
                | CloseReason::IdleTimeout
                | CloseReason::Unreachable(_),
            ) => RttReport::Failed,
            _ => match self.rtt.of_data() {
                Some((srtt, rttvar)) if self.rto_backoff == 0 => RttReport::Measured { srtt, rttvar },
                _ => return None,
            },
        };
        Some((report, self.last_heard))
    }

    fn new(
        config: Arc<ConnectionConfig>,
        now: Instant,
        remote: SocketAddr,
        local_id: ConnId,
        isn: u32,
        state: State,
        spare: Option<Spare>,
    ) -> Self {
        let mss = u64::from(config.max_datagram);
        let rtt = RttEstimator::new(config.initial_rto, config.min_rto, config.max_rto, config.max_ack_delay);
        let isn = Seq::from_isn(isn);
        let limits = Limits {
            max_streams: config.max_streams.clamp(1, 1 << 16),
            // A whole message must fit a stream's credit (spec §13.7).
            stream_window: config.stream_window.max(config.max_message) as u64,
            stream0_window: config.recv_buffer as u64,
        };
        let (streams, events, sent, cc, early) = match spare {
            Some(spare) => {
                let early = spare.early.map(|mut e| {
                    *e = early::Early::default();
                    e
                });
                (spare.streams.renew(limits), spare.events, spare.sent.renew(isn), Some(spare.cc), early)
            }
            None => (Streams::new(limits), VecDeque::new(), SentQueue::new(isn), None, None),
        };
        let cc = congestion::renew(cc, config.congestion, mss, config.initial_window_packets);
        let mut c = Connection {
            remote,
            local_id,
            remote_id: None,
            state,
            isn,
            sent,
            streams,
            fin_queued: false,
            opener: false,
            fin_seq: None,
            cookie: None,
            cookie_since: None,
            cookie_seq: None,
            early,
            recv: None,
            peer_window: 0,
            pmtu: PathMtu::new(config.max_datagram.max(MIN_DATAGRAM), 0, remote.is_ipv6()),
            rtt,
            cc,
            pacer: Pacer::default(),
            rto_backoff: 0,
            persist_backoff: 0,
            zero_window_since: None,
            flush_hold_end: None,
            limit: None,
            tlp_due: None,
            resend_copy_due: None,
            rto_resends: 0,
            exiting: false,
            reacks_left: 0,
            shed: false,
            rtt_reported: false,
            tlp_count: 0,
            probe_tx: None,
            timers: Timers::default(),
            ack: AckState::new(config.ack_frequency, config.max_ack_delay),
            ack_freq: AckFrequency::new(config.adaptive_acks, config.max_ack_delay, config.ack_frequency),
            probe_pending: false,
            rst_pending: None,
            rst_repeats: 0,
            close_text: close::CloseText::default(),
            events,
            readable_signalled: false,
            want_writable: false,
            send_acked_signalled: true,
            close_reason: None,
            released: false,
            stats: ConnStats::default(),
            qlog: config.qlog.then(|| Box::new(Recorder::new(now))),
            security: None,
            memory_pressure: false,
            rx_source: None,
            gather: None,
            gathered: None,
            stalled_since: None,
            last_heard: now,
            unreachables: 0,
            paths: None,
            config,
        };
        c.touch_idle(now);
        c
    }

    /// Records the first trace event and starts logging losses (spec §18).
    fn start_qlog(&mut self, now: Instant, client: bool) {
        if self.qlog.is_none() {
            return;
        }
        self.sent.log_losses();
        let data = QlogData::Started {
            client,
            local_id: self.local_id.wire(),
            remote: self.remote,
            state: self.state,
            congestion: self.cc.name(),
        };
        self.record(now, data);
    }

    fn record(&mut self, now: Instant, data: QlogData) {
        if let Some(q) = self.qlog.as_mut() {
            q.record(now, data);
        }
    }

    /// Records a datagram we sent (spec §18).
    fn record_sent(&mut self, now: Instant, datagram: &[u8]) {
        let Some(q) = self.qlog.as_mut() else { return };
        let Ok(p) = Packet::parse(datagram) else { return };
        q.record(now, QlogData::PacketSent { packet: PacketInfo::of(&p, datagram.len()), trigger: None });
    }

    /// The packet just sent repeated data for `trigger`: a retransmission
    /// in the counts and the trace. The sent queue says which resends
    /// count (a lost path MTU probe's small repeat carries no data, spec
    /// §3.7).
    fn count_resend(&mut self, trigger: SendTrigger) {
        self.stats.retransmissions += 1;
        self.stats.probe_resends += u64::from(trigger == SendTrigger::Probe);
        if let Some(q) = self.qlog.as_mut() {
            q.mark_last_sent(trigger);
        }
    }

    /// The trace events since the last call: the packets declared lost and
    /// the metrics, if they changed, are recorded first.
    pub(crate) fn drain_qlog(&mut self, now: Instant) -> impl Iterator<Item = QlogEvent> + '_ {
        if let Some(q) = self.qlog.as_mut() {
            for (seq, size, trigger) in self.sent.take_lost() {
                q.record(now, QlogData::PacketLost { seq: seq.wire(), size, trigger });
            }
            q.metrics(
                now,
                Metrics {
                    cwnd: self.cc.window(),
                    bytes_in_flight: self.sent.bytes_in_flight(),
                    smoothed_rtt: self.rtt.srtt(),
                    latest_rtt: self.rtt.latest(),
                    min_rtt: self.rtt.min(),
                    rtt_variance: self.rtt.rttvar(),
                    rtt_samples: self.rtt.samples(),
                },
            );
        }
        self.qlog.iter_mut().flat_map(|q| q.drain())
    }

    /// An active open: SYN-SENT; the SYN goes out on the next poll_transmit.
    pub fn new_client(
        config: Arc<ConnectionConfig>,
        now: Instant,
        remote: SocketAddr,
        local_id: ConnId,
        isn: u32,
        security: Option<Box<Security>>,
        spare: Option<Spare>,
    ) -> Self {
        let connect_timeout = config.connect_timeout;
        let mut c = Connection::new(config, now, remote, local_id, isn, State::SynSent, spare);
        c.opener = true;
        c.security = security;
        c.timers.set(Timer::Connect, now + connect_timeout);
        c.start_qlog(now, true);
        tracing::debug!(target: "manyfold::state", conn = %local_id, to = "SYN-SENT", %remote);
        c
    }

    /// A passive open completed by a valid cookie echo (spec §6.2): the
    /// SYN-RECEIVED state lived in the cookie; we start ESTABLISHED.
    #[allow(clippy::too_many_arguments)]
    pub fn new_server(
        config: Arc<ConnectionConfig>,
        now: Instant,
        remote: SocketAddr,
        local_id: ConnId,
        remote_id: ConnId,
        isn: u32,
        peer_isn: u32,
        max_datagram: u16,
        handshake_rtt: Duration,
        security: Option<Box<Security>>,
        spare: Option<Spare>,
    ) -> Self {
        let recv_buffer = config.recv_buffer;
        let connect_timeout = config.connect_timeout;
        let mut c = Connection::new(config, now, remote, local_id, isn, State::Established, spare);
        if security.is_some() {
            // spec §19.2: the peer must finish its handshake in time.
            c.timers.set(Timer::Connect, now + connect_timeout);
        }
        c.security = security;
        // Our SYN-ACK (seq isn) was sent statelessly and is acked by the echo.
        // Renewed, not replaced: it keeps the spare's memory (spec §15.3).
        c.sent = std::mem::replace(&mut c.sent, SentQueue::new(c.isn)).renew(c.isn + 1);
        c.remote_id = Some(remote_id);
        c.set_peer_max_datagram(max_datagram);
        c.recv = Some(Receiver::new(Seq::from_isn(peer_isn) + 1, recv_buffer));
        // The cookie's timestamp measured the SYN-ACK round trip.
        c.rtt.on_handshake_sample(handshake_rtt);
        c.start_qlog(now, false);
        tracing::debug!(target: "manyfold::state", conn = %local_id, to = "ESTABLISHED", %remote, "accepted");
        c
    }

    pub fn remote(&self) -> SocketAddr {
        self.remote
    }
    pub fn local_id(&self) -> ConnId {
        self.local_id
    }
    pub fn remote_id(&self) -> Option<ConnId> {
        self.remote_id
    }
    pub fn state(&self) -> State {
        self.state
    }
    /// spec §6.2: we hold the listener's cookie until our echo of it is
    /// acknowledged; until then the listener may hold no state for us, so
    /// nothing beyond the echo is sent.
    fn awaiting_echo_ack(&self) -> bool {
        self.cookie.is_some()
    }

    pub fn close_reason(&self) -> Option<CloseReason> {
        self.close_reason
    }

    /// The datagram size in use, as it goes on the wire: at most what both
    /// sides accept, and what path MTU discovery found (spec §3.4, §3.7).
    pub fn wire_max_datagram(&self) -> u16 {
        self.pmtu.current()
    }

    /// The peer announced the largest datagram it accepts (spec §3.3.2):
    /// the connection starts at `max(576, min(ours, theirs))` and
    /// discovery may go up to what both accept.
    fn set_peer_max_datagram(&mut self, peer: u16) {
        let peer = peer.max(MIN_DATAGRAM);
        let base = self.config.max_datagram.min(peer).max(MIN_DATAGRAM);
        let ceiling = self.config.path_mtu_discovery.map_or(0, |c| c.min(peer));
        self.pmtu = PathMtu::new(base, ceiling, self.remote.is_ipv6());
    }

    /// Largest packet we build: the datagram less what protection adds
    /// (spec §19.3).
    pub fn max_datagram(&self) -> u16 {
        self.wire_max_datagram() - self.protection_overhead() as u16
    }

    pub fn is_drained(&self) -> bool {
        self.state == State::Closed && self.rst_pending.is_none()
    }

    pub fn stats(&self) -> ConnStats {
        let mut s = self.stats;
        s.srtt = self.rtt.srtt();
        s.rttvar = self.rtt.rttvar();
        s.min_rtt = self.rtt.min();
        s.cwnd = self.cc.window();
        s.unacked_bytes = self.streams.queued() as u64 + self.sent.outstanding_data();
        s.open_streams = self.streams.open_count();
        s.abandoned_messages = self.streams.abandoned;
        s.bytes_kept = self.streams.kept;
        s.stream_violations = self.streams.violations;
        s.stalled_since = self.stalled_since;
        s.datagram_size = self.wire_max_datagram();
        s
    }

    /// spec §8.2: new data is held back by `limit` from `now` on (`None`:
    /// it just went); the span of the cause before ends.
    fn note_limit(&mut self, now: Instant, limit: Option<Limit>) {
        if self.limit.map(|(l, _)| l) == limit {
            return;
        }
        if let Some((l, since)) = self.limit.take() {
            self.stats.limited.add(l, now.saturating_duration_since(since));
        }
        self.limit = limit.map(|l| (l, now));
    }

    /// Bytes this connection holds: queued and unacknowledged to send,
    /// buffered received (spec §7.5).
    pub(crate) fn memory(&self) -> u64 {
        (self.streams.queued() + self.streams.held_memory()) as u64 + self.sent.outstanding_data()
    }

    /// spec §7.5: the endpoint is at its memory limit (or no longer).
    pub(crate) fn set_memory_pressure(&mut self, on: bool) {
        self.memory_pressure = on;
    }

    fn set_state(&mut self, to: State) {
        if self.state != to {
            tracing::debug!(target: "manyfold::state", conn = %self.local_id, from = self.state.name(), to = to.name());
            if let Some(q) = self.qlog.as_mut() {
                q.record_now(QlogData::StateUpdated { from: self.state, to });
            }
            self.state = to;
        }
    }

    /// Enters CLOSED for `reason` (spec §4.5), once.
    fn enter_closed(&mut self, reason: CloseReason) {
        if self.state == State::Closed {
            return;
        }
        self.set_state(State::Closed);
        if let Some(q) = self.qlog.as_mut() {
            q.record_now(QlogData::Closed { reason });
        }
        self.close_reason = Some(reason);
        self.timers.clear_all();
        self.stalled_since = None;
        self.ack.on_ack_sent();
        self.probe_pending = false;
        if reason != CloseReason::Graceful {
            self.streams.clear_queued();
        }
        self.events.push_back(Event::Closed(reason));
        self.signal_readable();
    }

    fn signal_readable(&mut self) {
        self.readable_signalled = true;
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        if let Some(e) = self.events.pop_front() {
            return Some(e);
        }
        if self.readable_signalled {
            self.readable_signalled = false;
            if !self.released {
                return Some(Event::Readable);
            }
        }
        None
    }

    fn touch_idle(&mut self, now: Instant) {
        // The handshake is governed by `connect_timeout` alone.
        if matches!(self.state, State::SynSent | State::SynReceived) {
            return;
        }
        if let Some(t) = self.config.idle_timeout {
            self.timers.set(Timer::Idle, now + t);
        }
    }

    // ---- application commands -------------------------------------------

    /// Bytes `send` would accept now.
    pub fn send_capacity(&self) -> usize {
        self.room_within(self.send_limit())
    }

    /// Bytes of all streams together that fit under `limit`: none once
    /// the connection's sending side is done.
    fn room_within(&self, limit: usize) -> usize {
        if self.fin_queued || self.state == State::Closed {
            return 0;
        }
        let used = self.streams.queued() + self.sent.outstanding_data() as usize;
        limit.saturating_sub(used)
    }

    /// spec §7.4: the send buffer follows what can be in flight: twice the
    /// smaller of the congestion and the peer's window (and of twice the
    /// controller's bandwidth-delay product, where it has one), at most
    /// `send_buffer`, at least the initial window.
    fn send_limit(&self) -> usize {
        send::send_limit(self.cc.window(), self.peer_window, self.cc.bdp(), self.config.send_buffer)
    }

    /// The send limit a whole message of `len` bytes meets: room for it
    /// beside the other streams' reserve (§13.5) even where the window's
    /// limit is smaller, so that a largest message fits an idle connection.
    fn message_limit(&self, len: usize) -> usize {
        self.send_limit().max(len.saturating_add(STREAM_RESERVE).min(self.config.send_buffer))
    }

    /// spec §13.5: bytes stream `id` may still queue. One stream may hold
    /// all of the send buffer but a reserve, so that a bulk writer never
    /// leaves the other streams' messages without room.
    pub fn stream_capacity(&self, id: StreamId) -> usize {
        self.capacity_within(id, self.send_limit())
    }

    /// [`Connection::stream_capacity`] under `limit`.
    fn capacity_within(&self, id: StreamId, limit: usize) -> usize {
        let reserve = (limit / 8).min(STREAM_RESERVE);
        let own = (limit - reserve).saturating_sub(self.streams.held_by(id));
        own.min(self.room_within(limit))
    }

    /// The largest message `send_message` can ever take.
    fn max_message(&self) -> usize {
        let limit = self.config.send_buffer;
        self.config.max_message.min(limit - (limit / 8).min(STREAM_RESERVE))
    }

    /// spec §7.2: a blocked writer is woken once a quarter of the send
    /// buffer is free (64 KiB at least), so that each wake-up moves a large
    /// write rather than a few packets' worth.
    fn writable_threshold(&self) -> usize {
        let limit = self.send_limit();
        (limit / 4).max(64 << 10).min(limit)
    }

    /// Checks that the connection can take data at all.
    fn check_open(&self) -> Result<(), SendError> {
        if let Some(reason) = self.close_reason {
            return Err(SendError::Closed(reason));
        }
        if self.fin_queued {
            return Err(SendError::Finished);
        }
        Ok(())
    }

    /// Queues bytes on stream `id` (0 is the connection's byte stream);
    /// returns how many fitted the send buffer.
    pub fn send(&mut self, id: StreamId, data: &[u8]) -> Result<usize, SendError> {
        self.queue_bytes(id, data.len(), |s, n| s.write(id, &data[..n]))
    }

    /// [`Connection::send`] without copying: the bytes that fit (at most
    /// `limit`) are split off the front of `data`, and its packets are
    /// slices of them.
    pub fn send_shared(&mut self, id: StreamId, data: &mut Bytes, limit: usize) -> Result<usize, SendError> {
        self.queue_bytes(id, data.len().min(limit), |s, n| s.write_shared(id, data.split_to(n)))
    }

    /// The one path of both: as many of `len` bytes as fit are queued by
    /// `write` (copied or shared); returns how many.
    fn queue_bytes(
        &mut self,
        id: StreamId,
        len: usize,
        write: impl FnOnce(&mut Streams, usize) -> Result<(), StreamRefusal>,
    ) -> Result<usize, SendError> {
        self.check_open()?;
        self.streams.check_send(id).map_err(refusal)?;
        let n = len.min(self.stream_capacity(id));
        if n > 0 {
            write(&mut self.streams, n).map_err(refusal)?;
            self.send_acked_signalled = false;
        }
        if n < len {
            self.want_writable = true;
        }
        Ok(n)
    }

    /// Queues one whole message on stream `id` (spec §13.5): all of it or,
    /// with an error saying why, nothing.
    pub fn send_message(
        &mut self,
        now: Instant,
        id: StreamId,
        data: &[u8],
        opts: MessageOptions,
    ) -> Result<(), SendError> {
        self.queue_message(id, data.len(), |s| s.push_message(now, id, data, opts))
    }

    /// [`Connection::send_message`] without copying `data`: its packets
    /// are slices of it.
    pub fn send_shared_message(
        &mut self,
        now: Instant,
        id: StreamId,
        data: Bytes,
        opts: MessageOptions,
    ) -> Result<(), SendError> {
        self.queue_message(id, data.len(), |s| s.push_shared_message(now, id, data, opts))
    }

    /// The one path of both: a message of `len` bytes is checked, then
    /// `push` queues it (copied or shared).
    fn queue_message(
        &mut self,
        id: StreamId,
        len: usize,
        push: impl FnOnce(&mut Streams) -> Result<(), StreamRefusal>,
    ) -> Result<(), SendError> {
        self.check_message(id, len)?;
        push(&mut self.streams).map_err(refusal)?;
        self.send_acked_signalled = false;
        Ok(())
    }

    /// Whether a whole message of `len` bytes can be queued on `id` now.
    fn check_message(&mut self, id: StreamId, len: usize) -> Result<(), SendError> {
        self.check_open()?;
        if len > self.max_message() {
            return Err(SendError::MessageTooLarge { size: len, max: self.max_message() });
        }
        self.streams.check_send(id).map_err(refusal)?;
        if len > self.capacity_within(id, self.message_limit(len)) {
            self.want_writable = true;
            return Err(SendError::Blocked);
        }
        Ok(())
    }

    /// Queues one whole message of shared data on stream `id` and tracks
    /// it (spec §14.4): [`Event::MessageAcked`] reports its id once the
    /// peer has all of it; [`Connection::abandon_message`] gives it up.
    pub fn send_tracked(
        &mut self,
        now: Instant,
        id: StreamId,
        data: Bytes,
        opts: MessageOptions,
    ) -> Result<u64, SendError> {
        self.check_message(id, data.len())?;
        let msg = self.streams.push_tracked(now, id, data, opts).map_err(refusal)?;
        self.send_acked_signalled = false;
        Ok(msg)
    }

    /// Sends our SYN again now, without backing off (spec §14.3: a group
    /// asks a peer again once the others' answers show it is late).
    pub fn resend_syn(&mut self, now: Instant) {
        if self.state == State::SynSent && !self.sent.is_empty() {
            self.sent.on_rto();
            self.timers.set(Timer::Rto, now + self.backed_off_rto());
        }
    }

    /// Asks for [`Event::Writable`] once stream `id` has room again (a
    /// group found this connection short of room for a message).
    pub fn want_room(&mut self, _id: StreamId) {
        self.want_writable = true;
    }

    /// Gives up a tracked message: it is not sent (again), and the peer
    /// skips what of it already left.
    pub fn abandon_message(&mut self, msg: u64) {
        if self.state != State::Closed {
            self.streams.abandon_tracked(msg);
        }
    }

    /// Ends our sending side of stream `id` once its queued data is sent.
    pub fn finish_stream(&mut self, id: StreamId) -> Result<(), SendError> {
        self.check_open()?;
        self.send_acked_signalled = false;
        self.streams.finish(id).map_err(refusal)
    }

    /// Abandons our sending side of stream `id` with an error code.
    pub fn reset_stream(&mut self, id: StreamId, code: u16) {
        if self.state != State::Closed {
            self.streams.reset(id, code);
        }
    }

    /// Asks the peer to stop sending on stream `id`, with an error code.
    pub fn stop_stream(&mut self, id: StreamId, code: u16) {
        if self.state != State::Closed {
            self.streams.stop(id, code);
        }
    }

    pub fn set_stream_priority(&mut self, id: StreamId, priority: u8, weight: u16) {
        self.streams.set_priority(id, priority, weight);
    }

    /// A new stream of ours, its number chosen here (spec §13.11).
    pub fn open_stream(&mut self) -> Result<StreamId, SendError> {
        self.check_open()?;
        self.streams.open(self.opener).map_err(refusal)
    }

    /// The next stream the peer started (spec §13.11).
    pub fn accept_stream(&mut self) -> Option<StreamId> {
        self.streams.accept()
    }

    /// Whether anything queued on stream `id` is still unacknowledged.
    pub fn stream_pending(&self, id: StreamId) -> bool {
        self.state != State::Closed && self.streams.is_pending(id)
    }

    /// Reads bytes of stream `id`: `Ok(Some(0))` at its end, `Ok(None)`
    /// when nothing is there yet.
    pub fn recv(&mut self, id: StreamId, buf: &mut [u8]) -> Result<Option<usize>, RecvError> {
        self.recv_by(|s| s.read(id, buf), |n| *n)
    }

    /// [`Connection::recv`] of up to `max` bytes as one buffer: `Ok(Some)`
    /// of an empty one at the end. A kept slice of a received datagram
    /// (spec §7.2) is handed over without a copy.
    pub fn recv_chunk(&mut self, id: StreamId, max: usize) -> Result<Option<Bytes>, RecvError> {
        self.recv_by(|s| s.read_chunk(id, max), Bytes::len)
    }

    /// What `read` took from the streams (`len` bytes of it), with the
    /// window update reading may open and the connection's end.
    fn recv_by<T>(
        &mut self,
        read: impl FnOnce(&mut Streams) -> Result<Option<T>, u16>,
        len: impl Fn(&T) -> usize,
    ) -> Result<Option<T>, RecvError> {
        if self.recv.is_none() {
            return match self.close_reason {
                Some(reason) => Err(RecvError::Closed(reason)),
                None => Ok(None),
            };
        }
        match read(&mut self.streams) {
            Err(code) => Err(RecvError::StreamReset(code)),
            Ok(Some(t)) => {
                if len(&t) > 0 {
                    self.window_update();
                }
                Ok(Some(t))
            }
            Ok(None) => match self.close_reason {
                Some(CloseReason::Graceful) | None => Ok(None),
                Some(reason) => Err(RecvError::Closed(reason)),
            },
        }
    }

    /// The next message or stream event of any stream (spec §13.5), or of
    /// stream `only`.
    pub fn recv_message(&mut self, only: Option<StreamId>) -> Result<Option<(StreamId, StreamItem)>, RecvError> {
        if self.recv.is_none() {
            return match self.close_reason {
                Some(reason) => Err(RecvError::Closed(reason)),
                None => Ok(None),
            };
        }
        let item = match only {
            Some(id) => self.streams.pop_on(id).map(|i| (id, i)),
            None => self.streams.pop_any(),
        };
        if item.is_some() {
            self.window_update();
            return Ok(item);
        }
        match self.close_reason {
            Some(CloseReason::Graceful) | None => Ok(None),
            Some(reason) => Err(RecvError::Closed(reason)),
        }
    }

    /// [`Connection::recv_message`] with a message's bytes appended to
    /// `buf` instead of handed as a new buffer (issue 21: a reader that
    /// reuses `buf` allocates nothing per message).
    pub fn recv_message_into(
        &mut self,
        only: Option<StreamId>,
        buf: &mut Vec<u8>,
    ) -> Result<Option<(StreamId, ReadItem)>, RecvError> {
        if self.recv.is_none() {
            return match self.close_reason {
                Some(reason) => Err(RecvError::Closed(reason)),
                None => Ok(None),
            };
        }
        let item = match only {
            Some(id) => self.streams.pop_on_into(id, buf).map(|i| (id, i)),
            None => self.streams.pop_any_into(buf),
        };
        if item.is_some() {
            self.window_update();
            return Ok(item);
        }
        match self.close_reason {
            Some(CloseReason::Graceful) | None => Ok(None),
            Some(reason) => Err(RecvError::Closed(reason)),
        }
    }

    /// Whether the peer's FIN arrived and every message and stream event
    /// was taken: `recv_message` will never return anything again.
    pub fn messages_done(&self) -> bool {
        self.recv.as_ref().is_some_and(Receiver::fin_reached) && !self.streams.has_ready()
    }

    /// Whether stream `id` has delivered its end or reset: nothing more comes.
    pub fn stream_done(&self, id: StreamId) -> bool {
        self.streams.rx_done(id) || (self.state == State::Closed && !self.streams.has_ready())
    }

    /// An ack is due at once, or control chunks wait to be sent.
    pub(crate) fn reply_due(&self) -> bool {
        self.ack.immediate || self.streams.has_control()
    }

    /// spec §7.3: a window update when a nearly closed window reopens
    /// (receiver-side silly window avoidance, RFC 1122 4.2.3.3), judged
    /// against the window last advertised: reads of small messages free
    /// a little each, and together they reopen it.
    fn window_update(&mut self) {
        let Some(r) = self.recv.as_ref() else { return };
        let after = r.window(self.streams.held_memory());
        let last = self.ack.advertised;
        let half = (r.capacity() / 2) as u64;
        let mss = u64::from(self.max_datagram());
        let t = half.min(4 * mss);
        if last < t && after >= t.max(last + mss) {
            self.ack.immediate = true;
        }
    }

    /// Graceful close of our sending side (spec §4.4).
    pub fn close(&mut self) {
        if self.fin_queued || matches!(self.state, State::Closed | State::TimeWait) {
            return;
        }
        self.fin_queued = true;
        self.send_acked_signalled = false;
        match self.state {
            State::Established => self.set_state(State::FinWait1),
            State::CloseWait => self.set_state(State::LastAck),
            // SYN-SENT / SYN-RECEIVED: the FIN follows once established.
            _ => {}
        }
    }

    /// The application dropped its handle: unread and future data is
    /// discarded, and the connection closes gracefully if still open.
    pub fn on_released(&mut self) {
        self.released = true;
        self.streams.set_discard();
        self.close();
    }

    /// Abortive close (spec §4.6): RST with `code`, everything discarded.
    pub fn abort(&mut self, code: ErrorCode) {
        if self.state == State::Closed {
            return;
        }
        if self.remote_id.is_some() {
            self.rst_pending = Some(code);
            self.rst_repeats = 1;
        }
        self.enter_closed(CloseReason::Aborted(code));
    }

    // ---- input -------------------------------------------------------------

    /// [`Connection::handle_packet`] of a packet parsed from `source`, the
    /// datagram as the driver handed it over (spec §7.2): large in-order
    /// data is kept as slices of it instead of copied.
    pub fn handle_packet_from(&mut self, now: Instant, p: &Packet, protected: bool, source: Option<&Bytes>) {
        self.rx_source = source.cloned();
        self.handle_packet(now, p, protected);
        self.rx_source = None;
    }

    /// Whether the caller of `poll_transmit` takes a datagram whose large
    /// last DATA payload is left out of the buffer (spec §7.2; see
    /// [`Connection::take_gathered`]): `Some` lends the endpoint's memo of
    /// payload checksums, which [`Connection::end_gather`] gives back.
    pub(crate) fn set_gather(&mut self, crcs: Option<Box<PayloadCrcs>>) {
        self.gather = crcs;
    }

    /// Ends what [`Connection::set_gather`] began: the memo lent, if any.
    pub(crate) fn end_gather(&mut self) -> Option<Box<PayloadCrcs>> {
        self.gather.take()
    }

    /// The payload left out of the datagram `poll_transmit` just wrote: the
    /// datagram is what the buffer got, less this many bytes, then these.
    pub(crate) fn take_gathered(&mut self) -> Option<Bytes> {
        self.gathered.take()
    }

    /// Takes one packet; `protected` says it arrived protected (spec §19.3).
    pub fn handle_packet(&mut self, now: Instant, p: &Packet, protected: bool) {
        let h = &p.header;
        let flags = h.flags;
        if !protected {
            match self.plain_verdict(p) {
                secure::Plain::Take => {}
                secure::Plain::Reack => {
                    self.stats.packets_received += 1;
                    self.ack.immediate = true;
                    return;
                }
                secure::Plain::Drop => {
                    self.stats.dropped_unprotected += 1;
                    return;
                }
            }
        }
        self.stats.packets_received += 1;
        self.last_heard = now;
        self.unreachables = 0;
        if let Some(q) = self.qlog.as_mut() {
            q.record(now, QlogData::PacketReceived { packet: PacketInfo::of(p, p.len()) });
        }
        if self.state == State::Closed {
            return;
        }
        if flags.contains(Flags::RST) {
            self.handle_rst(p);
            return;
        }
        if self.state == State::SynSent && !self.handle_syn_sent(now, p) {
            return;
        }
        if self.state == State::TimeWait {
            // spec §4.4: a retransmitted FIN means our last ack was lost.
            if is_sequenced(p) {
                self.ack.immediate = true;
                self.timers.set(Timer::TimeWait, now + self.config.time_wait);
            }
            return;
        }
        self.touch_idle(now);

        if flags.contains(Flags::SYN) && self.state != State::SynSent {
            // A SYN in a synchronized state (spec §4.3): a retransmitted
            // SYN-ACK of our peer is acknowledged; one naming another
            // connection id (a duplicated SYN answered twice by a stateless
            // listener) is ignored.
            if p.params.and_then(|pp| ConnId::from_wire(pp.conn_id)) != self.remote_id {
                return;
            }
            if flags.contains(Flags::ACK) {
                self.handle_ack(now, p);
                if early::is_early_answer(p) && self.state != State::Closed {
                    self.handle_sequenced(now, p, protected);
                }
            } else if self.state == State::SynReceived || self.early_syn_outstanding() {
                // The peer's SYN again: our SYN-ACK was lost (spec §4.3, §6.9).
                self.resend_syn_now();
            }
            self.ack.immediate = true;
            return;
        }
        if flags.contains(Flags::ACK) {
            self.handle_ack(now, p);
            if self.state == State::Closed {
                return;
            }
        }
        if is_sequenced(p) {
            self.handle_sequenced(now, p, protected);
        }
        if flags.contains(Flags::KLV) && !self.ack.reply_wait {
            self.ack.immediate = true;
        }
    }

    /// SYN-SENT (spec §4.2, §4.3). Returns whether to go on processing the
    /// packet as an established connection would.
    fn handle_syn_sent(&mut self, now: Instant, p: &Packet) -> bool {
        let h = &p.header;
        let (Some(params), true) = (p.params, h.flags.contains(Flags::SYN)) else {
            return false;
        };
        let Some(peer_id) = ConnId::from_wire(params.conn_id) else {
            return false;
        };
        if h.flags.contains(Flags::ACK) {
            // SYN-ACK: it must acknowledge our SYN exactly.
            if Seq::from_wire(h.ack, self.isn) != self.isn + 1 {
                return false;
            }
            // spec §19.2: no downgrade, either way.
            if params.is_protected() != self.security.is_some() {
                self.enter_closed(CloseReason::ProtectionMismatch);
                return false;
            }
            self.learn_peer(h.seq, peer_id, params, h.window);
            self.on_early_answer(p, params);
            self.cookie = p.cookie;
            self.cookie_since = Some(now);
            self.set_state(State::Established);
            if self.security.is_some() {
                // Connected once the listener's handshake message proves it,
                // within connect_timeout still.
                self.start_handshake();
            } else {
                // spec §4.7: Connect bounds the handshake until the cookie
                // echo is acknowledged, not only until this SYN-ACK.
                if !self.awaiting_echo_ack() {
                    self.timers.cancel(Timer::Connect);
                }
                self.events.push_back(Event::Connected);
            }
            if self.fin_queued {
                self.set_state(State::FinWait1);
            }
            self.ack.immediate = true;
            // Go on: the ACK part acknowledges our SYN (and samples the RTT).
            true
        } else if self.security.is_some() {
            // spec §19.2: a protected handshake has a client and a listener;
            // simultaneous open is not offered.
            false
        } else {
            // spec §4.3: simultaneous open. Answer with our SYN again, now with ACK.
            self.learn_peer(h.seq, peer_id, params, h.window);
            self.decline_early();
            self.set_state(State::SynReceived);
            self.resend_syn_now();
            false
        }
    }

    fn learn_peer(&mut self, peer_isn: u32, conn_id: ConnId, params: HandshakeParams, window: u32) {
        self.remote_id = Some(conn_id);
        self.set_peer_max_datagram(params.max_datagram);
        self.ack_freq.peer_takes_it = params.takes_ack_frequency();
        self.ack.peer_echoes = params.takes_tx_echo();
        self.peer_window = u64::from(window);
        self.recv = Some(Receiver::new(Seq::from_isn(peer_isn) + 1, self.config.recv_buffer));
    }

    fn handle_rst(&mut self, p: &Packet) {
        let h = &p.header;
        if self.state == State::TimeWait {
            // RFC 1337: TIME-WAIT ignores RSTs. But a RST at exactly the
            // sequence after the peer's FIN answers our repeated final ack
            // (spec §4.8): the peer holds nothing, so it had the ack (or
            // gave up), and the repeats stop.
            if self.recv.as_ref().is_some_and(|r| Seq::from_wire(h.seq, r.next()) == r.next()) {
                self.reacks_left = 0;
                self.timers.cancel(Timer::Reack);
            }
            return;
        }
        // A refusal of our SYN or of our cookie echo carries its seq + 1.
        let refused_echo = self.awaiting_echo_ack() && self.cookie_seq.is_some_and(|s| h.seq == (s + 1).wire());
        let acceptable = refused_echo
            || match self.state {
                State::SynSent => h.seq == (self.isn + 1).wire(),
                _ => self.recv.as_ref().is_some_and(|r| {
                    let s = Seq::from_wire(h.seq, r.next());
                    s + RST_WINDOW >= r.next() && s <= r.next() + RST_WINDOW
                }),
            };
        if !acceptable {
            return;
        }
        let reason = match (self.state, p.error) {
            (_, Some(ErrorCode::PROTECTION_MISMATCH)) => CloseReason::ProtectionMismatch,
            (_, Some(ErrorCode::AUTHENTICATION_FAILED)) => CloseReason::AuthenticationFailed,
            (State::SynSent, _) | (_, Some(ErrorCode::REFUSED)) => CloseReason::Refused,
            _ if refused_echo => CloseReason::Refused,
            (_, code) => CloseReason::PeerReset(code),
        };
        self.take_peer_close_text(p);
        self.enter_closed(reason);
    }

    fn handle_ack(&mut self, now: Instant, p: &Packet) {
        let h = &p.header;
        let base = self.sent.base();
        let cum = Seq::from_wire(h.ack, base);
        if cum > self.sent.next_seq() {
            // Acknowledges something never sent: ignore the ack part (RFC 9293 3.10.7.4).
            self.ack.immediate = true;
            return;
        }
        self.on_peer_answer(now);
        // spec §7.1: take the window only from an ack no older than what we hold.
        if cum >= base {
            self.peer_window = u64::from(h.window);
        }
        let sacks = p
            .sack
            .iter()
            .flat_map(|s| s.ranges().iter())
            .map(|&(a, b)| (Seq::from_wire(a, base), Seq::from_wire(b, base)));
        let streams = &mut self.streams;
        let mut stream_idle = false;
        // spec §5.4.2: which transmission drew the ack; sending one also
        // shows that the peer takes ours.
        let echo = p.sack.and_then(|s| s.echo()).map(|e| (Seq::from_wire(e.seq, base), e.count));
        self.ack.peer_echoes |= echo.is_some();
        let min_rtt = self.rtt.has_sample().then(|| self.rtt.min());
        let out = self.sent.on_ack(now, cum, sacks, echo, min_rtt, |p| {
            stream_idle |= streams.on_acked(&p.payload);
        });
        let newly_lost = self.after_ack(now, &out);
        self.check_probe(now);
        if stream_idle {
            self.events.push_back(Event::StreamAcked);
        }
        // spec §7.3: a window with room for a datagram again ends the wait.
        let room = self.peer_window.saturating_sub(self.sent.outstanding_data());
        if room >= u64::from(self.max_datagram()) {
            self.zero_window_since = None;
        }
        while let Some(msg) = self.streams.acked_tracked.pop_front() {
            self.events.push_back(Event::MessageAcked(msg));
        }
        self.stats.lost_packets += newly_lost;
        self.stats.spurious_losses += out.spurious;
        self.rtt.relax(now);
        // spec §5.4 step 8: the first ack after a probe that acknowledges
        // anything judges it; one that proves a transmission from before
        // the probe arrived shows the probe premature.
        if let Some(probe) = self.probe_tx.filter(|_| out.newly_acked > 0) {
            if out.earliest_arrived_tx.is_some_and(|tx| tx < probe) {
                self.stats.late_probes += 1;
                self.rtt.on_late_ack(now);
            }
            self.probe_tx = None;
        }
        if out.spurious_rto {
            self.stats.spurious_rtos += 1;
            self.rtt.on_late_ack(now);
            tracing::debug!(
                target: "manyfold::recovery",
                conn = %self.local_id,
                cwnd = self.cc.window(),
                "retransmission timeout was spurious: the flight was not lost, nothing more is resent"
            );
        }
        if out.newly_acked > 0 {
            self.rto_backoff = 0;
            self.tlp_count = 0;
            // RFC 6298 (5.3): restart the timer on new data acknowledged.
            if self.sent.bytes_in_flight() > 0 {
                self.timers.set(Timer::Rto, now + self.rtt.rto(0));
                self.arm_tlp(now);
            } else {
                self.timers.cancel(Timer::Rto);
                self.timers.cancel(Timer::Tlp);
            }
        }
        if let Some(t) = self.sent.loss_time() {
            self.timers.set(Timer::Loss, t);
        } else {
            self.timers.cancel(Timer::Loss);
        }
        if !out.cumulative_advanced {
            return;
        }
        self.persist_backoff = 0;
        let una = self.sent.base();
        // The SYN of a simultaneous open is acknowledged.
        if self.state == State::SynReceived && una > self.isn {
            self.set_state(if self.fin_queued { State::FinWait1 } else { State::Established });
            self.timers.cancel(Timer::Connect);
            self.touch_idle(now);
            self.events.push_back(Event::Connected);
        }
        if self.awaiting_echo_ack() && self.cookie_seq.is_some_and(|s| una > s) {
            self.cookie = None;
            // The handshake is done (a protected one once its keys are, too).
            if !self.awaiting_keys() {
                self.timers.cancel(Timer::Connect);
            }
        }
        if self.want_writable && self.send_capacity() >= self.writable_threshold() {
            self.want_writable = false;
            self.events.push_back(Event::Writable);
        }
        let fin_acked = self.fin_seq.is_some_and(|f| una > f);
        if self.sent.is_empty()
            && self.streams.all_acked()
            && !self.send_acked_signalled
            && (!self.fin_queued || fin_acked)
        {
            self.send_acked_signalled = true;
            self.events.push_back(Event::SendAcked);
        }
        if fin_acked {
            match self.state {
                State::FinWait1 => self.set_state(State::FinWait2),
                State::Closing => self.enter_time_wait(now),
                State::LastAck => self.enter_closed(CloseReason::Graceful),
                _ => {}
            }
        }
    }
}

/// Whether a packet consumes a sequence number (spec §5.1): SYN, FIN, a
/// cookie echo, or any data. Pure acks, probes and RSTs do not.
fn is_sequenced(p: &Packet) -> bool {
    let f = p.header.flags;
    f.contains(Flags::SYN) || f.contains(Flags::FIN) || p.cookie.is_some() || !p.data.is_empty()
}

/// The error for a refused stream operation.
fn refusal(r: StreamRefusal) -> SendError {
    match r {
        StreamRefusal::Finished => SendError::Finished,
        StreamRefusal::Reset(code) => SendError::StreamReset(code),
        StreamRefusal::Limit(max) => SendError::StreamLimit(max),
    }
}

/// Room left for data in a datagram of `max` bytes after the header and
/// `sections` bytes of other payload sections.
fn data_room(max: usize, sections: usize) -> usize {
    max.saturating_sub(HEADER_LEN + sections)
}
