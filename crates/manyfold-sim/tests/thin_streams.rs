//! Latency under loss for thin (application-limited) streams, at the
//! conditions of KCP's published test as the lab's `messages` scenario
//! runs them (docs/bench/RESULTS.md §9; issue 21 item 4): 1 KB messages
//! every 20 ms on each of 4 streams (one every 5 ms overall), 30 ms one
//! way plus 0–32.5 ms of jitter that keeps order, 10% random loss each
//! way. Each message's latency is its arrival less its due time; the
//! figures are p50 and p99 in units of the configured mean RTT (92.5 ms),
//! and the bytes the sender put on the wire against what the messages
//! carry plus one resend of every data transmission the link dropped
//! (spec §5.4: recovery of a thin flow, §5.3: acks on a gap).

mod common;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use common::*;
use manyfold_proto::{CongestionAlgorithm, MessageOptions, StreamId, StreamItem};
use manyfold_sim::{LinkConfig, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const STREAMS: u16 = 4;
const SIZE: usize = 1024;
const INTERVAL: Duration = Duration::from_millis(20);
/// Configured mean RTT: 2 × (30 + 32.5 / 2) ms.
const RTT_MS: f64 = 92.5;
/// Start-up: the messages due in the first 2 s are left out of the
/// settled percentiles (a lost cookie echo costs an RTO, spec §6.2, and
/// the window grows from 10 packets).
const SETTLE: Duration = Duration::from_secs(2);
/// IPv4 + UDP headers, counted per datagram as the wire carries them.
const IP_UDP: u64 = 28;
/// Largest UDP payload over IPv4 on a 1,500-byte Ethernet interface.
const ETHERNET_PAYLOAD: usize = 1500 - IP_UDP as usize;

/// What one run measured.
#[derive(Debug)]
struct Run {
    seed: u64,
    delivered: usize,
    /// Latencies in ms, sorted.
    latencies: Vec<f64>,
    /// Latencies of the messages due after the first `SETTLE`, sorted.
    settled: Vec<f64>,
    /// Sender's datagrams (IP + UDP + payload) over message bytes plus one
    /// resend of each data transmission the link dropped.
    bytes_ratio: f64,
    dropped_data: u64,
    /// Sender → receiver datagrams, and those that carried message bytes.
    datagrams: u64,
    data_datagrams: u64,
    retransmissions: u64,
    rto_expiries: u64,
}

impl Run {
    fn pct(&self, p: f64) -> f64 {
        pct(&self.latencies, p)
    }

    fn report(&self) -> String {
        let edges = [100.0, 170.0, 250.0, 350.0, f64::MAX];
        let mut hist = [0usize; 5];
        for &l in &self.latencies {
            hist[edges.iter().position(|&e| l < e).unwrap_or(4)] += 1;
        }
        format!(
            "{} | settled p99 {:.2} RTT | ms <100 {} <170 {} <250 {} <350 {} more {}",
            self.summary(),
            pct(&self.settled, 0.99) / RTT_MS,
            hist[0],
            hist[1],
            hist[2],
            hist[3],
            hist[4]
        )
    }

    fn summary(&self) -> String {
        format!(
            "seed {}: {} delivered, p50 {:.1} ms ({:.2} RTT), p99 {:.1} ms ({:.2} RTT), max {:.1} ms, bytes ratio {:.3}, \
             datagrams {} ({} with data), data dropped {}, retransmissions {}, RTOs {}",
            self.seed,
            self.delivered,
            self.pct(0.5),
            self.pct(0.5) / RTT_MS,
            self.pct(0.99),
            self.pct(0.99) / RTT_MS,
            self.latencies.last().copied().unwrap_or(0.0),
            self.bytes_ratio,
            self.datagrams,
            self.data_datagrams,
            self.dropped_data,
            self.retransmissions,
            self.rto_expiries,
        )
    }
}

/// Percentile `p` of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// The link's loss comes from a drop rule with its own seeded generator,
/// so the test knows which data transmissions were dropped.
#[derive(Debug, Default)]
struct Wire {
    /// Sender → receiver: datagrams and bytes offered (IP + UDP included).
    datagrams: u64,
    data_datagrams: u64,
    bytes: u64,
    /// Message bytes in data transmissions the rule dropped.
    dropped_data_bytes: u64,
    dropped_data: u64,
}

/// The message payload: stream, index, then filler.
fn message(stream: u16, index: u32) -> Vec<u8> {
    let mut m = vec![(index % 251) as u8; SIZE];
    m[..2].copy_from_slice(&stream.to_be_bytes());
    m[2..6].copy_from_slice(&index.to_be_bytes());
    m
}

fn run(seed: u64, per_stream: u32, unordered: bool) -> Run {
    let link = LinkConfig::with_delay(Duration::from_millis(30))
        .jitter(Duration::from_micros(32_500))
        .rate(10_000_000, 156_250);
    let mut w = pair(seed, link, config(CongestionAlgorithm::Bbr));
    // Both hosts sit on 1,500-byte Ethernet, as the lab's namespaces do:
    // their kernels refuse larger datagrams (path MTU probes, spec §3.7).
    w.set_interface_mtu(client(), ETHERNET_PAYLOAD);
    w.set_interface_mtu(server(), ETHERNET_PAYLOAD);
    let wire = Rc::new(RefCell::new(Wire::default()));
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7417_5eed);
    let tally = Rc::clone(&wire);
    w.set_drop_rule(move |from, _, d| {
        let drop = rng.gen_bool(0.10);
        if from == client() {
            let mut t = tally.borrow_mut();
            t.datagrams += 1;
            t.bytes += d.len() as u64 + IP_UDP;
            let carried: u64 = data_chunks(d).iter().map(|c| c.data.len() as u64).sum();
            t.data_datagrams += u64::from(carried > 0);
            if drop && carried > 0 {
                t.dropped_data += 1;
                t.dropped_data_bytes += carried;
            }
        }
        drop
    });
    let (c, s) = establish(&mut w);
    let opts = MessageOptions { unordered, lifetime: None, max_retransmissions: None };
    let start = w.now();
    let total = per_stream * u32::from(STREAMS);
    let step = INTERVAL / u32::from(STREAMS);
    let mut due_at: HashMap<(u16, u32), Duration> = HashMap::new();
    let mut latencies = Vec::with_capacity(total as usize);
    let mut next_seq = [0u32; STREAMS as usize];
    let mut expected = [0u32; STREAMS as usize];
    for k in 0..total {
        let due = step * k;
        let stream = (k % u32::from(STREAMS)) as u16;
        w.run_until(
            |w| {
                drain(w, s, start, &due_at, &mut latencies, &mut expected, unordered);
                w.now() >= start + due
            },
            Duration::from_secs(60),
        );
        let index = next_seq[usize::from(stream)];
        next_seq[usize::from(stream)] += 1;
        let data = message(stream, index);
        let r = w.act(client(), |ep, now| ep.conn_mut(c).send_message(now, StreamId::new(stream), &data, opts));
        r.unwrap_or_else(|e| panic!("send_message {stream}/{index}: {e} (seed {seed})"));
        due_at.insert((stream, index), due);
    }
    let ok = w.run_until(
        |w| {
            drain(w, s, start, &due_at, &mut latencies, &mut expected, unordered);
            latencies.len() == total as usize
        },
        Duration::from_secs(30),
    );
    assert!(ok, "only {} of {total} messages arrived (seed {seed})", latencies.len());
    let mut settled: Vec<f64> = latencies.iter().filter(|l| l.1 >= SETTLE).map(|l| l.0).collect();
    settled.sort_by(f64::total_cmp);
    let mut latencies: Vec<f64> = latencies.iter().map(|l| l.0).collect();
    latencies.sort_by(f64::total_cmp);
    let st = w.endpoint(client()).conn(c).stats().unwrap_or_else(|| panic!("client connection gone (seed {seed})"));
    let t = wire.borrow();
    let needed = (u64::from(total) * SIZE as u64 + t.dropped_data_bytes) as f64;
    Run {
        seed,
        delivered: latencies.len(),
        latencies,
        settled,
        bytes_ratio: t.bytes as f64 / needed,
        dropped_data: t.dropped_data,
        datagrams: t.datagrams,
        data_datagrams: t.data_datagrams,
        retransmissions: st.retransmissions,
        rto_expiries: st.rto_expiries,
    }
}

