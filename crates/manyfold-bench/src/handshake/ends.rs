//! The `handshake` scenario's two processes. The sender prints one line
//! per connect: `sample row=.. rep=.. ms=.. up=..` (up: peers connected).
//! The receivers accept whatever comes, read each connection to its end
//! and drop it, until their time is up or they are killed.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::task::JoinSet;

use super::Row;
use crate::wan::netns::ADDR_A;

/// The sender's pauses.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The short row's response timeout.
    pub short: Duration,
    /// How long a rep's connections get to close before the next connect.
    pub drain: Duration,
}

/// How long one connection of the receivers is read before it is dropped.
const READ_LIMIT: Duration = Duration::from_secs(30);

pub fn send(first: SocketAddr, n: usize, reps: usize, rows: &[Row], t: Timing) -> Result<()> {
    let peers = addresses(first, n)?;
    crate::runtime()?.block_on(async {
        for rep in 0..reps {
            for &row in rows {
                let (took, up) = match row {
                    Row::Manyfold => group_once(&peers, manyfold::GroupConfig::default(), t.drain).await?,
                    Row::ManyfoldShort => {
                        let cfg = manyfold::GroupConfig { response_timeout: t.short, ..Default::default() };
                        group_once(&peers, cfg, t.drain).await?
                    }
                    Row::Tcp => tcp_once(&peers, t.drain).await,
                };
                println!("sample row={} rep={rep} ms={:.4} up={up}", row_name(row), took.as_secs_f64() * 1e3);
            }
        }
        Ok(())
    })
}

/// The row's name on the sender's lines (its command-line value).
pub fn row_name(row: Row) -> &'static str {
    match row {
        Row::Manyfold => "manyfold",
        Row::ManyfoldShort => "manyfold-short",
        Row::Tcp => "tcp",
    }
}

/// Peer i at `first`'s port + i.
fn addresses(first: SocketAddr, n: usize) -> Result<Vec<SocketAddr>> {
    (0..n)
        .map(|i| {
            let port = u16::try_from(first.port() as usize + i).context("ports past 65535")?;
            Ok(SocketAddr::new(first.ip(), port))
        })
        .collect()
}

/// One group connect from a fresh endpoint: the time `Endpoint::group`
/// took and how many peers are up. The group is then dropped (it closes
/// gracefully) and the endpoint shut down within `drain`.
async fn group_once(peers: &[SocketAddr], cfg: manyfold::GroupConfig, drain: Duration) -> Result<(Duration, usize)> {
    let ep = manyfold::Endpoint::bind(SocketAddr::new(ADDR_A.into(), 0), manyfold::Config::default()).await?;
    let start = Instant::now();
    let outcome = ep.group(peers, cfg).await;
    let took = start.elapsed();
    let up = match &outcome {
        Ok((_, unreachable)) => peers.len() - unreachable.len(),
        Err(manyfold::GroupError::Unreachable(_)) => 0,
        Err(e) => bail!("group connect: {e}"),
    };
    drop(outcome);
    let _ = tokio::time::timeout(drain + Duration::from_secs(1), ep.shutdown_within(drain)).await;
    Ok((took, up))
}

/// N kernel TCP connects spawned at once, timed until the last one
/// completes (or gives up after the group's overall timeout, 10 s).
async fn tcp_once(peers: &[SocketAddr], drain: Duration) -> (Duration, usize) {
    let limit = manyfold::GroupConfig::default().overall_timeout;
    let start = Instant::now();
    let mut set = JoinSet::new();
    for &p in peers {
        set.spawn(tokio::time::timeout(limit, tokio::net::TcpStream::connect(p)));
    }
    let mut streams = Vec::with_capacity(peers.len());
    while let Some(r) = set.join_next().await {
        if let Ok(Ok(Ok(s))) = r {
            streams.push(s);
        }
    }
    let took = start.elapsed();
    let up = streams.len();
    drop(streams);
    tokio::time::sleep(drain).await;
    (took, up)
}

pub fn recv(addr: Ipv4Addr, port: u16, n: usize, ready: &Path, secs: Duration) -> Result<()> {
    crate::runtime()?.block_on(async {
        let mut tasks = JoinSet::new();
        for i in 0..n {
            let at = SocketAddr::new(addr.into(), u16::try_from(port as usize + i).context("ports past 65535")?);
            let ep =
                manyfold::Endpoint::bind(at, manyfold::Config::default()).await.with_context(|| format!("{at}"))?;
            ep.listen();
            tasks.spawn(async move {
                while let Some(conn) = ep.accept().await {
                    tokio::spawn(discard(conn));
                }
            });
            let l = tokio::net::TcpListener::bind(at).await.with_context(|| format!("TCP {at}"))?;
            tasks.spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    tokio::spawn(discard(s));
                }
            });
        }
        crate::fanout::runs::write_ready(ready, "ready")?;
        // Serve until the time is up (the scenario kills us sooner).
        let _ = tokio::time::timeout(secs, async { while tasks.join_next().await.is_some() {} }).await;
        Ok(())
    })
}

/// Reads a connection to its end (bounded) and drops it.
async fn discard(mut from: impl AsyncRead + Unpin) {
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(READ_LIMIT, async {
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}
