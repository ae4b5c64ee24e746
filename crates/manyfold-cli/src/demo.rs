//! `manyfold demo`: the whole file-transfer path in one process on
//! 127.0.0.1 — a generated sample file, three receivers and one sender on
//! ephemeral ports, the sender's group (spec §14) delivering one copy to
//! each through emulated loss on the sender's datagrams, every copy's hash
//! checked, the reports printed, everything cleaned up.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use crate::net::{self, NetArgs};
use crate::report::outln;
use crate::size::{human_bytes, human_duration, size_arg};
use crate::transfer::{self, RecvOptions};
use crate::{report, samplegen};

/// How many receivers the demo's group sends to.
const RECEIVERS: usize = 3;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Size of the sample file sent (e.g. 512k, 20MB, 1GiB).
    #[arg(long, value_name = "SIZE", default_value = "20MB", value_parser = size_arg)]
    pub size: u64,

    /// Emulated loss in percent on every datagram the sender sends and
    /// receives (0 ≤ P < 100).
    #[arg(long, value_name = "P", default_value_t = 5.0, value_parser = net::loss_arg, allow_negative_numbers = true)]
    pub loss: f64,

    /// Emulated one-way delay in milliseconds on every datagram the sender sends.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    pub delay: u64,

    /// Seed of the sample file's contents.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Print every packet and state transition to stderr.
    #[arg(long)]
    pub trace: bool,

    /// Write a qlog trace of every connection into directory DIR (see
    /// `manyfold trace`).
    #[arg(long, value_name = "DIR")]
    pub qlog: Option<std::path::PathBuf>,

    /// Congestion controller of both endpoints: newreno, cubic or bbr.
    #[arg(long, value_name = "NAME", default_value = "bbr")]
    pub cc: manyfold_proto::CongestionAlgorithm,

    /// Encrypt every connection with the keys in FILE (sender and
    /// receivers alike; see `manyfold keygen`). Without it, plain.
    #[arg(long, value_name = "FILE")]
    pub key_file: Option<std::path::PathBuf>,

    /// Accept only the public keys listed in FILE (needs --key-file with a
    /// private-key line, whose own public key must be listed: every
    /// endpoint of the demo holds that same key).
    #[arg(long, value_name = "FILE")]
    pub peers_file: Option<std::path::PathBuf>,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let started = Instant::now();
    // The configurations first: a bad key file is reported before anything is written.
    let qlog = args.qlog.clone();
    let clean = NetArgs {
        loss: 0.0,
        delay: 0,
        trace: args.trace,
        qlog: qlog.clone(),
        cc: args.cc,
        key_file: args.key_file.clone(),
        peers_file: args.peers_file.clone(),
        ..NetArgs::default()
    };
    let lossy = NetArgs { loss: args.loss, delay: args.delay, qlog, ..clean.clone() };
    let clean_config = clean.config()?;
    let lossy_config = lossy.config()?;
    let security = crate::keys::endpoint_protection(lossy_config.endpoint.security.as_ref());
    let workdir =
        tempfile::Builder::new().prefix("manyfold-demo-").tempdir().context("cannot create a temporary directory")?;
    let source = workdir.path().join("sample.bin");

    outln!(
        "manyfold demo: one {} file to {RECEIVERS} receivers over one manyfold group on 127.0.0.1, {}\n",
        human_bytes(args.size),
        if args.loss > 0.0 {
            format!("dropping {}% of the sender's datagrams each way", args.loss)
        } else {
            "without emulated loss".to_string()
        }
    );
    let dir = workdir.path().display().to_string();
    let result = demo(&args, workdir.path(), &source, clean_config, lossy_config, security).await;
    // Interrupted or not, the scratch data goes (a second Ctrl-C exits at
    // once and leaves it: that one asks for no cleanup).
    let removed = workdir.close().with_context(|| format!("cannot remove {dir}"));
    if let Some(signal) = net::lifecycle::signal() {
        removed?;
        return Err(net::lifecycle::account(format!(
            "interrupted by {}; the receivers were told, and {dir} was removed",
            signal.name()
        )));
    }
    result?;
    removed?;
    outln!("cleaned up {dir}; demo took {}", human_duration(started.elapsed()));
    Ok(())
}

