//! The `fanout` scenario's two processes. The sender stamps
//! `start_ns=` (CLOCK_MONOTONIC) just before it connects; each receiver
//! stamps `done_ns=` once its copy's length and BLAKE3 hash matched; the
//! scenario subtracts the first from the last of the others.
//!
//! - manyfold: the sender opens one group (mode All, spec §14.5) to every
//!   receiver and sends the file as messages of `chunk` bytes, each read
//!   into its own `Bytes` that every peer's connection shares (§14.4); it
//!   closes the group (every peer acknowledged all and the FIN) and prints
//!   the group's figures. The receivers are N endpoints of one process,
//!   each accepting one connection and reading stream 0 to its end.
//! - TCP: N sender threads, each the file-copy anchor's
//!   [`crate::tcp::send`] (its own 1 MiB buffer, the file re-read from the
//!   page cache, then the receiver's "ok"); N tokio listeners that hash
//!   what arrives and answer "ok".

use std::io::Read;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::runs::write_ready;
use super::Kind;
use crate::loopback::data::Check;
use crate::wan::sys::monotonic_ns;

/// Each receiver's read buffer.
const READ_BUF: usize = 256 << 10;

/// Starts the sender's line of group figures.
pub const GROUP_PREFIX: &str = "group";

pub fn send(kind: Kind, file: &Path, peers_file: &Path, chunk: usize, limit: Duration, one_thread: bool) -> Result<()> {
    let text = std::fs::read_to_string(peers_file).with_context(|| format!("reading {}", peers_file.display()))?;
    let peers: Vec<SocketAddr> = text.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    match kind {
        Kind::Manyfold => crate::run_app(crate::runtime_for(one_thread)?, {
            let file = file.to_path_buf();
            async move {
                tokio::time::timeout(limit, send_group(&file, &peers, chunk))
                    .await
                    .unwrap_or_else(|_| bail!("the group send did not finish within {limit:?}"))
            }
        }),
        Kind::Tcp => {
            // Threads cannot be cancelled: each write blocks at most as long
            // as its receiver, which exits by its own limit.
            println!("start_ns={}", monotonic_ns());
            let threads: Vec<_> = peers
                .iter()
                .map(|&to| {
                    let file = file.to_path_buf();
                    std::thread::spawn(move || crate::tcp::send(&file, to))
                })
                .collect();
            for (t, to) in threads.into_iter().zip(&peers) {
                t.join().map_err(|_| anyhow::anyhow!("sender thread to {to} panicked"))??;
            }
            Ok(())
        }
    }
}

