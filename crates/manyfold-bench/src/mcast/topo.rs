//! The `mcast` scenario's networks (BENCH.md, "Emulating networks"): a
//! switch namespace holding one or two Linux bridges, a sender namespace
//! and N receiver namespaces attached to them by veth pairs, and in the
//! routed setup a router namespace running smcroute between the bridges.
//!
//! - **asym** and **lossy**: one bridge. The sender is 198.18.0.1; receiver
//!   i is on network 198.18.2.0/24 ("slow": a tbf rate limit on the
//!   bridge's port towards it, paper 03's wireless hosts) when i is even,
//!   else on 198.18.1.0/24 (unlimited, the wired hosts). Every interface has
//!   a /15 prefix, so unicast between the /24s stays on the bridge; the
//!   /24 is the network id manyfold receivers derive (spec §16.4). In
//!   **lossy**, receivers with i mod 4 < 2 (slow and fast alike) drop a
//!   fraction of the UDP they receive at random (nftables `numgen random`),
//!   datagram by datagram: their bridge ports segment GSO batches.
//! - **routed**: two bridges, net A (198.18.1.0/24: the sender and the fast
//!   receivers) and net B (198.18.2.0/24: the slow receivers), joined by a
//!   router namespace (198.18.1.254, 198.18.2.254) whose smcroute forwards
//!   the scenario's groups (239.77.0.0/24) both ways; the tbf limit sits on
//!   the router's interface towards B, so B's receivers share one
//!   bottleneck.
//!
//! Every namespace routes 224.0.0.0/4 out of its interface, and counts the
//! UDP it sends (nftables named counter `udp_out`): the sender's is the
//! "bytes sent", the receivers' are the feedback, for every protocol alike.
//! Namespaces are registered with [`crate::wan::netns`] before they are
//! created, so Ctrl-C and errors delete them; `Drop` deletes them too.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::Setup;
use crate::wan::netns;

/// The groups every protocol is told to use: 239.77.0.0/24.
pub const GROUP_PREFIX: &str = "239.77.0";
/// tbf's bucket: about 21 full-size frames at line rate.
const TBF_BURST: &str = "32kb";
/// tbf's queue, as the time its backlog takes to drain.
pub const TBF_LATENCY_MS: u32 = 50;

/// One receiver's place in the lab.
#[derive(Debug, Clone)]
pub struct Receiver {
    pub ns: String,
    pub addr: Ipv4Addr,
    /// Behind the rate limit.
    pub slow: bool,
    /// Drops `loss` of its incoming UDP.
    pub lossy: bool,
}

/// The built lab for one (setup, N).
#[derive(Debug)]
pub struct Topo {
    pub switch: String,
    pub sender: String,
    pub sender_addr: Ipv4Addr,
    pub router: Option<String>,
    pub receivers: Vec<Receiver>,
    smcroute: Option<Child>,
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args)).map(|_| ())
}

/// `ip netns exec NS PROGRAM ARGS` run to its end.
fn ns_run(ns: &str, args: &[&str]) -> Result<String> {
    run(Command::new("ip").args(["netns", "exec", ns]).args(args))
}

