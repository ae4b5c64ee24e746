//! One measured transfer per row: start the receiver process, wait until it
//! listens, start the sender, and read both processes' wall time, CPU and
//! peak RSS from `wait4` (crate::child). Every row's receiver checks the
//! BLAKE3 hash of what arrived, except the ceiling's, which counts bytes.
//!
//! The children's stderr goes to files in the work directory: a failed
//! transfer's error then carries what the children said (a receiver's
//! hash mismatch, say), and a transfer that ran out of time is a
//! [`TimedOut`] error that a scenario can report and go on from.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use manyfold_proto::CongestionAlgorithm;

use super::mf::STATS_PREFIX;
use crate::child;

/// How a manyfold row is configured (both sides alike).
#[derive(Debug, Clone, Default)]
pub struct MfRow {
    pub cc: CongestionAlgorithm,
    /// `ConnectionConfig::send_buffer` and `recv_buffer` (paper 00's window
    /// comparison).
    pub buffers: Option<usize>,
    /// `ConnectionConfig::recv_buffer` alone: caps the window a receiver
    /// advertises, so the sender's in-flight data (`loss-table`).
    pub recv_buffer: Option<usize>,
    /// Percent of the datagrams each side sends that its driver drops.
    pub loss: f64,
    /// Seed of the sender's fault injector; the receiver's is this + 1.
    pub fault_seed: u64,
    /// `ConnectionConfig::connect_timeout`, if not the library's.
    pub connect_timeout: Option<Duration>,
    /// Protected connections (spec §19): the lab's pre-shared key.
    pub encrypted: bool,
    /// Every datagram this size, path MTU discovery off (spec §3.7).
    pub max_datagram: Option<u16>,
    /// Both processes on a current-thread tokio runtime.
    pub one_thread: bool,
}

/// What one row moves and how.
#[derive(Debug, Clone)]
pub enum Row {
    /// manyfold, configured as [`MfRow`] says.
    Manyfold(MfRow),
    /// Kernel TCP with a congestion control (`TCP_CONGESTION`).
    Tcp(&'static str),
    /// quinn, encrypted.
    Quic,
    /// Raw UDP, GSO/GRO, no reliability.
    Blast,
}

impl Row {
    pub fn label(&self) -> String {
        match self {
            Row::Manyfold(m) => {
                let mut l = format!("manyfold ({})", m.cc.name());
                if let Some(b) = m.buffers {
                    l += &format!(", buffers {}", super::human(b as u64));
                }
                if let Some(b) = m.recv_buffer {
                    l += &format!(", receive buffer {b} B");
                }
                if m.loss > 0.0 {
                    l += &format!(", loss {}%", m.loss);
                }
                if m.encrypted {
                    l += ", encrypted";
                }
                if let Some(d) = m.max_datagram {
                    l += &format!(", datagrams fixed at {d} B");
                }
                if m.one_thread {
                    l += ", one-thread runtime";
                }
                l
            }
            Row::Tcp(cc) => format!("kernel TCP ({cc})"),
            Row::Quic => "quinn (encrypts: TLS 1.3 via rustls)".to_string(),
            Row::Blast => "raw UDP blast, GSO/GRO, no reliability (ceiling)".to_string(),
        }
    }
}

/// One transfer's cost.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Sender start to sender exit (the ceiling: to its last datagram's arrival).
    pub wall: f64,
    pub send_cpu: f64,
    pub recv_cpu: f64,
    pub send_rss_mib: f64,
    pub recv_rss_mib: f64,
    /// Bytes that arrived (all of them, except for the ceiling).
    pub delivered: u64,
    /// The manyfold sender's connection counters (manyfold rows only).
    pub mf: Option<MfStats>,
}

/// A manyfold sender's `ConnStats`, as `mf-send` prints them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MfStats {
    pub packets_sent: u64,
    pub retransmissions: u64,
    pub lost_packets: u64,
    pub rto_expiries: u64,
    pub packets_received: u64,
    pub cwnd: u64,
    pub srtt_us: u64,
    pub min_rtt_us: u64,
    pub datagram: u64,
    /// Microseconds new data was held back, by cause (`ConnStats::limited`):
    /// nothing queued, the receiver's window, the congestion window, the pacer.
    pub limited_app_us: u64,
    pub limited_peer_us: u64,
    pub limited_cwnd_us: u64,
    pub limited_pacing_us: u64,
}

