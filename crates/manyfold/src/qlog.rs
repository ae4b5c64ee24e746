//! qlog traces (spec §18): one file per connection, written by the driver
//! when [`crate::Config::qlog_dir`] is set, and read back by
//! `manyfold trace`.
//!
//! A file is a JSON text sequence (RFC 7464; qlog's `JSON-SEQ`, extension
//! `.sqlog`): a header record, then one record per event, each led by an
//! ASCII record separator (0x1E) and ended by a newline. Event names and
//! fields follow qlog's main schema where it has one
//! (`transport:packet_sent`, `recovery:metrics_updated`, ...); times are
//! milliseconds since the connection was created, and the header's
//! `reference_time` is that moment in Unix milliseconds.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use manyfold_proto::qlog::{Metrics, PacketInfo, QlogData, QlogEvent};
use manyfold_proto::wire::chunk::{data_flags, Chunk};
use manyfold_proto::ConnHandle;
use serde_json::{json, Value};

/// The qlog version the files claim.
pub const QLOG_VERSION: &str = "0.3";
/// The record separator of a JSON text sequence.
const RS: u8 = 0x1e;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The header record of a connection's file.
fn header(client: bool, local_id: u32, remote: &str, reference_ms: f64) -> Value {
    json!({
        "qlog_version": QLOG_VERSION,
        "qlog_format": "JSON-SEQ",
        "title": format!("manyfold connection {local_id:08x}"),
        "trace": {
            "vantage_point": { "type": if client { "client" } else { "server" } },
            "common_fields": { "reference_time": reference_ms, "time_format": "relative", "protocol_type": ["manyfold"] },
            "remote": remote,
        },
    })
}

fn frames(p: &PacketInfo) -> Vec<Value> {
    let mut out = Vec::with_capacity(p.chunks.len() + 1);
    if p.flags.contains(manyfold_proto::wire::Flags::ACK) {
        let mut ack = json!({ "frame_type": "ack", "cumulative": p.ack, "sack": p.sack });
        if let Some(e) = p.echo {
            ack["echo"] = json!({ "packet_number": e.seq, "resent": e.count });
        }
        out.push(ack);
    }
    for c in &p.chunks {
        out.push(match *c {
            Chunk::Data(ref d) => {
                let flag = |bit: u8| d.flags & bit != 0;
                json!({
                    "frame_type": "stream", "stream_id": d.stream.get(), "offset": d.offset, "length": d.data,
                    "begin": flag(data_flags::BEGIN), "end": flag(data_flags::END),
                    "fin": flag(data_flags::FIN), "unordered": flag(data_flags::UNORDERED),
                })
            }
            Chunk::Reset { stream, code, final_size } => {
                json!({ "frame_type": "reset_stream", "stream_id": stream.get(), "error_code": code, "final_size": final_size })
            }
            Chunk::Stop { stream, code } => json!({ "frame_type": "stop_sending", "stream_id": stream.get(), "error_code": code }),
            Chunk::Credit { stream, unordered, max } => {
                json!({ "frame_type": "max_stream_data", "stream_id": stream.get(), "unordered": unordered, "maximum": max })
            }
            Chunk::Abandon { stream, start, end, .. } => {
                json!({ "frame_type": "abandon", "stream_id": stream.get(), "start": start, "end": end })
            }
            Chunk::Pad => json!({ "frame_type": "padding" }),
            Chunk::Handshake(len) => json!({ "frame_type": "handshake", "length": len }),
            Chunk::Reason(len) => json!({ "frame_type": "close_reason", "length": len }),
            Chunk::AckFrequency { seq, threshold, max_delay_us } => json!({
                "frame_type": "ack_frequency",
                "sequence_number": seq,
                "ack_eliciting_threshold": threshold,
                "request_max_ack_delay": max_delay_us
            }),
            Chunk::Resent { count } => json!({ "frame_type": "resent", "count": count }),
        });
    }
    out
}

fn packet(p: &PacketInfo) -> Value {
    json!({
        "header": {
            "packet_type": format!("{:?}", p.ptype).to_lowercase(),
            "flags": p.flags.to_string(),
            "conn_id": p.conn_id,
            "packet_number": p.seq,
            "ack": p.ack,
            "window": p.window,
        },
        "raw": { "length": p.size },
        "frames": frames(p),
    })
}

fn metrics(m: &Metrics) -> Value {
    json!({
        "congestion_window": m.cwnd,
        "bytes_in_flight": m.bytes_in_flight,
        "smoothed_rtt": ms(m.smoothed_rtt),
        "latest_rtt": ms(m.latest_rtt),
        "min_rtt": ms(m.min_rtt),
        "rtt_variance": ms(m.rtt_variance),
        "rtt_samples": m.rtt_samples,
    })
}

