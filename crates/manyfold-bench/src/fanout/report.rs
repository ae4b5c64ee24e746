//! The `fanout` figures: one result per run (parsed from the two
//! processes' stamps and `wait4` usage), then per file size a Markdown
//! table of medians with their (min–max) spread, one line per N and row,
//! ratios taken run by run within a repetition (BENCH.md), the two
//! targets judged, JSON and charts.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::ends::GROUP_PREFIX;
use super::{Kind, Plan};
use crate::child::{Finished, Usage};
use crate::loopback::human;
use crate::report::{cpu, header, json_fixed, json_str, json_usage as usage, mib, Figures, Runs};
use crate::stats::{self, med_range, median};
use crate::wan::probe::field;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub kind: Kind,
    pub peers: usize,
    pub bytes: u64,
    pub rep: usize,
    /// Sender's start stamp to the last receiver's verified copy, s.
    pub time_to_all: f64,
    pub send: Option<Usage>,
    pub recv: Option<Usage>,
    /// The manyfold sender's group line (`retransmissions=..` etc.).
    pub group: Option<String>,
    pub error: Option<String>,
}

impl RunResult {
    pub fn parse(kind: Kind, peers: usize, bytes: u64, sent: &Finished, got: &Finished) -> Result<RunResult> {
        let start = field(&sent.stdout, "start_ns").context("the sender stamped no start")?;
        let last = field(&got.stdout, "last_ns").context("the receivers stamped no end")?;
        let done = got.stdout.lines().filter(|l| l.contains("done_ns=")).count();
        if done != peers {
            bail!("{done} of {peers} receivers reported a verified copy");
        }
        if last < start {
            bail!("the last receiver finished before the sender started ({last} < {start})");
        }
        let group = sent.stdout.lines().find_map(|l| l.strip_prefix(GROUP_PREFIX)).map(|l| l.trim().to_string());
        Ok(RunResult {
            kind,
            peers,
            bytes,
            rep: 0,
            time_to_all: (last - start) / 1e9,
            send: Some(sent.usage),
            recv: Some(got.usage),
            group,
            error: None,
        })
    }

    pub fn failed(kind: Kind, peers: usize, bytes: u64, error: String) -> RunResult {
        let nan = f64::NAN;
        RunResult {
            kind,
            peers,
            bytes,
            rep: 0,
            time_to_all: nan,
            send: None,
            recv: None,
            group: None,
            error: Some(error),
        }
    }

    /// Aggregate goodput, MB/s: N copies of the file over the time-to-all.
    pub fn goodput(&self) -> f64 {
        self.peers as f64 * self.bytes as f64 / 1e6 / self.time_to_all
    }

    pub fn progress(&self) -> String {
        let what = format!("{} to {} ({})", self.kind.label(), self.peers, human(self.bytes));
        match &self.error {
            Some(e) => format!("{what}: FAILED: {e}"),
            None => format!(
                "{what}: all in {:.2} s, {:.0} MB/s aggregate, sender {:.2} CPU s, {:.0} MiB peak",
                self.time_to_all,
                self.goodput(),
                cpu(&self.send),
                mib(&self.send)
            ),
        }
    }

    fn group_field(&self, key: &str) -> Option<f64> {
        field(self.group.as_deref()?, key)
    }
}

/// Every run of one invocation.
pub type Report = Runs<Plan, RunResult>;

impl Report {
    /// The successful runs of one (size, N, row).
    fn ok(&self, bytes: u64, n: usize, kind: Kind) -> Vec<&RunResult> {
        self.runs.iter().filter(|r| r.bytes == bytes && r.peers == n && r.kind == kind && r.error.is_none()).collect()
    }

    /// manyfold's time ÷ TCP's, run by run within each repetition.
    fn time_ratios(&self, bytes: u64, n: usize) -> Vec<f64> {
        let time = |r: &&RunResult| (r.rep, r.time_to_all);
        let tcp: Vec<(usize, f64)> = self.ok(bytes, n, Kind::Tcp).iter().map(time).collect();
        stats::ratios_by_rep(self.ok(bytes, n, Kind::Manyfold).iter().map(time), &tcp)
    }