/// Runs `nft -f -` in `ns` with `rules` on its standard input.
fn nft(ns: &str, rules: &str) -> Result<()> {
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting nft")?;
    c.stdin.take().context("nft stdin")?.write_all(rules.as_bytes())?;
    let out = c.wait_with_output()?;
    if !out.status.success() {
        bail!("nft in {ns}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The nftables table of one namespace: the UDP it sends is counted, and
/// with `loss` (percent) that share of the UDP it receives is dropped.
fn ruleset(loss: Option<f64>) -> String {
    let mut r = String::from(
        "table inet mfb {\n counter udp_out { }\n counter udp_drop { }\n chain out { type filter hook output priority 0; meta l4proto udp counter name \"udp_out\"; }\n",
    );
    if let Some(pct) = loss {
        // Hundredths of a percent: 2% is `mod 10000 < 200`.
        let n = (pct * 100.0).round() as u32;
        r += &format!(
            " chain in {{ type filter hook input priority 0; meta l4proto udp numgen random mod 10000 < {n} counter name \"udp_drop\" drop; }}\n"
        );
    }
    r += "}\n";
    r
}

/// `packets N bytes M` of a named counter.
fn read_counter(ns: &str, name: &str) -> Result<(u64, u64)> {
    let out = ns_run(ns, &["nft", "list", "counter", "inet", "mfb", name])?;
    parse_counter(&out).with_context(|| format!("no counter {name} in {ns}: {out:?}"))
}

fn parse_counter(out: &str) -> Option<(u64, u64)> {
    let words: Vec<&str> = out.split_whitespace().collect();
    let after = |k: &str| words.iter().position(|w| *w == k).and_then(|i| words.get(i + 1)?.parse().ok());
    Some((after("packets")?, after("bytes")?))
}

/// What the counters read at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// UDP datagrams and their IP bytes out of the sender.
    pub sender_packets: u64,
    pub sender_bytes: u64,
    /// UDP datagrams the receivers sent (every kind of feedback).
    pub feedback: u64,
    /// UDP datagrams the loss rules dropped.
    pub dropped: u64,
}

impl Counters {
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            sender_packets: self.sender_packets.saturating_sub(before.sender_packets),
            sender_bytes: self.sender_bytes.saturating_sub(before.sender_bytes),
            feedback: self.feedback.saturating_sub(before.feedback),
            dropped: self.dropped.saturating_sub(before.dropped),
        }
    }

    /// The UDP payload the sender sent: IP bytes less 28 bytes of IPv4 and
    /// UDP header per datagram (no IP options here; nothing uses GSO).
    pub fn sender_payload(&self) -> u64 {
        self.sender_bytes.saturating_sub(28 * self.sender_packets)
    }
}

