//! Receiving a spread file (protocol version 2, sent by `manyfold send
//! --to A,B,C --mode any|at-least=P|subset=K/P`): after the request, the
//! sender's messages are blocks of the file, each with its offset and its
//! own BLAKE3, then an end message with the whole file's hash. A receiver
//! gets the blocks its group's mode sent it, not necessarily all.
//!
//! Each block is checked against its hash before it is written at its
//! offset into the temporary file. At the end:
//! - if the blocks cover the whole file and its hash matches, the file is
//!   saved under its name, as in a one-to-one transfer;
//! - otherwise the verified blocks are kept as `NAME.shard` (holes read
//!   as zeros), beside `NAME.shard.blocks`, a text index saying which
//!   ranges are valid (`offset length blake3` per line) and the whole
//!   file's size and hash, so that the shards of several receivers can be
//!   put back together and checked.
//!
//! Both files appear whole or not at all, like any received file.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use indicatif::ProgressBar;
use manyfold::StreamItem;

use super::wire::{BlockMsg, Request};
use crate::fsutil::PartFile;
use crate::net::Connection;
use crate::size::human_bytes;

/// What a spread transfer left on this receiver.
#[derive(Debug)]
pub struct Stored {
    /// The text of the final reply.
    pub summary: String,
    pub bytes: u64,
    pub hash: blake3::Hash,
}

/// Receives the blocks after the request into `part` (created for the
/// final name) and stores the result; `overwrite` as for any file.
pub async fn receive(
    conn: &Connection,
    part: PartFile,
    request: &Request,
    overwrite: bool,
    bar: &ProgressBar,
) -> Result<Stored> {
    let block = u64::from(request.block.context("not a spread request")?);
    let size = request.size;
    let file = Arc::new(part.file().try_clone().context("cannot duplicate the file handle")?);
    file.set_len(size).with_context(|| format!("cannot size {}", part.path().display()))?;
    // offset -> (length, hash) of every verified block written.
    let mut held: BTreeMap<u64, (u64, [u8; 32])> = BTreeMap::new();
    let mut abandoned = 0u64;
    let whole = loop {
        let item = conn.recv_message().await.context("connection lost while receiving blocks")?;
        let Some((_, item)) = item else { bail!("the sender ended the connection before the end of the file") };
        let data = match item {
            StreamItem::Message(m) => m,
            // A block the mode delivered elsewhere, given up part-way here.
            StreamItem::Abandoned => {
                abandoned += 1;
                continue;
            }
            StreamItem::Finished => bail!("the sender finished before the end of the file"),
            StreamItem::Reset(code) => bail!("the sender reset the transfer (code {code})"),
        };
        match BlockMsg::decode(&data).map_err(|e| anyhow!("bad message from the sender: {e}"))? {
            BlockMsg::End { hash } => break hash,
            BlockMsg::Block { offset, hash, data } => {
                let len = data.len() as u64;
                if offset % block != 0 || len > block || offset.checked_add(len).is_none_or(|end| end > size) {
                    bail!("block at {offset} of {len} bytes does not fit a {size}-byte file of {block}-byte blocks");
                }
                if blake3::hash(data).as_bytes() != &hash {
                    bail!("block at {offset} does not match its hash; the sender or the path is broken");
                }
                if held.contains_key(&offset) {
                    continue;
                }
                let (f, owned) = (Arc::clone(&file), data.to_vec());
                tokio::task::spawn_blocking(move || f.write_all_at(&owned, offset))
                    .await
                    .map_err(|e| anyhow!("write task failed: {e}"))?
                    .with_context(|| format!("cannot write {}", part.path().display()))?;
                held.insert(offset, (len, hash));
                bar.inc(len);
            }
        }
    };
    let bytes: u64 = held.values().map(|&(len, _)| len).sum();
    let blocks = size.div_ceil(block);
    let name = request.name.clone();
    let final_path = part_final(&part, &name);
    tokio::task::spawn_blocking(move || -> Result<Stored> {
        let whole = blake3::Hash::from(whole);
        if bytes == size && hash_of(part.path(), size)? == whole {
            part.commit(overwrite)?;
            let summary = format!("saved {name} (all {blocks} blocks, {size} bytes, blake3 {})", whole.to_hex());
            return Ok(Stored { summary, bytes, hash: whole });
        }
        let shard = final_path.with_file_name(format!("{name}.shard"));
        let index_path = final_path.with_file_name(format!("{name}.shard.blocks"));
        let index = PartFile::create(&index_path)?;
        let mut text = format!(
            "# manyfold shard: verified blocks of a spread file\nname {name}\nsize {size}\nblock {block}\nblake3 {}\n",
            whole.to_hex()
        );
        for (offset, (len, hash)) in &held {
            let _ = writeln!(text, "{offset} {len} {}", blake3::Hash::from(*hash).to_hex());
        }
        index.file().write_all(text.as_bytes()).with_context(|| format!("cannot write {}", index_path.display()))?;
        let mut part = part;
        part.retarget(&shard);
        part.commit(overwrite)?;
        index.commit(overwrite)?;
        let summary = format!(
            "stored {} of {blocks} blocks ({} of {}{}) as {name}.shard, index {name}.shard.blocks",
            held.len(),
            human_bytes(bytes),
            human_bytes(size),
            if abandoned > 0 { format!("; {abandoned} given up part-way") } else { String::new() }
        );
        Ok(Stored { summary, bytes, hash: whole })
    })
    .await
    .map_err(|e| anyhow!("commit task failed: {e}"))?
}

/// The final path a part file was created for.
fn part_final(part: &PartFile, name: &str) -> std::path::PathBuf {
    part.path().with_file_name(name)
}

/// BLAKE3 of the first `size` bytes of the file at `path` (the part
/// file's own handle is write-only).
fn hash_of(path: &Path, size: u64) -> Result<blake3::Hash> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot read back {}", path.display()))?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..n], at).context("cannot read back the received file")?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher.finalize())
}

/// Whether `path` (or its shard files) exist, for the overwrite check.
pub fn shard_names_taken(dir: &Path, name: &str) -> Option<String> {
    [name.to_string(), format!("{name}.shard"), format!("{name}.shard.blocks")]
        .into_iter()
        .find(|n| std::fs::symlink_metadata(dir.join(n)).is_ok())
}
