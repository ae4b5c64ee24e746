//! The `messages` scenario (issue 4): small messages on several streams
//! across the `wan` scenario's emulated link under KCP's published test
//! conditions — RTT 60–125 ms (30 ms one way plus up to 32.5 ms of
//! jitter each way) and 10% random loss each way — and each message's
//! one-way latency: p50, p99 and max per row.
//!
//! Rows (each run: one sender in namespace a, one receiver in b):
//! - manyfold, logical stream s on manyfold stream s (`send_message` /
//!   `recv_message`): a loss delays only its own stream;
//! - manyfold with every message on stream 0: the same traffic with
//!   head-of-line blocking, what the streams are worth;
//! - manyfold on 4 streams with unordered messages: no head-of-line
//!   blocking at all, what loss recovery alone costs;
//! - kernel TCP: one connection, `TCP_NODELAY`, the streams' messages
//!   interleaved in frames `[stream][length]`;
//! - KCP: the same TCP framing through kcptun ([`crate::wan::kcp`]).
//!
//! Modules: [`wire`] (schedule, message bytes, check, frames), [`ends`]
//! (the processes), [`runner`] (the lab and the runs), [`report`]
//! (figures, Markdown, JSON, charts).

mod ends;
mod report;
mod runner;
mod wire;

use std::net::SocketAddr;

use anyhow::Result;
use clap::Subcommand;

pub type Args = crate::ScenarioArgs<Internal, Options>;

/// The scenario's own processes, re-executed from this binary inside the
/// lab's namespaces.
#[derive(Subcommand, Debug)]
pub enum Internal {
    /// (internal) A run's sender.
    #[command(hide = true)]
    Send {
        #[arg(long)]
        to: SocketAddr,
        #[command(flatten)]
        end: ends::End,
    },
    /// (internal) A run's receiver.
    #[command(hide = true)]
    Recv {
        #[arg(long)]
        listen: SocketAddr,
        #[command(flatten)]
        end: ends::End,
    },
    /// (internal) The RTT probe's UDP echo.
    #[command(hide = true)]
    Echo {
        listen: SocketAddr,
        #[arg(long)]
        secs: f64,
    },
    /// (internal) The RTT probe.
    #[command(hide = true)]
    Ping {
        to: SocketAddr,
        #[arg(long)]
        count: u32,
        #[arg(long)]
        interval_ms: f64,
    },
}

/// What to run.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("json", |a| a.help("Also write the results, every message's latency included, as JSON")))]
#[command(mut_arg("plot", |a| a.help(
    "Also draw charts into this directory: messages-latency.png (p50, p99, max per row) and messages-cdf.png (latency distribution)"
)))]
pub struct Options {
    /// CI's short version: 300 messages, one repetition, 100 probes.
    /// Explicit --count, --reps and --probe still win.
    #[arg(long)]
    pub quick: bool,
    /// Messages per run, all streams together [default: 2000; --quick: 300].
    #[arg(long)]
    pub count: Option<u32>,
    /// Repetitions of every row, alternating A B C … A B C … [default: 3;
    /// --quick: 1].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Streams.
    #[arg(long, default_value_t = 4)]
    pub streams: u16,
    /// Each stream sends one message every this many ms.
    #[arg(long, default_value_t = 20.0)]
    pub interval_ms: f64,
    /// Bytes per message (a 14-byte header included).
    #[arg(long, default_value_t = 1024)]
    pub size: u16,
    /// Shortest RTT, ms: the one-way delay is half of it.
    #[arg(long, default_value_t = 60.0)]
    pub rtt_min: f64,
    /// Longest RTT, ms: each direction adds uniform jitter of up to
    /// (rtt_max − rtt_min) / 2 (order kept, as in KCP's simulator).
    #[arg(long, default_value_t = 125.0)]
    pub rtt_max: f64,
    /// Random loss in percent, each direction.
    #[arg(long, default_value_t = 10.0)]
    pub loss: f64,
    /// Link rate (bit/s; K, M, G suffixes).
    #[arg(long, default_value = "10M")]
    pub rate: String,
    /// manyfold's congestion controller.
    #[arg(long, default_value = "bbr")]
    pub cc: String,
    /// Kernel TCP's congestion control.
    #[arg(long, default_value = "bbr")]
    pub tcp_cc: String,
    /// kcptun's profile for the KCP row (fast3 = KCP's `nodelay 1,
    /// interval 10, resend 2, nc 1`, the fast mode of KCP's own test).
    #[arg(long, default_value = "fast3")]
    pub kcp_mode: String,
    /// Rows: manyfold (one manyfold stream per stream), manyfold-one
    /// (every message on stream 0), manyfold-unordered (one stream per
    /// stream, unordered messages), tcp, kcp (skipped with a note when
    /// kcptun is not installed).
    #[arg(long, value_delimiter = ',', default_values = ["manyfold", "manyfold-one", "manyfold-unordered", "tcp", "kcp"])]
    pub rows: Vec<String>,
    /// Round trips the RTT probe measures before the runs, one every 5 ms
    /// (0: no probe) [default: 400; --quick: 100].
    #[arg(long)]
    pub probe: Option<u32>,
    /// Seconds a run may take beyond its schedule before the receiver
    /// reports what it has.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Seed of the emulator and of the messages' bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the qlog traces (spec §18) of both ends of every
    /// manyfold run into DIR/run-<n>-<row>/ (`manyfold trace` reads them).
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub out: crate::report::Outputs,
}

pub fn run(args: Args) -> Result<()> {
    match args.internal {
        Some(Internal::Send { to, end }) => ends::send(to, &end),
        Some(Internal::Recv { listen, end }) => ends::recv(listen, &end),
        Some(Internal::Echo { listen, secs }) => ends::echo(listen, secs),
        Some(Internal::Ping { to, count, interval_ms }) => ends::ping(to, count, interval_ms),
        None => {
            if let Some(why) = crate::wan::netns::skip_reason() {
                println!("messages: skipped: {why}");
                return Ok(());
            }
            runner::run(&args.opts)
        }
    }
}