    fn median_of(&self, bytes: u64, n: usize, kind: Kind, f: impl Fn(&RunResult) -> f64) -> f64 {
        median(&self.ok(bytes, n, kind).into_iter().map(f).collect::<Vec<f64>>())
    }

    /// A row's name: manyfold's says when it ran on one thread.
    fn label(&self, kind: Kind) -> String {
        match kind {
            Kind::Manyfold if self.plan.one_thread => format!("{}, one-thread runtime", kind.label()),
            _ => kind.label().to_string(),
        }
    }

    fn row(&self, bytes: u64, n: usize, kind: Kind) -> String {
        let runs = self.ok(bytes, n, kind);
        let total = self.runs.iter().filter(|r| r.bytes == bytes && r.peers == n && r.kind == kind).count();
        let col = |f: &dyn Fn(&RunResult) -> f64| runs.iter().map(|r| f(r)).collect::<Vec<f64>>();
        let (ratio, rss_ratio) = match kind {
            Kind::Manyfold => (med_range(&self.time_ratios(bytes, n), 2), self.rss_ratio(bytes, n, kind)),
            Kind::Tcp => ("1.00".into(), self.rss_ratio(bytes, n, kind)),
        };
        let group = |key: &'static str| move |r: &RunResult| r.group_field(key).unwrap_or(f64::NAN);
        let (outstanding, retrans) = match kind {
            Kind::Manyfold => {
                (med_range(&col(&group("outstanding_peak_mib")), 0), med_range(&col(&group("retransmissions")), 0))
            }
            Kind::Tcp => ("–".into(), "–".into()),
        };
        format!(
            "| {n} | {} | {} of {total} | {} | {} | {ratio} | {} | {} | {rss_ratio} | {outstanding} | {} | {} | {retrans} |\n",
            self.label(kind),
            runs.len(),
            med_range(&col(&|r| r.time_to_all), 2),
            med_range(&col(&|r| r.goodput()), 0),
            med_range(&col(&|r| cpu(&r.send)), 2),
            med_range(&col(&|r| mib(&r.send)), 0),
            med_range(&col(&|r| cpu(&r.recv)), 2),
            med_range(&col(&|r| mib(&r.recv)), 0),
        )
    }

    /// Median sender peak RSS at `n` ÷ that at N = 1, if N = 1 was run.
    fn rss_ratio(&self, bytes: u64, n: usize, kind: Kind) -> String {
        if !self.plan.peers.contains(&1) {
            return "–".into();
        }
        let one = self.median_of(bytes, 1, kind, |r| mib(&r.send));
        format!("{:.2}", self.median_of(bytes, n, kind, |r| mib(&r.send)) / one)
    }

    /// The two targets for one file size.
    fn targets(&self, bytes: u64) -> String {
        let mut out = String::new();
        let verdict = |ok: bool| if ok { "met" } else { "missed" };
        let mut per_n = Vec::new();
        for &n in &self.plan.peers {
            let r = self.time_ratios(bytes, n);
            if !r.is_empty() {
                per_n.push(format!("N = {n}: {:.2}× ({})", median(&r), verdict(median(&r) <= 1.0)));
            }
        }
        out += &format!(
            "Target, time to all ≤ the TCP fan-out's (median of manyfold ÷ TCP, same rep): {}.\n",
            per_n.join("; ")
        );
        let big = self.plan.peers.iter().copied().max().unwrap_or(1);
        if self.plan.peers.contains(&1) && big > 1 {
            let one = self.median_of(bytes, 1, Kind::Manyfold, |r| mib(&r.send));
            let at = self.median_of(bytes, big, Kind::Manyfold, |r| mib(&r.send));
            out += &format!(
                "Target, manyfold sender peak RSS at N = {big} ≤ 1.2 × at N = 1: {at:.0} MiB against {one:.0} MiB = {:.2}× ({}).\n",
                at / one,
                verdict(at / one <= 1.2)
            );
        }
        out
    }
}

