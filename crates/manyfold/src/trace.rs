//! The packet trace (RUSP's debug mode, paper 04 Fig. 14): one DEBUG event
//! per datagram on target `manyfold::packet`, with time, direction, peer,
//! flags, connection id, seq, ack, window, length, and its chunks (spec
//! §13.2): `s3@1024+1400/BE` is 1,400 bytes of stream 3 at offset 1024,
//! with its flags (B begin, E end, U unordered, F fin); `reset3`,
//! `stop3`, `credit3<=N` (`creditU3` for the unordered space),
//! `abandon3[a,b)`, `pad`; a RST's error code `err=N` and its reason in
//! words `reason="..."` (spec §3.3.4, escaped so a peer's text cannot
//! forge trace lines).
//!
//! Time is milliseconds since the first endpoint of the process started, so
//! the traces of a client and a server in one process line up. Arrows:
//! `->` sent, `<-` received, `-x` dropped by fault injection before sending,
//! `x-` dropped by fault injection after receiving.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Instant;

use std::fmt::Write;

use manyfold_proto::wire::chunk::{data_flags, parse_chunks, Chunk};
use manyfold_proto::wire::{Header, Packet};

/// Which way a datagram went, or what fault injection did to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Send,
    Recv,
    /// Dropped by fault injection before it was sent.
    DropSend,
    /// Dropped by fault injection after it was received.
    DropRecv,
}

impl Direction {
    fn arrow(self) -> &'static str {
        match self {
            Direction::Send => "->",
            Direction::Recv => "<-",
            Direction::DropSend => "-x",
            Direction::DropRecv => "x-",
        }
    }
}

/// Logs one datagram when tracing is enabled for this endpoint and the
/// subscriber wants `manyfold::packet` at DEBUG.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacketTrace {
    enabled: bool,
    epoch: Instant,
}

impl PacketTrace {
    pub(crate) fn new(enabled: bool, now: Instant) -> Self {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        PacketTrace { enabled, epoch: *EPOCH.get_or_init(|| now) }
    }

    /// Whether `log` would write anything: a caller that must first make
    /// the datagram it logs asks.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.enabled && tracing::enabled!(target: "manyfold::packet", tracing::Level::DEBUG)
    }

    #[inline]
    pub(crate) fn log(&self, now: Instant, dir: Direction, peer: SocketAddr, datagram: &[u8]) {
        if !self.is_on() {
            return;
        }
        let t = now.saturating_duration_since(self.epoch);
        let t_ms = t.as_secs_f64() * 1e3;
        match Header::peek(datagram) {
            Some(h) => tracing::debug!(
                target: "manyfold::packet",
                "{t_ms:>11.3}ms {} {peer} flags={:?} conn={:08x} seq={} ack={} wnd={} len={}{}",
                dir.arrow(),
                h.flags,
                h.conn_id,
                h.seq,
                h.ack,
                h.window,
                datagram.len(),
                chunks(datagram),
            ),
            None => tracing::debug!(
                target: "manyfold::packet",
                "{t_ms:>11.3}ms {} {peer} undecodable len={}",
                dir.arrow(),
                datagram.len(),
            ),
        }
    }
}

/// The error code and chunks of a datagram, one token each (see the
/// module docs); empty for a datagram that does not parse or carries none.
fn chunks(datagram: &[u8]) -> String {
    let mut out = String::new();
    let Ok(p) = Packet::parse(datagram) else { return out };
    if let Some(code) = p.error {
        let _ = write!(out, " err={}", code.0);
    }
    for c in parse_chunks(p.data).map_while(Result::ok) {
        out.push(' ');
        let _ = match c {
            Chunk::Data(d) => {
                let mut flags = String::new();
                for (bit, ch) in [
                    (data_flags::BEGIN, 'B'),
                    (data_flags::END, 'E'),
                    (data_flags::UNORDERED, 'U'),
                    (data_flags::FIN, 'F'),
                ] {
                    if d.flags & bit != 0 {
                        flags.push(ch);
                    }
                }
                let sep = if flags.is_empty() { "" } else { "/" };
                write!(out, "s{}@{}+{}{sep}{flags}", d.stream, d.offset, d.data.len())
            }
            Chunk::Reset { stream, code, .. } => write!(out, "reset{stream}:{code}"),
            Chunk::Stop { stream, code } => write!(out, "stop{stream}:{code}"),
            Chunk::Credit { stream, unordered, max } => {
                write!(out, "credit{}{stream}<={max}", if unordered { "U" } else { "" })
            }
            Chunk::Abandon { stream, start, end, .. } => write!(out, "abandon{stream}[{start},{end})"),
            Chunk::Pad => write!(out, "pad"),
            Chunk::Handshake(m) => write!(out, "handshake+{}", m.len()),
            Chunk::Reason(t) => write!(out, "reason={:?}", String::from_utf8_lossy(t)),
            Chunk::AckFrequency { seq, threshold, max_delay_us } => {
                write!(out, "ackfreq#{seq}:{threshold}pkts/{max_delay_us}us")
            }
            Chunk::Resent { count } => write!(out, "resent#{count}"),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use manyfold_proto::wire::chunk::DataChunk;
    use manyfold_proto::wire::{Flags, PacketType};

    #[test]
    fn a_traced_packet_names_its_chunks() {
        let mut area = Vec::new();
        let data = Chunk::Data(DataChunk {
            stream: manyfold_proto::StreamId::new(3),
            flags: data_flags::BEGIN | data_flags::END,
            offset: 1024,
            in_msg: 0,
            data: Bytes::from_static(b"hello"),
            msg: 0,
        });
        for c in
            [data, Chunk::Credit { stream: manyfold_proto::StreamId::BYTES, unordered: false, max: 99 }, Chunk::Pad]
        {
            let mut b = vec![0u8; c.encoded_len()];
            c.emit(&mut b);
            area.extend_from_slice(&b);
        }
        let mut p = Packet::bare(PacketType::Segment, Flags::ACK, 7, 1, 2, 3);
        p.data = &area;
        let mut d = vec![0u8; p.len()];
        p.emit(&mut d);
        assert_eq!(chunks(&d), " s3@1024+5/BE credit0<=99 pad");
        assert_eq!(chunks(&d[..10]), "");
    }

    #[test]
    fn a_traced_rst_shows_its_code_and_its_reason_escaped() {
        let reason = Chunk::Reason(&b"disk full\n-> forged"[..]);
        let mut area = vec![0u8; reason.encoded_len()];
        reason.emit(&mut area);
        let mut p = Packet::bare(PacketType::Segment, Flags::RST, 7, 1, 2, 0);
        p.error = Some(manyfold_proto::wire::ErrorCode(300));
        p.data = &area;
        let mut d = vec![0u8; p.len()];
        p.emit(&mut d);
        assert_eq!(chunks(&d), r#" err=300 reason="disk full\n-> forged""#);
    }
}
