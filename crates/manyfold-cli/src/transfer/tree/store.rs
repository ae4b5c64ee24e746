//! The receiving half of a tree transfer: the list checked whole before
//! any data (paths and links inside the directory, nothing overwritten
//! without `--overwrite`, room for the known sizes), then each entry
//! made: directories, links (under a temporary name, then renamed), and
//! files through a [`PartFile`] renamed into place only after their hash
//! matched. Directories get their mode and mtime last, deepest first.
//!
//! A list sent again after an interruption finds some files here: a
//! partial file resumes from its prefix, and a file already here whole
//! (the listed size and mtime) is skipped if its BLAKE3 matches the
//! sender's, or compared byte for byte as it arrives ([`Present`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use indicatif::{MultiProgress, ProgressBar};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::wire::{self, Chunk, Entry, Kind};
use super::FileLine;
use crate::fsutil::{available_space, hash_prefix, hidden_name, ChunkWriter, PartFile, ResumeFile, PARTIAL_SUFFIX};
use crate::net::Connection;
use crate::report::{self, Direction, Report};
use crate::size::human_bytes;
use crate::transfer::recv::{refuse, RecvOptions, REQUEST_TIMEOUT};
use crate::transfer::takeover::Claims;
use crate::transfer::wire::Reply;

/// Serves a tree transfer whose list follows on `conn` (magic and version
/// read); `start` is when the connection came.
pub async fn receive_tree(
    conn: &mut Connection,
    options: &RecvOptions,
    multi: &MultiProgress,
    start: Instant,
) -> Result<Report> {
    let peer = conn.peer_addr();
    let security = conn.protection();
    let listed = tokio::time::timeout(REQUEST_TIMEOUT, wire::read_list(conn)).await;
    let Ok(listed) = listed else { bail!("no complete list within {} s", REQUEST_TIMEOUT.as_secs()) };
    let entries = match listed {
        Ok(entries) => entries,
        Err(e @ (wire::ListError::Truncated | wire::ListError::Io(_))) => {
            return Err(e).context("cannot read the list of entries")
        }
        Err(e) => return Err(refuse(conn, e.to_string()).await),
    };
    let dir = options.dir.clone();
    let overwrite = options.overwrite;
    let mut claims = Claims::new();
    let mut told = std::collections::HashSet::new();
    for (i, e) in entries.iter().enumerate() {
        if e.known_size().is_some() && claims.claim(dir.join(&e.path)) {
            told.insert(i);
        }
    }
    let checked = {
        let entries = entries.clone();
        tokio::task::spawn_blocking(move || admit(&dir, &entries, overwrite, &told, PRESENT_HASH_BUDGET))
            .await
            .map_err(|e| anyhow!("check task failed: {e}"))?
    };
    let mut admitted = match checked {
        Ok(admitted) => admitted,
        Err(why) => return Err(refuse(conn, why).await),
    };
    let offers = admitted.offers();
    let mut answer = Reply::Ok("go ahead".into()).encode();
    answer.extend_from_slice(&wire::encode_offers(&offers));
    conn.write_all(&answer).await.context("connection lost while answering the request")?;
    conn.flush().await.context("connection lost while answering the request")?;

    let known: u64 = entries.iter().filter_map(Entry::known_size).sum();
    let first = &entries[0].path;
    multi.suspend(|| {
        report::say(&format_args!(
            "receiving {} from {peer}: {} entr{}, {}",
            first,
            entries.len(),
            if entries.len() == 1 { "y" } else { "ies" },
            human_bytes(known)
        ));
    });
    let bar = report::transfer_bar(multi, known, &crate::transfer::recv::short_label(first));
    let made = tokio::select! {
        made = make_all(conn, &options.dir, &entries, &mut admitted, overwrite, &bar) => made,
        // Dropping the transfer keeps what arrived in its partial files.
        () = claims.taken_over() => Err(anyhow!("a newer transfer of the same file took over; what arrived is kept")),
    };
    bar.finish_and_clear();
    let files = match made {
        Ok(files) => files,
        // The connection is gone: no one to tell, and its reason says most.
        Err(e) if crate::net::close_reason(&e).is_some() => return Err(e),
        Err(e) => return Err(refuse(conn, format!("{e:#}")).await),
    };
    let bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let text = format!("saved {} entr{} ({bytes} bytes)", entries.len(), if entries.len() == 1 { "y" } else { "ies" });
    let elapsed = start.elapsed();
    let _ = Reply::Ok(text).write(conn).await;
    let stats = conn.stats();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), conn.close()).await;
    Ok(super::report(Direction::Received, peer, &entries, files, elapsed, stats, security))
}

