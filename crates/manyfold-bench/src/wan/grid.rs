//! Runs the `wan` grid: the emulator's self-check, then every cell
//! (rate × RTT × loss) with every row alternating A B C A B C, each
//! transfer crossing the relay between the namespaces and hash-checked at
//! the receiver.
//!
//! Rows: manyfold (`manyfold send/recv`, one row per controller), kernel
//! TCP (the file-copy anchor with `TCP_CONGESTION` set), quinn (the
//! loopback scenario's memory-to-memory sender and receiver, encrypted)
//! and KCP (the TCP file copy through a kcptun tunnel, [`super::kcp`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::kcp::{self, Kcptun, Tunnel};
use super::link::LinkConfig;
use super::netns::{Lab, ADDR_B};
use super::report::{CellResult, CheckResult, Report, RowResult, Transfer};
use super::{parse_rate, probe, Options};
use crate::child;
use crate::loopback::data::Pattern;

/// TCP's payload per 1,500-byte packet with timestamps (Mathis estimate).
const MSS: f64 = 1448.0;
/// Smallest file: handshakes must not dominate.
const MIN_SIZE: u64 = 1_000_000;

#[derive(Debug, Clone)]
enum RowKind {
    /// manyfold, with `--cc NAME` when the CLI offers it.
    Manyfold(Option<String>),
    /// Kernel TCP with this congestion control (`TCP_CONGESTION`).
    Tcp(String),
    /// quinn, the crate, with its default rustls encryption.
    Quic,
    /// The TCP file copy through kcptun.
    Kcp(Kcptun),
}

/// The quinn row's name: the table must say that it alone encrypts.
pub const QUIC_ROW: &str = "quinn (encrypts: TLS 1.3 via rustls)";
/// The KCP row's name.
pub const KCP_ROW: &str = "KCP via kcptun";

impl RowKind {
    fn name(&self) -> String {
        match self {
            RowKind::Manyfold(None) => "manyfold".into(),
            RowKind::Manyfold(Some(cc)) => format!("manyfold ({cc})"),
            RowKind::Tcp(cc) => format!("kernel TCP {cc}"),
            RowKind::Quic => QUIC_ROW.into(),
            RowKind::Kcp(_) => KCP_ROW.into(),
        }
    }
}

/// The sample a cell's rows move: a file on disk (manyfold, TCP, KCP) and
/// the same number of bytes of loopback's generated stream (quinn).
#[derive(Debug, Clone)]
struct Sample {
    file: PathBuf,
    file_hash: String,
    bytes: u64,
    seed: u64,
    /// The stream's hash, made only if the quinn row runs.
    stream_hash: Option<String>,
}

#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub rate_bps: u64,
    pub rtt_ms: f64,
    pub loss_pct: f64,
}

/// The grid's axes and repetitions: `--quick`'s subset, else the
/// options given, else the defaults.
struct Grid {
    rates: Vec<u64>,
    rtts: Vec<f64>,
    losses: Vec<f64>,
    reps: usize,
}

impl Grid {
    /// Fills `o`'s unset options for `--quick` and reads the axes.
    fn of(o: &mut Options) -> Result<Grid> {
        if o.quick {
            o.rate.get_or_insert_with(|| vec!["100M".into()]);
            o.rtt.get_or_insert_with(|| vec![50.0]);
            o.loss.get_or_insert_with(|| vec![1.0]);
            o.reps.get_or_insert(1);
            o.size.get_or_insert_with(|| "2MB".into());
        }
        let rates: Vec<u64> = o
            .rate
            .clone()
            .unwrap_or_else(|| vec!["100M".into(), "1G".into()])
            .iter()
            .map(|r| parse_rate(r))
            .collect::<Result<_>>()?;
        let rtts = o.rtt.clone().unwrap_or_else(|| vec![1.0, 50.0, 200.0]);
        let losses = o.loss.clone().unwrap_or_else(|| vec![0.0, 0.1, 1.0, 5.0]);
        let reps = o.reps.unwrap_or(3).max(1);
        if losses.iter().any(|l| !(0.0..100.0).contains(l)) || rtts.iter().any(|r| r.is_nan() || *r < 0.0) {
            bail!("loss must be in [0, 100) and RTT non-negative");
        }
        Ok(Grid { rates, rtts, losses, reps })
    }
}

