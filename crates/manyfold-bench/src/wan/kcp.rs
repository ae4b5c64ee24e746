//! The KCP row (BENCH.md: "KCP via kcptun (Debian package) where
//! practical"): the kernel-TCP file copy, carried through a kcptun tunnel.
//! `kcptun-server` runs in the receiver's namespace and forwards to the TCP
//! receiver on its loopback; `kcptun-client` runs in the sender's namespace
//! and accepts the TCP sender on its loopback; only KCP over UDP crosses the
//! emulated link.
//!
//! The settings are the ones a user tuning kcptun for a bulk transfer
//! would pick, written out in the report ([`describe`]):
//! - `--mode fast` (kcptun's default profile: KCP `nodelay 0, interval
//!   30 ms, resend 2, nc 1`, i.e. fast retransmit after 2 duplicate acks
//!   and no congestion window: KCP sends whatever its window allows);
//! - `--crypt none --nocomp`: the other rows neither encrypt (but quinn)
//!   nor compress, and the sample file is incompressible anyway;
//! - `--sndwnd`/`--rcvwnd` ([`window`]) large enough that the window is not
//!   what limits the rate: KCP flushes data and acks once per 30 ms
//!   interval, so a packet's turn-around is the RTT plus up to two
//!   intervals; kcptun's defaults (client 128/512 packets) cap it near
//!   20 Mbit/s at any RTT;
//! - everything else at kcptun's defaults, including forward error
//!   correction (`--datashard 10 --parityshard 3`: 3 parity packets per 10,
//!   so 23% of the link carries parity; it is kcptun's own answer to random
//!   loss), `--mtu 1350` and `--sockbuf` 4 MiB (this host's `rmem_max`).
//!
//! kcptun has no TCP half-close: when the sender's side of a connection
//! ends, it tears down both directions, so the TCP anchor's protocol (send,
//! shut down writing, read the receiver's "ok") cannot cross it. This row's
//! TCP ends ([`send`], [`recv`]) do the same copy without the half-close:
//! the receiver reads exactly the file's length, checks it, answers "ok",
//! and the sender exits on that answer.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::netns::{Lab, ADDR_B};
use super::sys;

/// kcptun's `--mode fast` flush interval: data and acks leave at most this
/// late.
const INTERVAL_MS: f64 = 30.0;
/// kcptun's default `--mtu`: the UDP payload of one KCP packet.
const MTU: f64 = 1350.0;
/// The server's default window (packets); windows never go below it.
const MIN_WINDOW: u64 = 1024;

/// The two kcptun programs, if installed.
#[derive(Debug, Clone)]
pub struct Kcptun {
    pub client: PathBuf,
    pub server: PathBuf,
    /// The Debian package version, when dpkg knows it.
    pub version: String,
}

