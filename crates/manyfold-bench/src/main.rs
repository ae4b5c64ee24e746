//! manyfold-bench: the lab (shared/BENCH.md). Each scenario runs manyfold
//! and its anchors side by side in one run, alternating A B A B, verifies
//! every transfer by hash, and prints a Markdown table with the command,
//! date, machine and medians with their spread.

mod child;
mod failures;
mod fairness;
mod fanout;
mod handshake;
mod loopback;
mod losstable;
mod mcast;
mod messages;
mod sessions;
mod soak;
mod tcp;
mod wan;

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

use loopback::Sample;

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
    LoopbackFile {
        /// File size, e.g. 1GiB, 100MB, 4096.
        #[arg(long, default_value = "1GiB")]
        size: String,
        /// Repetitions of each row (medians are reported).
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Emulated loss in percent for the manyfold rows (0 = none).
        #[arg(long, default_value_t = 0.0)]
        loss: f64,
        /// The manyfold binary (default: next to this one).
        #[arg(long)]
        manyfold: Option<PathBuf>,
        /// Per-transfer time limit in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Also write every sample as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also draw PNG charts into this directory (created if missing):
        /// loopback-file-goodput.png and loopback-file-cpu.png.
        #[arg(long, value_name = "DIR")]
        plot: Option<PathBuf>,
    },
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
        Scenario::LoopbackFile { size, reps, loss, manyfold, timeout, json, plot } => {
            let bin = match manyfold {
                Some(p) => p,
                None => sibling("manyfold")?,
            };
            let out = Outputs { json, plot };
            loopback_file(&bin, &size, reps, loss, Duration::from_secs(timeout), &out)
        }
        Scenario::Loopback(args) => loopback::run(&args),
        Scenario::LoopbackChild(child) => child.run(),
        Scenario::Wan(args) => wan::run(args),
        Scenario::Fairness(args) => fairness::run(args),
        Scenario::LossTable(args) => losstable::run(&args),
        Scenario::Messages(args) => messages::run(args),
        Scenario::Fanout(args) => fanout::run(args),
        Scenario::Handshake(args) => handshake::run(args),
        Scenario::Sessions(args) => sessions::run(args),
        Scenario::Mcast(opts) => mcast::run(opts),
        Scenario::Soak(args) => soak::run(args),
        Scenario::Failures(args) => failures::run(args),
        Scenario::TcpRecv { listen, out, hash } => tcp::recv(listen, &out, &hash),
        Scenario::TcpSend { file, to } => tcp::send(&file, to),
    }
}