/// How long a transfer waits for an older one to let go of a file.
const TAKEOVER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// An earlier attempt's partial file of a list entry, opened and locked.
struct Held {
    file: ResumeFile,
    have: u64,
    /// BLAKE3 state after its `have` bytes.
    prefix: blake3::Hasher,
}

/// The partial file's tag for a version of a file: its size and mtime,
/// so that only the same file resumes it (its content is then checked
/// by the prefix hash).
fn tag(e: &Entry) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&e.size.to_be_bytes()).update(&e.mtime.0.to_be_bytes()).update(&e.mtime.1.to_be_bytes());
    h.finalize().to_hex()[..16].to_string()
}

/// Opens (creating it if `create`) the partial file of entry `e` at `at`.
fn open_partial(at: &Path, e: &Entry, create: bool) -> Result<Option<Held>> {
    let name = at.file_name().context("an entry without a name")?.to_string_lossy().into_owned();
    let part = at.with_file_name(hidden_name(&name, &format!("{PARTIAL_SUFFIX}-{}", tag(e))));
    if !create && std::fs::symlink_metadata(&part).is_err() {
        return Ok(None);
    }
    let (file, mut have) = ResumeFile::open_tagged(at, &tag(e))?;
    if have > e.size {
        file.file().set_len(0)?;
        have = 0;
    }
    let (prefix, have) = hash_prefix(file.file(), have)?;
    Ok(Some(Held { file, have, prefix }))
}

/// A file here before the list came, with the listed size and mtime
/// (rsync's quick check; the receiver gives each file it stores the
/// sender's mtime): most likely this very file, stored by an earlier
/// attempt. `whole` is its BLAKE3 state if `admit` hashed it: it is then
/// offered whole, and the sender skips it if its own hash matches. Sent
/// anyway (not offered, a different hash, or a group, which sends every
/// receiver all of it), it is compared byte for byte as it arrives and
/// refused at the first difference. Nothing is written to it either way.
struct Present {
    size: u64,
    whole: Option<blake3::Hasher>,
}

/// How many bytes of files already here whole `admit` hashes before the
/// receiver answers (about a second from the page cache): beyond it they
/// are not offered but compared as they arrive, so that the answer never
/// waits on hashing a large tree (a group's sender waits 30 s for it).
const PRESENT_HASH_BUDGET: u64 = 1 << 30;

/// What a list may build on, by entry index: partial files of earlier
/// attempts, and files already here whole.
struct Admitted {
    held: BTreeMap<u32, Held>,
    present: BTreeMap<u32, Present>,
}

impl Admitted {
    /// The resume offers, in increasing entry order as the wire wants
    /// them (spec of [`wire::read_offers`]): a partial file's prefix, a
    /// present file hashed within the budget whole.
    fn offers(&self) -> Vec<wire::Offer> {
        let offer = |index: u32, have: u64, prefix: &blake3::Hasher| wire::Offer {
            index,
            have,
            prefix: *prefix.finalize().as_bytes(),
        };
        let held = self.held.iter().filter(|(_, h)| h.have > 0).map(|(&i, h)| (i, offer(i, h.have, &h.prefix)));
        let present = self
            .present
            .iter()
            .filter_map(|(&i, p)| Some((i, offer(i, p.size, p.whole.as_ref().filter(|_| p.size > 0)?))));
        held.chain(present).collect::<BTreeMap<u32, wire::Offer>>().into_values().collect()
    }
}

/// Opens an existing file for reading without following a link.
fn open_nofollow(at: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32).open(at)
}

