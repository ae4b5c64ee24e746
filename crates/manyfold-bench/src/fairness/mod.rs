//! The `fairness` scenario (issue 3, lab item 3): two long-running flows
//! share one emulated bottleneck — 100 Mbit/s, RTT 50 ms, a tail-drop
//! queue of one bandwidth-delay product, no random loss — and the table
//! gives each flow's goodput over the steady part of the run, its share,
//! Jain's fairness index and the sum as a fraction of the link.
//!
//! Pairs (each run [`Options::secs`] long, both flows started together):
//! - `tcp`: two kernel TCP cubic flows, the reference for what "fair" looks
//!   like on this emulator (it is not 1.000 even for identical flows);
//! - `mixed`: manyfold (each controller of `--cc`) against one kernel TCP
//!   cubic flow;
//! - `same`: two manyfold flows of the same controller.
//!
//! Both flows go from the lab's namespace a to namespace b through the same
//! direction of the `wan` scenario's relay (`crate::wan::netns::Lab`), so
//! they share one queue; their acks share the other direction. The flows
//! are time-bounded: each sender writes an endless stream until the run's
//! end, each receiver verifies every byte and counts bytes per interval.
//!
//! Modules: [`stream`] (the bytes, their check, the interval counts),
//! [`flows`] (the flow processes), [`runner`] (the lab and the runs),
//! [`report`] (figures, Markdown, JSON, charts).

mod flows;
mod report;
mod runner;
mod stream;

use std::net::SocketAddr;

use anyhow::Result;
use clap::Subcommand;

pub type Args = crate::ScenarioArgs<Internal, Options>;

/// The scenario's own processes, re-executed from this binary inside the
/// lab's namespaces.
#[derive(Subcommand, Debug)]
pub enum Internal {
    /// (internal) One flow's sender.
    #[command(hide = true)]
    Send {
        #[arg(long, value_enum)]
        kind: flows::Kind,
        #[arg(long)]
        to: SocketAddr,
        /// manyfold controller or kernel TCP congestion control.
        #[arg(long)]
        cc: String,
        #[command(flatten)]
        timing: flows::Timing,
    },
    /// (internal) One flow's receiver.
    #[command(hide = true)]
    Recv {
        #[arg(long, value_enum)]
        kind: flows::Kind,
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        cc: String,
        #[command(flatten)]
        timing: flows::Timing,
    },
}

/// What to run. Lists are comma-separated.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("json", |a| a.help("Also write the results, with every flow's per-interval series, as JSON here")))]
#[command(mut_arg("plot", |a| a.help(
    "Also write one PNG per run (throughput against time, one line per flow) into this directory"
)))]
pub struct Options {
    /// CI's short version: 5 s runs, 1 s warm-up, the first controller of
    /// --cc only. Explicit --secs/--warmup still win.
    #[arg(long)]
    pub quick: bool,
    /// Seconds per run [default: 60; --quick: 5].
    #[arg(long)]
    pub secs: Option<f64>,
    /// Seconds at the start of each run left out of the figures (slow
    /// start, the flows finding their shares) [default: 10; --quick: 1].
    #[arg(long)]
    pub warmup: Option<f64>,
    /// The receivers' counting interval in seconds (the series' step).
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// manyfold controllers for the `mixed` and `same` pairs
    /// [default: newreno,cubic,bbr].
    #[arg(long, value_delimiter = ',')]
    pub cc: Option<Vec<String>>,
    /// Pairs to run: tcp (two kernel TCP flows, the reference), mixed
    /// (manyfold against kernel TCP), same (two manyfold flows).
    #[arg(long, value_delimiter = ',', default_values = ["tcp", "mixed", "same"])]
    pub pairs: Vec<String>,
    /// Kernel TCP congestion control of the TCP flows.
    #[arg(long, default_value = "cubic")]
    pub tcp_cc: String,
    /// Repetitions of the whole set of pairs (alternating A B C A B C).
    #[arg(long, default_value_t = 1)]
    pub reps: usize,
    /// Bottleneck rate (bit/s; K, M, G suffixes).
    #[arg(long, default_value = "100M")]
    pub rate: String,
    /// Round-trip time in ms (half each way).
    #[arg(long, default_value_t = 50.0)]
    pub rtt: f64,
    /// Bottleneck queue in bandwidth-delay products (floor: 100 packets).
    #[arg(long, default_value_t = 1.0)]
    pub queue_bdp: f64,
    /// Seed of the emulator and of the flows' streams.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub out: crate::report::Outputs,
}

pub fn run(args: Args) -> Result<()> {
    match args.internal {
        Some(Internal::Send { kind, to, cc, timing }) => flows::send(kind, to, &cc, &timing),
        Some(Internal::Recv { kind, listen, cc, timing }) => flows::recv(kind, listen, &cc, &timing),
        None => {
            if let Some(why) = crate::wan::netns::skip_reason() {
                println!("fairness: skipped: {why}");
                return Ok(());
            }
            runner::run(&args.opts)
        }
    }
}
