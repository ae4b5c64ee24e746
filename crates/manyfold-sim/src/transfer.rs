//! A verified bulk transfer between two nodes, the workhorse of the
//! behaviour tests (spec §11).
//!
//! The data is a seeded pseudo-random byte stream that can be generated at
//! any offset ([`pattern`]), so the sender makes it as the send buffer has
//! room and the receiver checks every byte against the same generator as it
//! arrives: nothing of the transfer's size is ever held in memory, and a
//! 100 MB transfer costs two generator passes and one compare.
//!
//! A [`Transfer`] connects a client to a listening server, sends `up` bytes
//! client -> server and `down` bytes server -> client, and closes
//! gracefully: the client closes its sending side once it has queued all
//! its data; the server likewise, or, with nothing to send, once it has read
//! the client's end of stream. It is driven by [`Transfer::pump`] from a
//! [`World::run_until`] condition, or all at once by [`Transfer::run`].

use std::net::SocketAddr;
use std::time::Duration;

use manyfold_proto::{CloseReason, ConnHandle, ConnStats, Endpoint, State};

use crate::world::{splitmix64, World};

/// Largest chunk handed to `send` or asked of `recv` at once.
const CHUNK: usize = 64 * 1024;

/// Fills `out` with the bytes at `offset..offset + out.len()` of the stream
/// named by `seed`. Any split of a range gives the same bytes.
pub fn pattern(seed: u64, offset: u64, out: &mut [u8]) {
    let mut pos = 0;
    let mut word = offset / 8;
    let mut skip = (offset % 8) as usize;
    while pos < out.len() {
        let bytes = splitmix64(seed ^ word.wrapping_mul(0xd6e8_feb8_6659_fd93)).to_le_bytes();
        let take = (8 - skip).min(out.len() - pos);
        out[pos..pos + take].copy_from_slice(&bytes[skip..skip + take]);
        pos += take;
        skip = 0;
        word += 1;
    }
}

/// Feeds a pattern stream of `total` bytes into a connection as it has room.
#[derive(Debug, Clone)]
pub struct Source {
    seed: u64,
    total: u64,
    sent: u64,
    buf: Vec<u8>,
}

impl Source {
    pub fn new(seed: u64, total: u64) -> Self {
        Source { seed, total, sent: 0, buf: vec![0; CHUNK] }
    }

    /// Bytes accepted by `send` so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    pub fn is_done(&self) -> bool {
        self.sent == self.total
    }

    /// Sends as much as the connection takes now. Returns the bytes taken,
    /// or the connection's refusal.
    pub fn push(&mut self, ep: &mut Endpoint, h: ConnHandle) -> Result<u64, String> {
        let mut taken = 0;
        while self.sent < self.total {
            let room = ep.conn_mut(h).send_capacity().min(CHUNK);
            let n = room.min(usize::try_from(self.total - self.sent).unwrap_or(usize::MAX));
            if n == 0 {
                break;
            }
            pattern(self.seed, self.sent, &mut self.buf[..n]);
            let k = ep.conn_mut(h).send(&self.buf[..n]).map_err(|e| format!("send at offset {}: {e}", self.sent))?;
            self.sent += k as u64;
            taken += k as u64;
            if k < n {
                break;
            }
        }
        Ok(taken)
    }
}

/// Checks a received stream against the pattern, byte for byte.
#[derive(Debug, Clone)]
pub struct Sink {
    seed: u64,
    expected: u64,
    received: u64,
    eof: bool,
    buf: Vec<u8>,
    want: Vec<u8>,
}

impl Sink {
    pub fn new(seed: u64, expected: u64) -> Self {
        Sink { seed, expected, received: 0, eof: false, buf: vec![0; CHUNK], want: vec![0; CHUNK] }
    }

    pub fn received(&self) -> u64 {
        self.received
    }

    /// The peer's end of stream was read after exactly the expected bytes.
    pub fn is_done(&self) -> bool {
        self.eof
    }

    /// Checks `data`, the next bytes of the stream.
    pub fn check(&mut self, data: &[u8]) -> Result<(), String> {
        if self.received + data.len() as u64 > self.expected {
            return Err(format!(
                "received {} bytes, more than the {} sent",
                self.received + data.len() as u64,
                self.expected
            ));
        }
        for (i, chunk) in data.chunks(CHUNK).enumerate() {
            let at = self.received + (i * CHUNK) as u64;
            let want = &mut self.want[..chunk.len()];
            pattern(self.seed, at, want);
            if chunk != &want[..] {
                let bad = chunk.iter().zip(want.iter()).position(|(a, b)| a != b).unwrap_or(0);
                return Err(format!("data differs at byte {}", at + bad as u64));
            }
        }
        self.received += data.len() as u64;
        Ok(())
    }