pub fn run(mut o: Options) -> Result<()> {
    let Grid { rates, rtts, losses, reps } = Grid::of(&mut o)?;
    let bench = std::env::current_exe()?;
    let manyfold = match &o.manyfold {
        Some(p) => p.clone(),
        None => crate::sibling("manyfold")?,
    };
    let mut report = Report::new(&o, reps);
    let rows = rows(&o.rows, &manyfold, &mut report)?;
    if let Some(n) = window_note(&rows, &rates, &rtts) {
        report.notes.push(n);
    }
    let work = tempfile::Builder::new().prefix("manyfold-bench-wan-").tempdir()?;
    super::netns::register_dir(work.path());
    let mut lab = Lab::with_mtu(&bench, o.mtu)?;

    if !o.skip_check {
        let secs = if o.quick { 1.0 } else { 3.0 };
        for &rate in &rates {
            let c = self_check(&mut lab, &bench, rate, secs, &o)?;
            eprintln!(
                "self-check {}: {:.1} Mbit/s delivered, {} lost",
                super::rate_label(rate),
                c.delivered_bps / 1e6,
                c.lost
            );
            report.checks.push(c);
        }
    }

    if o.check_only {
        drop(lab);
        report.print();
        return o.out.write_json(|| report.json());
    }

    let mut run = Run {
        o: &o,
        bench: &bench,
        manyfold: &manyfold,
        work: work.path(),
        reps,
        with_stream: rows.iter().any(|r| matches!(r, RowKind::Quic)),
        samples: BTreeMap::new(),
        port: 20_000,
    };
    for &rate_bps in &rates {
        for &rtt_ms in &rtts {
            for &loss_pct in &losses {
                let cell = Cell { rate_bps, rtt_ms, loss_pct };
                report.cells.push(run.cell(&mut lab, o.mtu, cell, &rows, "")?);
            }
        }
        // Large samples of this rate are not needed by the next one.
        run.drop_samples();
    }
    // The standing jumbo rows (issue 20): path MTU discovery measured off
    // loopback, on the same emulator with 9,000-byte devices.
    if let Some((mtu, cells, jumbo_rows)) = jumbo_section(&o, &rows, &rates, &rtts, &losses) {
        // Dropping a lab deletes what it registered, the work directory
        // included: make it again (the first full run lost its report here).
        drop(lab);
        std::fs::create_dir_all(work.path())?;
        super::netns::register_dir(work.path());
        lab = Lab::with_mtu(&bench, mtu)?;
        let suffix = format!(" · {mtu}-byte MTU");
        for cell in cells {
            report.cells.push(run.cell(&mut lab, mtu, cell, &jumbo_rows, &suffix)?);
        }
        run.drop_samples();
    }
    drop(lab);
    report.print();
    o.out.write_json(|| report.json())?;
    o.out.draw(|dir| report.charts(dir))
}

/// What every cell's transfers share.
struct Run<'a> {
    o: &'a Options,
    bench: &'a Path,
    manyfold: &'a Path,
    work: &'a Path,
    reps: usize,
    /// The quinn row runs: samples need the stream's hash too.
    with_stream: bool,
    samples: BTreeMap<u64, Sample>,
    /// The last port pair handed out.
    port: u16,
}

