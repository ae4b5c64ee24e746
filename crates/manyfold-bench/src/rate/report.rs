//! The `rate` figures: one result per run (parsed from the two processes'
//! words and `wait4` usage, or from Aeron's samples), then the medians of
//! the repetitions with their spread, ratios taken pair by pair within a
//! repetition (BENCH.md), the targets judged, a Markdown report
//! naming command, date, machine and load, JSON and two charts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::runner::{Pair, Plan};
use crate::child::{Finished, Usage};
use crate::report::{header, json_fixed, json_str, json_usage, load, Figures};
use crate::stats::{self, med_range, median};
use crate::wan::probe::field;

/// One run at the highest rate.
#[derive(Debug, Clone)]
pub struct RateRun {
    pub row: String,
    pub size: usize,
    pub rep: usize,
    /// Messages per second at the receiver after its warm-up (NaN: failed).
    pub mps: f64,
    pub sent: u64,
    pub send: Option<Usage>,
    /// None for Aeron: one process holds both ends and the driver.
    pub recv: Option<Usage>,
    /// The sender's counters (manyfold) or Aeron's closing words.
    pub sender: String,
    pub error: Option<String>,
}

fn error_text(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " / ")
}

/// The sender's words after its count (manyfold's connection counters).
fn sender_words(f: &Finished) -> String {
    f.stdout.lines().find(|l| l.starts_with("sent=")).map_or(String::new(), |l| l.trim().to_string())
}

impl RateRun {
    fn failed(row: String, size: usize, rep: usize, e: &anyhow::Error) -> RateRun {
        let error = Some(error_text(e));
        RateRun { row, size, rep, mps: f64::NAN, sent: 0, send: None, recv: None, sender: String::new(), error }
    }

    pub fn from(row: String, size: usize, rep: usize, r: Result<Pair>) -> RateRun {
        let parsed = r.and_then(|p| {
            let mps = field(&p.recv.stdout, "rate_mps").context("the receiver printed no rate")?;
            let sent = field(&p.send.stdout, "sent").context("the sender printed no count")? as u64;
            anyhow::ensure!(mps.is_finite() && mps > 0.0, "the receiver measured no rate ({mps})");
            Ok((mps, sent, p))
        });
        match parsed {
            Ok((mps, sent, p)) => RateRun {
                row,
                size,
                rep,
                mps,
                sent,
                send: Some(p.send.usage),
                recv: Some(p.recv.usage),
                sender: sender_words(&p.send),
                error: None,
            },
            Err(e) => RateRun::failed(row, size, rep, &e),
        }
    }

    pub fn from_aeron(row: String, size: usize, rep: usize, r: Result<(f64, u64, Finished)>) -> RateRun {
        match r {
            Ok((mps, sent, f)) => {
                let done = f.stdout.lines().find(|l| l.contains("backPressureRatio")).unwrap_or("").trim().to_string();
                RateRun { row, size, rep, mps, sent, send: Some(f.usage), recv: None, sender: done, error: None }
            }
            Err(e) => RateRun::failed(row, size, rep, &e),
        }
    }

    pub fn progress(&self) -> String {
        match &self.error {
            Some(e) => format!("{}: failed: {e}", self.row),
            None => format!("{}: {:.0} messages/s ({:.1} MB/s)", self.row, self.mps, self.mb_s()),
        }
    }

    pub fn mb_s(&self) -> f64 {
        self.mps * self.size as f64 / 1e6
    }

    /// CPU µs per message sent, both ends (Aeron: its one process).
    fn cpu_us_per_message(&self) -> f64 {
        let cpu = self.send.map_or(f64::NAN, |u| u.cpu.as_secs_f64()) + self.recv.map_or(0.0, |u| u.cpu.as_secs_f64());
        if self.sent == 0 {
            f64::NAN
        } else {
            cpu * 1e6 / self.sent as f64
        }
    }
}