impl Figures for Report {
    fn failures(&self) -> Vec<String> {
        self.runs.iter().filter_map(|r| Some(format!("{}: {}", r.progress(), r.error.as_ref()?))).collect()
    }

    fn markdown(&self) -> String {
        let p = &self.plan;
        let mut out = String::new();
        for &bytes in &p.sizes {
            out += &format!("### fanout: {} to N receivers over 127.0.0.1\n\n", human(bytes));
            let sizes = format!(
                "{} ({bytes} bytes) file, messages of {}, N = {}, {} rep(s)",
                human(bytes),
                human(p.chunk as u64),
                p.peers.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
                p.reps
            );
            out += &header(&sizes, p.seed, &self.load_before, &self.load_after);
            out += "\n\n| N | row | runs | time to all s | aggregate goodput MB/s | time ÷ TCP's (same rep) | sender CPU s | sender peak RSS MiB | sender RSS ÷ at N = 1 | group buffer peak MiB | receivers' CPU s | receivers' peak RSS MiB | retransmissions |\n";
            out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
            for &n in &p.peers {
                for kind in [Kind::Manyfold, Kind::Tcp] {
                    out += &self.row(bytes, n, kind);
                }
            }
            out += "\n";
            out += &self.targets(bytes);
            out += "\n";
        }
        out += &format!(
            "Each run: one receiver process hosting all N receivers (each hashes what arrives with BLAKE3 and fails the run on a difference; nothing is written to disk) and one sender process reading the file from disk (page cache). \
             manyfold: one group (mode All, GroupConfig defaults: 64 MiB shared send buffer) sending {}-byte messages, each read into one `Bytes` shared by every peer, then `close` (every peer acknowledged all and the FIN); library defaults otherwise (BBR). \
             TCP: N threads, one connection each, each re-reading the file in 1 MiB reads (its own buffer) and waiting for its receiver's \"ok\"; kernel default congestion control. \
             Time to all: the sender's CLOCK_MONOTONIC stamp before connecting to the last receiver's stamp after its hash matched. Aggregate goodput = N × size / time (MB = 10^6 bytes). CPU (user + sys) and peak RSS from wait4(2) per process. \
             Group buffer peak: the most bytes of group messages not yet acknowledged by every peer (`GroupStats::outstanding_bytes`, read after each send), i.e. what the sender holds of the file. \
             Medians of the repetitions with (min–max); rows alternate manyfold, TCP for each N within a repetition. {}\n",
            p.chunk,
            if p.one_thread {
                format!(
                    "manyfold's sender and receiver processes run on a current-thread tokio runtime (`--one-thread`: the driver and the application's tasks on one thread); the TCP receivers on the multi-thread one ({} workers here), the TCP sender on plain threads.",
                    crate::runtime_workers()
                )
            } else {
                format!(
                    "manyfold's processes and the TCP receivers run a multi-thread tokio runtime ({} workers here; the application's work as a task on them); the TCP sender plain threads.",
                    crate::runtime_workers()
                )
            }
        );
        out
    }

    fn json(&self) -> String {
        let fields = format!(
            "\"seed\":{},\"chunk\":{},\"one_thread\":{}",
            self.plan.seed, self.plan.chunk, self.plan.one_thread
        );
        self.json_document("fanout", &fields, |r| {
            let num = |v: f64| json_fixed(v, 6);
            format!(
                "{{\"row\":{},\"peers\":{},\"bytes\":{},\"rep\":{},\"time_to_all_s\":{},\"goodput_mb_s\":{},\"sender\":{},\"receivers\":{},\"group\":{},\"error\":{}}}",
                json_str(&self.label(r.kind)),
                r.peers,
                r.bytes,
                r.rep,
                num(r.time_to_all),
                num(r.goodput()),
                usage(&r.send),
                usage(&r.recv),
                r.group.as_deref().map_or("null".into(), json_str),
                r.error.as_deref().map_or("null".into(), json_str),
            )
        })
    }