impl Run<'_> {
    /// Runs every row of `rows` in `cell` on `lab`, whose devices take
    /// `mtu` bytes, alternating A B C A B C, each row's name followed by
    /// `suffix`.
    fn cell(&mut self, lab: &mut Lab, mtu: u32, cell: Cell, rows: &[RowKind], suffix: &str) -> Result<CellResult> {
        let o = self.o;
        lab.configure(&link_config(&cell, o, mtu))?;
        let sample = sample_for(&cell, o, self.manyfold, self.work, self.with_stream, &mut self.samples)?;
        let bytes = sample.bytes;
        let mut results: Vec<RowResult> =
            rows.iter().map(|r| RowResult { name: r.name() + suffix, transfers: vec![], note: None }).collect();
        for rep in 0..self.reps {
            for (row, res) in rows.iter().zip(results.iter_mut()) {
                if res.note.is_some() {
                    continue; // timed out or failed in this cell already
                }
                // Two ports per transfer: the KCP row's tunnel and
                // TCP receiver need one each.
                self.port = if self.port >= 60_000 { 20_002 } else { self.port + 2 };
                let port = self.port;
                let out = self.work.join(format!("out-{port}"));
                std::fs::create_dir(&out)?;
                let job = Job { row, cell: &cell, sample: &sample, port, out: &out };
                let before = lab.stats()?.a2b;
                let t = transfer(lab, self.bench, self.manyfold, job, o).and_then(|mut t| {
                    let after = lab.stats()?.a2b;
                    let packets = after.forwarded.saturating_sub(before.forwarded);
                    let bytes = after.forwarded_bytes.saturating_sub(before.forwarded_bytes);
                    t.mean_packet = (packets > 0).then(|| bytes as f64 / packets as f64);
                    Ok(t)
                });
                let _ = std::fs::remove_dir_all(&out);
                match t {
                    Ok(t) => {
                        eprintln!(
                            "{} rtt {} ms loss {}% rep {} {}: {:.1} Mbit/s",
                            super::rate_label(cell.rate_bps),
                            cell.rtt_ms,
                            cell.loss_pct,
                            rep + 1,
                            res.name,
                            bytes as f64 * 8.0 / t.wall / 1e6
                        );
                        res.transfers.push(t);
                    }
                    Err(e) => {
                        lab.kill_leftovers();
                        eprintln!("{} rep {}: {e:#}", res.name, rep + 1);
                        res.note = Some(format!("{e:#}"));
                    }
                }
            }
        }
        let relay = lab.stats()?;
        Ok(CellResult { cell, bytes, rows: results, relay })
    }

    fn drop_samples(&mut self) {
        for (_, s) in std::mem::take(&mut self.samples) {
            let _ = std::fs::remove_file(s.file);
        }
    }
}

/// The jumbo section of the grid (`--jumbo-mtu`, issue 20: "an emulator
/// row with a 9,000-byte MTU"): the fastest rate, the RTTs up to 50 ms
/// and the losses up to 0.1% of the grid, for manyfold's default
/// controller and the kernel TCP rows, on devices of that MTU. None with
/// `--quick`, with `--jumbo-mtu 0`, or when the grid itself runs at it.
fn jumbo_section(
    o: &Options,
    rows: &[RowKind],
    rates: &[u64],
    rtts: &[f64],
    losses: &[f64],
) -> Option<(u32, Vec<Cell>, Vec<RowKind>)> {
    let mtu = Some(o.jumbo_mtu).filter(|&m| m != 0 && m != o.mtu && !o.quick)?;
    let rate_bps = rates.iter().copied().max()?;
    let default_cc = manyfold::EndpointConfig::default().connection.congestion.name().to_string();
    let manyfold_row = rows
        .iter()
        .find(|r| matches!(r, RowKind::Manyfold(Some(cc)) if *cc == default_cc))
        .or_else(|| rows.iter().find(|r| matches!(r, RowKind::Manyfold(_))));
    let jumbo_rows: Vec<RowKind> =
        manyfold_row.into_iter().chain(rows.iter().filter(|r| matches!(r, RowKind::Tcp(_)))).cloned().collect();
    let cells: Vec<Cell> = rtts
        .iter()
        .filter(|&&r| r <= 50.0)
        .flat_map(|&rtt_ms| {
            losses.iter().filter(|&&l| l <= 0.1).map(move |&loss_pct| Cell { rate_bps, rtt_ms, loss_pct })
        })
        .collect();
    (!cells.is_empty() && !jumbo_rows.is_empty()).then_some((mtu, cells, jumbo_rows))
}