/// One paced run at a share of the row's highest rate.
#[derive(Debug, Clone)]
pub struct LatencyRun {
    pub row: String,
    pub size: usize,
    pub rep: usize,
    /// Percent of the row's highest rate in this repetition.
    pub load: f64,
    pub offered: f64,
    pub delivered: u64,
    /// p50, p99, p99.9 and max one-way latency, µs (NaN: failed).
    pub us: [f64; 4],
    pub send: Option<Usage>,
    pub recv: Option<Usage>,
    /// The sender's counters (manyfold): datagrams per message at this load.
    pub sender: String,
    pub error: Option<String>,
}

impl LatencyRun {
    /// The sender's datagrams (acks included) per message, where it
    /// printed its counters (manyfold rows).
    pub fn datagrams_per_message(&self) -> Option<f64> {
        let sent = field(&self.sender, "sent")?;
        let packets = field(&self.sender, "packets_sent")?;
        (sent > 0.0).then(|| packets / sent)
    }

    pub fn from(row: String, size: usize, rep: usize, load: f64, offered: f64, r: Result<Pair>) -> LatencyRun {
        let parsed = r.and_then(|p| {
            let q = |k: &str| field(&p.recv.stdout, k).map(|ns| ns / 1e3).with_context(|| format!("no {k}"));
            let us = [q("p50_ns")?, q("p99_ns")?, q("p999_ns")?, q("max_ns")?];
            let delivered = field(&p.recv.stdout, "delivered").context("no count")? as u64;
            Ok((us, delivered, p))
        });
        match parsed {
            Ok((us, delivered, p)) => LatencyRun {
                row,
                size,
                rep,
                load,
                offered,
                delivered,
                us,
                send: Some(p.send.usage),
                recv: Some(p.recv.usage),
                sender: sender_words(&p.send),
                error: None,
            },
            Err(e) => LatencyRun {
                row,
                size,
                rep,
                load,
                offered,
                delivered: 0,
                us: [f64::NAN; 4],
                send: None,
                recv: None,
                sender: String::new(),
                error: Some(error_text(&e)),
            },
        }
    }

    pub fn progress(&self) -> String {
        match &self.error {
            Some(e) => format!("{} at {}%: failed: {e}", self.row, self.load),
            None => format!(
                "{} at {}% ({:.0}/s, {} messages): p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs{}",
                self.row,
                self.load,
                self.offered,
                self.delivered,
                self.us[0],
                self.us[1],
                self.us[2],
                self.datagrams_per_message().map_or(String::new(), |d| format!(", {d:.3} datagrams per message"))
            ),
        }
    }
}

/// One Aeron ping-pong run: round trips of one message at a time.
#[derive(Debug, Clone)]
pub struct AeronLatency {
    pub size: usize,
    pub rep: usize,
    pub pings: u64,
    /// Round trip p50, p99, p99.9, max, µs (NaN: failed).
    pub rtt_us: [f64; 4],
    pub usage: Option<Usage>,
    pub error: Option<String>,
}

impl AeronLatency {
    pub fn from(size: usize, rep: usize, pings: u64, r: Result<([f64; 4], Finished)>) -> AeronLatency {
        match r {
            Ok((rtt_us, f)) => AeronLatency { size, rep, pings, rtt_us, usage: Some(f.usage), error: None },
            Err(e) => {
                AeronLatency { size, rep, pings, rtt_us: [f64::NAN; 4], usage: None, error: Some(error_text(&e)) }
            }
        }
    }

    pub fn progress(&self) -> String {
        match &self.error {
            Some(e) => format!("Aeron ping-pong: failed: {e}"),
            None => format!(
                "Aeron ping-pong ({} round trips): RTT p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs",
                self.pings, self.rtt_us[0], self.rtt_us[1], self.rtt_us[2]
            ),
        }
    }
}

/// Everything one invocation measured.
#[derive(Debug)]
pub struct Report {
    pub plan: Plan,
    /// Each row's name, whether it encrypts, whether it is Aeron's.
    pub rows: Vec<(String, bool, bool)>,
    pub rates: Vec<RateRun>,
    pub latencies: Vec<LatencyRun>,
    pub aeron_latencies: Vec<AeronLatency>,
    /// The jar and Java Aeron ran on.
    pub aeron: Option<String>,
    pub notes: Vec<String>,
    pub load_before: String,
    pub load_after: String,
}

