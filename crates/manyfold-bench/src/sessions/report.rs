//! The `sessions` figures: one result per run (parsed from the two
//! processes' report lines and `wait4` usage), then one Markdown table per
//! part with medians and their (min–max) spread, ratios to TCP taken run
//! by run within a repetition (BENCH.md), the targets judged,
//! JSON and charts.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use super::{Kind, Plan, Rto, Spec};
use crate::child::{Finished, Usage};
use crate::loopback::human;
use crate::report::{cpu, header, json_num as num, json_str, json_usage as usage, mib, Figures, Runs};
use crate::stats::{self, med_range, median};
use crate::wan::probe::field;

/// The scenario's parts.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// N × concurrency, manyfold beside TCP.
    Grid,
    /// Paper 02 §4.3: request sizes.
    Sizes,
    /// Paper 02 §4.4: retransmission timeouts, with and without loss.
    Rto,
    /// manyfold with and without 0-RTT tokens over an emulated round trip.
    Link,
    /// One listener holding many idle sessions: memory per session.
    Hold,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Grid => "grid",
            Part::Sizes => "sizes",
            Part::Rto => "rto",
            Part::Link => "link",
            Part::Hold => "hold",
        }
    }
}

/// What the hold measured.
#[derive(Debug, Clone, Default)]
pub struct HoldFigures {
    /// Sessions the clients established (connect returned, hello written).
    pub established: f64,
    pub failures: f64,
    pub first_error: String,
    pub establish_s: f64,
    /// Sessions the server held (hello read) when it measured.
    pub held: f64,
    /// Connections the server's engine held then.
    pub conns: f64,
    pub rss_before_kib: f64,
    pub rss_held_kib: f64,
}

impl HoldFigures {
    pub fn parse(client: &str, server: &str) -> Result<HoldFigures> {
        let line = |text: &str, prefix: &str| -> Result<String> {
            let l = text.lines().find(|l| l.starts_with(prefix));
            Ok(l.with_context(|| format!("no `{prefix}` line in {text:?}"))?.to_string())
        };
        let (c, s) = (line(client, "held ")?, line(server, "hold ")?);
        let f = |l: &str, k: &str| field(l, k).with_context(|| format!("no {k} in {l:?}"));
        Ok(HoldFigures {
            established: f(&c, "ok")?,
            failures: f(&c, "failures")?,
            first_error: first_error(client, "first_error:"),
            establish_s: f(&c, "establish_s")?,
            held: f(&s, "held")?,
            conns: f(&s, "conns")?,
            rss_before_kib: f(&s, "rss_before_kib")?,
            rss_held_kib: f(&s, "rss_held_kib")?,
        })
    }

    /// The server's RSS growth per held session, bytes.
    pub fn per_session(&self) -> f64 {
        (self.rss_held_kib - self.rss_before_kib) * 1024.0 / self.held
    }
}

/// The text after `prefix` on its line, if any.
fn first_error(text: &str, prefix: &str) -> String {
    text.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or("").trim().to_string()
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub spec: Spec,
    pub rep: usize,
    /// The load generator's `result` line.
    pub result: String,
    pub first_error: String,
    /// The server's `server` line.
    pub server_line: String,
    pub server_error: String,
    pub server: Option<Usage>,
    pub client: Option<Usage>,
    pub hold: Option<HoldFigures>,
    /// Kernel TCP sockets in TIME-WAIT on 127.0.0.1 as the run started.
    pub time_waits: usize,
    /// CPU seconds the machine spent in other processes during the run
    /// (its user + system time less the server's and client's): noise.
    pub other_cpu_s: f64,
    /// The lab process's own RSS as the run started, KiB: a floor under
    /// its children's peak RSS (wait4 counts the parent's pages at the fork).
    pub lab_rss_kib: u64,
    /// The run itself failed (a process did): no figures.
    pub error: Option<String>,
}

impl RunResult {
    pub fn parse(spec: &Spec, client: &Finished, server: &Finished) -> Result<RunResult> {
        let result = client.stdout.lines().find_map(|l| l.strip_prefix("result ")).map(str::to_string);
        let result = result.context("the load generator printed no result")?;
        let server_line = server.stdout.lines().find_map(|l| l.strip_prefix("server ")).map(str::to_string);
        let server_line = server_line.context("the server printed no counters")?;
        for k in ["ok", "failures", "rps", "p50_ms", "p99_ms", "max_ms"] {
            if field(&result, k).is_none() {
                bail!("no {k} in the load generator's result {result:?}");
            }
        }
        Ok(RunResult {
            spec: *spec,
            rep: 0,
            result,
            first_error: first_error(&client.stdout, "first_error:"),
            server_line,
            server_error: first_error(&server.stdout, "server_error:"),
            server: Some(server.usage),
            client: Some(client.usage),
            hold: None,
            time_waits: 0,
            other_cpu_s: f64::NAN,
            lab_rss_kib: 0,
            error: None,
        })
    }

