//! The fairness figures and their output: each flow's goodput over the
//! steady part of a run, its share, Jain's index and the sum's fraction of
//! the link; a Markdown report naming the command, date, machine and link
//! (BENCH.md), the same with every per-interval series as JSON, and one
//! chart per run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::runner::Plan;
use super::stream::{json_f64, json_u64};
use crate::child::Usage;
use crate::report::{json_num as num, json_str};
use crate::stats::med_range;

/// One flow's reports.
#[derive(Debug, Clone)]
pub struct FlowResult {
    pub name: String,
    /// Bytes delivered in order to the receiving application, per interval.
    pub bins: Vec<u64>,
    /// Bytes the receiver compared with the stream (all of them, including
    /// those after the run's end).
    pub verified: u64,
    /// How late the sender started, ms.
    pub late_ms: f64,
    /// The sender's summary line (JSON; manyfold adds its connection stats).
    pub sender: String,
    pub send: Usage,
    pub recv: Usage,
}

/// The relay's counters over one run (direction a→b, the data's).
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkCounters {
    pub forwarded: u64,
    /// Tail drops at the bottleneck queue: the congestion signal the flows
    /// share.
    pub queue_drops: u64,
    /// Packets the kernel dropped in front of the relay (its TUN ring
    /// overflowed): non-zero means the emulator fell behind, not the link.
    pub ring_drops: u64,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunData {
    pub flows: Vec<FlowResult>,
    pub link: LinkCounters,
}

/// A run's figures over the steady window.
#[derive(Debug, Clone)]
pub struct Figures {
    pub goodput_bps: Vec<f64>,
    pub shares: Vec<f64>,
    /// Slowest and fastest interval of each flow within the window, bit/s.
    pub range_bps: Vec<(f64, f64)>,
    pub jain: f64,
    pub sum_of_link: f64,
}

/// One run of one pair: its data and figures, or why it failed.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub pair: String,
    pub rep: usize,
    pub data: Option<RunData>,
    pub figures: Option<Figures>,
    pub error: Option<String>,
}

/// Jain's fairness index (Jain, Chiu, Hawe 1984): (Σx)² / (n·Σx²); 1 when
/// all shares are equal, 1/n when one flow has everything. NaN when every
/// x is 0 (no share to compare).
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (xs.len() as f64 * squares)
}

/// Index of the first interval that starts at or after `warmup` seconds.
pub fn first_steady(warmup: f64, interval: f64) -> usize {
    (warmup / interval - 1e-9).ceil().max(0.0) as usize
}

/// Goodput in bit/s of the intervals from `first` on.
pub fn goodput_bps(bins: &[u64], first: usize, interval: f64) -> f64 {
    let window = bins.get(first..).unwrap_or(&[]);
    if window.is_empty() {
        return f64::NAN;
    }
    window.iter().sum::<u64>() as f64 * 8.0 / (window.len() as f64 * interval)
}

impl Figures {
    pub fn of(flows: &[FlowResult], plan: &Plan) -> Figures {
        let first = first_steady(plan.warmup, plan.interval);
        let goodput_bps: Vec<f64> = flows.iter().map(|f| goodput_bps(&f.bins, first, plan.interval)).collect();
        let sum: f64 = goodput_bps.iter().sum();
        let shares = goodput_bps.iter().map(|g| if sum > 0.0 { g / sum } else { f64::NAN }).collect();
        let range_bps = flows
            .iter()
            .map(|f| {
                let rates = f.bins.get(first..).unwrap_or(&[]).iter().map(|b| *b as f64 * 8.0 / plan.interval);
                rates.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| (lo.min(r), hi.max(r)))
            })
            .collect();
        Figures {
            jain: jain(&goodput_bps),
            sum_of_link: sum / plan.link.rate_bps as f64,
            goodput_bps,
            shares,
            range_bps,
        }
    }
}

impl RunResult {
    pub fn new(pair: String, rep: usize, data: RunData, plan: &Plan) -> RunResult {
        let figures = Figures::of(&data.flows, plan);
        RunResult { pair, rep, data: Some(data), figures: Some(figures), error: None }
    }

    pub fn failed(pair: String, rep: usize, error: String) -> RunResult {
        RunResult { pair, rep, data: None, figures: None, error: Some(error) }
    }

