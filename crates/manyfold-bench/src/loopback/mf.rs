//! The manyfold rows: `mf-send` / `mf-recv`, two processes on the
//! `manyfold` library (async API, multi-thread tokio runtime as the CLI
//! uses; one row on a current-thread runtime). The sender writes the
//! stream, closes (FIN, complete when the peer acknowledged everything)
//! and waits for the receiver's "ok", which comes only after the
//! receiver's BLAKE3 matched.
//!
//! Optionally each side's driver drops a share of the datagrams it sends
//! (`manyfold::FaultConfig::send_loss`, the fault injection `manyfold send
//! --loss` uses), so every datagram in either direction is dropped once
//! with that probability; `loss-table` uses it. The sender prints its
//! connection's counters on stdout ([`STATS_PREFIX`]) for the caller.
//!
//! With `--encrypt` both sides hold the lab's pre-shared key ([`LAB_PSK`]):
//! the connection runs Noise XXpsk3 in its handshake and then protects
//! every packet with ChaCha20-Poly1305 (spec §19, issue 10); each side
//! checks that its connection really is encrypted before it counts.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use manyfold_proto::CongestionAlgorithm;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::data::{Check, ChunkPool, Pattern, CHUNK};

/// Every controller the lab runs a row for: all of them
/// (`CongestionAlgorithm::ALL`), so a new controller gets its row.
pub fn controllers() -> impl Iterator<Item = CongestionAlgorithm> {
    CongestionAlgorithm::ALL.into_iter()
}

fn controller(name: &str) -> Result<CongestionAlgorithm> {
    name.parse().map_err(anyhow::Error::msg)
}

/// Settings both sides of a manyfold row share.
#[derive(clap::Args, Debug, Clone)]
pub struct MfOpts {
    /// Congestion controller (`CongestionAlgorithm::name`).
    #[arg(long, default_value = "newreno")]
    pub cc: String,
    /// ConnectionConfig::send_buffer in bytes (default: the library's).
    #[arg(long)]
    pub send_buffer: Option<usize>,
    /// ConnectionConfig::recv_buffer in bytes (default: the library's).
    #[arg(long)]
    pub recv_buffer: Option<usize>,
    /// Percent of the datagrams this side sends that its driver drops
    /// (FaultConfig::send_loss); 0 = no fault injection.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Seed of this side's fault injector.
    #[arg(long, default_value_t = 1)]
    pub fault_seed: u64,
    /// ConnectionConfig::connect_timeout in seconds (default: the library's).
    #[arg(long)]
    pub connect_timeout: Option<u64>,
    /// Protect the connection (spec §19): Noise XXpsk3 with [`LAB_PSK`],
    /// then ChaCha20-Poly1305 on every packet.
    #[arg(long)]
    pub encrypt: bool,
    /// Fix every datagram at this size, path MTU discovery off (spec §3.7).
    #[arg(long)]
    pub max_datagram: Option<u16>,
    /// Run on a one-thread (current-thread) tokio runtime instead of the
    /// multi-thread one.
    #[arg(long)]
    pub one_thread: bool,
}

/// The pre-shared key of the lab's encrypted rows (both sides hold it; a
/// fresh static key per connection, no list of known peers).
pub const LAB_PSK: [u8; 32] = [0x6d; 32];

/// `config` with protection on (spec §19): the lab's pre-shared key.
pub(crate) fn encrypt(config: &mut manyfold::Config) {
    config.endpoint.security = Some(manyfold::SecurityConfig { psk: Some(LAB_PSK), ..Default::default() });
}

/// Fails unless `conn`'s protection is what the row asked for: an
/// "encrypted" figure from a plain connection would be a wrong number.
pub(crate) fn check_protection(conn: &manyfold::Connection, want_encrypted: bool) -> Result<()> {
    let encrypted = matches!(conn.protection(), manyfold::Protection::Encrypted { .. });
    if encrypted != want_encrypted {
        bail!(
            "the connection is {} (asked for {})",
            conn.protection(),
            if want_encrypted { "encrypted" } else { "plain" }
        );
    }
    Ok(())
}

/// The library's default configuration with congestion controller `cc`.
pub(crate) fn config_for(cc: &str) -> Result<manyfold::Config> {
    let mut config = manyfold::Config::default();
    config.endpoint.connection.congestion = controller(cc)?;
    Ok(config)
}

/// Starts the line on which `mf-send` reports its connection's counters.
pub const STATS_PREFIX: &str = "mf-stats";

impl MfOpts {
    fn runtime(&self) -> Result<tokio::runtime::Runtime> {
        crate::runtime_for(self.one_thread)
    }

