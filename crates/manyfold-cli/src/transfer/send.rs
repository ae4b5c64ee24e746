//! The sending side of a file transfer (protocol in [`super`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::ProgressBar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::wire::{Reply, Request, MAX_NAME};
use super::CHUNK;
use crate::keys;
use crate::net::{self, Connection, NetArgs, Role, SendHalf};
use crate::pace::Pacer;
use crate::report::{self, Direction, Report};

#[derive(Args, Debug)]
pub struct SendArgs {
    /// File to send.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Receiver(s) (`manyfold recv`), HOST:PORT; several, comma-separated,
    /// send one copy to each over one group with a progress bar and a
    /// report line per receiver.
    #[arg(long, value_name = "ADDR[,ADDR...]", value_delimiter = ',', required = true)]
    pub to: Vec<String>,

    /// With several receivers: who must acknowledge each block. `all`:
    /// every receiver stores the whole file. `any`, `at-least=P`,
    /// `subset=K/P`: the file's blocks are spread over the receivers
    /// (each block to every receiver, or to the K least loaded) and
    /// delivered once 1 or P of them have it; each stores the verified
    /// blocks it got as NAME.shard.
    #[arg(long, value_name = "MODE", default_value = "all")]
    pub mode: manyfold::Mode,

    /// With several receivers: fail unless at least this many answer the
    /// handshake [default: all of them].
    #[arg(long, value_name = "N")]
    pub min_receivers: Option<usize>,

    /// With several receivers: drop a receiver whose rate stays below this
    /// fraction of the group's (0 < F < 1) for --evict-after, instead of
    /// keeping everyone at its pace. Off by default.
    #[arg(long, value_name = "F", value_parser = fraction_arg)]
    pub evict_below: Option<f64>,

    /// How long a receiver may stay below --evict-below before it is dropped.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, value_parser = net::seconds_arg)]
    pub evict_after: f64,

    #[command(flatten)]
    pub rate: crate::pace::RateArgs,

    /// Name to store the file under on the receiver [default: FILE's base
    /// name]. The receiver refuses anything but a plain base name.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    #[command(flatten)]
    pub net: NetArgs,
}

pub async fn run(args: SendArgs) -> Result<()> {
    // The file first: a missing file is reported without touching the network.
    let source = Source::open(&args.file).await?.paced(args.rate.rate);
    let name = match &args.name {
        Some(name) => name.clone(),
        None => default_name(&args.file)?,
    };
    if args.to.len() > 1 || args.mode != manyfold::Mode::All {
        return run_group(args, source, name).await;
    }
    let peer = net::resolve(&args.to[0]).await?;
    let (endpoint, conn) = net::connect(peer, args.net.config()?).await?;
    let multi = report::multi_progress();
    let bar = report::transfer_bar(&multi, source.size, "sending");
    let result = send_file(conn, source, &name, &bar).await;
    bar.finish_and_clear();
    let outcome = match result {
        Ok(report) => {
            report::emit(&report, || report.to_json());
            Ok(())
        }
        Err(e) => Err(e),
    };
    // Bounded: a peer that vanished must not keep us here.
    let _ = tokio::time::timeout(Duration::from_secs(5), endpoint.shutdown()).await;
    outcome
}

