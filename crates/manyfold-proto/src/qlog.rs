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

use crate::connection::{CloseReason, State};
use crate::wire::chunk::{data_flags, parse_chunks, Chunk};
use crate::wire::{Flags, Packet, PacketType};

/// One event and when it happened, counted from the connection's creation.
#[derive(Debug, Clone, PartialEq)]
pub struct QlogEvent {
    pub at: Duration,
    pub data: QlogData,
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub enum QlogData {
    /// The connection was created: the first event of every trace.
    Started {
        /// We initiated it (a client) or accepted it (a server).
        client: bool,
        local_id: u32,
        remote: SocketAddr,
        /// The state it starts in (SYN-SENT, or ESTABLISHED for an accepted one).
        state: State,
        /// Congestion controller's name.
        congestion: &'static str,
    },
    PacketSent {
        packet: PacketInfo,
        /// Why a packet is sent again; `None` for a first transmission, an
        /// ack, a probe of the window or a keep-alive.
        trigger: Option<SendTrigger>,
    },
    PacketReceived {
        packet: PacketInfo,
    },
    /// A sequenced packet was declared lost (spec §5.4).
    PacketLost {
        seq: u32,
        size: u32,
        trigger: LossTrigger,
    },
    /// The retransmission timer expired (spec §5.4).
    RtoExpired {
        backoff: u32,
    },
    /// Recovery and congestion state after a change (at most one per
    /// engine call, and only when something changed).
    Metrics(Metrics),
    StateUpdated {
        from: State,
        to: State,
    },
    /// The connection entered CLOSED for this reason (after its `StateUpdated`).
    Closed {
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
    pub fn name(self) -> &'static str {
        match self {
            SendTrigger::Retransmit => "retransmit",
            SendTrigger::Probe => "probe",
        }
    }
}

/// What declared a packet lost (spec §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossTrigger {
    /// Enough later packets were acknowledged (RACK's packet threshold).
    Reordering,
    /// It waited longer than the RACK time threshold.
    Time,
    /// The retransmission timer expired.
    Rto,
}

impl LossTrigger {
    pub fn name(self) -> &'static str {
        match self {
            LossTrigger::Reordering => "reordering_threshold",
            LossTrigger::Time => "time_threshold",
            LossTrigger::Rto => "rto",
        }
    }
}

/// The header and contents of one datagram, as the trace shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct PacketInfo {
    pub ptype: PacketType,
    pub flags: Flags,
    pub conn_id: u32,
    pub seq: u32,
    pub ack: u32,
    pub window: u32,
    /// Datagram length in bytes, header included.
    pub size: u32,
    /// SACK ranges `[start, end)` of sequence numbers (spec §3.3.1).
    pub sack: Vec<(u32, u32)>,
    pub frames: Vec<Frame>,
}

/// One chunk of the data area (spec §13.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    Stream {
        stream: u16,
        offset: u64,
        len: u32,
        begin: bool,
        end: bool,
        fin: bool,
        unordered: bool,
    },
    Reset {
        stream: u16,
        code: u16,
        final_size: u64,
    },
    Stop {
        stream: u16,
        code: u16,
    },
    Credit {
        stream: u16,
        unordered: bool,
        max: u64,
    },
    Abandon {
        stream: u16,
        start: u64,
        end: u64,
    },
    Pad,
    /// A Noise handshake message of `len` bytes (spec §19.2).
    Handshake {
        len: u16,
    },
}

impl PacketInfo {
    /// The trace's view of a parsed packet of `size` bytes.
    pub fn of(p: &Packet<'_>, size: usize) -> PacketInfo {
        let h = &p.header;
        let frames = parse_chunks(p.data)
            .map_while(Result::ok)
            .map(|c| match c {
                Chunk::Data(d) => Frame::Stream {
                    stream: d.stream,
                    offset: d.offset,
                    len: d.data.len() as u32,
                    begin: d.flags & data_flags::BEGIN != 0,
                    end: d.flags & data_flags::END != 0,
                    fin: d.flags & data_flags::FIN != 0,
                    unordered: d.flags & data_flags::UNORDERED != 0,
                },
                Chunk::Reset { stream, code, final_size } => Frame::Reset { stream, code, final_size },
                Chunk::Stop { stream, code } => Frame::Stop { stream, code },
                Chunk::Credit { stream, unordered, max } => Frame::Credit { stream, unordered, max },
                Chunk::Abandon { stream, start, end, .. } => Frame::Abandon { stream, start, end },
                Chunk::Pad => Frame::Pad,
                Chunk::Handshake(m) => Frame::Handshake { len: m.len() as u16 },
            })
            .collect();
        PacketInfo {
            ptype: h.ptype,
            flags: h.flags,
            conn_id: h.conn_id,
            seq: h.seq,
            ack: h.ack,
            window: h.window,
            size: size as u32,
            sack: p.sack.map(|s| s.ranges().to_vec()).unwrap_or_default(),
            frames,
        }
    }

    /// Bytes of stream data the packet carries.
    pub fn stream_bytes(&self) -> u64 {
        self.frames.iter().map(|f| if let Frame::Stream { len, .. } = f { u64::from(*len) } else { 0 }).sum()
    }
}

/// Recovery and congestion state (qlog's `recovery:metrics_updated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metrics {
    /// Congestion window in bytes.
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    pub smoothed_rtt: Duration,
    pub latest_rtt: Duration,
    pub min_rtt: Duration,
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
