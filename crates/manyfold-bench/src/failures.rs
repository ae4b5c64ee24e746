//! Failure signals (issue 19; spec §4.7, §4.8, §6.7): how long each kind
//! of failure takes to be known on the other side, on real sockets over
//! 127.0.0.1, beside kernel TCP where TCP has the same event.
//!
//! - a connect to a port where nothing listens (async and blocking API;
//!   TCP: `connect` to a closed port);
//! - a peer whose process is killed mid-transfer (its runtime dropped: the
//!   socket closes, nothing is sent), seen by the sender;
//! - an abort with a code (an interrupted program), seen by the peer;
//! - a process that exits right after `wait_idle` at 30% loss each way:
//!   how long its peer, in LAST-ACK, still waits after the exit;
//! - (with `--stall`) a peer that falls silent with no ICMP at all: the
//!   stall timeout at its default of 15 s.
//!
//! Every figure is a wall-clock duration from the event to the other
//! side's report; the table gives median, 99th percentile and maximum.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use manyfold::{CloseReason, Config, Endpoint, ErrorCode, FaultConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Repetitions of the connect, killed-peer and abort measurements.
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// Repetitions of the lossy close (each takes a second or two).
    #[arg(long, default_value_t = 200)]
    close_runs: usize,
    /// Also measure the stall timeout (15 s per run, 3 runs).
    #[arg(long)]
    stall: bool,
}

struct Row {
    what: &'static str,
    target: &'static str,
    samples: Vec<Duration>,
    failures: usize,
}

impl Row {
    fn new(what: &'static str, target: &'static str) -> Row {
        Row { what, target, samples: Vec::new(), failures: 0 }
    }

    /// A run that began at `started`: a sample if it `ok`, else a failure.
    fn note(&mut self, started: Instant, ok: bool) {
        if ok {
            self.samples.push(started.elapsed());
        } else {
            self.failures += 1;
        }
    }
}

fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn closed_port() -> Result<SocketAddr> {
    Ok(std::net::UdpSocket::bind(localhost())?.local_addr()?)
}

pub fn run(args: Args) -> Result<()> {
    let started = chrono_like_now();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut rows = vec![
        rt.block_on(connect_refused_async(args.runs))?,
        connect_refused_blocking(args.runs)?,
        connect_refused_tcp(args.runs)?,
        rt.block_on(killed_receiver(args.runs))?,
        rt.block_on(abort_reaches_peer(args.runs))?,
        rt.block_on(lossy_close(args.close_runs))?,
    ];
    if args.stall {
        rows.push(rt.block_on(silent_peer(3))?);
    }
    println!(
        "`manyfold-bench failures --runs {} --close-runs {}{}` · {started} · nproc {}",
        args.runs,
        args.close_runs,
        if args.stall { " --stall" } else { "" },
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| what | runs | failed | median | p99 | max | target |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        let s = crate::stats::sorted(&r.samples.iter().map(Duration::as_secs_f64).collect::<Vec<f64>>());
        let at = |secs: f64| Duration::try_from_secs_f64(secs).unwrap_or_default();
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.what,
            r.samples.len() + r.failures,
            r.failures,
            fmt(at(crate::stats::median(&s))),
            fmt(at(crate::stats::percentile(&s, 99.0))),
            fmt(at(s.last().copied().unwrap_or_default())),
            r.target
        );
    }
    Ok(())
}

fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else if d < Duration::from_secs(10) {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// UTC date and time, from `date` (the lab's other scenarios print it too).
fn chrono_like_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn config() -> Config {
    let mut c = Config::default();
    c.endpoint.connection.connect_timeout = Duration::from_secs(20);
    c
}

async fn connect_refused_async(runs: usize) -> Result<Row> {
    let mut row = Row::new("connect to a closed port, async API", "≤ 50 ms");
    let client = Endpoint::bind(localhost(), config()).await?;
    for _ in 0..runs {
        let to = closed_port()?;
        let t = Instant::now();
        let refused = matches!(client.connect(to).await, Err(manyfold::ConnectError::Refused));
        row.note(t, refused);
    }
    Ok(row)
}

fn connect_refused_blocking(runs: usize) -> Result<Row> {
    let mut row = Row::new("connect to a closed port, blocking API", "≤ 50 ms");
    for _ in 0..runs {
        let to = closed_port()?;
        let t = Instant::now();
        let result = manyfold::blocking::Stream::connect_with(to, config());
        row.note(t, result.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused));
    }
    Ok(row)
}