    fn config(&self) -> Result<manyfold::Config> {
        let mut config = config_for(&self.cc)?;
        let conn = &mut config.endpoint.connection;
        if let Some(b) = self.send_buffer {
            conn.send_buffer = b;
        }
        if let Some(b) = self.recv_buffer {
            conn.recv_buffer = b;
        }
        if let Some(s) = self.connect_timeout {
            conn.connect_timeout = Duration::from_secs(s);
        }
        if let Some(d) = self.max_datagram {
            conn.max_datagram = d;
            conn.path_mtu_discovery = None;
        }
        if self.encrypt {
            encrypt(&mut config);
        }
        if !(0.0..100.0).contains(&self.loss) {
            bail!("--loss is a percentage in [0, 100), got {}", self.loss);
        }
        if self.loss > 0.0 {
            // Dropped when sent, never again when received: one chance of
            // loss per datagram and direction, as paper 04's RUSP_ATTR_DROP.
            config.faults = manyfold::FaultConfig {
                seed: self.fault_seed,
                send_loss: Some(self.loss / 100.0),
                ..Default::default()
            };
        }
        Ok(config)
    }
}

/// Connects to the receiver. Its socket is bound before it listens, so a
/// refusal in between is retried (for at most 2 s).
pub(crate) async fn connect_mf(endpoint: &manyfold::Endpoint, to: SocketAddr) -> Result<manyfold::Connection> {
    let mut tries = 0;
    loop {
        match endpoint.connect(to).await {
            Ok(c) => return Ok(c),
            Err(manyfold::ConnectError::Refused) if tries < 100 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("connecting to {to}")),
        }
    }
}

pub fn send(to: SocketAddr, opts: &MfOpts, pattern: &Pattern) -> Result<()> {
    let (opts, pattern) = (opts.clone(), pattern.clone());
    crate::run_app(opts.runtime()?, async move {
        let opts = &opts;
        let pattern = &pattern;
        let endpoint = manyfold::Endpoint::bind("127.0.0.1:0".parse()?, opts.config()?).await?;
        let mut conn = connect_mf(&endpoint, to).await?;
        check_protection(&conn, opts.encrypt)?;
        // Each chunk is handed over without a copy, as quinn's row does.
        let mut pool = ChunkPool::default();
        for i in 0..pattern.chunks() {
            conn.write_chunk(pool.chunk(pattern, i)).await?;
        }
        conn.close().await.context("closing")?;
        let mut reply = Vec::new();
        conn.read_to_end(&mut reply).await.context("waiting for the receiver's verdict")?;
        if reply != b"ok" {
            bail!("receiver did not confirm");
        }
        println!("{}", super::rows::MfStats::from_conn(&conn.stats()).line());
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown_within(Duration::from_secs(1))).await;
        Ok(())
    })
}

pub fn recv(listen: SocketAddr, opts: &MfOpts, len: u64, hash: &str) -> Result<()> {
    let (opts, hash) = (opts.clone(), hash.to_string());
    crate::run_app(opts.runtime()?, async move {
        let opts = &opts;
        let hash = hash.as_str();
        let endpoint = manyfold::Endpoint::bind(listen, opts.config()?).await?;
        endpoint.listen();
        let mut conn = endpoint.accept().await.context("endpoint closed")?;
        check_protection(&conn, opts.encrypt)?;
        let mut check = Check::default();
        // `read` into one 1 MiB buffer, as an application reading a file's
        // worth at a time would: `read_chunk` hands over at most one
        // datagram's payload per call, and its per-call cost (a lock, an
        // engine call) made this receiver 20% slower (0.55 against 0.45 s
        // of CPU per GB). `read_chunks` (32 chunks a call, uncopied) took
        // as much CPU as this: the copy it saves moved into the hash,
        // which then reads the datagrams' memory cold (RESULTS §40).
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = conn.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            check.update(&buf[..n]);
        }
        check.finish(len, hash)?;
        conn.write_all(b"ok").await?;
        // The sender judges the transfer: it succeeds only once it has read
        // this "ok", and then exits. If its acknowledgement of our FIN is
        // lost, nobody is left to repeat it (its endpoint, and so its
        // TIME-WAIT, are gone) and `close` would wait for the idle timeout.
        // So wait a bounded time, long enough to deliver the "ok" through
        // heavy loss, and then leave the verdict to the sender's exit status.
        match tokio::time::timeout(VERDICT_LINGER, conn.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("note: closing after the verdict: {e} (the sender's exit status decides)"),
            Err(_) => eprintln!(
                "note: the verdict's close was not acknowledged within {} s (the sender's exit status decides)",
                VERDICT_LINGER.as_secs()
            ),
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown_within(Duration::from_secs(1))).await;
        Ok(())
    })
}

/// How long the receiver waits for its "ok" and FIN to be acknowledged: at
/// 30% loss each way with the RTO doubling from 20 ms, ten seconds hold
/// about nine attempts, so a verdict is lost with odds of about 0.5^9.
const VERDICT_LINGER: Duration = Duration::from_secs(10);