    /// The line printed to stderr as each run finishes.
    pub fn progress_line(&self) -> String {
        match &self.figures {
            Some(f) => format!(
                "rep {} {}: {:.1} + {:.1} Mbit/s, Jain {:.3}, {:.1}% of the link",
                self.rep + 1,
                self.pair,
                f.goodput_bps[0] / 1e6,
                f.goodput_bps.get(1).copied().unwrap_or(f64::NAN) / 1e6,
                f.jain,
                f.sum_of_link * 100.0
            ),
            None => format!("rep {} {}: failed", self.rep + 1, self.pair),
        }
    }
}

/// The whole scenario's results.
#[derive(Debug)]
pub struct Report {
    plan: Plan,
    command: String,
    date: String,
    kernel: String,
    nproc: usize,
    load_before: String,
    load_after: String,
    pub runs: Vec<RunResult>,
}

fn mbit(bps: f64) -> String {
    if bps.is_finite() {
        format!("{:.1}", bps / 1e6)
    } else {
        "–".into()
    }
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:.0}%", x * 100.0)
    } else {
        "–".into()
    }
}

fn pct1(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", x * 100.0)
    } else {
        "–".into()
    }
}

fn fixed3(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "–".into()
    }
}

/// `rep1-manyfold-cubic-kernel-tcp-cubic`: a file name for a run.
fn slug(rep: usize, pair: &str) -> String {
    let mut s = format!("rep{}", rep + 1);
    let mut dash = true;
    s.push('-');
    for c in pair.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
            dash = false;
        } else if !dash {
            s.push('-');
            dash = true;
        }
    }
    s.trim_end_matches('-').to_string()
}

impl Report {
    pub fn new(plan: &Plan) -> Report {
        let args: Vec<String> = std::env::args().skip(1).collect();
        Report {
            plan: plan.clone(),
            command: format!("manyfold-bench {}", args.join(" ")),
            date: crate::sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            kernel: crate::sh("uname", &["-r"]),
            nproc: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            load_before: crate::report::load(),
            load_after: String::new(),
            runs: Vec::new(),
        }
    }

    /// Records the state of the machine after the runs.
    pub fn finish(&mut self) {
        self.load_after = crate::report::load();
    }

