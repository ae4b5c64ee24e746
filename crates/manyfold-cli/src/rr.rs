//! `manyfold rr-server` and `manyfold rr-client`: many short request/reply
//! sessions (paper 02's RUDP workload; spec §15). Each session is one
//! connection: the request rides on the handshake's last packet with the
//! client's FIN, the server answers and closes, keeping nothing.
//!
//! The reply echoes the request (`--reply-size` repeats or cuts it to
//! another length), so that the client checks every byte it gets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use tokio::task::JoinSet;

use crate::keys;
use crate::net::{self, NetArgs};
use crate::report;
use crate::size::{human_bytes, human_duration, size_arg};

/// The largest request the server reads, or reply the client accepts.
const MAX_BODY: usize = 16 << 20;

#[derive(Args, Debug)]
pub struct RrServerArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free port; the
    /// address actually used is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7010")]
    pub listen: String,

    /// Length of each reply [default: the request's]: the request's bytes
    /// repeated or cut to this length.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub reply_size: Option<u64>,

    /// Sessions admitted but not yet taken by the server (the accept
    /// backlog, per socket); beyond it new sessions are refused explicitly.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub backlog: usize,

    /// Sockets on the port (SO_REUSEPORT), each with its own engine, so
    /// that the server spreads over the cores [default: the number of CPUs].
    #[arg(long, value_name = "N")]
    pub sockets: Option<usize>,

    /// What to do with a request that a repeat client sends on its SYN with
    /// a token (0-RTT, spec §6.9): serve it once, remembering up to N first
    /// packets so that a replayed one is not served twice (replay-window:N,
    /// the default with N = 65536); serve it whenever it comes, for requests
    /// that are safe to repeat (idempotent); or never take it (refuse).
    #[arg(long, value_name = "POLICY", default_value = "replay-window:65536", value_parser = early_data_arg)]
    pub early_data: manyfold::EarlyData,

    /// Compute each reply inside the socket's driver task as soon as the
    /// request is complete (spec §15.4), instead of in a task of its own per
    /// session: no task, channel hand-off or wake-up per session, and the
    /// reply leaves with the ack of the request and the server's FIN in one
    /// datagram when it fits. The replies are the same; only the server's
    /// cost per session changes.
    #[arg(long)]
    pub inline: bool,

    #[command(flatten)]
    pub net: NetArgs,
}

/// Parses `--early-data`: `replay-window:N`, `idempotent` or `refuse`.
fn early_data_arg(s: &str) -> Result<manyfold::EarlyData, String> {
    match s {
        "idempotent" => Ok(manyfold::EarlyData::Idempotent),
        "refuse" => Ok(manyfold::EarlyData::Refuse),
        _ => {
            let n = s.strip_prefix("replay-window:").ok_or_else(|| {
                format!("unknown policy {s:?}: use replay-window:N (N first packets remembered), idempotent or refuse")
            })?;
            match n.parse::<usize>() {
                Ok(n) if n > 0 => Ok(manyfold::EarlyData::ReplayWindow(n)),
                _ => Err(format!("replay-window needs a positive number of entries, not {n:?}")),
            }
        }
    }
}

#[derive(Args, Debug)]
pub struct RrClientArgs {
    /// Address of the rr-server, HOST:PORT.
    #[arg(value_name = "ADDR")]
    pub addr: String,

    /// Sessions to run in all, each one request and one reply.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub clients: u64,

    /// Request length (e.g. 64, 1k, 16KiB).
    #[arg(long, value_name = "SIZE", default_value = "1k", value_parser = size_arg)]
    pub size: u64,

    /// Expected reply length, if the server was started with --reply-size.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub reply_size: Option<u64>,

    /// Sessions under way at once.
    #[arg(long, value_name = "C", default_value_t = 100)]
    pub concurrency: usize,

    /// How long one session may take before it counts as failed.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,

    /// Retransmission timeout before any RTT is known, in milliseconds: how
    /// long a lost SYN, cookie echo or request waits before it is sent
    /// again (paper 02's "waiting time"; RFC 6298 asks 1 s on unknown paths).
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub initial_rto: u64,