/// Checks the list against the directory: safe paths, directories only
/// where directories are or nothing is, no file replaced unless
/// `overwrite` (a file of the listed size and mtime is taken as the same
/// file, [`Present`], and checked by its content later), and room for
/// what is still to come; returns the partial files of earlier attempts
/// that the files may resume and the files already here whole.
fn admit(
    dir: &Path,
    entries: &[Entry],
    overwrite: bool,
    told: &std::collections::HashSet<usize>,
    hash_budget: u64,
) -> Result<Admitted, String> {
    wire::check_entries(entries)?;
    // Files that pass the quick check, hashed once every check passed.
    let mut same = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = dir.join(&e.path);
        let Ok(meta) = std::fs::symlink_metadata(&at) else { continue };
        match (&e.kind, meta.is_dir()) {
            (Kind::Dir, true) => {}
            (Kind::Dir, false) => return Err(format!("{} exists and is not a directory", e.path)),
            (_, true) => return Err(format!("{} exists and is a directory", e.path)),
            (Kind::File, false) if !overwrite && quick_check(&meta, e) => same.push((i, at, meta.len())),
            (_, false) if !overwrite => {
                return Err(format!("file exists: {} (the receiver does not overwrite without --overwrite)", e.path))
            }
            (_, false) => {}
        }
    }
    let mut held = BTreeMap::new();
    for (i, e) in entries.iter().enumerate() {
        if e.known_size().is_some() && std::fs::symlink_metadata(dir.join(&e.path)).is_err() {
            // An older transfer told to let go needs a moment to do so.
            let patience = std::time::Instant::now() + TAKEOVER_WAIT;
            let found = loop {
                match open_partial(&dir.join(&e.path), e, false) {
                    Err(_) if told.contains(&i) && std::time::Instant::now() < patience => {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    other => break other.map_err(|err| format!("{}: {err:#}", e.path))?,
                }
            };
            if let Some(h) = found {
                held.insert(i as u32, h);
            }
        }
    }
    // What is already held, or here whole, does not need room again.
    let have: u64 = held.values().map(|h| h.have).chain(same.iter().map(|s| s.2)).sum();
    let needed: u64 = entries.iter().filter_map(Entry::known_size).sum::<u64>() - have;
    if let Some(free) = available_space(dir).filter(|&free| free < needed) {
        return Err(format!(
            "no space: the files need {}, the receiver has {} free",
            human_bytes(needed),
            human_bytes(free)
        ));
    }
    let mut present = BTreeMap::new();
    let mut budget = hash_budget;
    for (i, at, size) in same {
        let mut whole = None;
        if size <= budget {
            match open_nofollow(&at).and_then(|f| hash_prefix(&f, size)) {
                Ok((prefix, n)) if n == size => whole = Some(prefix),
                Ok(_) => return Err(format!("{} changed while the receiver read it", entries[i].path)),
                Err(err) => {
                    return Err(format!("file exists: {} and cannot be read to compare it: {err}", entries[i].path))
                }
            }
            budget -= size;
        }
        present.insert(i as u32, Present { size, whole });
    }
    Ok(Admitted { held, present })
}

/// rsync's quick check, with the mode: a regular file of the entry's
/// size, mtime and permission bits, as this receiver stores a file.
fn quick_check(meta: &std::fs::Metadata, e: &Entry) -> bool {
    use std::os::unix::fs::PermissionsExt;
    meta.is_file()
        && e.known_size() == Some(meta.len())
        && super::walk::mtime_of(meta) == e.mtime
        && meta.permissions().mode() & wire::MODE_BITS == e.mode & wire::MODE_BITS
}