    /// Each failed run as `pair, rep N: why`.
    pub fn failures(&self) -> Vec<String> {
        self.runs
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}, rep {}: {e}", r.pair, r.rep + 1)))
            .collect()
    }

    fn link_label(&self) -> String {
        let l = &self.plan.link;
        let bdp = l.rate_bps as f64 / 8.0 * self.plan.rtt_ms / 1e3;
        let queue = if bdp > 0.0 { format!(" ({:.2} BDP)", l.queue_bytes as f64 / bdp) } else { String::new() };
        format!(
            "{}, RTT {} ms, tail-drop queue {} bytes{queue}, no random loss",
            crate::wan::rate_label(l.rate_bps),
            self.plan.rtt_ms,
            l.queue_bytes
        )
    }

    fn window_label(&self) -> String {
        let p = &self.plan;
        let from = first_steady(p.warmup, p.interval) as f64 * p.interval;
        format!(
            "{} s per run; goodput over {from}–{} s (the first {from} s skipped as warm-up); {} s intervals",
            p.secs, p.secs, p.interval
        )
    }

    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let p = &self.plan;
        let _ = writeln!(o, "### fairness: two flows through one bottleneck ({})", self.link_label());
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "`{}` · {} · nproc {} · kernel {} · link {} · {} · {} rep(s) · seed {} · load average before {}, after {}",
            self.command,
            self.date,
            self.nproc,
            self.kernel,
            self.link_label(),
            self.window_label(),
            p.reps,
            p.seed,
            self.load_before,
            self.load_after
        );
        let _ = writeln!(o);
        self.runs_table(&mut o);
        self.medians_table(&mut o);
        self.flows_table(&mut o);
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "Both flows of a run cross the same direction of the `wan` scenario's userspace relay between two network namespaces, so they share its one tail-drop queue (their acks share the other direction). \
             Both senders start at the same instant, write an endless seeded stream until the run's end and then stop at once, abandoning what they hold; each receiver compares every byte with the stream and counts bytes delivered in order per interval. \
             Goodput = those bytes × 8 / the steady window ({}); share = a flow's goodput / the pair's; Jain's index J = (Σx)² / (n·Σx²) over the two goodputs (1 = equal shares, 0.5 = one flow has everything); \
             \"sum, of link\" = both goodputs / the link rate, which counts whole IP packets, so headers keep payload about 3–4% below it (TCP: 1,448 of 1,500 bytes). \
             The kernel TCP + kernel TCP row is the reference: what two identical, well-understood flows get on this emulator. \
             CPU s/GB = user+sys seconds of the process per GB it moved (the receiver's includes the byte-by-byte check).",
            self.window_label()
        );
        let late: Vec<String> =
            self.runs
                .iter()
                .filter_map(|r| r.data.as_ref().map(|d| (r, d)))
                .flat_map(|(r, d)| {
                    d.flows.iter().filter(|f| f.late_ms > 100.0).map(move |f| {
                        format!("{}, rep {}: {} started {:.0} ms late", r.pair, r.rep + 1, f.name, f.late_ms)
                    })
                })
                .collect();
        if !late.is_empty() {
            let _ = writeln!(o);
            let _ = writeln!(o, "Late starts (the machine was busy; the flows did not start together):");
            for l in late {
                let _ = writeln!(o, "- {l}");
            }
        }
        let failures = self.failures();
        if !failures.is_empty() {
            let _ = writeln!(o);
            let _ = writeln!(o, "Failed runs:");
            for f in failures {
                let _ = writeln!(o, "- {f}");
            }
        }
        o
    }

    /// A line per run: each flow's goodput and share, Jain's index.
    fn runs_table(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "| pair (flow 1 + flow 2) | rep | flow 1 Mbit/s | flow 1 share | flow 2 Mbit/s | flow 2 share | Jain's index | sum, of link | bottleneck queue drops | TUN ring drops |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.runs {
            match (&r.figures, &r.data) {
                (Some(f), Some(d)) => {
                    let _ = writeln!(
                        o,
                        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                        r.pair,
                        r.rep + 1,
                        mbit(f.goodput_bps[0]),
                        pct(f.shares[0]),
                        mbit(f.goodput_bps.get(1).copied().unwrap_or(f64::NAN)),
                        pct(f.shares.get(1).copied().unwrap_or(f64::NAN)),
                        fixed3(f.jain),
                        pct1(f.sum_of_link),
                        d.link.queue_drops,
                        d.link.ring_drops
                    );
                }
                _ => {
                    let _ = writeln!(o, "| {} | {} | failed | – | – | – | – | – | – | – |", r.pair, r.rep + 1);
                }
            }
        }
    }

    /// With several repetitions, each pair's median (min–max) figures.
    fn medians_table(&self, o: &mut String) {
        let p = &self.plan;
        if p.reps > 1 {
            let _ = writeln!(o);
            let _ = writeln!(o, "Over the {} repetitions, median (min–max):", p.reps);
            let _ = writeln!(o);
            let _ = writeln!(o, "| pair (flow 1 + flow 2) | runs | Jain's index | flow 1 share % | sum, of link % |");
            let _ = writeln!(o, "|---|---|---|---|---|");
            let mut pairs: Vec<&str> = Vec::new();
            for r in &self.runs {
                if !pairs.contains(&r.pair.as_str()) {
                    pairs.push(&r.pair);
                }
            }
            for pair in pairs {
                let figs: Vec<&Figures> =
                    self.runs.iter().filter(|r| r.pair == pair).filter_map(|r| r.figures.as_ref()).collect();
                let col = |f: &dyn Fn(&Figures) -> f64| figs.iter().map(|x| f(x)).collect::<Vec<f64>>();
                let _ = writeln!(
                    o,
                    "| {pair} | {} | {} | {} | {} |",
                    figs.len(),
                    med_range(&col(&|f| f.jain), 3),
                    med_range(&col(&|f| f.shares[0] * 100.0), 0),
                    med_range(&col(&|f| f.sum_of_link * 100.0), 0)
                );
            }
        }
    }

    /// A line per flow of each run: its goodput, range and costs.
    fn flows_table(&self, o: &mut String) {
        let _ = writeln!(o);
        let _ = writeln!(o, "Per flow:");
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "| pair (flow 1 + flow 2) | rep | flow | goodput Mbit/s | slowest–fastest interval Mbit/s | verified MB | sender CPU s/GB | receiver CPU s/GB | peak RSS MiB send / recv | sender at the end | started late ms |"
        );
        let _ = writeln!(o, "|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.runs {
            let (Some(f), Some(d)) = (&r.figures, &r.data) else { continue };
            for (i, flow) in d.flows.iter().enumerate() {
                let gb = flow.verified as f64 / 1e9;
                let per_gb =
                    |u: &Usage| if gb > 0.0 { format!("{:.1}", u.cpu.as_secs_f64() / gb) } else { "–".into() };
                let (lo, hi) = f.range_bps[i];
                let _ = writeln!(
                    o,
                    "| {} | {} | {} {} | {} | {}–{} | {:.1} | {} | {} | {:.0} / {:.0} | {} | {:.0} |",
                    r.pair,
                    r.rep + 1,
                    i + 1,
                    flow.name,
                    mbit(f.goodput_bps[i]),
                    mbit(lo),
                    mbit(hi),
                    flow.verified as f64 / 1e6,
                    per_gb(&flow.send),
                    per_gb(&flow.recv),
                    flow.send.max_rss_kib as f64 / 1024.0,
                    flow.recv.max_rss_kib as f64 / 1024.0,
                    sender_note(&flow.sender),
                    flow.late_ms
                );
            }
        }
    }

    pub fn json(&self) -> String {
        let p = &self.plan;
        let mut o = String::new();
        let _ = write!(
            o,
            "{{\"scenario\":\"fairness\",\"command\":{},\"date\":{},\"nproc\":{},\"kernel\":{},\"load_before\":{},\"load_after\":{},",
            json_str(&self.command),
            json_str(&self.date),
            self.nproc,
            json_str(&self.kernel),
            json_str(&self.load_before),
            json_str(&self.load_after)
        );
        let _ = write!(
            o,
            "\"link\":{{\"rate_bps\":{},\"rtt_ms\":{},\"queue_bytes\":{},\"loss\":0}},\"secs\":{},\"warmup\":{},\"first_steady_interval\":{},\"interval\":{},\"reps\":{},\"seed\":{},\"runs\":[",
            p.link.rate_bps,
            num(p.rtt_ms),
            p.link.queue_bytes,
            num(p.secs),
            num(p.warmup),
            first_steady(p.warmup, p.interval),
            num(p.interval),
            p.reps,
            p.seed
        );
        for (k, r) in self.runs.iter().enumerate() {
            if k > 0 {
                o.push(',');
            }
            let _ = write!(o, "{{\"pair\":{},\"rep\":{}", json_str(&r.pair), r.rep + 1);
            if let Some(e) = &r.error {
                let _ = write!(o, ",\"error\":{}}}", json_str(e));
                continue;
            }
            let (Some(f), Some(d)) = (&r.figures, &r.data) else {
                o.push('}');
                continue;
            };
            let _ = write!(
                o,
                ",\"jain\":{},\"sum_of_link\":{},\"relay_forwarded\":{},\"queue_drops\":{},\"ring_drops\":{},\"flows\":[",
                num(f.jain),
                num(f.sum_of_link),
                d.link.forwarded,
                d.link.queue_drops,
                d.link.ring_drops
            );
            for (i, flow) in d.flows.iter().enumerate() {
                if i > 0 {
                    o.push(',');
                }
                let bytes: Vec<String> = flow.bins.iter().map(u64::to_string).collect();
                let mbps: Vec<String> =
                    flow.bins.iter().map(|b| format!("{:.3}", *b as f64 * 8.0 / p.interval / 1e6)).collect();
                let sender = if flow.sender.starts_with('{') && flow.sender.ends_with('}') {
                    flow.sender.clone()
                } else {
                    json_str(&flow.sender)
                };
                let _ = write!(
                    o,
                    "{{\"flow\":{},\"name\":{},\"goodput_bps\":{},\"share\":{},\"verified_bytes\":{},\"late_ms\":{},\"send_cpu_s\":{},\"recv_cpu_s\":{},\"send_rss_kib\":{},\"recv_rss_kib\":{},\"sender\":{sender},\"bytes_per_interval\":[{}],\"mbps_per_interval\":[{}]}}",
                    i + 1,
                    json_str(&flow.name),
                    num(f.goodput_bps[i]),
                    num(f.shares[i]),
                    flow.verified,
                    num(flow.late_ms),
                    num(flow.send.cpu.as_secs_f64()),
                    num(flow.recv.cpu.as_secs_f64()),
                    flow.send.max_rss_kib,
                    flow.recv.max_rss_kib,
                    bytes.join(","),
                    mbps.join(",")
                );
            }
            o.push_str("]}");
        }
        o.push_str("]}\n");
        o
    }

    /// One chart per successful run: throughput per interval against time,
    /// one line per flow. Returns the files written.
    pub fn plot(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let p = &self.plan;
        let mut written = Vec::new();
        for r in &self.runs {
            let (Some(f), Some(d)) = (&r.figures, &r.data) else { continue };
            let series: Vec<(String, Vec<(f64, f64)>)> = d
                .flows
                .iter()
                .enumerate()
                .map(|(i, flow)| {
                    let points = flow
                        .bins
                        .iter()
                        .enumerate()
                        .map(|(k, b)| ((k as f64 + 0.5) * p.interval, *b as f64 * 8.0 / p.interval / 1e6))
                        .collect();
                    (format!("flow {}: {} ({} Mbit/s steady)", i + 1, flow.name, mbit(f.goodput_bps[i])), points)
                })
                .collect();
            let title = format!(
                "{} · rep {} · {}, RTT {} ms · Jain {} · sum {} of link",
                r.pair,
                r.rep + 1,
                crate::wan::rate_label(p.link.rate_bps),
                p.rtt_ms,
                fixed3(f.jain),
                pct1(f.sum_of_link)
            );
            let path = dir.join(format!("fairness-{}.png", slug(r.rep, &r.pair)));
            manyfold_plot::lines(
                &path,
                &title,
                &format!(
                    "time since the start, s (figures from {} s on)",
                    first_steady(p.warmup, p.interval) as f64 * p.interval
                ),
                &format!("goodput per {} s, Mbit/s", p.interval),
                &series,
            )?;
            written.push(path);
        }
        Ok(written)
    }
}