/// The rows asked for; manyfold once per controller when `send --help`
/// lists a `--cc` option with possible values. A row that cannot run here
/// (kcptun not installed) is left out with a note in the report.
fn rows(names: &[String], manyfold: &Path, report: &mut Report) -> Result<Vec<RowKind>> {
    let mut rows = Vec::new();
    for n in names {
        match n.as_str() {
            "manyfold" => {
                let help =
                    Command::new(manyfold).args(["send", "--help"]).output().context("running manyfold send --help")?;
                let help = String::from_utf8_lossy(&help.stdout).to_string();
                let ccs = cc_values(&help);
                if ccs.is_empty() {
                    rows.push(RowKind::Manyfold(None));
                } else {
                    rows.extend(ccs.into_iter().map(|c| RowKind::Manyfold(Some(c))));
                }
            }
            "cubic" | "bbr" | "reno" => rows.push(RowKind::Tcp(n.clone())),
            "quinn" => {
                rows.push(RowKind::Quic);
                report.notes.push(format!(
                    "{QUIC_ROW}: the crate with its default crypto (TLS 1.3 via rustls, self-signed certificate), the \
                     only row that encrypts. It runs the loopback scenario's sender and receiver: memory to memory \
                     (a generated stream of the same size, hashed at the receiver, never written to disk, where \
                     the other rows read and write files). Flow-control windows (stream, connection, send) are \
                     raised to 2 × BDP where that exceeds quinn's defaults (1.25 MB stream window); \
                     congestion control is quinn's default (CUBIC)."
                ));
            }
            "kcp" => match kcp::find() {
                Ok(k) => {
                    report.notes.push(kcp::describe(&k));
                    rows.push(RowKind::Kcp(k));
                }
                Err(why) => {
                    eprintln!("wan: {KCP_ROW} row skipped: {why}");
                    report.notes.push(format!("{KCP_ROW}: skipped: {why}"));
                }
            },
            other => bail!("unknown row {other:?} (manyfold, cubic, bbr, quinn, kcp)"),
        }
    }
    Ok(rows)
}

/// The values of `--cc` in clap's help: `[possible values: a, b]` in the
/// option's paragraph, or else the known controller names its prose lists.
fn cc_values(help: &str) -> Vec<String> {
    let Some(at) = help.find("--cc") else { return vec![] };
    // The option's paragraph: up to the next line that starts an option.
    let mut lines = help[at..].lines();
    let first = lines.next().unwrap_or("");
    let para: String = std::iter::once(first)
        .chain(lines.take_while(|l| !l.trim_start().starts_with('-')))
        .collect::<Vec<_>>()
        .join("\n");
    let para = para.as_str();
    if let Some(p) = para.find("possible values:") {
        let list = &para[p + "possible values:".len()..];
        let list = &list[..list.find(']').unwrap_or(list.len())];
        return list
            .split(',')
            .map(|v| v.trim().split(':').next().unwrap_or("").trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
    }
    let mut found: Vec<String> = Vec::new();
    for word in para.split(|c: char| !c.is_ascii_alphanumeric()) {
        if ["newreno", "reno", "cubic", "bbr"].contains(&word) && !found.iter().any(|f| f == word) {
            found.push(word.to_string());
        }
    }
    found
}

/// The link of `cell` on devices of `mtu` bytes (the queue's floor is
/// 100 of their packets).
fn link_config(cell: &Cell, o: &Options, mtu: u32) -> LinkConfig {
    let one_way = Duration::from_secs_f64(cell.rtt_ms / 2.0 / 1e3);
    let bdp = cell.rate_bps as f64 / 8.0 * (cell.rtt_ms / 1e3);
    LinkConfig {
        rate_bps: cell.rate_bps,
        delay: one_way,
        jitter: Duration::from_secs_f64(o.jitter / 1e3),
        loss: cell.loss_pct / 100.0,
        reorder: o.reorder / 100.0,
        reorder_gap: Duration::from_secs_f64(o.reorder_gap / 1e3),
        queue_bytes: (bdp * o.queue_bdp).max(100.0 * f64::from(mtu)) as u64,
        seed: o.seed,
    }
}

/// Bytes for a cell: `secs` of the slower of the link and TCP Reno's
/// loss-limited rate (Mathis et al. 1997: MSS/RTT × 1.22/√p), but at
/// least 5% of `secs` at the link rate.
pub fn cell_size(cell: &Cell, secs: f64) -> u64 {
    let link = cell.rate_bps as f64 / 8.0;
    let rtt = (cell.rtt_ms / 1e3).max(0.001);
    let p = cell.loss_pct / 100.0;
    let mathis = if p > 0.0 { MSS / rtt * 1.22 / p.sqrt() } else { f64::INFINITY };
    let rate = link.min(mathis).max(link * 0.05);
    ((rate * secs) as u64).max(MIN_SIZE)
}

fn sample_for(
    cell: &Cell,
    o: &Options,
    manyfold: &Path,
    dir: &Path,
    with_stream: bool,
    cache: &mut BTreeMap<u64, Sample>,
) -> Result<Sample> {
    let (key, spec) = match &o.size {
        Some(s) => (0, s.clone()),
        None => {
            let b = cell_size(cell, o.secs);
            // Round to whole MB so cells share files.
            let b = b.div_ceil(1_000_000) * 1_000_000;
            (b, b.to_string())
        }
    };
    if let Some(s) = cache.get(&key) {
        return Ok(s.clone());
    }
    let path = dir.join(format!("sample-{key}.bin"));
    let st = Command::new(manyfold)
        .args(["samplegen", &spec])
        .arg(&path)
        .args(["--seed", &o.seed.to_string()])
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        bail!("samplegen {spec} failed");
    }
    let file_hash = crate::hash_file(&path)?;
    let bytes = std::fs::metadata(&path)?.len();
    let stream_hash = with_stream.then(|| Pattern::new(o.seed, bytes).hash());
    let s = Sample { file: path, file_hash, bytes, seed: o.seed, stream_hash };
    cache.insert(key, s.clone());
    Ok(s)
}