/// Makes every entry in list order; returns the files stored. The first
/// failure ends the transfer (files already verified stay).
async fn make_all(
    conn: &mut Connection,
    dir: &Path,
    entries: &[Entry],
    Admitted { held, present }: &mut Admitted,
    overwrite: bool,
    bar: &ProgressBar,
) -> Result<Vec<FileLine>> {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut parts = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let at = dir.join(&e.path);
        match &e.kind {
            Kind::Dir => {
                match std::fs::create_dir(&at) {
                    Err(err) if err.kind() != std::io::ErrorKind::AlreadyExists => {
                        return Err(err).with_context(|| format!("cannot create the directory {}", e.path));
                    }
                    _ => {}
                }
                // Not a link put there meanwhile: nothing is written through one.
                if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                    bail!("{} is not a directory", e.path);
                }
                dirs.push((at, e));
            }
            Kind::Link(target) => make_link(&at, target, e.mtime, overwrite)
                .with_context(|| format!("cannot create the link {} -> {target}", e.path))?,
            Kind::File if present.contains_key(&(i as u32)) => {
                let p = present.remove(&(i as u32)).expect("just checked");
                files.push(confirm_present(conn, &at, e, p, bar, &mut parts).await?);
            }
            Kind::File => {
                let target = match (e.known_size(), held.remove(&(i as u32))) {
                    (Some(_), Some(h)) => Target::Resumable(Box::new(h)),
                    (Some(_), None) => {
                        let (at, e) = (at.clone(), e.clone());
                        let opened = tokio::task::spawn_blocking(move || open_partial(&at, &e, true))
                            .await
                            .map_err(|err| anyhow!("open task failed: {err}"))??;
                        Target::Resumable(Box::new(opened.context("no partial file")?))
                    }
                    (None, _) => Target::Fresh(PartFile::create(&at)?),
                };
                files.push(receive_file(conn, target, e, overwrite, bar, &mut parts).await?);
            }
        }
    }
    for (at, e) in dirs.iter().rev() {
        set_mode_and_mtime(at, e).with_context(|| format!("cannot set the mode and time of {}", e.path))?;
    }
    Ok(files)
}

/// Where a file's data goes: a partial file kept for a resume if the
/// transfer breaks off (size known), or a temporary one (stdin).
enum Target {
    Resumable(Box<Held>),
    Fresh(PartFile),
}

impl Target {
    fn file(&self) -> &std::fs::File {
        match self {
            Target::Resumable(h) => h.file.file(),
            Target::Fresh(p) => p.file(),
        }
    }

    /// Gives up on the data: a definite failure, nothing to resume.
    fn discard(self) {
        if let Target::Resumable(h) = self {
            h.file.discard();
        }
    }
}

/// Receives one file's chunks (from the offset the sender chose) and
/// moves it into place once its hash matched, with its mode and mtime.
/// A broken connection keeps a resumable file's data for the next try;
/// any other failure deletes it.
async fn receive_file(
    conn: &mut Connection,
    target: Target,
    e: &Entry,
    overwrite: bool,
    bar: &ProgressBar,
    parts: &mut Vec<Bytes>,
) -> Result<FileLine> {
    let from = conn.read_u64().await.context("connection lost while receiving data")?;
    let (have, prefix) = match &target {
        Target::Resumable(h) => (h.have, Some(h.prefix.clone())),
        Target::Fresh(_) => (0, None),
    };
    let Some(mut hasher) = resumed_hasher(from, have, prefix) else {
        target.discard();
        bail!("{}: the sender resumes from {from}, the receiver holds {have} bytes", e.path);
    };
    let mut std_file = target.file().try_clone().context("cannot duplicate the file handle")?;
    std_file.set_len(from).context("cannot size the partial file")?;
    std::io::Seek::seek(&mut std_file, std::io::SeekFrom::Start(from)).context("cannot seek in the partial file")?;
    let mut out = ChunkWriter::new(&std_file).context("cannot duplicate the file handle")?;
    bar.inc(from);
    let streamed = stream_into(conn, Sink::Write(&mut out), &mut hasher, e, from, bar, parts).await;
    let (theirs, got) = match streamed {
        Ok(done) => done,
        Err(err) if crate::net::close_reason(&err).is_some() => {
            // What arrived stays for the same send to resume.
            if out.flush().await.is_ok() {
                let _ = tokio::task::spawn_blocking(move || std_file.sync_data()).await;
            }
            return Err(err);
        }
        Err(err) => {
            target.discard();
            return Err(err);
        }
    };
    let hash = hasher.finalize();
    if hash.as_bytes() != &theirs {
        target.discard();
        bail!(
            "hash mismatch: the data received for {} does not match the sender's BLAKE3 (sender {}, received {}); \
             nothing of it was saved",
            e.path,
            blake3::Hash::from(theirs).to_hex(),
            hash.to_hex()
        );
    }
    let (mode, mtime) = (e.mode, system_time(e.mtime));
    tokio::task::spawn_blocking(move || -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        target.file().set_permissions(std::fs::Permissions::from_mode(mode & wire::MODE_BITS))?;
        match target {
            Target::Resumable(h) => h.file.commit(overwrite, Some(mtime)),
            Target::Fresh(part) => {
                part.file().set_modified(mtime)?;
                part.commit(overwrite)
            }
        }
    })
    .await
    .map_err(|err| anyhow!("commit task failed: {err}"))??;
    Ok(FileLine { path: e.path.clone(), bytes: got, resumed: from, hash })
}