/// Finds `kcptun-client` and `kcptun-server` on `PATH`; the error is the
/// reason the row is skipped.
pub fn find() -> std::result::Result<Kcptun, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let which = |name: &str| std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file());
    match (which("kcptun-client"), which("kcptun-server")) {
        (Some(client), Some(server)) => {
            let version = Command::new("dpkg-query")
                .args(["-W", "-f", "${Version}", "kcptun"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .unwrap_or_else(|| "version unknown".into());
            Ok(Kcptun { client, server, version })
        }
        _ => Err("kcptun is not installed (kcptun-client and kcptun-server are not on PATH; \
                  `apt-get install kcptun`)"
            .into()),
    }
}

/// `--sndwnd` and `--rcvwnd` in packets for a link: the bytes the link
/// carries during one turn-around (RTT plus two flush intervals), in
/// packets of `--mtu` bytes, and at least the server's default.
pub fn window(rate_bps: u64, rtt_ms: f64) -> u64 {
    let bytes = rate_bps as f64 / 8.0 * (rtt_ms + 2.0 * INTERVAL_MS) / 1e3;
    ((bytes / MTU).ceil() as u64).max(MIN_WINDOW)
}

/// The profile the `wan` rows use (kcptun's default, see above); the
/// `messages` scenario asks for `fast3` instead.
pub const BULK_MODE: &str = "fast";

/// The flags both ends get (besides addresses).
fn flags(window: u64, mode: &str) -> Vec<String> {
    let w = window.to_string();
    ["--mode", mode, "--crypt", "none", "--nocomp", "--sndwnd", &w, "--rcvwnd", &w, "--quiet"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The settings, for the report's notes.
pub fn describe(k: &Kcptun) -> String {
    format!(
        "KCP via kcptun {}: `kcptun-server --listen 198.18.0.2:P --target 127.0.0.1:Q` and \
         `kcptun-client --localaddr 127.0.0.1:P --remoteaddr 198.18.0.2:P`, both with `{}`; \
         W = ⌈link bytes per (RTT + 2 × 30 ms flush interval) / 1,350 B⌉, at least 1024 packets; \
         everything else at kcptun's defaults, including FEC (10 data + 3 parity shards: 23% of \
         the link carries parity), MTU 1,350 and 4 MiB socket buffers. The file goes from the TCP \
         sender over loopback into the client, as KCP/UDP across the emulated link, and from the \
         server over loopback to the TCP receiver; CPU and peak RSS include the tunnel process \
         on each side (summed).",
        k.version,
        flags(0, BULK_MODE).join(" ").replace("--sndwnd 0 --rcvwnd 0", "--sndwnd W --rcvwnd W"),
    )
}

/// A running tunnel: killed (and reaped) when dropped, whatever happened.
#[derive(Debug)]
pub struct Tunnel {
    server: Child,
    client: Child,
    logs: [PathBuf; 2],
}

/// CPU seconds and peak RSS (KiB) of one tunnel end.
#[derive(Debug, Clone, Copy, Default)]
pub struct EndUsage {
    pub cpu: f64,
    pub max_rss_kib: u64,
}

impl Tunnel {
    /// Starts the server in the receiver's namespace (KCP on UDP
    /// `198.18.0.2:kcp_port`, forwarding to `127.0.0.1:tcp_port`) and the
    /// client in the sender's (TCP on `127.0.0.1:kcp_port`), both with
    /// kcptun's profile `mode`, and waits until both listen. Their stderr
    /// goes to `work`, quoted on failure.
    pub fn start(lab: &Lab, k: &Kcptun, ports: (u16, u16), window: u64, mode: &str, work: &Path) -> Result<Tunnel> {
        let (kcp_port, tcp_port) = ports;
        let logs =
            [work.join(format!("kcptun-server-{kcp_port}.log")), work.join(format!("kcptun-client-{kcp_port}.log"))];
        let mut s = lab.exec(&lab.ns_b, &k.server);
        s.args(["--listen", &format!("{ADDR_B}:{kcp_port}"), "--target", &format!("127.0.0.1:{tcp_port}")])
            .args(flags(window, mode));
        let server = spawn(s, &logs[0], "kcptun-server")?;
        let mut c = lab.exec(&lab.ns_a, &k.client);
        c.args(["--localaddr", &format!("127.0.0.1:{kcp_port}"), "--remoteaddr", &format!("{ADDR_B}:{kcp_port}")])
            .args(flags(window, mode));
        let client = match spawn(c, &logs[1], "kcptun-client") {
            Ok(c) => c,
            Err(e) => {
                let mut t = server;
                let _ = t.kill();
                let _ = t.wait();
                return Err(e);
            }
        };
        let mut t = Tunnel { server, client, logs };
        let limit = Duration::from_secs(5);
        lab.wait_listening(&lab.ns_b, kcp_port, limit).map_err(|e| t.explain(e))?;
        lab.wait_listening(&lab.ns_a, kcp_port, limit).map_err(|e| t.explain(e))?;
        Ok(t)
    }

    /// `e` with whichever end has exited and the tail of its log.
    pub fn explain(&mut self, e: anyhow::Error) -> anyhow::Error {
        let mut e = e;
        for (child, log, name) in
            [(&mut self.server, &self.logs[0], "kcptun-server"), (&mut self.client, &self.logs[1], "kcptun-client")]
        {
            if let Ok(Some(status)) = child.try_wait() {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                e = e.context(format!("{name} exited ({status}): {}", tail.join(" | ")));
            }
        }
        e
    }

    /// CPU and peak RSS of (client, server) so far; call before dropping.
    pub fn usage(&self) -> Result<(EndUsage, EndUsage)> {
        let read = |c: &Child, name: &str| -> Result<EndUsage> {
            let (cpu, rss) = sys::proc_usage(c.id()).with_context(|| format!("reading {name}'s CPU time"))?;
            Ok(EndUsage { cpu: cpu.as_secs_f64(), max_rss_kib: rss })
        };
        Ok((read(&self.client, "kcptun-client")?, read(&self.server, "kcptun-server")?))
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        for c in [&mut self.client, &mut self.server] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Bytes per read and write of the copy.
const CHUNK: usize = 1 << 20;

/// The row's TCP sender: connects to the tunnel's client (retrying while it
/// starts), writes `file`, and waits for the receiver's "ok" without
/// closing its own direction first.
pub fn send(file: &Path, to: SocketAddr) -> Result<()> {
    let mut f = File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let mut s = connect_retry(to)?;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        s.write_all(&buf[..n])?;
    }
    let mut ok = [0u8; 2];
    s.read_exact(&mut ok).context("the receiver did not confirm")?;
    if &ok != b"ok" {
        bail!("the receiver answered {ok:?}, not \"ok\"");
    }
    Ok(())
}

/// The row's TCP receiver: accepts one connection, stores exactly `len`
/// bytes in `out`, checks their BLAKE3 hash and answers "ok".
pub fn recv(listen: SocketAddr, out: &Path, expect_hash: &str, len: u64) -> Result<()> {
    let listener = TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
    let (mut s, _) = listener.accept()?;
    let mut file = BufWriter::with_capacity(CHUNK, File::create(out)?);
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut got = 0u64;
    while got < len {
        let want = (len - got).min(CHUNK as u64) as usize;
        let n = s.read(&mut buf[..want])?;
        if n == 0 {
            bail!("the connection ended after {got} of {len} bytes");
        }
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])?;
        got += n as u64;
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    let hash = hasher.finalize().to_hex();
    if hash.as_str() != expect_hash {
        bail!("hash mismatch: got {hash}, expected {expect_hash}");
    }
    s.write_all(b"ok")?;
    // Let the answer leave before the connection closes: wait (bounded)
    // for the sender to hang up first.
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let _ = s.read(&mut buf);
    Ok(())
}

fn connect_retry(to: SocketAddr) -> Result<TcpStream> {
    for _ in 0..200 {
        if let Ok(s) = TcpStream::connect(to) {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("no TCP listener at {to} after 2 s")
}

fn spawn(mut cmd: Command, log: &Path, what: &str) -> Result<Child> {
    let log = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
    cmd.spawn().with_context(|| format!("starting {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_covers_the_link_for_an_rtt_plus_two_flush_intervals() {
        // 1 Gbit/s × (200 + 60) ms = 32.5 MB = 24,075 packets of 1,350 B.
        assert_eq!(window(1_000_000_000, 200.0), 24_075);
        // 100 Mbit/s × 61 ms = 762.5 kB = 565 packets: the floor wins.
        assert_eq!(window(100_000_000, 1.0), MIN_WINDOW);
    }

    #[test]
    fn settings_are_spelled_out_without_placeholders_leaking() {
        let k = Kcptun { client: "c".into(), server: "s".into(), version: "1.0".into() };
        let d = describe(&k);
        assert!(d.contains("--mode fast --crypt none --nocomp --sndwnd W --rcvwnd W"), "{d}");
        assert!(flags(5000, "fast3").windows(2).any(|w| w == ["--sndwnd", "5000"]));
        assert!(flags(5000, "fast3").windows(2).any(|w| w == ["--mode", "fast3"]));
    }
}
