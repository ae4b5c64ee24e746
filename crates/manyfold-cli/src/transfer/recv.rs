//! The receiving side of a file transfer (protocol in [`super`]): a server
//! that stores each uploaded file in one directory, several at once, until
//! interrupted (or after one with `--once`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar};
use tokio::io::AsyncReadExt;
use tokio::task::JoinSet;

use super::tree::wire::VERSION_TREE;
use super::wire::{check_name, read_version, Reply, Request, RequestError, HASH_LEN};
use super::CHUNK;
use crate::fsutil::{available_space, remove_stale_partials, PartFile};
use crate::net::{self, Connection, NetArgs, Role};
use crate::report::{self, Direction, Report};
use crate::size::human_bytes;

/// How long a new connection may take to send its request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Args, Debug)]
pub struct RecvArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free port; the
    /// address actually used is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7008")]
    pub listen: String,

    /// Directory to store received files in (must exist).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,

    /// Exit after one transfer; the exit status tells whether it succeeded.
    /// Without it, the receiver serves until Ctrl-C or SIGTERM. The partial
    /// files of transfers still in progress are kept: the same send resumes
    /// them (see --partial-max-age); a group's (`send --to A,B`) starts
    /// again.
    #[arg(long)]
    pub once: bool,

    /// Replace files that already exist in DIR (refused by default); -f,
    /// as in the ftp shell.
    #[arg(short = 'f', long)]
    pub overwrite: bool,

    /// Remove partial files no transfer has written for this long (what
    /// killed or interrupted transfers left for a resume): checked at
    /// start and then every so often. 90s, 30m, 12h, 2d.
    #[arg(long, value_name = "AGE", default_value = "1d", value_parser = age_arg)]
    pub partial_max_age: Duration,

    #[command(flatten)]
    pub net: NetArgs,
}

/// What the receiver needs to know per transfer.
#[derive(Debug, Clone)]
pub struct RecvOptions {
    pub dir: PathBuf,
    pub overwrite: bool,
}