fn connect_refused_tcp(runs: usize) -> Result<Row> {
    let mut row = Row::new("kernel TCP: connect to a closed port", "(anchor)");
    for _ in 0..runs {
        let to = std::net::TcpListener::bind(localhost())?.local_addr()?;
        let t = Instant::now();
        let result = std::net::TcpStream::connect(to);
        row.note(t, result.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused));
    }
    Ok(row)
}

/// A receiver on a runtime of its own, killed (runtime dropped, nothing
/// sent) after it has read `first` bytes.
fn doomed_receiver(first: usize) -> (std::sync::mpsc::Receiver<SocketAddr>, std::thread::JoinHandle<Result<()>>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let out = rt.block_on(async move {
            let server = Endpoint::bind(localhost(), config()).await?;
            server.listen();
            tx.send(server.local_addr()?).ok();
            let mut conn = server.accept().await.context("accept")?;
            let mut buf = vec![0u8; first];
            conn.read_exact(&mut buf).await?;
            Ok(())
        });
        rt.shutdown_background();
        out
    });
    (rx, handle)
}

async fn killed_receiver(runs: usize) -> Result<Row> {
    let mut row = Row::new("receiver killed mid-transfer: sender's error", "≤ 1 s");
    let data = vec![7u8; 1 << 20];
    for _ in 0..runs {
        let (addr, receiver) = doomed_receiver(200_000);
        let addr = tokio::task::spawn_blocking(move || addr.recv()).await??;
        let client = Endpoint::bind(localhost(), config()).await?;
        let mut conn = client.connect(addr).await?;
        conn.write_all(&data[..200_000]).await?;
        tokio::task::spawn_blocking(move || receiver.join())
            .await?
            .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
        let t = Instant::now();
        let reason = loop {
            match tokio::time::timeout(Duration::from_secs(30), conn.write_all(&data)).await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => break manyfold::close_reason(&e),
                Err(_) => break None,
            }
        };
        row.note(t, matches!(reason, Some(CloseReason::Unreachable(_))));
    }
    Ok(row)
}

async fn abort_reaches_peer(runs: usize) -> Result<Row> {
    let mut row = Row::new("peer aborts (interrupted): our read fails", "≤ 1 s (1 RTT)");
    let server = Endpoint::bind(localhost(), config()).await?;
    server.listen();
    for _ in 0..runs {
        let client = Endpoint::bind(localhost(), config()).await?;
        let _conn = client.connect(server.local_addr()?).await?;
        let mut accepted = server.accept().await.context("accept")?;
        let t = Instant::now();
        client.abort_all(ErrorCode::INTERRUPTED).await;
        let mut buf = [0u8; 16];
        match accepted.read(&mut buf).await {
            Err(e) if manyfold::close_reason(&e) == Some(CloseReason::PeerReset(Some(ErrorCode::INTERRUPTED))) => {
                row.samples.push(t.elapsed())
            }
            other => {
                eprintln!("failures: abort run: the peer saw {other:?}");
                row.failures += 1;
            }
        }
    }
    Ok(row)
}

/// The active closer exits after `wait_idle` at 30% loss each way; how
/// long the passive closer's close still takes after that exit.
async fn lossy_close(runs: usize) -> Result<Row> {
    let mut row = Row::new("30% loss each way, closer exits after wait_idle: peer still waiting", "≤ 2 s");
    let lossy = |seed| {
        let mut c = config();
        c.endpoint.connection.connect_timeout = Duration::from_secs(60);
        c.faults = FaultConfig { send_loss: Some(0.3), seed, ..FaultConfig::default() };
        c
    };
    for run in 0..runs as u64 {
        let stage = Stage::default();
        let once = tokio::time::timeout(Duration::from_secs(240), lossy_close_once(run, &lossy, stage.clone()));
        let Ok(outcome) = once.await else {
            eprintln!("failures: lossy close run {run} hung (4 min) at: {}", stage.get());
            row.failures += 1;
            continue;
        };
        match outcome {
            Ok(Some(waited)) => row.samples.push(waited),
            Ok(None) => row.failures += 1,
            // The handshake itself gave up (30% loss each way): not a close to measure.
            Err(e) => eprintln!("failures: lossy close run {run} not measured: {e:#}"),
        }
    }
    Ok(row)
}

