//! Where the CLI meets the manyfold library: the networking flags every
//! networking subcommand shares (`--loss`, `--delay`, `--trace`, `--qlog`,
//! `--key-file`, `--peers-file`), the [`Config`] built from them, and
//! binding/connecting with errors that say what went wrong.

mod failure;
pub mod lifecycle;
mod server;

pub use failure::{close_reason, explain, is_own_interruption, left, Role};
pub use server::{listen, PeerLog};

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

pub use manyfold::{Config, Connection, Endpoint, FaultConfig, RecvHalf, SendHalf};

/// Flags shared by the networking subcommands.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Network options (every networking command)")]
pub struct NetArgs {
    /// Emulated packet loss in percent (0 ≤ P < 100), applied independently
    /// to every datagram this process sends and to every one it receives.
    #[arg(long, value_name = "P", default_value_t = 0.0, value_parser = loss_arg, allow_negative_numbers = true)]
    pub loss: f64,

    /// Emulated one-way delay in milliseconds added to every datagram this
    /// process sends.
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = delay_arg, allow_negative_numbers = true)]
    pub delay: u64,

    /// Print every packet sent and received (time, flags, seq, ack, length)
    /// and every connection state transition to stderr.
    #[arg(long)]
    pub trace: bool,

    /// Write a qlog trace of every connection into directory DIR (created
    /// if missing): client-<id>.sqlog / server-<id>.sqlog, with packets
    /// sent, received and lost, acks, RTT samples, congestion window and
    /// state changes. Read one with `manyfold trace FILE [--plot OUT.png]`.
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<PathBuf>,

    /// Congestion controller for this process's connections: newreno,
    /// cubic or bbr (model-based: random loss does not slow it down).
    #[arg(long, value_name = "NAME", default_value = "bbr")]
    pub cc: manyfold_proto::CongestionAlgorithm,

    /// Fix every datagram at BYTES, the 24-byte header included
    /// (576–65507), instead of discovering the path's size. Without it a
    /// connection starts at 1452 (what a 1500-byte path carries over IPv4
    /// and IPv6) and a bulk transfer probes for more: 65507 on loopback,
    /// 8972 on 9000-byte jumbo frames (spec §3.7). Use it on paths that
    /// lose large datagrams silently, e.g. 1232 for IPv6's minimum MTU.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(576..=65507))]
    pub max_datagram: Option<u16>,

    /// Encrypt and authenticate every connection (spec §19: Noise XX, then
    /// ChaCha20-Poly1305 on every packet) with the keys in FILE; peers
    /// without encryption are refused, both ways. FILE holds a
    /// `private-key HEX` line (64 hex digits; `manyfold keygen` writes
    /// one), a `psk HEX` line (a key every peer holds too), or both; `#`
    /// starts a comment. It must not be readable by others (chmod 600).
    /// Without it: the papers' plain protocol, readable on the path.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// Accept only peers whose public key is listed in FILE: one key (64
    /// hex digits, as `manyfold pubkey` prints it) per line, optionally
    /// followed by a name; `#` comments. Needs --key-file with a
    /// private-key line: the peers check this host's key the same way.
    #[arg(long, value_name = "FILE")]
    pub peers_file: Option<PathBuf>,

    /// Print one JSON object per transfer (or session) on stdout instead
    /// of the text report, and nothing else there (fields in the README).
    #[arg(long)]
    pub json: bool,

    /// Give up on a peer that acknowledges nothing for this long while
    /// data is outstanding ("the receiver stopped answering after N s"),
    /// or that sends nothing at all for this long ("the sender went
    /// silent"); until then the progress bar counts the seconds without an
    /// answer. With several receivers, one that sends nothing for this
    /// long while it owes acknowledgements is dropped. A peer whose
    /// process is gone is named at once (its host's ICMP error answers the
    /// keep-alive each side sends after a second of quiet).
    #[arg(long, value_name = "SECONDS", default_value_t = 15.0, value_parser = seconds_arg, allow_negative_numbers = true)]
    pub peer_timeout: f64,
}