pub async fn run(args: RecvArgs) -> Result<()> {
    let meta = std::fs::metadata(&args.dir)
        .with_context(|| format!("cannot use {} as the receiving directory", args.dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", args.dir.display());
    }
    // Now, not when the first transfer arrives: a directory this process
    // cannot write into is refused before anyone is told to send.
    tempfile::Builder::new()
        .prefix(".manyfold-probe-")
        .tempfile_in(&args.dir)
        .with_context(|| format!("cannot write into {}", args.dir.display()))?;
    let options = Arc::new(RecvOptions { dir: args.dir.clone(), overwrite: args.overwrite });
    let sweep_every = (args.partial_max_age / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600));
    let mut sweep = tokio::time::interval(sweep_every);
    let server = net::listen(&args.listen, &args.net, |_| {}).await?;
    let (endpoint, local, mode) = (Arc::clone(&server.endpoint), server.local, &server.mode);
    let banner = format!(
        "manyfold recv: listening on {local} ({mode}), saving into {}{}",
        args.dir.display(),
        if args.once { " (one transfer)" } else { " (Ctrl-C to stop)" }
    );
    // With --json too: a script needs the address (port 0 picks one).
    report::emit(&banner, || serde_json::json!({ "listening": local.to_string(), "dir": args.dir }));

    let (mut conn_rx, acceptor) = net::spawn_acceptor(Arc::clone(&endpoint));

    let multi = report::multi_progress();
    let mut tasks: JoinSet<Result<Report>> = JoinSet::new();
    let mut tally = Tally::default();
    let mut accepting = true;
    let mut refusals = JoinSet::new();
    let ctrl_c = net::interrupted();
    tokio::pin!(ctrl_c);
    let outcome = loop {
        tokio::select! {
            _ = sweep.tick() => {
                let (dir, age) = (args.dir.clone(), args.partial_max_age);
                if let Ok((count, bytes)) = tokio::task::spawn_blocking(move || remove_stale_partials(&dir, age)).await {
                    if count > 0 {
                        multi.suspend(|| report::say(&format_args!(
                            "removed {count} partial file(s) ({}) not written for {}",
                            human_bytes(bytes),
                            age_text(age)
                        )));
                    }
                }
            }
            signal = &mut ctrl_c => {
                // The connections are already reset (the senders know).
                // Transfers that ended before the signal count as what they
                // were; the others are stopped (a single sender's partial
                // file is kept for a resume; a group's, which every
                // receiver gets alike and so cannot resume, is removed).
                while let Some(joined) = tasks.try_join_next() {
                    let _ = tally.record(joined, &multi, args.once);
                }
                let active = tasks.len() + tally.interrupted;
                tasks.shutdown().await;
                let saved = if tally.saved > 0 { format!("{} transfer(s) saved; ", tally.saved) } else { String::new() };
                if active > 0 {
                    break Err(net::lifecycle::account(format!(
                        "interrupted by {} with {active} transfer(s) in progress ({saved}what arrived from a single \
                         sender is kept, and the same send resumes it; a group's transfer starts again)",
                        signal.name()
                    )));
                }
                if args.once && tally.saved == 0 {
                    break Err(net::lifecycle::account(format!("interrupted by {} before any transfer", signal.name())));
                }
                break Ok(());
            }
            conn = conn_rx.recv(), if accepting => {
                let Some(conn) = conn else {
                    match net::accepting_ended(&mut accepting) {
                        Ok(()) => continue,
                        Err(e) => break Err(e),
                    }
                };
                if args.once && !tasks.is_empty() {
                    // One transfer at a time with --once: a second sender is
                    // told at once instead of waiting for nothing.
                    refusals.spawn(refuse_busy(conn, multi.clone()));
                    continue;
                }
                let options = Arc::clone(&options);
                let multi = multi.clone();
                tasks.spawn(async move {
                    let peer = conn.peer_addr();
                    serve_one(conn, &options, &multi)
                        .await
                        .with_context(|| format!("transfer from {peer} failed"))
                });
            }
            Some(joined) = tasks.join_next() => {
                let result = tally.record(joined, &multi, args.once);
                // A transfer our own interruption ended is accounted for
                // in the interruption's branch, which comes next.
                if args.once && net::lifecycle::signal().is_none() {
                    break result;
                }
            }
        }
    };
    acceptor.abort();
    // The refused senders get their answer before the endpoint goes.
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while refusals.join_next().await.is_some() {} }).await;
    if !args.once {
        multi.suspend(|| {
            report::say(&format_args!("manyfold recv: {} transfer(s) saved, {} failed", tally.saved, tally.failed))
        });
    }
    // The connections still open close gracefully; an interrupted process
    // already reset them all.
    let _ = tokio::time::timeout(Duration::from_secs(6), endpoint.shutdown_within(Duration::from_secs(5))).await;
    outcome
}

/// Refuses a sender that arrived while the one transfer of `--once` runs,
/// and logs it.
async fn refuse_busy(mut conn: Connection, multi: MultiProgress) {
    let peer = conn.peer_addr();
    let why = "busy: this receiver takes one transfer (--once) and is receiving another";
    // The sender expects the answer after its request.
    let _ = tokio::time::timeout(Duration::from_secs(2), Request::read(&mut conn)).await;
    let _ = refuse(&mut conn, why.to_string()).await;
    multi.suspend(|| eprintln!("refused a second sender {peer}: {why}"));
}

/// How the transfers of one `recv` went.
#[derive(Debug, Default)]
struct Tally {
    saved: u64,
    failed: u64,
    /// Ended by our own interruption (their connections reset by us).
    interrupted: usize,
}

impl Tally {
    /// Counts a finished transfer and prints its report or error (with
    /// --once the error is the command's own, reported by main).
    fn record(
        &mut self,
        joined: Result<Result<Report>, tokio::task::JoinError>,
        multi: &MultiProgress,
        once: bool,
    ) -> Result<()> {
        match joined.unwrap_or_else(|e| Err(anyhow!("transfer task failed: {e}"))) {
            Ok(report) => {
                self.saved += 1;
                multi.suspend(|| report::emit(&report, || report.to_json()));
                Ok(())
            }
            Err(e) if net::is_own_interruption(&e) => {
                self.interrupted += 1;
                Err(e)
            }
            Err(e) if once => {
                self.failed += 1;
                Err(e)
            }
            Err(e) => {
                self.failed += 1;
                let e = net::explain(e, Role::Sender);
                multi.suspend(|| eprintln!("error: {e:#}"));
                Err(e)
            }
        }
    }
}