/// The hash state a file's data continues from: a new one from offset 0,
/// the held prefix's from `have` (what the receiver offered); `None` for
/// any other offset.
fn resumed_hasher(from: u64, have: u64, prefix: Option<blake3::Hasher>) -> Option<blake3::Hasher> {
    match (from, prefix) {
        (0, _) => Some(blake3::Hasher::new()),
        (f, Some(prefix)) if f == have => Some(prefix),
        _ => None,
    }
}

/// A file already here whole ([`Present`]) meets the sender: skipped if
/// the sender resumes from its end (it matched the offer's hash), else
/// its data compared with the file as it arrives, and the transfer
/// refused after its last byte if it differs. Either way the file is
/// left as it was.
async fn confirm_present(
    conn: &mut Connection,
    at: &Path,
    e: &Entry,
    p: Present,
    bar: &ProgressBar,
    parts: &mut Vec<Bytes>,
) -> Result<FileLine> {
    let from = conn.read_u64().await.context("connection lost while receiving data")?;
    let Some(mut hasher) = resumed_hasher(from, p.size, p.whole) else {
        bail!("{}: the sender resumes from {from}, which the receiver did not offer", e.path);
    };
    let file = match from {
        0 => {
            let (at, e) = (at.to_path_buf(), e.clone());
            let opened = tokio::task::spawn_blocking(move || -> Result<std::fs::File> {
                let file = open_nofollow(&at).with_context(|| format!("cannot read {} to compare it", e.path))?;
                let meta = file.metadata().with_context(|| format!("cannot read {} to compare it", e.path))?;
                if !quick_check(&meta, &e) {
                    bail!("file exists: {} (it changed since the list came)", e.path);
                }
                Ok(file)
            });
            Some(opened.await.map_err(|err| anyhow!("open task failed: {err}"))??)
        }
        _ => None,
    };
    let mut same = Compare { file: file.map(std::sync::Arc::new), at: from, differs: false, path: &e.path };
    bar.inc(from);
    let (theirs, got) = stream_into(conn, Sink::Compare(&mut same), &mut hasher, e, from, bar, parts).await?;
    if same.differs {
        bail!(
            "file exists: {} (its content differs from the sender's; the receiver does not overwrite without \
             --overwrite)",
            e.path
        );
    }
    let hash = hasher.finalize();
    if hash.as_bytes() != &theirs {
        bail!("{}: the file here does not match the sender's BLAKE3 (it was left as it was)", e.path);
    }
    Ok(FileLine { path: e.path.clone(), bytes: got, resumed: from, hash })
}

/// Where [`stream_into`] puts a file's data: into the file being
/// received, or against a file already here, compared.
enum Sink<'a, 'p> {
    Write(&'a mut ChunkWriter),
    Compare(&'a mut Compare<'p>),
}

/// A file already here, compared with the data arriving for it. A
/// difference is told only after the file's last byte (`differs`): a
/// refusal at the first one would let a sender read the file a byte at a
/// time by guessing.
struct Compare<'a> {
    /// `None` when no data is to come (the sender skipped the file).
    file: Option<std::sync::Arc<std::fs::File>>,
    /// How far the comparison has come.
    at: u64,
    differs: bool,
    path: &'a str,
}

