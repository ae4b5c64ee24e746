//! `manyfold mcast send` and `manyfold mcast recv`: files, directories,
//! disk images or standard input to many receivers over IP multicast
//! (spec §16, paper 03's SOMA; bundles §16.10). This module owns the
//! commands' options; `send.rs`, `recv.rs`, `sink.rs` (with `running.rs`,
//! its hash kept while writing), `hosts.rs` and `bundle.rs` the rest.

mod bundle;
mod hosts;
mod recv;
mod running;
mod send;
mod sink;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use manyfold::mcast::McastNet;
use manyfold_proto::SecurityConfig;

#[derive(Debug, Subcommand)]
pub enum McastCommand {
    /// Send files, a directory, a block device or standard input (`-`) to
    /// every receiver listening on the group.
    ///
    /// Announces the session (name, size, BLAKE3) and waits for receivers
    /// (--receivers, or everyone in --hosts, at most --wait); sends in
    /// windows whose size follows the slowest network (paper 03's flow
    /// control); then repairs what each receiver lost, by multicast when
    /// several lost the same packet. Receivers may join late. Prints each
    /// receiver's progress and a final report; exits non-zero unless
    /// every receiver asked for confirmed everything.
    ///
    /// Several FILEs, or a directory, go in one session as a bundle (spec
    /// §16.10): paths relative to each argument's parent (`photos` →
    /// `photos/…`), modes and modification times kept, symbolic links
    /// sent as links.
    ///
    /// Examples:
    ///   manyfold mcast send --group 239.1.2.3:7020 disk.img
    ///   manyfold mcast send --group 239.1.2.3:7020 --receivers 3 --rate 80Mbit photos/ notes.txt
    ///   manyfold mcast send --group [ff15::1]:7020 --iface eth0 --hosts lab.hosts release.tar
    #[command(verbatim_doc_comment)]
    Send(SendArgs),

    /// Receive one session from the group into a directory (or a device,
    /// or standard output); with --daemon, session after session until
    /// stopped.
    ///
    /// Each file is written under a hidden temporary name, checked against
    /// the sender's BLAKE3 once whole, and only then renamed. A bundle
    /// (several files, a directory) is checked name by name before any
    /// file is written: absolute paths, `..` and links leading out of the
    /// directory are refused. Exits non-zero if a hash does not match, the
    /// sender drops or refuses this receiver, or the sender goes silent.
    ///
    /// Examples:
    ///   manyfold mcast recv --group 239.1.2.3:7020 --dir /srv/incoming
    ///   manyfold mcast recv --group 239.1.2.3:7020 --dir /srv/incoming --daemon --id 0a1b2c3d
    ///   manyfold mcast recv --group [ff15::1]:7020 --iface eth0 --output /dev/sdb
    #[command(verbatim_doc_comment)]
    Recv(RecvArgs),
}

#[derive(Debug, Args)]
pub struct NetArgs {
    /// Multicast group and port: IPv4 (239.1.2.3:7020) or IPv6 in
    /// brackets ([ff15::1]:7020; give --iface for a link-local scope).
    #[arg(long, value_name = "GROUP:PORT")]
    group: SocketAddr,
    /// Network interface to send and join on [default: the route's].
    #[arg(long, value_name = "IF")]
    iface: Option<String>,
    /// Multicast TTL (IPv6: hop limit): routers the data may cross.
    #[arg(long, default_value_t = 1)]
    ttl: u32,
    /// Encrypt the session (spec §19.7): the sender hands a fresh group key
    /// to each receiver inside a Noise handshake, then seals every packet
    /// with it. A `psk` line lets in whoever holds it; a private key (with
    /// --peers-file) proves who we are. Both sides must give one; a
    /// receiver with keys joins only encrypted sessions, one without only
    /// plain ones.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Public keys accepted: on the sender, the receivers let in; on a
    /// receiver, the senders it trusts. Needs --key-file with a private key.
    #[arg(long, value_name = "FILE")]
    peers_file: Option<PathBuf>,
}

impl NetArgs {
    /// The keys --key-file and --peers-file give; `None`: a plain session.
    fn security(&self) -> Result<Option<SecurityConfig>> {
        crate::keys::security_config(self.key_file.as_deref(), self.peers_file.as_deref())
    }