/// Serves one transfer on `conn`: reads the request, answers, stores the
/// data under a temporary name, verifies it and moves it into place.
pub async fn serve_one(mut conn: Connection, options: &RecvOptions, multi: &MultiProgress) -> Result<Report> {
    let peer = conn.peer_addr();
    // Now: once closed, the connection no longer says how it was protected.
    let security = conn.protection();
    let start = Instant::now();
    let version = match tokio::time::timeout(REQUEST_TIMEOUT, read_version(&mut conn)).await {
        Err(_) => bail!("no request within {} s", REQUEST_TIMEOUT.as_secs()),
        Ok(Err(e @ RequestError::Io(_))) | Ok(Err(e @ RequestError::Truncated)) => {
            return Err(e).context("cannot read the request");
        }
        Ok(Err(e)) => return Err(refuse(&mut conn, e.to_string()).await),
        Ok(Ok(version)) => version,
    };
    if version == VERSION_TREE {
        return super::tree::receive_tree(&mut conn, options, multi, start).await;
    }
    let request = match tokio::time::timeout(REQUEST_TIMEOUT, Request::read_after(version, &mut conn)).await {
        Err(_) => bail!("no request within {} s", REQUEST_TIMEOUT.as_secs()),
        Ok(Err(e @ RequestError::Io(_))) | Ok(Err(e @ RequestError::Truncated)) => {
            return Err(e).context("cannot read the request");
        }
        Ok(Err(e)) => return Err(refuse(&mut conn, e.to_string()).await),
        Ok(Ok(request)) => request,
    };
    let name = request.name.clone();
    if let Err(why) = check_name(&name) {
        return Err(refuse(&mut conn, why).await);
    }
    let final_path = options.dir.join(&name);
    // A spread file may end up as NAME or as NAME.shard + NAME.shard.blocks.
    let taken = if request.block.is_some() {
        super::shard::shard_names_taken(&options.dir, &name)
    } else {
        tokio::fs::symlink_metadata(&final_path).await.is_ok().then(|| name.clone())
    };
    if let (false, Some(taken)) = (options.overwrite, taken) {
        return Err(refuse(
            &mut conn,
            format!("file exists: {taken} (the receiver does not overwrite without --overwrite)"),
        )
        .await);
    }
    if let Some(free) = available_space(&options.dir) {
        if free < request.size {
            return Err(refuse(
                &mut conn,
                format!(
                    "no space: {name} needs {}, the receiver has {} free",
                    human_bytes(request.size),
                    human_bytes(free)
                ),
            )
            .await);
        }
    }
    let part = match PartFile::create(&final_path) {
        Ok(part) => part,
        Err(e) => return Err(refuse(&mut conn, format!("{e:#}")).await),
    };
    Reply::Ok("go ahead".into()).write(&mut conn).await.context("connection lost while answering the request")?;

    multi.suspend(|| {
        report::say(&format_args!("receiving {name} ({}) from {peer}", human_bytes(request.size)));
    });
    let bar = report::transfer_bar(multi, request.size, &short_label(&name));
    if request.block.is_some() {
        let stored = super::shard::receive(&conn, part, &request, options.overwrite, &bar).await;
        bar.finish_and_clear();
        return match stored {
            Ok(stored) => {
                let _ = Reply::Ok(stored.summary.clone()).write(&mut conn).await;
                multi.suspend(|| report::say(&stored.summary));
                let (elapsed, stats) = (start.elapsed(), conn.stats());
                let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
                let bytes = stored.bytes;
                Ok(Report {
                    direction: Direction::Received,
                    name,
                    peer,
                    bytes,
                    resumed: 0,
                    elapsed,
                    stats,
                    hash: Some(stored.hash),
                    tree: None,
                    security,
                })
            }
            Err(e) => Err(refuse(&mut conn, format!("{e:#}")).await),
        };
    }
    let received = receive_data(&mut conn, &part, request.size, &bar).await;
    bar.finish_and_clear();
    let (hash, write_error) = received?;

    let mut sent_hash = [0u8; HASH_LEN];
    conn.read_exact(&mut sent_hash).await.context("connection lost before the hash trailer arrived")?;

    let verdict = if let Some(e) = write_error {
        Err(format!("the receiver could not write {name}: {e:#}"))
    } else if hash.as_bytes() != &sent_hash {
        Err(format!(
            "hash mismatch: the data received for {name} does not match the sender's BLAKE3 \
             (sender {}, received {}); nothing was saved",
            blake3::Hash::from(sent_hash).to_hex(),
            hash.to_hex()
        ))
    } else {
        let overwrite = options.overwrite;
        tokio::task::spawn_blocking(move || part.commit(overwrite))
            .await
            .map_err(|e| anyhow!("commit task failed: {e}"))
            .and_then(|r| r)
            .map_err(|e| format!("{e:#}"))
    };
    match verdict {
        Ok(()) => {
            let text = format!("saved {name} ({} bytes, blake3 {})", request.size, hash.to_hex());
            let elapsed = start.elapsed();
            // The file is safely in place; a lost confirmation is the
            // sender's error to report, not ours.
            let _ = Reply::Ok(text).write(&mut conn).await;
            let stats = conn.stats();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
            Ok(Report {
                direction: Direction::Received,
                name,
                peer,
                bytes: request.size,
                resumed: 0,
                elapsed,
                stats,
                hash: Some(hash),
                tree: None,
                security,
            })
        }
        Err(why) => Err(refuse(&mut conn, why).await),
    }
}

