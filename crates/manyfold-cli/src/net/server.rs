//! What every server command does to start (issue 25 step 7): resolve
//! its `--listen` address, build the configuration from the network
//! flags, bind and listen; and, while it serves, the log of the peers its
//! endpoint refused (issue 23 item 7): at most one line per period, with
//! counts by cause, so a flood of bad peers cannot flood the log.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use manyfold_proto::EndpointStats;

use super::{bind, mode, resolve, Config, Endpoint, NetArgs};

/// How often refusals are summed up in the log, at most.
const REFUSALS_EVERY: Duration = Duration::from_secs(5);

/// A listening server endpoint.
#[derive(Debug)]
pub struct Server {
    pub endpoint: Arc<Endpoint>,
    /// The address actually bound (port 0 picks one).
    pub local: SocketAddr,
    /// "plain" or how it is encrypted, for the banner.
    pub mode: String,
    watcher: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// Binds `listen` with the configuration of `net` (changed by `tune`
/// first) and listens.
pub async fn listen(listen: &str, net: &NetArgs, tune: impl FnOnce(&mut Config)) -> Result<Server> {
    let addr = resolve(listen).await?;
    let mut config = net.config()?;
    tune(&mut config);
    let mode = mode(&config);
    let endpoint = Arc::new(bind(addr, config).await?);
    endpoint.listen();
    let local = endpoint.local_addr().context("cannot read the bound address")?;
    let watcher = tokio::spawn(watch_refusals(Arc::clone(&endpoint)));
    Ok(Server { endpoint, local, mode, watcher })
}

/// Logs on stderr, every [`REFUSALS_EVERY`] at most, what the endpoint
/// refused since the last line: each refused peer with its address and
/// cause (one line per address and period at most, [`PeerLog`]), and a
/// count of what the engine cannot name an address for.
async fn watch_refusals(endpoint: Arc<Endpoint>) {
    let mut seen = endpoint.stats();
    let mut peers = PeerLog::new(REFUSALS_EVERY);
    let mut tick = tokio::time::interval(REFUSALS_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        for r in endpoint.take_refusals() {
            peers.note(r.peer, &format!("refused {}: {}", r.peer, r.cause));
        }
        let now = endpoint.stats();
        if let Some(line) = refusals(&seen, &now, REFUSALS_EVERY) {
            eprintln!("{line}");
        }
        seen = now;
    }
}

/// The log line for what was refused between `before` and `after` that
/// the per-peer lines do not name (no address known for it), if anything.
fn refusals(before: &EndpointStats, after: &EndpointStats, period: Duration) -> Option<String> {
    let causes = [
        (after.handshakes_failed - before.handshakes_failed, "failed authentication or an unfinished handshake"),
        (after.dropped_unauthenticated - before.dropped_unauthenticated, "packets failing authentication"),
        (after.refusals_unreported - before.refusals_unreported, "more refused peers than the log keeps"),
    ];
    let parts: Vec<String> = causes.iter().filter(|(n, _)| *n > 0).map(|(n, why)| format!("{n} {why}")).collect();
    (!parts.is_empty()).then(|| format!("refused in the last {} s: {}", period.as_secs(), parts.join(", ")))
}

/// Lines about one peer address at most once per period (a failed
/// login, a wrong token), counting those left out: a peer that retries
/// in a loop cannot flood the log. Remembers a bounded number of
/// addresses; when full, forgets those quiet for a period.
#[derive(Debug)]
pub struct PeerLog {
    period: Duration,
    /// Address -> when its last line was printed, and lines left out since.
    seen: std::collections::HashMap<std::net::IpAddr, (std::time::Instant, u64)>,
}

/// Addresses a [`PeerLog`] remembers at most.
const PEER_LOG_MAX: usize = 4096;

impl PeerLog {
    pub fn new(period: Duration) -> PeerLog {
        PeerLog { period, seen: std::collections::HashMap::new() }
    }

    /// Prints `line` about `peer` on stderr unless a line about the same
    /// address was printed less than a period ago; then it is counted and
    /// the next line printed says how many were left out.
    pub fn note(&mut self, peer: SocketAddr, line: &str) {
        if let Some(text) = self.admit(peer.ip(), std::time::Instant::now(), line) {
            eprintln!("{text}");
        }
    }

    fn admit(&mut self, ip: std::net::IpAddr, now: std::time::Instant, line: &str) -> Option<String> {
        if self.seen.len() >= PEER_LOG_MAX && !self.seen.contains_key(&ip) {
            let period = self.period;
            self.seen.retain(|_, (at, _)| now.duration_since(*at) < period);
        }
        let full = self.seen.len() >= PEER_LOG_MAX;
        match self.seen.get_mut(&ip) {
            Some((at, left_out)) if now.duration_since(*at) < self.period => {
                *left_out += 1;
                None
            }
            Some((at, left_out)) => {
                let text = match std::mem::take(left_out) {
                    0 => line.to_string(),
                    n => format!(
                        "{line} ({n} more from {ip} in the last {} s not shown)",
                        now.duration_since(*at).as_secs()
                    ),
                };
                *at = now;
                Some(text)
            }
            None if full => None,
            None => {
                self.seen.insert(ip, (now, 0));
                Some(line.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_gets_a_line_per_period_and_the_next_counts_those_left_out() {
        let mut log = PeerLog::new(Duration::from_secs(10));
        let t0 = std::time::Instant::now();
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        assert_eq!(log.admit(a, t0, "a: wrong token").as_deref(), Some("a: wrong token"));
        assert_eq!(log.admit(a, t0 + Duration::from_secs(1), "a: wrong token"), None);
        assert_eq!(log.admit(a, t0 + Duration::from_secs(2), "a: wrong token"), None);
        assert_eq!(log.admit(b, t0 + Duration::from_secs(2), "b: wrong token").as_deref(), Some("b: wrong token"));
        assert_eq!(
            log.admit(a, t0 + Duration::from_secs(11), "a: wrong token").as_deref(),
            Some("a: wrong token (2 more from 10.0.0.1 in the last 11 s not shown)")
        );
    }

    #[test]
    fn a_refusal_line_counts_each_cause_without_an_address_since_the_last() {
        let before = EndpointStats { dropped_unauthenticated: 2, handshakes_failed: 1, ..EndpointStats::default() };
        let after = EndpointStats { dropped_unauthenticated: 5, handshakes_failed: 2, refused_backlog: 1, ..before };
        let line = refusals(&before, &after, Duration::from_secs(5)).unwrap();
        assert_eq!(
            line,
            "refused in the last 5 s: 1 failed authentication or an unfinished handshake, 3 packets failing authentication",
            "a refused SYN is a line of its own, with its address"
        );
        assert_eq!(refusals(&after, &after, Duration::from_secs(5)), None);
    }
}
