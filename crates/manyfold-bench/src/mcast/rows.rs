//! One transfer of the `mcast` scenario: the receivers of one protocol
//! started in their namespaces and bound, the sender started, every process
//! watched until the sender and every receiver that ends by itself have
//! exited (or the time limit kills them all), then every receiver's copy
//! compared with the source by BLAKE3 (BENCH.md: a wrong or missing file is
//! a failed run, not a number).
//!
//! The rows (BENCH.md's anchors for multicast replication):
//! - `manyfold mcast send/recv` (spec §16);
//! - uftp 4 (`uftp` server, `uftpd` clients in the foreground) with TFMCC
//!   congestion control (RFC 4654), and with a fixed rate equal to the
//!   bottleneck; unencrypted, blocks of 1,400 bytes, a closed group listing
//!   every client so the server starts once all have registered;
//! - udpcast (`udp-sender`, `udp-receiver`) at `--max-bitrate` equal to the
//!   bottleneck (it has no congestion control), told its groups.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use super::topo::{Counters, Topo, GROUP_PREFIX};
use crate::wan::sys;

const MANYFOLD_PORT: u16 = 7020;
const UFTP_PORT: u16 = 1044;
const UDPCAST_PORT: u16 = 9000;
/// uftp's data blocks (its default is 1,300): near manyfold's 1,428.
const UFTP_BLOCK: &str = "1400";

/// One protocol's row.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    /// `manyfold mcast` (window flow control, spec §16.3).
    Manyfold,
    /// The same, encrypted (spec §19.7): every side holds one PSK.
    ManyfoldEncrypted,
    /// uftp with TFMCC congestion control.
    UftpTfmcc,
    /// uftp at a fixed rate equal to the bottleneck.
    UftpFixed,
    /// udpcast at `--max-bitrate` equal to the bottleneck.
    Udpcast,
}

impl Proto {
    pub fn label(self) -> &'static str {
        match self {
            Proto::Manyfold => "manyfold",
            Proto::ManyfoldEncrypted => "manyfold, encrypted (PSK)",
            Proto::UftpTfmcc => "uftp (TFMCC)",
            Proto::UftpFixed => "uftp (fixed rate = bottleneck)",
            Proto::Udpcast => "udpcast (max-bitrate = bottleneck)",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Proto::Manyfold => "manyfold",
            Proto::ManyfoldEncrypted => "manyfold-encrypted",
            Proto::UftpTfmcc => "uftp-tfmcc",
            Proto::UftpFixed => "uftp-fixed",
            Proto::Udpcast => "udpcast",
        }
    }

    pub fn is_manyfold(self) -> bool {
        matches!(self, Proto::Manyfold | Proto::ManyfoldEncrypted)
    }

    /// The programs the row needs (manyfold's comes from the options).
    fn programs(self) -> &'static [&'static str] {
        match self {
            Proto::Manyfold | Proto::ManyfoldEncrypted => &[],
            Proto::UftpTfmcc | Proto::UftpFixed => &["uftp", "uftpd"],
            Proto::Udpcast => &["udp-sender", "udp-receiver"],
        }
    }

    /// Why the row cannot run here, if it cannot.
    pub fn missing(self, manyfold: &Result<PathBuf, String>) -> Option<String> {
        if self.is_manyfold() {
            return manyfold.as_ref().err().cloned();
        }
        let absent: Vec<&str> = self.programs().iter().copied().filter(|p| which(p).is_none()).collect();
        (!absent.is_empty()).then(|| format!("{} not installed (apt-get install uftp udpcast)", absent.join(", ")))
    }
}

/// A program on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// What a transfer needs besides the lab.
#[derive(Debug)]
pub struct Job<'a> {
    pub topo: &'a Topo,
    pub file: &'a Path,
    pub name: &'a str,
    pub hash: &'a str,
    pub rate_bps: u64,
    /// The run's scratch directory (received copies, logs).
    pub dir: &'a Path,
    pub limit: Duration,
    pub manyfold: Option<&'a Path>,
}

