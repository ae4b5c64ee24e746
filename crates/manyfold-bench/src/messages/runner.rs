//! Runs the `messages` scenario: builds the `wan` lab once (two
//! namespaces, the relay set to KCP's test conditions), measures the
//! link's RTT with a UDP echo, then for each repetition runs every row in
//! turn (A B C … A B C …): receiver in namespace b, the KCP row's tunnel,
//! sender in namespace a; and reads the receiver's verified latencies.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::ends::Kind;
use super::report::{Probe, Report, RunResult};
use super::wire::Workload;
use super::Options;
use crate::child;
use crate::wan::kcp::{self, Kcptun, Tunnel};
use crate::wan::link::LinkConfig;
use crate::wan::netns::{self, Lab, ADDR_B};
use crate::wan::probe::field;

/// First port of the runs; each run takes the next two.
const FIRST_PORT: u16 = 24_000;
/// The RTT probe's port and its pace (one datagram every 5 ms: the
/// workload's packet rate).
const PROBE_PORT: u16 = 23_999;
const PROBE_INTERVAL_MS: f64 = 5.0;
/// How long a finished receiver's sender may still take to exit.
const SENDER_GRACE: Duration = Duration::from_secs(15);

/// One row of the table.
#[derive(Debug, Clone)]
pub enum Row {
    Manyfold,
    ManyfoldOne,
    ManyfoldUnordered,
    Tcp,
    Kcp(Kcptun),
}

impl Row {
    pub fn name(&self, o: &Options) -> String {
        match self {
            Row::Manyfold => format!("manyfold ({}), {} streams", o.cc, o.streams),
            Row::ManyfoldOne => format!("manyfold ({}), all on stream 0", o.cc),
            Row::ManyfoldUnordered => format!("manyfold ({}), {} streams, unordered", o.cc, o.streams),
            Row::Tcp => format!("kernel TCP {}, one connection", o.tcp_cc),
            Row::Kcp(_) => format!("KCP via kcptun ({})", o.kcp_mode),
        }
    }

    fn kind(&self) -> Kind {
        match self {
            Row::Manyfold => Kind::Manyfold,
            Row::ManyfoldOne => Kind::ManyfoldOne,
            Row::ManyfoldUnordered => Kind::ManyfoldUnordered,
            Row::Tcp | Row::Kcp(_) => Kind::Tcp,
        }
    }

    /// A manyfold row (its ends can write qlog traces).
    fn is_manyfold(&self) -> bool {
        self.kind() != Kind::Tcp
    }

    fn kind_arg(&self) -> &'static str {
        match self.kind() {
            Kind::Manyfold => "manyfold",
            Kind::ManyfoldOne => "manyfold-one",
            Kind::ManyfoldUnordered => "manyfold-unordered",
            Kind::Tcp => "tcp",
        }
    }

    /// The controller the row's ends are given (the KCP row's TCP runs
    /// over loopback at both ends; its controller does not matter).
    fn cc<'a>(&self, o: &'a Options) -> &'a str {
        match self {
            Row::Manyfold | Row::ManyfoldOne | Row::ManyfoldUnordered => &o.cc,
            Row::Tcp | Row::Kcp(_) => &o.tcp_cc,
        }
    }
}

/// The rows asked for; KCP's is left out with a note when kcptun is
/// missing.
fn rows(o: &Options, notes: &mut Vec<String>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for r in &o.rows {
        match r.as_str() {
            "manyfold" => rows.push(Row::Manyfold),
            "manyfold-one" => rows.push(Row::ManyfoldOne),
            "manyfold-unordered" => rows.push(Row::ManyfoldUnordered),
            "tcp" => rows.push(Row::Tcp),
            "kcp" => match kcp::find() {
                Ok(k) => rows.push(Row::Kcp(k)),
                Err(why) => {
                    eprintln!("messages: the KCP row is skipped: {why}");
                    notes.push(format!("KCP via kcptun: skipped: {why}"));
                }
            },
            other => bail!("unknown row {other:?} (manyfold, manyfold-one, manyfold-unordered, tcp, kcp)"),
        }
    }
    if rows.is_empty() {
        bail!("no row to run");
    }
    Ok(rows)
}

/// Everything a run needs, resolved from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workload: Workload,
    pub reps: usize,
    pub link: LinkConfig,
    /// The mean RTT the link is set to: rtt_min + (rtt_max − rtt_min) / 2.
    pub rtt_mean_ms: f64,
}

