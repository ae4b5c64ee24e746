//! Runs the `rate` scenario: for each repetition, each size, each row in
//! turn (A B C … A B C …, so that ratios within a repetition are fair):
//! one run as fast as the row goes, then one paced run per offered load
//! at that fraction of the rate just measured; the Aeron row runs its
//! throughput sample and its ping-pong sample instead.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use super::aeron::{self, Aeron};
use super::report::{AeronLatency, LatencyRun, RateRun, Report};
use super::wire::HEADER;
use super::Options;
use crate::child;
use crate::wan::probe::field as parse_field;

/// One row of the table.
#[derive(Debug, Clone)]
pub enum Row {
    /// manyfold on `streams` streams, unordered or not, encrypted or not;
    /// `batch`: through the batch API (`send_messages` of whatever is
    /// due, up to [`BATCH`] at once; `recv_messages_into`); `flush_us`:
    /// the connection's flush delay (spec §5.7), 0 for none.
    Manyfold {
        streams: u16,
        unordered: bool,
        encrypted: bool,
        batch: bool,
        flush_us: u64,
    },
    Tcp,
    Aeron(Aeron),
}

impl Row {
    pub fn name(&self) -> String {
        match self {
            Row::Manyfold { batch: true, .. } => "manyfold, one stream, batch API".into(),
            Row::Manyfold { flush_us: us @ 1.., .. } => {
                format!("manyfold, one stream, flush delay {} ms", *us as f64 / 1e3)
            }
            Row::Manyfold { streams: 1, unordered: false, encrypted: false, .. } => "manyfold, one stream".into(),
            Row::Manyfold { streams, unordered: false, encrypted: false, .. } => format!("manyfold, {streams} streams"),
            Row::Manyfold { unordered: true, .. } => "manyfold, one stream, unordered".into(),
            Row::Manyfold { encrypted: true, .. } => "manyfold encrypted, one stream".into(),
            Row::Tcp => "kernel TCP, TCP_NODELAY".into(),
            Row::Aeron(_) => format!("Aeron {} (its samples)", aeron::VERSION),
        }
    }

    /// Whether the row's messages are encrypted on the wire.
    pub fn encrypts(&self) -> bool {
        matches!(self, Row::Manyfold { encrypted: true, .. })
    }

    /// The ends' transport options.
    fn end_args(&self) -> Vec<String> {
        match self {
            Row::Manyfold { streams, unordered, encrypted, batch, flush_us } => {
                let mut a = vec!["--transport".into(), "manyfold".into(), "--streams".into(), streams.to_string()];
                if *flush_us > 0 {
                    a.extend(["--flush-delay-us".into(), flush_us.to_string()]);
                }
                if *batch {
                    a.extend(["--batch".into(), BATCH.to_string()]);
                }
                if *unordered {
                    a.push("--unordered".into());
                }
                if *encrypted {
                    a.push("--encrypt".into());
                }
                a
            }
            Row::Tcp => vec!["--transport".into(), "tcp".into()],
            Row::Aeron(_) => vec![],
        }
    }
}

/// The rows run by default.
pub const ALL_ROWS: &[&str] =
    &["manyfold", "manyfold-batch", "manyfold-8", "manyfold-unordered", "manyfold-encrypted", "tcp", "aeron"];
/// Rows run only when `--rows` names them.
pub const EXTRA_ROWS: &[&str] = &["manyfold-flush"];

/// Most messages the batch row hands over in one call.
pub const BATCH: usize = 256;

/// The rows asked for; Aeron's is left out with a note where it cannot run.
fn rows(names: &[String], flush_us: u64, notes: &mut Vec<String>) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let plain = Row::Manyfold { streams: 1, unordered: false, encrypted: false, batch: false, flush_us: 0 };
    for r in names {
        match r.as_str() {
            "manyfold" => rows.push(plain.clone()),
            "manyfold-batch" => {
                rows.push(Row::Manyfold { streams: 1, unordered: false, encrypted: false, batch: true, flush_us: 0 })
            }
            "manyfold-flush" => {
                rows.push(Row::Manyfold { streams: 1, unordered: false, encrypted: false, batch: false, flush_us })
            }
            "manyfold-8" => {
                rows.push(Row::Manyfold { streams: 8, unordered: false, encrypted: false, batch: false, flush_us: 0 })
            }
            "manyfold-unordered" => {
                rows.push(Row::Manyfold { streams: 1, unordered: true, encrypted: false, batch: false, flush_us: 0 })
            }
            "manyfold-encrypted" => {
                rows.push(Row::Manyfold { streams: 1, unordered: false, encrypted: true, batch: false, flush_us: 0 })
            }
            "tcp" => rows.push(Row::Tcp),
            "aeron" => match aeron::find() {
                Ok(a) => rows.push(Row::Aeron(a)),
                Err(why) => {
                    eprintln!("rate: the Aeron row is skipped: {why}");
                    notes.push(format!("Aeron: skipped: {why}"));
                }
            },
            other => bail!("unknown row {other:?} (one of {}, {})", ALL_ROWS.join(", "), EXTRA_ROWS.join(", ")),
        }
    }
    ensure!(!rows.is_empty(), "no row to run");
    Ok(rows)
}