    pub fn held(plan: &Plan, hello: usize, hold: HoldFigures, client: Usage, server: Usage) -> RunResult {
        let spec = Spec {
            part: Part::Hold,
            kind: Kind::Manyfold,
            requests: plan.hold,
            concurrency: plan.hold_concurrency,
            size: hello,
            rto: Rto::default(),
            loss: 0.0,
            rtt_ms: 0,
        };
        let mut r = RunResult::failed(&spec, String::new());
        r.error = None;
        r.first_error = hold.first_error.clone();
        r.hold = Some(hold);
        r.server = Some(server);
        r.client = Some(client);
        r
    }

    pub fn failed(spec: &Spec, error: String) -> RunResult {
        RunResult {
            spec: *spec,
            rep: 0,
            result: String::new(),
            first_error: String::new(),
            server_line: String::new(),
            server_error: String::new(),
            server: None,
            client: None,
            hold: None,
            time_waits: 0,
            other_cpu_s: f64::NAN,
            lab_rss_kib: 0,
            error: Some(error),
        }
    }

    /// A field of the load generator's result line (NaN if absent).
    pub fn get(&self, key: &str) -> f64 {
        field(&self.result, key).unwrap_or(f64::NAN)
    }

    /// A field of the server's counters (NaN if absent).
    pub fn server_get(&self, key: &str) -> f64 {
        field(&self.server_line, key).unwrap_or(f64::NAN)
    }

    /// Datagrams the client endpoints sent and received per completed session (manyfold).
    pub fn datagrams_per_session(&self) -> f64 {
        (self.get("datagrams_sent") + self.get("datagrams_received")) / self.get("ok")
    }

    fn what(&self) -> String {
        let s = &self.spec;
        match s.part {
            Part::Hold => format!("{} sessions held by one listener, {}-byte hello", s.requests, s.size),
            Part::Rto if s.kind == Kind::Manyfold => format!(
                "{} × {}, min_rto {} ms, initial_rto {} ms, loss {}%, {} at once",
                s.requests,
                human(s.size as u64),
                s.rto.min_rto_ms,
                s.rto.initial_rto_ms,
                s.loss,
                s.concurrency
            ),
            _ => format!("{} {} × {}, {} at once", s.kind.label(), s.requests, human(s.size as u64), s.concurrency),
        }
    }

    pub fn progress(&self) -> String {
        if let Some(e) = &self.error {
            return format!("{} {}: FAILED: {e}", self.spec.part.name(), self.what());
        }
        if let Some(h) = &self.hold {
            return format!(
                "{}: {} established in {:.1} s ({} failed), server held {}, RSS {:.0} → {:.0} MiB, {:.0} B per session",
                self.what(),
                h.established,
                h.establish_s,
                h.failures,
                h.held,
                h.rss_before_kib / 1024.0,
                h.rss_held_kib / 1024.0,
                h.per_session()
            );
        }
        format!(
            "{} {}: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms, {} failed{}, server {:.2} CPU s {:.0} MiB, client {:.2} CPU s, other processes {:.2} CPU s",
            self.spec.part.name(),
            self.what(),
            self.get("rps"),
            self.get("p50_ms"),
            self.get("p99_ms"),
            self.get("max_ms"),
            self.get("failures"),
            if self.first_error.is_empty() { String::new() } else { format!(" (first: {})", self.first_error) },
            cpu(&self.server),
            mib(&self.server),
            cpu(&self.client),
            self.other_cpu_s,
        )
    }
}

/// Every run of one invocation.
pub type Report = Runs<Plan, RunResult>;

/// Which runs make one line of a table.
type Select<'a> = &'a dyn Fn(&Spec) -> bool;

/// A column of a table computed from the runs of one line.
type Column = fn(&[&RunResult]) -> String;

impl Report {
    fn ok(&self, sel: Select) -> Vec<&RunResult> {
        self.runs.iter().filter(|r| sel(&r.spec) && r.error.is_none()).collect()
    }

    /// Median requests/s of the selected runs.
    fn median_of(&self, sel: Select, f: impl Fn(&RunResult) -> f64) -> f64 {
        median(&self.ok(sel).into_iter().map(f).collect::<Vec<f64>>())
    }

    /// manyfold's requests/s ÷ TCP's, run by run within each repetition;
    /// `tcp` selects the anchor for the manyfold runs `sel` selects.
    fn ratios(&self, sel: Select, tcp: Select) -> Vec<f64> {
        let rps = |r: &&RunResult| (r.rep, r.get("rps"));
        let anchors: Vec<(usize, f64)> = self.ok(tcp).iter().map(rps).collect();
        stats::ratios_by_rep(self.ok(sel).iter().map(rps), &anchors)
    }

