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
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::walk::{Origin, Planned};
use super::wire::{self, Kind};
use super::FileLine;
use crate::fsutil::FileAt;
use crate::pace::Pacer;

/// Where the stream of a tree transfer goes: a connection, or a group.
#[allow(async_fn_in_trait)]
pub trait Sink {
    /// Hands over one piece of the stream, to be sent without a copy (a
    /// data chunk's buffer comes back to the pool once it is
    /// acknowledged); `done` counts the file bytes of the whole transfer
    /// handed over once it is (for progress).
    async fn put(&mut self, bytes: Bytes, done: u64) -> Result<()>;
    /// The largest data chunk to put at once.
    fn chunk(&self) -> usize;
}

/// Chunk buffers kept for use again: more than a 64 MiB send buffer holds
/// of 1 MiB chunks (a group's messages are as large).
pub const POOL_BUFFERS: usize = 80;

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
    // Each chunk is read into a buffer the sink sends without a copy, used
    // again once acknowledged (RESULTS §44: two copies fewer per byte).
    let mut pool = manyfold::BufferPool::new(4 + sink.chunk(), POOL_BUFFERS);
    for (index, item) in items.iter().enumerate().filter(|(_, i)| i.entry.kind == Kind::File) {
        let (from, hasher) = resumes.remove(&index).unwrap_or((0, blake3::Hasher::new()));
        sent.bytes += from;
        sink.put(Bytes::copy_from_slice(&from.to_be_bytes()), sent.bytes).await?;
        let (bytes, hash) = match &item.origin {
            Origin::Path(path) => {
                let file = Arc::new(open_unchanged(path, &item.entry)?);
                let before = file.metadata().with_context(|| format!("cannot read {}", path.display()))?;
                let limit = Some(before.len() - from);
                let mut src = Reader::File(FileAt { file: Arc::clone(&file), offset: from });
                let (bytes, hash) = stream_one(&mut src, limit, hasher, sink, pacer, sent.bytes, &mut pool).await?;
                // Grown: more to read after the size it had.
                let grown = src.read(BytesMut::zeroed(1), 0).await.map_or(true, |(_, n)| n > 0);
                let after = file.metadata().with_context(|| format!("cannot read {}", path.display()))?;
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
                let mut src = Reader::Stream(Box::new(tokio::io::stdin()));
                stream_one(&mut src, None, hasher, sink, pacer, sent.bytes, &mut pool).await?
            }
            Origin::Nothing => bail!("{}: a file without a source", item.entry.path),
        };
        sent.bytes += bytes;
        sink.put(Bytes::from(wire::end(&hash)), sent.bytes).await?;
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
fn open_unchanged(path: &Path, entry: &wire::Entry) -> Result<std::fs::File> {
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
    Ok(file)
}

/// The BLAKE3 of the first `len` bytes of `file`, read again from the
/// start (on two threads, [`crate::fsutil::hash_file`]); `None` if it no
/// longer has that many.
async fn reread_hash(file: &Arc<std::fs::File>, len: u64) -> Result<Option<blake3::Hash>> {
    let file = Arc::clone(file);
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

/// Where a file's bytes come from: a file read at an offset straight into
/// the chunk buffers, or a stream (standard input) read through tokio.
enum Reader {
    File(FileAt),
    Stream(Box<dyn AsyncRead + Unpin + Send>),
}

impl Reader {
    /// One read into `buf[at..]`: the buffer back and how many bytes came
    /// (0 at the end).
    async fn read(&mut self, mut buf: BytesMut, at: usize) -> std::io::Result<(BytesMut, usize)> {
        match self {
            Reader::File(f) => f.read(buf, at).await,
            Reader::Stream(s) => {
                let n = s.read(&mut buf[at..]).await?;
                Ok((buf, n))
            }
        }
    }
}

/// Puts what `src` gives until its end (or `limit` bytes) as data chunks,
/// each read into a buffer of `pool` behind its 4-byte header and handed
/// over as it is, hashing as it goes; `base` file bytes came before.
async fn stream_one<S: Sink>(
    src: &mut Reader,
    limit: Option<u64>,
    mut hasher: blake3::Hasher,
    sink: &mut S,
    pacer: &mut Pacer,
    base: u64,
    pool: &mut manyfold::BufferPool,
) -> Result<(u64, blake3::Hash)> {
    let mut total = 0u64;
    loop {
        let left = limit.map_or(u64::MAX, |l| l - total);
        let want = (pacer.piece(sink.chunk()) as u64).min(left) as usize;
        if want == 0 {
            return Ok((total, hasher.finalize()));
        }
        let (mut buf, n) = src.read(pool.take(4 + want), 4).await.context("cannot read the data to send")?;
        if n == 0 {
            return Ok((total, hasher.finalize()));
        }
        buf.truncate(4 + n);
        hasher.update(&buf[4..]);
        pacer.wait(n).await;
        buf[..4].copy_from_slice(&wire::data_header(n));
        total += n as u64;
        sink.put(pool.keep(buf), base + total).await?;
    }
}