impl NetArgs {
    /// The library configuration these flags ask for. The endpoint seeds
    /// its secrets from the OS (seed 0); the fault injector gets a fresh
    /// random seed per run. Fails if a key or peers file cannot be used.
    pub fn config(&self) -> Result<Config> {
        let stall_timeout = self.stall_timeout();
        failure::set_stall_timeout(stall_timeout);
        let security = crate::keys::security_config(self.key_file.as_deref(), self.peers_file.as_deref())?;
        Ok(Config {
            faults: FaultConfig {
                seed: random_u64(),
                // manyfold applies `loss` to sent and to received datagrams alike.
                loss: self.loss / 100.0,
                delay: Duration::from_millis(self.delay),
                ..FaultConfig::default()
            },
            trace: self.trace || VERBOSE.load(std::sync::atomic::Ordering::Relaxed) >= 2,
            qlog_dir: self.qlog.clone(),
            endpoint: manyfold_proto::EndpointConfig {
                connection: manyfold_proto::ConnectionConfig {
                    congestion: self.cc,
                    max_datagram: self.max_datagram.unwrap_or(manyfold_proto::ConnectionConfig::default().max_datagram),
                    path_mtu_discovery: match self.max_datagram {
                        Some(_) => None,
                        None => manyfold_proto::ConnectionConfig::default().path_mtu_discovery,
                    },
                    stall_timeout: Some(stall_timeout),
                    // A peer silent this long is given up, on the receiving
                    // side too (a stopped host sends no ICMP); a keep-alive
                    // later than the stall timeout, so that a sender with
                    // data outstanding says "stopped answering" first.
                    idle_timeout: Some(stall_timeout + KEEPALIVE),
                    // A side that only answers (a receiver) sends a
                    // keep-alive after a second of quiet: a peer killed
                    // outright sends nothing, but the keep-alive draws its
                    // host's ICMP error, so it is named gone at once (spec
                    // §6.7) instead of after the library's 15 s.
                    keepalive_interval: Some(KEEPALIVE.min(stall_timeout / 3)),
                    ..Default::default()
                },
                security,
                ..Default::default()
            },
        })
    }
}

impl Default for NetArgs {
    /// What the flags give when none is on the command line.
    fn default() -> Self {
        NetArgs {
            loss: 0.0,
            delay: 0,
            trace: false,
            qlog: None,
            cc: manyfold_proto::CongestionAlgorithm::default(),
            max_datagram: None,
            key_file: None,
            peers_file: None,
            peer_timeout: 15.0,
            json: false,
        }
    }
}

impl NetArgs {
    /// `--peer-timeout` as a duration.
    pub fn stall_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.peer_timeout)
    }
}

/// The longest a command-line endpoint stays quiet towards a peer.
const KEEPALIVE: Duration = Duration::from_secs(1);

/// `clap` value parser for `--delay`: whole milliseconds, at most a minute.
pub fn delay_arg(text: &str) -> Result<u64, String> {
    match text.trim().parse::<i64>() {
        Ok(ms) if (0..=60_000).contains(&ms) => Ok(ms as u64),
        Ok(ms) => Err(format!("{ms} ms is out of range: the delay is 0 to 60000 milliseconds")),
        Err(_) => Err(format!("{text:?} is not a whole number of milliseconds, e.g. --delay 20")),
    }
}

/// `clap` value parser for durations in seconds: more than 0, at most a day.
pub fn seconds_arg(text: &str) -> Result<f64, String> {
    match text.trim_end_matches('s').parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(s),
        Ok(s) => Err(format!("{s} s is out of range (more than 0, at most a day)")),
        Err(_) => Err(format!("{text:?} is not a number of seconds")),
    }
}

/// The mode of an endpoint built from `config`, as banners give it:
/// `encrypted: PSK + 3 known peers` or `plain`.
pub fn mode(config: &Config) -> String {
    crate::keys::describe(config.endpoint.security.as_ref())
}

/// `clap` value parser for `--loss`: a percentage in [0, 100).
pub fn loss_arg(text: &str) -> Result<f64, String> {
    let p: f64 = text
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{text:?} is not a number; give the loss in percent, e.g. --loss 5"))?;
    if !(0.0..100.0).contains(&p) {
        return Err(format!("loss must be at least 0 and below 100 percent, got {text}"));
    }
    Ok(p)
}