    /// Reads (at most `limit` bytes) and checks what the connection has.
    /// Returns the bytes read.
    pub fn pull(&mut self, ep: &mut Endpoint, h: ConnHandle, limit: usize) -> Result<u64, String> {
        let mut total = 0;
        while !self.eof && total < limit as u64 {
            let n = (limit - total as usize).min(CHUNK);
            let mut buf = std::mem::take(&mut self.buf);
            let r = ep.conn_mut(h).recv(&mut buf[..n]);
            let step = match r {
                Ok(None) => None,
                Ok(Some(0)) => {
                    if self.received != self.expected {
                        self.buf = buf;
                        return Err(format!("end of stream after {} of {} bytes", self.received, self.expected));
                    }
                    self.eof = true;
                    None
                }
                Ok(Some(k)) => Some(self.check(&buf[..k]).map(|()| k)),
                Err(e) => Some(Err(format!("recv after {} bytes: {e}", self.received))),
            };
            self.buf = buf;
            match step {
                None => break,
                Some(Ok(k)) => total += k as u64,
                Some(Err(e)) => return Err(e),
            }
        }
        Ok(total)
    }
}

/// One end of a transfer.
#[derive(Debug)]
struct Side {
    addr: SocketAddr,
    conn: Option<ConnHandle>,
    out: Source,
    input: Sink,
    closed_send: bool,
    /// Closes as soon as its data is queued (the client); the other side
    /// closes once its data is queued and, if it had none, once it has read
    /// the peer's end of stream.
    closes_first: bool,
}

impl Side {
    fn pump(&mut self, ep: &mut Endpoint) -> Result<(), String> {
        let Some(h) = self.conn else { return Ok(()) };
        if matches!(ep.conn(h).state(), Some(State::SynSent | State::SynReceived)) {
            return Ok(());
        }
        if !self.out.is_done() {
            self.out.push(ep, h)?;
        }
        if !self.input.is_done() {
            self.input.pull(ep, h, usize::MAX)?;
        }
        if !self.closed_send && self.out.is_done() && (self.closes_first || self.out.total > 0 || self.input.is_done())
        {
            ep.conn_mut(h).close();
            self.closed_send = true;
        }
        Ok(())
    }

    fn finished(&self, ep: &Endpoint) -> bool {
        let Some(h) = self.conn else { return false };
        self.input.is_done()
            && self.closed_send
            && matches!(ep.conn(h).state(), None | Some(State::Closed | State::TimeWait))
    }
}

/// What a completed transfer measured.
#[derive(Debug, Clone, Copy)]
pub struct TransferReport {
    /// Virtual time from `connect` to both sides closed.
    pub duration: Duration,
    pub client: ConnStats,
    pub server: ConnStats,
    pub client_close: Option<CloseReason>,
    pub server_close: Option<CloseReason>,
}

/// A client -> server (and optionally back) transfer, verified byte for byte.
#[derive(Debug)]
pub struct Transfer {
    seed: u64,
    client: Side,
    server: Side,
    started: Duration,
    error: Option<String>,
}

impl Transfer {
    /// Makes the server listen and the client connect to it; `up` bytes go
    /// client -> server, `down` bytes server -> client. The data streams are
    /// derived from the world's seed.
    pub fn start(w: &mut World, client: SocketAddr, server: SocketAddr, up: u64, down: u64) -> Self {
        let seed = w.seed();
        w.endpoint_mut(server).set_listening(true);
        let conn = w.connect(client, server);
        let (s_up, s_down) = (splitmix64(seed ^ 0x5550), splitmix64(seed ^ 0xd0e1));
        Transfer {
            seed,
            client: Side {
                addr: client,
                conn: Some(conn),
                out: Source::new(s_up, up),
                input: Sink::new(s_down, down),
                closed_send: false,
                closes_first: true,
            },
            server: Side {
                addr: server,
                conn: None,
                out: Source::new(s_down, down),
                input: Sink::new(s_up, up),
                closed_send: false,
                closes_first: false,
            },
            started: w.elapsed(),
            error: None,
        }
    }

    pub fn client_conn(&self) -> ConnHandle {
        self.client.conn.expect("set at start")
    }

    /// The server's connection, once accepted.
    pub fn server_conn(&self) -> Option<ConnHandle> {
        self.server.conn
    }

    /// Bytes (client -> server, server -> client) received and verified so far.
    pub fn progress(&self) -> (u64, u64) {
        (self.server.input.received(), self.client.input.received())
    }