/// The windows the quinn and KCP rows use at each rate and RTT of the
/// grid, so that the report carries their exact settings.
fn window_note(rows: &[RowKind], rates: &[u64], rtts: &[f64]) -> Option<String> {
    let quic = rows.iter().any(|r| matches!(r, RowKind::Quic));
    let kcp = rows.iter().any(|r| matches!(r, RowKind::Kcp(_)));
    if !quic && !kcp {
        return None;
    }
    let mut parts = Vec::new();
    for &rate_bps in rates {
        for &rtt_ms in rtts {
            let cell = Cell { rate_bps, rtt_ms, loss_pct: 0.0 };
            let mut p = Vec::new();
            if quic {
                p.push(match quic_window(&cell) {
                    Some(w) => format!("quinn {:.2} MB", w as f64 / 1e6),
                    None => "quinn defaults".to_string(),
                });
            }
            if kcp {
                p.push(format!("kcptun W = {}", kcp::window(rate_bps, rtt_ms)));
            }
            parts.push(format!("{} × {rtt_ms} ms: {}", super::rate_label(rate_bps), p.join(", ")));
        }
    }
    Some(format!("Windows per link: {}.", parts.join("; ")))
}

/// The quinn row's flow-control window: 2 × BDP (the path plus a full
/// 1-BDP queue) when that exceeds quinn's own 1.25 MB default, else none
/// (quinn's defaults).
fn quic_window(cell: &Cell) -> Option<u64> {
    let bdp = cell.rate_bps as f64 / 8.0 * cell.rtt_ms / 1e3;
    let w = (2.0 * bdp) as u64;
    (w > 1_250_000).then_some(w)
}

/// One transfer to run: which row, in which cell, of which sample, on
/// which ports (`port` and `port + 1`), with its files in `out`.
#[derive(Debug, Clone, Copy)]
struct Job<'a> {
    row: &'a RowKind,
    cell: &'a Cell,
    sample: &'a Sample,
    port: u16,
    out: &'a Path,
}

