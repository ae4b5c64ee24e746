//! The `wan` scenario (issue 3, lab item 2; BENCH.md "Emulating
//! networks"): bulk transfers across an emulated wide-area link, manyfold
//! beside kernel TCP cubic and bbr, quinn and KCP (through kcptun), over a
//! grid of rate × RTT × loss.
//!
//! - [`netns`]: the two namespaces and their cleanup;
//! - [`relay`] and [`link`]: the userspace link emulator (rate, queue,
//!   delay, jitter, loss, reordering) between the namespaces' TUN devices;
//! - [`probe`]: the emulator's self-check stream;
//! - [`kcp`]: the KCP row's kcptun tunnel;
//! - [`grid`]: the runner; [`report`]: the Markdown tables, JSON and charts.

mod grid;
pub(crate) mod kcp;
// `pub(crate)`: the fairness scenario builds its bottleneck with the same lab.
pub(crate) mod link;
pub(crate) mod netns;
pub(crate) mod probe;
mod relay;
mod report;
pub(crate) mod sys;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Subcommand;

use crate::loopback::data::Pattern;

pub type Args = crate::ScenarioArgs<Internal, Options>;

/// The scenario's own processes, re-executed from this binary.
#[derive(Subcommand, Debug)]
pub enum Internal {
    /// (internal) The link emulator between two TUN devices.
    #[command(hide = true)]
    Relay {
        #[arg(long)]
        dev_a: String,
        #[arg(long)]
        dev_b: String,
        /// The devices' MTU: the largest packet the relay reads.
        #[arg(long, default_value_t = netns::DEFAULT_MTU)]
        mtu: u32,
    },
    /// (internal) Self-check sender: paced UDP at a rate (bit/s of IP packets).
    #[command(hide = true)]
    UdpSend { to: SocketAddr, rate: u64, secs: f64 },
    /// (internal) The TCP rows' sender: the file-copy anchor's, with the
    /// socket's congestion control set.
    #[command(hide = true)]
    TcpSend {
        file: PathBuf,
        to: SocketAddr,
        #[arg(long)]
        cc: String,
    },
    /// (internal) Self-check receiver.
    #[command(hide = true)]
    UdpRecv { listen: SocketAddr, limit: f64 },
    /// (internal) The KCP row's TCP sender (no half-close: kcptun has none).
    #[command(hide = true)]
    KcpSend { file: PathBuf, to: SocketAddr },
    /// (internal) The KCP row's TCP receiver: reads exactly `bytes`.
    #[command(hide = true)]
    KcpRecv {
        listen: SocketAddr,
        out: PathBuf,
        hash: String,
        #[arg(long)]
        bytes: u64,
    },
    /// (internal) The quinn row's sender: the loopback scenario's, bound in
    /// the sender's namespace, with the path's flow-control window.
    #[command(hide = true)]
    QuicSend {
        to: SocketAddr,
        #[arg(long)]
        cert: PathBuf,
        #[arg(long)]
        bytes: u64,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        window: Option<u64>,
    },
    /// (internal) The quinn row's receiver (hashes what arrives).
    #[command(hide = true)]
    QuicRecv {
        listen: SocketAddr,
        #[arg(long)]
        cert: PathBuf,
        #[arg(long)]
        bytes: u64,
        #[arg(long)]
        hash: String,
        #[arg(long)]
        window: Option<u64>,
    },
}