impl MfStats {
    pub fn from_conn(s: &manyfold::ConnStats) -> MfStats {
        let us = |d: Duration| d.as_micros().min(u128::from(u64::MAX)) as u64;
        MfStats {
            packets_sent: s.packets_sent,
            retransmissions: s.retransmissions,
            lost_packets: s.lost_packets,
            rto_expiries: s.rto_expiries,
            packets_received: s.packets_received,
            cwnd: s.cwnd,
            srtt_us: us(s.srtt),
            min_rtt_us: us(s.min_rtt),
            datagram: u64::from(s.datagram_size),
            limited_app_us: us(s.limited.application),
            limited_peer_us: us(s.limited.peer_window),
            limited_cwnd_us: us(s.limited.congestion),
            limited_pacing_us: us(s.limited.pacing),
        }
    }

    /// Every field under its key: the one list the line and its parser share.
    fn fields(&mut self) -> [(&'static str, &mut u64); 13] {
        [
            ("packets_sent", &mut self.packets_sent),
            ("retransmissions", &mut self.retransmissions),
            ("lost_packets", &mut self.lost_packets),
            ("rto_expiries", &mut self.rto_expiries),
            ("packets_received", &mut self.packets_received),
            ("cwnd", &mut self.cwnd),
            ("srtt_us", &mut self.srtt_us),
            ("min_rtt_us", &mut self.min_rtt_us),
            ("datagram", &mut self.datagram),
            ("limited_app_us", &mut self.limited_app_us),
            ("limited_peer_us", &mut self.limited_peer_us),
            ("limited_cwnd_us", &mut self.limited_cwnd_us),
            ("limited_pacing_us", &mut self.limited_pacing_us),
        ]
    }

    /// The `mf-stats key=value ...` line `mf-send` prints.
    pub fn line(mut self) -> String {
        let mut line = STATS_PREFIX.to_string();
        for (key, value) in self.fields() {
            line += &format!(" {key}={value}");
        }
        line
    }

    /// Reads the `mf-stats key=value ...` line out of a sender's stdout.
    pub fn parse(stdout: &str) -> Option<MfStats> {
        let line = stdout.lines().find_map(|l| l.strip_prefix(STATS_PREFIX))?;
        let mut s = MfStats::default();
        for field in line.split_whitespace() {
            let (key, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            if let Some((_, v)) = s.fields().into_iter().find(|(k, _)| *k == key) {
                *v = value;
            }
        }
        Some(s)
    }
}

/// A transfer whose process failed, with the last lines each one printed.
#[derive(Debug, Clone)]
pub struct Failed {
    pub what: String,
    pub sender: String,
    pub receiver: String,
}

impl Failed {
    /// The last line either process printed (the receiver's first: a
    /// sender usually only reports that the receiver went away).
    pub fn last_words(&self) -> String {
        for (who, text) in [("receiver", &self.receiver), ("sender", &self.sender)] {
            if let Some(line) = text.rsplit(" / ").next().filter(|l| !l.is_empty()) {
                return format!("{who}: {line}");
            }
        }
        "no message from either process".to_string()
    }
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: sender said {:?}; receiver said {:?}", self.what, self.sender, self.receiver)
    }
}

/// A transfer that did not finish within its time limit.
#[derive(Debug, Clone, Copy)]
pub struct TimedOut(pub Duration);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "did not finish within {} s", self.0.as_secs())
    }
}

impl std::error::Error for TimedOut {}

impl Sample {
    /// Delivered megabytes (10^6) per second.
    pub fn goodput(&self) -> f64 {
        self.delivered as f64 / 1e6 / self.wall
    }
}

/// Runs `row` once: `bytes` of the stream for `seed`, whose hash is `hash`.
/// A sender still running after `limit` is killed and the error is a
/// [`TimedOut`]; any other failure carries what the children printed.
pub fn run(row: &Row, work: &Path, bytes: u64, seed: u64, hash: &str, limit: Duration) -> Result<Sample> {
    crate::on_free_addr(|addr| {
        let (mut r, mut s) = commands(row, addr, work, hash)?;
        // The manyfold sender's counters, the ceiling receiver's count.
        let out = scratch(work, "out")?;
        match row {
            Row::Manyfold(_) => drop(s.stdout(out.reopen()?)),
            Row::Blast => drop(r.stdout(out.reopen()?)),
            _ => {}
        }
        for c in [&mut r, &mut s] {
            c.arg("--bytes").arg(bytes.to_string()).arg("--seed").arg(seed.to_string());
        }
        let what = row.label();
        // The TCP rows' sender retries connecting; the others need the receiver bound first.
        let ready = if matches!(row, Row::Tcp(_)) { None } else { Some(addr) };
        let Measured { mut sample, started } =
            Transfer { recv: r, send: s, what: what.clone(), ready }.measure(work, bytes, limit)?;
        let text = std::fs::read_to_string(out.path()).with_context(|| format!("reading {}", out.path().display()))?;
        if let Row::Manyfold(_) = row {
            sample.mf =
                Some(MfStats::parse(&text).with_context(|| format!("{what}: sender printed no counters: {text:?}"))?);
        }
        if let Row::Blast = row {
            let mut f = text.split_whitespace().skip(1).map(|w| w.parse::<u128>());
            let (Some(Ok(got)), Some(Ok(last))) = (f.next(), f.next()) else {
                bail!("blast receiver printed {text:?}");
            };
            let start = started.duration_since(UNIX_EPOCH)?.as_nanos();
            sample.delivered = got as u64;
            sample.wall = last.saturating_sub(start) as f64 / 1e9;
        }
        Ok(sample)
    })
}

