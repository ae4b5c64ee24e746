//! The `handshake` scenario (groups issue, spec §14.3; paper 01, Tables
//! II–III): how long `Endpoint::group` takes to establish a group of N =
//! 3, 10 and 100 peers across the `wan` scenario's emulated link, at 50 ms
//! RTT without loss and at 250 ms RTT with 0.7% loss each way, beside N
//! kernel TCP connects started all at once. Paper 01 measured its
//! asynchronous handshake to 3 peers at ≈ 50.5 ms (50 ms RTT) and ≈ 250–330
//! ms (250 ms RTT, up to 0.7% loss). Target: median ≤ 1.1 RTT at N = 100
//! without loss.
//!
//! Each (link, N) is one run in the lab's namespaces
//! ([`crate::wan::netns::Lab`]): a receiver process in namespace b hosting
//! N manyfold endpoints (listening) and N TCP listeners on 198.18.0.2, and
//! a sender process in namespace a that repeats, `--reps` times, each row
//! in turn (A B C A B C …):
//! - manyfold: a fresh endpoint, then `ep.group(peers, GroupConfig)` timed
//!   from the call to its return (Established, or the overall timeout);
//!   the group is dropped and the endpoint shut down before the next;
//! - manyfold with `response_timeout` = `--short-rtts` × RTT (lossy links
//!   only): a lost SYN or SYN-ACK is repaired after that instead of the
//!   default 1 s when no other peer has answered yet (once one has, the
//!   group asks again at twice the latest answer's time, spec §14.3);
//! - kernel TCP: N `connect`s spawned at once, timed until the last
//!   completes (the kernel retransmits a SYN after 1 s too).
//!
//! Modules: [`ends`] (the two processes), [`report`] (table, JSON, chart).

mod ends;
mod report;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};

use crate::child;
use crate::fanout::runs;
use crate::wan::link::LinkConfig;
use crate::wan::netns::{self, Lab, ADDR_B};
use report::{Report, RunResult};

pub type Args = crate::ScenarioArgs<Internal, Options>;

/// One way of connecting to the N peers.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// `Endpoint::group` with GroupConfig's defaults (response timeout 1 s).
    Manyfold,
    /// `Endpoint::group` with the response timeout shortened to a few RTTs.
    ManyfoldShort,
    /// N kernel TCP connects at once.
    Tcp,
}

/// The scenario's own processes, re-executed in the lab's namespaces.
#[derive(Subcommand, Debug)]
pub enum Internal {
    /// (internal) The sender: `--reps` connects of every row to the peers.
    #[command(hide = true)]
    Send {
        /// The first peer's address; peer i listens on its port + i.
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        peers: usize,
        #[arg(long)]
        reps: usize,
        #[arg(long, value_enum, value_delimiter = ',')]
        rows: Vec<Row>,
        /// The short row's response timeout, ms.
        #[arg(long)]
        short_ms: f64,
        /// How long to let a rep's connections close, ms.
        #[arg(long)]
        drain_ms: f64,
    },
    /// (internal) The N receivers: manyfold endpoints and TCP listeners on
    /// ports `--port` … `--port` + N − 1 of `--addr`.
    #[command(hide = true)]
    Recv {
        #[arg(long)]
        addr: Ipv4Addr,
        #[arg(long)]
        port: u16,
        #[arg(long)]
        peers: usize,
        #[arg(long)]
        ready: PathBuf,
        /// Seconds before the receivers exit by themselves.
        #[arg(long)]
        secs: f64,
    },
}

/// One emulated link: RTT and random loss (each way).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub rtt_ms: f64,
    pub loss_pct: f64,
}

impl std::str::FromStr for Link {
    type Err = String;
    /// `RTT_MS:LOSS_PERCENT`, e.g. `250:0.7`.
    fn from_str(s: &str) -> Result<Link, String> {
        let (rtt, loss) = s.split_once(':').ok_or_else(|| format!("{s:?}: want RTT_MS:LOSS_PERCENT"))?;
        let rtt_ms: f64 = rtt.trim().parse().map_err(|_| format!("bad RTT in {s:?}"))?;
        let loss_pct: f64 = loss.trim().parse().map_err(|_| format!("bad loss in {s:?}"))?;
        if !(rtt_ms > 0.0 && rtt_ms <= 10_000.0 && (0.0..100.0).contains(&loss_pct)) {
            return Err(format!("{s:?}: need 0 < RTT ≤ 10000 ms and 0 ≤ loss < 100%"));
        }
        Ok(Link { rtt_ms, loss_pct })
    }
}