/// The sender's connection state at the end, for manyfold flows
/// (retransmissions, smoothed RTT); kernel TCP senders report none.
fn sender_note(line: &str) -> String {
    match (json_u64(line, "retransmissions"), json_f64(line, "srtt_ms")) {
        (Some(retx), Some(srtt)) => {
            let cwnd = json_u64(line, "cwnd").map(|c| format!(", cwnd {:.0} kB", c as f64 / 1e3)).unwrap_or_default();
            format!("{retx} retransmissions, srtt {srtt:.0} ms{cwnd}")
        }
        _ => "–".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_a_monopoly() {
        assert!((jain(&[50.0, 50.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[100.0, 0.0]) - 0.5).abs() < 1e-12);
        assert!((jain(&[30.0, 10.0]) - 0.8).abs() < 1e-12);
        assert!(jain(&[0.0, 0.0]).is_nan());
    }

    #[test]
    fn steady_window_skips_the_warmup_intervals() {
        assert_eq!(first_steady(10.0, 1.0), 10);
        assert_eq!(first_steady(0.0, 1.0), 0);
        assert_eq!(first_steady(1.0, 0.5), 2);
        assert_eq!(first_steady(1.2, 0.5), 3);
        // 4 intervals of 1 s from the second on: 4 MB in 3 s.
        let bins = [9_000_000, 1_000_000, 1_000_000, 2_000_000];
        assert!((goodput_bps(&bins, 1, 1.0) - 4e6 * 8.0 / 3.0).abs() < 1e-6);
        assert!(goodput_bps(&bins, 4, 1.0).is_nan());
    }

    #[test]
    fn slugs_and_json_strings_are_safe() {
        assert_eq!(slug(0, "manyfold (cubic) + kernel TCP cubic"), "rep1-manyfold-cubic-kernel-tcp-cubic");
        assert_eq!(json_str("a \"b\"\n\\"), "\"a \\\"b\\\"\\n\\\\\"");
        assert_eq!(num(f64::NAN), "null");
    }

    #[test]
    fn sender_note_reads_manyfold_stats_and_leaves_tcp_blank() {
        let mf = "{\"written\":1,\"late_ms\":0.5,\"retransmissions\":12,\"lost_packets\":12,\"rto_expiries\":0,\"srtt_ms\":61.2,\"min_rtt_ms\":50.1,\"cwnd\":625000}";
        assert_eq!(sender_note(mf), "12 retransmissions, srtt 61 ms, cwnd 625 kB");
        assert_eq!(sender_note("{\"written\":1,\"late_ms\":0.5}"), "–");
    }
}
