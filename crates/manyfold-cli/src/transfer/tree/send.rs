//! The sending half of a tree transfer: the list, then each file's data
//! in chunks with its BLAKE3, while listening for the receiver's verdict
//! (which may come early, as a refusal, and ends the sending at once).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::ProgressBar;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

use super::walk::{Origin, Planned};
use super::wire::{self, Kind, MAX_CHUNK};
use super::FileLine;
use crate::net::{Connection, SendHalf};
use crate::pace::Pacer;
use crate::report::{Direction, Report};
use crate::transfer::send::show_acked;
use crate::transfer::wire::Reply;

/// How often the bar is brought up to date while waiting on the receiver.
const BAR_TICK: Duration = Duration::from_millis(100);

/// Sends the listed entries on `conn` and closes it; fails unless the
/// receiver confirms it stored every one.
pub async fn send_tree(conn: Connection, items: Vec<Planned>, mut pacer: Pacer, bar: &ProgressBar) -> Result<Report> {
    let peer = conn.peer_addr();
    let (mut tx, mut rx) = conn.split();
    let start = Instant::now();
    let entries: Vec<wire::Entry> = items.iter().map(|p| p.entry.clone()).collect();
    tx.write_all(&wire::encode_request(&entries)).await.context("connection lost while sending the list")?;
    tx.flush().await.context("connection lost while sending the list")?;
    match Reply::read(&mut rx).await.context("connection lost while waiting for the receiver's answer")? {
        Reply::Ok(_) => {}
        Reply::Error(why) => bail!("receiver refused the transfer: {why}"),
    }
    let offers = wire::read_offers(&mut rx, entries.len()).await.context("cannot read the receiver's resume offers")?;
    let resumes = accept_offers(&items, offers).await?;

    let verdict = Reply::read(&mut rx);
    tokio::pin!(verdict);
    let mut sent = Sent::default();
    let streamed = {
        let stream = stream_files(&items, resumes, &mut tx, &mut pacer, bar, &mut sent);
        tokio::pin!(stream);
        tokio::select! {
            r = &mut stream => r,
            // Before the end, only a refusal comes: stop sending at once.
            early = &mut verdict => {
                return match early.context("connection lost while sending data")? {
                    Reply::Error(why) => Err(anyhow::anyhow!("receiver did not save the files: {why}")),
                    Reply::Ok(text) => Err(anyhow::anyhow!("receiver answered before the end: {text}")),
                };
            }
        }
    };
    if let Err(e) = streamed {
        if crate::net::close_reason(&e).is_some() {
            return Err(e);
        }
        // The receiver learns it at once and keeps nothing of this file.
        let _ = tx.write_all(&wire::abandon(&format!("{e:#}"))).await;
        let _ = tx.flush().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), verdict).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), tx.close()).await;
        return Err(e);
    }
    tx.finish().context("connection lost after the data")?;
    let reply = {
        let mut tick = tokio::time::interval(BAR_TICK);
        loop {
            tokio::select! {
                reply = &mut verdict => break reply,
                _ = tick.tick() => show_acked(bar, sent.bytes, &tx),
            }
        }
    };
    match reply.context("connection lost before the receiver confirmed the files")? {
        Reply::Ok(_) => {}
        Reply::Error(why) => bail!("receiver did not save the files: {why}"),
    }
    bar.set_position(sent.bytes);
    let elapsed = start.elapsed();
    let stats = tx.stats();
    let security = tx.protection();
    let _ = tokio::time::timeout(Duration::from_secs(5), tx.close()).await;
    Ok(super::report(Direction::Sent, peer, &entries, sent.files, elapsed, stats, security))
}

/// What has been handed to the connection so far (resumed bytes count:
/// the receiver holds them).
#[derive(Debug, Default)]
struct Sent {
    bytes: u64,
    files: Vec<FileLine>,
}

/// The offers whose prefix matches the start of our own file: entry
/// index, bytes the receiver holds, and the hash state after them.
async fn accept_offers(items: &[Planned], offers: Vec<wire::Offer>) -> Result<HashMap<usize, (u64, blake3::Hasher)>> {
    let mut accepted = HashMap::new();
    for offer in offers {
        let index = offer.index as usize;
        let Some(Planned { entry, origin: Origin::Path(path) }) = items.get(index) else { continue };
        if !entry.is_file() || offer.have > entry.size {
            continue;
        }
        let (path, have) = (path.clone(), offer.have);
        let mine = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            let file = std::fs::File::open(path)?;
            crate::fsutil::hash_prefix(&file, have)
        })
        .await
        .map_err(|e| anyhow::anyhow!("hash task failed: {e}"))?;
        // A file we cannot read now fails when it is sent, with its reason.
        if let Ok((hasher, n)) = mine {
            if n == have && *hasher.finalize().as_bytes() == offer.prefix {
                accepted.insert(index, (have, hasher));
            }
        }
    }
    Ok(accepted)
}