/// `send --to A,B,C`: one group, a bar and a report line per receiver.
async fn run_group(args: SendArgs, source: Source, name: String) -> Result<()> {
    let mut addrs = Vec::with_capacity(args.to.len());
    for to in &args.to {
        let addr = net::resolve(to).await?;
        if addrs.contains(&addr) {
            bail!("{to} is named twice in --to");
        }
        addrs.push(addr);
    }
    // All: every receiver by default. Spread: as many as the mode needs.
    let needed = match args.mode {
        manyfold::Mode::All => addrs.len(),
        manyfold::Mode::Any => 1,
        manyfold::Mode::AtLeast(p) | manyfold::Mode::Subset { p, .. } => usize::from(p),
    };
    if needed > addrs.len() {
        bail!("mode {} needs at least {needed} receivers, --to names {}", args.mode, addrs.len());
    }
    let min = args.min_receivers.unwrap_or(needed);
    if min == 0 || min > addrs.len() {
        bail!("--min-receivers must be between 1 and the number of receivers ({}), got {min}", addrs.len());
    }
    let eviction = args
        .evict_below
        .map(|min_fraction| manyfold::Eviction { min_fraction, after: Duration::from_secs_f64(args.evict_after) });
    let config = manyfold::GroupConfig {
        mode: args.mode,
        min_peers: min,
        eviction,
        peer_timeout: args.net.stall_timeout(),
        ..Default::default()
    };
    let net_config = args.net.config()?;
    let security = keys::endpoint_protection(net_config.endpoint.security.as_ref());
    let endpoint = net::bind(net::unspecified_for(addrs[0]), net_config).await?;
    let multi = report::multi_progress();
    let result = super::send_to_group(&endpoint, &addrs, config, source, &name, &multi, security).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), endpoint.shutdown()).await;
    let report = result?;
    report::emit(&report, || report.to_json());
    if !report.succeeded() {
        match report.spread {
            None => bail!("{name} reached {} of {} receivers", report.saved(), addrs.len()),
            Some(_) => bail!("{name} was not spread as mode {} asks (see above)", args.mode),
        }
    }
    Ok(())
}

fn fraction_arg(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if f > 0.0 && f < 1.0 => Ok(f),
        Ok(f) => Err(format!("{f} is not a fraction between 0 and 1 (exclusive)")),
        Err(_) => Err(format!("{text:?} is not a number")),
    }
}

/// A file opened for sending, with its size taken at open time.
#[derive(Debug)]
pub struct Source {
    path: PathBuf,
    file: tokio::fs::File,
    size: u64,
    /// Reads are paced to `--rate`.
    pacer: Pacer,
}