    /// The figures of one table line (after its leading cells): runs,
    /// requests/s, ratio, latencies, failures, and `extra` columns.
    fn cells(&self, sel: Select, tcp: Select, extra: &[Column]) -> String {
        let runs = self.ok(sel);
        let total = self.runs.iter().filter(|r| sel(&r.spec)).count();
        let col = |f: &dyn Fn(&RunResult) -> f64| runs.iter().map(|r| f(r)).collect::<Vec<f64>>();
        let is_anchor = runs.first().is_some_and(|r| r.spec.kind == Kind::Tcp);
        let ratio = if is_anchor { "1.00".into() } else { med_range(&self.ratios(sel, tcp), 2) };
        let failures: f64 = col(&|r| r.get("failures")).iter().sum();
        let server_failures: f64 = col(&|r| r.server_get("failures")).iter().sum();
        let mut out = format!(
            "{} of {total} | {} | {ratio} | {} | {} | {} | {failures}{} |",
            runs.len(),
            med_range(&col(&|r| r.get("rps")), 0),
            med_range(&col(&|r| r.get("p50_ms")), 2),
            med_range(&col(&|r| r.get("p99_ms")), 2),
            med_range(&col(&|r| r.get("max_ms")), 1),
            if server_failures > 0.0 { format!(" (server {server_failures})") } else { String::new() },
        );
        for f in extra {
            out += &format!(" {} |", f(&runs));
        }
        out + "\n"
    }

    fn server_cpu(rs: &[&RunResult]) -> String {
        med_range(&rs.iter().map(|r| cpu(&r.server)).collect::<Vec<_>>(), 2)
    }

    fn server_rss(rs: &[&RunResult]) -> String {
        med_range(&rs.iter().map(|r| mib(&r.server)).collect::<Vec<_>>(), 0)
    }

    fn client_cpu(rs: &[&RunResult]) -> String {
        med_range(&rs.iter().map(|r| cpu(&r.client)).collect::<Vec<_>>(), 2)
    }

    fn other_cpu(rs: &[&RunResult]) -> String {
        med_range(&rs.iter().map(|r| r.other_cpu_s).collect::<Vec<_>>(), 2)
    }

    fn client_rss(rs: &[&RunResult]) -> String {
        med_range(&rs.iter().map(|r| mib(&r.client)).collect::<Vec<_>>(), 0)
    }

    /// A manyfold-only column ("–" on TCP's lines).
    fn mf_column(rs: &[&RunResult], digits: usize, f: impl Fn(&RunResult) -> f64) -> String {
        if rs.first().is_none_or(|r| !r.spec.kind.is_manyfold()) {
            return "–".into();
        }
        med_range(&rs.iter().map(|r| f(r)).collect::<Vec<f64>>(), digits)
    }

    fn datagrams(rs: &[&RunResult]) -> String {
        Self::mf_column(rs, 2, RunResult::datagrams_per_session)
    }

    fn retransmissions(rs: &[&RunResult]) -> String {
        Self::mf_column(rs, 0, |r| r.get("retransmissions"))
    }

    fn rto_expiries(rs: &[&RunResult]) -> String {
        Self::mf_column(rs, 0, |r| r.get("rto_expiries"))
    }

