//! What the `messages` scenario moves: the workload's schedule, the bytes
//! of each message, the receiver's check, and the frame the TCP rows wrap
//! each message in.
//!
//! A message of [`Workload::size`] bytes is
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | logical stream (big endian) |
//! | 2..6 | sequence number within that stream |
//! | 6..14 | when it was due, CLOCK_MONOTONIC nanoseconds |
//! | 14.. | filler from a generator seeded by (seed, stream, sequence) |
//!
//! Sender and receiver are processes on one host (in two network
//! namespaces), and CLOCK_MONOTONIC is one clock for the whole host, so
//! the receiver's reading at arrival minus the stamp is the message's
//! one-way latency. The stamp is the time the schedule says the message is
//! due, not the time the send call ran: a sender held up (by its transport
//! or by the machine) makes its messages later, as an application would
//! see it.
//!
//! On TCP (and through kcptun) the messages of all streams share one byte
//! stream; each is framed as `[stream u16][length u16]` + message.

use anyhow::{bail, ensure, Result};

use crate::wan::link::SplitMix64;

/// Bytes of the message header (stream, sequence, stamp).
pub const HEADER: usize = 14;
/// Bytes of the TCP rows' frame header (stream, length).
pub const FRAME: usize = 4;

pub use crate::wan::sys::monotonic_ns as now_ns;

/// The schedule and shape of one run's messages, shared by sender and
/// receiver.
#[derive(clap::Args, Debug, Clone, Copy, PartialEq)]
pub struct Workload {
    /// Messages in the run, all streams together.
    #[arg(long)]
    pub count: u32,
    /// Logical streams; message k belongs to stream k mod streams.
    #[arg(long)]
    pub streams: u16,
    /// Each stream sends one message every this many ms (the streams are
    /// staggered evenly: one message every interval / streams overall).
    #[arg(long)]
    pub interval_ms: f64,
    /// Bytes per message, header included.
    #[arg(long)]
    pub size: u16,
    /// Seed of the messages' filler.
    #[arg(long)]
    pub seed: u64,
}

impl Workload {
    pub fn check(&self) -> Result<()> {
        ensure!(self.count > 0, "--count must be positive");
        ensure!(self.streams > 0, "--streams must be positive");
        ensure!(self.interval_ms.is_finite() && self.interval_ms > 0.0, "--interval-ms must be positive");
        ensure!(self.size as usize >= HEADER, "--size must be at least {HEADER} bytes");
        Ok(())
    }

    /// Nanoseconds between consecutive messages (of any stream).
    pub fn period_ns(&self) -> u64 {
        (self.interval_ms * 1e6 / self.streams as f64).round() as u64
    }

    /// Message k's stream and its sequence number within the stream.
    pub fn slot(&self, k: u32) -> (u16, u32) {
        ((k % self.streams as u32) as u16, k / self.streams as u32)
    }

    /// The schedule's length, first message to last.
    pub fn span_secs(&self) -> f64 {
        self.period_ns() as f64 * self.count.saturating_sub(1) as f64 / 1e9
    }

    /// Writes message k, due at `due_ns`, into `out` (`size` bytes).
    pub fn fill(&self, k: u32, due_ns: u64, out: &mut [u8]) {
        let (stream, seq) = self.slot(k);
        out[0..2].copy_from_slice(&stream.to_be_bytes());
        out[2..6].copy_from_slice(&seq.to_be_bytes());
        out[6..14].copy_from_slice(&due_ns.to_be_bytes());
        filler(self.seed, stream, seq, &mut out[HEADER..self.size as usize]);
    }
}