async fn send_group(file: &Path, peers: &[SocketAddr], chunk: usize) -> Result<()> {
    let mut f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    let size = f.metadata()?.len();
    let ep = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, manyfold::Config::default()).await?;
    println!("start_ns={}", monotonic_ns());
    let (group, unreachable) = ep.group(peers, manyfold::GroupConfig::default()).await?;
    if !unreachable.is_empty() {
        bail!("{} of {} receivers unreachable: {unreachable:?}", unreachable.len(), peers.len());
    }
    let mut outstanding_peak = 0;
    // Each message in a buffer used again once every peer acknowledged it.
    let mut pool = manyfold::BufferPool::new(chunk, crate::loopback::data::POOL_CHUNKS);
    let mut left = size;
    while left > 0 {
        // Read from the page cache inside the task: at most `chunk` bytes
        // at a time, a fraction of a millisecond.
        let mut buf = pool.take(left.min(chunk as u64) as usize);
        f.read_exact(&mut buf).with_context(|| format!("reading {}", file.display()))?;
        left -= buf.len() as u64;
        group.send(pool.keep(buf)).await?;
        // The shared buffer's use after each message: what the sender's
        // memory holds of the file (spec §14.4).
        outstanding_peak = outstanding_peak.max(group.stats().outstanding_bytes);
    }
    group.close().await.context("closing the group")?;
    let closed = monotonic_ns();
    let peers_now = group.peers();
    let short: Vec<_> = peers_now.iter().filter(|(_, p)| p.acked_bytes != size).map(|(_, p)| p.addr).collect();
    if !short.is_empty() {
        bail!("closed, but {} peer(s) acknowledged less than {size} bytes: {short:?}", short.len());
    }
    let conns: Vec<_> = peers_now.iter().filter_map(|(_, p)| p.conn).collect();
    let srtt_ms: Vec<f64> = conns.iter().map(|c| c.srtt.as_secs_f64() * 1e3).collect();
    let held = |f: &dyn Fn(&manyfold::SendLimits) -> Duration| -> f64 {
        conns.iter().map(|c| f(&c.limited).as_secs_f64() * 1e3).sum()
    };
    println!(
        "{GROUP_PREFIX} closed_ns={closed} peers={} outstanding_peak_mib={:.1} retransmissions={} tail_loss_probes={} probe_resends={} late_probes={} lost_packets={} spurious_losses={} rto_expiries={} spurious_rtos={} srtt_ms_max={:.3} held_app_ms={:.0} held_window_ms={:.0} held_cwnd_ms={:.0} held_pacing_ms={:.0}",
        peers_now.len(),
        outstanding_peak as f64 / (1 << 20) as f64,
        conns.iter().map(|c| c.retransmissions).sum::<u64>(),
        conns.iter().map(|c| c.tail_loss_probes).sum::<u64>(),
        conns.iter().map(|c| c.probe_resends).sum::<u64>(),
        conns.iter().map(|c| c.late_probes).sum::<u64>(),
        conns.iter().map(|c| c.lost_packets).sum::<u64>(),
        conns.iter().map(|c| c.spurious_losses).sum::<u64>(),
        conns.iter().map(|c| c.rto_expiries).sum::<u64>(),
        conns.iter().map(|c| c.spurious_rtos).sum::<u64>(),
        srtt_ms.iter().cloned().fold(0.0, f64::max),
        // What held each peer's new data back (spec §8.2), summed over
        // peers; "application" includes the group waiting for the peer
        // with the least room (mode All).
        held(&|l| l.application),
        held(&|l| l.peer_window),
        held(&|l| l.congestion),
        held(&|l| l.pacing),
    );
    drop(group);
    let _ = tokio::time::timeout(Duration::from_secs(3), ep.shutdown_within(Duration::from_secs(2))).await;
    Ok(())
}

pub fn recv(
    kind: Kind,
    n: usize,
    bytes: u64,
    hash: &str,
    ready: &Path,
    limit: Duration,
    one_thread: bool,
) -> Result<()> {
    let rt = crate::runtime_for(kind == Kind::Manyfold && one_thread)?;
    let (hash, ready) = (hash.to_string(), ready.to_path_buf());
    crate::run_app(rt, async move {
        tokio::time::timeout(limit, recv_all(kind, n, bytes, &hash, &ready))
            .await
            .unwrap_or_else(|_| bail!("the receivers did not all finish within {limit:?}"))
    })
}