/// Reads every message the server has; checks stream, order and bytes.
fn drain(
    w: &mut World,
    s: manyfold_proto::ConnHandle,
    start: std::time::Instant,
    due_at: &HashMap<(u16, u32), Duration>,
    latencies: &mut Vec<(f64, Duration)>,
    expected: &mut [u32],
    unordered: bool,
) {
    let seed = w.seed();
    let now = w.now();
    loop {
        let got = w.endpoint_mut(server()).conn_mut(s).recv_message();
        let Some((stream, item)) = got.unwrap_or_else(|e| panic!("recv_message: {e} (seed {seed})")) else {
            return;
        };
        let StreamItem::Message(m) = item else { panic!("unexpected {item:?} on {stream:?} (seed {seed})") };
        let sid = u16::from_be_bytes([m[0], m[1]]);
        let index = u32::from_be_bytes([m[2], m[3], m[4], m[5]]);
        assert_eq!(StreamId::new(sid), stream, "message of stream {sid} read on {stream:?} (seed {seed})");
        assert_eq!(&m[..], &message(sid, index)[..], "bytes of {sid}/{index} (seed {seed})");
        if !unordered {
            assert_eq!(index, expected[usize::from(sid)], "order on stream {sid} (seed {seed})");
            expected[usize::from(sid)] += 1;
        }
        let due = due_at[&(sid, index)];
        latencies.push(((now - start).saturating_sub(due).as_secs_f64() * 1e3, due));
    }
}