/// What to measure. Lists are comma-separated.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("plot", |a| a.help(
    "Also draw PNG charts into this directory (created if missing): handshake-time.png (median connect time in RTTs per link, N and row)"
)))]
pub struct Options {
    /// A smoke run: N = 3 and 10, 5 connects per row. Explicit --peers and
    /// --reps still win.
    #[arg(long)]
    pub quick: bool,
    /// Numbers of peers [default: 3,10,100; --quick: 3,10].
    #[arg(long, value_delimiter = ',')]
    pub peers: Option<Vec<usize>>,
    /// Links as RTT_MS:LOSS_PERCENT (loss each way).
    #[arg(long, value_delimiter = ',', default_values = ["50:0", "250:0.7"])]
    pub links: Vec<Link>,
    /// Connects per row and (link, N) [default: 20; --quick: 5].
    #[arg(long)]
    pub reps: Option<usize>,
    /// The lossy links' extra manyfold row: response timeout = this many
    /// RTTs (0: no such row).
    #[arg(long, default_value_t = 2.0)]
    pub short_rtts: f64,
    /// Link rate (bit/s; K, M, G suffixes).
    #[arg(long, default_value = "1G")]
    pub rate: String,
    /// Seed of the emulator's loss decisions.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub out: crate::report::Outputs,
}

pub fn run(args: Args) -> Result<()> {
    match args.internal {
        Some(Internal::Send { to, peers, reps, rows, short_ms, drain_ms }) => {
            let timing = ends::Timing {
                short: Duration::from_secs_f64(short_ms / 1e3),
                drain: Duration::from_secs_f64(drain_ms / 1e3),
            };
            ends::send(to, peers, reps, &rows, timing)
        }
        Some(Internal::Recv { addr, port, peers, ready, secs }) => {
            ends::recv(addr, port, peers, &ready, Duration::from_secs_f64(secs))
        }
        None => {
            if let Some(why) = netns::skip_reason() {
                println!("handshake: skipped: {why}");
                return Ok(());
            }
            measure(&args.opts)
        }
    }
}

/// Everything the runs need, resolved from the options.
#[derive(Debug, Clone)]
pub struct Plan {
    pub peers: Vec<usize>,
    pub links: Vec<Link>,
    pub reps: usize,
    pub short_rtts: f64,
    pub rate_bps: u64,
    pub seed: u64,
}

impl Plan {
    pub fn from_options(o: &Options) -> Result<Plan> {
        let peers = o.peers.clone().unwrap_or(if o.quick { vec![3, 10] } else { vec![3, 10, 100] });
        if peers.is_empty() || peers.iter().any(|&n| n == 0 || n > 1000) || o.links.is_empty() {
            bail!("need 1 ≤ N ≤ 1000 peers and at least one link");
        }
        if !(0.0..=100.0).contains(&o.short_rtts) {
            bail!("--short-rtts must be 0 to 100");
        }
        let reps = o.reps.unwrap_or(if o.quick { 5 } else { 20 }).clamp(1, 1000);
        let rate_bps = crate::wan::parse_rate(&o.rate)?;
        Ok(Plan { peers, links: o.links.clone(), reps, short_rtts: o.short_rtts, rate_bps, seed: o.seed })
    }

    /// The rows run on `link`: the short-timeout row only where there is loss.
    pub fn rows(&self, link: Link) -> Vec<Row> {
        if link.loss_pct > 0.0 && self.short_rtts > 0.0 {
            vec![Row::Manyfold, Row::ManyfoldShort, Row::Tcp]
        } else {
            vec![Row::Manyfold, Row::Tcp]
        }
    }