/// `-v` given how many times: at 2, the library traces every packet.
static VERBOSE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// How many times `-v` was given.
pub fn verbose() -> u8 {
    VERBOSE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Installs the log on stderr: `--trace` or `-vv`, every packet and state
/// transition of the library; `-v`, state transitions and what the library
/// reports at info level (ICMP errors, migrations, shutdowns); otherwise
/// `RUST_LOG` (e.g. `RUST_LOG=manyfold=debug`) if set, else nothing.
pub fn init_tracing(trace: bool, verbose: u8) {
    use tracing_subscriber::EnvFilter;
    VERBOSE.store(verbose, std::sync::atomic::Ordering::Relaxed);
    let packets = trace || verbose >= 2;
    let filter = if packets {
        EnvFilter::new("manyfold=debug,manyfold::packet=debug,manyfold::state=debug,manyfold::recovery=debug")
    } else if verbose == 1 {
        EnvFilter::new("manyfold=info,manyfold::state=debug")
    } else {
        match EnvFilter::try_from_default_env() {
            Ok(filter) => filter,
            Err(_) => return,
        }
    };
    if packets {
        eprintln!("{TRACE_LEGEND}");
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        // Seconds since the process started, as the packet lines' own
        // milliseconds count: one timeline for both kinds of line.
        .with_timer(tracing_subscriber::fmt::time::uptime())
        .init();
}

/// What the lines of `--trace` (and `-vv`) say, printed once before them.
pub const TRACE_LEGEND: &str = "\
trace legend: each line starts with seconds since this process started; a packet line then gives
  its own time in ms, the direction (-> sent, <- received, -x dropped before sending and x- after
  receiving by --loss), the peer, the header's flags, conn (the id of the connection the packet is
  addressed to, 8 hex digits: the peer's own id on sent packets, ours on received ones; 00000000 on
  a first SYN), seq, ack, wnd (advertised window, bytes), len (datagram bytes) and its chunks:
  s3@1024+1400/BE is 1400 bytes of stream 3 at offset 1024 (B begin, E end, U unordered, F fin),
  reset3, stop3, credit3<=N, abandon3[a,b), pad. A state line gives conn (this end's own id, the
  same 8 hex digits) and the state it moves from and to. A recovery line (manyfold::recovery) gives
  conn, the packets declared lost or the RTO's backoff, cwnd (the congestion window, bytes) and
  in_flight (bytes sent and not yet acknowledged).";

/// Binds an endpoint, naming the address when that fails (address in use,
/// address not available, ...).
pub async fn bind(addr: SocketAddr, config: Config) -> Result<Endpoint> {
    match Endpoint::bind(addr, config).await {
        Ok(endpoint) => {
            lifecycle::register(&endpoint);
            Ok(endpoint)
        }
        // The library's message may already name the address.
        Err(e) if e.to_string().contains(&addr.to_string()) => Err(e.into()),
        Err(e) => Err(e).with_context(|| format!("cannot bind a UDP socket to {addr}")),
    }
}

/// Binds an ephemeral endpoint of the same address family as `peer` and
/// connects to `peer`.
pub async fn connect(peer: SocketAddr, config: Config) -> Result<(Endpoint, Connection)> {
    let endpoint = bind(unspecified_for(peer), config).await?;
    let conn = endpoint.connect(peer).await.map_err(|e| connect_error(e, peer))?;
    Ok((endpoint, conn))
}

/// A failed connect, with the CLI's flag named where the library can speak
/// only of what is wrong (spec §19.2: one end protects, the other not).
fn connect_error(e: manyfold::ConnectError, peer: SocketAddr) -> anyhow::Error {
    let what = format!("cannot connect to {peer}");
    match e.close_reason() {
        Some(manyfold::CloseReason::ProtectionMismatch) => anyhow::Error::new(e)
            .context(format!("{what}: encryption mismatch: one end gave --key-file and the other did not")),
        // The library's error names the address already.
        _ if matches!(e, manyfold::ConnectError::InvalidAddress { .. }) => anyhow::Error::new(e),
        _ => anyhow::Error::new(e).context(what),
    }
}

/// The wildcard address of `peer`'s family, any port: where a client binds.
pub fn unspecified_for(peer: SocketAddr) -> SocketAddr {
    if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    }
}

