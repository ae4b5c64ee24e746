//! The soak's point-to-point churn: one echo server and a pool of clients.
//! A client connects, sends one frame of random size (0 to
//! `--max-payload` bytes), finishes its side (FIN, acknowledged), reads the
//! echo to its end and checks it; the server checks the frame as it
//! arrives, sends it back and closes. Every client replaces its endpoint
//! every `--conns-per-endpoint` connections. Each exchange has
//! [`OP_LIMIT`]; the server's tasks are joined before it returns.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;

use super::frame::{frame, FrameCheck, HEADER};
use super::{bind, Plan, Tally, OP_LIMIT};
use crate::loopback::mf::check_protection;

/// How long the server waits for the acknowledgement of its FIN: the
/// client's verdict does not depend on it (it has read the echo to its end).
const CLOSE_LINGER: Duration = Duration::from_secs(10);

/// Read buffer of either side.
const READ: usize = 64 << 10;

/// Accepts until the endpoint is shut down, one task per connection, then
/// joins them all.
pub async fn serve(ep: manyfold::Endpoint, plan: Plan, tally: Arc<Tally>) {
    let mut tasks = JoinSet::new();
    while let Some(conn) = ep.accept().await {
        Tally::add(&tally.conns_accepted, 1);
        while let Some(done) = tasks.try_join_next() {
            if let Err(e) = done {
                tally.fail(format!("an echo task panicked: {e}"));
            }
        }
        let (plan, tally) = (plan.clone(), tally.clone());
        tasks.spawn(async move {
            let peer = conn.peer_addr();
            match tokio::time::timeout(OP_LIMIT, echo(conn, &plan, &tally)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tally.fail(format!("echo server, connection from {peer}: {e:#}")),
                Err(_) => tally.fail(format!("echo server, connection from {peer}: over {} s", OP_LIMIT.as_secs())),
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            tally.fail(format!("an echo task panicked: {e}"));
        }
    }
}

async fn echo(mut conn: manyfold::Connection, plan: &Plan, tally: &Tally) -> Result<()> {
    check_protection(&conn, plan.encrypted)?;
    let mut check = FrameCheck::new(None, plan.max_payload);
    let mut buf = vec![0u8; READ];
    loop {
        let n = conn.read(&mut buf).await.context("reading the request")?;
        if n == 0 {
            break;
        }
        check.feed(&buf[..n]).map_err(anyhow::Error::msg)?;
        Tally::add(&tally.pair_bytes_verified, n as u64);
    }
    let f = match (check.frames(), check.last()) {
        (1, Some(f)) if check.at_boundary() => f,
        (n, _) => bail!("the request ended after {n} whole frames (expected one, then the end)"),
    };
    conn.write_all(&frame(f.id, f.len)).await.context("sending the echo")?;
    let why = match tokio::time::timeout(CLOSE_LINGER, conn.close()).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("not within {} s", CLOSE_LINGER.as_secs()),
    };
    Tally::add(&tally.server_close_unconfirmed, 1);
    eprintln!(
        "note: echo server, connection from {}: close unconfirmed ({why}); {}",
        conn.peer_addr(),
        recovery(&conn)
    );
    Ok(())
}

/// What a failed connection's loss recovery had come to, for the log.
fn recovery(conn: &manyfold::Connection) -> String {
    let s = conn.stats();
    format!(
        "srtt {:?}, rttvar {:?}, min_rtt {:?}, {} packets sent, {} received, {} retransmissions, {} RTO expiries, \
         {} tail-loss probes, {} unacknowledged bytes",
        s.srtt,
        s.rttvar,
        s.min_rtt,
        s.packets_sent,
        s.packets_received,
        s.retransmissions,
        s.rto_expiries,
        s.tail_loss_probes,
        s.unacked_bytes
    )
}

/// Client `i`: connections one after another until the deadline.
pub async fn client(i: usize, server: SocketAddr, plan: Plan, tally: Arc<Tally>) {
    let mut rng = ChaCha8Rng::seed_from_u64(plan.seed ^ (0xC11E_0000 + i as u64));
    let mut n: u64 = 0;
    let mut endpoints: u64 = 0;
    while plan.running() {
        // Fault seeds: distinct per endpoint of the run.
        let fault_seed = plan.seed.wrapping_add(((i as u64 + 1) << 32) + endpoints);
        endpoints += 1;
        let ep = match bind(plan.config(true, fault_seed)).await {
            Ok(ep) => ep,
            Err(e) => {
                tally.fail(format!("client {i}: binding an endpoint: {e:#}"));
                return;
            }
        };
        Tally::add(&tally.client_endpoints, 1);
        for _ in 0..plan.conns_per_endpoint {
            if !plan.running() {
                break;
            }
            // Ids: unique in the run (client in the top bits).
            let id = ((i as u64) << 40) | n;
            n += 1;
            let len = rng.gen_range(0..=plan.max_payload);
            Tally::add(&tally.conns_opened, 1);
            match tokio::time::timeout(OP_LIMIT, exchange(&ep, server, id, len, &plan, &tally)).await {
                Ok(Ok(())) => Tally::add(&tally.conns_completed, 1),
                Ok(Err(e)) => tally.fail(format!("client {i}, connection {n} ({len} B): {e:#}")),
                Err(_) => tally.fail(format!("client {i}, connection {n} ({len} B): over {} s", OP_LIMIT.as_secs())),
            }
            // A short pause: churn, not a flood.
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..10))).await;
        }
        // `shutdown` lets TIME-WAIT linger four RTOs (spec §4.8) before the
        // endpoint stops, so that a server whose last ack was lost gets it
        // repeated; one that still misses it learns from ICMP that the
        // socket is gone and ends gracefully (spec §6.7).
        if tokio::time::timeout(Duration::from_secs(10), ep.shutdown_within(Duration::from_secs(2))).await.is_err() {
            tally.fail(format!("client {i}: its endpoint did not shut down within 10 s"));
        }
    }
}

async fn exchange(
    ep: &manyfold::Endpoint,
    server: SocketAddr,
    id: u64,
    len: u32,
    plan: &Plan,
    tally: &Tally,
) -> Result<()> {
    let mut conn = ep.connect(server).await.context("connecting")?;
    check_protection(&conn, plan.encrypted)?;
    conn.write_all(&frame(id, len)).await.context("sending")?;
    conn.close().await.context("finishing the request")?;
    let mut check = FrameCheck::new(Some(id), plan.max_payload);
    let mut buf = vec![0u8; READ];
    loop {
        let n = match conn.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => bail!("reading the echo: {e} ({})", recovery(&conn)),
        };
        if n == 0 {
            break;
        }
        check.feed(&buf[..n]).map_err(|e| anyhow::anyhow!("the echo: {e}"))?;
        Tally::add(&tally.pair_bytes_verified, n as u64);
    }
    match check.last() {
        Some(f) if check.frames() == 1 && check.at_boundary() && f.len == len => Ok(()),
        _ => bail!(
            "the echo ended after {} whole frames and {} bytes of {} expected",
            check.frames(),
            if check.at_boundary() { "no" } else { "some" },
            HEADER + len as usize
        ),
    }
}
