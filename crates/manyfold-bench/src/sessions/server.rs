//! The `sessions` server process. It binds 127.0.0.1 (a port the OS
//! chooses), writes its address to the ready file, and serves until the
//! stop file appears; then it prints its counters and exits.
//!
//! - Request-reply with an inline handler (`Endpoint::serve_inline`, spec
//!   §15.4): the driver task reads each request, reverses it and closes;
//!   the counters are the endpoint's `inline_stats`.
//! - Request-reply: every session is one task that reads the request to its
//!   end (the client's FIN), writes it back reversed and closes: manyfold
//!   `Connection::close` (FIN, then waits until it is acknowledged: the
//!   server closes second and keeps no state afterwards, spec §4.4), TCP
//!   `shutdown` then drop. A session that fails is counted with the first
//!   error's text.
//! - Hold (`--measure`): every accepted session goes to one list, where it
//!   stays open and idle, no task remaining per session; with a hello of
//!   n > 0 bytes, a task first reads those n bytes. When the measure file
//!   appears (holding the number of sessions the clients established), the
//!   server waits until it holds that many (at most 10 s), lets the last
//!   acknowledgements settle, reads its resident set (VmRSS) and writes
//!   the `measured` file beside it. Its RSS before any session was read
//!   just before it wrote the ready file.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Kind, Rto};
use crate::fanout::runs::write_ready;

/// Longest a server task waits on one session.
const SESSION_LIMIT: Duration = Duration::from_secs(60);

/// The inline server's request limit: the largest size the lab takes.
const MAX_REQUEST: usize = 16 << 20;

/// How often the server looks for the stop and measure files.
const POLL: Duration = Duration::from_millis(10);

/// What the server's sessions did.
#[derive(Debug, Default)]
struct Counters {
    served: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Counters {
    fn fail(&self, e: impl std::fmt::Display) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        first.get_or_insert_with(|| e.to_string());
    }

    fn line(&self) -> String {
        let first = self.first_error.lock().unwrap_or_else(|p| p.into_inner()).clone();
        format!(
            "served={} failures={}\nserver_error: {}\n",
            self.served.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            first.unwrap_or_default()
        )
    }
}

pub fn run(
    kind: Kind,
    ready: &Path,
    stop: &Path,
    backlog: usize,
    rto: Rto,
    hold: Option<(&Path, usize)>,
    limit: Duration,
) -> Result<()> {
    let rt = crate::runtime()?;
    let text = rt.block_on(async {
        tokio::time::timeout(limit, serve(kind, ready, stop, backlog, rto, hold))
            .await
            .unwrap_or_else(|_| bail!("the server was not stopped within {limit:?}"))
    })?;
    finish(&text)
}

/// Prints the report and exits at once: tearing down thousands of open
/// sessions one by one would only add to the measured CPU.
pub fn finish(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    std::process::exit(0)
}

