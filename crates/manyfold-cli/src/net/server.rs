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
/// refused since the last line.
async fn watch_refusals(endpoint: Arc<Endpoint>) {
    let mut seen = endpoint.stats();
    let mut tick = tokio::time::interval(REFUSALS_EVERY);
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = endpoint.stats();
        if let Some(line) = refusals(&seen, &now, REFUSALS_EVERY) {
            eprintln!("{line}");
        }
        seen = now;
    }
}

/// The log line for what was refused between `before` and `after`, if
/// anything was.
fn refusals(before: &EndpointStats, after: &EndpointStats, period: Duration) -> Option<String> {
    let causes = [
        (after.handshakes_failed - before.handshakes_failed, "failed authentication or an unfinished handshake"),
        (after.refused_protection - before.refused_protection, "encryption mismatch (one side plain)"),
        (after.dropped_unauthenticated - before.dropped_unauthenticated, "packets failing authentication"),
        (after.cookies_rejected - before.cookies_rejected, "bad or expired cookies"),
        (after.refused_backlog - before.refused_backlog, "accept backlog full"),
        (after.refused_per_source - before.refused_per_source, "too many connections from one address"),
    ];
    let parts: Vec<String> = causes.iter().filter(|(n, _)| *n > 0).map(|(n, why)| format!("{n} {why}")).collect();
    (!parts.is_empty()).then(|| format!("refused in the last {} s: {}", period.as_secs(), parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_line_counts_each_cause_since_the_last() {
        let before = EndpointStats { refused_protection: 2, handshakes_failed: 1, ..EndpointStats::default() };
        let after = EndpointStats { refused_protection: 5, handshakes_failed: 1, refused_backlog: 1, ..before };
        let line = refusals(&before, &after, Duration::from_secs(5)).unwrap();
        assert_eq!(line, "refused in the last 5 s: 3 encryption mismatch (one side plain), 1 accept backlog full");
        assert_eq!(refusals(&after, &after, Duration::from_secs(5)), None);
    }
}