    /// Time-to-all and sender peak RSS against N, one line per row and
    /// size (x on a log-2 axis: N = 1, 4, 16, 64).
    fn charts(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let series = |f: &dyn Fn(&RunResult) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
            let mut s = Vec::new();
            for &bytes in &self.plan.sizes {
                for kind in [Kind::Manyfold, Kind::Tcp] {
                    let pts = self.plan.peers.iter().map(|&n| (n as f64, self.median_of(bytes, n, kind, f))).collect();
                    s.push((format!("{}, {}", self.label(kind), human(bytes)), pts));
                }
            }
            s
        };
        let time = dir.join("fanout-time.png");
        manyfold_plot::lines_log2_x(
            &time,
            "fanout over 127.0.0.1: time until every receiver has the file",
            "receivers N",
            &format!("time to all, s (median of {})", self.plan.reps),
            &series(&|r| r.time_to_all),
        )?;
        let rss = dir.join("fanout-rss.png");
        manyfold_plot::lines_log2_x(
            &rss,
            "fanout over 127.0.0.1: sender peak RSS",
            "receivers N",
            &format!("sender peak RSS, MiB (median of {})", self.plan.reps),
            &series(&|r| mib(&r.send)),
        )?;
        Ok(vec![time, rss])
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn finished(stdout: &str, cpu_ms: u64, rss_kib: u64) -> Finished {
        let usage = Usage { wall: Duration::from_secs(1), cpu: Duration::from_millis(cpu_ms), max_rss_kib: rss_kib };
        Finished { usage, stdout: stdout.into() }
    }

    fn plan() -> Plan {
        Plan {
            sizes: vec![1000],
            peers: vec![1, 2],
            reps: 1,
            chunk: 100,
            seed: 1,
            limit: Duration::from_secs(9),
            one_thread: false,
        }
    }

    #[test]
    fn time_to_all_runs_from_the_senders_stamp_to_the_last_receivers() {
        let sent = finished("start_ns=1000000000\ngroup closed_ns=5 retransmissions=7 srtt_ms_max=0.1\n", 300, 20480);
        let got = finished("receiver=0 done_ns=1200000000\nreceiver=1 done_ns=1500000000\nlast_ns=1500000000\n", 0, 0);
        let r = RunResult::parse(Kind::Manyfold, 2, 1000, &sent, &got).unwrap();
        assert!((r.time_to_all - 0.5).abs() < 1e-9);
        assert!((r.goodput() - 2.0 * 1000.0 / 1e6 / 0.5).abs() < 1e-9);
        assert_eq!(r.group_field("retransmissions"), Some(7.0));
        // One receiver short: not a number.
        assert!(RunResult::parse(Kind::Manyfold, 3, 1000, &sent, &got).is_err());
    }

    #[test]
    fn table_judges_both_targets() {
        let mut report = Report::new(&plan());
        for (kind, n, secs, rss) in [
            (Kind::Manyfold, 1, 2.0, 100),
            (Kind::Tcp, 1, 1.0, 10),
            (Kind::Manyfold, 2, 1.0, 110),
            (Kind::Tcp, 2, 2.0, 20),
        ] {
            let mut r = RunResult::failed(kind, n, 1000, String::new());
            r.error = None;
            r.time_to_all = secs;
            r.send = Some(Usage { wall: Duration::ZERO, cpu: Duration::ZERO, max_rss_kib: rss * 1024 });
            report.runs.push(r);
        }
        report.finish();
        let md = report.markdown();
        assert!(md.contains("N = 1: 2.00× (missed); N = 2: 0.50× (met)"), "{md}");
        assert!(md.contains("at N = 2 ≤ 1.2 × at N = 1: 110 MiB against 100 MiB = 1.10× (met)"), "{md}");
        assert!(report.json().contains("\"row\":\"N × kernel TCP\",\"peers\":2"));
    }
}