/// A size as the tables name it.
fn size_label(size: usize) -> String {
    if size >= 1024 && size.is_multiple_of(1024) {
        format!("{} KiB", size / 1024)
    } else {
        format!("{size} B")
    }
}

impl Report {
    pub fn new(plan: &Plan) -> Report {
        Report {
            plan: plan.clone(),
            rows: Vec::new(),
            rates: Vec::new(),
            latencies: Vec::new(),
            aeron_latencies: Vec::new(),
            aeron: None,
            notes: Vec::new(),
            load_before: load(),
            load_after: String::new(),
        }
    }

    pub fn finish(&mut self) {
        self.load_after = load();
    }

    fn rates_of<'a>(&'a self, row: &'a str, size: usize) -> impl Iterator<Item = &'a RateRun> + 'a {
        self.rates.iter().filter(move |r| r.row == row && r.size == size && r.error.is_none())
    }

    fn lats_of<'a>(&'a self, row: &'a str, size: usize, load: f64) -> impl Iterator<Item = &'a LatencyRun> + 'a {
        self.latencies.iter().filter(move |r| r.row == row && r.size == size && r.load == load && r.error.is_none())
    }

    fn aeron_row(&self) -> Option<&str> {
        self.rows.iter().find(|r| r.2).map(|r| r.0.as_str())
    }

    fn tcp_row(&self) -> Option<&str> {
        self.rows.iter().find(|r| r.0.starts_with("kernel TCP")).map(|r| r.0.as_str())
    }

    /// `row`'s messages/s over `other`'s, repetition by repetition.
    fn rate_ratios(&self, row: &str, other: Option<&str>, size: usize) -> Vec<f64> {
        let Some(other) = other else { return vec![] };
        let b: Vec<(usize, f64)> = self.rates_of(other, size).map(|r| (r.rep, r.mps)).collect();
        stats::ratios_by_rep(self.rates_of(row, size).map(|r| (r.rep, r.mps)), &b)
    }

    /// `row`'s p99 at `load` over TCP's, repetition by repetition.
    fn p99_vs_tcp(&self, row: &str, size: usize, load: f64) -> Vec<f64> {
        let Some(tcp) = self.tcp_row() else { return vec![] };
        let b: Vec<(usize, f64)> = self.lats_of(tcp, size, load).map(|r| (r.rep, r.us[1])).collect();
        stats::ratios_by_rep(self.lats_of(row, size, load).map(|r| (r.rep, r.us[1])), &b)
    }

    /// Aeron's one-way estimate (half the round trip) at quantile index `i`.
    fn aeron_one_way(&self, size: usize, i: usize) -> Vec<f64> {
        self.aeron_latencies.iter().filter(|a| a.size == size && a.error.is_none()).map(|a| a.rtt_us[i] / 2.0).collect()
    }

    fn failed_count(&self, row: &str, size: usize) -> usize {
        self.rates.iter().filter(|r| r.row == row && r.size == size && r.error.is_some()).count()
    }

    fn rate_table(&self, o: &mut String) {
        let _ = writeln!(o, "| size | row | encrypts | runs | messages/s | MB/s | ÷ Aeron (same rep) | ÷ TCP (same rep) | CPU µs per message, both ends | peak RSS MiB send / recv |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
        for &size in &self.plan.sizes {
            for (row, encrypts, is_aeron) in &self.rows {
                let runs: Vec<&RateRun> = self.rates_of(row, size).collect();
                let failed = self.failed_count(row, size);
                let mps: Vec<f64> = runs.iter().map(|r| r.mps).collect();
                let mb: Vec<f64> = runs.iter().map(|r| r.mb_s()).collect();
                let ratio = |other: Option<&str>| {
                    if other == Some(row.as_str()) {
                        return if runs.is_empty() { "–" } else { "1" }.to_string();
                    }
                    let v = self.rate_ratios(row, other, size);
                    if v.is_empty() {
                        "–".into()
                    } else {
                        med_range(&v, 2)
                    }
                };
                let cpu: Vec<f64> = runs.iter().map(|r| r.cpu_us_per_message()).collect();
                let rss = |f: fn(&RateRun) -> Option<Usage>| {
                    med_range(
                        &runs
                            .iter()
                            .map(|r| f(r).map_or(f64::NAN, |u| u.max_rss_kib as f64 / 1024.0))
                            .collect::<Vec<_>>(),
                        0,
                    )
                };
                let _ = writeln!(
                    o,
                    "| {} | {row} | {} | {}{} | {} | {} | {} | {} | {} | {} |",
                    size_label(size),
                    if *encrypts { "yes" } else { "no" },
                    runs.len(),
                    if failed > 0 { format!(" (+{failed} failed)") } else { String::new() },
                    med_range(&mps, 0),
                    med_range(&mb, 1),
                    ratio(self.aeron_row()),
                    ratio(self.tcp_row()),
                    med_range(&cpu, 2),
                    if *is_aeron {
                        format!("{} (one JVM)", rss(|r| r.send))
                    } else {
                        format!("{} / {}", rss(|r| r.send), rss(|r| r.recv))
                    },
                );
            }
        }
    }

    fn latency_table(&self, o: &mut String) {
        let _ = writeln!(o, "| size | row | load | offered messages/s | runs | p50 µs | p99 µs | p99.9 µs | max µs | p99 ÷ TCP's (same rep) |");
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
        for &size in &self.plan.sizes {
            for (row, _, is_aeron) in &self.rows {
                if *is_aeron {
                    let n = self.aeron_one_way(size, 0).len();
                    let failed = self.aeron_latencies.iter().filter(|a| a.size == size && a.error.is_some()).count();
                    let _ = writeln!(
                        o,
                        "| {} | {row} | ping-pong, one message in flight (½ RTT) | – | {n}{} | {} | {} | {} | {} | – |",
                        size_label(size),
                        if failed > 0 { format!(" (+{failed} failed)") } else { String::new() },
                        med_range(&self.aeron_one_way(size, 0), 1),
                        med_range(&self.aeron_one_way(size, 1), 1),
                        med_range(&self.aeron_one_way(size, 2), 1),
                        med_range(&self.aeron_one_way(size, 3), 1),
                    );
                    continue;
                }
                for &load in &self.plan.loads {
                    let runs: Vec<&LatencyRun> = self.lats_of(row, size, load).collect();
                    let failed = self
                        .latencies
                        .iter()
                        .filter(|r| r.row == *row && r.size == size && r.load == load && r.error.is_some())
                        .count();
                    let col = |i: usize| runs.iter().map(|r| r.us[i]).collect::<Vec<f64>>();
                    let vs = self.p99_vs_tcp(row, size, load);
                    let _ = writeln!(
                        o,
                        "| {} | {row} | {load}% | {} | {}{} | {} | {} | {} | {} | {} |",
                        size_label(size),
                        med_range(&runs.iter().map(|r| r.offered).collect::<Vec<_>>(), 0),
                        runs.len(),
                        if failed > 0 { format!(" (+{failed} failed)") } else { String::new() },
                        med_range(&col(0), 1),
                        med_range(&col(1), 1),
                        med_range(&col(2), 1),
                        med_range(&col(3), 1),
                        if vs.is_empty() || Some(row.as_str()) == self.tcp_row() {
                            "–".into()
                        } else {
                            med_range(&vs, 2)
                        },
                    );
                }
            }
        }
    }

    /// The targets for manyfold on one stream, said plainly.
    fn verdict(&self) -> String {
        let mf = "manyfold, one stream";
        if !self.rows.iter().any(|r| r.0 == mf) {
            return "Targets (issue 21): not judged, the manyfold one-stream row did not run.".into();
        }
        let mut s = String::from("Targets (issue 21), manyfold on one stream:");
        for (anchor, name) in [(self.aeron_row(), "Aeron"), (self.tcp_row(), "kernel TCP")] {
            let Some(anchor) = anchor else {
                let _ = write!(s, " messages/s ≥ 1.0× {name}: not judged (no {name} row);");
                continue;
            };
            let per_size: Vec<String> = self
                .plan
                .sizes
                .iter()
                .map(|&size| {
                    let v = self.rate_ratios(mf, Some(anchor), size);
                    if v.is_empty() {
                        format!("{}: –", size_label(size))
                    } else {
                        format!("{}: {:.2}×", size_label(size), median(&v))
                    }
                })
                .collect();
            let met = self.plan.sizes.iter().all(|&size| {
                let v = self.rate_ratios(mf, Some(anchor), size);
                !v.is_empty() && median(&v) >= 1.0
            });
            let _ = write!(
                s,
                " messages/s ≥ 1.0× {name} at every size: {} ({});",
                if met { "met" } else { "missed" },
                per_size.join(", ")
            );
        }
        if self.plan.loads.contains(&50.0) {
            if self.tcp_row().is_some() {
                let per_size: Vec<(usize, f64)> =
                    self.plan.sizes.iter().map(|&size| (size, median(&self.p99_vs_tcp(mf, size, 50.0)))).collect();
                let met = per_size.iter().all(|(_, r)| *r <= 1.0);
                let words: Vec<String> =
                    per_size.iter().map(|(size, r)| format!("{}: {r:.2}×", size_label(*size))).collect();
                let _ = write!(
                    s,
                    " p99 at 50% load ≤ TCP's: {} ({});",
                    if met { "met" } else { "missed" },
                    words.join(", ")
                );
            }
            if self.aeron_row().is_some() {
                let words: Vec<String> = self
                    .plan
                    .sizes
                    .iter()
                    .map(|&size| {
                        let mfp99 = median(&self.lats_of(mf, size, 50.0).map(|r| r.us[1]).collect::<Vec<_>>());
                        let ap99 = median(&self.aeron_one_way(size, 1));
                        format!("{}: {mfp99:.1} µs vs {ap99:.1} µs", size_label(size))
                    })
                    .collect();
                let _ = write!(
                    s,
                    " p99 at 50% load ≤ Aeron's: Aeron's samples measure only unloaded ping-pong (½ RTT, one message in flight), so this compares manyfold at 50% load with Aeron unloaded ({}).",
                    words.join(", ")
                );
            }
        }
        s
    }

    fn method(&self) -> String {
        let p = &self.plan;
        format!(
            "Each manyfold and TCP run: a receiver process and a sender process on 127.0.0.1. The rate run sends for {} s as fast as the transport takes messages (the sender waits whenever the transport's send buffer is full); the receiver counts messages from {:.2} s after the first arrival to the last: that is the row's highest sustained rate in this repetition. \
             Then one paced run of {} s per offered load ({}% of that rate): message k is due at t0 + k / rate, the sender sleeps (timer slack 1 ns) until a message is due and sends every due message; each message carries its due time (CLOCK_MONOTONIC, one clock for the host), and the receiver's reading at arrival minus that stamp is its one-way latency, so a sender held up by its transport makes its messages later. Percentiles are nearest-rank over every message of a run. \
             Every message is checked at the receiver: its length, its stream, its sequence number (in order on each stream; once each when unordered), and every byte of its filler; a run whose receiver checked fewer messages than the sender sent, or any bad message, fails. \
             manyfold: the library's async API with its default configuration (BBR), `Streams::send_message_with` and `recv_message` per message, each end on a multi-thread tokio runtime; 8 streams: message k on stream k mod 8, each stream checked in order; unordered: `MessageOptions {{ unordered: true }}`; encrypted: spec §19 with the lab's pre-shared key (Noise XXpsk3, then ChaCha20-Poly1305 on every packet), checked on both ends. Plain manyfold and Aeron do not encrypt; kernel TCP here does not either. \
             Kernel TCP: one connection, TCP_NODELAY, one `write` per message of a 4-byte length prefix and the message; the receiver reads through a 1 MiB buffer. \
             Aeron {}: its own samples with the settings of its own scripts: `EmbeddedThroughput` (publisher, subscriber and media driver in one JVM, UDP to localhost; `embedded-throughput`'s {} and `java-common`'s JVM options) with `-Daeron.threading.mode=SHARED`; its rate is the mean of the sample's once-a-second reports after the first. Aeron's sample counts messages, it does not check their content. Latency: `Ping` and `Pong` through a standalone media driver with SHARED threading, three JVMs ({} round trips after {} warm-up ones; the `ping`/`pong` scripts' settings, and {}: three busy-spinning threads cannot share two loaded cores; `EmbeddedPingPong` fixes DEDICATED threading and did not finish here), one message in flight, one-way taken as half the round trip. \
             CPU = user + sys seconds of both processes (Aeron: its one JVM) over the messages sent, process start-up and handshake included; peak RSS from wait4(2). MB = 10^6 bytes of messages (headers of the transports not counted). \
             Medians of the repetitions with (min–max); rows alternate A B C … for each size within a repetition; ratios are taken within a repetition, then their median.",
            p.secs,
            p.warmup,
            p.lat_secs,
            p.loads.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("%, "),
            super::aeron::VERSION,
            super::aeron::SCRIPT_PROPS.join(" "),
            p.aeron_pings,
            (p.aeron_pings / 10).max(1),
            super::aeron::PING_IDLE.join(" "),
        )
    }

    fn title_sizes(&self) -> String {
        let p = &self.plan;
        format!(
            "messages of {} bytes, {} s rate runs, {} s paced runs at {}% load, {} rep(s)",
            p.sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", "),
            p.secs,
            p.lat_secs,
            p.loads.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("/"),
            p.reps
        )
    }
}