/// Runs `SEEDS`, prints each, and returns the median over the runs of
/// the settled p99 (in RTTs), the largest bytes ratio, and the reports.
fn sweep(per_stream: u32, unordered: bool) -> (f64, f64, Vec<String>) {
    let runs: Vec<Run> = SEEDS.iter().map(|&s| run(s, per_stream, unordered)).collect();
    summarise(&runs)
}

fn summarise(runs: &[Run]) -> (f64, f64, Vec<String>) {
    let reports: Vec<String> = runs.iter().map(Run::report).collect();
    for r in &reports {
        println!("{r}");
    }
    let mut p99: Vec<f64> = runs.iter().map(|r| pct(&r.settled, 0.99) / RTT_MS).collect();
    p99.sort_by(f64::total_cmp);
    let ratio = runs.iter().map(|r| r.bytes_ratio).fold(0.0, f64::max);
    let median = p99[p99.len() / 2];
    println!(
        "median settled p99 {median:.2} RTT (whole runs, start-up included: {:.2} RTT), largest bytes ratio {ratio:.3}",
        whole_p99(runs)
    );
    (median, ratio, reports)
}

/// Median over the runs of the p99 of every message, start-up included
/// (what the lab's `messages` scenario reports), in RTTs.
fn whole_p99(runs: &[Run]) -> f64 {
    let mut whole: Vec<f64> = runs.iter().map(|r| r.pct(0.99) / RTT_MS).collect();
    whole.sort_by(f64::total_cmp);
    whole[whole.len() / 2]
}