impl Plan {
    pub fn from_options(o: &Options) -> Result<Plan> {
        let workload = Workload {
            count: o.count.unwrap_or(if o.quick { 300 } else { 2000 }),
            streams: o.streams,
            interval_ms: o.interval_ms,
            size: o.size,
            seed: o.seed,
        };
        workload.check()?;
        if !(o.rtt_min >= 0.0 && o.rtt_max >= o.rtt_min && o.rtt_max.is_finite()) {
            bail!("need 0 ≤ --rtt-min ≤ --rtt-max");
        }
        if !(0.0..100.0).contains(&o.loss) {
            bail!("--loss is a percentage in [0, 100)");
        }
        if o.kcp_mode.is_empty() || !o.kcp_mode.chars().all(|c| c.is_ascii_alphanumeric()) {
            bail!("bad --kcp-mode {:?}", o.kcp_mode);
        }
        let rate_bps = crate::wan::parse_rate(&o.rate)?;
        let bdp = rate_bps as f64 / 8.0 * o.rtt_max / 1e3;
        let link = LinkConfig {
            rate_bps,
            delay: Duration::from_secs_f64(o.rtt_min / 2.0 / 1e3),
            jitter: Duration::from_secs_f64((o.rtt_max - o.rtt_min) / 2.0 / 1e3),
            loss: o.loss / 100.0,
            // The wan scenario's floor: a queue never shorter than 100 packets.
            queue_bytes: bdp.max(100.0 * 1500.0) as u64,
            seed: o.seed,
            ..LinkConfig::default()
        };
        let reps = o.reps.unwrap_or(if o.quick { 1 } else { 3 }).max(1);
        Ok(Plan { workload, reps, link, rtt_mean_ms: (o.rtt_min + o.rtt_max) / 2.0 })
    }
}

pub fn run(o: &Options) -> Result<()> {
    let plan = Plan::from_options(o)?;
    let bench = std::env::current_exe()?;
    let mut report = Report::new(o, &plan);
    let rows = rows(o, &mut report.notes)?;
    let work = tempfile::Builder::new().prefix("manyfold-bench-messages-").tempdir()?;
    netns::register_dir(work.path());
    eprintln!(
        "messages: {} rows × {} reps of {} messages ({:.0} s each)",
        rows.len(),
        plan.reps,
        plan.workload.count,
        plan.workload.span_secs()
    );
    {
        let mut lab = Lab::create(&bench)?;
        lab.configure(&plan.link)?;
        let probes = o.probe.unwrap_or(if o.quick { 100 } else { 400 });
        if probes > 0 {
            let p = probe(&lab, &bench, probes, work.path())?;
            eprintln!("RTT probe: {} of {} returned, mean {:.1} ms", p.rtts_ms.len(), p.sent, p.mean_ms());
            report.probe = Some(p);
        }
        let mut port = FIRST_PORT;
        for rep in 0..plan.reps {
            for row in &rows {
                let ports = (port, port + 1);
                port = if port >= 60_000 { FIRST_PORT } else { port + 2 };
                let dir = work.path().join(format!("run-{}", report.runs.len()));
                std::fs::create_dir(&dir)?;
                let before = lab.stats()?;
                let r = run_one(&lab, &bench, o, &plan, row, ports, &dir);
                let after = lab.stats()?;
                let name = row.name(o);
                let result = match r {
                    Ok(mut r) => {
                        r.rep = rep;
                        r.set_relay(&before, &after);
                        r
                    }
                    Err(e) => {
                        lab.kill_leftovers();
                        RunResult::failed(name, rep, format!("{e:#}"))
                    }
                };
                eprintln!("rep {} {}", rep + 1, result.progress());
                report.runs.push(result);
            }
        }
    } // the lab (namespaces, relay) goes here, before any output
    report.finish();
    print!("{}", report.markdown());
    o.out.write_json(|| report.json())?;
    o.out.draw(|dir| report.charts(dir))?;
    let failed = report.failures();
    if !failed.is_empty() {
        bail!("{} run(s) failed: {}", failed.len(), failed.join("; "));
    }
    Ok(())
}

