//! Reading the listed files for sending, the same for one receiver and
//! for a group: each file's `from`, its data chunks and its end (the
//! framing in [`super`]), handed to a [`Sink`]. A file is opened without
//! following links and checked against the list; one that changes while
//! it is read is an error, so that the caller abandons the transfer: it
//! grows, its size, mtime or ctime move, or a second read of the whole
//! file after the first hashes differently (issue 23 item 2). The second
//! read catches what the timestamps miss: a write within the clock tick
//! of the last one, or through a shared memory map whose pages were
//! already dirty (neither moves the ctime). It costs one more read of the
//! file, mostly from the page cache, before the file's end is sent.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt};

use super::walk::{Origin, Planned};
use super::wire::{self, Kind};
use super::FileLine;
use crate::pace::Pacer;

/// Where the stream of a tree transfer goes: a connection, or a group.
#[allow(async_fn_in_trait)]
pub trait Sink {
    /// Hands over one piece of the stream; `done` counts the file bytes of
    /// the whole transfer handed over once it is (for progress).
    async fn put(&mut self, bytes: &[u8], done: u64) -> Result<()>;
    /// The largest data chunk to put at once.
    fn chunk(&self) -> usize;
}

/// What has been handed over so far (resumed bytes count: the receiver
/// holds them).
#[derive(Debug, Default)]
pub struct Sent {
    pub bytes: u64,
    pub files: Vec<FileLine>,
}

/// Resumes granted: entry index -> (bytes the receiver holds, hash state
/// after them).
pub type Resumes = HashMap<usize, (u64, blake3::Hasher)>;

/// Streams every file of `items` to `sink`, recording in `sent`.
pub async fn stream_files<S: Sink>(
    items: &[Planned],
    mut resumes: Resumes,
    sink: &mut S,
    pacer: &mut Pacer,
    sent: &mut Sent,
) -> Result<()> {
    let mut buf = vec![0u8; 4 + sink.chunk()];
    for (index, item) in items.iter().enumerate().filter(|(_, i)| i.entry.kind == Kind::File) {
        let (from, hasher) = resumes.remove(&index).unwrap_or((0, blake3::Hasher::new()));
        sent.bytes += from;
        sink.put(&from.to_be_bytes(), sent.bytes).await?;
        let (bytes, hash) = match &item.origin {
            Origin::Path(path) => {
                let mut file = open_unchanged(path, &item.entry).await?;
                let before = file.metadata().await.with_context(|| format!("cannot read {}", path.display()))?;
                file.seek(std::io::SeekFrom::Start(from))
                    .await
                    .with_context(|| format!("cannot read {}", path.display()))?;
                let limit = Some(before.len() - from);
                let (bytes, hash) = stream_one(&mut file, limit, hasher, sink, pacer, sent.bytes, &mut buf).await?;
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
                if reread_hash(&file, before.len()).await? != Some(hash) {
                    bail!(
                        "{} changed while it was being sent (a second read of it hashes differently, \
                         though its size and times did not move); nothing of it is stored",
                        path.display()
                    );
                }
                (bytes, hash)
            }
            Origin::Stdin => {
                stream_one(&mut tokio::io::stdin(), None, hasher, sink, pacer, sent.bytes, &mut buf).await?
            }
            Origin::Nothing => bail!("{}: a file without a source", item.entry.path),
        };
        sent.bytes += bytes;
        sink.put(&wire::end(&hash), sent.bytes).await?;
        sent.files.push(FileLine { path: item.entry.path.clone(), bytes: from + bytes, resumed: from, hash });
    }
    Ok(())
}

/// The offers whose prefix matches the start of our own file.
pub async fn accept_offers(items: &[Planned], offers: Vec<wire::Offer>) -> Result<Resumes> {
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

/// Opens a listed file without following a link that replaced it, and
/// checks it is still what was listed.
async fn open_unchanged(path: &Path, entry: &wire::Entry) -> Result<tokio::fs::File> {
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

/// The BLAKE3 of the first `len` bytes of `file`, read again from the
/// start (on two threads, [`crate::fsutil::hash_file`]); `None` if it no
/// longer has that many.
async fn reread_hash(file: &tokio::fs::File, len: u64) -> Result<Option<blake3::Hash>> {
    let file = file.try_clone().await.context("cannot read the file again")?.into_std().await;
    tokio::task::spawn_blocking(move || crate::fsutil::hash_file(&file, len))
        .await
        .map_err(|e| anyhow::anyhow!("hash task failed: {e}"))?
        .context("cannot read the file again")
}

/// Whether a file's size, mtime or ctime moved between two looks.
fn changed(before: &std::fs::Metadata, after: &std::fs::Metadata) -> bool {
    (before.len(), before.mtime(), before.mtime_nsec(), before.ctime(), before.ctime_nsec())
        != (after.len(), after.mtime(), after.mtime_nsec(), after.ctime(), after.ctime_nsec())
}

/// Puts what `src` gives until its end (or `limit` bytes) as data chunks,
/// hashing as it goes; `base` file bytes came before.
async fn stream_one<R: AsyncRead + Unpin, S: Sink>(
    src: &mut R,
    limit: Option<u64>,
    mut hasher: blake3::Hasher,
    sink: &mut S,
    pacer: &mut Pacer,
    base: u64,
    buf: &mut [u8],
) -> Result<(u64, blake3::Hash)> {
    let mut total = 0u64;
    loop {
        let left = limit.map_or(u64::MAX, |l| l - total);
        let want = (pacer.piece(buf.len() - 4) as u64).min(left) as usize;
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
        sink.put(&buf[..4 + n], base + total).await?;
    }
}
