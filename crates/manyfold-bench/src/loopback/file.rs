//! `manyfold-bench loopback-file`: one file over 127.0.0.1, disk to disk:
//! `manyfold send` to `manyfold recv` (the CLI) against a plain kernel-TCP
//! copy of the same file ([`crate::tcp`]), both storing it and checking
//! BLAKE3. Each transfer is one [`Transfer`] of the loopback machinery
//! (processes, `wait4` costs, the children's errors); the table is
//! loopback's figures in this scenario's own columns.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};

use super::report::{bulk_charts, json_sample};
use super::rows::{Sample, Transfer};
use crate::report::{json_str, machine, Outputs};
use crate::stats::{median, min_max};

#[derive(clap::Args, Debug)]
#[command(mut_arg("json", |a| a.help("Also write every sample as JSON to this file")))]
#[command(mut_arg("plot", |a| a.help(
    "Also draw PNG charts into this directory (created if missing): loopback-file-goodput.png and loopback-file-cpu.png"
)))]
pub struct FileArgs {
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
    #[command(flatten)]
    out: Outputs,
}

/// The two rows: manyfold's CLI, then the kernel TCP copy.
const MANYFOLD: usize = 0;

pub fn run(args: &FileArgs) -> Result<()> {
    let bin = match &args.manyfold {
        Some(p) => p.clone(),
        None => crate::sibling("manyfold")?,
    };
    let limit = Duration::from_secs(args.timeout);
    let work = tempfile::Builder::new().prefix("manyfold-bench-").tempdir()?;
    let src = work.path().join("sample.bin");
    let st = Command::new(&bin).args(["samplegen", &args.size]).arg(&src).args(["--seed", "1"]).status()?;
    if !st.success() {
        bail!("samplegen failed");
    }
    let bytes = std::fs::metadata(&src)?.len();
    // Streamed, so that this process stays small: a forked child's peak
    // RSS counts the parent's pages from before its exec.
    let hash = crate::hash_file(&src)?;
    let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap_or_default();
    let tcp_row = format!("kernel TCP ({}, the system default)", cc.trim());
    // The command line runs the library's default controller.
    let mf_row = format!("manyfold ({}, the default)", manyfold::CongestionAlgorithm::default().name());
    let mut rows: Vec<(String, Vec<Sample>)> = vec![(mf_row, vec![]), (tcp_row, vec![])];
    let mut log = Vec::new();
    let me = std::env::current_exe()?;
    for rep in 0..args.reps {
        for (i, (name, samples)) in rows.iter_mut().enumerate() {
            let out_dir = work.path().join(format!("out-{rep}-{i}"));
            std::fs::create_dir(&out_dir)?;
            let s = crate::on_free_addr(|addr| {
                transfer(i, addr, &bin, &me, &src, &out_dir, &hash, args.loss).run(work.path(), bytes, limit)
            })?;
            if crate::hash_file(&out_dir.join("sample.bin"))? != hash {
                bail!("{name}: stored file hash differs");
            }
            std::fs::remove_dir_all(&out_dir)?;
            samples.push(s);
            eprintln!("rep {} {name}: {:.2} s", rep + 1, s.wall);
            log.push(json_sample(name, bytes, rep, &s));
        }
    }
    print_table(args, bytes, &rows);
    args.out.write_json(|| {
        format!(
            "{{\"scenario\":\"loopback-file\",\"size\":{},\"bytes\":{bytes},\"loss_percent\":{},\"sample_seed\":1,\"samples\":[\n{}\n]}}\n",
            json_str(&args.size),
            args.loss,
            log.join(",\n")
        )
    })?;
    args.out.draw(|dir| {
        let what = format!("loopback-file, {} over 127.0.0.1, disk to disk", args.size);
        bulk_charts(dir, "loopback-file", &what, bytes, &rows)
    })
}

/// Row `row`'s receiver (storing into `out_dir`) and sender of `src`.
/// `bin` is the manyfold CLI, `me` this lab's own binary.
#[allow(clippy::too_many_arguments)]
fn transfer(
    row: usize,
    addr: SocketAddr,
    bin: &Path,
    me: &Path,
    src: &Path,
    out_dir: &Path,
    hash: &str,
    loss: f64,
) -> Transfer {
    if row == MANYFOLD {
        let mut recv = Command::new(bin);
        recv.arg("recv").arg("--listen").arg(addr.to_string()).arg("--dir").arg(out_dir).arg("--once");
        let mut send = Command::new(bin);
        send.arg("send").arg(src).arg("--to").arg(addr.to_string());
        if loss > 0.0 {
            // The sender's process drops `loss` of what it sends (data)
            // and of what it receives (acks): one chance of loss per
            // datagram and direction. Giving it to the receiver as well
            // would drop each datagram twice over.
            send.arg("--loss").arg(loss.to_string());
        }
        for c in [&mut recv, &mut send] {
            c.stdout(Stdio::null());
        }
        Transfer { recv, send, what: "manyfold".into(), ready: Some(addr) }
    } else {
        let mut recv = Command::new(me);
        recv.arg("tcp-recv").arg(addr.to_string()).arg(out_dir.join("sample.bin")).arg(hash);
        let mut send = Command::new(me);
        send.arg("tcp-send").arg(src).arg(addr.to_string());
        Transfer { recv, send, what: "tcp".into(), ready: None }
    }
}

fn print_table(args: &FileArgs, bytes: u64, rows: &[(String, Vec<Sample>)]) {
    let (size, loss) = (&args.size, args.loss);
    let gb = bytes as f64 / 1e9;
    println!("### loopback-file: {size} ({bytes} bytes) over 127.0.0.1");
    println!();
    println!(
        "`manyfold-bench loopback-file --size {size} --reps {}{}` · {} · sample seed 1",
        args.reps,
        if loss > 0.0 { format!(" --loss {loss}") } else { String::new() },
        machine(),
    );
    println!();
    println!("| row | goodput MB/s (median, spread) | time s | sender CPU s/GB | receiver CPU s/GB | sender peak RSS MiB | receiver peak RSS MiB | ratio to TCP |");
    println!("|---|---|---|---|---|---|---|---|");
    let col = |s: &[Sample], f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
    let tcp_wall = median(&col(&rows[1].1, &|s| s.wall));
    for (name, samples) in rows {
        let rates = col(samples, &|s| bytes as f64 / 1e6 / s.wall);
        let spread = min_max(&rates).map_or(f64::NAN, |(lo, hi)| hi - lo);
        let wall = median(&col(samples, &|s| s.wall));
        println!(
            "| {name} | {:.0} (±{:.0}) | {:.2} | {:.2} | {:.2} | {:.0} | {:.0} | {:.2} |",
            median(&rates),
            spread / 2.0,
            wall,
            median(&col(samples, &|s| s.send_cpu / gb)),
            median(&col(samples, &|s| s.recv_cpu / gb)),
            median(&col(samples, &|s| s.send_rss_mib)),
            median(&col(samples, &|s| s.recv_rss_mib)),
            tcp_wall / wall,
        );
    }
    println!();
    println!("Each transfer is timed from the sender's start to its exit (connect, transfer, receiver's hash confirmation); both sides write to disk and check BLAKE3. Rows alternate A B A B.");
    if loss > 0.0 {
        println!("Loss: `manyfold send --loss {loss}` drops {loss}% of the datagrams the sender sends and of those it receives (the driver's fault injection); the receiver runs without. The TCP row is not impaired.");
    }
}