/// Receives `size` bytes into `part`, hashing them. A write failure does
/// not stop the reading: the rest is drained so the sender can be told why
/// in the final reply. Connection failures end the transfer at once.
async fn receive_data(
    conn: &mut Connection,
    part: &PartFile,
    size: u64,
    bar: &ProgressBar,
) -> Result<(blake3::Hash, Option<anyhow::Error>)> {
    let mut out = crate::fsutil::ChunkWriter::new(part.file()).context("cannot duplicate the file handle")?;
    let mut hasher = blake3::Hasher::new();
    let mut write_error: Option<anyhow::Error> = None;
    let mut parts = Vec::new();
    let mut left = size;
    while left > 0 {
        let want = left.min(CHUNK as u64) as usize;
        if let Err(e) = crate::net::read_parts(conn, want, &mut parts).await {
            let got = size - left + parts.iter().map(|p| p.len() as u64).sum::<u64>();
            return Err(match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    anyhow!("the sender closed the connection after {got} of {size} bytes")
                }
                _ => anyhow!(e).context("connection lost while receiving data"),
            });
        }
        for p in &parts {
            hasher.update(p);
        }
        if write_error.is_none() {
            if let Err(e) = out.write(&mut parts).await {
                write_error = Some(anyhow!(e).context(format!("writing {}", part.path().display())));
            }
        }
        left -= want as u64;
        bar.inc(want as u64);
    }
    if write_error.is_none() {
        // The last write may still be in flight: wait for it.
        if let Err(e) = out.flush().await {
            write_error = Some(anyhow!(e).context(format!("writing {}", part.path().display())));
        }
    }
    Ok((hasher.finalize(), write_error))
}

/// Sends an error reply, closes, and returns the error for the local log.
pub(super) async fn refuse(conn: &mut Connection, why: String) -> anyhow::Error {
    let _ = Reply::Error(why.clone()).write(conn).await;
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
    anyhow!(why)
}

/// `--partial-max-age`: seconds, minutes, hours or days (`90s`, `30m`,
/// `12h`, `2d`; a bare number is seconds).
fn age_arg(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return Err(format!("{text:?}: the unit must be s, m, h or d (90s, 30m, 12h, 2d)")),
    };
    match number.trim().parse::<f64>() {
        Ok(n) if n > 0.0 && (n * scale).is_finite() => Ok(Duration::from_secs_f64(n * scale)),
        _ => Err(format!("{text:?} is not a positive age (90s, 30m, 12h, 2d)")),
    }
}

/// An age as `--partial-max-age` takes it: `2d`, `12h`, `30m`, `90s`.
fn age_text(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        _ if s >= 86400 && s.is_multiple_of(86400) => format!("{}d", s / 86400),
        _ if s >= 3600 && s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s >= 60 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{}s", age.as_secs_f64()),
    }
}

/// The progress bar's label: the name, shortened to fit.
pub(super) fn short_label(name: &str) -> String {
    const MAX: usize = 16;
    if name.chars().count() <= MAX {
        name.to_string()
    } else {
        let head: String = name.chars().take(MAX - 1).collect();
        format!("{head}…")
    }
}
