//! The `messages` figures and their output: each run's latency
//! percentiles (nearest rank; a message that never arrived counts as
//! infinitely late), the medians over the repetitions with their spread,
//! p99 in RTTs and against TCP's p99 of the same repetition, the issue's
//! target, a Markdown report naming command, date, machine and link
//! (BENCH.md), JSON with every latency, and two charts.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::runner::Plan;
use super::Options;
use crate::child::{Finished, Usage};
use crate::report::{header, json_num as num, json_str};
use crate::stats::{self, med_range, median};
use crate::wan::netns::RelayStats;
use crate::wan::probe::field;

/// The issue's target: p99 within this many RTTs.
const TARGET_RTTS: f64 = 3.0;

/// The RTT probe's round trips.
#[derive(Debug, Clone)]
pub struct Probe {
    pub sent: u32,
    pub rtts_ms: Vec<f64>,
}

impl Probe {
    pub fn mean_ms(&self) -> f64 {
        self.rtts_ms.iter().sum::<f64>() / self.rtts_ms.len() as f64
    }

    fn label(&self) -> String {
        let (lo, hi) = stats::min_max(&self.rtts_ms).unwrap_or((f64::NAN, f64::NAN));
        format!(
            "mean {:.1} ms, median {:.1} ms, {lo:.1}–{hi:.1} ms ({} of {} UDP round trips returned, one sent every 5 ms)",
            self.mean_ms(),
            median(&self.rtts_ms),
            self.rtts_ms.len(),
            self.sent
        )
    }
}

/// One run of one row.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub row: String,
    pub rep: usize,
    /// Every delivered message's one-way latency, ms, sorted.
    pub latencies_ms: Vec<f64>,
    /// Message k's latency, ms (None: never arrived).
    pub by_message: Vec<Option<f64>>,
    pub expected: usize,
    /// The sender's summary words.
    pub sender: String,
    pub send: Option<Usage>,
    pub recv: Option<Usage>,
    /// Packets the emulator dropped at random during the run, a→b and b→a,
    /// and those it forwarded.
    pub lost: (u64, u64),
    pub forwarded: (u64, u64),
    /// IP bytes the sender put on the link a→b (forwarded or dropped),
    /// and of those the dropped ones.
    pub wire_bytes: u64,
    pub dropped_bytes: u64,
    pub error: Option<String>,
}

/// Nearest-rank percentile `q` (0–100] of `n` messages of which the
/// sorted `delivered` arrived: infinite where the rank falls on a message
/// that never did.
pub fn percentile(delivered: &[f64], n: usize, q: f64) -> f64 {
    stats::rank(n, q).map_or(f64::NAN, |rank| delivered.get(rank - 1).copied().unwrap_or(f64::INFINITY))
}

impl RunResult {
    /// Reads the receiver's arrivals and the sender's summary.
    pub fn parse(row: String, plan: &Plan, got: &Finished, sent: &Finished) -> Result<RunResult> {
        let w = &plan.workload;
        let mut latencies_ms = Vec::new();
        let mut by_message = vec![None; w.count as usize];
        for line in got.stdout.lines().filter(|l| l.starts_with("arrival ")) {
            let f = |k: &str| field(line, k).with_context(|| format!("no {k} in the arrival line {line:?}"));
            let (stream, seq, ms) = (f("stream")?, f("seq")?, f("latency_ns")? / 1e6);
            let k = seq as usize * w.streams as usize + stream as usize;
            *by_message.get_mut(k).with_context(|| format!("message {k} is beyond the run"))? = Some(ms);
            latencies_ms.push(ms);
        }
        let summary = got.stdout.lines().last().unwrap_or_default();
        let delivered = field(summary, "delivered").with_context(|| format!("no summary in {summary:?}"))?;
        if delivered as usize != latencies_ms.len() {
            bail!("the receiver counted {delivered} messages but listed {}", latencies_ms.len());
        }
        let latencies_ms = stats::sorted(&latencies_ms);
        let sender = sent.stdout.lines().last().unwrap_or_default().trim().to_string();
        if field(&sender, "sent").is_none() {
            bail!("the sender printed no summary ({sender:?})");
        }
        Ok(RunResult {
            row,
            rep: 0,
            latencies_ms,
            by_message,
            expected: w.count as usize,
            sender,
            send: Some(sent.usage),
            recv: Some(got.usage),
            lost: (0, 0),
            forwarded: (0, 0),
            wire_bytes: 0,
            dropped_bytes: 0,
            error: None,
        })
    }

