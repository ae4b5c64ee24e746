//! The packet trace (RUSP's debug mode, paper 04 Fig. 14): one DEBUG event
//! per datagram on target `manyfold::packet`, with time, direction, peer,
//! flags, connection id, seq, ack, window and length.
//!
//! Time is milliseconds since the first endpoint of the process started, so
//! the traces of a client and a server in one process line up. Arrows:
//! `->` sent, `<-` received, `-x` dropped by fault injection before sending,
//! `x-` dropped by fault injection after receiving.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Instant;

use manyfold_proto::wire::Header;

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

    #[inline]
    pub(crate) fn log(&self, now: Instant, dir: Direction, peer: SocketAddr, datagram: &[u8]) {
        if !self.enabled || !tracing::enabled!(target: "manyfold::packet", tracing::Level::DEBUG) {
            return;
        }
        let t = now.saturating_duration_since(self.epoch);
        let t_ms = t.as_secs_f64() * 1e3;
        match Header::peek(datagram) {
            Some(h) => tracing::debug!(
                target: "manyfold::packet",
                "{t_ms:>11.3}ms {} {peer} flags={:?} conn={:08x} seq={} ack={} wnd={} len={}",
                dir.arrow(),
                h.flags,
                h.conn_id,
                h.seq,
                h.ack,
                h.window,
                datagram.len(),
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
