//! The lab's two network namespaces and the relay that joins them
//! (BENCH.md, "Emulating networks"): `mfb-<pid>-a` (the sender's side,
//! 198.18.0.1) and `mfb-<pid>-b` (the receiver's, 198.18.0.2), each with
//! one TUN device whose other end is the relay process.
//!
//! Cleanup is unconditional: [`Lab`]'s `Drop` kills whatever runs in the
//! namespaces and the relay, then deletes the namespaces; a watcher thread
//! does the same on SIGINT/SIGTERM/SIGHUP before exiting. Names are
//! registered before they are created, so a half-built lab is removed too.

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::link::LinkConfig;
use super::sys;

/// Sender side address (198.18.0.0/15 is reserved for benchmarks, RFC 2544).
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Receiver side address.
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// What must be undone: namespaces, the relay's pid, scratch directories.
#[derive(Debug, Default)]
struct Registry {
    namespaces: Vec<String>,
    pids: Vec<u32>,
    dirs: Vec<PathBuf>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { namespaces: Vec::new(), pids: Vec::new(), dirs: Vec::new() });

/// Removes `dir` (the samples, the received copies) on interruption too.
pub fn register_dir(dir: &Path) {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).dirs.push(dir.to_path_buf());
}
static WATCHER: Once = Once::new();

/// Registers a namespace that another scenario creates itself (the `mcast`
/// scenario's bridged lab), before it is created: from then on Ctrl-C,
/// SIGTERM and SIGHUP kill what runs in it and delete it.
pub fn register_namespace(ns: &str) {
    start_watcher();
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).namespaces.push(ns.to_string());
}

/// Kills whatever runs in namespace `ns`.
pub fn kill_in(ns: &str) {
    for pid in netns_pids(ns) {
        sys::kill(pid);
    }
}

