//! What the `rate` scenario moves and how the receiver checks it: the
//! bytes of each message, the end marker that closes a stream's run, the
//! receiver's [`Checker`] (sequence and content of every message, its
//! one-way latency) and the TCP row's length prefix.
//!
//! A message of `size` bytes is
//!
//! | bytes | field |
//! |---|---|
//! | 0..2 | stream (big endian) |
//! | 2..10 | sequence number within that stream |
//! | 10..18 | when it was due, CLOCK_MONOTONIC nanoseconds |
//! | 18.. | filler: the 8-byte word `word(seed, stream, sequence)` repeated |
//!
//! The filler is one word repeated so that checking a 16 KiB message
//! costs a comparison at memory speed, not a generator per byte: every
//! row pays the same for it and none is slowed more than another. A
//! message whose sequence is [`END`] closes its stream's run; its stamp
//! field then holds how many messages the stream carried.
//!
//! Sender and receiver are processes on one host, and CLOCK_MONOTONIC is
//! one clock for the host, so the reading at arrival minus the stamp is
//! the message's one-way latency. The stamp is the time the schedule says
//! the message is due (not when the send call ran): a sender held up by
//! its transport makes its messages later, as an application sees it.

use anyhow::{bail, ensure, Result};

/// Bytes of the message header (stream, sequence, stamp).
pub const HEADER: usize = 18;
/// The sequence number of a stream's end marker.
pub const END: u64 = u64::MAX;
/// The most messages a run may carry (the unordered check keeps one bit
/// per message).
pub const MAX_MESSAGES: u64 = 1 << 31;

pub use crate::wan::sys::monotonic_ns as now_ns;