impl Compare<'_> {
    /// Compares `parts` with the file from where the last call ended.
    async fn check(&mut self, parts: &[Bytes]) -> Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let Some(file) = self.file.as_ref().filter(|_| !self.differs) else {
            self.differs = true;
            self.at += len;
            return Ok(());
        };
        let (file, at, parts) = (std::sync::Arc::clone(file), self.at, parts.to_vec());
        let same = tokio::task::spawn_blocking(move || -> std::io::Result<bool> {
            use std::os::unix::fs::FileExt;
            let mut buf = Vec::new();
            let mut offset = at;
            for part in &parts {
                buf.resize(part.len(), 0);
                file.read_exact_at(&mut buf, offset)?;
                if buf != part[..] {
                    return Ok(false);
                }
                offset += part.len() as u64;
            }
            Ok(true)
        })
        .await
        .map_err(|err| anyhow!("compare task failed: {err}"))?
        .with_context(|| format!("cannot read {} to compare it", self.path))?;
        self.differs = !same;
        self.at += len;
        Ok(())
    }
}

/// Writes (or compares) a file's chunks until its end; returns the
/// sender's hash and the file's length. Checks the size announced.
async fn stream_into(
    conn: &mut Connection,
    mut out: Sink<'_, '_>,
    hasher: &mut blake3::Hasher,
    e: &Entry,
    from: u64,
    bar: &ProgressBar,
    parts: &mut Vec<Bytes>,
) -> Result<([u8; 32], u64)> {
    let mut got = from;
    let theirs = loop {
        match wire::read_chunk_head(conn).await.context("connection lost while receiving data")? {
            Chunk::Data(n) => {
                got += n as u64;
                if e.known_size().is_some_and(|size| got > size) {
                    bail!("{}: more data than its size of {} bytes", e.path, e.size);
                }
                crate::net::read_parts(conn, n, parts).await.context("connection lost while receiving data")?;
                for part in parts.iter() {
                    hasher.update(part);
                }
                match &mut out {
                    Sink::Write(out) => out.write(parts).await.with_context(|| format!("writing {}", e.path))?,
                    Sink::Compare(same) => same.check(parts).await?,
                }
                if bar.length().is_some_and(|len| bar.position() + n as u64 > len) {
                    bar.inc_length(n as u64);
                }
                bar.inc(n as u64);
            }
            Chunk::End(hash) => break hash,
            Chunk::Abandon(why) => bail!("the sender gave up: {why}"),
        }
    };
    if e.known_size().is_some_and(|size| got != size) {
        bail!("{}: {got} bytes arrived of the {} announced", e.path, e.size);
    }
    if let Sink::Write(out) = out {
        out.flush().await.with_context(|| format!("writing {}", e.path))?;
    }
    Ok((theirs, got))
}

/// Creates the link under a temporary name beside `at` and renames it
/// into place (replacing only with `overwrite`).
fn make_link(at: &Path, target: &str, mtime: (i64, u32), overwrite: bool) -> Result<()> {
    use rustix::fs::{renameat_with, symlinkat, RenameFlags, CWD};
    let name = at.file_name().context("a link without a name")?.to_string_lossy().into_owned();
    let tmp: PathBuf =
        at.with_file_name(hidden_name(&name, &format!(".manyfold-part-{:016x}", crate::net::random_u64())));
    symlinkat(target, CWD, &tmp)?;
    if let Err(e) = rustix::fs::utimensat(CWD, &tmp, &timestamps(mtime), rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.into());
    }
    let flags = if overwrite { RenameFlags::empty() } else { RenameFlags::NOREPLACE };
    if let Err(e) = renameat_with(CWD, &tmp, CWD, at, flags) {
        let _ = std::fs::remove_file(&tmp);
        if e == rustix::io::Errno::EXIST {
            bail!("file exists: {}", at.display());
        }
        return Err(e.into());
    }
    Ok(())
}

fn set_mode_and_mtime(at: &Path, e: &Entry) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(at, std::fs::Permissions::from_mode(e.mode & wire::MODE_BITS))?;
    rustix::fs::utimensat(rustix::fs::CWD, at, &timestamps(e.mtime), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Access time left alone, modification time set.
fn timestamps((secs, nanos): (i64, u32)) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
        last_modification: rustix::fs::Timespec { tv_sec: secs, tv_nsec: nanos.into() },
    }
}

