//! The `rate` scenario (issue 21, item 1): small messages on one
//! connection over 127.0.0.1. For each message size and row: the highest
//! sustained messages/s (and MB/s), then the one-way latency p50 / p99 /
//! p99.9 at offered loads of 10%, 50% and 90% of that row's maximum in
//! the same repetition; every message checked (sequence and content).
//!
//! Rows (each run: one sender process, one receiver process):
//! - manyfold, every message on one stream (`send_message` /
//!   `recv_message`), plain;
//! - manyfold, one stream, through the batch API: `send_messages` of
//!   every message due (up to 256 at once), `recv_messages_into` a reused
//!   `MessageBatch` (issue 21 item 2);
//! - manyfold, one stream, with a flush delay (`--flush-delay`, spec
//!   §5.7: partial datagrams wait for more messages while packets are in
//!   flight);
//! - manyfold, message k on stream k mod 8;
//! - manyfold, one stream, every message unordered
//!   (`MessageOptions { unordered: true }`);
//! - manyfold encrypted (spec §19: Noise XXpsk3, ChaCha20-Poly1305), one stream;
//! - kernel TCP, one connection, TCP_NODELAY, length-prefixed messages;
//! - Aeron, its own samples ([`aeron`]), skipped with the reason where
//!   Java or Maven is missing.
//!
//! Modules: [`wire`] (message bytes, the receiver's check), [`pace`]
//! (schedule and meter), [`ends`] (the processes), [`aeron`] (the
//! anchor), [`runner`] (the runs, interleaved), [`report`] (figures,
//! Markdown, JSON, charts).

mod aeron;
mod ends;
mod pace;
mod report;
mod runner;
mod wire;

use std::net::SocketAddr;

use anyhow::Result;
use clap::Subcommand;

pub type Args = crate::ScenarioArgs<Internal, Options>;

/// The scenario's own processes, re-executed from this binary.
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
}

/// What to run.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("json", |a| a.help("Also write every run's figures as JSON to this file")))]
#[command(mut_arg("plot", |a| a.help(
    "Also draw charts into this directory: rate-messages.png (messages/s per size and row) and rate-p99.png (p99 at 50% load)"
)))]
pub struct Options {
    /// CI's short version: sizes 32 and 1024, 0.5 s rate runs, 0.3 s
    /// latency runs, one repetition, no Aeron row. Explicit options win.
    #[arg(long)]
    pub quick: bool,
    /// Message sizes in bytes (at least 18: the header)
    /// [default: 32,288,1024,16384; --quick: 32,1024].
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Rows: manyfold, manyfold-batch, manyfold-8, manyfold-unordered,
    /// manyfold-encrypted, tcp, aeron [default: all; --quick: all but
    /// aeron]; and manyfold-flush (one stream with `--flush-delay`), run
    /// only when named.
    #[arg(long, value_delimiter = ',')]
    pub rows: Option<Vec<String>>,
    /// Seconds of each run at the highest rate [default: 3; --quick: 0.5].
    #[arg(long)]
    pub secs: Option<f64>,
    /// Seconds of each paced (latency) run [default: 2; --quick: 0.3].
    #[arg(long)]
    pub lat_secs: Option<f64>,
    /// Offered loads, percent of the row's highest rate in the same
    /// repetition.
    #[arg(long, value_delimiter = ',', default_values_t = [10.0, 50.0, 90.0])]
    pub loads: Vec<f64>,
    /// Repetitions, rows alternating A B C … within each [default: 3; --quick: 1].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Round trips of Aeron's Ping/Pong per size and repetition (after a
    /// warm-up of a tenth as many).
    #[arg(long, default_value_t = 1000)]
    pub aeron_pings: u64,
    /// The flush delay of the manyfold-flush row, ms (spec §5.7: a
    /// datagram short of a full packet waits up to this long for more
    /// messages while packets are in flight).
    #[arg(long, default_value_t = 1.0)]
    pub flush_delay: f64,
    /// Seed of the messages' bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub out: crate::report::Outputs,
}

pub fn run(args: Args) -> Result<()> {
    match args.internal {
        Some(Internal::Send { to, end }) => ends::send(to, &end),
        Some(Internal::Recv { listen, end }) => ends::recv(listen, &end),
        None => runner::run(&args.opts),
    }
}