/// One event as a qlog record: `{"time", "name", "data"}`.
pub fn event_record(e: &QlogEvent) -> Value {
    let (name, data) = match &e.data {
        QlogData::Started { client, local_id, remote, state, congestion } => (
            "connectivity:connection_started",
            json!({
                "role": if *client { "client" } else { "server" },
                "local_id": format!("{local_id:08x}"),
                "remote": remote.to_string(),
                "state": state.name(),
                "congestion_control": congestion,
            }),
        ),
        QlogData::PacketSent { packet: p, trigger } => {
            let mut v = packet(p);
            if let Some(t) = trigger {
                v["trigger"] = json!(t.name());
            }
            ("transport:packet_sent", v)
        }
        QlogData::PacketReceived { packet: p } => ("transport:packet_received", packet(p)),
        QlogData::PacketLost { seq, size, trigger } => (
            "recovery:packet_lost",
            json!({ "header": { "packet_number": seq }, "raw": { "length": size }, "trigger": trigger.name() }),
        ),
        QlogData::RtoExpired { backoff } => {
            ("recovery:loss_timer_updated", json!({ "timer_type": "rto", "event_type": "expired", "backoff": backoff }))
        }
        QlogData::Metrics(m) => ("recovery:metrics_updated", metrics(m)),
        QlogData::StateUpdated { from, to } => {
            ("connectivity:connection_state_updated", json!({ "old": from.name(), "new": to.name() }))
        }
        QlogData::Closed { reason } => ("connectivity:connection_closed", json!({ "reason": reason.to_string() })),
    };
    json!({ "time": ms(e.at), "name": name, "data": data })
}

/// Appends one record of a JSON text sequence.
fn write_record(out: &mut impl Write, v: &Value) -> io::Result<()> {
    out.write_all(&[RS])?;
    serde_json::to_writer(&mut *out, v)?;
    out.write_all(b"\n")
}

/// Writes a connection's events as a whole file: the header (its
/// `reference_time` 0) and every event. `events` must start with the
/// connection's `Started` event.
pub fn write_trace(out: &mut impl Write, events: &[QlogEvent]) -> io::Result<()> {
    let Some(QlogEvent { data: QlogData::Started { client, local_id, remote, .. }, .. }) = events.first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "a trace starts with the connection's Started event"));
    };
    write_record(out, &header(*client, *local_id, &remote.to_string(), 0.0))?;
    for e in events {
        write_record(out, &event_record(e))?;
    }
    out.flush()
}

/// The driver's side: one open file per traced connection.
#[derive(Debug)]
pub(crate) struct QlogWriter {
    dir: PathBuf,
    files: HashMap<ConnHandle, BufWriter<File>>,
    /// A failure was already logged (one warning, not one per event).
    warned: bool,
}

impl QlogWriter {
    pub(crate) fn new(dir: PathBuf) -> Self {
        QlogWriter { dir, files: HashMap::new(), warned: false }
    }

    /// Writes one event, opening the connection's file on its `Started`
    /// event and closing it on `Closed`. Write errors are logged once; the
    /// connection goes on untraced.
    pub(crate) fn write(&mut self, conn: ConnHandle, e: &QlogEvent) {
        if let QlogData::Started { client, local_id, remote, .. } = &e.data {
            let role = if *client { "client" } else { "server" };
            let path = self.dir.join(format!("{role}-{local_id:08x}.sqlog"));
            let reference = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().saturating_sub(e.at);
            let opened = File::create(&path).and_then(|f| {
                let mut w = BufWriter::with_capacity(64 << 10, f);
                write_record(&mut w, &header(*client, *local_id, &remote.to_string(), ms(reference)))?;
                Ok(w)
            });
            match opened {
                Ok(w) => {
                    self.files.insert(conn, w);
                }
                Err(err) => self.warn(&path, &err),
            }
        }
        let Some(w) = self.files.get_mut(&conn) else { return };
        let mut result = write_record(w, &event_record(e));
        if matches!(e.data, QlogData::Closed { .. }) {
            result = result.and_then(|()| w.flush());
            self.files.remove(&conn);
        }
        if let Err(err) = result {
            self.files.remove(&conn);
            let path = self.dir.clone();
            self.warn(&path, &err);
        }
    }

    fn warn(&mut self, path: &Path, err: &io::Error) {
        if !self.warned {
            self.warned = true;
            tracing::warn!(path = %path.display(), error = %err, "cannot write the qlog trace; tracing stops for this connection");
        }
    }
}

/// One event read back from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Milliseconds since the connection was created.
    pub time: f64,
    /// The event's name (`transport:packet_sent`, ...).
    pub name: String,
    /// The event's fields as written.
    pub data: Value,
}