/// What to measure. Lists are comma-separated.
#[derive(clap::Args, Debug, Clone)]
#[command(mut_arg("json", |a| a.help("Also write the results as JSON here")))]
#[command(mut_arg("plot", |a| a.help(
    "Also draw charts into this directory (created if missing): for each rate and RTT, `wan-<rate>-<rtt>ms.png`, \
     goodput as a fraction of the link rate against loss, one line per row"
)))]
pub struct Options {
    /// A tiny subset that proves the harness (CI): 100 Mbit/s, RTT 50 ms,
    /// loss 1%, one repetition, a 2 MB file, a 1 s self-check. Explicit
    /// --rate/--rtt/--loss/--reps/--size still win.
    #[arg(long)]
    pub quick: bool,
    /// Link rates, e.g. 100M,1G (bit/s; K, M, G suffixes) [default: 100M,1G].
    #[arg(long, value_delimiter = ',')]
    pub rate: Option<Vec<String>>,
    /// Round-trip times in ms (half each way) [default: 1,50,200].
    #[arg(long, value_delimiter = ',')]
    pub rtt: Option<Vec<f64>>,
    /// Random loss in percent, each direction [default: 0,0.1,1,5].
    #[arg(long, value_delimiter = ',')]
    pub loss: Option<Vec<f64>>,
    /// Repetitions per row and cell (medians reported) [default: 3].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Target seconds per transfer: the file is sized so that the slowest
    /// expected row (TCP under loss, by Mathis et al.'s formula) takes
    /// about this long.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// One file size for every cell instead (e.g. 2MB, 1GiB).
    #[arg(long)]
    pub size: Option<String>,
    /// Jitter in ms (uniform, added to the one-way delay, order kept).
    #[arg(long, default_value_t = 0.0)]
    pub jitter: f64,
    /// Reordering in percent: packets held back `--reorder-gap` ms.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// How long a reordered packet is held back, ms.
    #[arg(long, default_value_t = 1.0)]
    pub reorder_gap: f64,
    /// The emulated link's MTU in bytes (both TUN devices): 1500 is
    /// Ethernet's; 9000 is a jumbo-frame link, where manyfold's path MTU
    /// discovery should settle on 8,972-byte datagrams and TCP on an
    /// 8,948-byte MSS.
    #[arg(long, default_value_t = netns::DEFAULT_MTU, value_parser = clap::value_parser!(u32).range(1280..=65535))]
    pub mtu: u32,
    /// After the grid, its fastest rate again at RTTs up to 50 ms and
    /// losses up to 0.1%, on devices of this MTU, for manyfold's default
    /// controller and the kernel TCP rows (rows named "… · 9000-byte
    /// MTU"): path MTU discovery measured off loopback. 0 leaves it out;
    /// so do --quick and an --mtu equal to it.
    #[arg(long, default_value_t = 9000, value_parser = parse_jumbo)]
    pub jumbo_mtu: u32,
    /// Bottleneck queue in bandwidth-delay products (floor: 100 packets).
    #[arg(long, default_value_t = 1.0)]
    pub queue_bdp: f64,
    /// Seed of the emulator's loss and jitter decisions and of the sample file.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Rows to run: manyfold (one per controller), cubic and bbr (kernel
    /// TCP), quinn (encrypted QUIC), kcp (TCP through kcptun; skipped with
    /// a note when kcptun is not installed).
    #[arg(long, value_delimiter = ',', default_values = ["manyfold", "cubic", "bbr", "quinn", "kcp"])]
    pub rows: Vec<String>,
    /// The manyfold binary (default: next to this one).
    #[arg(long)]
    pub manyfold: Option<PathBuf>,
    /// Per-transfer time limit, seconds; a row that hits it in a cell is
    /// not repeated there.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// Skip the emulator's self-check.
    #[arg(long, conflicts_with = "check_only")]
    pub skip_check: bool,
    /// Run only the emulator's self-check at each rate: no transfers.
    #[arg(long)]
    pub check_only: bool,
    #[command(flatten)]
    pub out: crate::report::Outputs,
}

pub fn run(args: Args) -> Result<()> {
    match args.internal {
        Some(Internal::Relay { dev_a, dev_b, mtu }) => relay::main(&dev_a, &dev_b, mtu as usize),
        Some(Internal::UdpSend { to, rate, secs }) => probe::send(to, rate, secs, 1472),
        Some(Internal::TcpSend { file, to, cc }) => {
            crate::tcp::send_with(&file, to, |s| Ok(sys::set_tcp_congestion(s, &cc)?))
        }
        Some(Internal::UdpRecv { listen, limit }) => probe::recv(listen, limit),
        Some(Internal::KcpSend { file, to }) => kcp::send(&file, to),
        Some(Internal::KcpRecv { listen, out, hash, bytes }) => kcp::recv(listen, &out, &hash, bytes),
        Some(Internal::QuicSend { to, cert, bytes, seed, window }) => {
            crate::loopback::quic::send_tuned(to, &cert, &Pattern::new(seed, bytes), window)
        }
        Some(Internal::QuicRecv { listen, cert, bytes, hash, window }) => {
            crate::loopback::quic::recv_tuned(listen, &cert, bytes, &hash, window)
        }
        None => {
            if let Some(why) = netns::skip_reason() {
                println!("wan: skipped: {why}");
                return Ok(());
            }
            grid::run(args.opts)
        }
    }
}

/// Parses a rate such as `100M`, `1G`, `1.5Gbit`, `250000` into bit/s.
pub fn parse_rate(s: &str) -> Result<u64> {
    let t = s.trim().trim_end_matches("bit").trim_end_matches("bps").trim_end_matches("b/s");
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1e3),
        Some('m' | 'M') => (&t[..t.len() - 1], 1e6),
        Some('g' | 'G') => (&t[..t.len() - 1], 1e9),
        _ => (t, 1.0),
    };
    let v: f64 = num.parse().map_err(|_| anyhow::anyhow!("bad rate {s:?}"))?;
    if v.is_nan() || v <= 0.0 {
        bail!("rate must be positive: {s:?}");
    }
    Ok((v * mult) as u64)
}

/// `100 Mbit/s`, `1 Gbit/s`.
pub fn rate_label(bps: u64) -> String {
    if bps >= 1_000_000_000 && bps.is_multiple_of(1_000_000_000) {
        format!("{} Gbit/s", bps / 1_000_000_000)
    } else {
        format!("{} Mbit/s", bps as f64 / 1e6)
    }
}

/// `--jumbo-mtu`: 0 for none, else an MTU the devices take.
fn parse_jumbo(s: &str) -> Result<u32, String> {
    match s.parse::<u32>().map_err(|e| e.to_string())? {
        m if m == 0 || (1280..=65535).contains(&m) => Ok(m),
        m => Err(format!("{m} is not an MTU in 1280..=65535 (0 leaves the jumbo rows out)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse() {
        assert_eq!(parse_rate("100M").unwrap(), 100_000_000);
        assert_eq!(parse_rate("1G").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("1.5Gbit").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("250000").unwrap(), 250_000);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("0").is_err());
        assert_eq!(rate_label(1_000_000_000), "1 Gbit/s");
        assert_eq!(rate_label(100_000_000), "100 Mbit/s");
    }
}