/// What one transfer measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Sender's start until it and every receiver that exits by itself
    /// had exited (uftp's clients are daemons: its server's exit, which
    /// follows every client's COMPLETE).
    pub time_to_all: f64,
    pub send_cpu: f64,
    pub send_rss_kib: u64,
    /// Receivers' CPU seconds, summed.
    pub recv_cpu: f64,
    pub counters: Counters,
    /// manyfold's sender report (`--json`).
    pub mf: Option<super::report::MfReport>,
}

/// A child launched in a namespace (`ip netns exec` execs the program, so
/// the pid is the program's), its output in files, and what was seen of it:
/// when it exited, its CPU time read from /proc while it was a zombie (so
/// daemons and self-ending processes are measured alike), and its peak RSS
/// sampled while it ran.
struct Proc {
    child: Child,
    what: String,
    err: PathBuf,
    exited: Option<Instant>,
    cpu: f64,
    peak_kib: u64,
}

impl Proc {
    fn launch(mut cmd: Command, dir: &Path, name: &str, what: String) -> Result<Proc> {
        let err = dir.join(format!("{name}.err"));
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(File::create(dir.join(format!("{name}.out")))?))
            .stderr(Stdio::from(File::create(&err)?));
        let child = cmd.spawn().with_context(|| format!("starting {what}: {cmd:?}"))?;
        Ok(Proc { child, what, err, exited: None, cpu: 0.0, peak_kib: 0 })
    }

    /// Notes CPU and peak RSS; true once it has exited (a zombie or gone).
    fn sample(&mut self) -> bool {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()) == Some("Z");
        if let Ok((cpu, hwm)) = sys::proc_usage(pid) {
            self.cpu = cpu.as_secs_f64();
            self.peak_kib = self.peak_kib.max(hwm);
        }
        zombie || stat.is_empty()
    }

    /// Reaps it; an exit other than 0 is an error quoting its stderr.
    fn reap(mut self) -> Result<Proc> {
        let st = self.child.wait()?;
        if !st.success() {
            bail!("{} failed ({st}): {}", self.what, tail(&self.err));
        }
        Ok(self)
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last lines of a log, on one line.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // Progress meters (udpcast's) redraw with carriage returns.
    let lines: Vec<&str> = text.split(['\n', '\r']).filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}

pub fn run(proto: Proto, job: &Job) -> Result<Measured> {
    let topo = job.topo;
    let mut receivers: Vec<Proc> = Vec::with_capacity(topo.receivers.len());
    let mut sender: Option<Proc> = None;
    let mut outputs = Vec::with_capacity(topo.receivers.len());
    let result = (|| {
        if proto == Proto::ManyfoldEncrypted {
            let key = job.dir.join("group.key");
            let made = Command::new(job.manyfold.context("no manyfold binary")?)
                .arg("keygen")
                .arg(&key)
                .args(["--psk", "--force"])
                .output()
                .context("manyfold keygen")?;
            anyhow::ensure!(made.status.success(), "manyfold keygen: {}", String::from_utf8_lossy(&made.stderr));
        }
        for (i, r) in topo.receivers.iter().enumerate() {
            let out = job.dir.join(format!("r{i}"));
            std::fs::create_dir_all(&out)?;
            let (cmd, stored) = receiver(proto, job, i, &out)?;
            outputs.push(stored);
            let what = format!("{} receiver {i} ({})", proto.key(), r.ns);
            receivers.push(Proc::launch(cmd, job.dir, &format!("r{i}"), what)?);
        }
        topo.wait_bound(port(proto), Duration::from_secs(20))?;
        let before = topo.counters()?;
        let start = Instant::now();
        let s = sender.insert(Proc::launch(sender_cmd(proto, job)?, job.dir, "s", format!("{} sender", proto.key()))?);
        // uftp's clients are daemons: the server's exit (after every
        // client's COMPLETE) ends the transfer.
        let self_ending = !matches!(proto, Proto::UftpTfmcc | Proto::UftpFixed);
        watch(s, &mut receivers, self_ending, start + job.limit)?;
        let end = std::iter::once(&*s)
            .chain(receivers.iter().filter(|_| self_ending))
            .filter_map(|p| p.exited)
            .max()
            .context("no exit time")?;
        let mut m = Measured { time_to_all: (end - start).as_secs_f64(), ..Measured::default() };
        let s = sender.take().context("sender")?.reap()?;
        (m.send_cpu, m.send_rss_kib) = (s.cpu, s.peak_kib);
        for mut p in receivers.drain(..) {
            if self_ending {
                m.recv_cpu += p.reap()?.cpu;
            } else {
                p.sample();
                m.recv_cpu += p.cpu;
                p.kill();
            }
        }
        m.counters = topo.counters()?.since(&before);
        verify_all(&outputs, job.hash, topo)?;
        if proto.is_manyfold() {
            let json = std::fs::read_to_string(job.dir.join("sender.json")).context("manyfold's --json report")?;
            m.mf = Some(super::report::MfReport::parse(&json).context("manyfold's --json report")?);
        }
        Ok(m)
    })();
    match result {
        Ok(m) => Ok(m),
        Err(e) => {
            // The run's directory is deleted next: quote what the sender
            // and the first receiver still running said last.
            let mut said = Vec::new();
            if let Some(s) = &sender {
                said.push(format!("sender said: {}", tail(&s.err)));
            }
            if let Ok(json) = std::fs::read_to_string(job.dir.join("sender.json")) {
                said.push(format!("its report: {}", super::report::not_completed(&json)));
            }
            if let Some((i, r)) = receivers.iter().enumerate().find(|(_, r)| r.exited.is_none()) {
                said.push(format!("receiver {i} said: {}", tail(&r.err)));
            }
            for p in sender.into_iter().chain(receivers) {
                p.kill();
            }
            topo.kill_leftovers();
            Err(if said.is_empty() { e } else { e.context(said.join("; ")) })
        }
    }
}