    fn grid(&self) -> String {
        let p = &self.plan;
        let mut out = format!(
            "### sessions: N clients of {} over 127.0.0.1, manyfold beside kernel TCP\n\n",
            human(p.size as u64)
        );
        out += &self.header_line(&format!(
            "{} requests and replies, N = {}, concurrency {}, {} rep(s)",
            human(p.size as u64),
            list(&p.requests),
            list(&p.concurrency),
            p.reps
        ));
        out += "| N | concurrency | row | runs | requests/s | ÷ TCP's (same rep) | p50 ms | p99 ms | max ms | failures | server CPU s | server peak RSS MiB | client CPU s | client peak RSS MiB | datagrams per session | retransmissions | RTO expiries | other processes' CPU s |\n";
        out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        let extra: [Column; 8] = [
            Self::server_cpu,
            Self::server_rss,
            Self::client_cpu,
            Self::client_rss,
            Self::datagrams,
            Self::retransmissions,
            Self::rto_expiries,
            Self::other_cpu,
        ];
        for &n in &p.requests {
            for &cc in &p.concurrency {
                let tcp = move |s: &Spec| {
                    s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == Kind::Tcp
                };
                for &kind in super::GRID_ROWS {
                    let sel = move |s: &Spec| {
                        s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == kind
                    };
                    out += &format!("| {n} | {cc} | {} | ", kind.label());
                    out += &self.cells(&sel, &tcp, &extra);
                }
            }
        }
        out += "\n";
        let (mut per, mut with_tokens, mut with_inline) = (Vec::new(), Vec::new(), Vec::new());
        for &n in &p.requests {
            for &cc in &p.concurrency {
                let sel = move |s: &Spec| {
                    s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == Kind::Manyfold
                };
                let tcp = move |s: &Spec| {
                    s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == Kind::Tcp
                };
                let spread = move |s: &Spec| {
                    s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == Kind::TcpSpread
                };
                let tokens = move |s: &Spec| {
                    s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == Kind::ManyfoldTokens
                };
                let inline = move |s: &Spec| {
                    s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == Kind::ManyfoldInline
                };
                let i = self.ratios(&inline, &tcp);
                if !i.is_empty() {
                    let m = median(&i);
                    let against = median(&self.ratios(&inline, &sel));
                    with_inline.push(format!(
                        "N = {n} at {cc}: {m:.2}× TCP ({}), {against:.2}× the plain manyfold row",
                        verdict(m >= 1.5)
                    ));
                }
                let t = self.ratios(&tokens, &tcp);
                if !t.is_empty() {
                    let m = median(&t);
                    with_tokens.push(format!("N = {n} at {cc}: {m:.2}× ({})", verdict(m >= 2.0)));
                }
                let r = self.ratios(&sel, &tcp);
                if !r.is_empty() {
                    let m = median(&r);
                    let against = median(&self.ratios(&sel, &spread));
                    per.push(format!(
                        "N = {n} at {cc}: {m:.2}× ({}; against TCP over 64 client addresses {against:.2}×, {})",
                        verdict(m >= 3.0),
                        verdict(against >= 3.0)
                    ));
                }
            }
        }
        out += &format!("Target, manyfold ≥ 3× TCP's requests/s (median of the per-rep ratios): {}.\n", per.join("; "));
        if !with_tokens.is_empty() {
            out += &format!(
                "Target (issue 21), manyfold with 0-RTT tokens ≥ 2× TCP's requests/s: {}.\n",
                with_tokens.join("; ")
            );
        }
        if !with_inline.is_empty() {
            out += &format!(
                "Target (issue 21), manyfold with an inline handler ≥ 1.5× TCP's requests/s (median of the per-rep ratios; beside it the same against the plain manyfold row of the same rep): {}.\n",
                with_inline.join("; ")
            );
        }
        let mf = |s: &Spec| s.part == Part::Grid && s.kind.is_manyfold();
        let failed: f64 = self.ok(&mf).iter().map(|r| r.get("failures")).sum();
        let sessions: f64 = self.ok(&mf).iter().map(|r| r.spec.requests as f64).sum();
        out += &format!(
            "Target, no failures: {failed} of {sessions} manyfold sessions failed ({}).\n\n",
            verdict(failed == 0.0 && sessions > 0.0)
        );
        out
    }

    fn sizes(&self) -> String {
        let p = &self.plan;
        let mut out = format!(
            "### sessions, paper 02 §4.3: {} requests of 64 B to 16 KiB (reply the same size)\n\n",
            p.sweep_requests
        );
        out += &self.header_line(&format!(
            "{} requests per run at concurrency {}, sizes {}, {} rep(s)",
            p.sweep_requests,
            p.sweep_concurrency,
            p.sweep_sizes.iter().map(|&b| human(b as u64)).collect::<Vec<_>>().join(", "),
            p.reps
        ));
        out += "| size | row | runs | requests/s | ÷ TCP's (same rep) | p50 ms | p99 ms | max ms | failures | server CPU s | server peak RSS MiB | client CPU s | client peak RSS MiB | datagrams per session | retransmissions | other processes' CPU s |\n";
        out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        let extra: [Column; 7] = [
            Self::server_cpu,
            Self::server_rss,
            Self::client_cpu,
            Self::client_rss,
            Self::datagrams,
            Self::retransmissions,
            Self::other_cpu,
        ];
        for &size in &p.sweep_sizes {
            let tcp = move |s: &Spec| s.part == Part::Sizes && s.size == size && s.kind == Kind::Tcp;
            for kind in [Kind::Manyfold, Kind::Tcp] {
                let sel = move |s: &Spec| s.part == Part::Sizes && s.size == size && s.kind == kind;
                out += &format!("| {} | {} | ", human(size as u64), kind.label());
                out += &self.cells(&sel, &tcp, &extra);
            }
        }
        out + "\n"
    }

    fn rto(&self) -> String {
        let p = &self.plan;
        let mut out = format!(
            "### sessions, paper 02 §4.4: retransmission timeouts, {} requests of {}\n\n",
            p.sweep_requests,
            human(p.size as u64)
        );
        out += &self.header_line(&format!(
            "{} requests per run at concurrency {}, loss 0 and {}% each way on the client endpoints, {} rep(s)",
            p.sweep_requests, p.sweep_concurrency, p.rto_loss, p.reps
        ));
        out += "| min_rto ms | initial_rto ms | loss each way | row | runs | requests/s | ÷ TCP's (same rep, no loss) | p50 ms | p99 ms | max ms | failures | datagrams per session | retransmissions | RTO expiries | server CPU s | client CPU s | other processes' CPU s |\n";
        out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        let tcp = |s: &Spec| s.part == Part::Rto && s.kind == Kind::Tcp;
        let extra: [Column; 6] = [
            Self::datagrams,
            Self::retransmissions,
            Self::rto_expiries,
            Self::server_cpu,
            Self::client_cpu,
            Self::other_cpu,
        ];
        out += "| – | – | 0% | kernel TCP (kernel's RTO) | ";
        out += &self.cells(&tcp, &tcp, &extra);
        let losses = if p.rto_loss > 0.0 { vec![0.0, p.rto_loss] } else { vec![0.0] };
        for &loss in &losses {
            for &rto in &p.rtos {
                let sel =
                    move |s: &Spec| s.part == Part::Rto && s.kind == Kind::Manyfold && s.rto == rto && s.loss == loss;
                out += &format!("| {} | {} | {loss}% | manyfold | ", rto.min_rto_ms, rto.initial_rto_ms);
                out += &self.cells(&sel, &tcp, &extra);
            }
        }
        out + "\n"
    }