async fn recv_all(kind: Kind, n: usize, bytes: u64, hash: &str, ready: &Path) -> Result<()> {
    let any: SocketAddr = "127.0.0.1:0".parse()?;
    let mut tasks: JoinSet<Result<(usize, u64)>> = JoinSet::new();
    let mut addrs = Vec::with_capacity(n);
    match kind {
        Kind::Manyfold => {
            let mut eps = Vec::with_capacity(n);
            for _ in 0..n {
                let ep = manyfold::Endpoint::bind(any, manyfold::Config::default()).await?;
                ep.listen();
                addrs.push(ep.local_addr()?);
                eps.push(ep);
            }
            for (i, ep) in eps.into_iter().enumerate() {
                let hash = hash.to_string();
                tasks.spawn(async move {
                    let mut conn = ep.accept().await.context("endpoint closed before a connection")?;
                    let done = read_and_check(&mut conn, bytes, &hash).await?;
                    // The sender's close waits for our acknowledgements, not
                    // for this close; bound it, it decides nothing.
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), ep.shutdown_within(Duration::from_secs(1))).await;
                    Ok((i, done))
                });
            }
        }
        Kind::Tcp => {
            let mut listeners = Vec::with_capacity(n);
            for _ in 0..n {
                let l = tokio::net::TcpListener::bind(any).await?;
                addrs.push(l.local_addr()?);
                listeners.push(l);
            }
            for (i, l) in listeners.into_iter().enumerate() {
                let hash = hash.to_string();
                tasks.spawn(async move {
                    let (mut s, _) = l.accept().await?;
                    let done = read_and_check(&mut s, bytes, &hash).await?;
                    s.write_all(b"ok").await?;
                    Ok((i, done))
                });
            }
        }
    }
    let list: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    write_ready(ready, &list.join("\n"))?;
    // Every receiver runs to its end, a failed one too: a process that
    // left early would leave the sender waiting for the others' acks.
    let mut done = Vec::with_capacity(n);
    let mut failed = None;
    while let Some(r) = tasks.join_next().await {
        match r.context("a receiver task panicked").and_then(|r| r) {
            Ok(d) => done.push(d),
            Err(e) => failed = failed.or(Some(e)),
        }
    }
    if let Some(e) = failed {
        return Err(e.context(format!("{} of {n} receivers failed", n - done.len())));
    }
    done.sort();
    for (i, ns) in &done {
        println!("receiver={i} done_ns={ns}");
    }
    println!("last_ns={}", done.iter().map(|d| d.1).max().unwrap_or(0));
    Ok(())
}

/// Reads `from` to its end, checking length and hash as it goes; returns
/// CLOCK_MONOTONIC at the moment the copy was verified.
async fn read_and_check(from: &mut (impl AsyncRead + Unpin), bytes: u64, hash: &str) -> Result<u64> {
    let mut check = Check::default();
    let mut buf = vec![0u8; READ_BUF];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        check.update(&buf[..n]);
    }
    check.finish(bytes, hash)?;
    Ok(monotonic_ns())
}

#[cfg(test)]
mod tests {
    use super::super::runs::wait_for_file;
    use super::super::write_sample;
    use super::*;
    use crate::loopback::data::{Pattern, MISMATCH};

    const LEN: u64 = 3_000_000;

    /// Receivers in one thread, the sender in this one, as the scenario
    /// runs them in two processes; `hash` is what the receivers expect.
    fn transfer(kind: Kind, hash: Option<&str>) -> (Result<()>, Result<()>) {
        let dir = tempfile::tempdir().unwrap();
        let (file, ready) = (dir.path().join("sample"), dir.path().join("peers"));
        let real = write_sample(&file, &Pattern::new(5, LEN)).unwrap();
        let expect = hash.unwrap_or(&real).to_string();
        let r = ready.clone();
        let recv = std::thread::spawn(move || recv(kind, 3, LEN, &expect, &r, Duration::from_secs(60), false));
        wait_for_file(&ready, Duration::from_secs(10)).unwrap();
        let sent = send(kind, &file, &ready, 64 << 10, Duration::from_secs(60), false);
        (sent, recv.join().unwrap())
    }

    #[test]
    fn a_group_gives_every_receiver_the_whole_file() {
        let (sent, got) = transfer(Kind::Manyfold, None);
        sent.unwrap();
        got.unwrap();
    }

    #[test]
    fn tcp_connections_give_every_receiver_the_whole_file() {
        let (sent, got) = transfer(Kind::Tcp, None);
        sent.unwrap();
        got.unwrap();
    }

    #[test]
    fn receivers_fail_on_wrong_bytes() {
        for kind in [Kind::Manyfold, Kind::Tcp] {
            let (_, got) = transfer(kind, Some("00"));
            assert!(format!("{:#}", got.unwrap_err()).contains(MISMATCH), "{kind:?}");
        }
    }
}