/// A binary built beside this one (target/<profile>/NAME).
fn sibling(name: &str) -> Result<PathBuf> {
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
/// as the CLI runs the library.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
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

/// Waits until something has bound UDP `addr` (the receiver is up).
fn wait_udp_bound(addr: SocketAddr) -> Result<()> {
    for _ in 0..500 {
        if UdpSocket::bind(addr).is_err() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("receiver never bound {addr}")
}

/// Where `loopback-file` writes its samples and charts, if asked.
#[derive(Debug)]
struct Outputs {
    json: Option<PathBuf>,
    plot: Option<PathBuf>,
}

fn loopback_file(bin: &Path, size: &str, reps: usize, loss: f64, limit: Duration, out: &Outputs) -> Result<()> {
    let work = tempfile::Builder::new().prefix("manyfold-bench-").tempdir()?;
    let src = work.path().join("sample.bin");
    let st = Command::new(bin).args(["samplegen", size]).arg(&src).args(["--seed", "1"]).status()?;
    if !st.success() {
        bail!("samplegen failed");
    }
    let bytes = std::fs::metadata(&src)?.len();
    // Streamed, so that this process stays small: a forked child's peak
    // RSS counts the parent's pages from before its exec.
    let hash = hash_file(&src)?;
    let me = std::env::current_exe()?;
    let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap_or_default();
    let tcp_row = format!("kernel TCP ({}, the system default)", cc.trim());
    let mut rows: Vec<(&str, Vec<Sample>)> = vec![("manyfold (NewReno)", vec![]), (tcp_row.as_str(), vec![])];
    let mut log = Vec::new();
    for rep in 0..reps {
        for (i, row) in rows.iter_mut().enumerate() {
            let out_dir = work.path().join(format!("out-{rep}-{i}"));
            std::fs::create_dir(&out_dir)?;
            let addr = free_addr()?;
            let s = if i == 0 {
                let mut r = Command::new(bin);
                r.arg("recv").arg("--listen").arg(addr.to_string()).arg("--dir").arg(&out_dir).arg("--once");
                r.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
                let mut sd = Command::new(bin);
                sd.arg("send").arg(&src).arg("--to").arg(addr.to_string());
                if loss > 0.0 {
                    // The sender's process drops `loss` of what it sends
                    // (data) and of what it receives (acks): one chance of
                    // loss per datagram and direction. Giving it to the
                    // receiver as well would drop each datagram twice over.
                    sd.arg("--loss").arg(loss.to_string());
                }
                sd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
                let recv = child::spawn(r, "manyfold recv")?;
                wait_udp_bound(addr)?;
                run_pair(recv, sd, "manyfold send", bytes, limit)?
            } else {
                let mut r = Command::new(&me);
                r.arg("tcp-recv").arg(addr.to_string()).arg(out_dir.join("sample.bin")).arg(&hash);
                let mut sd = Command::new(&me);
                sd.arg("tcp-send").arg(&src).arg(addr.to_string());
                let recv = child::spawn(r, "tcp recv")?;
                run_pair(recv, sd, "tcp send", bytes, limit)?
            };
            let stored = out_dir.join("sample.bin");
            let got = hash_file(&stored)?;
            if got != hash {
                bail!("{}: stored file hash differs", row.0);
            }
            std::fs::remove_dir_all(&out_dir)?;
            row.1.push(s);
            eprintln!("rep {} {}: {:.2} s", rep + 1, row.0, s.wall);
            log.push(loopback::report::json_sample(row.0, bytes, rep, &s));
        }
    }
    print_table(size, bytes, reps, loss, &rows);
    if let Some(path) = &out.json {
        let body = format!(
            "{{\"scenario\":\"loopback-file\",\"size\":{},\"bytes\":{bytes},\"loss_percent\":{loss},\"sample_seed\":1,\"samples\":[\n{}\n]}}\n",
            loopback::report::json_str(size),
            log.join(",\n")
        );
        loopback::report::write_file(path, &body)?;
    }
    if let Some(dir) = &out.plot {
        let rows: Vec<(String, Vec<Sample>)> = rows.iter().map(|(n, s)| (n.to_string(), s.clone())).collect();
        let what = format!("loopback-file, {size} over 127.0.0.1, disk to disk");
        let files = loopback::report::bulk_charts(dir, "loopback-file", &what, bytes, &rows)?;
        loopback::report::note_charts(&files);
    }
    Ok(())
}

fn hash_file(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(f)?;
    Ok(h.finalize().to_hex().to_string())
}

/// Runs one transfer of `size` bytes: `recv` is up, `sender` starts now.
fn run_pair(recv: child::Running, sender: Command, what: &str, size: u64, limit: Duration) -> Result<Sample> {
    let send = match child::spawn(sender, what) {
        Ok(s) => s,
        Err(e) => {
            recv.kill();
            return Err(e);
        }
    };
    let su = send.wait(limit)?;
    let ru = recv.wait(Duration::from_secs(30))?;
    Ok(Sample {
        wall: su.wall.as_secs_f64(),
        send_cpu: su.cpu.as_secs_f64(),
        recv_cpu: ru.cpu.as_secs_f64(),
        send_rss_mib: su.max_rss_kib as f64 / 1024.0,
        recv_rss_mib: ru.max_rss_kib as f64 / 1024.0,
        delivered: size,
        mf: None,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    max - min
}

fn print_table(size: &str, bytes: u64, reps: usize, loss: f64, rows: &[(&str, Vec<Sample>)]) {
    let gb = bytes as f64 / 1e9;
    let uname = Command::new("uname").arg("-r").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let date = Command::new("date").arg("-u").arg("+%Y-%m-%d %H:%M UTC").output();
    println!("### loopback-file: {size} ({bytes} bytes) over 127.0.0.1");
    println!();
    println!(
        "`manyfold-bench loopback-file --size {size} --reps {reps}{}` · {} · nproc {} · kernel {} · sample seed 1",
        if loss > 0.0 { format!(" --loss {loss}") } else { String::new() },
        date.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        uname.unwrap_or_default(),
    );
    println!();
    println!("| row | goodput MB/s (median, spread) | time s | sender CPU s/GB | receiver CPU s/GB | sender peak RSS MiB | receiver peak RSS MiB | ratio to TCP |");
    println!("|---|---|---|---|---|---|---|---|");
    let tcp_wall = median(rows[1].1.iter().map(|s| s.wall).collect());
    for (name, samples) in rows {
        let walls: Vec<f64> = samples.iter().map(|s| s.wall).collect();
        let rates: Vec<f64> = walls.iter().map(|w| bytes as f64 / 1e6 / w).collect();
        let wall = median(walls.clone());
        println!(
            "| {name} | {:.0} (±{:.0}) | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} |",
            median(rates.clone()),
            spread(&rates) / 2.0,
            wall,
            median(samples.iter().map(|s| s.send_cpu / gb).collect()),
            median(samples.iter().map(|s| s.recv_cpu / gb).collect()),
            median(samples.iter().map(|s| s.send_rss_mib).collect()),
            median(samples.iter().map(|s| s.recv_rss_mib).collect()),
            tcp_wall / wall,
        );
    }
    println!();
    println!("Each transfer is timed from the sender's start to its exit (connect, transfer, receiver's hash confirmation); both sides write to disk and check BLAKE3. Rows alternate A B A B.");
    if loss > 0.0 {
        println!("Loss: `manyfold send --loss {loss}` drops {loss}% of the datagrams the sender sends and of those it receives (the driver's fault injection); the receiver runs without. The TCP row is not impaired.");
    }
}