/// One transfer of `row` across the lab: receiver (and tunnel) first, then
/// the sender, timed from its start to its exit; the stored copy (or the
/// quinn receiver's stream) must match the sample's hash. `bench` and
/// `manyfold` are the binaries the lab runs.
fn transfer(lab: &Lab, bench: &Path, manyfold: &Path, job: Job, o: &Options) -> Result<Transfer> {
    let Job { row, cell, sample, port, out } = job;
    let limit = Duration::from_secs(o.timeout);
    let (mut recv, mut send, stored) = commands(lab, bench, manyfold, job)?;
    // Each side's stderr is kept, and its tail quoted if the transfer fails.
    let logs = [out.join("receiver.err"), out.join("sender.err")];
    for (c, log) in [&mut recv, &mut send].into_iter().zip(&logs) {
        c.stdout(Stdio::null()).stderr(std::fs::File::create(log)?);
    }
    let mut tunnel: Option<Tunnel> = None;
    let result = run_transfer(lab, row, cell, port, recv, send, &mut tunnel, limit, out);
    let result = result.map_err(|e| {
        let mut e = e;
        for (log, who) in logs.iter().zip(["receiver", "sender"]) {
            if let Some(said) = error_excerpt(&std::fs::read_to_string(log).unwrap_or_default()) {
                e = e.context(format!("{who} said: {said}"));
            }
        }
        match tunnel.as_mut() {
            Some(t) => t.explain(e),
            None => e,
        }
    });
    let (wall, su, ru) = result?;
    if let Some(stored) = stored {
        if crate::hash_file(&stored)? != sample.file_hash {
            bail!("stored file hash differs");
        }
    }
    let mut t = Transfer {
        wall,
        send_cpu: su.cpu.as_secs_f64(),
        recv_cpu: ru.cpu.as_secs_f64(),
        send_rss_mib: su.max_rss_kib as f64 / 1024.0,
        recv_rss_mib: ru.max_rss_kib as f64 / 1024.0,
        mean_packet: None,
    };
    if let Some(tunnel) = tunnel {
        let (client, server) = tunnel.usage()?;
        t.send_cpu += client.cpu;
        t.recv_cpu += server.cpu;
        t.send_rss_mib += client.max_rss_kib as f64 / 1024.0;
        t.recv_rss_mib += server.max_rss_kib as f64 / 1024.0;
    }
    Ok(t)
}

/// The job's receiver (in the lab's namespace b) and sender (in a), and
/// where the copy lands (`None`: the receiver checks the hash itself).
fn commands(lab: &Lab, bench: &Path, manyfold: &Path, job: Job) -> Result<(Command, Command, Option<PathBuf>)> {
    let Job { row, cell, sample, port, out } = job;
    let to = format!("{ADDR_B}:{port}");
    let src = &sample.file;
    Ok(match row {
        RowKind::Manyfold(cc) => {
            let mut r = lab.exec(&lab.ns_b, manyfold);
            r.args(["recv", "--once", "--listen", &to, "--dir"]).arg(out);
            let mut s = lab.exec(&lab.ns_a, manyfold);
            s.arg("send").arg(src).args(["--to", &to]);
            if let Some(cc) = cc {
                r.args(["--cc", cc]);
                s.args(["--cc", cc]);
            }
            (r, s, Some(out.join(src.file_name().context("sample has no name")?)))
        }
        RowKind::Tcp(cc) => {
            let stored = out.join("sample.bin");
            let mut r = lab.exec(&lab.ns_b, bench);
            r.arg("tcp-recv").arg(&to).arg(&stored).arg(&sample.file_hash);
            let mut s = lab.exec(&lab.ns_a, bench);
            s.args(["wan", "tcp-send"]).arg(src).arg(&to).args(["--cc", cc]);
            (r, s, Some(stored))
        }
        RowKind::Quic => {
            let hash = sample.stream_hash.as_deref().context("no stream hash for the quinn row")?;
            let cert = out.join("cert.der");
            let (bytes, seed) = (sample.bytes.to_string(), sample.seed.to_string());
            let window = quic_window(cell).map(|w| w.to_string());
            let mut r = lab.exec(&lab.ns_b, bench);
            r.args(["wan", "quic-recv", &to, "--bytes", &bytes, "--hash", hash]).arg("--cert").arg(&cert);
            let mut s = lab.exec(&lab.ns_a, bench);
            s.args(["wan", "quic-send", &to, "--bytes", &bytes, "--seed", &seed]).arg("--cert").arg(&cert);
            if let Some(w) = &window {
                r.args(["--window", w]);
                s.args(["--window", w]);
            }
            (r, s, None)
        }
        RowKind::Kcp(_) => {
            // TCP receiver on the receiver side's loopback; the tunnel (started
            // below, once the receiver listens) carries the sender's
            // connection from its own loopback across the link.
            let stored = out.join("sample.bin");
            let mut r = lab.exec(&lab.ns_b, bench);
            r.args(["wan", "kcp-recv", &format!("127.0.0.1:{}", port + 1)]).arg(&stored).arg(&sample.file_hash);
            r.args(["--bytes", &sample.bytes.to_string()]);
            let mut s = lab.exec(&lab.ns_a, bench);
            s.args(["wan", "kcp-send"]).arg(src).arg(format!("127.0.0.1:{port}"));
            (r, s, Some(stored))
        }
    })
}