/// Kills everything registered and deletes the namespaces. Idempotent.
fn cleanup_registered() {
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    for ns in &reg.namespaces {
        for pid in netns_pids(ns) {
            sys::kill(pid);
        }
    }
    for pid in reg.pids.drain(..) {
        sys::kill(pid);
    }
    for ns in reg.namespaces.drain(..) {
        let _ = Command::new("ip").args(["netns", "del", &ns]).stderr(Stdio::null()).status();
    }
    for dir in reg.dirs.drain(..) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn netns_pids(ns: &str) -> Vec<u32> {
    let out = Command::new("ip").args(["netns", "pids", ns]).stderr(Stdio::null()).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

fn start_watcher() {
    WATCHER.call_once(|| {
        sys::install_interrupt_flag();
        std::thread::spawn(|| loop {
            if sys::interrupted() {
                eprintln!("wan: interrupted; deleting the lab's namespaces");
                cleanup_registered();
                std::process::exit(130);
            }
            std::thread::sleep(Duration::from_millis(50));
        });
    });
}

/// Why the scenario cannot run here, if it cannot.
pub fn skip_reason() -> Option<String> {
    if !sys::is_root() {
        return Some("not root (network namespaces and TUN devices need CAP_NET_ADMIN)".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing (no TUN support)".into());
    }
    if Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
        return Some("the `ip` command (iproute2) is missing".into());
    }
    None
}

/// The devices' MTU unless a scenario asks for another: Ethernet's.
pub const DEFAULT_MTU: u32 = 1500;

/// Two namespaces joined by the relay.
#[derive(Debug)]
pub struct Lab {
    pub ns_a: String,
    pub ns_b: String,
    pub dev_a: String,
    relay: Child,
    relay_in: ChildStdin,
    relay_out: BufReader<ChildStdout>,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("running ip")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Lab {
    /// Creates the namespaces, starts the relay (`bench wan relay`) and
    /// gives each side its address.
    pub fn create(bench: &Path) -> Result<Lab> {
        Lab::with_mtu(bench, DEFAULT_MTU)
    }

    /// [`Lab::create`] with both devices at `mtu` bytes.
    pub fn with_mtu(bench: &Path, mtu: u32) -> Result<Lab> {
        start_watcher();
        let pid = std::process::id();
        let (ns_a, ns_b) = (format!("mfb-{pid}-a"), format!("mfb-{pid}-b"));
        let (dev_a, dev_b) = (format!("mfb{pid}a"), format!("mfb{pid}b"));
        REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).namespaces.extend([ns_a.clone(), ns_b.clone()]);
        ip(&["netns", "add", &ns_a])?;
        ip(&["netns", "add", &ns_b])?;
        let mut relay = Command::new(bench)
            .args(["wan", "relay", "--dev-a", &dev_a, "--dev-b", &dev_b, "--mtu", &mtu.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting the relay")?;
        REGISTRY.lock().unwrap_or_else(|e| e.into_inner()).pids.push(relay.id());
        let relay_in = relay.stdin.take().context("relay stdin")?;
        let relay_out = BufReader::new(relay.stdout.take().context("relay stdout")?);
        let mut lab = Lab { ns_a, ns_b, dev_a: dev_a.clone(), relay, relay_in, relay_out };
        let ready = lab.read_reply()?;
        if ready != "ready" {
            bail!("relay did not start: {ready:?}");
        }
        for (ns, dev, addr) in [(&lab.ns_a, &dev_a, ADDR_A), (&lab.ns_b, &dev_b, ADDR_B)] {
            ip(&["link", "set", dev, "netns", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            // A deep device ring (the relay reads it): a relay that waits
            // a few ms for a core must not drop at line rate. When the
            // relay keeps up the ring is empty, so it adds no queueing.
            ip(&["-n", ns, "link", "set", dev, "mtu", &mtu.to_string(), "txqueuelen", "10000", "up"])?;
            // Room for a 1 Gbit/s x 200 ms window (25 MB), for TCP as for
            // manyfold: a host tuned for long fat pipes.
            for (key, val) in
                [("net.ipv4.tcp_rmem", "4096 131072 134217728"), ("net.ipv4.tcp_wmem", "4096 16384 134217728")]
            {
                lab.sysctl(ns, key, val)?;
            }
        }
        Ok(lab)
    }

    fn read_reply(&mut self) -> Result<String> {
        let mut line = String::new();
        if self.relay_out.read_line(&mut line)? == 0 {
            bail!("the relay exited");
        }
        Ok(line.trim().to_string())
    }

    fn command(&mut self, cmd: &str) -> Result<String> {
        writeln!(self.relay_in, "{cmd}")?;
        self.relay_in.flush()?;
        self.read_reply()
    }

    /// Sets both directions of the link.
    pub fn configure(&mut self, cfg: &LinkConfig) -> Result<()> {
        let r = self.command(&format!("set {}", cfg.to_line()))?;
        if r != "ok" {
            bail!("relay refused the link config: {r}");
        }
        Ok(())
    }

    /// The relay's counters, e.g. `a2b fwd=.. lost=.. qdrop=.. ...`.
    pub fn stats(&mut self) -> Result<RelayStats> {
        let line = self.command("stats")?;
        RelayStats::parse(&line).with_context(|| format!("bad stats line {line:?}"))
    }

    /// CPU time (user + system, both packet threads) the relay has used so
    /// far: the emulator's own cost, which no row's figures include.
    pub fn relay_cpu(&self) -> Result<Duration> {
        Ok(sys::proc_usage(self.relay.id()).context("reading the relay's CPU time")?.0)
    }

    /// `ip netns exec NS program`.
    pub fn exec(&self, ns: &str, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }

    pub fn sysctl(&self, ns: &str, key: &str, val: &str) -> Result<()> {
        ip(&["netns", "exec", ns, "sysctl", "-q", "-w", &format!("{key}={val}")])
    }

    /// Packets the kernel dropped outside the emulator, as
    /// (sender's TUN ring overflows, receiver's UDP buffer overflows): the
    /// self-check's evidence of where a loss happened.
    pub fn host_drops(&self) -> (u64, u64) {
        let read = |ns: &str, args: &[&str]| {
            Command::new("ip")
                .args(["netns", "exec", ns])
                .args(args)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
                .unwrap_or_default()
        };
        let ring = read(&self.ns_a, &["cat", &format!("/sys/class/net/{}/statistics/tx_dropped", self.dev_a)]);
        let snmp = read(&self.ns_b, &["cat", "/proc/net/snmp"]);
        // /proc/net/snmp: a "Udp:" header line with names, then values.
        let udp: Vec<&str> = snmp.lines().filter(|l| l.starts_with("Udp:")).collect();
        let rcvbuf = match udp.as_slice() {
            [names, values, ..] => names
                .split_whitespace()
                .zip(values.split_whitespace())
                .find(|(n, _)| *n == "RcvbufErrors")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0),
            _ => 0,
        };
        (ring.trim().parse().unwrap_or(0), rcvbuf)
    }

    /// Waits until something listens on `port` (TCP or UDP) in `ns`.
    pub fn wait_listening(&self, ns: &str, port: u16, limit: Duration) -> Result<()> {
        let start = Instant::now();
        while start.elapsed() < limit {
            let out = Command::new("ip")
                .args(["netns", "exec", ns, "ss", "-Hlnut", "sport", "=", &format!(":{port}")])
                .output()?;
            if !out.stdout.is_empty() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("nothing listens on port {port} in {ns} after {limit:?}")
    }

    /// Kills whatever still runs in the namespaces (a failed transfer's
    /// leftovers), keeping the lab.
    pub fn kill_leftovers(&self) {
        for ns in [&self.ns_a, &self.ns_b] {
            for pid in netns_pids(ns) {
                sys::kill(pid);
            }
        }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.relay.kill();
        let _ = self.relay.wait();
        cleanup_registered();
    }
}

/// One direction's counters as the relay reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DirStats {
    pub forwarded: u64,
    /// IP bytes of the packets forwarded.
    pub forwarded_bytes: u64,
    pub lost: u64,
    pub queue_drops: u64,
    /// IP bytes of the packets lost or dropped at the full queue.
    pub dropped_bytes: u64,
    pub write_errors: u64,
    /// Times the relay's packet thread was held off its core for more than
    /// a millisecond since the link was last configured, and the longest
    /// such wait in µs (CPU contention, not the link model).
    pub stalls: u64,
    pub max_stall_us: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayStats {
    pub a2b: DirStats,
    pub b2a: DirStats,
}

impl RelayStats {
    fn parse(line: &str) -> Option<Self> {
        let mut s = RelayStats::default();
        let mut cur: Option<&mut DirStats> = None;
        for tok in line.split_whitespace() {
            match tok {
                "a2b" => cur = Some(&mut s.a2b),
                "b2a" => cur = Some(&mut s.b2a),
                kv => {
                    let (k, v) = kv.split_once('=')?;
                    let v: u64 = v.parse().ok()?;
                    let d = cur.as_deref_mut()?;
                    match k {
                        "fwd" => d.forwarded = v,
                        "fwdbytes" => d.forwarded_bytes = v,
                        "lost" => d.lost = v,
                        "qdrop" => d.queue_drops = v,
                        "dropbytes" => d.dropped_bytes = v,
                        "werr" => d.write_errors = v,
                        "stalls" => d.stalls = v,
                        "maxstall" => d.max_stall_us = v,
                        _ => {}
                    }
                }
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_line_parses() {
        let s = RelayStats::parse(
            "a2b fwd=10 fwdbytes=15000 lost=1 qdrop=2 dropbytes=4500 reord=0 werr=3 stalls=4 maxstall=1500 b2a fwd=5 lost=0 qdrop=0 reord=0 werr=0",
        )
        .unwrap();
        assert_eq!(
            s.a2b,
            DirStats {
                forwarded: 10,
                forwarded_bytes: 15000,
                lost: 1,
                queue_drops: 2,
                dropped_bytes: 4500,
                write_errors: 3,
                stalls: 4,
                max_stall_us: 1500
            }
        );
        assert_eq!(s.b2a.forwarded, 5);
        assert_eq!(s.b2a.stalls, 0);
    }
}
