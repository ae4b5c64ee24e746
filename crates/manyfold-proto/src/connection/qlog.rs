//! Trace events of one connection (spec §18), in the shape of qlog's
//! (draft-ietf-quic-qlog-main-schema): packets sent, received and lost
//! with their acks, RTT samples, the congestion window and bytes in flight,
//! state changes. The engine only records typed events; the driver writes
//! them to a file (crate `manyfold`, module `qlog`) and `manyfold trace`
//! reads them back.
//!
//! Recording is off unless [`crate::ConnectionConfig::qlog`] is set; then
//! each connection keeps the events of one call and the endpoint moves them
//! to its own queue (bounded by [`crate::EndpointConfig::max_qlog_events`]),
//! read with [`crate::Endpoint::poll_qlog`].

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::{CloseReason, State};
pub use crate::recovery::LossTrigger;
use crate::wire::chunk::{parse_chunks, Chunk};
use crate::wire::{Flags, Packet, PacketType};

/// One event and when it happened, counted from the connection's creation.
#[derive(Debug, Clone, PartialEq)]
pub struct QlogEvent {
    /// Since the connection was created.
    pub at: Duration,
    /// What happened.
    pub data: QlogData,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum QlogData {
    /// The connection was created: the first event of every trace.
    Started {
        /// We initiated it (a client) or accepted it (a server).
        client: bool,
        /// Our connection id.
        local_id: u32,
        /// The peer's address.
        remote: SocketAddr,
        /// The state it starts in (SYN-SENT, or ESTABLISHED for an accepted one).
        state: State,
        /// Congestion controller's name.
        congestion: &'static str,
    },
    /// A datagram was sent.
    PacketSent {
        /// Its header and contents.
        packet: PacketInfo,
        /// Why a packet is sent again; `None` for a first transmission, an
        /// ack, a probe of the window or a keep-alive.
        trigger: Option<SendTrigger>,
    },
    /// A datagram was received (and accepted).
    PacketReceived {
        /// Its header and contents.
        packet: PacketInfo,
    },
    /// A sequenced packet was declared lost (spec §5.4).
    PacketLost {
        /// Its sequence number.
        seq: u32,
        /// Its size in bytes.
        size: u32,
        /// What declared it lost.
        trigger: LossTrigger,
    },
    /// The retransmission timer expired (spec §5.4).
    RtoExpired {
        /// How many times the RTO has doubled.
        backoff: u32,
    },
    /// Recovery and congestion state after a change (at most one per
    /// engine call, and only when something changed).
    Metrics(Metrics),
    /// The connection changed state (spec §4).
    StateUpdated {
        /// The state it left.
        from: State,
        /// The state it entered.
        to: State,
    },
    /// The connection entered CLOSED for this reason (after its `StateUpdated`).
    Closed {
        /// How it ended.
        reason: CloseReason,
    },
}

/// Why a sequenced packet is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendTrigger {
    /// It was declared lost (RACK or an RTO).
    Retransmit,
    /// A tail-loss probe (spec §5.4).
    Probe,
}

impl SendTrigger {
    /// The trigger's name as qlog spells it.
    pub fn name(self) -> &'static str {
        match self {
            SendTrigger::Retransmit => "retransmit",
            SendTrigger::Probe => "probe",
        }
    }
}

/// The header and contents of one datagram, as the trace shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct PacketInfo {
    /// The packet type.
    pub ptype: PacketType,
    /// The header's flags.
    pub flags: Flags,
    /// The connection id.
    pub conn_id: u32,
    /// The sequence number.
    pub seq: u32,
    /// The cumulative acknowledgement.
    pub ack: u32,
    /// The advertised window.
    pub window: u32,
    /// Datagram length in bytes, header included.
    pub size: u32,
    /// SACK ranges `[start, end)` of sequence numbers (spec §3.3.1).
    pub sack: Vec<(u32, u32)>,
    /// Which transmission of which packet drew the ack (spec §5.4.2).
    pub echo: Option<crate::wire::Echo>,
    /// The chunks of the data area, in order, each payload replaced by its
    /// length in bytes (a trace keeps no application bytes).
    pub chunks: Vec<Chunk<u32>>,
}

impl PacketInfo {
    /// The trace's view of a parsed packet of `size` bytes.
    pub fn of(p: &Packet<'_>, size: usize) -> PacketInfo {
        let h = &p.header;
        let chunks = parse_chunks(p.data).map_while(Result::ok).map(|c| c.map_payload(|d| d.len() as u32)).collect();
        PacketInfo {
            ptype: h.ptype,
            flags: h.flags,
            conn_id: h.conn_id,
            seq: h.seq,
            ack: h.ack,
            window: h.window,
            size: size as u32,
            sack: p.sack.map(|s| s.ranges().to_vec()).unwrap_or_default(),
            echo: p.sack.and_then(|s| s.echo()),
            chunks,
        }
    }

    /// Bytes of stream data the packet carries.
    pub fn stream_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| if let Chunk::Data(d) = c { u64::from(d.data) } else { 0 }).sum()
    }
}

/// Recovery and congestion state (qlog's `recovery:metrics_updated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metrics {
    /// Congestion window in bytes.
    pub cwnd: u64,
    /// Bytes sent and neither acknowledged nor declared lost.
    pub bytes_in_flight: u64,
    /// Smoothed RTT (RFC 6298).
    pub smoothed_rtt: Duration,
    /// The latest sample.
    pub latest_rtt: Duration,
    /// The smallest sample.
    pub min_rtt: Duration,
    /// RTT variation (RFC 6298).
    pub rtt_variance: Duration,
    /// RTT samples taken so far: a new value means `latest_rtt` is a new sample.
    pub rtt_samples: u64,
}

/// A connection's recorder: the events of the current engine call.
#[derive(Debug)]
pub(crate) struct Recorder {
    start: Instant,
    /// The latest time the engine gave us: application calls, which take
    /// none, record their state changes at it.
    last: Instant,
    pending: Vec<QlogEvent>,
    last_metrics: Option<Metrics>,
}

impl Recorder {
    pub(crate) fn new(start: Instant) -> Self {
        Recorder { start, last: start, pending: Vec::new(), last_metrics: None }
    }

    /// Notes the time of an engine call that may record without one.
    pub(crate) fn tick(&mut self, now: Instant) {
        self.last = self.last.max(now);
    }

    pub(crate) fn record(&mut self, now: Instant, data: QlogData) {
        self.tick(now);
        self.record_now(data);
    }

    /// Records at the latest time known (see `last`).
    pub(crate) fn record_now(&mut self, data: QlogData) {
        self.pending.push(QlogEvent { at: self.last.saturating_duration_since(self.start), data });
    }

    /// Records `m` if it differs from the last metrics recorded.
    pub(crate) fn metrics(&mut self, now: Instant, m: Metrics) {
        if self.last_metrics != Some(m) {
            self.last_metrics = Some(m);
            self.record(now, QlogData::Metrics(m));
        }
    }

    /// Marks the packet recorded last as sent again for `trigger`.
    pub(crate) fn mark_last_sent(&mut self, trigger: SendTrigger) {
        if let Some(QlogEvent { data: QlogData::PacketSent { trigger: t, .. }, .. }) = self.pending.last_mut() {
            *t = Some(trigger);
        }
    }

    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, QlogEvent> {
        self.pending.drain(..)
    }
}