/// What a failed child printed that explains it: anyhow's `Error: …` and
/// its causes (without a backtrace), else the last line.
fn error_excerpt(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.iter().position(|l| l.starts_with("Error:")) {
        Some(i) => Some(
            lines[i..]
                .iter()
                .take_while(|l| !l.starts_with("Stack backtrace"))
                .take(8)
                .copied()
                .collect::<Vec<_>>()
                .join(" "),
        ),
        None => lines.last().map(|l| l.to_string()),
    }
}

/// Starts the receiver (and the KCP row's tunnel), then the sender, and
/// waits for both: (sender's wall time, sender's and receiver's usage).
#[allow(clippy::too_many_arguments)]
fn run_transfer(
    lab: &Lab,
    row: &RowKind,
    cell: &Cell,
    port: u16,
    recv: Command,
    send: Command,
    tunnel: &mut Option<Tunnel>,
    limit: Duration,
    out: &Path,
) -> Result<(f64, child::Usage, child::Usage)> {
    let r = child::spawn(recv, "receiver")?;
    let listen_port = if matches!(row, RowKind::Kcp(_)) { port + 1 } else { port };
    if let Err(e) = lab.wait_listening(&lab.ns_b, listen_port, Duration::from_secs(5)) {
        r.kill();
        return Err(e);
    }
    if let RowKind::Kcp(k) = row {
        let window = kcp::window(cell.rate_bps, cell.rtt_ms);
        match Tunnel::start(lab, k, (port, port + 1), window, kcp::BULK_MODE, out) {
            Ok(t) => *tunnel = Some(t),
            Err(e) => {
                r.kill();
                return Err(e);
            }
        }
    }
    let started = Instant::now();
    let s = match child::spawn(send, "sender") {
        Ok(s) => s,
        Err(e) => {
            r.kill();
            return Err(e);
        }
    };
    let su = match s.wait(limit) {
        Ok(u) => u,
        Err(e) => {
            r.kill();
            return Err(e);
        }
    };
    let wall = started.elapsed().as_secs_f64();
    // The receiver may close last (a manyfold receiver lingers in
    // TIME-WAIT, spec §4.8): 15 s after the sender, whatever its length.
    let ru = r.wait_more(Duration::from_secs(15))?;
    Ok((wall, su, ru))
}