/// A file in `work` for a child's output, deleted when dropped.
fn scratch(work: &Path, suffix: &str) -> Result<tempfile::NamedTempFile> {
    Ok(tempfile::Builder::new().suffix(&format!(".{suffix}")).tempfile_in(work)?)
}

/// The receiver's and the sender's command lines of `row` (this binary's
/// hidden subcommands), without the stream's `--bytes` and `--seed`.
fn commands(row: &Row, addr: SocketAddr, work: &Path, hash: &str) -> Result<(Command, Command)> {
    let me = std::env::current_exe()?;
    let (mut r, mut s) = (Command::new(&me), Command::new(&me));
    let (port, addr) = (addr.port(), addr.to_string());
    match row {
        Row::Manyfold(m) => {
            r.args(["mf-recv", "--listen", &addr, "--hash", hash]);
            s.args(["mf-send", "--to", &addr]);
            for (c, fault_seed) in [(&mut r, m.fault_seed.wrapping_add(1)), (&mut s, m.fault_seed)] {
                m.configure(c, fault_seed);
            }
        }
        Row::Tcp(cc) => {
            r.args(["tcp-mem-recv", "--listen", &addr, "--hash", hash, "--cc", cc]);
            s.args(["tcp-mem-send", "--to", &addr, "--cc", cc]);
        }
        Row::Quic => {
            let cert = work.join(format!("cert-{port}.der"));
            r.args(["quic-recv", "--listen", &addr, "--hash", hash, "--cert"]).arg(&cert);
            s.args(["quic-send", "--to", &addr, "--cert"]).arg(&cert);
        }
        Row::Blast => {
            r.args(["blast-recv", "--listen", &addr]);
            s.args(["blast-send", "--to", &addr]);
        }
    }
    Ok((r, s))
}

impl MfRow {
    /// One side's options: both sides alike, each with its own fault seed.
    fn configure(&self, c: &mut Command, fault_seed: u64) {
        c.arg("--cc").arg(self.cc.name());
        if let Some(b) = self.buffers {
            c.arg("--send-buffer").arg(b.to_string());
        }
        if let Some(b) = self.recv_buffer.or(self.buffers) {
            c.arg("--recv-buffer").arg(b.to_string());
        }
        if self.loss > 0.0 {
            c.arg("--loss").arg(self.loss.to_string()).arg("--fault-seed").arg(fault_seed.to_string());
        }
        if let Some(t) = self.connect_timeout {
            c.arg("--connect-timeout").arg(t.as_secs().max(1).to_string());
        }
        if self.encrypted {
            c.arg("--encrypt");
        }
        if let Some(d) = self.max_datagram {
            c.arg("--max-datagram").arg(d.to_string());
        }
        if self.one_thread {
            c.arg("--one-thread");
        }
    }
}

/// One measured transfer: a receiver process and a sender process.
#[derive(Debug)]
pub struct Transfer {
    pub recv: Command,
    pub send: Command,
    /// The row's name, for errors and the children's warnings.
    pub what: String,
    /// Start the sender only once something has bound this UDP address
    /// (the receiver is up); `None` when the sender retries by itself.
    pub ready: Option<SocketAddr>,
}

/// A [`Sample`] with the sender's start on the system clock (the ceiling's
/// receiver stamps its last datagram's arrival on that clock).
#[derive(Debug)]
struct Measured {
    sample: Sample,
    started: SystemTime,
}

impl Transfer {
    /// Starts the receiver, waits until it is ready, starts the sender and
    /// reads both processes' cost; `bytes` is what the transfer delivers.
    /// The children's stderr goes to files in `work`, quoted in a failure's
    /// error and shown on success if not empty. A sender still running
    /// after `limit` is killed and the error is a [`TimedOut`].
    pub fn run(self, work: &Path, bytes: u64, limit: Duration) -> Result<Sample> {
        Ok(self.measure(work, bytes, limit)?.sample)
    }