/// Everything the runs need, resolved from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub sizes: Vec<usize>,
    pub secs: f64,
    pub lat_secs: f64,
    pub loads: Vec<f64>,
    pub reps: usize,
    pub warmup: f64,
    pub seed: u64,
    pub aeron_pings: u64,
    /// The manyfold-flush row's flush delay, µs.
    pub flush_us: u64,
}

impl Plan {
    pub fn from_options(o: &Options) -> Result<Plan> {
        let q = o.quick;
        let sizes = o.sizes.clone().unwrap_or(if q { vec![32, 1024] } else { vec![32, 288, 1024, 16384] });
        for s in &sizes {
            ensure!((HEADER..=1 << 20).contains(s), "--sizes: {s} is not between {HEADER} bytes and 1 MiB");
        }
        ensure!(!sizes.is_empty(), "--sizes names no size");
        let secs = o.secs.unwrap_or(if q { 0.5 } else { 3.0 });
        let lat_secs = o.lat_secs.unwrap_or(if q { 0.3 } else { 2.0 });
        ensure!(secs.is_finite() && (0.1..=600.0).contains(&secs), "--secs must be between 0.1 and 600");
        ensure!(lat_secs.is_finite() && (0.1..=600.0).contains(&lat_secs), "--lat-secs must be between 0.1 and 600");
        for l in &o.loads {
            ensure!(l.is_finite() && *l > 0.0 && *l <= 100.0, "--loads: {l} is not a percentage in (0, 100]");
        }
        ensure!(o.aeron_pings >= 10, "--aeron-pings must be at least 10");
        ensure!(
            o.flush_delay.is_finite() && o.flush_delay > 0.0 && o.flush_delay <= 1000.0,
            "--flush-delay must be more than 0 and at most 1000 ms"
        );
        Ok(Plan {
            sizes,
            secs,
            lat_secs,
            loads: o.loads.clone(),
            reps: o.reps.unwrap_or(if q { 1 } else { 3 }).max(1),
            // The first fifth of a run, at most 1 s, is the receiver's warm-up.
            warmup: (secs / 5.0).min(1.0),
            seed: o.seed,
            aeron_pings: o.aeron_pings,
            flush_us: (o.flush_delay * 1e3).round().max(1.0) as u64,
        })
    }
}

pub fn run(o: &Options) -> Result<()> {
    let plan = Plan::from_options(o)?;
    let mut report = Report::new(&plan);
    let names: Vec<String> = match &o.rows {
        Some(r) => r.clone(),
        None if o.quick => {
            report.notes.push("Aeron: not run by --quick (add `--rows …,aeron`).".into());
            ALL_ROWS.iter().filter(|r| **r != "aeron").map(|r| r.to_string()).collect()
        }
        None => ALL_ROWS.iter().map(|r| r.to_string()).collect(),
    };
    let rows = rows(&names, plan.flush_us, &mut report.notes)?;
    report.rows = rows.iter().map(|r| (r.name(), r.encrypts(), matches!(r, Row::Aeron(_)))).collect();
    if let Some(a) = rows.iter().find_map(|r| if let Row::Aeron(a) = r { Some(a) } else { None }) {
        report.aeron = Some(format!("{} ({})", a.jar.display(), a.java_version));
    }
    let bench = std::env::current_exe()?;
    let work = tempfile::Builder::new().prefix("manyfold-bench-rate-").tempdir()?;
    eprintln!("rate: {} rows × {} sizes × {} reps", rows.len(), plan.sizes.len(), plan.reps);
    for rep in 0..plan.reps {
        for &size in &plan.sizes {
            for row in &rows {
                let dir = work.path().join(format!("run-{}", report.rates.len()));
                std::fs::create_dir(&dir)?;
                match row {
                    Row::Aeron(a) => aeron_runs(a, &plan, size, rep, &dir, &mut report),
                    _ => transport_runs(&bench, row, &plan, size, rep, &dir, &mut report),
                }
            }
        }
    }
    report.finish();
    crate::report::publish(&report, &o.out)
}

