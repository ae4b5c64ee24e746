//! The sending side of a file transfer (protocol in [`super`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::BytesMut;
use clap::Args;
use indicatif::ProgressBar;

use super::group::Payload;
use super::tree::{self, Origin, Planned};
use crate::keys;
use crate::net::{self, NetArgs, Role, SendHalf};
use crate::pace::Pacer;
use crate::report;

#[derive(Args, Debug)]
pub struct SendArgs {
    /// Files and directories to send (directories with everything in
    /// them, like `rsync -a`: modes and modification times kept, symbolic
    /// links sent as links, never followed); `-` sends standard input
    /// (its length need not be known) as "stdin" or --name.
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,

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

    /// Name to store the file (or directory) under on the receiver
    /// [default: FILE's base name]; only with one FILE. The receiver
    /// refuses anything but a plain base name.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// Test only: appends `KIND:PATH[:TARGET]` (KIND F, D or L) to the
    /// list unchecked, so that tests can show the receiver refusing what
    /// this sender never lists itself.
    #[arg(long, hide = true, value_name = "KIND:PATH[:TARGET]")]
    pub unchecked_entry: Vec<String>,

    #[command(flatten)]
    pub net: NetArgs,
}

pub async fn run(args: SendArgs) -> Result<()> {
    // The list first: a missing file is reported without touching the network.
    let files = args.files.clone();
    let name = args.name.clone();
    let mut items = tokio::task::spawn_blocking(move || tree::plan(&files, name.as_deref()))
        .await
        .map_err(|e| anyhow::anyhow!("listing task failed: {e}"))??;
    for spec in &args.unchecked_entry {
        items.push(tree::unchecked(spec)?);
    }
    if args.to.len() > 1 || args.mode != manyfold::Mode::All {
        // One regular file goes as before (version 1, or 2 spread); a
        // list in mode all.
        let payload = match items.as_slice() {
            [Planned { entry, origin: Origin::Path(path) }] if entry.is_file() => {
                Payload::File { source: Source::open(path).await?.paced(args.rate.rate), name: entry.path.clone() }
            }
            _ if args.mode != manyfold::Mode::All => {
                bail!("mode {} spreads one regular file; send several files, a directory or - in mode all", args.mode)
            }
            _ => Payload::Tree { items, pacer: Pacer::new(args.rate.rate) },
        };
        return run_group(args, payload).await;
    }
    let known = items.iter().filter_map(|i| i.entry.known_size()).sum();
    let peer = net::resolve(&args.to[0]).await?;
    let (endpoint, conn) = net::connect(peer, args.net.config()?).await?;
    let multi = report::multi_progress();
    let bar = report::transfer_bar(&multi, known, "sending");
    let result = tree::send_tree(conn, items, Pacer::new(args.rate.rate), &bar).await;
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
async fn run_group(args: SendArgs, payload: Payload) -> Result<()> {
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
    let result = super::send_to_group(&endpoint, &addrs, config, payload, &multi, security).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), endpoint.shutdown()).await;
    let report = result?;
    report::emit(&report, || report.to_json());
    if !report.succeeded() {
        match report.spread {
            None => bail!("{} reached {} of {} receivers", report.name, report.saved(), addrs.len()),
            Some(_) => bail!("{} was not spread as mode {} asks (see above)", report.name, args.mode),
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
    file: crate::fsutil::FileAt,
    size: u64,
    /// Reads are paced to `--rate`.
    pacer: Pacer,
}

impl Source {
    pub async fn open(path: &Path) -> Result<Source> {
        let opened = tokio::fs::File::open(path).await.with_context(|| format!("cannot open {}", path.display()))?;
        let meta =
            opened.metadata().await.with_context(|| format!("cannot read the metadata of {}", path.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file", path.display());
        }
        let file = crate::fsutil::FileAt { file: std::sync::Arc::new(opened.into_std().await), offset: 0 };
        Ok(Source { path: path.to_path_buf(), file, size: meta.len(), pacer: Pacer::new(None) })
    }

    /// The same source read no faster than `rate` bytes per second.
    pub fn paced(self, rate: Option<u64>) -> Source {
        Source { pacer: Pacer::new(rate), ..self }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fills `buf` from the file, straight into it (no copy through
    /// tokio's buffer); a file that shrank meanwhile is an error.
    pub async fn read_exact_into(&mut self, mut buf: BytesMut) -> Result<BytesMut> {
        let mut at = 0;
        while at < buf.len() {
            let (back, n) =
                self.file.read(buf, at).await.with_context(|| format!("cannot read {}", self.path.display()))?;
            if n == 0 {
                bail!("cannot read {}: it ended early (did it shrink while being sent?)", self.path.display());
            }
            (buf, at) = (back, at + n);
        }
        self.pacer.wait(buf.len()).await;
        Ok(buf)
    }
}

/// Shows on `bar` the data bytes the receiver has acknowledged, given that
/// `written` were handed to the connection (the request and trailer are
/// noise here), or how long it has not answered.
pub(super) fn show_acked(bar: &ProgressBar, written: u64, tx: &SendHalf) {
    let stats = tx.stats();
    report::show_sending(bar, written.saturating_sub(stats.unacked_bytes), &stats, Role::Receiver);
}