/// The demo itself, in `workdir`: generate, send to three receivers, verify.
async fn demo(
    args: &DemoArgs,
    workdir: &Path,
    source: &Path,
    clean_config: net::Config,
    lossy_config: net::Config,
    security: manyfold::Protection,
) -> Result<()> {
    let loopback: std::net::SocketAddr = "127.0.0.1:0".parse().expect("literal address");
    let t = Instant::now();
    {
        let (source, size, seed) = (source.to_path_buf(), args.size, args.seed);
        tokio::task::spawn_blocking(move || samplegen::generate(&source, size, seed))
            .await
            .map_err(|e| anyhow!("sample generation failed: {e}"))??;
    }
    outln!(
        "  sample    {} of pseudo-random bytes (seed {}) written in {}",
        human_bytes(args.size),
        args.seed,
        human_duration(t.elapsed())
    );

    let mut receivers = Vec::new();
    for i in 0..RECEIVERS {
        let endpoint = net::bind(loopback, clean_config.clone()).await?;
        endpoint.listen();
        let addr = endpoint.local_addr().context("cannot read a receiver's address")?;
        let dir = workdir.join(format!("receiver-{}", i + 1));
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        outln!("  receiver  {addr}, saving into {}", dir.display());
        receivers.push((endpoint, addr, dir));
    }
    let sender = net::bind(loopback, lossy_config).await?;
    let sender_addr = sender.local_addr().context("cannot read the sender's address")?;
    outln!("  sender    {sender_addr} → all three, mode all, {}\n", crate::keys::short(security));

    let multi = report::multi_progress();
    let mut receiving = tokio::task::JoinSet::new();
    for (endpoint, _, dir) in &receivers {
        let (endpoint, options, multi) =
            (endpoint.clone(), RecvOptions { dir: dir.clone(), overwrite: false }, multi.clone());
        receiving.spawn(async move {
            let conn = endpoint.accept().await.context("a receiver stopped before the sender connected")?;
            transfer::serve_one(conn, &options, &multi).await
        });
    }
    let addrs: Vec<std::net::SocketAddr> = receivers.iter().map(|r| r.1).collect();
    let src = transfer::Source::open(source).await?;
    let config = manyfold::GroupConfig { min_peers: RECEIVERS, ..Default::default() };
    let payload = transfer::Payload::File { source: src, name: "sample.bin".into() };
    let sent = transfer::send_to_group(&sender, &addrs, config, payload, &multi, security).await;
    let mut received = Vec::new();
    while let Some(r) = receiving.join_next().await {
        received.push(r.map_err(|e| anyhow!("a receiver task failed: {e}"))?.context("receiving failed")?);
    }
    let sent = sent.context("sending failed")?;
    // The group's report has a line per receiver; theirs repeat it.
    outln!("{sent}\n");
    if received.len() != RECEIVERS {
        bail!("{} of {RECEIVERS} receivers finished", received.len());
    }
    if !sent.succeeded() {
        bail!("not every receiver saved the file");
    }

    let original = hash_file(source)?;
    for (_, _, dir) in &receivers {
        let copy = hash_file(&dir.join("sample.bin"))?;
        if original != copy || Some(copy) != sent.hash {
            bail!("hash mismatch in {}: original {}, copy {}", dir.display(), original.to_hex(), copy.to_hex());
        }
    }
    outln!("verified: all {RECEIVERS} received copies' BLAKE3 match the original ({})", &original.to_hex()[..16]);

    for endpoint in std::iter::once(&sender).chain(receivers.iter().map(|r| &r.0)) {
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown()).await;
    }
    Ok(())
}

fn hash_file(path: &Path) -> Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    hasher.update_reader(file).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hasher.finalize())
}