/// The link's round trip at the workload's packet rate: UDP datagrams
/// from a to an echo in b and back.
fn probe(lab: &Lab, bench: &Path, count: u32, work: &Path) -> Result<Probe> {
    let addr = format!("{ADDR_B}:{PROBE_PORT}");
    // The pinger listens 2 s past its last datagram; the echo outlives it
    // and is stopped once it is done.
    let secs = count as f64 * PROBE_INTERVAL_MS / 1e3 + 10.0;
    let mut e = lab.exec(&lab.ns_b, bench);
    e.args(["messages", "echo", &addr, "--secs", &secs.to_string()]);
    let echo = child::launch(e, work, "echo", "the RTT probe's echo".into())?;
    lab.wait_listening(&lab.ns_b, PROBE_PORT, Duration::from_secs(5))?;
    let mut p = lab.exec(&lab.ns_a, bench);
    p.args(["messages", "ping", &addr, "--count", &count.to_string()]);
    p.args(["--interval-ms", &PROBE_INTERVAL_MS.to_string()]);
    let ping = child::launch(p, work, "ping", "the RTT probe".into())?;
    let out = ping.finish(Duration::from_secs_f64(secs));
    echo.kill();
    let out = out?.stdout;
    let rtts_ms: Vec<f64> = out
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("rtt_ns="))
        .filter_map(|v| v.parse::<f64>().ok())
        .map(|ns| ns / 1e6)
        .collect();
    let sent = field(&out, "sent").context("the probe printed no count")? as u32;
    Ok(Probe { sent, rtts_ms })
}

/// One run of one row: receiver (and tunnel), then sender; both must
/// succeed, and the receiver's report gives every message's latency.
fn run_one(
    lab: &Lab,
    bench: &Path,
    o: &Options,
    plan: &Plan,
    row: &Row,
    ports: (u16, u16),
    dir: &Path,
) -> Result<RunResult> {
    let w = &plan.workload;
    // --qlog: DIR/run-<n>-<row>/, after the run's own directory.
    let qlog = o.qlog.as_ref().filter(|_| row.is_manyfold()).map(|q| {
        let run = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        q.join(format!("{run}-{}", row.kind_arg()))
    });
    let limit = super::ends::LEAD.as_secs_f64() + w.span_secs() + o.timeout;
    // The KCP row: its TCP receiver on b's loopback, the tunnel's server
    // forwarding to it, the TCP sender into the tunnel's client on a's.
    let (listen, to, listen_port) = match row {
        Row::Kcp(_) => (format!("127.0.0.1:{}", ports.1), format!("127.0.0.1:{}", ports.0), ports.1),
        _ => (format!("{ADDR_B}:{}", ports.0), format!("{ADDR_B}:{}", ports.0), ports.0),
    };
    let args = |role: &str, addr_flag: &str, addr: &str| {
        let ns = if role == "send" { &lab.ns_a } else { &lab.ns_b };
        let mut c = lab.exec(ns, bench);
        // A failed end's error chain is quoted in the report: no backtrace.
        c.env("RUST_BACKTRACE", "0").env("RUST_LIB_BACKTRACE", "0");
        c.args(["messages", role, "--kind", row.kind_arg(), addr_flag, addr, "--cc", row.cc(o)]);
        c.args(["--limit", &limit.to_string()]);
        c.args(["--count", &w.count.to_string(), "--streams", &w.streams.to_string()]);
        c.args(["--interval-ms", &w.interval_ms.to_string(), "--size", &w.size.to_string()]);
        c.args(["--seed", &w.seed.to_string()]);
        if let Some(q) = &qlog {
            c.arg("--qlog").arg(q);
        }
        c
    };
    let recv = child::launch(args("recv", "--listen", &listen), dir, "recv", format!("{} receiver", row.name(o)))?;
    if let Err(e) = lab.wait_listening(&lab.ns_b, listen_port, Duration::from_secs(5)) {
        recv.kill();
        return Err(e);
    }
    let mut tunnel = match row {
        Row::Kcp(k) => {
            let window = kcp::window(plan.link.rate_bps, o.rtt_max);
            match Tunnel::start(lab, k, ports, window, &o.kcp_mode, dir) {
                Ok(t) => Some(t),
                Err(e) => {
                    recv.kill();
                    return Err(e);
                }
            }
        }
        _ => None,
    };
    let send = match child::launch(args("send", "--to", &to), dir, "send", format!("{} sender", row.name(o))) {
        Ok(s) => s,
        Err(e) => {
            recv.kill();
            return Err(e);
        }
    };
    let limit = Duration::from_secs_f64(limit);
    let finished =
        recv.finish(limit + Duration::from_secs(15)).and_then(|g| Ok((g, send.finish(limit + SENDER_GRACE)?)));
    let (mut got, mut sent) = match (finished, tunnel.as_mut()) {
        (Ok(both), _) => both,
        (Err(e), Some(t)) => return Err(t.explain(e)),
        (Err(e), None) => return Err(e),
    };
    // The tunnel's ends are part of the KCP row's cost.
    if let Some(t) = &tunnel {
        let (client, server) = t.usage()?;
        sent.usage.cpu += Duration::from_secs_f64(client.cpu);
        got.usage.cpu += Duration::from_secs_f64(server.cpu);
    }
    RunResult::parse(row.name(o), plan, &got, &sent)
}