    /// manyfold with and without tokens over the emulated round trip:
    /// latencies in round trips; the target is a p50 of one with tokens.
    fn link(&self) -> String {
        let p = &self.plan;
        let rtt = p.link_rtt_ms as f64;
        let mut out = format!(
            "### sessions: {} requests of {} over an emulated {} ms round trip, with and without 0-RTT tokens\n\n",
            p.sweep_requests,
            human(p.size as u64),
            p.link_rtt_ms
        );
        out += &self.header_line(&format!(
            "{} requests per run at concurrency {}, {} ms added per round trip by the client endpoints (half each way), {} rep(s)",
            p.sweep_requests, p.sweep_concurrency, p.link_rtt_ms, p.reps
        ));
        out += "| row | runs | requests/s | p50 ms | p50 in round trips | p99 ms | p99 in round trips | failures | datagrams per session |\n";
        out += "|---|---|---|---|---|---|---|---|---|\n";
        let mut target = String::new();
        for kind in [Kind::Manyfold, Kind::ManyfoldTokens] {
            let sel = move |s: &Spec| s.part == Part::Link && s.kind == kind;
            let runs = self.ok(&sel);
            let total = self.runs.iter().filter(|r| sel(&r.spec)).count();
            let col = |f: &dyn Fn(&RunResult) -> f64| runs.iter().map(|r| f(r)).collect::<Vec<f64>>();
            let p50 = col(&|r| r.get("p50_ms"));
            let failures: f64 = col(&|r| r.get("failures")).iter().sum();
            out += &format!(
                "| {} | {} of {total} | {} | {} | {} | {} | {} | {failures} | {} |\n",
                kind.label(),
                runs.len(),
                med_range(&col(&|r| r.get("rps")), 0),
                med_range(&p50, 1),
                med_range(&col(&|r| r.get("p50_ms") / rtt), 2),
                med_range(&col(&|r| r.get("p99_ms")), 1),
                med_range(&col(&|r| r.get("p99_ms") / rtt), 2),
                Self::datagrams(&runs),
            );
            if kind == Kind::ManyfoldTokens && !runs.is_empty() {
                // One round trip plus what the two processes add on
                // loopback: within 10% of it.
                let m = median(&p50) / rtt;
                target = format!(
                    "Target (issue 21), p50 of one round trip with tokens: {m:.2} round trips ({}).\n\n",
                    verdict(m <= 1.1 && failures == 0.0)
                );
            }
        }
        out + "\n" + &target
    }

    fn hold_table(&self) -> String {
        let p = &self.plan;
        let mut out = format!(
            "### sessions: one listener holding {} idle sessions
\n",
            p.hold
        );
        out += &self.header_line(&format!(
            "{} sessions, {} handshakes at once, {} sessions per client endpoint, hellos of {} bytes",
            p.hold,
            p.hold_concurrency,
            p.hold_per_endpoint,
            list(&p.hold_hello)
        ));
        out += "| sessions asked | hello B | established (clients) | held by the server | failures | time to establish s | sessions/s | server RSS before MiB | server RSS with them MiB | RSS growth per session B | server peak RSS MiB | server CPU s | client peak RSS MiB | client CPU s |\n";
        out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        let mut targets = String::new();
        for r in self.runs.iter().filter(|r| r.spec.part == Part::Hold) {
            let Some(h) = &r.hold else {
                let why = r.error.as_deref().unwrap_or("");
                out += &format!("| {} | {} | failed: {why} |\n", r.spec.requests, r.spec.size);
                targets += "Target, one listener holds ≥ 100,000 concurrent sessions: the hold failed (missed).\n";
                continue;
            };
            out += &format!(
                "| {} | {} | {} | {} | {} | {:.1} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {:.2} | {:.0} | {:.2} |\n",
                r.spec.requests,
                r.spec.size,
                h.established,
                h.held,
                h.failures,
                h.establish_s,
                h.established / h.establish_s,
                h.rss_before_kib / 1024.0,
                h.rss_held_kib / 1024.0,
                h.per_session(),
                mib(&r.server),
                cpu(&r.server),
                mib(&r.client),
                cpu(&r.client),
            );
            if !h.first_error.is_empty() {
                targets += &format!("First failure ({}-byte hello): {}.\n", r.spec.size, h.first_error);
            }
            targets += &format!(
                "Target, one listener holds ≥ 100,000 concurrent sessions ({}-byte hello): {:.0} held ({}).\n",
                r.spec.size,
                h.held,
                verdict(h.held >= 100_000.0)
            );
            targets += &format!(
                "Target, memory per idle session ≤ 4 KiB ({}-byte hello): {:.0} B = {:.2} KiB ({}).\n",
                r.spec.size,
                h.per_session(),
                h.per_session() / 1024.0,
                verdict(h.per_session() <= 4096.0)
            );
        }
        out + "\n" + &targets + "\n"
    }

