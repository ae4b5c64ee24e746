//! One measured transfer per row: start the receiver process, wait until it
//! listens, start the sender, and read both processes' wall time, CPU and
//! peak RSS from `wait4` (crate::child). Every row's receiver checks the
//! BLAKE3 hash of what arrived, except the ceiling's, which counts bytes.

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use manyfold_proto::CongestionAlgorithm;

use crate::child;

/// What one row moves and how.
#[derive(Debug, Clone)]
pub enum Row {
    /// manyfold with a congestion controller and optional buffer sizes.
    Manyfold { cc: CongestionAlgorithm, buffer: Option<usize> },
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
            Row::Manyfold { cc, buffer: None } => format!("manyfold ({})", cc.name()),
            Row::Manyfold { cc, buffer: Some(b) } => {
                format!("manyfold ({}), buffers {}", cc.name(), super::human(*b as u64))
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
}

impl Sample {
    /// Delivered megabytes (10^6) per second.
    pub fn goodput(&self) -> f64 {
        self.delivered as f64 / 1e6 / self.wall
    }
}

/// Runs `row` once: `bytes` of the stream for `seed`, whose hash is `hash`.
pub fn run(row: &Row, work: &Path, bytes: u64, seed: u64, hash: &str, limit: Duration) -> Result<Sample> {
    let me = std::env::current_exe()?;
    let addr = free_addr()?;
    let data = |c: &mut Command| {
        c.arg("--bytes").arg(bytes.to_string()).arg("--seed").arg(seed.to_string());
    };
    let mut r = Command::new(&me);
    let mut s = Command::new(&me);
    let mut blast_out = None;
    match row {
        Row::Manyfold { cc, buffer } => {
            r.arg("mf-recv").arg("--listen").arg(addr.to_string()).arg("--hash").arg(hash);
            s.arg("mf-send").arg("--to").arg(addr.to_string());
            for c in [&mut r, &mut s] {
                c.arg("--cc").arg(cc.name());
                if let Some(b) = buffer {
                    c.arg("--send-buffer").arg(b.to_string()).arg("--recv-buffer").arg(b.to_string());
                }
            }
        }
        Row::Tcp(cc) => {
            r.arg("tcp-mem-recv").arg("--listen").arg(addr.to_string()).arg("--hash").arg(hash).arg("--cc").arg(cc);
            s.arg("tcp-mem-send").arg("--to").arg(addr.to_string()).arg("--cc").arg(cc);
        }
        Row::Quic => {
            let cert = work.join(format!("cert-{}.der", addr.port()));
            r.arg("quic-recv").arg("--listen").arg(addr.to_string()).arg("--hash").arg(hash).arg("--cert").arg(&cert);
            s.arg("quic-send").arg("--to").arg(addr.to_string()).arg("--cert").arg(&cert);
        }
        Row::Blast => {
            let out = work.join(format!("blast-{}.out", addr.port()));
            r.arg("blast-recv").arg("--listen").arg(addr.to_string());
            r.stdout(std::fs::File::create(&out)?);
            s.arg("blast-send").arg("--to").arg(addr.to_string());
            blast_out = Some(out);
        }
    }
    data(&mut r);
    data(&mut s);
    let what = row.label();
    let recv = child::spawn(r, &format!("{what} receiver"))?;
    let ready = match row {
        Row::Tcp(_) => Ok(()), // the sender retries connecting
        _ => wait_udp_bound(addr),
    };
    if let Err(e) = ready {
        recv.kill();
        return Err(e);
    }
    let t0 = SystemTime::now();
    let send = match child::spawn(s, &format!("{what} sender")) {
        Ok(s) => s,
        Err(e) => {
            recv.kill();
            return Err(e);
        }
    };
    let su = match send.wait(limit) {
        Ok(u) => u,
        Err(e) => {
            recv.kill();
            return Err(e);
        }
    };
    let ru = recv.wait(limit + Duration::from_secs(30))?;
    let mut sample = Sample {
        wall: su.wall.as_secs_f64(),
        send_cpu: su.cpu.as_secs_f64(),
        recv_cpu: ru.cpu.as_secs_f64(),
        send_rss_mib: su.max_rss_kib as f64 / 1024.0,
        recv_rss_mib: ru.max_rss_kib as f64 / 1024.0,
        delivered: bytes,
    };
    if let Some(out) = blast_out {
        let text = std::fs::read_to_string(&out)?;
        let mut f = text.split_whitespace().skip(1).map(|w| w.parse::<u128>());
        let (Some(Ok(got)), Some(Ok(last))) = (f.next(), f.next()) else {
            bail!("blast receiver printed {text:?}");
        };
        let start = t0.duration_since(UNIX_EPOCH)?.as_nanos();
        sample.delivered = got as u64;
        sample.wall = last.saturating_sub(start) as f64 / 1e9;
        std::fs::remove_file(out)?;
    }
    Ok(sample)
}

/// A free UDP port on 127.0.0.1 (bind, read, release).
fn free_addr() -> Result<SocketAddr> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?)
}

/// Waits until something has bound UDP `addr` (the receiver is up).
fn wait_udp_bound(addr: SocketAddr) -> Result<()> {
    for _ in 0..1000 {
        if UdpSocket::bind(addr).is_err() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    bail!("receiver never bound {addr}")
}

/// `uptime`'s load averages, to note the noise beside each table.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .context("reading /proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