/// A trace file read back.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The file's first record: qlog version, title, vantage point.
    pub header: Value,
    /// The events, in file order.
    pub events: Vec<Record>,
    /// Records that were not valid JSON events (a file cut short by a
    /// killed process ends with one), skipped.
    pub skipped: usize,
}

/// Reads a trace written as a JSON text sequence (or as one JSON object
/// per line). Fails if the file cannot be read or has no qlog header.
pub fn read(path: &Path) -> io::Result<Trace> {
    let bytes = std::fs::read(path)?;
    parse(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
}

/// [`read`] on bytes.
pub fn parse(bytes: &[u8]) -> Result<Trace, String> {
    let mut records = bytes
        .split(|&b| b == RS || b == b'\n')
        .filter(|r| r.iter().any(|b| !b.is_ascii_whitespace()))
        .map(serde_json::from_slice::<Value>);
    let header = match records.next() {
        Some(Ok(v)) if v.get("qlog_version").is_some() => v,
        Some(Ok(_)) | Some(Err(_)) => return Err("not a qlog file: the first record has no qlog_version".into()),
        None => return Err("empty file: no qlog header".into()),
    };
    let mut events = Vec::new();
    let mut skipped = 0;
    for r in records {
        let event = r.ok().and_then(|v| {
            let time = v.get("time")?.as_f64()?;
            let name = v.get("name")?.as_str()?.to_string();
            let data = v.get("data").cloned().unwrap_or(Value::Null);
            Some(Record { time, name, data })
        });
        match event {
            Some(e) => events.push(e),
            None => skipped += 1,
        }
    }
    Ok(Trace { header, events, skipped })
}

/// What a trace says about its connection: the figures `manyfold trace`
/// prints, comparable with the connection's [`manyfold_proto::ConnStats`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// `client` or `server`.
    pub role: String,
    /// Our connection id, as written in the trace.
    pub local_id: String,
    /// The peer's address.
    pub remote: String,
    /// The congestion controller's name.
    pub congestion: String,
    /// Time of the last event, milliseconds.
    pub duration_ms: f64,
    /// Datagrams sent.
    pub packets_sent: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// Datagram bytes, headers included.
    pub bytes_sent: u64,
    /// Datagram bytes received, headers included.
    pub bytes_received: u64,
    /// Stream bytes in first transmissions (ConnStats::bytes_sent).
    pub stream_bytes_sent: u64,
    /// Packets sent again: retransmissions plus tail-loss probes
    /// (ConnStats::retransmissions).
    pub retransmissions: u64,
    /// Tail-loss probes sent.
    pub probes: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Losses declared by reordering (packet threshold).
    pub lost_by_reordering: u64,
    /// Losses declared by time (RACK's reordering window).
    pub lost_by_time: u64,
    /// Losses declared by a retransmission timeout.
    pub lost_by_rto: u64,
    /// Path MTU probes the sender's own interface refused (spec §3.7).
    pub lost_refused: u64,
    /// Retransmission timeouts that fired.
    pub rto_expiries: u64,
    /// Received packets acknowledging something.
    pub acks_received: u64,
    /// SACK ranges in those packets.
    pub sack_ranges_received: u64,
    /// RTT samples taken.
    pub rtt_samples: u64,
    /// Smallest RTT sample, milliseconds.
    pub min_rtt_ms: f64,
    /// Mean of the RTT samples, milliseconds.
    pub mean_rtt_ms: f64,
    /// Largest RTT sample, milliseconds.
    pub max_rtt_ms: f64,
    /// The smoothed RTT at the end, milliseconds.
    pub final_srtt_ms: f64,
    /// Largest congestion window, bytes.
    pub max_cwnd: u64,
    /// Congestion window at the end, bytes.
    pub final_cwnd: u64,
    /// Most bytes in flight at once.
    pub max_bytes_in_flight: u64,
    /// States in order of entry, the first included.
    pub states: Vec<String>,
    /// Why the connection closed, when the trace says.
    pub close_reason: Option<String>,
    /// Records of the file that were not valid events.
    pub skipped_records: usize,
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}
fn f(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}
fn s(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

impl Trace {
    /// Folds the events into the figures of a [`Summary`].
    pub fn summary(&self) -> Summary {
        let mut out = Summary { skipped_records: self.skipped, ..Summary::default() };
        let mut last_samples = 0;
        let mut rtt_sum = 0.0;
        out.min_rtt_ms = f64::INFINITY;
        for e in &self.events {
            let d = &e.data;
            out.duration_ms = out.duration_ms.max(e.time);
            match e.name.as_str() {
                "connectivity:connection_started" => {
                    out.role = s(d, "role");
                    out.local_id = s(d, "local_id");
                    out.remote = s(d, "remote");
                    out.congestion = s(d, "congestion_control");
                    out.states.push(s(d, "state"));
                }
                "transport:packet_sent" => {
                    out.packets_sent += 1;
                    out.bytes_sent += u(&d["raw"], "length");
                    match d.get("trigger").and_then(Value::as_str) {
                        Some("probe") => {
                            out.probes += 1;
                            out.retransmissions += 1;
                        }
                        Some(_) => out.retransmissions += 1,
                        None => out.stream_bytes_sent += stream_bytes(d),
                    }
                }
                "transport:packet_received" => {
                    out.packets_received += 1;
                    out.bytes_received += u(&d["raw"], "length");
                    if let Some(ack) = frames_of(d).find(|f| f["frame_type"] == "ack") {
                        out.acks_received += 1;
                        out.sack_ranges_received += ack["sack"].as_array().map_or(0, |a| a.len() as u64);
                    }
                }
                "recovery:packet_lost" => {
                    out.packets_lost += 1;
                    match d["trigger"].as_str() {
                        Some("rto") => out.lost_by_rto += 1,
                        Some("time_threshold") => out.lost_by_time += 1,
                        Some("refused") => out.lost_refused += 1,
                        _ => out.lost_by_reordering += 1,
                    }
                }
                "recovery:loss_timer_updated" if d["event_type"] == "expired" => out.rto_expiries += 1,
                "recovery:metrics_updated" => {
                    let samples = u(d, "rtt_samples");
                    if samples > last_samples {
                        last_samples = samples;
                        let rtt = f(d, "latest_rtt");
                        out.rtt_samples += 1;
                        rtt_sum += rtt;
                        out.min_rtt_ms = out.min_rtt_ms.min(rtt);
                        out.max_rtt_ms = out.max_rtt_ms.max(rtt);
                    }
                    out.final_srtt_ms = f(d, "smoothed_rtt");
                    out.final_cwnd = u(d, "congestion_window");
                    out.max_cwnd = out.max_cwnd.max(out.final_cwnd);
                    out.max_bytes_in_flight = out.max_bytes_in_flight.max(u(d, "bytes_in_flight"));
                }
                "connectivity:connection_state_updated" => out.states.push(s(d, "new")),
                "connectivity:connection_closed" => out.close_reason = Some(s(d, "reason")),
                _ => {}
            }
        }
        if out.rtt_samples == 0 {
            out.min_rtt_ms = 0.0;
        } else {
            out.mean_rtt_ms = rtt_sum / out.rtt_samples as f64;
        }
        out
    }
}

fn frames_of(d: &Value) -> impl Iterator<Item = &Value> {
    d["frames"].as_array().into_iter().flatten()
}

fn stream_bytes(d: &Value) -> u64 {
    frames_of(d).filter(|f| f["frame_type"] == "stream").map(|f| u(f, "length")).sum()
}

impl std::fmt::Display for Summary {
    fn fmt(&self, w: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 * 100.0 / b as f64 };
        writeln!(
            w,
            "connection {} ({}) with {}, congestion control {}",
            self.local_id, self.role, self.remote, self.congestion
        )?;
        writeln!(w, "  duration          {:.3} s", self.duration_ms / 1e3)?;
        writeln!(w, "  states            {}", self.states.join(" -> "))?;
        if let Some(r) = &self.close_reason {
            writeln!(w, "  closed            {r}")?;
        }
        writeln!(
            w,
            "  packets sent      {} ({} bytes; {} stream bytes first sent)",
            self.packets_sent, self.bytes_sent, self.stream_bytes_sent
        )?;
        writeln!(
            w,
            "  packets received  {} ({} bytes; {} acks, {} SACK ranges)",
            self.packets_received, self.bytes_received, self.acks_received, self.sack_ranges_received
        )?;
        writeln!(
            w,
            "  retransmissions   {} ({:.2}% of packets sent; {} tail-loss probes)",
            self.retransmissions,
            pct(self.retransmissions, self.packets_sent),
            self.probes
        )?;
        writeln!(
            w,
            "  packets lost      {} (reordering {}, time {}, RTO {}, refused by the interface {}); RTO expiries {}",
            self.packets_lost,
            self.lost_by_reordering,
            self.lost_by_time,
            self.lost_by_rto,
            self.lost_refused,
            self.rto_expiries
        )?;
        writeln!(
            w,
            "  RTT               {} samples: min {:.3} / mean {:.3} / max {:.3} ms, final smoothed {:.3} ms",
            self.rtt_samples, self.min_rtt_ms, self.mean_rtt_ms, self.max_rtt_ms, self.final_srtt_ms
        )?;
        writeln!(
            w,
            "  congestion window max {} bytes, final {} bytes; bytes in flight max {}",
            self.max_cwnd, self.final_cwnd, self.max_bytes_in_flight
        )?;
        if self.skipped_records > 0 {
            writeln!(w, "  skipped           {} malformed records (a file cut short?)", self.skipped_records)?;
        }
        Ok(())
    }
}