fn system_time((secs, nanos): (i64, u32)) -> std::time::SystemTime {
    let epoch = std::time::UNIX_EPOCH;
    if secs >= 0 {
        epoch + std::time::Duration::new(secs as u64, nanos)
    } else {
        epoch - std::time::Duration::from_secs(secs.unsigned_abs()) + std::time::Duration::from_nanos(nanos.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file entry for `path` with the size and mtime of `at`.
    fn entry_of(path: &str, at: &Path) -> Entry {
        let meta = std::fs::metadata(at).unwrap();
        Entry {
            kind: Kind::File,
            path: path.into(),
            mode: 0o644,
            mtime: super::super::walk::mtime_of(&meta),
            size: meta.len(),
        }
    }

    /// `inbox` holds a.bin whole (as stored by an earlier attempt: the
    /// source's size and mtime) and a partial file of b.bin; the list
    /// names a.bin first.
    fn interrupted(tmp: &Path) -> (PathBuf, Vec<Entry>) {
        let (src, inbox) = (tmp.join("src"), tmp.join("inbox"));
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&inbox).unwrap();
        std::fs::write(src.join("a.bin"), vec![1u8; 5000]).unwrap();
        std::fs::write(src.join("b.bin"), vec![2u8; 7000]).unwrap();
        let entries = vec![entry_of("a.bin", &src.join("a.bin")), entry_of("b.bin", &src.join("b.bin"))];
        std::fs::copy(src.join("a.bin"), inbox.join("a.bin")).unwrap();
        std::fs::File::options()
            .write(true)
            .open(inbox.join("a.bin"))
            .unwrap()
            .set_modified(system_time(entries[0].mtime))
            .unwrap();
        let partial = open_partial(&inbox.join("b.bin"), &entries[1], true).unwrap().unwrap();
        std::io::Write::write_all(&mut partial.file.file(), &[2u8; 3000]).unwrap();
        drop(partial);
        (inbox, entries)
    }

    #[test]
    fn offers_for_a_file_here_whole_and_a_partial_one_go_in_list_order() {
        let tmp = tempfile::tempdir().unwrap();
        let (inbox, entries) = interrupted(tmp.path());
        let admitted = admit(&inbox, &entries, false, &Default::default(), PRESENT_HASH_BUDGET).unwrap();
        let offers: Vec<(u32, u64)> = admitted.offers().iter().map(|o| (o.index, o.have)).collect();
        assert_eq!(offers, [(0, 5000), (1, 3000)], "a.bin whole, then b.bin's prefix");
        assert_eq!(admitted.offers()[0].prefix, *blake3::hash(&[1u8; 5000]).as_bytes());
    }

    #[test]
    fn a_file_here_whole_beyond_the_hash_budget_is_not_offered_but_still_admitted() {
        let tmp = tempfile::tempdir().unwrap();
        let (inbox, entries) = interrupted(tmp.path());
        let admitted = admit(&inbox, &entries, false, &Default::default(), 4999).unwrap();
        let offers: Vec<(u32, u64)> = admitted.offers().iter().map(|o| (o.index, o.have)).collect();
        assert_eq!(offers, [(1, 3000)], "only b.bin's prefix");
        assert!(admitted.present[&0].whole.is_none(), "a.bin is to be compared as it arrives");
    }

    #[test]
    fn a_file_here_with_another_mtime_or_mode_is_refused_before_any_data() {
        let tmp = tempfile::tempdir().unwrap();
        let (inbox, entries) = interrupted(tmp.path());
        let mut older = entries.clone();
        older[0].mtime.0 -= 60;
        let mut executable = entries.clone();
        executable[0].mode = 0o755;
        for changed in [older, executable] {
            let why = admit(&inbox, &changed, false, &Default::default(), PRESENT_HASH_BUDGET).err().unwrap();
            assert!(why.starts_with("file exists: a.bin"), "{why}");
        }
    }
}