/// Polls until the sender has exited and, if `all`, every receiver too;
/// the deadline ends the run, and so does a receiver still running 30 s
/// after the sender exited. Exit statuses are checked when reaped.
fn watch(sender: &mut Proc, receivers: &mut [Proc], all: bool, deadline: Instant) -> Result<()> {
    let mut round = 0u64;
    loop {
        let now = Instant::now();
        // Every 5 ms for the exit times; the receivers' RSS every 100 ms.
        for (i, p) in std::iter::once(&mut *sender).chain(receivers.iter_mut()).enumerate() {
            if p.exited.is_none() && (i == 0 || all || round.is_multiple_of(20)) && p.sample() {
                p.exited = Some(now);
            }
        }
        round += 1;
        let done = !all || receivers.iter().all(|p| p.exited.is_some());
        if let Some(t) = sender.exited {
            if done {
                return Ok(());
            }
            if now > t + Duration::from_secs(30) {
                let left = receivers.iter().filter(|p| p.exited.is_none()).count();
                bail!("{left} receiver(s) still running 30 s after the sender exited ({})", tail(&sender.err));
            }
        }
        if now > deadline {
            bail!("not done within the time limit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Checks every copy, on as many threads as there are cores (N copies of
/// the file are N × its size to hash).
fn verify_all(outputs: &[PathBuf], hash: &str, topo: &Topo) -> Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<()> {
                    for (i, stored) in outputs.iter().enumerate().skip(t).step_by(threads) {
                        verify(stored, hash).with_context(|| format!("receiver {i} ({})", topo.receivers[i].ns))?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("a hashing thread panicked"))?)
    })
}

fn verify(stored: &Path, hash: &str) -> Result<()> {
    let f = std::fs::File::open(stored).with_context(|| format!("no file at {}", stored.display()))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(f)?;
    let got = h.finalize().to_hex().to_string();
    if got != hash {
        bail!("{} differs from the source (BLAKE3 {got}, want {hash})", stored.display());
    }
    Ok(())
}

fn port(proto: Proto) -> u16 {
    match proto {
        Proto::Manyfold | Proto::ManyfoldEncrypted => MANYFOLD_PORT,
        Proto::UftpTfmcc | Proto::UftpFixed => UFTP_PORT,
        Proto::Udpcast => UDPCAST_PORT,
    }
}

fn group(host: u8) -> String {
    format!("{GROUP_PREFIX}.{host}")
}

/// uftp's client id: the receiver's address as 8 hex digits.
fn uftp_id(addr: std::net::Ipv4Addr) -> String {
    format!("0x{:08X}", u32::from(addr))
}

/// The limit of the whole run in seconds, for the programs' own waits.
fn wait_secs(job: &Job) -> String {
    job.limit.as_secs().to_string()
}

/// Receiver `i`'s command and the path its copy is stored at.
fn receiver(proto: Proto, job: &Job, i: usize, out: &Path) -> Result<(Command, PathBuf)> {
    let topo = job.topo;
    let r = &topo.receivers[i];
    let ttl = topo.ttl().to_string();
    let stored = out.join(job.name);
    let cmd = match proto {
        Proto::Manyfold | Proto::ManyfoldEncrypted => {
            let mut c = Topo::exec(&r.ns, job.manyfold.context("no manyfold binary")?);
            c.args(["mcast", "recv", "--group", &format!("{}:{MANYFOLD_PORT}", group(1)), "--iface", "eth0"]);
            c.args(["--ttl", &ttl, "--wait", &wait_secs(job), "--json", "--dir"]).arg(out);
            key_flag(proto, job, &mut c);
            c
        }
        Proto::UftpTfmcc | Proto::UftpFixed => {
            let mut c = Topo::exec(&r.ns, Path::new("uftpd"));
            c.args(["-d", "-I", "eth0", "-M", &group(2), "-p", &UFTP_PORT.to_string(), "-U", &uftp_id(r.addr)]);
            c.arg("-D").arg(out);
            c
        }
        Proto::Udpcast => {
            let mut c = Topo::exec(&r.ns, Path::new("udp-receiver"));
            c.args(["--nokbd", "--interface", "eth0", "--portbase", &UDPCAST_PORT.to_string()]);
            c.args(["--mcast-rdv-address", &group(4), "--ttl", &ttl, "--file"]).arg(&stored);
            c
        }
    };
    Ok((cmd, stored))
}

/// The encrypted row's `--key-file` (the key `run` made).
fn key_flag(proto: Proto, job: &Job, c: &mut Command) {
    if proto == Proto::ManyfoldEncrypted {
        c.arg("--key-file").arg(job.dir.join("group.key"));
    }
}

fn sender_cmd(proto: Proto, job: &Job) -> Result<Command> {
    let topo = job.topo;
    let n = topo.receivers.len().to_string();
    let ttl = topo.ttl().to_string();
    let kbps = (job.rate_bps / 1000).to_string();
    let cmd = match proto {
        Proto::Manyfold | Proto::ManyfoldEncrypted => {
            let mut c = Topo::exec(&topo.sender, job.manyfold.context("no manyfold binary")?);
            c.args(["mcast", "send"]).arg(job.file);
            c.args(["--group", &format!("{}:{MANYFOLD_PORT}", group(1)), "--iface", "eth0", "--ttl", &ttl]);
            c.args(["--receivers", &n, "--wait", "30", "--json"]).arg(job.dir.join("sender.json"));
            key_flag(proto, job, &mut c);
            c
        }
        Proto::UftpTfmcc | Proto::UftpFixed => {
            let ids: Vec<String> = topo.receivers.iter().map(|r| uftp_id(r.addr)).collect();
            let mut c = Topo::exec(&topo.sender, Path::new("uftp"));
            c.args(["-I", "eth0", "-M", &group(2), "-P", &group(3), "-p", &UFTP_PORT.to_string(), "-t", &ttl]);
            c.args(["-b", UFTP_BLOCK, "-H", &ids.join(",")]);
            if proto == Proto::UftpTfmcc {
                c.args(["-C", "tfmcc"]);
            } else {
                c.args(["-C", "none", "-R", &kbps]);
            }
            c.arg("-S").arg(job.dir.join("uftp-status.txt")).arg(job.file);
            c
        }
        Proto::Udpcast => {
            let mut c = Topo::exec(&topo.sender, Path::new("udp-sender"));
            c.args(["--nokbd", "--interface", "eth0", "--portbase", &UDPCAST_PORT.to_string()]);
            c.args(["--min-receivers", &n, "--max-wait", "30", "--ttl", &ttl]);
            c.args(["--mcast-rdv-address", &group(4), "--mcast-data-address", &group(5)]);
            c.args(["--max-bitrate", &format!("{}k", kbps)]);
            c.arg("--file").arg(job.file);
            c
        }
    };
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uftp_ids_are_the_address_in_hex() {
        assert_eq!(uftp_id(std::net::Ipv4Addr::new(198, 18, 2, 1)), "0xC6120201");
    }
}