    fn header_line(&self, sizes: &str) -> String {
        header(sizes, self.plan.seed, &self.load_before, &self.load_after) + "\n\n"
    }

    /// The first error of each line that had failures.
    fn failure_notes(&self) -> String {
        let mut out = String::new();
        for r in &self.runs {
            if r.error.is_none() && (!r.first_error.is_empty() || !r.server_error.is_empty()) {
                out += &format!(
                    "- rep {} {} {}: client: {}; server: {}\n",
                    r.rep + 1,
                    r.spec.part.name(),
                    r.what(),
                    or_none(&r.first_error),
                    or_none(&r.server_error)
                );
            }
        }
        if out.is_empty() {
            out
        } else {
            format!("First errors of the runs that had failures:\n\n{out}\n")
        }
    }
}

fn or_none(s: &str) -> &str {
    if s.is_empty() {
        "none"
    } else {
        s
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "missed"
    }
}

fn list(v: &[usize]) -> String {
    v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
}

impl Figures for Report {
    fn failures(&self) -> Vec<String> {
        self.runs.iter().filter(|r| r.error.is_some()).map(|r| r.progress()).collect()
    }

    fn markdown(&self) -> String {
        let p = &self.plan;
        let mut out = String::new();
        if p.parts.contains(&Part::Grid) {
            out += &self.grid();
        }
        if p.parts.contains(&Part::Sizes) {
            out += &self.sizes();
        }
        if p.parts.contains(&Part::Rto) {
            out += &self.rto();
        }
        if p.parts.contains(&Part::Link) {
            out += &self.link();
        }
        if p.parts.contains(&Part::Hold) && p.hold > 0 {
            out += &self.hold_table();
        }
        out += &self.failure_notes();
        out += &format!(
            "Each run: a server process and a load-generator process of this binary, CPU (user + sys) and peak RSS of each from wait4(2). \
             A session: the client stamps its start, connects, writes the request, ends its sending side, reads the reply to its end and checks that it is the request reversed (a wrong reply is a failure); latency runs from before the connect to the reply's end. \
             Requests/s = completed sessions ÷ the load generator's time from its first connect to its last reply. \
             manyfold: library defaults (BBR, min_rto 20 ms, initial_rto 1 s) unless a row says otherwise; server `accept_backlog` {}; the client's sessions share one endpoint (UDP socket) per {} concurrent sessions; the client closes first and keeps TIME-WAIT (15 s), the server closes second (`Connection::close`, FIN acknowledged) and keeps nothing. \
             Kernel TCP (tokio, TCP_NODELAY): connect, write, shutdown(write), read to EOF, close; server accept, read to EOF, write, close; `listen` backlog {} (capped by net.core.somaxconn); the client closes first and keeps TIME-WAIT (net.ipv4.tcp_tw_reuse lets loopback connects reuse those ports). \
             \"64 client addresses\": the same, with request i's socket bound to 127.0.0.(2 + i mod 64) before the connect, as distinct devices would be; the plain row's clients all share 127.0.0.1 and its ephemeral port range (net.ipv4.ip_local_port_range), so before each plain TCP run the lab waits (at most 65 s) until fewer than 5,000 TIME-WAIT sockets of earlier runs remain on 127.0.0.1. \
             Datagrams per session: what the manyfold client endpoints sent and received until the last reply, over completed sessions (not the repeats of the final acks of sessions still in their linger when the client exits, spec §4.8, which no session waits for). \
             Other processes' CPU: the machine's user + system CPU time during the run (/proc/stat) less the server's and the client's, i.e. what else ran beside the run (noise; interrupt and softirq time left out). Sessions that failed count in the failures, not in the latencies. \
             Medians of the repetitions with (min–max); rows alternate manyfold, TCP within each repetition. Seed {} for the request bytes and the fault injection. \
             The lab process itself stayed at ≤ {:.1} MiB RSS (a floor under every child's peak RSS: wait4 counts the parent's pages at the fork).\n",
            p.backlog,
            p.per_endpoint,
            p.backlog,
            p.seed,
            self.runs.iter().map(|r| r.lab_rss_kib).max().unwrap_or(0) as f64 / 1024.0
        );
        out
    }