/// The rate run of a manyfold or TCP row, then its paced runs.
fn transport_runs(bench: &Path, row: &Row, plan: &Plan, size: usize, rep: usize, dir: &Path, report: &mut Report) {
    let name = row.name();
    let r = run_pair(bench, row, plan, size, 0.0, plan.secs, dir, "max");
    let rate = RateRun::from(name.clone(), size, rep, r);
    eprintln!("rep {} {size} B {}", rep + 1, rate.progress());
    let max = rate.mps;
    report.rates.push(rate);
    for &load in &plan.loads {
        let offered = max * load / 100.0;
        let r = if offered.is_finite() && offered > 0.0 {
            run_pair(bench, row, plan, size, offered, plan.lat_secs, dir, &format!("load{load}"))
        } else {
            Err(anyhow::anyhow!("no rate to offer a share of (the rate run failed)"))
        };
        let lat = LatencyRun::from(name.clone(), size, rep, load, offered, r);
        eprintln!("rep {} {size} B {}", rep + 1, lat.progress());
        report.latencies.push(lat);
    }
}

/// What one sender/receiver pair printed, and what each cost.
pub struct Pair {
    pub send: child::Finished,
    pub recv: child::Finished,
}

/// One run of a manyfold or TCP row: receiver, then sender; both must
/// succeed and the receiver must have every message the sender sent.
#[allow(clippy::too_many_arguments)]
fn run_pair(
    bench: &Path,
    row: &Row,
    plan: &Plan,
    size: usize,
    rate: f64,
    secs: f64,
    dir: &Path,
    name: &str,
) -> Result<Pair> {
    crate::on_free_addr(|addr| {
        let limit = secs * 3.0 + 30.0;
        let cmd = |role: &str, flag: &str, addr: SocketAddr| {
            let mut c = Command::new(bench);
            c.env("RUST_BACKTRACE", "0").env("RUST_LIB_BACKTRACE", "0");
            c.args(["rate", role, flag, &addr.to_string()]);
            c.args(row.end_args());
            c.args(["--size", &size.to_string(), "--secs", &secs.to_string(), "--rate", &format!("{rate:.3}")]);
            c.args(["--warmup", &plan.warmup.to_string(), "--seed", &plan.seed.to_string()]);
            c.args(["--limit", &limit.to_string()]);
            c
        };
        let what = |role: &str| format!("{} {role} ({size} B, {name})", row.name());
        let recv = child::launch(cmd("recv", "--listen", addr), dir, &format!("{name}-recv"), what("receiver"))?;
        let bound = match row {
            Row::Tcp => wait_tcp_listening(addr),
            _ => wait_udp_bound(addr),
        };
        if let Err(e) = bound {
            recv.kill();
            return Err(e);
        }
        let send = match child::launch(cmd("send", "--to", addr), dir, &format!("{name}-send"), what("sender")) {
            Ok(s) => s,
            Err(e) => {
                recv.kill();
                return Err(e);
            }
        };
        let limit = Duration::from_secs_f64(limit + 10.0);
        let recv = recv.finish(limit);
        let send = send.finish(limit);
        let pair = Pair { send: send?, recv: recv? };
        let sent = parse_field(&pair.send.stdout, "sent").context("the sender printed no count")?;
        let got = parse_field(&pair.recv.stdout, "delivered").context("the receiver printed no count")?;
        ensure!(sent == got, "the sender sent {sent} messages, the receiver checked {got}");
        Ok(pair)
    })
}

/// How long a receiver may take to start: seconds on a busy machine.
const START_LIMIT: Duration = Duration::from_secs(20);

/// Waits until a TCP listener is up at `addr` (a bind fails).
fn wait_tcp_listening(addr: SocketAddr) -> Result<()> {
    wait_taken(addr, |a| std::net::TcpListener::bind(a).is_err())
}

/// Waits until something has bound UDP `addr` (the manyfold receiver is up).
fn wait_udp_bound(addr: SocketAddr) -> Result<()> {
    wait_taken(addr, |a| std::net::UdpSocket::bind(a).is_err())
}

fn wait_taken(addr: SocketAddr, taken: impl Fn(SocketAddr) -> bool) -> Result<()> {
    let deadline = std::time::Instant::now() + START_LIMIT;
    while std::time::Instant::now() < deadline {
        if taken(addr) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("the receiver had not bound {addr} after {START_LIMIT:?}")
}

/// Aeron's rate (EmbeddedThroughput) and unloaded latency (ping-pong).
fn aeron_runs(a: &Aeron, plan: &Plan, size: usize, rep: usize, dir: &Path, report: &mut Report) {
    let name = format!("Aeron {} (its samples)", aeron::VERSION);
    let r = a.throughput(size, plan.secs.max(2.0), dir);
    let rate = RateRun::from_aeron(name.clone(), size, rep, r);
    eprintln!("rep {} {size} B {}", rep + 1, rate.progress());
    report.rates.push(rate);
    let limit = Duration::from_secs(120);
    let r = a.ping_pong(size, plan.aeron_pings, (plan.aeron_pings / 10).max(1), dir, limit);
    let lat = AeronLatency::from(size, rep, plan.aeron_pings, r);
    eprintln!("rep {} {size} B {}", rep + 1, lat.progress());
    report.aeron_latencies.push(lat);
}
