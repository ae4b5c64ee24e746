//! The flush delay (spec §5.7): small messages written one at a time while
//! packets are in flight wait up to `flush_delay` to share a datagram, and
//! every message still arrives, in order and intact, under loss and every
//! congestion controller.

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::*;
use manyfold_proto::{CongestionAlgorithm, ConnHandle, MessageOptions, StreamId, StreamItem};
use manyfold_sim::{LinkConfig, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MESSAGES: u32 = 2000;
const STREAMS: u32 = 3;
/// One message a millisecond (about 150 KB/s): within what every
/// controller carries at this loss, so the window is mostly open and,
/// without a delay, most messages leave alone.
const INTERVAL: Duration = Duration::from_millis(1);
const FLUSH: Duration = Duration::from_millis(4);
const ONE_WAY: Duration = Duration::from_millis(20);

/// Message `k` (stream `k % STREAMS`, index `k / STREAMS` on it): stream,
/// index, then filler; 8–300 bytes.
fn message(rng: &mut ChaCha8Rng, k: u32) -> Vec<u8> {
    let len = rng.gen_range(8..=300);
    let mut m: Vec<u8> = (0..len).map(|i: u32| (i ^ k).wrapping_mul(31) as u8).collect();
    m[..2].copy_from_slice(&((k % STREAMS) as u16).to_be_bytes());
    m[2..6].copy_from_slice(&(k / STREAMS).to_be_bytes());
    m
}

/// The receiver's side of a run.
struct Receiver {
    s: ConnHandle,
    /// Next index expected per stream.
    expected: Vec<u32>,
    got: u32,
    max_latency: Duration,
}

impl Receiver {
    /// Reads every message the server has and checks stream, order and bytes.
    fn drain(&mut self, w: &mut World, sent: &[(Vec<u8>, Instant)], what: &str) {
        let now = w.now();
        while let Some((stream, item)) =
            w.endpoint_mut(server()).conn_mut(self.s).recv_message().unwrap_or_else(|e| panic!("recv: {e} ({what})"))
        {
            let StreamItem::Message(m) = item else { panic!("unexpected {item:?} ({what})") };
            assert!(m.len() >= 6, "a runt message ({what})");
            let sid = u32::from(u16::from_be_bytes([m[0], m[1]]));
            let index = u32::from_be_bytes([m[2], m[3], m[4], m[5]]);
            assert_eq!(StreamId::new(sid as u16), stream, "message of stream {sid} read on {stream:?} ({what})");
            assert_eq!(index, self.expected[sid as usize], "order on stream {sid} ({what})");
            self.expected[sid as usize] += 1;
            let (bytes, at) = &sent[(index * STREAMS + sid) as usize];
            assert_eq!(&m[..], &bytes[..], "bytes of message {index} on stream {sid} ({what})");
            self.got += 1;
            self.max_latency = self.max_latency.max(now - *at);
        }
    }
}

/// Client datagrams that carried stream data, and the longest a message
/// took, for `MESSAGES` over a 20 ms path with `loss` each way.
fn run(seed: u64, cc: CongestionAlgorithm, loss: f64, flush_delay: Duration) -> (u64, Duration) {
    let what = format!("{cc:?}, flush delay {flush_delay:?}, seed {seed}");
    let mut cfg = config(cc);
    cfg.connection.flush_delay = flush_delay;
    let mut w = pair(seed, LinkConfig::with_delay(ONE_WAY).loss(loss), cfg);
    let data_datagrams = Rc::new(Cell::new(0u64));
    let count = Rc::clone(&data_datagrams);
    w.set_drop_rule(move |from, _, d| {
        if from == client() && !data_chunks(d).is_empty() {
            count.set(count.get() + 1);
        }
        false
    });
    let (c, s) = establish(&mut w);
    let start = w.now();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut r = Receiver { s, expected: vec![0; STREAMS as usize], got: 0, max_latency: Duration::ZERO };
    let mut sent = Vec::with_capacity(MESSAGES as usize);
    for k in 0..MESSAGES {
        let due = start + INTERVAL * k;
        w.run_until(|w| w.now() >= due, Duration::from_secs(60));
        r.drain(&mut w, &sent, &what);
        let m = message(&mut rng, k);
        let stream = StreamId::new((k % STREAMS) as u16);
        w.act(client(), |ep, now| ep.conn_mut(c).send_message(now, stream, &m, MessageOptions::default()))
            .unwrap_or_else(|e| panic!("send_message {k}: {e} ({what})"));
        sent.push((m, w.now()));
    }
    let ok = w.run_until(
        |w| {
            r.drain(w, &sent, &what);
            r.got == MESSAGES
        },
        Duration::from_secs(60),
    );
    assert!(ok, "{} of {MESSAGES} messages arrived ({what})", r.got);
    (data_datagrams.get(), r.max_latency)
}

#[test]
fn with_a_flush_delay_every_message_arrives_under_five_percent_loss() {
    let seed = 2101;
    for &cc in CONTROLLERS {
        let (plain, plain_latency) = run(seed, cc, 0.05, Duration::ZERO);
        let (held, held_latency) = run(seed, cc, 0.05, FLUSH);
        eprintln!(
            "{cc:?}, 5% loss: {MESSAGES} messages in {plain} data datagrams without a flush delay (longest \
             {plain_latency:?}), {held} with {FLUSH:?} (longest {held_latency:?})"
        );
        // Under loss the window and the pacer already hold messages back
        // at times, and they coalesce then; the delay adds to that.
        assert!(held <= plain, "{cc:?}: {held} datagrams with the delay, {plain} without (seed {seed})");
    }
}

#[test]
fn a_flush_delay_packs_messages_written_one_at_a_time_and_delays_none_beyond_it() {
    let seed = 2102;
    for &cc in CONTROLLERS {
        let (plain, plain_latency) = run(seed, cc, 0.0, Duration::ZERO);
        let (held, held_latency) = run(seed, cc, 0.0, FLUSH);
        eprintln!(
            "{cc:?}, no loss: {MESSAGES} messages in {plain} data datagrams without a flush delay (longest \
             {plain_latency:?}), {held} with {FLUSH:?} (longest {held_latency:?})"
        );
        // 4 messages are written per flush delay: most datagrams carry several.
        assert!(held * 2 < plain, "{cc:?}: {held} datagrams with the delay, {plain} without (seed {seed})");
        assert!(
            held_latency <= plain_latency + FLUSH,
            "{cc:?}: a message took {held_latency:?} with the delay, {plain_latency:?} at most without (seed {seed})"
        );
    }
}