    pub fn failed(row: String, rep: usize, error: String) -> RunResult {
        RunResult {
            row,
            rep,
            latencies_ms: vec![],
            by_message: vec![],
            expected: 0,
            sender: String::new(),
            send: None,
            recv: None,
            lost: (0, 0),
            forwarded: (0, 0),
            wire_bytes: 0,
            dropped_bytes: 0,
            error: Some(error),
        }
    }

    /// The emulator's counters over the run.
    pub fn set_relay(&mut self, before: &RelayStats, after: &RelayStats) {
        self.lost = (after.a2b.lost - before.a2b.lost, after.b2a.lost - before.b2a.lost);
        self.forwarded = (after.a2b.forwarded - before.a2b.forwarded, after.b2a.forwarded - before.b2a.forwarded);
        self.dropped_bytes = after.a2b.dropped_bytes - before.a2b.dropped_bytes;
        self.wire_bytes = after.a2b.forwarded_bytes - before.a2b.forwarded_bytes + self.dropped_bytes;
    }

    /// Bytes on the link a→b (IP, UDP and every header included) over
    /// what the messages carry plus one resend of every dropped packet:
    /// issue 21's measure of a thin flow's overhead (≤ 1.10). NaN for a
    /// failed run.
    pub fn wire_overhead(&self, message_bytes: u64) -> f64 {
        if self.error.is_some() || self.wire_bytes == 0 {
            return f64::NAN;
        }
        self.wire_bytes as f64 / (message_bytes + self.dropped_bytes) as f64
    }

    pub fn p(&self, q: f64) -> f64 {
        if self.error.is_some() {
            return f64::NAN;
        }
        percentile(&self.latencies_ms, self.expected, q)
    }

    pub fn progress(&self) -> String {
        match &self.error {
            Some(e) => format!("{}: failed: {e}", self.row),
            None => format!(
                "{}: {} of {} delivered, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                self.row,
                self.latencies_ms.len(),
                self.expected,
                self.p(50.0),
                self.p(99.0),
                self.p(100.0)
            ),
        }
    }
}

/// The whole scenario's results.
#[derive(Debug)]
pub struct Report {
    o: Options,
    plan: Plan,
    load_before: String,
    load_after: String,
    pub probe: Option<Probe>,
    pub runs: Vec<RunResult>,
    pub notes: Vec<String>,
}

/// `12.3`, or `–` for a missing figure.
fn ms(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{x:.1}")
    }
}

impl Report {
    pub fn new(o: &Options, plan: &Plan) -> Report {
        Report {
            o: o.clone(),
            plan: plan.clone(),
            load_before: crate::report::load(),
            load_after: String::new(),
            probe: None,
            runs: vec![],
            notes: vec![],
        }
    }

    /// Records the state of the machine after the runs.
    pub fn finish(&mut self) {
        self.load_after = crate::report::load();
    }