    /// The first failure (bad data, early end, refused send), if any.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Moves data as the connections allow. Returns true once the transfer
    /// is over: both streams verified and both sides closed, or an error.
    pub fn pump(&mut self, w: &mut World) -> bool {
        if self.error.is_some() {
            return true;
        }
        if self.server.conn.is_none() {
            let client_addr = self.client.addr;
            let ep = w.endpoint_mut(self.server.addr);
            if let Some(h) = ep.accept() {
                if ep.conn(h).remote_addr() == Some(client_addr) {
                    self.server.conn = Some(h);
                } else {
                    self.error = Some(format!("server accepted a connection from {:?}", ep.conn(h).remote_addr()));
                    return true;
                }
            }
        }
        for side in [&mut self.client, &mut self.server] {
            let ep = w.endpoint_mut(side.addr);
            if let Err(e) = side.pump(ep) {
                let who = side.addr;
                self.error = Some(format!("{who}: {e}"));
                return true;
            }
        }
        if let Some(h) = self.client.conn {
            if w.endpoint(self.client.addr).conn(h).state() == Some(State::Closed) && !self.client.input.is_done() {
                let why = w.endpoint(self.client.addr).conn(h).close_reason();
                self.error = Some(format!("client connection closed early: {why:?}"));
                return true;
            }
        }
        self.is_finished(w)
    }

    /// Both streams verified and both sides closed (or in TIME-WAIT).
    pub fn is_finished(&self, w: &World) -> bool {
        self.client.finished(w.endpoint(self.client.addr)) && self.server.finished(w.endpoint(self.server.addr))
    }

    /// Drives the transfer to its end within `max` of virtual time: both
    /// streams verified, both sides closed. The report's duration ends when
    /// the data is done (TIME-WAIT excluded); the close reasons are taken
    /// after TIME-WAIT has run out too.
    pub fn run(mut self, w: &mut World, max: Duration) -> Result<TransferReport, String> {
        let deadline = w.elapsed() + max;
        let done = w.run_until(|w| self.pump(w), max);
        if let Some(e) = &self.error {
            return Err(format!("transfer failed (seed {}): {e}", self.seed));
        }
        if !done {
            let (up, down) = self.progress();
            return Err(format!(
                "transfer unfinished after {max:?} (seed {}): {up} of {} bytes up, {down} of {} down; client {:?}, server {:?}",
                self.seed,
                self.client.out.total,
                self.server.out.total,
                w.endpoint(self.client.addr).conn(self.client_conn()).state(),
                self.server.conn.and_then(|h| w.endpoint(self.server.addr).conn(h).state()),
            ));
        }
        let mut report = self.report(w);
        let (c, s) = (self.client_conn(), self.server.conn.expect("finished"));
        let closed = |w: &World| {
            w.endpoint(self.client.addr).conn(c).state() == Some(State::Closed)
                && w.endpoint(self.server.addr).conn(s).state() == Some(State::Closed)
        };
        if !w.run_until(|w| closed(w), deadline.saturating_sub(w.elapsed())) {
            return Err(format!(
                "data done but not closed after {max:?} (seed {}): client {:?}, server {:?}",
                self.seed,
                w.endpoint(self.client.addr).conn(c).state(),
                w.endpoint(self.server.addr).conn(s).state()
            ));
        }
        report.client_close = w.endpoint(self.client.addr).conn(c).close_reason();
        report.server_close = w.endpoint(self.server.addr).conn(s).close_reason();
        Ok(report)
    }

    /// Stats of both sides now.
    pub fn report(&self, w: &World) -> TransferReport {
        let c = w.endpoint(self.client.addr);
        let s = w.endpoint(self.server.addr);
        let h = self.client_conn();
        TransferReport {
            duration: w.elapsed() - self.started,
            client: c.conn(h).stats().unwrap_or_default(),
            server: self.server.conn.and_then(|h| s.conn(h).stats()).unwrap_or_default(),
            client_close: c.conn(h).close_reason(),
            server_close: self.server.conn.and_then(|h| s.conn(h).close_reason()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_independent_of_how_it_is_split() {
        let mut whole = vec![0u8; 1000];
        pattern(7, 13, &mut whole);
        let mut parts = vec![0u8; 1000];
        let mut at = 0;
        for len in [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 392] {
            pattern(7, 13 + at as u64, &mut parts[at..at + len]);
            at += len;
        }
        assert_eq!(at, 1000);
        assert_eq!(whole, parts);
        let mut other = vec![0u8; 1000];
        pattern(8, 13, &mut other);
        assert_ne!(whole, other);
    }

    #[test]
    fn pattern_looks_random() {
        let mut b = vec![0u8; 1 << 16];
        pattern(1, 0, &mut b);
        let ones: u32 = b.iter().map(|x| x.count_ones()).sum();
        let frac = f64::from(ones) / (b.len() * 8) as f64;
        assert!((frac - 0.5).abs() < 0.01, "{frac}");
    }

    #[test]
    fn sink_accepts_the_stream_and_rejects_a_changed_byte() {
        let mut data = vec![0u8; 5000];
        pattern(3, 0, &mut data);
        let mut sink = Sink::new(3, 5000);
        sink.check(&data[..1234]).unwrap();
        sink.check(&data[1234..]).unwrap();
        assert_eq!(sink.received(), 5000);
        assert!(sink.check(&[0]).is_err(), "more than expected");

        let mut sink = Sink::new(3, 5000);
        data[4321] ^= 0x10;
        let err = sink.check(&data).unwrap_err();
        assert!(err.contains("4321"), "{err}");
    }
}