const SEEDS: [u64; 5] = [1, 2, 3, 4, 5];
/// 9 s of traffic per run (1,800 messages): these two tests are about
/// loss recovery; BBR's minimum-RTT refresh (10 s after the minimum last
/// fell, spec §9.5) is the last test's.
const PER_STREAM: u32 = 450;
/// 25 s per run (5,000 messages): two minimum-RTT refreshes.
const LONG_PER_STREAM: u32 = 1250;
/// Median settled p99 of the long runs, in RTTs. Before BBR v2's ProbeRTT
/// (spec §9.5) the window fell to 4 packets at the first refresh, the
/// bandwidth estimate fell with it, and the backlog lasted seconds: a
/// median of 40 RTT over seeds 1–12 (10,000 ms at worst); with it, 2.4;
/// with refused path MTU probes lost at once (spec §3.7), 2.06.
const LONG_P99_RTTS: f64 = 2.6;
/// The same over every message, start-up included: 3.50 RTT while a
/// 64 KiB probe the interface refused held the window for a round trip
/// (three times) in the first seconds, 2.37 since.
const LONG_WHOLE_P99_RTTS: f64 = 3.0;
/// Settled messages later than this in any long run: at most 1%.
const BACKLOG_MS: f64 = 1000.0;

/// Median over the seeds of the settled p99, in RTTs: a message lost once
/// arrives about three one-way delays after it was due (~1.9 RTT on this
/// jittery path), and with its retransmission sent twice (spec §5.5.1)
/// hardly any waits for a second round trip (2.9–3.3 RTT without).
/// (Which datagrams the seeded rule drops shifts with every datagram the
/// sender adds or removes, so a change elsewhere moves these medians by
/// ±0.2 RTT: 2.02 unordered before BBR v2's ProbeRTT, spec §9.5, 2.25 after.)
const ORDERED_P99_RTTS: f64 = 2.3;
const UNORDERED_P99_RTTS: f64 = 2.3;
/// Sender's bytes (IP and UDP included) over message bytes plus one
/// resend per dropped data transmission: 1.13–1.16 without the copies (headers
/// and the start-up), at most 1.25 with them in these 9 s runs; 1.15
/// since refused path MTU probes are not repeated (spec §3.7).
const BYTES_RATIO: f64 = 1.20;

#[test]
fn thin_ordered_streams_recover_a_loss_in_about_one_rtt_and_seldom_wait_a_second() {
    let (p99, ratio, runs) = sweep(PER_STREAM, false);
    assert!(p99 <= ORDERED_P99_RTTS, "median settled p99 {p99:.2} RTT above {ORDERED_P99_RTTS} (runs: {runs:#?})");
    assert!(ratio <= BYTES_RATIO, "bytes ratio {ratio:.3} above {BYTES_RATIO} (runs: {runs:#?})");
}

#[test]
fn thin_unordered_streams_recover_a_loss_in_about_one_rtt_and_seldom_wait_a_second() {
    let (p99, ratio, runs) = sweep(PER_STREAM, true);
    assert!(p99 <= UNORDERED_P99_RTTS, "median settled p99 {p99:.2} RTT above {UNORDERED_P99_RTTS} (runs: {runs:#?})");
    assert!(ratio <= BYTES_RATIO, "bytes ratio {ratio:.3} above {BYTES_RATIO} (runs: {runs:#?})");
}

#[test]
fn thin_streams_keep_their_latency_through_the_min_rtt_refresh() {
    let runs: Vec<Run> = SEEDS.iter().map(|&s| run(s, LONG_PER_STREAM, false)).collect();
    let (p99, _, reports) = summarise(&runs);
    assert!(p99 <= LONG_P99_RTTS, "median settled p99 {p99:.2} RTT above {LONG_P99_RTTS} (runs: {reports:#?})");
    let whole = whole_p99(&runs);
    assert!(
        whole <= LONG_WHOLE_P99_RTTS,
        "median p99 with the start-up {whole:.2} RTT above {LONG_WHOLE_P99_RTTS} (runs: {reports:#?})"
    );
    for r in &runs {
        let late = r.settled.iter().filter(|&&l| l > BACKLOG_MS).count();
        assert!(
            late * 100 <= r.settled.len(),
            "seed {}: {late} of {} settled messages over {BACKLOG_MS} ms: a backlog (runs: {reports:#?})",
            r.seed,
            r.settled.len()
        );
    }
}