impl Source {
    pub async fn open(path: &Path) -> Result<Source> {
        let file = tokio::fs::File::open(path).await.with_context(|| format!("cannot open {}", path.display()))?;
        let meta = file.metadata().await.with_context(|| format!("cannot read the metadata of {}", path.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        Ok(Source { path: path.to_path_buf(), file, size: meta.len(), pacer: Pacer::new(None) })
    }

    /// The same source read no faster than `rate` bytes per second.
    pub fn paced(self, rate: Option<u64>) -> Source {
        Source { pacer: Pacer::new(rate), ..self }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fills `buf` from the file; a file that shrank meanwhile is an error.
    pub async fn read_exact_into(&mut self, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact(buf)
            .await
            .with_context(|| format!("cannot read {} (did it shrink while being sent?)", self.path.display()))?;
        self.pacer.wait(buf.len()).await;
        Ok(())
    }
}

/// The base name of `path`, as the default name on the receiver.
fn default_name(path: &Path) -> Result<String> {
    let name =
        path.file_name().with_context(|| format!("{} has no file name; give one with --name", path.display()))?;
    let name =
        name.to_str().with_context(|| format!("{} is not valid UTF-8; give a name with --name", path.display()))?;
    Ok(name.to_string())
}

/// Runs the sender's half of the protocol on an established connection and
/// closes it. Fails if the receiver refuses or fails, or the connection breaks.
///
/// The bar follows what the receiver acknowledged, not what the connection
/// buffered: bytes written minus the connection's unacknowledged bytes.
pub async fn send_file(conn: Connection, mut source: Source, name: &str, bar: &ProgressBar) -> Result<Report> {
    if name.is_empty() || name.len() > MAX_NAME {
        bail!("the name must be 1 to {MAX_NAME} bytes long, got {} bytes", name.len());
    }
    let peer = conn.peer_addr();
    let (mut tx, mut rx) = conn.split();
    let start = Instant::now();
    Request { name: name.to_string(), size: source.size, block: None }
        .write(&mut tx)
        .await
        .context("connection lost while sending the request")?;
    match Reply::read(&mut rx).await.context("connection lost while waiting for the receiver's answer")? {
        Reply::Ok(_) => {}
        Reply::Error(why) => bail!("receiver refused the transfer: {why}"),
    }

    let hash = stream_data(&mut source, &mut tx, bar).await?;
    tx.write_all(hash.as_bytes()).await.context("connection lost while sending the hash")?;
    tx.flush().await.context("connection lost while sending the hash")?;
    // Nothing more to send: our FIN travels now, while the receiver checks
    // the file, so that the close after its verdict is usually already done.
    // (Closing only after the verdict made the exit wait out lost FINs and
    // acks under loss: seconds, with the 5 s bounds below.)
    tx.finish().context("connection lost while sending the hash")?;

    // Keep the bar moving with the acknowledgements until the verdict.
    let reply = {
        let read = Reply::read(&mut rx);
        tokio::pin!(read);
        let mut tick = tokio::time::interval(BAR_TICK);
        loop {
            tokio::select! {
                reply = &mut read => break reply,
                _ = tick.tick() => show_acked(bar, source.size, &tx),
            }
        }
    };
    match reply.context("connection lost before the receiver confirmed the file")? {
        Reply::Ok(_) => {}
        Reply::Error(why) => bail!("receiver did not save the file: {why}"),
    }
    bar.set_position(source.size);
    let elapsed = start.elapsed();
    let stats = tx.stats();
    // Now, not at connect: the peer's key is proven by then for sure.
    let security = tx.protection();
    // The receiver confirmed; a failing close no longer changes the outcome.
    let _ = tokio::time::timeout(Duration::from_secs(5), tx.close()).await;
    Ok(Report {
        direction: Direction::Sent,
        name: name.to_string(),
        peer,
        bytes: source.size,
        elapsed,
        stats,
        hash,
        security,
    })
}

/// How often the bar is brought up to date while waiting on the receiver.
const BAR_TICK: Duration = Duration::from_millis(100);

/// Shows on `bar` the data bytes the receiver has acknowledged, given that
/// `written` were handed to the connection (the request and trailer are
/// noise here), or how long it has not answered.
fn show_acked(bar: &ProgressBar, written: u64, tx: &SendHalf) {
    let stats = tx.stats();
    report::show_sending(bar, written.saturating_sub(stats.unacked_bytes), &stats, Role::Receiver);
}

/// Copies exactly `source.size` bytes to `out`, hashing as it goes.
async fn stream_data(source: &mut Source, out: &mut SendHalf, bar: &ProgressBar) -> Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut left = source.size;
    while left > 0 {
        let want = left.min(source.pacer.piece(CHUNK) as u64) as usize;
        let n = source
            .file
            .read(&mut buf[..want])
            .await
            .with_context(|| format!("cannot read {}", source.path.display()))?;
        if n == 0 {
            bail!(
                "{} shrank while being sent ({} of {} bytes read)",
                source.path.display(),
                source.size - left,
                source.size
            );
        }
        hasher.update(&buf[..n]);
        source.pacer.wait(n).await;
        // Written piecewise with a deadline, so that the bar keeps telling
        // while the receiver is silent and the window is full (a write
        // still pending has written nothing: dropping it is safe).
        let mut done = 0;
        while done < n {
            if let Ok(written) = tokio::time::timeout(BAR_TICK, out.write(&buf[done..n])).await {
                match written.context("connection lost while sending data")? {
                    0 => bail!("connection lost while sending data: the connection accepts no more"),
                    w => done += w,
                }
            }
            show_acked(bar, source.size - left + done as u64, out);
        }
        left -= n as u64;
    }
    Ok(hasher.finalize())
}