    fn json(&self) -> String {
        let p = &self.plan;
        let fields = format!(
            "\"seed\":{},\"size\":{},\"backlog\":{},\"per_endpoint\":{},\"hold_per_endpoint\":{}",
            p.seed, p.size, p.backlog, p.per_endpoint, p.hold_per_endpoint
        );
        self.json_document("sessions", &fields, |r| {
            let s = &r.spec;
            let figures = match &r.hold {
                Some(h) => format!(
                    "\"hold\":{{\"established\":{},\"failures\":{},\"establish_s\":{},\"held\":{},\"conns\":{},\"rss_before_kib\":{},\"rss_held_kib\":{},\"bytes_per_session\":{}}}",
                    num(h.established),
                    num(h.failures),
                    num(h.establish_s),
                    num(h.held),
                    num(h.conns),
                    num(h.rss_before_kib),
                    num(h.rss_held_kib),
                    num(h.per_session())
                ),
                None => {
                    let keys = ["ok", "failures", "rps", "p50_ms", "p99_ms", "max_ms", "mean_ms", "wall_s"];
                    let mut f: Vec<String> = keys.iter().map(|k| format!("\"{k}\":{}", num(r.get(k)))).collect();
                    if s.kind.is_manyfold() {
                        for k in ["retransmissions", "rto_expiries", "datagrams_sent", "datagrams_received"] {
                            f.push(format!("\"{k}\":{}", num(r.get(k))));
                        }
                    }
                    f.push(format!("\"server_counters\":{}", json_str(&r.server_line)));
                    f.join(",")
                }
            };
            format!(
                "{{\"part\":\"{}\",\"row\":{},\"requests\":{},\"concurrency\":{},\"size\":{},\"min_rto_ms\":{},\"initial_rto_ms\":{},\"loss_percent\":{},\"rtt_ms\":{},\"rep\":{},\"tcp_time_waits_at_start\":{},\"other_cpu_s\":{},{figures},\"first_error\":{},\"server_error\":{},\"server\":{},\"client\":{},\"error\":{}}}",
                s.part.name(),
                json_str(s.kind.label()),
                s.requests,
                s.concurrency,
                s.size,
                s.rto.min_rto_ms,
                s.rto.initial_rto_ms,
                s.loss,
                s.rtt_ms,
                r.rep,
                r.time_waits,
                num(r.other_cpu_s),
                json_str(&r.first_error),
                json_str(&r.server_error),
                usage(&r.server),
                usage(&r.client),
                r.error.as_deref().map_or("null".into(), json_str),
            )
        })
    }