    /// Repeat-client mode (0-RTT, spec §6.9): ask the server for an
    /// address-validation token and send each later request, with the
    /// FIN, on the SYN itself, so that the reply comes one round trip after
    /// the session starts. Only for requests the server may see twice, or
    /// servers that keep a replay window (rr-server's default). Plain
    /// sessions only.
    #[arg(long)]
    pub reuse_token: bool,

    #[command(flatten)]
    pub net: NetArgs,
}

/// Session `i`'s request: `len` bytes of a pattern of `i`.
fn request_of(i: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in &mut v {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    v
}

/// The reply to `req`: its bytes, repeated or cut to `len`.
fn reply_to(req: &[u8], len: usize) -> Vec<u8> {
    if req.is_empty() {
        return vec![0; len];
    }
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = (len - v.len()).min(req.len());
        v.extend_from_slice(&req[..n]);
    }
    v
}

pub async fn run_server(args: RrServerArgs) -> Result<()> {
    let addr = net::resolve(&args.listen).await?;
    let mut config = args.net.config()?;
    config.endpoint.accept_backlog = args.backlog;
    config.endpoint.early_data = args.early_data;
    let mode = net::mode(&config);
    let config_encrypted = config.endpoint.security.is_some();
    let sockets = args.sockets.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if sockets == 0 {
        bail!("--sockets must be at least 1");
    }
    let endpoints = manyfold::Endpoint::bind_reuseport(addr, config, sockets)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    for endpoint in &endpoints {
        net::lifecycle::register(endpoint);
    }
    let local = endpoints[0].local_addr().context("cannot read the bound address")?;
    let handlers = if args.inline { ", replies computed in the driver (--inline)" } else { "" };
    let banner = format!(
        "manyfold rr-server: listening on {local} ({mode}) with {sockets} socket(s), backlog {} each{handlers} (Ctrl-C to stop)",
        args.backlog
    );
    // With --json too: a script needs the address (port 0 picks one).
    report::emit(
        &banner,
        || serde_json::json!({ "listening": local.to_string(), "sockets": sockets, "inline": args.inline }),
    );
    let start = Instant::now();
    let served = Arc::new(AtomicU64::new(0));
    let mut serving = JoinSet::new();
    for endpoint in &endpoints {
        endpoint.listen();
        let (endpoint, served, reply_size) = (endpoint.clone(), served.clone(), args.reply_size);
        if args.inline {
            serving.spawn(async move {
                endpoint
                    .serve_inline(MAX_BODY, move |_, req: &[u8]| {
                        served.fetch_add(1, Ordering::Relaxed);
                        reply_to(req, reply_size.map_or(req.len(), |n| n as usize))
                    })
                    .await
            });
            continue;
        }
        serving.spawn(async move {
            endpoint
                .serve(MAX_BODY, move |_, req: Vec<u8>| {
                    let served = served.clone();
                    async move {
                        served.fetch_add(1, Ordering::Relaxed);
                        let len = reply_size.map_or(req.len(), |n| n as usize);
                        reply_to(&req, len)
                    }
                })
                .await
        });
    }
    tokio::select! {
        _ = net::interrupted() => {}
        _ = serving.join_next() => {}
    }
    let (mut refused, mut rejected, mut malformed, mut mismatched) = (0, 0, 0, 0);
    let (mut early, mut replayed, mut stale) = (0, 0, 0);
    for e in &endpoints {
        let s = e.stats();
        early += s.early_accepted;
        replayed += s.early_replayed;
        stale += s.tokens_rejected;
        refused += s.refused_backlog;
        rejected += s.cookies_rejected;
        malformed += s.dropped_malformed_total();
        mismatched += s.refused_protection;
    }
    let served = served.load(Ordering::Relaxed);
    let mismatch_note =
        if mismatched > 0 { format!(", {mismatched} refused for an encryption mismatch") } else { String::new() };
    let early_note = if early + replayed + stale > 0 {
        format!("; {early} in one round trip (0-RTT), {replayed} replays and {stale} bad or stale tokens ran the full handshake")
    } else {
        String::new()
    };
    let summary = format!(
        "served {served} sessions ({mode}); refused {refused} (backlog full){mismatch_note}, {rejected} cookies \
         rejected, {malformed} malformed datagrams dropped{early_note}"
    );
    // One object for the server's run, not one per session: its sessions
    // are many and short (thousands a second), each a request and a reply.
    report::emit(&summary, || {
        serde_json::json!({
            "sessions": served,
            "seconds": start.elapsed().as_secs_f64(),
            "refused_backlog": refused,
            "refused_encryption_mismatch": mismatched,
            "cookies_rejected": rejected,
            "malformed_dropped": malformed,
            "early_accepted": early,
            "early_replayed": replayed,
            "tokens_rejected": stale,
            "encrypted": config_encrypted,
        })
    });
    for e in &endpoints {
        let _ = tokio::time::timeout(Duration::from_secs(2), e.shutdown()).await;
    }
    Ok(())
}

