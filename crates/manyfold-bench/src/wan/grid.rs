//! Runs the `wan` grid: the emulator's self-check, then every cell
//! (rate × RTT × loss) with every row alternating A B C A B C, each
//! transfer crossing the relay between the namespaces and hash-checked at
//! the receiver.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::link::LinkConfig;
use super::netns::{Lab, ADDR_B};
use super::report::{CellResult, CheckResult, Report, RowResult, Transfer};
use super::{parse_rate, probe, Options};
use crate::child;

/// TCP's payload per 1,500-byte packet with timestamps (Mathis estimate).
const MSS: f64 = 1448.0;
/// Smallest file: handshakes must not dominate.
const MIN_SIZE: u64 = 1_000_000;

#[derive(Debug, Clone)]
enum RowKind {
    /// manyfold, with `--cc NAME` when the CLI offers it.
    Manyfold(Option<String>),
    /// Kernel TCP with this congestion control (per-namespace sysctl).
    Tcp(String),
}

impl RowKind {
    fn name(&self) -> String {
        match self {
            RowKind::Manyfold(None) => "manyfold".into(),
            RowKind::Manyfold(Some(cc)) => format!("manyfold ({cc})"),
            RowKind::Tcp(cc) => format!("kernel TCP {cc}"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub rate_bps: u64,
    pub rtt_ms: f64,
    pub loss_pct: f64,
}

pub fn run(mut o: Options) -> Result<()> {
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
    let bench = std::env::current_exe()?;
    let manyfold = match &o.manyfold {
        Some(p) => p.clone(),
        None => crate::sibling("manyfold")?,
    };
    let rows = rows(&o.rows, &manyfold)?;
    let work = tempfile::Builder::new().prefix("manyfold-bench-wan-").tempdir()?;
    super::netns::register_dir(work.path());
    let mut lab = Lab::create(&bench)?;
    let mut report = Report::new(&o, reps);

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

    let mut samples: BTreeMap<u64, (PathBuf, String)> = BTreeMap::new();
    let mut port = 20_000u16;
    for &rate_bps in &rates {
        for &rtt_ms in &rtts {
            for &loss_pct in &losses {
                let cell = Cell { rate_bps, rtt_ms, loss_pct };
                lab.configure(&link_config(&cell, &o))?;
                let (src, hash, bytes) = sample_for(&cell, &o, &manyfold, work.path(), &mut samples)?;
                let mut results: Vec<RowResult> =
                    rows.iter().map(|r| RowResult { name: r.name(), transfers: vec![], note: None }).collect();
                for rep in 0..reps {
                    for (row, res) in rows.iter().zip(results.iter_mut()) {
                        if res.note.is_some() {
                            continue; // timed out or failed in this cell already
                        }
                        port = port.checked_add(1).unwrap_or(20_001);
                        let out = work.path().join(format!("out-{port}"));
                        std::fs::create_dir(&out)?;
                        let t = transfer(&lab, row, &bench, &manyfold, &src, &hash, port, &out, &o);
                        let _ = std::fs::remove_dir_all(&out);
                        match t {
                            Ok(t) => {
                                eprintln!(
                                    "{} rtt {rtt_ms} ms loss {loss_pct}% rep {} {}: {:.1} Mbit/s",
                                    super::rate_label(rate_bps),
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
                let stats = lab.stats()?;
                report.cells.push(CellResult { cell, bytes, rows: results, relay: stats });
            }
        }
        // Large samples of this rate are not needed by the next one.
        for (_, (p, _)) in std::mem::take(&mut samples) {
            let _ = std::fs::remove_file(p);
        }
    }
    drop(lab);
    report.print();
    if let Some(path) = &o.json {
        std::fs::write(path, report.json()).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The rows asked for; manyfold once per controller when `send --help`
/// lists a `--cc` option with possible values.
fn rows(names: &[String], manyfold: &Path) -> Result<Vec<RowKind>> {
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
            other => bail!("unknown row {other:?} (manyfold, cubic, bbr)"),
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

fn link_config(cell: &Cell, o: &Options) -> LinkConfig {
    let one_way = Duration::from_secs_f64(cell.rtt_ms / 2.0 / 1e3);
    let bdp = cell.rate_bps as f64 / 8.0 * (cell.rtt_ms / 1e3);
    LinkConfig {
        rate_bps: cell.rate_bps,
        delay: one_way,
        jitter: Duration::from_secs_f64(o.jitter / 1e3),
        loss: cell.loss_pct / 100.0,
        reorder: o.reorder / 100.0,
        reorder_gap: Duration::from_secs_f64(o.reorder_gap / 1e3),
        queue_bytes: (bdp * o.queue_bdp).max(100.0 * 1500.0) as u64,
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
    cache: &mut BTreeMap<u64, (PathBuf, String)>,
) -> Result<(PathBuf, String, u64)> {
    let (key, spec) = match &o.size {
        Some(s) => (0, s.clone()),
        None => {
            let b = cell_size(cell, o.secs);
            // Round to whole MB so cells share files.
            let b = b.div_ceil(1_000_000) * 1_000_000;
            (b, b.to_string())
        }
    };
    if let Some((p, h)) = cache.get(&key) {
        return Ok((p.clone(), h.clone(), std::fs::metadata(p)?.len()));
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
    let hash = crate::hash_file(&path)?;
    cache.insert(key, (path.clone(), hash.clone()));
    Ok((path.clone(), hash, std::fs::metadata(&path)?.len()))
}

#[allow(clippy::too_many_arguments)]
fn transfer(
    lab: &Lab,
    row: &RowKind,
    bench: &Path,
    manyfold: &Path,
    src: &Path,
    hash: &str,
    port: u16,
    out: &Path,
    o: &Options,
) -> Result<Transfer> {
    let to = format!("{ADDR_B}:{port}");
    let limit = Duration::from_secs(o.timeout);
    let (recv, send, stored) = match row {
        RowKind::Manyfold(cc) => {
            let mut r = lab.exec(&lab.ns_b, manyfold);
            r.args(["recv", "--once", "--listen", &to, "--dir"]).arg(out);
            let mut s = lab.exec(&lab.ns_a, manyfold);
            s.arg("send").arg(src).args(["--to", &to]);
            if let Some(cc) = cc {
                r.args(["--cc", cc]);
                s.args(["--cc", cc]);
            }
            (r, s, out.join(src.file_name().context("sample has no name")?))
        }
        RowKind::Tcp(cc) => {
            let stored = out.join("sample.bin");
            let mut r = lab.exec(&lab.ns_b, bench);
            r.arg("tcp-recv").arg(&to).arg(&stored).arg(hash);
            let mut s = lab.exec(&lab.ns_a, bench);
            s.args(["wan", "tcp-send"]).arg(src).arg(&to).args(["--cc", cc]);
            (r, s, stored)
        }
    };
    let mut recv = recv;
    let mut send = send;
    for c in [&mut recv, &mut send] {
        c.stdout(Stdio::null()).stderr(Stdio::null());
    }
    let r = child::spawn(recv, "receiver")?;
    if let Err(e) = lab.wait_listening(&lab.ns_b, port, Duration::from_secs(5)) {
        r.kill();
        return Err(e);
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
    let ru = r.wait(Duration::from_secs(15))?;
    let got = crate::hash_file(&stored)?;
    if got != hash {
        bail!("stored file hash differs");
    }
    Ok(Transfer {
        wall,
        send_cpu: su.cpu.as_secs_f64(),
        recv_cpu: ru.cpu.as_secs_f64(),
        send_rss_mib: su.max_rss_kib as f64 / 1024.0,
        recv_rss_mib: ru.max_rss_kib as f64 / 1024.0,
    })
}

/// Offers the link rate for `secs` as paced UDP, loss 0, RTT 1 ms, and
/// counts what arrives.
fn self_check(lab: &mut Lab, bench: &Path, rate: u64, secs: f64, o: &Options) -> Result<CheckResult> {
    let cell = Cell { rate_bps: rate, rtt_ms: 1.0, loss_pct: 0.0 };
    lab.configure(&link_config(&cell, o))?;
    let port = 19_999u16;
    let drops_before = lab.host_drops();
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
    fn controller_values_are_read_from_help() {
        let help = "Options:\n      --cc <CC>\n          Congestion controller\n          \n          [default: bbr]\n          [possible values: newreno, cubic, bbr]\n\n      --trace\n";
        assert_eq!(cc_values(help), vec!["newreno", "cubic", "bbr"]);
        assert!(cc_values("Options:\n      --to <ADDR>\n").is_empty());
        let prose = "      --cc <NAME>\n          Congestion controller: newreno, cubic or bbr (model-based)\n\n          [default: newreno]\n\n      --trace\n          bbr\n";
        assert_eq!(cc_values(prose), vec!["newreno", "cubic", "bbr"]);
    }
}
