//! manyfold-bench: the lab (shared/BENCH.md). Each scenario runs manyfold
//! and its anchors side by side in one run, alternating A B A B, verifies
//! every transfer by hash, and prints a Markdown table with the command,
//! date, machine and medians with their spread.
//!
//! Shared by every scenario: [`stats`] (the one rule for each statistic),
//! [`report`] (header, `--json`/`--plot`, publication), [`child`]
//! (processes and their cost) and [`tcp`] (the file-copy TCP anchor);
//! one module per scenario besides.

mod child;
mod failures;
mod fairness;
mod fanout;
mod handshake;
mod loopback;
mod losstable;
mod mcast;
mod messages;
mod rate;
mod report;
mod sessions;
mod soak;
mod stats;
mod tcp;
mod wan;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "manyfold-bench", about = "manyfold's benchmark lab")]
struct Cli {
    #[command(subcommand)]
    command: Scenario,
}

#[derive(Subcommand, Debug)]
enum Scenario {
    /// One file over 127.0.0.1: `manyfold send` to `manyfold recv` against a
    /// plain kernel-TCP copy (std sockets) of the same file, both writing to
    /// disk and checking BLAKE3.
    LoopbackFile(loopback::file::FileArgs),
    /// One connection moves N bytes over 127.0.0.1, memory to memory:
    /// manyfold (each congestion controller), kernel TCP cubic and bbr,
    /// quinn, and a raw UDP GSO/GRO blast (the ceiling); `--sweep` and
    /// `--windows` run paper 00's size sweep and window comparison.
    Loopback(loopback::LoopbackArgs),
    #[command(flatten)]
    LoopbackChild(loopback::Child),
    /// Bulk transfers over an emulated WAN (two namespaces joined by a
    /// userspace link emulator): manyfold beside kernel TCP cubic and bbr,
    /// quinn and KCP (kcptun) over a grid of rate × RTT × loss. Needs root.
    Wan(wan::Args),
    /// Two flows share one emulated 100 Mbit/s, 50 ms bottleneck: manyfold
    /// against kernel TCP cubic, and against itself; each one's share and
    /// Jain's index. Needs root.
    Fairness(fairness::Args),
    /// Paper 04's experiment (Fig. 22): 100 MB over 127.0.0.1 with the
    /// window fixed to 4–64 packets × 0–30% loss each way, manyfold's
    /// goodput beside the paper's figures; plus the default window.
    LossTable(losstable::Args),
    /// 1 KB messages on 4 streams across the emulated link at KCP's test
    /// conditions (RTT 60–125 ms, 10% loss each way): each message's
    /// one-way latency, p50/p99/max, for manyfold (4 streams, and all on
    /// one stream), kernel TCP (one connection) and KCP (kcptun). Needs root.
    Messages(messages::Args),
    /// One file to N = 1, 4, 16, 64 receivers over 127.0.0.1: one manyfold
    /// group beside N kernel TCP connections; time until all have it,
    /// sender CPU and peak RSS.
    Fanout(fanout::Args),
    /// Group connect time for N = 3, 10, 100 peers across the emulated
    /// link (50 ms RTT; 250 ms RTT with 0.7% loss) beside N parallel
    /// kernel TCP connects (paper 01, Tables II–III). Needs root.
    Handshake(handshake::Args),
    /// Small messages on one connection over 127.0.0.1 (issue 21): per
    /// size (32 B to 16 KiB) the highest sustained messages/s, then the
    /// one-way latency p50/p99/p99.9 at 10%, 50% and 90% of it, every
    /// message checked; manyfold (one stream, 8 streams, unordered,
    /// encrypted) beside kernel TCP and Aeron's own samples.
    Rate(rate::Args),
    /// Many short sessions (paper 02): N = 1,000–50,000 clients on
    /// 127.0.0.1, each one request and one reply over its own connection,
    /// beside kernel TCP (connect, request, reply, close); the request-size
    /// and retransmission-timeout sweeps; one listener holding 100,000 idle
    /// sessions (memory per session).
    Sessions(sessions::Args),
    /// One file by IP multicast to N = 1, 8, 32 receivers in namespaces
    /// joined by a bridge (some behind a rate limit, some lossy, or two
    /// networks joined by a multicast router): `manyfold mcast` beside
    /// uftp and udpcast; time until all have it, bytes sent per byte,
    /// feedback per window. Needs root.
    Mcast(mcast::Options),
    /// A long run with churn on 127.0.0.1 under 5% loss each way (issue
    /// 10): clients connecting, echoing and closing against one server, and
    /// a group whose receivers join and leave, every byte verified; the
    /// resident set sampled throughout, its second-half slope must be flat.
    /// Exits non-zero on any failure or on memory growth.
    Soak(soak::Args),
    /// How long each failure takes to be known on the other side (issue
    /// 19): a connect to a closed port, a killed receiver, an abort, a
    /// process exiting at 30% loss, a hung receiver (`--stall`).
    Failures(failures::Args),
    /// (internal) TCP receiver of the file-copy anchor.
    #[command(hide = true)]
    TcpRecv { listen: SocketAddr, out: PathBuf, hash: String },
    /// (internal) TCP sender of the file-copy anchor.
    #[command(hide = true)]
    TcpSend { file: PathBuf, to: SocketAddr },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Scenario::LoopbackFile(args) => loopback::file::run(&args),
        Scenario::Loopback(args) => loopback::run(&args),
        Scenario::LoopbackChild(child) => child.run(),
        Scenario::Wan(args) => wan::run(args),
        Scenario::Fairness(args) => fairness::run(args),
        Scenario::LossTable(args) => losstable::run(&args),
        Scenario::Messages(args) => messages::run(args),
        Scenario::Fanout(args) => fanout::run(args),
        Scenario::Handshake(args) => handshake::run(args),
        Scenario::Rate(args) => rate::run(args),
        Scenario::Sessions(args) => sessions::run(args),
        Scenario::Mcast(opts) => mcast::run(opts),
        Scenario::Soak(args) => soak::run(args),
        Scenario::Failures(args) => failures::run(args),
        Scenario::TcpRecv { listen, out, hash } => tcp::recv(listen, &out, &hash),
        Scenario::TcpSend { file, to } => tcp::send(&file, to),
    }
}