    fn link_config(&self, link: Link) -> LinkConfig {
        LinkConfig {
            rate_bps: self.rate_bps,
            delay: Duration::from_secs_f64(link.rtt_ms / 2.0 / 1e3),
            loss: link.loss_pct / 100.0,
            // Far more than a handshake's burst (N SYNs of one datagram each).
            queue_bytes: 4 << 20,
            seed: self.seed,
            ..LinkConfig::default()
        }
    }
}

/// First receiver port; each run takes the next N.
const FIRST_PORT: u16 = 21_000;

fn measure(o: &Options) -> Result<()> {
    let plan = Plan::from_options(o)?;
    let bench = std::env::current_exe()?;
    let work = tempfile::Builder::new().prefix("manyfold-bench-handshake-").tempdir()?;
    netns::register_dir(work.path());
    let mut report = Report::new(&plan);
    {
        let mut lab = Lab::create(&bench)?;
        let mut port = FIRST_PORT;
        for &link in &plan.links {
            lab.configure(&plan.link_config(link))?;
            for &n in &plan.peers {
                if u32::from(port) + n as u32 > 60_000 {
                    port = FIRST_PORT;
                }
                let dir = work.path().join(format!("run-{}", report.runs.len()));
                std::fs::create_dir(&dir)?;
                let before = lab.stats()?;
                let r = run_one(&lab, &bench, &plan, link, n, port, &dir);
                let after = lab.stats()?;
                port += n as u16;
                let r = match r {
                    Ok(mut r) => {
                        r.lost = (after.a2b.lost - before.a2b.lost, after.b2a.lost - before.b2a.lost);
                        r
                    }
                    Err(e) => {
                        lab.kill_leftovers();
                        RunResult::failed(link, n, format!("{e:#}"))
                    }
                };
                eprintln!("{}", r.progress());
                report.runs.push(r);
            }
        }
    } // the lab goes here, before any output
    report.finish();
    crate::report::publish(&report, &o.out)
}

/// One (link, N): receivers in b, then the sender's connects in a.
fn run_one(lab: &Lab, bench: &Path, plan: &Plan, link: Link, n: usize, port: u16, dir: &Path) -> Result<RunResult> {
    let rows = plan.rows(link);
    // Worst case per connect: the overall timeout (10 s) and the drain.
    let drain_ms = (4.0 * link.rtt_ms).max(200.0);
    let per = manyfold::GroupConfig::default().overall_timeout.as_secs_f64() + drain_ms / 1e3 + 1.0;
    let limit = Duration::from_secs_f64(plan.reps as f64 * rows.len() as f64 * per + 30.0);
    let ready = dir.join("ready");
    let mut r = lab.exec(&lab.ns_b, bench);
    r.env("RUST_BACKTRACE", "0").args(["handshake", "recv", "--addr", &ADDR_B.to_string()]);
    r.args(["--port", &port.to_string(), "--peers", &n.to_string(), "--secs", &limit.as_secs_f64().to_string()]);
    r.arg("--ready").arg(&ready);
    let recv = child::launch(r, dir, "recv", format!("{n} receivers"))?;
    if let Err(e) = runs::wait_for_file(&ready, Duration::from_secs(30)) {
        recv.kill();
        return Err(e);
    }
    let row_list: Vec<String> =
        rows.iter().filter_map(|r| r.to_possible_value()).map(|v| v.get_name().to_string()).collect();
    let mut s = lab.exec(&lab.ns_a, bench);
    s.env("RUST_BACKTRACE", "0").args(["handshake", "send", "--to", &format!("{ADDR_B}:{port}")]);
    s.args(["--peers", &n.to_string(), "--reps", &plan.reps.to_string(), "--rows", &row_list.join(",")]);
    s.args(["--short-ms", &(plan.short_rtts * link.rtt_ms).to_string(), "--drain-ms", &drain_ms.to_string()]);
    let send = match child::launch(s, dir, "send", format!("sender to {n}")) {
        Ok(s) => s,
        Err(e) => {
            recv.kill();
            return Err(e);
        }
    };
    let sent = send.finish(limit);
    recv.kill();
    let sent = sent.context("the sender")?;
    RunResult::parse(link, n, &sent.stdout)
}