/// Sessions per client endpoint (one UDP socket each).
const SESSIONS_PER_SOCKET: usize = 500;

pub async fn run_client(args: RrClientArgs) -> Result<()> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    if args.size as usize > MAX_BODY || args.reply_size.is_some_and(|n| n as usize > MAX_BODY) {
        bail!("requests and replies are limited to {}", human_bytes(MAX_BODY as u64));
    }
    let server = net::resolve(&args.addr).await?;
    let sockets = args.concurrency.div_ceil(SESSIONS_PER_SOCKET).max(1);
    let mut endpoints = Vec::with_capacity(sockets);
    let mut config = args.net.config()?;
    let security = keys::endpoint_protection(config.endpoint.security.as_ref());
    config.endpoint.connection.initial_rto = Duration::from_millis(args.initial_rto);
    if args.reuse_token {
        if config.endpoint.security.is_some() {
            bail!("--reuse-token sends requests on the SYN in the clear; it cannot be combined with encryption");
        }
        config.endpoint.reuse_tokens = true;
    }
    for _ in 0..sockets {
        endpoints.push(Arc::new(net::bind(net::unspecified_for(server), config.clone()).await?));
    }
    report::say(&format_args!(
        "manyfold rr-client: {} sessions to {server}, {} requests, {} at once over {sockets} socket(s)",
        args.clients,
        human_bytes(args.size),
        args.concurrency
    ));
    let multi = report::multi_progress();
    let bar = multi.add(indicatif::ProgressBar::new(args.clients));
    bar.set_style(
        crate::report::with_keys(
            indicatif::ProgressStyle::with_template(
                "{prefix:>10.bold} [{bar:32.cyan/blue}] {pos}/{len} {rate_whole} {eta_known}",
            )
            .expect("static template"),
        )
        .progress_chars("=> "),
    );
    bar.set_prefix("sessions");

    let start = Instant::now();
    let limit = Duration::from_secs(args.timeout);
    let (size, reply_len) = (args.size as usize, args.reply_size.unwrap_or(args.size) as usize);
    let mut tasks = JoinSet::new();
    let mut latencies = Vec::with_capacity(args.clients as usize);
    let mut failures: Vec<String> = Vec::new();
    let mut next = 0u64;
    let mut with_token = 0u64;
    let interrupted = net::interrupted();
    tokio::pin!(interrupted);
    loop {
        while tasks.len() < args.concurrency && next < args.clients {
            let (ep, i) = (endpoints[next as usize % sockets].clone(), next);
            tasks.spawn(async move {
                let req = request_of(i, size);
                let token = ep.has_token(server);
                let t = Instant::now();
                let r = tokio::time::timeout(limit, ep.request(server, &req, MAX_BODY)).await;
                let took = t.elapsed();
                match r {
                    Err(_) => Err(format!("session {i}: no reply within {}", human_duration(limit))),
                    Ok(Err(e)) => Err(format!("session {i}: {e}")),
                    Ok(Ok(reply)) if reply != reply_to(&req, reply_len) => {
                        Err(format!("session {i}: wrong reply ({} bytes, expected {reply_len})", reply.len()))
                    }
                    Ok(Ok(_)) => Ok((took, token)),
                }
            });
            next += 1;
        }
        let done = tokio::select! {
            _ = &mut interrupted => break,
            done = tasks.join_next() => done,
        };
        let Some(done) = done else { break };
        match done.context("a session task failed")? {
            Ok((took, token)) => {
                latencies.push(took);
                with_token += u64::from(token);
            }
            Err(e) => failures.push(e),
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let elapsed = start.elapsed();
    tasks.abort_all();
    let mut summary = Summary::new(latencies, failures, elapsed, args.clients);
    summary.security = Some(security);
    summary.with_token = args.reuse_token.then_some(with_token);
    report::emit(&summary, || summary.to_json());
    for ep in &endpoints {
        let _ = tokio::time::timeout(Duration::from_secs(1), ep.shutdown_within(Duration::from_millis(500))).await;
    }
    if summary.failures > 0 || summary.done < args.clients {
        bail!(
            "{} of {} sessions failed or did not run{}",
            args.clients - summary.ok,
            args.clients,
            summary.first_failure.as_ref().map(|f| format!(" (first: {f})")).unwrap_or_default()
        );
    }
    Ok(())
}

/// What a client run did.
#[derive(Debug)]
struct Summary {
    ok: u64,
    failures: u64,
    done: u64,
    first_failure: Option<String>,
    elapsed: Duration,
    /// Sorted latencies of the successful sessions.
    latencies: Vec<Duration>,
    /// Whether the sessions were encrypted.
    security: Option<manyfold::Protection>,
    /// With --reuse-token: successful sessions that started holding a token.
    with_token: Option<u64>,
}

impl Summary {
    fn new(mut latencies: Vec<Duration>, failures: Vec<String>, elapsed: Duration, _wanted: u64) -> Self {
        latencies.sort();
        let ok = latencies.len() as u64;
        Summary {
            ok,
            failures: failures.len() as u64,
            done: ok + failures.len() as u64,
            first_failure: failures.into_iter().next(),
            elapsed,
            latencies,
            security: None,
            with_token: None,
        }
    }

    fn percentile(&self, p: f64) -> Option<Duration> {
        let n = self.latencies.len();
        (n > 0).then(|| self.latencies[((n as f64 * p).ceil() as usize).clamp(1, n) - 1])
    }

    /// The summary as JSON (`--json`): counts, requests per second and
    /// latency percentiles in seconds (null without a successful session).
    fn to_json(&self) -> serde_json::Value {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        serde_json::json!({
            "sessions": self.done,
            "ok": self.ok,
            "failures": self.failures,
            "first_failure": self.first_failure,
            "seconds": self.elapsed.as_secs_f64(),
            "requests_per_second": self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9),
            "latency_p50_seconds": secs(self.percentile(0.5)),
            "latency_p90_seconds": secs(self.percentile(0.9)),
            "latency_p99_seconds": secs(self.percentile(0.99)),
            "latency_max_seconds": secs(self.latencies.last().copied()),
            "encrypted": matches!(self.security, Some(manyfold::Protection::Encrypted { .. })),
            "sessions_with_token": self.with_token,
        })
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9);
        writeln!(f, "{} sessions in {}: {rate:.0} requests/s", self.done, human_duration(self.elapsed))?;
        let show = |d: Option<Duration>| d.map_or("–".to_string(), human_duration);
        writeln!(
            f,
            "  latency   p50 {}, p90 {}, p99 {}, max {}",
            show(self.percentile(0.5)),
            show(self.percentile(0.9)),
            show(self.percentile(0.99)),
            show(self.latencies.last().copied())
        )?;
        write!(f, "  failures  {}", self.failures)?;
        if let Some(first) = &self.first_failure {
            write!(f, " (first: {first})")?;
        }
        if let Some(s) = self.security {
            write!(f, "\n  security  {s}")?;
        }
        if let Some(n) = self.with_token {
            write!(f, "\n  tokens    {n} of {} sessions sent their request on the SYN (0-RTT)", self.ok)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_repeat_or_cut_the_request() {
        assert_eq!(reply_to(b"abc", 7), b"abcabca");
        assert_eq!(reply_to(b"abcdef", 2), b"ab");
        assert_eq!(reply_to(b"", 3), [0, 0, 0]);
        assert_ne!(request_of(1, 16), request_of(2, 16));
    }

    #[test]
    fn percentiles_are_taken_from_the_sorted_latencies() {
        let ms = Duration::from_millis;
        let s = Summary::new((1..=100).rev().map(ms).collect(), vec!["x".into()], ms(1000), 101);
        assert_eq!((s.percentile(0.5), s.percentile(0.99)), (Some(ms(50)), Some(ms(99))));
        assert_eq!((s.ok, s.failures, s.done), (100, 1, 101));
        assert!(s.to_string().contains("100 requests/s"), "{s}");
    }
}