/// Accepts connections in a task of its own, so that no accept is ever
/// cancelled by a caller's `select!`: they arrive on the returned channel.
/// Abort the task when done.
pub fn spawn_acceptor(
    endpoint: std::sync::Arc<Endpoint>,
) -> (tokio::sync::mpsc::Receiver<Connection>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Connection>(1);
    let task = tokio::spawn(async move {
        while let Some(conn) = endpoint.accept().await {
            if tx.send(conn).await.is_err() {
                break;
            }
        }
    });
    (rx, task)
}

/// The acceptor's channel closed: either our own interruption aborted the
/// endpoint (stop accepting and let the interruption's branch end the
/// loop) or the endpoint failed.
pub fn accepting_ended(accepting: &mut bool) -> Result<()> {
    *accepting = false;
    match lifecycle::signal() {
        Some(_) => Ok(()),
        None => Err(anyhow::anyhow!("the endpoint stopped accepting connections")),
    }
}

/// Resolves `host:port` (names allowed) to one socket address.
pub async fn resolve(text: &str) -> Result<SocketAddr> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    // A HOST:PORT that does not resolve is a name problem; anything else is
    // not an address at all.
    let well_formed = text.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    let mut addrs = tokio::net::lookup_host(text).await.with_context(|| {
        if well_formed {
            format!("cannot resolve the host name in {text:?}")
        } else {
            format!("{text:?} is not an address: expected HOST:PORT, e.g. 127.0.0.1:7008")
        }
    })?;
    addrs.next().with_context(|| format!("{text:?} resolved to no address"))
}

/// Resolves when the user interrupts (Ctrl-C) or the system asks the
/// process to stop (SIGTERM), once every connection was aborted and the
/// peers told ([`lifecycle`]), so commands can clean up before exiting.
pub async fn interrupted() -> lifecycle::Signal {
    lifecycle::interrupted().await
}

/// 64 random bits from the operating system.
pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // A machine without an OS RNG still gets distinct seeds per run.
    if getrandom::getrandom(&mut bytes).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return t.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32);
    }
    u64::from_le_bytes(bytes)
}

/// Reads the next `n` bytes of `conn`'s byte stream into `parts` (cleared
/// first) as the buffers they arrived in: large pieces are slices of their
/// datagrams, not copied (`read_chunk`, spec §7.2). The peer's end before
/// `n` bytes is an `UnexpectedEof` error.
pub async fn read_parts(conn: &mut Connection, n: usize, parts: &mut Vec<bytes::Bytes>) -> std::io::Result<()> {
    parts.clear();
    let mut left = n;
    while left > 0 {
        match conn.read_chunk(left).await? {
            Some(part) => {
                left -= part.len();
                parts.push(part);
            }
            None => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the stream ended {left} bytes short of a {n}-byte piece"),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_a_percentage_below_100() {
        assert_eq!(loss_arg("0").unwrap(), 0.0);
        assert_eq!(loss_arg("5").unwrap(), 5.0);
        assert_eq!(loss_arg("2.5%").unwrap(), 2.5);
        assert_eq!(loss_arg("99.9").unwrap(), 99.9);
        assert!(loss_arg("100").unwrap_err().contains("below 100"));
        assert!(loss_arg("-1").unwrap_err().contains("at least 0"));
        assert!(loss_arg("NaN").is_err());
        assert!(loss_arg("five").unwrap_err().contains("not a number"));
    }

    #[test]
    fn delay_is_whole_milliseconds_up_to_a_minute() {
        assert_eq!(delay_arg("20").unwrap(), 20);
        assert!(delay_arg("-5").unwrap_err().contains("out of range"));
        assert!(delay_arg("soon").unwrap_err().contains("milliseconds"));
    }

    #[test]
    fn flags_become_fault_config() {
        let args = NetArgs { loss: 5.0, delay: 20, trace: true, peer_timeout: 3.0, ..NetArgs::default() };
        let config = args.config().unwrap();
        assert!(config.endpoint.security.is_none());
        assert_eq!(config.faults.effective_send_loss(), 0.05);
        assert_eq!(config.faults.effective_recv_loss(), 0.05);
        assert_eq!(config.faults.delay, Duration::from_millis(20));
        assert!(config.trace);
        assert_eq!(config.endpoint.connection.stall_timeout, Some(Duration::from_secs(3)));
    }
}
