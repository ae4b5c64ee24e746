//! Test hosts in network namespaces (root only): `n` hosts on one bridge,
//! host i at 198.18.0.(i + 1)/24 and 2001:db8::(i + 1)/64 with multicast
//! routes, all deleted when the lab drops. Only 198.18.0.0/15,
//! 2001:db8::/32, 239.0.0.0/8 and ff15::/16 are used inside.

use std::process::{Command, Stdio};

/// Namespaces and the bridge between them; deleted on drop.
pub struct Lab {
    tag: String,
    hosts: Vec<String>,
}

/// Runs a command; its stderr is the error.
pub fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!("{}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

impl Lab {
    /// `n` hosts, host i at 198.18.0.(i + 1), all on one bridge.
    pub fn new(n: usize) -> Result<Lab, String> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n_lab = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("mf{}x{n_lab}", std::process::id() % 100_000);
        let mut lab = Lab { tag: tag.clone(), hosts: Vec::new() };
        let sw = format!("{tag}sw");
        sh(&["ip", "netns", "add", &sw])?;
        lab.hosts.push(sw.clone());
        sh(&["ip", "-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        sh(&["ip", "-n", &sw, "link", "set", "br0", "up"])?;
        for i in 0..n {
            let host = lab.host(i);
            sh(&["ip", "netns", "add", &host])?;
            lab.hosts.push(host.clone());
            let (a, b) = (lab.iface(i), format!("{tag}b{i}"));
            sh(&["ip", "link", "add", &a, "netns", &host, "type", "veth", "peer", "name", &b, "netns", &sw])?;
            sh(&["ip", "-n", &sw, "link", "set", &b, "master", "br0"])?;
            sh(&["ip", "-n", &sw, "link", "set", &b, "up"])?;
            sh(&["ip", "-n", &host, "addr", "add", &format!("198.18.0.{}/24", i + 1), "dev", &a])?;
            // nodad: usable at once, not after duplicate detection.
            sh(&["ip", "-n", &host, "-6", "addr", "add", &format!("2001:db8::{}/64", i + 1), "dev", &a, "nodad"])?;
            sh(&["ip", "-n", &host, "link", "set", &a, "up"])?;
            sh(&["ip", "-n", &host, "link", "set", "lo", "up"])?;
            sh(&["ip", "-n", &host, "route", "add", "224.0.0.0/4", "dev", &a])?;
            sh(&["ip", "-n", &host, "-6", "route", "add", "ff15::/16", "dev", &a])?;
        }
        Ok(lab)
    }

    /// Host i's namespace.
    pub fn host(&self, i: usize) -> String {
        format!("{}h{i}", self.tag)
    }

    /// Host i's interface (inside its namespace).
    pub fn iface(&self, i: usize) -> String {
        format!("{}a{i}", self.tag)
    }

    /// Drops `percent` % of the UDP datagrams host `i` receives (nftables).
    pub fn random_loss(&self, i: usize, percent: u32) -> Result<(), String> {
        let h = self.host(i);
        let nft = |rest: &[&str]| {
            let mut args = vec!["ip", "netns", "exec", &h, "nft"];
            args.extend_from_slice(rest);
            sh(&args)
        };
        nft(&["add", "table", "inet", "mfloss"])?;
        nft(&["add", "chain", "inet", "mfloss", "in", "{ type filter hook input priority 0 ; }"])?;
        let rule = format!("meta l4proto udp numgen random mod 100 < {percent} drop");
        let mut args = vec!["add", "rule", "inet", "mfloss", "in"];
        args.extend(rule.split(' '));
        nft(&args)
    }

    /// The `manyfold` binary, to run in host i's namespace.
    pub fn exec(&self, i: usize) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.host(i)]).arg(env!("CARGO_BIN_EXE_manyfold"));
        c.stdin(Stdio::null());
        c
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = Command::new("ip").args(["netns", "del", h]).output();
        }
    }
}