    /// Requests/s and p99 latency against N (one line per row and
    /// concurrency), and requests/s against the request size.
    fn charts(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let p = &self.plan;
        let mut files = Vec::new();
        if p.parts.contains(&Part::Grid) {
            let series = |f: &dyn Fn(&RunResult) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
                let mut out = Vec::new();
                for &kind in super::GRID_ROWS {
                    for &cc in &p.concurrency {
                        let pts = p
                            .requests
                            .iter()
                            .map(|&n| {
                                let sel = move |s: &Spec| {
                                    s.part == Part::Grid && s.requests == n && s.concurrency == cc && s.kind == kind
                                };
                                (n as f64, self.median_of(&sel, f))
                            })
                            .collect();
                        out.push((format!("{}, {cc} at once", kind.label()), pts));
                    }
                }
                out
            };
            let what = format!("{} request and reply per client, 127.0.0.1", human(p.size as u64));
            let rate = dir.join("sessions-rate.png");
            manyfold_plot::lines_log2_x(
                &rate,
                &format!("sessions: requests per second ({what})"),
                "clients N",
                &format!("requests/s (median of {})", p.reps),
                &series(&|r| r.get("rps")),
            )?;
            let p99 = dir.join("sessions-p99.png");
            manyfold_plot::lines_log2_x(
                &p99,
                &format!("sessions: p99 latency, connect to the reply's end ({what})"),
                "clients N",
                &format!("p99 latency, ms (median of {})", p.reps),
                &series(&|r| r.get("p99_ms")),
            )?;
            files.extend([rate, p99]);
        }
        if p.parts.contains(&Part::Sizes) {
            let series: Vec<(String, Vec<(f64, f64)>)> = [Kind::Manyfold, Kind::Tcp]
                .iter()
                .map(|&kind| {
                    let pts = p
                        .sweep_sizes
                        .iter()
                        .map(|&size| {
                            let sel = move |s: &Spec| s.part == Part::Sizes && s.size == size && s.kind == kind;
                            (size as f64, self.median_of(&sel, |r| r.get("rps")))
                        })
                        .collect();
                    (kind.label().to_string(), pts)
                })
                .collect();
            let sizes = dir.join("sessions-sizes.png");
            manyfold_plot::lines_log2_x(
                &sizes,
                &format!("sessions: {} requests by size (paper 02 §4.3)", p.sweep_requests),
                "request and reply size, bytes",
                &format!("requests/s (median of {})", p.reps),
                &series,
            )?;
            files.push(sizes);
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn finished(stdout: &str) -> Finished {
        let usage = Usage { wall: Duration::from_secs(1), cpu: Duration::from_millis(500), max_rss_kib: 10240 };
        Finished { usage, stdout: stdout.into() }
    }

    fn spec(kind: Kind) -> Spec {
        Spec {
            part: Part::Grid,
            kind,
            requests: 100,
            concurrency: 10,
            size: 1024,
            rto: Rto::default(),
            loss: 0.0,
            rtt_ms: 0,
        }
    }

    fn result(kind: Kind, rps: f64, failures: u64) -> RunResult {
        let client = finished(&format!(
            "result ok=100 failures={failures} wall_s=1 rps={rps} p50_ms=1 p99_ms=2 max_ms=3 mean_ms=1 retransmissions=0 rto_expiries=0 datagrams_sent=300 datagrams_received=300 endpoints=1\nfirst_error: {}\n",
            if failures > 0 { "request 7: connect: refused" } else { "" }
        ));
        let server = finished("server served=100 failures=0 conns_left=0\nserver_error: \n");
        RunResult::parse(&spec(kind), &client, &server).unwrap()
    }

    fn plan() -> Plan {
        let o = <crate::sessions::Options as clap::FromArgMatches>::from_arg_matches(
            &<crate::sessions::Options as clap::Args>::augment_args(clap::Command::new("t")).get_matches_from([
                "t",
                "--quick",
                "--requests",
                "100",
                "--concurrency",
                "10",
                "--parts",
                "grid",
            ]),
        )
        .unwrap();
        Plan::from_options(&o).unwrap()
    }

    #[test]
    fn results_parse_and_the_targets_are_judged() {
        let mut report = Report::new(&plan());
        report.runs.push(result(Kind::Manyfold, 3500.0, 0));
        report.runs.push(result(Kind::Tcp, 1000.0, 0));
        report.finish();
        let md = report.markdown();
        assert!(md.contains("N = 100 at 10: 3.50× (met;"), "{md}");
        assert!(md.contains("0 of 100 manyfold sessions failed (met)"), "{md}");
        assert!(md.contains("| 100 | 10 | manyfold | 1 of 1 | 3500 | 3.50 | 1.00 | 2.00 | 3.0 | 0 |"), "{md}");
        assert!(report.json().contains("\"part\":\"grid\",\"row\":\"manyfold\""));
        let mut report = Report::new(&plan());
        report.runs.push(result(Kind::Manyfold, 2000.0, 2));
        report.runs.push(result(Kind::Tcp, 1000.0, 0));
        let md = report.markdown();
        assert!(md.contains("2.00× (missed;") && md.contains("2 of 100 manyfold sessions failed (missed)"), "{md}");
        assert!(md.contains("client: request 7: connect: refused"), "{md}");
    }

    #[test]
    fn the_tokens_row_is_judged_against_two_times_tcp_and_the_link_against_one_round_trip() {
        let mut report = Report::new(&plan());
        report.runs.push(result(Kind::ManyfoldTokens, 2500.0, 0));
        report.runs.push(result(Kind::Tcp, 1000.0, 0));
        let md = report.markdown();
        assert!(md.contains("manyfold with 0-RTT tokens ≥ 2× TCP's requests/s: N = 100 at 10: 2.50× (met)"), "{md}");
        let mut plan = plan();
        plan.parts = vec![Part::Link];
        let mut report = Report::new(&plan);
        for (kind, p50) in [(Kind::Manyfold, 101.0), (Kind::ManyfoldTokens, 52.0)] {
            let client = finished(&format!(
                "result ok=100 failures=0 wall_s=1 rps=90 p50_ms={p50} p99_ms=120 max_ms=130 mean_ms=60 datagrams_sent=200 datagrams_received=100 endpoints=1\nfirst_error: \n"
            ));
            let server = finished("server served=100 failures=0 conns_left=0\nserver_error: \n");
            let spec = Spec { part: Part::Link, rtt_ms: 50, ..spec(kind) };
            report.runs.push(RunResult::parse(&spec, &client, &server).unwrap());
        }
        let md = report.markdown();
        assert!(md.contains("| manyfold, 0-RTT tokens | 1 of 1 | 90 | 52.0 | 1.04 |"), "{md}");
        assert!(md.contains("p50 of one round trip with tokens: 1.04 round trips (met)"), "{md}");
        assert!(md.contains("| manyfold | 1 of 1 | 90 | 101.0 | 2.02 |"), "{md}");
    }

    #[test]
    fn hold_figures_give_bytes_per_session() {
        let h = HoldFigures::parse(
            "held ok=1000 failures=0 establish_s=2.5 endpoints=1\nfirst_error: \n",
            "hold held=1000 conns=1000 rss_before_kib=10000 rss_held_kib=12000\n",
        )
        .unwrap();
        assert_eq!(h.per_session(), 2000.0 * 1024.0 / 1000.0);
        assert!(HoldFigures::parse("held ok=1", "hold held=1").is_err());
    }
}