async fn serve(
    kind: Kind,
    ready: &Path,
    stop: &Path,
    backlog: usize,
    rto: Rto,
    hold: Option<(&Path, usize)>,
) -> Result<String> {
    let measure = hold.map(|h| h.0);
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let counters = Arc::new(Counters::default());
    let held = Arc::new(Mutex::new(Vec::<manyfold::Connection>::new()));
    let mut endpoint = None;
    let addr = match kind {
        Kind::ManyfoldInline => {
            if measure.is_some() {
                bail!("the hold runs the plain manyfold server");
            }
            let mut config = manyfold::Config { endpoint: rto.endpoint_config(), ..Default::default() };
            config.endpoint.accept_backlog = backlog;
            let ep = manyfold::Endpoint::bind(any, config).await?;
            ep.listen();
            let addr = ep.local_addr()?;
            let serving = ep.clone();
            // The reply is the request reversed, written by the driver task.
            tokio::spawn(async move {
                serving.serve_inline(MAX_REQUEST, |_, req: &[u8]| req.iter().rev().copied().collect::<Vec<u8>>()).await
            });
            endpoint = Some(ep);
            addr
        }
        Kind::Manyfold | Kind::ManyfoldTokens => {
            let mut config = manyfold::Config { endpoint: rto.endpoint_config(), ..Default::default() };
            config.endpoint.accept_backlog = backlog;
            let ep = manyfold::Endpoint::bind(any, config).await?;
            ep.listen();
            let addr = ep.local_addr()?;
            let (acc, counters, held) = (ep.clone(), counters.clone(), held.clone());
            let hello = hold.map(|h| h.1);
            tokio::spawn(async move {
                while let Some(conn) = acc.accept().await {
                    let (counters, held) = (counters.clone(), held.clone());
                    match hello {
                        None => drop(tokio::spawn(answer(conn, counters))),
                        Some(0) => {
                            held.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
                            counters.served.fetch_add(1, Ordering::Relaxed);
                        }
                        Some(len) => drop(tokio::spawn(keep(conn, len, counters, held))),
                    }
                }
            });
            endpoint = Some(ep);
            addr
        }
        Kind::Tcp | Kind::TcpSpread => {
            if measure.is_some() {
                bail!("the hold runs manyfold only");
            }
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_reuseaddr(true)?;
            socket.bind(any)?;
            let listener = socket.listen(u32::try_from(backlog).unwrap_or(u32::MAX))?;
            let addr = listener.local_addr()?;
            let counters = counters.clone();
            tokio::spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            tokio::spawn(answer(s, counters.clone()));
                        }
                        // Out of descriptors, say: count it and go on.
                        Err(e) => {
                            counters.fail(format!("accept: {e}"));
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
            });
            addr
        }
    };
    let rss_before = vm_rss_kib()?;
    write_ready(ready, &addr.to_string())?;
    let mut out = String::new();
    if let Some(measure) = measure {
        wait_for(measure).await;
        out += &hold_figures(measure, &counters, &held, endpoint.as_ref(), rss_before).await?;
    }
    wait_for(stop).await;
    let mut extra = String::new();
    if let Some(ep) = &endpoint {
        // The clients are done: every session's FIN should be acknowledged
        // (or about to be), leaving the server nothing. Give the last acks
        // a moment before counting what is left.
        let t = Instant::now();
        while measure.is_none() && ep.connection_count() > 0 && t.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(POLL).await;
        }
        let s = ep.stats();
        let d = ep.driver_stats();
        extra = format!(
            " conns_left={} accepted={} refused_backlog={} responses_dropped={} cookies_rejected={} cookies_replayed={} datagrams_sent={} datagrams_received={} send_would_block={}",
            ep.connection_count(),
            s.connections_accepted,
            s.refused_backlog,
            s.responses_dropped,
            s.cookies_rejected,
            s.cookies_replayed,
            d.datagrams_sent,
            d.datagrams_received,
            d.send_would_block,
        );
    }
    if let Some(ep) = endpoint.as_ref().filter(|_| kind == Kind::ManyfoldInline) {
        // The driver served the sessions: its counters are the server's.
        let s = ep.inline_stats();
        counters.served.store(s.served, Ordering::Relaxed);
        let failed = s.too_large + s.handler_panics + s.failed;
        if failed > 0 {
            counters.fail(format!(
                "inline: {} over the limit, {} handler panics, {} ended early",
                s.too_large, s.handler_panics, s.failed
            ));
            counters.failed.store(failed, Ordering::Relaxed);
        }
    }
    let line = counters.line();
    let (first, rest) = line.split_once('\n').unwrap_or((&line, ""));
    out += &format!("server {first}{extra}\n{rest}");
    Ok(out)
}

/// Waits until `path` exists.
async fn wait_for(path: &Path) {
    while !path.exists() {
        tokio::time::sleep(POLL).await;
    }
}

/// One request-reply session, bounded by [`SESSION_LIMIT`].
async fn answer(mut s: impl AsyncRead + AsyncWrite + Unpin, counters: Arc<Counters>) {
    let exchange = async {
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.context("reading the request")?;
        buf.reverse();
        s.write_all(&buf).await.context("writing the reply")?;
        // manyfold: close (FIN, wait for its acknowledgement); TCP: FIN.
        s.shutdown().await.context("closing")?;
        anyhow::Ok(())
    };
    match tokio::time::timeout(SESSION_LIMIT, exchange).await {
        Ok(Ok(())) => {
            counters.served.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Err(e)) => counters.fail(format!("{e:#}")),
        Err(_) => counters.fail(format!("session not done within {SESSION_LIMIT:?}")),
    }
}

/// One held session: its hello of `len` bytes is read, then it joins `held`.
async fn keep(
    mut conn: manyfold::Connection,
    len: usize,
    counters: Arc<Counters>,
    held: Arc<Mutex<Vec<manyfold::Connection>>>,
) {
    let mut hello = vec![0u8; len];
    match tokio::time::timeout(SESSION_LIMIT, conn.read_exact(&mut hello)).await {
        Ok(Ok(_)) => {
            held.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
            counters.served.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Err(e)) => counters.fail(format!("reading the hello: {e}")),
        Err(_) => counters.fail("no hello within 60 s"),
    }
}

/// The hold's figures, once the clients report `expected` sessions up.
async fn hold_figures(
    measure: &Path,
    counters: &Counters,
    held: &Mutex<Vec<manyfold::Connection>>,
    ep: Option<&manyfold::Endpoint>,
    rss_before: u64,
) -> Result<String> {
    let text = std::fs::read_to_string(measure).with_context(|| format!("reading {}", measure.display()))?;
    let expected: f64 = text.trim().parse().context("the measure file holds no count")?;
    let t = Instant::now();
    while (counters.served.load(Ordering::Relaxed) as f64) < expected && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(POLL).await;
    }
    // The last hellos' acknowledgements and the clients' acks of them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_held = vm_rss_kib()?;
    let sessions = held.lock().unwrap_or_else(|p| p.into_inner()).len();
    let conns = ep.map_or(0, |e| e.connection_count());
    let out = format!("hold held={sessions} conns={conns} rss_before_kib={rss_before} rss_held_kib={rss_held}\n");
    write_ready(&measure.with_file_name("measured"), &out)?;
    Ok(out)
}

/// This process's resident set size, KiB (`VmRSS` in /proc/self/status).
pub fn vm_rss_kib() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/self/status")
}