    pub fn failures(&self) -> Vec<String> {
        self.runs
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}, rep {}: {e}", r.row, r.rep + 1)))
            .collect()
    }

    /// The rows in the order they ran.
    fn rows(&self) -> Vec<&str> {
        let mut rows: Vec<&str> = vec![];
        for r in &self.runs {
            if !rows.contains(&r.row.as_str()) {
                rows.push(&r.row);
            }
        }
        rows
    }

    fn runs_of<'a>(&'a self, row: &'a str) -> impl Iterator<Item = &'a RunResult> + 'a {
        self.runs.iter().filter(move |r| r.row == row && r.error.is_none())
    }

    /// The kernel TCP row's name, if it ran.
    fn tcp_row(&self) -> Option<&str> {
        self.rows().into_iter().find(|r| r.starts_with("kernel TCP"))
    }

    /// Per repetition, `row`'s p99 over TCP's p99 in the same repetition.
    fn p99_vs_tcp(&self, row: &str) -> Vec<f64> {
        self.tcp_row().map_or_else(Vec::new, |tcp| self.p99_vs(row, tcp))
    }

    /// Per repetition, `row`'s p99 over `anchor`'s in the same repetition.
    fn p99_vs(&self, row: &str, anchor: &str) -> Vec<f64> {
        let p99 = |r: &RunResult| (r.rep, r.p(99.0));
        stats::ratios_by_rep(self.runs_of(row).map(p99), &self.runs_of(anchor).map(p99).collect::<Vec<_>>())
    }

    /// The manyfold row with one manyfold stream per stream, if it ran.
    fn streams_row(&self) -> Option<&str> {
        self.rows().into_iter().find(|r| r.starts_with("manyfold") && r.ends_with(" streams"))
    }

    fn measured_rtt(&self) -> Option<f64> {
        self.probe.as_ref().filter(|p| !p.rtts_ms.is_empty()).map(Probe::mean_ms)
    }

    fn title(&self) -> String {
        let (w, l) = (&self.plan.workload, &self.plan.link);
        format!(
            "{}-byte messages on {} streams (one per stream every {} ms) across {}, RTT {}–{} ms, {}% loss each way",
            w.size,
            w.streams,
            w.interval_ms,
            crate::wan::rate_label(l.rate_bps),
            self.o.rtt_min,
            self.o.rtt_max,
            self.o.loss
        )
    }

    /// The charts' title: what fits above a chart.
    fn short_title(&self) -> String {
        let w = &self.plan.workload;
        format!(
            "{} B messages, {} streams, RTT {}–{} ms, {}% loss",
            w.size, w.streams, self.o.rtt_min, self.o.rtt_max, self.o.loss
        )
    }

    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let (w, l) = (&self.plan.workload, &self.plan.link);
        let rtt = self.plan.rtt_mean_ms;
        let _ = writeln!(o, "### messages: {}", self.title());
        let _ = writeln!(o);
        let sizes = format!("{} messages of {} bytes per run, {} rep(s)", w.count, w.size, self.plan.reps);
        let _ = writeln!(o, "{}", header(&sizes, w.seed, &self.load_before, &self.load_after));
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "Link (the `wan` scenario's relay, both directions alike): {}, one-way delay {:.1} ms + uniform jitter 0–{:.2} ms (order kept), {}% random loss, tail-drop queue {} bytes; configured mean RTT {rtt:.1} ms. Measured RTT: {}.",
            crate::wan::rate_label(l.rate_bps),
            l.delay.as_secs_f64() * 1e3,
            l.jitter.as_secs_f64() * 1e3,
            self.o.loss,
            l.queue_bytes,
            self.probe.as_ref().map_or("not probed".into(), Probe::label)
        );
        let _ = writeln!(o);
        let measured = self.measured_rtt();
        let _ = writeln!(
            o,
            "| row | runs | delivered | p50 ms | p99 ms | max ms | p99 in RTTs (configured {rtt:.1} ms) | p99 in RTTs (measured {}) | p99 ÷ TCP's p99, same rep | bytes a→b ÷ (messages + resent drops) |",
            measured.map_or("–".into(), |m| format!("{m:.1} ms"))
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
        for row in self.rows() {
            let runs: Vec<&RunResult> = self.runs_of(row).collect();
            let failed = self.runs.iter().filter(|r| r.row == row && r.error.is_some()).count();
            let col = |q: f64| runs.iter().map(|r| r.p(q)).collect::<Vec<f64>>();
            let p99 = col(99.0);
            let in_rtts = |base: f64| p99.iter().map(|p| p / base).collect::<Vec<f64>>();
            let vs_tcp = self.p99_vs_tcp(row);
            let delivered: usize = runs.iter().map(|r| r.latencies_ms.len()).sum();
            let expected: usize = runs.iter().map(|r| r.expected).sum();
            let overhead: Vec<f64> = runs.iter().map(|r| r.wire_overhead(self.message_bytes())).collect();
            let _ = writeln!(
                o,
                "| {row} | {}{} | {delivered} of {expected} | {} | {} | {} | {} | {} | {} | {} |",
                runs.len(),
                if failed > 0 { format!(" (+{failed} failed)") } else { String::new() },
                med_range(&col(50.0), 1),
                med_range(&p99, 1),
                med_range(&col(100.0), 1),
                med_range(&in_rtts(rtt), 2),
                measured.map_or("–".into(), |m| med_range(&in_rtts(m), 2)),
                if vs_tcp.is_empty() { "–".into() } else { med_range(&vs_tcp, 2) },
                med_range(&overhead, 3),
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "Median over the repetitions (min–max). Per run:");
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "| row | rep | delivered | p50 ms | p99 ms | max ms | mean ms | lost by the link a→b / b→a | CPU s send / recv | sender |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.runs {
            if let Some(e) = &r.error {
                let _ = writeln!(o, "| {} | {} | failed: {} | | | | | | | |", r.row, r.rep + 1, e.replace('|', "/"));
                continue;
            }
            let mean = r.latencies_ms.iter().sum::<f64>() / r.latencies_ms.len().max(1) as f64;
            let cpu = |u: &Option<Usage>| u.map_or("–".into(), |u| format!("{:.2}", u.cpu.as_secs_f64()));
            let _ = writeln!(
                o,
                "| {} | {} | {} of {} | {} | {} | {} | {} | {} of {} / {} of {} | {} / {} | {} |",
                r.row,
                r.rep + 1,
                r.latencies_ms.len(),
                r.expected,
                ms(r.p(50.0)),
                ms(r.p(99.0)),
                ms(r.p(100.0)),
                ms(mean),
                r.lost.0,
                r.lost.0 + r.forwarded.0,
                r.lost.1,
                r.lost.1 + r.forwarded.1,
                cpu(&r.send),
                cpu(&r.recv),
                r.sender
            );
        }
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", self.verdict());
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", self.verdict_against_kcp());
        let _ = writeln!(o);
        let _ = writeln!(o, "{}", self.method());
        for n in &self.notes {
            let _ = writeln!(o);
            let _ = writeln!(o, "{n}");
        }
        o
    }

    /// Bytes the messages of one run carry.
    fn message_bytes(&self) -> u64 {
        let w = &self.plan.workload;
        u64::from(w.count) * u64::from(w.size)
    }

    /// Issue 21's targets for the manyfold streams row: p99 ≤ KCP's in the
    /// same repetition, and at most 10% more bytes on the link than the
    /// messages plus one resend of each dropped packet.
    fn verdict_against_kcp(&self) -> String {
        let kcp = self.rows().into_iter().find(|r| r.starts_with("KCP"));
        let (Some(mf), Some(kcp)) = (self.streams_row(), kcp) else {
            return "Target (issue 21): not judged, the manyfold streams row or the KCP row did not run.".into();
        };
        let vs = self.p99_vs(mf, kcp);
        let over = |row: &str| self.runs_of(row).map(|r| r.wire_overhead(self.message_bytes())).collect::<Vec<f64>>();
        let (ours, theirs) = (over(mf), over(kcp));
        if vs.is_empty() || ours.is_empty() {
            return "Target (issue 21): not judged, no repetition where both rows completed.".into();
        }
        format!(
            "Target (issue 21), {mf}: p99 ≤ KCP's in the same repetition: {} (median ratio {:.2}, below or at in {} of {}); bytes a→b ≤ 1.10 × (messages + one resend of each dropped packet): {} (median {:.3}; KCP's {:.3}).",
            if median(&vs) <= 1.0 { "met" } else { "missed" },
            median(&vs),
            vs.iter().filter(|v| **v <= 1.0).count(),
            vs.len(),
            if median(&ours) <= 1.10 { "met" } else { "missed" },
            median(&ours),
            median(&theirs),
        )
    }

    /// The issue's target for the manyfold streams row, said plainly.
    fn verdict(&self) -> String {
        let Some(mf) = self.streams_row() else {
            return "Target (issue 4): not judged, the manyfold streams row did not run.".into();
        };
        let p99: Vec<f64> = self.runs_of(mf).map(|r| r.p(99.0)).collect();
        if p99.is_empty() {
            return format!("Target (issue 4): not judged, every run of {mf} failed.");
        }
        let rtt = self.plan.rtt_mean_ms;
        let bound = TARGET_RTTS * rtt;
        let med = median(&p99);
        let within = p99.iter().filter(|p| **p <= bound).count();
        let mut s = format!(
            "Target (issue 4), {mf}: p99 ≤ {TARGET_RTTS} RTT = {bound:.1} ms (configured mean RTT): {} — median p99 {med:.1} ms = {:.2} RTT, within the bound in {within} of {} runs",
            if med <= bound { "met" } else { "missed" },
            med / rtt,
            p99.len()
        );
        if let Some(m) = self.measured_rtt() {
            let _ = write!(s, " ({:.2} RTT of the measured {m:.1} ms)", med / m);
        }
        let vs = self.p99_vs_tcp(mf);
        if vs.is_empty() {
            s += "; p99 below TCP's: not judged (no TCP row).";
        } else {
            let below = vs.iter().filter(|v| **v < 1.0).count();
            let _ = write!(
                s,
                "; p99 below TCP's: {} — {below} of {} repetitions, median ratio {:.2}.",
                if below * 2 > vs.len() { "met" } else { "missed" },
                vs.len(),
                median(&vs)
            );
        }
        s
    }

    fn method(&self) -> String {
        let w = &self.plan.workload;
        format!(
            "Each run: a sender in namespace a sends {} messages of {} bytes, message k on stream k mod {} at t0 + k × {:.1} ms (each stream one message every {} ms, {:.0} messages/s in all), each stamped with the time it is due (CLOCK_MONOTONIC, one clock for the host); \
             a receiver in namespace b checks every message (stream, in-stream order, every byte against the seeded pattern) and takes its one-way latency = arrival − stamp, so a sender held up by its transport makes its messages later. \
             Percentiles are nearest-rank over all {} messages of a run; one that never arrived counts as infinitely late. \
             Rows: manyfold with stream s's messages on manyfold stream s (`send_message` / `recv_message`); manyfold with every message on stream 0 (the same traffic, head-of-line blocked); manyfold on the same streams with every message unordered (`MessageOptions {{ unordered: true }}`: delivered as soon as it is whole, so only its own loss delays it; the receiver then checks each message arrives once, not their order); kernel TCP, one connection with TCP_NODELAY, each message framed as [stream u16][length u16]; and KCP, the same TCP framing through kcptun (TCP over loopback into `kcptun-client` in a, KCP over UDP across the link, `kcptun-server` in b to the receiver over loopback). \
             Rows alternate A B C … A B C …. The RTT probe: UDP datagrams from a to an echo in b and back at the workload's packet rate; the link keeps each direction in order, so a packet waits for any earlier one whose jitter was larger and the RTT packets see is above the configured mean (KCP's own simulator delivers in order the same way). \
             CPU = user + sys seconds of each end (the KCP row adds its tunnel end on that side).",
            w.count,
            w.size,
            w.streams,
            w.period_ns() as f64 / 1e6,
            w.interval_ms,
            1e9 / w.period_ns() as f64,
            w.count
        )
    }

    pub fn json(&self) -> String {
        let (w, l) = (&self.plan.workload, &self.plan.link);
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mut runs = Vec::new();
        for r in &self.runs {
            let lat: Vec<String> =
                r.by_message.iter().map(|x| x.map_or("null".into(), |x| format!("{x:.3}"))).collect();
            runs.push(format!(
                "{{\"row\":{},\"rep\":{},\"expected\":{},\"delivered\":{},\"p50_ms\":{},\"p99_ms\":{},\"max_ms\":{},\"lost_a2b\":{},\"lost_b2a\":{},\"wire_bytes_a2b\":{},\"dropped_bytes_a2b\":{},\"wire_overhead\":{},\"send_cpu_s\":{},\"recv_cpu_s\":{},\"sender\":{},\"error\":{},\"latency_ms_by_message\":[{}]}}",
                json_str(&r.row),
                r.rep,
                r.expected,
                r.latencies_ms.len(),
                num(r.p(50.0)),
                num(r.p(99.0)),
                num(r.p(100.0)),
                r.lost.0,
                r.lost.1,
                r.wire_bytes,
                r.dropped_bytes,
                num(r.wire_overhead(self.message_bytes())),
                r.send.map_or("null".into(), |u| num(u.cpu.as_secs_f64())),
                r.recv.map_or("null".into(), |u| num(u.cpu.as_secs_f64())),
                json_str(&r.sender),
                r.error.as_deref().map_or("null".into(), json_str),
                lat.join(",")
            ));
        }
        let probe = self.probe.as_ref().map_or("null".into(), |p| {
            let rtts: Vec<String> = p.rtts_ms.iter().map(|x| format!("{x:.3}")).collect();
            format!("{{\"sent\":{},\"rtts_ms\":[{}]}}", p.sent, rtts.join(","))
        });
        format!(
            "{{\"scenario\":\"messages\",\"command\":{},\"date\":{},\"kernel\":{},\"nproc\":{},\"seed\":{},\"workload\":{{\"count\":{},\"streams\":{},\"interval_ms\":{},\"size\":{}}},\"link\":{{\"rate_bps\":{},\"delay_ms\":{},\"jitter_ms\":{},\"loss\":{},\"queue_bytes\":{},\"rtt_mean_ms\":{}}},\"reps\":{},\"rtt_probe\":{probe},\"notes\":[{}],\"runs\":[\n{}\n]}}\n",
            json_str(&format!("manyfold-bench {}", args.join(" "))),
            json_str(&crate::sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"])),
            json_str(&crate::sh("uname", &["-r"])),
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            w.seed,
            w.count,
            w.streams,
            w.interval_ms,
            w.size,
            l.rate_bps,
            l.delay.as_secs_f64() * 1e3,
            l.jitter.as_secs_f64() * 1e3,
            l.loss,
            l.queue_bytes,
            self.plan.rtt_mean_ms,
            self.plan.reps,
            self.notes.iter().map(|n| json_str(n)).collect::<Vec<_>>().join(","),
            runs.join(",\n")
        )
    }

    /// `messages-latency.png` (median p50, p99 and max per row) and
    /// `messages-cdf.png` (each row's latencies over all repetitions, as
    /// the share of messages delivered within x ms, on a log-2 axis).
    pub fn charts(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let rows = self.rows();
        let names: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
        let med = |q: f64| -> Vec<f64> {
            rows.iter().map(|row| median(&self.runs_of(row).map(|r| r.p(q)).collect::<Vec<f64>>())).collect()
        };
        let bars = dir.join("messages-latency.png");
        let what = format!("{}: one-way latency", self.short_title());
        manyfold_plot::bars(
            &bars,
            &what,
            "ms (median of the repetitions)",
            &names,
            &[("p50".into(), med(50.0)), ("p99".into(), med(99.0)), ("max".into(), med(100.0))],
        )?;
        let cdf = dir.join("messages-cdf.png");
        let series: Vec<(String, Vec<(f64, f64)>)> = rows
            .iter()
            .map(|row| {
                let runs: Vec<&RunResult> = self.runs_of(row).collect();
                let all =
                    stats::sorted(&runs.iter().flat_map(|r| r.latencies_ms.iter().copied()).collect::<Vec<f64>>());
                let n: usize = runs.iter().map(|r| r.expected).sum();
                let pts = cdf_points()
                    .into_iter()
                    .map(|q| (percentile(&all, n, q), q / 100.0))
                    .filter(|(x, _)| x.is_finite() && *x > 0.0)
                    .collect();
                (row.to_string(), pts)
            })
            .collect();
        manyfold_plot::lines_log2_x(
            &cdf,
            &format!("{}: latency, all reps", self.short_title()),
            "one-way latency, ms (log scale)",
            "share of messages delivered within",
            &series,
        )?;
        Ok(vec![bars, cdf])
    }
}