/// A binary built beside this one (`target/<profile>/NAME`).
pub(crate) fn sibling(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe()?;
    let dir = me.parent().context("bench binary has no directory")?;
    for d in [dir, dir.parent().unwrap_or(dir)] {
        let p = d.join(name);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!("cannot find the `{name}` binary next to {}; build it (cargo build --release -p manyfold-cli) or pass --manyfold", me.display())
}

/// A scenario's command line: what to measure, or one of the processes the
/// scenario runs this binary as (hidden subcommands).
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ScenarioArgs<I: clap::Subcommand, O: clap::Args> {
    #[command(subcommand)]
    internal: Option<I>,
    #[command(flatten)]
    opts: O,
}

/// The trimmed standard output of a command (the date, the kernel release
/// for a report's header); empty if it cannot run.
pub(crate) fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The tokio runtime the lab's manyfold and quinn ends run on: multi-thread,
/// as the CLI's.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

/// The multi-thread runtime, or with `one_thread` a runtime on the
/// calling thread alone: the connection's I/O driver and the task reading
/// or writing its stream then wake each other without a cross-thread
/// hand-off (quinn's own bulk benchmark runs so).
pub(crate) fn runtime_for(one_thread: bool) -> Result<tokio::runtime::Runtime> {
    if one_thread {
        return Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?);
    }
    runtime()
}

/// Runs a lab end's future `app` on `rt` as a task on the runtime's
/// workers, not on the calling thread. A task woken by the running one
/// runs next on the same worker, so the wake-ups between `app` and the
/// connections' driver tasks stay on one thread, where from `block_on`'s
/// thread each crossed threads (RESULTS §41: +13–15% on loopback with
/// manyfold's default controller). These ends do little work of their own
/// per byte; the `manyfold` command line, which reads and hashes files,
/// runs its commands in `block_on` for the overlap (same section).
pub(crate) fn run_app<T: Send + 'static>(
    rt: tokio::runtime::Runtime,
    app: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let task = rt.spawn(app);
    match rt.block_on(task) {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(e.into()),
    }
}

/// Worker threads of the multi-thread runtime on this machine (one per core).
pub(crate) fn runtime_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A free UDP+TCP port on 127.0.0.1 (bind, read, release). The port the
/// kernel gives for UDP may still be held for TCP (a connection's
/// ephemeral port, after a run of many short TCP sessions): such a port
/// is skipped, so that the TCP rows' listeners can bind it.
pub(crate) fn free_addr() -> Result<SocketAddr> {
    for _ in 0..100 {
        let s = UdpSocket::bind("127.0.0.1:0")?;
        let addr = s.local_addr()?;
        if std::net::TcpListener::bind(addr).is_ok() {
            return Ok(addr);
        }
    }
    bail!("no port on 127.0.0.1 is free for both UDP and TCP (100 tries)")
}

/// Runs `f` on a [`free_addr`], and again on a new one (up to 3 tries in
/// all) when it failed because a process bound the port between
/// `free_addr` releasing it and `f`'s receiver binding it: tests run
/// in parallel, and another test's socket may take that ephemeral port.
pub(crate) fn on_free_addr<T>(mut f: impl FnMut(SocketAddr) -> Result<T>) -> Result<T> {
    let mut tries = 0;
    loop {
        let addr = free_addr()?;
        tries += 1;
        match f(addr) {
            Err(e) if tries < 3 && format!("{e:#}").contains("Address already in use") => {
                eprintln!("port {addr} was taken meanwhile by another process; trying another port");
            }
            done => return done,
        }
    }
}

/// The BLAKE3 hash of a file, streamed (a lab process stays small).
pub(crate) fn hash_file(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(f)?;
    Ok(h.finalize().to_hex().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_taken_before_the_receiver_binds_it_is_retried_on_another_port() {
        let mut seen = Vec::new();
        let got = on_free_addr(|addr| {
            seen.push(addr);
            if seen.len() < 3 {
                bail!("receiver said \"cannot bind UDP socket to {addr}: Address already in use (os error 98)\"");
            }
            Ok(addr)
        });
        assert_eq!(got.unwrap(), seen[2]);
        assert_eq!(seen.len(), 3);
    }

    #[test]
    fn other_failures_and_a_third_clash_are_returned_at_once() {
        let mut calls = 0;
        let e = on_free_addr(|_| -> Result<()> {
            calls += 1;
            bail!("sender said \"connection refused\"")
        });
        assert!(e.is_err());
        assert_eq!(calls, 1);
        calls = 0;
        let e = on_free_addr(|_| -> Result<()> {
            calls += 1;
            bail!("Address already in use")
        });
        assert!(e.unwrap_err().to_string().contains("Address already in use"));
        assert_eq!(calls, 3);
    }
}