    fn net(&self) -> McastNet {
        let mut n = McastNet::new(self.group);
        n.iface = self.iface.clone();
        n.ttl = self.ttl;
        n
    }
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// What to send: a file or block device; `-` reads standard input to
    /// its end; several files or a directory go as one bundle.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    #[command(flatten)]
    net: NetArgs,
    /// Name the receivers store the file under [default: FILE's name;
    /// "stdin" for -]; for a bundle, only its label in reports.
    #[arg(long)]
    name: Option<String>,
    /// Receivers to wait for before sending, and that must all complete
    /// for a zero exit: with fewer joined by the end of --wait, the
    /// session runs with those and the command fails, saying how many
    /// joined and who they were [default: 1, or every host in --hosts].
    /// E.g. --receivers 3 --wait 30.
    #[arg(long, value_name = "N", value_parser = receivers_arg, allow_negative_numbers = true)]
    receivers: Option<usize>,
    /// Only the receivers this file lists may join (as uftp's host list):
    /// one a line, an IPv4 or IPv6 address or a client id (8 hex digits,
    /// a receiver's --id); `#` starts a comment. Others are refused at
    /// once. Every listed receiver must complete: those that did not are
    /// named at the end and the exit is non-zero. E.g. a file holding
    /// "198.18.0.2", "2001:db8::3  # lab 3" and "0a1b2c3d".
    #[arg(long, value_name = "FILE")]
    hosts: Option<PathBuf>,
    /// Longest wait for --receivers, in seconds; then start with whoever
    /// registered, and exit non-zero at the end if fewer than --receivers
    /// ever joined.
    #[arg(long, default_value_t = 5.0)]
    wait: f64,
    /// Largest window in packets (paper 03 uses 100; more keeps fast LANs busy during each window's ACK wait).
    #[arg(long, default_value_t = 256)]
    max_window: u32,
    /// Windows sent before the oldest is confirmed (spec §16.3); 1 is
    /// paper 03's stop-and-wait, more keeps the link busy during each
    /// window's ACK wait.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=16))]
    windows_in_flight: u32,
    /// Floor of the window timer in ms (paper 03's dflt_Tout).
    #[arg(long, default_value_t = 100)]
    timeout_floor: u64,
    /// Bound of the receivers' random ACK delay in µs (ARTP_max); adapted upwards when many receivers share a network.
    #[arg(long, default_value_t = 600)]
    artp_max: u64,
    /// Drop a receiver whose reported loss exceeds this percentage.
    #[arg(long, value_name = "PCT")]
    max_loss: Option<f64>,
    /// Seconds after the last window before receivers still missing data are dropped.
    #[arg(long, default_value_t = 60.0)]
    completion_timeout: f64,
    /// Seconds of silence after which a receiver is dropped.
    #[arg(long, default_value_t = 5.0)]
    receiver_timeout: f64,
    /// Most repair requests a receiver may make.
    #[arg(long, default_value_t = 100)]
    max_passes: u32,
    /// Largest datagram in bytes (header included).
    #[arg(long, default_value_t = 1452)]
    max_datagram: usize,
    /// Pace each window's packets at the rate of recent windows instead of sending them back to back.
    #[arg(long)]
    pace: bool,
    /// Queue delay, in milliseconds, above which a window's ACKs stop its
    /// growth (spec §16.3, "Queue delay"): a bottleneck's queue is
    /// building, and growing into it until it overflows costs parity.
    /// 10 suits receivers that each have a host of their own; 0 (the
    /// default): the window grows until a loss, as paper 03's does.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    queue_target: u64,
    /// Cap the sending rate, whatever the flow control allows, to share a
    /// LAN: bytes per second (10MB, 1.5MiB/s) or bits per second (80Mbit,
    /// 1Gbit/s), of the datagrams sent to the group, headers and repairs
    /// included (spec §16.3). Without it, as fast as the receivers
    /// confirm. E.g. --rate 200Mbit leaves the rest of a gigabit LAN.
    #[arg(long, value_name = "RATE", value_parser = crate::size::rate_arg, allow_hyphen_values = true)]
    rate: Option<u64>,
    /// Drop a receiver that takes the data slower than this (same units as
    /// --rate), measured over a second of its acknowledgements, and name
    /// it in the report; without it the session slows to its slowest
    /// receiver (spec §16.7).
    #[arg(long, value_name = "RATE", value_parser = crate::size::rate_arg, allow_hyphen_values = true)]
    min_rate: Option<u64>,
    /// Window timer growth on expiry (paper 03's α > 1).
    #[arg(long, default_value_t = 1.5)]
    alpha: f64,
    /// Window timer shrink on a confirmed window (paper 03's β > α).
    #[arg(long, default_value_t = 2.0)]
    beta: f64,
    /// Shrink the window only when one receiver reports more than this
    /// percentage of a window lost; 0 is paper 03's rule (every newly
    /// reported loss shrinks it), which lets random loss on one link
    /// throttle everyone.
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    loss_tolerance: f64,
    /// Packets per Reed-Solomon FEC block (at most 256); 0 turns parity
    /// off and repairs every lost packet by itself. Larger blocks let one
    /// parity packet repair more receivers' different losses (spec §16.9).
    #[arg(long, default_value_t = 256, value_name = "K")]
    fec: u16,
    /// Parity packets sent after every FEC block during the first sending
    /// (proactive FEC); repairs still send parity on demand.
    #[arg(long, default_value_t = 0, value_name = "P")]
    fec_proactive: u16,
    /// Write the figures (per receiver and per window) as JSON to this
    /// file. Each window is `[size, confirmed (1/0), feedback packets,
    /// timer µs, most losses one receiver reported, that receiver's index
    /// in "receivers" (-1: none), shrunk for loss (1/0)]`. The phases:
    /// `announce_s` (start to the first DATA), `data_s` (from there until
    /// every packet went out once), `transfer_s` (first DATA to the end).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RecvArgs {
    #[command(flatten)]
    net: NetArgs,
    /// Directory to store into, under the names the sender announces (a
    /// bundle's paths below it).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["output", "stdout"])]
    dir: Option<PathBuf>,
    /// Store into this path instead (a file, renamed into place once
    /// verified, or a block device, written in place and then verified).
    #[arg(long, value_name = "PATH", conflicts_with = "stdout")]
    output: Option<PathBuf>,
    /// Write the file to standard output once whole and verified.
    #[arg(long)]
    stdout: bool,
    /// Replace existing files of the same names (-f, as in the ftp shell).
    #[arg(short = 'f', long)]
    overwrite: bool,
    /// Receive session after session into --dir until SIGINT or SIGTERM
    /// (as uftpd): a status line per session and the same report as one
    /// session; a session cut short by the signal leaves no partial file.
    /// A failed session is reported and the daemon goes on. E.g.
    /// manyfold mcast recv --group 239.1.2.3:7020 --dir /srv/in --daemon --json >> sessions.jsonl
    #[arg(long, requires = "dir")]
    daemon: bool,
    /// This receiver's client id, 8 hex digits (e.g. 0a1b2c3d), so that a
    /// sender's --hosts can name it and its report shows it [default: a
    /// random one per session].
    #[arg(long, value_name = "HEX", value_parser = id_arg)]
    id: Option<u32>,
    /// Name of this receiver's network: receivers with the same name
    /// suppress each other's acknowledgements [default: none: the sender
    /// groups receivers by the losses it observes, starting from the /24
    /// (IPv6: /64) of the address it sees].
    #[arg(long)]
    network: Option<String>,
    /// Give up if no session is heard within this many seconds [default:
    /// wait forever]; with --daemon, for each next session: none within
    /// it stops the daemon with an error.
    #[arg(long)]
    wait: Option<f64>,
    /// Give up when nothing comes from the sender for this many seconds.
    #[arg(long, default_value_t = 30.0)]
    sender_timeout: f64,
    /// Print one JSON object on stdout for the session (with --daemon, one
    /// line per session) instead of the report on stderr: `ok`, `error`
    /// (null or why), `name`, `sender`, `session` (its id, hex), `client`
    /// (ours, hex), `stored` (the path written; null unless ok), `files`
    /// (a bundle's: `path`, `type`, `bytes`; else null), `bytes`,
    /// `seconds` (since the session was heard), `goodput_bytes_per_second`, `blake3`, `encrypted`, and
    /// the packet counts `data_packets`, `repairs_received`,
    /// `fec_recovered`, `parity_received`, `duplicates`, `acks_sent`,
    /// `acks_suppressed`, `nacks_sent`, `nacks_suppressed`,
    /// `repair_requests`, `dropped_malformed`, `dropped_beyond_limit`,
    /// and `lagged` / `held_after_stall` (feedback found late: the process
    /// was not running, spec §16.4, §16.7); `check_s` and `check_reread`:
    /// how long the whole-file check took and whether it read the file
    /// again (null before a check).
    #[arg(long, conflicts_with = "stdout")]
    pub json: bool,
}