/// Offers the link rate for `secs` as paced UDP, loss 0, RTT 1 ms, and
/// counts what arrives.
fn self_check(lab: &mut Lab, bench: &Path, rate: u64, secs: f64, o: &Options) -> Result<CheckResult> {
    let cell = Cell { rate_bps: rate, rtt_ms: 1.0, loss_pct: 0.0 };
    lab.configure(&link_config(&cell, o, o.mtu))?;
    let port = 19_999u16;
    let drops_before = lab.host_drops();
    let relay_before = lab.relay_cpu()?;
    let listen = format!("{ADDR_B}:{port}");
    let mut r = lab.exec(&lab.ns_b, bench);
    r.args(["wan", "udp-recv", &listen, &(secs + 10.0).to_string()]).stdout(Stdio::piped());
    let recv = r.spawn().context("starting the check's receiver")?;
    lab.wait_listening(&lab.ns_b, port, Duration::from_secs(5))?;
    let mut s = lab.exec(&lab.ns_a, bench);
    s.args(["wan", "udp-send", &listen, &rate.to_string(), &secs.to_string()]);
    let sent = s.output().context("running the check's sender")?;
    let got = recv.wait_with_output()?;
    let sent = String::from_utf8_lossy(&sent.stdout).to_string();
    let got = String::from_utf8_lossy(&got.stdout).to_string();
    let stats = lab.stats()?;
    let drops = lab.host_drops();
    let relay_cpu = (lab.relay_cpu()? - relay_before).as_secs_f64();
    let f = |l: &str, k: &str| probe::field(l, k).with_context(|| format!("no {k} in {l:?}"));
    let (n_sent, n_recv) = (f(&sent, "sent")?, f(&got, "received")?);
    let (bytes, span) = (f(&got, "bytes")?, f(&got, "secs")?);
    Ok(CheckResult {
        rate_bps: rate,
        secs,
        offered_bps: n_sent * ((1472 + probe::HEADERS) * 8) as f64 / secs,
        delivered_bps: if span > 0.0 { bytes * 8.0 / span } else { 0.0 },
        sent: n_sent as u64,
        lost: (n_sent - n_recv).max(0.0) as u64,
        relay: stats,
        ring_drops: drops.0 - drops_before.0,
        rcvbuf_drops: drops.1 - drops_before.1,
        relay_cpu,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_sizes_follow_the_slowest_row() {
        let c = |rate_bps, rtt_ms, loss_pct| Cell { rate_bps, rtt_ms, loss_pct };
        // Lossless: the link rate.
        assert_eq!(cell_size(&c(100_000_000, 50.0, 0.0), 5.0), 62_500_000);
        // 5% at 200 ms: Mathis says ~40 kB/s; floored at 5% of the link.
        assert_eq!(cell_size(&c(100_000_000, 200.0, 5.0), 5.0), 3_125_000);
    }

    #[test]
    fn windows_of_the_quinn_and_kcp_rows_are_listed_per_link() {
        let k = Kcptun { client: "c".into(), server: "s".into(), version: "v".into() };
        let n = window_note(&[RowKind::Quic, RowKind::Kcp(k)], &[1_000_000_000], &[1.0, 200.0]).unwrap();
        assert!(n.contains("1 Gbit/s × 1 ms: quinn defaults, kcptun W = 5649"), "{n}");
        assert!(n.contains("1 Gbit/s × 200 ms: quinn 50.00 MB, kcptun W = 24075"), "{n}");
        assert_eq!(window_note(&[RowKind::Tcp("bbr".into())], &[1_000_000_000], &[1.0]), None);
    }

    #[test]
    fn a_failed_childs_error_is_quoted_without_its_backtrace() {
        let err = "Error: receiver did not confirm\n\nCaused by:\n    early eof\n\nStack backtrace:\n   0: x\n";
        assert_eq!(error_excerpt(err).unwrap(), "Error: receiver did not confirm Caused by: early eof");
        assert_eq!(error_excerpt("warning\nbind failed\n").unwrap(), "bind failed");
        assert_eq!(error_excerpt("\n"), None);
    }

    #[test]
    fn controller_values_are_read_from_help() {
        let help = "Options:\n      --cc <CC>\n          Congestion controller\n          \n          [default: bbr]\n          [possible values: newreno, cubic, bbr]\n\n      --trace\n";
        assert_eq!(cc_values(help), vec!["newreno", "cubic", "bbr"]);
        assert!(cc_values("Options:\n      --to <ADDR>\n").is_empty());
        let prose = "      --cc <NAME>\n          Congestion controller: newreno, cubic or bbr (model-based)\n\n          [default: newreno]\n\n      --trace\n          bbr\n";
        assert_eq!(cc_values(prose), vec!["newreno", "cubic", "bbr"]);
    }
}