impl Topo {
    /// Builds the lab of `setup` for `n` receivers; `rate_bps` is the slow
    /// receivers' bottleneck, `loss` the lossy receivers' drop percentage.
    pub fn build(setup: Setup, n: usize, rate_bps: u64, loss: f64) -> Result<Topo> {
        let pid = std::process::id();
        let name = |s: &str| format!("mfb-{pid}-{s}");
        let routed = setup == Setup::Routed;
        let mut topo = Topo {
            switch: name("sw"),
            sender: name("s"),
            sender_addr: if routed { Ipv4Addr::new(198, 18, 1, 250) } else { Ipv4Addr::new(198, 18, 0, 1) },
            router: routed.then(|| name("rt")),
            receivers: (0..n)
                .map(|i| {
                    let slow = i % 2 == 0;
                    let host = (i / 2 + 1) as u8;
                    Receiver {
                        ns: name(&format!("r{i}")),
                        addr: Ipv4Addr::new(198, 18, if slow { 2 } else { 1 }, host),
                        slow,
                        lossy: setup == Setup::Lossy && i % 4 < 2,
                    }
                })
                .collect(),
            smcroute: None,
        };
        // Registered first: a half-built lab is deleted too (Drop, Ctrl-C).
        for ns in topo.namespaces() {
            netns::register_namespace(&ns);
        }
        for ns in topo.namespaces() {
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        let sw = topo.switch.clone();
        let bridges: &[&str] = if routed { &["br0", "br1"] } else { &["br0"] };
        for br in bridges {
            // No IGMP snooping: every port hears every group, as on a
            // shared LAN, and nothing depends on a querier.
            ip(&["-n", &sw, "link", "add", br, "type", "bridge", "mcast_snooping", "0"])?;
            ip(&["-n", &sw, "link", "set", br, "up"])?;
        }
        let rate = format!("{rate_bps}bit");
        let prefix = if routed { 24 } else { 15 };
        let gateway = |slow: bool| if slow { "198.18.2.254" } else { "198.18.1.254" };
        // The sender.
        let s = topo.sender.clone();
        attach(&sw, "ps", "br0", &s, "eth0", &format!("{}/{prefix}", topo.sender_addr))?;
        if routed {
            ip(&["-n", &s, "route", "add", "default", "via", gateway(false)])?;
        }
        nft(&s, &ruleset(None))?;
        // The receivers.
        for (i, r) in topo.receivers.iter().enumerate() {
            let br = if routed && r.slow { "br1" } else { "br0" };
            let port = format!("p{i}");
            attach(&sw, &port, br, &r.ns, "eth0", &format!("{}/{prefix}", r.addr))?;
            if routed {
                ip(&["-n", &r.ns, "route", "add", "default", "via", gateway(r.slow)])?;
            } else if r.slow {
                tbf(&sw, &port, &rate)?;
            }
            if r.lossy {
                // A GSO batch (manyfold's sender makes them; uftp and
                // udpcast send one datagram per call) crosses the bridge
                // whole, as a NIC's GRO would hand a socket that asks for
                // it consecutive datagrams merged. Towards a lossy
                // receiver the port segments it first, as a wire carries
                // frames, so that its random drop takes datagrams one by
                // one: whole batches would be bursts, not the independent
                // loss this setup means.
                ip(&["-n", &sw, "link", "set", "dev", &port, "gso_max_segs", "1"])?;
            }
            nft(&r.ns, &ruleset(r.lossy.then_some(loss)))?;
        }
        if let Some(rt) = topo.router.clone() {
            attach(&sw, "pa", "br0", &rt, "eth0", "198.18.1.254/24")?;
            attach(&sw, "pb", "br1", &rt, "eth1", "198.18.2.254/24")?;
            ns_run(&rt, &["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])?;
            // Towards B: the bottleneck every slow receiver shares.
            tbf(&rt, "eth1", &rate)?;
            topo.smcroute = Some(start_smcroute(&rt)?);
        }
        Ok(topo)
    }

    /// Every namespace of the lab.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v = vec![self.switch.clone(), self.sender.clone()];
        v.extend(self.router.clone());
        v.extend(self.receivers.iter().map(|r| r.ns.clone()));
        v
    }

    /// `ip netns exec NS program`.
    pub fn exec(ns: &str, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }

    /// Distinct receiver networks (/24s): what "per network" divides by.
    pub fn networks(&self) -> usize {
        let slow = self.receivers.iter().filter(|r| r.slow).count();
        usize::from(slow > 0) + usize::from(slow < self.receivers.len())
    }

    /// Multicast TTL that reaches every receiver (the router decrements it).
    pub fn ttl(&self) -> u32 {
        if self.router.is_some() {
            4
        } else {
            1
        }
    }

    pub fn counters(&self) -> Result<Counters> {
        let (sender_packets, sender_bytes) = read_counter(&self.sender, "udp_out")?;
        let mut c = Counters { sender_packets, sender_bytes, ..Counters::default() };
        for r in &self.receivers {
            c.feedback += read_counter(&r.ns, "udp_out")?.0;
            c.dropped += read_counter(&r.ns, "udp_drop")?.0;
        }
        Ok(c)
    }

    /// Kills whatever runs in the sender's and receivers' namespaces (a
    /// failed run's leftovers); the router's smcroute stays.
    pub fn kill_leftovers(&self) {
        netns::kill_in(&self.sender);
        for r in &self.receivers {
            netns::kill_in(&r.ns);
        }
    }

    /// Waits until every receiver namespace has a UDP socket on `port`.
    pub fn wait_bound(&self, port: u16, limit: Duration) -> Result<()> {
        let start = Instant::now();
        let filter = format!(":{port}");
        for r in &self.receivers {
            loop {
                let out = ns_run(&r.ns, &["ss", "-Hlnu", "sport", "=", &filter])?;
                if !out.trim().is_empty() {
                    break;
                }
                if start.elapsed() > limit {
                    bail!("no receiver listens on UDP port {port} in {} after {limit:?}", r.ns);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        if let Some(mut c) = self.smcroute.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in self.namespaces() {
            netns::kill_in(&ns);
        }
        for ns in self.namespaces() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).stderr(Stdio::null()).status();
        }
    }
}

/// A veth pair: `port` on `bridge` in the switch namespace, `dev` with
/// `addr` in `ns`, and the multicast route out of `dev`.
fn attach(sw: &str, port: &str, bridge: &str, ns: &str, dev: &str, addr: &str) -> Result<()> {
    ip(&["-n", sw, "link", "add", port, "type", "veth", "peer", "name", dev, "netns", ns])?;
    ip(&["-n", sw, "link", "set", port, "master", bridge, "up"])?;
    ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
    ip(&["-n", ns, "link", "set", dev, "up"])?;
    // udpcast and uftp address 224.0.0.0/4 groups; without this route a
    // namespace with no default route could not send to them.
    if dev == "eth0" {
        ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
    }
    Ok(())
}

fn tbf(ns: &str, dev: &str, rate: &str) -> Result<()> {
    let latency = format!("{TBF_LATENCY_MS}ms");
    ns_run(
        ns,
        &["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", TBF_BURST, "latency", &latency],
    )
    .map(|_| ())
}

/// smcrouted in the router's namespace, in the foreground, with (*,G)
/// routes for the scenario's groups both ways (its own socket and pid
/// file, so it never touches a system instance).
fn start_smcroute(rt: &str) -> Result<Child> {
    let dir = std::env::temp_dir().join(format!("{rt}-smcroute"));
    std::fs::create_dir_all(&dir)?;
    netns::register_dir(&dir);
    let conf = dir.join("smcroute.conf");
    std::fs::write(
        &conf,
        format!(
            "mgroup from eth0 group {GROUP_PREFIX}.0/24\nmgroup from eth1 group {GROUP_PREFIX}.0/24\nmroute from eth0 group {GROUP_PREFIX}.0/24 to eth1\nmroute from eth1 group {GROUP_PREFIX}.0/24 to eth0\n"
        ),
    )?;
    let child = Command::new("ip")
        .args(["netns", "exec", rt, "smcrouted", "-n", "-l", "notice", "-f"])
        .arg(&conf)
        .arg("-u")
        .arg(dir.join("smcroute.sock"))
        .arg("-P")
        .arg(dir.join("smcroute.pid"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(dir.join("smcroute.log"))?))
        .spawn()
        .context("starting smcrouted (Debian package smcroute)")?;
    // It is ready once it has set up the kernel's multicast routing.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if ns_run(rt, &["cat", "/proc/net/ip_mr_vif"]).is_ok_and(|v| v.lines().count() > 2) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_to_string(dir.join("smcroute.log")).unwrap_or_default();
    bail!("smcrouted set up no multicast interfaces within 5 s: {}", log.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_from_nft_output() {
        let out = "table inet mfb {\n\tcounter udp_out {\n\t\tpackets 12 bytes 3456\n\t}\n}\n";
        assert_eq!(parse_counter(out), Some((12, 3456)));
        assert_eq!(parse_counter("nothing"), None);
    }

    #[test]
    fn loss_rule_uses_hundredths_of_a_percent() {
        assert!(ruleset(Some(2.0)).contains("mod 10000 < 200"));
        assert!(!ruleset(None).contains("numgen"));
    }

    #[test]
    fn payload_excludes_ip_and_udp_headers() {
        let c = Counters { sender_packets: 2, sender_bytes: 2 * 1480, ..Counters::default() };
        assert_eq!(c.sender_payload(), 2 * 1452);
    }
}