/// `clap` value parser for --receivers: a whole number, at least 1.
fn receivers_arg(text: &str) -> Result<usize, String> {
    match text.trim().parse::<i64>() {
        Ok(n) if n >= 1 => usize::try_from(n).map_err(|e| e.to_string()),
        Ok(n) => Err(format!("{n} is out of range: at least 1 receiver")),
        Err(_) => Err(format!("{text:?} is not a whole number of receivers, e.g. --receivers 3")),
    }
}

fn id_arg(s: &str) -> Result<u32, String> {
    hosts::parse_id(s)
        .ok_or_else(|| format!("{s:?} is not a client id: 8 hex digits other than 00000000, e.g. 0a1b2c3d"))
}

pub fn run(cmd: McastCommand) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        crate::net::lifecycle::install();
        match cmd {
            McastCommand::Send(a) => send::send(a).await,
            McastCommand::Recv(a) => recv::recv(a).await,
        }
    })
}

/// Resolves with INTERRUPTED on the first SIGINT or SIGTERM: the session
/// then ends with that code, told to the other side at once (spec §16.7).
async fn on_signal() -> manyfold::ErrorCode {
    crate::net::lifecycle::interrupted().await;
    manyfold::ErrorCode::INTERRUPTED
}

/// The account of an interrupted session, once the other side was told.
fn interrupted(what: &str) -> Result<()> {
    let by = crate::net::lifecycle::signal().map_or("a signal", |s| s.name());
    Err(crate::net::lifecycle::account(format!("interrupted by {by}; {what}")))
}

fn secs(s: f64, what: &str) -> Result<Duration> {
    if !s.is_finite() || s < 0.0 {
        bail!("{what} must be a non-negative number of seconds, not {s}");
    }
    Ok(Duration::from_secs_f64(s))
}