async fn stream_files(
    items: &[Planned],
    mut resumes: HashMap<usize, (u64, blake3::Hasher)>,
    tx: &mut SendHalf,
    pacer: &mut Pacer,
    bar: &ProgressBar,
    sent: &mut Sent,
) -> Result<()> {
    let mut buf = vec![0u8; 4 + MAX_CHUNK as usize];
    for (index, item) in items.iter().enumerate().filter(|(_, i)| i.entry.kind == Kind::File) {
        let (from, hasher) = resumes.remove(&index).unwrap_or((0, blake3::Hasher::new()));
        tx.write_all(&from.to_be_bytes()).await.context("connection lost while sending data")?;
        sent.bytes += from;
        bar.inc(from);
        let (bytes, hash) = match &item.origin {
            Origin::Path(path) => {
                let mut file = open_unchanged(path, &item.entry).await?;
                let before = file.metadata().await.with_context(|| format!("cannot read {}", path.display()))?;
                file.seek(std::io::SeekFrom::Start(from))
                    .await
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let limit = Some(before.len() - from);
                let (bytes, hash) = stream_one(&mut file, limit, hasher, tx, pacer, bar, sent.bytes, &mut buf).await?;
                // Grown: more to read after the size it had.
                let grown = file.read(&mut [0u8; 1]).await.map_or(true, |n| n > 0);
                let after = file.metadata().await.with_context(|| format!("cannot read {}", path.display()))?;
                if grown || from + bytes != before.len() || changed(&before, &after) {
                    bail!(
                        "{} changed while it was being sent ({} bytes read of {}); nothing of it is stored",
                        path.display(),
                        from + bytes,
                        before.len()
                    );
                }
                (bytes, hash)
            }
            Origin::Stdin => {
                stream_one(&mut tokio::io::stdin(), None, hasher, tx, pacer, bar, sent.bytes, &mut buf).await?
            }
            Origin::Nothing => bail!("{}: a file without a source", item.entry.path),
        };
        tx.write_all(&wire::end(&hash)).await.context("connection lost while sending data")?;
        sent.bytes += bytes;
        sent.files.push(FileLine { path: item.entry.path.clone(), bytes: from + bytes, resumed: from, hash });
    }
    tx.flush().await.context("connection lost while sending data")?;
    Ok(())
}

/// Opens a listed file without following a link that replaced it, and
/// checks it is still what was listed.
async fn open_unchanged(path: &std::path::Path, entry: &wire::Entry) -> Result<tokio::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let meta = file.metadata().with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_file() || meta.len() != entry.size || super::walk::mtime_of(&meta) != entry.mtime {
        bail!("{} changed between listing and sending; nothing of it is stored", path.display());
    }
    Ok(tokio::fs::File::from_std(file))
}

/// Whether a file's size, mtime or ctime moved between two looks.
fn changed(before: &std::fs::Metadata, after: &std::fs::Metadata) -> bool {
    (before.len(), before.mtime(), before.mtime_nsec(), before.ctime(), before.ctime_nsec())
        != (after.len(), after.mtime(), after.mtime_nsec(), after.ctime(), after.ctime_nsec())
}

/// Sends what `src` gives until its end (or `limit` bytes) as data
/// chunks, hashing as it goes; `base` bytes of earlier files came before
/// (for the bar).
#[allow(clippy::too_many_arguments)]
async fn stream_one<R: AsyncRead + Unpin>(
    src: &mut R,
    limit: Option<u64>,
    mut hasher: blake3::Hasher,
    tx: &mut SendHalf,
    pacer: &mut Pacer,
    bar: &ProgressBar,
    base: u64,
    buf: &mut [u8],
) -> Result<(u64, blake3::Hash)> {
    let mut total = 0u64;
    loop {
        let left = limit.map_or(u64::MAX, |l| l - total);
        let want = (pacer.piece(MAX_CHUNK as usize) as u64).min(left) as usize;
        if want == 0 {
            return Ok((total, hasher.finalize()));
        }
        let n = src.read(&mut buf[4..4 + want]).await.context("cannot read the data to send")?;
        if n == 0 {
            return Ok((total, hasher.finalize()));
        }
        hasher.update(&buf[4..4 + n]);
        pacer.wait(n).await;
        buf[..4].copy_from_slice(&wire::data_header(n));
        total += n as u64;
        if bar.length().is_some_and(|len| base + total > len) {
            bar.set_length(base + total);
        }
        // Written piecewise with a deadline, so that the bar keeps telling
        // while the receiver is silent and the window is full (a write
        // still pending has written nothing: dropping it is safe).
        let frame = &buf[..4 + n];
        let mut done = 0;
        while done < frame.len() {
            if let Ok(written) = tokio::time::timeout(BAR_TICK, tx.write(&frame[done..])).await {
                match written.context("connection lost while sending data")? {
                    0 => bail!("connection lost while sending data: the connection accepts no more"),
                    w => done += w,
                }
            }
            show_acked(bar, base + total - (frame.len() - done) as u64, tx);
        }
    }
}