/// The filler word of message `seq` of `stream` in a run of `seed`.
pub fn word(seed: u64, stream: u16, seq: u64) -> u64 {
    // SplitMix64's finaliser over the three inputs.
    let mut z = seed ^ ((stream as u64) << 48) ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Writes message `seq` of `stream`, due at `due_ns`, into `out` (its
/// whole length is the message).
pub fn fill(seed: u64, stream: u16, seq: u64, due_ns: u64, out: &mut [u8]) {
    out[0..2].copy_from_slice(&stream.to_be_bytes());
    out[2..10].copy_from_slice(&seq.to_be_bytes());
    out[10..18].copy_from_slice(&due_ns.to_be_bytes());
    let w = word(seed, stream, seq).to_le_bytes();
    for chunk in out[HEADER..].chunks_mut(8) {
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Writes `stream`'s end marker: `sent` messages went before it.
pub fn fill_end(seed: u64, stream: u16, sent: u64, out: &mut [u8]) {
    fill(seed, stream, END, sent, out);
}

/// The streams of a run and the one message `k` (of all streams
/// together) goes on: stream k mod streams, sequence k / streams.
pub fn slot(k: u64, streams: u16) -> (u16, u64) {
    ((k % streams as u64) as u16, k / streams as u64)
}

/// What the receiver knows of one stream.
#[derive(Debug, Clone, Default)]
struct StreamState {
    /// Messages of this stream arrived.
    got: u64,
    /// The next sequence number due (ordered streams).
    next: u64,
    /// How many messages the sender said the stream carried (its end marker).
    total: Option<u64>,
    /// Unordered streams: one bit per sequence number seen.
    seen: Vec<u64>,
}

/// The receiver's check of every message: its length, its stream, its
/// sequence (in order on ordered streams; once each otherwise) and every
/// byte of its filler. Optionally keeps each message's one-way latency.
#[derive(Debug)]
pub struct Checker {
    seed: u64,
    size: usize,
    ordered: bool,
    streams: Vec<StreamState>,
    /// Messages delivered, end markers not counted.
    pub delivered: u64,
    /// One-way latency of each message, ns (saturating at u32::MAX, 4.3 s),
    /// when asked for.
    pub latencies_ns: Option<Vec<u32>>,
}

impl Checker {
    pub fn new(seed: u64, size: usize, streams: u16, ordered: bool, keep_latencies: bool) -> Checker {
        Checker {
            seed,
            size,
            ordered,
            streams: vec![StreamState::default(); streams as usize],
            delivered: 0,
            latencies_ns: keep_latencies.then(Vec::new),
        }
    }

    /// Every stream's end marker arrived, and every message it announced.
    pub fn done(&self) -> bool {
        self.streams.iter().all(|s| s.total == Some(s.got))
    }

    /// Stream `s`'s end marker arrived.
    pub fn ended(&self, s: u16) -> bool {
        self.streams.get(s as usize).is_some_and(|st| st.total.is_some())
    }

    /// How many messages the end markers announced (those that came).
    pub fn announced(&self) -> u64 {
        self.streams.iter().filter_map(|s| s.total).sum()
    }

    /// Checks `msg`, which arrived at `now_ns` on stream `on`; returns
    /// whether it was a message (not an end marker).
    pub fn take(&mut self, msg: &[u8], on: u16, now_ns: u64) -> Result<bool> {
        ensure!(msg.len() == self.size, "a message of {} bytes, expected {}", msg.len(), self.size);
        let stream = u16::from_be_bytes([msg[0], msg[1]]);
        let seq = u64::from_be_bytes(msg[2..10].try_into().expect("8 bytes"));
        let stamp = u64::from_be_bytes(msg[10..18].try_into().expect("8 bytes"));
        ensure!(stream == on, "stream {stream}'s message {seq} arrived on stream {on}");
        let Some(st) = self.streams.get_mut(stream as usize) else {
            bail!("a message of stream {stream}, which the run does not have")
        };
        let w = word(self.seed, stream, seq).to_le_bytes();
        let filler_ok = msg[HEADER..].chunks(8).all(|c| c == &w[..c.len()]);
        ensure!(filler_ok, "stream {stream}: message {seq}'s bytes differ from what was sent");
        if seq == END {
            ensure!(st.total.is_none(), "stream {stream}: a second end marker");
            ensure!(stamp <= MAX_MESSAGES, "stream {stream}: an end marker announcing {stamp} messages");
            ensure!(
                !self.ordered || stamp == st.got,
                "stream {stream}: the end marker says {stamp} messages, {} arrived before it",
                st.got
            );
            ensure!(st.got <= stamp, "stream {stream}: {} messages arrived, the end marker says {stamp}", st.got);
            st.total = Some(stamp);
            return Ok(false);
        }
        ensure!(seq < MAX_MESSAGES, "stream {stream}: sequence number {seq} is beyond any run");
        if let Some(total) = st.total {
            ensure!(seq < total, "stream {stream}: message {seq} after an end marker announcing {total}");
        }
        if self.ordered {
            ensure!(
                seq == st.next,
                "stream {stream}: message {seq} arrived where {} was due (lost, repeated or reordered)",
                st.next
            );
            st.next += 1;
        } else {
            let (i, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
            if st.seen.len() <= i {
                st.seen.resize(i + 1, 0);
            }
            ensure!(st.seen[i] & bit == 0, "stream {stream}: message {seq} arrived twice");
            st.seen[i] |= bit;
        }
        st.got += 1;
        self.delivered += 1;
        if let Some(l) = &mut self.latencies_ns {
            l.push(now_ns.saturating_sub(stamp).min(u32::MAX as u64) as u32);
        }
        Ok(true)
    }
}

/// Bytes of the TCP row's length prefix.
pub const PREFIX: usize = 4;

/// Writes `msg` with its length prefix (u32, big endian) into `out`.
pub fn frame(msg: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    out.extend_from_slice(msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(stream: u16, seq: u64, due: u64, size: usize) -> Vec<u8> {
        let mut m = vec![0; size];
        fill(7, stream, seq, due, &mut m);
        m
    }

    fn end(stream: u16, sent: u64, size: usize) -> Vec<u8> {
        let mut m = vec![0; size];
        fill_end(7, stream, sent, &mut m);
        m
    }

    #[test]
    fn messages_spread_over_the_streams_in_turn() {
        assert_eq!(slot(0, 8), (0, 0));
        assert_eq!(slot(9, 8), (1, 1));
        assert_eq!(slot(5, 1), (0, 5));
    }

    #[test]
    fn ordered_checker_takes_each_stream_in_order_and_measures_latency() {
        let mut c = Checker::new(7, 32, 2, true, true);
        assert!(c.take(&msg(1, 0, 100, 32), 1, 150).unwrap());
        assert!(c.take(&msg(0, 0, 90, 32), 0, 400).unwrap());
        assert!(c.take(&msg(0, 1, 90, 32), 0, 400).unwrap());
        assert!(!c.done());
        assert!(!c.take(&end(0, 2, 32), 0, 500).unwrap());
        assert!(!c.done());
        assert!(!c.take(&end(1, 1, 32), 1, 500).unwrap());
        assert!(c.done() && c.ended(1) && !c.ended(2));
        assert_eq!((c.delivered, c.announced()), (3, 3));
        assert_eq!(c.latencies_ns.unwrap(), [50, 310, 310]);
    }

    #[test]
    fn checker_rejects_gaps_repeats_corruption_and_wrong_streams() {
        let mut c = Checker::new(7, 288, 2, true, false);
        assert!(c.take(&msg(0, 1, 0, 288), 0, 1).is_err(), "a gap");
        c.take(&msg(0, 0, 0, 288), 0, 1).unwrap();
        assert!(c.take(&msg(0, 0, 0, 288), 0, 1).is_err(), "a repeat");
        let mut bad = msg(0, 1, 0, 288);
        bad[200] ^= 1;
        assert!(c.take(&bad, 0, 1).is_err(), "corrupt filler");
        assert!(c.take(&msg(1, 0, 0, 288), 0, 1).is_err(), "stream 1 on stream 0");
        assert!(c.take(&msg(2, 0, 0, 288), 2, 1).is_err(), "a stream the run lacks");
        assert!(c.take(&msg(0, 1, 0, 288)[..100], 0, 1).is_err(), "truncated");
        let mut other = vec![0; 288];
        fill(8, 0, 1, 0, &mut other);
        assert!(c.take(&other, 0, 1).is_err(), "another run's bytes");
        assert!(c.take(&end(0, 5, 288), 0, 1).is_err(), "an end marker announcing more than came");
    }

    #[test]
    fn unordered_checker_accepts_any_order_but_not_repeats_or_missing_messages() {
        let mut c = Checker::new(7, 1024, 1, false, false);
        c.take(&msg(0, 2, 0, 1024), 0, 1).unwrap();
        c.take(&end(0, 3, 1024), 0, 1).unwrap();
        c.take(&msg(0, 0, 0, 1024), 0, 1).unwrap();
        assert!(c.take(&msg(0, 2, 0, 1024), 0, 1).is_err(), "a repeat");
        assert!(c.take(&msg(0, 3, 0, 1024), 0, 1).is_err(), "beyond the announced count");
        assert!(!c.done(), "message 1 is missing");
        c.take(&msg(0, 1, 0, 1024), 0, 1).unwrap();
        assert!(c.done());
    }

    #[test]
    fn a_short_filler_is_checked_to_its_last_byte() {
        // 32 bytes: 14 of filler, one whole word and 6 bytes of the next.
        let mut c = Checker::new(7, 32, 1, true, false);
        let mut m = msg(0, 0, 0, 32);
        m[31] ^= 0x80;
        assert!(c.take(&m, 0, 1).is_err());
    }

    #[test]
    fn frames_carry_the_length_first() {
        let mut out = Vec::new();
        frame(b"hello", &mut out);
        assert_eq!(out, [0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o']);
    }
}