/// One lossy close: `Some(wait after the exit)`, `None` if the passive
/// closer's close failed or took over 30 s.
async fn lossy_close_once(run: u64, lossy: &dyn Fn(u64) -> Config, stage: Stage) -> Result<Option<Duration>> {
    let server = Endpoint::bind(localhost(), lossy(1000 + run)).await?;
    server.listen();
    let addr = server.local_addr()?;
    let cfg = lossy(5000 + run);
    let at = stage.clone();
    let closer = std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let out = rt.block_on(async move {
            let client = Endpoint::bind(localhost(), cfg).await?;
            at.set("closer: connect");
            let mut conn = client.connect(addr).await?;
            at.set("closer: write_all");
            conn.write_all(&[1u8; 20_000]).await?;
            at.set("closer: close");
            conn.close().await?;
            at.set("closer: read_to_end");
            let mut rest = Vec::new();
            conn.read_to_end(&mut rest).await?;
            at.set("closer: wait_idle");
            client.wait_idle().await;
            at.set("closer: done");
            anyhow::Ok(())
        });
        rt.shutdown_background();
        out
    });
    let accepted = tokio::time::timeout(Duration::from_secs(90), server.accept()).await;
    let Ok(Some(mut accepted)) = accepted else {
        tokio::task::spawn_blocking(move || closer.join()).await?.map_err(|_| anyhow::anyhow!("closer panicked"))??;
        bail!("no connection was accepted");
    };
    stage.set("server: read_to_end");
    let mut got = Vec::new();
    accepted.read_to_end(&mut got).await?;
    stage.set("server: closing, closer not joined");
    let closing = tokio::spawn(async move {
        let closed = accepted.close().await;
        (closed, accepted.stats())
    });
    tokio::task::spawn_blocking(move || closer.join()).await?.map_err(|_| anyhow::anyhow!("closer panicked"))??;
    stage.set("server: closing after the closer's exit");
    let t = Instant::now();
    if got.len() != 20_000 {
        bail!("{} of 20,000 bytes arrived", got.len());
    }
    Ok(match tokio::time::timeout(Duration::from_secs(30), closing).await {
        Ok(Ok((Ok(()), stats))) => {
            let waited = t.elapsed();
            if waited > Duration::from_secs(1) {
                // What a slow close looked like from the waiting side.
                eprintln!(
                    "failures: lossy close run {run}: peer waited {waited:?}: srtt {:?} rttvar {:?}, \
                     {} packets sent, {} RTO expiries, {} ICMP errors",
                    stats.srtt, stats.rttvar, stats.packets_sent, stats.rto_expiries, stats.icmp_errors
                );
            }
            Some(waited)
        }
        _ => None,
    })
}

/// Where a run is, for the report of one that hangs.
#[derive(Clone, Default)]
struct Stage(std::sync::Arc<std::sync::Mutex<&'static str>>);

impl Stage {
    fn set(&self, at: &'static str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }

    fn get(&self) -> &'static str {
        let at = *self.0.lock().unwrap_or_else(|e| e.into_inner());
        if at.is_empty() {
            "set-up"
        } else {
            at
        }
    }
}

/// The receiver's process hangs (its runtime thread blocks, as under
/// SIGSTOP): its socket stays open, so no ICMP comes, and nothing answers.
/// The sender's stall timeout ends it.
async fn silent_peer(runs: usize) -> Result<Row> {
    let mut row = Row::new("receiver hangs (no answer, no ICMP): sender gives up", "≤ stall_timeout (15 s) + 1 s");
    let data = vec![4u8; 1 << 20];
    for _ in 0..runs {
        let (tx, rx) = std::sync::mpsc::channel();
        let receiver = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async move {
                let server = Endpoint::bind(localhost(), config()).await?;
                server.listen();
                tx.send(server.local_addr()?).ok();
                let mut conn = server.accept().await.context("accept")?;
                let mut buf = vec![0u8; 200_000];
                conn.read_exact(&mut buf).await?;
                // Hung: nothing runs on this thread for 20 s.
                std::thread::sleep(Duration::from_secs(20));
                anyhow::Ok(())
            })?;
            rt.shutdown_background();
            Ok(())
        });
        let addr = tokio::task::spawn_blocking(move || rx.recv()).await??;
        let client = Endpoint::bind(localhost(), config()).await?;
        let mut conn = client.connect(addr).await?;
        conn.write_all(&data[..200_000]).await?;
        // From here the receiver is hung (give it a moment to get there).
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t = Instant::now();
        let reason = loop {
            match tokio::time::timeout(Duration::from_secs(30), conn.write_all(&data)).await {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => break manyfold::close_reason(&e),
                Err(_) => break None,
            }
        };
        row.note(t, reason == Some(CloseReason::StallTimeout));
        tokio::task::spawn_blocking(move || receiver.join())
            .await?
            .map_err(|_| anyhow::anyhow!("receiver panicked"))??;
    }
    Ok(row)
}