fn filler(seed: u64, stream: u16, seq: u32, out: &mut [u8]) {
    let mut rng = SplitMix64(seed ^ ((stream as u64) << 48) ^ (seq as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for chunk in out.chunks_mut(8) {
        let w = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// One verified message as the receiver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub stream: u16,
    pub seq: u32,
    pub latency_ns: u64,
}

/// The receiver's check: every message whole, of the run's seed, on the
/// right stream, none twice, and (unless the row sends unordered
/// messages) in order within its stream.
#[derive(Debug)]
pub struct Tracker {
    w: Workload,
    ordered: bool,
    /// Messages arrived per stream.
    got: Vec<u32>,
    /// Message k arrived.
    seen: Vec<bool>,
    scratch: Vec<u8>,
    pub arrivals: Vec<Arrival>,
}

impl Tracker {
    pub fn new(w: Workload, ordered: bool) -> Tracker {
        Tracker {
            w,
            ordered,
            got: vec![0; w.streams as usize],
            seen: vec![false; w.count as usize],
            scratch: vec![0; w.size as usize],
            arrivals: Vec::with_capacity(w.count as usize),
        }
    }

    /// All messages arrived.
    pub fn done(&self) -> bool {
        self.arrivals.len() >= self.w.count as usize
    }

    /// All messages of logical stream `s` arrived.
    pub fn stream_done(&self, s: u16) -> bool {
        let (n, streams) = (self.w.count, self.w.streams as u32);
        let due = n / streams + u32::from((s as u32) < n % streams);
        self.got.get(s as usize).is_some_and(|got| *got >= due)
    }

    /// Checks `msg`, which arrived at `now_ns` on transport stream
    /// `carried_on` (the TCP rows: the stream its frame named), and
    /// records its latency. `expect_on` maps a logical stream to the
    /// transport stream it must arrive on.
    pub fn take(&mut self, msg: &[u8], now_ns: u64, carried_on: u16, expect_on: impl Fn(u16) -> u16) -> Result<()> {
        ensure!(msg.len() == self.w.size as usize, "a message of {} bytes, expected {}", msg.len(), self.w.size);
        let stream = u16::from_be_bytes([msg[0], msg[1]]);
        let seq = u32::from_be_bytes([msg[2], msg[3], msg[4], msg[5]]);
        let due = u64::from_be_bytes(msg[6..14].try_into().expect("8 bytes"));
        let Some(got) = self.got.get_mut(stream as usize) else {
            bail!("a message of stream {stream}, which the run does not have")
        };
        ensure!(carried_on == expect_on(stream), "stream {stream}'s message {seq} arrived on stream {carried_on}");
        ensure!(
            !self.ordered || seq == *got,
            "stream {stream}: message {seq} arrived where {} was due (lost, repeated or reordered)",
            *got
        );
        let k = seq as u64 * self.w.streams as u64 + stream as u64;
        let Some(seen) = self.seen.get_mut(k as usize) else {
            bail!("stream {stream}: message {seq} is beyond the run's {} messages", self.w.count)
        };
        ensure!(!*seen, "stream {stream}: message {seq} arrived twice");
        self.w.fill(k as u32, due, &mut self.scratch);
        ensure!(msg == self.scratch.as_slice(), "stream {stream}: message {seq}'s bytes differ from what was sent");
        *seen = true;
        *got += 1;
        let latency_ns = now_ns.saturating_sub(due);
        self.arrivals.push(Arrival { stream, seq, latency_ns });
        Ok(())
    }
}

/// Writes the TCP rows' frame for `msg` on `stream` into `out`.
pub fn frame(stream: u16, msg: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(msg);
}

/// A frame header's (stream, length).
pub fn parse_frame(h: [u8; FRAME]) -> (u16, usize) {
    (u16::from_be_bytes([h[0], h[1]]), u16::from_be_bytes([h[2], h[3]]) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w() -> Workload {
        Workload { count: 12, streams: 4, interval_ms: 20.0, size: 1024, seed: 7 }
    }

    fn msg(w: &Workload, k: u32, due: u64) -> Vec<u8> {
        let mut m = vec![0; w.size as usize];
        w.fill(k, due, &mut m);
        m
    }

    #[test]
    fn schedule_interleaves_the_streams() {
        let w = w();
        assert_eq!(w.period_ns(), 5_000_000);
        assert_eq!(w.slot(0), (0, 0));
        assert_eq!(w.slot(5), (1, 1));
        assert!((w.span_secs() - 0.055).abs() < 1e-9);
    }

    #[test]
    fn tracker_accepts_each_stream_in_order_and_measures_latency() {
        let w = w();
        let mut t = Tracker::new(w, true);
        // Stream 1 overtakes stream 0: allowed, they are independent.
        t.take(&msg(&w, 1, 100), 150, 1, |s| s).unwrap();
        t.take(&msg(&w, 0, 90), 400, 0, |s| s).unwrap();
        assert_eq!(t.arrivals[1], Arrival { stream: 0, seq: 0, latency_ns: 310 });
        assert!(!t.done());
        assert!(!t.stream_done(0));
        for k in 2..12 {
            t.take(&msg(&w, k, 0), 1, w.slot(k).0, |s| s).unwrap();
        }
        assert!(t.done() && t.stream_done(3));
    }

    #[test]
    fn tracker_rejects_gaps_repeats_corruption_and_wrong_streams() {
        let w = w();
        let mut t = Tracker::new(w, true);
        assert!(t.take(&msg(&w, 4, 0), 1, 0, |s| s).is_err(), "a gap on stream 0");
        t.take(&msg(&w, 0, 0), 1, 0, |s| s).unwrap();
        assert!(t.take(&msg(&w, 0, 0), 1, 0, |s| s).is_err(), "a repeat");
        let mut bad = msg(&w, 4, 0);
        bad[500] ^= 1;
        assert!(t.take(&bad, 1, 0, |s| s).is_err(), "corrupt filler");
        assert!(t.take(&msg(&w, 1, 0), 1, 0, |s| s).is_err(), "stream 1 on transport stream 0");
        t.take(&msg(&w, 1, 0), 1, 0, |_| 0).unwrap();
        assert!(t.take(&msg(&w, 4, 0)[..100], 1, 0, |s| s).is_err(), "truncated");
        let other = Workload { seed: 8, ..w };
        assert!(t.take(&msg(&other, 4, 0), 1, 0, |s| s).is_err(), "another run's bytes");
    }

    #[test]
    fn unordered_tracker_accepts_gaps_but_not_repeats() {
        let w = w();
        let mut t = Tracker::new(w, false);
        t.take(&msg(&w, 8, 0), 1, 0, |s| s).unwrap();
        t.take(&msg(&w, 0, 0), 1, 0, |s| s).unwrap();
        assert!(t.take(&msg(&w, 8, 0), 1, 0, |s| s).is_err(), "a repeat");
        assert!(!t.stream_done(0));
        t.take(&msg(&w, 4, 0), 1, 0, |s| s).unwrap();
        assert!(t.stream_done(0));
    }

    #[test]
    fn frames_round_trip() {
        let mut out = Vec::new();
        frame(3, b"hello", &mut out);
        assert_eq!(out, [0, 3, 0, 5, b'h', b'e', b'l', b'l', b'o']);
        assert_eq!(parse_frame(out[..FRAME].try_into().unwrap()), (3, 5));
    }
}