    fn measure(mut self, work: &Path, bytes: u64, limit: Duration) -> Result<Measured> {
        let (recv_err, send_err) = (scratch(work, "err")?, scratch(work, "err")?);
        self.recv.stderr(recv_err.reopen()?);
        self.send.stderr(send_err.reopen()?);
        // A failing child's last lines should be its error chain, not a backtrace.
        for c in [&mut self.recv, &mut self.send] {
            c.env("RUST_LIB_BACKTRACE", "0");
        }
        let what = self.what;
        let said = |e: anyhow::Error| {
            e.context(Failed { what: what.clone(), sender: tail(send_err.path()), receiver: tail(recv_err.path()) })
        };
        let recv = child::spawn(self.recv, &format!("{what} receiver"))?;
        if let Some(Err(e)) = self.ready.map(wait_udp_bound) {
            recv.kill();
            return Err(said(e));
        }
        let started = SystemTime::now();
        let t0 = Instant::now();
        let send = match child::spawn(self.send, &format!("{what} sender")) {
            Ok(s) => s,
            Err(e) => {
                recv.kill();
                return Err(said(e));
            }
        };
        let su = match send.wait(limit) {
            Ok(u) => u,
            Err(e) => {
                recv.kill();
                if t0.elapsed() >= limit {
                    return Err(anyhow::Error::new(TimedOut(limit)).context(what));
                }
                return Err(said(e));
            }
        };
        let ru = recv.wait(limit + Duration::from_secs(30)).map_err(said)?;
        // Whatever a successful child printed (a warning, say) is still shown.
        for f in [&send_err, &recv_err] {
            let text = std::fs::read_to_string(f.path()).unwrap_or_default();
            if !text.trim().is_empty() {
                eprint!("{what}: {text}");
            }
        }
        let sample = Sample {
            wall: su.wall.as_secs_f64(),
            send_cpu: su.cpu.as_secs_f64(),
            recv_cpu: ru.cpu.as_secs_f64(),
            send_rss_mib: su.max_rss_kib as f64 / 1024.0,
            recv_rss_mib: ru.max_rss_kib as f64 / 1024.0,
            delivered: bytes,
            mf: None,
        };
        Ok(Measured { sample, started })
    }
}

/// The last few lines a child wrote to `path`, joined.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join(" / ")
}

/// Waits until something has bound UDP `addr` (the receiver is up).
pub fn wait_udp_bound(addr: SocketAddr) -> Result<()> {
    for _ in 0..1000 {
        if UdpSocket::bind(addr).is_err() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("receiver never bound {addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_counters_are_read_from_its_stdout() {
        let out = "something else\nmf-stats packets_sent=10 retransmissions=2 lost_packets=3 rto_expiries=1 cwnd=9 limited_cwnd_us=7\n";
        let s = MfStats::parse(out).unwrap();
        let want = MfStats {
            packets_sent: 10,
            retransmissions: 2,
            lost_packets: 3,
            rto_expiries: 1,
            cwnd: 9,
            limited_cwnd_us: 7,
            ..Default::default()
        };
        assert_eq!(s, want);
        // What the sender prints is what the parent reads back.
        let printed = MfStats { srtt_us: 1827, limited_pacing_us: 36_000, ..want };
        assert_eq!(MfStats::parse(&printed.line()), Some(printed));
        assert_eq!(MfStats::parse("no counters here"), None);
        assert_eq!(MfStats::parse("mf-stats packets_sent=ten"), None);
    }

    #[test]
    fn a_failure_shows_the_receivers_last_line_first() {
        let f = Failed { what: "row".into(), sender: "Error: x / receiver went away".into(), receiver: "a / b".into() };
        assert_eq!(f.last_words(), "receiver: b");
        let f = Failed { what: "row".into(), sender: "Error: x / connecting".into(), receiver: String::new() };
        assert_eq!(f.last_words(), "sender: connecting");
    }

    #[test]
    fn labels_name_what_is_configured() {
        let base = MfRow { cc: CongestionAlgorithm::NewReno, ..MfRow::default() };
        assert_eq!(Row::Manyfold(base.clone()).label(), "manyfold (newreno)");
        let m = MfRow { buffers: Some(64 << 10), ..base.clone() };
        assert_eq!(Row::Manyfold(m).label(), "manyfold (newreno), buffers 64 KiB");
        let m = MfRow { recv_buffer: Some(5712), loss: 10.0, ..base.clone() };
        assert_eq!(Row::Manyfold(m).label(), "manyfold (newreno), receive buffer 5712 B, loss 10%");
        let m = MfRow { encrypted: true, ..base };
        assert_eq!(Row::Manyfold(m).label(), "manyfold (newreno), encrypted");
    }
}
