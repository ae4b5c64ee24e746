//! `manyfold demo`: the whole file-transfer path in one process on
//! 127.0.0.1 — a generated sample file, a receiver and a sender on
//! ephemeral ports, emulated loss on the sender's datagrams, the hash
//! checked, both reports printed, everything cleaned up.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;

use crate::net::{self, NetArgs};
use crate::size::{human_bytes, human_duration, size_arg};
use crate::transfer::{self, RecvOptions};
use crate::{report, samplegen};

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

    /// Congestion controller of both endpoints: newreno, cubic or bbr.
    #[arg(long, value_name = "NAME", default_value = "newreno")]
    pub cc: manyfold_proto::CongestionAlgorithm,
}

pub async fn run(args: DemoArgs) -> Result<()> {
    let started = Instant::now();
    let workdir =
        tempfile::Builder::new().prefix("manyfold-demo-").tempdir().context("cannot create a temporary directory")?;
    let source = workdir.path().join("sample.bin");
    let inbox = workdir.path().join("received");
    std::fs::create_dir(&inbox).with_context(|| format!("cannot create {}", inbox.display()))?;

    println!(
        "manyfold demo: one {} file over manyfold on 127.0.0.1, {}\n",
        human_bytes(args.size),
        if args.loss > 0.0 {
            format!("dropping {}% of the sender's datagrams each way", args.loss)
        } else {
            "without emulated loss".to_string()
        }
    );
    let t = Instant::now();
    {
        let (source, size, seed) = (source.clone(), args.size, args.seed);
        tokio::task::spawn_blocking(move || samplegen::generate(&source, size, seed))
            .await
            .map_err(|e| anyhow!("sample generation failed: {e}"))??;
    }
    println!(
        "  sample    {} of pseudo-random bytes (seed {}) written in {}",
        human_bytes(args.size),
        args.seed,
        human_duration(t.elapsed())
    );

    let loopback: std::net::SocketAddr = "127.0.0.1:0".parse().expect("literal address");
    let max_datagram = manyfold_proto::ConnectionConfig::default().max_datagram;
    let clean = NetArgs { loss: 0.0, delay: 0, trace: args.trace, cc: args.cc, max_datagram };
    let lossy = NetArgs { loss: args.loss, delay: args.delay, trace: args.trace, cc: args.cc, max_datagram };
    let receiver = net::bind(loopback, clean.config()).await?;
    receiver.listen();
    let receiver_addr = receiver.local_addr().context("cannot read the receiver's address")?;
    let sender = net::bind(loopback, lossy.config()).await?;
    let sender_addr = sender.local_addr().context("cannot read the sender's address")?;
    println!("  receiver  listening on {receiver_addr}, saving into a temporary directory");
    println!("  sender    {sender_addr} → {receiver_addr}\n");

    let multi = report::multi_progress();
    let options = RecvOptions { dir: inbox.clone(), overwrite: false };
    let receiving = {
        let multi = multi.clone();
        async move {
            let conn = receiver.accept().await.context("the receiver stopped before the sender connected")?;
            let result = transfer::serve_one(conn, &options, &multi).await;
            Ok::<_, anyhow::Error>((receiver, result?))
        }
    };
    let sending = async {
        let src = transfer::Source::open(&source).await?;
        let conn = sender.connect(receiver_addr).await.with_context(|| format!("cannot connect to {receiver_addr}"))?;
        let bar = report::transfer_bar(&multi, src.size(), "sending");
        let result = transfer::send_file(conn, src, "sample.bin", &bar).await;
        bar.finish_and_clear();
        result
    };
    let (received, sent) = tokio::join!(receiving, sending);
    let sent = sent.context("sending failed")?;
    let (receiver, received) = received.context("receiving failed")?;
    println!("{sent}\n\n{received}\n");

    let original = hash_file(&source)?;
    let copy = hash_file(&inbox.join("sample.bin"))?;
    if original != copy || copy != sent.hash {
        bail!("hash mismatch: original {}, received copy {}", original.to_hex(), copy.to_hex());
    }
    println!("verified: the received copy's BLAKE3 matches the original ({})", &copy.to_hex()[..16]);

    for endpoint in [&sender, &receiver] {
        let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.shutdown()).await;
    }
    let dir = workdir.path().display().to_string();
    workdir.close().with_context(|| format!("cannot remove {dir}"))?;
    println!("cleaned up {dir}; demo took {}", human_duration(started.elapsed()));
    Ok(())
}

fn hash_file(path: &Path) -> Result<blake3::Hash> {
    let mut hasher = blake3::Hasher::new();
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    hasher.update_reader(file).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(hasher.finalize())
}