/// The quantiles the CDF chart draws: every 5% up to 90%, then finer
/// toward the tail.
fn cdf_points() -> Vec<f64> {
    let mut q: Vec<f64> = (1..=18).map(|i| i as f64 * 5.0).collect();
    q.extend([92.0, 94.0, 96.0, 97.0, 98.0, 99.0, 99.5, 99.8, 100.0]);
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_and_count_missing_messages_as_late() {
        let v: Vec<f64> = (1..=100).map(|i| i as f64).collect();
        assert_eq!(percentile(&v, 100, 50.0), 50.0);
        assert_eq!(percentile(&v, 100, 99.0), 99.0);
        assert_eq!(percentile(&v, 100, 100.0), 100.0);
        // Two of 102 never arrived: p99 (rank 101) falls on one of them.
        assert_eq!(percentile(&v, 102, 99.0), f64::INFINITY);
        assert_eq!(percentile(&v, 102, 50.0), 51.0);
        assert!(percentile(&[], 0, 50.0).is_nan());
    }

    #[test]
    fn wire_overhead_counts_one_resend_of_each_dropped_packet_as_due() {
        let mut r = RunResult::failed("manyfold".into(), 0, String::new());
        r.error = None;
        let before = RelayStats::default();
        let mut after = RelayStats::default();
        after.a2b.forwarded_bytes = 1_050_000;
        after.a2b.dropped_bytes = 50_000;
        after.b2a.dropped_bytes = 7; // acks lost on the way back: not the sender's bytes
        r.set_relay(&before, &after);
        assert_eq!((r.wire_bytes, r.dropped_bytes), (1_100_000, 50_000));
        // 1 MB of messages + 50 kB dropped and sent again = the ideal; 1.1 MB sent is 1.0476 of it.
        assert!((r.wire_overhead(1_000_000) - 1_100_000.0 / 1_050_000.0).abs() < 1e-12);
        r.error = Some("timed out".into());
        assert!(r.wire_overhead(1_000_000).is_nan(), "a failed run has no figure");
    }

    #[test]
    fn cdf_quantiles_rise_to_the_maximum() {
        let q = cdf_points();
        assert!(q.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(q.last(), Some(&100.0));
    }
}