impl Figures for Report {
    fn failures(&self) -> Vec<String> {
        let rates = self
            .rates
            .iter()
            .filter_map(|r| Some(format!("{} B {}", r.size, r.progress())).filter(|_| r.error.is_some()));
        let lats = self
            .latencies
            .iter()
            .filter_map(|r| Some(format!("{} B {}", r.size, r.progress())).filter(|_| r.error.is_some()));
        let aeron = self
            .aeron_latencies
            .iter()
            .filter_map(|r| Some(format!("{} B {}", r.size, r.progress())).filter(|_| r.error.is_some()));
        rates.chain(lats).chain(aeron).collect()
    }

    fn markdown(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "### rate: small messages on one connection over 127.0.0.1");
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", header(&self.title_sizes(), self.plan.seed, &self.load_before, &self.load_after));
        let _ = writeln!(o);
        let _ = writeln!(o, "Highest sustained rate (plain manyfold, kernel TCP and Aeron do not encrypt):");
        let _ = writeln!(o);
        self.rate_table(&mut o);
        let _ = writeln!(o);
        let _ =
            writeln!(o, "One-way latency at offered loads (a share of the row's highest rate in the same repetition):");
        let _ = writeln!(o);
        self.latency_table(&mut o);
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", self.verdict());
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", self.method());
        if let Some(a) = &self.aeron {
            let _ = writeln!(o);
            let _ = writeln!(o, "Aeron: {a}.");
        }
        for n in &self.notes {
            let _ = writeln!(o);
            let _ = writeln!(o, "{n}");
        }
        o
    }

    fn json(&self) -> String {
        let p = &self.plan;
        let num = |x: f64| json_fixed(x, 3);
        let args: Vec<String> = std::env::args().skip(1).collect();
        let rates: Vec<String> = self
            .rates
            .iter()
            .map(|r| {
                format!(
                    "{{\"row\":{},\"size\":{},\"rep\":{},\"messages_per_s\":{},\"mb_per_s\":{},\"sent\":{},\"sender\":{},\"send\":{},\"recv\":{},\"error\":{}}}",
                    json_str(&r.row),
                    r.size,
                    r.rep,
                    num(r.mps),
                    num(r.mb_s()),
                    r.sent,
                    json_str(&r.sender),
                    json_usage(&r.send),
                    json_usage(&r.recv),
                    r.error.as_deref().map_or("null".into(), json_str)
                )
            })
            .collect();
        let lats: Vec<String> = self
            .latencies
            .iter()
            .map(|r| {
                format!(
                    "{{\"row\":{},\"size\":{},\"rep\":{},\"load_percent\":{},\"offered_per_s\":{},\"delivered\":{},\"p50_us\":{},\"p99_us\":{},\"p999_us\":{},\"max_us\":{},\"send\":{},\"recv\":{},\"error\":{}}}",
                    json_str(&r.row),
                    r.size,
                    r.rep,
                    r.load,
                    num(r.offered),
                    r.delivered,
                    num(r.us[0]),
                    num(r.us[1]),
                    num(r.us[2]),
                    num(r.us[3]),
                    json_usage(&r.send),
                    json_usage(&r.recv),
                    r.error.as_deref().map_or("null".into(), json_str)
                )
            })
            .collect();
        let aeron: Vec<String> = self
            .aeron_latencies
            .iter()
            .map(|a| {
                format!(
                    "{{\"size\":{},\"rep\":{},\"round_trips\":{},\"rtt_p50_us\":{},\"rtt_p99_us\":{},\"rtt_p999_us\":{},\"rtt_max_us\":{},\"usage\":{},\"error\":{}}}",
                    a.size,
                    a.rep,
                    a.pings,
                    num(a.rtt_us[0]),
                    num(a.rtt_us[1]),
                    num(a.rtt_us[2]),
                    num(a.rtt_us[3]),
                    json_usage(&a.usage),
                    a.error.as_deref().map_or("null".into(), json_str)
                )
            })
            .collect();
        format!(
            "{{\"scenario\":\"rate\",\"command\":{},\"machine\":{},\"seed\":{},\"sizes\":[{}],\"secs\":{},\"lat_secs\":{},\"loads\":[{}],\"reps\":{},\"load_before\":{},\"load_after\":{},\"notes\":[{}],\n\"rates\":[\n{}\n],\n\"latencies\":[\n{}\n],\n\"aeron_ping_pong\":[\n{}\n]}}\n",
            json_str(&format!("manyfold-bench {}", args.join(" "))),
            json_str(&crate::report::machine()),
            p.seed,
            p.sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
            p.secs,
            p.lat_secs,
            p.loads.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(","),
            p.reps,
            json_str(&self.load_before),
            json_str(&self.load_after),
            self.notes.iter().map(|n| json_str(n)).collect::<Vec<_>>().join(","),
            rates.join(",\n"),
            lats.join(",\n"),
            aeron.join(",\n")
        )
    }

    /// `rate-messages.png` (median messages/s per size and row) and
    /// `rate-p99.png` (median p99 at the middle load per size and row;
    /// Aeron's unloaded ½ RTT).
    fn charts(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let sizes: Vec<String> = self.plan.sizes.iter().map(|&s| size_label(s)).collect();
        let rates: Vec<(String, Vec<f64>)> = self
            .rows
            .iter()
            .map(|(row, _, _)| {
                let v =
                    self.plan.sizes.iter().map(|&s| median(&self.rates_of(row, s).map(|r| r.mps).collect::<Vec<_>>()));
                (row.clone(), v.collect())
            })
            .collect();
        let a = dir.join("rate-messages.png");
        manyfold_plot::bars(
            &a,
            "Highest sustained rate, one connection over 127.0.0.1",
            "messages/s (median)",
            &sizes,
            &rates,
        )?;
        let mid = self.plan.loads[self.plan.loads.len() / 2];
        let p99: Vec<(String, Vec<f64>)> = self
            .rows
            .iter()
            .map(|(row, _, is_aeron)| {
                let v = self.plan.sizes.iter().map(|&s| {
                    if *is_aeron {
                        median(&self.aeron_one_way(s, 1))
                    } else {
                        median(&self.lats_of(row, s, mid).map(|r| r.us[1]).collect::<Vec<_>>())
                    }
                });
                (row.clone(), v.collect())
            })
            .collect();
        let b = dir.join("rate-p99.png");
        let title = format!("One-way p99 at {mid}% load (Aeron: unloaded ping-pong, ½ RTT)");
        manyfold_plot::bars(&b, &title, "µs (median)", &sizes, &p99)?;
        Ok(vec![a, b])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_named_in_kib_when_whole() {
        assert_eq!(size_label(32), "32 B");
        assert_eq!(size_label(288), "288 B");
        assert_eq!(size_label(16384), "16 KiB");
    }
}
