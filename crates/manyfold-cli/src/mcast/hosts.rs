//! `mcast send --hosts FILE`: the receivers a sender lets in, by address
//! or client id, one a line (uftp's host list). Those the list does not
//! name are refused at once (spec §16.8); those it names that did not
//! complete are reported by name at the end.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use anyhow::{bail, Context, Result};
use manyfold::mcast::{ReceiverOutcome, ReceiverReport};

/// How a receiver's part ended, in words (the sender's report's).
pub type Describe<'a> = &'a dyn Fn(&ReceiverReport) -> String;

/// One line of the list: an address or a client id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Addr(IpAddr),
    /// A receiver's client id (its `--id`).
    Id(u32),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Addr(a) => write!(f, "{a}"),
            Host::Id(id) => write!(f, "id {id:08x}"),
        }
    }
}

/// The list, in file order.
#[derive(Debug, Clone, Default)]
pub struct Hosts {
    pub hosts: Vec<Host>,
}

/// An IPv4-mapped IPv6 address as the IPv4 it maps.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A client id: 8 hex digits, `0x` optional (as reports print it).
pub fn parse_id(s: &str) -> Option<u32> {
    let h = s.strip_prefix("0x").unwrap_or(s);
    if h.len() != 8 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(h, 16).ok().filter(|&id| id != 0)
}

impl Hosts {
    pub fn load(path: &Path) -> Result<Hosts> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read --hosts {}", path.display()))?;
        Hosts::parse(&text).with_context(|| format!("--hosts {}", path.display()))
    }

    /// One host a line: an IPv4 or IPv6 address, or a client id of 8 hex
    /// digits; `#` starts a comment; blank lines are skipped.
    pub fn parse(text: &str) -> Result<Hosts> {
        let mut hosts = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let word = line.split('#').next().unwrap_or("").trim();
            if word.is_empty() {
                continue;
            }
            let host = if let Ok(ip) = word.parse::<IpAddr>() {
                Host::Addr(canonical(ip))
            } else if let Some(id) = parse_id(word) {
                Host::Id(id)
            } else {
                bail!(
                    "line {n}: {word:?} is neither an IP address (198.18.0.2, 2001:db8::2) nor a client id (8 hex digits, e.g. 0a1b2c3d)"
                );
            };
            if hosts.contains(&host) {
                bail!("line {n}: {host} is listed twice");
            }
            hosts.push(host);
        }
        if hosts.is_empty() {
            bail!("the list names no receiver (one address or client id a line)");
        }
        Ok(Hosts { hosts })
    }

    fn names(&self, host: Host, addr: SocketAddr, client: u32) -> bool {
        match host {
            Host::Addr(ip) => canonical(addr.ip()) == ip,
            Host::Id(id) => id == client,
        }
    }

    /// Whether the receiver at `addr` with client id `client` is listed.
    pub fn admits(&self, addr: SocketAddr, client: u32) -> bool {
        self.hosts.iter().any(|&h| self.names(h, addr, client))
    }

    /// The listed hosts without the whole file, each with why: never
    /// joined, or how its part ended.
    pub fn missing(&self, receivers: &[ReceiverReport], describe: Describe<'_>) -> Vec<String> {
        let mut out = Vec::new();
        for &h in &self.hosts {
            let theirs: Vec<&ReceiverReport> = receivers.iter().filter(|r| self.names(h, r.addr, r.client)).collect();
            if theirs.iter().any(|r| r.outcome == ReceiverOutcome::Completed) {
                continue;
            }
            match theirs.last() {
                None => out.push(format!("{h} (never joined)")),
                Some(r) => out.push(format!("{h} ({})", describe(r))),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_list_takes_addresses_ids_comments_and_blank_lines() {
        let h = Hosts::parse("# lab\n198.18.0.2\n\n  2001:db8::3  # v6\n0x0a1b2c3d\n0A1B2C3E\n").unwrap();
        assert_eq!(h.hosts.len(), 4);
        assert!(h.admits("198.18.0.2:9".parse().unwrap(), 1));
        assert!(h.admits("[::ffff:198.18.0.2]:9".parse().unwrap(), 1));
        assert!(h.admits("[2001:db8::3]:9".parse().unwrap(), 1));
        assert!(h.admits("198.18.0.9:9".parse().unwrap(), 0x0a1b2c3e));
        assert!(!h.admits("198.18.0.9:9".parse().unwrap(), 7));
    }

    #[test]
    fn a_bad_line_is_an_error_naming_its_number() {
        let e = Hosts::parse("198.18.0.2\n# ok\nhost.example\n").unwrap_err();
        assert!(e.to_string().starts_with("line 3: \"host.example\" is neither"), "{e}");
        let e = Hosts::parse("198.18.0.2\n198.18.0.2\n").unwrap_err();
        assert!(e.to_string().contains("line 2: 198.18.0.2 is listed twice"), "{e}");
        assert!(Hosts::parse("# nothing\n\n").is_err());
        assert!(Hosts::parse("00000000\n").is_err(), "0 is not a client id");
    }
}
